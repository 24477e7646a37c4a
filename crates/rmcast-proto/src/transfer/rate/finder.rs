//! `RateControl::Find`: the sender finds the path's rate itself, without
//! `--rate`.
//!
//! It paces at the group's measured delivery rate: bytes every receiver
//! acknowledged (the window's base) per unit of time, sampled every
//! [`SAMPLE`] or the time a window takes at the pace, whichever is longer
//! (what was sent at one pace is acknowledged a window later; nak-poll's
//! base moves once a poll), the largest of the last [`FILTER`] samples taken as
//! the path's rate (a max filter: a sample lowered by a repair or a stall
//! does not lower the pace). As BBR does for one TCP flow (Cardwell et al.,
//! ACM Queue 2016), on the group's slowest acknowledgements instead of one
//! receiver's:
//!
//! - **Startup**: pace at twice the rate found so far (from
//!   [`START_BITS_PER_S`]), so the pace doubles every sample while the path
//!   keeps up; once the rate found has not grown by a quarter in three
//!   samples, the path is full.
//! - **Cruise**: pace at the rate found times a gain that cycles per sample
//!   through 1.25 (probe for more), 0.75 (drain the queue the probe made)
//!   and six times 1. A sample an eighth above the rate found (the probe
//!   found room: after a stall longer than the filter, or a path freed)
//!   starts the doubling again.
//!
//! Sans-IO like the rest of the sender: it is told the acknowledged bytes
//! and the time, and answers with its pacer.

use crate::{Instant, Pacer};
use std::time::Duration;

/// The pace before the first sample, doubled every sample while the path
/// keeps up (10 Gbit/s is four doublings away). A slower link takes the
/// first window faster than it can carry, as an unpaced sender's does, and
/// the next samples say its rate. (From 100 Mbit/s, a 1 Gbit/s path took
/// 0.2 s to find in the simulator: nak-poll's base moves once a poll, a
/// few per window, so samples are sparse while the pace is low.)
pub const START_BITS_PER_S: u64 = 1_000_000_000;
/// The lowest pace.
pub const FLOOR_BITS_PER_S: u64 = 1_000_000;
/// How long a sample spans at least.
pub const SAMPLE: Duration = Duration::from_millis(10);
/// Samples the max filter keeps (0.1 s of them).
pub const FILTER: usize = 10;
/// Cruise's gains, one per sample, in eighths.
const GAINS: [u64; 8] = [10, 6, 8, 8, 8, 8, 8, 8];
/// Startup's gain, in eighths.
const STARTUP_GAIN: u64 = 16;
/// The smallest bucket: one full UDP GSO batch (as the fixed pacer's).
const BURST_MIN: u64 = 65_000;
/// The bucket also holds this fraction of a second of the pace (2 ms).
const BURST_PER_S: u64 = 500;

/// Where the finder stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinderState {
    /// Doubling the pace while the delivery rate grows.
    Startup,
    /// Pacing at the rate found, probing above it now and then.
    Cruise,
}

/// The rate finder of [`crate::RateControl::Find`].
#[derive(Clone, Debug)]
pub struct RateFinder {
    pacer: Pacer,
    pace: u64,
    state: FinderState,
    /// The last sample's end: its time and the bytes acknowledged then.
    last: Option<(Instant, u64)>,
    /// Delivery rates of the last samples, bits/s (a ring).
    samples: [u64; FILTER],
    next: usize,
    /// Startup: the rate found when it last grew by a quarter, and the
    /// samples since; cruise: the rate found at the cycle's start.
    best: u64,
    flat: u8,
    /// Cruise: the gain in effect, an index into [`GAINS`].
    cycle: usize,
    /// Bytes a full window holds on the wire: a sample spans at least the
    /// time the window takes at the pace (the acknowledgements of what was
    /// sent at one pace come back a window later).
    window_bytes: u64,
}

impl RateFinder {
    /// A finder starting at `START_BITS_PER_S` at `now`, for a window of
    /// `window_bytes` on the wire.
    #[must_use]
    pub fn new(now: Instant, window_bytes: u64) -> Self {
        Self {
            pacer: Pacer::new(START_BITS_PER_S, burst(START_BITS_PER_S), now),
            pace: START_BITS_PER_S,
            state: FinderState::Startup,
            last: None,
            samples: [0; FILTER],
            next: 0,
            best: 0,
            flat: 0,
            cycle: 0,
            window_bytes,
        }
    }

    /// How long a sample spans at least at the pace now: `SAMPLE`, or
    /// the time a window takes at the pace, whichever is longer.
    #[must_use]
    pub fn span(&self) -> Duration {
        let drain = Duration::from_nanos(
            u64::try_from(
                u128::from(self.window_bytes) * 8 * 1_000_000_000 / u128::from(self.pace.max(1)),
            )
            .unwrap_or(u64::MAX),
        );
        SAMPLE.max(drain)
    }

    /// The pacer data packets take their allowance from.
    pub fn pacer(&mut self) -> &mut Pacer {
        &mut self.pacer
    }

    /// The pacer, to read.
    #[must_use]
    pub fn pacer_ref(&self) -> &Pacer {
        &self.pacer
    }

    /// The pace now, bits/s on the wire.
    #[must_use]
    pub fn pace_bits_per_s(&self) -> u64 {
        self.pace
    }

    /// The path's rate as found: the largest delivery rate of the last
    /// samples, bits/s on the wire (0 before the first).
    #[must_use]
    pub fn found_bits_per_s(&self) -> u64 {
        self.samples.iter().copied().max().unwrap_or(0)
    }

    /// Startup or cruise.
    #[must_use]
    pub fn state(&self) -> FinderState {
        self.state
    }

    /// Every receiver has acknowledged `acked` bytes at `now` (the window's
    /// base moved; counted on the wire, as the pacer counts): a sample,
    /// once [`RateFinder::span`] has passed since the last.
    pub fn on_acked(&mut self, now: Instant, acked: u64) {
        let Some((at, before)) = self.last else {
            self.last = Some((now, acked));
            return;
        };
        let dt = now.saturating_since(at);
        if dt < self.span() || acked <= before {
            return;
        }
        self.last = Some((now, acked));
        let rate =
            u64::try_from(u128::from(acked - before) * 8 * 1_000_000_000 / dt.as_nanos().max(1))
                .unwrap_or(u64::MAX);
        self.samples[self.next] = rate;
        self.next = (self.next + 1) % FILTER;
        let found = self.found_bits_per_s();
        match self.state {
            FinderState::Startup => {
                if found >= self.best + self.best / 4 {
                    (self.best, self.flat) = (found, 0);
                } else {
                    self.flat += 1;
                }
                if self.flat >= 3 {
                    self.state = FinderState::Cruise;
                    self.cycle = 0;
                }
            }
            FinderState::Cruise if rate > self.best + self.best / 8 => {
                // A probe got through more than the rate found: the path
                // has room (it was slowed by a stall, or freed since): find
                // the rate again, doubling.
                self.state = FinderState::Startup;
                (self.best, self.flat) = (found, 0);
            }
            FinderState::Cruise => {
                if self.cycle == 0 {
                    // Each cycle starts from what the last one found, so a
                    // path that slowed is followed down too.
                    self.best = found;
                }
                self.cycle = (self.cycle + 1) % GAINS.len();
            }
        }
        let gain = match self.state {
            FinderState::Startup => STARTUP_GAIN,
            FinderState::Cruise => GAINS[self.cycle],
        };
        // Never below 1 Mbit/s: a stalled group must not talk the pace
        // down to nothing. In startup, never below the pace so far either:
        // the first samples (receivers still starting, acknowledgements a
        // window late) must not talk the doubling down.
        let mut pace = (found.saturating_mul(gain) / 8).max(FLOOR_BITS_PER_S);
        if self.state == FinderState::Startup {
            pace = pace.max(self.pace);
        }
        self.set_pace(now, pace);
    }

    fn set_pace(&mut self, now: Instant, pace: u64) {
        self.pace = pace;
        self.pacer.set_rate(now, pace, burst(pace));
    }
}

/// The pacer's bucket at `pace`: a GSO batch, or 2 ms of the pace.
fn burst(pace: u64) -> u64 {
    BURST_MIN.max(pace / 8 / BURST_PER_S)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    /// Feeds the finder a path that delivers `min(pace, link)`: the
    /// acknowledged bytes grow at that rate, sampled every 10 ms.
    fn run(link: u64, ms: u64) -> RateFinder {
        let mut f = RateFinder::new(at(0), 64_000);
        let mut acked = 0f64;
        for t in (0..ms).step_by(10) {
            let rate = f.pace_bits_per_s().min(link) as f64;
            acked += rate / 8.0 * 0.010;
            f.on_acked(at(t + 10), acked as u64);
        }
        f
    }

    #[test]
    fn it_finds_links_from_10_mbit_to_10_gbit_within_a_few_hundred_ms() {
        for link in [10_000_000u64, 100_000_000, 1_000_000_000, 10_000_000_000] {
            let f = run(link, 1_000);
            assert_eq!(f.state(), FinderState::Cruise, "{link}");
            let found = f.found_bits_per_s();
            assert!(
                found >= link * 95 / 100 && found <= link,
                "link {link}: found {found}"
            );
            // The pace cycles around the link rate, never far above it.
            assert!(
                f.pace_bits_per_s() <= link * 5 / 4,
                "{link}: pace {}",
                f.pace_bits_per_s()
            );
        }
    }

    #[test]
    fn startup_doubles_until_the_link_is_full_then_cruises() {
        let mut f = RateFinder::new(at(0), 64_000);
        f.on_acked(at(0), 0);
        let mut acked = 0u64;
        let mut paces = Vec::new();
        for k in 1..=12u64 {
            acked += f.pace_bits_per_s().min(40_000_000_000) / 8 / 100;
            f.on_acked(at(10 * k), acked);
            paces.push(f.pace_bits_per_s());
        }
        // 1 → 2 → 4 Gbit/s while the path keeps up.
        assert_eq!(paces[0], 2_000_000_000, "{paces:?}");
        assert_eq!(paces[1], 4_000_000_000, "{paces:?}");
        assert_eq!(f.state(), FinderState::Cruise, "{paces:?}");
    }

    #[test]
    fn a_lowered_sample_does_not_lower_the_pace_until_it_ages_out() {
        let mut f = run(100_000_000, 1_000);
        let found = f.found_bits_per_s();
        // Repairs stall the group for one sample: a tenth of the rate.
        let (t, acked) = f.last.unwrap();
        let acked = acked + 100_000_000 / 8 / 100 / 10;
        f.on_acked(t + SAMPLE, acked);
        assert_eq!(f.found_bits_per_s(), found);
    }

    #[test]
    fn after_a_long_stall_the_rate_is_found_again_by_doubling() {
        let mut f = run(1_000_000_000, 1_000);
        let (mut t, mut acked) = f.last.unwrap();
        // Delivered at `rate` for one sample's span.
        let mut step = |f: &mut RateFinder, rate: u64| {
            let span = f.span();
            t = t + span;
            acked += (rate as f64 / 8.0 * span.as_secs_f64()) as u64;
            f.on_acked(t, acked);
        };
        // A long stall at a hundredth of the link: the fast samples age out.
        for _ in 0..2 * FILTER {
            step(&mut f, 10_000_000);
        }
        assert!(
            f.found_bits_per_s() < 50_000_000,
            "{}",
            f.found_bits_per_s()
        );
        // The path is back: a probe finds room, a few doublings the rate.
        for _ in 0..30 {
            let rate = f.pace_bits_per_s().min(1_000_000_000);
            step(&mut f, rate);
        }
        assert!(
            f.found_bits_per_s() >= 950_000_000,
            "{}",
            f.found_bits_per_s()
        );
    }

    #[test]
    fn no_progress_is_no_sample() {
        let mut f = RateFinder::new(at(0), 64_000);
        f.on_acked(at(0), 1000);
        f.on_acked(at(50), 1000);
        assert_eq!(f.found_bits_per_s(), 0);
        assert_eq!(f.pace_bits_per_s(), START_BITS_PER_S);
        // Too soon after the last: no sample either.
        let mut f = RateFinder::new(at(0), 64_000);
        f.on_acked(at(0), 0);
        f.on_acked(at(5), 5000);
        assert_eq!(f.found_bits_per_s(), 0);
    }
}
