//! `rmcast pipe` end to end on loopback: real processes, real sockets, real
//! multicast (127.0.0.1, TTL 1). Every process is started here, waited for
//! with a bound, and killed by its own PID if it overstays.
//!
//! `RMCAST_PIPE_TEST_BYTES` sets the stream size of the byte-exact test
//! (default 100 MB, the figure: about 2 s even in a debug build).

use std::fs::File;
use std::io::Write;
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::Proc;

/// The binary with the test binary's group key in its environment: the
/// streams run sealed, as users' do.
fn rmcast() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rmcast"));
    c.env("RMCAST_KEY_FILE", common::test_key());
    c
}

fn group() -> SocketAddrV4 {
    SocketAddrV4::new(
        std::net::Ipv4Addr::new(239, 77, 0, 1),
        20000 + (std::process::id() % 20000) as u16 + rand_port_offset(),
    )
}

fn rand_port_offset() -> u16 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    (t % 20000) as u16
}

/// Deterministic pseudo-random bytes (xorshift64*).
fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

fn hash_file(p: &Path) -> blake3::Hash {
    let mut h = blake3::Hasher::new();
    h.update_reader(File::open(p).unwrap()).unwrap();
    h.finalize()
}

/// `rmcast pipe recv` on group `g`, named `name`, giving up after 60 s.
fn receiver_cmd(g: SocketAddrV4, name: &str) -> Command {
    let mut c = rmcast();
    c.args([
        "pipe",
        "recv",
        "--group",
        &g.to_string(),
        "--timeout",
        "60s",
    ])
    .args(["--name", name]);
    c
}

fn receiver(dir: &Path, g: SocketAddrV4, i: usize) -> (Proc, PathBuf) {
    let out = dir.join(format!("out{i}"));
    let p = Proc::spawn(
        &format!("receiver {i}"),
        receiver_cmd(g, &format!("r{i}"))
            .args(["--linger", "500ms"])
            .stdin(Stdio::null())
            .stdout(File::create(&out).unwrap())
            .stderr(Stdio::piped()),
    );
    (p, out)
}

/// `rmcast pipe send` to `n` receivers on group `g`, stdout discarded and
/// stderr kept; the caller gives stdin.
fn sender(g: SocketAddrV4, n: usize) -> Command {
    let mut c = rmcast();
    c.args(["pipe", "send", "--group", &g.to_string()])
        .args(["--receivers", &n.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// The sender exited 3 (`code`, stderr `err`) having removed "r0", its
/// line saying `why`, and 2 of 3 receivers confirmed; those two exit 0
/// holding `input` byte for byte.
fn r0_removed_and_the_rest_complete(
    code: i32,
    err: &str,
    why: &str,
    receivers: Vec<(Proc, PathBuf)>,
    input: &[u8],
) {
    assert_eq!(code, 3, "sender stderr:\n{err}");
    let removed = err
        .lines()
        .find(|l| l.contains("removed") && l.contains("\"r0\""))
        .unwrap_or_else(|| panic!("no removal of r0 on the sender's stderr:\n{err}"));
    assert!(removed.contains(why), "{removed}");
    assert!(
        err.contains("2 of 3 receiver(s) confirmed everything"),
        "{err}"
    );
    let want = blake3::hash(input);
    for (i, (p, out)) in receivers.into_iter().enumerate() {
        let (code, _, rerr) = p.wait(Duration::from_secs(20));
        assert_eq!(code, 0, "receiver {}:\n{rerr}", i + 1);
        assert_eq!(
            hash_file(&out),
            want,
            "receiver {} got different bytes",
            i + 1
        );
    }
}

#[test]
fn pipe_carries_a_stream_byte_exact_to_four_receivers() {
    let size: usize = std::env::var("RMCAST_PIPE_TEST_BYTES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000_000);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::write(&input, data(size, 42)).unwrap();
    let g = group();
    let receivers: Vec<_> = (0..4).map(|i| receiver(dir.path(), g, i)).collect();
    let started = Instant::now();
    let sender = Proc::spawn("sender", sender(g, 4).stdin(File::open(&input).unwrap()));
    let limit = Duration::from_secs(60 + (size / 2_000_000) as u64);
    let (code, _, err) = sender.wait(limit);
    let took = started.elapsed();
    assert_eq!(code, 0, "sender stderr:\n{err}");
    assert!(
        err.contains("4 of 4 receiver(s) confirmed everything"),
        "{err}"
    );
    let want = hash_file(&input);
    for (i, (p, out)) in receivers.into_iter().enumerate() {
        let (code, _, rerr) = p.wait(Duration::from_secs(20));
        assert_eq!(code, 0, "receiver {i}:\n{rerr}");
        assert_eq!(std::fs::metadata(&out).unwrap().len(), size as u64);
        assert_eq!(hash_file(&out), want, "receiver {i} got different bytes");
    }
    eprintln!(
        "{size} bytes to 4 receivers in {:.2} s ({:.0} Mbit/s, debug build)",
        took.as_secs_f64(),
        size as f64 * 8.0 / took.as_secs_f64() / 1e6
    );
}

#[test]
fn a_receiver_killed_mid_stream_is_removed_and_the_others_finish() {
    let dir = tempfile::tempdir().unwrap();
    let g = group();
    let mut receivers: Vec<_> = (0..3).map(|i| receiver(dir.path(), g, i)).collect();
    let input = data(8_000_000, 7);
    let mut sender = Proc::spawn("sender", sender(g, 3).stdin(Stdio::piped()));
    let mut stdin = sender.child.stdin.take().unwrap();
    let (first, rest) = input.split_at(2_000_000);
    let rest = rest.to_vec();
    stdin.write_all(first).unwrap();
    // Wait (bounded) until receiver 0 has written some of the stream, then
    // kill that process by its PID.
    let out0 = receivers[0].1.clone();
    let start = Instant::now();
    while std::fs::metadata(&out0).map_or(0, |m| m.len()) < 500_000 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "receiver 0 got nothing"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (mut victim, _) = receivers.remove(0);
    let killed_at = Instant::now();
    victim.child.kill().unwrap();
    let _ = victim.child.wait();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&rest);
        // Dropping stdin ends the stream.
    });
    let (code, _, err) = sender.wait(Duration::from_secs(60));
    let took = killed_at.elapsed();
    writer.join().unwrap();
    assert!(err.contains("not delivered to"), "{err}");
    r0_removed_and_the_rest_complete(code, &err, "unresponsive", receivers, &input);
    eprintln!(
        "killed receiver removed; sender done {:.2} s after the kill",
        took.as_secs_f64()
    );
}

/// A receiver whose reader stopped (its stdout is a pipe nobody reads)
/// still answers polls, with its window closed: the stall watchdog removes
/// it, naming it, and the others get the whole stream.
#[test]
fn a_receiver_whose_reader_stopped_is_removed_by_the_stall_watchdog() {
    let dir = tempfile::tempdir().unwrap();
    let g = group();
    let receivers: Vec<_> = (1..3).map(|i| receiver(dir.path(), g, i)).collect();
    let stuck = Proc::spawn(
        "stuck receiver",
        receiver_cmd(g, "r0")
            .args(["--buffer", "256"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let input = data(4_000_000, 9);
    let sender = Proc::spawn(
        "sender",
        sender(g, 3)
            .args(["--stall-timeout", "2s"])
            .stdin(Stdio::piped()),
    );
    let mut sender = sender;
    let mut stdin = sender.child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let started = Instant::now();
    let (code, _, err) = sender.wait(Duration::from_secs(60));
    let took = started.elapsed();
    writer.join().unwrap();
    r0_removed_and_the_rest_complete(code, &err, "stalled", receivers, &data(4_000_000, 9));
    // Its reader gone for good, the stuck one fails writing and exits.
    let mut stuck = stuck;
    drop(stuck.child.stdout.take());
    let (code, _, _) = stuck.wait(Duration::from_secs(20));
    assert_ne!(code, 0);
    eprintln!(
        "stalled reader removed; sender done {:.2} s after start",
        took.as_secs_f64()
    );
}
