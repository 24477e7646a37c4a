//! One overlay run at any size, e.g.
//! `cargo run --release -p rmcast-sim --example overlay -- --protocol bintree --nodes 1000 --size 64MiB --rate 1gbit`
//!
//! Flags: `--protocol direct|tree|binomial|chain|bintree|pipeline` (or `tcp-*`),
//! `--fanout F` (tree), `--nodes N`, `--size BYTES` (k/M/G or kB/MB/GB, KiB/MiB/GiB),
//! `--rate RATE` (bit/s: 100mbit, 1gbit, 10gbit), `--segment BYTES`,
//! `--window BYTES` (per connection), `--latency-us US`, `--seed S`,
//! `--inactivity-ms MS` (the machines' inactivity timeout).
//!
//! Faults (self-healing): `--crash HOST@SECONDS` (SIGKILL) and
//! `--stop HOST@SECONDS` (SIGSTOP for good), any number of them; or
//! `--kill-at FRACTION`: run clean first, then crash an interior receiver
//! (`--kill-rank R`, default the interior rank nearest N/3; `--kill-stop`:
//! SIGSTOP it instead) at FRACTION of the clean run's data time, and print
//! the extra time against its bound (twice the time of what the dead node
//! still owed its children, plus the inactivity timeout for a stop).
//!
//! Prints the simulated times and the wall time the simulation took.

use rmcast_proto::overlay::{OverlayShape, Topology, parse_shape};
use rmcast_sim::overlay::{OverlayFault, OverlayReport, OverlayScenario, run_overlay};
use std::time::{Duration, Instant};

const HELP: &str = "usage: overlay [--protocol direct|tree|binomial|chain|bintree|pipeline] \
[--fanout F] [--nodes N] [--size BYTES] [--rate BIT/S] [--segment BYTES] [--window BYTES] \
[--latency-us US] [--seed S] [--inactivity-ms MS] [--crash HOST@SECONDS]... \
[--stop HOST@SECONDS]... [--kill-at FRACTION [--kill-rank R] [--kill-stop]]";

fn number(s: &str) -> u64 {
    let lower = s.to_ascii_lowercase();
    let units: [(&str, u64); 13] = [
        ("kib", 1 << 10),
        ("mib", 1 << 20),
        ("gib", 1 << 30),
        ("gbit", 1_000_000_000),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
        ("kb", 1_000),
        ("mb", 1_000_000),
        ("gb", 1_000_000_000),
        ("k", 1_000),
        ("m", 1_000_000),
        ("g", 1_000_000_000),
        ("", 1),
    ];
    for (suffix, mult) in units {
        if let Some(n) = lower.strip_suffix(suffix)
            && let Ok(v) = n.trim().parse::<f64>()
        {
            return (v * mult as f64) as u64;
        }
    }
    panic!("cannot read {s:?} as a number");
}

/// `HOST@SECONDS`.
fn host_at(flag: &str, v: &str) -> (u16, Duration) {
    let (h, t) = v
        .split_once('@')
        .unwrap_or_else(|| panic!("{flag} wants HOST@SECONDS, not {v:?}"));
    let h = h.parse().unwrap_or_else(|_| panic!("{flag}: host {h:?}"));
    let t: f64 = t
        .parse()
        .unwrap_or_else(|_| panic!("{flag}: seconds {t:?}"));
    (h, Duration::from_secs_f64(t))
}

/// The interior rank (one with children) nearest `n / 3`.
fn interior_rank(shape: OverlayShape, n: u16) -> Option<u16> {
    let topo = Topology::build(shape, n);
    (1..=n)
        .filter(|&r| !topo.node(r).children.is_empty())
        .min_by_key(|&r| (i32::from(r) - i32::from(n / 3)).abs())
}

fn line(s: &OverlayScenario, r: &OverlayReport, wall: Duration) {
    let ratio = r.data_time.as_secs_f64() / r.object_time.as_secs_f64();
    println!(
        "{} nodes={} size={} rate={} bit/s: data {:.3} s = {ratio:.2} x size/R ({:.3} s), \
         session {:.3} s, {} segments moved, {} events, max {} connections/host, \
         {} verified, {} edges re-attached, failed {}, wall {:.2} s",
        s.shape,
        s.nodes,
        s.size,
        s.rate_bits_per_s,
        r.data_time.as_secs_f64(),
        r.object_time.as_secs_f64(),
        r.total_time.as_secs_f64(),
        r.segments_moved,
        r.events,
        r.max_connections_used,
        r.verified,
        r.reattached,
        r.failed,
        wall.as_secs_f64()
    );
}

fn run(s: &OverlayScenario) -> OverlayReport {
    let wall = Instant::now();
    match run_overlay(s) {
        Ok(r) => {
            line(s, &r, wall.elapsed());
            r
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}

fn main() {
    let mut s = OverlayScenario {
        nodes: 1000,
        size: 64 << 20,
        ..OverlayScenario::default()
    };
    let (mut protocol, mut fanout) = ("bintree".to_owned(), 2u32);
    let (mut kill_at, mut kill_rank, mut kill_stop) = (None::<f64>, None::<u16>, false);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if matches!(flag.as_str(), "--help" | "-h") {
            println!("{HELP}");
            return;
        }
        if flag == "--kill-stop" {
            kill_stop = true;
            continue;
        }
        let value = args.next().unwrap_or_default();
        match flag.as_str() {
            "--protocol" => protocol = value.trim_start_matches("tcp-").to_owned(),
            "--fanout" => fanout = value.parse().expect("--fanout"),
            "--nodes" => s.nodes = value.parse().expect("--nodes"),
            "--size" => s.size = number(&value),
            "--rate" => s.rate_bits_per_s = number(&value),
            "--segment" => s.segment_size = number(&value) as u32,
            "--window" => s.window_bytes = number(&value),
            "--latency-us" => {
                s.latency = Duration::from_micros(value.parse().expect("--latency-us"))
            }
            "--seed" => s.seed = value.parse().expect("--seed"),
            "--inactivity-ms" => {
                s.inactivity = Duration::from_millis(value.parse().expect("--inactivity-ms"))
            }
            "--crash" => {
                let (host, at) = host_at("--crash", &value);
                s.faults.push(OverlayFault::Crash { host, at });
            }
            "--stop" => {
                let (host, at) = host_at("--stop", &value);
                s.faults.push(OverlayFault::Pause {
                    host,
                    at,
                    duration: None,
                });
            }
            "--kill-at" => kill_at = Some(value.parse().expect("--kill-at FRACTION")),
            "--kill-rank" => kill_rank = Some(value.parse().expect("--kill-rank")),
            other => {
                eprintln!("unknown flag {other}\n{HELP}");
                std::process::exit(2);
            }
        }
    }
    s.shape = parse_shape(&format!("tcp-{protocol}"), fanout).expect("a known protocol");
    let Some(fraction) = kill_at else {
        run(&s);
        return;
    };
    // Clean, then the same seed with an interior receiver killed.
    let clean = run(&s);
    let rank = kill_rank
        .or_else(|| interior_rank(s.shape, s.nodes))
        .expect("the overlay has an interior receiver");
    let host = clean.host_of_rank[usize::from(rank)];
    let at = clean.started.unwrap_or_default() + clean.data_time.mul_f64(fraction);
    let fault = OverlayFault::lasting(host, at, kill_stop);
    let faulted = run(&OverlayScenario {
        faults: vec![fault],
        ..s.clone()
    });
    let rate = s.rate_bits_per_s as f64;
    let owed = faulted.unforwarded_bytes as f64 * 8.0 / rate;
    let detect = if kill_stop {
        s.inactivity
    } else {
        Duration::ZERO
    };
    let bound = 2.0 * owed + detect.as_secs_f64();
    let extra = faulted.data_time.as_secs_f64() - clean.data_time.as_secs_f64();
    let others = faulted.verified == usize::from(s.nodes) - 1;
    println!(
        "{} N={} {} bytes, {}: rank {rank} (host {host}) at {:.0} % ({:.3} s): clean {:.3} s, \
         faulted {:.3} s, extra {:.3} s, bound {:.3} s (2 x {:.3} s owed{}), ratio {:.2}, \
         all others verified: {}",
        s.shape,
        s.nodes,
        s.size,
        if kill_stop { "SIGSTOP" } else { "SIGKILL" },
        fraction * 100.0,
        at.as_secs_f64(),
        clean.data_time.as_secs_f64(),
        faulted.data_time.as_secs_f64(),
        extra,
        bound,
        owed,
        if kill_stop {
            format!(" + {:.1} s detection", detect.as_secs_f64())
        } else {
            String::new()
        },
        extra / bound,
        if others { "yes" } else { "no" },
    );
}
