//! The FEC receiver's tests: blocks rebuilt from parity, feedback that
//! counts what a block lacks, buffers taken and given back.

use super::super::test_support::{events, fresh, packet, sender};
use crate::fec::BlockEncoder;
use crate::{Instant, Kind, ProtocolId, ReceiverEvent, Seq};
use rmcast_wire::{
    Body, Data, FecShape, Feedback, Hello, Offer, POLL_ALL, POLL_DIRECT, POLL_NONE, Packet, Parity,
    Welcome,
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

/// Parity byte buffers held by blocks waiting with parity, and parity
/// buffers allocated in all (held, or kept for the next block).
fn parity_buffers(r: &crate::Receiver) -> (usize, usize) {
    let fec = r.fec.as_ref().expect("a FEC receiver");
    let held = fec.slots.iter().filter(|s| s.parity.capacity() > 0).count();
    (held, held + fec.free_parity.len())
}

#[test]
fn blocks_rebuilt_one_after_another_share_one_parity_buffer() {
    let object = object();
    // Window 16: a ring of 6 slots. Each block loses its first packet,
    // and one parity packet rebuilds it before the next block comes.
    let mut r = offered();
    for block in 0..3u32 {
        for i in 4 * block + 1..4 * block + 4 {
            give_data(&mut r, &object, i);
        }
        let mut p = parity(&object, block, 0, POLL_NONE, block);
        r.handle_datagram(Instant::ZERO, sender(), &mut p);
        let i = 4 * block;
        assert_eq!(
            rebuilt(&mut r),
            vec![(u64::from(i) * 100, packet_bytes(&object, i).to_vec())]
        );
        // The rebuilt block's slot keeps no parity bytes: one buffer in
        // all, waiting for the next block that gets parity (before, each
        // slot that ever held parity kept its own until the ring came
        // round to it again: 256 slots of a window of 16384).
        assert_eq!(parity_buffers(&r), (0, 1), "after block {block}");
    }
    for i in 12..14 {
        give_data(&mut r, &object, i);
    }
    assert_eq!(r.received_bytes(), SIZE);
    // Two blocks waiting with parity at once hold one each: blocks 0
    // and 1 lose two packets each, and get one parity packet each first.
    let mut r = offered();
    for i in [2, 3, 6, 7, 8] {
        give_data(&mut r, &object, i);
    }
    assert_eq!(parity_buffers(&r), (0, 0), "no parity yet");
    for (n, (block, index)) in [(0, 0), (1, 0)].into_iter().enumerate() {
        let mut p = parity(&object, block, index, POLL_NONE, n as u32);
        r.handle_datagram(Instant::ZERO, sender(), &mut p);
    }
    assert_eq!(parity_buffers(&r), (2, 2), "both wait for a second");
    for (n, (block, index)) in [(0, 1), (1, 1)].into_iter().enumerate() {
        let mut p = parity(&object, block, index, POLL_NONE, 2 + n as u32);
        r.handle_datagram(Instant::ZERO, sender(), &mut p);
    }
    assert_eq!(rebuilt(&mut r).len(), 4);
    assert_eq!(parity_buffers(&r), (0, 2), "both rebuilt, both kept");
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

/// The driver's storage of a receiver that keeps no copy: what it was
/// delivered, and the packets read back from it.
struct Disk {
    bytes: Vec<u8>,
    held: Vec<bool>,
    reads: Vec<u32>,
    /// Fails every read back (a storage error).
    broken: bool,
}

impl Disk {
    fn new() -> Self {
        Self {
            bytes: vec![0; SIZE as usize],
            held: vec![false; SIZE.div_ceil(u64::from(PAYLOAD)) as usize],
            reads: Vec::new(),
            broken: false,
        }
    }

    fn write(&mut self, chunk: crate::DataChunk<'_>) {
        let start = chunk.offset as usize;
        self.bytes[start..start + chunk.bytes.len()].copy_from_slice(chunk.bytes);
        self.held[start / usize::from(PAYLOAD)] = true;
    }
}

impl crate::ReadBack for Disk {
    fn read_back(&mut self, offset: u64, dst: &mut [u8]) -> bool {
        let i = (offset / u64::from(PAYLOAD)) as usize;
        if self.broken || !self.held[i] {
            return false;
        }
        let start = offset as usize;
        dst.copy_from_slice(&self.bytes[start..start + dst.len()]);
        self.reads.push(i as u32);
        true
    }
}

/// A receiver that accepted a FEC offer (window 16) and reads back.
fn reading_back() -> crate::Receiver {
    let mut r = deciding(PAYLOAD, 16);
    r.config.fec_read_back = true;
    r.accept_offer();
    r
}

/// Hands `datagram` over as the runtime does: the chunk it yields and
/// those rebuilt are written to `disk` before the next datagram.
fn give_reading(r: &mut crate::Receiver, disk: &mut Disk, mut datagram: Vec<u8>) {
    if let Some(chunk) = r.handle_datagram_reading(Instant::ZERO, sender(), &mut datagram, disk) {
        disk.write(chunk);
    }
    while let Some(chunk) = r.poll_repaired() {
        disk.write(chunk);
    }
}

fn data_packet(object: &[u8], index: u32) -> Vec<u8> {
    packet(Body::Data(Data {
        seq: Seq(ISN + index),
        poll: POLL_NONE,
        copy: 0,
        payload: packet_bytes(object, index),
    }))
}

#[test]
fn reading_back_rebuilds_from_the_store_and_keeps_no_copy() {
    let object = object();
    let mut r = reading_back();
    let mut disk = Disk::new();
    // Block 0 loses packets 1 and 2, block 1 packet 5, the short block 3
    // its short last packet 13.
    for i in [0, 3, 4, 6, 7, 8, 9, 10, 11, 12] {
        give_reading(&mut r, &mut disk, data_packet(&object, i));
    }
    assert_eq!(
        buffers(&r).1,
        0,
        "no block buffer while packets only arrive"
    );
    give_reading(&mut r, &mut disk, parity(&object, 0, 3, POLL_NONE, 0));
    assert!(disk.reads.is_empty(), "one parity packet is not two");
    give_reading(&mut r, &mut disk, parity(&object, 0, 0, POLL_NONE, 1));
    assert_eq!(disk.reads, [0, 3], "block 0's packets held, read back once");
    // Blocks 1 and 3 each lack one packet: one parity packet each.
    give_reading(&mut r, &mut disk, parity(&object, 1, 1, POLL_NONE, 2));
    assert_eq!(disk.reads, [0, 3, 4, 6, 7]);
    give_reading(&mut r, &mut disk, parity(&object, 3, 1, POLL_NONE, 3));
    assert_eq!(disk.reads, [0, 3, 4, 6, 7, 12]);
    assert_eq!(disk.bytes, object, "every rebuilt packet byte-exact");
    assert_eq!(r.received_bytes(), SIZE);
    assert_eq!(r.stats().repaired_packets, 4);
    // One buffer served the three blocks rebuilt, and none is held.
    assert_eq!(buffers(&r), (0, 1));
}

#[test]
fn a_data_packet_that_completes_a_block_is_used_from_hand() {
    let object = object();
    let mut r = reading_back();
    let mut disk = Disk::new();
    // Block 0 lacks 1 and 2; one parity packet comes, then packet 2:
    // with it the block holds K, and packet 2 (not stored yet) is taken
    // from the datagram, not asked of the store.
    for i in [0, 3] {
        give_reading(&mut r, &mut disk, data_packet(&object, i));
    }
    give_reading(&mut r, &mut disk, parity(&object, 0, 2, POLL_NONE, 0));
    assert!(disk.reads.is_empty());
    give_reading(&mut r, &mut disk, data_packet(&object, 2));
    assert_eq!(disk.reads, [0, 3]);
    assert_eq!(r.stats().repaired_packets, 1);
    assert_eq!(&disk.bytes[..400], &object[..400]);
    assert!(events(&mut r).is_empty());
}

#[test]
fn a_store_that_cannot_read_back_ends_the_receiver_naming_the_packet() {
    let object = object();
    let mut r = reading_back();
    let mut disk = Disk::new();
    for i in [0, 2, 3] {
        give_reading(&mut r, &mut disk, data_packet(&object, i));
    }
    disk.broken = true;
    give_reading(&mut r, &mut disk, parity(&object, 0, 0, POLL_NONE, 0));
    assert_eq!(r.stats().repaired_packets, 0);
    let ev = events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(e, ReceiverEvent::Failed(why)
            if why.contains("could not read packet 0 back") && why.contains("block 0"))),
        "{ev:?}"
    );
    assert!(r.is_finished());
}
