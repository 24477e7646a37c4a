//! Testbeds: a LAN of network namespaces (root, [`netns`]), or loopback
//! (no root). [`registry`] finds and removes the namespaces of any lab
//! testbed, including those a crashed run left behind.

mod netns;
mod registry;

pub use netns::{Netns, NetnsSpec};
pub use registry::{is_lab_namespace, list_namespaces, remove_all, remove_testbed, status};

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

/// A testbed the runner drives.
pub enum Testbed {
    /// Loopback: every host is 127.0.0.1 in the current namespace.
    Local(Local),
    /// A namespace LAN.
    Netns(Netns),
}

impl Testbed {
    /// Hosts, h0 first.
    pub fn hosts(&self) -> &[Host] {
        match self {
            Testbed::Local(l) => &l.hosts,
            Testbed::Netns(n) => &n.hosts,
        }
    }
    /// The interface name every host uses.
    pub fn iface(&self) -> &'static str {
        match self {
            Testbed::Local(_) => "lo",
            Testbed::Netns(_) => "eth0",
        }
    }
    /// Whether this is the namespace LAN.
    pub fn is_netns(&self) -> bool {
        matches!(self, Testbed::Netns(_))
    }
    /// A command that runs `program args` on host `i`.
    pub fn command(&self, i: usize, program: &str, args: &[String]) -> Command {
        match &self.hosts()[i].ns {
            None => {
                let mut c = Command::new(program);
                c.args(args);
                c
            }
            Some(ns) => {
                // `ip netns exec` execs the program: the PID we get is the tool's.
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]).args(args);
                c
            }
        }
    }
    /// Counters of hosts 0..n (loopback: the one `lo`, as host 0).
    pub fn counters(&self, n: usize) -> Result<Vec<IfCounters>> {
        match self {
            Testbed::Local(_) => Ok(vec![read_counters(None, "lo")?]),
            Testbed::Netns(t) => t.hosts[..n]
                .iter()
                .map(|h| read_counters(h.ns.as_deref(), "eth0"))
                .collect(),
        }
    }
    /// Packets the tbf shapers dropped so far, summed over hosts.
    pub fn shaper_drops(&self) -> Result<u64> {
        match self {
            Testbed::Local(_) => Ok(0),
            Testbed::Netns(t) => t.shaper_drops(),
        }
    }
    /// Packets the loss rules dropped so far, summed over receivers.
    pub fn loss_drops(&self) -> Result<u64> {
        match self {
            Testbed::Local(_) => Ok(0),
            Testbed::Netns(t) => t.loss_drops(),
        }
    }
    /// Sets the random loss on every receiver's input (netns only).
    pub fn set_loss(&mut self, p: f64) -> Result<()> {
        match self {
            Testbed::Local(_) => Ok(()),
            Testbed::Netns(t) => t.set_loss(p),
        }
    }
    /// One paragraph on what was built.
    pub fn describe(&self) -> String {
        match self {
            Testbed::Local(l) => format!(
                "local loopback testbed, {} hosts at 127.0.0.1",
                l.hosts.len()
            ),
            Testbed::Netns(t) => t.describe(),
        }
    }
    /// Removes everything (the Drop guard does this too).
    pub fn teardown(&mut self) -> Result<()> {
        match self {
            Testbed::Local(_) => Ok(()),
            Testbed::Netns(t) => t.teardown(),
        }
    }
}

/// The loopback testbed.
pub struct Local {
    hosts: Vec<Host>,
}

impl Local {
    /// A sender and `receivers` receivers, all 127.0.0.1.
    pub fn new(receivers: u16) -> Local {
        let hosts = (0..=receivers)
            .map(|_| Host {
                ns: None,
                addr: Ipv4Addr::LOCALHOST,
            })
            .collect();
        Local { hosts }
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

/// Whether this process runs as root (the netns testbed needs CAP_NET_ADMIN).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
