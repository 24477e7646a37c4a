//! The object's data: which packets are held (a bit each, so data in any
//! order costs no reorder buffer), gaps that owe a NAK, polls that owe an
//! ack, and the slice of each new packet handed to the driver to store.

use super::Receiver;
use super::fec::ReadBack;
use crate::{DataChunk, FeedbackPolicy, Instant};
use rmcast_wire::{ECHO_COPY_MAX, Seq};

/// The accepted object's terms and what is held of it.
pub(super) struct Transfer {
    pub(super) isn: Seq,
    pub(super) payload_size: u64,
    pub(super) size: u64,
    pub(super) packets: u32,
    pub(super) window: u32,
    /// Bit per packet: held or not.
    pub(super) held: Vec<u64>,
    /// Index of the first packet not held.
    pub(super) cumulative: u32,
    /// One past the highest packet held.
    pub(super) highest: u32,
}

impl Transfer {
    /// Bytes of packet `index` (all but the object's last are full).
    pub(super) fn packet_len(&self, index: u32) -> usize {
        let offset = u64::from(index) * self.payload_size;
        (self.size - offset).min(self.payload_size) as usize
    }

    pub(super) fn has(&self, index: u32) -> bool {
        self.held[(index / 64) as usize] & (1 << (index % 64)) != 0
    }

    pub(super) fn set(&mut self, index: u32) {
        self.held[(index / 64) as usize] |= 1 << (index % 64);
        self.highest = self.highest.max(index + 1);
        while self.cumulative < self.packets && self.has(self.cumulative) {
            self.cumulative += 1;
        }
    }
}

impl Receiver {
    /// A data packet: stored if new and inside the window; a gap owes a
    /// NAK (rate-limited), a poll an ack, a relay an aggregate update.
    pub(super) fn on_data<'a>(
        &mut self,
        now: Instant,
        seq: Seq,
        poll: u16,
        copy: u8,
        payload: &'a [u8],
        store: &mut dyn ReadBack,
    ) -> Option<DataChunk<'a>> {
        let relays = self.relay.is_some();
        let polled = self
            .policy
            .unwrap_or(FeedbackPolicy::Ack)
            .answers_poll(poll, self.rank);
        let t = self.transfer.as_mut()?;
        let index = seq.since(t.isn);
        if index >= t.packets {
            self.stats.malformed += 1;
            return None;
        }
        let offset = u64::from(index) * t.payload_size;
        if payload.len() != t.packet_len(index) {
            self.stats.malformed += 1;
            return None;
        }
        if index >= t.cumulative.saturating_add(t.window) {
            self.stats.out_of_window += 1;
            return None;
        }
        if let Some(h) = &mut self.have {
            h.on_data(index);
        }
        self.feedback.last_heard = (seq, copy);
        let fresh = !t.has(index);
        if fresh {
            t.set(index);
            self.stats.data_packets += 1;
            if let Some(fec) = &mut self.fec {
                fec.keep(index, payload, t.packets);
            }
        } else {
            self.stats.duplicates += 1;
            if polled {
                // A packet this receiver holds, polled again (the stall
                // poll): the sender lacks its answer.
                self.feedback.widen_spread();
            }
        }
        // Under FEC a gap is news only once the interleaving group of its
        // block is over (each block's proactive parity is sent right after
        // its last data packet, so ahead of any packet of a later group):
        // losses the parity repairs need no NAK, and a group's receivers
        // stay quiet about them. One NAK then covers every block of the
        // group (without interleaving, a group is one block).
        let gap = match &self.fec {
            None => index > t.cumulative,
            Some(fec) => {
                let over = fec.group_over(t.cumulative, index);
                // A gap inside the group still coming waits for the group's
                // end; if nothing more comes (the sender's window is full,
                // waiting for this receiver's word) it is NAKed anyway once
                // the data has stopped for two NAK intervals.
                let deferred = index > t.cumulative && !over;
                self.feedback.idle_nak_at = deferred.then(|| now + self.config.nak_interval * 2);
                over
            }
        };
        if gap {
            let cumulative = t.cumulative;
            let repeat = self.feedback.last_nak.is_some_and(|(at, c)| {
                c == cumulative && now.saturating_since(at) < self.config.nak_interval
            });
            if !repeat {
                self.feedback.nak_owed = true;
                self.feedback.nak_idle = false;
                self.feedback.nak_echo = seq;
                self.feedback.nak_echo_copy = copy;
                self.feedback.last_nak = Some((now, cumulative));
                if let Some(interval) = self.config.rate_nak_interval
                    && self
                        .feedback
                        .last_rate_nak
                        .is_none_or(|at| now.saturating_since(at) >= interval)
                {
                    self.feedback.rate_nak_owed = Some(t.isn.add(cumulative));
                    self.feedback.last_rate_nak = Some(now);
                }
            }
        }
        if polled || relays {
            self.feedback.last_echo = seq;
            self.feedback.last_echo_copy = copy;
        }
        if polled {
            self.feedback.acks_owed += 1;
        }
        if let Some(relay) = &mut self.relay {
            relay.update(t.cumulative);
        }
        if fresh && let Some(block) = self.fec_waiting(index) {
            // Parity held for its block may now make up for the rest.
            self.fec_rebuild(block, false, Some((index, payload)), store);
        }
        self.check_all_data();
        fresh.then_some(DataChunk {
            offset,
            bytes: payload,
        })
    }
}

/// Writes the held-packet bitmap after `t.cumulative` (up to the highest
/// packet held) into `out`.
pub(super) fn fill_bitmap(t: &Transfer, out: &mut Vec<u8>) {
    out.clear();
    let first = t.cumulative + 1;
    // At most `FEEDBACK_BITMAP_MAX` bytes: a receiver further behind cuts
    // the bitmap there, and the sender judges nothing past it
    // (`Feedback::reach`).
    let end = t
        .highest
        .min(first + 8 * rmcast_wire::FEEDBACK_BITMAP_MAX as u32);
    if end <= first {
        return;
    }
    out.resize((end - first).div_ceil(8) as usize, 0);
    for index in first..end {
        if t.has(index) {
            let bit = index - first;
            out[(bit / 8) as usize] |= 1 << (bit % 8);
        }
    }
}

/// A data packet's `copy` as feedback carries it: 7 bits, saturating.
pub(super) fn echo_copy(copy: u16) -> u8 {
    u8::try_from(copy).map_or(ECHO_COPY_MAX, |c| c.min(ECHO_COPY_MAX))
}
