//! Testbeds: a LAN of network namespaces (root), or loopback (no root).
//!
//! The namespace LAN touches nothing outside namespaces it creates: the
//! bridge lives in its own "switch" namespace (`<id>-sw`), and each host
//! `<id>-hI` gets one veth pair whose ends are created directly inside the
//! switch and host namespaces. Deleting the namespaces deletes the bridge
//! and every veth, so cleanup is "kill our processes in them, delete them".
//! Ids are `rml` + 5 characters from the PID and the clock, so two runs never
//! collide, and every interface name stays far below 15 characters.

use anyhow::{Context, Result, bail};
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where `lab up` and running testbeds record their owner and namespaces.
const STATE_DIR: &str = "/run/rmcast-lab";
/// tbf burst: at least the largest GSO super-packet (64 KB), with room.
const TBF_BURST: &str = "256kb";
/// tbf queue limit: above 2 × the largest SO_SNDBUF a tool asks for (rmcast
/// and uftp ask 4 MiB, doubled by the kernel to 8 MiB; NORM 16 MiB → 32 MiB),
/// so the socket blocks before the shaper could drop.
const TBF_LIMIT: &str = "80mb";

/// What to build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetnsSpec {
    /// Receivers: hosts h1..hN (h0 sends).
    pub receivers: u16,
    /// Per-host egress rate; None leaves the veth unshaped.
    pub rate_bits_per_s: Option<u64>,
    /// MTU of every veth (1500, or 9000 for jumbo frames).
    pub mtu: u32,
}

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

/// A namespace LAN; removed on drop unless [`Netns::keep`] was called.
pub struct Netns {
    /// The run's unique id (`rml` + 5 characters).
    pub id: String,
    /// Hosts h0..hN.
    pub hosts: Vec<Host>,
    switch_ns: String,
    spec: NetnsSpec,
    /// IGMP snooping on the bridge, as read back from the kernel.
    pub multicast_snooping: Option<bool>,
    loss: f64,
    keep: bool,
    removed: bool,
}

fn new_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = (u64::from(std::process::id()) << 20) ^ nanos ^ (nanos >> 29);
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut s = String::from("rml");
    for _ in 0..5 {
        s.push(ALPHABET[(x % 36) as usize] as char);
        x /= 36;
    }
    s
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

fn ip(args: &[&str]) -> Result<String> {
    run_cmd("ip", args, None)
}

fn read_counters(ns: Option<&str>, iface: &str) -> Result<IfCounters> {
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

impl Netns {
    /// Builds the LAN; on any error the partial testbed is removed.
    pub fn create(spec: &NetnsSpec) -> Result<Netns> {
        if !is_root() {
            bail!(
                "the netns testbed needs root (CAP_NET_ADMIN to create namespaces, veths and a bridge); \
                 run as root, or use testbed = \"local\" for a loopback run"
            );
        }
        if spec.receivers == 0 || spec.receivers > 250 {
            bail!("receivers must be 1..=250, not {}", spec.receivers);
        }
        if !(576..=65000).contains(&spec.mtu) {
            bail!("mtu {} is out of range", spec.mtu);
        }
        sweep_stale();
        let id = new_id();
        let hosts = (0..=spec.receivers)
            .map(|i| Host {
                ns: Some(format!("{id}-h{i}")),
                addr: Ipv4Addr::new(10, 77, 0, (i + 1) as u8),
            })
            .collect();
        let mut tb = Netns {
            switch_ns: format!("{id}-sw"),
            id,
            hosts,
            spec: spec.clone(),
            multicast_snooping: None,
            loss: 0.0,
            keep: false,
            removed: false,
        };
        tb.write_state(false)?;
        tb.build()?; // on error, Drop removes what was made
        Ok(tb)
    }

    fn write_state(&self, kept: bool) -> Result<()> {
        std::fs::create_dir_all(STATE_DIR)?;
        let state = serde_json::json!({
            "id": self.id,
            "pid": std::process::id(),
            "namespaces": self.namespaces(),
            "receivers": self.spec.receivers,
            "rate": crate::units::fmt_rate(self.spec.rate_bits_per_s),
            "mtu": self.spec.mtu,
            "kept": kept,
        });
        std::fs::write(state_path(&self.id), state.to_string())?;
        Ok(())
    }

    fn namespaces(&self) -> Vec<String> {
        let mut v: Vec<String> = self.hosts.iter().filter_map(|h| h.ns.clone()).collect();
        v.push(self.switch_ns.clone());
        v
    }

    /// `ip netns exec` bind-mounts /etc/netns/NS/* over /etc: give every
    /// host a hosts file with the lab's names and a resolver that fails at
    /// once (127.0.0.1 inside the namespace), so tools that look names up
    /// (uftp's getnameinfo) do not wait seconds for an unreachable DNS server.
    fn write_etc(&self, ns: &str) -> Result<()> {
        let dir = PathBuf::from("/etc/netns").join(ns);
        std::fs::create_dir_all(&dir)?;
        let mut hosts = String::from("127.0.0.1 localhost\n");
        for (i, h) in self.hosts.iter().enumerate() {
            let _ = writeln!(hosts, "{} h{i} {}", h.addr, h.ns.as_deref().unwrap_or(""));
        }
        std::fs::write(dir.join("hosts"), hosts)?;
        std::fs::write(
            dir.join("resolv.conf"),
            "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
        )?;
        Ok(())
    }

    fn build(&mut self) -> Result<()> {
        let sw = self.switch_ns.clone();
        let mtu = self.spec.mtu.to_string();
        ip(&["netns", "add", &sw])?;
        // IGMP snooping off, explicitly: the bridge floods multicast to every
        // port like a plain switch, which is what the experiments assume.
        ip(&["-n", &sw, "link", "set", "lo", "up"])?;
        ip(&[
            "-n",
            &sw,
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "mcast_snooping",
            "0",
            "stp_state",
            "0",
        ])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        for (i, h) in self.hosts.clone().iter().enumerate() {
            crate::signals::check()?;
            let ns = h.ns.as_deref().expect("netns hosts have a namespace");
            let port = format!("p{i}");
            ip(&["netns", "add", ns])?;
            self.write_etc(ns)?;
            // No IPv6: no router solicitations or DAD in the counters.
            ip(&[
                "netns",
                "exec",
                ns,
                "sh",
                "-c",
                "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6",
            ])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&[
                "-n", &sw, "link", "add", &port, "mtu", &mtu, "type", "veth", "peer", "name",
                "eth0", "mtu", &mtu, "netns", ns,
            ])?;
            ip(&["-n", &sw, "link", "set", &port, "master", "br0", "up"])?;
            let cidr = format!("{}/24", h.addr);
            ip(&["-n", ns, "addr", "add", &cidr, "brd", "+", "dev", "eth0"])?;
            ip(&["-n", ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", ns, "route", "add", "default", "dev", "eth0"])?;
            ip(&["-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0"])?;
            if let Some(rate) = self.spec.rate_bits_per_s {
                let rate = format!("{rate}bit");
                run_cmd(
                    "tc",
                    &[
                        "-n", ns, "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", &rate,
                        "burst", TBF_BURST, "limit", TBF_LIMIT,
                    ],
                    None,
                )?;
            }
        }
        let info = ip(&["-n", &sw, "-d", "-j", "link", "show", "br0"])?;
        let v: serde_json::Value = serde_json::from_str(&info).context("ip -j link show br0")?;
        self.multicast_snooping = v[0]["linkinfo"]["info_data"]["mcast_snooping"]
            .as_u64()
            .map(|x| x != 0);
        if self.multicast_snooping != Some(false) {
            bail!(
                "could not turn IGMP snooping off on the lab bridge (read back {:?})",
                self.multicast_snooping
            );
        }
        Ok(())
    }

    /// Sets random loss with probability `p` on every receiver's UDP and TCP
    /// input (nftables, `numgen random`); 0 removes the rule.
    pub fn set_loss(&mut self, p: f64) -> Result<()> {
        if !(0.0..1.0).contains(&p) {
            bail!("loss {p} is outside 0..1");
        }
        let per_100k = (p * 100_000.0).round() as u64;
        let mut script = String::from("add table inet rml\ndelete table inet rml\n");
        if per_100k > 0 {
            writeln!(
                script,
                "table inet rml {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n    \
                 meta l4proto {{ udp, tcp }} numgen random mod 100000 < {per_100k} counter drop\n  }}\n}}"
            )?;
        }
        for h in &self.hosts[1..] {
            let ns = h.ns.as_deref().expect("netns host");
            run_cmd(
                "ip",
                &["netns", "exec", ns, "nft", "-f", "-"],
                Some(&script),
            )
            .context("setting loss with nftables (apt-get install nftables)")?;
        }
        self.loss = p;
        Ok(())
    }

    fn loss_drops(&self) -> Result<u64> {
        if self.loss == 0.0 {
            return Ok(0);
        }
        let mut total = 0;
        for h in &self.hosts[1..] {
            let ns = h.ns.as_deref().expect("netns host");
            let text = ip(&["netns", "exec", ns, "nft", "list", "table", "inet", "rml"])?;
            if let Some(rest) = text.split("counter packets ").nth(1) {
                total += rest
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        Ok(total)
    }

    fn shaper_drops(&self) -> Result<u64> {
        if self.spec.rate_bits_per_s.is_none() {
            return Ok(0);
        }
        let mut total = 0;
        for h in &self.hosts {
            let ns = h.ns.as_deref().expect("netns host");
            let text = run_cmd(
                "tc",
                &["-n", ns, "-s", "-j", "qdisc", "show", "dev", "eth0"],
                None,
            )?;
            let v: serde_json::Value = serde_json::from_str(&text).context("tc -j qdisc")?;
            for q in v.as_array().into_iter().flatten() {
                if q["kind"] == "tbf" {
                    total += q["drops"].as_u64().unwrap_or(0);
                }
            }
        }
        Ok(total)
    }

    /// What was built, for the log and `lab up`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "netns testbed {}: {} hosts h0..h{} (h0 = sender) at 10.77.0.1..{} /24 on bridge br0 in namespace {} \
             (IGMP snooping: {}), egress tbf {} (burst {TBF_BURST}, limit {TBF_LIMIT}; counts Ethernet headers, not preamble/FCS/gap), \
             MTU {}; loss is set per point on receivers' UDP+TCP input",
            self.id,
            self.hosts.len(),
            self.hosts.len() - 1,
            self.hosts.len(),
            self.switch_ns,
            match self.multicast_snooping {
                Some(true) => "on",
                Some(false) => "off",
                None => "unknown",
            },
            crate::units::fmt_rate(self.spec.rate_bits_per_s),
            self.spec.mtu,
        );
        s.push_str("\nnamespaces:");
        for h in &self.hosts {
            let _ = write!(s, " {}={}", h.ns.as_deref().unwrap_or("-"), h.addr);
        }
        s
    }

    /// Leaves the testbed up after this process ends (`lab up`).
    pub fn keep(mut self) -> Result<()> {
        self.keep = true;
        self.write_state(true)
    }

    /// Kills every process left in our namespaces (by PID) and deletes them.
    pub fn teardown(&mut self) -> Result<()> {
        if self.removed {
            return Ok(());
        }
        self.removed = true;
        let left = remove_namespaces(&self.namespaces());
        let _ = std::fs::remove_file(state_path(&self.id));
        left
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        if let Err(e) = self.teardown() {
            eprintln!("rmcast-lab: cleanup of testbed {}: {e:#}", self.id);
        }
    }
}

fn state_path(id: &str) -> PathBuf {
    PathBuf::from(STATE_DIR).join(format!("{id}.json"))
}

/// Process ids inside a namespace (`ip netns pids`).
fn ns_pids(ns: &str) -> Vec<i32> {
    ip(&["netns", "pids", ns])
        .map(|t| {
            t.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Kills (by PID) what runs in the namespaces, deletes them, and checks
/// that none is left.
fn remove_namespaces(names: &[String]) -> Result<()> {
    let existing = list_namespaces();
    let present: Vec<&String> = names.iter().filter(|n| existing.contains(n)).collect();
    for ns in &present {
        for pid in ns_pids(ns) {
            // Only our namespaces are searched, so these are processes we started.
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    // Host namespaces first (their veth ends go with them), the switch last.
    let mut errors = Vec::new();
    for ns in present
        .iter()
        .filter(|n| !n.ends_with("-sw"))
        .chain(present.iter().filter(|n| n.ends_with("-sw")))
    {
        let deadline = Instant::now() + Duration::from_secs(2);
        while !ns_pids(ns).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Err(e) = ip(&["netns", "del", ns]) {
            errors.push(format!("{ns}: {e:#}"));
        }
    }
    for ns in names {
        let _ = std::fs::remove_dir_all(PathBuf::from("/etc/netns").join(ns));
    }
    let still: Vec<String> = list_namespaces()
        .into_iter()
        .filter(|n| names.contains(n))
        .collect();
    if !still.is_empty() {
        bail!(
            "namespaces left behind: {} ({})",
            still.join(", "),
            errors.join("; ")
        );
    }
    Ok(())
}

/// Names from `ip netns list`.
pub fn list_namespaces() -> Vec<String> {
    ip(&["netns", "list"])
        .map(|t| {
            t.lines()
                .filter_map(|l| l.split_whitespace().next().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a namespace name is one this lab makes: `rml` + 5 id chars + `-hN` or `-sw`.
pub fn is_lab_namespace(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("rml") else {
        return false;
    };
    let Some((id, suffix)) = rest.split_once('-') else {
        return false;
    };
    id.len() == 5
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && (suffix == "sw"
            || suffix
                .strip_prefix('h')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())))
}

fn id_of(ns: &str) -> &str {
    ns.split_once('-').map_or(ns, |(id, _)| id)
}

/// Removes one testbed's namespaces; returns how many were removed.
pub fn remove_testbed(id: &str) -> Result<usize> {
    let names: Vec<String> = list_namespaces()
        .into_iter()
        .filter(|n| is_lab_namespace(n) && id_of(n) == id)
        .collect();
    remove_namespaces(&names)?;
    let _ = std::fs::remove_file(state_path(id));
    Ok(names.len())
}

/// Removes every lab testbed (namespaces named like ours); returns how many namespaces.
pub fn remove_all() -> Result<usize> {
    if !is_root() {
        bail!("removing namespaces needs root");
    }
    let names: Vec<String> = list_namespaces()
        .into_iter()
        .filter(|n| is_lab_namespace(n))
        .collect();
    remove_namespaces(&names)?;
    for e in std::fs::read_dir("/etc/netns")
        .into_iter()
        .flatten()
        .flatten()
    {
        if is_lab_namespace(&e.file_name().to_string_lossy()) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    if let Ok(dir) = std::fs::read_dir(STATE_DIR) {
        for e in dir.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
    Ok(names.len())
}

fn owner_alive(id: &str) -> Option<bool> {
    let text = std::fs::read_to_string(state_path(id)).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let pid = v["pid"].as_i64()? as i32;
    // SAFETY: signal 0 only checks that the process exists.
    Some(unsafe { libc::kill(pid, 0) } == 0)
}

/// Removes testbeds whose owning `lab run` died without cleaning up (SIGKILL).
/// `lab up` testbeds are kept: their owner exits on purpose.
fn sweep_stale() {
    let mut ids: Vec<String> = list_namespaces()
        .iter()
        .filter(|n| is_lab_namespace(n))
        .map(|n| id_of(n).to_string())
        .collect();
    ids.sort();
    ids.dedup();
    for id in ids {
        let Ok(text) = std::fs::read_to_string(state_path(&id)) else {
            continue;
        };
        let kept = text.contains("\"kept\":true");
        if !kept && owner_alive(&id) == Some(false) {
            eprintln!("rmcast-lab: removing stale testbed {id} (its owner is gone)");
            let _ = remove_testbed(&id);
        }
    }
}

/// `lab status`: testbeds, namespaces, owners.
pub fn status() -> Result<String> {
    let names: Vec<String> = list_namespaces()
        .into_iter()
        .filter(|n| is_lab_namespace(n))
        .collect();
    let mut ids: Vec<String> = names.iter().map(|n| id_of(n).to_string()).collect();
    ids.sort();
    ids.dedup();
    let mut s = String::new();
    if ids.is_empty() {
        s.push_str("no lab testbeds\n");
    }
    for id in ids {
        let n = names.iter().filter(|x| id_of(x) == id).count();
        let owner = match owner_alive(&id) {
            Some(true) => "owner running",
            Some(false) => "owner gone (kept by `lab up`, or stale: `lab down ID`)",
            None => "no state file",
        };
        let _ = writeln!(s, "{id}: {n} namespaces, {owner}");
    }
    Ok(s)
}
