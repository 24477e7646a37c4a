//! An instant's `Cpu` events, the datagrams read on several threads.
//!
//! A multicast frame reaches every receiver of a fan-out at the same
//! instant, and each receiver queues a `Cpu` event for that instant
//! (`Sim::enqueue_socket`). Reading the datagram is most of a large
//! group's run: the receiver machine decodes it, keeps it for FEC, and the
//! delivery is checked against the object. That part changes no host but
//! the reader ([`read_datagram`]), so the simulator takes the run of `Cpu`
//! events at the head of the queue, lets every receiver among them that
//! reads now do so at once, on up to `threads` threads, and then does the
//! rest of each event (its sends, events, timer; `Sim::cpu_done`) and the
//! end-of-run test one event at a time, in the events' order.
//!
//! The run is the one that one event at a time gives, bit for bit, for any
//! number of threads (`tests/parallel.rs` compares the reports):
//! - an event's rest touches its own host, the pool's free list, the queues
//!   and the logs, never another reader's host, and what it schedules comes
//!   after the run (a later instant, or this one behind the run);
//! - only receivers still unfinished read ahead, so the run cannot end
//!   before the last of them has had its turn: the end-of-run test before
//!   it would have said no one event at a time too;
//! - a failure is reported at its event's turn, as it would have been.

use super::read::{Read, ReadCtx, ReaderBufs, probe, read_datagram};
use super::*;

/// Fewer readers than this read on the event loop's thread: a thread's
/// start costs more than a few hundred reads.
const PARALLEL_FROM: usize = 256;

/// The threads a run uses: the machine's, or `RMCAST_SIM_THREADS`.
pub(super) fn default_threads() -> usize {
    std::env::var("RMCAST_SIM_THREADS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
        .max(1)
}

impl Sim<'_> {
    /// The `Cpu` event of host `first`, popped, and the `Cpu` events queued
    /// behind it for this instant before any other event: each host reads
    /// (those that may, in parallel), then finishes its event in turn.
    /// Returns whether the run is over (tested after each event, as the
    /// loop tests).
    pub(super) fn cpu_run(&mut self, first: usize) -> Result<bool, Fail> {
        if self.threads < 2 {
            self.cpu(first)?;
            return Ok(self.run_is_over());
        }
        let mut run = std::mem::take(&mut self.cpu_batch);
        run.clear();
        run.push((first as u16, 0));
        // The heap's and the timers' earliest: an event there at this
        // instant comes between two of the queue's, so the run stops.
        let bound = [self.heap.peek().map(|e| (e.at, e.seq)), self.timers.peek()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or((u64::MAX, u64::MAX));
        while let Some(&Scheduled {
            at,
            seq,
            ev: Ev::Cpu(h),
        }) = self.now_queue.front()
            && (at, seq) < bound
        {
            self.now_queue.pop_front();
            run.push((h, seq));
        }
        let readers = self.read_ahead(&run);
        let last_reader = self.reads.iter().rposition(Option::is_some).unwrap_or(0);
        let mut over = false;
        let mut outcome = Ok(());
        for (k, &(h, _)) in run.iter().enumerate() {
            if k > 0 {
                self.events += 1;
            }
            let done = match self.reads[k].take() {
                Some(read) => read.and_then(|r| self.cpu_done(usize::from(h), r)),
                None => self.cpu(usize::from(h)),
            };
            if let Err(e) = done {
                outcome = Err(e);
                break;
            }
            if (readers == 0 || k >= last_reader) && self.run_is_over() {
                over = true;
                // The run's remaining events stay queued, as the loop
                // leaves them when it stops.
                for &(h, seq) in run[k + 1..].iter().rev() {
                    let at = self.now;
                    self.now_queue.push_front(Scheduled {
                        at,
                        seq,
                        ev: Ev::Cpu(h),
                    });
                }
                break;
            }
        }
        self.reads.clear();
        self.cpu_batch = run;
        outcome.map(|()| over)
    }

    /// Has every host of `run` that will read now and is an unfinished
    /// receiver read its datagram, in parallel when there are enough:
    /// `self.reads[k]` is host `run[k]`'s read, `None` for a host that did
    /// not read ahead. Returns how many did.
    ///
    /// Whether a host reads ahead ([`reads_ahead`]) is asked by the reader
    /// threads, not before them: it looks at each receiver's state, which
    /// at 10,000 receivers is mostly out of cache, and nothing another
    /// reader does changes the answer (a read changes its own host only).
    fn read_ahead(&mut self, run: &[(u16, u64)]) -> usize {
        let now = self.now;
        self.reads.clear();
        self.reads.resize_with(run.len(), || None);
        if run.len() < PARALLEL_FROM {
            return 0;
        }
        // Each host's place in the run. A host has one `Cpu` event at a
        // time; should one have two, nobody reads ahead.
        let mut position = std::mem::take(&mut self.run_position);
        position.clear();
        position.resize(self.hosts.len(), u32::MAX);
        let mut twice = false;
        for (k, &(h, _)) in run.iter().enumerate() {
            let h = usize::from(h);
            twice |= position[h] != u32::MAX;
            position[h] = k as u32;
        }
        if twice {
            self.run_position = position;
            return 0;
        }
        let mut jobs: Vec<(usize, usize, &mut Host)> = self
            .hosts
            .iter_mut()
            .enumerate()
            .filter_map(|(h, host)| {
                let k = position[h];
                (k != u32::MAX).then_some((k as usize, h, host))
            })
            .collect();
        self.run_position = position;
        // In the run's order (the hosts' order, usually), so that the
        // reads land in `self.reads` in order below.
        jobs.sort_unstable_by_key(|&(k, _, _)| k);
        let cx = ReadCtx {
            now,
            sc: self.sc,
            pool: &self.pool,
            sides: &self.sides,
            cpu_jitter: self.cpu_jitter,
        };
        let threads = self.threads.min(jobs.len().div_ceil(PARALLEL_FROM / 2));
        let per = jobs.len().div_ceil(threads);
        let bufs = &mut self.reader_bufs;
        if bufs.len() < threads {
            bufs.resize_with(threads, ReaderBufs::new);
        }
        let mut out = std::mem::take(&mut self.ahead);
        out.clear();
        out.resize_with(jobs.len(), || None);
        std::thread::scope(|s| {
            let mut parts = jobs
                .chunks_mut(per)
                .zip(out.chunks_mut(per))
                .zip(bufs.iter_mut())
                .enumerate();
            let mine = parts.next();
            for (thread, ((chunk, out), bufs)) in parts {
                let cx = &cx;
                s.spawn(move || read_chunk(chunk, out, cx, bufs, thread));
            }
            if let Some((thread, ((chunk, out), bufs))) = mine {
                read_chunk(chunk, out, &cx, bufs, thread);
            }
        });
        let mut readers = 0;
        for (&(k, _, _), read) in jobs.iter().zip(&mut out) {
            readers += usize::from(read.is_some());
            self.reads[k] = read.take();
        }
        self.ahead = out;
        readers
    }
}

/// Whether `host` reads its datagram ahead, with the run's other readers:
/// an unfinished receiver, up, its CPU free and a datagram queued.
fn reads_ahead(host: &Host, now: u64) -> bool {
    matches!(&host.machine, Machine::Receivers(rxs) if !rxs.endpoint.is_finished())
        && !host.down(now)
        && host.cpu_free <= now
        && !host.socket.is_empty()
}

/// Reads one datagram at each host of `chunk` (run position, host
/// number, host) that reads ahead into `out` (`None` for the others), and
/// asks each machine what it owes then ([`probe`]); `thread` is the
/// reader's number, `bufs` its buffers.
fn read_chunk(
    chunk: &mut [(usize, usize, &mut Host)],
    out: &mut [Option<Result<Read, Fail>>],
    cx: &ReadCtx<'_>,
    bufs: &mut ReaderBufs,
    thread: usize,
) {
    bufs.sent.clear();
    for ((_, h, host), out) in chunk.iter_mut().zip(out) {
        if !reads_ahead(host, cx.now) {
            // Its event runs whole in turn (`Sim::cpu`).
            *out = None;
            continue;
        }
        let mut read = read_datagram(host, *h, cx, &mut bufs.read);
        if let Ok(read) = &mut read {
            probe(host, cx, read, bufs, thread);
        }
        *out = Some(read);
    }
}
