//! `--laggard tcp` over loopback: one receiver stores at a fraction of the
//! group's rate (the store-rate test knob: a slow disk). The sender moves
//! it to a TCP catch-up; the others finish at the group's pace, and the
//! slow one still gets a byte-exact, verified copy. Plain and keyed. Every
//! test is bounded in time.

use rmcast::{GroupKey, Laggard, RecvConfig, RecvReport, SendConfig, SendReport, SenderConfig};
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::bounded;

const SLOW: usize = 2;

fn data(size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u8).wrapping_mul(29) ^ (i >> 9) as u8)
        .collect()
}

struct Session {
    report: SendReport,
    receivers: Vec<Result<(RecvReport, Vec<u8>), String>>,
    data: Vec<u8>,
}

fn run(key: Option<Arc<GroupKey>>, laggard: Laggard, size: usize) -> Session {
    let group = rmcast::random_group();
    let payload = data(size);
    let cfg = SendConfig {
        group,
        proto: SenderConfig {
            receivers: 4,
            join_wait: Duration::from_secs(15),
            group_key: key.clone(),
            rate_bits_per_s: Some(100_000_000),
            laggard,
            ..SenderConfig::default()
        },
        ..SendConfig::default()
    };
    let mut handles = Vec::new();
    for i in 0..4 {
        let rc = RecvConfig {
            group,
            name: format!("r{i}"),
            listen_timeout: Some(Duration::from_secs(15)),
            group_key: key.clone(),
            // 1.5 MB/s against the group's 12.5 MB/s.
            store_rate: (i == SLOW).then_some(1_500_000),
            ..RecvConfig::default()
        };
        handles.push(std::thread::spawn(move || {
            rmcast::recv_to_memory(&rc, None)
                .map(|(r, bytes)| (r, bytes.to_vec()))
                .map_err(|e| e.to_string())
        }));
    }
    let sent = payload.clone();
    let report = rmcast::send_bytes("obj.bin", &sent, &cfg, None).expect("the session runs");
    let receivers = handles.into_iter().map(|h| h.join().unwrap()).collect();
    Session {
        report,
        receivers,
        data: payload,
    }
}

fn tcp() -> Laggard {
    Laggard::Tcp {
        after: Duration::from_millis(300),
        port: 0,
    }
}

/// Everyone verified a byte-exact copy; only the slow one caught up over
/// TCP, and the others did not wait for it.
fn check(s: &Session) {
    let r = &s.report;
    assert!(
        r.ok,
        "{r:#?}\n{:#?}",
        s.receivers
            .iter()
            .map(|x| x.as_ref().map(|(r, _)| r))
            .collect::<Vec<_>>()
    );
    assert_eq!(r.verified, 4);
    let moved: Vec<&str> = (r.members.iter())
        .filter(|m| m.caught_up_from.is_some())
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(moved, [format!("r{SLOW}")], "{:#?}", r.members);
    let json = r.to_json();
    assert_eq!(json["caught_up"][0]["name"], format!("r{SLOW}"));
    assert_eq!(json["caught_up"][0]["verified"], true);
    let mut fast = 0f64;
    let mut slow = 0f64;
    for (i, got) in s.receivers.iter().enumerate() {
        let (rep, bytes) = got.as_ref().unwrap_or_else(|e| panic!("r{i}: {e}"));
        assert!(rep.verified, "r{i}");
        assert!(*bytes == s.data, "r{i}: the copy differs");
        // The group's verdict reached every receiver, the one that caught
        // up over TCP too (`rmcast bcast` exits by it).
        assert_eq!(rep.group, Some(Ok(())), "r{i}");
        if i == SLOW {
            slow = rep.seconds;
        } else {
            fast = fast.max(rep.seconds);
        }
    }
    eprintln!(
        "the 3 fast receivers verified within {fast:.2} s, the slow one (caught up over \
         TCP) in {slow:.2} s; the session took {:.2} s",
        r.seconds
    );
    assert!(
        fast < slow / 2.0,
        "the group waited for the slow receiver: fast {fast:.2} s, slow {slow:.2} s"
    );
}

#[test]
fn a_slow_receiver_catches_up_over_tcp_and_the_group_goes_on() {
    bounded(Duration::from_secs(60), || {
        check(&run(None, tcp(), 6_000_000));
    });
}

#[test]
fn a_keyed_catch_up_is_sealed_and_verifies() {
    bounded(Duration::from_secs(60), || {
        let key = Arc::new(GroupKey::from_secret([0x3c; 32]));
        check(&run(Some(key), tcp(), 6_000_000));
    });
}

#[test]
fn a_catch_up_reports_its_progress_and_ctrl_c_ends_it_leaving_no_partial_file() {
    bounded(Duration::from_secs(60), || {
        let group = rmcast::random_group();
        let payload = data(6_000_000);
        let dir = std::env::temp_dir().join(format!("rmcast-laggard-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cfg = SendConfig {
            group,
            proto: SenderConfig {
                receivers: 2,
                join_wait: Duration::from_secs(15),
                rate_bits_per_s: Some(100_000_000),
                laggard: tcp(),
                ..SenderConfig::default()
            },
            ..SendConfig::default()
        };
        let fast = std::thread::spawn(move || {
            let rc = RecvConfig {
                group,
                name: "fast".into(),
                listen_timeout: Some(Duration::from_secs(15)),
                ..RecvConfig::default()
            };
            rmcast::recv_to_memory(&rc, None).map(|(r, _)| r)
        });
        let (slow_dir, stop) = (dir.clone(), cancel.clone());
        let slow = std::thread::spawn(move || {
            let rc = RecvConfig {
                group,
                name: "slow".into(),
                out_dir: slow_dir,
                listen_timeout: Some(Duration::from_secs(15)),
                store_rate: Some(1_000_000),
                cancel: Some(stop.clone()),
                ..RecvConfig::default()
            };
            let mut seen: Vec<(u64, &'static str)> = Vec::new();
            let mut on_progress = |p: rmcast::Progress| {
                if p.phase == "catching up over TCP" {
                    seen.push((p.done_bytes, p.phase));
                    if seen.len() == 3 {
                        // Interrupted mid-way through its catch-up.
                        stop.store(true, std::sync::atomic::Ordering::Release);
                    }
                }
            };
            let r = rmcast::recv_to_dir(&rc, Some(&mut on_progress));
            (r, seen)
        });
        let report = rmcast::send_bytes("obj.bin", &payload, &cfg, None).expect("the session runs");
        let fast = fast.join().unwrap().expect("the fast receiver verifies");
        assert!(fast.verified);
        let (slow, seen) = slow.join().unwrap();
        assert!(
            matches!(slow, Err(rmcast::Error::Cancelled)),
            "the interrupted catch-up: {slow:?}"
        );
        assert!(seen.len() >= 3, "progress while catching up: {seen:?}");
        assert!(
            seen.windows(2).all(|w| w[0].0 <= w[1].0) && seen[0].0 < seen[seen.len() - 1].0,
            "the bytes grow: {seen:?}"
        );
        assert!(!report.ok, "{report:#?}");
        let m = (report.members.iter())
            .find(|m| m.name == "slow")
            .expect("the slow receiver joined");
        assert!(m.caught_up_from.is_some() && !m.verified, "{m:?}");
        // Its Leave says why (or, had it been lost, the catch-up's end).
        let why = m.reason.as_deref().unwrap_or("");
        assert!(
            why.contains("interrupted") || why.contains("catch-up"),
            "{why}"
        );
        let left: Vec<_> = std::fs::read_dir(&dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "files left behind: {left:?}");
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn a_directory_tree_caught_up_over_tcp_is_stored_whole() {
    bounded(Duration::from_secs(60), || {
        let root = std::env::temp_dir().join(format!("rmcast-laggard-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let src = root.join("src/ckpt");
        std::fs::create_dir_all(src.join("shards")).unwrap();
        for (i, size) in [1_500_000usize, 700_000, 1].iter().enumerate() {
            let bytes: Vec<u8> = data(*size).iter().map(|b| b ^ i as u8).collect();
            std::fs::write(src.join("shards").join(format!("s{i}.bin")), bytes).unwrap();
        }
        std::fs::write(src.join("meta.json"), b"{\"step\": 7}").unwrap();
        let group = rmcast::random_group();
        let cfg = SendConfig {
            group,
            proto: SenderConfig {
                receivers: 3,
                join_wait: Duration::from_secs(15),
                rate_bits_per_s: Some(100_000_000),
                laggard: tcp(),
                ..SenderConfig::default()
            },
            ..SendConfig::default()
        };
        let handles: Vec<_> = (0..3)
            .map(|i| {
                let out = root.join(format!("r{i}"));
                std::thread::spawn(move || {
                    let rc = RecvConfig {
                        group,
                        name: format!("r{i}"),
                        out_dir: out,
                        listen_timeout: Some(Duration::from_secs(15)),
                        store_rate: (i == 2).then_some(1_000_000),
                        ..RecvConfig::default()
                    };
                    rmcast::recv_to_dir(&rc, None)
                })
            })
            .collect();
        let report = rmcast::send_path(&src, &cfg, None).expect("the session runs");
        assert!(report.ok, "{report:#?}");
        let moved: Vec<&str> = (report.members.iter())
            .filter(|m| m.caught_up_from.is_some())
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(moved, ["r2"], "{:#?}", report.members);
        for (i, h) in handles.into_iter().enumerate() {
            let r = h.join().unwrap().unwrap_or_else(|e| panic!("r{i}: {e}"));
            assert!(r.verified, "r{i}");
            let got = root.join(format!("r{i}/ckpt"));
            for f in [
                "shards/s0.bin",
                "shards/s1.bin",
                "shards/s2.bin",
                "meta.json",
            ] {
                let (a, b) = (
                    std::fs::read(src.join(f)).unwrap(),
                    std::fs::read(got.join(f)),
                );
                assert!(b.is_ok_and(|b| b == a), "r{i}: {f} differs or is missing");
            }
        }
        let _ = std::fs::remove_dir_all(&root);
    });
}
