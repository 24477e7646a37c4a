//! Token-bucket pacing of data packets at a configured bit rate.

use crate::Instant;
use std::time::Duration;

/// Limits the sender's data rate. Tokens are bytes; the bucket holds
/// `burst_bytes`, so bursts can fill a batched send but never exceed it.
#[derive(Clone, Debug)]
pub struct Pacer {
    rate_bytes_per_s: u64,
    burst_bytes: u64,
    tokens: u64,
    updated: Instant,
}

impl Pacer {
    /// A pacer at `rate_bits_per_s` with a bucket of `burst_bytes`.
    #[must_use]
    pub fn new(rate_bits_per_s: u64, burst_bytes: u64, now: Instant) -> Self {
        let rate_bytes_per_s = (rate_bits_per_s / 8).max(1);
        Self {
            rate_bytes_per_s,
            burst_bytes,
            tokens: burst_bytes,
            updated: now,
        }
    }

    /// The bucket's size in bytes.
    #[must_use]
    pub fn burst_bytes(&self) -> u64 {
        self.burst_bytes
    }

    fn refill(&mut self, now: Instant) {
        let elapsed_ns = u128::from(now.saturating_since(self.updated).as_nanos() as u64);
        let add = elapsed_ns * u128::from(self.rate_bytes_per_s) / 1_000_000_000;
        if add > 0 {
            self.tokens = (u128::from(self.tokens) + add).min(u128::from(self.burst_bytes)) as u64;
            // Advance only by the time the added tokens account for, so no
            // fractional credit is lost between calls.
            let used_ns = add * 1_000_000_000 / u128::from(self.rate_bytes_per_s);
            self.updated = self.updated + Duration::from_nanos(used_ns as u64);
            if self.tokens == self.burst_bytes {
                self.updated = now;
            }
        }
    }

    /// From `now` on, `rate_bits_per_s` with a bucket of `burst_bytes` (the
    /// tokens earned so far at the old rate are kept, up to the new bucket).
    pub fn set_rate(&mut self, now: Instant, rate_bits_per_s: u64, burst_bytes: u64) {
        self.refill(now);
        self.updated = now;
        self.rate_bytes_per_s = (rate_bits_per_s / 8).max(1);
        self.burst_bytes = burst_bytes;
        self.tokens = self.tokens.min(burst_bytes);
    }

    /// Whether `len` bytes may go now; if so they are taken from the bucket.
    pub fn try_take(&mut self, now: Instant, len: usize) -> bool {
        self.refill(now);
        // A packet larger than the bucket goes once the bucket is full.
        let need = (len as u64).min(self.burst_bytes);
        if self.tokens >= need {
            self.tokens -= need;
            true
        } else {
            false
        }
    }

    /// When `len` bytes will be available.
    #[must_use]
    pub fn ready_at(&self, len: usize) -> Instant {
        let need = (len as u64).min(self.burst_bytes);
        if self.tokens >= need {
            return self.updated;
        }
        let missing = u128::from(need - self.tokens);
        let ns = missing * 1_000_000_000 / u128::from(self.rate_bytes_per_s) + 1;
        self.updated + Duration::from_nanos(ns as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacer_holds_long_run_rate() {
        // 8 Mbit/s = 1 MB/s; send 1000-byte packets for one simulated second.
        let mut p = Pacer::new(8_000_000, 4_000, Instant::ZERO);
        let mut now = Instant::ZERO;
        let mut sent = 0u64;
        while now < Instant::from_nanos(1_000_000_000) {
            if p.try_take(now, 1000) {
                sent += 1000;
            } else {
                now = p.ready_at(1000);
            }
        }
        // One second of rate plus the initial bucket.
        assert!((1_000_000..=1_005_000).contains(&sent), "sent {sent}");
    }

    #[test]
    fn pacer_never_exceeds_burst() {
        let mut p = Pacer::new(8_000_000, 3_000, Instant::ZERO);
        let later = Instant::from_nanos(10_000_000_000);
        let mut burst = 0;
        while p.try_take(later, 1000) {
            burst += 1;
        }
        assert_eq!(burst, 3);
    }
}
