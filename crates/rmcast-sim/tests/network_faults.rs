//! Duplicated and reordered datagrams (a switch's or a bonded link's
//! doing): every protocol completes byte-exact, nothing is delivered
//! twice (the simulator's invariant), and the duplicates are counted.

mod common;

use common::*;
use rmcast_proto::ProtocolId;
use rmcast_sim::{LossModel, Scenario};
use std::time::Duration;

/// Every protocol, plain and sealed, with 1 % loss: `(protocol, sealed,
/// scenario)`, seeds from `first`; the caller adds its fault and runs it
/// with [`succeeds`].
fn cases(first: u64, receivers: u16, size: u64) -> Vec<(ProtocolId, bool, Scenario)> {
    let protocols = [
        ProtocolId::NakPoll,
        ProtocolId::Ack,
        ProtocolId::Ring,
        ProtocolId::Tree,
    ];
    let mut out = Vec::new();
    for (seed, protocol) in (first..).zip(protocols) {
        for sealed in [false, true] {
            let s = scenario(protocol, receivers, size, LossModel::Bernoulli(0.01), seed);
            out.push((protocol, sealed, if sealed { s.sealed() } else { s }));
        }
    }
    out
}

/// Runs `s` through the simulator's checks; it must succeed.
fn succeeds(protocol: ProtocolId, sealed: bool, s: &Scenario) -> rmcast_sim::RunReport {
    let r = check(s);
    assert!(
        r.outcome.ok,
        "{protocol:?} sealed {sealed}: {:?}",
        r.outcome
    );
    r
}

#[test]
fn duplicated_and_reordered_datagrams_change_no_outcome() {
    for (protocol, sealed, mut s) in cases(1, 6, 400_000) {
        s.duplicate = 0.2;
        s.reorder = 0.2;
        s.reorder_delay = Duration::from_micros(800);
        let r = succeeds(protocol, sealed, &s);
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

/// The sender dies mid-transfer and a new one (a new session, the same
/// object) starts on the same group: the dead session ends at every
/// receiver by itself, naming the silent sender, and the new one delivers
/// to all (the simulator checks the bytes and that every receiver ended).
#[test]
fn a_restarted_sender_delivers_and_the_dead_session_ends_by_itself() {
    for (protocol, sealed, mut s) in cases(11, 5, 2_000_000) {
        s.restart = Some(rmcast_sim::Restart {
            at: Duration::from_millis(60),
            after: Duration::from_millis(400),
        });
        let r = succeeds(protocol, sealed, &s);
        assert_eq!(r.senders.len(), 1, "the dead sender reports nothing");
        for x in &r.receivers {
            let why = x.failure.as_deref().unwrap_or_default();
            assert!(
                why.contains("sender"),
                "{protocol:?} {}: the dead session's end says why: {why:?}",
                x.name
            );
        }
        // The new sender sent the whole object itself.
        assert!(r.seconds > 0.46, "{protocol:?}: {}", r.seconds);
    }
}
