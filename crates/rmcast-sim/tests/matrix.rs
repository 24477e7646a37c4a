//! The protocol matrix: both protocols × receivers × loss × object sizes,
//! every cell checked against the simulator's invariants with a fixed seed.

mod common;

use common::matrices::*;
use common::*;
use rmcast_proto::ProtocolId;

fn matrix(protocol: ProtocolId, loss: Loss) {
    let started = std::time::Instant::now();
    for cell in ack_nak_cells(loss) {
        let Cell { n, size, seed } = cell;
        let s = ack_nak_scenario(protocol, loss, cell);
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
