//! Session control: admission by invitation or announcement with the
//! three-way handshake, leave, failure detection (suspicion and removal
//! after unanswered polls), the confirmed close, and the queue of control
//! packets (invitations, confirmations, resets) that `poll_transmit`
//! sends first.

use super::config::Admission;
use super::member::{Member, MemberId, MemberStatus, PollState, nonce};
use super::output::emit;
use super::{Phase, RemoveReason, StreamEvent, StreamSender};
use crate::stream::StreamTransmit as Transmit;
use crate::{Dest, Instant, truncate_utf8};
use rmcast_wire::stream::{Announce, Invite, ResetReason, StreamBody};
use std::net::SocketAddr;

#[derive(Clone, Copy, Debug)]
pub(super) enum Control {
    Announce,
    Invite(u16),
    Confirm(u16),
    LeaveAck(SocketAddr),
    Reset(SocketAddr, ResetReason),
}

/// Most control packets queued; more are counted and dropped.
pub(super) const CONTROL_QUEUE_MAX: usize = 1024;

impl StreamSender {
    pub(super) fn member_at(&self, rank: u16, from: SocketAddr) -> Option<usize> {
        let i = usize::from(rank);
        self.members
            .get(i)
            .filter(|m| m.addr == from && m.status != MemberStatus::Pending)
            .map(|_| i)
    }

    pub(super) fn on_connect_request(
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
            self.buf.isn,
            now,
        );
        m.tries = 1;
        m.next_try = now + self.config.handshake_interval;
        self.members.push(m);
        self.buf.grow_members(self.members.len());
        self.push_control(Control::Invite(i as u16));
    }

    /// The handshake's second step. False when the datagram was refused and
    /// the machine has nothing more to do for it.
    pub(super) fn on_accept(
        &mut self,
        now: Instant,
        from: SocketAddr,
        rank: u16,
        a: &rmcast_wire::stream::Accept<'_>,
    ) -> bool {
        let Some(i) = self.member_at(rank, from) else {
            self.reset(from, ResetReason::NotMember);
            return false;
        };
        if self.members[i].nonce != a.nonce {
            self.stats.malformed += 1;
            return false;
        }
        match self.members[i].status {
            MemberStatus::Inviting => {
                if a.buffer_packets < self.config.message_packets_max() {
                    self.reset(from, ResetReason::BufferTooSmall);
                    self.remove(i, RemoveReason::BufferTooSmall, now);
                    return false;
                }
                let m = &mut self.members[i];
                m.status = MemberStatus::Live;
                m.receiver_id = a.receiver_id;
                m.name = truncate_utf8(a.name, 255).to_owned();
                m.cum = self.buf.base;
                m.edge = self.buf.base.add(a.buffer_packets);
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
        true
    }

    /// A member leaves on its own. False when the datagram is not from a
    /// member (nothing more to do for it).
    pub(super) fn on_leave(&mut self, now: Instant, from: SocketAddr, rank: u16) -> bool {
        let Some(i) = self.member_at(rank, from) else {
            return false;
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
        true
    }

    /// Counts every outstanding poll past its deadline as unanswered:
    /// suspicion after `suspect_after` in a row, removal after `remove_after`.
    pub(super) fn expire_polls(&mut self, now: Instant) {
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
    }

    pub(super) fn maybe_closed(&mut self) {
        if self.phase == Phase::Done || !self.close_requested || self.phase == Phase::Admitting {
            return;
        }
        let all = self
            .members
            .iter()
            .filter(|m| m.status == MemberStatus::Live)
            .all(|m| m.close_confirmed);
        if all && self.buf.base == self.buf.tail {
            self.finish();
        }
    }

    pub(super) fn finish(&mut self) {
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

    pub(super) fn drop_member(&mut self, i: usize) {
        let m = &mut self.members[i];
        if let PollState::Planned { epoch, .. } = m.poll {
            self.planner.release(epoch);
        }
        m.poll = PollState::Idle;
        m.status = MemberStatus::Gone;
        for w in 0..self.buf.slots.len() {
            if self.buf.lack.get(w, i) {
                self.buf.lack.clear(w, i);
                self.buf.slots[w].lack_count -= 1;
            }
            self.buf.reported.clear(w, i);
            self.buf.repair_to.clear(w, i);
        }
    }

    pub(super) fn remove(&mut self, i: usize, reason: RemoveReason, now: Instant) {
        let addr = self.members[i].addr;
        self.drop_member(i);
        if matches!(reason, RemoveReason::Unresponsive | RemoveReason::Stalled) {
            // A falsely suspected receiver, or one whose reader stopped,
            // learns it is out (and ends, rather than wait for the sender).
            self.reset(addr, ResetReason::Removed);
        }
        self.events.push_back(StreamEvent::Removed {
            id: MemberId(i as u16),
            reason,
        });
        self.after_membership_change(now);
    }

    pub(super) fn after_membership_change(&mut self, now: Instant) {
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

    pub(super) fn admission_step(&mut self, now: Instant) {
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
                } else {
                    // Over, as if ended early: its timers are disarmed
                    // (left armed at `started + duration` while a handshake
                    // was still under way, they stayed due and spun the
                    // driver; `random_forgeries_change_nothing` drew it) and
                    // later requests are refused.
                    self.admission_ended = true;
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

    pub(super) fn push_control(&mut self, c: Control) {
        if self.control.len() >= CONTROL_QUEUE_MAX {
            self.stats.control_dropped += 1;
        } else {
            self.control.push_back(c);
        }
    }

    pub(super) fn reset(&mut self, to: SocketAddr, reason: ResetReason) {
        self.push_control(Control::Reset(to, reason));
    }

    pub(super) fn control_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
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
                        payload_size: self.config.packet_payload(),
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
                        payload_size: self.config.packet_payload(),
                        isn: self.buf.isn,
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
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use rmcast_wire::stream::{StreamKind, StreamPacket};
    use std::time::Duration;

    fn reset_reason(bytes: &[u8]) -> ResetReason {
        match StreamPacket::decode(bytes).unwrap().body {
            StreamBody::Reset { reason } => reason,
            other => panic!("expected a reset, got {:?}", other.kind()),
        }
    }

    #[test]
    fn the_invitation_handshake_joins_each_member_and_then_establishes() {
        let mut s = sender(invite_config(2));
        let out = drain(&mut s, Instant::ZERO);
        assert_eq!(kinds(&out), [StreamKind::Invite, StreamKind::Invite]);
        assert_eq!(out[1].0, Dest::Unicast(addr(1)));
        accept(&mut s, 0, ms(1), 64);
        assert_eq!(events(&mut s), [StreamEvent::Joined(MemberId(0))]);
        assert_eq!(kinds(&drain(&mut s, ms(1))), [StreamKind::Confirm]);
        // A repeated Accept (the Confirm was lost) is confirmed again.
        accept(&mut s, 0, ms(2), 64);
        assert_eq!(kinds(&drain(&mut s, ms(2))), [StreamKind::Confirm]);
        accept(&mut s, 1, ms(3), 64);
        assert_eq!(
            events(&mut s),
            [
                StreamEvent::Joined(MemberId(1)),
                StreamEvent::Established { members: 2 }
            ]
        );
        assert_eq!(s.members[0].rtt.srtt(), Duration::from_millis(1));
    }

    #[test]
    fn an_invitee_is_retried_every_interval_then_given_up() {
        let mut config = invite_config(1);
        config.handshake_tries = 3;
        let mut s = sender(config);
        let mut sent: Vec<_> = drain(&mut s, Instant::ZERO)
            .into_iter()
            .map(|o| (Instant::ZERO, o.1))
            .collect();
        sent.extend(run_until(&mut s, ms(1000)).into_iter().map(|o| (o.0, o.2)));
        assert_eq!(
            sent,
            [
                (ms(0), StreamKind::Invite),
                (ms(100), StreamKind::Invite),
                (ms(200), StreamKind::Invite)
            ]
        );
        assert_eq!(
            events(&mut s),
            [
                StreamEvent::Removed {
                    id: MemberId(0),
                    reason: RemoveReason::NoAnswer
                },
                StreamEvent::Established { members: 0 },
                StreamEvent::Closed
            ]
        );
        assert!(s.is_closed());
    }

    #[test]
    fn a_buffer_smaller_than_the_largest_message_is_refused() {
        let mut s = sender(invite_config(1));
        drain(&mut s, Instant::ZERO);
        accept(&mut s, 0, ms(1), 3); // messages take up to 4 packets
        let out = drain(&mut s, ms(1));
        assert_eq!(reset_reason(&out[0].2), ResetReason::BufferTooSmall);
        assert_eq!(
            events(&mut s)[0],
            StreamEvent::Removed {
                id: MemberId(0),
                reason: RemoveReason::BufferTooSmall
            }
        );
    }

    #[test]
    fn unanswered_polls_lead_to_suspicion_then_removal_within_the_bound() {
        let mut s = joined(2, 64);
        s.send(&[1u8; 100]).unwrap();
        drain(&mut s, ms(1));
        // Member 0 answers every poll; member 1 is silent.
        let mut now = ms(1);
        let mut suspected_at = None;
        let mut removed_at = None;
        let mut out = Vec::new();
        while removed_at.is_none() && now < ms(60_000) {
            now = s.poll_timeout().expect("a timer");
            s.handle_timeout(now);
            out = drain(&mut s, now);
            if matches!(s.members[0].poll, PollState::Outstanding { .. }) {
                respond(&mut s, 0, now, ISN.add(1), 63, &[], false);
            }
            for e in events(&mut s) {
                match e {
                    StreamEvent::Suspected(MemberId(1)) => suspected_at = Some(now),
                    StreamEvent::Removed {
                        id: MemberId(1),
                        reason: RemoveReason::Unresponsive,
                    } => removed_at = Some(now),
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        let (suspected, removed) = (suspected_at.unwrap(), removed_at.unwrap());
        assert!(suspected < removed);
        assert!(removed.saturating_since(ms(1)) <= s.config.removal_bound(2));
        assert_eq!(s.stats().poll_timeouts, 6);
        // The removed member is told, in case it was alive after all.
        assert_eq!(reset_reason(&out[0].2), ResetReason::Removed);
        assert_eq!(out[0].0, Dest::Unicast(addr(1)));
        assert_eq!(s.live_members(), 1);
    }

    #[test]
    fn a_member_that_leaves_is_acknowledged_and_the_session_goes_on() {
        let mut s = joined(2, 64);
        leave(&mut s, 1, ms(2));
        assert_eq!(events(&mut s), [StreamEvent::Left(MemberId(1))]);
        let out = drain(&mut s, ms(2));
        assert_eq!(kinds(&out), [StreamKind::LeaveAck]);
        assert_eq!(s.live_members(), 1);
        assert!(!s.is_closed());
    }

    #[test]
    fn the_close_ends_once_every_member_confirmed_the_whole_stream() {
        let mut s = joined(1, 64);
        s.send(&[1u8; 100]).unwrap();
        drain(&mut s, ms(1));
        let now = until_polled(&mut s, &[0]);
        respond(&mut s, 0, now, ISN.add(1), 63, &[], false);
        s.close();
        drain(&mut s, now);
        let now = until_polled(&mut s, &[0]);
        assert!(events(&mut s).is_empty());
        respond(&mut s, 0, now, ISN.add(1), 63, &[], true);
        assert_eq!(events(&mut s), [StreamEvent::Closed]);
        assert!(s.is_closed() && s.poll_timeout().is_none());
    }

    #[test]
    fn no_admission_mid_session_a_late_request_is_reset() {
        let mut s = sender(announce_config(Duration::from_millis(100)));
        // Admission closes with nobody: the session ends at once.
        s.handle_timeout(ms(200));
        assert!(events(&mut s).contains(&StreamEvent::Established { members: 0 }));
        connect_request(&mut s, ms(300), addr(0), 77);
        let out = drain(&mut s, ms(300));
        assert_eq!(kinds(&out), [StreamKind::Reset]);
        assert_eq!(reset_reason(&out[0].2), ResetReason::AdmissionClosed);
    }

    #[test]
    fn ending_an_announcement_early_establishes_and_refuses_later_requests() {
        let mut s = sender(announce_config(Duration::from_secs(60)));
        assert_eq!(kinds(&drain(&mut s, ms(0))), [StreamKind::Announce]);
        s.end_admission(ms(100));
        assert!(
            events(&mut s).contains(&StreamEvent::Established { members: 0 }),
            "admission did not end at once"
        );
        connect_request(&mut s, ms(200), addr(0), 78);
        let out = drain(&mut s, ms(200));
        assert_eq!(reset_reason(&out[0].2), ResetReason::AdmissionClosed);
    }

    #[test]
    fn an_announcement_that_runs_out_during_a_handshake_leaves_no_timer_due() {
        let mut s = sender(announce_config(Duration::from_millis(100)));
        drain(&mut s, ms(0));
        // A request just before the end: its handshake outlives the
        // announcement (no Accept comes).
        connect_request(&mut s, ms(99), addr(0), 90);
        drain(&mut s, ms(99));
        s.handle_timeout(ms(100));
        drain(&mut s, ms(100));
        assert!(
            s.poll_timeout().is_some_and(|t| t > ms(100)),
            "a deadline at or before now: {:?}",
            s.poll_timeout()
        );
        // A request after the end is refused, the handshake still going.
        connect_request(&mut s, ms(101), addr(1), 91);
        let out = drain(&mut s, ms(101));
        assert_eq!(kinds(&out), [StreamKind::Reset]);
        assert_eq!(reset_reason(&out[0].2), ResetReason::AdmissionClosed);
        // The handshake completes: established with the one member.
        accept(&mut s, 0, ms(102), 64);
        assert!(events(&mut s).contains(&StreamEvent::Established { members: 1 }));
    }

    #[test]
    fn an_announcement_admits_who_asks_until_the_session_is_full() {
        let mut s = sender(announce_config(Duration::from_secs(1)));
        drain(&mut s, ms(0));
        for i in 0..5 {
            connect_request(&mut s, ms(10), addr(i), 100 + i as u64);
        }
        // A repeated request is the same member, not a new one.
        connect_request(&mut s, ms(11), addr(0), 100);
        let out = drain(&mut s, ms(11));
        assert_eq!(
            kinds(&out),
            [
                StreamKind::Invite,
                StreamKind::Invite,
                StreamKind::Invite,
                StreamKind::Invite,
                StreamKind::Reset,
                StreamKind::Invite
            ]
        );
        assert_eq!(reset_reason(&out[4].2), ResetReason::SessionFull);
        assert_eq!(s.members.len(), 4);
    }
}
