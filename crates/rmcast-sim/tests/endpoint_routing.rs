//! Receiver hosts route through `rmcast_proto::Endpoint`, the runtime's
//! rule: with several senders, strays are still counted once each.

mod common;

use common::*;
use rmcast_proto::{ProtocolId, SenderConfig};
use rmcast_sim::{LossModel, Scenario};

/// Two senders, garbage and foreign sessions injected: every session
/// completes and every stray a host read is counted once, by one of its
/// machines or by its endpoint.
#[test]
fn several_senders_count_every_stray_once() {
    for seed in 1..=3 {
        let s = Scenario {
            senders: 2,
            receivers: 3,
            object_size: 500_000,
            config: SenderConfig {
                protocol: ProtocolId::NakPoll,
                window: WINDOW,
                ..SenderConfig::default()
            },
            loss: LossModel::Bernoulli(0.01),
            garbage_per_s: 5_000.0,
            seed,
            ..Scenario::default()
        };
        let r = check(&s);
        assert!(r.garbage_injected > 10, "{}", r.garbage_injected);
        for rx in &r.receivers {
            assert!(rx.garbage_seen > 10, "{}: {}", rx.name, rx.garbage_seen);
            assert_eq!(
                rx.stats.malformed + rx.stats.foreign,
                rx.garbage_seen,
                "seed {seed} {}: {:?}",
                rx.name,
                rx.stats
            );
        }
    }
}
