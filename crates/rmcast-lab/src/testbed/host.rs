//! A testbed's hosts: their addresses, their interface counters, and the
//! commands (`ip`, `tc`, `nft`) that build and read them.

use anyhow::{Context, Result, bail};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// One host of a testbed.
#[derive(Clone, Debug)]
pub struct Host {
    /// Namespace name (None on loopback).
    pub ns: Option<String>,
    /// Its address.
    pub addr: Ipv4Addr,
}

/// Interface counters of one host (bytes and packets, as the kernel counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IfCounters {
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
}

impl IfCounters {
    /// The increase from `before` to `self`.
    pub fn since(&self, before: &IfCounters) -> IfCounters {
        IfCounters {
            tx_bytes: self.tx_bytes.saturating_sub(before.tx_bytes),
            tx_packets: self.tx_packets.saturating_sub(before.tx_packets),
            rx_bytes: self.rx_bytes.saturating_sub(before.rx_bytes),
            rx_packets: self.rx_packets.saturating_sub(before.rx_packets),
        }
    }
}

/// Runs a command, failing with its stderr; returns stdout.
pub fn run_cmd(program: &str, args: &[&str], stdin: Option<&str>) -> Result<String> {
    let mut c = Command::new(program);
    c.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c
        .spawn()
        .with_context(|| format!("cannot run `{program}` (is it installed?)"))?;
    if let Some(input) = stdin {
        use std::io::Write;
        let mut pipe = child.stdin.take().expect("stdin is piped");
        pipe.write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn ip(args: &[&str]) -> Result<String> {
    run_cmd("ip", args, None)
}

pub(crate) fn read_counters(ns: Option<&str>, iface: &str) -> Result<IfCounters> {
    let files = ["tx_bytes", "tx_packets", "rx_bytes", "rx_packets"]
        .map(|f| format!("/sys/class/net/{iface}/statistics/{f}"));
    let text = match ns {
        None => files
            .iter()
            .map(|f| std::fs::read_to_string(f).map_err(anyhow::Error::from))
            .collect::<Result<Vec<_>>>()?
            .join("\n"),
        Some(ns) => {
            let mut args = vec!["netns", "exec", ns, "cat"];
            args.extend(files.iter().map(String::as_str));
            ip(&args)?
        }
    };
    parse_counters(&text)
}

/// The four counters `tx_bytes tx_packets rx_bytes rx_packets`, as `cat` prints them.
pub(crate) fn parse_counters(text: &str) -> Result<IfCounters> {
    let v: Vec<u64> = text
        .split_whitespace()
        .map(|x| x.parse().context("interface counter"))
        .collect::<Result<_>>()?;
    if v.len() != 4 {
        bail!("unexpected interface counters: {text}");
    }
    Ok(IfCounters {
        tx_bytes: v[0],
        tx_packets: v[1],
        rx_bytes: v[2],
        rx_packets: v[3],
    })
}

/// Packets dropped by the `counter` rules of an `nft list table` listing
/// (the loss rules), summed.
pub(crate) fn nft_counted_packets(listing: &str) -> u64 {
    listing
        .split("counter packets ")
        .skip(1)
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Whether this process runs as root (the netns testbed needs CAP_NET_ADMIN).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
