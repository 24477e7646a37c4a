//! PRMP scenarios on the simulator's seeded stream network
//! (`rmcast_sim::stream`); every run is also checked against the stream's
//! invariants (`rmcast_sim::stream::check`). The sender's own unit tests
//! (handshakes, late requests, repairs, timers) are beside its code in
//! `rmcast-proto/src/stream/sender/`.

mod stream_cases;

use rmcast_proto::Instant;
use rmcast_proto::stream::{MemberId, RemoveReason, StreamEvent, StreamReceiverEvent};
use rmcast_sim::stream::{StreamReport, StreamScenario, run_or_panic, secs};
use std::time::Duration;

fn run(sc: StreamScenario) -> StreamReport {
    run_or_panic(&sc)
}

/// Every live receiver got exactly the messages sent, in order.
fn assert_delivered_all(out: &StreamReport, sent: &[Vec<u8>], who: impl Iterator<Item = usize>) {
    for i in who {
        assert_eq!(
            out.delivered[i].len(),
            sent.len(),
            "seed {}: receiver {i} got {} of {} messages",
            out.seed,
            out.delivered[i].len(),
            sent.len()
        );
        for (k, (got, want)) in out.delivered[i].iter().zip(sent).enumerate() {
            assert_eq!(
                got, want,
                "seed {}: receiver {i} message {k} differs",
                out.seed
            );
        }
    }
}

#[test]
fn invitation_handshake_admits_everyone_and_delivers_a_small_stream() {
    let sc = stream_cases::handshake();
    let msgs = sc.messages.clone();
    let out = run(sc);
    let joined = out
        .sender_events
        .iter()
        .filter(|(_, e)| matches!(e, StreamEvent::Joined(_)))
        .count();
    assert_eq!(joined, 4, "seed {}: {:?}", out.seed, out.sender_events);
    assert!(
        out.closed,
        "seed {}: not closed: {:?}",
        out.seed, out.sender_events
    );
    assert_delivered_all(&out, &msgs, 0..4);
    for i in 0..4 {
        assert!(
            out.receiver_events[i]
                .iter()
                .any(|(_, e)| *e == StreamReceiverEvent::Closed),
            "seed {}: receiver {i}: {:?}",
            out.seed,
            out.receiver_events[i]
        );
    }
}

fn removed(out: &StreamReport) -> Vec<(std::time::Duration, u16)> {
    out.sender_events
        .iter()
        .filter_map(|(t, e)| match e {
            StreamEvent::Removed { id, .. } => Some((t.saturating_since(Instant::ZERO), id.0)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_reader_that_stops_for_ten_seconds_loses_nothing_and_is_never_overrun() {
    let sc = stream_cases::paused_reader();
    let msgs = sc.messages.clone();
    let out = run(sc);
    assert!(out.closed, "seed {}: {:?}", out.seed, out.sender_events);
    assert!(
        removed(&out).is_empty(),
        "seed {}: {:?}",
        out.seed,
        out.sender_events
    );
    assert_delivered_all(&out, &msgs, 0..3);
    assert_eq!(
        out.beyond_edge, 0,
        "seed {}: sent beyond an advertised window",
        out.seed
    );
    for (i, s) in out.receiver_stats.iter().enumerate() {
        assert_eq!(
            s.beyond_window, 0,
            "seed {}: receiver {i} dropped for lack of buffer",
            out.seed
        );
    }
    // The paused reader really filled its buffer (the window closed) and
    // the stream still ended after the pause.
    assert_eq!(out.max_buffered[1], 48, "seed {}", out.seed);
    assert!(
        out.end > secs(10.2),
        "seed {}: ended at {:?}",
        out.seed,
        out.end
    );
    eprintln!(
        "slow reader: seed {} end {:?}, polls {} ({} standalone), responses {}, max buffered {:?}",
        out.seed,
        out.end,
        out.sender_stats.polls,
        out.sender_stats.standalone_polls,
        out.sender_stats.responses,
        out.max_buffered
    );
}

#[test]
fn a_crashed_receiver_is_removed_within_the_bound_and_the_rest_finish() {
    let sc = stream_cases::crash();
    let msgs = sc.messages.clone();
    let crash = sc.crashes[0].1;
    let bound = sc.sender.removal_bound(5);
    let out = run(sc);
    let gone = removed(&out);
    assert_eq!(gone.len(), 1, "seed {}: {:?}", out.seed, out.sender_events);
    assert_eq!(gone[0].1, 2);
    let took = gone[0].0 - crash.saturating_since(Instant::ZERO);
    assert!(
        took <= bound,
        "seed {}: removal took {took:?} > bound {bound:?}",
        out.seed
    );
    assert!(
        out.first(|e| *e == StreamEvent::Suspected(MemberId(2)))
            .is_some(),
        "seed {}: removal without suspicion first",
        out.seed
    );
    assert!(out.closed, "seed {}: {:?}", out.seed, out.sender_events);
    assert_delivered_all(&out, &msgs, [0, 1, 3, 4].into_iter());
    eprintln!(
        "crash: removed {took:?} after the crash (bound {bound:?}), seed {}",
        out.seed
    );
}

#[test]
fn responses_at_the_sender_never_exceed_the_response_rate_with_100_receivers() {
    let sc = stream_cases::response_rate_100();
    let msgs = sc.messages.clone();
    let cap = sc.sender.responses_per_epoch();
    let epoch_ns = sc.sender.epoch.as_nanos() as u64;
    let out = run(sc);
    assert!(
        out.closed,
        "seed {}: {:?}",
        out.seed,
        &out.sender_events[..5.min(out.sender_events.len())]
    );
    assert_delivered_all(&out, &msgs, 0..100);
    let mut per_epoch = std::collections::BTreeMap::<u64, u64>::new();
    for t in &out.response_arrivals {
        *per_epoch.entry(t.as_nanos() / epoch_ns).or_default() += 1;
    }
    let max = per_epoch.values().copied().max().unwrap_or(0);
    let busy = per_epoch.len() as f64;
    let mean = out.response_arrivals.len() as f64 / busy;
    let over = per_epoch.values().filter(|&&c| c > cap).count();
    // Tolerance: RTT estimates and jitter move a response across an epoch
    // boundary now and then; never more than 20 % over, and rarely at all.
    assert!(
        max as f64 <= cap as f64 * 1.2,
        "seed {}: {max} responses in one epoch, cap {cap}",
        out.seed
    );
    assert!(
        over as f64 <= busy * 0.05,
        "seed {}: {over} of {busy} epochs over the cap",
        out.seed
    );
    eprintln!(
        "N=100: cap {cap}/epoch; max {max}, mean {mean:.2} over {busy} busy epochs, {over} epochs over the cap; {} responses, end {:?}",
        out.response_arrivals.len(),
        out.end
    );
}

#[test]
fn announcement_model_admits_those_who_ask_within_the_period() {
    let sc = stream_cases::announce();
    let msgs = sc.messages.clone();
    let out = run(sc);
    let joined: Vec<_> = out
        .sender_events
        .iter()
        .filter_map(|(t, e)| match e {
            StreamEvent::Joined(id) => Some((*t, id.0)),
            _ => None,
        })
        .collect();
    // Six ask, five fit: the sixth is refused (session full) and fails.
    assert_eq!(
        joined.len(),
        5,
        "seed {}: {:?}",
        out.seed,
        out.sender_events
    );
    let established = out
        .first(|e| matches!(e, StreamEvent::Established { members: 5 }))
        .expect("established");
    assert!(
        established >= secs(0.3),
        "admission closed early: {established:?}"
    );
    let refused: Vec<usize> = (0..6)
        .filter(|&i| {
            out.receiver_events[i]
                .iter()
                .any(|(_, e)| matches!(e, StreamReceiverEvent::Failed(_)))
        })
        .collect();
    assert_eq!(
        refused.len(),
        1,
        "seed {}: {:?}",
        out.seed,
        out.receiver_events
    );
    assert!(out.closed);
    assert_delivered_all(&out, &msgs, (0..6).filter(|i| !refused.contains(i)));
}

#[test]
fn a_receiver_that_leaves_is_reported_and_the_session_goes_on() {
    let sc = stream_cases::leave();
    let msgs = sc.messages.clone();
    let out = run(sc);
    assert!(
        out.first(|e| *e == StreamEvent::Left(MemberId(3)))
            .is_some(),
        "seed {}: {:?}",
        out.seed,
        out.sender_events
    );
    assert!(removed(&out).is_empty());
    assert!(
        out.receiver_events[3]
            .iter()
            .any(|(_, e)| *e == StreamReceiverEvent::Left)
    );
    assert!(out.closed);
    assert_delivered_all(&out, &msgs, 0..3);
    // What the leaver read is a prefix of the stream.
    assert!(out.delivered[3].len() < msgs.len());
    assert_eq!(out.delivered[3][..], msgs[..out.delivered[3].len()]);
}

#[test]
fn an_invitee_that_never_answers_is_given_up_and_the_others_proceed() {
    let sc = stream_cases::absent_invitee();
    let msgs = sc.messages.clone();
    let out = run(sc);
    assert_eq!(
        out.sender_events
            .iter()
            .filter(|(_, e)| matches!(
                e,
                StreamEvent::Removed {
                    id: MemberId(4),
                    reason: RemoveReason::NoAnswer
                }
            ))
            .count(),
        1,
        "seed {}: {:?}",
        out.seed,
        out.sender_events
    );
    assert!(
        out.first(|e| matches!(e, StreamEvent::Established { members: 5 }))
            .is_some()
    );
    assert!(out.closed);
    assert_delivered_all(&out, &msgs, [0, 1, 2, 3, 5].into_iter());
}

#[test]
fn keepalive_polls_hold_an_idle_session_and_find_a_crash() {
    let sc = stream_cases::keepalive_idle_crash();
    let bound = sc.sender.removal_bound(3);
    let out = run(sc);
    let gone = removed(&out);
    assert_eq!(
        gone.iter().map(|g| g.1).collect::<Vec<_>>(),
        [0],
        "seed {}: {:?}",
        out.seed,
        out.sender_events
    );
    assert!(gone[0].0 <= Duration::from_secs(2) + bound);
    // The idle receivers neither failed (sender silent) nor were removed.
    for i in 1..3 {
        assert!(
            !out.receiver_events[i]
                .iter()
                .any(|(_, e)| matches!(e, StreamReceiverEvent::Failed(_))),
            "seed {}: {:?}",
            out.seed,
            out.receiver_events[i]
        );
        assert_eq!(out.delivered[i], [b"late".to_vec()]);
    }
    // Idle for 8 s with a 0.5 s keepalive: about 16 polls each.
    assert!(
        out.sender_stats.responses >= 2 * 12,
        "{:?}",
        out.sender_stats
    );
}

#[test]
fn congestion_window_grows_then_collapses_to_one_on_a_nack() {
    let sc = stream_cases::cwnd_collapse();
    let msgs = sc.messages.clone();
    let out = run(sc);
    assert!(out.closed);
    assert_delivered_all(&out, &msgs, 0..4);
    let trace = &out.cwnd_trace;
    let max = trace.iter().map(|x| x.1).max().unwrap();
    assert!(max >= 16, "seed {}: cwnd never grew past {max}", out.seed);
    // Somewhere the window was large and the next value is 1: a collapse.
    let collapses = trace
        .windows(2)
        .filter(|w| w[0].1 > 1 && w[1].1 == 1)
        .count();
    assert!(
        collapses >= 1,
        "seed {}: no collapse in {} samples",
        out.seed,
        trace.len()
    );
    assert!(out.sender_stats.multicast_repairs + out.sender_stats.unicast_repairs > 0);
    eprintln!(
        "cwnd: max {max}, {collapses} collapses to 1, seed {}",
        out.seed
    );
}

#[test]
fn without_loss_the_congestion_window_only_grows() {
    let sc = stream_cases::cwnd_grows();
    let out = run(sc);
    assert!(out.closed);
    let trace = &out.cwnd_trace;
    assert!(
        trace.windows(2).all(|w| w[1].1 >= w[0].1),
        "seed {}",
        out.seed
    );
    assert!(trace.last().unwrap().1 > 32);
}

#[test]
fn repairs_go_unicast_to_a_lone_loser_and_multicast_to_many() {
    // Loss only on the way to receiver 0's... every link loses a little:
    // most losses are single (unicast), none of it breaks delivery.
    let sc = stream_cases::repairs();
    let msgs = sc.messages.clone();
    let out = run(sc);
    assert!(out.closed);
    assert_delivered_all(&out, &msgs, 0..8);
    let s = &out.sender_stats;
    assert!(s.unicast_repairs > 0 && s.multicast_repairs > 0, "{s:?}");
    // With 1 % independent loss, two of eight rarely lose the same packet.
    assert!(s.unicast_repairs > s.multicast_repairs, "{s:?}");
}
