//! The phase's multicast control packet, repeated on its timer until the
//! phase moves on: `Hello` while admitting, `Offer` (backing off) while
//! offering, `Close` (backing off) once every byte is acknowledged (in a
//! large group, with the last data: [`Sender::close_with_data_due`]), three
//! `Bye`s at the end; and the keepalives while `Close` waits for the hash
//! and while a streamed source is behind.

use super::close::BYE_SPACING;
use super::membership::MemberState;
use super::repoll::repoll_max;
use super::timers::Timer;
use super::{Phase, Sender};
use crate::transfer::emit;
use crate::transfer::receiver::SPREAD_FROM;
use crate::{Dest, FeedbackPolicy, Instant, PayloadSource, Transmit, truncate_utf8};
use rmcast_wire::{Body, Bye, Close, Header, Hello, Kind, Offer, POLL_NONE};
use std::collections::VecDeque;
use std::time::Duration;

/// The answers to the latest `Offer` or `Close`: when it went, when the
/// last answer came, and the members to ask again by unicast.
///
/// Every member answers an `Offer` (`OfferReply`) and a `Close`
/// (`Complete`). The multicast packet repeats on the RTO's backoff (50,
/// 100, 200 ms ...), and at 1,000 receivers and 0.1 % feedback loss some
/// answer of almost every round is lost: the session waited 50 ms for it
/// at the offer alone. Once a round's answers have begun and then stopped,
/// the few members still silent (at most [`repoll_max`]) get the packet
/// again, alone, at once, and again a quiet later while they stay silent
/// (at most [`REASKS`] times a round); the multicast repeat stays the RTO's.
#[derive(Debug, Default)]
pub(super) struct Round {
    sent_at: Option<Instant>,
    /// The round's first answer and its latest.
    first_heard: Option<Instant>,
    heard_at: Option<Instant>,
    /// Times the silent members were asked again this round, and when last.
    asked_again: u8,
    asked_at: Option<Instant>,
    queue: VecDeque<u16>,
}

/// Most times one round asks its silent members again, each once the
/// previous question's answers had time to come: an answer to a question
/// asked again can be lost too (at 1 % feedback loss, one of 20 asked),
/// and a round asked once then waited for the multicast repeat, an RTO
/// (50 ms) after the round began.
const REASKS: u8 = 3;

impl Round {
    /// The multicast packet went (again): a new round.
    fn start(&mut self, now: Instant) {
        self.sent_at = Some(now);
        self.first_heard = None;
        self.heard_at = None;
        self.asked_again = 0;
        self.asked_at = None;
        self.queue.clear();
    }

    /// A member answered.
    pub(super) fn heard(&mut self, now: Instant) {
        self.first_heard.get_or_insert(now);
        self.heard_at = Some(now);
    }

    /// When the multicast packet went, and the round's first and latest
    /// answers, once it has had one.
    fn times(&self) -> Option<(Instant, Instant, Instant)> {
        Some((self.sent_at?, self.first_heard?, self.heard_at?))
    }
}

/// The gap after the first Hello: the next ones double it up to the
/// configured interval (10, 20, 40, 80 ms, then every 100 ms by default),
/// so a receiver that starts listening just after the first one (a
/// launcher starting every rank at once, `demo`) joins within a few
/// milliseconds instead of waiting a whole interval, at the cost of three
/// more small multicasts per session.
pub(super) const HELLO_FIRST: Duration = Duration::from_millis(10);

/// The gap after Hello number `sent` (0: the first).
fn hello_spacing(sent: u32, interval: Duration) -> Duration {
    HELLO_FIRST.saturating_mul(1 << sent.min(16)).min(interval)
}

impl Sender {
    /// When to ask the members still silent after this round's answers
    /// stopped: no answer for `suppress` (a quarter of it past
    /// [`SPREAD_FROM`] receivers, `round_quiet`) or for twice as long as
    /// the first answer took since the packet went (slow readers answer
    /// late), whichever is longer; again a quiet after each question, up
    /// to [`REASKS`] times a round. Twice the *first*
    /// answer's time, as a poll's repoll waits: a large group answers
    /// in rank slots (2 µs each), 20 ms at 10,000 receivers, and twice
    /// the last answer's 20 ms put the question after the RTO's repeat
    /// to everyone (50 ms), so it never came: a few lost answers cost
    /// 10,000 answers again, and three repeats of `Close` at 0.1 %
    /// feedback loss.
    pub(super) fn reask_deadline(&self) -> Option<Instant> {
        let r = &self.round;
        let asking = match self.phase {
            Phase::Offering => true,
            Phase::Closing => self.object.hash.is_some(),
            _ => false,
        };
        let (sent, first, heard) = r.times()?;
        if !asking || r.asked_again >= REASKS || first < sent {
            return None;
        }
        let quiet = self.round_quiet(sent, first);
        Some(match r.asked_at {
            None => heard + quiet,
            // A member asked alone answers at once: still silent a quiet
            // after the question, its answer (or the question) was lost.
            Some(asked) => (asked + quiet).max(heard + quiet),
        })
    }

    /// While this round's answers are still coming (one came less than
    /// the round's quiet ago), the time they will have stopped: the
    /// multicast repeat waits until then, and the members still silent
    /// are asked again first.
    pub(super) fn answers_flowing(&self, now: Instant) -> Option<Instant> {
        let (sent, first, heard) = self.round.times()?;
        let until = heard + self.round_quiet(sent, first);
        (first >= sent && now < until).then_some(until)
    }

    /// How long a round's answers must have stopped before the members
    /// still silent are asked again (`reask_deadline`, and a poll's
    /// `repoll_deadline`): the longer of `suppress` (a quarter of it in a
    /// group over [`SPREAD_FROM`]) and twice the time the first answer
    /// took. Such a group answers in rank slots, back to back, so a
    /// quarter of `suppress` after the last answer the slots are over: the
    /// rest of the quiet only delayed every question after a lost answer,
    /// which at 1 % feedback loss ends nearly every round of such a group.
    pub(super) fn round_quiet(&self, sent: Instant, first: Instant) -> Duration {
        let floor = if self.members.list.len() > usize::from(SPREAD_FROM) {
            self.config.suppress / 4
        } else {
            self.config.suppress
        };
        floor.max(first.saturating_since(sent) * 2)
    }

    /// Whether member `m` still owes this round's answer: an `OfferReply`
    /// while offering, a `Complete` while closing.
    fn owes_answer(&self, m: &super::membership::Member) -> bool {
        match self.phase {
            Phase::Offering => m.state == MemberState::Admitted,
            Phase::Closing => m.in_data() && m.state != MemberState::Verified,
            _ => false,
        }
    }

    /// This round's answers are over: queue the members that owe one
    /// (an `OfferReply`, a `Complete`), if they are a few. They answer in
    /// their slots, about as late after the question as the round's
    /// answers came after the multicast (20 ms at 10,000 receivers), or
    /// twice as late (a member's slot may have widened once more than
    /// the others'), so the multicast repeat, which every member answers
    /// and which widens every member's slot, waits as long.
    pub(super) fn start_reask(&mut self, now: Instant) {
        self.round.asked_again += 1;
        self.round.asked_at = Some(now);
        let silent: Vec<u16> = self
            .members
            .list
            .iter()
            .enumerate()
            .filter(|(_, m)| self.owes_answer(m))
            .map(|(rank, _)| rank as u16)
            .take(repoll_max(self.members.list.len()) + 1)
            .collect();
        if silent.is_empty() || silent.len() > repoll_max(self.members.list.len()) {
            return;
        }
        self.round.queue.extend(silent);
        if let Some((sent, first, heard)) = self.round.times() {
            let span = heard.saturating_since(sent) * 2;
            let answers_by = now + span + self.round_quiet(sent, first);
            if self
                .timers
                .at(Timer::Control)
                .is_some_and(|at| at < answers_by)
            {
                self.timers.set(Timer::Control, Some(answers_by));
            }
        }
    }

    /// The `Offer` or `Close` again, to one member still silent.
    pub(super) fn reask(&mut self, header: Header, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(rank) = self.round.queue.pop_front() {
            let Some(m) = self.members.list.get(usize::from(rank)) else {
                continue;
            };
            let to = Dest::Unicast(m.addr);
            if !self.owes_answer(m) {
                continue; // answered meanwhile, or gone
            }
            self.stats.control_sent += 1;
            self.stats.repolls += 1;
            let body = if self.phase == Phase::Offering {
                self.offer_body()
            } else {
                self.close_body()?
            };
            return emit(to, header, body, buf);
        }
        None
    }

    pub(super) fn multicast_control(
        &mut self,
        now: Instant,
        header: Header,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let body = match self.phase {
            Phase::Joining => {
                let next = hello_spacing(self.hellos_sent, self.config.hello_interval);
                self.hellos_sent = self.hellos_sent.saturating_add(1);
                self.last_hello = Some(now);
                self.timers.set(Timer::Control, Some(now + next));
                // The receivers still missing, not the whole group: they
                // spread their joins (and wait for an answer) over as
                // many slots as there are of them, so a few whose joins
                // were lost join again at once, not over the group's
                // 20 ms at 10,000.
                let joined = self.members.list.len();
                let missing = usize::from(self.config.receivers).saturating_sub(joined);
                self.hello_wanted = (missing as u16).max(1);
                Body::Hello(Hello {
                    receivers_wanted: self.hello_wanted,
                    protocol: self.config.protocol,
                })
            }
            Phase::Offering => {
                self.round.start(now);
                self.timers.set(Timer::Control, Some(now + self.rto));
                self.rto = (self.rto * 2).min(self.config.rto_max);
                self.stats.control_sent += 1;
                return emit(Dest::Group, header, self.offer_body(), buf);
            }
            Phase::Closing => {
                let body = self.close_body()?;
                self.timers.set(Timer::Control, Some(now + self.rto));
                self.rto = (self.rto * 2).min(self.config.rto_max);
                self.close_sent.get_or_insert(now);
                self.round.start(now);
                body
            }
            Phase::Farewell { byes_left } => {
                let aborted = !self
                    .members
                    .list
                    .iter()
                    .any(|m| m.state == MemberState::Verified);
                if byes_left <= 1 {
                    self.finish();
                } else {
                    self.phase = Phase::Farewell {
                        byes_left: byes_left - 1,
                    };
                    self.timers.set(Timer::Control, Some(now + BYE_SPACING));
                }
                // The group's verdict: empty only when every receiver
                // wanted verified, so each can tell the others' fate.
                let verdict = self.farewell_verdict();
                let text = truncate_utf8(&verdict, 255);
                self.stats.control_sent += 1;
                return emit(Dest::Group, header, Body::Bye(Bye { aborted, text }), buf);
            }
            Phase::Sending | Phase::Done => return None,
        };
        self.stats.control_sent += 1;
        emit(Dest::Group, header, body, buf)
    }

    /// Whether the `Close` goes now, with the data: in a group that
    /// spreads its answers (over [`SPREAD_FROM`] receivers), once every
    /// data packet (and its block's proactive parity) has gone the first
    /// time and the hash is known, and nothing else is left to send. A
    /// receiver that holds every byte then answers the last poll and the
    /// `Close` at once, with its `Complete` in its slot (the answers owed
    /// go as one), instead of an ack round for the last poll (20 ms at
    /// 10,000 receivers) and a round of `Complete`s after it (another
    /// 20–25). Not with a tree, whose relays aggregate acks the
    /// `Complete`s would replace, nor with resume or delta, whose data
    /// phase skips what the receivers report holding. Groups of up to
    /// [`SPREAD_FROM`] close once every byte is acknowledged, as the
    /// papers' protocols do.
    pub(super) fn close_with_data_due(&self) -> bool {
        self.phase == Phase::Sending
            && self.close_sent.is_none()
            && self.object.hash.is_some()
            && self.packets > 0
            && self.window.high >= self.packets
            && self.members.list.len() > usize::from(SPREAD_FROM)
            && self.delta.is_none()
            && !matches!(self.policy.policy(), FeedbackPolicy::Tree { .. })
    }

    /// The `Close` with the data ([`Sender::close_with_data_due`]): its
    /// round starts now, and the closing phase repeats it an RTO from now
    /// (`enter`), not at once.
    pub(super) fn close_with_data(
        &mut self,
        now: Instant,
        header: Header,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let body = self.close_body()?;
        self.close_sent = Some(now);
        self.round.start(now);
        self.stats.control_sent += 1;
        emit(Dest::Group, header, body, buf)
    }

    /// The `Close`: the object's hash and signature. None before the hash,
    /// which is what it carries.
    fn close_body(&self) -> Option<Body<'static>> {
        Some(Body::Close(Close {
            hash: self.object.hash?,
            signature: self.signature,
        }))
    }

    /// The `Offer`: what the object is and how the data phase runs.
    fn offer_body(&self) -> Body<'_> {
        Body::Offer(Offer {
            object_size: self.object.size,
            isn: self.isn,
            payload_size: self.payload_size as u16,
            window: self.config.window,
            protocol: self.config.protocol,
            protocol_param: self.policy.policy().protocol_param(),
            receivers: self.members.list.len() as u16,
            test_loss_ppm: self.config.test_loss_ppm.min(1_000_000),
            fec: self.fec.as_ref().map(super::fec::FecSender::shape),
            name: &self.object.name,
        })
    }

    /// A streamed source ([`Sender::set_available`]) is behind and every
    /// packet sent is acknowledged: when receivers must next hear the
    /// sender (every `rto_max`), or `None` when the session is not so.
    pub(super) fn source_keepalive_at(&self) -> Option<Instant> {
        let waiting = self.phase == Phase::Sending
            && self.window.base >= self.window.high
            && self.window.next >= self.readable_packets()
            && self.readable_packets() < self.packets;
        waiting.then(|| self.window.last_activity() + self.config.rto_max)
    }

    /// The keepalive while waiting for a streamed source: the last data
    /// packet sent again, polling no one, or the `Offer` before any was
    /// (receivers answer it again: one short reply each per `rto_max`).
    pub(super) fn source_keepalive(
        &mut self,
        now: Instant,
        header: Header,
        source: &(impl PayloadSource + ?Sized),
        buf: &mut [u8],
    ) -> Option<Transmit> {
        self.window.last_data_activity = now;
        self.stats.keepalives += 1;
        let Some(index) = self.window.high.checked_sub(1) else {
            self.stats.control_sent += 1;
            return emit(Dest::Group, header, self.offer_body(), buf);
        };
        self.repeat_data(header, index, source, buf)
    }

    /// Data packet `index` multicast again, polling no one.
    fn repeat_data(
        &mut self,
        header: Header,
        index: u32,
        source: &(impl PayloadSource + ?Sized),
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let len = self.datagram_len(index);
        let copy = self.window.lack[self.window.slot(index)].copies;
        self.write_data(header, index, POLL_NONE, copy, source, &mut buf[..len])?;
        Some(Transmit {
            dest: Dest::Group,
            len,
            kind: Kind::Data,
        })
    }

    /// The text of the farewell `Bye`: the session's error, else which
    /// receivers did not verify or never came, else empty (every receiver
    /// verified): a receiver reads the whole group's outcome from it.
    fn farewell_verdict(&self) -> String {
        if let Some(e) = &self.error {
            return e.clone();
        }
        let list = &self.members.list;
        let failed: Vec<&super::membership::Member> = (list.iter())
            .filter(|m| m.state != MemberState::Verified)
            .collect();
        let wanted = usize::from(self.short.unwrap_or(self.config.receivers));
        let missing = wanted.saturating_sub(list.len());
        if failed.is_empty() && missing == 0 {
            return String::new();
        }
        let mut text = format!(
            "{} of {wanted} receivers did not verify",
            failed.len() + missing
        );
        if let Some(m) = failed.first() {
            let why = m.reason.as_deref().unwrap_or("no reason given");
            text.push_str(&format!(" (first: {:?}: {why})", m.name));
        } else {
            text.push_str(&format!(" ({missing} never joined)"));
        }
        text
    }

    /// Every byte is acknowledged but the hash is not known yet, so no
    /// `Close` can go: multicast the last data packet again, polling no
    /// one, so that receivers keep hearing the sender (they time it out
    /// after `sender_timeout` of silence). Backs off like the `Close`.
    pub(super) fn keepalive(
        &mut self,
        now: Instant,
        header: Header,
        source: &(impl PayloadSource + ?Sized),
        buf: &mut [u8],
    ) -> Option<Transmit> {
        self.timers.set(Timer::Control, Some(now + self.rto));
        self.rto = (self.rto * 2).min(self.config.rto_max);
        let index = self.packets.checked_sub(1)?;
        let t = self.repeat_data(header, index, source, buf)?;
        self.stats.keepalives += 1;
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MAX_DATAGRAM, ObjectInfo, SenderConfig, Seq, SessionId};

    #[test]
    fn hellos_start_fast_and_settle_at_the_interval() {
        let interval = Duration::from_millis(100);
        let gaps: Vec<u64> = (0..7)
            .map(|k| hello_spacing(k, interval).as_millis() as u64)
            .collect();
        assert_eq!(gaps, [10, 20, 40, 80, 100, 100, 100]);
        // A shorter interval caps the first gaps too; huge counts do not overflow.
        assert_eq!(hello_spacing(0, Duration::from_millis(4)).as_millis(), 4);
        assert_eq!(hello_spacing(u32::MAX, interval), interval);
    }

    /// The Hellos a sender that nobody joins multicasts in its first 0.5 s.
    #[test]
    fn a_waiting_sender_announces_at_0_10_30_70_150_250_ms() {
        let object = ObjectInfo {
            size: 1000,
            name: "obj.bin".into(),
            hash: None,
        };
        let config = SenderConfig {
            receivers: 2,
            ..SenderConfig::default()
        };
        let mut s = Sender::new(config, SessionId(9), Seq(1), object, Instant::ZERO).unwrap();
        let data = [0u8; 1000];
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut now = Instant::ZERO;
        let mut hellos = Vec::new();
        while now < Instant::ZERO + Duration::from_millis(500) {
            while let Some(t) = s.poll_transmit(now, &data[..], &mut buf) {
                if t.kind == Kind::Hello {
                    hellos.push(now.saturating_since(Instant::ZERO).as_millis() as u64);
                }
            }
            let next = s.poll_timeout().expect("a waiting sender has a timer");
            assert!(next > now, "the timer moves on");
            now = next;
            s.handle_timeout(now);
        }
        assert_eq!(hellos, [0, 10, 30, 70, 150, 250, 350, 450]);
    }
}
