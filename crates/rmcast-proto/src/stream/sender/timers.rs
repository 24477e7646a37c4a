//! The sender's timer table: every deadline the machine waits for, named.
//! [`StreamSender::poll_timeout`] is the table's minimum;
//! [`StreamSender::handle_timeout`] runs whatever is due.
//!
//! | timer | armed while | fires |
//! |---|---|---|
//! | `Announce` | admitting by announcement | multicast the next `Announce` |
//! | `AdmissionEnd` | admitting by announcement | admission over: `Established` |
//! | `Handshake(m)` | `m` is being invited | repeat the `Invite`, or give up (`NoAnswer`) |
//! | `PollSend(m)` | `m`'s poll is planned | send it (standalone, if no data carries it) |
//! | `PollDeadline(m)` | `m`'s poll is outstanding | unanswered: suspicion, removal |
//! | `Keepalive(m)` | `m` is idle, data flows | poll a member not heard from for `keepalive` |
//! | `Probe(m)` | `m`'s closed window holds back queued data | probe its window |
//! | `Stalled(m)` | the same, with a `stall_timeout` | remove `m` ([`RemoveReason::Stalled`](super::RemoveReason)) |
//! | `RepairGather(s)` | packet `s` has NACKs | repair it with what was gathered |

use super::config::Admission;
use super::member::{MemberStatus, PollState};
use super::{Phase, StreamSender};
use crate::Instant;
use rmcast_wire::Seq;

/// A deadline of the sender, by what it is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    /// The next announcement.
    Announce,
    /// The end of an announcement's admission period.
    AdmissionEnd,
    /// The next try of a member's handshake.
    Handshake(u16),
    /// When a member's planned poll is to leave.
    PollSend(u16),
    /// When a member's outstanding poll counts as unanswered.
    PollDeadline(u16),
    /// When an idle member is due a keepalive poll.
    Keepalive(u16),
    /// When a member whose window is closed is due a probe.
    Probe(u16),
    /// When a member whose window stayed closed is removed.
    Stalled(u16),
    /// When a packet's NACKs have been gathered long enough.
    RepairGather(Seq),
}

impl StreamSender {
    /// Calls `f` with every armed timer and its deadline.
    pub(super) fn for_each_timer(&self, mut f: impl FnMut(Timer, Instant)) {
        if self.phase == Phase::Done {
            return;
        }
        if self.phase == Phase::Admitting
            && !self.admission_ended
            && let Admission::Announce { duration, .. } = self.config.admission
        {
            f(Timer::Announce, self.next_announce);
            f(Timer::AdmissionEnd, self.started + duration);
        }
        for (i, m) in self.members.iter().enumerate() {
            let i = i as u16;
            if m.status == MemberStatus::Live
                && let (Some(since), Some(limit)) = (m.blocked_since, self.config.stall_timeout)
            {
                f(Timer::Stalled(i), since + limit);
            }
            match m.status {
                MemberStatus::Inviting => f(Timer::Handshake(i), m.next_try),
                MemberStatus::Live => match m.poll {
                    PollState::Planned { send_at, .. } => f(Timer::PollSend(i), send_at),
                    PollState::Outstanding { deadline, .. } => f(Timer::PollDeadline(i), deadline),
                    PollState::Idle => {
                        if self.phase != Phase::Admitting {
                            f(Timer::Keepalive(i), m.last_heard + self.config.keepalive);
                            if self.buf.held_back_by(m.edge) {
                                f(Timer::Probe(i), m.next_probe);
                            }
                        }
                    }
                },
                _ => {}
            }
        }
        for &s in &self.buf.candidates {
            if let Some(first) = self.buf.slots[self.buf.slot(s)].first_nack_at {
                f(Timer::RepairGather(s), first + self.config.repair_gather);
            }
        }
    }

    /// Every armed timer and its deadline.
    #[cfg(test)]
    pub(super) fn timer_table(&self) -> Vec<(Timer, Instant)> {
        let mut table = Vec::new();
        self.for_each_timer(|timer, at| table.push((timer, at)));
        table
    }

    // ----- timers ----------------------------------------------------------

    /// The stall watchdog: notes when each member's closed window began to
    /// hold back queued data, and removes a member it has held back for
    /// `stall_timeout`. Runs after every input and transmit batch, so a
    /// window that opens, even briefly, starts the count again.
    pub(super) fn watch_stalls(&mut self, now: Instant) {
        let Some(limit) = self.config.stall_timeout else {
            return;
        };
        if self.phase != Phase::Open && self.phase != Phase::Closing {
            return;
        }
        loop {
            let mut stalled = None;
            for (i, m) in self.members.iter_mut().enumerate() {
                if m.status != MemberStatus::Live || !self.buf.held_back_by(m.edge) {
                    m.blocked_since = None;
                    continue;
                }
                let since = *m.blocked_since.get_or_insert(now);
                if stalled.is_none() && now >= since + limit {
                    stalled = Some(i);
                }
            }
            // A removal moves the flow edge: look again.
            let Some(i) = stalled else { return };
            self.remove(i, super::RemoveReason::Stalled, now);
        }
    }

    /// When the machine next needs [`StreamSender::handle_timeout`]: the
    /// earliest deadline of the timer table.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        self.for_each_timer(|_, x| t = Some(t.map_or(x, |y| y.min(x))));
        t
    }

    /// Processes expired timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::Done {
            return;
        }
        self.admission_step(now);
        self.watch_stalls(now);
        self.expire_polls(now);
        self.decide_repairs(now);
        self.plan_polls(now);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use std::time::Duration;

    fn min_of_table(s: &StreamSender) -> Option<Instant> {
        s.timer_table().into_iter().map(|(_, t)| t).min()
    }

    #[test]
    fn invitations_arm_one_handshake_timer_per_invitee() {
        let mut s = sender(invite_config(3));
        drain(&mut s, Instant::ZERO);
        let table = s.timer_table();
        assert_eq!(
            table,
            (0..3)
                .map(|i| (Timer::Handshake(i), ms(100)))
                .collect::<Vec<_>>()
        );
        assert_eq!(s.poll_timeout(), Some(ms(100)));
    }

    #[test]
    fn an_announcement_arms_the_next_announce_and_the_end_of_admission() {
        let mut s = sender(announce_config(Duration::from_millis(50)));
        drain(&mut s, Instant::ZERO);
        assert_eq!(
            s.timer_table(),
            [(Timer::Announce, ms(20)), (Timer::AdmissionEnd, ms(50))]
        );
    }

    #[test]
    fn poll_timeout_is_the_minimum_of_the_table_throughout_a_stream() {
        let mut s = joined(3, 8);
        let mut now = ms(1);
        let mut seen = std::collections::BTreeSet::new();
        let mut look = |s: &StreamSender| {
            for (timer, _) in s.timer_table() {
                let name = format!("{timer:?}");
                seen.insert(name.split('(').next().unwrap().to_owned());
            }
            assert_eq!(s.poll_timeout(), min_of_table(s));
        };
        for k in 0..5000 {
            if k < 20 {
                let _ = s.send(&[k as u8; 150]);
            }
            drain(&mut s, now);
            look(&s);
            // Every member answers at once, holding everything sent.
            for i in 0..3 {
                if matches!(s.members[i].poll, PollState::Outstanding { .. }) {
                    let next = s.buf.next_tx;
                    respond(&mut s, i, now, next, 8, &[], false);
                    look(&s);
                }
            }
            let Some(t) = s.poll_timeout() else { break };
            now = t;
            s.handle_timeout(now);
            look(&s);
            if now > ms(3000) {
                break;
            }
        }
        for name in ["PollSend", "PollDeadline", "Keepalive"] {
            assert!(seen.contains(name), "{seen:?}");
        }
    }

    #[test]
    fn a_closed_session_has_no_timers() {
        let mut config = invite_config(1);
        config.handshake_tries = 1;
        let mut s = sender(config);
        drain(&mut s, Instant::ZERO);
        s.handle_timeout(ms(100));
        assert!(s.is_closed());
        assert!(s.timer_table().is_empty());
        assert_eq!(s.poll_timeout(), None);
    }
}
