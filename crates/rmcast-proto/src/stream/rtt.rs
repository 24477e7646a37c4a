//! Per-receiver round-trip time estimation (RFC 6298's smoothing).

use std::time::Duration;

/// Smoothed RTT and its variation for one receiver.
#[derive(Clone, Copy, Debug)]
pub struct RttEstimator {
    srtt: Duration,
    rttvar: Duration,
    sampled: bool,
}

impl RttEstimator {
    /// An estimator that assumes `initial` until the first sample.
    #[must_use]
    pub fn new(initial: Duration) -> Self {
        Self {
            srtt: initial,
            rttvar: initial / 2,
            sampled: false,
        }
    }

    /// Folds in one measured round trip.
    pub fn sample(&mut self, rtt: Duration) {
        if self.sampled {
            let err = self.srtt.abs_diff(rtt);
            self.rttvar = (self.rttvar * 3 + err) / 4;
            self.srtt = (self.srtt * 7 + rtt) / 8;
        } else {
            self.srtt = rtt;
            self.rttvar = rtt / 2;
            self.sampled = true;
        }
    }

    /// The smoothed round-trip time.
    #[must_use]
    pub fn srtt(&self) -> Duration {
        self.srtt
    }

    /// Whether a sample has been taken.
    #[must_use]
    pub fn sampled(&self) -> bool {
        self.sampled
    }

    /// Retransmission timeout: `srtt + 4 rttvar`, clamped to `[min, max]`.
    #[must_use]
    pub fn rto(&self, min: Duration, max: Duration) -> Duration {
        (self.srtt + self.rttvar * 4).clamp(min, max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtt_converges_to_a_steady_sample() {
        let mut e = RttEstimator::new(Duration::from_millis(100));
        for _ in 0..50 {
            e.sample(Duration::from_millis(2));
        }
        assert!(e.srtt() < Duration::from_micros(2100), "{:?}", e.srtt());
        let rto = e.rto(Duration::from_millis(1), Duration::from_secs(1));
        assert!(rto < Duration::from_millis(3), "{rto:?}");
    }

    #[test]
    fn rto_is_clamped() {
        let e = RttEstimator::new(Duration::from_secs(10));
        assert_eq!(
            e.rto(Duration::from_millis(1), Duration::from_secs(2)),
            Duration::from_secs(2)
        );
    }
}
