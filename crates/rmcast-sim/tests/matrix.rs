//! The protocol matrix: both protocols × receivers × loss × object sizes,
//! every cell checked against the simulator's invariants with a fixed seed.

mod common;

use common::*;
use rmcast_proto::ProtocolId;
use rmcast_sim::LossModel;

const RECEIVERS: [u16; 4] = [1, 2, 8, 32];
const TEN_MB: u64 = 10_000_000;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Loss {
    None,
    OnePercent,
    TenPercent,
    Bursty,
}

impl Loss {
    fn model(self) -> LossModel {
        match self {
            Loss::None => LossModel::None,
            Loss::OnePercent => LossModel::Bernoulli(0.01),
            Loss::TenPercent => LossModel::Bernoulli(0.10),
            // About 3 % of packets, in bursts of 4 on average.
            Loss::Bursty => LossModel::bursty(0.03, 4.0),
        }
    }
}

/// The object sizes of one cell: the edges around a packet and a window.
fn sizes(loss: Loss, receivers: u16) -> Vec<u64> {
    let w = u64::from(WINDOW);
    let mut v = vec![
        0,
        1,
        PAYLOAD,
        PAYLOAD + 1,
        (w - 1) * PAYLOAD,
        w * PAYLOAD,
        (w + 1) * PAYLOAD,
    ];
    match loss {
        // Go-back-N at 10 % loss is slow by design: a smaller large object.
        Loss::TenPercent => v.push(1_000_000),
        _ if receivers == 2 => v.push(1_000_000),
        _ => v.push(TEN_MB),
    }
    v
}

fn matrix(protocol: ProtocolId, loss: Loss) {
    let started = std::time::Instant::now();
    for (i, &n) in RECEIVERS.iter().enumerate() {
        for (j, size) in sizes(loss, n).into_iter().enumerate() {
            let seed = 1000 + 100 * i as u64 + j as u64;
            let s = scenario(protocol, n, size, loss.model(), seed);
            let r = check(&s);
            eprintln!(
                "{protocol:?} {loss:?} n={n} size={size} seed={seed}: {:.3} s, {:.1} Mbit/s, \
                 {} data, {} rtx, {} timeouts, {:.2} ctl/data",
                r.seconds,
                r.goodput_mbit_s,
                r.data_packets,
                r.retransmitted_packets,
                r.sender.timeouts,
                r.control_per_data
            );
            let packets = size.div_ceil(PAYLOAD);
            assert_eq!(r.data_packets, packets, "first transmissions, seed {seed}");
            assert_eq!(r.outcome.verified(), usize::from(n), "seed {seed}");
            assert!(r.receivers.iter().all(|x| x.hash_ok), "seed {seed}");
            if loss == Loss::None {
                assert_eq!(
                    r.retransmitted_packets, 0,
                    "no loss, no repair, seed {seed}"
                );
            }
        }
    }
    eprintln!("{protocol:?} {loss:?}: {:?}", started.elapsed());
}

#[test]
fn ack_without_loss() {
    matrix(ProtocolId::Ack, Loss::None);
}

#[test]
fn ack_with_one_percent_loss() {
    matrix(ProtocolId::Ack, Loss::OnePercent);
}

#[test]
fn ack_with_ten_percent_loss() {
    matrix(ProtocolId::Ack, Loss::TenPercent);
}

#[test]
fn ack_with_bursty_loss() {
    matrix(ProtocolId::Ack, Loss::Bursty);
}

#[test]
fn nak_poll_without_loss() {
    matrix(ProtocolId::NakPoll, Loss::None);
}

#[test]
fn nak_poll_with_one_percent_loss() {
    matrix(ProtocolId::NakPoll, Loss::OnePercent);
}

#[test]
fn nak_poll_with_ten_percent_loss() {
    matrix(ProtocolId::NakPoll, Loss::TenPercent);
}

#[test]
fn nak_poll_with_bursty_loss() {
    matrix(ProtocolId::NakPoll, Loss::Bursty);
}
