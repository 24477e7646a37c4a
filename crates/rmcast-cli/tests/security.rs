//! Sealed sessions against an attacker on the same group, and every way a
//! user can get the keys wrong, with real processes on loopback (multicast
//! out through 127.0.0.1, TTL 1). Every process is started here, waited for
//! with a bound, and killed by its own PID if it overstays.

use serde_json::Value;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::Proc;

/// The binary with no key in its environment: each test says what it gives.
fn rmcast() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rmcast"));
    c.env_remove("RMCAST_KEY_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn json(out: &str) -> Value {
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("bad JSON ({e}): {out}"))
}

fn write_file(dir: &Path, name: &str, size: usize, salt: u8) -> PathBuf {
    let path = dir.join(name);
    let data: Vec<u8> = (0..size)
        .map(|i| (i * 31 + i / 4099) as u8 ^ salt)
        .collect();
    std::fs::write(&path, data).unwrap();
    path
}

/// A fresh key other than the test key, with another header hint byte, so
/// that its packets are refused as another key's (`wrong_key`), never as
/// bad tags (which 1 key in 256 would otherwise be).
fn other_key(dir: &Path) -> PathBuf {
    let ours = rmcast::load_key(common::test_key()).unwrap().id().hint();
    let key = std::iter::repeat_with(rmcast::generate_key)
        .find(|k| k.id().hint() != ours)
        .unwrap();
    let path = dir.join("other.key");
    rmcast::write_key(&path, &key).unwrap();
    path
}

fn recv(group: &str, out: &Path, name: &str, key: Option<&Path>, extra: &[&str]) -> Proc {
    let mut cmd = rmcast();
    cmd.args(["recv", "--json", "--group", group, "--name", name, "--out"])
        .arg(out);
    if !extra.contains(&"--timeout") {
        cmd.args(["--timeout", "20s"]);
    }
    match key {
        Some(k) => cmd.arg("--key").arg(k),
        None => cmd.arg("--insecure"),
    };
    cmd.args(extra);
    Proc::spawn(name, &mut cmd)
}

fn send(file: &Path, group: &str, receivers: &str, key: Option<&Path>, extra: &[&str]) -> Proc {
    let mut cmd = rmcast();
    cmd.arg("send")
        .arg(file)
        .args(["--receivers", receivers, "--group", group, "--json"]);
    match key {
        Some(k) => cmd.arg("--key").arg(k),
        None => cmd.arg("--insecure"),
    };
    cmd.args(extra);
    Proc::spawn("sender", &mut cmd)
}

/// A socket on the group that hears everything sent to it (as any program
/// on the LAN can) and sends only through loopback.
fn attacker_socket(group: SocketAddrV4) -> Socket {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    s.set_reuse_address(true).unwrap();
    s.set_reuse_port(true).unwrap();
    s.bind(&SockAddr::from(group)).unwrap();
    s.join_multicast_v4(group.ip(), &Ipv4Addr::LOCALHOST)
        .unwrap();
    s.set_multicast_if_v4(&Ipv4Addr::LOCALHOST).unwrap();
    s.set_multicast_ttl_v4(1).unwrap();
    s.set_multicast_loop_v4(true).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    s
}

/// For each sealed packet it hears from a sender: replays it, replays it
/// with one bit flipped, and sends plain forgeries in its session (a
/// `Close` with a wrong hash, a `Bye` that aborts, data at its offsets).
fn attack(group: SocketAddrV4, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) {
    let s = attacker_socket(group);
    let to = SockAddr::from(group);
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 65_536];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut n_seen = 0u64;
    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
        let Ok((n, _)) = s.recv_from(&mut buf) else {
            continue;
        };
        // SAFETY: recv_from initialised the first n bytes.
        let pkt: Vec<u8> = buf[..n]
            .iter()
            .map(|b| unsafe { b.assume_init() })
            .collect();
        if !rmcast_wire::seal::is_sealed(&pkt) || pkt[6..8] != [0xFF, 0xFF] {
            continue; // our own forgeries, receivers' packets
        }
        n_seen += 1;
        if !n_seen.is_multiple_of(3) {
            continue; // keep the pace bearable for a debug build
        }
        let session = &pkt[8..16];
        let mut forgeries = vec![pkt.clone()];
        let mut flipped = pkt.clone();
        let i = 16 + (n_seen as usize % (pkt.len() - 16));
        flipped[i] ^= 0x04;
        forgeries.push(flipped);
        for (kind, body) in [
            (0x09u8, vec![0x5Au8; 32]),                         // Close, wrong hash
            (0x0B, b"\x01\x08intruder".to_vec()),               // Bye, aborted
            (0x06, [&[0u8; 8][..], &[0xEE; 512][..]].concat()), // Data
        ] {
            let mut p = vec![b'R', b'M', rmcast_wire::VERSION, kind, 0, 0, 0xFF, 0xFF];
            p.extend_from_slice(session);
            p.extend_from_slice(&body);
            forgeries.push(p);
        }
        for f in &forgeries {
            if s.send_to(f, &to).is_ok() {
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[test]
fn receivers_with_the_key_take_only_the_real_senders_file() {
    let dir = tempfile::tempdir().unwrap();
    let key = common::test_key();
    let real = write_file(dir.path(), "real.bin", 2 << 20, 0);
    // The intruder's file has the name the receivers would keep.
    std::fs::create_dir_all(dir.path().join("intruder")).unwrap();
    let fake = write_file(&dir.path().join("intruder"), "real.bin", 64 << 10, 0x5A);
    let g = rmcast::random_group();
    let gs = g.to_string();
    let outs: Vec<PathBuf> = (0..2).map(|i| dir.path().join(format!("out{i}"))).collect();
    let receivers: Vec<Proc> = (0..2)
        .map(|i| recv(&gs, &outs[i], &format!("r{i}"), Some(key), &[]))
        .collect();
    // A forged whole session first: another sender, under another key,
    // names the file the receivers would keep. Nobody may join it.
    let intruder = send(
        &fake,
        &gs,
        "2",
        Some(&other_key(dir.path())),
        &["--wait", "3s"],
    );
    std::thread::sleep(Duration::from_millis(500));
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let attacker = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || attack(g, stop, sent))
    };
    let sender = send(&real, &gs, "2", Some(key), &["--rate", "100mbit"]);
    let (code, out, err) = sender.wait(Duration::from_secs(40));
    stop.store(true, Ordering::Relaxed);
    attacker.join().unwrap();
    assert_eq!(code, 0, "the real sender failed: {err}");
    assert_eq!(json(&out)["verified"], 2, "{out}");
    let (code, out, err) = intruder.wait(Duration::from_secs(20));
    assert_ne!(code, 0, "the forged session must find no receiver: {out}");
    assert!(
        json(&out)["error"]
            .as_str()
            .unwrap()
            .contains("only 0 of 2 receivers"),
        "{out} {err}"
    );
    let forgeries = sent.load(Ordering::Relaxed);
    assert!(
        forgeries > 50,
        "the attacker sent only {forgeries} forgeries"
    );
    for (i, r) in receivers.into_iter().enumerate() {
        let (code, out, err) = r.wait(Duration::from_secs(20));
        assert_eq!(code, 0, "r{i}: {err}");
        let v = json(&out);
        assert_eq!(
            std::fs::read(outs[i].join("real.bin")).unwrap(),
            std::fs::read(&real).unwrap(),
            "r{i} kept other bytes"
        );
        let auth = &v["auth"];
        eprintln!("r{i}: {forgeries} forgeries sent; refused: {auth}");
        assert!(auth["unsealed"].as_u64().unwrap() > 0, "r{i}: {v}");
        assert!(auth["forged"].as_u64().unwrap() > 0, "r{i}: {v}");
        assert!(
            auth["replayed"].as_u64().unwrap() + auth["too_old"].as_u64().unwrap() > 0,
            "r{i}: {v}"
        );
        // The intruder's session is refused as another key's (its key's
        // hint byte differs from ours). A receiver ends at the real
        // sender's Bye, before the attacker stops, so it need not have
        // heard every forgery.
        assert!(
            auth["wrong_key"].as_u64().unwrap() > 0,
            "the intruder's own packets are refused too: {v}"
        );
    }
}

#[test]
fn send_and_recv_without_a_key_say_how_to_make_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "f.bin", 100, 0);
    for args in [
        vec!["send", file.to_str().unwrap(), "--receivers", "1"],
        vec!["recv", "--out", dir.path().to_str().unwrap()],
    ] {
        let (code, _, err) =
            Proc::spawn("rmcast", rmcast().args(&args)).wait(Duration::from_secs(10));
        assert_ne!(code, 0, "{args:?}");
        assert!(err.contains("needs a group key"), "{args:?}: {err}");
        assert!(err.contains("rmcast keygen"), "{args:?}: {err}");
        assert!(err.contains("--insecure"), "{args:?}: {err}");
    }
    // An unreadable, a foreign and a damaged key file: each named.
    let foreign = dir.path().join("foreign.key");
    std::fs::write(&foreign, "not a key\n").unwrap();
    let damaged = dir.path().join("damaged.key");
    let text = std::fs::read_to_string(common::test_key()).unwrap();
    std::fs::write(&damaged, text.replace("secret ", "secret 00")).unwrap();
    for (path, needle) in [
        (
            dir.path().join("missing.key"),
            "cannot read the group key file",
        ),
        (foreign, "not an rmcast group key file"),
        (damaged, "secret must be 64 hex digits"),
    ] {
        let (code, _, err) = Proc::spawn(
            "rmcast",
            rmcast()
                .args(["send", file.to_str().unwrap(), "--receivers", "1", "--key"])
                .arg(&path),
        )
        .wait(Duration::from_secs(10));
        assert_ne!(code, 0);
        assert!(err.contains(needle), "{}: {err}", path.display());
    }
    // --key and --insecure contradict each other.
    let (code, _, err) = Proc::spawn(
        "rmcast",
        rmcast()
            .args([
                "send",
                file.to_str().unwrap(),
                "--receivers",
                "1",
                "--insecure",
                "--key",
            ])
            .arg(common::test_key()),
    )
    .wait(Duration::from_secs(10));
    assert_ne!(code, 0);
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn keygen_writes_a_private_key_that_send_and_recv_accept() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.key");
    let (code, _, err) = Proc::spawn("keygen", rmcast().args(["keygen", "-o"]).arg(&path))
        .wait(Duration::from_secs(10));
    assert_eq!(code, 0, "{err}");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(rmcast::load_key(&path).is_ok());
    // Never overwrites: a lost key cannot be recovered.
    let (code, _, err) = Proc::spawn("keygen", rmcast().args(["keygen", "-o"]).arg(&path))
        .wait(Duration::from_secs(10));
    assert_ne!(code, 0);
    assert!(
        err.contains("File exists") || err.contains("exists"),
        "{err}"
    );
    // To stdout: a key file's text, a fresh key each time.
    let (code, a, _) = Proc::spawn("keygen", rmcast().arg("keygen")).wait(Duration::from_secs(10));
    let (_, b, _) = Proc::spawn("keygen", rmcast().arg("keygen")).wait(Duration::from_secs(10));
    assert_eq!(code, 0);
    let ka = rmcast::GroupKey::parse_file(&a).unwrap();
    let kb = rmcast::GroupKey::parse_file(&b).unwrap();
    assert_ne!(ka.id(), kb.id());
}

/// One receiver holds another key: it cannot open the session and says so;
/// the other receiver completes; the sender, waiting for two, fails and
/// says it heard only one.
#[test]
fn a_receiver_with_the_wrong_key_fails_clearly_and_the_rest_complete() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "obj.bin", 256 << 10, 0);
    let g = rmcast::random_group().to_string();
    let good = recv(
        &g,
        &dir.path().join("good"),
        "good",
        Some(common::test_key()),
        &[],
    );
    let wrong_key = other_key(dir.path());
    let bad = recv(
        &g,
        &dir.path().join("bad"),
        "bad",
        Some(&wrong_key),
        &["--timeout", "4s"],
    );
    let one = send(&file, &g, "1", Some(common::test_key()), &[]);
    let (code, out, err) = one.wait(Duration::from_secs(30));
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["verified"], 1);
    let (code, _, err) = good.wait(Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = bad.wait(Duration::from_secs(20));
    assert_ne!(code, 0);
    let v = json(&out);
    let why = v["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        why.contains("did not authenticate") && why.contains("another group key"),
        "{v}"
    );
    assert!(
        err.contains("do not authenticate"),
        "the wait must not be silent: {err}"
    );
    assert!(
        !dir.path().join("bad").join("obj.bin").exists(),
        "nothing may be written by a receiver that could not authenticate"
    );
}

/// `--insecure` on one side only: both sides fail with a message naming the
/// mismatch, nothing is written.
#[test]
fn insecure_on_one_side_only_fails_on_both_sides_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "obj.bin", 64 << 10, 0);
    for (sender_key, receiver_key, needle) in [
        (None, Some(common::test_key()), "--insecure"),
        (Some(common::test_key()), None, "no group key"),
    ] {
        let g = rmcast::random_group().to_string();
        let out_dir = dir.path().join(format!("out-{}", sender_key.is_some()));
        let r = recv(&g, &out_dir, "r", receiver_key, &["--timeout", "3s"]);
        let s = send(&file, &g, "1", sender_key, &["--wait", "3s"]);
        let (code, sout, serr) = s.wait(Duration::from_secs(20));
        assert_ne!(code, 0, "sender: {sout} {serr}");
        let (code, rout, rerr) = r.wait(Duration::from_secs(20));
        assert_ne!(code, 0, "receiver: {rout} {rerr}");
        let v = json(&rout);
        let why = v["error"].as_str().unwrap_or_default();
        assert!(why.contains(needle), "receiver: {why}");
        assert!(!out_dir.join("obj.bin").exists());
        if sender_key.is_none() {
            assert!(
                serr.contains("--insecure"),
                "the insecure side warns: {serr}"
            );
        }
    }
}

/// A member holding the group key sends its own content: receivers that
/// `--trust` only the publisher's key refuse it (unsigned, or signed by
/// another key), keep nothing, and the sender's report names why; the
/// publisher's signed file is kept.
#[test]
fn trust_refuses_a_receiver_turned_sender_and_keeps_the_signed_file() {
    let dir = tempfile::tempdir().unwrap();
    let key = common::test_key();
    let publisher = dir.path().join("publisher.key");
    let insider = dir.path().join("insider.key");
    for k in [&publisher, &insider] {
        let (code, _, err) = Proc::spawn(
            "keygen",
            rmcast().args(["keygen", "--signing", "-o"]).arg(k),
        )
        .wait(Duration::from_secs(10));
        assert_eq!(code, 0, "{err}");
    }
    let trust = format!("{}.pub", publisher.display());
    let file = write_file(dir.path(), "model.bin", 300 << 10, 0);
    let cases: [(&str, Option<&Path>, Option<&str>); 3] = [
        ("unsigned", None, Some("not signed")),
        (
            "signed by another key",
            Some(&insider),
            Some("does not verify"),
        ),
        ("signed by the publisher", Some(&publisher), None),
    ];
    // Over multicast (nak-poll) and over a TCP overlay (tcp-chain).
    for ((what, sign, refusal), overlay) in cases.iter().flat_map(|c| [(*c, false), (*c, true)]) {
        let g = rmcast::random_group().to_string();
        // A free port for the overlay's control listener.
        let control = common::free_tcp_addr();
        let out = dir
            .path()
            .join(format!("out-{}-{overlay}", what.replace(' ', "-")));
        let mut recv_extra = vec!["--trust", &trust];
        let mut extra: Vec<&str> = match sign {
            Some(p) => vec!["--sign", p.to_str().unwrap()],
            None => vec![],
        };
        if overlay {
            recv_extra.extend(["--sender", &control, "--listen", "127.0.0.1:0"]);
            extra.extend(["--protocol", "tcp-chain", "--control", &control]);
        }
        let r = recv(&g, &out, "r", Some(key), &recv_extra);
        let what = format!("{what} (overlay: {overlay})");
        let (scode, sout, serr) =
            send(&file, &g, "1", Some(key), &extra).wait(Duration::from_secs(30));
        let (rcode, rout, rerr) = r.wait(Duration::from_secs(20));
        match refusal {
            Some(needle) => {
                assert_ne!(scode, 0, "{what}: the sender must fail: {sout}");
                assert!(
                    sout.contains(needle),
                    "{what}: sender report: {sout} {serr}"
                );
                assert_ne!(rcode, 0, "{what}: {rout}");
                assert!(
                    json(&rout)["error"].as_str().unwrap().contains(needle),
                    "{what}: {rout}"
                );
                assert!(
                    common::entries(&out).is_empty(),
                    "{what}: kept {:?}",
                    common::entries(&out)
                );
            }
            None => {
                assert_eq!(scode, 0, "{what}: {sout} {serr}");
                assert_eq!(rcode, 0, "{what}: {rout} {rerr}");
                assert_eq!(
                    std::fs::read(out.join("model.bin")).unwrap(),
                    std::fs::read(&file).unwrap()
                );
            }
        }
    }
    // --sign needs a signing key file, --trust a public one: clear errors.
    let (code, _, err) = Proc::spawn(
        "rmcast",
        rmcast()
            .args(["send", file.to_str().unwrap(), "--receivers", "1", "--key"])
            .arg(key)
            .arg("--sign")
            .arg(key),
    )
    .wait(Duration::from_secs(10));
    assert_ne!(code, 0);
    assert!(err.contains("not a signing key file"), "{err}");
}
