//! `rmcast relay` end to end on loopback: real processes, real sockets,
//! real multicast in two groups. Every process is started here, waited for
//! with a bound, and killed by its own PID if it overstays.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod common;
use common::{Proc, entries, recv, rmcast, wait_for_part_file, write_file};

fn json(out: &str) -> Value {
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("bad JSON ({e}): {out}"))
}

/// Two random groups on different ports.
fn groups() -> (String, String) {
    let a = rmcast::random_group();
    loop {
        let b = rmcast::random_group();
        if b.port() != a.port() {
            return (a.to_string(), b.to_string());
        }
    }
}

fn relay(from: &str, to: &str, receivers: &str, extra: &[&str]) -> Proc {
    let mut cmd = rmcast();
    cmd.args([
        "relay", "--json", "--name", "relay-b", "--from", from, "--to", to,
    ])
    .args(["--receivers", receivers, "--timeout", "20s"])
    .args(extra);
    Proc::spawn("relay", &mut cmd)
}

/// Receiver a1 in group `a`, b1 and b2 (with `behind_extra`) in group
/// `b`, each storing under `dir`: their directories, a1, and b1 and b2.
fn receivers(
    dir: &Path,
    (a, b): (&str, &str),
    behind_extra: &[&str],
) -> (Vec<PathBuf>, Proc, Vec<Proc>) {
    let outs: Vec<PathBuf> = ["a1", "b1", "b2"].iter().map(|n| dir.join(n)).collect();
    let direct = recv(a, &outs[0], "a1", &[]);
    let behind = (1..3)
        .map(|k| recv(b, &outs[k], &format!("b{k}"), behind_extra))
        .collect();
    (outs, direct, behind)
}

#[test]
fn a_relay_forwards_into_its_group_and_counts_once_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "obj.bin", 6 << 20);
    let (a, b) = groups();
    let (outs, direct, behind) = receivers(dir.path(), (&a, &b), &[]);
    let relay = relay(&a, &b, "2", &["--loss", "0.01"]);
    let (code, out, err) = Proc::spawn(
        "sender",
        rmcast()
            .arg("send")
            .arg(&file)
            .args(["--receivers", "2", "--group", &a, "--json"]),
    )
    .wait(Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["verified"], 2, "{v}");
    let (code, out, err) = relay.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    let r = json(&out);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["upstream"]["verified"], true, "{r}");
    assert_eq!(r["downstream"]["verified"], 2, "{r}");
    assert_eq!(r["to"], b.as_str());
    assert!(
        r["downstream"]["retransmitted_packets"]
            .as_u64()
            .unwrap_or(0)
            + r["downstream"]["parity_packets"].as_u64().unwrap_or(0)
            > 0,
        "the relay repaired its group's 1 % loss itself: {r}"
    );
    let sent = std::fs::read(&file).unwrap();
    for (k, p) in std::iter::once(direct).chain(behind).enumerate() {
        let (code, out, err) = p.wait(Duration::from_secs(30));
        assert_eq!(code, 0, "receiver {k}: {err}");
        assert_eq!(json(&out)["verified"], true);
        assert!(std::fs::read(outs[k].join("obj.bin")).unwrap() == sent);
    }
}

#[test]
fn a_relay_killed_mid_transfer_is_named_and_the_receivers_behind_it_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "big.bin", 8 << 20);
    let (a, b) = groups();
    let (outs, direct, behind) = receivers(dir.path(), (&a, &b), &["--sender-timeout", "2s"]);
    let mut relay = Some(relay(&a, &b, "2", &[]));
    let sender = Proc::spawn(
        "sender",
        rmcast()
            .arg("send")
            .arg(&file)
            .args(["--receivers", "2", "--group", &a, "--json"])
            // 8 MiB at 20 Mbit/s: about 3.4 s, so the kill lands mid-transfer.
            .args(["--rate", "20mbit", "--peer-timeout", "1500ms"]),
    );
    // Kill the relay once its group stores data (a part file behind it).
    wait_for_part_file(&outs[1], "nothing reached the group behind the relay");
    std::thread::sleep(Duration::from_millis(300));
    drop(relay.take()); // SIGKILL by PID
    let killed_at = Instant::now();
    let (code, out, err) = sender.wait(Duration::from_secs(30));
    let took = killed_at.elapsed();
    assert_eq!(code, 1, "send must fail: {err}");
    let v = json(&out);
    assert_eq!(v["verified"], 1, "the direct receiver completes: {v}");
    let failures = v["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{v}");
    assert_eq!(failures[0]["name"], "relay-b");
    let reason = failures[0]["reason"].as_str().unwrap();
    assert!(reason.contains("silent"), "{v}");
    // The relay said who receives through it: they are named too.
    assert!(
        reason.contains("2 receivers behind it, unserved: b1,b2")
            || reason.contains("2 receivers behind it, unserved: b2,b1"),
        "{v}"
    );
    assert!(took < Duration::from_secs(12), "failure took {took:?}");
    eprintln!("the sender named the dead relay and its receivers {took:?} after the kill");
    let (code, _, err) = direct.wait(Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
    for (k, p) in behind.into_iter().enumerate() {
        let (code, out, err) = p.wait(Duration::from_secs(20));
        assert_eq!(code, 1, "b{}: {err}", k + 1);
        let v = json(&out);
        assert_eq!(v["ok"], false, "{v}");
        assert!(
            entries(&outs[k + 1]).is_empty(),
            "no partial file is left: {:?}",
            entries(&outs[k + 1])
        );
    }
}

#[test]
fn bad_relay_command_lines_say_what_is_wrong() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--from", "239.1.1.1:7000", "--to", "239.1.1.1:7000"],
            "another group",
        ),
        (
            &[
                "--from",
                "239.1.1.1:7000",
                "--to",
                "239.1.1.2:7000",
                "--group",
                "239.1.1.3:7000",
            ],
            "--to-iface",
        ),
        (
            &[
                "--from",
                "239.1.1.1:7000",
                "--to",
                "239.1.1.2:7000",
                "--protocol",
                "tcp-chain",
            ],
            "TCP overlay",
        ),
        (
            &["--from", "239.1.1.1:7000", "--to", "10.0.0.1:7000"],
            "multicast",
        ),
    ];
    for (args, says) in cases {
        let (code, _, err) = Proc::spawn(
            "relay",
            rmcast()
                .args(["relay", "--receivers", "2", "--timeout", "2s"])
                .args(args),
        )
        .wait(Duration::from_secs(20));
        assert_ne!(code, 0, "{args:?}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
