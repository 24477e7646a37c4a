//! The object's hash travels in `Close`, and the runtime computes it while
//! the data flows: the simulator hands it to the sender late
//! (`Scenario::hash_ready_at`) and every session still completes.

mod common;

use common::*;
use rmcast_proto::ProtocolId;
use rmcast_sim::LossModel;
use std::time::Duration;

/// The hash is ready long after every byte is acknowledged — past the
/// sender's peer timeout (5 s) and the receivers' sender timeout (10 s):
/// nobody is timed out for a `Close` that was never sent, the sender keeps
/// the receivers listening with keepalives, and the `Close` then goes at
/// once and the session completes.
#[test]
fn a_hash_ready_after_every_byte_is_acknowledged_still_completes() {
    for (protocol, loss, seed) in [
        (ProtocolId::NakPoll, LossModel::None, 11),
        (ProtocolId::Ack, LossModel::Bernoulli(0.02), 12),
        (ProtocolId::Tree, LossModel::None, 13),
    ] {
        let ready = Duration::from_secs(12);
        let mut s = scenario(protocol, 6, 500_000, loss, seed);
        s.hash_ready_at = Some(ready);
        let r = check(&s);
        assert!(r.outcome.ok, "{protocol:?}: {:?}", r.outcome);
        assert!(r.receivers.iter().all(|x| x.hash_ok), "{protocol:?}");
        assert!(r.sender.keepalives > 0, "{protocol:?}: {:?}", r.sender);
        assert!(
            r.seconds >= ready.as_secs_f64(),
            "{protocol:?}: finished at {} s, before the hash",
            r.seconds
        );
        // The Close follows the hash promptly, not after a backed-off timer.
        assert!(
            r.seconds < ready.as_secs_f64() + 1.0,
            "{protocol:?}: finished at {} s",
            r.seconds
        );
    }
}

/// The hash is ready before the last byte is acknowledged (the usual case:
/// hashing is faster than the network): the session runs exactly as with
/// the hash given up front.
#[test]
fn a_hash_ready_before_close_is_due_changes_nothing() {
    let mut s = scenario(ProtocolId::NakPoll, 6, 500_000, LossModel::None, 21);
    let up_front = check(&s);
    s.hash_ready_at = Some(Duration::from_millis(1));
    let late = check(&s);
    assert!(late.outcome.ok, "{:?}", late.outcome);
    assert_eq!(late.sender.keepalives, 0);
    assert_eq!(late.seconds, up_front.seconds);
    assert_eq!(late.sender, up_front.sender);
}
