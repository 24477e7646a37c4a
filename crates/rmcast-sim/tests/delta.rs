//! Resume and delta in the simulator: receivers report the packets they
//! hold already (`Have`) after the manifest, and the sender sends only
//! what some receiver lacks, over every UDP protocol, with loss, with a
//! receiver that never reports and with one that crashes. The simulator's
//! invariants hold throughout: a packet reported held is never delivered
//! again (it would be "delivered twice"), and every receiver's bytes hash
//! to the object's hash.

mod common;

use common::*;
use rmcast_proto::ProtocolId;
use rmcast_sim::{Crash, LossModel, Scenario};
use std::time::Duration;

/// 2,000 packets; the first 20 are the "manifest".
const OBJECT: u64 = 2_000 * PAYLOAD;
const MANIFEST: u64 = 19 * PAYLOAD + 100;
const BARRIER: u32 = 20;
const PACKETS: u32 = 2_000;

/// Everyone holds packets 20..2000 except the changed stretches
/// 300..400 and 1500..1510; receiver 2 also lacks 1000..1100 (only it:
/// unicast), receivers 3 and 4 lack 1200..1250.
fn delta(protocol: ProtocolId, receivers: u16, loss: LossModel, seed: u64) -> Scenario {
    let mut s = scenario(protocol, receivers, OBJECT, loss, seed);
    s.config.window = 64;
    s.config.have_after = Some(MANIFEST);
    let common = [(20, 280), (400, 600), (1100, 100), (1250, 250), (1510, 490)];
    s.held = (1..=receivers)
        .map(|n| {
            let mut ranges: Vec<(u32, u32)> = common.to_vec();
            if n != 2 {
                ranges.push((1000, 100));
            }
            if n != 3 && n != 4 {
                ranges.push((1200, 50));
            }
            ranges.sort_unstable();
            (n, ranges)
        })
        .collect();
    s
}

/// Packets nobody lacks: all but the manifest and 300..400, 1000..1100,
/// 1200..1250, 1500..1510.
const SKIPPABLE: u64 = (PACKETS - BARRIER) as u64 - 100 - 100 - 50 - 10;

#[test]
fn only_what_someone_lacks_is_sent_over_every_protocol() {
    for (protocol, seed) in [
        (ProtocolId::NakPoll, 1),
        (ProtocolId::Ack, 2),
        (ProtocolId::Ring, 3),
        (ProtocolId::Tree, 4),
    ] {
        let s = delta(protocol, 6, LossModel::None, seed);
        let r = check(&s);
        assert!(r.outcome.ok, "{protocol:?}: {:?}", r.outcome);
        assert!(r.receivers.iter().all(|x| x.hash_ok), "{protocol:?}");
        assert_eq!(r.sender.skipped_packets, SKIPPABLE, "{protocol:?}");
        assert_eq!(r.sender.have_reports, 6, "{protocol:?}");
        assert_eq!(
            r.sender.data_packets,
            u64::from(PACKETS) - SKIPPABLE,
            "{protocol:?}: first transmissions"
        );
    }
}

#[test]
fn a_packet_only_one_receiver_lacks_goes_to_it_alone() {
    let s = delta(ProtocolId::NakPoll, 6, LossModel::None, 5);
    let r = check(&s);
    assert!(r.outcome.ok, "{:?}", r.outcome);
    // Receiver 2's 100 packets went by unicast: the other five never saw
    // them, so they count no duplicates of them.
    for x in &r.receivers {
        assert!(x.hash_ok, "{}", x.name);
    }
    let r1 = &r.receivers[0];
    assert!(
        r1.data_frames < u64::from(PACKETS - SKIPPABLE as u32) - 50,
        "r1 saw r2's unicast packets: {} data frames",
        r1.data_frames
    );
    assert_eq!(r.receivers[1].stats.held_packets, SKIPPABLE + 50);
}

#[test]
fn delta_under_loss_completes_byte_exact() {
    for (protocol, seed) in [
        (ProtocolId::NakPoll, 11),
        (ProtocolId::Ack, 12),
        (ProtocolId::Ring, 13),
        (ProtocolId::Tree, 14),
    ] {
        let s = delta(protocol, 8, LossModel::Bernoulli(0.03), seed);
        let r = check(&s);
        assert!(r.outcome.ok, "{protocol:?} seed {seed}: {:?}", r.outcome);
        assert!(r.receivers.iter().all(|x| x.hash_ok), "{protocol:?}");
        assert_eq!(r.sender.skipped_packets, SKIPPABLE, "{protocol:?}");
    }
}

#[test]
fn a_receiver_that_never_reports_is_waited_for_then_sent_everything() {
    // Receiver 5 holds nothing and (being an application that never looks)
    // reports nothing beyond "still looking"; with control loss some
    // reports need repeats. Nothing can be skipped, since 5 lacks it all.
    let mut s = delta(ProtocolId::NakPoll, 5, LossModel::None, 21);
    s.held.retain(|(n, _)| *n != 5);
    s.control_loss = 0.2;
    let r = check(&s);
    assert!(r.outcome.ok, "{:?}", r.outcome);
    assert!(r.receivers.iter().all(|x| x.hash_ok));
    assert_eq!(r.sender.skipped_packets, 0);
}

#[test]
fn a_receiver_that_dies_before_reporting_does_not_hold_the_group() {
    let mut s = delta(ProtocolId::NakPoll, 4, LossModel::None, 31);
    s.crashes = vec![Crash {
        receiver: 3,
        at: Duration::from_millis(1),
    }];
    let r = check(&s);
    assert!(!r.outcome.ok, "one receiver crashed");
    for x in r.receivers.iter().filter(|x| x.host != 3) {
        assert!(x.hash_ok, "{} completed", x.name);
    }
    assert!(r.sender.skipped_packets > 0);
    // Bounded by the report wait (2 s) and the peer timeout (5 s).
    assert!(r.seconds < 12.0, "took {} s", r.seconds);
}

#[test]
fn sealed_reports_open_and_the_plan_is_the_same() {
    let s = delta(ProtocolId::NakPoll, 6, LossModel::Bernoulli(0.01), 41).sealed();
    let r = check(&s);
    assert!(r.outcome.ok, "{:?}", r.outcome);
    assert!(r.receivers.iter().all(|x| x.hash_ok));
    assert_eq!(r.sender.skipped_packets, SKIPPABLE);
    assert_eq!(r.sender.auth.forged, 0);
}
