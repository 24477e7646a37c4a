//! One run's record: its options, the point it measures, its directory,
//! and the parts every tool kind's runner fills in the same way (traffic,
//! processes, status). Shared by [`super::runner`] and [`super::symmetric`].

use super::Scenario;
use super::metrics::{ProcRecord, RunRecord};
use crate::procs::ProcSet;
use crate::testbed::{IfCounters, Testbed};
use crate::tools::Tool;
use crate::units;
use anyhow::Result;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How to run.
pub struct RunOptions {
    /// Output directory.
    pub out: PathBuf,
    /// The rmcast binary.
    pub rmcast: PathBuf,
    /// How to call this program's hidden subcommands.
    pub self_cmd: Vec<String>,
    /// Only these tools (empty: all).
    pub only: Vec<String>,
    /// Override the receiver counts (empty: the scenario's).
    pub receivers: Vec<u16>,
    /// Override the repeats.
    pub repeats: Option<u32>,
    /// Override the scenario's testbed (`--testbed`).
    pub testbed: Option<super::TestbedKind>,
    /// The ssh testbed's inventory file (`--inventory`).
    pub inventory: Option<PathBuf>,
}

/// The expected goodput when the link is unshaped (loopback or `none`).
pub(crate) const UNSHAPED_EXPECTED_BPS: f64 = 1e9;

/// One point of the sweep.
pub(crate) struct Point<'a> {
    pub(crate) tool: &'a Tool,
    pub(crate) n: usize,
    pub(crate) size: u64,
    pub(crate) rate_bits_per_s: Option<u64>,
    pub(crate) loss: f64,
    pub(crate) repeat: u32,
    pub(crate) seq: usize,
}

impl Point<'_> {
    /// The goodput the link allows, bits per second.
    pub(crate) fn expected_bps(&self) -> f64 {
        self.rate_bits_per_s
            .map_or(UNSHAPED_EXPECTED_BPS, |r| r as f64)
    }
}

/// A run's directory (`runs/<seq>-<tool>-n<N>-<size>-<rate>-l<loss>-r<repeat>`,
/// created) and its record with what the point says; the caller fills in
/// the outcome. Shared by every tool kind's runner.
pub(crate) fn start_record(
    sc: &Scenario,
    opts: &RunOptions,
    tb: &Testbed,
    pt: &Point,
) -> Result<(PathBuf, RunRecord)> {
    let rate = units::fmt_rate(pt.rate_bits_per_s);
    let dir_name = format!(
        "{:04}-{}-n{}-{}-{}-l{}-r{}",
        pt.seq,
        pt.tool.name,
        pt.n,
        units::fmt_size(pt.size),
        rate,
        pt.loss,
        pt.repeat
    );
    let run_dir = opts.out.join("runs").join(&dir_name);
    std::fs::create_dir_all(&run_dir)?;
    let rec = RunRecord {
        seq: pt.seq,
        tool: pt.tool.name.clone(),
        kind: format!("{:?}", pt.tool.kind).to_lowercase(),
        testbed: tb.kind_name().into(),
        receivers: pt.n,
        served_receivers: pt.n,
        size_bytes: pt.size,
        rate,
        loss: pt.loss,
        mtu: sc.mtu,
        repeat: pt.repeat,
        expected_mbps: pt.expected_bps() / 1e6,
        dir: format!("runs/{dir_name}"),
        ..RunRecord::default()
    };
    Ok((run_dir, rec))
}

/// Adds the interfaces' traffic during the run (`after` − `before`, host
/// h0 first) to the record: totals and the sender's share.
pub(crate) fn record_traffic(rec: &mut RunRecord, delta: &[IfCounters]) {
    rec.tx_bytes_total = delta.iter().map(|d| d.tx_bytes).sum();
    rec.rx_bytes_total = delta.iter().map(|d| d.rx_bytes).sum();
    rec.tx_packets_total = delta.iter().map(|d| d.tx_packets).sum();
    rec.sender_tx_bytes = delta[0].tx_bytes;
    rec.sender_tx_packets = delta[0].tx_packets;
}

/// Records every process and the verdict: `ok` when every reason is a
/// warning, else `failed`.
pub(crate) fn finish_record(rec: &mut RunRecord, set: &ProcSet, reasons: Vec<String>) {
    rec.procs = set
        .procs
        .iter()
        .map(|p| ProcRecord {
            label: p.label.clone(),
            host: p.host,
            pid: p.pid,
            node: p.remote.as_ref().map(|r| r.node.clone()),
            remote_pid: p.remote_pid(),
            exit: p.ended.map(|e| e.exit),
            killed_by_us: p.killed_by_us.clone(),
            cpu_user_s: p.ended.map_or(0.0, |e| e.user_s),
            cpu_sys_s: p.ended.map_or(0.0, |e| e.sys_s),
            stderr_tail: p.stderr_tail(400),
        })
        .collect();
    rec.status = if reasons.iter().all(|r| r.starts_with("warning:")) {
        "ok".into()
    } else {
        "failed".into()
    };
    rec.reasons = reasons;
}

/// Waits up to `within` for every process to be reaped.
pub(crate) fn wait_reaped(set: &mut ProcSet, within: Duration) {
    let deadline = Instant::now() + within;
    while !set.poll_all() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}
