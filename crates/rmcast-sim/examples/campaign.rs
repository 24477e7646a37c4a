//! The seeded fault campaign (issue 19): `--runs` seeds per protocol, each
//! with faults drawn from its seed, every run checked by the simulator's
//! invariants. Prints one row per protocol × fault class (runs, failures,
//! runs where the sender named a failed receiver, worst completion time in
//! virtual seconds) and every failing seed with the line that replays it.
//!
//! ```text
//! cargo run --release -p rmcast-sim --example campaign -- --runs 10000
//! cargo run --release -p rmcast-sim --example campaign -- --protocol ring --seed 4242 --runs 1 -v
//! cargo run --release -p rmcast-sim --example campaign -- --receivers 1100 --runs 200
//! ```

use rmcast_sim::campaign::{self, CampaignProtocol, CampaignRun, Cell, FaultClass};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

const HELP: &str = "\
campaign: the seeded fault campaign over every protocol

  --runs N         seeds per protocol                      [1000]
  --seed S         first seed                              [0]
  --protocol P     one protocol (ack, nak-poll, nak-poll-gbn, ring,
                   tree-h2, tree-h10, tree-binary, nak-poll-hunt,
                   nak-poll-fec, prmp, overlay)                  [all]
  --receivers N    grow every datagram protocol's group to N receivers
                   (at least 12; the faults stay where they were drawn):
                   past 1,000 the large-group paths run. PRMP and the
                   overlays keep their own groups       [as drawn, 1-12]
  --threads T      worker threads               [available cores]
  -v               print every failing run's whole error
";

fn main() -> ExitCode {
    let mut runs = 1000u64;
    let mut first = 0u64;
    let mut protocols = CampaignProtocol::ALL.to_vec();
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut verbose = false;
    let mut receivers = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .unwrap_or_else(|| fail(&format!("{name} needs a value")))
        };
        match a.as_str() {
            "--runs" => runs = parse(&value("--runs"), "--runs"),
            "--seed" => first = parse(&value("--seed"), "--seed"),
            "--threads" => threads = parse::<usize>(&value("--threads"), "--threads").max(1),
            "--receivers" => {
                let n: u16 = parse(&value("--receivers"), "--receivers");
                if n < campaign::GROWN_FROM {
                    fail(&format!(
                        "--receivers {n}: at least {}, the largest group the campaign draws",
                        campaign::GROWN_FROM
                    ));
                }
                receivers = Some(n);
            }
            "--protocol" => {
                let v = value("--protocol");
                let p = CampaignProtocol::from_name(&v)
                    .unwrap_or_else(|| fail(&format!("unknown protocol {v:?}")));
                protocols = vec![p];
            }
            "-v" => verbose = true,
            "-h" | "--help" => {
                print!("{HELP}");
                return ExitCode::SUCCESS;
            }
            other => fail(&format!("unknown argument {other:?}")),
        }
    }
    let jobs: Vec<(CampaignProtocol, u64)> = protocols
        .iter()
        .flat_map(|&p| (first..first.saturating_add(runs)).map(move |s| (p, s)))
        .collect();
    let next = AtomicU64::new(0);
    let table: Mutex<BTreeMap<(usize, FaultClass), Cell>> = Mutex::new(BTreeMap::new());
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(&(p, seed)) = jobs.get(i) else {
                        return;
                    };
                    let run = campaign::run_grown(p, seed, receivers);
                    record(&run, &protocols, &table, &failures, verbose, receivers);
                }
            });
        }
    });
    let table = table.into_inner().expect("no worker panicked");
    let failures = failures.into_inner().expect("no worker panicked");
    println!(
        "| protocol | faults | runs | failures | receiver failed | worst s |\n|---|---|---|---|---|---|"
    );
    let mut totals: BTreeMap<usize, Cell> = BTreeMap::new();
    for ((pi, class), cell) in &table {
        println!(
            "| {} | {} | {} | {} | {} | {:.2} |",
            protocols[*pi],
            class.name(),
            cell.runs,
            cell.failures,
            cell.member_failures,
            cell.worst_seconds
        );
        let t = totals.entry(*pi).or_default();
        t.runs += cell.runs;
        t.failures += cell.failures;
        t.member_failures += cell.member_failures;
        t.worst_seconds = t.worst_seconds.max(cell.worst_seconds);
    }
    for (pi, t) in &totals {
        println!(
            "| **{}** | all | {} | {} | {} | {:.2} |",
            protocols[*pi], t.runs, t.failures, t.member_failures, t.worst_seconds
        );
    }
    println!(
        "\n{} runs in {:.1} s of wall time on {threads} threads",
        jobs.len(),
        started.elapsed().as_secs_f64()
    );
    for f in &failures {
        println!("{f}");
    }
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn record(
    run: &CampaignRun,
    protocols: &[CampaignProtocol],
    table: &Mutex<BTreeMap<(usize, FaultClass), Cell>>,
    failures: &Mutex<Vec<String>>,
    verbose: bool,
    receivers: Option<u16>,
) {
    let pi = protocols
        .iter()
        .position(|&p| p == run.protocol)
        .expect("a listed protocol");
    table
        .lock()
        .expect("no worker panicked")
        .entry((pi, run.class))
        .or_default()
        .add(run);
    if let Err(e) = &run.result {
        let grown = receivers.map_or(String::new(), |n| format!(" --receivers {n}"));
        let mut line = format!(
            "FAILED {} seed {} ({}): replay with --protocol {} --seed {} --runs 1{grown} -v",
            run.protocol,
            run.seed,
            run.class.name(),
            run.protocol,
            run.seed
        );
        if verbose {
            line.push_str(&format!("\n{e}"));
        } else {
            let first = e.to_string();
            let first = first.lines().next().unwrap_or_default().to_owned();
            line.push_str(&format!("\n  {first}"));
        }
        failures.lock().expect("no worker panicked").push(line);
    }
}

fn parse<T: std::str::FromStr>(v: &str, name: &str) -> T {
    v.parse()
        .unwrap_or_else(|_| fail(&format!("{name}: cannot parse {v:?}")))
}

fn fail(msg: &str) -> ! {
    eprintln!("campaign: {msg}\n\n{HELP}");
    std::process::exit(2)
}
