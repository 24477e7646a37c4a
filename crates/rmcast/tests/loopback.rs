//! End-to-end transfers over loopback multicast. Every test uses its own
//! random group port and finishes within a bounded time.

use rmcast::{
    DemoConfig, Error, ProtocolId, RecvConfig, SendConfig, demo, random_group, recv_to_dir,
    recv_to_vec, send_bytes,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::bounded;

fn send_config(receivers: u16) -> SendConfig {
    let mut c = SendConfig {
        group: random_group(),
        ..SendConfig::default()
    };
    c.proto.receivers = receivers;
    c.proto.join_wait = Duration::from_secs(10);
    c
}

fn recv_config(send: &SendConfig, name: &str, out_dir: &std::path::Path) -> RecvConfig {
    RecvConfig {
        group: send.group,
        name: name.into(),
        out_dir: out_dir.to_path_buf(),
        listen_timeout: Some(Duration::from_secs(10)),
        sender_timeout: Duration::from_secs(5),
        ..RecvConfig::default()
    }
}

fn demo_with_loss(protocol: ProtocolId) {
    let report = bounded(Duration::from_secs(60), move || {
        let mut cfg = DemoConfig {
            receivers: 4,
            size: 4 << 20,
            seed: 42,
            loss: 0.05,
            ..DemoConfig::default()
        };
        cfg.send.proto.protocol = protocol;
        cfg.send.proto.join_wait = Duration::from_secs(10);
        demo(&cfg, None).expect("demo runs")
    });
    assert!(report.send.ok, "{:#?}", report.send);
    assert_eq!(report.send.verified, 4);
    assert!(report.all_files_match, "{:#?}", report.receivers);
    assert!(
        report.send.retransmitted_packets > 0,
        "5 % loss must cause repairs"
    );
    for r in &report.receivers {
        let r = r.as_ref().expect("receiver succeeded");
        assert!(r.verified);
        assert!(r.test_dropped_packets > 0);
    }
}

#[test]
fn demo_ack_four_receivers_with_five_percent_loss_delivers_identical_files() {
    demo_with_loss(ProtocolId::Ack);
}

#[test]
fn demo_nak_poll_four_receivers_with_five_percent_loss_delivers_identical_files() {
    demo_with_loss(ProtocolId::NakPoll);
}

#[test]
fn demo_delivers_zero_byte_and_one_byte_objects() {
    for size in [0, 1] {
        let report = bounded(Duration::from_secs(30), move || {
            let mut cfg = DemoConfig {
                receivers: 2,
                size,
                ..DemoConfig::default()
            };
            cfg.send.proto.join_wait = Duration::from_secs(10);
            demo(&cfg, None).expect("demo runs")
        });
        assert!(report.send.ok, "size {size}: {:#?}", report.send);
        assert_eq!(report.send.verified, 2);
        assert_eq!(report.send.bytes, size);
        assert!(report.all_files_match, "size {size}");
    }
}

#[test]
fn one_byte_object_received_into_memory() {
    let (sent, received) = bounded(Duration::from_secs(30), || {
        let sc = send_config(1);
        let rc = recv_config(&sc, "mem", std::path::Path::new("."));
        let h = std::thread::spawn(move || recv_to_vec(&rc, None));
        let sent = send_bytes("one.bin", &[0xA5], &sc, None).expect("send runs");
        (sent, h.join().unwrap())
    });
    assert!(sent.ok);
    let (report, bytes) = received.expect("received");
    assert_eq!(bytes, vec![0xA5]);
    assert!(report.verified && report.path.is_none());
}

#[test]
fn nested_names_create_subdirectories_under_the_output_dir() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_path_buf();
    let (sent, received) = bounded(Duration::from_secs(30), move || {
        let sc = send_config(1);
        let rc = recv_config(&sc, "nested", &out);
        let h = std::thread::spawn(move || recv_to_dir(&rc, None));
        let sent = send_bytes("a/b.bin", b"nested", &sc, None).expect("send runs");
        (sent, h.join().unwrap())
    });
    assert!(sent.ok, "{sent:#?}");
    let report = received.expect("received");
    assert_eq!(
        report.path.as_deref(),
        Some(dir.path().join("a/b.bin").as_path())
    );
    assert_eq!(
        std::fs::read(dir.path().join("a/b.bin")).unwrap(),
        b"nested"
    );
    // No partial file is left next to it.
    let left: Vec<_> = std::fs::read_dir(dir.path().join("a")).unwrap().collect();
    assert_eq!(left.len(), 1);
}

#[test]
fn receiver_refuses_an_unsafe_name_and_the_sender_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let out2 = out.clone();
    let (sent, received) = bounded(Duration::from_secs(30), move || {
        let sc = send_config(1);
        let rc = recv_config(&sc, "careful", &out2);
        let h = std::thread::spawn(move || recv_to_dir(&rc, None));
        let sent = send_bytes("../evil", b"should never land", &sc, None).expect("send runs");
        (sent, h.join().unwrap())
    });
    assert!(!sent.ok);
    assert_eq!(sent.verified, 0);
    let m = &sent.members[0];
    assert_eq!(m.name, "careful");
    assert!(!m.verified);
    let reason = m.reason.as_deref().unwrap_or_default();
    assert!(
        reason.contains("refused") && reason.contains("unsafe"),
        "{reason}"
    );
    assert!(matches!(received, Err(Error::Refused(_))), "{received:?}");
    assert!(!dir.path().join("evil").exists());
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        0,
        "out dir not empty"
    );
}

#[test]
fn cancelled_receiver_is_named_in_a_failed_report() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_path_buf();
    let (sent, steady, quitter) = bounded(Duration::from_secs(15), move || {
        let mut sc = send_config(2);
        sc.proto.peer_timeout = Duration::from_millis(1500);
        // Slow enough (about 1.7 s) that the cancel lands mid-transfer.
        sc.proto.rate_bits_per_s = Some(40_000_000);
        let steady_cfg = recv_config(&sc, "steady", &out.join("steady"));
        let cancel = Arc::new(AtomicBool::new(false));
        let quitter_cfg = RecvConfig {
            cancel: Some(cancel.clone()),
            ..recv_config(&sc, "quitter", &out.join("quitter"))
        };
        let steady = std::thread::spawn(move || recv_to_dir(&steady_cfg, None));
        let quitter = std::thread::spawn(move || {
            let mut on_progress = |p: rmcast::Progress| {
                if p.done_bytes > 0 && p.done_bytes < p.total_bytes {
                    cancel.store(true, Ordering::Relaxed);
                }
            };
            recv_to_dir(&quitter_cfg, Some(&mut on_progress))
        });
        let data: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
        let sent = send_bytes("big.bin", &data, &sc, None).expect("send runs");
        (sent, steady.join().unwrap(), quitter.join().unwrap())
    });
    assert!(started.elapsed() < Duration::from_secs(15));
    assert!(!sent.ok);
    assert_eq!(sent.verified, 1);
    let q = sent.members.iter().find(|m| m.name == "quitter").unwrap();
    assert!(!q.verified);
    assert!(q.reason.is_some(), "{q:?}");
    assert!(steady.expect("steady receiver verified").verified);
    assert!(matches!(quitter, Err(Error::Cancelled)), "{quitter:?}");
    let left = std::fs::read_dir(dir.path().join("quitter"))
        .unwrap()
        .count();
    assert_eq!(left, 0, "the cancelled receiver left a partial file");
}

#[test]
fn non_multicast_group_is_a_config_error() {
    let sc = SendConfig {
        group: "127.0.0.1:7700".parse().unwrap(),
        ..SendConfig::default()
    };
    let e = send_bytes("x", b"x", &sc, None).unwrap_err();
    assert!(e.to_string().contains("not a multicast address"), "{e}");
}

#[test]
fn cancelled_sender_says_goodbye_and_receivers_clean_up() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_path_buf();
    let (sent, received) = bounded(Duration::from_secs(15), move || {
        let cancel = Arc::new(AtomicBool::new(false));
        let mut sc = send_config(1);
        sc.proto.rate_bits_per_s = Some(40_000_000);
        sc.cancel = Some(cancel.clone());
        let rc = recv_config(&sc, "left-behind", &out);
        let h = std::thread::spawn(move || recv_to_dir(&rc, None));
        let mut on_progress = |p: rmcast::Progress| {
            if p.done_bytes > 0 {
                cancel.store(true, Ordering::Relaxed);
            }
        };
        let data = vec![7u8; 8 << 20];
        let sent = send_bytes("big.bin", &data, &sc, Some(&mut on_progress));
        (sent, h.join().unwrap())
    });
    assert!(matches!(sent, Err(Error::Cancelled)), "{sent:?}");
    match received {
        Err(Error::Failed(reason)) => assert!(reason.contains("interrupted"), "{reason}"),
        other => panic!("receiver should fail, got {other:?}"),
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "partial file left"
    );
}

/// `recv_to_memory`: the object arrives into an anonymous in-memory file
/// and is handed over mapped, writable, byte-exact; an empty object too.
#[test]
fn an_object_received_into_mapped_memory_is_byte_exact_and_writable() {
    for size in [0usize, 1, 3_000_000] {
        let data: Vec<u8> = (0..size).map(|i| (i * 7 + i / 991) as u8).collect();
        let send = send_config(1);
        let rc = RecvConfig {
            group: send.group,
            listen_timeout: Some(Duration::from_secs(10)),
            ..RecvConfig::default()
        };
        let (report, mut got) = bounded(Duration::from_secs(30), move || {
            let r = std::thread::spawn(move || rmcast::recv_to_memory(&rc, None));
            let sent = send_bytes("m.bin", &data, &send, None).unwrap();
            assert!(sent.ok, "{size}: {:?}", sent.error);
            let (report, got) = r.join().unwrap().unwrap();
            assert_eq!(&got[..], &data[..], "{size}");
            (report, got)
        });
        assert!(report.verified && report.path.is_none());
        assert_eq!(got.len(), size);
        if size > 0 {
            got[0] ^= 0xFF; // writable
        }
    }
}
