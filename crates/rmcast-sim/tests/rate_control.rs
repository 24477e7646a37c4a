//! Hunt's send-rate flow control in the simulator (issue 9): receivers that
//! take a fixed number of packets per second through a small socket buffer,
//! behind a link much faster than the slowest of them.
//!
//! With `hunt` the sender must settle within 10 % of the slowest receiver's
//! capacity with overrun losses (socket-buffer drops over data frames)
//! under 0.1 %; unpaced, the same group overruns heavily. Every run prints
//! its seed, its numbers and the spacing over time (set
//! `RMCAST_RATE_CSV=path` to write the whole trace as CSV).

mod common;

use common::PACKET;
use common::rate::{COMPARISON_PACKETS, HUNT_PACKETS, SLOW, rate_group as group};
use rmcast_proto::{HuntParams, ProtocolId, RateControl, SenderConfig};
use rmcast_sim::{LossModel, RunReport, Scenario};
use std::fmt::Write as _;
use std::time::Duration;

/// Packets per second the slow receiver can take: one CPU, one datagram at
/// a time, mean jitter included.
fn capacity_pps(sc: &Scenario) -> f64 {
    let cost = sc.cost_of(usize::from(SLOW));
    let ns = cost.recv_ns(PACKET) as f64 + sc.cost.jitter.as_nanos() as f64 / 2.0;
    1e9 / ns
}

struct Measured {
    /// First transmissions per second over the second half of the data phase.
    steady_pps: f64,
    /// Socket-buffer drops over data frames, all receivers.
    overrun: f64,
    /// The same at the slow receiver alone.
    overrun_slow: f64,
}

fn measure(r: &RunReport) -> Measured {
    let trace = &r.outstanding_trace;
    let last = trace.last().expect("trace recorded");
    let half = trace
        .iter()
        .find(|s| u64::from(s.sent) * 2 >= u64::from(last.sent))
        .expect("a half-way sample");
    let secs = (last.at_ns - half.at_ns) as f64 / 1e9;
    let steady_pps = f64::from(last.sent - half.sent) / secs;
    let overflow: u64 = r.receivers.iter().map(|x| x.socket_overflow).sum();
    let frames: u64 = r.receivers.iter().map(|x| x.data_frames).sum();
    let slow = &r.receivers[usize::from(SLOW) - 1];
    Measured {
        steady_pps,
        overrun: overflow as f64 / frames.max(1) as f64,
        overrun_slow: slow.socket_overflow as f64 / slow.data_frames.max(1) as f64,
    }
}

/// The spacing trace as CSV (time s, spacing µs, rate packets/s, state,
/// packets sent), one row per change.
fn spacing_csv(r: &RunReport) -> String {
    let mut out = String::from("t_s,spacing_us,rate_pps,state,sent,rtt_us\n");
    for s in &r.rate_trace {
        let _ = writeln!(
            out,
            "{:.6},{:.3},{:.0},{},{},{:.1}",
            s.at_ns as f64 / 1e9,
            s.spacing_ns as f64 / 1e3,
            1e9 / s.spacing_ns as f64,
            if s.decrease { "decrease" } else { "increase" },
            s.sent,
            s.rtt_ns as f64 / 1e3
        );
    }
    out
}

/// Prints the run's numbers and a coarse view of the spacing over time.
fn show(name: &str, sc: &Scenario, r: &RunReport, m: &Measured) {
    let cap = capacity_pps(sc);
    println!(
        "{name}: seed {} | capacity {cap:.0} pkt/s | steady {:.0} pkt/s ({:+.1} %) | \
         overrun {:.4} % (slow receiver {:.3} %) | goodput {:.1} Mbit/s in {:.2} s | retransmitted {} | timeouts {}",
        r.seed,
        m.steady_pps,
        (m.steady_pps / cap - 1.0) * 100.0,
        m.overrun * 100.0,
        m.overrun_slow * 100.0,
        r.goodput_mbit_s,
        r.seconds,
        r.retransmitted_packets,
        r.sender.timeouts,
    );
    if !r.rate_trace.is_empty() {
        // One sample per 100 ms of virtual time.
        let mut next = 0u64;
        for s in &r.rate_trace {
            if s.at_ns >= next {
                println!(
                    "  t={:>7.3}s spacing {:>8.1} µs  ({:>6.0} pkt/s) {}",
                    s.at_ns as f64 / 1e9,
                    s.spacing_ns as f64 / 1e3,
                    1e9 / s.spacing_ns as f64,
                    if s.decrease { "D" } else { "I" }
                );
                next = s.at_ns + 100_000_000;
            }
        }
        if let Ok(path) = std::env::var("RMCAST_RATE_CSV") {
            std::fs::write(format!("{path}.{name}.csv"), spacing_csv(r)).expect("write the CSV");
        }
    }
}

#[test]
fn hunt_converges_to_the_slowest_receivers_capacity_without_overruns() {
    let sc = group(RateControl::Hunt(HuntParams::adaptive()), HUNT_PACKETS, 9);
    let r = rmcast_sim::run_or_panic(&sc);
    let m = measure(&r);
    show("hunt", &sc, &r, &m);
    let cap = capacity_pps(&sc);
    assert!(
        (m.steady_pps - cap).abs() / cap < 0.10,
        "seed {}: steady {:.0} pkt/s vs capacity {cap:.0}",
        r.seed,
        m.steady_pps
    );
    assert!(
        m.overrun < 0.001,
        "seed {}: overrun {:.4} %",
        r.seed,
        m.overrun * 100.0
    );
}

#[test]
fn unpaced_sender_overruns_the_slowest_receiver() {
    let sc = group(RateControl::Off, COMPARISON_PACKETS, 9);
    let r = rmcast_sim::run_or_panic(&sc);
    let m = measure(&r);
    show("off", &sc, &r, &m);
    assert!(
        m.overrun > 0.01,
        "seed {}: overrun only {:.4} %",
        r.seed,
        m.overrun * 100.0
    );
}

#[test]
fn thesis_timers_run_the_same_group() {
    // Table 4.1 with Table C.1's constants: fixed 20 ms timers and a 40 µs
    // unit. Not held to the 10 % bound (its additive unit is coarse next to a
    // 100 µs spacing); it must complete, and it is printed for comparison.
    let sc = group(
        RateControl::Hunt(HuntParams::thesis()),
        COMPARISON_PACKETS,
        9,
    );
    let r = rmcast_sim::run_or_panic(&sc);
    let m = measure(&r);
    show("thesis", &sc, &r, &m);
    assert!(r.outcome.ok);
}

/// Issue 19's hang: under loss that does not depend on the rate (5 % at
/// every receiver, as `--loss 0.05` does), every gap was an error that
/// widened the spacing, and once the spacing passed the RTO every pause
/// between two packets was a timeout, another error: the rate fell to one
/// packet a second (Hunt's widest spacing) and stayed there. A 1 MiB
/// transfer to 2 receivers took 246-480 s of virtual time; 8 receivers and
/// 4 MiB now take under 3 s. The timer no longer counts while the
/// allowance holds a packet back, and errors at a spacing of two RTTs or
/// more are background loss.
#[test]
fn hunt_under_rate_independent_loss_keeps_a_live_rate() {
    for seed in 0..3 {
        let sc = Scenario {
            receivers: 8,
            object_size: 4 << 20,
            config: SenderConfig {
                protocol: ProtocolId::NakPoll,
                rate_control: Some(RateControl::Hunt(HuntParams::default())),
                ..SenderConfig::default()
            },
            loss: LossModel::Bernoulli(0.05),
            seed: rmcast_sim::seed_from_env(seed),
            time_limit: Duration::from_secs(60),
            ..Scenario::default()
        };
        let r = rmcast_sim::run_or_panic(&sc);
        println!(
            "seed {}: {:.2} s, {:.1} Mbit/s, {} resent",
            r.seed, r.seconds, r.goodput_mbit_s, r.retransmitted_packets
        );
        assert!(r.outcome.ok, "seed {}: {:?}", r.seed, r.outcome);
        assert!(r.seconds < 10.0, "seed {}: {:.1} s", r.seed, r.seconds);
    }
}
