//! The namespace LAN.
//!
//! The namespace LAN touches nothing outside namespaces it creates: the
//! bridge lives in its own "switch" namespace (`<id>-sw`), and each host
//! `<id>-hI` gets one veth pair whose ends are created directly inside the
//! switch and host namespaces. Deleting the namespaces deletes the bridge
//! and every veth, so cleanup is "kill our processes in them, delete them".
//! Ids are `rml` + 5 characters from the PID and the clock, so two runs never
//! collide, and every interface name stays far below 15 characters.
//!
//! With [`NetnsSpec::segments`] the switch namespace holds one bridge per
//! segment (`br0`, `br1`, …), each host's port is enslaved to its segment's
//! bridge, and relay k is a namespace `<id>-rK` with `eth0` on the bridge
//! of the segment it receives from (switch port `uK`; k − 1 in a chain)
//! and `eth1` on bridge k (port `dK`), IP
//! forwarding off (set and read back): the bridges are joined by nothing
//! else, so a datagram crosses a segment only if a relay process sends it
//! again (`segments.rs` has the addresses).

use super::host::{Host, IfCounters, ip, is_root, nft_counted_packets, read_counters, run_cmd};
use super::registry::{STATE_DIR, remove_namespaces, state_path, sweep_stale};
use super::segments::{RelayHost, Segments};
use anyhow::{Context, Result, bail};
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::PathBuf;

/// tbf burst: at least the largest GSO super-packet (64 KB), with room.
const TBF_BURST: &str = "256kb";
/// tbf queue limit: above 2 × the largest SO_SNDBUF a tool asks for (rmcast
/// and uftp ask 4 MiB, doubled by the kernel to 8 MiB; NORM 16 MiB → 32 MiB),
/// so the socket blocks before the shaper could drop.
const TBF_LIMIT: &str = "80mb";
/// tbf queue limit of a switch port shaped slower than the rest
/// ([`Netns::shape_download`]): a switch's buffer, which drops what
/// does not fit. A queue as long as [`TBF_LIMIT`] would hold the skbs of
/// the sender's multicast, charged to its socket, for seconds: the sender's
/// socket would block on the slow port, and the whole group would go at
/// its pace, which no switch does.
const PORT_LIMIT: &str = "1mb";

/// What to build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetnsSpec {
    /// Receivers: hosts h1..hN (h0 sends).
    pub receivers: u16,
    /// Per-host egress rate; None leaves the veth unshaped.
    pub rate_bits_per_s: Option<u64>,
    /// MTU of every veth (1500, or 9000 for jumbo frames).
    pub mtu: u32,
    /// Several segments joined by relay hosts (None: one flat bridge).
    /// `receivers` must then be their total.
    pub segments: Option<Segments>,
}

/// A namespace LAN; removed on drop unless [`Netns::keep`] was called.
pub struct Netns {
    /// The run's unique id (`rml` + 5 characters).
    pub id: String,
    /// Hosts h0..hN.
    pub hosts: Vec<Host>,
    /// Relay hosts r1..rK (segmented testbeds; empty otherwise).
    pub relays: Vec<RelayHost>,
    switch_ns: String,
    spec: NetnsSpec,
    /// IGMP snooping on the bridge, as read back from the kernel.
    pub multicast_snooping: Option<bool>,
    /// The group key the testbed's rmcast processes run under.
    pub(super) key: super::LabKey,
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

impl Netns {
    /// Builds the LAN; on any error the partial testbed is removed.
    pub fn create(spec: &NetnsSpec) -> Result<Netns> {
        if !is_root() {
            bail!(
                "the netns testbed needs root (CAP_NET_ADMIN to create namespaces, veths and a bridge); \
                 run as root, or use testbed = \"local\" for a loopback run"
            );
        }
        if spec.receivers == 0 || (spec.receivers > 250 && spec.segments.is_none()) {
            bail!("receivers must be 1..=250, not {}", spec.receivers);
        }
        if !(576..=65000).contains(&spec.mtu) {
            bail!("mtu {} is out of range", spec.mtu);
        }
        if let Some(seg) = &spec.segments
            && seg.total() != usize::from(spec.receivers)
        {
            bail!(
                "segments {:?} hold {} receivers, not {}",
                seg.per_segment(),
                seg.total(),
                spec.receivers
            );
        }
        sweep_stale();
        let id = new_id();
        let hosts = (0..=usize::from(spec.receivers))
            .map(|i| Host {
                ns: Some(format!("{id}-h{i}")),
                addr: match &spec.segments {
                    Some(seg) => seg.host_addr(i),
                    None => Ipv4Addr::new(10, 77, 0, (i + 1) as u8),
                },
            })
            .collect();
        let relays = spec
            .segments
            .iter()
            .flat_map(|seg| {
                (1..=seg.relays()).map(|k| {
                    let (up_addr, down_addr) = seg.relay_addrs(k);
                    RelayHost {
                        ns: Some(format!("{id}-r{k}")),
                        up_addr,
                        down_addr,
                        from: seg.relay_from(k),
                        to: k,
                    }
                })
            })
            .collect();
        let mut tb = Netns {
            switch_ns: format!("{id}-sw"),
            id,
            hosts,
            relays,
            spec: spec.clone(),
            multicast_snooping: None,
            loss: 0.0,
            keep: false,
            removed: false,
            key: super::LabKey::new()?,
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
            "segments": self.spec.segments.as_ref().map(|s| s.per_segment().to_vec()),
            "rate": crate::units::fmt_rate(self.spec.rate_bits_per_s),
            "mtu": self.spec.mtu,
            "kept": kept,
        });
        std::fs::write(state_path(&self.id), state.to_string())?;
        Ok(())
    }

    fn namespaces(&self) -> Vec<String> {
        let mut v: Vec<String> = self.hosts.iter().filter_map(|h| h.ns.clone()).collect();
        v.extend(self.relays.iter().filter_map(|r| r.ns.clone()));
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
        for (k, r) in self.relays.iter().enumerate() {
            let ns = r.ns.as_deref().unwrap_or("");
            let _ = writeln!(hosts, "{} r{} {ns}", r.up_addr, k + 1);
            let _ = writeln!(hosts, "{} r{}-down", r.down_addr, k + 1);
        }
        std::fs::write(dir.join("hosts"), hosts)?;
        std::fs::write(
            dir.join("resolv.conf"),
            "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
        )?;
        Ok(())
    }

    /// The bridges: `br0` only, or one per segment.
    fn bridges(&self) -> usize {
        self.spec.segments.as_ref().map_or(1, Segments::count)
    }

    /// Host `i`'s segment (0 on a flat LAN).
    fn segment_of(&self, i: usize) -> usize {
        self.spec.segments.as_ref().map_or(0, |s| s.segment_of(i))
    }

    fn build(&mut self) -> Result<()> {
        let sw = self.switch_ns.clone();
        ip(&["netns", "add", &sw])?;
        ip(&["-n", &sw, "link", "set", "lo", "up"])?;
        // IGMP snooping off, explicitly: the bridge floods multicast to every
        // port like a plain switch, which is what the experiments assume.
        for b in 0..self.bridges() {
            let br = format!("br{b}");
            ip(&[
                "-n",
                &sw,
                "link",
                "add",
                &br,
                "type",
                "bridge",
                "mcast_snooping",
                "0",
                "stp_state",
                "0",
            ])?;
            ip(&["-n", &sw, "link", "set", &br, "up"])?;
        }
        for (i, h) in self.hosts.clone().iter().enumerate() {
            crate::signals::check()?;
            let ns = h.ns.as_deref().expect("netns hosts have a namespace");
            self.add_node(ns)?;
            let br = format!("br{}", self.segment_of(i));
            self.plug(ns, &format!("p{i}"), "eth0", &br, h.addr)?;
            ip(&["-n", ns, "route", "add", "default", "dev", "eth0"])?;
            ip(&["-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0"])?;
        }
        for (k, r) in self.relays.clone().iter().enumerate() {
            crate::signals::check()?;
            let k = k + 1;
            let ns = r.ns.as_deref().expect("netns relays have a namespace");
            self.add_node(ns)?;
            self.plug(
                ns,
                &format!("u{k}"),
                "eth0",
                &format!("br{}", r.from),
                r.up_addr,
            )?;
            self.plug(
                ns,
                &format!("d{k}"),
                "eth1",
                &format!("br{}", r.to),
                r.down_addr,
            )?;
            // Only the connected /24s: no default route, and multicast the
            // relay sends without naming an interface goes downstream.
            ip(&["-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth1"])?;
            // No forwarding between the segments: the relay process is the
            // only way across. Set, then read back from the kernel.
            ip(&[
                "netns",
                "exec",
                ns,
                "sh",
                "-c",
                "echo 0 > /proc/sys/net/ipv4/ip_forward",
            ])?;
            let fwd = ip(&["netns", "exec", ns, "cat", "/proc/sys/net/ipv4/ip_forward"])?;
            if fwd.trim() != "0" {
                bail!(
                    "could not turn IP forwarding off in relay namespace {ns} (read back {fwd:?})"
                );
            }
        }
        for b in 0..self.bridges() {
            let br = format!("br{b}");
            let info = ip(&["-n", &sw, "-d", "-j", "link", "show", &br])?;
            let v: serde_json::Value =
                serde_json::from_str(&info).with_context(|| format!("ip -j link show {br}"))?;
            self.multicast_snooping = v[0]["linkinfo"]["info_data"]["mcast_snooping"]
                .as_u64()
                .map(|x| x != 0);
            if self.multicast_snooping != Some(false) {
                bail!(
                    "could not turn IGMP snooping off on the lab bridge {br} (read back {:?})",
                    self.multicast_snooping
                );
            }
        }
        Ok(())
    }

    /// A new host or relay namespace: its /etc files, IPv6 off (no router
    /// solicitations or DAD in the counters), `lo` up.
    fn add_node(&self, ns: &str) -> Result<()> {
        ip(&["netns", "add", ns])?;
        self.write_etc(ns)?;
        ip(&[
            "netns",
            "exec",
            ns,
            "sh",
            "-c",
            "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6",
        ])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        Ok(())
    }

    /// A veth pair made directly in the switch (`port`, on bridge `br`) and
    /// in namespace `ns` (`dev`, with `addr`/24 and its broadcast address),
    /// both up, `dev` shaped when the spec says a rate.
    fn plug(&self, ns: &str, port: &str, dev: &str, br: &str, addr: Ipv4Addr) -> Result<()> {
        let sw = &self.switch_ns;
        let mtu = self.spec.mtu.to_string();
        ip(&[
            "-n", sw, "link", "add", port, "mtu", &mtu, "type", "veth", "peer", "name", dev, "mtu",
            &mtu, "netns", ns,
        ])?;
        ip(&["-n", sw, "link", "set", port, "master", br, "up"])?;
        let cidr = format!("{addr}/24");
        ip(&["-n", ns, "addr", "add", &cidr, "brd", "+", "dev", dev])?;
        ip(&["-n", ns, "link", "set", dev, "up"])?;
        if let Some(rate) = self.spec.rate_bits_per_s {
            let rate = format!("{rate}bit");
            run_cmd(
                "tc",
                &[
                    "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", &rate,
                    "burst", TBF_BURST, "limit", TBF_LIMIT,
                ],
                None,
            )?;
        }
        Ok(())
    }

    /// Shapes what host `i` (1..) can take in: a tbf of `rate` on its
    /// switch port's egress (its download; its upload keeps the spec's),
    /// with a switch port's buffer (`PORT_LIMIT`: what does not fit is
    /// dropped). A slow link, or a slow receiver, among fast ones.
    pub fn shape_download(&self, i: usize, rate_bits_per_s: u64) -> Result<()> {
        if self.spec.segments.is_some() || i == 0 || i >= self.hosts.len() {
            bail!(
                "shape_download: host {i} of a flat LAN of {} hosts",
                self.hosts.len()
            );
        }
        let (port, rate) = (format!("p{i}"), format!("{rate_bits_per_s}bit"));
        run_cmd(
            "tc",
            &[
                "-n",
                &self.switch_ns,
                "qdisc",
                "replace",
                "dev",
                &port,
                "root",
                "tbf",
                "rate",
                &rate,
                "burst",
                TBF_BURST,
                "limit",
                PORT_LIMIT,
            ],
            None,
        )?;
        Ok(())
    }

    /// Every namespace that receives (receivers and relays): where the loss
    /// rule goes.
    fn receiving_namespaces(&self) -> Vec<&str> {
        self.hosts[1..]
            .iter()
            .filter_map(|h| h.ns.as_deref())
            .chain(self.relays.iter().filter_map(|r| r.ns.as_deref()))
            .collect()
    }

    /// Every shaped interface: (namespace, device).
    fn shaped_interfaces(&self) -> Vec<(&str, &'static str)> {
        self.hosts
            .iter()
            .filter_map(|h| h.ns.as_deref())
            .map(|ns| (ns, "eth0"))
            .chain(
                self.relays
                    .iter()
                    .filter_map(|r| r.ns.as_deref())
                    .flat_map(|ns| [(ns, "eth0"), (ns, "eth1")]),
            )
            .collect()
    }

    /// Counters of every relay interface (`eth0`, `eth1` of r1, then r2, …).
    pub fn relay_counters(&self) -> Result<Vec<IfCounters>> {
        let mut v = Vec::new();
        for r in &self.relays {
            for dev in ["eth0", "eth1"] {
                v.push(read_counters(r.ns.as_deref(), dev)?);
            }
        }
        Ok(v)
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
        for ns in self.receiving_namespaces() {
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

    pub(super) fn loss_drops(&self) -> Result<u64> {
        if self.loss == 0.0 {
            return Ok(0);
        }
        let mut total = 0;
        for ns in self.receiving_namespaces() {
            let text = ip(&["netns", "exec", ns, "nft", "list", "table", "inet", "rml"])?;
            total += nft_counted_packets(&text);
        }
        Ok(total)
    }

    pub(super) fn shaper_drops(&self) -> Result<u64> {
        if self.spec.rate_bits_per_s.is_none() {
            return Ok(0);
        }
        let mut total = 0;
        for (ns, dev) in self.shaped_interfaces() {
            let text = run_cmd(
                "tc",
                &["-n", ns, "-s", "-j", "qdisc", "show", "dev", dev],
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
        if let Some(seg) = &self.spec.segments {
            return self.describe_segments(seg);
        }
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

    /// [`Netns::describe`] for a segmented testbed (same first words, so
    /// `testbeds.txt` is read the same way).
    fn describe_segments(&self, seg: &Segments) -> String {
        let mut s = format!(
            "netns testbed {}: {} segments {:?} (receivers each; h0 = sender on segment 0), one bridge each (br0..br{}) \
             in namespace {} (IGMP snooping: off), segment s = 10.77.s.0/24; {} relay host(s) r1..r{} with eth0 on the segment each receives from \
             ({:?}) and eth1 on segment k, IP forwarding off; egress tbf {} on every host interface and both relay interfaces \
             (burst {TBF_BURST}, limit {TBF_LIMIT}), MTU {}; loss is set per point on receivers' and relays' UDP+TCP input",
            self.id,
            seg.count(),
            seg.per_segment(),
            seg.count() - 1,
            self.switch_ns,
            self.relays.len(),
            self.relays.len(),
            seg.upstreams(),
            crate::units::fmt_rate(self.spec.rate_bits_per_s),
            self.spec.mtu,
        );
        for sgm in 0..seg.count() {
            let _ = write!(s, "\nsegment {sgm} (br{sgm}):");
            if sgm == 0 {
                let h = &self.hosts[0];
                let _ = write!(s, " {}={} (sender)", h.ns.as_deref().unwrap_or("-"), h.addr);
            } else {
                let r = &self.relays[sgm - 1];
                let _ = write!(
                    s,
                    " {}={} (relay eth1)",
                    r.ns.as_deref().unwrap_or("-"),
                    r.down_addr
                );
            }
            for i in seg.hosts_on(sgm) {
                let h = &self.hosts[i];
                let _ = write!(s, " {}={}", h.ns.as_deref().unwrap_or("-"), h.addr);
            }
            for k in seg.relays_from(sgm) {
                let r = &self.relays[k - 1];
                let _ = write!(
                    s,
                    " {}={} (relay eth0)",
                    r.ns.as_deref().unwrap_or("-"),
                    r.up_addr
                );
            }
        }
        s
    }

    /// The segments, when it has several.
    pub fn segments(&self) -> Option<&Segments> {
        self.spec.segments.as_ref()
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
