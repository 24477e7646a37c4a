//! A round whose answers are over while a few members stayed silent (a
//! poll the base waits on, an `Offer`, a `Close`): each of them is asked
//! again by unicast at once, not after the retransmission timeout.

use super::overclaim_tests::{feed_from, feedback, sender_of};
use crate::{Dest, Instant, MAX_DATAGRAM, Sender, SenderConfig, Seq, Status};
use rmcast_wire::{
    Body, Complete, FLAG_ALONE, FecShape, Feedback, Join, Kind, OfferReply, POLL_ALL, POLL_DIRECT,
    Packet, RANK_UNASSIGNED,
};
use std::net::SocketAddr;
use std::time::Duration;

const ISN: u32 = 100;
const WINDOW: u32 = 64;
const SUPPRESS: Duration = Duration::from_millis(5);
/// The RTO: a re-poll waits at least a quarter of it, here `SUPPRESS`.
const RTO: Duration = Duration::from_millis(20);

fn addr(rank: u16) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 2 + rank as u8], 6000))
}

/// The data packets sent now: (index, poll, destination).
fn drain(s: &mut Sender, now: Instant, data: &[u8]) -> Vec<(u32, u16, Dest)> {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut out = Vec::new();
    while let Some(t) = s.poll_transmit(now, data, &mut buf) {
        if let Ok(Packet {
            body: Body::Data(d),
            ..
        }) = Packet::decode(&buf[..t.len])
        {
            out.push((d.seq.0 - ISN, d.poll, t.dest));
        }
    }
    out
}

fn ack(cumulative: u32, echo: u32) -> Body<'static> {
    Body::Ack(feedback(cumulative, echo))
}

/// A member's answer to the poll at `poll`: it holds the window but its
/// first packet.
fn lacks_first(poll: u32) -> Body<'static> {
    const ALL_BUT_THE_FIRST: [u8; 8] = [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F];
    Body::Nak(Feedback {
        cumulative: Seq(ISN),
        echo: Seq(ISN + poll),
        echo_copy: 0,
        aggregate: false,
        bitmap: &ALL_BUT_THE_FIRST,
    })
}

/// A nak-poll sender with `receivers` members that has sent its first
/// window at time zero; returns it, the object, and the packet that
/// polled everyone last.
fn sending(receivers: u16) -> (Sender, Vec<u8>, u32) {
    sending_with(receivers, "off")
}

/// [`sending`], with `--fec` set to `fec`.
fn sending_with(receivers: u16, fec: &str) -> (Sender, Vec<u8>, u32) {
    let (mut s, data) = offering_with(receivers, 400, fec);
    let now = Instant::ZERO;
    for rank in 0..receivers {
        feed_from(&mut s, now, addr(rank), rank, ok_reply());
    }
    // The data goes after the answers to the offer.
    let now = now + Duration::from_micros(100);
    s.handle_timeout(now);
    let first = drain(&mut s, now, &data);
    assert_eq!(first.len(), WINDOW as usize, "a window of data: {first:?}");
    let poll = first
        .iter()
        .rev()
        .find(|(_, poll, _)| *poll == POLL_ALL)
        .map(|&(index, _, _)| index)
        .expect("a packet polled everyone");
    (s, data, poll)
}

#[test]
fn a_member_silent_after_a_poll_is_polled_again_directly_once_the_answers_stop() {
    let (mut s, data, poll) = sending(3);
    let t0 = Instant::ZERO + Duration::from_millis(1);
    // Ranks 0 and 1 answer the poll; rank 2's answer is lost.
    feed_from(&mut s, t0, addr(0), 0, ack(WINDOW, poll));
    let last = t0 + Duration::from_millis(1);
    feed_from(&mut s, last, addr(1), 1, ack(WINDOW, poll));
    assert_eq!(s.poll_timeout(), Some(last + SUPPRESS), "wakes once quiet");
    let early = last + (SUPPRESS - Duration::from_micros(1));
    s.handle_timeout(early);
    assert_eq!(drain(&mut s, early, &data), vec![], "not before");
    let due = last + SUPPRESS;
    s.handle_timeout(due);
    assert_eq!(
        drain(&mut s, due, &data),
        vec![(0, POLL_DIRECT, Dest::Unicast(addr(2)))],
        "the base, to the silent member alone, polling it"
    );
    assert_eq!(s.stats().timeouts, 0);
    assert_eq!(s.stats().repolls, 1);
    // Its answer lost again: asked again a quiet later, three times in
    // all per round; then it is the RTO's (at 20 ms).
    for n in 1..3u32 {
        let again = due + SUPPRESS * n;
        let early = due + (SUPPRESS * n - Duration::from_micros(1));
        s.handle_timeout(early);
        assert_eq!(drain(&mut s, early, &data), vec![], "not before");
        s.handle_timeout(again);
        assert_eq!(
            drain(&mut s, again, &data),
            vec![(0, POLL_DIRECT, Dest::Unicast(addr(2)))],
            "asked again, time {n}"
        );
    }
    assert_eq!(s.stats().repolls, 3);
    // No fourth: the RTO's stall poll (at 20.1 ms) asks everyone.
    let later = due + SUPPRESS * 3;
    s.handle_timeout(later);
    assert_eq!(
        drain(&mut s, later, &data),
        vec![(0, POLL_DIRECT, Dest::Group)]
    );
    assert_eq!((s.stats().repolls, s.stats().timeouts), (3, 1));
    // Its answer moves the window on.
    feed_from(&mut s, later, addr(2), 2, ack(WINDOW, 0));
    assert_eq!(drain(&mut s, later, &data).len(), WINDOW as usize);
}

#[test]
fn a_repair_whose_answer_went_missing_is_followed_by_re_polls() {
    let (mut s, data, poll) = sending(2);
    let t0 = Instant::ZERO + Duration::from_millis(1);
    feed_from(&mut s, t0, addr(0), 0, ack(WINDOW, poll));
    // Rank 1 answered: it lacks packet 0 (a loss, repaired as such).
    feed_from(&mut s, t0, addr(1), 1, lacks_first(poll));
    // Neither the repair's answer nor anything else comes back.
    let sent: Vec<_> = (1..20u64)
        .flat_map(|ms| {
            let now = Instant::ZERO + Duration::from_millis(ms);
            s.handle_timeout(now);
            drain(&mut s, now, &data).into_iter().map(move |p| (ms, p))
        })
        .collect();
    let to_it = (0, POLL_DIRECT, Dest::Unicast(addr(1)));
    // The repair `suppress` after the packet's first send (at 0.1 ms;
    // the 1 ms steps see it at 6), then, the answers quiet for
    // `suppress`, the re-poll, and another a quiet later (the third is
    // due at 21 ms).
    assert_eq!(sent, vec![(6, to_it), (11, to_it), (16, to_it)], "{sent:?}");
    assert_eq!(s.stats().repolls, 2);
    assert_eq!(s.stats().unicast_repairs, 1);
    assert_eq!(s.stats().timeouts, 0);
}

/// At the object's end two members answered the last poll lacking
/// packets, and both repairs were lost: the one holding the base and the
/// one behind the poll further on are re-polled in the same round. Asked
/// only once it held the base, the second waited for the next round, and
/// with the round's re-polls spent, for the RTO.
#[test]
fn members_behind_the_poll_are_re_polled_with_the_base_holder() {
    let (mut s, data) = offering(3, WINDOW as usize);
    let now = Instant::ZERO;
    for rank in 0..3 {
        feed_from(&mut s, now, addr(rank), rank, ok_reply());
    }
    let now = now + Duration::from_micros(100);
    s.handle_timeout(now);
    assert_eq!(drain(&mut s, now, &data).len(), WINDOW as usize);
    let poll = WINDOW - 1;
    let t0 = Instant::ZERO + Duration::from_millis(1);
    feed_from(&mut s, t0, addr(0), 0, ack(WINDOW, poll));
    // Rank 1 lacks packets from 10 on, rank 2 from 20 on (two each).
    for (rank, lacks) in [(1u16, 10u32), (2, 20)] {
        let mut bitmap = [0xFFu8; 8];
        bitmap[0] = 0x7F;
        let nak = Body::Nak(Feedback {
            cumulative: Seq(ISN + lacks),
            echo: Seq(ISN + poll),
            echo_copy: 0,
            aggregate: false,
            bitmap: &bitmap,
        });
        feed_from(&mut s, t0, addr(rank), rank, nak);
    }
    // Both repairs go and are lost; then the round's re-polls, until the
    // RTO (at 26 ms).
    let sent: Vec<_> = (2..26u64)
        .flat_map(|ms| {
            let now = Instant::ZERO + Duration::from_millis(ms);
            s.handle_timeout(now);
            drain(&mut s, now, &data).into_iter().map(move |p| (ms, p))
        })
        .collect();
    let repolls: Vec<_> = (sent.iter())
        .filter(|(_, (_, poll, _))| *poll == POLL_DIRECT)
        .collect();
    let repaired_at = repolls.first().expect("the repairs").0;
    let both = |at: u64| -> Vec<Dest> {
        let mut d: Vec<Dest> = (repolls.iter())
            .filter(|(ms, _)| *ms == at)
            .map(|(_, (_, _, dest))| *dest)
            .collect();
        d.sort_by_key(|d| format!("{d:?}"));
        d.dedup();
        d
    };
    let pair = vec![Dest::Unicast(addr(1)), Dest::Unicast(addr(2))];
    assert_eq!(both(repaired_at), pair, "the repairs: {sent:?}");
    let first_repoll = (repolls.iter())
        .find(|(ms, _)| *ms > repaired_at)
        .map(|(ms, _)| *ms)
        .expect("a re-poll");
    assert_eq!(both(first_repoll), pair, "one round asks both: {sent:?}");
    assert_eq!(s.stats().timeouts, 0);
}

#[test]
fn more_silent_members_than_a_few_wait_for_the_timeout() {
    let n = super::repoll::REPOLL_MAX as u16 + 2;
    let (mut s, data, poll) = sending(n);
    let t0 = Instant::ZERO + Duration::from_millis(1);
    feed_from(&mut s, t0, addr(0), 0, ack(WINDOW, poll));
    // Ranks 1.. are silent: too many lost answers to be chance.
    let sent: Vec<_> = (1..20u64)
        .flat_map(|ms| {
            let now = t0 + Duration::from_millis(ms);
            s.handle_timeout(now);
            drain(&mut s, now, &data)
        })
        .collect();
    assert_eq!(sent, vec![], "nothing before the RTO");
}

/// Every datagram sent now: (kind, destination).
/// What was sent now: (kind, destination). Whatever goes to one member
/// alone says so ([`FLAG_ALONE`]: answer at once), and nothing else does.
fn sent(s: &mut Sender, now: Instant, data: &[u8]) -> Vec<(Kind, Dest)> {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut out = Vec::new();
    while let Some(t) = s.poll_transmit(now, data, &mut buf) {
        let header = Packet::decode(&buf[..t.len]).expect("plain").header;
        let alone = matches!(t.dest, Dest::Unicast(_));
        assert_eq!(
            header.flags == FLAG_ALONE,
            alone,
            "{:?} to {:?}",
            t.kind,
            t.dest
        );
        out.push((t.kind, t.dest));
    }
    out
}

/// Parity sent once a poll's answers have stopped is not an answer: the
/// member still silent is polled again a quiet after the last answer,
/// beside the parity, not a quiet after it. (Counted as activity, a block's
/// parity probe, due at the same time, held such re-polls back by a whole
/// quiet: 2,000 receivers × 8 MiB, 1 % data and feedback loss, six seeds:
/// median 567.9 → 575.1 Mbit/s.)
#[test]
fn parity_does_not_hold_back_the_re_poll_of_a_silent_member() {
    // Blocks of 4 data packets, no proactive parity: only on demand.
    let (mut s, data, poll) = sending_with(3, "4:0");
    // Rank 1 lacks packet 0: block 0's parity goes at once and, with no
    // answer, again `SUPPRESS` later as a probe that polls.
    let t0 = Instant::ZERO + Duration::from_millis(1);
    feed_from(&mut s, t0, addr(1), 1, lacks_first(poll));
    // Rank 0 answers last, before the probe; rank 2's answer is lost.
    let last = t0 + Duration::from_millis(2);
    // What goes, 100 µs at a time, for three quiets.
    let step = Duration::from_micros(100);
    let out: Vec<_> = (0..=150u32)
        .flat_map(|n| {
            let now = t0 + step * n;
            if now == last {
                feed_from(&mut s, now, addr(0), 0, ack(WINDOW, poll));
            }
            s.handle_timeout(now);
            sent(&mut s, now, &data)
                .into_iter()
                .map(move |(kind, dest)| (now, kind, dest))
        })
        .collect();
    let parity: Vec<_> = (out.iter())
        .filter(|(_, kind, _)| *kind == Kind::Parity)
        .map(|&(at, _, _)| at)
        .collect();
    assert_eq!(parity[..2], [t0, t0 + SUPPRESS], "{out:?}");
    let repolled_at = out
        .iter()
        .find(|(_, kind, dest)| *kind == Kind::Data && *dest == Dest::Unicast(addr(2)))
        .map(|&(at, _, _)| at)
        .expect("the silent member polled again");
    assert_eq!(
        repolled_at,
        last + SUPPRESS,
        "a quiet after the last answer, not after the probe: {out:?}"
    );
    assert_eq!(s.stats().timeouts, 0);
}

/// A sender of an object of `packets` packets whose `receivers` members
/// joined at time zero; its first `Offer` has gone.
fn offering(receivers: u16, packets: usize) -> (Sender, Vec<u8>) {
    offering_with(receivers, packets, "off")
}

/// [`offering`], with `--fec` set to `fec`.
fn offering_with(receivers: u16, packets: usize, fec: &str) -> (Sender, Vec<u8>) {
    let (mut s, data, now) = announced_with(receivers, packets, fec);
    for rank in 0..receivers {
        let join = Join {
            receiver_id: u64::from(rank) + 1,
            name: "r",
        };
        feed_from(&mut s, now, addr(rank), RANK_UNASSIGNED, Body::Join(join));
    }
    let out = sent(&mut s, now, &data);
    assert!(out.contains(&(Kind::Offer, Dest::Group)), "{out:?}");
    (s, data)
}

fn ok_reply() -> Body<'static> {
    Body::OfferReply(OfferReply {
        status: Status::Ok,
        text: "",
    })
}

#[test]
fn a_member_silent_after_the_offer_is_offered_again_alone_once_the_answers_stop() {
    let (mut s, data) = offering(3, 10);
    let t0 = Instant::ZERO + Duration::from_millis(1);
    feed_from(&mut s, t0, addr(0), 0, ok_reply());
    feed_from(&mut s, t0, addr(1), 1, ok_reply());
    // Quiet for twice as long as the answers took, at least `suppress`.
    let due = t0 + SUPPRESS.max(Duration::from_millis(2));
    let early = t0 + (SUPPRESS - Duration::from_micros(1));
    s.handle_timeout(early);
    assert_eq!(sent(&mut s, early, &data), vec![]);
    s.handle_timeout(due);
    assert_eq!(
        sent(&mut s, due, &data),
        vec![(Kind::Offer, Dest::Unicast(addr(2)))]
    );
    assert_eq!(s.stats().repolls, 1);
    // Its answer starts the data.
    feed_from(&mut s, due, addr(2), 2, ok_reply());
    let out = sent(&mut s, due, &data);
    assert_eq!(out.len(), 10, "{out:?}");
    assert!(out.iter().all(|&(kind, _)| kind == Kind::Data));
}

#[test]
fn a_member_silent_after_the_close_is_sent_it_again_alone() {
    let (mut s, data) = offering(3, 10);
    let mut now = Instant::ZERO + Duration::from_millis(1);
    for rank in 0..3 {
        feed_from(&mut s, now, addr(rank), rank, ok_reply());
    }
    assert_eq!(sent(&mut s, now, &data).len(), 10, "the object");
    now = now + Duration::from_millis(1);
    for rank in 0..3 {
        feed_from(&mut s, now, addr(rank), rank, ack(10, 9));
    }
    let out = sent(&mut s, now, &data);
    assert_eq!(out, vec![(Kind::Close, Dest::Group)]);
    let close_at = now;
    now = now + Duration::from_millis(1);
    for rank in 0..2 {
        let complete = Body::Complete(Complete {
            status: Status::Ok,
            hash: [1; 32],
            text: "",
        });
        feed_from(&mut s, now, addr(rank), rank, complete);
    }
    let quiet = SUPPRESS.max(now.saturating_since(close_at) * 2);
    s.handle_timeout(now + quiet);
    assert_eq!(
        sent(&mut s, now + quiet, &data),
        vec![(Kind::Close, Dest::Unicast(addr(2)))]
    );
}

/// Offer answers that come in slots over longer than the RTO, one of
/// them lost: the multicast repeat (which every member answers) waits
/// while they come, the silent member is asked again alone once they
/// stop, and again a quiet later while it stays silent (three times in
/// all: an answer to a question asked again can be lost too), and the
/// repeat then waits for its answer too.
#[test]
fn answers_slower_than_the_rto_hold_its_repeat_and_the_silent_are_asked_alone_first() {
    let n = 20u16;
    let (mut s, data) = offering(n, 10);
    let silent = 7u16;
    // Rank k answers at 1 ms + 1.5 ms·k: the last at 29.5 ms, the RTO's
    // repeat due at 20 ms.
    let answer_at = |rank: u16| Duration::from_micros(1000 + 1500 * u64::from(rank));
    let mut out = Vec::new();
    for step in 1..=260u64 {
        let (before, now) = (
            Duration::from_micros(500 * (step - 1)),
            Duration::from_micros(500 * step),
        );
        for rank in (0..n).filter(|&r| r != silent) {
            let at = answer_at(rank);
            if at > before && at <= now {
                let at = Instant::ZERO + at;
                feed_from(&mut s, at, addr(rank), rank, ok_reply());
            }
        }
        let now = Instant::ZERO + now;
        s.handle_timeout(now);
        out.extend(sent(&mut s, now, &data).into_iter().map(|p| (step, p)));
    }
    // Quiet 5 ms after the last answer (29.5 ms): asked alone at 34.5 ms
    // (step 69), and again a quiet later at 39.5 and 44.5 ms; the repeat
    // waits twice the answers' 29.5 ms after the last, plus the quiet:
    // 108.5 ms (step 217).
    assert_eq!(
        out,
        vec![
            (69, (Kind::Offer, Dest::Unicast(addr(silent)))),
            (79, (Kind::Offer, Dest::Unicast(addr(silent)))),
            (89, (Kind::Offer, Dest::Unicast(addr(silent)))),
            (217, (Kind::Offer, Dest::Group)),
        ],
        "{out:?}"
    );
    assert_eq!(s.stats().repolls, 3);
}

/// Two of three receivers joined at 1 ms and the third's `Join` was lost:
/// the next `Hello` goes once the joins have been quiet for as long as a
/// receiver waits before it takes a `Hello` as the sign to join again
/// (5 ms, plus a millisecond), not on the backoff (10, then 30 ms).
#[test]
fn a_lost_join_gets_a_hello_once_the_joins_are_quiet() {
    let (mut s, data, start) = announced(3, 10);
    assert_eq!(s.poll_timeout(), Some(start + Duration::from_millis(10)));
    let joined = start + Duration::from_millis(1);
    for rank in 0..2u16 {
        let join = Join {
            receiver_id: u64::from(rank) + 1,
            name: "r",
        };
        feed_from(
            &mut s,
            joined,
            addr(rank),
            RANK_UNASSIGNED,
            Body::Join(join),
        );
    }
    let welcomed = sent(&mut s, joined, &data);
    assert_eq!(welcomed.len(), 2, "{welcomed:?}");
    let again = joined + Duration::from_millis(6);
    assert_eq!(s.poll_timeout(), Some(again));
    s.handle_timeout(again);
    let out = sent(&mut s, again, &data);
    assert_eq!(out, vec![(Kind::Hello, Dest::Group)], "{out:?}");
    // No join since: the backoff's next (20 ms after this one).
    assert_eq!(s.poll_timeout(), Some(again + Duration::from_millis(20)));
}

/// The same in a group of 10,000, whose joins are spread over 20 ms
/// (2 µs a receiver): the `Hello` for lost joins goes 5 ms (and a
/// millisecond) after the spread, not after the spread twice over as
/// when the unicast `Welcome`s' backlog made receivers wait out the spread
/// too (46 ms). The `Welcomes` list goes first, within 1 ms.
#[test]
fn a_large_group_s_lost_joins_get_a_hello_5_ms_after_the_spread() {
    let (mut s, data, start) = announced(10_000, 10);
    let joined = start + Duration::from_millis(1);
    let join = Join {
        receiver_id: 1,
        name: "r",
    };
    feed_from(&mut s, joined, addr(0), RANK_UNASSIGNED, Body::Join(join));
    let listed = joined + Duration::from_millis(1);
    assert_eq!(s.poll_timeout(), Some(listed), "the Welcomes list");
    s.handle_timeout(listed);
    let out = sent(&mut s, listed, &data);
    assert_eq!(out, vec![(Kind::Welcomes, Dest::Group)], "{out:?}");
    let again = start + Duration::from_millis(20 + 5 + 1);
    assert_eq!(s.poll_timeout(), Some(again));
    s.handle_timeout(again);
    let out = sent(&mut s, again, &data);
    assert_eq!(out, vec![(Kind::Hello, Dest::Group)], "{out:?}");
}

/// A sender of an object of `packets` packets waiting for `receivers`
/// that has sent its first `Hello` (at time zero), and the object.
fn announced(receivers: u16, packets: usize) -> (Sender, Vec<u8>, Instant) {
    announced_with(receivers, packets, "off")
}

/// [`announced`], with `--fec` set to `fec`.
fn announced_with(receivers: u16, packets: usize, fec: &str) -> (Sender, Vec<u8>, Instant) {
    let data = vec![7u8; 1448 * packets];
    let config = SenderConfig {
        receivers,
        window: WINDOW,
        suppress: SUPPRESS,
        rto: RTO,
        fec: FecShape::from_setting(fec).expect("a valid --fec"),
        ..SenderConfig::default()
    };
    let mut s = sender_of(config, &data, ISN);
    let start = Instant::ZERO;
    assert_eq!(sent(&mut s, start, &data), vec![(Kind::Hello, Dest::Group)]);
    (s, data, start)
}

/// In a group over `SPREAD_FROM` the answers come in known slots, back
/// to back, from hosts that each answer one poll: a member silent once
/// they stop is polled again alone a quarter of `suppress` after the last
/// answer (or twice the first answer's time), not after `suppress` and a
/// quarter of the RTO, which a slow reader of a small group needs. At
/// 2,000 × 8 MiB and 1 % feedback loss the end's re-poll came 12.5 ms
/// after the last answer (RTO 50 ms), then 5 ms, now 1.25 ms.
#[test]
fn a_large_group_polls_its_silent_member_again_soon_after_the_slots() {
    use super::close_with_data_tests::{complete, group_with, last_ack};
    use crate::transfer::receiver::SPREAD_FROM;
    let rto = Duration::from_millis(80);
    for (receivers, quiet) in [(SPREAD_FROM + 1, SUPPRESS / 4), (SPREAD_FROM, rto / 4)] {
        let g = group_with(receivers, rto);
        let (mut s, data, addrs) = (g.s, g.data, g.addrs);
        let silent = 300usize;
        let mut last = g.now;
        for (rank, &a) in addrs.iter().enumerate().filter(|&(r, _)| r != silent) {
            last = g.now + Duration::from_micros(2 * rank as u64);
            // A large group answers the last poll with its Complete
            // (the Close came with the data), a small one with an ack.
            let body = if receivers > SPREAD_FROM {
                complete()
            } else {
                last_ack()
            };
            feed_from(&mut s, last, a, rank as u16, body);
        }
        assert_eq!(
            s.poll_timeout(),
            Some(last + quiet),
            "{receivers} receivers"
        );
        s.handle_timeout(last + quiet);
        let out = sent(&mut s, last + quiet, &data);
        assert_eq!(out, vec![(Kind::Data, Dest::Unicast(addrs[silent]))]);
    }
}
