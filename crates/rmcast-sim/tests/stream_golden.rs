//! Golden file for the PRMP cases (`tests/golden/prmp.txt`): what the
//! stream sender and receivers did in every scenario of tests/stream_sim.rs
//! (`tests/stream_cases/`), pinned byte for byte, so that a refactoring of
//! the machines (or of `rmcast_sim::stream`, the network they run on here)
//! proves it preserved behaviour; any difference is a bug or a fix to name.
//! (The cases and this file came from rmcast-proto's tests, with their
//! private `stream_net`, which became `rmcast_sim::stream` unchanged: both
//! golden files stayed byte for byte.)
//!
//! `prmp.txt` holds only the machines' observables: every event of the
//! sender and of each receiver with its virtual time, their stats, the
//! congestion window after each transmission, what each receiver's
//! application read (message count, bytes, digest), whether the session
//! closed and the last virtual time. `prmp_net.txt` holds what only the
//! network model measures (its step count, the arrival times of responses
//! at the sender, window-edge overruns, the largest unread backlog): a
//! change of the model may change it, but `prmp.txt` must not change then.
//!
//! Bless: `RMCAST_GOLDEN_BLESS=1 cargo test -p rmcast-sim --test stream_golden`.

#[path = "common/golden.rs"]
mod golden;
mod stream_cases;

use golden::{compare, fnv64};
use rmcast_proto::Instant;
use std::fmt::{Debug, Write as _};

const DIR: &str = env!("CARGO_MANIFEST_DIR");

fn ns(t: Instant) -> u64 {
    t.as_nanos()
}

/// Length and digest of a long sequence's `{:?}`.
fn digest<T: Debug>(v: &[T]) -> String {
    format!(
        "{} entries, fnv {}",
        v.len(),
        fnv64(format!("{v:?}").as_bytes())
    )
}

#[test]
fn golden_prmp_cases() {
    let started = std::time::Instant::now();
    let mut machines = String::new();
    let mut net = String::new();
    for (name, build) in stream_cases::all() {
        let out = rmcast_sim::stream::run_or_panic(&build());
        let m = &mut machines;
        let _ = writeln!(m, "=== {name} seed {}", out.seed);
        let _ = writeln!(m, "end_ns: {}", ns(out.end));
        let _ = writeln!(m, "closed: {}", out.closed);
        let _ = writeln!(m, "messages_sent: {}", out.sent);
        let _ = writeln!(m, "sender_stats: {:?}", out.sender_stats);
        let cwnd: Vec<(u64, u32)> = out.cwnd_trace.iter().map(|&(t, c)| (ns(t), c)).collect();
        let _ = writeln!(m, "cwnd_trace: {}", digest(&cwnd));
        let _ = writeln!(m, "sender_events:");
        for (t, e) in &out.sender_events {
            let _ = writeln!(m, "  {} {e:?}", ns(*t));
        }
        for (i, stats) in out.receiver_stats.iter().enumerate() {
            let read = &out.delivered[i];
            let bytes: usize = read.iter().map(Vec::len).sum();
            // Each message as its length (8 bytes, little-endian) and its bytes.
            let mut framed = Vec::with_capacity(bytes + 8 * read.len());
            for msg in read {
                framed.extend_from_slice(&(msg.len() as u64).to_le_bytes());
                framed.extend_from_slice(msg);
            }
            let _ = writeln!(
                m,
                "receiver {i}: read {} messages, {bytes} bytes, fnv {}",
                read.len(),
                fnv64(&framed)
            );
            let _ = writeln!(m, "  stats {stats:?}");
            for (t, e) in &out.receiver_events[i] {
                let _ = writeln!(m, "  {} {e:?}", ns(*t));
            }
        }
        let arrivals: Vec<u64> = out.response_arrivals.iter().map(|&t| ns(t)).collect();
        let _ = writeln!(
            net,
            "{name} seed {}: steps {} beyond_edge {} max_buffered {:?} response_arrivals {}",
            out.seed,
            out.steps,
            out.beyond_edge,
            out.max_buffered,
            digest(&arrivals)
        );
    }
    eprintln!("golden prmp: {:?}", started.elapsed());
    compare(DIR, "prmp", &machines);
    compare(DIR, "prmp_net", &net);
}
