//! Random scenarios — seeds, loss, receivers, sizes, faults — must all pass
//! the simulator's invariants. A failure prints the seed and the scenario.

mod common;

use common::*;
use proptest::prelude::*;
use rmcast_proto::ProtocolId;
use rmcast_sim::{Crash, LossModel};
use std::time::Duration;

/// Every datagram protocol the simulator runs (Hunt and PRMP have their
/// own randomised classes in the fault campaign, `tests/campaign.rs`).
const PROTOCOLS: [ProtocolId; 4] = [
    ProtocolId::Ack,
    ProtocolId::NakPoll,
    ProtocolId::Ring,
    ProtocolId::Tree,
];

fn loss() -> impl Strategy<Value = LossModel> {
    prop_oneof![
        Just(LossModel::None),
        (0.0..0.08f64).prop_map(LossModel::Bernoulli),
        (0.005..0.06f64, 1.5..6.0f64).prop_map(|(mean, burst)| LossModel::bursty(mean, burst)),
    ]
}

proptest! {
    // A fixed proptest seed: CI runs the same cases every time.
    #![proptest_config(ProptestConfig {
        cases: 64,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x726d_6361_7374),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_scenarios_keep_every_invariant(
        seed in any::<u64>(),
        protocol in 0usize..PROTOCOLS.len(),
        receivers in 1u16..=6,
        size in prop_oneof![0u64..3_000, 0u64..120_000],
        loss in loss(),
        window in 1u32..=40,
        isn in prop_oneof![Just(None), (u32::MAX - 200..=u32::MAX).prop_map(Some)],
        garbage in prop_oneof![Just(0.0), 100.0..3_000.0f64],
        jitter_us in 0u64..=20,
    ) {
        let protocol = PROTOCOLS[protocol];
        let mut s = scenario(protocol, receivers, size, loss, seed);
        // The ring needs a window wider than the group (enforced).
        s.config.window = if protocol == ProtocolId::Ring {
            window.max(u32::from(receivers) + 1)
        } else {
            window
        };
        s.isn = isn;
        s.garbage_per_s = garbage;
        s.cost.jitter = Duration::from_micros(jitter_us);
        let r = rmcast_sim::run(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(r.outcome.verified(), usize::from(receivers));
        prop_assert_eq!(r.data_packets, size.div_ceil(PAYLOAD));
    }

    #[test]
    fn random_crashes_fail_only_the_crashed(
        seed in any::<u64>(),
        protocol in 0usize..PROTOCOLS.len(),
        receivers in 2u16..=6,
        victim in 1u16..=6,
        crash_ms in 5u64..150,
    ) {
        let protocol = PROTOCOLS[protocol];
        let mut s = scenario(protocol, receivers, 1_500_000, LossModel::Bernoulli(0.01), seed);
        s.config.peer_timeout = Duration::from_millis(700);
        let victim = 1 + (victim - 1) % receivers;
        let at = Duration::from_millis(crash_ms);
        s.crashes = vec![Crash { receiver: victim, at }];
        // run() itself checks that every live receiver verified.
        let r = rmcast_sim::run(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(r.outcome.verified() >= usize::from(receivers) - 1);
        // Unless it had confirmed before dying, the sender removes the victim
        // within peer_timeout + 2 × rto_max of the crash.
        let victim = &r.receivers[usize::from(victim) - 1];
        let bound = (at + s.config.peer_timeout + 2 * s.config.rto_max).as_secs_f64();
        match victim.sender_failed_seconds {
            Some(t) => prop_assert!(t <= bound, "failed at {} s, bound {} s", t, bound),
            None => prop_assert!(r.outcome.members.iter().any(|m| m.name == victim.name && m.verified)),
        }
    }
}
