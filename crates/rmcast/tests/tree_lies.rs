//! A tree whose manifest lies, or names paths that escape, arrives intact
//! (its object hash matches: the sender hashed the lie) and is still not
//! stored: the receiver names the file or path, leaves nothing in place
//! and nothing outside its output directory, and the sender hears why.

use rmcast::{Error, RecvConfig, SendConfig, random_group, recv_to_dir, recv_to_vec, send_bytes};
use rmcast_wire::manifest::{Entry, EntryKind, Manifest, chunk_count};
use std::time::Duration;

fn file(path: &str, size: u64) -> Entry {
    Entry {
        path: path.into(),
        mode: 0o644,
        mtime_s: 0,
        mtime_ns: 0,
        kind: EntryKind::File {
            offset: 0,
            size,
            chunks: (0..chunk_count(size, 4096))
                .map(|i| {
                    *blake3::hash(&vec![b'x'; (size - i * 4096).min(4096) as usize]).as_bytes()
                })
                .collect(),
        },
    }
}

/// A tree object: `entries` laid out back to back after the manifest,
/// every file's bytes `b'x'` unless `data` says otherwise.
fn object(mut entries: Vec<Entry>, data: Option<Vec<u8>>) -> Vec<u8> {
    let mut m = Manifest {
        chunk_size: 4096,
        entries: Vec::new(),
    };
    m.entries.append(&mut entries);
    let mut at = m.encoded_len() as u64;
    let mut bytes = Vec::new();
    for e in &mut m.entries {
        if let EntryKind::File { offset, size, .. } = &mut e.kind {
            *offset = at;
            at += *size;
            bytes.extend(std::iter::repeat_n(b'x', *size as usize));
        }
    }
    let mut out = m.encode();
    out.extend(data.unwrap_or(bytes));
    out
}

fn push(
    name: &str,
    obj: Vec<u8>,
) -> (
    rmcast::SendReport,
    Result<rmcast::RecvReport, Error>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let mut send = SendConfig {
        group: random_group(),
        ..SendConfig::default()
    };
    send.proto.receivers = 1;
    send.proto.join_wait = Duration::from_secs(10);
    let recv = RecvConfig {
        group: send.group,
        out_dir: dir.path().join("out"),
        listen_timeout: Some(Duration::from_secs(10)),
        ..RecvConfig::default()
    };
    let r = std::thread::spawn(move || {
        std::fs::create_dir_all(&recv.out_dir).unwrap();
        recv_to_dir(&recv, None)
    });
    let sent = send_bytes(name, &obj, &send, None).unwrap();
    (sent, r.join().unwrap(), dir)
}

fn everything_under(dir: &std::path::Path) -> Vec<String> {
    let mut out: Vec<String> = walk(dir)
        .into_iter()
        .map(|p| p.strip_prefix(dir).unwrap().display().to_string())
        .collect();
    out.sort();
    out
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

#[test]
fn a_chunk_that_does_not_match_its_hash_is_named_and_nothing_is_stored() {
    let mut data = vec![b'x'; 10 + 5000];
    data[10 + 4500] = b'y'; // second chunk of b.bin
    let obj = object(vec![file("a.txt", 10), file("sub/b.bin", 5000)], Some(data));
    let (sent, got, dir) = push("lies/", obj);
    assert!(!sent.ok);
    let reason = sent.members[0].reason.clone().unwrap_or_default();
    assert!(
        reason.contains("sub/b.bin") && reason.contains("chunk 1"),
        "{reason}"
    );
    assert!(matches!(got, Err(Error::Failed(_))), "{got:?}");
    assert_eq!(
        everything_under(dir.path()),
        ["out"],
        "nothing stored, no staging left"
    );
}

#[test]
fn a_manifest_with_an_escaping_path_or_a_file_beyond_the_object_is_refused() {
    let escape = {
        let mut e = file("x", 1);
        e.path = "../outside".into();
        object(vec![e], None)
    };
    let beyond = {
        let mut obj = object(vec![file("a", 100)], None);
        obj.truncate(obj.len() - 1);
        obj
    };
    for (what, obj, needle) in [
        ("escape", escape, "../outside"),
        ("beyond", beyond, "beyond the object"),
    ] {
        let (sent, got, dir) = push("t/", obj);
        assert!(!sent.ok, "{what}");
        let reason = sent.members[0].reason.clone().unwrap_or_default();
        assert!(reason.contains(needle), "{what}: {reason}");
        assert!(got.is_err(), "{what}");
        assert_eq!(everything_under(dir.path()), ["out"], "{what}");
    }
}

#[test]
fn a_tree_is_refused_in_memory() {
    let obj = object(vec![file("a", 3)], None);
    let mut send = SendConfig {
        group: random_group(),
        ..SendConfig::default()
    };
    send.proto.receivers = 1;
    send.proto.join_wait = Duration::from_secs(10);
    let recv = RecvConfig {
        group: send.group,
        listen_timeout: Some(Duration::from_secs(10)),
        ..RecvConfig::default()
    };
    let r = std::thread::spawn(move || recv_to_vec(&recv, None));
    let sent = send_bytes("t/", &obj, &send, None).unwrap();
    assert!(!sent.ok);
    match r.join().unwrap() {
        Err(Error::Refused(why)) => assert!(why.contains("into memory"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// A disk that fills up half-way (a small tmpfs, root only): the receiver
/// fails with a clear error, nothing is put in place, no staging directory
/// or part file is left, and nothing outside the output directory is touched.
#[test]
fn a_disk_that_fills_up_half_way_fails_cleanly() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(ok.success());
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    std::fs::write(mnt.join("ballast"), vec![1u8; 3 << 20]).unwrap();
    // 4.5 MB fits the 5 MB left at the offer; the part file plus the
    // extracted copy of its one big file do not.
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("d/big.bin"), vec![7u8; 4_500_000]).unwrap();
    std::fs::write(src.join("small.txt"), b"small").unwrap();
    let mut send = SendConfig {
        group: random_group(),
        ..SendConfig::default()
    };
    send.proto.receivers = 1;
    send.proto.join_wait = Duration::from_secs(10);
    let recv = RecvConfig {
        group: send.group,
        out_dir: mnt.clone(),
        listen_timeout: Some(Duration::from_secs(10)),
        ..RecvConfig::default()
    };
    let r = std::thread::spawn(move || recv_to_dir(&recv, None));
    let sent = rmcast::send_path(&src, &send, None).unwrap();
    let got = r.join().unwrap();
    assert!(!sent.ok);
    // The disk fills while the object arrives or while its big file is
    // copied out, whichever comes first: either way the reason names it.
    let reason = sent.members[0].reason.clone().unwrap_or_default();
    assert!(
        (reason.contains("d/big.bin") || reason.contains("\"src/\""))
            && reason.contains("No space left"),
        "{reason}"
    );
    assert!(matches!(got, Err(Error::Failed(_))), "{got:?}");
    let mut left: Vec<String> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["ballast"], "nothing but what was there");
    assert_eq!(
        std::fs::read(mnt.join("ballast")).unwrap(),
        vec![1u8; 3 << 20]
    );
}
