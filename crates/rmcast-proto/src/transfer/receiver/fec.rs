//! Block FEC at the receiver (issue 20): keep each unfinished block's data
//! packets, collect its parity packets, rebuild what is missing as soon as
//! any K of the block's packets are held, and say in feedback how many of
//! a block's packets are still lacking.
//!
//! The data packets of each unfinished block inside the window are kept
//! (K packets per block, in a buffer the block takes at its first packet
//! and gives back once it holds all K and the driver has read what was
//! rebuilt), so a parity packet can be combined with them; the code
//! rebuilds the missing packets in that buffer (no copy of the block), and
//! [`Receiver::poll_repaired`] hands them to the driver out of it. The
//! buffers are reused, never freed: a receiver holds as many as it ever had
//! unfinished blocks at once (about the interleaving depth D: a group's D
//! blocks fill at once, and one more while a block waits for parity), at
//! most one per ring slot, so the ring's size ([`crate::fec::ring_bytes`])
//! bounds the memory but is not spent up front. A block's parity packets
//! are kept the same way, in a buffer it takes at its first parity packet
//! and gives back once it is rebuilt (or its slot goes to a later block).
//!
//! A receiver whose driver can read back what it was delivered
//! ([`ReceiverConfig::fec_read_back`](super::ReceiverConfig::fec_read_back))
//! keeps no copy of its data packets at all: a block's buffer is taken only
//! when the block is rebuilt, filled from the driver's store through
//! [`ReadBack`] (the packet in hand from the datagram itself), and given
//! back once the rebuilt packets are read. It then holds about one buffer,
//! however wide the window and deep the interleaving, and copies a packet
//! only when its block needs rebuilding (about half the blocks of 64 at 1 %
//! loss).

use super::Receiver;
use super::data::Transfer;
use crate::fec::{BlockDecoder, MAX_RING_BYTES, ring_blocks, ring_bytes};
use crate::{DataChunk, FeedbackPolicy, Instant};
use rmcast_wire::{BlockMembers, FecShape, Parity};
use std::collections::VecDeque;

/// The driver's store of the object bytes it was delivered, read back by a
/// receiver that keeps no copy of them
/// ([`ReceiverConfig::fec_read_back`](super::ReceiverConfig::fec_read_back))
/// when FEC rebuilds a block: see [`Receiver::handle_datagram_reading`].
pub trait ReadBack {
    /// Fills `dst` with the object's bytes at `offset`, as they were
    /// delivered (one whole packet: `dst.len()` bytes); `false` if the
    /// store cannot give them (the receiver then fails, naming the packet).
    fn read_back(&mut self, offset: u64, dst: &mut [u8]) -> bool;
}

/// No store to read back from ([`Receiver::handle_datagram`]): a receiver
/// that keeps copies of its data packets never asks.
pub struct NoReadBack;

impl ReadBack for NoReadBack {
    fn read_back(&mut self, _: u64, _: &mut [u8]) -> bool {
        false
    }
}

/// One block's parity packets, in a ring slot.
#[derive(Default)]
struct Slot {
    block: u32,
    /// Feedback went to the sender while the block lacked packets: the
    /// sender may hold its window for it, so its rebuilding is reported.
    reported: bool,
    /// Parity indexes held, in arrival order; their bytes in `parity`.
    indexes: Vec<u16>,
    parity: Vec<u8>,
    /// The block's data buffer, K packets in slots of `shard` bytes,
    /// zero-padded (packet `i` at `position(i)·shard`), from its first
    /// packet until it is finished. Here rather than behind an index: the
    /// slot's line is read for every packet anyway.
    buf: Option<Box<[u8]>>,
    /// Data packets of the block held, received or rebuilt.
    held: u32,
    /// Rebuilt packets of the block the driver has not read yet.
    unread: u32,
}

/// The receiver's FEC state.
pub(super) struct FecReceiver {
    shape: FecShape,
    /// A parity packet's bytes, and a data packet's slot in a block
    /// buffer: the payload size rounded up to even.
    shard: usize,
    decoder: BlockDecoder,
    slots: Vec<Slot>,
    /// Buffers no unfinished block holds.
    free: Vec<Box<[u8]>>,
    /// Parity byte buffers no block holds parity in: a block's goes back
    /// here once it is rebuilt or its slot is taken, so a receiver keeps
    /// as many as it had blocks waiting with parity at once, not one per
    /// ring slot that ever held some (up to 256 slots of a few KB each).
    free_parity: Vec<Vec<u8>>,
    /// Packets rebuilt and not yet handed to the driver.
    repaired: VecDeque<u32>,
    /// The positions a block being rebuilt lacks, kept for reuse.
    lost: Vec<u16>,
    /// Keep no copy of data packets: read a block's back from the driver
    /// when it is rebuilt ([`ReadBack`]).
    read_back: bool,
}

impl FecReceiver {
    /// The receiver's FEC state for an offer, or `None` when its ring of
    /// block data would exceed [`MAX_RING_BYTES`] (checked before anything
    /// is allocated) or the shape does not fit the code.
    pub(super) fn new(
        shape: FecShape,
        payload_size: u16,
        window: u32,
        read_back: bool,
    ) -> Option<Self> {
        let symbol = usize::from(payload_size);
        if ring_bytes(shape, symbol, window) > MAX_RING_BYTES {
            return None;
        }
        let decoder = BlockDecoder::new(shape.data, shape.space, symbol).ok()?;
        let slots = usize::try_from(ring_blocks(shape, window)).ok()?;
        Some(Self {
            shape,
            shard: FecShape::parity_len(payload_size),
            decoder,
            slots: (0..slots).map(|_| Slot::default()).collect(),
            free: Vec::new(),
            free_parity: Vec::new(),
            repaired: VecDeque::new(),
            lost: Vec::new(),
            read_back,
        })
    }

    /// Whether packet `index` lies in a later interleaving group than
    /// packet `before`: every block of `before`'s group is over.
    pub(super) fn group_over(&self, before: u32, index: u32) -> bool {
        let g = self.shape.group_len();
        index / g > before / g
    }

    /// Stores packet `index`'s bytes (received or rebuilt) in its block's
    /// buffer, taking one for the block if it has none yet, and counts the
    /// packet held. Returns the block.
    fn store(&mut self, index: u32, payload: &[u8]) -> u32 {
        let block = self.count_held(index);
        let position = self.shape.position(index);
        let shard = self.shard;
        let buf = self.block_buf(block);
        let at = usize::from(position) * shard;
        let dst = &mut buf[at..at + shard];
        dst[..payload.len()].copy_from_slice(payload);
        dst[payload.len()..].fill(0);
        block
    }

    /// Counts packet `index` held in its block's slot, claiming the slot.
    /// Returns the block.
    fn count_held(&mut self, index: u32) -> u32 {
        let block = self.shape.block_of(index);
        let i = block as usize % self.slots.len();
        self.claim(i, block);
        self.slots[i].held += 1;
        block
    }

    /// Block `block`'s buffer (its slot is claimed), taken from the free
    /// ones, or allocated, if it has none yet.
    fn block_buf(&mut self, block: u32) -> &mut [u8] {
        let len = usize::from(self.shape.data) * self.shard;
        let n = self.slots.len();
        let free = &mut self.free;
        self.slots[block as usize % n].buf.get_or_insert_with(|| {
            free.pop()
                .unwrap_or_else(|| vec![0; len].into_boxed_slice())
        })
    }

    /// Read-back: fills block `block`'s buffer with every packet of it
    /// held (`m` are its packets), from the driver's store, or `current`
    /// for the packet in hand (not handed to the driver yet), as
    /// [`Self::store`] would have left it. `Err` names a packet the store
    /// could not give.
    fn fill_from_store(
        &mut self,
        block: u32,
        m: BlockMembers,
        t: &Transfer,
        current: Option<(u32, &[u8])>,
        store: &mut dyn ReadBack,
    ) -> Result<(), u32> {
        let shard = self.shard;
        let shape = self.shape;
        let buf = self.block_buf(block);
        for index in m.iter().filter(|&i| t.has(i)) {
            let at = usize::from(shape.position(index)) * shard;
            let len = t.packet_len(index);
            let dst = &mut buf[at..at + shard];
            match current {
                Some((i, bytes)) if i == index => dst[..len].copy_from_slice(bytes),
                _ => {
                    if !store.read_back(u64::from(index) * t.payload_size, &mut dst[..len]) {
                        return Err(index);
                    }
                }
            }
            dst[len..].fill(0);
        }
        Ok(())
    }

    /// Gives block `block`'s buffer back once the block holds all its
    /// packets and the driver has read the rebuilt ones: nothing reads it
    /// any more (parity for a finished block is not needed).
    fn finish_if_done(&mut self, block: u32, packets: u32) {
        let count = self.shape.members(block, packets).count;
        let n = self.slots.len();
        let s = &mut self.slots[block as usize % n];
        if s.block == block
            && s.held >= count
            && s.unread == 0
            && let Some(b) = s.buf.take()
        {
            self.free.push(b);
        }
    }

    /// Keeps a new data packet's bytes for its block (or, reading back,
    /// only counts it held).
    pub(super) fn keep(&mut self, index: u32, payload: &[u8], packets: u32) {
        let block = if self.read_back {
            self.count_held(index)
        } else {
            self.store(index, payload)
        };
        self.finish_if_done(block, packets);
    }

    /// The ring slot of `block`, emptied when it held an older block (whose
    /// buffer it gives back).
    fn slot(&mut self, block: u32) -> &mut Slot {
        let i = block as usize % self.slots.len();
        self.claim(i, block);
        &mut self.slots[i]
    }

    /// Makes slot `i` block `block`'s, emptying it if it held another.
    fn claim(&mut self, i: usize, block: u32) {
        let s = &mut self.slots[i];
        if s.block != block {
            s.block = block;
            s.reported = false;
            s.held = 0;
            s.unread = 0;
            if let Some(b) = s.buf.take() {
                self.free.push(b);
            }
            self.release_parity(i);
        }
    }

    /// Forgets slot `i`'s parity (its block needs no more): its indexes,
    /// and its bytes buffer, emptied and kept for the next block that
    /// gets parity.
    fn release_parity(&mut self, i: usize) {
        self.slots[i].indexes.clear();
        let mut parity = std::mem::take(&mut self.slots[i].parity);
        if parity.capacity() > 0 {
            parity.clear();
            self.free_parity.push(parity);
        }
    }

    /// Keeps parity packet `index`'s bytes for block `block`, whose slot
    /// the caller claimed, in a buffer from [`Self::free_parity`] when the
    /// slot has none.
    fn keep_parity(&mut self, block: u32, index: u16, payload: &[u8]) {
        let i = block as usize % self.slots.len();
        debug_assert_eq!(self.slots[i].block, block, "the slot is claimed");
        if self.slots[i].parity.capacity() == 0
            && let Some(spare) = self.free_parity.pop()
        {
            self.slots[i].parity = spare;
        }
        let slot = &mut self.slots[i];
        slot.indexes.push(index);
        slot.parity.extend_from_slice(payload);
    }

    /// Rebuilds block `block`'s missing data packets (`m` are its
    /// packets) in its buffer, from the parity held: the GF(2⁸) code, no
    /// copy. Counts them held; returns whether it could.
    fn rebuild_in_place(&mut self, block: u32, m: BlockMembers, t: &Transfer) -> bool {
        let n = self.slots.len();
        // A block rebuilt from parity alone takes its buffer here.
        self.block_buf(block);
        let mut lost = std::mem::take(&mut self.lost);
        lost.clear();
        lost.extend(
            m.iter()
                .enumerate()
                .filter(|&(_, i)| !t.has(i))
                .map(|(j, _)| j as u16),
        );
        let rebuilt = lost.len() as u32;
        let Slot {
            buf: Some(buf),
            indexes,
            parity,
            held,
            ..
        } = &mut self.slots[block as usize % n]
        else {
            unreachable!("block_buf gave the block a buffer");
        };
        // Position `j` of the block (its `j`-th member, interleaved or
        // not) is at `j·shard` in its buffer. A short last packet's slot
        // ends in the zero padding the code rebuilds, as `store` leaves it.
        let ok = self
            .decoder
            .decode_in_place(buf, m.count as u16, &lost, indexes, parity)
            .is_ok();
        if ok {
            *held += rebuilt;
        }
        self.lost = lost;
        ok
    }

    /// Rebuilds block `block`'s missing data packets with the GF(2¹⁶)
    /// code, which copies the block in: `(position, bytes)` of each.
    fn rebuild_copied(
        &mut self,
        block: u32,
        m: BlockMembers,
        t: &Transfer,
    ) -> Option<Vec<(u16, Vec<u8>)>> {
        let n = self.slots.len();
        self.decoder.reset(m.count as u16, self.shape.space).ok()?;
        let slot = &self.slots[block as usize % n];
        for (j, index) in m.iter().enumerate() {
            if t.has(index) {
                // A block holding any of its packets holds its buffer.
                let Some(buf) = slot.buf.as_deref() else {
                    debug_assert!(false, "block {block} holds packets but no buffer");
                    return None;
                };
                let at = usize::from(self.shape.position(index)) * self.shard;
                let bytes = &buf[at..at + t.packet_len(index)];
                self.decoder.add_data(j as u16, bytes).ok()?;
            }
        }
        for (j, &i) in slot.indexes.iter().enumerate() {
            let bytes = &slot.parity[j * self.shard..(j + 1) * self.shard];
            self.decoder.add_parity(i, bytes).ok()?;
        }
        self.decoder.decode().ok()
    }

    /// Feedback is going out: every unfinished block that is over (a
    /// packet after its last one is in) was reported as lacking.
    pub(super) fn note_reported(&mut self, t: &Transfer) {
        let Some(top) = t.highest.checked_sub(1) else {
            return;
        };
        let mut block = self.shape.group_first_block(t.cumulative);
        loop {
            let m = self.shape.members(block, t.packets);
            if m.count == 0 || m.first >= top {
                break;
            }
            if m.last() < top && m.iter().any(|i| !t.has(i)) {
                self.slot(block).reported = true;
            }
            block += 1;
        }
    }
}

impl Receiver {
    /// A parity packet: kept if its block still lacks packets; once the
    /// block holds K, its missing data packets are rebuilt (hand them to
    /// the driver with [`Receiver::poll_repaired`]).
    pub(super) fn on_parity(&mut self, now: Instant, p: &Parity<'_>, store: &mut dyn ReadBack) {
        let polled = self
            .policy
            .unwrap_or(FeedbackPolicy::Ack)
            .answers_poll(p.poll, self.rank);
        let (Some(t), Some(fec)) = (self.transfer.as_mut(), self.fec.as_mut()) else {
            self.stats.foreign += 1;
            return;
        };
        if p.payload.len() != fec.shard
            || p.index >= fec.shape.space
            || p.block >= fec.shape.blocks(t.packets)
            || p.seq.since(t.isn) < t.packets
        {
            self.stats.malformed += 1;
            return;
        }
        let m = fec.shape.members(p.block, t.packets);
        if m.last() < t.cumulative || m.iter().all(|i| t.has(i)) {
            self.stats.parity_unneeded += 1;
            return;
        }
        // Feedback from now on echoes this packet, a NAK already owed
        // too: it counts this parity packet as held (see
        // `fec_mark_parity`), and the sender must not also count it as
        // still on its way.
        self.feedback.last_echo = p.seq;
        self.feedback.last_echo_copy = 0;
        self.feedback.nak_echo = p.seq;
        self.feedback.nak_echo_copy = 0;
        self.feedback.last_heard = (p.seq, 0);
        if m.first >= t.cumulative.saturating_add(t.window) {
            self.stats.out_of_window += 1;
            return;
        }
        let missing = m.iter().filter(|&i| !t.has(i)).count();
        let slot = fec.slot(p.block);
        if slot.indexes.contains(&p.index) {
            self.stats.parity_unneeded += 1;
            return;
        }
        if slot.indexes.len() < missing {
            fec.keep_parity(p.block, p.index, p.payload);
            self.stats.parity_packets += 1;
        } else {
            // Enough parity was held already (data that came since
            // completed the count): rebuild with what is held.
            self.stats.parity_unneeded += 1;
        }
        if polled {
            // A receiver that needed the packet answers its poll: with
            // what it still lacks, or with the block rebuilt below (and
            // so a polled data packet it lost answered after all). Those
            // that had the block stay quiet: the parity was not for them.
            self.feedback.acks_owed += 1;
            if p.poll != self.rank {
                // Every receiver that needed it answers this poll.
                self.spread_group_answer(now);
            }
        }
        self.fec_rebuild(p.block, polled, None, store);
    }

    /// Rebuilds block `block`'s missing data packets if its parity packets
    /// held make up for them (after a parity packet, or a data packet of a
    /// block that holds parity, came).
    ///
    /// Reading back ([`ReadBack`]), the block's packets held come from
    /// `store`, but for `current`, the packet in hand.
    pub(super) fn fec_rebuild(
        &mut self,
        block: u32,
        polled: bool,
        current: Option<(u32, &[u8])>,
        store: &mut dyn ReadBack,
    ) {
        let (Some(t), Some(fec)) = (self.transfer.as_mut(), self.fec.as_mut()) else {
            return;
        };
        let m = fec.shape.members(block, t.packets);
        let n = fec.slots.len();
        let slot = &fec.slots[block as usize % n];
        let missing = m.iter().filter(|&i| !t.has(i)).count();
        if slot.block != block || slot.indexes.is_empty() || slot.indexes.len() < missing {
            return;
        }
        if missing > 0
            && fec.read_back
            && let Err(index) = fec.fill_from_store(block, m, t, current, store)
        {
            self.leave(&format!(
                "could not read packet {index} back from storage to rebuild block {block} \
                 from parity"
            ));
            return;
        }
        let (Some(t), Some(fec)) = (self.transfer.as_mut(), self.fec.as_mut()) else {
            return;
        };
        if missing > 0 {
            // Any K of the block's packets are held: rebuild the rest.
            let count = m.count as u16;
            if fec.decoder.decodes_in_place(count) {
                if !fec.rebuild_in_place(block, m, t) {
                    return;
                }
            } else {
                let Some(rebuilt) = fec.rebuild_copied(block, m, t) else {
                    return;
                };
                for (i, bytes) in rebuilt {
                    let index = m.at(u32::from(i));
                    fec.store(index, &bytes[..t.packet_len(index)]);
                }
            }
            for index in m.iter() {
                if t.has(index) {
                    continue;
                }
                fec.slots[block as usize % n].unread += 1;
                fec.repaired.push_back(index);
                t.set(index);
                self.stats.repaired_packets += 1;
            }
        }
        let slot = &fec.slots[block as usize % n];
        let proactive = fec.shape.proactive;
        let asked = slot.reported || slot.indexes.iter().any(|&i| i >= proactive);
        if asked && !polled && t.cumulative > m.first {
            // This receiver's feedback asked for the block, or parity sent
            // on demand rebuilt it (the sender may be holding its window
            // for it): say at once how far it holds now. A block that
            // proactive parity repaired needs no word.
            self.feedback.acks_owed += 1;
        }
        fec.slot(block).reported = false;
        fec.release_parity(block as usize % n);
        if let Some(relay) = &mut self.relay {
            relay.update(t.cumulative);
        }
        self.check_all_data();
    }

    /// Whether block `block` holds parity packets waiting for more of its
    /// packets (a data packet of it then calls for [`Receiver::fec_rebuild`]).
    pub(super) fn fec_waiting(&self, index: u32) -> Option<u32> {
        let fec = self.fec.as_ref()?;
        let block = fec.shape.block_of(index);
        let slot = &fec.slots[block as usize % fec.slots.len()];
        (slot.block == block && !slot.indexes.is_empty()).then_some(block)
    }

    /// A data packet the FEC rebuilt, to store like one received: call
    /// after each [`Receiver::handle_datagram`] until it gives `None`.
    pub fn poll_repaired(&mut self) -> Option<DataChunk<'_>> {
        let (Some(t), Some(fec)) = (&self.transfer, &mut self.fec) else {
            return None;
        };
        let index = fec.repaired.pop_front()?;
        let (block, position) = fec.shape.locate(index);
        let n = fec.slots.len();
        let len = t.packet_len(index);
        let at = usize::from(position) * fec.shard;
        let slot = &mut fec.slots[block as usize % n];
        slot.unread = slot.unread.saturating_sub(1);
        fec.finish_if_done(block, t.packets);
        // The block may have given its buffer back just now: its bytes are
        // still there (the last buffer given back), and only a later
        // packet, after the driver is done with this chunk, reuses it.
        let slot = &fec.slots[block as usize % n];
        let buf = match (slot.buf.as_deref(), fec.free.last()) {
            (Some(b), _) if slot.block == block => b,
            (_, Some(b)) => b,
            (_, None) => {
                // Cannot happen: a block with rebuilt packets unread holds
                // its buffer until the last is read. Were it to, the bytes
                // are missing and the object's hash will say so at the
                // close; a receiver does not panic on what it was sent.
                debug_assert!(false, "block {block}: rebuilt packet {index} has no buffer");
                return None;
            }
        };
        Some(DataChunk {
            offset: u64::from(index) * t.payload_size,
            bytes: &buf[at..at + len],
        })
    }

    /// FEC: sets in the feedback `bitmap` (bit `i` for packet
    /// `cumulative + 1 + i`) one missing packet of each block per parity
    /// packet held for it, so that the sender counts per block only what
    /// is still lacking. The packet at the cumulative point itself is
    /// never marked: a block with parity held still lacks more than that.
    pub(super) fn fec_mark_parity(&self, bitmap: &mut Vec<u8>) {
        let (Some(t), Some(fec)) = (&self.transfer, &self.fec) else {
            return;
        };
        let start = t.cumulative + 1;
        let limit = start + 8 * rmcast_wire::FEEDBACK_BITMAP_MAX as u32;
        for slot in &fec.slots {
            if slot.indexes.is_empty() {
                continue;
            }
            let m = fec.shape.members(slot.block, t.packets);
            if m.last() < t.cumulative {
                continue;
            }
            let mut credit = slot.indexes.len();
            for index in m.within(start, limit) {
                if credit == 0 {
                    break;
                }
                if !t.has(index) {
                    let bit = (index - start) as usize;
                    if bitmap.len() <= bit / 8 {
                        bitmap.resize(bit / 8 + 1, 0);
                    }
                    bitmap[bit / 8] |= 1 << (bit % 8);
                    credit -= 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
