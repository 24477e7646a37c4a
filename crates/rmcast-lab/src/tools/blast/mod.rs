//! `blast`: raw UDP multicast with no flow control, to find where a
//! receiver stops keeping up (the Hunt thesis' receive-limit experiment,
//! Table 3.1).
//!
//! The sender (`blast-send`) sends datagrams of `--size` bytes to the group
//! at `--pps` packets per second on an absolute schedule (sleep to near each
//! deadline, then spin), for `--count` datagrams or `--seconds`, then a few
//! end markers carrying how many datagrams it sent. Send errors (ENOBUFS,
//! EAGAIN, ...) are counted, not fatal, and do not use up a sequence number,
//! so the sequence space is exactly the datagrams the kernel accepted.
//!
//! Each receiver (`blast-recv`) joins the group, counts distinct sequence
//! numbers, duplicates and reorderings, and stops after an end marker (or
//! when idle too long); it prints one JSON line ([`RecvReport`]) and writes
//! it to `--report`, where the lab's runner reads it. The two programs
//! are in `program.rs`, the datagram header and the reports in
//! [`wire`]; this file is the driver.
//!
//! Every datagram starts with a 24-byte header ([`wire::Header`]): magic
//! `RMBL`, kind (data or end), 3 bytes zero, sequence number (u64, big
//! endian), send time (ns since the Unix epoch, u64, big endian). An end
//! marker's sequence field is the number of data datagrams sent.

mod program;
pub mod wire;

pub use program::{BlastRecvArgs, BlastSendArgs, blast_recv, blast_send, recv_socket, send_socket};
pub use wire::{RecvReport, SendReport};

use crate::tools::driver::{Completion, Ctx, Plan, Tool, paced_rate, s, strip_flag};
use crate::units::arg_value;
use std::path::{Path, PathBuf};
use wire::{HEADER_LEN, IP_UDP_OVERHEAD, MAX_DATAGRAM};

/// How a blast tool will run, from its arguments and the run's object size
/// and link rate: `(datagram size, pps, count)`; count is `None` when the
/// arguments bound the blast in time (`--seconds`) or count themselves.
/// Without `--pps`, a shaped link sets the pace (`rate_fraction` × link
/// rate in wire bits, IP/UDP headers included); unshaped, 0 = unpaced.
pub fn plan_numbers(
    args: &[String],
    object_size: u64,
    paced_bits_per_s: Option<u64>,
) -> Result<(usize, Option<f64>, Option<u64>), String> {
    let size: usize = match arg_value(args, "--size") {
        Some(v) => v
            .parse()
            .map_err(|_| format!("blast: --size {v} is not a number"))?,
        None => 1024,
    };
    if !(HEADER_LEN..=MAX_DATAGRAM).contains(&size) {
        return Err(format!(
            "blast: --size must be in {HEADER_LEN}..={MAX_DATAGRAM}"
        ));
    }
    let number = |flag: &str| -> Result<Option<f64>, String> {
        match arg_value(args, flag) {
            Some(v) => v
                .parse::<f64>()
                .map(Some)
                .map_err(|_| format!("blast: {flag} {v} is not a number")),
            None => Ok(None),
        }
    };
    let pps = match (number("--pps")?, number("--bytes-per-s")?) {
        (Some(_), Some(_)) => return Err("blast: give --pps or --bytes-per-s, not both".into()),
        (Some(p), None) => Some(p),
        (None, Some(b)) => Some(b / size as f64),
        (None, None) => None,
    };
    let added_pps = match (pps, paced_bits_per_s) {
        (None, Some(bits)) => Some(bits as f64 / ((size + IP_UDP_OVERHEAD) as f64 * 8.0)),
        _ => None,
    };
    let bounded = arg_value(args, "--count").is_some() || arg_value(args, "--seconds").is_some();
    let count = (!bounded).then(|| object_size.div_ceil(size as u64).max(1));
    Ok((size, added_pps, count))
}

/// Seconds a blast should take (for the run's time limit), if known.
pub fn planned_seconds(
    args: &[String],
    object_size: u64,
    paced_bits_per_s: Option<u64>,
) -> Option<f64> {
    let (size, added_pps, count) = plan_numbers(args, object_size, paced_bits_per_s).ok()?;
    let pps = added_pps
        .or_else(|| arg_value(args, "--pps")?.parse().ok())
        .or_else(|| {
            let b: f64 = arg_value(args, "--bytes-per-s")?.parse().ok()?;
            Some(b / size as f64)
        })?;
    if pps <= 0.0 {
        return None;
    }
    let secs: Option<f64> = arg_value(args, "--seconds").and_then(|s| s.parse().ok());
    let count = count.or_else(|| arg_value(args, "--count")?.parse().ok());
    match (secs, count) {
        (Some(s), Some(c)) => Some(s.min(c as f64 / pps)),
        (Some(s), None) => Some(s),
        (None, Some(c)) => Some(c as f64 / pps),
        (None, None) => None,
    }
}

/// Where blast host `i` (0 = sender) writes its JSON report.
pub fn blast_report(run_dir: &Path, i: usize) -> PathBuf {
    run_dir.join(format!("h{i}.blast.json"))
}

/// The blast plan.
pub fn plan(tool: &Tool, c: &Ctx) -> Result<Plan, String> {
    let paced = paced_rate(tool, c.rate_bits_per_s);
    let (dgram, added_pps, count) = plan_numbers(&tool.args, c.size, paced)?;
    let recv = c
        .receivers()
        .map(|i| {
            let mut args = vec![
                s("blast-recv"),
                s("--group"),
                c.group_port(),
                s("--iface"),
                s(c.addr(i)),
                s("--timeout"),
                s(c.limit_s.ceil()),
                s("--report"),
                blast_report(c.run_dir, i).display().to_string(),
            ];
            args.extend(tool.recv_args.iter().cloned());
            c.hidden(i, args)
        })
        .collect();
    let mut args = vec![
        s("blast-send"),
        s("--group"),
        c.group_port(),
        s("--iface"),
        s(c.addr(0)),
        s("--ttl"),
        s(1),
        s("--timeout"),
        s(c.limit_s.ceil()),
        s("--report"),
        blast_report(c.run_dir, 0).display().to_string(),
        s("--size"),
        s(dgram),
    ];
    if let Some(pps) = added_pps {
        args.extend([s("--pps"), format!("{pps:.1}")]);
    }
    if let Some(n) = count {
        args.extend([s("--count"), s(n)]);
    }
    args.extend(strip_flag(&tool.args, "--size"));
    Ok(Plan {
        relays: Vec::new(),
        receivers: recv,
        sender: c.hidden(0, args),
        daemon_status: None,
        completion: Completion::AllExit,
        verify: false,
        served: c.n,
        settle_s: 0.3,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_numbers_fill_in_count_and_pace() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (size, pps, count) = plan_numbers(&args(&["--size", "1000"]), 10_000, None).unwrap();
        assert_eq!((size, pps, count), (1000, None, Some(10)));
        let (_, pps, count) = plan_numbers(
            &args(&["--size=1000", "--seconds", "2"]),
            1,
            Some(8_224_000),
        )
        .unwrap();
        assert_eq!(count, None);
        assert!((pps.unwrap() - 1000.0).abs() < 1e-9);
        assert!(plan_numbers(&args(&["--size", "10"]), 1, None).is_err());
        assert!(plan_numbers(&args(&["--pps", "1", "--bytes-per-s", "1"]), 1, None).is_err());
        let secs = planned_seconds(
            &args(&["--size", "1000", "--bytes-per-s", "1e6", "--count", "500"]),
            1,
            None,
        )
        .unwrap();
        assert!((secs - 0.5).abs() < 1e-9);
        let secs = planned_seconds(&args(&["--pps", "100", "--count", "50"]), 1, None).unwrap();
        assert!((secs - 0.5).abs() < 1e-9);
        assert_eq!(
            planned_seconds(&args(&["--pps", "100", "--seconds", "3"]), 1, None),
            Some(3.0)
        );
    }

    #[test]
    fn the_suites_blast_series_plan_at_every_x() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/suites");
        let mut checked = 0;
        for f in ["fsu.toml", "grid.toml", "segmentation.toml", "hunt.toml"] {
            let text = std::fs::read_to_string(dir.join(f)).unwrap();
            let v: toml::Value = toml::from_str(&text).unwrap_or_else(|e| panic!("{f}: {e}"));
            for e in v["experiment"].as_array().unwrap() {
                let values = e.get("values").and_then(|x| x.as_array()).cloned();
                for sr in e["series"].as_array().unwrap() {
                    if sr["kind"].as_str() != Some("blast") {
                        continue;
                    }
                    let raw: Vec<String> = sr
                        .get("args")
                        .and_then(|a| a.as_array())
                        .map(|a| a.iter().map(|x| x.as_str().unwrap().to_string()).collect())
                        .unwrap_or_default();
                    for x in values.iter().flatten() {
                        let x = match x {
                            toml::Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        let args: Vec<String> = raw.iter().map(|a| a.replace("{x}", &x)).collect();
                        plan_numbers(&args, 1_000_000, Some(95_000_000))
                            .unwrap_or_else(|e| panic!("{f} {}: {e}", sr["name"]));
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked >= 20, "only {checked} blast points");
    }
}
