//! Several Hunt senders on one group (`senders = S`) on the loopback
//! testbed (no root): the run succeeds only when every receiver holds all S
//! objects, and a corrupted copy of one of them fails it.
//!
//! Needs the rmcast binary ($RMCAST_BIN, or `rmcast` next to rmcast-lab in
//! the target directory) and prints why it skips otherwise.

mod common;

use common::{LAB, rmcast_bin};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// One at a time: the machine has two cores.
static ONE: Mutex<()> = Mutex::new(());

fn run(dir: &Path, text: &str, rmcast: &Path) -> (Option<i32>, Vec<serde_json::Value>) {
    let sc = dir.join("scenario.toml");
    std::fs::write(&sc, text).unwrap();
    let out = dir.join("out");
    let o = Command::new(LAB)
        .args(["run", sc.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .env("RMCAST_BIN", rmcast)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(out.join("runs.jsonl")).unwrap_or_default();
    let runs = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (o.status.code(), runs)
}

const SCENARIO: &str = "name='t'\ntestbed='local'\nreceivers=[2]\nsizes=['256KiB']\nrates=['none']\nmax_run_s=60\n\
     [[tools]]\nname='hunt-3'\nkind='rmcast'\nsenders=3\nargs=['--rate-control', 'hunt']\n";

#[test]
fn three_hunt_senders_deliver_three_verified_objects_to_each_receiver() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(rmcast) = rmcast_bin() else {
        return eprintln!("SKIPPED: no rmcast binary (build rmcast-cli or set RMCAST_BIN)");
    };
    let dir = tempfile::tempdir().unwrap();
    let (code, r) = run(dir.path(), SCENARIO, &rmcast);
    assert_eq!(code, Some(0));
    assert_eq!(r.len(), 1);
    let run = &r[0];
    assert_eq!(run["status"], "ok", "{run}");
    assert_eq!(run["senders"], 3);
    let senders = run["procs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["label"].as_str().unwrap().contains("(sender "))
        .count();
    assert_eq!(senders, 3, "{run}");
    // The three senders' first transmissions: 3 × 256 KiB in 1448-byte payloads.
    let data = run["data_packets"].as_u64().unwrap();
    assert!(data >= 3 * (256 * 1024 / 1448), "{run}");
    let loss = run["loss_mean"].as_f64().unwrap();
    assert!((0.0..1.0).contains(&loss), "{run}");
    let g = run["goodput_mbps"].as_f64().unwrap();
    let secs = run["seconds"].as_f64().unwrap();
    assert!(
        (g - 3.0 * 256.0 * 1024.0 * 8.0 / secs / 1e6).abs() < 1e-6,
        "aggregate goodput over the three objects: {run}"
    );
}

#[test]
fn a_corrupted_copy_of_one_senders_object_fails_the_run() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(rmcast) = rmcast_bin() else {
        return eprintln!("SKIPPED: no rmcast binary");
    };
    let dir = tempfile::tempdir().unwrap();
    let text = SCENARIO.replace("[[tools]]", "[inject]\ncorrupt_receiver=2\n[[tools]]");
    let (code, r) = run(dir.path(), &text, &rmcast);
    assert_eq!(code, Some(1));
    assert_eq!(r[0]["status"], "failed");
    let reasons: Vec<String> = serde_json::from_value(r[0]["reasons"].clone()).unwrap();
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].starts_with("h2: object-262144") && reasons[0].contains("BLAKE3 mismatch"),
        "{reasons:?}"
    );
    assert!(r[0]["loss_mean"].is_null() && r[0]["goodput_mbps"].is_null());
}
