//! What a tool driver is given ([`Ctx`], the [`Tool`] from the scenario)
//! and what it returns ([`Plan`]), with the helpers every driver shares.

use crate::testbed::Testbed;
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// What the runner needs to know to run one transfer.
pub struct Ctx<'a> {
    /// The testbed.
    pub tb: &'a Testbed,
    /// Receivers in this run (hosts 1..=n).
    pub n: usize,
    /// The object to send.
    pub object: &'a Path,
    /// Its size.
    pub size: u64,
    /// Receivers' output directories, index 1..=n (index 0 unused).
    pub out_dirs: &'a [PathBuf],
    /// Directory for status files.
    pub run_dir: &'a Path,
    /// Multicast group for this run.
    pub group: Ipv4Addr,
    /// Base port for this run (even; tools may use port and port + 1, MultiTCP port + i).
    pub port: u16,
    /// Link rate, if shaped.
    pub rate_bits_per_s: Option<u64>,
    /// Loss for tools that emulate it themselves (loopback testbed).
    pub tool_loss: f64,
    /// The rmcast binary.
    pub rmcast: &'a Path,
    /// How to call this program's hidden subcommands.
    pub self_cmd: &'a [String],
    /// The run's hard time limit (tools get it as their own timeout).
    pub limit_s: f64,
}

impl Ctx<'_> {
    /// The receivers' host indices.
    pub fn receivers(&self) -> std::ops::RangeInclusive<usize> {
        1..=self.n
    }

    /// Host `i`'s address.
    pub fn addr(&self, i: usize) -> Ipv4Addr {
        self.tb.hosts()[i].addr
    }

    /// Receiver `i`'s output directory, as an argument.
    pub fn out(&self, i: usize) -> String {
        self.out_dirs[i].display().to_string()
    }

    /// The object's path, as an argument.
    pub fn object_arg(&self) -> String {
        self.object.display().to_string()
    }

    /// `GROUP:PORT`, as an argument.
    pub fn group_port(&self) -> String {
        format!("{}:{}", self.group, self.port)
    }

    /// The run's time limit in whole seconds, as a duration argument (`30s`).
    pub fn limit_arg(&self) -> String {
        format!("{}s", self.limit_s.ceil() as u64)
    }

    /// One of this program's hidden subcommands (`norm-recv …`) on host `host`.
    pub fn hidden(&self, host: usize, args: Vec<String>) -> ProcSpec {
        let mut all = self.self_cmd[1..].to_vec();
        all.extend(args);
        ProcSpec {
            host,
            program: self.self_cmd[0].clone(),
            args: all,
            env: Vec::new(),
        }
    }
}

/// One process to start.
pub struct ProcSpec {
    /// Host index.
    pub host: usize,
    /// Program.
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Environment variables set for it (the scenario's `env`).
    pub env: Vec<(String, String)>,
}

/// When a transfer is complete for timing purposes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// The sender exits 0 only once every receiver confirmed (rmcast, uftp,
    /// NORM watermark, MultiTCP acks, iperf3).
    SenderExit,
    /// The last of sender and receivers to exit (udpcast: receivers finish writing).
    AllExit,
}

/// The plan for one transfer.
pub struct Plan {
    /// Receivers, started first.
    pub receivers: Vec<ProcSpec>,
    /// Relays between segments (`kind = "cascade"`), started after the
    /// receivers and before the sender; judged like receivers (they must
    /// exit 0 within the grace time after the sender), but neither
    /// verified nor counted in the receivers' CPU.
    pub relays: Vec<ProcSpec>,
    /// The sender.
    pub sender: ProcSpec,
    /// Daemons (uftpd) do not exit: a status file line marks each one done.
    pub daemon_status: Option<(Vec<PathBuf>, &'static str)>,
    /// Timing rule.
    pub completion: Completion,
    /// Whether the receivers' files are compared with the original.
    pub verify: bool,
    /// Receivers the tool actually serves (iperf3: 1).
    pub served: usize,
    /// Seconds between starting receivers and the sender.
    pub settle_s: f64,
}

pub(crate) fn s<T: ToString>(x: T) -> String {
    x.to_string()
}

/// Whether `program` is on PATH.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

pub(crate) fn require(programs: &[&str], package: &str) -> Result<(), String> {
    for p in programs {
        if !on_path(p) {
            return Err(format!(
                "unavailable: `{p}` not installed (apt-get install {package})"
            ));
        }
    }
    Ok(())
}

/// The senders after the plan's own (rmcast `senders = S`): copies of its
/// sender, on h0 too, each offering its own object (`objects`: S − 1 paths).
pub fn more_senders(plan: &Plan, objects: &[PathBuf]) -> Vec<ProcSpec> {
    objects
        .iter()
        .map(|o| {
            let mut args = plan.sender.args.clone();
            // `send OBJECT ...`: the object is the first argument after `send`.
            args[1] = o.display().to_string();
            ProcSpec {
                host: plan.sender.host,
                program: plan.sender.program.clone(),
                args,
                env: plan.sender.env.clone(),
            }
        })
        .collect()
}

/// The kind of file transfer tool.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ToolKind {
    /// rmcast send/recv.
    Rmcast,
    /// udpcast: udp-sender / udp-receiver.
    Udpcast,
    /// uftp / uftpd.
    Uftp,
    /// NORM (libnorm) through the lab's own file driver.
    Norm,
    /// One TCP connection from the sender to each receiver.
    Multitcp,
    /// One iperf3 TCP flow to h1: the point-to-point ceiling (unverified).
    Iperf3,
    /// Raw UDP multicast, no flow control: per-receiver loss (unverified).
    Blast,
    /// rmcast across segments: `send` on h0, one `relay` per further
    /// segment, `recv` on every receiver in its segment's group (the
    /// scenario's `segments`).
    Cascade,
    /// The PRMP paper's closed group: `receivers` = N nodes, each running
    /// `rmcast lab rounds` (args: `--proto prmp|ff|multitcp --round S …`).
    Symmetric,
}

/// One tool under test.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    /// Name in results and plots (unique in the scenario).
    pub name: String,
    /// What it is.
    pub kind: ToolKind,
    /// rmcast: --protocol (ack, nak-poll, ring, tree, or a tcp-* overlay).
    #[serde(default)]
    pub protocol: Option<String>,
    /// Sending rate as a fraction of the link rate (default 0.95; NORM 0.93).
    #[serde(default)]
    pub rate_fraction: Option<f64>,
    /// Extra sender arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra receiver arguments.
    #[serde(default)]
    pub recv_args: Vec<String>,
    /// cascade: extra `rmcast relay` arguments (each relay also gets the
    /// tool's protocol and paced rate; `args` are the sender's only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relay_args: Vec<String>,
    /// rmcast, cascade: environment variables for its sender, relays and receivers (e.g.
    /// `RMCAST_NO_GSO = "1"`, so that the loss rules drop datagrams, not
    /// whole GSO batches).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// rmcast with `--rate-control hunt`: this many senders on one group,
    /// all on h0, each with its own object of the point's size and
    /// `--rate-group`; receivers run `recv --sessions S` (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub senders: Option<u16>,
}

impl Tool {
    /// Senders in one run (1 unless `senders` says more).
    pub fn sender_count(&self) -> usize {
        usize::from(self.senders.unwrap_or(1).max(1))
    }
}

/// The rate a tool paces its data at on a shaped link: `rate_fraction`
/// (default 0.95; NORM 0.93) of the link rate; `None` unshaped.
pub fn paced_rate(tool: &Tool, rate_bits_per_s: Option<u64>) -> Option<u64> {
    let frac = tool
        .rate_fraction
        .unwrap_or(if tool.kind == ToolKind::Norm {
            0.93
        } else {
            0.95
        });
    rate_bits_per_s.map(|r| (r as f64 * frac) as u64)
}

/// `args` without `flag` and its value (`--flag V` or `--flag=V`).
pub(crate) fn strip_flag(args: &[String], flag: &str) -> Vec<String> {
    let eq = format!("{flag}=");
    let mut out = Vec::new();
    let mut skip = false;
    for a in args {
        if skip {
            skip = false;
        } else if a == flag {
            skip = true;
        } else if !a.starts_with(&eq) {
            out.push(a.clone());
        }
    }
    out
}

/// A tool's JSON report (the last line of `path` that parses), as the runner
/// reads the blast and rounds programs' reports.
pub fn read_report<T: for<'de> Deserialize<'de>>(path: &std::path::Path) -> Option<T> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .rev()
        .find_map(|l| serde_json::from_str(l.trim()).ok())
}
