//! The PRMP sender: admission, the message stream under flow, congestion and
//! poll-planned error control, failure detection and the confirmed close.

use super::StreamTransmit as Transmit;
use super::cc::{CongestionControl, CongestionWindow};
use super::planner::PollPlanner;
use super::rtt::RttEstimator;
use super::ts_us;
use crate::{Dest, Instant, truncate_utf8};
use rmcast_wire::stream::StreamKind;
use rmcast_wire::stream::{
    Announce, DATA_FIRST, DATA_LAST, Invite, MAX_POLL_ENTRIES, POLL_ENTRY_LEN, PollBody,
    PollEntries, PollEntry, PollRequest, ResetReason, Response, STREAM_DATA_OVERHEAD, StreamBody,
    StreamData, StreamPacket, poll_request_len,
};
use rmcast_wire::{DecodeError, Header, MAX_DATAGRAM, RANK_SENDER, Seq, SessionId};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

/// A member's id: its rank in the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId(pub u16);

/// How receivers are admitted.
#[derive(Clone, Debug)]
pub enum Admission {
    /// Invitation model: the sender contacts each address, at most
    /// `concurrency` handshakes at a time.
    Invite {
        /// Receivers to invite; the i-th gets rank i.
        receivers: Vec<SocketAddr>,
        /// Handshakes in progress at once.
        concurrency: usize,
    },
    /// Announcement model: the sender announces on the group for `duration`
    /// and admits those who ask, up to `receivers_max`.
    Announce {
        /// How long admission stays open.
        duration: Duration,
        /// Announcement period.
        interval: Duration,
        /// Most receivers admitted.
        receivers_max: u16,
    },
}

/// How a sender runs a stream.
#[derive(Clone, Debug)]
pub struct StreamSenderConfig {
    /// How receivers are admitted.
    pub admission: Admission,
    /// Message bytes per data packet.
    pub payload_size: u16,
    /// Largest message in bytes (a receiver's buffer must hold one).
    pub message_bytes_max: u32,
    /// Send buffer in packets: unacknowledged plus queued packets.
    pub send_buffer_packets: u32,
    /// Most responses per second the sender plans to receive (`--response-rate`).
    pub response_rate: u32,
    /// Length of a planning epoch; `response_rate × epoch` responses fit in one.
    pub epoch: Duration,
    /// Epochs ahead the planner looks.
    pub planning_horizon_epochs: u32,
    /// RTT assumed before a receiver's first response.
    pub rtt_initial: Duration,
    /// Smallest poll timeout.
    pub rto_min: Duration,
    /// Largest poll timeout (after doubling on each unanswered poll).
    pub rto_max: Duration,
    /// Unanswered polls in a row after which a receiver is suspected.
    pub suspect_after: u32,
    /// Unanswered polls in a row after which a receiver is removed.
    pub remove_after: u32,
    /// A receiver not heard from this long is polled (keepalive).
    pub keepalive: Duration,
    /// Longest spacing of window probes to a receiver with a closed window.
    pub probe_max: Duration,
    /// Handshake retransmission interval.
    pub handshake_interval: Duration,
    /// Handshake attempts before giving up on a receiver.
    pub handshake_tries: u32,
    /// A lost packet goes by multicast when at least this many receivers lack it.
    pub repair_multicast_min: u16,
    /// Longest wait gathering NACKs for a packet before repairing it.
    pub repair_gather: Duration,
    /// Group congestion window, off by default.
    pub congestion: CongestionControl,
}

impl Default for StreamSenderConfig {
    fn default() -> Self {
        Self {
            admission: Admission::Invite {
                receivers: Vec::new(),
                concurrency: 8,
            },
            payload_size: 1200,
            message_bytes_max: 64 * 1024,
            send_buffer_packets: 1024,
            response_rate: 2000,
            epoch: Duration::from_millis(5),
            planning_horizon_epochs: 1024,
            rtt_initial: Duration::from_millis(10),
            rto_min: Duration::from_millis(5),
            rto_max: Duration::from_secs(1),
            suspect_after: 3,
            remove_after: 6,
            keepalive: Duration::from_secs(1),
            probe_max: Duration::from_millis(200),
            handshake_interval: Duration::from_millis(100),
            handshake_tries: 10,
            repair_multicast_min: 2,
            repair_gather: Duration::from_millis(20),
            congestion: CongestionControl::Off,
        }
    }
}

/// A stream configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamConfigError {
    /// `response_rate × epoch` is below one response per epoch.
    #[error("response rate {rate}/s allows no response in an epoch of {epoch:?}")]
    EpochTooShort {
        /// Configured rate.
        rate: u32,
        /// Configured epoch.
        epoch: Duration,
    },
    /// A zero or oversized field.
    #[error("invalid stream configuration: {0}")]
    Invalid(&'static str),
}

impl StreamSenderConfig {
    /// Packets of the largest message.
    #[must_use]
    pub fn message_packets_max(&self) -> u32 {
        self.message_bytes_max
            .div_ceil(u32::from(self.payload_size.max(1)))
            .max(1)
    }

    /// Responses allowed per epoch: `response_rate × epoch`, rounded down.
    #[must_use]
    pub fn responses_per_epoch(&self) -> u64 {
        u64::from(self.response_rate) * self.epoch.as_nanos() as u64 / 1_000_000_000
    }

    /// An upper bound on the time from a receiver's last response to its
    /// removal, in a session of `members` receivers: `remove_after` polls,
    /// each planned within the epochs the other members fill and each
    /// waiting at most `rto_max`, after at most one keepalive period.
    #[must_use]
    pub fn removal_bound(&self, members: usize) -> Duration {
        let per_epoch = self.responses_per_epoch().max(1) as u32;
        let plan = self.epoch * (members as u32 / per_epoch + 2);
        self.keepalive + (plan + self.rto_max) * self.remove_after
    }

    /// Checks every field; [`StreamSender::new`] calls it.
    pub fn validate(&self) -> Result<(), StreamConfigError> {
        use StreamConfigError::Invalid;
        if self.payload_size == 0
            || usize::from(self.payload_size)
                + STREAM_DATA_OVERHEAD
                + poll_request_len(MAX_POLL_ENTRIES)
                > MAX_DATAGRAM
        {
            return Err(Invalid("payload_size"));
        }
        if self.send_buffer_packets == 0 || self.send_buffer_packets > 1 << 20 {
            return Err(Invalid("send_buffer_packets"));
        }
        if self.message_packets_max() > self.send_buffer_packets {
            return Err(Invalid("message_bytes_max exceeds the send buffer"));
        }
        if self.epoch.is_zero() || self.planning_horizon_epochs == 0 {
            return Err(Invalid("epoch"));
        }
        let per = self.responses_per_epoch();
        if per == 0 {
            return Err(StreamConfigError::EpochTooShort {
                rate: self.response_rate,
                epoch: self.epoch,
            });
        }
        if per > u64::from(u16::MAX) {
            return Err(Invalid("response_rate × epoch above 65535"));
        }
        if self.suspect_after == 0 || self.remove_after < self.suspect_after {
            return Err(Invalid("suspect_after / remove_after"));
        }
        if self.handshake_tries == 0 || self.repair_multicast_min == 0 {
            return Err(Invalid("handshake_tries / repair_multicast_min"));
        }
        match &self.admission {
            Admission::Invite {
                receivers,
                concurrency,
            } => {
                if receivers.is_empty() || receivers.len() > usize::from(rmcast_wire::MAX_RECEIVERS)
                {
                    return Err(Invalid("invited receivers"));
                }
                if *concurrency == 0 {
                    return Err(Invalid("invite concurrency"));
                }
            }
            Admission::Announce {
                receivers_max,
                interval,
                ..
            } => {
                if *receivers_max == 0
                    || *receivers_max > rmcast_wire::MAX_RECEIVERS
                    || interval.is_zero()
                {
                    return Err(Invalid("announce receivers_max / interval"));
                }
            }
        }
        Ok(())
    }
}

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
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PollState {
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
struct Member {
    addr: SocketAddr,
    receiver_id: u64,
    name: String,
    nonce: u64,
    status: MemberStatus,
    tries: u32,
    next_try: Instant,
    cum: Seq,
    /// Exclusive right edge of its advertised window.
    edge: Seq,
    rtt: RttEstimator,
    poll: PollState,
    unanswered: u32,
    suspected: bool,
    last_heard: Instant,
    probe_gap: Duration,
    next_probe: Instant,
    close_confirmed: bool,
}

/// Per packet of the send buffer.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    len: u16,
    flags: u8,
    /// Transmission number of the latest transmission (0: never sent).
    sent_no: u64,
    first_sent_no: u64,
    nacked_ever: bool,
    lack_count: u16,
    first_nack_at: Option<Instant>,
    candidate: bool,
    repair: Option<RepairMode>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RepairMode {
    Multicast,
    Unicast,
}

#[derive(Clone, Copy, Debug)]
enum Control {
    Announce,
    Invite(u16),
    Confirm(u16),
    LeaveAck(SocketAddr),
    Reset(SocketAddr, ResetReason),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Admitting,
    Open,
    Closing,
    Done,
}

const CONTROL_QUEUE_MAX: usize = 1024;

/// Fixed-size bitsets, one row of `words` u64 per send-buffer slot.
#[derive(Debug)]
struct Bits {
    words: usize,
    data: Vec<u64>,
}

impl Bits {
    fn new(rows: usize, bits: usize) -> Self {
        let words = bits.div_ceil(64).max(1);
        Self {
            words,
            data: vec![0; rows * words],
        }
    }
    fn grow(&mut self, rows: usize, bits: usize) {
        let words = bits.div_ceil(64).max(1);
        if words > self.words {
            let mut data = vec![0; rows * words];
            for r in 0..rows {
                data[r * words..r * words + self.words]
                    .copy_from_slice(&self.data[r * self.words..(r + 1) * self.words]);
            }
            self.words = words;
            self.data = data;
        }
    }
    fn get(&self, row: usize, bit: usize) -> bool {
        self.data[row * self.words + bit / 64] & (1 << (bit % 64)) != 0
    }
    fn set(&mut self, row: usize, bit: usize) {
        self.data[row * self.words + bit / 64] |= 1 << (bit % 64);
    }
    fn clear(&mut self, row: usize, bit: usize) {
        self.data[row * self.words + bit / 64] &= !(1 << (bit % 64));
    }
    fn clear_row(&mut self, row: usize) {
        self.data[row * self.words..(row + 1) * self.words].fill(0);
    }
    fn first_set(&self, row: usize) -> Option<usize> {
        let r = &self.data[row * self.words..(row + 1) * self.words];
        r.iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
    }
}

/// The sending side of one PRMP session.
pub struct StreamSender {
    config: StreamSenderConfig,
    session: SessionId,
    phase: Phase,
    started: Instant,
    members: Vec<Member>,
    /// Oldest packet not yet held by every live member.
    base: Seq,
    /// Next packet to transmit for the first time.
    next_tx: Seq,
    /// Next sequence number `send` assigns.
    tail: Seq,
    isn: Seq,
    buffer_packets: u32,
    payload: Vec<u8>,
    slots: Vec<Slot>,
    /// Per slot: members that reported the packet missing since its last transmission.
    lack: Bits,
    /// Per slot: members that reported on the packet since its last transmission.
    reported: Bits,
    /// Per slot: members still owed a unicast repair.
    repair_to: Bits,
    candidates: VecDeque<Seq>,
    repairs: VecDeque<Seq>,
    planner: PollPlanner,
    cwnd: CongestionWindow,
    transmissions: u64,
    poll_ids: u32,
    control: VecDeque<Control>,
    next_announce: Instant,
    /// The application ended an announcement's admission early.
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
}

impl StreamSender {
    /// A sender for `session` whose first data packet is `isn`, starting at `now`.
    pub fn new(
        config: StreamSenderConfig,
        session: SessionId,
        isn: Seq,
        nonce_seed: u64,
        now: Instant,
    ) -> Result<Self, StreamConfigError> {
        config.validate()?;
        let w = config.send_buffer_packets as usize;
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
            base: isn,
            next_tx: isn,
            tail: isn,
            isn,
            buffer_packets: config.send_buffer_packets,
            payload: vec![0; w * usize::from(config.payload_size)],
            slots: vec![Slot::default(); w],
            lack: Bits::new(w, n),
            reported: Bits::new(w, n),
            repair_to: Bits::new(w, n),
            candidates: VecDeque::with_capacity(w),
            repairs: VecDeque::with_capacity(w),
            planner: PollPlanner::new(
                config.epoch,
                per_epoch,
                config.planning_horizon_epochs as usize,
            ),
            cwnd: CongestionWindow::new(config.send_buffer_packets),
            transmissions: 0,
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
                acked_packets: m.cum.since(self.isn),
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
        self.tail.since(self.base)
    }

    /// Packets sent but not yet held by every live member.
    #[must_use]
    pub fn in_flight_packets(&self) -> u32 {
        self.next_tx.since(self.base)
    }

    /// The group congestion window (also kept, unused, when control is off).
    #[must_use]
    pub fn congestion_window(&self) -> &CongestionWindow {
        &self.cwnd
    }

    /// The exclusive right edge of the smallest advertised window: no data
    /// packet at or beyond it is ever sent.
    #[must_use]
    pub fn flow_edge(&self) -> Option<Seq> {
        self.members
            .iter()
            .filter(|m| m.status == MemberStatus::Live)
            .map(|m| m.edge)
            .min_by(|a, b| a.cmp(b))
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
        let p = usize::from(self.config.payload_size);
        let packets = msg.len().div_ceil(p).max(1) as u32;
        if self.buffered_packets() + packets > self.buffer_packets {
            return Err(SendError::WouldBlock);
        }
        for i in 0..packets {
            let chunk =
                &msg[(i as usize * p).min(msg.len())..((i as usize + 1) * p).min(msg.len())];
            let w = self.slot(self.tail);
            self.payload[w * p..w * p + chunk.len()].copy_from_slice(chunk);
            let mut flags = 0;
            if i == 0 {
                flags |= DATA_FIRST;
            }
            if i + 1 == packets {
                flags |= DATA_LAST;
            }
            self.slots[w] = Slot {
                len: chunk.len() as u16,
                flags,
                ..Slot::default()
            };
            self.lack.clear_row(w);
            self.reported.clear_row(w);
            self.repair_to.clear_row(w);
            self.tail = self.tail.add(1);
        }
        self.stats.messages += 1;
        Ok(())
    }

    /// Free send buffer in packets.
    #[must_use]
    pub fn send_capacity_packets(&self) -> u32 {
        self.buffer_packets - self.buffered_packets()
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

    // ----- timers ----------------------------------------------------------

    /// When the machine next needs [`StreamSender::handle_timeout`].
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.phase == Phase::Done {
            return None;
        }
        let mut t: Option<Instant> = None;
        let mut at = |x: Instant| t = Some(t.map_or(x, |y: Instant| y.min(x)));
        if self.phase == Phase::Admitting
            && !self.admission_ended
            && let Admission::Announce { duration, .. } = self.config.admission
        {
            at(self.next_announce.min(self.started + duration));
        }
        for m in &self.members {
            match m.status {
                MemberStatus::Inviting => at(m.next_try),
                MemberStatus::Live => match m.poll {
                    PollState::Planned { send_at, .. } => at(send_at),
                    PollState::Outstanding { deadline, .. } => at(deadline),
                    PollState::Idle => {
                        if self.phase != Phase::Admitting {
                            at(m.last_heard + self.config.keepalive);
                            if self.tail != self.next_tx && m.edge <= self.next_tx {
                                at(m.next_probe);
                            }
                        }
                    }
                },
                _ => {}
            }
        }
        for &s in &self.candidates {
            if let Some(first) = self.slots[self.slot(s)].first_nack_at {
                at(first + self.config.repair_gather);
            }
        }
        t
    }

    /// Processes expired timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::Done {
            return;
        }
        self.admission_step(now);
        for i in 0..self.members.len() {
            if self.members[i].status != MemberStatus::Live {
                continue;
            }
            if let PollState::Outstanding { deadline, .. } = self.members[i].poll
                && now >= deadline
            {
                self.stats.poll_timeouts += 1;
                let m = &mut self.members[i];
                m.poll = PollState::Idle;
                m.unanswered += 1;
                let unanswered = m.unanswered;
                if unanswered >= self.config.remove_after {
                    self.remove(i, RemoveReason::Unresponsive, now);
                } else if unanswered >= self.config.suspect_after && !m.suspected {
                    m.suspected = true;
                    self.events
                        .push_back(StreamEvent::Suspected(MemberId(i as u16)));
                }
            }
        }
        self.decide_repairs(now);
        self.plan_polls(now);
    }

    // ----- input -----------------------------------------------------------

    /// Processes one received datagram from `from`.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
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
                let Some(i) = self.member_at(rank, from) else {
                    self.reset(from, ResetReason::NotMember);
                    return;
                };
                if self.members[i].nonce != a.nonce {
                    self.stats.malformed += 1;
                    return;
                }
                match self.members[i].status {
                    MemberStatus::Inviting => {
                        if a.buffer_packets < self.config.message_packets_max() {
                            self.reset(from, ResetReason::BufferTooSmall);
                            self.remove(i, RemoveReason::BufferTooSmall, now);
                            return;
                        }
                        let m = &mut self.members[i];
                        m.status = MemberStatus::Live;
                        m.receiver_id = a.receiver_id;
                        m.name = truncate_utf8(a.name, 255).to_owned();
                        m.cum = self.base;
                        m.edge = self.base.add(a.buffer_packets);
                        m.last_heard = now;
                        // One invite, one answer: an unambiguous first RTT
                        // sample (Karn), so the first polls land where planned.
                        if m.tries == 1 {
                            m.rtt.sample(
                                self.config
                                    .handshake_interval
                                    .saturating_sub(m.next_try.saturating_since(now)),
                            );
                        }
                        self.push_control(Control::Confirm(rank));
                        self.events.push_back(StreamEvent::Joined(MemberId(rank)));
                    }
                    MemberStatus::Live => self.push_control(Control::Confirm(rank)),
                    MemberStatus::Gone => self.reset(from, ResetReason::Removed),
                    MemberStatus::Pending => self.stats.malformed += 1,
                }
                self.admission_step(now);
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
                let Some(i) = self.member_at(rank, from) else {
                    return;
                };
                if matches!(
                    self.members[i].status,
                    MemberStatus::Live | MemberStatus::Inviting
                ) {
                    self.drop_member(i);
                    self.events.push_back(StreamEvent::Left(MemberId(rank)));
                    self.after_membership_change(now);
                }
                self.push_control(Control::LeaveAck(from));
            }
            _ => self.stats.foreign += 1,
        }
        self.decide_repairs(now);
        self.plan_polls(now);
    }

    fn member_at(&self, rank: u16, from: SocketAddr) -> Option<usize> {
        let i = usize::from(rank);
        self.members
            .get(i)
            .filter(|m| m.addr == from && m.status != MemberStatus::Pending)
            .map(|_| i)
    }

    fn on_connect_request(
        &mut self,
        now: Instant,
        from: SocketAddr,
        c: rmcast_wire::stream::ConnectRequest<'_>,
    ) {
        let Admission::Announce { receivers_max, .. } = self.config.admission else {
            self.stats.foreign += 1;
            return;
        };
        if let Some(i) = self
            .members
            .iter()
            .position(|m| m.receiver_id == c.receiver_id && m.addr == from)
        {
            match self.members[i].status {
                MemberStatus::Inviting => self.push_control(Control::Invite(i as u16)),
                MemberStatus::Gone => self.reset(from, ResetReason::Removed),
                _ => {}
            }
            return;
        }
        if self.phase != Phase::Admitting || self.admission_ended {
            self.reset(from, ResetReason::AdmissionClosed);
            return;
        }
        if self.members.len() >= usize::from(receivers_max) {
            self.reset(from, ResetReason::SessionFull);
            return;
        }
        let i = self.members.len();
        let mut m = Member::new(
            from,
            c.receiver_id,
            nonce(self.nonce_seed ^ c.receiver_id, i),
            MemberStatus::Inviting,
            &self.config,
            self.isn,
            now,
        );
        m.tries = 1;
        m.next_try = now + self.config.handshake_interval;
        self.members.push(m);
        let bits = self.members.len();
        let rows = self.slots.len();
        self.lack.grow(rows, bits);
        self.reported.grow(rows, bits);
        self.repair_to.grow(rows, bits);
        self.push_control(Control::Invite(i as u16));
    }

    fn on_response(&mut self, now: Instant, i: usize, r: &Response<'_>, close: bool) {
        // A receiver cannot hold what was never sent: a response that says
        // so is hostile or corrupt, counted and ignored.
        if r.cumulative > self.next_tx || r.cumulative < self.isn {
            self.stats.malformed += 1;
            return;
        }
        let m = &mut self.members[i];
        m.last_heard = now;
        let old_edge = m.edge;
        if r.cumulative > m.cum {
            m.cum = r.cumulative;
        }
        if r.window_end() > m.edge {
            m.edge = r.window_end();
        }
        let blocked_before = old_edge <= self.next_tx;
        if m.edge > old_edge {
            m.probe_gap = self.config.epoch;
        } else if blocked_before {
            m.probe_gap = (m.probe_gap * 2).min(self.config.probe_max);
        }
        m.next_probe = now + m.probe_gap;
        let PollState::Outstanding {
            poll_id,
            mark,
            high,
            ..
        } = m.poll
        else {
            // A late answer to a poll already given up on: its cumulative
            // point and window still hold, its NACKs may be stale.
            self.advance_base();
            return;
        };
        if poll_id != r.poll_id {
            self.advance_base();
            return;
        }
        m.poll = PollState::Idle;
        let rtt_us = ts_us(now)
            .wrapping_sub(r.echo_ts_us)
            .saturating_sub(r.held_us);
        if rtt_us < 60_000_000 {
            m.rtt.sample(Duration::from_micros(u64::from(rtt_us)));
        }
        m.unanswered = 0;
        if m.suspected {
            m.suspected = false;
            self.events
                .push_back(StreamEvent::Unsuspected(MemberId(i as u16)));
        }
        if close && r.cumulative == self.tail && self.close_requested {
            m.close_confirmed = true;
        }
        // Judge every packet sent before the poll went out: held is an ACK,
        // missing a NACK (a packet resent since then is not judged).
        let mut s = r.cumulative.max(self.base);
        while s < high {
            let w = self.slot(s);
            let slot = self.slots[w];
            if slot.sent_no != 0 && slot.sent_no <= mark {
                self.reported.set(w, i);
                if !r.holds(s) {
                    self.on_nack(now, s, w, i);
                }
            }
            s = s.add(1);
        }
        self.advance_base();
        self.maybe_closed();
    }

    fn on_nack(&mut self, now: Instant, s: Seq, w: usize, i: usize) {
        let slot = &mut self.slots[w];
        if let Some(mode) = slot.repair {
            // A repair is already queued; make sure it reaches this member.
            if mode == RepairMode::Unicast {
                self.repair_to.set(w, i);
            }
            return;
        }
        if !self.lack.get(w, i) {
            self.lack.set(w, i);
            slot.lack_count += 1;
        }
        if !slot.nacked_ever {
            slot.nacked_ever = true;
            if self.config.congestion == CongestionControl::TcpLike {
                self.cwnd
                    .on_first_nack(slot.first_sent_no, self.transmissions);
            }
        }
        slot.first_nack_at.get_or_insert(now);
        if !slot.candidate {
            slot.candidate = true;
            self.candidates.push_back(s);
        }
    }

    /// Decides, for each packet with NACKs, whether to repair it now and how:
    /// by multicast once `repair_multicast_min` receivers lack it, otherwise
    /// by unicast to each once every live member reported (or the gathering
    /// time is over).
    fn decide_repairs(&mut self, now: Instant) {
        let n = self.candidates.len();
        for _ in 0..n {
            let Some(s) = self.candidates.pop_front() else {
                break;
            };
            if s < self.base {
                continue;
            }
            let w = self.slot(s);
            if self.slots[w].lack_count == 0 {
                self.clear_nacks(w);
                continue;
            }
            let slot = self.slots[w];
            let enough = slot.lack_count >= self.config.repair_multicast_min;
            let timed_out = slot
                .first_nack_at
                .is_some_and(|t| now >= t + self.config.repair_gather);
            let all_reported = self.members.iter().enumerate().all(|(i, m)| {
                m.status != MemberStatus::Live || m.cum > s || self.reported.get(w, i)
            });
            if !(enough || timed_out || all_reported) {
                self.candidates.push_back(s);
                continue;
            }
            if enough {
                self.slots[w].repair = Some(RepairMode::Multicast);
            } else {
                for i in 0..self.members.len() {
                    if self.lack.get(w, i) {
                        self.repair_to.set(w, i);
                    }
                }
                self.slots[w].repair = Some(RepairMode::Unicast);
            }
            self.clear_nacks(w);
            self.repairs.push_back(s);
        }
    }

    fn clear_nacks(&mut self, w: usize) {
        let slot = &mut self.slots[w];
        slot.lack_count = 0;
        slot.first_nack_at = None;
        slot.candidate = false;
        self.lack.clear_row(w);
        self.reported.clear_row(w);
    }

    fn advance_base(&mut self) {
        let Some(min) = self
            .members
            .iter()
            .filter(|m| m.status == MemberStatus::Live)
            .map(|m| m.cum)
            .min_by(|a, b| a.cmp(b))
        else {
            return;
        };
        if min > self.base {
            let n = min.since(self.base);
            if self.config.congestion == CongestionControl::TcpLike {
                self.cwnd.on_fully_acked(n);
            }
            // Everyone holds these: forget their repair state, so a stale
            // queue entry can never touch the slot's next packet.
            let mut s = self.base;
            while s < min {
                let w = self.slot(s);
                self.slots[w].repair = None;
                self.clear_nacks(w);
                self.repair_to.clear_row(w);
                s = s.add(1);
            }
            self.base = min;
        }
    }

    fn maybe_closed(&mut self) {
        if self.phase == Phase::Done || !self.close_requested || self.phase == Phase::Admitting {
            return;
        }
        let all = self
            .members
            .iter()
            .filter(|m| m.status == MemberStatus::Live)
            .all(|m| m.close_confirmed);
        if all && self.base == self.tail {
            self.finish();
        }
    }

    fn finish(&mut self) {
        if self.phase != Phase::Done {
            self.phase = Phase::Done;
            for m in &mut self.members {
                if let PollState::Planned { epoch, .. } = m.poll {
                    self.planner.release(epoch);
                }
                m.poll = PollState::Idle;
            }
            self.events.push_back(StreamEvent::Closed);
        }
    }

    fn drop_member(&mut self, i: usize) {
        let m = &mut self.members[i];
        if let PollState::Planned { epoch, .. } = m.poll {
            self.planner.release(epoch);
        }
        m.poll = PollState::Idle;
        m.status = MemberStatus::Gone;
        for w in 0..self.slots.len() {
            if self.lack.get(w, i) {
                self.lack.clear(w, i);
                self.slots[w].lack_count -= 1;
            }
            self.reported.clear(w, i);
            self.repair_to.clear(w, i);
        }
    }

    fn remove(&mut self, i: usize, reason: RemoveReason, now: Instant) {
        let addr = self.members[i].addr;
        self.drop_member(i);
        if reason == RemoveReason::Unresponsive {
            // A falsely suspected receiver learns it is out.
            self.reset(addr, ResetReason::Removed);
        }
        self.events.push_back(StreamEvent::Removed {
            id: MemberId(i as u16),
            reason,
        });
        self.after_membership_change(now);
    }

    fn after_membership_change(&mut self, now: Instant) {
        if self.phase == Phase::Admitting {
            self.admission_step(now);
            return;
        }
        self.advance_base();
        if self.live_members() == 0 {
            self.finish();
        } else {
            self.maybe_closed();
        }
    }

    fn admission_step(&mut self, now: Instant) {
        if self.phase != Phase::Admitting {
            return;
        }
        let mut open = false;
        match self.config.admission {
            Admission::Invite { concurrency, .. } => {
                let mut active = self
                    .members
                    .iter()
                    .filter(|m| m.status == MemberStatus::Inviting)
                    .count();
                for i in 0..self.members.len() {
                    if active >= concurrency {
                        break;
                    }
                    if self.members[i].status == MemberStatus::Pending {
                        self.members[i].status = MemberStatus::Inviting;
                        self.members[i].next_try = now;
                        self.members[i].tries = 0;
                        active += 1;
                    }
                }
            }
            Admission::Announce {
                duration, interval, ..
            } => {
                if !self.admission_ended && now < self.started + duration {
                    open = true;
                    if now >= self.next_announce {
                        self.push_control(Control::Announce);
                        self.next_announce = now + interval;
                    }
                }
            }
        }
        for i in 0..self.members.len() {
            let m = &mut self.members[i];
            if m.status == MemberStatus::Inviting && now >= m.next_try {
                if m.tries >= self.config.handshake_tries {
                    self.drop_member(i);
                    self.events.push_back(StreamEvent::Removed {
                        id: MemberId(i as u16),
                        reason: RemoveReason::NoAnswer,
                    });
                    return self.admission_step(now);
                }
                m.tries += 1;
                m.next_try = now + self.config.handshake_interval;
                self.push_control(Control::Invite(i as u16));
            }
        }
        let busy = self
            .members
            .iter()
            .any(|m| matches!(m.status, MemberStatus::Pending | MemberStatus::Inviting));
        if !open && !busy {
            let live = self.live_members();
            self.phase = Phase::Open;
            self.events
                .push_back(StreamEvent::Established { members: live });
            for m in &mut self.members {
                m.last_heard = now;
            }
            if live == 0 {
                self.finish();
            }
        }
    }

    // ----- output ----------------------------------------------------------

    /// Writes the next datagram into `buf` (at least [`crate::MAX_DATAGRAM`]
    /// bytes) and says where it goes.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if let Some(t) = self.control_transmit(now, buf) {
            return Some(t);
        }
        if matches!(self.phase, Phase::Admitting | Phase::Done) {
            return None;
        }
        if self.close_requested && self.phase == Phase::Open && self.next_tx == self.tail {
            self.phase = Phase::Closing;
            self.plan_polls(now);
        }
        self.decide_repairs(now);
        if let Some(t) = self.repair_transmit(now, buf) {
            return Some(t);
        }
        if self.may_send_new() {
            let s = self.next_tx;
            self.next_tx = s.add(1);
            let t = self.data_transmit(now, s, Dest::Group, buf);
            self.stats.data_packets += 1;
            let w = self.slot(s);
            self.slots[w].first_sent_no = self.slots[w].sent_no;
            // Every member now lacks an acknowledgement of this packet.
            self.plan_polls(now);
            return t;
        }
        self.poll_standalone(now, buf)
    }

    fn may_send_new(&self) -> bool {
        if self.next_tx == self.tail {
            return false;
        }
        if self.flow_edge().is_none_or(|edge| self.next_tx >= edge) {
            return false;
        }
        if self.config.congestion == CongestionControl::TcpLike
            && self.in_flight_packets() >= self.cwnd.cwnd_packets()
        {
            return false;
        }
        true
    }

    fn header(&self) -> Header {
        Header::new(self.session, RANK_SENDER)
    }

    fn push_control(&mut self, c: Control) {
        if self.control.len() >= CONTROL_QUEUE_MAX {
            self.stats.control_dropped += 1;
        } else {
            self.control.push_back(c);
        }
    }

    fn reset(&mut self, to: SocketAddr, reason: ResetReason) {
        self.push_control(Control::Reset(to, reason));
    }

    fn control_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let c = self.control.pop_front()?;
        let header = self.header();
        let (dest, body) = match c {
            // An announcement queued before admission closed is stale.
            Control::Announce if self.phase != Phase::Admitting => {
                return self.control_transmit(now, buf);
            }
            Control::Announce => {
                let Admission::Announce {
                    duration,
                    receivers_max,
                    ..
                } = self.config.admission
                else {
                    return None;
                };
                let left = (self.started + duration).saturating_since(now);
                (
                    Dest::Group,
                    StreamBody::Announce(Announce {
                        receivers_max,
                        payload_size: self.config.payload_size,
                        message_packets_max: self.config.message_packets_max(),
                        admission_left_ms: left.as_millis().min(u32::MAX as u128) as u32,
                    }),
                )
            }
            Control::Invite(rank) => {
                let m = &self.members[usize::from(rank)];
                (
                    Dest::Unicast(m.addr),
                    StreamBody::Invite(Invite {
                        nonce: m.nonce,
                        rank,
                        payload_size: self.config.payload_size,
                        isn: self.isn,
                        message_packets_max: self.config.message_packets_max(),
                    }),
                )
            }
            Control::Confirm(rank) => {
                let m = &self.members[usize::from(rank)];
                (
                    Dest::Unicast(m.addr),
                    StreamBody::Confirm { nonce: m.nonce },
                )
            }
            Control::LeaveAck(to) => (Dest::Unicast(to), StreamBody::LeaveAck),
            Control::Reset(to, reason) => (Dest::Unicast(to), StreamBody::Reset { reason }),
        };
        emit(dest, header, body, buf)
    }

    fn repair_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(&s) = self.repairs.front() {
            let w = self.slot(s);
            if s < self.base {
                // Freed (and its slot maybe reused) in `advance_base`.
                self.repairs.pop_front();
                continue;
            }
            match self.slots[w].repair {
                Some(RepairMode::Multicast) => {
                    self.repairs.pop_front();
                    self.slots[w].repair = None;
                    self.stats.multicast_repairs += 1;
                    return self.data_transmit(now, s, Dest::Group, buf);
                }
                Some(RepairMode::Unicast) => {
                    let Some(i) = self.repair_to.first_set(w) else {
                        self.repairs.pop_front();
                        self.slots[w].repair = None;
                        continue;
                    };
                    self.repair_to.clear(w, i);
                    let m = &self.members[i];
                    let cum = m.cum;
                    if m.status != MemberStatus::Live || cum > s {
                        continue;
                    }
                    self.stats.unicast_repairs += 1;
                    return self.data_transmit(now, s, Dest::Unicast(m.addr), buf);
                }
                None => {
                    self.repairs.pop_front();
                }
            }
        }
        None
    }

    /// Writes data packet `s`, carrying the polls due soon when it is multicast.
    fn data_transmit(
        &mut self,
        now: Instant,
        s: Seq,
        dest: Dest,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let w = self.slot(s);
        let slot = self.slots[w];
        self.transmissions += 1;
        self.slots[w].sent_no = self.transmissions;
        let high = if s >= self.next_tx {
            s.add(1)
        } else {
            self.next_tx
        };
        let n = if dest == Dest::Group {
            self.collect_polls(now, now + self.config.epoch, high)
        } else {
            0
        };
        self.stats.piggybacked_polls += n as u64;
        self.encode_entries(now, n);
        let poll = self.encoded_poll(n);
        let p = usize::from(self.config.payload_size);
        let payload = &self.payload[w * p..w * p + usize::from(slot.len)];
        let body = StreamBody::Data(StreamData {
            seq: s,
            flags: slot.flags,
            poll,
            payload,
        });
        let header = Header::new(self.session, RANK_SENDER);
        let len = StreamPacket { header, body }.encode(buf).ok()?;
        Some(Transmit {
            dest,
            len,
            kind: StreamKind::Data,
        })
    }

    fn poll_standalone(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let n = self.collect_polls(now, now, self.next_tx);
        if n == 0 {
            return None;
        }
        self.stats.standalone_polls += 1;
        let dest = if n == 1 {
            Dest::Unicast(self.members[usize::from(self.entry_members[0])].addr)
        } else {
            Dest::Group
        };
        self.encode_entries(now, n);
        let poll = self.encoded_poll(n);
        let b = PollBody {
            next_seq: self.next_tx,
            poll,
        };
        let body = if self.phase == Phase::Closing {
            StreamBody::Close(b)
        } else {
            StreamBody::Poll(b)
        };
        emit(dest, self.header(), body, buf)
    }

    /// Moves up to [`MAX_POLL_ENTRIES`] planned polls due by `until` into the
    /// entry buffer, marking them outstanding; `high` is one past the
    /// highest seq the carrying packet lets the receiver know of.
    fn collect_polls(&mut self, now: Instant, until: Instant, high: Seq) -> usize {
        let mut n = 0;
        let id = self.poll_ids.wrapping_add(1);
        for i in 0..self.members.len() {
            if n == MAX_POLL_ENTRIES {
                break;
            }
            let m = &mut self.members[i];
            let PollState::Planned { send_at, .. } = m.poll else {
                continue;
            };
            if m.status != MemberStatus::Live || send_at > until {
                continue;
            }
            let delay = send_at.saturating_since(now);
            let backoff = 1u32 << m.unanswered.min(16);
            let rto = (m.rtt.rto(self.config.rto_min, self.config.rto_max) * backoff)
                .min(self.config.rto_max);
            m.poll = PollState::Outstanding {
                poll_id: id,
                deadline: now + delay + rto,
                mark: self.transmissions,
                high,
            };
            self.entries[n] = PollEntry {
                rank: i as u16,
                delay_us: delay.as_micros().min(u32::MAX as u128) as u32,
            };
            self.entry_members[n] = i as u16;
            n += 1;
        }
        if n > 0 {
            self.poll_ids = id;
            self.stats.polls += n as u64;
        }
        n
    }

    /// Encodes the first `n` collected entries; the request borrows them.
    fn encode_entries(&mut self, now: Instant, n: usize) {
        if n > 0 {
            self.entries_len = PollEntries::write(&self.entries[..n], &mut self.entries_raw)
                .expect("at most MAX_POLL_ENTRIES entries fit the buffer");
            self.poll_ts_us = ts_us(now);
        }
    }

    fn encoded_poll(&self, n: usize) -> Option<PollRequest<'_>> {
        if n == 0 {
            return None;
        }
        Some(PollRequest {
            poll_id: self.poll_ids,
            ts_us: self.poll_ts_us,
            entries: PollEntries::from_raw(&self.entries_raw[..self.entries_len]).ok()?,
        })
    }

    /// Plans a poll for every live member that needs one and has none:
    /// unacknowledged data, a closed window holding back queued data
    /// (probe, spaced by a growing gap), a pending close confirmation, or a
    /// keepalive. The poll's arrival is reserved in the planner and its
    /// send time set back by the member's RTT.
    fn plan_polls(&mut self, now: Instant) {
        if matches!(self.phase, Phase::Admitting | Phase::Done) {
            return;
        }
        let closing = self.phase == Phase::Closing;
        for i in 0..self.members.len() {
            let m = &self.members[i];
            if m.status != MemberStatus::Live || m.poll != PollState::Idle {
                continue;
            }
            let unacked = m.cum < self.next_tx;
            let blocked =
                self.tail != self.next_tx && m.edge <= self.next_tx && now >= m.next_probe;
            let close = closing && !m.close_confirmed;
            let keepalive = now >= m.last_heard + self.config.keepalive;
            if !(unacked || blocked || close || keepalive) {
                continue;
            }
            let srtt = m.rtt.srtt();
            let Some((epoch, arrival)) = self.planner.reserve(now, now + srtt) else {
                return;
            };
            let send_at = arrival.saturating_since(Instant::ZERO).saturating_sub(srtt);
            let send_at = Instant::from_nanos(send_at.as_nanos() as u64).max(now);
            self.members[i].poll = PollState::Planned { send_at, epoch };
        }
    }

    fn slot(&self, s: Seq) -> usize {
        (s.since(self.isn) % self.buffer_packets) as usize
    }
}

impl Member {
    fn new(
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
        }
    }
}

/// A per-member handshake nonce from the seed (splitmix64).
fn nonce(seed: u64, i: usize) -> u64 {
    let mut z = seed.wrapping_add((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn emit(dest: Dest, header: Header, body: StreamBody<'_>, buf: &mut [u8]) -> Option<Transmit> {
    let kind = body.kind();
    let len = StreamPacket { header, body }.encode(buf).ok()?;
    Some(Transmit { dest, len, kind })
}
