//! Chaos on the namespace LAN: rmcast (nak-poll, paced at the link rate)
//! between a few receivers while something breaks — a receiver or the
//! sender killed or stopped, a link down, heavy loss, a late joiner, two
//! sessions on one group, a full disk. Each scenario states what rmcast
//! promises, checks it, measures how long it took to notice, and proves
//! that no namespace, process or complete-looking unverified file is left.
//!
//! `lan.rs` is the harness (the lab's testbed and process code, plus the
//! faults); one file per family: `process.rs` (signals), `link.rs` (link
//! down, loss), `group.rs` (late joiner, colliding sessions), `disk.rs`,
//! `overlay.rs` (an interior node of a TCP overlay killed: self-healing),
//! `hybrid.rs` (receivers whose network drops multicast: hybrid sessions),
//! `laggard.rs` (a slow receiver waited for, ejected, or moved to a TCP
//! catch-up).
//! Root only; `tests/chaos.rs` runs them with `RMCAST_LAB_NETNS=1`.

mod disk;
mod group;
mod hybrid;
mod laggard;
mod lan;
mod link;
mod overlay;
mod process;

pub use lan::{GROUP, Lan, P, Setup, processes_mentioning};

use anyhow::Result;
use std::path::Path;
use std::time::Duration;

/// What one scenario found.
#[derive(Clone, Debug)]
pub struct Row {
    /// Scenario name.
    pub scenario: String,
    /// What was observed (the expectation held, or the test failed).
    pub outcome: String,
    /// Fault to the verdict it caused (sender's exit, receivers' exits,
    /// completion), when the scenario has a fault to detect.
    pub detect: Option<Duration>,
    /// The scenario's whole run, build and teardown included.
    pub wall: Duration,
}

/// Where a scenario works and which rmcast it runs.
pub struct Ctx<'a> {
    /// Its work directory (objects, logs, output directories).
    pub work: &'a Path,
    /// The rmcast binary.
    pub rmcast: &'a Path,
}

/// A scenario: checks its expectation, returns what it observed and its
/// time to detect.
pub type Scenario = fn(&Ctx) -> Result<(String, Option<Duration>)>;

/// Every scenario, by name, in the order of the issue.
pub const SCENARIOS: [(&str, Scenario); 21] = [
    ("kill-receiver", process::kill_receiver),
    ("stop-receiver", process::stop_receiver),
    ("kill-sender", process::kill_sender),
    ("stop-sender", process::stop_sender),
    ("link-down-tolerated", link::link_down_tolerated),
    ("link-down-named", link::link_down_named),
    ("loss-20", link::loss_20),
    ("late-joiner", group::late_joiner),
    ("colliding-sessions", group::colliding_sessions),
    ("colliding-sessions-stuck", group::colliding_sessions_stuck),
    ("full-disk", disk::full_disk),
    ("disk-fills", disk::disk_fills),
    ("kill-overlay-chain", overlay::kill_chain),
    ("kill-overlay-bintree", overlay::kill_bintree),
    ("kill-overlay-pipeline", overlay::kill_pipeline),
    ("stop-overlay-chain", overlay::stop_chain),
    ("hybrid-some-deaf", hybrid::some_deaf),
    ("hybrid-no-multicast", hybrid::no_multicast),
    ("bcast-some-deaf", hybrid::bcast_some_deaf),
    ("laggard-eject", laggard::eject),
    ("laggard-tcp", laggard::tcp),
];

/// The common LAN: 3 receivers, 4 MB, 20 Mbit/s (a transfer lasts ~1.7 s,
/// long enough to break mid-way, short enough for CI).
pub fn setup() -> Setup {
    Setup {
        receivers: 3,
        size: 4_000_000,
        rate_bits_per_s: 20_000_000,
    }
}

/// The sender's peer timeout in the scenarios that expect removal.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs the scenario `name` in `work` (a fresh directory).
pub fn run(name: &str, work: &Path, rmcast: &Path) -> Result<Row> {
    let (_, f) = SCENARIOS
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| anyhow::anyhow!("no chaos scenario {name}"))?;
    let t0 = std::time::Instant::now();
    let (outcome, detect) = f(&Ctx { work, rmcast })?;
    Ok(Row {
        scenario: name.to_string(),
        outcome,
        detect,
        wall: t0.elapsed(),
    })
}

/// The table of rows, Markdown, in [`SCENARIOS`] order.
pub fn table(rows: &[Row]) -> String {
    let order = |r: &Row| SCENARIOS.iter().position(|(n, _)| *n == r.scenario);
    let mut rows: Vec<&Row> = rows.iter().collect();
    rows.sort_by_key(|r| order(r));
    let mut s = String::from("| scenario | outcome | time to detect | run |\n|---|---|---|---|\n");
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {:.1} s |\n",
            r.scenario,
            r.outcome.replace('|', "/"),
            r.detect
                .map(|d| format!("{:.2} s", d.as_secs_f64()))
                .unwrap_or_else(|| "—".into()),
            r.wall.as_secs_f64()
        ));
    }
    s
}

/// `d` as seconds with two decimals.
pub(crate) fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}
