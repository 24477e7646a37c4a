//! The `symmetric` tool kind: the PRMP paper's closed group (Section 5).
//!
//! A point's `receivers` is the group size N: the runner starts
//! `rmcast lab rounds` ([`crate::tools::rounds`]) on hosts h0..hN−1 at once (every
//! host is a peer; the testbed's hN stays idle), with the point's size as
//! the bytes each node sends and the tool's `args` (`--proto prmp|ff|multitcp
//! --round S --think-ms 100 --response-rate 20 …`) passed through. It
//! watches them (no progress — no new round line on any node's stderr — for
//! `stall_s`, or `max_run_s` in all, fails the run; a node that fails stops
//! the rest after 2 s) and records
//!
//! - T = max over nodes of T_i (START to the last message of round M),
//!   as `seconds` (metric `t_seconds`);
//! - C = bytes all hosts' interfaces transmitted during the run (metric
//!   `cost_mb`, in 10^6 bytes): the paper's "bytes passed to UDP, data and
//!   feedback, a multicast counted once", measured on the wire (so IP, UDP
//!   and Ethernet headers included, and for MultiTCP the real TCP bytes,
//!   where the paper could only give a lower bound);
//! - data packets, repairs, and responses per data packet (PRMP/FF: the
//!   senders' own counters summed over nodes).

use super::Scenario;
use super::metrics::RunRecord;
use super::record::{Point, RunOptions, finish_record, record_traffic, start_record, wait_reaped};
use crate::procs::{Exit, Proc, ProcSet};
use crate::signals;
use crate::testbed::Testbed;
use crate::tools::read_report;
use crate::tools::rounds::NodeReport;
use anyhow::Result;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Runs one symmetric point: N = `pt.n` nodes.
pub(crate) fn run_one(
    sc: &Scenario,
    opts: &RunOptions,
    tb: &Testbed,
    pt: &Point,
) -> Result<RunRecord> {
    let n = pt.n;
    let (run_dir, mut rec) = start_record(sc, opts, tb, pt)?;
    if matches!(tb, Testbed::Ssh(_)) {
        rec.status = "unavailable".into();
        rec.reasons.push(
            "unavailable: symmetric groups run on the netns and local testbeds, not yet over ssh"
                .into(),
        );
        return Ok(rec);
    }
    if n < 2 || n > tb.hosts().len() {
        rec.status = "unavailable".into();
        rec.reasons.push(format!(
            "a symmetric group needs 2..={} nodes (got {n})",
            tb.hosts().len()
        ));
        return Ok(rec);
    }
    let before = tb.counters(n)?;
    let shaper_before = tb.shaper_drops()?;
    let mut set = ProcSet::default();
    let mut reasons: Vec<String> = Vec::new();
    let reports: Vec<_> = (0..n).map(|i| run_dir.join(format!("h{i}.json"))).collect();
    start_nodes(opts, tb, pt, &run_dir, &reports, &mut set)?;
    watch_nodes(sc, &mut set, &mut reasons)?;
    wait_reaped(&mut set, Duration::from_secs(2));
    let after = tb.counters(n)?;
    rec.shaper_drops = tb.shaper_drops()?.saturating_sub(shaper_before);
    judge_nodes(&set, &mut reasons);
    let nodes_rep = read_node_reports(&reports, pt, &mut reasons);
    let delta: Vec<_> = after.iter().zip(&before).map(|(a, b)| a.since(b)).collect();
    record_traffic(&mut rec, &delta);
    let optimum = pt.size * n as u64;
    rec.overhead_bytes = rec.tx_bytes_total as i64 - optimum as i64;
    rec.cost = (rec.tx_bytes_total + rec.rx_bytes_total) as f64 / optimum.max(1) as f64;
    if nodes_rep.len() == n {
        record_rounds(&mut rec, &nodes_rep, optimum);
    }
    let cpu: Vec<f64> = set.procs.iter().filter_map(Proc::cpu_s).collect();
    if !cpu.is_empty() {
        rec.cpu_receiver_s_mean = Some(cpu.iter().sum::<f64>() / cpu.len() as f64);
        rec.cpu_receiver_s_max = cpu.iter().copied().reduce(f64::max);
    }
    if rec.shaper_drops > 0 {
        reasons.push(format!(
            "warning: the tbf shapers dropped {} packets",
            rec.shaper_drops
        ));
    }
    finish_record(&mut rec, &set, reasons);
    Ok(rec)
}

/// Starts `rmcast lab rounds` on hosts h0..hN−1, each writing its report
/// to `reports[i]`; on a failed start, kills those already started.
fn start_nodes(
    opts: &RunOptions,
    tb: &Testbed,
    pt: &Point,
    run_dir: &Path,
    reports: &[PathBuf],
    set: &mut ProcSet,
) -> Result<()> {
    // Fixed ports below the ephemeral range (32768 and up), 200 per run.
    let port = 20000 + 200 * ((pt.seq as u32 * 7 + std::process::id() * 131) % 60) as u16;
    let group = Ipv4Addr::new(239, 77, 1 + (pt.seq % 200) as u8, 9);
    let nodes: Vec<String> = tb.hosts()[..reports.len()]
        .iter()
        .map(|h| h.addr.to_string())
        .collect();
    let nodes = nodes.join(",");
    let me = &opts.self_cmd[0];
    for (i, report) in reports.iter().enumerate() {
        let mut args: Vec<String> = opts.self_cmd[1..].to_vec();
        args.extend(
            [
                "rounds",
                "--node",
                &i.to_string(),
                "--nodes",
                &nodes,
                "--bytes",
                &pt.size.to_string(),
                "--group",
                &group.to_string(),
                "--port",
                &port.to_string(),
                "--seed",
                &(pt.repeat as u64 + 1).to_string(),
                "--report",
                &report.to_string_lossy(),
            ]
            .map(String::from),
        );
        args.extend(pt.tool.args.iter().cloned());
        let cmd = tb.command(i, me, &args);
        match Proc::spawn(cmd, format!("h{i} rounds"), i, run_dir) {
            Ok(p) => set.procs.push(p),
            Err(e) => {
                set.kill_all("runner error");
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Watches the nodes until all ended: no new round line on any node's
/// stderr for `stall_s`, or `max_run_s` in all, fails the run; a node that
/// fails stops the rest after 2 s.
fn watch_nodes(sc: &Scenario, set: &mut ProcSet, reasons: &mut Vec<String>) -> Result<()> {
    let t0 = Instant::now();
    let hard = t0 + Duration::from_secs_f64(sc.max_run_s);
    let stall = Duration::from_secs_f64(sc.stall_s);
    let (mut progress, mut last_progress) = (0u64, t0);
    let mut first_failure: Option<Instant> = None;
    loop {
        if let Err(e) = signals::check() {
            set.kill_all("interrupted");
            return Err(e);
        }
        let now = Instant::now();
        if set.poll_all() {
            break;
        }
        let p: u64 = set
            .procs
            .iter()
            .map(|p| p.stderr.metadata().map_or(0, |m| m.len()))
            .sum();
        if p != progress {
            progress = p;
            last_progress = now;
        }
        let failed = set
            .procs
            .iter()
            .any(|p| p.ended.is_some_and(|e| e.exit != Exit::Code(0)));
        if failed && first_failure.is_none() {
            first_failure = Some(now);
        }
        if first_failure.is_some_and(|t| now.duration_since(t) > Duration::from_secs(2)) {
            set.kill_all("another node failed");
            break;
        }
        if now >= hard {
            let why = format!("not finished after {:.0} s (max_run_s)", sc.max_run_s);
            reasons.push(why.clone());
            set.kill_all(&why);
            break;
        }
        if now.duration_since(last_progress) > stall {
            let why = format!(
                "deadlock/livelock: no node finished a round for {:.0} s",
                stall.as_secs_f64()
            );
            reasons.push(why.clone());
            set.kill_all(&why);
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// Adds a reason for every node that failed on its own or was not reaped.
fn judge_nodes(set: &ProcSet, reasons: &mut Vec<String>) {
    for p in &set.procs {
        match (p.ended.map(|e| e.exit), &p.killed_by_us) {
            (_, Some(why)) if why == "another node failed" => {}
            (_, Some(_)) | (Some(Exit::Code(0)), None) => {}
            (Some(e), None) => reasons.push(format!(
                "{} failed ({e:?}): {}",
                p.label,
                p.stderr_tail(300).lines().last().unwrap_or_default()
            )),
            (None, None) => reasons.push(format!("{} was not reaped", p.label)),
        }
    }
}

/// Every node's report, with a reason for each missing or incomplete one.
fn read_node_reports(
    reports: &[PathBuf],
    pt: &Point,
    reasons: &mut Vec<String>,
) -> Vec<NodeReport> {
    let n = reports.len();
    let mut nodes_rep: Vec<NodeReport> = Vec::new();
    for (i, f) in reports.iter().enumerate() {
        match read_report::<NodeReport>(f) {
            Some(r) => {
                if !r.ok {
                    reasons.push(format!("h{i}: a session did not close cleanly"));
                }
                if r.bytes_received != pt.size.max(8) * (n as u64 - 1) && pt.size >= 8 {
                    reasons.push(format!(
                        "h{i}: received {} bytes, want {}",
                        r.bytes_received,
                        pt.size * (n as u64 - 1)
                    ));
                }
                nodes_rep.push(r);
            }
            None if reasons.is_empty() => reasons.push(format!("h{i}: no report")),
            None => {}
        }
    }
    nodes_rep
}

/// T (the slowest node's time), goodput over it, and the senders' own
/// counters summed over the nodes.
fn record_rounds(rec: &mut RunRecord, nodes_rep: &[NodeReport], optimum: u64) {
    let t = nodes_rep.iter().map(|r| r.t_seconds).fold(0.0, f64::max);
    rec.seconds = Some(t);
    rec.goodput_mbps = Some(optimum as f64 * 8.0 / t.max(1e-9) / 1e6);
    let sum = |f: &dyn Fn(&NodeReport) -> Option<u64>| nodes_rep.iter().map(f).sum::<Option<u64>>();
    rec.data_packets = sum(&|r| r.data_packets);
    rec.retransmitted_packets = sum(&|r| r.repairs);
    if let (Some(d), Some(resp)) = (rec.data_packets, sum(&|r| r.responses))
        && d > 0
    {
        rec.control_per_data_packet = Some(resp as f64 / d as f64);
    }
}
