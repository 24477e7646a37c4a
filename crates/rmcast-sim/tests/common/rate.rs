//! The rate-control groups of tests/rate_control.rs (one sender) and
//! tests/multi_sender.rs (several), shared with the golden files
//! (tests/golden.rs): four receivers behind a 1 Gbit/s link, one of them
//! slow (a fixed CPU cost per datagram) behind a small socket buffer.

use super::PACKET;
use rmcast_proto::{ProtocolId, RateControl, RateGroupConfig, ReceiverConfig, SenderConfig};
use rmcast_sim::{HostCost, Scenario};
use std::time::Duration;

/// The slow receiver's host number.
pub const SLOW: u16 = 2;
/// Its fixed CPU cost per datagram received: ~10,000 packets/s.
pub const SLOW_RECV: Duration = Duration::from_micros(100);

/// Packets of the one-sender Hunt run (tests/rate_control.rs).
pub const HUNT_PACKETS: u64 = 40_000;
/// Packets of its unpaced and thesis-timer comparisons.
pub const COMPARISON_PACKETS: u64 = 20_000;
/// Data packets all senders of tests/multi_sender.rs send together.
pub const MULTI_TOTAL_PACKETS: u64 = 32_000;

/// One sender (tests/rate_control.rs) sending `packets` data packets.
pub fn rate_group(rate_control: RateControl, packets: u64, seed: u64) -> Scenario {
    let slow = HostCost {
        recv_per_packet: SLOW_RECV,
        ..HostCost::modern()
    };
    Scenario {
        receivers: 4,
        object_size: packets * (PACKET as u64 - 24),
        config: SenderConfig {
            protocol: ProtocolId::NakPoll,
            packet_size: PACKET,
            window: 256,
            poll_interval: Some(32),
            rate_control: Some(rate_control),
            ..SenderConfig::default()
        },
        link_rate_bits_per_s: 1_000_000_000,
        // Room for 44 full datagrams: 4.4 ms of the slow receiver's work.
        socket_buffer_bytes: 64 * 1024,
        receiver_costs: vec![(SLOW, slow)],
        trace_outstanding: true,
        trace_rate: true,
        seed,
        time_limit: Duration::from_secs(120),
        ..Scenario::default()
    }
}

/// `senders` senders (tests/multi_sender.rs) sending `total_packets` data
/// packets together; `with_group`: multicast rate NACKs and the leader's
/// resynchronisation.
pub fn multi_sender_group(
    senders: u16,
    rate_control: RateControl,
    with_group: bool,
    total_packets: u64,
    seed: u64,
) -> Scenario {
    let packets = total_packets / u64::from(senders);
    let mut s = rate_group(rate_control, packets, seed);
    s.senders = senders;
    s.config.rate_group = with_group.then(RateGroupConfig::default);
    s.receiver = ReceiverConfig {
        rate_nak_interval: with_group.then_some(Duration::from_millis(2)),
        ..ReceiverConfig::default()
    };
    s
}
