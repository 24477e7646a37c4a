//! rmcast-lab: a measurement lab for rmcast and peer reliable-multicast tools.
//!
//! It builds a LAN of network namespaces (one per host, veth pairs into a
//! bridge that lives in its own namespace, so nothing outside the lab's
//! namespaces is touched) or uses loopback, runs scenarios written in TOML
//! (tool × receivers × object size × rate × loss × repeats), detects
//! failures the way the Grid paper's harness does (deadlock/livelock as "no
//! progress", crashes, wrong or missing files, goodput below 1 % of the
//! expected), and writes per-run and per-point metrics (S, G, N, C, control
//! packets per data packet, CPU per GB) as CSV and JSON, then a Markdown
//! report with SVG plots.
//!
//! It is not a network emulator beyond what tc tbf and nftables give: one
//! bridge, per-host egress shaping, random loss on the receivers' input.
//!
//! Entry points: [`main_with_args`] (argv, including the program name) and
//! [`LabArgs`] + [`run`] to mount the lab as a subcommand of another clap
//! CLI.

pub mod blast;
pub mod metrics;
pub mod peers;
pub mod procs;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod signals;
pub mod testbed;
pub mod units;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// `rmcast-lab` / `rmcast lab`: testbeds, scenario runs and reports.
#[derive(Parser, Debug)]
#[command(name = "rmcast-lab", version)]
pub struct LabCli {
    #[command(flatten)]
    pub lab: LabArgs,
}

/// The lab's arguments, to flatten or nest into another clap command.
#[derive(Args, Debug)]
pub struct LabArgs {
    #[command(subcommand)]
    pub command: LabCommand,
}

/// The lab's subcommands.
#[derive(Subcommand, Debug)]
pub enum LabCommand {
    /// Build a namespace LAN and leave it up for manual use (needs root).
    Up(UpArgs),
    /// Remove a lab testbed (by id), or every lab testbed with --all.
    Down(DownArgs),
    /// List lab testbeds, their namespaces, and whether their owner still runs.
    Status,
    /// Run a scenario (TOML) and write runs/points as CSV and JSON into --out.
    Run(RunArgs),
    /// Write report.md and SVG plots from a run directory.
    Report(ReportArgs),
    /// Internal: NORM file sender (used by the NORM peer driver).
    #[command(hide = true)]
    NormSend(peers::NormSendArgs),
    /// Internal: NORM file receiver.
    #[command(hide = true)]
    NormRecv(peers::NormRecvArgs),
    /// Internal: MultiTCP sender (one TCP connection per receiver).
    #[command(hide = true)]
    TcpSend(peers::TcpSendArgs),
    /// Internal: MultiTCP receiver.
    #[command(hide = true)]
    TcpRecv(peers::TcpRecvArgs),
    /// Internal: raw UDP multicast sender, no flow control (blast tool).
    #[command(hide = true)]
    BlastSend(blast::BlastSendArgs),
    /// Internal: blast receiver (counts what arrived, reports JSON).
    #[command(hide = true)]
    BlastRecv(blast::BlastRecvArgs),
}

/// `lab up`.
#[derive(Args, Debug)]
pub struct UpArgs {
    /// Receivers (hosts h1..hN; h0 is the sender).
    #[arg(long, short = 'n', default_value_t = 3)]
    pub receivers: u16,
    /// Per-host egress rate (tc tbf): e.g. 100mbit, 1gbit, none.
    #[arg(long, default_value = "100mbit")]
    pub rate: String,
    /// Random loss probability on each receiver's UDP input (nftables).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Interface MTU (9000 for jumbo frames).
    #[arg(long, default_value_t = 1500)]
    pub mtu: u32,
}

/// `lab down`.
#[derive(Args, Debug)]
pub struct DownArgs {
    /// Testbed id printed by `lab up` (e.g. rmlk3x9a).
    pub id: Option<String>,
    /// Remove every lab testbed (namespaces named rml*), including stale ones.
    #[arg(long)]
    pub all: bool,
}

/// `lab run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Scenario file (TOML).
    pub scenario: PathBuf,
    /// Output directory (created; results are added to it).
    #[arg(long, short = 'o')]
    pub out: PathBuf,
    /// The rmcast binary [default: $RMCAST_BIN, the `rmcast` next to this
    /// program, or target/release/rmcast].
    #[arg(long, value_name = "PATH")]
    pub rmcast: Option<PathBuf>,
    /// Run only these tools (names from the scenario, comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Override the scenario's receiver counts (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub receivers: Vec<u16>,
    /// Override the scenario's repeats.
    #[arg(long)]
    pub repeats: Option<u32>,
    /// Write report.md after the run.
    #[arg(long)]
    pub report: bool,
}

/// `lab report`.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A directory written by `lab run`.
    pub dir: PathBuf,
}

/// Runs the lab with a full argv (program name first); returns the exit code.
pub fn main_with_args(args: Vec<String>) -> Result<i32> {
    let cli = match LabCli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            e.print().ok();
            return Ok(code);
        }
    };
    run(cli.lab)
}

/// Runs parsed lab arguments (for mounting under another CLI); returns the exit code.
pub fn run(args: LabArgs) -> Result<i32> {
    match args.command {
        LabCommand::Up(a) => {
            let spec = testbed::NetnsSpec {
                receivers: a.receivers,
                rate_bits_per_s: units::parse_rate_opt(&a.rate).map_err(anyhow::Error::msg)?,
                mtu: a.mtu,
            };
            let mut tb = testbed::Netns::create(&spec)?;
            tb.set_loss(a.loss)?;
            println!("{}", tb.describe());
            println!(
                "testbed {} is up; run commands with `ip netns exec {}-h0 ...`; remove it with `rmcast lab down {}`",
                tb.id, tb.id, tb.id
            );
            tb.keep()?;
            Ok(0)
        }
        LabCommand::Down(a) => {
            let removed = match (a.id, a.all) {
                (Some(id), false) => testbed::remove_testbed(&id)?,
                (None, true) => testbed::remove_all()?,
                _ => bail!("give a testbed id or --all"),
            };
            println!("removed {removed} namespace(s)");
            Ok(0)
        }
        LabCommand::Status => {
            print!("{}", testbed::status()?);
            Ok(0)
        }
        LabCommand::Run(a) => {
            signals::install();
            let scenario = scenario::Scenario::load(&a.scenario)
                .with_context(|| format!("scenario {}", a.scenario.display()))?;
            let rmcast = resolve_rmcast(a.rmcast.as_deref())?;
            let opts = runner::RunOptions {
                out: a.out.clone(),
                rmcast,
                self_cmd: self_command()?,
                only: a.only,
                receivers: a.receivers,
                repeats: a.repeats,
            };
            let summary = runner::run_scenario(&scenario, &opts)?;
            if a.report {
                report::write_report(&a.out)?;
            }
            eprintln!(
                "rmcast-lab: {} runs, {} succeeded; results in {}",
                summary.runs,
                summary.succeeded,
                a.out.display()
            );
            Ok(if summary.runs == summary.succeeded {
                0
            } else {
                1
            })
        }
        LabCommand::Report(a) => {
            let path = report::write_report(&a.dir)?;
            eprintln!("rmcast-lab: wrote {}", path.display());
            Ok(0)
        }
        LabCommand::NormSend(a) => peers::norm_send(&a),
        LabCommand::NormRecv(a) => peers::norm_recv(&a),
        LabCommand::TcpSend(a) => peers::tcp_send(&a),
        LabCommand::TcpRecv(a) => peers::tcp_recv(&a),
        LabCommand::BlastSend(a) => blast::blast_send(&a),
        LabCommand::BlastRecv(a) => blast::blast_recv(&a),
    }
}

/// How to invoke this program's hidden subcommands: `rmcast-lab` itself,
/// or `rmcast lab` when mounted in the rmcast CLI ($RMCAST_LAB_SELF overrides,
/// space-separated).
pub fn self_command() -> Result<Vec<String>> {
    if let Ok(s) = std::env::var("RMCAST_LAB_SELF") {
        return Ok(s.split_whitespace().map(String::from).collect());
    }
    let exe = std::env::current_exe().context("cannot find this program's path")?;
    let name = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let exe = exe.display().to_string();
    Ok(if name.starts_with("rmcast-lab") {
        vec![exe]
    } else {
        vec![exe, "lab".into()]
    })
}

/// Finds the rmcast binary: the flag, $RMCAST_BIN, next to this program, or target/release.
pub fn resolve_rmcast(flag: Option<&std::path::Path>) -> Result<PathBuf> {
    if let Some(p) = flag {
        return p
            .canonicalize()
            .with_context(|| format!("--rmcast {}", p.display()));
    }
    if let Some(p) = std::env::var_os("RMCAST_BIN") {
        let p = PathBuf::from(p);
        return p
            .canonicalize()
            .with_context(|| format!("RMCAST_BIN={}", p.display()));
    }
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        candidates.push(dir.join("rmcast"));
        // Integration tests live in target/<profile>/deps.
        if let Some(up) = dir.parent() {
            candidates.push(up.join("rmcast"));
        }
    }
    candidates.push(PathBuf::from("target/release/rmcast"));
    for c in &candidates {
        if c.is_file() {
            return Ok(c.canonicalize()?);
        }
    }
    bail!(
        "cannot find the rmcast binary (looked at {}); build it with `cargo build --release -p rmcast-cli` and pass --rmcast PATH or set RMCAST_BIN",
        candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}
