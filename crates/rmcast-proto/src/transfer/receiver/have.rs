//! Resume and delta: the receiver's `Have` report of the packets it holds
//! already (the driver found their bytes on its disk and stored them).
//!
//! The driver says "still looking" ([`Receiver::report_pending`]) when it
//! starts reading its disk, then gives the packets it stored
//! ([`Receiver::report_held`]). Those count as received from then on. The
//! report goes to the sender in parts of [`HAVE_MAX_RANGES`] ranges and is
//! repeated, backing off, until the sender shows it stopped waiting: a data
//! packet past the manifest, or the `Close`.

use super::Receiver;
use crate::{Dest, Instant, Transmit};
use rmcast_wire::{Body, HAVE_MAX_RANGES, HAVE_RANGE_LEN, Have, Header, encode_have_ranges};
use std::time::Duration;

/// First repeat of the report; doubles up to [`REPEAT_MAX`].
const REPEAT_FIRST: Duration = Duration::from_millis(50);
/// Longest interval between repeats (the sender waits 2 s of silence).
const REPEAT_MAX: Duration = Duration::from_millis(400);
/// Interval of "still looking": the driver's search ending is noticed on
/// the wake-up this sets, so it is short.
const PENDING_INTERVAL: Duration = Duration::from_millis(25);

#[derive(Debug)]
pub(super) struct HaveReport {
    /// First packet after the manifest: data at or past it means the
    /// sender fixed its plan.
    barrier: u32,
    /// The ranges in wire layout; `None` while still looking.
    ranges: Option<Vec<u8>>,
    /// Next part to send in this round; `parts()` when the round is sent.
    next_part: u16,
    /// When the next round starts.
    due: Instant,
    interval: Duration,
    done: bool,
}

impl HaveReport {
    fn parts(&self) -> u16 {
        match &self.ranges {
            None => 1,
            Some(r) => {
                let n = (r.len() / HAVE_RANGE_LEN).div_ceil(HAVE_MAX_RANGES).max(1);
                u16::try_from(n).unwrap_or(u16::MAX)
            }
        }
    }

    /// The sender is past the barrier: nothing more to report.
    pub(super) fn on_data(&mut self, index: u32) {
        if index >= self.barrier {
            self.done = true;
        }
    }

    pub(super) fn finish(&mut self) {
        self.done = true;
    }

    pub(super) fn deadline(&self) -> Option<Instant> {
        (!self.done).then_some(self.due)
    }
}

impl Receiver {
    /// Resume and delta: the driver is looking through its disk for chunks
    /// of the object it holds already; the sender is asked to wait for the
    /// report (the manifest ends before packet `barrier`).
    pub fn report_pending(&mut self, now: Instant, barrier: u32) {
        if self.transfer.is_none() || self.have.is_some() {
            return;
        }
        self.have = Some(HaveReport {
            barrier,
            ranges: None,
            next_part: 0,
            due: now,
            interval: PENDING_INTERVAL,
            done: false,
        });
    }

    /// Resume and delta: the driver has stored the bytes of these packets
    /// (`(first, count)` packet indexes, ascending and disjoint; others are
    /// ignored) from its disk. They count as received, and the sender is
    /// told, so it sends only what some receiver lacks. `barrier`: the
    /// first packet after the manifest.
    pub fn report_held(&mut self, now: Instant, barrier: u32, ranges: &[(u32, u32)]) {
        let Some(t) = self.transfer.as_mut() else {
            return;
        };
        if self.have.as_ref().is_some_and(|h| h.ranges.is_some()) {
            return;
        }
        let mut kept = Vec::with_capacity(ranges.len());
        let mut end = 0u32;
        for &(first, count) in ranges {
            if first < end || count == 0 || first >= t.packets {
                continue;
            }
            let count = count.min(t.packets - first);
            for index in first..first + count {
                if !t.has(index) {
                    t.set(index);
                    self.stats.held_packets += 1;
                }
            }
            kept.push((first, count));
            end = first + count;
        }
        let mut bytes = Vec::with_capacity(kept.len() * HAVE_RANGE_LEN);
        encode_have_ranges(&kept, &mut bytes);
        self.have = Some(HaveReport {
            barrier,
            ranges: Some(bytes),
            next_part: 0,
            due: now,
            interval: REPEAT_FIRST,
            done: false,
        });
        if let Some(relay) = &mut self.relay {
            relay.update(t.cumulative);
        }
        self.check_all_data();
    }

    /// The next part of the report, when one is due.
    pub(super) fn poll_have(
        &mut self,
        now: Instant,
        to: Dest,
        header: Header,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let h = self.have.as_mut()?;
        if h.done {
            return None;
        }
        let parts = h.parts();
        if h.next_part >= parts {
            if now < h.due {
                return None;
            }
            h.next_part = 0;
        }
        let part = h.next_part;
        h.next_part += 1;
        if h.next_part >= parts {
            h.due = now + h.interval;
            if h.ranges.is_some() {
                h.interval = (h.interval * 2).min(REPEAT_MAX);
            }
        }
        let body = match &h.ranges {
            None => Have {
                part: 0,
                parts: 0,
                ranges: &[],
            },
            Some(r) => {
                let step = HAVE_MAX_RANGES * HAVE_RANGE_LEN;
                let from = usize::from(part) * step;
                Have {
                    part,
                    parts,
                    ranges: &r[from.min(r.len())..(from + step).min(r.len())],
                }
            }
        };
        crate::transfer::emit(to, header, Body::Have(body), buf)
    }
}
