//! Every host's one pending protocol timer ([`Timers`]).

/// Every host's one pending protocol timer, kept apart from the event heap
/// and ordered as it orders events: by time, then by the insertion counter
/// drawn when the timer was armed.
///
/// A receiver machine moves its deadline with nearly every datagram. When
/// each re-arm pushed a new heap event and left the old one behind to pop
/// later as a no-op, the heap held one stale timer per delivered datagram
/// until its (seconds-away) deadline: 32 bytes × N × packets, 1 GiB at
/// 1,000 receivers × 64 MiB. Here a re-arm moves the host's one entry. The
/// run is the same event for event; only the stale no-op pops are gone
/// (the report's `events` no longer counts them).
pub(super) struct Timers {
    /// Host numbers, a binary min-heap by their entry's (at, seq).
    heap: Vec<u16>,
    /// Per host: its timer, and its index in `heap` (`NOT_QUEUED`: none).
    entries: Vec<TimerEntry>,
}

#[derive(Clone, Copy)]
struct TimerEntry {
    at: u64,
    seq: u64,
    generation: u64,
    pos: u32,
}

const NOT_QUEUED: u32 = u32::MAX;

impl Timers {
    pub(super) fn new(hosts: usize) -> Self {
        Self {
            heap: Vec::with_capacity(hosts),
            entries: vec![
                TimerEntry {
                    at: 0,
                    seq: 0,
                    generation: 0,
                    pos: NOT_QUEUED,
                };
                hosts
            ],
        }
    }

    fn key(&self, i: usize) -> (u64, u64) {
        let e = &self.entries[usize::from(self.heap[i])];
        (e.at, e.seq)
    }

    /// The (at, seq) of the earliest timer.
    pub(super) fn peek(&self) -> Option<(u64, u64)> {
        (!self.heap.is_empty()).then(|| self.key(0))
    }

    /// Arms host `h`'s timer, replacing the one it had.
    pub(super) fn set(&mut self, h: u16, at: u64, seq: u64, generation: u64) {
        let e = &mut self.entries[usize::from(h)];
        (e.at, e.seq, e.generation) = (at, seq, generation);
        let i = if e.pos == NOT_QUEUED {
            self.heap.push(h);
            self.heap.len() - 1
        } else {
            e.pos as usize
        };
        self.place(i);
        let i = self.sift_up(i);
        self.sift_down(i);
    }

    /// Disarms host `h`'s timer, if it had one.
    pub(super) fn remove(&mut self, h: u16) {
        let pos = self.entries[usize::from(h)].pos;
        if pos == NOT_QUEUED {
            return;
        }
        self.entries[usize::from(h)].pos = NOT_QUEUED;
        let i = pos as usize;
        let last = self.heap.pop().expect("a queued host is in the heap");
        if i < self.heap.len() {
            self.heap[i] = last;
            self.place(i);
            let i = self.sift_up(i);
            self.sift_down(i);
        }
    }

    /// Takes the earliest timer: (host, at, seq, generation).
    pub(super) fn pop(&mut self) -> Option<(u16, u64, u64, u64)> {
        let h = *self.heap.first()?;
        let e = self.entries[usize::from(h)];
        self.remove(h);
        Some((h, e.at, e.seq, e.generation))
    }

    fn place(&mut self, i: usize) {
        self.entries[usize::from(self.heap[i])].pos = i as u32;
    }

    fn sift_up(&mut self, mut i: usize) -> usize {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.key(parent) <= self.key(i) {
                break;
            }
            self.heap.swap(parent, i);
            self.place(parent);
            self.place(i);
            i = parent;
        }
        i
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if l < self.heap.len() && self.key(l) < self.key(least) {
                least = l;
            }
            if r < self.heap.len() && self.key(r) < self.key(least) {
                least = r;
            }
            if least == i {
                return;
            }
            self.heap.swap(least, i);
            self.place(least);
            self.place(i);
            i = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn timers_pop_in_time_then_arming_order_and_rearming_moves_the_one_entry() {
        // Against a reference: the latest (at, seq) armed per host, or none.
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut timers = Timers::new(50);
        let mut want: Vec<Option<(u64, u64, u64)>> = vec![None; 50];
        let mut seq = 0;
        for round in 0..20_000u64 {
            let h = rng.random_range(0..50u16);
            match rng.random_range(0..4) {
                0 => {
                    timers.remove(h);
                    want[usize::from(h)] = None;
                }
                1 => {
                    let first = want
                        .iter()
                        .enumerate()
                        .filter_map(|(h, w)| w.map(|(at, seq, g)| ((at, seq), h, g)))
                        .min();
                    let got = timers.pop();
                    assert_eq!(
                        got.map(|(h, at, seq, g)| ((at, seq), usize::from(h), g)),
                        first
                    );
                    if let Some((_, h, _)) = first {
                        want[h] = None;
                    }
                }
                _ => {
                    seq += 1;
                    let at = rng.random_range(0..1000);
                    timers.set(h, at, seq, round);
                    want[usize::from(h)] = Some((at, seq, round));
                }
            }
            assert!(timers.heap.len() <= 50);
        }
    }
}
