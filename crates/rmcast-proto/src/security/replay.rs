//! The per-party replay window (RFC 4303 §3.4.3, as WireGuard keeps it).
//!
//! Every sealed packet carries its sealer's counter, strictly increasing per
//! party. A counter is accepted once: the window remembers the highest seen
//! and which of the [`WINDOW`] below it were seen. Anything older than the
//! window is refused as well, because it can no longer be told apart from
//! a replay. The check and the marking are separate, so a packet whose tag
//! fails does not move the window.

/// How many counters below the highest the window remembers. The sender's
/// packets arrive in order on a LAN; 4,096 covers a reordering switch and
/// a GSO batch of repairs overtaken by new data many times over.
pub const WINDOW: u64 = 4096;
const WORDS: usize = (WINDOW / 64) as usize;

/// One sealer's accepted counters.
#[derive(Clone, Debug)]
pub struct ReplayWindow {
    /// One past the highest counter accepted (0: none yet).
    next: u64,
    /// Bit `c % WINDOW` set: counter `c` (within the window) was accepted.
    bits: [u64; WORDS],
}

/// Why a counter is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replay {
    /// Accepted before.
    Seen,
    /// Older than the window: can no longer be checked.
    TooOld,
}

impl Default for ReplayWindow {
    fn default() -> Self {
        Self {
            next: 0,
            bits: [0; WORDS],
        }
    }
}

impl ReplayWindow {
    /// Whether `counter` may be accepted (does not record it).
    pub fn check(&self, counter: u64) -> Result<(), Replay> {
        if counter >= self.next {
            return Ok(());
        }
        if self.next - counter > WINDOW {
            return Err(Replay::TooOld);
        }
        if self.bit(counter) {
            Err(Replay::Seen)
        } else {
            Ok(())
        }
    }

    /// Records `counter` as accepted (after [`Self::check`] and the tag).
    pub fn mark(&mut self, counter: u64) {
        if counter >= self.next {
            // Clear the slots the window slides over.
            let advance = counter + 1 - self.next;
            if advance >= WINDOW {
                self.bits = [0; WORDS];
            } else {
                for c in self.next..=counter {
                    self.set(c, false);
                }
            }
            self.next = counter + 1;
        }
        self.set(counter, true);
    }

    fn bit(&self, c: u64) -> bool {
        let i = (c % WINDOW) as usize;
        self.bits[i / 64] >> (i % 64) & 1 == 1
    }

    fn set(&mut self, c: u64, on: bool) {
        let i = (c % WINDOW) as usize;
        if on {
            self.bits[i / 64] |= 1 << (i % 64);
        } else {
            self.bits[i / 64] &= !(1 << (i % 64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    #[test]
    fn each_counter_is_accepted_once() {
        let mut w = ReplayWindow::default();
        for c in [0, 1, 5, 3, 2, 4] {
            assert_eq!(w.check(c), Ok(()));
            w.mark(c);
            assert_eq!(w.check(c), Err(Replay::Seen));
        }
        assert_eq!(w.check(6), Ok(()));
    }

    #[test]
    fn counters_older_than_the_window_are_refused() {
        let mut w = ReplayWindow::default();
        w.mark(10 * WINDOW);
        assert_eq!(w.check(9 * WINDOW), Err(Replay::TooOld));
        assert_eq!(w.check(9 * WINDOW + 1), Ok(()));
        assert_eq!(w.check(10 * WINDOW), Err(Replay::Seen));
    }

    proptest! {
        /// Against a set of everything accepted: the window accepts exactly
        /// the unseen counters not older than WINDOW below the highest.
        #[test]
        fn the_window_agrees_with_a_model(ops in proptest::collection::vec(0u64..3 * WINDOW, 1..400)) {
            let mut w = ReplayWindow::default();
            let mut seen = HashSet::new();
            let mut top: Option<u64> = None;
            for c in ops {
                let too_old = top.is_some_and(|t| c <= t && t + 1 - c > WINDOW);
                let expect = if too_old {
                    Err(Replay::TooOld)
                } else if seen.contains(&c) {
                    Err(Replay::Seen)
                } else {
                    Ok(())
                };
                let got = w.check(c);
                prop_assert_eq!(got, expect);
                if got.is_ok() {
                    w.mark(c);
                    seen.insert(c);
                    top = Some(top.map_or(c, |t| t.max(c)));
                }
            }
        }
    }
}
