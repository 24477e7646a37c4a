//! Golden files: the simulator's whole reports for fixed seeds, pinned
//! byte for byte (`tests/golden/*.txt`), so that a refactoring of the
//! machines or of the simulator proves it preserved behaviour. Any
//! difference is a bug, or a fix to name in the commit that re-blesses.
//!
//! The scenarios are the other tests' own (built by `tests/common/`):
//! Table 2 and the ring's memory runs (tests/table2.rs), the ack / nak-poll
//! matrix (tests/matrix.rs) and the ring / tree matrix
//! (tests/protocols_matrix.rs), every cell with its test's seed (10 MB
//! cells included; `RMCAST_SIM_FULL` is not honoured here: the golden
//! set is fixed), the ring / tree crash runs, the rate-control groups
//! (tests/rate_control.rs, tests/multi_sender.rs) and the behaviours of
//! tests/behaviour.rs (crashes, garbage and foreign sessions, sequence
//! wrap, overflowing buffers and ports). Table 2, the rate groups and the
//! behaviours (but their thousand receivers) are rendered whole by `common::report_text::render_report`
//! (every field; traces as length + blake3); the matrices, 1,500 runs,
//! one line per run by `summary_line` (headline numbers and the blake3 of
//! the whole rendering), to keep the files small. All values are virtual
//! time or counts: nothing wall-clock is recorded.
//!
//! Check: `cargo test -p rmcast-sim --test golden`.
//! Bless: `RMCAST_GOLDEN_BLESS=1 cargo test -p rmcast-sim --test golden`
//! (or `scripts/golden.sh bless`).

mod common;

use common::behaviour::*;
use common::golden::compare;
use common::matrices::*;
use common::rate::*;
use common::report_text::{render_report, summary_line};
use common::table2::*;
use rmcast_proto::{HuntParams, ProtocolId, RateControl, Repair};
use rmcast_sim::RunReport;
use rmcast_sim::{LossModel, Scenario};

const DIR: &str = env!("CARGO_MANIFEST_DIR");

/// Runs every (label, scenario), renders each report with `render` (the
/// whole report, or one summary line holding its hash), compares with `name`.
fn golden(name: &str, runs: Vec<(String, Scenario)>, render: fn(&str, &RunReport) -> String) {
    let started = std::time::Instant::now();
    let count = runs.len();
    let mut text = String::new();
    for (label, s) in runs {
        let r = rmcast_sim::run(&s).unwrap_or_else(|e| panic!("{label}: {e}"));
        text.push_str(&render(&label, &r));
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    eprintln!("golden {name}: {count} runs in {:?}", started.elapsed());
    compare(DIR, name, &text);
}

#[test]
fn golden_table2() {
    let mut runs = Vec::new();
    for row in ROWS {
        runs.push((format!("table2 {row:?}"), table2_scenario(row)));
    }
    for (n, window, rate, seed) in ring_memory_lossless() {
        runs.push((
            format!("ring memory n={n} window={window} rate={rate:?} seed={seed}"),
            ring_memory_scenario(n, window, rate, LossModel::None, seed),
        ));
    }
    for loss in ring_memory_losses() {
        runs.push((
            format!("ring memory n=30 window=50 loss={loss:?} seed=13"),
            ring_memory_scenario(30, 50, None, loss, 13),
        ));
    }
    golden("table2", runs, render_report);
}

#[test]
fn golden_ack_nak_matrix() {
    let mut runs = Vec::new();
    for protocol in [ProtocolId::Ack, ProtocolId::NakPoll] {
        for loss in LOSSES {
            for c in ack_nak_cells(loss) {
                runs.push((
                    format!(
                        "{protocol:?} {loss:?} n={} size={} seed={}",
                        c.n, c.size, c.seed
                    ),
                    ack_nak_scenario(protocol, loss, c),
                ));
            }
        }
    }
    golden("matrix", runs, summary_line);
}

fn ring_tree_runs(variants: &[Variant]) -> Vec<(String, Scenario)> {
    let mut runs = Vec::new();
    for &variant in variants {
        for repair in [Repair::Selective, Repair::GoBackN] {
            for loss in LOSSES {
                for Cell { n, size, seed } in ring_tree_cells(variant, repair, loss, false) {
                    runs.push((
                        format!("{variant:?} {repair:?} {loss:?} n={n} size={size} seed={seed}"),
                        ring_tree_scenario(variant, repair, n, size, loss, seed),
                    ));
                }
            }
            runs.push((
                format!("{variant:?} {repair:?} crash of host 1 at 60 ms, seed 7"),
                ring_tree_crash_scenario(variant, repair),
            ));
        }
    }
    runs
}

#[test]
fn golden_ring_matrix() {
    golden(
        "protocols_matrix_ring",
        ring_tree_runs(&[Variant::Ring]),
        summary_line,
    );
}

/// The trees, in two halves (two tests run in parallel).
#[test]
fn golden_tree_matrix_flat1_flat3() {
    golden(
        "protocols_matrix_tree_flat1_flat3",
        ring_tree_runs(&[Variant::Flat1, Variant::Flat3]),
        summary_line,
    );
}

#[test]
fn golden_tree_matrix_flatn_binary() {
    golden(
        "protocols_matrix_tree_flatn_binary",
        ring_tree_runs(&[Variant::FlatN, Variant::Binary]),
        summary_line,
    );
}

/// The rate-control groups, as their tests run them (seed 9).
#[test]
fn golden_rate_control() {
    let hunt = RateControl::Hunt(HuntParams::adaptive());
    let mut runs = vec![
        (
            "one sender hunt".to_string(),
            rate_group(hunt.clone(), HUNT_PACKETS, 9),
        ),
        (
            "one sender off".to_string(),
            rate_group(RateControl::Off, COMPARISON_PACKETS, 9),
        ),
        (
            "one sender thesis".to_string(),
            rate_group(
                RateControl::Hunt(HuntParams::thesis()),
                COMPARISON_PACKETS,
                9,
            ),
        ),
    ];
    for (senders, rc, with_group) in [
        (2, hunt.clone(), true),
        (4, hunt.clone(), true),
        (8, hunt.clone(), true),
        (4, RateControl::Off, false),
        (8, hunt, false),
    ] {
        runs.push((
            format!("{senders} senders {rc:?} group={with_group}"),
            multi_sender_group(senders, rc, with_group, MULTI_TOTAL_PACKETS, 9),
        ));
    }
    golden("rate_control", runs, render_report);
}

/// The behaviours of tests/behaviour.rs (crashes, garbage and foreign
/// sessions, sequence wrap, socket and port overflow, goodput at 30, a
/// thousand receivers), under ack and nak-poll.
#[test]
fn golden_behaviour() {
    let mut runs = Vec::new();
    for (protocol, i) in FEEDBACK_ROWS {
        runs.push((
            format!("feedback {protocol:?} poll_interval={i:?}"),
            feedback_scenario(protocol, i),
        ));
    }
    for protocol in PROTOCOLS {
        runs.push((format!("crash {protocol:?}"), crash_scenario(protocol)));
        runs.push((format!("garbage {protocol:?}"), garbage_scenario(protocol)));
        for isn in WRAP_ISNS {
            for k in 0..2 {
                runs.push((
                    format!("wrap {protocol:?} isn={isn} loss={k}"),
                    wrap_scenario(protocol, isn, k),
                ));
            }
        }
        runs.push((
            format!("socket overflow {protocol:?}"),
            socket_overflow_scenario(protocol),
        ));
        runs.push((
            format!("small ports {protocol:?}"),
            small_ports_scenario(protocol),
        ));
        runs.push((format!("replay {protocol:?}"), replay_scenario(protocol)));
        runs.push((format!("goodput {protocol:?}"), goodput_scenario(protocol)));
    }
    runs.push(("a thousand receivers".to_string(), thousand_scenario()));
    // Whole reports, but one line for the thousand receivers.
    golden("behaviour", runs, |label, r| {
        if r.receivers.len() > 100 {
            summary_line(label, r)
        } else {
            render_report(label, r)
        }
    });
}
