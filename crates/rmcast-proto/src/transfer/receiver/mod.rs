//! The receiver's state machine: join a session, answer the offer, take
//! data in any order, acknowledge as polled, NAK gaps, confirm the hash.

use crate::transfer::policy::relay::{ChildAck, Relay};
use crate::{Dest, FeedbackPolicy, Instant, Transmit, truncate_utf8};
use rmcast_wire::{
    Body, Complete, ECHO_COPY_MAX, Feedback, HASH_LEN, Header, Join, Kind, Leave, OfferReply,
    Packet, ProtocolId, RANK_SENDER, RANK_UNASSIGNED, RateNak, RateNakKind, Seq, SessionId, Status,
};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

/// How a receiver behaves.
#[derive(Clone, Debug)]
pub struct ReceiverConfig {
    /// Random identity; makes retransmitted joins idempotent.
    pub receiver_id: u64,
    /// Name shown in the sender's reports (at most 255 bytes are sent).
    pub name: String,
    /// Join only this session; `None` joins the first one announced.
    pub session: Option<SessionId>,
    /// Period of `Join` retransmission until admitted.
    pub join_interval: Duration,
    /// Give up when the sender is silent this long during a transfer.
    pub sender_timeout: Duration,
    /// Give up when no session is announced within this time (`None`: wait forever).
    pub listen_timeout: Option<Duration>,
    /// Minimum spacing of NAKs that repeat the same gap.
    pub nak_interval: Duration,
    /// Hunt's multicast NACK (several senders on one group): on a new gap
    /// in the sender's stream, also multicast an EXP `RateNak` to the
    /// group, so that every sender backs off; at most one per this
    /// interval, counting those other members sent about the same sender.
    /// `None` (the default): feedback goes to the sender only.
    pub rate_nak_interval: Option<Duration>,
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        Self {
            receiver_id: 0,
            name: String::new(),
            session: None,
            join_interval: Duration::from_millis(100),
            sender_timeout: Duration::from_secs(10),
            listen_timeout: None,
            nak_interval: Duration::from_millis(5),
            rate_nak_interval: None,
        }
    }
}

/// The object a sender offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OfferInfo {
    /// Name to store it under, as sent (the driver must check it is safe).
    pub name: String,
    /// Length in bytes.
    pub size: u64,
    /// Protocol of the data phase.
    pub protocol: ProtocolId,
    /// Object bytes per data packet.
    pub payload_size: u16,
    /// Sender window in packets.
    pub window: u32,
    /// Receivers in the session.
    pub receivers: u16,
    /// Data packets in the object.
    pub packets: u32,
    /// Sequence number of the first data packet.
    pub isn: Seq,
    /// Test knob: drop this many data packets per million before handing
    /// them to the machine (the driver applies it; see `rmcast send --loss`).
    pub test_loss_ppm: u32,
}

/// Something the receiving application must know or act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReceiverEvent {
    /// Admitted to `session` with `rank`.
    Admitted {
        /// The session joined.
        session: SessionId,
        /// Rank given by the sender.
        rank: u16,
        /// The sender's unicast address.
        sender: SocketAddr,
    },
    /// The object on offer: answer with [`Receiver::accept_offer`] or
    /// [`Receiver::refuse_offer`].
    Offer(OfferInfo),
    /// Every byte has been delivered and the sender's `Close` said which
    /// hash they must have ([`Receiver::expected_hash`]): verify them and
    /// call [`Receiver::confirm`].
    AllData,
    /// The session ended after this receiver confirmed; nothing more to do.
    Finished,
    /// The transfer failed; the text says why.
    Failed(String),
}

/// A slice of the object to store at `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataChunk<'a> {
    /// Object offset of the first byte.
    pub offset: u64,
    /// The bytes (borrowed from the datagram).
    pub bytes: &'a [u8],
}

/// Counters a driver reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    /// Data packets that brought new bytes.
    pub data_packets: u64,
    /// Data packets already held.
    pub duplicates: u64,
    /// Data packets beyond the window (dropped).
    pub out_of_window: u64,
    /// Acks sent.
    pub acks: u64,
    /// Naks sent.
    pub naks: u64,
    /// EXP `RateNak`s multicast to the group.
    pub rate_naks: u64,
    /// `RateNak`s about this session heard from other members (each
    /// suppresses this receiver's own for an interval).
    pub rate_naks_heard: u64,
    /// Datagrams that failed to decode.
    pub malformed: u64,
    /// Well-formed datagrams of another session or role.
    pub foreign: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Listening,
    Joining,
    /// Admitted, waiting for the offer.
    Admitted,
    /// Offer shown to the application, waiting for its answer.
    Deciding,
    /// Taking data; stays here with every byte in until a `Close` brings
    /// the hash to verify against.
    Receiving,
    /// All data delivered and the hash known, waiting for the
    /// application's verdict.
    Verifying,
    /// Verdict sent, waiting for the sender's Bye.
    Confirmed,
    Done,
}

struct Transfer {
    isn: Seq,
    payload_size: u64,
    size: u64,
    packets: u32,
    window: u32,
    /// Bit per packet: held or not.
    held: Vec<u64>,
    /// Index of the first packet not held.
    cumulative: u32,
    /// One past the highest packet held.
    highest: u32,
}

impl Transfer {
    fn has(&self, index: u32) -> bool {
        self.held[(index / 64) as usize] & (1 << (index % 64)) != 0
    }

    fn set(&mut self, index: u32) {
        self.held[(index / 64) as usize] |= 1 << (index % 64);
        self.highest = self.highest.max(index + 1);
        while self.cumulative < self.packets && self.has(self.cumulative) {
            self.cumulative += 1;
        }
    }
}

/// The receiving side of one transfer.
pub struct Receiver {
    config: ReceiverConfig,
    phase: Phase,
    started: Instant,
    session: SessionId,
    sender: Option<SocketAddr>,
    rank: u16,
    last_from_sender: Instant,
    join_at: Instant,
    offer: Option<OfferInfo>,
    /// The object's hash, from the first `Close` heard.
    expected_hash: Option<[u8; HASH_LEN]>,
    reply: Option<(Status, String)>,
    verdict: Option<(Status, [u8; HASH_LEN], String)>,
    /// An Offer heard before our Welcome, taken up when the Welcome comes.
    early_offer: Option<(OfferInfo, FeedbackPolicy)>,
    transfer: Option<Transfer>,
    /// Feedback owed to the sender: acks count, a NAK flag, their echoes.
    acks_owed: u32,
    nak_owed: bool,
    last_echo: Seq,
    nak_echo: Seq,
    /// The `copy` of the packets behind `last_echo` and `nak_echo`.
    last_echo_copy: u8,
    nak_echo_copy: u8,
    /// The session's feedback policy, from the offer.
    policy: Option<FeedbackPolicy>,
    /// Tree: the parent the `Welcome` named (`None`: the sender).
    upstream: Option<SocketAddr>,
    /// Tree: relaying the subtree's acknowledgements, from the offer on.
    relay: Option<Relay>,
    /// Scratch for the bitmap of held packets sent with feedback.
    bitmap: Vec<u8>,
    last_nak: Option<(Instant, u32)>,
    /// An EXP `RateNak` owed to the group: the first message missing.
    rate_nak_owed: Option<Seq>,
    /// When this session's last `RateNak` was sent or heard.
    last_rate_nak: Option<Instant>,
    reply_owed: bool,
    complete_owed: bool,
    leave_owed: Option<String>,
    events: VecDeque<ReceiverEvent>,
    stats: ReceiverStats,
}

impl Receiver {
    /// A receiver listening for a session, starting at `now`.
    #[must_use]
    pub fn new(mut config: ReceiverConfig, now: Instant) -> Self {
        config.name = truncate_utf8(&config.name, 255).to_owned();
        Self {
            config,
            phase: Phase::Listening,
            started: now,
            session: SessionId(0),
            sender: None,
            rank: RANK_UNASSIGNED,
            last_from_sender: now,
            join_at: now,
            offer: None,
            expected_hash: None,
            reply: None,
            verdict: None,
            early_offer: None,
            transfer: None,
            acks_owed: 0,
            nak_owed: false,
            last_echo: Seq(0),
            nak_echo: Seq(0),
            last_echo_copy: 0,
            nak_echo_copy: 0,
            policy: None,
            upstream: None,
            relay: None,
            bitmap: Vec::new(),
            last_nak: None,
            rate_nak_owed: None,
            last_rate_nak: None,
            reply_owed: false,
            complete_owed: false,
            leave_owed: None,
            events: VecDeque::new(),
            stats: ReceiverStats::default(),
        }
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> &ReceiverStats {
        &self.stats
    }

    /// The rank given by the sender, once admitted.
    #[must_use]
    pub fn rank(&self) -> Option<u16> {
        (self.rank != RANK_UNASSIGNED).then_some(self.rank)
    }

    /// The session joined, once a `Hello` was heard.
    #[must_use]
    pub fn session(&self) -> Option<SessionId> {
        (self.phase != Phase::Listening).then_some(self.session)
    }

    /// The object on offer, once announced.
    #[must_use]
    pub fn offer(&self) -> Option<&OfferInfo> {
        self.offer.as_ref()
    }

    /// The BLAKE3 hash the object must have: the sender announces it in
    /// `Close`, once every receiver holds every byte (so it could start
    /// sending before it had read the object). `None` until then.
    #[must_use]
    pub fn expected_hash(&self) -> Option<[u8; HASH_LEN]> {
        self.expected_hash
    }

    /// Object bytes held in order from the start.
    #[must_use]
    pub fn received_bytes(&self) -> u64 {
        self.transfer.as_ref().map_or(0, |t| {
            (u64::from(t.cumulative) * t.payload_size).min(t.size)
        })
    }

    /// True once the machine has nothing more to do.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Next event for the application.
    pub fn poll_event(&mut self) -> Option<ReceiverEvent> {
        self.events.pop_front()
    }

    /// Accepts the offered object (after preparing storage for it).
    pub fn accept_offer(&mut self) {
        if self.phase != Phase::Deciding {
            return;
        }
        let o = self.offer.as_ref().expect("deciding implies an offer");
        let words = (o.packets as usize).div_ceil(64);
        self.transfer = Some(Transfer {
            isn: o.isn,
            payload_size: u64::from(o.payload_size),
            size: o.size,
            packets: o.packets,
            window: o.window,
            held: vec![0; words],
            cumulative: 0,
            highest: 0,
        });
        self.reply = Some((Status::Ok, String::new()));
        self.reply_owed = true;
        self.phase = Phase::Receiving;
        self.check_all_data();
    }

    /// Refuses the offered object; the receiver then ends.
    pub fn refuse_offer(&mut self, status: Status, text: &str) {
        if self.phase != Phase::Deciding {
            return;
        }
        let status = if status == Status::Ok {
            Status::Other
        } else {
            status
        };
        self.reply = Some((status, truncate(text)));
        self.reply_owed = true;
        self.fail(format!("refused the offer: {text}"));
    }

    /// Reports the verification of the whole object to the sender.
    /// `status` is `Ok` when the bytes hash to [`Receiver::expected_hash`].
    pub fn confirm(&mut self, status: Status, hash: [u8; HASH_LEN], text: &str) {
        if self.phase != Phase::Verifying {
            return;
        }
        self.verdict = Some((status, hash, truncate(text)));
        self.complete_owed = true;
        if status == Status::Ok {
            self.phase = Phase::Confirmed;
        } else {
            self.fail(format!("verification failed: {text}"));
        }
    }

    /// Leaves the session (sends `Leave` when admitted) and ends.
    pub fn leave(&mut self, text: &str) {
        if self.phase == Phase::Done {
            return;
        }
        if self.rank != RANK_UNASSIGNED {
            self.leave_owed = Some(truncate(text));
        }
        self.fail(format!("left the session: {text}"));
    }

    /// When the machine next needs [`Receiver::handle_timeout`].
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Done => None,
            Phase::Listening => self.config.listen_timeout.map(|t| self.started + t),
            Phase::Joining => Some(self.join_at.min(self.sender_deadline())),
            _ => Some(self.sender_deadline()),
        }
    }

    fn sender_deadline(&self) -> Instant {
        self.last_from_sender + self.config.sender_timeout
    }

    /// Processes expired timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.phase {
            Phase::Done => {}
            Phase::Listening => {
                if let Some(t) = self.config.listen_timeout
                    && now >= self.started + t
                {
                    self.fail(format!(
                        "no session was announced within {:.1} s",
                        t.as_secs_f64()
                    ));
                }
            }
            _ if now >= self.sender_deadline() => {
                let silent = now.saturating_since(self.last_from_sender).as_secs_f64();
                if self.phase == Phase::Confirmed {
                    // Our copy is verified; the sender's Bye was lost or it died
                    // after hearing us. Either way we are done.
                    self.phase = Phase::Done;
                    self.events.push_back(ReceiverEvent::Finished);
                } else {
                    self.fail(format!("the sender went silent for {silent:.1} s"));
                }
            }
            _ => {}
        }
    }

    /// Processes one datagram; returns object bytes to store, if it carried new ones.
    pub fn handle_datagram<'a>(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &'a [u8],
    ) -> Option<DataChunk<'a>> {
        let packet = match Packet::decode(datagram) {
            Ok(p) => p,
            Err(_) => {
                self.stats.malformed += 1;
                return None;
            }
        };
        if let Body::RateNak(_) = packet.body {
            // The group's NACKs: another member's about our sender
            // suppresses ours for a while; the rest is the senders' business.
            if packet.header.session == self.session
                && packet.header.rank != RANK_SENDER
                && self.phase != Phase::Listening
            {
                self.stats.rate_naks_heard += 1;
                self.last_rate_nak = Some(now);
            }
            return None;
        }
        if packet.header.rank != RANK_SENDER {
            if let Body::Ack(f) = packet.body
                && f.aggregate
                && packet.header.session == self.session
                && self.on_child_ack(packet.header.rank, f.cumulative)
            {
                return None;
            }
            // Another receiver's feedback looped back, or a stray peer.
            self.stats.foreign += 1;
            return None;
        }
        if self.phase == Phase::Listening {
            if let Body::Hello(_) = packet.body
                && self
                    .config
                    .session
                    .is_none_or(|s| s == packet.header.session)
            {
                self.session = packet.header.session;
                self.sender = Some(from);
                self.phase = Phase::Joining;
                self.join_at = now;
                self.last_from_sender = now;
                return None;
            }
            self.stats.foreign += 1;
            return None;
        }
        if packet.header.session != self.session || Some(from) != self.sender {
            self.stats.foreign += 1;
            return None;
        }
        if self.phase == Phase::Done {
            // Repeat a refusal or a failed verdict the sender may have missed.
            match packet.body {
                Body::Offer(_) if self.reply.is_some() => self.reply_owed = true,
                Body::Close(_) if self.verdict.is_some() => self.complete_owed = true,
                _ => {}
            }
            return None;
        }
        self.last_from_sender = now;
        match packet.body {
            Body::Hello(_) => None,
            Body::Welcome(w) => {
                if w.receiver_id == self.config.receiver_id && self.phase == Phase::Joining {
                    if w.rank == RANK_UNASSIGNED {
                        self.fail(format!("session {} is full", self.session));
                    } else {
                        self.rank = w.rank;
                        self.upstream = w.upstream.map(SocketAddr::V4);
                        self.phase = Phase::Admitted;
                        self.events.push_back(ReceiverEvent::Admitted {
                            session: self.session,
                            rank: w.rank,
                            sender: from,
                        });
                        if let Some(offer) = self.early_offer.take() {
                            self.take_up_offer(offer);
                        }
                    }
                }
                None
            }
            Body::Offer(o) => {
                match self.phase {
                    Phase::Admitted | Phase::Joining => {
                        let Some(offer) = parse_offer(&o) else {
                            self.stats.malformed += 1;
                            return None;
                        };
                        if self.phase == Phase::Admitted {
                            self.take_up_offer(offer);
                        } else {
                            // The group's Offer overtook our Welcome (they
                            // come on different sockets, and the Offer goes
                            // out as soon as the last receiver joined): keep
                            // it for the Welcome instead of waiting a whole
                            // retransmission timeout (50 ms) for its repeat.
                            self.early_offer.get_or_insert(offer);
                        }
                    }
                    Phase::Receiving | Phase::Verifying | Phase::Confirmed => {
                        self.reply_owed = true
                    }
                    _ => {}
                }
                None
            }
            Body::Data(d) => self.on_data(now, d.seq, d.poll, echo_copy(d.copy), d.payload),
            Body::Close(c) => {
                match self.phase {
                    Phase::Confirmed => self.complete_owed = true,
                    Phase::Receiving | Phase::Verifying => {
                        // The first Close's hash is the one verified
                        // against; a later Close with a different hash
                        // (a confused or hostile sender, or a forged
                        // datagram) is ignored rather than switching the
                        // target mid-verification. The sender's own check
                        // of our Complete hash catches a mismatch anyway.
                        self.expected_hash.get_or_insert(c.hash);
                        let waiting = self.phase == Phase::Receiving;
                        self.check_all_data();
                        // Ack a Close that finds this receiver missing
                        // bytes or still verifying (so the sender hears it
                        // is alive). A Close that completes what it needs
                        // is answered by the Complete the application now
                        // owes, as when every byte came after the hash.
                        if !(waiting && self.phase == Phase::Verifying) {
                            self.acks_owed += 1;
                        }
                    }
                    _ => {}
                }
                None
            }
            // The senders' rate resynchronisation: not ours to act on.
            Body::RateReport(_) | Body::RateSync(_) => None,
            Body::Bye(b) => {
                if self.phase == Phase::Confirmed {
                    self.phase = Phase::Done;
                    self.events.push_back(ReceiverEvent::Finished);
                } else {
                    let why = if b.text.is_empty() {
                        "no reason given"
                    } else {
                        b.text
                    };
                    self.fail(format!(
                        "the sender ended the session before this receiver finished: {why}"
                    ));
                }
                None
            }
            _ => {
                self.stats.foreign += 1;
                None
            }
        }
    }

    /// Takes up an offer once admitted (a rank is needed for the policy's
    /// children): the application is asked to accept or refuse it.
    fn take_up_offer(&mut self, (info, policy): (OfferInfo, FeedbackPolicy)) {
        self.policy = Some(policy);
        self.relay = policy
            .relays()
            .then(|| Relay::new(policy.children(self.rank), self.upstream));
        self.offer = Some(info.clone());
        self.phase = Phase::Deciding;
        self.events.push_back(ReceiverEvent::Offer(info));
    }

    fn on_data<'a>(
        &mut self,
        now: Instant,
        seq: Seq,
        poll: u16,
        copy: u8,
        payload: &'a [u8],
    ) -> Option<DataChunk<'a>> {
        let relays = self.relay.is_some();
        let polled = self
            .policy
            .unwrap_or(FeedbackPolicy::Ack)
            .answers_poll(poll, self.rank);
        let t = self.transfer.as_mut()?;
        let index = seq.since(t.isn);
        if index >= t.packets {
            self.stats.malformed += 1;
            return None;
        }
        let offset = u64::from(index) * t.payload_size;
        let expected_len = (t.size - offset).min(t.payload_size) as usize;
        if payload.len() != expected_len {
            self.stats.malformed += 1;
            return None;
        }
        if index >= t.cumulative.saturating_add(t.window) {
            self.stats.out_of_window += 1;
            return None;
        }
        let fresh = !t.has(index);
        if fresh {
            t.set(index);
            self.stats.data_packets += 1;
        } else {
            self.stats.duplicates += 1;
        }
        let gap = index > t.cumulative;
        if gap {
            let cumulative = t.cumulative;
            let repeat = self.last_nak.is_some_and(|(at, c)| {
                c == cumulative && now.saturating_since(at) < self.config.nak_interval
            });
            if !repeat {
                self.nak_owed = true;
                self.nak_echo = seq;
                self.nak_echo_copy = copy;
                self.last_nak = Some((now, cumulative));
                if let Some(interval) = self.config.rate_nak_interval
                    && self
                        .last_rate_nak
                        .is_none_or(|at| now.saturating_since(at) >= interval)
                {
                    self.rate_nak_owed = Some(t.isn.add(cumulative));
                    self.last_rate_nak = Some(now);
                }
            }
        }
        if polled || relays {
            self.last_echo = seq;
            self.last_echo_copy = copy;
        }
        if polled {
            self.acks_owed += 1;
        }
        if let Some(relay) = &mut self.relay {
            relay.update(t.cumulative);
        }
        self.check_all_data();
        fresh.then_some(DataChunk {
            offset,
            bytes: payload,
        })
    }

    fn check_all_data(&mut self) {
        if self.phase != Phase::Receiving {
            return;
        }
        if let Some(t) = &self.transfer
            && t.cumulative == t.packets
            && self.expected_hash.is_some()
        {
            self.phase = Phase::Verifying;
            self.events.push_back(ReceiverEvent::AllData);
        }
    }

    /// Writes the next datagram to send into `buf` and says where it goes.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let sender = self.sender?;
        let to = Dest::Unicast(sender);
        let header = Header::new(self.session, self.rank);
        if let Some(text) = self.leave_owed.take() {
            return emit(to, header, Body::Leave(Leave { text: &text }), buf);
        }
        if self.phase == Phase::Joining {
            if self.join_at > now {
                return None;
            }
            self.join_at = now + self.config.join_interval;
            let body = Body::Join(Join {
                receiver_id: self.config.receiver_id,
                name: &self.config.name,
            });
            return emit(to, header, body, buf);
        }
        if self.reply_owed {
            self.reply_owed = false;
            if let Some((status, text)) = &self.reply {
                return emit(
                    to,
                    header,
                    Body::OfferReply(OfferReply {
                        status: *status,
                        text,
                    }),
                    buf,
                );
            }
        }
        if self.complete_owed {
            self.complete_owed = false;
            if let Some((status, hash, text)) = &self.verdict {
                let body = Body::Complete(Complete {
                    status: *status,
                    hash: *hash,
                    text,
                });
                return emit(to, header, body, buf);
            }
        }
        let t = self.transfer.as_ref()?;
        if self.phase == Phase::Done {
            return None;
        }
        let cumulative = t.isn.add(t.cumulative);
        if self.nak_owed || self.acks_owed > 0 {
            let nak = self.nak_owed;
            fill_bitmap(t, &mut self.bitmap);
            let feedback = Feedback {
                cumulative,
                echo: if nak { self.nak_echo } else { self.last_echo },
                echo_copy: if nak {
                    self.nak_echo_copy
                } else {
                    self.last_echo_copy
                },
                aggregate: false,
                bitmap: &self.bitmap,
            };
            let body = if nak {
                // A NAK carries everything an ack would.
                self.nak_owed = false;
                self.acks_owed = self.acks_owed.saturating_sub(1);
                self.stats.naks += 1;
                Body::Nak(feedback)
            } else {
                self.acks_owed -= 1;
                self.stats.acks += 1;
                Body::Ack(feedback)
            };
            return emit(to, header, body, buf);
        }
        if let Some(seq) = self.rate_nak_owed.take() {
            self.stats.rate_naks += 1;
            let body = Body::RateNak(RateNak {
                kind: RateNakKind::Exp,
                seq,
            });
            return emit(Dest::Group, header, body, buf);
        }
        if let Some(relay) = &mut self.relay
            && let Some(aggregate) = relay.poll_report()
        {
            self.stats.acks += 1;
            let feedback = Feedback {
                cumulative: t.isn.add(aggregate),
                echo: self.last_echo,
                echo_copy: self.last_echo_copy,
                aggregate: true,
                bitmap: &[],
            };
            let dest = Dest::Unicast(relay.upstream().unwrap_or(sender));
            return emit(dest, header, Body::Ack(feedback), buf);
        }
        None
    }

    /// Tree: a child's aggregated acknowledgement. Returns false if `rank`
    /// is not a child of this receiver (or nothing is being received).
    fn on_child_ack(&mut self, rank: u16, cumulative: Seq) -> bool {
        let (Some(relay), Some(t)) = (&mut self.relay, &self.transfer) else {
            return false;
        };
        match relay.on_child_ack(rank, cumulative.since(t.isn), t.packets, t.cumulative) {
            ChildAck::NotAChild => false,
            ChildAck::Malformed => {
                self.stats.malformed += 1;
                true
            }
            ChildAck::Taken => true,
        }
    }

    fn fail(&mut self, reason: String) {
        if self.phase == Phase::Done {
            return;
        }
        self.phase = Phase::Done;
        self.events.push_back(ReceiverEvent::Failed(reason));
    }
}

/// Largest bitmap sent with feedback: 2048 packets past the cumulative point.
const MAX_BITMAP_BYTES: usize = 256;

/// Writes the held-packet bitmap after `t.cumulative` (up to the highest
/// packet held) into `out`.
fn fill_bitmap(t: &Transfer, out: &mut Vec<u8>) {
    out.clear();
    let first = t.cumulative + 1;
    let end = t.highest.min(first + 8 * MAX_BITMAP_BYTES as u32);
    if end <= first {
        return;
    }
    out.resize((end - first).div_ceil(8) as usize, 0);
    for index in first..end {
        if t.has(index) {
            let bit = index - first;
            out[(bit / 8) as usize] |= 1 << (bit % 8);
        }
    }
}

fn emit(dest: Dest, header: Header, body: Body<'_>, buf: &mut [u8]) -> Option<Transmit> {
    let kind: Kind = body.kind();
    let len = Packet { header, body }.encode(buf).ok()?;
    Some(Transmit { dest, len, kind })
}

/// A text field's value: at most 255 bytes, cut at a character boundary.
fn truncate(text: &str) -> String {
    truncate_utf8(text, 255).to_owned()
}

/// A data packet's `copy` as feedback carries it: 7 bits, saturating.
fn echo_copy(copy: u16) -> u8 {
    u8::try_from(copy).map_or(ECHO_COPY_MAX, |c| c.min(ECHO_COPY_MAX))
}

/// An Offer's terms, or `None` when they cannot describe an object
/// (a packet count that does not fit, an unknown protocol parameter).
fn parse_offer(o: &rmcast_wire::Offer<'_>) -> Option<(OfferInfo, FeedbackPolicy)> {
    let packets = match u32::try_from(o.object_size.div_ceil(u64::from(o.payload_size))) {
        Ok(p) if p < u32::MAX => p,
        _ => return None,
    };
    let policy = FeedbackPolicy::from_offer(o.protocol, o.protocol_param, o.receivers)?;
    let info = OfferInfo {
        name: o.name.to_owned(),
        size: o.object_size,
        protocol: o.protocol,
        payload_size: o.payload_size,
        window: o.window,
        receivers: o.receivers,
        isn: o.isn,
        test_loss_ppm: o.test_loss_ppm,
        packets,
    };
    Some((info, policy))
}

#[cfg(test)]
mod tests {
    //! The hash to verify against comes from `Close`: no verification
    //! before it, and the first one wins.

    use super::*;
    use rmcast_wire::{Close, Data, Hello, Offer, POLL_NONE, Welcome};

    const SESSION: SessionId = SessionId(5);
    const ID: u64 = 77;
    const PAYLOAD: u16 = 1000;
    const SIZE: u64 = 2500;

    fn sender() -> SocketAddr {
        "10.0.0.1:5000".parse().unwrap()
    }

    fn packet(body: Body<'_>) -> Vec<u8> {
        let mut buf = vec![0u8; 4096];
        let n = Packet {
            header: Header::new(SESSION, RANK_SENDER),
            body,
        }
        .encode(&mut buf)
        .unwrap();
        buf.truncate(n);
        buf
    }

    fn events(r: &mut Receiver) -> Vec<ReceiverEvent> {
        std::iter::from_fn(|| r.poll_event()).collect()
    }

    /// A receiver listening for any session.
    fn fresh() -> Receiver {
        Receiver::new(
            ReceiverConfig {
                receiver_id: ID,
                ..ReceiverConfig::default()
            },
            Instant::ZERO,
        )
    }

    /// The sender's Hello, Welcome (rank 0) and Offer of a 3-packet object.
    fn handshake() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let hello = packet(Body::Hello(Hello {
            receivers_wanted: 1,
            protocol: ProtocolId::NakPoll,
        }));
        let welcome = packet(Body::Welcome(Welcome {
            receiver_id: ID,
            rank: 0,
            upstream: None,
        }));
        let offer = packet(Body::Offer(Offer {
            object_size: SIZE,
            isn: Seq(10),
            payload_size: PAYLOAD,
            window: 8,
            protocol: ProtocolId::NakPoll,
            protocol_param: 0,
            receivers: 1,
            test_loss_ppm: 0,
            name: "obj.bin",
        }));
        (hello, welcome, offer)
    }

    #[test]
    fn an_offer_that_overtakes_the_welcome_is_taken_up_with_it() {
        let now = Instant::ZERO;
        let mut r = fresh();
        let (hello, welcome, offer) = handshake();
        r.handle_datagram(now, sender(), &hello);
        r.handle_datagram(now, sender(), &offer);
        assert!(
            !events(&mut r)
                .iter()
                .any(|e| matches!(e, ReceiverEvent::Offer(_))),
            "an offer before the Welcome has no rank to go with it"
        );
        r.handle_datagram(now, sender(), &welcome);
        let ev = events(&mut r);
        assert!(matches!(ev[0], ReceiverEvent::Admitted { rank: 0, .. }));
        assert!(
            matches!(&ev[1], ReceiverEvent::Offer(o) if o.size == SIZE && o.packets == 3),
            "{ev:?}"
        );
        r.accept_offer();
        let mut buf = vec![0u8; 4096];
        let kinds: Vec<Kind> = std::iter::from_fn(|| r.poll_transmit(now, &mut buf))
            .map(|t| t.kind)
            .collect();
        assert!(kinds.contains(&Kind::OfferReply), "{kinds:?}");
    }

    /// A receiver admitted, offered a 3-packet object, accepted, and
    /// given every data packet.
    fn with_every_byte() -> Receiver {
        let r = holding(&[0, 1, 2]);
        assert_eq!(r.received_bytes(), SIZE);
        r
    }

    /// A receiver admitted, offered a 3-packet object, accepted, and
    /// given the data packets `indexes`.
    fn holding(indexes: &[u32]) -> Receiver {
        let now = Instant::ZERO;
        let mut r = fresh();
        let (hello, welcome, offer) = handshake();
        for p in [&hello, &welcome, &offer] {
            assert!(r.handle_datagram(now, sender(), p).is_none());
        }
        assert!(
            events(&mut r)
                .iter()
                .any(|e| matches!(e, ReceiverEvent::Offer(_)))
        );
        r.accept_offer();
        let bytes = [0u8; PAYLOAD as usize];
        for &i in indexes {
            let len = (SIZE - u64::from(i) * u64::from(PAYLOAD)).min(u64::from(PAYLOAD));
            let data = packet(Body::Data(Data {
                seq: Seq(10 + i),
                poll: POLL_NONE,
                copy: 0,
                payload: &bytes[..len as usize],
            }));
            assert!(r.handle_datagram(now, sender(), &data).is_some());
        }
        r
    }

    #[test]
    fn every_byte_in_is_not_enough_to_verify_without_the_close_hash() {
        let mut r = with_every_byte();
        assert_eq!(r.expected_hash(), None);
        assert!(
            !events(&mut r).contains(&ReceiverEvent::AllData),
            "asked to verify before the hash is known"
        );
        // Nothing to confirm yet: a verdict now is ignored.
        r.confirm(Status::Ok, [1; HASH_LEN], "");
        let mut buf = vec![0u8; 4096];
        while let Some(t) = r.poll_transmit(Instant::ZERO, &mut buf) {
            assert_ne!(t.kind, Kind::Complete);
        }

        let close = packet(Body::Close(Close {
            hash: [1; HASH_LEN],
        }));
        r.handle_datagram(Instant::ZERO, sender(), &close);
        assert_eq!(r.expected_hash(), Some([1; HASH_LEN]));
        assert_eq!(events(&mut r), [ReceiverEvent::AllData]);
        r.confirm(Status::Ok, [1; HASH_LEN], "");
        let t = r.poll_transmit(Instant::ZERO, &mut buf).unwrap();
        assert_eq!(t.kind, Kind::Complete, "the Complete answers the Close");
    }

    #[test]
    fn the_first_close_hash_wins() {
        let mut r = with_every_byte();
        let first = packet(Body::Close(Close {
            hash: [1; HASH_LEN],
        }));
        let other = packet(Body::Close(Close {
            hash: [2; HASH_LEN],
        }));
        r.handle_datagram(Instant::ZERO, sender(), &first);
        r.handle_datagram(Instant::ZERO, sender(), &other);
        assert_eq!(r.expected_hash(), Some([1; HASH_LEN]));
        assert_eq!(events(&mut r), [ReceiverEvent::AllData]);
    }

    #[test]
    fn a_close_before_the_last_byte_is_acked_and_verification_waits_for_it() {
        let now = Instant::ZERO;
        let mut r = holding(&[0, 2]);
        let _ = events(&mut r);
        let mut buf = vec![0u8; 4096];
        while r.poll_transmit(now, &mut buf).is_some() {}
        let close = packet(Body::Close(Close {
            hash: [3; HASH_LEN],
        }));
        r.handle_datagram(now, sender(), &close);
        assert_eq!(r.expected_hash(), Some([3; HASH_LEN]));
        assert!(!events(&mut r).contains(&ReceiverEvent::AllData));
        let t = r.poll_transmit(now, &mut buf).expect("the Close is acked");
        assert_eq!(t.kind, Kind::Ack);
        // The missing packet arrives: now, and only now, verify.
        let data = packet(Body::Data(Data {
            seq: Seq(11),
            poll: POLL_NONE,
            copy: 1,
            payload: &[0u8; PAYLOAD as usize],
        }));
        assert!(r.handle_datagram(now, sender(), &data).is_some());
        assert_eq!(events(&mut r), [ReceiverEvent::AllData]);
    }
}
