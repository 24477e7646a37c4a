//! Feedback whose bitmap the receiver cut short (2,048 packets past its
//! cumulative point, `FEEDBACK_BITMAP_MAX` bytes): the sender judges
//! nothing past its reach, so a receiver far behind its highest packet is
//! not taken to lack everything past its bitmap.

use super::overclaim_tests::{feed_from, sender_of};
use crate::{Instant, MAX_DATAGRAM, Sender, SenderConfig, Seq, Status};
use rmcast_wire::{
    Body, FEEDBACK_BITMAP_MAX, FecShape, Feedback, Join, OfferReply, Packet, RANK_UNASSIGNED,
};
use std::net::SocketAddr;
use std::time::Duration;

const ISN: u32 = 100;
const WINDOW: u32 = 4096;

fn raddr() -> SocketAddr {
    "10.0.0.2:6000".parse().unwrap()
}

/// Data packets (by index) and parity packets sent now.
fn drain(s: &mut Sender, now: Instant, data: &[u8]) -> (Vec<u32>, usize) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let (mut seqs, mut parity) = (Vec::new(), 0);
    while let Some(t) = s.poll_transmit(now, data, &mut buf) {
        match Packet::decode(&buf[..t.len]).map(|p| p.body) {
            Ok(Body::Data(d)) => seqs.push(d.seq.0 - ISN),
            Ok(Body::Parity(_)) => parity += 1,
            _ => {}
        }
    }
    (seqs, parity)
}

/// A sender whose one receiver joined and was sent a whole window.
fn window_sent(fec: Option<FecShape>, data: &[u8]) -> (Sender, Instant) {
    let config = SenderConfig {
        receivers: 1,
        window: WINDOW,
        fec,
        ..SenderConfig::default()
    };
    let mut now = Instant::ZERO;
    let mut s = sender_of(config, data, ISN);
    drain(&mut s, now, data);
    let join = Body::Join(Join {
        receiver_id: 7,
        name: "behind",
    });
    feed_from(&mut s, now, raddr(), RANK_UNASSIGNED, join);
    drain(&mut s, now, data);
    now = now + Duration::from_millis(200);
    s.handle_timeout(now);
    drain(&mut s, now, data);
    let reply = Body::OfferReply(OfferReply {
        status: Status::Ok,
        text: "",
    });
    feed_from(&mut s, now, raddr(), 0, reply);
    let (first, _) = drain(&mut s, now, data);
    assert_eq!(first.len(), WINDOW as usize, "a window of data");
    (s, now)
}

/// The whole window arrived but packet 0: the receiver's NAK, echoing the
/// window's last packet, holds 1 ..= 2,048 in a bitmap cut at its most.
fn nak_cut_short(s: &mut Sender, now: Instant) {
    let bitmap = [0xFF; FEEDBACK_BITMAP_MAX];
    let nak = Body::Nak(Feedback {
        cumulative: Seq(ISN),
        echo: Seq(ISN + WINDOW - 1),
        echo_copy: 0,
        aggregate: false,
        bitmap: &bitmap,
    });
    feed_from(s, now, raddr(), 0, nak);
}

#[test]
fn packets_past_a_bitmap_cut_short_are_not_resent() {
    let data = vec![7u8; 1448 * 2 * WINDOW as usize];
    let (mut s, now) = window_sent(None, &data);
    nak_cut_short(&mut s, now);
    // Once the repair suppression (`suppress`) is over.
    let (resent, _) = drain(&mut s, now + Duration::from_millis(10), &data);
    // Before, 2049 ..= 4094 too: 2,047 packets it may well hold.
    assert_eq!(
        (resent.len(), resent.first()),
        (1, Some(&0)),
        "only the packet it said it lacks"
    );
}

#[test]
fn blocks_past_a_bitmap_cut_short_get_no_parity() {
    let data = vec![7u8; 1448 * 2 * WINDOW as usize];
    let (mut s, now) = window_sent(Some(FecShape::new(64, 0)), &data);
    nak_cut_short(&mut s, now);
    // At once (later, the stuck base block is probed with more parity).
    let (resent, parity) = drain(&mut s, now, &data);
    // Block 0 lacks one packet: one parity packet. Before, the blocks past
    // the bitmap were taken to lack all 64, spent their parity and were
    // resent as data.
    assert_eq!((resent.len(), parity), (0, 1));
    assert_eq!(s.stats().retransmitted_packets, 0);
}
