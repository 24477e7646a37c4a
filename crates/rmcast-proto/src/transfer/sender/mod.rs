//! The sender's state machine: admission, buffer handshake, windowed data
//! with Go-back-N or selective repair, and the close handshake.
//!
//! [`Sender`] is the public face in quinn-proto's style (`handle_*` for
//! input, `poll_*` for output, getters, a few mutators) and is composed of
//! sub-states, each in its own file with the logic that owns it:
//!
//! | file | sub-state | what |
//! |---|---|---|
//! | `config.rs` | [`SenderConfig`] | the settings, [`ConfigError`] and validation |
//! | `membership.rs` | `Membership` | members, admission (`Join`/`Welcome`), offer answers, peer timeouts, failure |
//! | `window.rs` | `Window` | `base`/`next`/`high`, per-slot sends and losses, Go-back-N and selective repair, the stall poll, the RTO |
//! | `pacing.rs` | `Pacing` | off, fixed token bucket, or Hunt's controller and the rate group |
//! | `control.rs` | `Round` | the phase's repeated multicast packet (Hello, Offer, Close, Bye), the keepalive, the `Offer` or `Close` again to the few silent |
//! | `repoll.rs` | | re-polls: the members a poll round's answers left silent, asked again by unicast |
//! | `close.rs` | | `Complete`s against the hash, the farewell, the outcome |
//! | `delta.rs` | `Delta` | resume and delta: the receivers' `Have` reports, the packets nobody lacks |
//! | `watchdog.rs` | | the progress watchdog and its report |
//! | `timers.rs` | `Timers` | the timer table; `poll_timeout` is its minimum |
//! | `events.rs` | | [`SenderEvent`], [`SenderStats`], [`Outcome`] |
//!
//! How the packets poll (the protocols) is the feedback policy's business
//! (`crate::transfer::policy::SenderPolicy`), tree relaying included.

mod close;
#[cfg(test)]
mod close_with_data_tests;
mod config;
mod control;
mod delta;
mod events;
mod fec;
#[cfg(test)]
mod feedback_reach_tests;
mod laggard;
mod membership;
#[cfg(test)]
mod overclaim_tests;
mod pacing;
mod repoll;
#[cfg(test)]
mod repoll_tests;
#[cfg(test)]
mod test_pair;
mod timers;
mod watchdog;
#[cfg(test)]
mod welcomes_tests;
mod window;

pub use config::{ConfigError, Laggard, Repair, SenderConfig, WIRE_OVERHEAD_BYTES};
pub use events::{MemberOutcome, Outcome, SenderEvent, SenderStats};
pub use laggard::EJECTED_LAGGARD;

use crate::security::{AuthFailures, Seal};
use crate::transfer::emit;
use crate::transfer::policy::SenderPolicy;
use crate::{
    Dest, ErrorSignal, Instant, PayloadSource, RateController, RateGroup, Transmit, truncate_utf8,
};
use membership::{MemberState, Membership};
use pacing::{Mode, Pacing};
use rmcast_wire::{
    Body, Bye, HASH_LEN, Header, Packet, RANK_SENDER, RatePhase, Seq, SessionId, Welcome,
};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;
use timers::{Timer, Timers};
use window::Window;

/// The object a sender offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Length in bytes.
    pub size: u64,
    /// Name the receivers store it under (a relative path).
    pub name: String,
    /// BLAKE3 hash of the bytes; `None` while the driver is still computing
    /// it (give it with [`Sender::set_object_hash`]). The hash travels in
    /// `Close`, so the session can start, and the data flow, without it.
    pub hash: Option<[u8; HASH_LEN]>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Joining,
    Offering,
    Sending,
    Closing,
    Farewell { byes_left: u8 },
    Done,
}

/// What a configuration makes of the object: the payload per packet, the
/// packets, the resume/delta barrier and the FEC sender.
struct Shaped {
    payload_size: usize,
    packets: u32,
    delta: Option<delta::Delta>,
    fec: Option<fec::FecSender>,
}

impl Shaped {
    fn new(config: &SenderConfig, size: u64) -> Result<Self, ConfigError> {
        let payload_size = config.payload_size();
        let packets = size.div_ceil(payload_size as u64);
        let packets = u32::try_from(packets)
            .ok()
            .filter(|&p| p < u32::MAX)
            .ok_or(ConfigError::ObjectTooLarge {
                size,
                payload: payload_size,
            })?;
        let delta = config
            .have_after
            .map(|bytes| bytes.div_ceil(payload_size as u64))
            .filter(|&barrier| barrier < u64::from(packets))
            .map(|barrier| delta::Delta::new(barrier as u32));
        let fec = match config.fec {
            Some(shape) => Some(
                fec::FecSender::new(shape, payload_size, config.window)
                    .ok_or(ConfigError::Fec(shape))?,
            ),
            None => None,
        };
        Ok(Self {
            payload_size,
            packets,
            delta,
            fec,
        })
    }
}

/// The sending side of one transfer.
pub struct Sender {
    config: SenderConfig,
    policy: SenderPolicy,
    /// Receivers first expected, when the session started with fewer
    /// (`SenderConfig::min_receivers`); `config.receivers` is then the
    /// number that joined.
    short: Option<u16>,
    /// Receivers the session waits for in all, as configured: a hybrid
    /// session serves some of them over TCP ([`Sender::serve_elsewhere`]).
    wanted: u16,
    /// When the last `Hello` went out ([`Sender::announce_again`]), and
    /// how many receivers it said the session still waits for.
    last_hello: Option<Instant>,
    hello_wanted: u16,
    /// When to look for laggards next (`Laggard::Eject`, while sending).
    laggard_check: Option<Instant>,
    session: SessionId,
    isn: Seq,
    object: ObjectInfo,
    payload_size: usize,
    packets: u32,
    phase: Phase,
    started: Instant,
    phase_since: Instant,
    /// Last progress of the session (see [`SenderConfig::stall_timeout`]).
    progress_at: Instant,
    /// The backed-off timeout of what the phase repeats (the Offer, the
    /// window's base, the keepalive, the Close).
    rto: Duration,
    /// Hellos announced so far (the first few go faster: [`HELLO_FIRST`]).
    hellos_sent: u32,
    members: Membership,
    window: Window,
    pacing: Pacing,
    timers: Timers,
    /// The phase's multicast control packet goes at the next `poll_transmit`.
    control_due: bool,
    /// The answers to the latest `Offer` or `Close` (see `control.rs`).
    round: control::Round,
    /// When the first `Close` went out: receivers owe a `Complete` only
    /// from then on (none goes before the object's hash is known).
    close_sent: Option<Instant>,
    events: VecDeque<SenderEvent>,
    outcome: Option<Outcome>,
    error: Option<String>,
    stats: SenderStats,
    /// The session's keys when sealing (`SenderConfig::group_key`), and who
    /// sent packets that did not authenticate, for the reports.
    seal: Seal,
    /// The object's signature, carried in `Close` (`rmcast send --sign`).
    signature: Option<[u8; rmcast_wire::SIGNATURE_LEN]>,
    /// Resume and delta ([`SenderConfig::have_after`]).
    delta: Option<delta::Delta>,
    /// Block FEC ([`SenderConfig::fec`]).
    fec: Option<fec::FecSender>,
    /// Bytes of the object the source holds so far ([`Sender::set_available`]):
    /// the whole object unless a driver streams it in (a relay).
    available: u64,
}

impl Sender {
    /// A sender for `object` in session `session`, starting at `now`.
    /// `isn` is the first data packet's sequence number (random in practice).
    pub fn new(
        config: SenderConfig,
        session: SessionId,
        isn: Seq,
        object: ObjectInfo,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let policy = config.policy()?;
        if config.auto.is_some() {
            // What auto would choose for the group expected must run too,
            // so a setting that cannot fails here, not after registration.
            Self::auto_config(&config, &object)?;
        }
        if object.name.len() > 255 {
            return Err(ConfigError::NameTooLong(object.name.len()));
        }
        let mut timers = Timers::default();
        timers.set(Timer::Control, Some(now));
        let object_size = object.size;
        let Shaped {
            payload_size,
            packets,
            delta,
            fec,
        } = Shaped::new(&config, object.size)?;
        let mut sender = Self {
            fec,
            window: Window::new(config.window, now),
            pacing: Pacing::new(&config, session, now),
            members: Membership::new(config.receivers),
            timers,
            rto: config.rto,
            hellos_sent: 0,
            policy: SenderPolicy::new(policy),
            short: None,
            wanted: config.receivers,
            last_hello: None,
            hello_wanted: config.receivers,
            laggard_check: None,
            session,
            isn,
            object,
            payload_size,
            packets,
            phase: Phase::Joining,
            started: now,
            control_due: true,
            round: control::Round::default(),
            close_sent: None,
            phase_since: now,
            progress_at: now,
            events: VecDeque::new(),
            outcome: None,
            error: None,
            stats: SenderStats::default(),
            seal: Seal::sender(config.group_key.as_ref(), session, config.session_nonce),
            signature: None,
            delta,
            available: object_size,
            config,
        };
        sender.arm_timers();
        Ok(sender)
    }

    /// The configuration `--protocol auto` makes of `config` for the group
    /// in `config.receivers`, checked, with the choice and what it makes
    /// of the object.
    fn auto_config(
        config: &SenderConfig,
        object: &ObjectInfo,
    ) -> Result<(SenderConfig, crate::AutoChoice, Shaped), ConfigError> {
        let auto = config.auto.unwrap_or_default();
        let inputs = crate::AutoInputs {
            receivers: config.receivers,
            object_bytes: object.size,
            delta: config.have_after.is_some(),
            rate_bits_per_s: config.rate_bits_per_s,
        };
        let choice = crate::auto::choose(inputs, auto, config);
        let mut chosen = config.clone();
        choice.apply(&mut chosen);
        chosen.validate()?;
        let shaped = Shaped::new(&chosen, object.size)?;
        Ok((chosen, choice, shaped))
    }

    /// `--protocol auto`: registration is over, so the group is known;
    /// choose the data phase for it and rebuild what depends on it (the
    /// feedback policy, the window, the payload per packet, FEC). Nothing
    /// has been sent yet but announcements. Without auto: nothing to do.
    fn choose_data_phase(&mut self, now: Instant) -> Result<(), String> {
        if self.config.auto.is_none() {
            return Ok(());
        }
        let cannot =
            |e: ConfigError| format!("auto cannot run {} receivers: {e}", self.config.receivers);
        let (config, choice, shaped) =
            Self::auto_config(&self.config, &self.object).map_err(cannot)?;
        // Checked by `validate` in `auto_config`.
        let policy = config.policy().map_err(cannot)?;
        self.policy = SenderPolicy::new(policy);
        self.window = Window::new(config.window, now);
        self.payload_size = shaped.payload_size;
        self.packets = shaped.packets;
        self.delta = shaped.delta;
        self.fec = shaped.fec;
        self.config = config;
        self.events.push_back(SenderEvent::Chose(Box::new(choice)));
        Ok(())
    }

    /// Streams the object in: only its first `bytes` are in the source
    /// yet (a relay forwarding what it receives, as it receives it). Data
    /// packets go out as far as the bytes reach, whole packets only but
    /// the last; the rest waits for the next call, which the driver makes
    /// as more arrives (then polls again). A sender starts with the whole
    /// object available; a driver that streams sets 0 before the first
    /// poll. Bytes once available stay so: a smaller value is ignored.
    /// Everything else (admission, repair, `Close` once the hash is given)
    /// runs as usual, so the session's tail waits for the source as it
    /// waits for a hash still being computed.
    pub fn set_available(&mut self, bytes: u64) {
        let bytes = bytes.min(self.object.size);
        if matches!(self.phase, Phase::Joining | Phase::Offering) && bytes < self.available {
            // Before anything was sent, the driver may start from less.
            self.available = bytes;
        } else {
            self.available = self.available.max(bytes);
        }
        self.arm_timers();
    }

    /// Bytes of the object the source holds ([`Sender::set_available`]).
    #[must_use]
    pub fn available(&self) -> u64 {
        self.available
    }

    /// Packets whose bytes are all in the source: the whole object's
    /// packets once every byte is.
    pub(super) fn readable_packets(&self) -> u32 {
        if self.available >= self.object.size {
            self.packets
        } else {
            // Fewer than `packets`, which fits in u32.
            (self.available / self.payload_size as u64) as u32
        }
    }

    /// The configuration in effect: as given, or, once `--protocol auto`
    /// chose ([`SenderEvent::Chose`]), with its choice.
    #[must_use]
    pub fn config(&self) -> &SenderConfig {
        &self.config
    }

    /// Object bytes per data packet in effect (it changes when auto
    /// chooses FEC).
    #[must_use]
    pub fn payload_size(&self) -> usize {
        self.payload_size
    }

    /// The session this sender runs.
    #[must_use]
    pub fn session(&self) -> SessionId {
        self.session
    }

    /// Number of data packets in the object.
    #[must_use]
    pub fn packets(&self) -> u32 {
        self.packets
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> &SenderStats {
        &self.stats
    }

    /// Object bytes every live receiver has acknowledged.
    #[must_use]
    pub fn acked_bytes(&self) -> u64 {
        (u64::from(self.window.base) * self.payload_size as u64).min(self.object.size)
    }

    /// Packets sent but not yet acknowledged by every live receiver (the
    /// buffer the sender must keep). Never exceeds the window.
    #[must_use]
    pub fn outstanding(&self) -> u32 {
        self.window.high.saturating_sub(self.window.base)
    }

    /// Bytes the fixed pacer's bucket holds, when [`RateControl::Fixed`]
    /// paces: a runtime that wakes late should stay well inside it.
    ///
    /// [`RateControl::Fixed`]: crate::RateControl::Fixed
    #[must_use]
    pub fn pacer_bucket_bytes(&self) -> Option<u64> {
        match &self.pacing.mode {
            Mode::Fixed(p) => Some(p.burst_bytes()),
            Mode::Find(f) => Some(f.pacer_ref().burst_bytes()),
            _ => None,
        }
    }

    /// [`RateControl::Find`]'s finder: the pace and the rate found.
    ///
    /// [`RateControl::Find`]: crate::RateControl::Find
    #[must_use]
    pub fn rate_finder(&self) -> Option<&crate::RateFinder> {
        match &self.pacing.mode {
            Mode::Find(f) => Some(f),
            _ => None,
        }
    }

    /// Hunt's rate controller, when [`RateControl::Hunt`] is in effect.
    ///
    /// [`RateControl::Hunt`]: crate::RateControl::Hunt
    #[must_use]
    pub fn rate(&self) -> Option<&RateController> {
        match &self.pacing.mode {
            Mode::Hunt(c) => Some(c),
            _ => None,
        }
    }

    /// The group's rate resynchronisation, when [`SenderConfig::rate_group`]
    /// is set under Hunt.
    #[must_use]
    pub fn rate_group(&self) -> Option<&RateGroup> {
        self.pacing.group.as_ref()
    }

    /// The runtime could not send a datagram (`ENOBUFS`, `EAGAIN`): under
    /// Hunt's rate control this is an error signal like a lost packet (the
    /// protocol repairs the datagram itself as any other loss).
    pub fn on_send_error(&mut self, now: Instant) {
        self.rate_error(now, ErrorSignal::SendFailure);
        self.arm_timers();
    }

    /// The object's hash with the sender's signature of it (over
    /// [`rmcast_wire::signed_object_message`]): the `Close` carries both,
    /// for receivers that trust only signed content.
    pub fn set_signed_object_hash(
        &mut self,
        hash: [u8; HASH_LEN],
        signature: [u8; rmcast_wire::SIGNATURE_LEN],
    ) {
        if self.object.hash.is_none() {
            self.signature = Some(signature);
        }
        self.set_object_hash(hash);
    }

    /// The object's BLAKE3 hash, once the driver has computed it (see
    /// [`ObjectInfo::hash`]). `Close` carries it, so no `Close` goes out
    /// before this is called; once every byte is acknowledged, the first
    /// one goes at once (the next [`Sender::poll_transmit`]). Later calls
    /// are ignored: the hash announced is the first one given.
    pub fn set_object_hash(&mut self, hash: [u8; HASH_LEN]) {
        if self.object.hash.is_some() {
            return;
        }
        self.object.hash = Some(hash);
        if self.phase == Phase::Closing {
            // Waiting for exactly this: ask now, and back off from here.
            self.rto = self.config.rto;
            self.control_due = true;
            // Due now (a driver that transmits only after a timeout wakes
            // at once); sending it sets the next deadline.
            self.timers.set(Timer::Control, Some(Instant::ZERO));
        }
        self.arm_timers();
    }

    /// The object's hash, once known.
    #[must_use]
    pub fn object_hash(&self) -> Option<[u8; HASH_LEN]> {
        self.object.hash
    }

    /// Receivers registered so far.
    #[must_use]
    pub fn joined(&self) -> usize {
        self.members.list.len()
    }

    /// True once the session is over (see [`Sender::outcome`]).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.phase == Phase::Done
    }

    /// The result, once finished.
    #[must_use]
    pub fn outcome(&self) -> Option<&Outcome> {
        self.outcome.as_ref()
    }

    /// Next event for the application.
    pub fn poll_event(&mut self) -> Option<SenderEvent> {
        self.events.pop_front()
    }

    /// Gives up: every receiver not yet verified fails with `reason`.
    pub fn abort(&mut self, now: Instant, reason: &str) {
        if matches!(self.phase, Phase::Farewell { .. } | Phase::Done) {
            return;
        }
        self.error = Some(reason.to_owned());
        for rank in 0..self.members.list.len() {
            if self.members.list[rank].state != MemberState::Verified {
                self.fail_member(now, rank, format!("sender aborted: {reason}"));
            }
        }
        self.enter_farewell(now);
        self.arm_timers();
    }

    /// When the machine next needs [`Sender::handle_timeout`] (or, for
    /// pacing, [`Sender::poll_transmit`]): the earliest deadline in the
    /// timer table.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// Processes expired timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.on_timeout(now);
        self.arm_timers();
    }

    fn on_timeout(&mut self, now: Instant) {
        if self.phase != Phase::Done {
            self.group_step(now);
        }
        if self.stall_deadline().is_some_and(|d| now >= d) {
            let reason = self.stall_report(now);
            self.abort(now, &reason);
            return;
        }
        match self.phase {
            Phase::Done => {}
            Phase::Joining => {
                if now >= self.started + self.config.join_wait {
                    self.on_join_wait_over(now);
                } else if self.timers.expired(Timer::Control, now) {
                    self.control_due = true;
                }
            }
            Phase::Offering | Phase::Closing => {
                if self.reask_deadline().is_some_and(|d| now >= d) {
                    self.start_reask(now);
                }
                if self.timers.expired(Timer::Control, now)
                    && let Some(at) = self.answers_flowing(now)
                {
                    // Answers still come (a large group's slots can take
                    // longer than the RTO): not again to everyone yet.
                    self.timers.set(Timer::Control, Some(at));
                }
                if self.timers.expired(Timer::Control, now) {
                    self.check_peers(now);
                    if matches!(self.phase, Phase::Offering | Phase::Closing) {
                        self.control_due = true;
                    }
                }
            }
            Phase::Sending => {
                if self.source_keepalive_at().is_some_and(|at| now >= at) {
                    self.control_due = true;
                }
                if self.timers.expired(Timer::Laggard, now) {
                    self.check_laggards(now);
                }
                if self.phase == Phase::Sending {
                    self.on_window_timeout(now);
                }
            }
            Phase::Farewell { .. } => {
                if self.timers.expired(Timer::Control, now) {
                    self.control_due = true;
                }
            }
        }
    }

    /// Processes one received datagram from `from`. When sealing, the
    /// datagram is opened in place first; one that does not authenticate
    /// is counted ([`SenderStats::auth`]) and dropped before anything else
    /// looks at it.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &mut [u8]) {
        let opened = self.seal.open_party(from, datagram);
        self.stats.auth = self.seal.stats();
        if let Ok((plain, party)) = opened {
            self.on_datagram(now, from, plain, party);
            self.arm_timers();
        }
    }

    /// Sources whose packets did not authenticate, and why (for reports).
    #[must_use]
    pub fn auth_failures(&self) -> &AuthFailures {
        self.seal.failures()
    }

    fn on_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8], party: Option<u64>) {
        let packet = match Packet::decode(datagram) {
            Ok(p) => p,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        if matches!(
            packet.body,
            Body::RateNak(_) | Body::RateReport(_) | Body::RateSync(_)
        ) {
            self.on_group_packet(now, packet.header, &packet.body);
            return;
        }
        if packet.header.session != self.session || packet.header.rank == RANK_SENDER {
            self.stats.foreign += 1;
            if let Body::Hello(_) = packet.body
                && packet.header.session != self.session
            {
                self.on_other_session(packet.header.session, from);
            }
            return;
        }
        let rank = packet.header.rank;
        if self.config.group_key.is_some() && !self.party_matches(rank, party, &packet.body) {
            // Sealed by one receiver in another's name: only a key holder
            // can do that, and it may not speak for anyone else.
            self.stats.foreign += 1;
            return;
        }
        self.stats.control_packets += 1;
        if matches!(packet.body, Body::Ack(_) | Body::Nak(_))
            && let Some(i) = self.moved_member(rank, from)
        {
            self.on_moved_feedback(now, i);
            return;
        }
        match packet.body {
            Body::Join(j) => self.on_join(now, from, j.receiver_id, j.name),
            Body::OfferReply(r) => self.on_offer_reply(now, rank, from, &r),
            Body::Ack(f) => {
                self.stats.acks += 1;
                self.on_feedback(now, rank, from, &f, false);
            }
            Body::Nak(f) => {
                self.stats.naks += 1;
                self.on_feedback(now, rank, from, &f, true);
            }
            Body::Complete(c) => self.on_complete(now, rank, from, &c),
            Body::Leave(l) => self.on_leave(now, rank, from, l.text),
            Body::Behind(b) => self.on_behind(now, rank, from, &b),
            Body::Have(h) => {
                if let Some(i) = self.member_index(rank, from) {
                    self.on_have(now, i, &h);
                }
            }
            _ => {
                self.stats.control_packets -= 1;
                self.stats.foreign += 1;
            }
        }
    }

    /// Whether the sealing party of a receiver's packet is the receiver the
    /// rank names (a `Join`'s: the id it joins with).
    fn party_matches(&self, rank: u16, party: Option<u64>, body: &Body<'_>) -> bool {
        match body {
            Body::Join(j) => party == Some(j.receiver_id),
            _ => self
                .members
                .list
                .get(usize::from(rank))
                .is_none_or(|m| party == Some(m.id)),
        }
    }

    /// Writes the next datagram to send into `buf` (at least
    /// [`crate::MAX_DATAGRAM`] bytes, or the packet size) and says where it
    /// goes. When sealing, the datagram is sealed in `buf`: a data packet
    /// stays within the packet size, since its payload was shortened by
    /// the seal's overhead.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        source: &(impl PayloadSource + ?Sized),
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let mut transmit = self.next_transmit(now, source, buf);
        if let Some(t) = &mut transmit {
            if matches!(t.dest, Dest::Unicast(_)) {
                // To one member alone: it answers at once, not in its slot.
                rmcast_wire::set_flag(buf, rmcast_wire::FLAG_ALONE);
            }
            // The session nonce rides on everything but the bulk data, so a
            // receiver can derive the keys from any control packet.
            let with_nonce = !matches!(t.kind, rmcast_wire::Kind::Data | rmcast_wire::Kind::Parity);
            t.len = self
                .seal
                .seal(buf, t.len, with_nonce)
                .expect("the sender holds its session's keys and a buffer of MAX_DATAGRAM");
            self.stats.auth = self.seal.stats();
        }
        self.arm_timers();
        transmit
    }

    fn next_transmit(
        &mut self,
        now: Instant,
        source: &(impl PayloadSource + ?Sized),
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let header = Header::new(self.session, RANK_SENDER);
        if let Some((to, receiver_id, rank, upstream)) = self.members.welcomes.pop_front() {
            let body = Body::Welcome(Welcome {
                receiver_id,
                rank,
                upstream,
            });
            self.stats.control_sent += 1;
            return emit(Dest::Unicast(to), header, body, buf);
        }
        if let Some(t) = self.welcomes(now, header, buf) {
            return Some(t);
        }
        if let Some(rank) = self.members.byes_owed.pop_front() {
            let m = &self.members.list[usize::from(rank)];
            let text = truncate_utf8(m.reason.as_deref().unwrap_or(""), 255);
            self.stats.control_sent += 1;
            let bye = Body::Bye(Bye {
                aborted: true,
                text,
            });
            return emit(Dest::Unicast(m.addr), header, bye, buf);
        }
        while let Some(rank) = self.members.moves_owed.pop_front() {
            let (Laggard::Tcp { port, .. }, Some(i)) = (
                self.config.laggard,
                self.moved_member(rank, self.members.list[usize::from(rank)].addr),
            ) else {
                continue; // no longer moved: failed, or caught up
            };
            self.stats.control_sent += 1;
            let body = Body::Move(rmcast_wire::Move { rank, port });
            return emit(Dest::Unicast(self.members.list[i].addr), header, body, buf);
        }
        if let Some(own) = self.own_rate()
            && let Some(body) = self
                .pacing
                .group
                .as_mut()
                .and_then(|g| g.poll_transmit(own))
        {
            self.stats.group_sent += 1;
            return emit(Dest::Group, header, body, buf);
        }
        if let Some(t) = self.reask(header, buf) {
            return Some(t);
        }
        if self.control_due {
            self.control_due = false;
            if self.phase == Phase::Closing && self.object.hash.is_none() {
                return self.keepalive(now, header, source, buf);
            }
            if self.phase == Phase::Sending {
                return self.source_keepalive(now, header, source, buf);
            }
            return self.multicast_control(now, header, buf);
        }
        self.poll_data(now, header, source, buf)
    }

    fn enter(&mut self, phase: Phase, now: Instant) {
        self.phase = phase;
        if let Some(g) = &mut self.pacing.group {
            // The data phase is the group's business; after it this
            // sender's share of the rate goes to the others.
            g.set_phase(match phase {
                Phase::Joining | Phase::Offering => RatePhase::Idle,
                Phase::Sending => RatePhase::Sending,
                _ => RatePhase::Leaving,
            });
        }
        self.phase_since = now;
        self.progress_at = now;
        self.rto = self.config.rto;
        self.control_due = matches!(phase, Phase::Offering | Phase::Closing);
        self.timers.set(Timer::Control, Some(now));
        if phase == Phase::Sending {
            // No multicast control timer while sending: the RTO drives it.
            self.timers.stop(Timer::Control);
        }
        if phase == Phase::Closing {
            // The group's data is out: the receivers moved to a TCP
            // catch-up may now take the uplink (`Laggard::Tcp`).
            self.send_moves(now);
        }
        if phase == Phase::Closing
            && let Some(asked) = self.close_sent
        {
            // The Close went with the data (`close_with_data`) and its
            // answers may still be coming in their slots: the members
            // still silent are asked again alone once they stop, and the
            // group again an RTO after that Close, backing off from there.
            self.control_due = false;
            let again = (asked + self.config.rto).max(now);
            self.rto = (self.config.rto * 2).min(self.config.rto_max);
            self.timers.set(Timer::Control, Some(again));
        }
        if phase == Phase::Closing && self.object.hash.is_none() {
            // The Close waits for the hash (`set_object_hash` sends it);
            // meanwhile a keepalive every RTO, backing off, if there is a
            // data packet to repeat (an empty object hashes at once).
            self.control_due = false;
            let keepalive = (self.packets > 0).then(|| now + self.rto);
            self.timers.set(Timer::Control, keepalive);
        }
    }
}
