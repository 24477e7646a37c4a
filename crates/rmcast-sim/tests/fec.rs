//! Block FEC in the simulator (issue 20): every UDP protocol repaired by
//! parity under independent and bursty loss, checked against the
//! simulator's invariants (every byte exact, nothing delivered twice, the
//! window bounded, the run ends), and the repair measured against ARQ on
//! the same seeds: parity repairs a different loss at every receiver, so
//! its cost stops growing with the group.

mod common;

use common::{PAYLOAD, check, scenario};
use rmcast_proto::{FecShape, ProtocolId, TreeShape};
use rmcast_sim::{LossModel, RunReport, Scenario};

fn with_fec(s: Scenario, k: u16, p: u16) -> Scenario {
    with_shape(s, FecShape::new(k, p))
}

fn with_shape(mut s: Scenario, shape: FecShape) -> Scenario {
    s.config.fec = Some(shape);
    s
}

fn all_verified(r: &RunReport, what: &str) {
    assert!(r.outcome.ok, "{what}: {:?}", r.outcome);
    assert!(r.receivers.iter().all(|x| x.hash_ok), "{what}");
    assert_eq!(
        r.outcome.verified(),
        r.receivers.len(),
        "{what}: every receiver verified"
    );
}

#[test]
fn every_protocol_is_repaired_by_parity_under_loss() {
    let protocols: [(&str, ProtocolId, Option<TreeShape>); 5] = [
        ("ack", ProtocolId::Ack, None),
        ("nak-poll", ProtocolId::NakPoll, None),
        ("ring", ProtocolId::Ring, None),
        ("tree", ProtocolId::Tree, Some(TreeShape::Flat)),
        ("tree-binary", ProtocolId::Tree, Some(TreeShape::Binary)),
    ];
    let losses = [
        ("1%", LossModel::Bernoulli(0.01)),
        ("10%", LossModel::Bernoulli(0.10)),
        ("bursts", LossModel::bursty(0.05, 8.0)),
    ];
    // A short last block, a single short block, a block and one packet.
    let sizes = [300_000, 5 * PAYLOAD + 17, 16 * PAYLOAD + 1];
    let mut seed = 1;
    for (name, protocol, tree) in protocols {
        for (loss_name, loss) in &losses {
            for &n in &[1u16, 8, 30] {
                for &size in &sizes {
                    // Blocks of 16, without and with proactive parity, and
                    // blocks of 8 interleaved 4 deep (groups of 32).
                    for (k, p, d) in [(16, 0, 1), (16, 2, 1), (8, 1, 4)] {
                        seed += 1;
                        let shape = FecShape::new(k, p).with_depth(d);
                        let mut s =
                            with_shape(scenario(protocol, n, size, loss.clone(), seed), shape);
                        s.config.window = 64;
                        if let Some(tree) = tree {
                            s.config.tree_shape = tree;
                            s.config.tree_height = 3;
                        }
                        let what = format!(
                            "{name} {loss_name} n={n} size={size} fec {} seed={seed}",
                            shape.setting()
                        );
                        let r = check(&s);
                        all_verified(&r, &what);
                        assert_eq!(r.data_packets, size.div_ceil(PAYLOAD - 4), "{what}");
                        assert!(r.max_outstanding <= 64, "{what}");
                        // Parity repairs; data goes again only as the stall
                        // poll after a timeout, as the re-poll of a member
                        // whose answer went missing, or multicast when a
                        // block's K parity packets are spent (bursts can do
                        // that).
                        assert_eq!(r.sender.unicast_repairs, 0, "{what}");
                        assert!(
                            r.retransmitted_packets
                                <= r.sender.timeouts
                                    + r.sender.repolls
                                    + r.sender.multicast_repairs,
                            "{what}: {:?}",
                            r.sender
                        );
                        if !matches!(loss, LossModel::GilbertElliott { .. }) {
                            assert_eq!(r.sender.multicast_repairs, 0, "{what}");
                        }
                        if p > 0 {
                            let packets = size.div_ceil(PAYLOAD - 4) as u32;
                            let blocks = u64::from(shape.blocks(packets));
                            assert!(
                                r.sender.parity_packets >= blocks * u64::from(p),
                                "{what}: every block's proactive parity"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn a_block_larger_than_the_window_is_refused() {
    let mut config = rmcast_proto::SenderConfig {
        window: 32,
        fec: Some(FecShape::new(64, 0)),
        ..rmcast_proto::SenderConfig::default()
    };
    let e = config.validate().unwrap_err().to_string();
    assert!(e.contains("do not fit a window of 32"), "{e}");
    config.window = 64;
    assert!(config.validate().is_ok());
    // Interleaved, a block spans K·D packets.
    config.fec = Some(FecShape::new(16, 0).with_depth(8));
    let e = config.validate().unwrap_err().to_string();
    assert!(e.contains("spanning 128 packets"), "{e}");
    config.window = 128;
    assert!(config.validate().is_ok());
}

/// Bursts (Gilbert–Elliott, mean 8 frames) at 100 receivers: a burst
/// inside one block of 64 needs as many parity packets as it is long, and
/// on-demand parity answers each block's largest lack in the group.
/// Interleaving 8 blocks deals a burst of 8 one loss per block: the same
/// seeds need far less parity, and no retransmission.
#[test]
fn interleaving_turns_a_burst_into_one_loss_per_block() {
    let run = |d| {
        let mut s = with_shape(
            scenario(
                ProtocolId::NakPoll,
                100,
                4_000_000,
                LossModel::bursty(0.01, 8.0),
                21,
            ),
            FecShape::new(64, 2).with_depth(d),
        );
        s.config.window = 2048;
        s.link_rate_bits_per_s = 1_000_000_000;
        let r = check(&s);
        all_verified(&r, &format!("depth {d}"));
        r
    };
    let (plain, deep) = (run(1), run(8));
    let share = |r: &RunReport| {
        (r.sender.parity_packets + r.retransmitted_packets) as f64 / r.data_packets as f64
    };
    println!(
        "N = 100, bursts of 8: repair {:.1} % of the object in blocks of 64, {:.1} % with 8 \
         interleaved; goodput {:.0} and {:.0} Mbit/s",
        100.0 * share(&plain),
        100.0 * share(&deep),
        plain.goodput_mbit_s,
        deep.goodput_mbit_s
    );
    assert!(share(&deep) < share(&plain) / 2.0, "{plain:?}\n{deep:?}");
    assert!(share(&deep) < 0.15);
    assert_eq!(deep.retransmitted_packets, 0);
    assert!(deep.goodput_mbit_s > plain.goodput_mbit_s);
}

#[test]
fn no_loss_costs_no_parity_on_demand_and_no_feedback_about_it() {
    for (k, p) in [(8, 0), (64, 0), (64, 3)] {
        let mut s = with_fec(
            scenario(ProtocolId::NakPoll, 20, 1_000_000, LossModel::None, 3),
            k,
            p,
        );
        s.config.window = 128;
        // Paced under the link: no queue overflows either.
        s.config.rate_bits_per_s = Some(s.link_rate_bits_per_s * 9 / 10);
        let r = check(&s);
        assert_eq!(
            r.drops.port_overflow + r.drops.socket_overflow,
            0,
            "{:?}",
            r.drops
        );
        all_verified(&r, "clean");
        let blocks = 1_000_000u64.div_ceil(PAYLOAD - 4).div_ceil(u64::from(k));
        assert_eq!(r.sender.parity_packets, blocks * u64::from(p), "{k}:{p}");
        assert_eq!(r.sender.naks, 0, "{k}:{p}");
        assert_eq!(r.sender.timeouts, 0, "{k}:{p}");
        assert_eq!(r.retransmitted_packets, 0, "{k}:{p}");
    }
}

/// The point of it all: at 1 % independent loss and 300 receivers, ARQ
/// resends the union of everyone's losses (most packets are lost by
/// someone), parity only the largest loss per block.
#[test]
fn parity_repair_does_not_grow_with_the_group_as_arq_does() {
    let base = |n| {
        let mut s = scenario(
            ProtocolId::NakPoll,
            n,
            2_000_000,
            LossModel::Bernoulli(0.01),
            11,
        );
        s.config.window = 512;
        s.link_rate_bits_per_s = 1_000_000_000;
        s
    };
    let arq = check(&base(300));
    all_verified(&arq, "arq");
    let fec = check(&with_fec(base(300), 64, 2));
    all_verified(&fec, "fec");
    let data = fec.data_packets as f64;
    let repair = (fec.sender.parity_packets + fec.retransmitted_packets) as f64;
    let arq_repair = arq.retransmitted_packets as f64;
    println!(
        "N = 300, 1 % loss: ARQ resends {:.1} % of the object, FEC sends {:.1} % parity; \
         feedback per data packet {:.3} (ARQ) and {:.3} (FEC)",
        100.0 * arq_repair / arq.data_packets as f64,
        100.0 * repair / data,
        arq.feedback_per_data,
        fec.feedback_per_data
    );
    // Two proactive parity packets per block of 64 are 3.1 %.
    assert!(repair / data < 0.10, "FEC repair {repair} for {data}");
    assert!(
        arq_repair / data > 0.5,
        "ARQ repair {arq_repair} for {data}"
    );
    assert!(fec.feedback_per_data < arq.feedback_per_data / 2.0);
}

/// A thousand receivers in `cargo test` (fast settings: 1 MB); 10,000 by
/// command: `cargo run --release -p rmcast-sim --example sweep -- --fec 64:2
/// --receivers 10000 --window 512 --size 64MiB --rate 1gbit --loss 0.01`.
#[test]
fn a_thousand_receivers_under_loss_all_verify() {
    let mut s = with_fec(
        scenario(
            ProtocolId::NakPoll,
            1000,
            1_000_000,
            LossModel::Bernoulli(0.01),
            5,
        ),
        64,
        2,
    );
    s.config.window = 512;
    s.link_rate_bits_per_s = 1_000_000_000;
    let r = check(&s);
    all_verified(&r, "n=1000");
    let repair = (r.sender.parity_packets + r.retransmitted_packets) as f64;
    assert!(repair / (r.data_packets as f64) < 0.15, "{:?}", r.sender);
}

/// Receivers that read their data back from the simulator's storage when
/// a block is rebuilt (the default) and receivers that keep a copy of
/// every packet (`fec_read_back: false`) are the same protocol: every
/// run's report is the same to the last counter, with the GF(2⁸) code
/// (rebuilt in place) and the GF(2¹⁶) code (copied in), interleaved or not.
#[test]
fn reading_back_and_keeping_copies_run_the_same() {
    let protocols = [
        ProtocolId::NakPoll,
        ProtocolId::Ack,
        ProtocolId::Ring,
        ProtocolId::Tree,
    ];
    let losses = [LossModel::Bernoulli(0.05), LossModel::bursty(0.05, 8.0)];
    let shapes = [
        FecShape::new(16, 2),
        FecShape::new(8, 1).with_depth(4),
        FecShape::new(200, 4),
    ];
    let mut seed = 9_100;
    for protocol in protocols {
        for loss in &losses {
            for shape in shapes {
                seed += 1;
                let mut s = with_shape(scenario(protocol, 12, 400_000, loss.clone(), seed), shape);
                s.config.window = 512;
                assert!(s.receiver.fec_read_back, "the simulator's default");
                let what = format!("{protocol:?} {loss:?} fec {} seed={seed}", shape.setting());
                let reading = check(&s);
                all_verified(&reading, &what);
                assert!(
                    reading
                        .receivers
                        .iter()
                        .any(|x| x.stats.repaired_packets > 0),
                    "{what}: parity rebuilt packets"
                );
                s.receiver.fec_read_back = false;
                let copying = check(&s);
                assert_eq!(reading, copying, "{what}");
            }
        }
    }
}
