//! The receiver's state machine: join a session, answer the offer, take
//! data in any order, acknowledge as polled, NAK gaps, confirm the hash.
//!
//! [`Receiver`] is the public face (`handle_*`, `poll_*`, getters and the
//! application's answers); the phases' logic lives beside it:
//!
//! | file | what |
//! |---|---|
//! | `config.rs` | [`ReceiverConfig`] |
//! | `events.rs` | [`OfferInfo`], [`ReceiverEvent`], [`DataChunk`], [`ReceiverStats`] |
//! | `admission.rs` | `Hello`, `Join`/`Welcome`, the offer and the answer to it |
//! | `data.rs` | the held-packet bitmap, gaps and polls, the chunks to store |
//! | `feedback.rs` | acks, NAKs, `RateNak`s, a tree relay's aggregated acks |
//! | `close.rs` | `Close` and its hash, verification, `Complete`, `Bye` |
//! | `have.rs` | resume and delta: the `Have` report of what the driver found on its disk |
//!
//! Tree relaying (children's reports, aggregation) is the tree policy's
//! `Relay`; the receiver only feeds it and sends what it owes.

mod admission;
pub(crate) use admission::{JOIN_ANSWER_WAIT, join_spread};
mod close;
mod config;
mod data;
mod events;
mod fec;
mod feedback;
pub(crate) use feedback::SPREAD_FROM;
mod have;
mod moved;
#[cfg(test)]
mod test_support;

pub use config::ReceiverConfig;
pub use events::{DataChunk, OfferInfo, ReceiverEvent, ReceiverStats};
pub use fec::{NoReadBack, ReadBack};

use crate::security::{AuthFailures, Seal};
use crate::transfer::emit;
use crate::transfer::policy::relay::Relay;
use crate::{Dest, FeedbackPolicy, Instant, Transmit, truncate_utf8};
use data::{Transfer, echo_copy};
use feedback::FeedbackState;
use rmcast_wire::{
    Behind, Body, Complete, FLAG_ALONE, HASH_LEN, Header, Join, Leave, OfferReply, Packet,
    RANK_SENDER, RANK_UNASSIGNED, SessionId, Status,
};
use std::collections::VecDeque;
use std::net::SocketAddr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
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
    /// Moved by the sender to a TCP catch-up (`Move`): deaf to the session
    /// until the driver says how the catch-up ended.
    Moved,
    Done,
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
    /// When the last `Join` went (see [`Receiver::on_hello_joining`]).
    join_sent: Option<Instant>,
    offer: Option<OfferInfo>,
    /// The object's hash, from the first `Close` heard.
    expected_hash: Option<[u8; HASH_LEN]>,
    /// The sender's signature of the object, from the same `Close`.
    expected_signature: Option<[u8; rmcast_wire::SIGNATURE_LEN]>,
    reply: Option<(Status, String)>,
    verdict: Option<(Status, [u8; HASH_LEN], String)>,
    /// An Offer heard before our Welcome, taken up when the Welcome comes.
    early_offer: Option<(OfferInfo, FeedbackPolicy)>,
    transfer: Option<Transfer>,
    /// What the receiver owes the sender about the data.
    feedback: FeedbackState,
    /// The session's feedback policy, from the offer.
    policy: Option<FeedbackPolicy>,
    /// Tree: the parent the `Welcome` named (`None`: the sender).
    upstream: Option<SocketAddr>,
    /// Tree: relaying the subtree's acknowledgements, from the offer on.
    relay: Option<Relay>,
    reply_owed: bool,
    complete_owed: bool,
    leave_owed: Option<String>,
    /// A relay's word about the receivers behind it, owed to the sender
    /// ([`Receiver::report_behind`]).
    behind_owed: Option<(u16, String)>,
    events: VecDeque<ReceiverEvent>,
    stats: ReceiverStats,
    /// The keys of the sessions heard, when sealing, and who sent packets
    /// that did not authenticate, for the messages.
    seal: Seal,
    /// Resume and delta: the report of what the driver found on its disk.
    have: Option<have::HaveReport>,
    /// The whole group's outcome, from the sender's farewell `Bye`.
    group: Option<Result<(), String>>,
    /// Block FEC, when the offer carries it.
    fec: Option<fec::FecReceiver>,
}

impl Receiver {
    /// A receiver listening for a session, starting at `now`.
    #[must_use]
    pub fn new(mut config: ReceiverConfig, now: Instant) -> Self {
        config.name = truncate_utf8(&config.name, 255).to_owned();
        Self {
            phase: Phase::Listening,
            started: now,
            session: SessionId(0),
            sender: None,
            rank: RANK_UNASSIGNED,
            last_from_sender: now,
            join_at: now,
            join_sent: None,
            offer: None,
            expected_hash: None,
            expected_signature: None,
            reply: None,
            verdict: None,
            early_offer: None,
            transfer: None,
            feedback: FeedbackState::default(),
            policy: None,
            upstream: None,
            relay: None,
            reply_owed: false,
            complete_owed: false,
            leave_owed: None,
            behind_owed: None,
            events: VecDeque::new(),
            stats: ReceiverStats::default(),
            seal: Seal::receiver(config.group_key.as_ref()),
            have: None,
            group: None,
            fec: None,
            config,
        }
    }

    /// The whole group's outcome as the sender's farewell `Bye` told it,
    /// once this receiver's copy is verified: `Ok` when every receiver the
    /// sender wanted verified, else the sender's words on who did not.
    /// `None` until then, and when no `Bye` was heard.
    #[must_use]
    pub fn group_outcome(&self) -> Option<&Result<(), String>> {
        self.group.as_ref()
    }

    /// Sources whose packets did not authenticate, and why.
    #[must_use]
    pub fn auth_failures(&self) -> &AuthFailures {
        self.seal.failures()
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

    /// The session joined, once a `Hello` was heard (still `None` after
    /// failing with nothing announced).
    #[must_use]
    pub fn session(&self) -> Option<SessionId> {
        self.sender.is_some().then_some(self.session)
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

    /// The sender's Ed25519 signature of the object, if its `Close`
    /// carried one (with [`Receiver::expected_hash`]): a driver that trusts
    /// only signed content checks it before confirming.
    #[must_use]
    pub fn expected_signature(&self) -> Option<[u8; rmcast_wire::SIGNATURE_LEN]> {
        self.expected_signature
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

    /// A relay (`rmcast relay`) tells the sender who receives through it:
    /// `receivers` in all, `names` as many as fit (cut to 255 bytes at a
    /// name's end). The sender names them if the relay fails. Sent once,
    /// best effort, while the session runs.
    pub fn report_behind(&mut self, receivers: u16, names: &[&str]) {
        if matches!(self.phase, Phase::Done | Phase::Listening) {
            return;
        }
        let mut list = String::new();
        for name in names {
            let more = usize::from(!list.is_empty()) + name.len();
            if list.len() + more > 255 {
                break;
            }
            if !list.is_empty() {
                list.push(',');
            }
            list.push_str(name);
        }
        self.behind_owed = Some((receivers, list));
    }

    /// When the machine next needs [`Receiver::handle_timeout`].
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Done | Phase::Moved => None,
            Phase::Listening => self.config.listen_timeout.map(|t| self.started + t),
            Phase::Joining => Some(self.join_at.min(self.sender_deadline())),
            _ => {
                let have = self.have.as_ref().and_then(have::HaveReport::deadline);
                let idle = self
                    .feedback
                    .idle_nak_at
                    .filter(|_| self.phase == Phase::Receiving);
                let other = match (have, idle) {
                    (Some(h), Some(i)) => Some(h.min(i)),
                    (h, i) => h.or(i),
                };
                let other = match (other, self.feedback.hold_until) {
                    (Some(o), Some(h)) => Some(o.min(h)),
                    (o, h) => o.or(h),
                };
                Some(other.map_or(self.sender_deadline(), |o| o.min(self.sender_deadline())))
            }
        }
    }

    fn sender_deadline(&self) -> Instant {
        self.last_from_sender + self.config.sender_timeout
    }

    /// Processes expired timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.phase {
            Phase::Done | Phase::Moved => {}
            Phase::Listening => {
                if let Some(t) = self.config.listen_timeout
                    && now >= self.started + t
                {
                    let why = self
                        .seal
                        .failures()
                        .describe()
                        .map(|d| format!("; packets that did not authenticate: {d}"))
                        .unwrap_or_default();
                    self.fail(format!(
                        "no session was announced within {:.1} s{why}",
                        t.as_secs_f64()
                    ));
                }
            }
            Phase::Receiving if now < self.sender_deadline() => self.on_idle_nak(now),
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

    /// Processes one datagram; returns object bytes to store, if it carried
    /// new ones. When sealing, the datagram is opened in place first (the
    /// chunk then borrows the decrypted bytes); one that does not
    /// authenticate is counted ([`ReceiverStats::auth`]) and dropped before
    /// anything else looks at it.
    pub fn handle_datagram<'a>(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &'a mut [u8],
    ) -> Option<DataChunk<'a>> {
        self.handle_datagram_reading(now, from, datagram, &mut NoReadBack)
    }

    /// [`Receiver::handle_datagram`] for a receiver that keeps no copy of
    /// its data packets ([`ReceiverConfig::fec_read_back`]): when FEC
    /// rebuilds a block, the block's packets this receiver was delivered
    /// are read back from `store`, the driver's storage. Every chunk
    /// returned (and from [`Receiver::poll_repaired`]) must be stored
    /// before the next call, so that `store` can give it back.
    pub fn handle_datagram_reading<'a>(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &'a mut [u8],
        store: &mut dyn ReadBack,
    ) -> Option<DataChunk<'a>> {
        let opened = self.seal.open(from, datagram);
        self.stats.auth = self.seal.stats();
        let datagram = opened.ok()?;
        let packet = match Packet::decode(datagram) {
            Ok(p) => p,
            Err(_) => {
                self.stats.malformed += 1;
                return None;
            }
        };
        if let Body::RateNak(_) = packet.body {
            self.on_rate_nak(now, packet.header);
            return None;
        }
        if packet.header.rank != RANK_SENDER {
            self.on_peer_packet(packet.header, &packet.body);
            return None;
        }
        if self.phase == Phase::Listening {
            self.on_listening(now, from, packet.header, &packet.body);
            return None;
        }
        if packet.header.session != self.session || Some(from) != self.sender {
            self.stats.foreign += 1;
            return None;
        }
        if self.phase == Phase::Moved {
            return None;
        }
        let alone = packet.header.flags & FLAG_ALONE != 0;
        let spread_shift = self.feedback.spread_shift;
        if self.phase == Phase::Done {
            // Repeat a refusal or a failed verdict the sender may have missed.
            match packet.body {
                Body::Offer(_) if self.reply.is_some() => self.reply_owed = true,
                Body::Close(_) if self.verdict.is_some() => self.complete_owed = true,
                _ => {}
            }
            if alone {
                self.answer_alone(now, spread_shift);
            }
            return None;
        }
        self.last_from_sender = now;
        let chunk = self.on_sender_body(now, from, packet.body, store);
        if alone {
            self.answer_alone(now, spread_shift);
        }
        chunk
    }

    /// A datagram the sender sent to this receiver alone ([`FLAG_ALONE`]:
    /// an `Offer` or `Close` asked again, a poll of this member): what this
    /// receiver owes goes now rather than in its slot of a large group
    /// (one answer cannot implode), and its slot does not widen (the
    /// sender lacks this member's answer, not the group's:
    /// `spread_shift` is the shift from before the datagram).
    fn answer_alone(&mut self, now: Instant, spread_shift: u8) {
        self.feedback.spread_shift = spread_shift;
        let owed = self.reply_owed
            || self.complete_owed
            || self.feedback.nak_owed
            || self.feedback.acks_owed > 0;
        if owed {
            self.feedback.hold_until = Some(now);
        }
    }

    /// The body of a datagram from this session's sender.
    fn on_sender_body<'a>(
        &mut self,
        now: Instant,
        from: SocketAddr,
        body: Body<'a>,
        store: &mut dyn ReadBack,
    ) -> Option<DataChunk<'a>> {
        match body {
            Body::Hello(hello) => {
                self.on_hello_joining(now, hello.receivers_wanted);
                None
            }
            Body::Welcome(w) => {
                self.on_welcome(from, &w);
                None
            }
            Body::Welcomes(list) => {
                let me = self.config.receiver_id;
                if let Some(w) = list.entries().find(|w| w.receiver_id == me) {
                    self.on_welcome(from, &w);
                }
                None
            }
            Body::Offer(o) => {
                self.on_offer(&o);
                None
            }
            Body::Data(d) => {
                let copy = echo_copy(d.copy);
                self.on_data(now, d.seq, d.poll, copy, d.payload, store)
            }
            Body::Parity(p) => {
                self.on_parity(now, &p, store);
                None
            }
            Body::Close(c) => {
                if let Some(h) = &mut self.have {
                    h.finish();
                }
                if self.expected_hash.is_none() {
                    self.expected_signature = c.signature;
                }
                self.on_close(c.hash);
                None
            }
            // The senders' rate resynchronisation: not ours to act on.
            Body::RateReport(_) | Body::RateSync(_) => None,
            Body::Bye(b) => {
                self.on_bye(b.text);
                None
            }
            Body::Move(m) => {
                self.on_move(from, m);
                None
            }
            _ => {
                self.stats.foreign += 1;
                None
            }
        }
    }

    /// Writes the next datagram to send into `buf` (at least
    /// [`crate::MAX_DATAGRAM`] bytes) and says where it goes; sealed under
    /// the session's keys when sealing.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let mut t = self.next_transmit(now, buf)?;
        // Group-scoped rate packets carry the session nonce: the other
        // senders of the group derive this session's keys from it. No keys
        // (nothing authentic heard from the session): nothing to answer.
        let with_nonce = t.kind == rmcast_wire::Kind::RateNak;
        t.len = self.seal.seal(buf, t.len, with_nonce)?;
        self.stats.auth = self.seal.stats();
        Some(t)
    }

    fn next_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let sender = self.sender?;
        let to = Dest::Unicast(sender);
        let header = Header::new(self.session, self.rank);
        if let Some(text) = self.leave_owed.take() {
            return emit(to, header, Body::Leave(Leave { text: &text }), buf);
        }
        if self.phase != Phase::Joining
            && let Some((receivers, names)) = self.behind_owed.take()
        {
            let body = Body::Behind(Behind {
                receivers,
                names: &names,
            });
            return emit(to, header, body, buf);
        }
        if self.phase == Phase::Moved {
            return None;
        }
        if self.phase == Phase::Joining {
            if self.join_at > now {
                return None;
            }
            self.join_at = now + self.config.join_interval;
            self.join_sent = Some(now);
            let body = Body::Join(Join {
                receiver_id: self.config.receiver_id,
                name: &self.config.name,
            });
            return emit(to, header, body, buf);
        }
        if self.reply_owed && self.spread_due(now) {
            self.feedback.hold_until = None;
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
        self.verdict_answers_polls();
        if self.complete_owed && self.spread_due(now) {
            self.feedback.hold_until = None;
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
        if let Some(t) = self.poll_have(now, to, header, buf) {
            return Some(t);
        }
        self.poll_feedback(now, sender, header, buf)
    }

    fn fail(&mut self, reason: String) {
        if self.phase == Phase::Done {
            return;
        }
        self.phase = Phase::Done;
        self.events.push_back(ReceiverEvent::Failed(reason));
    }
}

/// A text field's value: at most 255 bytes, cut at a character boundary.
fn truncate(text: &str) -> String {
    truncate_utf8(text, 255).to_owned()
}
