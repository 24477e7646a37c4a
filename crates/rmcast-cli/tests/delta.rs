//! Resume and delta end to end through the real binary on loopback: a
//! second push of a tree moves only the chunks that changed; a receiver
//! killed half-way, or a sender killed half-way, leaves a staging
//! directory the next session resumes from; every result is byte-exact
//! and nothing is left beside the tree.

use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

mod common;
use common::{Proc, rmcast, write};

/// Pseudo-random bytes (so no chunk equals another by accident).
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Every file under `root` with its content hash, sorted.
fn files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let h = blake3::hash(&std::fs::read(&p).unwrap());
                out.push(format!(
                    "{} {}",
                    p.strip_prefix(root).unwrap().display(),
                    h.to_hex()
                ));
            }
        }
    }
    out.sort();
    out
}

/// A tree of 20 MiB: 40 files of 256 KiB and one of 10 MiB (ten chunks).
fn make_tree(src: &Path) -> u64 {
    for i in 0..40 {
        write(src, &format!("shard-{i:02}.bin"), &noise(i, 256 << 10));
    }
    write(src, "model/weights.bin", &noise(99, 10 << 20));
    40 * (256 << 10) + (10 << 20)
}

fn recv(group: &str, out: &Path, extra: &[&str]) -> Proc {
    Proc::spawn(
        "recv",
        rmcast()
            .args(["recv", "--json", "--group", group, "--timeout", "20s"])
            .args(extra)
            .arg("--out")
            .arg(out),
    )
}

fn send(group: &str, tree: &Path, receivers: usize, extra: &[&str]) -> Proc {
    Proc::spawn(
        "send",
        rmcast()
            .args([
                "send",
                "--json",
                "--group",
                group,
                "--receivers",
                &receivers.to_string(),
            ])
            .args(extra)
            .arg(tree),
    )
}

fn json(p: Proc) -> Value {
    let (code, stdout, err) = p.wait(Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(stdout.trim()).unwrap()
}

/// Bytes the sender put on the wire as data (first transmissions, counted
/// at the full packet size: an upper bound).
fn data_bytes(sent: &Value) -> u64 {
    sent["data_packets"].as_u64().unwrap() * 1472
}

/// What a receiver's --out holds once a tree `ckpt` is in: the tree and
/// its index (what it wrote where, so the next version need not read the
/// files it holds).
const INDEX_AND_TREE: [&str; 2] = [".ckpt.rmcast-index", "ckpt"];

/// The names in `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut v = common::entries(dir);
    v.sort();
    v
}

#[test]
fn a_second_push_moves_only_the_chunks_that_changed() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("ckpt");
    let total = make_tree(&src);
    let outs = [dir.path().join("r0"), dir.path().join("r1")];
    let group = rmcast::random_group().to_string();
    let rs: Vec<Proc> = outs.iter().map(|o| recv(&group, o, &[])).collect();
    let first = json(send(&group, &src, 2, &[]));
    assert_eq!(first["skipped_bytes"], 0, "nothing held the first time");
    for r in rs {
        assert_eq!(json(r)["held_bytes"], 0);
    }
    // About 5 %: two shards rewritten, one chunk of the large file.
    write(&src, "shard-03.bin", &noise(1003, 256 << 10));
    write(&src, "shard-17.bin", &noise(1017, 256 << 10));
    let mut big = std::fs::read(src.join("model/weights.bin")).unwrap();
    big[(4 << 20) + 5] ^= 0xFF;
    write(&src, "model/weights.bin", &big);
    let changed = 2 * (256 << 10) + (1 << 20);

    let rs: Vec<Proc> = outs.iter().map(|o| recv(&group, o, &[])).collect();
    let second = json(send(&group, &src, 2, &[]));
    let got: Vec<Value> = rs.into_iter().map(json).collect();
    assert_eq!(second["ok"], true);
    let moved = data_bytes(&second);
    assert!(
        moved <= changed + total / 50,
        "moved {moved} bytes for {changed} changed of {total}: {second}"
    );
    assert!(
        second["skipped_bytes"].as_u64().unwrap() >= total - changed - total / 50,
        "{second}"
    );
    for (o, r) in outs.iter().zip(&got) {
        assert_eq!(r["replaced"], true);
        assert!(r["held_bytes"].as_u64().unwrap() >= total - changed, "{r}");
        assert_eq!(files(&o.join("ckpt")), files(&src));
        assert_eq!(
            entries(o),
            INDEX_AND_TREE,
            "nothing else left beside the tree"
        );
        // An unchanged file was linked from the version before, which is
        // gone: the new tree's name is its only one.
        use std::os::unix::fs::MetadataExt;
        let kept = std::fs::metadata(o.join("ckpt/shard-04.bin")).unwrap();
        assert_eq!(kept.nlink(), 1);
        assert_eq!(
            kept.mtime(),
            std::fs::metadata(src.join("shard-04.bin")).unwrap().mtime()
        );
    }
}

/// Waits until the staging directory under `out` holds at least `files`
/// files (the receiver is half-way), then kills `p` with SIGKILL.
fn kill_when_staged(p: &mut Proc, out: &Path, files: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let staged = std::fs::read_dir(out).ok().and_then(|d| {
            d.flatten()
                .find(|e| e.file_name().to_string_lossy().contains(".rmcast-tree-"))
                .map(|e| std::fs::read_dir(e.path()).map_or(0, |d| d.count()))
        });
        if staged.is_some_and(|n| n >= files) {
            break;
        }
        assert!(Instant::now() < deadline, "the transfer never got half-way");
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = p.child.kill();
    let _ = p.child.wait();
}

#[test]
fn a_receiver_killed_half_way_resumes_from_its_staging() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("ckpt");
    let total = make_tree(&src);
    let out = dir.path().join("out");
    let group = rmcast::random_group().to_string();
    // Slow enough (80 Mbit/s: 2 s) to catch it half-way.
    let mut r = recv(&group, &out, &[]);
    let s = send(&group, &src, 1, &["--rate", "80mbit"]);
    kill_when_staged(&mut r, &out, 20);
    drop(r);
    let (code, _, _) = s.wait(Duration::from_secs(60));
    assert_ne!(code, 0, "its only receiver died");

    let r = recv(&group, &out, &[]);
    let again = json(send(&group, &src, 1, &[]));
    let got = json(r);
    assert_eq!(again["ok"], true);
    let held = got["held_bytes"].as_u64().unwrap();
    assert!(held >= total / 4, "resumed from {held} of {total} bytes");
    let moved = data_bytes(&again);
    assert!(
        moved <= total - held + total / 20,
        "moved {moved}, held {held}, total {total}"
    );
    assert_eq!(files(&out.join("ckpt")), files(&src));
    assert_eq!(
        entries(&out),
        INDEX_AND_TREE,
        "the staging it resumed from is gone"
    );
}

#[test]
fn a_sender_killed_half_way_is_resumed_by_running_it_again() {
    sender_killed_and_resumed(20, "80mbit");
}

/// Killed with one shard of 256 KiB left of 20 MiB (98.8 %), paced slowly
/// enough that the last shard takes 100 ms.
#[test]
fn a_sender_killed_at_ninety_nine_percent_is_resumed_by_running_it_again() {
    sender_killed_and_resumed(40, "20mbit");
}

/// Kills the sender once `staged` entries are in the first receiver's
/// staging directory (the large file's directory first, then the 40
/// shards), then runs it again.
fn sender_killed_and_resumed(staged: usize, rate: &str) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("ckpt");
    let total = make_tree(&src);
    let outs = [dir.path().join("r0"), dir.path().join("r1")];
    let group = rmcast::random_group().to_string();
    let rs: Vec<Proc> = outs
        .iter()
        .map(|o| recv(&group, o, &["--sender-timeout", "1s"]))
        .collect();
    let mut s = send(&group, &src, 2, &["--rate", rate]);
    kill_when_staged(&mut s, &outs[0], staged);
    drop(s);
    for r in rs {
        let (code, _, err) = r.wait(Duration::from_secs(30));
        assert_ne!(code, 0, "the sender died: {err}");
    }
    let rs: Vec<Proc> = outs.iter().map(|o| recv(&group, o, &[])).collect();
    let again = json(send(&group, &src, 2, &[]));
    assert_eq!(again["ok"], true);
    let mut least_held = total;
    for (o, r) in outs.iter().zip(rs) {
        let got = json(r);
        least_held = least_held.min(got["held_bytes"].as_u64().unwrap());
        assert_eq!(files(&o.join("ckpt")), files(&src));
        assert_eq!(entries(o), INDEX_AND_TREE);
    }
    assert!(least_held >= total / 4, "resumed from {least_held}");
    let moved = data_bytes(&again);
    assert!(
        moved <= total - least_held + total / 20,
        "moved {moved}, every receiver held at least {least_held} of {total}"
    );
}
