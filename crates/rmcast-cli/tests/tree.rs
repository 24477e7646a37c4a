//! Directory trees end to end through the real binary on loopback: one
//! session carries a whole tree (empty directories and files, unicode and
//! long names, names differing only in case, modes, mtimes, links inside
//! the tree, 10,000 small files); receivers store it byte-exact and swap a
//! new version in whole; what cannot travel is refused before anything is
//! sent, naming the path.

use serde_json::Value;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

mod common;
use common::{Proc, rmcast, write};

/// Every path under `root` with its kind, mode, mtime and content (or link
/// target), sorted: two trees are equal when these are.
fn listing(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                stack.push(p.clone());
                format!("dir {:o} {}", m.mode() & 0o777, m.mtime())
            } else {
                let h = blake3::hash(&std::fs::read(&p).unwrap());
                format!(
                    "file {:o} {}.{} {} {}",
                    m.mode() & 0o777,
                    m.mtime(),
                    m.mtime_nsec(),
                    m.len(),
                    &h.to_hex()[..16]
                )
            };
            out.push(format!("{rel}: {what}"));
        }
    }
    out.sort();
    out
}

fn push(group: &str, tree: &Path, out: &Path, receivers: usize) -> (Value, Vec<Value>) {
    let recv: Vec<Proc> = (0..receivers)
        .map(|i| {
            Proc::spawn(
                &format!("recv {i}"),
                rmcast()
                    .args([
                        "recv",
                        "--json",
                        "--group",
                        group,
                        "--timeout",
                        "20s",
                        "--out",
                    ])
                    .arg(out.join(format!("r{i}"))),
            )
        })
        .collect();
    let (code, stdout, err) = Proc::spawn(
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
            .arg(tree),
    )
    .wait(Duration::from_secs(60));
    assert_eq!(code, 0, "{err}");
    let sent: Value = serde_json::from_str(stdout.trim()).unwrap();
    let got = recv
        .into_iter()
        .map(|p| {
            let (code, stdout, err) = p.wait(Duration::from_secs(30));
            assert_eq!(code, 0, "{err}");
            serde_json::from_str(stdout.trim()).unwrap()
        })
        .collect();
    (sent, got)
}

#[test]
fn a_tree_arrives_whole_and_its_next_version_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("ckpt");
    let big: Vec<u8> = (0..2_500_000u32).map(|i| (i * 7 % 253) as u8).collect();
    write(&src, "weights/big.bin", &big);
    write(&src, "empty-file", b"");
    write(&src, "Case.txt", b"upper");
    write(&src, "case.txt", b"lower");
    let long = "n".repeat(200);
    write(&src, &format!("ünïcødé ✓/{long}"), b"long name");
    std::fs::create_dir_all(src.join("empty/dir")).unwrap();
    std::os::unix::fs::symlink("weights/big.bin", src.join("latest")).unwrap();
    std::fs::set_permissions(src.join("case.txt"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::set_permissions(src.join("weights"), std::fs::Permissions::from_mode(0o750)).unwrap();
    let out = dir.path().join("out");
    let group = rmcast::random_group().to_string();
    let (sent, got) = push(&group, &src, &out, 2);
    assert_eq!(sent["ok"], true);
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r["tree"]["files"], 5, "{r}");
        assert_eq!(r["tree"]["symlinks"], 1, "{r}");
        assert_eq!(r["replaced"], false);
        assert_eq!(
            listing(&out.join(format!("r{i}/ckpt"))),
            listing(&src),
            "receiver {i}"
        );
    }
    // The next version: one file changed, one gone, one new.
    write(&src, "case.txt", b"lower, version 2");
    std::fs::remove_file(src.join("Case.txt")).unwrap();
    write(&src, "weights/new.bin", &[1; 100_000]);
    let (_, got) = push(&group, &src, &out, 2);
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r["replaced"], true, "{r}");
        assert_eq!(
            listing(&out.join(format!("r{i}/ckpt"))),
            listing(&src),
            "receiver {i}"
        );
        let mut names: Vec<String> = std::fs::read_dir(out.join(format!("r{i}")))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [".ckpt.rmcast-index", "ckpt"],
            "no staging or part file left, the tree's index beside it"
        );
    }
}

#[test]
fn ten_thousand_small_files_in_one_session() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("many");
    for i in 0..10_000u32 {
        write(
            &src,
            &format!("d{:02}/f{i:05}", i % 100),
            &i.to_be_bytes().repeat(1 + (i % 50) as usize),
        );
    }
    let out = dir.path().join("out");
    let (sent, got) = push(&rmcast::random_group().to_string(), &src, &out, 1);
    assert_eq!(sent["ok"], true);
    assert_eq!(got[0]["tree"]["files"], 10_000);
    assert_eq!(got[0]["tree"]["dirs"], 100);
    assert_eq!(listing(&out.join("r0/many")), listing(&src));
}

#[test]
fn what_cannot_travel_is_refused_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("t");
    write(&src, "ok.txt", b"fine");
    std::os::unix::fs::symlink("../../etc/passwd", src.join("escape")).unwrap();
    let (code, _, err) = Proc::spawn(
        "send",
        rmcast()
            .args(["send", "--receivers", "1", "--wait", "2s", "--group"])
            .arg(rmcast::random_group().to_string())
            .arg(&src),
    )
    .wait(Duration::from_secs(10));
    assert_eq!(code, 1);
    assert!(
        err.contains("escape") && err.contains("leads out of the tree"),
        "{err}"
    );
    assert!(!err.contains("waiting"), "{err}");
    let (code, _, err) = Proc::spawn(
        "send",
        rmcast()
            .args(["send", "--receivers", "1", "--protocol", "tcp-chain"])
            .arg(dir.path()),
    )
    .wait(Duration::from_secs(10));
    assert_eq!(code, 1);
    assert!(err.contains("is a directory"), "{err}");
}

#[test]
fn atomic_tree_false_merges_file_by_file_and_keeps_what_the_tree_does_not_name() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("data");
    write(&src, "a/one.txt", b"new one");
    write(&src, "two.txt", b"two");
    let out = dir.path().join("out");
    write(&out, "data/a/one.txt", b"old one");
    write(&out, "data/a/local-only.txt", b"kept");
    write(&out, "data/keep.txt", b"kept too");
    let group = rmcast::random_group().to_string();
    let r = Proc::spawn(
        "recv",
        rmcast()
            .args([
                "recv",
                "--json",
                "--atomic-tree=false",
                "--group",
                &group,
                "--timeout",
                "20s",
                "--out",
            ])
            .arg(&out),
    );
    let (code, _, err) = Proc::spawn(
        "send",
        rmcast()
            .args(["send", "--group", &group, "--receivers", "1"])
            .arg(&src),
    )
    .wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    let (code, stdout, err) = r.wait(Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["replaced"], true, "{v}");
    assert_eq!(
        std::fs::read(out.join("data/a/one.txt")).unwrap(),
        b"new one"
    );
    assert_eq!(std::fs::read(out.join("data/two.txt")).unwrap(), b"two");
    assert_eq!(
        std::fs::read(out.join("data/a/local-only.txt")).unwrap(),
        b"kept"
    );
    assert_eq!(
        std::fs::read(out.join("data/keep.txt")).unwrap(),
        b"kept too"
    );
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, [".data.rmcast-index", "data"], "no staging left");
}

/// A 6 GiB file next to small ones, on disk (not tmpfs), byte-exact: the
/// layout maps it in place past 4 GiB offsets and the receiver extracts it
/// while it arrives. Heavy (18 GiB of disk traffic): run by hand with
/// `cargo test --release -p rmcast-cli --test tree -- --ignored six_gib`
/// (`RMCAST_BIG_DIR` picks the disk; default the target directory).
#[test]
#[ignore = "heavy: 6 GiB on disk; run by hand"]
fn six_gib_next_to_small_files_on_disk() {
    let base = std::env::var_os("RMCAST_BIG_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    let dir = tempfile::tempdir_in(base).unwrap();
    let src = dir.path().join("big-tree");
    std::fs::create_dir_all(&src).unwrap();
    {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(src.join("huge.bin")).unwrap());
        let block: Vec<u8> = (0..1u32 << 20)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        for i in 0..6u32 * 1024 {
            let mut b = block.clone();
            b[..4].copy_from_slice(&i.to_be_bytes());
            f.write_all(&b).unwrap();
        }
    }
    for i in 0..100u32 {
        write(
            &src,
            &format!("small/{i:03}.txt"),
            format!("small file {i}").as_bytes(),
        );
    }
    let out = dir.path().join("out");
    let (sent, got) = push(&rmcast::random_group().to_string(), &src, &out, 1);
    assert_eq!(sent["ok"], true, "{sent}");
    assert_eq!(got[0]["tree"]["files"], 101);
    eprintln!(
        "6 GiB tree: {:.1} s, {:.0} Mbit/s",
        sent["seconds"].as_f64().unwrap(),
        sent["goodput_mbps"].as_f64().unwrap()
    );
    assert_eq!(listing(&out.join("r0/big-tree")), listing(&src));
}
