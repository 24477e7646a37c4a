//! Keyed overlays over loopback TCP: every connection sealed under the
//! group key. Byte-exact delivery, and the refusals: another key, no key,
//! an outsider, a tampered byte. Every test finishes within a bounded time.

use rmcast::overlay::{
    self, GroupKey, OverlayDemoConfig, OverlayRecvConfig, OverlaySendConfig, OverlaySender,
    OverlayShape,
};
use rmcast::{Error, RecvReport};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::bounded;

fn key(b: u8) -> Arc<GroupKey> {
    Arc::new(GroupKey::from_secret([b; 32]))
}

fn send_config(
    shape: OverlayShape,
    receivers: u16,
    key: Option<Arc<GroupKey>>,
) -> OverlaySendConfig {
    OverlaySendConfig {
        shape,
        receivers,
        control: "127.0.0.1:0".parse().unwrap(),
        join_wait: Duration::from_secs(10),
        key,
        ..OverlaySendConfig::default()
    }
}

fn spawn_receiver(
    control: SocketAddr,
    root: &Path,
    name: &str,
    key: Option<Arc<GroupKey>>,
) -> std::thread::JoinHandle<Result<RecvReport, Error>> {
    let rc = OverlayRecvConfig {
        sender: control,
        out_dir: root.join(name),
        name: name.to_owned(),
        connect_timeout: Some(Duration::from_secs(10)),
        key,
        ..OverlayRecvConfig::default()
    };
    std::thread::spawn(move || overlay::recv_to_dir(&rc, None))
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len as u32).map(|i| (i * 131 + i / 251) as u8).collect()
}

#[test]
fn keyed_overlays_deliver_byte_exact() {
    bounded(Duration::from_secs(90), || {
        let k = key(1);
        for shape in [
            OverlayShape::Pipeline,
            OverlayShape::Chain,
            OverlayShape::Bintree,
            OverlayShape::Binomial,
            OverlayShape::Tree { fanout: 2 },
            OverlayShape::Direct,
        ] {
            for (n, size, seg) in [
                (1u16, 0u64, 8192u32),
                (3, 1, 8192),
                (3, 8191, 8192),
                (5, 8193, 8192),
                (7, 1_000_003, 1000),
                (4, 3_000_000, 64 << 10),
            ] {
                let mut cfg = OverlayDemoConfig {
                    receivers: n,
                    size,
                    seed: size ^ u64::from(n),
                    send: send_config(shape, n, Some(k.clone())),
                    keep_dir: None,
                };
                cfg.send.segment_size = Some(seg);
                let r = overlay::demo(&cfg, None).expect("demo runs");
                let what = format!("{shape} n={n} size={size} seg={seg}");
                assert!(r.send.ok, "{what}: {:#?} {:#?}", r.send, r.receivers);
                assert_eq!(r.send.verified, usize::from(n), "{what}");
                assert!(r.all_files_match, "{what}");
            }
        }
    });
}

#[test]
fn a_receiver_with_the_wrong_key_is_named_and_the_others_fail_saying_so() {
    let (report, results) = bounded(Duration::from_secs(20), || {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = send_config(OverlayShape::Chain, 3, Some(key(1)));
        cfg.join_wait = Duration::from_secs(2);
        let sender = OverlaySender::bind(&cfg).unwrap();
        let control = sender.local_addr().unwrap();
        let handles = vec![
            spawn_receiver(control, dir.path(), "a", Some(key(1))),
            spawn_receiver(control, dir.path(), "intruder", Some(key(2))),
            spawn_receiver(control, dir.path(), "c", Some(key(1))),
        ];
        let report = sender.send_bytes("x.bin", &pattern(100_000), None).unwrap();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (report, results)
    });
    assert!(!report.ok);
    let error = report.error.unwrap();
    assert!(error.contains("only 2 of 3"), "{error}");
    assert!(
        error.contains("failed authentication — wrong group key?")
            && error.contains("connection from 127.0.0.1:"),
        "{error}"
    );
    // The intruder hears why at once; the others from the sender's abort.
    match &results[1] {
        Err(Error::Failed(t)) => assert!(t.contains("wrong group key"), "{t}"),
        other => panic!("the intruder should have failed: {other:?}"),
    }
    for i in [0, 2] {
        match &results[i] {
            Err(Error::Failed(t)) => assert!(t.contains("wrong group key"), "{t}"),
            other => panic!("receiver {i} should have failed: {other:?}"),
        }
    }
}

#[test]
fn a_receiver_with_the_wrong_key_leaves_a_full_session_alone() {
    let (report, results, dir) = bounded(Duration::from_secs(20), || {
        let dir = tempfile::tempdir().unwrap();
        let cfg = send_config(OverlayShape::Chain, 2, Some(key(1)));
        let sender = OverlaySender::bind(&cfg).unwrap();
        let control = sender.local_addr().unwrap();
        let sending =
            std::thread::spawn(move || sender.send_bytes("y.bin", &pattern(500_000), None));
        // The intruder comes first: the session must not count it.
        let intruder = spawn_receiver(control, dir.path(), "intruder", Some(key(3)));
        let intruder = intruder.join().unwrap();
        let handles = vec![
            spawn_receiver(control, dir.path(), "a", Some(key(1))),
            spawn_receiver(control, dir.path(), "b", Some(key(1))),
        ];
        let report = sending.join().unwrap().unwrap();
        let mut results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        results.push(intruder);
        (report, results, dir)
    });
    assert!(report.ok, "{report:#?}");
    assert_eq!(report.verified, 2);
    for name in ["a", "b"] {
        assert_eq!(
            std::fs::read(dir.path().join(name).join("y.bin")).unwrap(),
            pattern(500_000),
            "{name}"
        );
    }
    match &results[2] {
        Err(Error::Failed(t)) => assert!(t.contains("wrong group key"), "{t}"),
        other => panic!("the intruder should have failed: {other:?}"),
    }
    assert!(!dir.path().join("intruder").join("y.bin").exists());
}

/// A keyed and a keyless side refuse each other at once, each saying which
/// side lacks the key: no hang, no timeout.
#[test]
fn keyed_and_keyless_sides_refuse_each_other_with_the_cause() {
    for sender_keyed in [true, false] {
        let (report, result, took) = bounded(Duration::from_secs(20), move || {
            let dir = tempfile::tempdir().unwrap();
            let (skey, rkey) = if sender_keyed {
                (Some(key(1)), None)
            } else {
                (None, Some(key(1)))
            };
            let mut cfg = send_config(OverlayShape::Bintree, 1, skey);
            cfg.join_wait = Duration::from_secs(3);
            let sender = OverlaySender::bind(&cfg).unwrap();
            let control = sender.local_addr().unwrap();
            let sending = std::thread::spawn(move || sender.send_bytes("z.bin", b"zzz", None));
            let started = Instant::now();
            let handle = spawn_receiver(control, dir.path(), "r", rkey);
            let result = handle.join().unwrap();
            let took = started.elapsed();
            let report = sending.join().unwrap().unwrap();
            (report, result, took)
        });
        let what = if sender_keyed {
            "keyed sender"
        } else {
            "keyless sender"
        };
        assert!(
            took < Duration::from_secs(2),
            "{what}: the receiver took {took:?}"
        );
        let text = match result {
            Err(Error::Failed(t)) => t,
            other => panic!("{what}: the receiver should have failed: {other:?}"),
        };
        let error = report.error.unwrap();
        if sender_keyed {
            assert!(text.contains("requires a group key"), "{what}: {text}");
            assert!(error.contains("sent plain frames"), "{what}: {error}");
        } else {
            assert!(text.contains("runs without a group key"), "{what}: {text}");
            assert!(error.contains("seals its frames"), "{what}: {error}");
        }
    }
}

/// Forwards a connection both ways, flipping one bit of the byte at
/// `flip_at` of the direction towards the connecting side.
fn tampering_proxy(target: SocketAddr, flip_at: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let Ok((client, _)) = listener.accept() else {
            return;
        };
        let server = TcpStream::connect(target).unwrap();
        let pipe = |mut from: TcpStream, mut to: TcpStream, flip: Option<usize>| {
            std::thread::spawn(move || {
                from.set_read_timeout(Some(Duration::from_secs(15)))
                    .unwrap();
                let mut buf = [0u8; 4096];
                let mut seen = 0usize;
                loop {
                    let n = match from.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if let Some(at) = flip
                        && (seen..seen + n).contains(&at)
                    {
                        buf[at - seen] ^= 0x10;
                    }
                    seen += n;
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = to.shutdown(std::net::Shutdown::Both);
            })
        };
        let a = pipe(
            client.try_clone().unwrap(),
            server.try_clone().unwrap(),
            None,
        );
        let b = pipe(server, client, Some(flip_at));
        let _ = (a.join(), b.join());
    });
    addr
}

/// A byte changed on the path (inside the first sealed frame after the
/// hellos, the assignment) is detected: the receiver drops the connection
/// and says so; nothing of the object is stored.
#[test]
fn a_byte_changed_on_the_path_fails_authentication() {
    let (report, result, dir) = bounded(Duration::from_secs(20), || {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = send_config(OverlayShape::Chain, 1, Some(key(1)));
        cfg.join_wait = Duration::from_secs(3);
        let sender = OverlaySender::bind(&cfg).unwrap();
        let proxy = tampering_proxy(sender.local_addr().unwrap(), 51 + 20);
        let handle = spawn_receiver(proxy, dir.path(), "r", Some(key(1)));
        let report = sender.send_bytes("t.bin", &pattern(10_000), None).unwrap();
        (report, handle.join().unwrap(), dir)
    });
    assert!(!report.ok);
    match result {
        Err(Error::Failed(t)) => assert!(t.contains("failed authentication"), "{t}"),
        other => panic!("the receiver should have failed: {other:?}"),
    }
    assert!(!dir.path().join("r").join("t.bin").exists());
}

/// An outsider at a receiver's data port, with a hello under another key,
/// is refused and told why; the session goes on undisturbed.
#[test]
fn an_outsider_at_a_data_port_is_refused_and_the_transfer_completes() {
    let (report, told, dir) = bounded(Duration::from_secs(20), || {
        let dir = tempfile::tempdir().unwrap();
        let cfg = send_config(OverlayShape::Chain, 2, Some(key(1)));
        let sender = OverlaySender::bind(&cfg).unwrap();
        let control = sender.local_addr().unwrap();
        // A data port known in advance.
        let port = common::free_tcp_addr();
        let a = spawn_receiver(control, dir.path(), "a", Some(key(1)));
        std::thread::sleep(Duration::from_millis(200));
        let rc = OverlayRecvConfig {
            sender: control,
            listen: port,
            out_dir: dir.path().join("b"),
            name: "b".into(),
            connect_timeout: Some(Duration::from_secs(10)),
            key: Some(key(1)),
            ..OverlayRecvConfig::default()
        };
        let b = std::thread::spawn(move || overlay::recv_to_dir(&rc, None));
        // Wait until b listens, then queue the outsider before its parent.
        let mut outsider = loop {
            if let Ok(s) = TcpStream::connect(port) {
                break s;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        outsider
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let forged = rmcast_proto_hello(&key(9));
        outsider.write_all(&forged).unwrap();
        let report = sender
            .send_bytes("o.bin", &pattern(2_000_000), None)
            .unwrap();
        let mut told = Vec::new();
        let _ = outsider.read_to_end(&mut told);
        a.join().unwrap().unwrap();
        b.join().unwrap().unwrap();
        (report, told, dir)
    });
    assert!(report.ok, "{report:#?}");
    for name in ["a", "b"] {
        assert_eq!(
            std::fs::read(dir.path().join(name).join("o.bin")).unwrap(),
            pattern(2_000_000),
            "{name}"
        );
    }
    let told = String::from_utf8_lossy(&told);
    assert!(told.contains("wrong group key"), "{told}");
}

/// An initiator's hello under `key` (what an outsider with another key sends).
fn rmcast_proto_hello(key: &Arc<GroupKey>) -> Vec<u8> {
    rmcast_proto::security::Initiator::new(key.clone(), None, [7; 16])
        .hello()
        .to_vec()
}

/// Junk, a plain `Register`, a silent connection and a replayed hello at a
/// keyed sender's control port: each is refused on its own, and the
/// session goes on.
#[test]
fn junk_and_replays_at_a_keyed_control_port_do_not_disturb_the_session() {
    let report = bounded(Duration::from_secs(20), || {
        let dir = tempfile::tempdir().unwrap();
        let cfg = send_config(OverlayShape::Bintree, 2, Some(key(1)));
        let sender = OverlaySender::bind(&cfg).unwrap();
        let control = sender.local_addr().unwrap();
        let sending =
            std::thread::spawn(move || sender.send_bytes("j.bin", &pattern(300_000), None));
        let mut junk = TcpStream::connect(control).unwrap();
        junk.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        let mut plain = TcpStream::connect(control).unwrap();
        let register = rmcast_wire::overlay::Msg::Register {
            name: "sneaky".into(),
            data_addr: "127.0.0.1:9".parse().unwrap(),
        };
        plain.write_all(&register.to_frame()).unwrap();
        let _silent = TcpStream::connect(control).unwrap();
        // A hello recorded from a member, replayed: answered, but whoever
        // replays it cannot seal the frame that must follow.
        let mut replay = TcpStream::connect(control).unwrap();
        replay.write_all(&rmcast_proto_hello(&key(1))).unwrap();
        replay.write_all(&[0u8; 64]).unwrap();
        let handles = vec![
            spawn_receiver(control, dir.path(), "r1", Some(key(1))),
            spawn_receiver(control, dir.path(), "r2", Some(key(1))),
        ];
        let report = sending.join().unwrap().unwrap();
        for h in handles {
            h.join().unwrap().unwrap();
        }
        report
    });
    assert!(report.ok, "{report:#?}");
    assert_eq!(report.verified, 2);
}
