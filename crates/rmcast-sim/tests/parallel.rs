//! The simulator reads a large fan-out's datagrams on several threads
//! (`src/sim/batch.rs`); the run must be the one a single thread gives,
//! bit for bit: the same report, whatever the protocol, loss, faults or
//! number of threads. Groups of 300, above the 256 readers from which the
//! threads start.

mod common;

use common::{PAYLOAD, scenario};
use rmcast_proto::{FecShape, ProtocolId};
use rmcast_sim::{Crash, LossModel, Pause, RunReport, Scenario};
use std::time::Duration;

const N: u16 = 300;

fn same_with_threads(s: &Scenario, what: &str) -> RunReport {
    let one = rmcast_sim::run_with_threads(s, 1).unwrap_or_else(|e| panic!("{what}: {e}"));
    for threads in [2, 3] {
        let many = rmcast_sim::run_with_threads(s, threads)
            .unwrap_or_else(|e| panic!("{what}, {threads} threads: {e}"));
        if one != many {
            // The first receiver that differs, else the whole report.
            let host = one
                .receivers
                .iter()
                .zip(&many.receivers)
                .find(|(a, b)| a != b);
            match host {
                Some((a, b)) => panic!("{what}: {threads} threads gave another run\n{a:?}\n{b:?}"),
                None => panic!("{what}: {threads} threads gave another run\n{one:?}\n{many:?}"),
            }
        }
    }
    one
}

#[test]
fn nak_poll_with_fec_under_loss_is_the_same_run_on_any_number_of_threads() {
    let mut s = scenario(
        ProtocolId::NakPoll,
        N,
        200 * PAYLOAD + 7,
        LossModel::Bernoulli(0.02),
        11,
    );
    s.config.fec = Some(FecShape::new(16, 1).with_depth(2));
    s.config.window = 128;
    s.link_rate_bits_per_s = 1_000_000_000;
    s.control_loss = 0.01;
    let r = same_with_threads(&s, "nak-poll 16:1:2, 2 % loss, 1 % feedback loss");
    assert!(r.outcome.ok, "{:?}", r.outcome);
}

#[test]
fn acks_with_a_crash_a_pause_and_jitter_are_the_same_run_on_any_number_of_threads() {
    let mut s = scenario(
        ProtocolId::Ack,
        N,
        60 * PAYLOAD,
        LossModel::bursty(0.02, 4.0),
        12,
    );
    s.cost.jitter = Duration::from_micros(3);
    s.crashes.push(Crash {
        receiver: 17,
        at: Duration::from_millis(2),
    });
    s.pauses.push(Pause {
        receiver: 250,
        at: Duration::from_millis(1),
        duration: Duration::from_millis(30),
    });
    let r = same_with_threads(&s, "ack, bursts, a crash, a pause, jitter");
    // The crashed receiver fails; everyone else verifies.
    assert_eq!(r.outcome.verified(), usize::from(N) - 1, "{:?}", r.outcome);
}

#[test]
fn sealed_fragmented_datagrams_are_the_same_run_on_any_number_of_threads() {
    let mut s = scenario(
        ProtocolId::NakPoll,
        N,
        40 * PAYLOAD,
        LossModel::Bernoulli(0.01),
        13,
    )
    .sealed();
    s.mtu = 600;
    let r = same_with_threads(&s, "sealed nak-poll over a 600-byte MTU");
    assert!(r.outcome.ok, "{:?}", r.outcome);
}
