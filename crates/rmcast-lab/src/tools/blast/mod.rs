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
//! are in [`program`]; this file is the driver and the datagram format.
//!
//! Every datagram starts with a 24-byte header ([`Header`]): magic
//! `RMBL`, kind (data or end), 3 bytes zero, sequence number (u64, big
//! endian), send time (ns since the Unix epoch, u64, big endian). An end
//! marker's sequence field is the number of data datagrams sent.

mod program;

pub use program::{blast_recv, blast_send, recv_socket, send_socket};

use super::{Completion, Ctx, Plan, Tool, paced_rate, s, strip_flag};
use crate::units::arg_value;
use clap::Args;
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};

/// `RMBL`.
pub const MAGIC: [u8; 4] = *b"RMBL";
/// Header bytes at the start of every datagram (the smallest `--size`).
pub const HEADER_LEN: usize = 24;
/// The largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65507;
/// IPv4 + UDP header bytes, for bit rates on the wire.
pub const IP_UDP_OVERHEAD: usize = 28;

/// What a datagram is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Payload; `seq` is its sequence number.
    Data,
    /// End of the blast; `seq` is the number of data datagrams sent.
    End,
}

/// The blast header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Data or end marker.
    pub kind: Kind,
    /// Sequence number (data) or count sent (end).
    pub seq: u64,
    /// Send time, ns since the Unix epoch.
    pub stamp_ns: u64,
}

impl Header {
    /// Writes the header into the first [`HEADER_LEN`] bytes of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than [`HEADER_LEN`].
    pub fn encode(&self, buf: &mut [u8]) {
        buf[..4].copy_from_slice(&MAGIC);
        buf[4] = match self.kind {
            Kind::Data => 0,
            Kind::End => 1,
        };
        buf[5..8].fill(0);
        buf[8..16].copy_from_slice(&self.seq.to_be_bytes());
        buf[16..24].copy_from_slice(&self.stamp_ns.to_be_bytes());
    }

    /// Reads a header; `None` for anything that is not a blast datagram.
    pub fn decode(buf: &[u8]) -> Option<Header> {
        if buf.len() < HEADER_LEN || buf[..4] != MAGIC || buf[5..8] != [0, 0, 0] {
            return None;
        }
        let kind = match buf[4] {
            0 => Kind::Data,
            1 => Kind::End,
            _ => return None,
        };
        let u64_at = |i: usize| u64::from_be_bytes(buf[i..i + 8].try_into().unwrap_or([0; 8]));
        Some(Header {
            kind,
            seq: u64_at(8),
            stamp_ns: u64_at(16),
        })
    }
}

/// `lab blast-send`.
#[derive(Args, Debug, Clone)]
pub struct BlastSendArgs {
    /// Multicast group and port.
    #[arg(long, value_name = "ADDR:PORT")]
    pub group: SocketAddrV4,
    /// Local address whose interface sends (IP_MULTICAST_IF).
    #[arg(long, default_value = "127.0.0.1")]
    pub iface: Ipv4Addr,
    /// Datagrams per second (0: as fast as the socket takes them).
    #[arg(long, default_value_t = 10_000.0)]
    pub pps: f64,
    /// Pace by payload bytes per second instead (pps = this / --size).
    #[arg(long, conflicts_with = "pps")]
    pub bytes_per_s: Option<f64>,
    /// UDP payload bytes per datagram, header included (24..=65507).
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// Data datagrams to send.
    #[arg(long)]
    pub count: Option<u64>,
    /// Send for this many seconds (with --count: whichever ends first).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Multicast TTL.
    #[arg(long, default_value_t = 1)]
    pub ttl: u32,
    /// End markers sent after the data, 20 ms apart.
    #[arg(long, default_value_t = 8)]
    pub end_markers: u32,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 120.0)]
    pub timeout: f64,
    /// Also write the JSON report here.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// `lab blast-recv`.
#[derive(Args, Debug, Clone)]
pub struct BlastRecvArgs {
    /// Multicast group and port.
    #[arg(long, value_name = "ADDR:PORT")]
    pub group: SocketAddrV4,
    /// Local address whose interface joins the group.
    #[arg(long, default_value = "127.0.0.1")]
    pub iface: Ipv4Addr,
    /// Give up if nothing ends the blast within this many seconds.
    #[arg(long, default_value_t = 120.0)]
    pub timeout: f64,
    /// Stop when nothing arrived for this many seconds after the first datagram.
    #[arg(long, default_value_t = 3.0)]
    pub idle: f64,
    /// SO_RCVBUF in bytes [default: the system's].
    #[arg(long)]
    pub rcvbuf: Option<usize>,
    /// Also write the JSON report here.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// What the sender did (one JSON line on stdout).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SendReport {
    /// Always `blast-send`.
    pub role: String,
    /// Data datagrams the kernel accepted (= sequence numbers used).
    pub sent: u64,
    /// Send attempts that failed (ENOBUFS, EAGAIN, others).
    pub errors: u64,
    /// Of which ENOBUFS.
    pub enobufs: u64,
    /// Of which EAGAIN/EWOULDBLOCK.
    pub eagain: u64,
    /// UDP payload bytes per datagram.
    pub size: usize,
    /// The rate asked for (0: unpaced).
    pub target_pps: f64,
    /// Datagrams sent per second, first to last send.
    pub pps: f64,
    /// Payload bytes per second.
    pub bytes_per_s: f64,
    /// First to last send, seconds.
    pub seconds: f64,
}

/// What one receiver saw (one JSON line on stdout).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RecvReport {
    /// Always `blast-recv`.
    pub role: String,
    /// Distinct data datagrams received.
    pub received: u64,
    /// Datagrams sent, from the end marker (or highest sequence + 1 without one).
    pub expected: u64,
    /// Whether an end marker arrived.
    pub end_seen: bool,
    /// 1 − received / expected.
    pub loss: f64,
    /// Datagrams whose sequence number had been seen already.
    pub duplicates: u64,
    /// Datagrams older than the highest sequence number seen.
    pub reordered: u64,
    /// Datagrams without a blast header.
    pub foreign: u64,
    /// Payload bytes received (distinct data datagrams).
    pub bytes: u64,
    /// Payload bytes per second, first to last datagram.
    pub bytes_per_s: f64,
    /// Datagrams per second, first to last datagram.
    pub pps: f64,
    /// First to last datagram, seconds.
    pub seconds: f64,
    /// Median one-way delay (send stamp to arrival), ms; same clock only.
    pub delay_ms_median: Option<f64>,
}

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
    fn header_round_trips() {
        let mut buf = [0u8; 64];
        for h in [
            Header {
                kind: Kind::Data,
                seq: 0,
                stamp_ns: 1,
            },
            Header {
                kind: Kind::End,
                seq: u64::MAX,
                stamp_ns: u64::MAX,
            },
        ] {
            h.encode(&mut buf);
            assert_eq!(Header::decode(&buf), Some(h));
            assert_eq!(Header::decode(&buf[..HEADER_LEN]), Some(h));
            assert_eq!(Header::decode(&buf[..HEADER_LEN - 1]), None);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_bad_headers_are_refused() {
        // A small xorshift: deterministic, no extra dependency.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let len = (next() % 64) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            // Half the time, a valid magic so the later checks are reached.
            if len >= 4 && next() % 2 == 0 {
                b[..4].copy_from_slice(&MAGIC);
            }
            if let Some(h) = Header::decode(&b) {
                assert!(b.len() >= HEADER_LEN && b[..4] == MAGIC);
                let mut again = vec![0u8; HEADER_LEN];
                h.encode(&mut again);
                assert_eq!(again[..], b[..HEADER_LEN]);
            }
        }
        let mut b = [0u8; HEADER_LEN];
        Header {
            kind: Kind::Data,
            seq: 7,
            stamp_ns: 0,
        }
        .encode(&mut b);
        b[4] = 2;
        assert_eq!(Header::decode(&b), None, "unknown kind");
        b[4] = 0;
        b[6] = 1;
        assert_eq!(Header::decode(&b), None, "reserved bytes must be zero");
    }

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
