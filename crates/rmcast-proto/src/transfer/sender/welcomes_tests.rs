//! A group over `SPREAD_FROM` receivers is welcomed in `Welcomes`
//! datagrams to the group (at most `WELCOMES_MAX` admissions each, at
//! most `WELCOMES_WAIT` after the oldest), a smaller one by a unicast
//! `Welcome` each, at once.

use super::membership::WELCOMES_WAIT;
use super::overclaim_tests::{feed_from, sender_of};
use crate::transfer::receiver::SPREAD_FROM;
use crate::{Dest, Instant, MAX_DATAGRAM, Sender, SenderConfig};
use rmcast_wire::{Body, Join, Kind, Packet, RANK_UNASSIGNED, WELCOMES_MAX};
use std::net::SocketAddr;
use std::time::Duration;

fn addr(id: u64) -> SocketAddr {
    SocketAddr::from(([10, 1, (id >> 8) as u8, id as u8], 6000))
}

fn join(s: &mut Sender, now: Instant, id: u64) {
    let body = Body::Join(Join {
        receiver_id: id,
        name: "r",
    });
    feed_from(s, now, addr(id), RANK_UNASSIGNED, body);
}

/// A datagram sent: kind, destination, and for admissions the (receiver
/// id, rank) pairs, in order.
type Sent = (Kind, Dest, Vec<(u64, u16)>);

/// What the sender sends now.
fn sent(s: &mut Sender, now: Instant, data: &[u8]) -> Vec<Sent> {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut out = Vec::new();
    while let Some(t) = s.poll_transmit(now, data, &mut buf) {
        let p = Packet::decode(&buf[..t.len]).expect("the sender's own packet");
        let admitted = match p.body {
            Body::Welcomes(w) => w.entries().map(|e| (e.receiver_id, e.rank)).collect(),
            Body::Welcome(w) => vec![(w.receiver_id, w.rank)],
            _ => Vec::new(),
        };
        out.push((t.kind, t.dest, admitted));
    }
    out
}

fn group_of(receivers: u16) -> (Sender, Vec<u8>) {
    let data = vec![7u8; 1448 * 4];
    let config = SenderConfig {
        receivers,
        ..SenderConfig::default()
    };
    let mut s = sender_of(config, &data, 100);
    let hello = sent(&mut s, Instant::ZERO, &data);
    assert_eq!(hello.len(), 1, "the first Hello: {hello:?}");
    (s, data)
}

#[test]
fn a_large_group_is_welcomed_in_batches_to_the_group() {
    let (mut s, data) = group_of(SPREAD_FROM + 1);
    let joined = Instant::ZERO + Duration::from_millis(1);
    let extra = 6;
    for id in 1..=(WELCOMES_MAX as u64 + extra) {
        join(&mut s, joined, id);
    }
    // A full batch goes at once; the rest waits for others.
    let out = sent(&mut s, joined, &data);
    assert_eq!(out.len(), 1, "{out:?}");
    let (kind, dest, admitted) = &out[0];
    assert_eq!((*kind, *dest), (Kind::Welcomes, Dest::Group));
    let first: Vec<(u64, u16)> = (1..=WELCOMES_MAX as u64)
        .map(|id| (id, id as u16 - 1))
        .collect();
    assert_eq!(admitted, &first, "ranks in order of the joins");
    assert_eq!(s.poll_timeout(), Some(joined + WELCOMES_WAIT));
    let early = joined + (WELCOMES_WAIT - Duration::from_micros(1));
    s.handle_timeout(early);
    assert!(sent(&mut s, early, &data).is_empty(), "not before its time");
    // The rest, at most WELCOMES_WAIT after the oldest of them.
    let due = joined + WELCOMES_WAIT;
    s.handle_timeout(due);
    let out = sent(&mut s, due, &data);
    let rest: Vec<(u64, u16)> = (WELCOMES_MAX as u64 + 1..=WELCOMES_MAX as u64 + extra)
        .map(|id| (id, id as u16 - 1))
        .collect();
    assert_eq!(out, vec![(Kind::Welcomes, Dest::Group, rest)]);
    assert!(s.poll_timeout() > Some(due), "nothing left owed");
    // A Join again (its Welcomes was lost): the same rank, batched again.
    let again = due + Duration::from_millis(3);
    join(&mut s, again, 3);
    assert!(sent(&mut s, again, &data).is_empty());
    s.handle_timeout(again + WELCOMES_WAIT);
    let out = sent(&mut s, again + WELCOMES_WAIT, &data);
    assert_eq!(out, vec![(Kind::Welcomes, Dest::Group, vec![(3, 2)])]);
}

#[test]
fn the_last_join_sends_every_admission_owed_before_the_offer() {
    let wanted = SPREAD_FROM + 1;
    let (mut s, data) = group_of(wanted);
    let joined = Instant::ZERO + Duration::from_millis(1);
    for id in 1..=u64::from(wanted) {
        join(&mut s, joined, id);
    }
    let out = sent(&mut s, joined, &data);
    let batches = usize::from(wanted).div_ceil(WELCOMES_MAX);
    let kinds: Vec<(Kind, Dest)> = out.iter().map(|(k, d, _)| (*k, *d)).collect();
    let mut expected = vec![(Kind::Welcomes, Dest::Group); batches];
    expected.push((Kind::Offer, Dest::Group));
    assert_eq!(kinds, expected);
    let admitted: Vec<u64> = out.iter().flat_map(|(_, _, a)| a).map(|a| a.0).collect();
    assert_eq!(admitted, (1..=u64::from(wanted)).collect::<Vec<_>>());
    // A Join for a full session is turned away the same way.
    let late = joined + Duration::from_millis(1);
    join(&mut s, late, 99_999);
    let out = sent(&mut s, late, &data);
    assert_eq!(
        out,
        vec![(Kind::Welcomes, Dest::Group, vec![(99_999, RANK_UNASSIGNED)])],
        "after registration an admission goes at once"
    );
}

#[test]
fn a_group_of_up_to_spread_from_is_welcomed_one_by_one_at_once() {
    let (mut s, data) = group_of(SPREAD_FROM);
    let joined = Instant::ZERO + Duration::from_millis(1);
    for id in 1..=3 {
        join(&mut s, joined, id);
    }
    let out = sent(&mut s, joined, &data);
    let expected: Vec<_> = (1..=3u64)
        .map(|id| {
            (
                Kind::Welcome,
                Dest::Unicast(addr(id)),
                vec![(id, id as u16 - 1)],
            )
        })
        .collect();
    assert_eq!(out, expected);
}

/// The `Hello`s say how many receivers are still missing, not the whole
/// group: the receivers whose joins were lost spread their joins again
/// over that many slots (a few microseconds), not over the group's.
#[test]
fn a_hello_says_how_many_receivers_are_still_missing() {
    let wanted = 10_000u16;
    let (mut s, data) = group_of(wanted);
    let joined = Instant::ZERO + Duration::from_millis(1);
    for id in 1..=u64::from(wanted - 10) {
        join(&mut s, joined, id);
    }
    sent(&mut s, joined, &data);
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut hellos = Vec::new();
    while hellos.is_empty() {
        let at = s.poll_timeout().expect("a Hello is due");
        s.handle_timeout(at);
        while let Some(t) = s.poll_transmit(at, &data[..], &mut buf) {
            if let Ok(Packet {
                body: Body::Hello(h),
                ..
            }) = Packet::decode(&buf[..t.len])
            {
                hellos.push(h.receivers_wanted);
            }
        }
    }
    assert_eq!(hellos, vec![10], "the ten still missing");
}
