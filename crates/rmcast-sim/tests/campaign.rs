//! The seeded fault campaign (issue 19) at CI scale: a few hundred seeds
//! per protocol, each with faults drawn from its seed (loss, bursts,
//! feedback loss, a crash, garbage, sequence wrap, a slow reader, a late
//! hash; for PRMP streams duplication and reordering too; the overlays
//! clean), every run through the simulator's invariants. A failure names
//! the protocol and seed; `cargo run --release -p rmcast-sim --example
//! campaign -- --protocol P --seed S --runs 1 -v` replays it. The full
//! campaign (10,000 seeds per protocol) is the example without `--runs 1`.

use rmcast_sim::campaign::{self, CampaignProtocol, Cell};

/// Seeds per protocol here; `RMCAST_CAMPAIGN_RUNS` overrides.
const RUNS: u64 = 250;

/// Seeds the full campaign found failing, kept as regression tests.
const REGRESSIONS: &[(CampaignProtocol, u64, &str)] = &[
    (
        CampaignProtocol::NakPollGoBackN,
        5207,
        "a slow reader behind a 64 KiB buffer: Go-back-N rewound every 5 ms, each \
     burst overran the reader again (502,851 resends until the watchdog ended \
     the session); rewinds now back off while the base does not move",
    ),
    (
        CampaignProtocol::NakPollHunt,
        742,
        "one receiver, its link down 419 ms: the answer to each stall poll moved the \
     base past the echoed packet and the sender discarded what it said, so it \
     repaired one packet per RTO (37 packets in 60 s); the echo now counts below the base",
    ),
];

#[test]
fn seeds_the_campaign_found_failing_pass() {
    for &(p, seed, what) in REGRESSIONS {
        let run = campaign::run(p, seed);
        match &run.result {
            Ok(r) => assert!(!r.member_failed, "{p} seed {seed} ({what}): {r:?}"),
            Err(e) => panic!("{p} seed {seed} ({what}): {e}"),
        }
    }
}

#[test]
fn every_protocol_survives_its_seeded_faults() {
    let runs = std::env::var("RMCAST_CAMPAIGN_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(RUNS);
    let mut failures = Vec::new();
    for p in CampaignProtocol::ALL {
        let mut cell = Cell::default();
        for seed in 0..runs {
            let run = campaign::run(p, seed);
            cell.add(&run);
            if let Err(e) = &run.result {
                let first = e.to_string();
                failures.push(format!(
                    "{p} seed {seed} ({}): {}",
                    run.class.name(),
                    first.lines().next().unwrap_or_default()
                ));
            }
        }
        println!(
            "{p}: {} runs, {} failures, {} with a failed receiver, worst {:.2} s",
            cell.runs, cell.failures, cell.member_failures, cell.worst_seconds
        );
    }
    assert!(
        failures.is_empty(),
        "{} failing runs (replay: cargo run --release -p rmcast-sim --example campaign -- --protocol P --seed S --runs 1 -v):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Found by the full campaign, not fixed yet: PRMP under 19 % loss down and
/// 16 % up. Receiver 4's window advertisements were lost, the sender
/// suspected it (0.347 s) and went on sending past its advertised window
/// (862 packets arrived beyond it; the sender's own count of packets sent
/// beyond a window it knew stayed 0), and removed it as unresponsive at
/// 0.627 s. Flow control should hold for a suspected member until it is
/// removed. Replay: `cargo run --release -p rmcast-sim --example campaign
/// -- --protocol prmp --seed 8864 --runs 1 -v`.
#[test]
#[ignore = "finding: PRMP sends past a suspected member's window (seed 8864)"]
fn prmp_holds_flow_control_for_a_suspected_member() {
    let run = campaign::run(CampaignProtocol::Prmp, 8864);
    assert!(run.result.is_ok(), "{:?}", run.result);
}
