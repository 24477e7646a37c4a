//! Can the dead-receiver bound follow the RTT? (issue 19). Sweeps the
//! sender's `peer_timeout` over the fault campaign's scenarios and, for
//! each bound, counts:
//!
//! - **false removals**: runs of a class without a crash (loss, bursts,
//!   feedback loss, a slow reader, sequence wrap, garbage, duplication,
//!   reordering, a sender restart, or a pause / partition of 0.1–4 s) in
//!   which the sender removed a receiver that was alive;
//! - **detection time**: in crash runs, from the crash to the sender
//!   naming the dead receiver (median and worst), and the runs' completion
//!   time.
//!
//! ```text
//! cargo run --release -p rmcast-sim --example peer_timeout -- --runs 2000
//! ```
//!
//! The RTT of the simulated LAN is about 0.1–1 ms; `rto_max` is 800 ms.

use rmcast_sim::campaign::{self, CampaignProtocol, FaultClass};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const BOUNDS_MS: [u64; 8] = [25, 50, 100, 250, 500, 1000, 2000, 5000];

#[derive(Default, Clone)]
struct Row {
    runs: u64,
    false_removals: u64,
    crash_runs: u64,
    detect: Vec<f64>,
    invariant_failures: u64,
}

fn main() {
    let mut runs = 2000u64;
    let mut protocol = CampaignProtocol::NakPoll;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().and_then(|v| v.parse().ok()).expect("--runs N"),
            "--protocol" => {
                let v = args.next().expect("--protocol P");
                protocol = CampaignProtocol::from_name(&v).expect("a datagram protocol");
            }
            other => panic!("unknown argument {other:?} (--runs N, --protocol P)"),
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rows: Mutex<BTreeMap<(u64, &'static str), Row>> = Mutex::new(BTreeMap::new());
    let jobs: Vec<(u64, u64)> = BOUNDS_MS
        .iter()
        .flat_map(|&b| (0..runs).map(move |s| (b, s)))
        .collect();
    let next = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(&(bound, seed)) = jobs.get(k) else {
                        break;
                    };
                    let (class, mut sc) = campaign::scenario(protocol, seed);
                    sc.config.peer_timeout = Duration::from_millis(bound);
                    let group = match class {
                        FaultClass::Crash => "crash",
                        FaultClass::Pause | FaultClass::Partition => "pause 0.1-4 s",
                        _ => "no pause, no crash",
                    };
                    let mut row = Row {
                        runs: 1,
                        ..Row::default()
                    };
                    match rmcast_sim::run(&sc) {
                        Ok(r) => {
                            for x in &r.receivers {
                                match (x.crashed_seconds, x.sender_failed_seconds) {
                                    // Alive and removed: only after a crash of
                                    // another receiver (the run may fail).
                                    (None, Some(_)) => row.false_removals = 1,
                                    (Some(c), Some(f)) => row.detect.push(f - c),
                                    _ => {}
                                }
                            }
                            row.crash_runs = u64::from(class == FaultClass::Crash);
                        }
                        // The simulator fails a run without a crash in which
                        // a receiver was removed: a false removal.
                        Err(e) if e.to_string().contains("no crash configured") => {
                            row.false_removals = 1;
                        }
                        Err(e) => {
                            eprintln!("{bound} ms seed {seed}: {e}");
                            row.invariant_failures = 1;
                        }
                    }
                    let mut rows = rows.lock().unwrap();
                    let e = rows.entry((bound, group)).or_default();
                    e.runs += row.runs;
                    e.false_removals += row.false_removals;
                    e.crash_runs += row.crash_runs;
                    e.detect.extend(row.detect);
                    e.invariant_failures += row.invariant_failures;
                }
            });
        }
    });
    println!("protocol {protocol}, {runs} seeds per bound\n");
    println!(
        "| peer_timeout | runs: class | live receiver removed (runs) | other failures | crash detection median / worst s |"
    );
    println!("|---|---|---|---|---|");
    for ((bound, group), mut row) in rows.into_inner().unwrap() {
        row.detect.sort_by(f64::total_cmp);
        let detect = if row.detect.is_empty() {
            "-".to_owned()
        } else {
            format!(
                "{:.3} / {:.3}",
                row.detect[row.detect.len() / 2],
                row.detect[row.detect.len() - 1]
            )
        };
        println!(
            "| {bound} ms | {}: {group} | {} ({:.1} %) | {} | {detect} |",
            row.runs,
            row.false_removals,
            100.0 * row.false_removals as f64 / row.runs.max(1) as f64,
            row.invariant_failures,
        );
    }
}
