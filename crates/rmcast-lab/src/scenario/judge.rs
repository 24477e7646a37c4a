//! Judging a finished run as the Grid paper's harness does: crashes and
//! failed exits, daemons that never reported, copies that are missing or
//! differ from the original (BLAKE3), and the transfer time; plus what the
//! tools report about themselves (rmcast's and iperf3's JSON, blast's
//! reports).

use super::files::{find_named, find_output, hash_file};
use super::metrics::RunRecord;
use crate::procs::{Exit, ProcSet};
use crate::tools::Completion;
use crate::tools::blast::{RecvReport, SendReport, blast_report};
use crate::tools::read_report;
use anyhow::Result;
use std::path::{Path, PathBuf};

fn exit_text(e: Exit) -> String {
    match e {
        Exit::Code(c) => format!("exit status {c}"),
        Exit::Signal(s) => format!("signal {s}"),
    }
}

fn last_line(text: &str) -> String {
    let l = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    l.chars().take(300).collect()
}

/// Adds a reason for every process that failed or crashed on its own
/// (one the detector killed already has its reason).
pub(crate) fn judge_exits(set: &ProcSet, reasons: &mut Vec<String>) {
    for p in &set.procs {
        let Some(end) = p.ended else { continue };
        match (end.exit, &p.killed_by_us) {
            (_, Some(why)) if why == "daemon finished" || why == "run over" => {}
            (_, Some(_)) => {} // the detector already gave the reason
            (Exit::Code(0), None) => {}
            (Exit::Code(c), None) => reasons.push(format!(
                "{} failed ({}): {}",
                p.label,
                exit_text(Exit::Code(c)),
                last_line(&p.stderr_tail(2000))
            )),
            (Exit::Signal(s), None) => reasons.push(format!(
                "{} crashed ({})",
                p.label,
                exit_text(Exit::Signal(s))
            )),
        }
    }
}

/// Adds a reason for every daemon whose status file (`status`, one per
/// receiver) lacks the completion line `needle` or reports a failure.
pub(crate) fn judge_daemons(status: &[PathBuf], needle: &str, reasons: &mut Vec<String>) {
    for (i, f) in status.iter().enumerate() {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        if !text.contains(needle) {
            reasons.push(format!(
                "h{} never reported completion in {}",
                i + 1,
                f.display()
            ));
        } else if let Some(line) = text.lines().find(|l| l.starts_with(needle))
            && !line.contains(";1;")
            && line.to_ascii_lowercase().contains("fail")
        {
            reasons.push(format!("h{} reported: {line}", i + 1));
        }
    }
}

/// Integrity: every receiver (`out_dirs[1..]`) must hold a byte-identical
/// copy of each of the senders' `objects` of `size` bytes: found by its
/// name when there are several, else the largest file it wrote.
pub(crate) fn verify_copies(
    out_dirs: &[PathBuf],
    objects: &[PathBuf],
    size: u64,
    reasons: &mut Vec<String>,
) -> Result<()> {
    if objects.len() > 1 {
        for (i, d) in out_dirs.iter().enumerate().skip(1) {
            for o in objects {
                let name = o.file_name().unwrap_or_default();
                let shown = name.to_string_lossy();
                match find_named(d, name) {
                    None => reasons.push(format!("h{i}: no copy of {shown}")),
                    Some(f) => {
                        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                        if len != size {
                            reasons.push(format!("h{i}: {shown}: wrong size {len} (want {size})"));
                        } else if hash_file(&f)? != hash_file(o)? {
                            reasons.push(format!(
                                "h{i}: {shown}: content differs from the original (BLAKE3 mismatch)"
                            ));
                        }
                    }
                }
            }
        }
    } else {
        let want = hash_file(&objects[0])?;
        for (i, d) in out_dirs.iter().enumerate().skip(1) {
            match find_output(d) {
                None => reasons.push(format!("h{i}: no output file")),
                Some(f) => {
                    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                    if len != size {
                        reasons.push(format!("h{i}: wrong size {len} (want {size})"));
                    } else if hash_file(&f)? != want {
                        reasons.push(format!(
                            "h{i}: content differs from the original (BLAKE3 mismatch)"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// The transfer time: from the first sender's start (`set.procs[sender_idx]`)
/// to the last sender's exit, or to the last process's exit
/// ([`Completion::AllExit`]); `None` when a process never ended.
pub(crate) fn transfer_seconds(
    set: &ProcSet,
    sender_idx: usize,
    completion: Completion,
) -> Option<f64> {
    let senders = &set.procs[sender_idx.min(set.procs.len())..];
    let t0 = senders.first()?.started;
    let timed = match completion {
        Completion::SenderExit => senders,
        Completion::AllExit => &set.procs[..],
    };
    timed
        .iter()
        .map(|p| p.ended.map(|e| e.at.saturating_duration_since(t0)))
        .collect::<Option<Vec<_>>>()
        .and_then(|v| v.into_iter().max())
        .map(|d| d.as_secs_f64())
}

/// Reads the blast reports: loss per receiver against what the sender says
/// it sent (its count is authoritative; a receiver's own count of the end
/// marker is the fallback), the offered rate, and the received goodput.
pub(crate) fn read_blast_reports(
    rec: &mut RunRecord,
    run_dir: &Path,
    n: usize,
    reasons: &mut Vec<String>,
) {
    let sender: Option<SendReport> = read_report(&blast_report(run_dir, 0));
    match &sender {
        None => reasons.push("h0: no blast-send report".into()),
        Some(s) => {
            rec.offered_pps = Some(s.pps);
            if s.seconds > 0.0 {
                rec.seconds = Some(s.seconds);
            }
            if s.errors > 0 {
                reasons.push(format!(
                    "warning: the sender's socket refused {} datagrams ({} ENOBUFS, {} EAGAIN)",
                    s.errors, s.enobufs, s.eagain
                ));
            }
        }
    }
    let mut losses = Vec::new();
    let mut goodput = Vec::new();
    for i in 1..=n {
        let Some(r) = read_report::<RecvReport>(&blast_report(run_dir, i)) else {
            reasons.push(format!("h{i}: no blast-recv report"));
            continue;
        };
        let expected = sender.as_ref().map_or(r.expected, |s| s.sent);
        if expected == 0 {
            reasons.push(format!("h{i}: the sender sent nothing"));
            continue;
        }
        if !r.end_seen {
            reasons.push(format!(
                "warning: h{i} saw no end marker (stopped when idle)"
            ));
        }
        losses.push((1.0 - r.received as f64 / expected as f64).clamp(0.0, 1.0));
        goodput.push(r.bytes_per_s * 8.0 / 1e6);
    }
    if losses.len() == n && n > 0 {
        rec.loss_mean = Some(losses.iter().sum::<f64>() / n as f64);
        rec.loss_max = losses.iter().copied().reduce(f64::max);
        rec.goodput_mbps = Some(goodput.iter().sum::<f64>() / n as f64);
    }
}

/// iperf3's client exits once it has *written* the bytes, and the server's
/// close discards what is still in flight, so the lab's clock overstates
/// its goodput: take the receiver-side figure iperf3 measured instead.
pub(crate) fn parse_iperf3_json(rec: &mut RunRecord, stdout: &Path) {
    let text = std::fs::read_to_string(stdout).unwrap_or_default();
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
        return;
    };
    let recv = &v["end"]["sum_received"];
    if let (Some(bps), Some(secs)) = (recv["bits_per_second"].as_f64(), recv["seconds"].as_f64()) {
        rec.tool_goodput_mbps = rec.goodput_mbps;
        rec.goodput_mbps = Some(bps / 1e6);
        rec.seconds = Some(secs);
    }
}

pub(crate) fn parse_rmcast_json(rec: &mut RunRecord, stdout: &Path) {
    let text = std::fs::read_to_string(stdout).unwrap_or_default();
    let Some(v) = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    else {
        return;
    };
    // Several senders: the counts add up; control per data is over the sums.
    let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    };
    let (d0, c0) = (
        rec.data_packets.unwrap_or(0) as f64,
        rec.control_per_data_packet,
    );
    rec.retransmitted_packets = add(
        rec.retransmitted_packets,
        v["retransmitted_packets"].as_u64(),
    );
    rec.data_packets = add(rec.data_packets, v["data_packets"].as_u64());
    let d1 = v["data_packets"].as_u64().unwrap_or(0) as f64;
    rec.control_per_data_packet = match (c0, v["control_per_data_packet"].as_f64()) {
        (Some(c0), Some(c1)) if d0 + d1 > 0.0 => Some((c0 * d0 + c1 * d1) / (d0 + d1)),
        (c0, c1) => c1.or(c0),
    };
    rec.tool_goodput_mbps = match (rec.tool_goodput_mbps, v["goodput_mbps"].as_f64()) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => b.or(a),
    };
    rec.tool_seconds = match (rec.tool_seconds, v["seconds"].as_f64()) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => b.or(a),
    };
}
