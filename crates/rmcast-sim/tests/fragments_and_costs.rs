//! IP fragmentation (every fragment a frame with its own queueing and loss
//! draw, the datagram lost with any fragment) and the host CPU cost model
//! (per packet + per byte, the Pentium III preset).

mod common;

use common::*;
use rmcast_proto::{ProtocolId, SenderConfig};
use rmcast_sim::{Failure, HostCost, LossModel, RunReport, Scenario};

/// The largest UDP payload: 45 fragments on a 1500-byte MTU.
const BIG: usize = 65_507;
const BIG_FRAGMENTS: u64 = 45;
/// Object bytes per `BIG` data packet (24-byte data header).
const BIG_PAYLOAD: u64 = (BIG - 24) as u64;

fn big(protocol: ProtocolId, receivers: u16, packets: u64, loss: LossModel, seed: u64) -> Scenario {
    let mut s = scenario(protocol, receivers, packets * BIG_PAYLOAD, loss, seed);
    s.config.packet_size = BIG;
    s.config.window = 8;
    s
}

/// Data datagrams that reached receiver `i`'s port, from its frame count.
fn datagrams_at(r: &RunReport, i: usize, fragments: u64) -> u64 {
    let frames = r.receivers[i].data_frames;
    assert_eq!(frames % fragments, 0, "whole datagrams only: {frames}");
    frames / fragments
}

/// One scripted lost fragment — the first, a middle or the last of a
/// 65,507-byte datagram, or the first of the next — loses exactly that
/// datagram: one frame lost, one datagram not reassembled, repaired.
#[test]
fn one_lost_fragment_loses_the_whole_datagram() {
    for protocol in [ProtocolId::Ack, ProtocolId::NakPoll] {
        let clean = check(&big(protocol, 1, 4, LossModel::None, 3));
        assert_eq!(clean.receivers[0].data_frames, 4 * BIG_FRAGMENTS);
        assert_eq!(clean.drops.fragment_loss, 0);
        assert_eq!(clean.retransmitted_packets, 0);
        for frame in [0, 3, 44, 45] {
            let s = big(protocol, 1, 4, LossModel::Frames(vec![frame]), 3);
            let r = check(&s);
            let rx = &r.receivers[0];
            assert_eq!(r.drops.data_loss, 1, "{protocol:?} frame {frame}");
            assert_eq!(rx.data_lost, 1);
            assert_eq!(
                r.drops.fragment_loss, 1,
                "{protocol:?} frame {frame}: {r:#?}"
            );
            assert_eq!(rx.fragment_loss, 1);
            assert!(r.retransmitted_packets >= 1, "{protocol:?} frame {frame}");
            // Every datagram that reached the port was whole or lost.
            let arrived = datagrams_at(&r, 0, BIG_FRAGMENTS);
            assert_eq!(arrived, r.data_packets + r.retransmitted_packets);
            assert!(rx.hash_ok);
        }
    }
}

/// With independent loss p per frame, a k-fragment datagram survives with
/// probability (1-p)^k. Over ~1,700 datagram draws (20 receivers, 77
/// packets of 65,507 bytes plus repairs, fixed seed) the share lost is
/// within 4 standard errors of 1-(1-p)^45 = 16.5 % at p = 0.4 %, far from
/// the 0.4 % a single-frame model would give.
#[test]
fn datagram_loss_is_one_minus_frame_survival_to_the_k() {
    let p = 0.004;
    let s = big(ProtocolId::NakPoll, 20, 77, LossModel::Bernoulli(p), 20_260);
    let r = check(&s);
    assert_eq!(r.drops.port_overflow + r.drops.uplink_overflow, 0);
    let (mut draws, mut lost, mut frames, mut frames_lost) = (0u64, 0u64, 0u64, 0u64);
    for (i, rx) in r.receivers.iter().enumerate() {
        draws += datagrams_at(&r, i, BIG_FRAGMENTS);
        lost += rx.fragment_loss;
        frames += rx.data_frames;
        frames_lost += rx.data_lost;
    }
    let expected = 1.0 - (1.0 - p).powi(BIG_FRAGMENTS as i32);
    let share = lost as f64 / draws as f64;
    let se = (expected * (1.0 - expected) / draws as f64).sqrt();
    eprintln!(
        "{lost} of {draws} datagrams lost ({share:.4}, expected {expected:.4} ± {se:.4}); \
         {frames_lost} of {frames} frames ({:.5})",
        frames_lost as f64 / frames as f64
    );
    assert!(draws > 1_500, "{draws}");
    assert!((share - expected).abs() < 4.0 * se, "{share} vs {expected}");
    let frame_share = frames_lost as f64 / frames as f64;
    assert!((frame_share - p).abs() < 0.001, "{frame_share}");
}

/// Datagrams that fit the MTU are one frame; a smaller MTU splits the same
/// datagrams into more, smaller frames, which costs wire time (20 + 38 bytes
/// of headers per extra frame) and nothing else.
#[test]
fn mtu_decides_the_fragments() {
    let base = scenario(ProtocolId::NakPoll, 2, 500_000, LossModel::None, 8);
    let whole = check(&base);
    let packets = whole.data_packets;
    assert_eq!(whole.receivers[0].data_frames, packets);
    // 345 full packets and a 464-byte last one that needs no fragmenting.
    assert_eq!(base.object_size % PAYLOAD, 440);
    let small = Scenario {
        mtu: 576,
        ..base.clone()
    };
    // 1480 bytes of IP payload in 552-byte fragments: 3 frames.
    assert_eq!(small.fragments(PACKET), 3);
    let r = check(&small);
    assert_eq!(r.receivers[0].data_frames, 3 * (packets - 1) + 1);
    assert_eq!(r.drops.fragment_loss, 0);
    assert!(
        r.seconds > whole.seconds,
        "{} vs {}",
        r.seconds,
        whole.seconds
    );
    let bad = Scenario { mtu: 60, ..base };
    let e = rmcast_sim::run(&bad).expect_err("an MTU under 68 is refused");
    assert!(matches!(e.failure, Failure::Scenario(_)), "{e}");
}

/// A sender waits while its NIC queue is full instead of losing its own
/// datagrams; without waiting, a window of 50 × 50 KB overflows it.
#[test]
fn sends_wait_for_a_full_uplink_instead_of_dropping() {
    let mut s = scenario(ProtocolId::Ack, 2, 2_000_000, LossModel::None, 5);
    s.config.packet_size = 50_000;
    s.config.window = 50;
    let blocking = check(&s);
    assert_eq!(blocking.drops, Default::default());
    assert_eq!(blocking.retransmitted_packets, 0);
    assert!(blocking.max_uplink_queue_bytes <= s.uplink_queue_bytes);
    s.blocking_send = false;
    let dropping = check(&s);
    assert!(dropping.drops.uplink_overflow > 0, "{:?}", dropping.drops);
    assert!(dropping.retransmitted_packets > 0);
}

/// Goodput until the sender held every verdict (the closing Byes excluded).
fn to_verdicts(r: &RunReport) -> f64 {
    r.goodput_mbit_s * r.seconds / r.verdicts_seconds
}

fn fsu(protocol: ProtocolId, receivers: u16, packet_size: usize, window: u32) -> Scenario {
    Scenario {
        receivers,
        config: SenderConfig {
            protocol,
            packet_size,
            window,
            poll_interval: Some((window * 85 / 100).max(1)),
            ..SenderConfig::default()
        },
        seed: 2004,
        ..Scenario::fsu_2004()
    }
}

/// The Pentium III preset: a 1472-byte stream to one receiver is wire-bound
/// (the hosts spend ~29 and ~39 µs of the 123 µs a frame takes), at the
/// ~94 Mbit/s ceiling less setup.
#[test]
fn pentium3_hosts_keep_up_with_100_mbit_at_full_size_packets() {
    let r = check(&fsu(ProtocolId::NakPoll, 1, 1472, 50));
    let goodput = to_verdicts(&r);
    eprintln!("nak-poll N=1 1472 B: {goodput:.1} Mbit/s");
    assert!(goodput > 90.0 && goodput < 94.2, "{r:#?}");
    assert_eq!(r.drops.socket_overflow, 0);
}

/// The ack protocol with N = 30 on Pentium III hosts is bound by the
/// sender's CPU at small packets — 30 acks × 30 µs per 1472-byte packet,
/// ~12 Mbit/s — and by the wire at 50 KB packets; nak-poll is wire-bound at
/// both. This is the mechanism behind the paper's Figure 10 and Table 3.
#[test]
fn pentium3_ack_processing_limits_the_ack_protocol_at_thirty_receivers() {
    let small = check(&fsu(ProtocolId::Ack, 30, 1472, 5));
    let large = check(&fsu(ProtocolId::Ack, 30, 50_000, 5));
    let nak = check(&fsu(ProtocolId::NakPoll, 30, 1472, 50));
    let (small_g, large_g, nak_g) = (to_verdicts(&small), to_verdicts(&large), to_verdicts(&nak));
    eprintln!(
        "fsu N=30: ack 1472 B {small_g:.1}, ack 50 KB {large_g:.1}, nak-poll 1472 B {nak_g:.1} Mbit/s"
    );
    // Per data packet: 20 + 8.8 µs to send, 30 × (30 + ~0.2) µs of acks.
    let cpu_bound = 1448.0 * 8.0 / (28.8 + 30.0 * 30.2);
    assert!(
        small_g < cpu_bound && small_g > 0.85 * cpu_bound,
        "ack 1472 B: {small_g} Mbit/s, CPU bound {cpu_bound}"
    );
    assert!(large_g > 85.0, "{large_g}");
    assert!(nak_g > 85.0, "{nak_g}");
    // The same run on modern hosts is not CPU-bound.
    let modern = check(&Scenario {
        cost: HostCost::modern(),
        ..fsu(ProtocolId::Ack, 30, 1472, 5)
    });
    assert!(to_verdicts(&modern) > 3.0 * small_g);
}

/// The per-byte send cost is charged per datagram byte: at 200 ns per byte
/// the sender, not the 80 ns-per-byte wire, sets the pace (~40 Mbit/s).
#[test]
fn per_byte_send_cost_can_bind_the_sender() {
    let mut s = scenario(ProtocolId::NakPoll, 1, 2_000_000, LossModel::None, 6);
    s.cost = HostCost {
        send_ps_per_byte: 200_000,
        ..HostCost::modern()
    };
    let r = check(&s);
    // Per 1472-byte packet: 2 µs + 294.4 µs of CPU for 1448 object bytes.
    let bound = 1448.0 * 8.0 / (2.0 + 294.4);
    let goodput = to_verdicts(&r);
    eprintln!("send 200 ns/B: {goodput:.1} Mbit/s (bound {bound:.1})");
    assert!(goodput < bound && goodput > 0.9 * bound);
    assert_eq!(r.drops.uplink_overflow, 0);
}
