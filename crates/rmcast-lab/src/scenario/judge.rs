//! Judging a finished run as the Grid paper's harness does: crashes and
//! failed exits, daemons that never reported, copies that are missing or
//! differ from the original (BLAKE3), and the transfer time; plus what the
//! tools report about themselves (rmcast's and iperf3's JSON, blast's
//! reports).

use super::files::{CopyFile, hash_file, list_copies};
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
/// name when there are several, else the largest visible file it wrote.
pub(crate) fn verify_copies(
    out_dirs: &[PathBuf],
    objects: &[PathBuf],
    size: u64,
    reasons: &mut Vec<String>,
) -> Result<()> {
    let mut listings = vec![Vec::new()];
    for d in &out_dirs[1..] {
        listings.push(list_copies(d)?);
    }
    verify_listings(&listings, objects, size, reasons)
}

/// [`verify_copies`] on what each receiver's listing says (index 0, the
/// sender's, unused): the same rules wherever the files were hashed.
pub(crate) fn verify_listings(
    listings: &[Vec<CopyFile>],
    objects: &[PathBuf],
    size: u64,
    reasons: &mut Vec<String>,
) -> Result<()> {
    let hashes = objects
        .iter()
        .map(|o| Ok(hash_file(o)?.to_hex().to_string()))
        .collect::<Result<Vec<_>>>()?;
    for (i, files) in listings.iter().enumerate().skip(1) {
        let visible = || files.iter().filter(|f| f.blake3.is_some());
        if objects.len() > 1 {
            for (o, want) in objects.iter().zip(&hashes) {
                let name = o.file_name().unwrap_or_default().to_string_lossy();
                match visible().find(|f| f.name() == name) {
                    None => reasons.push(format!("h{i}: no copy of {name}")),
                    Some(f) if f.size != size => {
                        reasons.push(format!("h{i}: {name}: wrong size {} (want {size})", f.size))
                    }
                    Some(f) if f.blake3.as_deref() != Some(want) => reasons.push(format!(
                        "h{i}: {name}: content differs from the original (BLAKE3 mismatch)"
                    )),
                    Some(_) => {}
                }
            }
        } else {
            // The largest visible file; the first in path order among equals.
            let best = visible().fold(None::<&CopyFile>, |b, f| match b {
                Some(b) if b.size >= f.size => Some(b),
                _ => Some(f),
            });
            match best {
                None => reasons.push(format!("h{i}: no output file")),
                Some(f) if f.size != size => {
                    reasons.push(format!("h{i}: wrong size {} (want {size})", f.size))
                }
                Some(f) if f.blake3.as_deref() != Some(hashes[0].as_str()) => reasons.push(
                    format!("h{i}: content differs from the original (BLAKE3 mismatch)"),
                ),
                Some(_) => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_judged_from_listings_wherever_they_were_hashed() {
        let dir = tempfile::tempdir().unwrap();
        let obj = dir.path().join("object-8.bin");
        std::fs::write(&obj, b"12345678").unwrap();
        let good = list_copies(dir.path()).unwrap();
        assert_eq!(good.len(), 1);
        // The receivers' directories: a good copy beside a bigger hidden
        // part file; a short one; a corrupt one; none at all.
        let recv = dir.path().join("r");
        std::fs::create_dir_all(recv.join("h1/sub")).unwrap();
        std::fs::write(recv.join("h1/sub/object-8.bin"), b"12345678").unwrap();
        std::fs::write(recv.join("h1/.object-8.bin.part"), b"123456789").unwrap();
        std::fs::create_dir_all(recv.join("h2")).unwrap();
        std::fs::write(recv.join("h2/object-8.bin"), b"1234").unwrap();
        std::fs::create_dir_all(recv.join("h3")).unwrap();
        std::fs::write(recv.join("h3/object-8.bin"), b"12345679").unwrap();
        std::fs::create_dir_all(recv.join("h4")).unwrap();
        let dirs: Vec<PathBuf> = (0..=4).map(|i| recv.join(format!("h{i}"))).collect();
        let l1 = list_copies(&dirs[1]).unwrap();
        assert_eq!(l1[0].path, ".object-8.bin.part");
        assert_eq!(l1[0].blake3, None, "hidden files are not hashed");
        assert_eq!(l1[1].path, "sub/object-8.bin");
        let mut reasons = Vec::new();
        verify_copies(&dirs, std::slice::from_ref(&obj), 8, &mut reasons).unwrap();
        assert_eq!(
            reasons,
            [
                "h2: wrong size 4 (want 8)",
                "h3: content differs from the original (BLAKE3 mismatch)",
                "h4: no output file"
            ]
        );
        // Several senders: found by name.
        let obj2 = dir.path().join("object-8-s1.bin");
        std::fs::write(&obj2, b"abcdefgh").unwrap();
        std::fs::write(recv.join("h1/object-8-s1.bin"), b"abcdefgh").unwrap();
        let listings = vec![Vec::new(), list_copies(&dirs[1]).unwrap(), Vec::new()];
        let mut reasons = Vec::new();
        verify_listings(&listings, &[obj, obj2], 8, &mut reasons).unwrap();
        assert_eq!(
            reasons,
            [
                "h2: no copy of object-8.bin",
                "h2: no copy of object-8-s1.bin"
            ]
        );
    }
}
