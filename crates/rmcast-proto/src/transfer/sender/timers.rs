//! The sender's timer table: one optional deadline per timer, and the
//! next wake-up is their minimum (quinn-proto's `TimerTable`).
//!
//! `Timer::Control` is armed where the phase's control packet is sent
//! (and stopped while sending, when the RTO drives the session); the
//! others follow from the sub-states and are re-armed by
//! [`Sender::arm_timers`] at the end of every public call that changes
//! state, so [`Sender::poll_timeout`] is a lookup. `handle_timeout` acts on
//! each timer's own condition, as it did when the deadlines were merged by
//! hand.

use super::pacing::Mode;
use super::{Phase, Sender};
use crate::{Instant, RateGroup};

/// The sender's timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    /// The phase's multicast control packet (Hello, Offer, Close, Bye) is
    /// due again; in `Closing` before the hash, the next keepalive.
    Control,
    /// Admission gives up on receivers that have not registered.
    JoinWait,
    /// The progress watchdog ([`crate::SenderConfig::stall_timeout`]).
    Watchdog,
    /// The rate group's next report, resynchronisation or gathering deadline.
    Group,
    /// The retransmission timeout of the window's base.
    Rto,
    /// The missing answers of a poll round, an `Offer` or a `Close` are
    /// asked for again.
    Repoll,
    /// A Go-back-N rewind deferred by the suppression interval.
    DeferredRewind,
    /// The suppression interval of the selective repair queued first.
    Repair,
    /// The pacing allowance lets go the packet it held back.
    Pacer,
    /// Hunt's increase or decrease timer, while the allowance holds a packet.
    Hunt,
    /// The wait at the manifest's end for the receivers' `Have` reports.
    Have,
    /// The next look for receivers far behind the group (`Laggard::Eject`).
    Laggard,
    /// A large group's `Welcomes` is due.
    Welcomes,
}

const TIMERS: usize = 13;

impl Timer {
    fn index(self) -> usize {
        self as usize
    }
}

/// A deadline per [`Timer`], or none.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Timers {
    at: [Option<Instant>; TIMERS],
}

impl Timers {
    /// Arms `timer` for `at`, or stops it (`None`).
    pub(super) fn set(&mut self, timer: Timer, at: Option<Instant>) {
        self.at[timer.index()] = at;
    }

    /// When `timer` is due, if armed.
    pub(super) fn at(&self, timer: Timer) -> Option<Instant> {
        self.at[timer.index()]
    }

    /// Stops `timer`.
    pub(super) fn stop(&mut self, timer: Timer) {
        self.set(timer, None);
    }

    /// Whether `timer` is armed and due at `now`.
    pub(super) fn expired(&self, timer: Timer, now: Instant) -> bool {
        self.at[timer.index()].is_some_and(|at| now >= at)
    }

    /// The earliest armed deadline.
    pub(super) fn next(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }

    /// Stops every timer.
    fn clear(&mut self) {
        *self = Self::default();
    }
}

impl Sender {
    /// Re-arms the timers that follow from the sub-states; called at the
    /// end of every public method that may change them.
    pub(super) fn arm_timers(&mut self) {
        if self.phase == Phase::Done {
            self.timers.clear();
            return;
        }
        let join_wait =
            (self.phase == Phase::Joining).then(|| self.started + self.config.join_wait);
        self.timers.set(Timer::JoinWait, join_wait);
        let group = self
            .pacing
            .group
            .as_ref()
            .and_then(RateGroup::next_deadline);
        self.timers.set(Timer::Group, group);
        self.timers.set(Timer::Watchdog, self.stall_deadline());
        let sending = self.phase == Phase::Sending;
        let suppressed_until =
            |index: u32| self.window.sent_at[self.window.slot(index)] + self.config.suppress;
        let rto = sending.then(|| self.rto_deadline()).flatten();
        let rewind = self
            .window
            .deferred_rewind
            .filter(|_| sending)
            .map(|index| self.window.sent_at[self.window.slot(index)] + self.rewind_suppress());
        // A repair the allowance holds back waits for the allowance
        // (below), not for its own suppression deadline, now past.
        let repair = (sending && !self.pacing.blocked)
            .then(|| {
                let data = self.window.repairs.front().copied().map(suppressed_until);
                match (data, self.fec_deadline()) {
                    (Some(d), Some(p)) => Some(d.min(p)),
                    (d, p) => d.or(p),
                }
            })
            .flatten();
        // Only a packet the allowance held back waits for it; asking
        // otherwise would return a past deadline for a packet that
        // waits on something else (the window, a repair's suppression).
        let pacer = sending.then(|| self.held_by_pacer_until()).flatten();
        let hunt = match &self.pacing.mode {
            Mode::Hunt(c) if pacer.is_some() => c.next_deadline(),
            _ => None,
        };
        self.timers.set(Timer::Rto, rto);
        let again = if sending {
            self.repoll_deadline()
        } else {
            self.reask_deadline()
        };
        self.timers.set(Timer::Repoll, again);
        self.timers.set(Timer::DeferredRewind, rewind);
        self.timers.set(Timer::Repair, repair);
        self.timers.set(Timer::Pacer, pacer);
        self.timers.set(Timer::Hunt, hunt);
        self.timers.set(Timer::Have, self.have_deadline());
        self.timers
            .set(Timer::Laggard, self.laggard_check.filter(|_| sending));
        self.timers.set(Timer::Welcomes, self.members.batch_due);
        if sending {
            // No control packet while sending but the keepalive of a
            // streamed source that is behind.
            self.timers.set(Timer::Control, self.source_keepalive_at());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn the_next_wake_up_is_the_earliest_armed_timer() {
        let mut t = Timers::default();
        assert_eq!(t.next(), None);
        t.set(Timer::Rto, Some(at(50)));
        t.set(Timer::Control, Some(at(100)));
        t.set(Timer::Pacer, Some(at(7)));
        assert_eq!(t.next(), Some(at(7)));
        t.stop(Timer::Pacer);
        assert_eq!(t.next(), Some(at(50)));
        assert!(t.expired(Timer::Rto, at(50)));
        assert!(!t.expired(Timer::Control, at(99)));
        assert!(
            !t.expired(Timer::Pacer, at(1_000)),
            "a stopped timer never fires"
        );
    }
}
