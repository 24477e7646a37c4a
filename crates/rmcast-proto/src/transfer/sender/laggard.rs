//! `Laggard::Eject`: a receiver that stays far behind the rest of the
//! group is ejected, so it no longer sets the group's pace.
//!
//! While sending, every quarter of `after` (at least 25 ms) the sender
//! compares each receiver's acknowledged point with the group's median
//! receiver's. One at least half a window behind it is *lagging*; one
//! lagging for `after` in a row is failed, named as a laggard, and the
//! window moves on to the next slowest. A receiver that keeps up, whatever
//! its repairs, is never half a window behind the median for long: the
//! window holds the fast ones at most a window ahead of the slowest, and
//! acknowledgements come every poll. Half the group or more being slow is
//! the group's pace, not a laggard: nobody is ejected then.

use super::{Laggard, Sender};
use crate::Instant;
use std::time::Duration;

/// How the reason of a receiver ejected as a laggard begins (the
/// simulator's invariants tell such a failure from others by it).
pub const EJECTED_LAGGARD: &str = "ejected as a laggard";

/// The shortest interval between two looks.
const CHECK_MIN: Duration = Duration::from_millis(25);

impl Sender {
    /// Arms the first look when the data phase starts.
    pub(super) fn start_laggard_checks(&mut self, now: Instant) {
        self.laggard_check = match self.config.laggard {
            Laggard::Eject { after } => Some(now + (after / 4).max(CHECK_MIN)),
            Laggard::Wait => None,
        };
    }

    /// Marks the receivers far behind the group's median, and ejects
    /// those that have been so for `after`.
    pub(super) fn check_laggards(&mut self, now: Instant) {
        let Laggard::Eject { after } = self.config.laggard else {
            self.laggard_check = None;
            return;
        };
        self.laggard_check = Some(now + (after / 4).max(CHECK_MIN));
        let mut points: Vec<u32> = (self.members.list.iter())
            .filter(|m| m.in_data())
            .map(|m| m.cumulative)
            .collect();
        if points.len() < 2 {
            return;
        }
        let mid = points.len() / 2;
        let median = *points.select_nth_unstable(mid).1;
        let far = (self.config.window / 2).max(1);
        let mut eject = Vec::new();
        for (i, m) in self.members.list.iter_mut().enumerate() {
            if !m.in_data() || m.cumulative.saturating_add(far) > median {
                m.lagging_since = None;
                continue;
            }
            let since = *m.lagging_since.get_or_insert(now);
            if now.saturating_since(since) >= after {
                eject.push((i, m.cumulative, since));
            }
        }
        let ejected = !eject.is_empty();
        for (i, held, since) in eject {
            let reason = format!(
                "{EJECTED_LAGGARD} (--laggard eject): at least {far} packets behind the \
                 group's median receiver for {:.1} s (it held {held} of {} packets, the \
                 median {median})",
                now.saturating_since(since).as_secs_f64(),
                self.packets
            );
            self.fail_member(now, i, reason);
        }
        if ejected {
            self.after_member_change(now);
        }
    }
}
