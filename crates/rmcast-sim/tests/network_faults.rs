//! Duplicated and reordered datagrams (a switch's or a bonded link's
//! doing): every protocol completes byte-exact, nothing is delivered
//! twice (the simulator's invariant), and the duplicates are counted.

mod common;

use common::*;
use rmcast_proto::ProtocolId;
use rmcast_sim::LossModel;
use std::time::Duration;

#[test]
fn duplicated_and_reordered_datagrams_change_no_outcome() {
    for (protocol, seed) in [
        (ProtocolId::NakPoll, 1),
        (ProtocolId::Ack, 2),
        (ProtocolId::Ring, 3),
        (ProtocolId::Tree, 4),
    ] {
        for sealed in [false, true] {
            let mut s = scenario(protocol, 6, 400_000, LossModel::Bernoulli(0.01), seed);
            s.duplicate = 0.2;
            s.reorder = 0.2;
            s.reorder_delay = Duration::from_micros(800);
            let s = if sealed { s.sealed() } else { s };
            let r = check(&s);
            assert!(
                r.outcome.ok,
                "{protocol:?} sealed {sealed}: {:?}",
                r.outcome
            );
            assert!(r.receivers.iter().all(|x| x.hash_ok), "{protocol:?}");
            let dups: u64 = r
                .receivers
                .iter()
                .map(|x| x.stats.duplicates + x.stats.auth.replayed)
                .sum();
            assert!(
                dups > 0,
                "{protocol:?}: duplicates arrived and were dropped"
            );
        }
    }
}
