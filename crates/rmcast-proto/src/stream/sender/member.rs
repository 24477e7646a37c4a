//! One member as the sender keeps it: address and identity, handshake
//! progress, cumulative point and advertised window edge, RTT estimate,
//! the state of its poll, and what failure detection counts.

use super::config::StreamSenderConfig;
use crate::Instant;
use crate::stream::rtt::RttEstimator;
use rmcast_wire::Seq;
use std::net::SocketAddr;
use std::time::Duration;

/// A member's id: its rank in the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId(pub u16);

/// Where a member stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberStatus {
    /// Waiting for its turn to be invited.
    Pending,
    /// Handshake in progress.
    Inviting,
    /// In the session.
    Live,
    /// Removed or left.
    Gone,
}

/// A member as the application sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberInfo {
    /// Its id.
    pub id: MemberId,
    /// Its unicast address.
    pub addr: SocketAddr,
    /// Its name (empty until the handshake).
    pub name: String,
    /// Where it stands.
    pub status: MemberStatus,
    /// Packets it has acknowledged cumulatively (from the stream start).
    pub acked_packets: u32,
    /// Whether it confirmed the close.
    pub close_confirmed: bool,
    /// Smoothed RTT.
    pub srtt: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PollState {
    Idle,
    /// Planned to arrive in `epoch`; send at `send_at`.
    Planned {
        send_at: Instant,
        epoch: u64,
    },
    /// Sent; `mark` is the transmission count including the carrying
    /// packet, `high` one past the highest seq sent then.
    Outstanding {
        poll_id: u32,
        deadline: Instant,
        mark: u64,
        high: Seq,
    },
}

#[derive(Debug)]
pub(super) struct Member {
    pub(super) addr: SocketAddr,
    pub(super) receiver_id: u64,
    pub(super) name: String,
    pub(super) nonce: u64,
    pub(super) status: MemberStatus,
    pub(super) tries: u32,
    pub(super) next_try: Instant,
    pub(super) cum: Seq,
    /// Exclusive right edge of its advertised window.
    pub(super) edge: Seq,
    pub(super) rtt: RttEstimator,
    pub(super) poll: PollState,
    pub(super) unanswered: u32,
    pub(super) suspected: bool,
    pub(super) last_heard: Instant,
    pub(super) probe_gap: Duration,
    pub(super) next_probe: Instant,
    pub(super) close_confirmed: bool,
    /// Since when its closed window has held back queued data (the stall
    /// watchdog, [`StreamSenderConfig::stall_timeout`]).
    pub(super) blocked_since: Option<Instant>,
}

impl Member {
    pub(super) fn new(
        addr: SocketAddr,
        receiver_id: u64,
        nonce: u64,
        status: MemberStatus,
        config: &StreamSenderConfig,
        isn: Seq,
        now: Instant,
    ) -> Self {
        Self {
            addr,
            receiver_id,
            name: String::new(),
            nonce,
            status,
            tries: 0,
            next_try: now,
            cum: isn,
            edge: isn,
            rtt: RttEstimator::new(config.rtt_initial),
            poll: PollState::Idle,
            unanswered: 0,
            suspected: false,
            last_heard: now,
            probe_gap: config.epoch,
            next_probe: now,
            close_confirmed: false,
            blocked_since: None,
        }
    }
}

/// A per-member handshake nonce from the seed (splitmix64).
pub(super) fn nonce(seed: u64, i: usize) -> u64 {
    let mut z = seed.wrapping_add((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::nonce;

    #[test]
    fn handshake_nonces_differ_by_member_and_by_seed() {
        let a: Vec<u64> = (0..100).map(|i| nonce(1, i)).collect();
        let mut sorted = a.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 100);
        assert_ne!(nonce(1, 0), nonce(2, 0));
        assert_eq!(nonce(1, 5), a[5]);
    }
}
