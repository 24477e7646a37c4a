//! Relays over loopback multicast: a session cascaded through two relays
//! into three groups, byte-exact under loss; a failure behind a relay
//! named in the sender's report; a relay that stops half-way named, and
//! the receivers behind it failing cleanly. Every test uses its own random
//! group ports and finishes within a bounded time.

use rmcast::{RecvConfig, RelayConfig, SendConfig, random_group, recv_to_dir, relay, send_bytes};
use std::net::SocketAddrV4;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::bounded;

fn object(size: usize) -> Vec<u8> {
    (0..size as u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9) >> 13) as u8)
        .collect()
}

fn send_config(group: SocketAddrV4, receivers: u16, loss: f64) -> SendConfig {
    let mut c = SendConfig {
        group,
        loss,
        ..SendConfig::default()
    };
    c.proto.receivers = receivers;
    c.proto.join_wait = Duration::from_secs(10);
    c
}

fn recv_config(group: SocketAddrV4, name: &str, out_dir: &Path) -> RecvConfig {
    RecvConfig {
        group,
        name: name.into(),
        out_dir: out_dir.to_path_buf(),
        listen_timeout: Some(Duration::from_secs(15)),
        sender_timeout: Duration::from_secs(5),
        ..RecvConfig::default()
    }
}

fn relay_config(from: SocketAddrV4, to: SocketAddrV4, name: &str, receivers: u16) -> RelayConfig {
    RelayConfig {
        upstream: recv_config(from, name, Path::new(".")),
        keep: false,
        downstream: send_config(to, receivers, 0.0),
    }
}

/// Another random group than `others`.
fn group_besides(others: &[SocketAddrV4]) -> SocketAddrV4 {
    loop {
        let g = random_group();
        if !others.iter().any(|o| o.port() == g.port()) {
            return g;
        }
    }
}

#[test]
fn a_session_cascaded_through_two_relays_is_byte_exact_under_loss() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    let data = object(3 << 20);
    let (sent, relays, received) = bounded(Duration::from_secs(90), move || {
        let a = random_group();
        let b = group_besides(&[a]);
        let c = group_besides(&[a, b]);
        let mut receivers = Vec::new();
        // Group A: one receiver and relay 1; group B: two receivers and
        // relay 2; group C: two receivers.
        for (group, name) in [(a, "a1"), (b, "b1"), (b, "b2"), (c, "c1"), (c, "c2")] {
            let mut rc = recv_config(group, name, &root.join(name));
            rc.loss = 0.02;
            rc.seed = u64::from(name.as_bytes()[1]);
            receivers.push(std::thread::spawn(move || recv_to_dir(&rc, None)));
        }
        let mut r2 = relay_config(b, c, "relay2", 2);
        r2.upstream.loss = 0.02;
        r2.downstream.loss = 0.02;
        let mut r1 = relay_config(a, b, "relay1", 3);
        r1.upstream.loss = 0.02;
        r1.downstream.loss = 0.02;
        let relays = [r1, r2].map(|cfg| std::thread::spawn(move || relay(&cfg, None)));
        let sc = send_config(a, 2, 0.02);
        let sent = send_bytes("cascade.bin", &object(3 << 20), &sc, None).expect("send runs");
        let relays: Vec<_> = relays.into_iter().map(|h| h.join().unwrap()).collect();
        let received: Vec<_> = receivers.into_iter().map(|h| h.join().unwrap()).collect();
        (sent, relays, received)
    });
    assert!(sent.ok, "{sent:#?}");
    assert_eq!(sent.verified, 2, "the direct receiver and relay 1");
    for r in relays {
        let r = r.expect("the relay got a verified copy");
        assert!(r.ok, "{r:#?}");
        assert!(r.upstream.verified);
        let down = r.downstream.expect("forwarded");
        assert!(down.ok, "{down:#?}");
        assert!(
            down.retransmitted_packets + down.stats.parity_packets > 0,
            "2 % loss downstream is repaired by the relay: {down:#?}"
        );
    }
    for (name, r) in ["a1", "b1", "b2", "c1", "c2"].iter().zip(received) {
        let r = r.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(r.verified, "{name}");
        let got = std::fs::read(dir.path().join(name).join("cascade.bin")).unwrap();
        assert!(got == data, "{name}: the copy differs");
    }
}

#[test]
fn a_receiver_failing_behind_a_relay_is_named_in_the_senders_report() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    let (sent, relayed, received) = bounded(Duration::from_secs(60), move || {
        let a = random_group();
        let b = group_besides(&[a]);
        let ok = recv_config(b, "fine", &root.join("fine"));
        let mut small = recv_config(b, "small-disk", &root.join("small"));
        small.max_bytes = Some(1000);
        let received = [ok, small].map(|rc| std::thread::spawn(move || recv_to_dir(&rc, None)));
        let cfg = relay_config(a, b, "relay-b", 2);
        let relayed = std::thread::spawn(move || relay(&cfg, None));
        let sc = send_config(a, 1, 0.0);
        let sent = send_bytes("big.bin", &object(1 << 20), &sc, None).expect("send runs");
        let received: Vec<_> = received.into_iter().map(|h| h.join().unwrap()).collect();
        (sent, relayed.join().unwrap(), received)
    });
    assert!(!sent.ok);
    let member = &sent.members[0];
    assert_eq!(member.name, "relay-b");
    assert!(!member.verified);
    let reason = member.reason.as_deref().unwrap_or("");
    assert!(reason.contains("relay \"relay-b\""), "{reason}");
    assert!(reason.contains("\"small-disk\""), "{reason}");
    assert!(reason.contains("1 of 2 receivers behind it"), "{reason}");
    // The relay says the same, and the receiver that could take the object
    // was told the group failed rather than left hanging.
    let relayed = relayed.expect("the relay ran");
    assert!(!relayed.ok);
    assert!(
        relayed
            .error
            .as_deref()
            .unwrap_or("")
            .contains("small-disk"),
        "{relayed:#?}"
    );
    assert!(received[1].is_err(), "the small disk refused");
}

#[test]
fn a_relay_stopped_half_way_is_named_and_its_receivers_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    let (sent, took, received) = bounded(Duration::from_secs(60), move || {
        let a = random_group();
        let b = group_besides(&[a]);
        let direct = recv_config(a, "direct", &root.join("direct"));
        let direct = std::thread::spawn(move || recv_to_dir(&direct, None));
        let behind: Vec<_> = ["b1", "b2"]
            .map(|name| {
                let rc = recv_config(b, name, &root.join(name));
                std::thread::spawn(move || recv_to_dir(&rc, None))
            })
            .into_iter()
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let mut cfg = relay_config(a, b, "relay-b", 2);
        cfg.upstream.cancel = Some(stop.clone());
        let relayed = std::thread::spawn(move || relay(&cfg, None));
        // 8 MiB at 40 Mbit/s: about 1.7 s; the relay stops after 0.6 s.
        let mut sc = send_config(a, 2, 0.0);
        sc.proto.rate_bits_per_s = Some(40_000_000);
        let sender =
            std::thread::spawn(move || send_bytes("half.bin", &object(8 << 20), &sc, None));
        std::thread::sleep(Duration::from_millis(600));
        let stopped = Instant::now();
        stop.store(true, Ordering::SeqCst);
        let sent = sender.join().unwrap().expect("send runs");
        let took = stopped.elapsed();
        let _ = relayed.join().unwrap();
        let received: Vec<_> = std::iter::once(direct)
            .chain(behind)
            .map(|h| h.join().unwrap())
            .collect();
        (sent, took, received)
    });
    assert!(!sent.ok);
    let relay = sent.members.iter().find(|m| m.name == "relay-b").unwrap();
    assert!(!relay.verified, "{sent:#?}");
    let reason = relay.reason.as_deref().unwrap_or("");
    assert!(
        reason.contains("2 receivers behind it, unserved: b"),
        "{reason}"
    );
    let direct = sent.members.iter().find(|m| m.name == "direct").unwrap();
    assert!(direct.verified, "the others complete: {sent:#?}");
    assert!(
        took < Duration::from_secs(10),
        "the sender ended {took:?} after the stop"
    );
    assert!(received[0].as_ref().is_ok_and(|r| r.verified));
    for r in &received[1..] {
        let e = r.as_ref().expect_err("behind a relay that stopped");
        let text = e.to_string();
        assert!(text.contains("upstream"), "{text}");
    }
}

#[test]
fn a_directory_tree_crosses_a_relay_that_keeps_a_copy_and_is_refused_by_one_that_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("a.txt"), b"hello").unwrap();
    std::fs::write(src.join("sub/b.bin"), object(300_000)).unwrap();
    let root = dir.path().to_owned();
    for keep in [true, false] {
        let root_t = root.clone();
        let (sent, received) = bounded(Duration::from_secs(60), move || {
            let root = root_t;
            let a = random_group();
            let b = group_besides(&[a]);
            let out = root.join(format!("behind-{keep}"));
            let mut rc = recv_config(b, "b1", &out);
            if !keep {
                // Nothing will be announced behind a relay that refused.
                rc.listen_timeout = Some(Duration::from_secs(3));
            }
            let received = std::thread::spawn(move || recv_to_dir(&rc, None));
            let mut cfg = relay_config(a, b, "relay-b", 1);
            cfg.keep = keep;
            cfg.upstream.out_dir = root.join("relay-copy");
            let relayed = std::thread::spawn(move || relay(&cfg, None));
            let sc = send_config(a, 1, 0.0);
            let sent = rmcast::send_path(&root.join("src"), &sc, None).expect("send runs");
            let _ = relayed.join().unwrap();
            (sent, received.join().unwrap())
        });
        if keep {
            assert!(sent.ok, "{sent:#?}");
            received.expect("the tree arrived behind the relay");
            for rel in ["a.txt", "sub/b.bin"] {
                let want = std::fs::read(src.join(rel)).unwrap();
                let behind = root.join("behind-true/src").join(rel);
                assert!(std::fs::read(&behind).unwrap() == want, "{rel}");
                let kept = root.join("relay-copy/src").join(rel);
                assert!(std::fs::read(&kept).unwrap() == want, "{rel}");
            }
        } else {
            assert!(!sent.ok);
            let reason = sent.members[0].reason.as_deref().unwrap_or("");
            assert!(reason.contains("--out DIR"), "{reason}");
            assert!(received.is_err());
        }
    }
}
