//! Hybrid sessions over loopback: one send serves the receivers that hear
//! the multicast group over multicast and the others over a TCP overlay.
//! A receiver "whose network drops the session's multicast" listens on a
//! group nobody sends to (`OverlayRecvConfig::probe_group`): it really
//! listens, and really hears nothing. Every test is bounded in time.

use rmcast::hybrid::{HybridConfig, HybridSender};
use rmcast::overlay::{OverlayRecvConfig, OverlaySendConfig, OverlayShape};
use rmcast::{GroupKey, RecvConfig, RecvReport, SendConfig, SendReport, SenderConfig};
use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::bounded;

/// How a receiver of the test registers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Via {
    /// Plain `rmcast recv`: joins the group, never talks to the lobby.
    Group,
    /// `rmcast recv --sender`, on a network that carries the group.
    LobbyHears,
    /// `rmcast recv --sender`, on a network that drops the group.
    LobbyDeaf,
}

struct Session {
    report: SendReport,
    receivers: Vec<(String, Result<RecvReport, String>, PathBuf)>,
    data: Vec<u8>,
}

fn data(size: usize, seed: u8) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 11) as u8)
        .collect()
}

/// What a test changes from the plain session.
#[derive(Default)]
struct Opts {
    key: Option<Arc<GroupKey>>,
    tcp_shape: Option<OverlayShape>,
    /// Receivers the send waits for (default: as many as `vias`).
    wanted: Option<u16>,
    /// How long it waits for them (default 15 s).
    wait: Option<Duration>,
    /// This receiver stores at 1.5 MB/s (a slow disk), and the multicast
    /// half moves laggards to TCP after 300 ms.
    slow: Option<usize>,
    /// This receiver refuses the object (it takes at most 1 byte).
    refuse: Option<usize>,
    /// The send starts this long after the receivers (its lobby bound
    /// from the start): their connections wait in the listen backlog and
    /// arrive at once, as a job's ranks do when rank 0 comes up last.
    start_after: Option<Duration>,
}

fn run(vias: &[Via], size: usize, opts: Opts, dir: &Path) -> Session {
    let Opts {
        key,
        tcp_shape,
        wanted,
        wait,
        slow,
        refuse,
        start_after,
    } = opts;
    let group = rmcast::random_group();
    let deaf_group = {
        let g = rmcast::random_group();
        SocketAddrV4::new(*g.ip(), group.port().wrapping_add(1).max(1024))
    };
    let cfg = HybridConfig {
        multicast: SendConfig {
            group,
            proto: SenderConfig {
                receivers: wanted.unwrap_or(vias.len() as u16),
                join_wait: wait.unwrap_or(Duration::from_secs(15)),
                group_key: key.clone(),
                laggard: match slow {
                    Some(_) => rmcast::Laggard::Tcp {
                        after: Duration::from_millis(300),
                        port: 0,
                    },
                    None => rmcast::Laggard::Wait,
                },
                rate_bits_per_s: slow.map(|_| 100_000_000),
                ..SenderConfig::default()
            },
            ..SendConfig::default()
        },
        overlay: OverlaySendConfig {
            control: "127.0.0.1:0".parse().unwrap(),
            key: key.clone(),
            ..OverlaySendConfig::default()
        },
        tcp_shape,
        probe_wait: rmcast::hybrid::DEFAULT_PROBE_WAIT,
    };
    let sender = HybridSender::bind(&cfg).expect("lobby binds");
    let lobby: SocketAddr = sender.local_addr().unwrap();
    let payload = data(size, vias.len() as u8);
    let sent = payload.clone();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let send = std::thread::spawn(move || {
        let _ = go_rx.recv();
        sender.send_bytes("obj.bin", &sent, None)
    });
    if start_after.is_none() {
        let _ = go_tx.send(());
    }
    let mut handles = Vec::new();
    for (i, via) in vias.iter().copied().enumerate() {
        let out = dir.join(format!("r{i}"));
        let name = format!("r{i}-{via:?}");
        let key = key.clone();
        let (n, o) = (name.clone(), out.clone());
        let h = std::thread::spawn(move || {
            let mc = RecvConfig {
                group,
                out_dir: o.clone(),
                name: n.clone(),
                listen_timeout: Some(Duration::from_secs(15)),
                group_key: key.clone(),
                store_rate: (slow == Some(i)).then_some(1_500_000),
                ..RecvConfig::default()
            };
            let r = match via {
                Via::Group => rmcast::recv_to_dir(&mc, None),
                Via::LobbyHears | Via::LobbyDeaf => {
                    let ov = OverlayRecvConfig {
                        sender: lobby,
                        out_dir: o,
                        name: n,
                        connect_timeout: Some(Duration::from_secs(15)),
                        key,
                        multicast: Some(mc),
                        probe_group: (via == Via::LobbyDeaf).then_some(deaf_group),
                        max_bytes: (refuse == Some(i)).then_some(1),
                        ..OverlayRecvConfig::default()
                    };
                    rmcast::overlay::recv_to_dir(&ov, None)
                }
            };
            r.map_err(|e| e.to_string())
        });
        handles.push((name, h, out));
    }
    if let Some(d) = start_after {
        std::thread::sleep(d);
        let _ = go_tx.send(());
    }
    let report = send.join().unwrap().expect("the session runs");
    let receivers = handles
        .into_iter()
        .map(|(n, h, o)| (n, h.join().unwrap(), o))
        .collect();
    Session {
        report,
        receivers,
        data: payload,
    }
}

/// Every receiver verified a byte-exact copy; those named deaf went TCP.
fn check(s: &Session, vias: &[Via]) {
    let r = &s.report;
    assert!(r.ok, "{r:#?}\n{:#?}", s.receivers);
    assert_eq!(r.verified, vias.len());
    assert_eq!(r.members.len(), vias.len());
    let h = r.hybrid.as_ref().expect("a hybrid report");
    let deaf: Vec<&String> = (s.receivers.iter().zip(vias))
        .filter(|(_, v)| **v == Via::LobbyDeaf)
        .map(|((n, _, _), _)| n)
        .collect();
    let mut tcp: Vec<&String> = h.tcp.iter().collect();
    tcp.sort();
    assert_eq!(tcp, deaf, "exactly the deaf receivers went TCP");
    assert_eq!(h.multicast.len() + h.tcp.len(), vias.len());
    let mut ranks: Vec<u16> = r.members.iter().map(|m| m.rank).collect();
    ranks.sort_unstable();
    ranks.dedup();
    assert_eq!(ranks.len(), vias.len(), "one rank each: {:?}", r.members);
    for ((name, got, out), via) in s.receivers.iter().zip(vias) {
        let got = got.as_ref().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(got.verified, "{name}");
        // Every receiver knows the whole session verified: those of the
        // lobby from its verdict, whichever half served them, the plain
        // one from the multicast half's farewell.
        assert_eq!(got.group, Some(Ok(())), "{name} ({via:?})");
        let stored = std::fs::read(out.join("obj.bin")).unwrap();
        assert!(stored == s.data, "{name}: the stored copy differs");
    }
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rmcast-hybrid-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn receivers_that_do_not_hear_the_group_get_the_file_over_tcp_in_the_same_send() {
    bounded(Duration::from_secs(60), || {
        let dir = tmp("mixed");
        let vias = [
            Via::Group,
            Via::LobbyHears,
            Via::LobbyDeaf,
            Via::LobbyHears,
            Via::LobbyDeaf,
        ];
        let s = run(&vias, 3_000_000, Opts::default(), &dir);
        check(&s, &vias);
        let r = &s.report;
        assert!(
            r.protocol.ends_with("+tcp-chain"),
            "both halves named, a chain for two: {}",
            r.protocol
        );
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn with_no_multicast_at_all_the_send_is_a_tcp_overlay_of_the_shape_asked() {
    bounded(Duration::from_secs(60), || {
        let dir = tmp("none");
        let vias = [Via::LobbyDeaf, Via::LobbyDeaf, Via::LobbyDeaf];
        let opts = Opts {
            tcp_shape: Some(OverlayShape::Pipeline),
            ..Opts::default()
        };
        let s = run(&vias, 1_000_000, opts, &dir);
        check(&s, &vias);
        assert_eq!(s.report.protocol, "tcp-pipeline");
        assert_eq!(
            s.report.hybrid.as_ref().unwrap().tcp_protocol,
            "tcp-pipeline"
        );
        assert!(s.report.hybrid.as_ref().unwrap().multicast.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn when_everyone_hears_the_group_nobody_goes_tcp() {
    bounded(Duration::from_secs(60), || {
        let dir = tmp("all");
        let vias = [Via::LobbyHears, Via::Group, Via::LobbyHears];
        let s = run(&vias, 500_000, Opts::default(), &dir);
        check(&s, &vias);
        assert!(!s.report.protocol.contains("tcp"), "{}", s.report.protocol);
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn a_keyed_hybrid_session_seals_both_halves() {
    bounded(Duration::from_secs(60), || {
        let dir = tmp("keyed");
        let key = Arc::new(GroupKey::from_secret([0x5a; 32]));
        let vias = [Via::LobbyHears, Via::LobbyDeaf];
        let opts = Opts {
            key: Some(key),
            ..Opts::default()
        };
        let s = run(&vias, 1_000_000, opts, &dir);
        check(&s, &vias);
        assert!(s.report.sealed);
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn a_multicast_receiver_that_lags_catches_up_over_tcp_beside_the_tcp_half() {
    bounded(Duration::from_secs(60), || {
        let dir = tmp("laggard");
        // r1 heard the group and joined the multicast half, but stores at a
        // tenth of its pace; r2 is deaf and goes to the TCP half.
        let vias = [Via::Group, Via::LobbyHears, Via::LobbyDeaf, Via::Group];
        let opts = Opts {
            slow: Some(1),
            ..Opts::default()
        };
        let s = run(&vias, 4_000_000, opts, &dir);
        check(&s, &vias);
        let moved: Vec<&str> = (s.report.members.iter())
            .filter(|m| m.caught_up_from.is_some())
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(moved, ["r1-LobbyHears"], "{:#?}", s.report.members);
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn a_failure_in_one_half_reaches_the_receivers_of_the_other() {
    bounded(Duration::from_secs(60), || {
        let dir = tmp("verdict");
        // r2 is deaf and refuses the object over TCP: the multicast half
        // verifies, its farewell says so, but the session failed.
        let vias = [Via::Group, Via::LobbyHears, Via::LobbyDeaf];
        let opts = Opts {
            refuse: Some(2),
            ..Opts::default()
        };
        let s = run(&vias, 300_000, opts, &dir);
        let r = &s.report;
        assert!(!r.ok, "{r:#?}");
        assert_eq!(r.verified, 2, "{r:#?}");
        let error = r.error.clone().unwrap_or_default();
        assert!(error.contains("r2-LobbyDeaf"), "{error}");
        let group = |i: usize| match &s.receivers[i].1 {
            Ok(got) => got.group.clone(),
            Err(e) => panic!("r{i}: {e}"),
        };
        // The plain receiver hears only its own half's farewell.
        assert_eq!(group(0), Some(Ok(())));
        // The lobby's: the whole session, naming the one that failed.
        let why = group(1)
            .expect("a verdict")
            .expect_err("the session failed");
        assert!(why.contains("r2-LobbyDeaf"), "{why}");
        assert!(s.receivers[2].1.is_err(), "r2 refused the object");
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn a_tree_goes_over_multicast_and_a_receiver_that_does_not_hear_it_is_refused_by_name() {
    bounded(Duration::from_secs(60), || {
        let dir = tmp("tree");
        let src = dir.join("src").join("ckpt");
        std::fs::create_dir_all(src.join("shards")).unwrap();
        std::fs::write(src.join("meta.json"), b"{\"step\": 7}").unwrap();
        std::fs::write(src.join("shards").join("0.bin"), data(300_000, 1)).unwrap();
        // How many of the two do not hear the group.
        for deaf in [0, 1, 2] {
            let group = rmcast::random_group();
            let deaf_group = SocketAddrV4::new(*group.ip(), group.port().wrapping_add(1).max(1024));
            let cfg = HybridConfig {
                multicast: SendConfig {
                    group,
                    proto: SenderConfig {
                        receivers: 2,
                        join_wait: Duration::from_secs(15),
                        ..SenderConfig::default()
                    },
                    ..SendConfig::default()
                },
                overlay: OverlaySendConfig {
                    control: "127.0.0.1:0".parse().unwrap(),
                    ..OverlaySendConfig::default()
                },
                tcp_shape: None,
                probe_wait: rmcast::hybrid::DEFAULT_PROBE_WAIT,
            };
            let sender = HybridSender::bind(&cfg).expect("lobby binds");
            let lobby = sender.local_addr().unwrap();
            let path = src.clone();
            let send = std::thread::spawn(move || sender.send_file(&path, None));
            let recvs: Vec<_> = (0..2)
                .map(|i| {
                    let out = dir.join(format!("out-{deaf}-{i}"));
                    let ov = OverlayRecvConfig {
                        sender: lobby,
                        out_dir: out.clone(),
                        name: format!("r{i}"),
                        connect_timeout: Some(Duration::from_secs(15)),
                        multicast: Some(RecvConfig {
                            group,
                            ..RecvConfig::default()
                        }),
                        probe_group: (i >= 2 - deaf).then_some(deaf_group),
                        ..OverlayRecvConfig::default()
                    };
                    let h = std::thread::spawn(move || {
                        rmcast::overlay::recv_to_dir(&ov, None).map_err(|e| e.to_string())
                    });
                    (h, out)
                })
                .collect();
            let report = send.join().unwrap().expect("the session runs");
            let got: Vec<_> = recvs
                .into_iter()
                .map(|(h, out)| (h.join().unwrap(), out))
                .collect();
            if deaf == 2 {
                assert!(!report.ok, "{report:#?}");
                assert_eq!(report.verified, 0);
                let error = report.error.clone().unwrap_or_default();
                assert!(
                    error.starts_with("all 2 receivers did not hear the group")
                        && error.contains("r0")
                        && error.contains("r1"),
                    "{error}"
                );
                for (r, _) in &got {
                    let e = r.as_ref().expect_err("refused");
                    assert!(e.contains("goes over multicast only"), "{e}");
                }
                continue;
            }
            let r0 = got[0].0.as_ref().expect("r0 heard the group");
            assert!(r0.verified);
            let stored = got[0].1.join("ckpt");
            assert_eq!(
                std::fs::read(stored.join("shards").join("0.bin")).unwrap(),
                data(300_000, 1)
            );
            assert_eq!(
                std::fs::read(stored.join("meta.json")).unwrap(),
                b"{\"step\": 7}"
            );
            if deaf == 0 {
                assert!(report.ok, "{report:#?}");
                assert_eq!(r0.group, Some(Ok(())));
                continue;
            }
            assert!(!report.ok, "{report:#?}");
            assert_eq!(report.verified, 1);
            let error = report.error.clone().unwrap_or_default();
            assert!(
                error.contains("1 more did not hear the group and were refused")
                    && error.contains("r1"),
                "{error}"
            );
            let h = report.hybrid.as_ref().unwrap();
            assert_eq!(h.refused, ["r1"], "{h:?}");
            assert!(h.tcp.is_empty(), "{h:?}");
            let why = r0.group.clone().unwrap().expect_err("the session failed");
            assert!(why.contains("r1"), "{why}");
            let e1 = got[1].0.as_ref().expect_err("r1 was refused");
            assert!(e1.contains("goes over multicast only"), "{e1}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    });
}

/// More receivers than the lobby's key exchanges in flight (64) come
/// through it at once, as the ranks of a large job do the moment rank 0
/// listens: none is turned away, every one verifies.
#[test]
fn a_burst_of_keyed_registrations_larger_than_the_handshake_cap_all_get_in() {
    bounded(Duration::from_secs(120), || {
        let dir = tmp("burst");
        let key = Arc::new(GroupKey::from_secret([0x3c; 32]));
        let mut vias = vec![Via::LobbyHears; 96];
        vias.extend([Via::LobbyDeaf; 4]);
        let opts = Opts {
            key: Some(key),
            wait: Some(Duration::from_secs(60)),
            start_after: Some(Duration::from_millis(800)),
            ..Opts::default()
        };
        let s = run(&vias, 20_000, opts, &dir);
        check(&s, &vias);
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn the_tcp_half_is_a_chain_for_a_few_and_a_bintree_for_more() {
    use rmcast::hybrid::tcp_shape_for;
    assert_eq!(tcp_shape_for(1), OverlayShape::Chain);
    assert_eq!(tcp_shape_for(8), OverlayShape::Chain);
    assert_eq!(tcp_shape_for(9), OverlayShape::Bintree);
    assert_eq!(tcp_shape_for(1000), OverlayShape::Bintree);
}

#[test]
fn a_receiver_beyond_the_count_is_refused_by_the_lobby_naming_it() {
    bounded(Duration::from_secs(60), || {
        let dir = tmp("extra");
        let vias = [Via::LobbyDeaf, Via::LobbyDeaf, Via::LobbyDeaf];
        let opts = Opts {
            wanted: Some(2),
            ..Opts::default()
        };
        let s = run(&vias, 200_000, opts, &dir);
        let r = &s.report;
        assert!(r.ok, "the two it waited for verified: {r:#?}");
        assert_eq!(r.verified, 2);
        let refused: Vec<&String> = (s.receivers.iter())
            .filter_map(|(_, got, _)| got.as_ref().err())
            .collect();
        assert_eq!(refused.len(), 1, "{:#?}", s.receivers);
        assert!(
            refused[0].contains("has its 2 receivers already"),
            "{}",
            refused[0]
        );
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn a_session_that_never_forms_sends_the_lobby_away_and_names_it() {
    bounded(Duration::from_secs(60), || {
        let dir = tmp("short");
        let vias = [Via::LobbyDeaf];
        let opts = Opts {
            wanted: Some(3),
            wait: Some(Duration::from_millis(1500)),
            ..Opts::default()
        };
        let s = run(&vias, 10_000, opts, &dir);
        let r = &s.report;
        assert!(!r.ok);
        let error = r.error.as_deref().unwrap_or_default();
        assert!(
            error.contains("1 more registered over TCP and were sent away: r0-LobbyDeaf"),
            "{error}"
        );
        let got = s.receivers[0].1.as_ref().unwrap_err();
        assert!(
            got.contains("ended before every receiver registered"),
            "{got}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    });
}
