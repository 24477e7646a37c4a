//! The overlay simulator runs the real overlay machines at small N, for
//! every shape, and its results are deterministic and plausible.

use rmcast_proto::overlay::OverlayShape;
use rmcast_sim::overlay::{OverlayFault, OverlayScenario, run_overlay};
use std::time::Duration;

const SHAPES: [OverlayShape; 6] = [
    OverlayShape::Pipeline,
    OverlayShape::Direct,
    OverlayShape::Tree { fanout: 2 },
    OverlayShape::Binomial,
    OverlayShape::Chain,
    OverlayShape::Bintree,
];

fn scenario(shape: OverlayShape, nodes: u16, size: u64) -> OverlayScenario {
    OverlayScenario {
        shape,
        nodes,
        size,
        ..OverlayScenario::default()
    }
}

#[test]
fn every_shape_delivers_to_every_node_for_small_groups() {
    for shape in SHAPES {
        for nodes in [1u16, 2, 7, 20] {
            for size in [0u64, 1, 8192, 1 << 20] {
                let s = scenario(shape, nodes, size);
                let r = run_overlay(&s).unwrap_or_else(|e| panic!("{e}"));
                assert!(
                    r.total_time < Duration::from_secs(10),
                    "{shape} {nodes}: {r:?}"
                );
            }
        }
    }
}

#[test]
fn the_same_seed_gives_the_same_run() {
    for shape in SHAPES {
        let s = scenario(shape, 13, 300_001);
        assert_eq!(
            run_overlay(&s).unwrap(),
            run_overlay(&s).unwrap(),
            "{shape}"
        );
    }
}

#[test]
fn completion_times_follow_the_papers_model() {
    let n = 16;
    let size = 4 << 20;
    let t = |shape| {
        let r = run_overlay(&scenario(shape, n, size)).unwrap();
        r.data_time.as_secs_f64() / r.object_time.as_secs_f64()
    };
    // Direct: the sender's link carries the object n times.
    let direct = t(OverlayShape::Direct);
    assert!((15.0..18.0).contains(&direct), "direct {direct}");
    // Pipelined shapes: about one object time, whatever n.
    for shape in [OverlayShape::Chain, OverlayShape::Bintree] {
        let x = t(shape);
        assert!((1.0..1.6).contains(&x), "{shape} {x}");
    }
    // Store-and-forward binary tree: depth × fanout object times.
    let tree = t(OverlayShape::Tree { fanout: 2 });
    assert!((6.0..10.0).contains(&tree), "tree {tree}");
}

#[test]
fn sealed_overlays_deliver_and_cost_their_overhead_and_key_exchanges() {
    for shape in SHAPES {
        for (nodes, size) in [(1u16, 0u64), (7, 8192), (20, 1 << 20)] {
            let plain = scenario(shape, nodes, size);
            let sealed = OverlayScenario {
                sealed: true,
                ..plain.clone()
            };
            let (p, s) = (
                run_overlay(&plain).unwrap_or_else(|e| panic!("{e}")),
                run_overlay(&sealed).unwrap_or_else(|e| panic!("{e}")),
            );
            assert_eq!(p.segments_moved, s.segments_moved, "{shape} {nodes}");
            if size > 0 {
                assert!(s.data_time > p.data_time, "{shape} {nodes}: {p:?} {s:?}");
            }
            // 24 bytes per 8 KiB segment and a round trip per connection.
            let slack = p.data_time.mul_f64(0.01) + 4 * plain.latency * u32::from(nodes);
            assert!(
                s.data_time <= p.data_time + slack,
                "{shape} {nodes}: {p:?} {s:?}"
            );
        }
    }
}

#[test]
fn a_connection_limit_below_what_the_shape_needs_fails_the_run() {
    let mut s = scenario(OverlayShape::Direct, 10, 10_000);
    s.max_connections = 4;
    s.inactivity = Duration::from_secs(1);
    let e = run_overlay(&s).unwrap_err();
    assert!(
        e.0.contains("seed 1") && e.0.contains("connection limit"),
        "{e}"
    );
}

/// 4 MiB at 1 Gbit/s: every shape is still sending at 10 ms.
fn faulty(shape: OverlayShape, fault: OverlayFault) -> OverlayScenario {
    OverlayScenario {
        faults: vec![fault],
        ..scenario(shape, 12, 4 << 20)
    }
}

#[test]
fn a_crashed_node_is_named_and_the_session_ends_at_once() {
    let at = Duration::from_millis(10);
    for shape in SHAPES {
        let s = faulty(shape, OverlayFault::Crash { host: 5, at });
        let r = run_overlay(&s).unwrap_or_else(|e| panic!("{shape}: {e}"));
        assert!(r.failed, "{shape}: {r:?}");
        // Its connections reset: heard within a round trip, then the
        // sender's farewell (at most a second).
        let detect = r.total_time - at;
        assert!(detect < Duration::from_millis(1100), "{shape}: {detect:?}");
    }
}

#[test]
fn a_stalled_node_is_named_within_the_inactivity_timeout() {
    let at = Duration::from_millis(10);
    for shape in SHAPES {
        let s = faulty(
            shape,
            OverlayFault::Pause {
                host: 7,
                at,
                duration: None,
            },
        );
        let r = run_overlay(&s).unwrap_or_else(|e| panic!("{shape}: {e}"));
        assert!(r.failed, "{shape}: {r:?}");
        let detect = r.total_time - at;
        let bound = s.inactivity + Duration::from_millis(1100);
        assert!(detect < bound, "{shape}: {detect:?}");
    }
}

#[test]
fn a_pause_under_the_inactivity_timeout_changes_nothing_but_time() {
    for shape in SHAPES {
        for host in [0, 3] {
            let clean = scenario(shape, 12, 4 << 20);
            let paused = faulty(
                shape,
                OverlayFault::Pause {
                    host,
                    at: Duration::from_millis(10),
                    duration: Some(Duration::from_secs(3)),
                },
            );
            let (c, p) = (run_overlay(&clean).unwrap(), run_overlay(&paused).unwrap());
            assert!(!p.failed, "{shape} host {host}: {p:?}");
            assert_eq!(c.segments_moved, p.segments_moved, "{shape} host {host}");
            assert!(p.total_time > c.total_time + Duration::from_secs(2));
        }
    }
}

#[test]
fn when_the_sender_dies_every_receiver_ends_by_itself() {
    for shape in SHAPES {
        let at = Duration::from_millis(10);
        let s = faulty(shape, OverlayFault::Crash { host: 0, at });
        let r = run_overlay(&s).unwrap_or_else(|e| panic!("{shape}: {e}"));
        assert!(r.failed);
        // Connections reset: every node hears it within a round trip.
        assert!(r.total_time - at < Duration::from_secs(2), "{shape}: {r:?}");
    }
}
