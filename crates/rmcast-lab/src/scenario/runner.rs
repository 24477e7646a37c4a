//! Runs a scenario: one testbed per (rate, receivers), then every size,
//! loss, tool and repeat on it. Each run starts the receivers, then the
//! sender, watches them, and judges the run as the Grid paper's harness
//! does: deadlock/livelock (no progress for `stall_s`), crash (signal or
//! nonzero exit), wrong or missing file (BLAKE3), performance failure (not
//! done by the time 1 % of the expected goodput would have finished). A
//! failed run is killed by PID and recorded with its reasons; the runner
//! goes on with the next.
//!
//! This file is the sweep and the sequence of one run; `watch.rs`
//! watches the processes, `judge.rs` judges the outcome, `files.rs`
//! makes the objects and finds the copies, and [`super::record`] holds what every kind of run records the same way.

use super::files::{CopiesDir, corrupt, find_output, make_object, make_object_k, tmpfs_root};
use super::judge::{
    judge_daemons, judge_exits, parse_iperf3_json, parse_rmcast_json, read_blast_reports,
    transfer_seconds,
};
use super::metrics::{self, RelayRecord, RunRecord};
use super::record::{Point, finish_record, record_traffic, start_record};
use super::watch::{Watch, watch_run};
use super::{Scenario, TestbedKind, Tool, ToolKind};
use crate::procs::{Proc, ProcSet};
use crate::signals;
use crate::testbed::{
    Hosts, IfCounters, Inventory, Local, Netns, NetnsSpec, Segments, Ssh, Testbed,
};
use crate::tools;
use crate::units;
use anyhow::{Context, Result};
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

pub use super::record::RunOptions;

/// What a scenario run did.
pub struct Summary {
    /// Runs attempted (unavailable tools included).
    pub runs: usize,
    /// Runs that succeeded.
    pub succeeded: usize,
}

/// Runs every point of the scenario; writes runs.* and points.* into `out`.
pub fn run_scenario(sc: &Scenario, opts: &RunOptions) -> Result<Summary> {
    std::fs::create_dir_all(opts.out.join("objects"))?;
    std::fs::create_dir_all(opts.out.join("runs"))?;
    std::fs::write(opts.out.join("scenario.toml"), toml::to_string(sc)?)?;
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(opts.out.join("testbeds.txt"))?;
    let mut jsonl = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(opts.out.join("runs.jsonl"))?;
    let tools: Vec<&Tool> = sc
        .tools
        .iter()
        .filter(|t| opts.only.is_empty() || opts.only.contains(&t.name))
        .collect();
    if tools.is_empty() {
        anyhow::bail!("no tool of the scenario matches --only {:?}", opts.only);
    }
    let layout = sc.segment_layout()?;
    let receivers = if opts.receivers.is_empty() {
        sc.receiver_counts()
    } else {
        opts.receivers.clone()
    };
    if let Some(seg) = &layout
        && receivers.iter().any(|&n| usize::from(n) != seg.total())
    {
        anyhow::bail!(
            "the scenario's segments {:?} fix N = {}; --receivers cannot change it",
            seg.per_segment(),
            seg.total()
        );
    }
    let repeats = opts.repeats.unwrap_or(sc.repeats);
    let kind = opts.testbed.unwrap_or(sc.testbed);
    let inventory = match (kind, &opts.inventory) {
        (TestbedKind::Ssh, Some(path)) => Some(Inventory::load(path)?),
        (TestbedKind::Ssh, None) => {
            anyhow::bail!("the ssh testbed needs --inventory FILE (the hosts; docs/lab.md)")
        }
        (_, Some(_)) => anyhow::bail!("--inventory applies to the ssh testbed (--testbed ssh)"),
        _ => None,
    };
    if kind == TestbedKind::Ssh && sc.inject.corrupt_receiver.is_some() {
        anyhow::bail!("inject.corrupt_receiver runs on the netns and local testbeds, not over ssh");
    }
    let mut records = metrics::load_runs(&opts.out).unwrap_or_default();
    let mut seq = records.len();
    let (mut runs, mut ok) = (0, 0);
    for rate in &sc.rates {
        let rate_bits_per_s = units::parse_rate_opt(rate).map_err(anyhow::Error::msg)?;
        for &n in &receivers {
            // A segmented scenario runs its cascades on the segmented LAN
            // and every other tool on one flat LAN of the same N: flat first.
            for segmented in [false, true] {
                let here: Vec<&Tool> = tools
                    .iter()
                    .copied()
                    .filter(|t| (t.kind == ToolKind::Cascade) == segmented)
                    .collect();
                if here.is_empty() {
                    continue;
                }
                signals::check()?;
                let segments = if segmented { layout.clone() } else { None };
                let mut tb = build_testbed(
                    sc,
                    kind,
                    inventory.as_ref(),
                    &opts.out,
                    n,
                    rate_bits_per_s,
                    segments,
                )?;
                writeln!(log, "{}", tb.describe())?;
                eprintln!(
                    "rmcast-lab: {}",
                    tb.describe().lines().next().unwrap_or_default()
                );
                for size_text in &sc.sizes {
                    let size = units::parse_size(size_text).map_err(anyhow::Error::msg)?;
                    let object = make_object(&opts.out.join("objects"), size)?;
                    for &loss in &sc.loss {
                        tb.set_loss(loss)?;
                        for tool in &here {
                            for repeat in 0..repeats {
                                signals::check()?;
                                let point = Point {
                                    tool,
                                    n: n as usize,
                                    size,
                                    rate_bits_per_s,
                                    loss,
                                    repeat,
                                    seq,
                                };
                                let rec = run_one(sc, opts, &tb, &point, &object)?;
                                seq += 1;
                                runs += 1;
                                ok += usize::from(rec.status == "ok");
                                eprintln!("rmcast-lab: {}", rec.one_line());
                                writeln!(jsonl, "{}", serde_json::to_string(&rec)?)?;
                                records.push(rec);
                                metrics::write_all(&opts.out, &records)?;
                            }
                        }
                    }
                }
                tb.teardown().context("removing the testbed")?;
            }
        }
    }
    let verdicts = super::claims::judge(&sc.claims, &metrics::points(&records));
    super::claims::write(&opts.out, &verdicts)?;
    for v in &verdicts {
        eprintln!("rmcast-lab: claim: {}", super::claims::line(v));
    }
    Ok(Summary {
        runs,
        succeeded: ok,
    })
}

/// The testbed for `n` receivers at a rate: flat, or segmented.
fn build_testbed(
    sc: &Scenario,
    kind: TestbedKind,
    inventory: Option<&Hosts>,
    out: &Path,
    n: u16,
    rate_bits_per_s: Option<u64>,
    segments: Option<Segments>,
) -> Result<Testbed> {
    Ok(match (kind, segments) {
        (TestbedKind::Ssh, segments) => {
            // Paths under these have the same path below each host's session.
            let roots = vec![std::path::absolute(out)?];
            // No remote tool outlives a run's longest possible life (+10 s).
            let life = (sc.startup_s + sc.max_run_s + sc.grace_s + 10.0).ceil() as u64;
            Testbed::Ssh(Box::new(Ssh::connect(
                inventory.expect("the inventory is loaded for the ssh testbed"),
                n,
                segments,
                roots,
                tmpfs_root(),
                life,
            )?))
        }
        (TestbedKind::Local, None) => Testbed::Local(Local::new(n)),
        (TestbedKind::Local, Some(seg)) => Testbed::Local(Local::segmented(seg)),
        (TestbedKind::Netns, segments) => Testbed::Netns(Netns::create(&NetnsSpec {
            receivers: n,
            rate_bits_per_s,
            mtu: sc.mtu,
            segments,
        })?),
    })
}

/// One run of a tool at a point: plan it, start and watch its processes,
/// judge the outcome, and measure it.
fn run_one(
    sc: &Scenario,
    opts: &RunOptions,
    tb: &Testbed,
    pt: &Point,
    object: &Path,
) -> Result<RunRecord> {
    if pt.tool.kind == ToolKind::Symmetric {
        return super::symmetric::run_one(sc, opts, tb, pt);
    }
    let (run_dir, mut rec) = start_record(sc, opts, tb, pt)?;
    let copies = CopiesDir::new(sc.copies, &run_dir)?;
    let out_dirs = copies.out_dirs(&run_dir, pt.n)?;
    // Several senders (rmcast `senders`): one object each, all of the point's size.
    let n_senders = pt.tool.sender_count();
    let total_bytes = pt.size * n_senders as u64;
    let limit_s = time_limit_s(sc, pt, total_bytes);
    let ctx = tools::Ctx {
        tb,
        n: pt.n,
        object,
        size: pt.size,
        out_dirs: &out_dirs,
        run_dir: &run_dir,
        group: run_group(pt.seq),
        port: run_port(pt.seq),
        rate_bits_per_s: pt.rate_bits_per_s,
        tool_loss: if tb.is_loopback() { pt.loss } else { 0.0 },
        rmcast: &opts.rmcast,
        self_cmd: &opts.self_cmd,
        limit_s,
    };
    let plan = match tools::plan(pt.tool, &ctx) {
        Ok(p) => p,
        Err(why) => {
            rec.status = "unavailable".into();
            rec.reasons.push(why);
            return Ok(rec);
        }
    };
    rec.served_receivers = plan.served;
    rec.senders = n_senders;
    let objects = sender_objects(object, pt.size, n_senders)?;
    let extra = tools::more_senders(&plan, &objects[1..]);
    let hosts = pt.n + 1;
    // Over ssh: copy what the processes read now, not while counting.
    let staged = tb.stage(
        plan.receivers
            .iter()
            .chain(&plan.relays)
            .chain(std::iter::once(&plan.sender))
            .chain(&extra)
            .map(|p| (p.host, p.program.as_str(), p.args.as_slice())),
    );
    if let Err(e) = staged {
        rec.status = "failed".into();
        rec.reasons
            .push(format!("staging the run on the hosts: {e:#}"));
        return Ok(rec);
    }
    // Relays' interfaces count in the traffic totals (C, N) too.
    let counters = || -> Result<Vec<IfCounters>> {
        let mut c = tb.counters(hosts)?;
        if !plan.relays.is_empty() {
            c.extend(tb.relay_counters()?);
        }
        Ok(c)
    };
    let before = counters()?;
    let shaper_before = tb.shaper_drops()?;
    let loss_before = tb.loss_drops()?;
    let mut set = ProcSet::default();
    let watch = watch_run(
        sc, tb, &plan, &extra, &run_dir, &out_dirs, &mut set, limit_s,
    );
    let watch = match watch {
        Ok(w) => w,
        Err(e) => {
            set.kill_all("runner error");
            if signals::interrupted() {
                return Err(e);
            }
            Watch {
                reasons: vec![format!("runner: {e:#}")],
                ..Watch::default()
            }
        }
    };
    set.kill_all("run over");
    let after = counters()?;
    // Over ssh: bring back what the hosts wrote beside their copies
    // (status files, reports).
    let fetched = tb.fetch_run_dir(&run_dir);
    rec.shaper_drops = tb.shaper_drops()?.saturating_sub(shaper_before);
    rec.loss_drops = tb.loss_drops()?.saturating_sub(loss_before);
    let mut reasons = watch.reasons;
    if let Err(e) = fetched {
        reasons.push(format!("fetching the hosts' files: {e:#}"));
    }

    // Judge every process. The senders are the last `n_senders` processes.
    let sender_idx = if watch.sender_started {
        set.procs.len().saturating_sub(n_senders)
    } else {
        set.procs.len()
    };
    judge_exits(&set, &mut reasons);
    if let Some((status, needle)) = &plan.daemon_status {
        judge_daemons(status, needle, &mut reasons);
    }
    // Fault injection: corrupt one received file before verification.
    if let Some(k) = sc.inject.corrupt_receiver
        && (1..=pt.n).contains(&k)
        && let Some(f) = find_output(&out_dirs[k])
    {
        corrupt(&f)?;
    }
    if plan.verify {
        tb.verify_copies(&out_dirs, &objects, pt.size, &opts.self_cmd, &mut reasons)?;
    }
    let secs = transfer_seconds(&set, sender_idx, plan.completion);
    record_goodput(sc, pt, &run_dir, total_bytes, secs, &mut rec, &mut reasons);
    if !plan.relays.is_empty() {
        // After the goodput: its warning must not hide G.
        check_cascade_end(&set, sender_idx, secs, &mut rec, &mut reasons);
    }
    record_wire(tb, hosts, total_bytes, &before, &after, &mut rec);
    let n_receivers = plan.receivers.len();
    record_cpu(
        pt,
        &set,
        sender_idx,
        n_receivers,
        total_bytes,
        &reasons,
        &mut rec,
    );
    record_relays(tb, &plan, &set, &mut rec);
    if rec.shaper_drops > 0 {
        reasons.push(format!(
            "warning: the tbf shaper dropped {} packets (its limit is too small for this tool's socket buffer)",
            rec.shaper_drops
        ));
    }
    finish_record(&mut rec, &set, reasons);
    // Received copies are verified; keep only logs (30 × 20 MB per run adds up).
    tb.remove_copies(&out_dirs);
    Ok(rec)
}

/// The run's hard time limit: a performance failure is not being done
/// when 1 % of the expected goodput would have been (a paced blast takes
/// as long as its schedule: twice that is allowed), capped at `max_run_s`.
fn time_limit_s(sc: &Scenario, pt: &Point, total_bytes: u64) -> f64 {
    match pt.tool.kind {
        ToolKind::Blast => tools::blast::planned_seconds(
            &pt.tool.args,
            pt.size,
            tools::paced_rate(pt.tool, pt.rate_bits_per_s),
        )
        .map(|t| sc.startup_s + 2.0 * t),
        _ => None,
    }
    .unwrap_or(sc.startup_s + total_bytes as f64 * 8.0 / (0.01 * pt.expected_bps()))
    .min(sc.max_run_s)
}

/// The run's base port: different per run, and per process for loopback
/// runs side by side.
fn run_port(seq: usize) -> u16 {
    20000 + 2 * ((seq as u32 * 7 + std::process::id() * 131) % 10000) as u16
}

/// The run's multicast group.
fn run_group(seq: usize) -> Ipv4Addr {
    Ipv4Addr::new(239, 77, 1 + (seq % 200) as u8, 1)
}

/// Every sender's object: `object` for the first, a distinct one of the
/// same size for each of the others.
fn sender_objects(object: &Path, size: u64, n_senders: usize) -> Result<Vec<PathBuf>> {
    let mut objects = vec![object.to_path_buf()];
    for k in 1..n_senders {
        let dir = object.parent().unwrap_or(Path::new("."));
        objects.push(make_object_k(dir, size, k)?);
    }
    Ok(objects)
}

/// The run's time and goodput (blast: from its reports), or a performance
/// failure when the goodput is below 1 % of the expected.
fn record_goodput(
    sc: &Scenario,
    pt: &Point,
    run_dir: &Path,
    total_bytes: u64,
    secs: Option<f64>,
    rec: &mut RunRecord,
    reasons: &mut Vec<String>,
) {
    let blast = pt.tool.kind == ToolKind::Blast;
    if blast {
        read_blast_reports(rec, run_dir, pt.n, reasons);
    }
    // Within the start-up allowance nothing is a performance failure: a
    // 1-byte object (a latency measurement) has no meaningful goodput.
    if reasons.is_empty()
        && !blast
        && let Some(secs) = secs.filter(|&t| t > sc.startup_s)
    {
        let g = total_bytes as f64 * 8.0 / secs / 1e6;
        if g < 0.01 * rec.expected_mbps {
            reasons.push(format!(
                "performance failure: goodput {g:.3} Mbit/s < 1 % of expected {:.0} Mbit/s",
                rec.expected_mbps
            ));
        }
    }
    if let Some(secs) = secs.filter(|_| reasons.is_empty() && !blast) {
        rec.seconds = Some(secs);
        rec.goodput_mbps = Some(total_bytes as f64 * 8.0 / secs / 1e6);
    }
}

/// A cascade is timed by its sender, whose exit 0 must mean that every
/// relay's subtree verified: record when the last process ended, and warn
/// when a receiver or relay ended well after the sender (a relay that
/// confirmed upstream before its own receivers would make G look better
/// than it is).
fn check_cascade_end(
    set: &ProcSet,
    sender_idx: usize,
    secs: Option<f64>,
    rec: &mut RunRecord,
    reasons: &mut Vec<String>,
) {
    rec.last_exit_seconds = transfer_seconds(set, sender_idx, tools::Completion::AllExit);
    // Receivers exit right after their confirmation; 1 s + 10 % is slack
    // for a loaded box, far below a second transfer through a relay.
    if let (Some(sender), Some(last)) = (secs, rec.last_exit_seconds)
        && last > sender * 1.1 + 1.0
    {
        reasons.push(format!(
            "warning: the last receiver or relay ended {:.2} s after the sender ({:.2} s vs {sender:.2} s): \
             did a relay confirm upstream before its downstream group verified?",
            last - sender,
            last
        ));
    }
}

/// What each relay of a cascade did (processes `n_receivers..` in the set,
/// as [`super::watch`] started them) and its own `--json` report.
fn record_relays(tb: &Testbed, plan: &tools::Plan, set: &ProcSet, rec: &mut RunRecord) {
    if let Some(seg) = tb.segments() {
        rec.segments = seg.per_segment().to_vec();
    }
    let first = plan.receivers.len();
    let arg = |args: &[String], flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .unwrap_or_default()
    };
    let mut relays: Vec<RelayRecord> = plan
        .relays
        .iter()
        .zip(set.procs.iter().skip(first))
        .map(|(spec, p)| RelayRecord {
            name: tb.node_name(spec.host),
            from: arg(&spec.args, "--from"),
            to: arg(&spec.args, "--to"),
            receivers: arg(&spec.args, "--receivers").parse().unwrap_or(0),
            exit: p.ended.map(|e| e.exit),
            killed_by_us: p.killed_by_us.clone(),
            cpu_s: p.cpu_s(),
            report: std::fs::read_to_string(&p.stdout).ok().and_then(|t| {
                t.lines()
                    .rev()
                    .find_map(|l| serde_json::from_str(l.trim()).ok())
            }),
        })
        .collect();
    relays.sort_by(|a, b| a.name.cmp(&b.name));
    rec.relays = relays;
}

/// Traffic on the wire: totals, the sender's share, overhead, cost, and
/// feedback packets per data packet (netns only: loopback mixes them).
/// `before`/`after` hold hosts h0..h(hosts−1), then any relay interfaces:
/// those count in the totals but not as receivers' feedback.
fn record_wire(
    tb: &Testbed,
    hosts: usize,
    total_bytes: u64,
    before: &[IfCounters],
    after: &[IfCounters],
    rec: &mut RunRecord,
) {
    let delta: Vec<_> = after.iter().zip(before).map(|(a, b)| a.since(b)).collect();
    record_traffic(rec, &delta);
    rec.receivers_tx_packets = delta.iter().take(hosts).skip(1).map(|d| d.tx_packets).sum();
    rec.overhead_bytes = rec.tx_bytes_total as i64 - total_bytes as i64;
    rec.cost = (rec.tx_bytes_total + rec.rx_bytes_total) as f64 / total_bytes as f64;
    if !tb.is_loopback() && rec.sender_tx_packets > 0 {
        rec.feedback_per_data_packet =
            Some(rec.receivers_tx_packets as f64 / rec.sender_tx_packets as f64);
    }
}

/// CPU of the senders and receivers (per GB moved), and what the senders
/// report about themselves (rmcast's repair fraction, iperf3's own goodput).
fn record_cpu(
    pt: &Point,
    set: &ProcSet,
    sender_idx: usize,
    n_receivers: usize,
    total_bytes: u64,
    reasons: &[String],
    rec: &mut RunRecord,
) {
    let senders = &set.procs[sender_idx.min(set.procs.len())..];
    let gb = total_bytes as f64 / 1e9;
    if let Some(s) = senders.first() {
        rec.cpu_sender_s = senders.iter().map(Proc::cpu_s).sum();
        rec.cpu_sender_s_per_gb = rec.cpu_sender_s.map(|c| c / gb);
        match pt.tool.kind {
            ToolKind::Rmcast | ToolKind::Cascade => {
                for p in senders {
                    parse_rmcast_json(rec, &p.stdout);
                }
                // Repair fraction: packets sent again per first transmission,
                // over all senders, of runs that completed.
                if reasons.iter().all(|r| r.starts_with("warning:"))
                    && let (Some(d), Some(r)) = (rec.data_packets, rec.retransmitted_packets)
                    && d > 0
                {
                    rec.loss_mean = Some(r as f64 / d as f64);
                }
            }
            ToolKind::Iperf3 if rec.goodput_mbps.is_some() => parse_iperf3_json(rec, &s.stdout),
            _ => {}
        }
    }
    let recv_cpu: Vec<f64> = set.procs[..n_receivers.min(sender_idx).min(set.procs.len())]
        .iter()
        .filter_map(Proc::cpu_s)
        .collect();
    if !recv_cpu.is_empty() {
        let mean = recv_cpu.iter().sum::<f64>() / recv_cpu.len() as f64;
        rec.cpu_receiver_s_mean = Some(mean);
        rec.cpu_receiver_s_per_gb = Some(mean / gb);
        rec.cpu_receiver_s_max = recv_cpu.iter().copied().reduce(f64::max);
    }
}
