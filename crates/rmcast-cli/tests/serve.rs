//! `rmcast serve` end to end on loopback: one service process takes five
//! sessions in a row — one of them killed half-way and sent again, one
//! refused under --no-clobber — and says what became of each; the files it
//! keeps are byte-exact and nothing half-written is left in its directory.

use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

mod common;
use common::{Proc, entries, rmcast};

fn data(size: usize, salt: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i * 31 + i / 4099 + salt) as u8)
        .collect()
}

/// `rmcast serve` on `group` into `out`, with `args`.
fn serve(group: &str, out: &Path, args: &[&str]) -> Proc {
    Proc::spawn(
        "serve",
        rmcast()
            .args(["serve", "--group", group])
            .args(args)
            .arg("--out")
            .arg(out),
    )
}

fn send(group: &str, file: &Path, extra: &[&str]) -> Proc {
    Proc::spawn(
        &format!("send {}", file.display()),
        rmcast()
            .args([
                "send",
                "--group",
                group,
                "--receivers",
                "1",
                "--wait",
                "15s",
            ])
            .args(extra)
            .arg(file),
    )
}

#[test]
fn serve_takes_five_sessions_in_a_row_and_survives_a_killed_one() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("served");
    let group = rmcast::random_group().to_string();
    let serve = serve(
        &group,
        &out,
        &[
            "--json",
            "--no-clobber",
            "--sessions",
            "6",
            "--sender-timeout",
            "1s",
            "--idle-timeout",
            "30s",
        ],
    );
    let mut files = Vec::new();
    for (i, size) in [200_000usize, 1, 3_000_000, 0, 77_777]
        .into_iter()
        .enumerate()
    {
        let path = dir.path().join(format!("f{i}.bin"));
        std::fs::write(&path, data(size, i)).unwrap();
        files.push(path);
    }
    // 1, 2: two ordinary sessions.
    for f in &files[..2] {
        let (code, _, err) = send(&group, f, &[]).wait(Duration::from_secs(30));
        assert_eq!(code, 0, "{err}");
    }
    // 3: the sender is killed half-way (paced so it is still sending).
    let mut killed = send(&group, &files[2], &["--rate", "8mbit"]);
    std::thread::sleep(Duration::from_millis(1500));
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    // 3 again, whole: the service has given the dead one up and takes it.
    let started = Instant::now();
    let (code, _, err) = send(&group, &files[2], &[]).wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    // 4: an empty file; 5: a name the service already holds (--no-clobber).
    let (code, _, err) = send(&group, &files[3], &[]).wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::copy(&files[4], other.join("f0.bin")).unwrap();
    let (code, _, err) = send(&group, &other.join("f0.bin"), &[]).wait(Duration::from_secs(30));
    assert_eq!(code, 1, "a refused receiver fails the send: {err}");
    assert!(err.contains("--no-clobber"), "the sender hears why: {err}");
    let (code, stdout, err) = serve.wait(Duration::from_secs(20));
    assert_eq!(code, 1, "one session failed, one was refused: {err}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 6, "{stdout}");
    let ok: Vec<bool> = lines.iter().map(|v| v["ok"].as_bool().unwrap()).collect();
    assert_eq!(ok, [true, true, false, true, true, false], "{stdout}");
    assert!(
        lines[2]["error"].as_str().unwrap().contains("silent"),
        "{stdout}"
    );
    assert!(
        lines[5]["error"].as_str().unwrap().contains("--no-clobber"),
        "{stdout}"
    );
    for (i, f) in files[..4].iter().enumerate() {
        let name = f.file_name().unwrap();
        assert_eq!(
            std::fs::read(out.join(name)).unwrap(),
            std::fs::read(f).unwrap(),
            "f{i}"
        );
    }
    let mut names = entries(&out);
    names.sort();
    assert_eq!(
        names,
        ["f0.bin", "f1.bin", "f2.bin", "f3.bin"],
        "no part file left"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn serve_replaces_a_file_as_its_new_version_and_says_so_then_stops_when_idle() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("served");
    let group = rmcast::random_group().to_string();
    let serve = serve(&group, &out, &["--idle-timeout", "3s"]);
    let file = dir.path().join("v.bin");
    for version in 0..2 {
        std::fs::write(&file, data(50_000, version)).unwrap();
        let (code, _, err) = send(&group, &file, &[]).wait(Duration::from_secs(30));
        assert_eq!(code, 0, "{err}");
    }
    let (code, _, err) = serve.wait(Duration::from_secs(20));
    assert_eq!(
        code, 0,
        "an idle service without --sessions ends well: {err}"
    );
    assert_eq!(std::fs::read(out.join("v.bin")).unwrap(), data(50_000, 1));
    assert_eq!(err.matches("verified and stored").count(), 2, "{err}");
    assert_eq!(
        err.matches("replaced the previous version").count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("no session was announced within 3.0 s"),
        "{err}"
    );
    assert!(err.contains("2 sessions taken, 0 failed"), "{err}");
}

fn tree(root: &Path, files: usize, size: usize, salt: usize) {
    std::fs::create_dir_all(root).unwrap();
    for i in 0..files {
        std::fs::write(root.join(format!("part-{i:02}.bin")), data(size, salt + i)).unwrap();
    }
}

fn same_files(a: &Path, b: &Path) {
    let mut names = entries(a);
    names.sort();
    assert_eq!(names, {
        let mut n = entries(b);
        n.sort();
        n
    });
    for n in names {
        assert_eq!(
            std::fs::read(a.join(&n)).unwrap(),
            std::fs::read(b.join(&n)).unwrap(),
            "{n}"
        );
    }
}

/// `serve --max-concurrent 2`: two senders push two trees at once and both
/// are taken together; a third tree's sender is killed half-way, and sent
/// again it resumes from what the service kept.
#[test]
fn serve_takes_two_trees_at_once_and_resumes_a_killed_one() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("served");
    let group = rmcast::random_group().to_string();
    let (a, b, c) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
    );
    tree(&a, 8, 200_000, 1);
    tree(&b, 8, 200_000, 50);
    tree(&c, 40, 256 << 10, 100);
    let serve = serve(
        &group,
        &out,
        &[
            "--json",
            "--max-concurrent",
            "2",
            "--sessions",
            "4",
            "--sender-timeout",
            "1s",
            "--idle-timeout",
            "30s",
        ],
    );
    // Paced so that each lasts about a second: they overlap.
    let sa = send(&group, &a, &["--rate", "16mbit"]);
    let sb = send(&group, &b, &["--rate", "16mbit"]);
    let started = Instant::now();
    for s in [sa, sb] {
        let (code, _, err) = s.wait(Duration::from_secs(30));
        assert_eq!(code, 0, "{err}");
    }
    assert!(
        started.elapsed() < Duration::from_millis(2_500),
        "taken together, not one after the other: {:?}",
        started.elapsed()
    );
    // The third tree: killed once about half of it is in.
    let mut killed = send(&group, &c, &["--rate", "40mbit"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let staged = std::fs::read_dir(&out).ok().and_then(|d| {
            d.flatten()
                .find(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(".c.rmcast-tree-")
                })
                .map(|e| std::fs::read_dir(e.path()).map_or(0, |d| d.count()))
        });
        if staged.is_some_and(|n| n >= 20) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the third tree never got half-way"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1_500)); // the service gives it up
    let (code, _, err) = send(&group, &c, &[]).wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    let (code, stdout, err) = serve.wait(Duration::from_secs(20));
    assert_eq!(code, 1, "the killed session failed: {err}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    let ok: Vec<bool> = lines.iter().map(|v| v["ok"].as_bool().unwrap()).collect();
    assert_eq!(ok, [true, true, false, true], "{stdout}");
    let held = lines[3]["held_bytes"].as_u64().unwrap();
    assert!(held >= 4 << 20, "resumed from {held} of 10 MiB: {stdout}");
    for (name, src) in [("a", &a), ("b", &b), ("c", &c)] {
        same_files(&out.join(name), src);
    }
}

/// `serve --json-events`: a line per event, `session` with the report when
/// one ends and `finished` when the service stops.
#[test]
fn serve_json_events_say_each_session_and_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("served");
    let group = rmcast::random_group().to_string();
    let serve = serve(&group, &out, &["--json-events", "--once"]);
    let file = dir.path().join("one.bin");
    std::fs::write(&file, data(300_000, 7)).unwrap();
    let (code, _, err) = send(&group, &file, &[]).wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    let (code, stdout, err) = serve.wait(Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(names.last(), Some(&"finished"), "{stdout}");
    let session = events
        .iter()
        .find(|e| e["event"] == "session")
        .expect("a session event");
    assert_eq!(session["ok"], true);
    assert_eq!(session["report"]["bytes"], 300_000);
    assert_eq!(events.last().unwrap()["sessions"], 1);
    assert!(
        names
            .iter()
            .all(|n| ["progress", "session", "finished"].contains(n)),
        "{stdout}"
    );
}
