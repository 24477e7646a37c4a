//! The seeded fault campaign (issue 19) at CI scale: a few hundred seeds
//! per protocol, each with faults drawn from its seed (loss, bursts,
//! feedback loss, a crash, garbage, sequence wrap, a slow reader, a late
//! hash; for PRMP streams duplication and reordering too; for the
//! overlays crashes, pauses and stalls of receivers and of the sender),
//! every run through the simulator's invariants. A failure names
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
    (
        CampaignProtocol::NakPoll,
        777,
        "resume and delta: a receiver paused 3.4 s from the start reported what it held \
     after the sender had stopped waiting; its point then lay past what was sent, the \
     sender took its feedback for acknowledging packets never sent and removed it; a late \
     report now counts for the member (not for the plan)",
    ),
    (
        CampaignProtocol::Ack,
        42,
        "reordering (data and feedback): feedback generated later but claiming below the \
     member's point made the sender remove every member as asking again for acknowledged \
     packets; a claim now counts only below what was acknowledged rto_max ago",
    ),
    (
        CampaignProtocol::Ack,
        15,
        "duplication, sealed: the copies are refused as replays (as they must be), and only \
     as replays",
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

/// Found by the full campaign (PRMP under 19 % loss down and 16 % up),
/// first read as "the sender goes on past a suspected member's window". A
/// closer look: while receiver 4 was a member nothing arrived beyond its
/// window; the 862 packets came after the sender removed it as unresponsive
/// (0.627 s), which it did not know yet. Flow control is owed to members,
/// so the invariant now counts what arrives beyond a window while the
/// receiver is one (`StreamReport::beyond_window_as_member`). Replay:
/// `cargo run --release -p rmcast-sim --example campaign -- --protocol prmp
/// --seed 8864 --runs 1 -v`.
#[test]
fn prmp_holds_flow_control_for_members_and_not_for_the_removed() {
    let run = campaign::run(CampaignProtocol::Prmp, 8864);
    assert!(run.result.is_ok(), "{:?}", run.result);
}

/// The campaign's groups are 1 to 12 receivers; past 1,000 a group answers
/// in slots and takes its `Close` with the data. A few seeds per datagram
/// protocol with the group grown to 1,100 receivers, under the faults
/// drawn for them (`campaign --receivers 1100` runs any number).
#[test]
fn seeds_grown_past_a_thousand_receivers_pass() {
    let protocols = [
        CampaignProtocol::Ack,
        CampaignProtocol::NakPoll,
        CampaignProtocol::Ring,
        CampaignProtocol::NakPollFec,
    ];
    for p in protocols {
        for seed in 0..4 {
            let run = campaign::run_grown(p, seed, Some(1100));
            assert!(
                run.result.is_ok(),
                "{p} seed {seed} ({}) grown to 1,100 receivers: {:?}\nreplay: cargo run \
                 --release -p rmcast-sim --example campaign -- --protocol {p} --seed {seed} \
                 --runs 1 --receivers 1100 -v",
                run.class.name(),
                run.result.err()
            );
        }
    }
}
