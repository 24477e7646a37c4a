//! A receiver asking again for packets it acknowledged: never repaired,
//! counted, and removed past the limit with the reason.

use super::membership::OVERCLAIM_LIMIT_WINDOWS;
use crate::{
    Instant, MAX_DATAGRAM, ObjectInfo, Sender, SenderConfig, SenderEvent, Seq, SessionId, Status,
};
use rmcast_wire::{Body, Feedback, Header, Join, OfferReply, Packet, RANK_UNASSIGNED};
use std::net::SocketAddr;
use std::time::Duration;

const ISN: u32 = 100;
const WINDOW: u32 = 64;

fn raddr() -> SocketAddr {
    "10.0.0.2:6000".parse().unwrap()
}

fn laggard() -> SocketAddr {
    "10.0.0.3:6000".parse().unwrap()
}

fn feed(s: &mut Sender, now: Instant, rank: u16, body: Body<'_>) {
    feed_from(s, now, raddr(), rank, body);
}

pub(super) fn feed_from(s: &mut Sender, now: Instant, from: SocketAddr, rank: u16, body: Body<'_>) {
    let mut buf = vec![0u8; 2048];
    let n = Packet {
        header: Header::new(s.session(), rank),
        body,
    }
    .encode(&mut buf)
    .unwrap();
    s.handle_datagram(now, from, &mut buf[..n]);
}

/// Sequence numbers of the data packets sent now.
fn drain(s: &mut Sender, now: Instant, data: &[u8]) -> Vec<u32> {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut seqs = Vec::new();
    while let Some(t) = s.poll_transmit(now, data, &mut buf) {
        if let Ok(Packet {
            body: Body::Data(d),
            ..
        }) = Packet::decode(&buf[..t.len])
        {
            seqs.push(d.seq.0 - ISN);
        }
    }
    seqs
}

fn nak(cumulative: u32, echo: u32) -> Body<'static> {
    Body::Nak(feedback(cumulative, echo))
}

/// Feedback with an empty bitmap; indexes count from [`ISN`].
pub(super) fn feedback(cumulative: u32, echo: u32) -> Feedback<'static> {
    Feedback {
        cumulative: Seq(ISN + cumulative),
        echo: Seq(ISN + echo),
        echo_copy: 0,
        aggregate: false,
        bitmap: &[],
    }
}

/// A sender of `data` (hash known) with sequence numbers from `isn`, at
/// time zero.
pub(super) fn sender_of(config: SenderConfig, data: &[u8], isn: u32) -> Sender {
    let object = ObjectInfo {
        size: data.len() as u64,
        name: "o".into(),
        hash: Some([1; 32]),
    };
    Sender::new(config, SessionId(9), Seq(isn), object, Instant::ZERO).unwrap()
}

#[test]
fn packets_a_receiver_acknowledged_are_never_repaired_and_asking_for_them_removes_it() {
    let data = vec![7u8; 1448 * 400];
    // Two receivers: the other one lags (holds nothing yet), so the
    // window's base stays at 0 and only the rule itself keeps the liar's
    // acknowledged packets from being repaired.
    let config = SenderConfig {
        receivers: 2,
        window: WINDOW,
        suppress: Duration::ZERO,
        ..SenderConfig::default()
    };
    let mut now = Instant::ZERO;
    let mut s = sender_of(config, &data, ISN);
    drain(&mut s, now, &data);
    feed(
        &mut s,
        now,
        RANK_UNASSIGNED,
        Body::Join(Join {
            receiver_id: 7,
            name: "liar",
        }),
    );
    feed_from(
        &mut s,
        now,
        laggard(),
        RANK_UNASSIGNED,
        Body::Join(Join {
            receiver_id: 8,
            name: "laggard",
        }),
    );
    drain(&mut s, now, &data);
    now = now + Duration::from_millis(200);
    s.handle_timeout(now);
    drain(&mut s, now, &data);
    for (from, rank) in [(raddr(), 0), (laggard(), 1)] {
        feed_from(
            &mut s,
            now,
            from,
            rank,
            Body::OfferReply(OfferReply {
                status: Status::Ok,
                text: "",
            }),
        );
    }
    let first = drain(&mut s, now, &data);
    assert_eq!(first.len(), WINDOW as usize, "a window of data: {first:?}");
    // It acknowledges the whole first window.
    feed(
        &mut s,
        now,
        0,
        Body::Ack(Feedback {
            cumulative: Seq(ISN + WINDOW),
            echo: Seq(ISN + WINDOW - 1),
            echo_copy: 0,
            aggregate: false,
            bitmap: &[],
        }),
    );
    drain(&mut s, now, &data);
    // Feedback the network held back (less than `rto_max`) is old news,
    // not a claim: nothing counted, nothing repaired.
    now = now + Duration::from_millis(10);
    feed(&mut s, now, 0, nak(0, WINDOW - 1));
    assert_eq!(s.stats().overclaimed_packets, 0);
    assert!(drain(&mut s, now, &data).iter().all(|&i| i >= WINDOW));
    // Past it, it keeps saying it lacks everything from the start.
    now = now + SenderConfig::default().rto_max;
    let mut resent = Vec::new();
    for k in 1..=OVERCLAIM_LIMIT_WINDOWS + 1 {
        now = now + Duration::from_millis(1);
        feed(&mut s, now, 0, nak(0, WINDOW - 1));
        resent.extend(drain(&mut s, now, &data));
        assert_eq!(s.stats().overclaimed_packets, k * u64::from(WINDOW));
    }
    assert!(
        resent.iter().all(|&i| i >= WINDOW),
        "an acknowledged packet was repaired: {resent:?}"
    );
    let mut failed = None;
    while let Some(e) = s.poll_event() {
        if let SenderEvent::MemberFailed { reason, .. } = e {
            failed = Some(reason);
        }
    }
    let why = failed.expect("the receiver is removed");
    assert!(
        why.contains("asked again for") && why.contains("hostile"),
        "{why}"
    );
}
