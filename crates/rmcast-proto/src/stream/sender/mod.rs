//! The PRMP sender: admission, the message stream under flow, congestion and
//! poll-planned error control, failure detection and the confirmed close.
//!
//! [`StreamSender`] is one machine in quinn-proto's shape (getters,
//! `handle_*` input taking `now`, application calls, `poll_*` output); its
//! parts live beside it:
//!
//! | file | part |
//! |---|---|
//! | `config.rs` | [`StreamSenderConfig`], [`Admission`], validation, the removal bound |
//! | `member.rs` | a member's state: handshake, RTT, poll state, liveness |
//! | `session.rs` | session control: invitation and announcement handshakes, leave, suspicion and removal, the close, the control queue |
//! | `buffer.rs` | `SendBuffer` (sequence space, per-packet slots, NACK bitsets) and the machine's acknowledgement, NACK and multicast/unicast repair logic over it |
//! | `bits.rs` | the fixed bitsets (one row per send-buffer slot, one bit per member) |
//! | `flow.rs` | flow control by advertised windows, zero-window probes, the congestion-window gate |
//! | `polls.rs` | poll planning (glue to [`super::PollPlanner`]) and poll encoding |
//! | `output.rs` | `poll_transmit`: what leaves next, data packets |
//! | `timers.rs` | the timer table; `poll_timeout` is its minimum, `handle_timeout` runs it |

mod bits;
mod buffer;
mod config;
mod flow;
mod member;
mod output;
mod polls;
mod session;
#[cfg(test)]
mod testkit;
mod timers;

pub use config::{Admission, StreamConfigError, StreamSenderConfig};
pub use member::{MemberId, MemberInfo, MemberStatus};

use super::cc::CongestionWindow;
use super::planner::PollPlanner;
use super::seal::Seal;
use crate::Instant;
use crate::security::{AuthFailures, AuthStats, SESSION_NONCE_LEN};
use buffer::SendBuffer;
use member::{Member, nonce};
use rmcast_wire::stream::{
    MAX_POLL_ENTRIES, POLL_ENTRY_LEN, PollEntry, ResetReason, StreamBody, StreamPacket,
};
use rmcast_wire::{DecodeError, RANK_SENDER, Seq, SessionId};
use session::Control;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// Why `send` refused a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The send buffer cannot take the message now; try again after the
    /// receivers acknowledge (nothing was queued).
    #[error("send buffer full")]
    WouldBlock,
    /// The message is larger than `message_bytes_max`.
    #[error("message larger than the configured maximum")]
    TooLarge,
    /// The stream is closing or closed.
    #[error("stream closed")]
    Closed,
}

/// Why a receiver left the membership without asking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoveReason {
    /// `remove_after` polls in a row went unanswered.
    Unresponsive,
    /// The handshake never completed.
    NoAnswer,
    /// Its buffer cannot hold the largest message.
    BufferTooSmall,
    /// Its window stayed closed for `stall_timeout` while data waited: its
    /// application stopped reading.
    Stalled,
}

impl RemoveReason {
    /// In words, for reports and logs.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Self::Unresponsive => "unresponsive",
            Self::NoAnswer => "no answer to the invitation",
            Self::BufferTooSmall => "buffer too small",
            Self::Stalled => "stalled: its window stayed closed (its application stopped reading)",
        }
    }
}

/// Something the sending application should know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamEvent {
    /// A receiver completed the handshake.
    Joined(MemberId),
    /// Admission is over; data flows to `members` receivers.
    Established {
        /// Receivers admitted.
        members: usize,
    },
    /// A receiver left `suspect_after` polls unanswered.
    Suspected(MemberId),
    /// A suspected receiver answered again.
    Unsuspected(MemberId),
    /// A receiver was removed from the session.
    Removed {
        /// Who.
        id: MemberId,
        /// Why.
        reason: RemoveReason,
    },
    /// A receiver left on its own.
    Left(MemberId),
    /// The session is over: after [`StreamSender::close`], every remaining
    /// member confirmed it holds every message; or no member is left.
    Closed,
}

/// Counters a driver reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamSenderStats {
    /// Messages accepted by `send`.
    pub messages: u64,
    /// First transmissions of data packets.
    pub data_packets: u64,
    /// Repairs multicast to the group.
    pub multicast_repairs: u64,
    /// Repairs sent to one receiver.
    pub unicast_repairs: u64,
    /// Poll requests sent (one per receiver named).
    pub polls: u64,
    /// Polls that rode on a data packet.
    pub piggybacked_polls: u64,
    /// Standalone `Poll` / `Close` datagrams.
    pub standalone_polls: u64,
    /// Responses received (any poll id).
    pub responses: u64,
    /// Polls that timed out.
    pub poll_timeouts: u64,
    /// Datagrams that failed to decode or made no sense.
    pub malformed: u64,
    /// Well-formed datagrams of another session or from a non-member.
    pub foreign: u64,
    /// Control datagrams dropped because the control queue was full.
    pub control_dropped: u64,
    /// Sealing: datagrams sealed and opened, and those refused before the
    /// machine saw them (unsealed, forged, replayed, another key...).
    pub auth: AuthStats,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Admitting,
    Open,
    Closing,
    Done,
}

/// The sending side of one PRMP session.
pub struct StreamSender {
    config: StreamSenderConfig,
    session: SessionId,
    phase: Phase,
    started: Instant,
    members: Vec<Member>,
    /// The send buffer: sequence space, packets, per-packet repair state.
    buf: SendBuffer,
    planner: PollPlanner,
    cwnd: CongestionWindow,
    poll_ids: u32,
    control: VecDeque<Control>,
    next_announce: Instant,
    /// An announcement's admission is over: its `duration` ran out, or the
    /// application ended it early ([`StreamSender::end_admission`]).
    admission_ended: bool,
    close_requested: bool,
    nonce_seed: u64,
    entries: [PollEntry; MAX_POLL_ENTRIES],
    entry_members: [u16; MAX_POLL_ENTRIES],
    entries_raw: [u8; MAX_POLL_ENTRIES * POLL_ENTRY_LEN],
    entries_len: usize,
    poll_ts_us: u32,
    events: VecDeque<StreamEvent>,
    stats: StreamSenderStats,
    /// The group key's keyring (or none: insecure).
    seal: Seal,
}

impl StreamSender {
    /// A sender for `session` whose first data packet is `isn`, starting at
    /// `now`. `nonce_seed` (handshake nonces) and `session_nonce` (the
    /// session's keys, when `config.group_key` is set) are fresh randomness
    /// from the driver.
    pub fn new(
        config: StreamSenderConfig,
        session: SessionId,
        isn: Seq,
        nonce_seed: u64,
        session_nonce: [u8; SESSION_NONCE_LEN],
        now: Instant,
    ) -> Result<Self, StreamConfigError> {
        config.validate()?;
        let per_epoch = config.responses_per_epoch() as u16;
        let mut members = Vec::new();
        if let Admission::Invite { receivers, .. } = &config.admission {
            for (i, &addr) in receivers.iter().enumerate() {
                members.push(Member::new(
                    addr,
                    0,
                    nonce(nonce_seed, i),
                    MemberStatus::Pending,
                    &config,
                    isn,
                    now,
                ));
            }
        }
        let n = members.len().max(1);
        let mut sender = Self {
            session,
            phase: Phase::Admitting,
            started: now,
            buf: SendBuffer::new(isn, config.send_buffer_packets, config.packet_payload(), n),
            planner: PollPlanner::new(
                config.epoch,
                per_epoch,
                config.planning_horizon_epochs as usize,
            ),
            cwnd: CongestionWindow::new(config.send_buffer_packets),
            poll_ids: 0,
            control: VecDeque::with_capacity(64),
            next_announce: now,
            admission_ended: false,
            close_requested: false,
            nonce_seed,
            entries: [PollEntry::default(); MAX_POLL_ENTRIES],
            entry_members: [0; MAX_POLL_ENTRIES],
            entries_raw: [0; MAX_POLL_ENTRIES * POLL_ENTRY_LEN],
            entries_len: 0,
            poll_ts_us: 0,
            events: VecDeque::new(),
            stats: StreamSenderStats::default(),
            seal: Seal::sender(config.group_key.as_ref(), session, session_nonce),
            members,
            config,
        };
        sender.admission_step(now);
        Ok(sender)
    }

    // ----- getters ---------------------------------------------------------

    /// The session id.
    #[must_use]
    pub fn session(&self) -> SessionId {
        self.session
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> &StreamSenderStats {
        &self.stats
    }

    /// The datagrams refused before the machine saw them, by source (for a
    /// failure message: [`AuthFailures::describe`]).
    #[must_use]
    pub fn auth_failures(&self) -> &AuthFailures {
        self.seal.failures()
    }

    /// Every member known so far.
    #[must_use]
    pub fn members(&self) -> Vec<MemberInfo> {
        self.members
            .iter()
            .enumerate()
            .map(|(i, m)| MemberInfo {
                id: MemberId(i as u16),
                addr: m.addr,
                name: m.name.clone(),
                status: m.status,
                acked_packets: m.cum.since(self.buf.isn),
                close_confirmed: m.close_confirmed,
                srtt: m.rtt.srtt(),
            })
            .collect()
    }

    /// Live members.
    #[must_use]
    pub fn live_members(&self) -> usize {
        self.members
            .iter()
            .filter(|m| m.status == MemberStatus::Live)
            .count()
    }

    /// Packets in the send buffer (unacknowledged or not yet sent).
    #[must_use]
    pub fn buffered_packets(&self) -> u32 {
        self.buf.buffered()
    }

    /// Packets sent but not yet held by every live member.
    #[must_use]
    pub fn in_flight_packets(&self) -> u32 {
        self.buf.next_tx.since(self.buf.base)
    }

    /// The group congestion window (also kept, unused, when control is off).
    #[must_use]
    pub fn congestion_window(&self) -> &CongestionWindow {
        &self.cwnd
    }

    /// The poll planner (responses planned per epoch).
    #[must_use]
    pub fn planner(&self) -> &PollPlanner {
        &self.planner
    }

    /// True once the session is over.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Next event for the application.
    pub fn poll_event(&mut self) -> Option<StreamEvent> {
        self.events.pop_front()
    }

    // ----- application -----------------------------------------------------

    /// Queues one message. Refuses, queuing nothing, when the send buffer
    /// cannot take all its packets now: the sender never drops.
    pub fn send(&mut self, msg: &[u8]) -> Result<(), SendError> {
        if self.close_requested || self.phase == Phase::Done {
            return Err(SendError::Closed);
        }
        if msg.len() > self.config.message_bytes_max as usize {
            return Err(SendError::TooLarge);
        }
        self.buf
            .push(msg, usize::from(self.config.packet_payload()))?;
        self.stats.messages += 1;
        Ok(())
    }

    /// Free send buffer in packets.
    #[must_use]
    pub fn send_capacity_packets(&self) -> u32 {
        self.buf.buffer_packets - self.buffered_packets()
    }

    /// Ends the stream: no more `send`; once every queued message is held
    /// by every live member and each confirmed the close, [`StreamEvent::Closed`].
    pub fn close(&mut self) {
        self.close_requested = true;
    }

    /// Ends an announcement's admission now instead of at the end of its
    /// `duration` (e.g. once the receivers the application wants have
    /// joined): no more announcements, later requests are refused
    /// (`AdmissionClosed`), and once the handshakes under way are done the
    /// session is [`StreamEvent::Established`]. Nothing under invitation.
    pub fn end_admission(&mut self, now: Instant) {
        if matches!(self.config.admission, Admission::Announce { .. }) {
            self.admission_ended = true;
            self.admission_step(now);
        }
    }

    // ----- input -----------------------------------------------------------

    /// Processes one received datagram from `from`. A keyed sender opens
    /// it in place first; one that does not open (or a sealed one reaching
    /// a keyless sender) is counted in `stats().auth` and dropped, changing
    /// nothing else.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &mut [u8]) {
        let opened = self.seal.open(from, datagram);
        self.stats.auth = self.seal.stats();
        let Ok(datagram) = opened else {
            return;
        };
        let packet = match StreamPacket::decode(datagram) {
            Ok(p) => p,
            Err(DecodeError::UnknownKind(_)) => {
                self.stats.foreign += 1;
                return;
            }
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        if packet.header.session != self.session || packet.header.rank == RANK_SENDER {
            self.stats.foreign += 1;
            return;
        }
        let rank = packet.header.rank;
        match packet.body {
            StreamBody::ConnectRequest(c) => self.on_connect_request(now, from, c),
            StreamBody::Accept(a) => {
                if !self.on_accept(now, from, rank, &a) {
                    return;
                }
            }
            StreamBody::Response(r) | StreamBody::CloseAck(r) => {
                self.stats.responses += 1;
                let close = matches!(packet.body, StreamBody::CloseAck(_));
                let Some(i) = self.member_at(rank, from) else {
                    self.reset(from, ResetReason::NotMember);
                    return;
                };
                match self.members[i].status {
                    MemberStatus::Live => self.on_response(now, i, &r, close),
                    MemberStatus::Gone => self.reset(from, ResetReason::Removed),
                    _ => self.stats.malformed += 1,
                }
            }
            StreamBody::Leave { .. } => {
                if !self.on_leave(now, from, rank) {
                    return;
                }
            }
            _ => self.stats.foreign += 1,
        }
        self.decide_repairs(now);
        self.plan_polls(now);
        self.watch_stalls(now);
    }
}

#[cfg(test)]
mod tests {
    use super::testkit::*;
    use super::*;
    use rmcast_wire::stream::{DATA_FIRST, DATA_LAST};

    #[test]
    fn send_splits_a_message_into_flagged_packets_and_never_queues_half() {
        let mut s = joined(1, 64);
        s.send(&[7u8; 250]).unwrap();
        assert_eq!(s.buffered_packets(), 3);
        let w = s.buf.slot(ISN);
        assert_eq!(s.buf.slots[w].flags, DATA_FIRST);
        assert_eq!(s.buf.slots[s.buf.slot(ISN.add(2))].flags, DATA_LAST);
        assert_eq!(s.buf.slots[s.buf.slot(ISN.add(2))].len, 50);
        s.send(&[]).unwrap();
        assert_eq!(
            s.buf.slots[s.buf.slot(ISN.add(3))].flags,
            DATA_FIRST | DATA_LAST
        );
        assert_eq!(s.send(&[0u8; 401]), Err(SendError::TooLarge));
        while s.send(&[1u8; 400]).is_ok() {}
        // 4 + 15 × 4 = 64: full, and the refused message left no trace.
        assert_eq!(s.buffered_packets(), 64);
        assert_eq!(s.send(&[1u8; 1]), Err(SendError::WouldBlock));
        assert_eq!(s.stats().messages, 17);
        s.close();
        assert_eq!(s.send(&[1u8; 1]), Err(SendError::Closed));
    }

    #[test]
    fn datagrams_of_other_sessions_or_garbage_are_counted_not_obeyed() {
        let mut s = joined(1, 64);
        s.handle_datagram(ms(2), addr(0), &mut [0xff; 3]);
        assert_eq!(s.stats().malformed, 1);
        let mut buf = [0u8; 64];
        let n = StreamPacket {
            header: rmcast_wire::Header::new(SessionId(8), 0),
            body: StreamBody::LeaveAck,
        }
        .encode(&mut buf)
        .unwrap();
        s.handle_datagram(ms(2), addr(0), &mut buf[..n]);
        assert_eq!(s.stats().foreign, 1);
        assert_eq!(s.live_members(), 1);
    }
}
