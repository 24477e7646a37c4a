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
//! bounds the memory but is not spent up front.

use super::Receiver;
use super::data::Transfer;
use crate::fec::{BlockDecoder, MAX_RING_BYTES, ring_blocks, ring_bytes};
use crate::{DataChunk, FeedbackPolicy, Instant};
use rmcast_wire::{BlockMembers, FecShape, Parity};
use std::collections::VecDeque;

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
    /// Packets rebuilt and not yet handed to the driver.
    repaired: VecDeque<u32>,
    /// The positions a block being rebuilt lacks, kept for reuse.
    lost: Vec<u16>,
}

impl FecReceiver {
    /// The receiver's FEC state for an offer, or `None` when its ring of
    /// block data would exceed [`MAX_RING_BYTES`] (checked before anything
    /// is allocated) or the shape does not fit the code.
    pub(super) fn new(shape: FecShape, payload_size: u16, window: u32) -> Option<Self> {
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
            repaired: VecDeque::new(),
            lost: Vec::new(),
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
        let (block, position) = self.shape.locate(index);
        let shard = self.shard;
        let len = usize::from(self.shape.data) * shard;
        let i = block as usize % self.slots.len();
        self.claim(i, block);
        let slot = &mut self.slots[i];
        slot.held += 1;
        let buf = slot.buf.get_or_insert_with(|| {
            self.free
                .pop()
                .unwrap_or_else(|| vec![0; len].into_boxed_slice())
        });
        let at = usize::from(position) * shard;
        let dst = &mut buf[at..at + shard];
        dst[..payload.len()].copy_from_slice(payload);
        dst[payload.len()..].fill(0);
        block
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

    /// Keeps a new data packet's bytes for its block.
    pub(super) fn keep(&mut self, index: u32, payload: &[u8], packets: u32) {
        let block = self.store(index, payload);
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
            s.indexes.clear();
            s.parity.clear();
            s.held = 0;
            s.unread = 0;
            if let Some(b) = s.buf.take() {
                self.free.push(b);
            }
        }
    }

    /// Rebuilds block `block`'s missing data packets (`m` are its
    /// packets) in its buffer, from the parity held: the GF(2⁸) code, no
    /// copy. Counts them held; returns whether it could.
    fn rebuild_in_place(&mut self, block: u32, m: BlockMembers, t: &Transfer) -> bool {
        let n = self.slots.len();
        let shard = self.shard;
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
            buf,
            indexes,
            parity,
            held,
            ..
        } = &mut self.slots[block as usize % n];
        let buf = buf.get_or_insert_with(|| {
            // A block rebuilt from parity alone: its first packets.
            self.free
                .pop()
                .unwrap_or_else(|| vec![0; usize::from(self.shape.data) * shard].into_boxed_slice())
        });
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
    pub(super) fn on_parity(&mut self, now: Instant, p: &Parity<'_>) {
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
            slot.indexes.push(p.index);
            slot.parity.extend_from_slice(p.payload);
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
        self.fec_rebuild(p.block, polled);
    }

    /// Rebuilds block `block`'s missing data packets if its parity packets
    /// held make up for them (after a parity packet, or a data packet of a
    /// block that holds parity, came).
    pub(super) fn fec_rebuild(&mut self, block: u32, polled: bool) {
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
        let slot = fec.slot(block);
        slot.indexes.clear();
        slot.parity.clear();
        slot.reported = false;
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
mod tests {
    use super::super::test_support::{events, fresh, packet, sender};
    use crate::fec::BlockEncoder;
    use crate::{Instant, Kind, ProtocolId, ReceiverEvent, Seq};
    use rmcast_wire::{
        Body, Data, FecShape, Feedback, Hello, Offer, POLL_ALL, POLL_DIRECT, POLL_NONE, Packet,
        Parity, Welcome,
    };
    use std::time::Duration;

    const K: u16 = 4;
    const PAYLOAD: u16 = 100;
    /// Three blocks of 4 and a short last one of 2 packets, the last packet 37 bytes.
    const SIZE: u64 = 13 * 100 + 37;
    const ISN: u32 = 1000;

    fn object() -> Vec<u8> {
        (0..SIZE).map(|i| (i * 7 % 253) as u8).collect()
    }

    fn packet_bytes(object: &[u8], index: u32) -> &[u8] {
        let start = index as usize * usize::from(PAYLOAD);
        &object[start..(start + usize::from(PAYLOAD)).min(object.len())]
    }

    /// A receiver offered a FEC object of `payload`-byte packets over
    /// `window`, its offer event seen, not answered yet.
    fn deciding(payload: u16, window: u32) -> crate::Receiver {
        deciding_shape(payload, window, FecShape::new(K, 0))
    }

    fn deciding_shape(payload: u16, window: u32, shape: FecShape) -> crate::Receiver {
        deciding_in(payload, window, shape, 1, 0, ProtocolId::NakPoll)
    }

    /// The same as [`deciding_shape`] in a group of `group`, with `rank`.
    fn deciding_in(
        payload: u16,
        window: u32,
        shape: FecShape,
        group: u16,
        rank: u16,
        protocol: ProtocolId,
    ) -> crate::Receiver {
        let mut r = fresh();
        let offer = packet(Body::Offer(Offer {
            object_size: SIZE,
            isn: Seq(ISN),
            payload_size: payload,
            window,
            protocol,
            protocol_param: 0,
            receivers: group,
            test_loss_ppm: 0,
            fec: Some(shape),
            name: "obj.bin",
        }));
        let hello = packet(Body::Hello(Hello {
            receivers_wanted: group,
            protocol,
        }));
        let welcome = packet(Body::Welcome(Welcome {
            receiver_id: super::super::test_support::ID,
            rank,
            upstream: None,
        }));
        for p in [hello, welcome, offer] {
            r.handle_datagram(Instant::ZERO, sender(), &mut p.clone());
        }
        assert!(
            events(&mut r)
                .iter()
                .any(|e| matches!(e, ReceiverEvent::Offer(o) if o.fec.is_some()))
        );
        r
    }

    /// A receiver that accepted a FEC offer (window 16).
    fn offered() -> crate::Receiver {
        let mut r = deciding(PAYLOAD, 16);
        r.accept_offer();
        r
    }

    fn give_data(r: &mut crate::Receiver, object: &[u8], index: u32) {
        let mut d = packet(Body::Data(Data {
            seq: Seq(ISN + index),
            poll: POLL_NONE,
            copy: 0,
            payload: packet_bytes(object, index),
        }));
        assert!(r.handle_datagram(Instant::ZERO, sender(), &mut d).is_some());
    }

    /// Parity packet `index` of `block`, as the sender's encoder makes it.
    fn parity(object: &[u8], block: u32, index: u16, poll: u16, n: u32) -> Vec<u8> {
        parity_shape(FecShape::new(K, 0), object, block, index, poll, n)
    }

    fn parity_shape(
        shape: FecShape,
        object: &[u8],
        block: u32,
        index: u16,
        poll: u16,
        n: u32,
    ) -> Vec<u8> {
        let packets = SIZE.div_ceil(u64::from(PAYLOAD)) as u32;
        let m = shape.members(block, packets);
        let mut enc = BlockEncoder::new(K, shape.space, usize::from(PAYLOAD)).unwrap();
        enc.reset(m.count as u16, shape.space).unwrap();
        for i in m.iter() {
            enc.push(packet_bytes(object, i)).unwrap();
        }
        let payload = enc.parity(index).unwrap();
        packet(Body::Parity(Parity {
            seq: Seq(ISN + packets + n),
            block,
            index,
            poll,
            payload,
        }))
    }

    fn rebuilt(r: &mut crate::Receiver) -> Vec<(u64, Vec<u8>)> {
        std::iter::from_fn(|| r.poll_repaired().map(|c| (c.offset, c.bytes.to_vec()))).collect()
    }

    /// `count` rebuilt packets, each the object's bytes at its offset.
    fn assert_rebuilt(got: &[(u64, Vec<u8>)], object: &[u8], count: usize) {
        assert_eq!(got.len(), count);
        for (offset, bytes) in got {
            let i = (offset / u64::from(PAYLOAD)) as u32;
            assert_eq!(bytes, packet_bytes(object, i), "packet {i}");
        }
    }

    #[test]
    fn parity_rebuilds_the_lost_packets_of_a_block_byte_exact() {
        let object = object();
        let mut r = offered();
        // Block 0 loses packets 1 and 2; block 3 (the short one: 12, 13)
        // loses its short last packet.
        for i in [0, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12] {
            give_data(&mut r, &object, i);
        }
        let mut p = parity(&object, 0, 3, POLL_NONE, 0);
        r.handle_datagram(Instant::ZERO, sender(), &mut p);
        assert!(rebuilt(&mut r).is_empty(), "one parity packet is not two");
        let mut p = parity(&object, 0, 0, POLL_NONE, 1);
        r.handle_datagram(Instant::ZERO, sender(), &mut p);
        assert_rebuilt(&rebuilt(&mut r), &object, 2);
        let mut p = parity(&object, 3, 1, POLL_NONE, 2);
        r.handle_datagram(Instant::ZERO, sender(), &mut p);
        let got = rebuilt(&mut r);
        assert_eq!(got, vec![(1300, packet_bytes(&object, 13).to_vec())]);
        assert_eq!(r.received_bytes(), SIZE);
        assert_eq!(r.stats().repaired_packets, 3);
        assert_eq!(r.stats().parity_packets, 3);
        // Parity of a whole block is counted and dropped.
        let mut p = parity(&object, 1, 0, POLL_NONE, 3);
        r.handle_datagram(Instant::ZERO, sender(), &mut p);
        assert_eq!(r.stats().parity_unneeded, 1);
    }

    #[test]
    fn a_block_lost_whole_and_the_gf16_code_rebuild_byte_exact() {
        let object = object();
        // GF(2⁸), in the block's buffer: block 1 (packets 4..8) is lost
        // whole, so the buffer is taken for the rebuilt packets.
        let mut r = offered();
        for i in (0..4).chain(8..14) {
            give_data(&mut r, &object, i);
        }
        for index in 0..4 {
            let mut p = parity(&object, 1, index, POLL_NONE, u32::from(index));
            r.handle_datagram(Instant::ZERO, sender(), &mut p);
        }
        assert_rebuilt(&rebuilt(&mut r), &object, 4);
        assert_eq!(r.received_bytes(), SIZE);
        // GF(2¹⁶) (a block and its parity space over 256), which copies
        // the block in: one block of all 14 packets, three lost, the
        // short last one among them.
        let shape = FecShape::new(243, 0);
        let mut r = deciding_shape(PAYLOAD, 16, shape);
        r.accept_offer();
        for i in (0..14).filter(|i| ![2, 5, 13].contains(i)) {
            give_data(&mut r, &object, i);
        }
        for index in 0..3 {
            let mut p = parity_shape(shape, &object, 0, index, POLL_NONE, u32::from(index));
            r.handle_datagram(Instant::ZERO, sender(), &mut p);
        }
        let got = rebuilt(&mut r);
        let want: Vec<(u64, Vec<u8>)> = [2, 5, 13]
            .map(|i| (u64::from(i) * 100, packet_bytes(&object, i).to_vec()))
            .into();
        assert_eq!(got, want);
        assert_eq!(r.received_bytes(), SIZE);
        assert_eq!(r.stats().repaired_packets, 3);
    }

    /// Buffers held by unfinished blocks, and buffers allocated in all.
    fn buffers(r: &crate::Receiver) -> (usize, usize) {
        let fec = r.fec.as_ref().expect("a FEC receiver");
        let held = fec.slots.iter().filter(|s| s.buf.is_some()).count();
        (held, held + fec.free.len())
    }

    fn buffers_held(r: &crate::Receiver) -> usize {
        buffers(r).0
    }

    #[test]
    fn a_block_holds_a_buffer_only_while_it_is_unfinished() {
        let object = object();
        // Window 16: a ring of 6 blocks, none of them taken up front.
        let mut r = offered();
        assert_eq!(buffers(&r).1, 0);
        for i in 0..4 {
            give_data(&mut r, &object, i);
        }
        assert_eq!(buffers_held(&r), 0, "block 0 is whole: its buffer is back");
        // Block 1 loses packet 5: it keeps its buffer until parity rebuilds
        // it and the driver has read the rebuilt packet.
        for i in [4, 6, 7, 8] {
            give_data(&mut r, &object, i);
        }
        assert_eq!(buffers_held(&r), 2, "block 1 waits, block 2 is filling");
        let mut p = parity(&object, 1, 0, POLL_NONE, 0);
        r.handle_datagram(Instant::ZERO, sender(), &mut p);
        assert_eq!(buffers_held(&r), 2, "rebuilt, not yet read");
        assert_eq!(
            rebuilt(&mut r),
            vec![(500, packet_bytes(&object, 5).to_vec())]
        );
        assert_eq!(buffers_held(&r), 1, "only block 2, still filling");
        for i in 9..14 {
            give_data(&mut r, &object, i);
        }
        assert_eq!(r.received_bytes(), SIZE);
        assert_eq!(buffers_held(&r), 0);
        // Never more than two at once, reused rather than grown.
        assert_eq!(buffers(&r).1, 2);
    }

    /// Interleaved blocks (K = 4, D = 2: groups of 8 packets, block 0 the
    /// even packets of the first group, block 1 the odd ones; the last
    /// group of 6 makes blocks 2 = 8, 10, 12 and 3 = 9, 11, 13): a burst of
    /// two consecutive losses costs each block one packet, one parity
    /// packet of each rebuilds it, and the gap is NAKed only once a packet
    /// of the next group is in.
    #[test]
    fn interleaved_blocks_take_a_burst_one_loss_each() {
        let shape = FecShape::new(K, 0).with_depth(2);
        let object = object();
        let mut r = deciding_shape(PAYLOAD, 16, shape);
        r.accept_offer();
        let mut buf = vec![0u8; 4096];
        let mut naks = |r: &mut crate::Receiver| {
            let mut n = 0;
            while let Some(t) = r.poll_transmit(Instant::ZERO, &mut buf) {
                n += usize::from(t.kind == Kind::Nak);
            }
            n
        };
        for i in [0, 1, 4, 5, 6, 7] {
            give_data(&mut r, &object, i);
        }
        assert_eq!(naks(&mut r), 0, "the group is not over: the gap waits");
        give_data(&mut r, &object, 8);
        assert_eq!(
            naks(&mut r),
            1,
            "a packet of the next group: the gap is news"
        );
        let mut p = parity_shape(shape, &object, 0, 0, POLL_NONE, 0);
        r.handle_datagram(Instant::ZERO, sender(), &mut p);
        assert_eq!(
            rebuilt(&mut r),
            vec![(200, packet_bytes(&object, 2).to_vec())]
        );
        let mut p = parity_shape(shape, &object, 1, 1, POLL_NONE, 1);
        r.handle_datagram(Instant::ZERO, sender(), &mut p);
        assert_eq!(
            rebuilt(&mut r),
            vec![(300, packet_bytes(&object, 3).to_vec())]
        );
        // The short last group: block 3 (9, 11, 13) loses its short last
        // packet, block 2 none.
        for i in [9, 10, 11, 12] {
            give_data(&mut r, &object, i);
        }
        let mut p = parity_shape(shape, &object, 3, 0, POLL_NONE, 2);
        r.handle_datagram(Instant::ZERO, sender(), &mut p);
        assert_eq!(
            rebuilt(&mut r),
            vec![(1300, packet_bytes(&object, 13).to_vec())]
        );
        assert_eq!(r.received_bytes(), SIZE);
        assert_eq!(r.stats().repaired_packets, 3);
        // Block 4 does not exist in this shape.
        let mut p = parity_shape(shape, &object, 2, 0, POLL_NONE, 3);
        let Ok(Packet {
            body: Body::Parity(good),
            ..
        }) = Packet::decode(&p)
        else {
            unreachable!()
        };
        let before = r.stats().malformed;
        r.handle_datagram(
            Instant::ZERO,
            sender(),
            &mut packet(Body::Parity(Parity { block: 4, ..good })),
        );
        assert_eq!(r.stats().malformed, before + 1);
        r.handle_datagram(Instant::ZERO, sender(), &mut p);
        assert_eq!(r.stats().parity_unneeded, 1);
    }

    #[test]
    fn feedback_counts_a_held_parity_packet_against_its_blocks_losses() {
        let object = object();
        let mut r = offered();
        // Block 0 lacks 1, 2 and 3; block 1 lacks 5.
        for i in [0, 4, 6, 7] {
            give_data(&mut r, &object, i);
        }
        // One parity packet of block 0, polled: it still lacks two.
        let mut p = parity(&object, 0, 2, POLL_ALL, 0);
        r.handle_datagram(Instant::ZERO, sender(), &mut p);
        let mut buf = vec![0u8; 4096];
        let mut feedback = None;
        while let Some(t) = r.poll_transmit(Instant::ZERO, &mut buf) {
            if matches!(t.kind, Kind::Ack | Kind::Nak) {
                feedback = Some(buf[..t.len].to_vec());
            }
        }
        let bytes = feedback.expect("the polled parity packet is answered");
        let Ok(Packet {
            body: Body::Ack(f) | Body::Nak(f),
            ..
        }) = Packet::decode(&bytes)
        else {
            panic!("feedback expected");
        };
        let holds = |f: &Feedback<'_>, i: u32| f.holds(Seq(ISN + i));
        assert_eq!(f.cumulative, Seq(ISN + 1));
        // The parity packet stands for packet 2 (the first missing after
        // the cumulative point): 1 and 3 still lacking, and 5.
        let view: Vec<bool> = (0..8).map(|i| holds(&f, i)).collect();
        assert_eq!(
            view,
            [true, false, true, false, true, false, true, true],
            "{f:?}"
        );
        // The echo names the parity transmission.
        assert_eq!(f.echo, Seq(ISN + 14));
    }

    /// Acks `r` sends at `now`.
    fn acks_at(r: &mut crate::Receiver, now: Instant) -> usize {
        let mut buf = vec![0u8; 4096];
        std::iter::from_fn(|| r.poll_transmit(now, &mut buf))
            .filter(|t| t.kind == Kind::Ack)
            .count()
    }

    #[test]
    fn a_mid_sized_ring_answers_parity_polls_in_its_slot_with_one_ack() {
        use super::super::feedback::{GROUP_ANSWERS_SPREAD_FROM, SPREAD_SLOT};
        let object = object();
        let t0 = Instant::from_nanos(1_000_000_000);
        let rank = 50;
        // Block 0 lacks 1 and 2; its two parity packets each poll every
        // receiver that needs them.
        let run = |group: u16, protocol: ProtocolId| {
            let mut r = deciding_in(PAYLOAD, 16, FecShape::new(K, 0), group, rank, protocol);
            r.accept_offer();
            let mut buf = vec![0u8; 4096];
            while r.poll_transmit(Instant::ZERO, &mut buf).is_some() {}
            for i in [0, 3] {
                give_data(&mut r, &object, i);
            }
            for (n, index) in [(0, 2), (1, 3)] {
                let mut p = parity(&object, 0, index, POLL_DIRECT, n);
                r.handle_datagram(t0, sender(), &mut p);
            }
            assert_rebuilt(&rebuilt(&mut r), &object, 2);
            r
        };
        let mut r = run(GROUP_ANSWERS_SPREAD_FROM, ProtocolId::Ring);
        let due = t0 + SPREAD_SLOT * u32::from(rank);
        assert_eq!(acks_at(&mut r, t0), 0, "held for its slot");
        assert!(r.poll_timeout().is_some_and(|t| t <= due), "wakes for it");
        let early = t0 + SPREAD_SLOT * u32::from(rank - 1);
        assert_eq!(acks_at(&mut r, early), 0, "not before its slot");
        assert_eq!(acks_at(&mut r, due), 1, "one ack for both polls");
        assert_eq!(acks_at(&mut r, due + Duration::from_secs(1)), 0);
        // A smaller ring, or nak-poll's group of the same size, answers
        // at once, poll by poll.
        let mut r = run(GROUP_ANSWERS_SPREAD_FROM - 1, ProtocolId::Ring);
        assert_eq!(acks_at(&mut r, t0), 2);
        let mut r = run(GROUP_ANSWERS_SPREAD_FROM, ProtocolId::NakPoll);
        assert_eq!(acks_at(&mut r, t0), 2);
    }

    #[test]
    fn an_offer_whose_fec_buffers_are_too_large_is_refused() {
        let mut r = deciding(65_000, 1 << 20);
        r.accept_offer();
        let ev = events(&mut r);
        assert!(
            ev.iter()
                .any(|e| matches!(e, ReceiverEvent::Failed(why) if why.contains("MiB of buffers"))),
            "{ev:?}"
        );
    }

    #[test]
    fn malformed_parity_is_counted_not_used() {
        let object = object();
        let mut r = offered();
        give_data(&mut r, &object, 0);
        let good = parity(&object, 0, 0, POLL_NONE, 0);
        let Ok(Packet {
            body: Body::Parity(p),
            ..
        }) = Packet::decode(&good)
        else {
            unreachable!()
        };
        let short = &p.payload[..10];
        for bad in [
            Parity {
                payload: short,
                ..p
            },
            Parity { block: 4, ..p },
            Parity {
                index: FecShape::new(K, 0).space,
                ..p
            },
            Parity {
                seq: Seq(ISN + 3),
                ..p
            },
        ] {
            let before = r.stats().malformed;
            r.handle_datagram(Instant::ZERO, sender(), &mut packet(Body::Parity(bad)));
            assert_eq!(r.stats().malformed, before + 1, "{bad:?}");
        }
        assert_eq!(r.stats().parity_packets, 0);
    }
}
