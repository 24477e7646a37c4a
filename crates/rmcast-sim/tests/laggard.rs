//! `Laggard::Eject` and `Laggard::Tcp` (issue 18's slow receivers): one
//! receiver that can take a fifth of the link rate, among 7 that take all
//! of it. Waiting for it, the group goes at its pace; ejecting it, the
//! others finish near the link's time and the slow one is named; moving it
//! to a TCP catch-up, the others finish as fast and the slow one still
//! verifies. And a healthy group under loss ejects or moves nobody.

use rmcast_proto::{Laggard, SenderConfig};
use rmcast_sim::{HostCost, LossModel, RunReport, Scenario};
use std::time::Duration;

const SLOW: u16 = 3;

fn scenario(laggard: Laggard, slow: bool, loss: f64, seed: u64) -> Scenario {
    let mut s = Scenario {
        receivers: 8,
        object_size: 8 << 20,
        link_rate_bits_per_s: 100_000_000,
        config: SenderConfig {
            rate_bits_per_s: Some(95_000_000),
            laggard,
            ..SenderConfig::default()
        },
        loss: if loss > 0.0 {
            LossModel::Bernoulli(loss)
        } else {
            LossModel::None
        },
        seed,
        time_limit: Duration::from_secs(60),
        ..Scenario::default()
    };
    if slow {
        // About 1 / 600 µs = 1,700 packets/s: a fifth of 95 Mbit/s.
        let cost = HostCost {
            recv_per_packet: Duration::from_micros(600),
            ..HostCost::modern()
        };
        s.receiver_costs = vec![(SLOW, cost)];
    }
    s
}

fn run(s: &Scenario) -> RunReport {
    rmcast_sim::run_or_panic(s)
}

fn eject() -> Laggard {
    Laggard::Eject {
        after: Duration::from_secs(1),
    }
}

#[test]
fn an_ejected_laggard_is_named_and_the_others_finish_near_the_link_time() {
    let wait = run(&scenario(Laggard::Wait, true, 0.0, 1));
    assert!(
        wait.outcome.ok,
        "waiting, everyone verifies: {:#?}",
        wait.outcome
    );
    let ejected = run(&scenario(eject(), true, 0.0, 1));
    let slow = (ejected.outcome.members.iter())
        .find(|m| m.name == format!("r{SLOW}"))
        .expect("the slow receiver joined");
    assert!(!slow.verified);
    let reason = slow.reason.as_deref().unwrap_or_default();
    assert!(reason.contains("laggard"), "{reason}");
    assert_eq!(ejected.outcome.verified(), 7, "{:#?}", ejected.outcome);
    // The link's time for 8 MiB at 95 Mbit/s is 0.71 s; the slow one sets
    // the pace until it is ejected (1 s after it fell half a window
    // behind), the rest goes at the link's.
    let link = (8u64 << 23) as f64 / 95e6;
    eprintln!(
        "waiting: {:.2} s; ejecting: {:.2} s (the link's time {link:.2} s); {reason}",
        wait.seconds, ejected.seconds
    );
    assert!(
        wait.seconds > 3.0 * link,
        "the slow receiver sets the pace when waited for: {:.2} s",
        wait.seconds
    );
    assert!(
        ejected.seconds < 0.5 * wait.seconds && ejected.seconds < link + 2.0,
        "ejecting took {:.2} s, waiting {:.2} s",
        ejected.seconds,
        wait.seconds
    );
}

fn tcp() -> Laggard {
    Laggard::Tcp {
        after: Duration::from_secs(1),
        port: 7702,
    }
}

#[test]
fn a_laggard_moved_to_tcp_still_verifies_while_the_others_finish_near_the_link_time() {
    let wait = run(&scenario(Laggard::Wait, true, 0.0, 1));
    let moved = run(&scenario(tcp(), true, 0.0, 1));
    assert!(moved.outcome.ok, "{:#?}", moved.outcome);
    assert_eq!(moved.outcome.verified(), 8);
    let slow_name = format!("r{SLOW}");
    let slow = (moved.outcome.members.iter())
        .find(|m| m.name == slow_name)
        .expect("the slow receiver joined");
    let from = slow.caught_up_from.expect("the slow receiver was moved");
    assert!(from < 8 << 20, "it held {from} bytes when moved");
    assert!(
        (moved.outcome.members.iter())
            .filter(|m| m.name != slow_name)
            .all(|m| m.caught_up_from.is_none()),
        "only the slow one moved: {:#?}",
        moved.outcome
    );
    let fast_done = (moved.receivers.iter())
        .filter(|r| r.name != slow_name)
        .map(|r| r.all_data_seconds.expect("a fast receiver got every byte"))
        .fold(0.0, f64::max);
    let link = (8u64 << 23) as f64 / 95e6;
    eprintln!(
        "waiting: {:.2} s; moved to TCP: the 7 had every byte at {fast_done:.2} s, the \
         session ended at {:.2} s (the link's time {link:.2} s); moved holding {from} bytes",
        wait.seconds, moved.seconds
    );
    assert!(
        fast_done < link + 2.0 && fast_done < 0.5 * wait.seconds,
        "the group went at the slow one's pace: {fast_done:.2} s"
    );
    // The slow one's copy: what it held over multicast, the rest over TCP
    // at its own pace; no slower than waiting for it.
    assert!(
        moved.seconds <= wait.seconds * 1.1,
        "moved: {:.2} s, waiting: {:.2} s",
        moved.seconds,
        wait.seconds
    );
}

#[test]
fn a_healthy_group_under_loss_ejects_nobody() {
    for seed in 1..=4 {
        let r = run(&scenario(eject(), false, 0.02, seed));
        assert!(
            r.outcome.ok && r.outcome.verified() == 8,
            "seed {seed}: {:#?}",
            r.outcome
        );
        let r = run(&scenario(tcp(), false, 0.02, seed));
        assert!(
            r.outcome.ok && r.outcome.members.iter().all(|m| m.caught_up_from.is_none()),
            "seed {seed}: {:#?}",
            r.outcome
        );
    }
}

#[test]
fn a_laggard_ejected_after_under_100_ms_is_refused() {
    let config = SenderConfig {
        laggard: Laggard::Eject {
            after: Duration::from_millis(50),
        },
        ..SenderConfig::default()
    };
    let e = config.validate().unwrap_err().to_string();
    assert!(e.contains("--laggard-after"), "{e}");
}
