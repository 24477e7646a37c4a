//! Block FEC at the sender (issue 20): repair by parity, not by resending.
//!
//! Data packets are dealt to blocks as [`FecShape::members`] says: without
//! interleaving, packets `b·K .. b·K + K` are block `b`; with depth D,
//! block `b` holds every D-th packet of its group of K·D, so a burst of D
//! losses costs each block one packet. A receiver's feedback
//! (its bitmap, in which it also counts as held one missing packet of a
//! block for each parity packet of that block it holds) says how many
//! packets of each block it still lacks. The sender answers a block with
//! the largest such count over the receivers, minus the parity packets of
//! the block still in flight to them, of *new* parity packets, multicast:
//! one round repairs every receiver, whichever packets each lost. With
//! `proactive` P, every block is followed by P parity packets at once.
//!
//! Parity transmissions are numbered on from the object's last data packet
//! (`Parity::seq` = isn + packets + n), so feedback that answers a parity
//! packet's poll echoes it exactly, as it echoes a data packet: a parity
//! packet sent after the echoed transmission may still be on its way.

use super::Sender;
use crate::fec::BlockEncoder;
use crate::{Instant, PayloadSource};
use rmcast_wire::{FecShape, Feedback, Header, PARITY_HEADER_LEN, POLL_NONE, encode_parity_header};
use std::collections::VecDeque;

/// Probes of a stuck base block per request (see [`Sender::fec_probe`]).
const PROBES: u8 = 3;

/// Parity transmissions whose send order is remembered, per window packet:
/// feedback echoing an older one is stale.
const LOG_PER_WINDOW: usize = 2;

/// One block's repair state, in a ring slot.
#[derive(Debug, Default)]
struct BlockRepair {
    block: u32,
    /// Next parity index to send (parity `0..next` went out).
    next: u16,
    /// Parity packets still to send for the current requests.
    need: u16,
    /// Transmission number (`Window::transmissions`) of each parity packet
    /// sent, by index.
    sent_nos: Vec<u64>,
    /// Last parity transmission of the block.
    last_parity_at: Option<Instant>,
    queued: bool,
    /// Probes sent since the block's last request.
    probes: u8,
    /// One of the block's data packets polled someone: its proactive
    /// parity polls too, so that a receiver that rebuilds the polled
    /// packet still answers.
    polled: bool,
    /// The parity packets requested now are proactive.
    proactive: bool,
    /// A receiver's feedback asked for parity of the block.
    demanded: bool,
}

/// The sender's FEC state.
pub(super) struct FecSender {
    shape: FecShape,
    encoder: BlockEncoder,
    /// The block the encoder holds (its data pushed; parity packets are
    /// made as they are first asked for and kept until the next block).
    cached: Option<u32>,
    shard: usize,
    /// One data packet read back from the source for encoding.
    scratch: Vec<u8>,
    blocks: Vec<BlockRepair>,
    /// Blocks with parity to send, in request order.
    queue: VecDeque<u32>,
    /// `log[i]`: transmission number of parity transmission `log_first + i`.
    log: VecDeque<u64>,
    log_first: u64,
    log_cap: usize,
}

/// A parity packet to send now.
#[derive(Clone, Copy, Debug)]
pub(super) struct NextParity {
    pub(super) block: u32,
    pub(super) index: u16,
    pub(super) poll: u16,
}

impl FecSender {
    pub(super) fn new(shape: FecShape, payload_size: usize, window: u32) -> Option<Self> {
        let encoder = BlockEncoder::new(shape.data, shape.space, payload_size).ok()?;
        let shard = encoder.shard_len();
        let slots = usize::try_from(crate::fec::ring_blocks(shape, window)).ok()?;
        Some(Self {
            shape,
            encoder,
            cached: None,
            shard,
            scratch: vec![0; payload_size],
            blocks: (0..slots).map(|_| BlockRepair::default()).collect(),
            queue: VecDeque::with_capacity(slots),
            log: VecDeque::new(),
            log_first: 0,
            log_cap: (window as usize * LOG_PER_WINDOW).max(64),
        })
    }

    pub(super) fn shape(&self) -> FecShape {
        self.shape
    }

    /// Bytes of a parity datagram.
    pub(super) fn datagram_len(&self) -> usize {
        PARITY_HEADER_LEN + self.shard
    }

    /// The ring slot of `block`, reset when it held an older block.
    fn slot(&mut self, block: u32) -> &mut BlockRepair {
        let n = self.blocks.len();
        let b = &mut self.blocks[block as usize % n];
        if b.block != block {
            b.block = block;
            b.next = 0;
            b.need = 0;
            b.sent_nos.clear();
            b.last_parity_at = None;
            b.queued = false;
            b.probes = 0;
            b.polled = false;
            b.proactive = false;
            b.demanded = false;
        }
        b
    }

    /// The transmission number of parity transmission `n`, if remembered.
    fn sent_no_of(&self, n: u64) -> Option<u64> {
        let i = usize::try_from(n.checked_sub(self.log_first)?).ok()?;
        self.log.get(i).copied()
    }

    /// Asks for `count` parity packets of `block`, as soon as its data has
    /// all gone. No suppression interval: what is on its way is counted,
    /// so a second receiver's larger lack adds only the difference.
    fn request(&mut self, block: u32, count: u16) -> bool {
        let b = self.slot(block);
        if count <= b.need {
            return false;
        }
        b.need = count;
        b.probes = 0;
        b.proactive = false;
        if !b.queued {
            b.queued = true;
            self.queue.push_back(block);
        }
        true
    }
}

impl Sender {
    /// A data packet went out for the first time (polling `poll`):
    /// proactive parity follows the block's last one at once.
    pub(super) fn fec_on_first_send(&mut self, index: u32, poll: u16) {
        let packets = self.packets;
        let Some(fec) = &mut self.fec else { return };
        let block = fec.shape.block_of(index);
        let last = fec.shape.members(block, packets).last();
        let b = fec.slot(block);
        b.polled |= poll != POLL_NONE;
        let proactive = fec.shape.proactive;
        if proactive == 0 || index != last {
            return;
        }
        if fec.request(block, proactive) {
            fec.slot(block).proactive = true;
        }
    }

    /// FEC sessions: what a receiver's feedback says it lacks, block by
    /// block (packets sent before the transmission it echoes, not in its
    /// bitmap); each block's request becomes the largest lack less the
    /// parity packets still on their way. Returns the latest transmission
    /// time of a block whose request grew (Hunt's EXP), if any.
    pub(super) fn fec_note_missing(
        &mut self,
        rank: u16,
        cumulative: u32,
        f: &Feedback<'_>,
    ) -> Option<Instant> {
        let fec = self.fec.as_ref()?;
        let echo = f.echo.since(self.isn);
        let echo_sent = if echo < self.packets {
            self.echo_sent_no(echo, f.echo_copy)?
        } else {
            fec.sent_no_of(u64::from(echo - self.packets))?
        };
        let from = cumulative.max(self.window.base);
        let end = self.feedback_end(f);
        if from >= end {
            return None;
        }
        let shape = fec.shape;
        let mut grew: Option<Instant> = None;
        // Blocks of `from`'s interleaving group before its own may still
        // lack packets after it.
        let mut next = shape.group_first_block(from);
        loop {
            let block = next;
            let m = shape.members(block, self.packets);
            if m.count == 0 || m.first >= end {
                break;
            }
            next += 1;
            // Only a block whose data had all gone before the echoed
            // transmission: the receiver's view of it is whole (and the
            // block's proactive parity follows it anyway). Blocks end in
            // order but in an interleaved object's last group, so each is
            // looked at.
            if m.last() >= self.window.high
                || self.window.lack[self.window.slot(m.last())].first_sent_no >= echo_sent
            {
                continue;
            }
            let mut lacks = 0u16;
            let mut last_sent = Instant::ZERO;
            // Past `end` the receiver's losses are not known: counted
            // later, by feedback that reaches them.
            for index in m.within(from, end) {
                let w = self.window.slot(index);
                last_sent = last_sent.max(self.window.sent_at[w]);
                if self.window.lack[w].sent_no >= echo_sent
                    || f.holds(self.isn.add(index))
                    || self.delta.as_ref().is_some_and(|d| d.holds(rank, index))
                {
                    continue;
                }
                lacks += 1;
            }
            if lacks > 0 {
                let fec = self.fec.as_mut()?;
                let b = fec.slot(block);
                let in_flight = b.sent_nos.iter().filter(|&&s| s > echo_sent).count();
                let want = lacks.saturating_sub(u16::try_from(in_flight).unwrap_or(u16::MAX));
                if want > 0 && fec.request(block, want) {
                    fec.slot(block).demanded = true;
                    grew = grew.max(Some(last_sent));
                }
            }
        }
        grew
    }

    /// The parity packet to send next, if one is due: blocks in request
    /// order, each once its data is all out and its suppression is over.
    /// A block whose parity is used up is repaired by resending its data
    /// packets instead.
    pub(super) fn fec_next(&mut self, now: Instant) -> Option<NextParity> {
        let base = self.window.base;
        let high = self.window.high;
        let packets = self.packets;
        let poll_repair = self.policy.repair_poll();
        'scan: loop {
            let fec = self.fec.as_mut()?;
            let space = fec.shape.space;
            let n = fec.blocks.len();
            let mut i = 0;
            while i < fec.queue.len() {
                let block = fec.queue[i];
                let last = fec.shape.members(block, packets).last();
                let b = &mut fec.blocks[block as usize % n];
                if b.block != block || b.need == 0 || last < base {
                    if b.block == block {
                        b.queued = false;
                        b.need = 0;
                    }
                    fec.queue.remove(i);
                    continue;
                }
                // A block still sending its data (the window may hold it
                // back until an older block is repaired) waits; the others
                // go on.
                if high <= last {
                    i += 1;
                    continue;
                }
                if b.next >= space {
                    // Every parity packet of the block is spent: resend its
                    // data (queued as repairs), and look on. Returning here
                    // left the blocks behind it queued while `fec_deadline`
                    // called them due: a driver that stopped at this call's
                    // `None` was asked to wake in the past
                    // (`relay_cascade`'s proptest).
                    b.need = 0;
                    b.queued = false;
                    fec.queue.remove(i);
                    self.fec_resend_block(block);
                    continue 'scan;
                }
                // Only receivers that need a parity packet answer its poll.
                // Proactive parity of a block that polled polls throughout
                // (who rebuilds the polled packet owes its answer); a burst
                // on demand polls with its last packet (who still lacks
                // packets says how many).
                let poll = match (b.proactive, b.polled, b.need) {
                    (true, true, _) | (false, _, 1) => poll_repair,
                    _ => POLL_NONE,
                };
                return Some(NextParity {
                    block,
                    index: b.next,
                    poll,
                });
            }
            return self.fec_probe(now);
        }
    }

    /// While the window waits on its base block and nothing else may go,
    /// one more parity packet of that block, polled, `suppress` after its
    /// last parity packet, then 2 and 4 × `suppress` after that: the idle
    /// link repairs a receiver that lost the end of a burst (which no one
    /// would otherwise notice before the RTO), and a receiver that still
    /// lacks more says how many. Only a block a receiver asked parity for
    /// is probed, [`PROBES`] times per request.
    fn fec_probe(&mut self, now: Instant) -> Option<NextParity> {
        let at = self.fec_probe_at()?;
        if now < at {
            return None;
        }
        let poll = self.policy.repair_poll();
        let fec = self.fec.as_mut()?;
        let block = fec.shape.block_of(self.window.base);
        let n = fec.blocks.len();
        let b = &mut fec.blocks[block as usize % n];
        b.probes += 1;
        Some(NextParity {
            block,
            index: b.next,
            poll,
        })
    }

    /// When the base block's next probe may go (see [`Sender::fec_probe`]).
    fn fec_probe_at(&self) -> Option<Instant> {
        let fec = self.fec.as_ref()?;
        if self.window.base >= self.packets || self.can_send_data() {
            return None;
        }
        let block = fec.shape.block_of(self.window.base);
        let b = &fec.blocks[block as usize % fec.blocks.len()];
        if b.block != block
            || !b.demanded
            || b.next >= fec.shape.space
            || b.queued
            || b.probes >= PROBES
        {
            return None;
        }
        Some(b.last_parity_at? + self.config.suppress * (1 << b.probes))
    }

    /// When the next parity packet may go: at once when a queued block's
    /// data has all gone (a driver that transmits only after a timeout
    /// then wakes at once), else the base block's next probe. A block
    /// still sending its data waits for that, not for a timer.
    pub(super) fn fec_deadline(&self) -> Option<Instant> {
        let fec = self.fec.as_ref()?;
        let n = fec.blocks.len();
        fec.queue
            .iter()
            .filter_map(|&block| {
                let last = fec.shape.members(block, self.packets).last();
                let b = &fec.blocks[block as usize % n];
                (b.block == block && b.need > 0 && self.window.high > last).then_some(Instant::ZERO)
            })
            .chain(self.fec_probe_at())
            .min()
    }

    /// Queues block `block`'s unacknowledged data packets as multicast
    /// repairs (its parity is spent).
    fn fec_resend_block(&mut self, block: u32) {
        let Some(fec) = &self.fec else { return };
        let m = fec.shape.members(block, self.packets);
        for index in m.within(self.window.base, self.window.high) {
            let w = self.window.slot(index);
            let lack = &mut self.window.lack[w];
            if lack.count == 0 {
                self.window.repairs.push_back(index);
            }
            // Two or more: multicast.
            lack.count = lack.count.max(2);
        }
    }

    /// Writes parity packet `p` into `buf` (exactly the parity datagram's
    /// length), encoding the block's parity first if not cached, and
    /// records the transmission.
    pub(super) fn fec_write(
        &mut self,
        now: Instant,
        header: Header,
        p: NextParity,
        source: &(impl PayloadSource + ?Sized),
        buf: &mut [u8],
    ) -> Option<()> {
        let payload_size = self.payload_size as u64;
        let size = self.object.size;
        let packets = u64::from(self.packets);
        let isn = self.isn;
        self.window.transmissions += 1;
        let sent_no = self.window.transmissions;
        let fec = self.fec.as_mut()?;
        if fec.cached != Some(p.block) {
            let m = fec.shape.members(p.block, self.packets);
            let count = u16::try_from(m.count).ok()?;
            fec.encoder.reset(count, fec.shape.space).ok()?;
            for index in m.iter() {
                let offset = u64::from(index) * payload_size;
                let len = (size - offset).min(payload_size) as usize;
                source.read_at(offset, &mut fec.scratch[..len]);
                fec.encoder.push(&fec.scratch[..len]).ok()?;
            }
            fec.cached = Some(p.block);
        }
        let n = fec.log_first + fec.log.len() as u64;
        let seq = isn.add(u32::try_from((packets + n) % (1 << 32)).ok()?);
        let head = encode_parity_header(buf, &header, seq, p.block, p.index, p.poll).ok()?;
        let shard = fec.encoder.parity(p.index).ok()?;
        buf[head..head + fec.shard].copy_from_slice(shard);
        fec.log.push_back(sent_no);
        if fec.log.len() > fec.log_cap {
            fec.log.pop_front();
            fec.log_first += 1;
        }
        let b = fec.slot(p.block);
        b.sent_nos.push(sent_no);
        b.next += 1;
        b.need = b.need.saturating_sub(1);
        b.last_parity_at = Some(now);
        if b.need == 0 && b.queued {
            b.queued = false;
            if let Some(at) = fec.queue.iter().position(|&q| q == p.block) {
                fec.queue.remove(at);
            }
        }
        self.stats.parity_packets += 1;
        Some(())
    }
}
