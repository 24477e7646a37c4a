//! One overlay run at any size, e.g.
//! `cargo run --release -p rmcast-sim --example overlay -- --protocol bintree --nodes 1000 --size 64MiB --rate 1gbit`
//!
//! Flags: `--protocol direct|tree|binomial|chain|bintree|pipeline` (or `tcp-*`),
//! `--fanout F` (tree), `--nodes N`, `--size BYTES` (k/M/G, KiB/MiB/GiB),
//! `--rate RATE` (bit/s: 100mbit, 1gbit, 10gbit), `--segment BYTES`,
//! `--window BYTES` (per connection),
//! `--latency-us US`, `--seed S`. Prints the simulated times and the wall
//! time the simulation took.

use rmcast_proto::overlay::parse_shape;
use rmcast_sim::overlay::{OverlayScenario, run_overlay};
use std::time::{Duration, Instant};

fn number(s: &str) -> u64 {
    let lower = s.to_ascii_lowercase();
    let units: [(&str, u64); 10] = [
        ("kib", 1 << 10),
        ("mib", 1 << 20),
        ("gib", 1 << 30),
        ("gbit", 1_000_000_000),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
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

fn main() {
    let mut s = OverlayScenario {
        nodes: 1000,
        size: 64 << 20,
        ..OverlayScenario::default()
    };
    let (mut protocol, mut fanout) = ("bintree".to_owned(), 2u32);
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).map(String::as_str).unwrap_or_default();
        match pair[0].as_str() {
            "--protocol" => protocol = value.trim_start_matches("tcp-").to_owned(),
            "--fanout" => fanout = value.parse().expect("--fanout"),
            "--nodes" => s.nodes = value.parse().expect("--nodes"),
            "--size" => s.size = number(value),
            "--rate" => s.rate_bits_per_s = number(value),
            "--segment" => s.segment_size = number(value) as u32,
            "--window" => s.window_bytes = number(value),
            "--latency-us" => {
                s.latency = Duration::from_micros(value.parse().expect("--latency-us"))
            }
            "--seed" => s.seed = value.parse().expect("--seed"),
            other => panic!("unknown flag {other}"),
        }
    }
    s.shape = parse_shape(&format!("tcp-{protocol}"), fanout).expect("a known protocol");
    let wall = Instant::now();
    match run_overlay(&s) {
        Ok(r) => {
            let ratio = r.data_time.as_secs_f64() / r.object_time.as_secs_f64();
            println!(
                "{} nodes={} size={} rate={} bit/s: data {:.3} s = {ratio:.2} x size/R ({:.3} s), \
                 session {:.3} s, {} segments moved, {} events, max {} connections/host, \
                 wall {:.2} s",
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
                wall.elapsed().as_secs_f64()
            );
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
