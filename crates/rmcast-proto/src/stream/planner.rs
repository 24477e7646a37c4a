//! Poll planning (implosion control): at most a fixed number of responses
//! may be planned to arrive in each epoch of the time ahead.

use crate::Instant;
use std::time::Duration;

/// Counts the responses planned per epoch over a bounded horizon.
///
/// Time is cut into epochs of equal length from the driver's epoch; a ring
/// of counters covers the `horizon` epochs from the current one. Reserving
/// finds the first epoch at or after the one a response could reach that
/// still has room, as the paper's vector of scheduled responses does.
#[derive(Clone, Debug)]
pub struct PollPlanner {
    epoch_ns: u64,
    per_epoch: u16,
    counts: Vec<u16>,
    /// Absolute index of the oldest epoch the ring holds (the current one).
    first_epoch: u64,
}

impl PollPlanner {
    /// A planner of `horizon` epochs of `epoch` each, `per_epoch` responses each.
    #[must_use]
    pub fn new(epoch: Duration, per_epoch: u16, horizon: usize) -> Self {
        assert!(per_epoch > 0 && horizon > 0 && !epoch.is_zero());
        Self {
            epoch_ns: u64::try_from(epoch.as_nanos()).unwrap_or(u64::MAX),
            per_epoch,
            counts: vec![0; horizon],
            first_epoch: 0,
        }
    }

    /// The epoch length.
    #[must_use]
    pub fn epoch(&self) -> Duration {
        Duration::from_nanos(self.epoch_ns)
    }

    /// Responses allowed per epoch.
    #[must_use]
    pub fn per_epoch(&self) -> u16 {
        self.per_epoch
    }

    /// The absolute epoch `t` falls in.
    #[must_use]
    pub fn epoch_of(&self, t: Instant) -> u64 {
        t.as_nanos() / self.epoch_ns
    }

    /// When epoch `e` starts.
    #[must_use]
    pub fn epoch_start(&self, e: u64) -> Instant {
        Instant::from_nanos(e.saturating_mul(self.epoch_ns))
    }

    fn advance(&mut self, now: Instant) {
        let current = self.epoch_of(now);
        if current <= self.first_epoch {
            return;
        }
        let horizon = self.counts.len() as u64;
        if current - self.first_epoch >= horizon {
            self.counts.fill(0);
        } else {
            for e in self.first_epoch..current {
                self.counts[(e % horizon) as usize] = 0;
            }
        }
        self.first_epoch = current;
    }

    /// Reserves room for one response that cannot arrive before
    /// `earliest_arrival`, aiming at the middle of an epoch. Returns the
    /// epoch and the planned arrival time, or `None` when the whole horizon
    /// is full.
    pub fn reserve(&mut self, now: Instant, earliest_arrival: Instant) -> Option<(u64, Instant)> {
        self.advance(now);
        let half = self.epoch_ns / 2;
        // First epoch whose middle is not before the earliest arrival.
        let e0 = earliest_arrival
            .as_nanos()
            .saturating_sub(half)
            .div_ceil(self.epoch_ns)
            .max(self.first_epoch);
        let horizon = self.counts.len() as u64;
        for e in e0..self.first_epoch + horizon {
            let slot = &mut self.counts[(e % horizon) as usize];
            if *slot < self.per_epoch {
                *slot += 1;
                return Some((e, Instant::from_nanos(e * self.epoch_ns + half)));
            }
        }
        None
    }

    /// Gives back a reservation in epoch `e` that will not be used.
    pub fn release(&mut self, e: u64) {
        let horizon = self.counts.len() as u64;
        if e >= self.first_epoch && e < self.first_epoch + horizon {
            let slot = &mut self.counts[(e % horizon) as usize];
            *slot = slot.saturating_sub(1);
        }
    }

    /// Responses planned in epoch `e` (0 outside the horizon).
    #[must_use]
    pub fn planned(&self, e: u64) -> u16 {
        let horizon = self.counts.len() as u64;
        if e >= self.first_epoch && e < self.first_epoch + horizon {
            self.counts[(e % horizon) as usize]
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn full_epochs_push_reservations_to_the_next_free_one() {
        let mut p = PollPlanner::new(Duration::from_millis(10), 3, 16);
        let now = Instant::from_nanos(100 * MS);
        let mut epochs = Vec::new();
        for _ in 0..7 {
            let (e, at) = p.reserve(now, now + Duration::from_millis(1)).unwrap();
            assert!(at >= now + Duration::from_millis(1));
            epochs.push(e);
        }
        assert_eq!(epochs, [10, 10, 10, 11, 11, 11, 12]);
        for e in 10..13 {
            assert!(p.planned(e) <= 3);
        }
    }

    #[test]
    fn arrival_is_aimed_at_the_middle_of_an_epoch() {
        let mut p = PollPlanner::new(Duration::from_millis(10), 1, 16);
        let now = Instant::from_nanos(100 * MS);
        // Earliest 107 ms: epoch 10's middle (105) is too early, so 11 (115).
        let (e, at) = p.reserve(now, Instant::from_nanos(107 * MS)).unwrap();
        assert_eq!((e, at), (11, Instant::from_nanos(115 * MS)));
    }

    #[test]
    fn a_full_horizon_refuses_and_passing_time_frees_it() {
        let mut p = PollPlanner::new(Duration::from_millis(1), 1, 4);
        let now = Instant::ZERO;
        for _ in 0..4 {
            assert!(p.reserve(now, now).is_some());
        }
        assert_eq!(p.reserve(now, now), None);
        let later = Instant::from_nanos(2 * MS);
        assert_eq!(p.reserve(later, later).map(|r| r.0), Some(4));
    }

    #[test]
    fn release_frees_a_slot() {
        let mut p = PollPlanner::new(Duration::from_millis(1), 1, 4);
        let (e, _) = p.reserve(Instant::ZERO, Instant::ZERO).unwrap();
        p.release(e);
        assert_eq!(
            p.reserve(Instant::ZERO, Instant::ZERO).map(|r| r.0),
            Some(e)
        );
    }
}
