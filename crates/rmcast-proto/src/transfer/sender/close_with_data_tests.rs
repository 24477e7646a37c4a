//! A group over `SPREAD_FROM` receivers gets its `Close` with the data
//! (`Sender::close_with_data_due`): the `Complete`s answer the last poll,
//! a member whose `Complete` was lost is asked alone, and the group is not
//! asked again at once when every byte is acknowledged. A smaller group
//! closes once every byte is acknowledged, as before.

use super::overclaim_tests::{feed_from, feedback, sender_of};
use crate::transfer::receiver::SPREAD_FROM;
use crate::{Dest, Instant, MAX_DATAGRAM, Sender, SenderConfig, Status};
use rmcast_wire::{Body, Complete, Join, Kind, OfferReply, Packet, RANK_UNASSIGNED};
use std::net::SocketAddr;
use std::time::Duration;

const ISN: u32 = 100;
pub(super) const PACKETS: u32 = 10;
pub(super) const SUPPRESS: Duration = Duration::from_millis(5);
const RTO: Duration = Duration::from_millis(20);

fn addr(id: u64) -> SocketAddr {
    SocketAddr::from(([10, 1, (id >> 8) as u8, id as u8], 6000))
}

/// What the sender sends now: (kind, destination).
fn sent(s: &mut Sender, now: Instant, data: &[u8]) -> Vec<(Kind, Dest)> {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    std::iter::from_fn(|| s.poll_transmit(now, data, &mut buf))
        .map(|t| (t.kind, t.dest))
        .collect()
}

/// A group of `receivers`, every one admitted and accepting the offer:
/// the sender, the object, each rank's address, the time the answers
/// came, and what the sender sent then (the data, and whatever follows).
pub(super) struct Group {
    pub(super) s: Sender,
    pub(super) data: Vec<u8>,
    pub(super) addrs: Vec<SocketAddr>,
    pub(super) now: Instant,
    pub(super) sent: Vec<(Kind, Dest)>,
}

fn group(receivers: u16) -> Group {
    group_with(receivers, RTO)
}

/// [`group`] with retransmission timeout `rto`: a nak-poll sender of
/// [`PACKETS`] packets (window 64, `suppress` 5 ms).
pub(super) fn group_with(receivers: u16, rto: Duration) -> Group {
    let data = vec![7u8; 1448 * PACKETS as usize];
    let config = SenderConfig {
        receivers,
        window: 64,
        suppress: SUPPRESS,
        rto,
        ..SenderConfig::default()
    };
    let mut s = sender_of(config, &data, ISN);
    let mut now = Instant::ZERO;
    assert_eq!(sent(&mut s, now, &data), vec![(Kind::Hello, Dest::Group)]);
    now = now + Duration::from_millis(1);
    for id in 1..=u64::from(receivers) {
        let join = Body::Join(Join {
            receiver_id: id,
            name: "r",
        });
        feed_from(&mut s, now, addr(id), RANK_UNASSIGNED, join);
    }
    // The admissions (a `Welcome` each, or `Welcomes` lists), then the
    // offer; each rank's address from the admissions.
    let mut addrs = vec![None; usize::from(receivers)];
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut offered = false;
    for _ in 0..100 {
        while let Some(t) = s.poll_transmit(now, &data, &mut buf) {
            match Packet::decode(&buf[..t.len]).expect("plain").body {
                Body::Welcomes(w) => {
                    for e in w.entries() {
                        addrs[usize::from(e.rank)] = Some(addr(e.receiver_id));
                    }
                }
                Body::Welcome(w) => addrs[usize::from(w.rank)] = Some(addr(w.receiver_id)),
                Body::Offer(_) => offered = true,
                _ => {}
            }
        }
        if offered {
            break;
        }
        now = s.poll_timeout().expect("admission has a timer").max(now);
        s.handle_timeout(now);
    }
    assert!(offered, "the offer went");
    let addrs: Vec<SocketAddr> = addrs.into_iter().map(|a| a.expect("admitted")).collect();
    now = now + Duration::from_millis(1);
    for (rank, &a) in addrs.iter().enumerate() {
        let reply = Body::OfferReply(OfferReply {
            status: Status::Ok,
            text: "",
        });
        feed_from(&mut s, now, a, rank as u16, reply);
    }
    let out = sent(&mut s, now, &data);
    Group {
        s,
        data,
        addrs,
        now,
        sent: out,
    }
}

/// An ack of every packet, answering the last one's poll.
pub(super) fn last_ack() -> Body<'static> {
    Body::Ack(feedback(PACKETS, PACKETS - 1))
}

pub(super) fn complete() -> Body<'static> {
    Body::Complete(Complete {
        status: Status::Ok,
        hash: [1; 32],
        text: "",
    })
}

#[test]
fn a_large_group_s_close_goes_with_the_data_and_its_completes_end_the_session() {
    let g = group(SPREAD_FROM + 1);
    let (mut s, data, addrs, now, out) = (g.s, g.data, g.addrs, g.now, g.sent);
    let mut want = vec![(Kind::Data, Dest::Group); PACKETS as usize];
    want.push((Kind::Close, Dest::Group));
    assert_eq!(out, want, "the Close right after the last data packet");
    // Every receiver answers the last poll and the Close with its
    // Complete, in its slot: the farewell follows, no second Close.
    let mut at = now;
    for (rank, &a) in addrs.iter().enumerate() {
        at = now + Duration::from_micros(2 * rank as u64);
        feed_from(&mut s, at, a, rank as u16, complete());
    }
    let out = sent(&mut s, at, &data);
    assert_eq!(out, vec![(Kind::Bye, Dest::Group)]);
    assert!(s.outcome().is_none(), "two more Byes");
    assert_eq!(s.stats().timeouts, 0);
    assert_eq!(s.stats().repolls, 0);
}

#[test]
fn a_large_group_member_whose_complete_was_lost_is_asked_alone() {
    let g = group(SPREAD_FROM + 1);
    let (mut s, data, addrs, now) = (g.s, g.data, g.addrs, g.now);
    let silent = 500usize;
    let mut last = now;
    for (rank, &a) in addrs.iter().enumerate() {
        last = now + Duration::from_micros(2 * rank as u64);
        // Rank 0 answers the poll before the Close reaches it: an ack.
        let body = match rank {
            0 => last_ack(),
            r if r == silent => continue,
            _ => complete(),
        };
        feed_from(&mut s, last, a, rank as u16, body);
    }
    // The silent member's Complete was lost; it is polled alone, not the
    // group, once the answers are quiet, and answers with its Complete
    // (the receiver's side, `verdict_answers_polls`).
    let mut asked = Vec::new();
    let mut t = last;
    while t < last + RTO && asked.is_empty() {
        t = s.poll_timeout().expect("waits for it");
        s.handle_timeout(t);
        asked = sent(&mut s, t, &data);
    }
    assert_eq!(
        asked,
        vec![(Kind::Data, Dest::Unicast(addrs[silent]))],
        "polled alone"
    );
    // The Complete of the member that acked, and of the silent one: the
    // farewell, and the Close never went to the group again.
    feed_from(&mut s, t, addrs[0], 0, complete());
    feed_from(&mut s, t, addrs[silent], silent as u16, complete());
    assert_eq!(sent(&mut s, t, &data), vec![(Kind::Bye, Dest::Group)]);
}

#[test]
fn acked_without_a_complete_the_close_goes_to_the_silent_alone_not_the_group() {
    let g = group(SPREAD_FROM + 1);
    let (mut s, data, addrs, now) = (g.s, g.data, g.addrs, g.now);
    // Every member acks (a Close lost, say, for rank 3); all but rank 3
    // sent their Complete too.
    let at = now + Duration::from_millis(2);
    for (rank, &a) in addrs.iter().enumerate() {
        feed_from(&mut s, at, a, rank as u16, last_ack());
        if rank != 3 {
            feed_from(&mut s, at, a, rank as u16, complete());
        }
    }
    // Every byte is acknowledged: closing, but the Close went with the
    // data, so no multicast now; rank 3 gets it alone once quiet.
    assert_eq!(sent(&mut s, at, &data), vec![]);
    let due = s.poll_timeout().expect("asks the silent");
    assert!(due < now + RTO, "before the group's repeat: {due:?}");
    s.handle_timeout(due);
    assert_eq!(
        sent(&mut s, due, &data),
        vec![(Kind::Close, Dest::Unicast(addrs[3]))]
    );
    feed_from(&mut s, due, addrs[3], 3, complete());
    assert_eq!(sent(&mut s, due, &data), vec![(Kind::Bye, Dest::Group)]);
}

#[test]
fn a_group_of_up_to_spread_from_closes_once_every_byte_is_acknowledged() {
    let g = group(SPREAD_FROM);
    let (mut s, data, addrs, now, out) = (g.s, g.data, g.addrs, g.now, g.sent);
    assert_eq!(out, vec![(Kind::Data, Dest::Group); PACKETS as usize]);
    let at = now + Duration::from_millis(1);
    for (rank, &a) in addrs.iter().enumerate() {
        feed_from(&mut s, at, a, rank as u16, last_ack());
    }
    assert_eq!(sent(&mut s, at, &data), vec![(Kind::Close, Dest::Group)]);
}
