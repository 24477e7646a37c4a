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

pub mod chaos;
pub mod procs;
pub mod report;
pub mod scenario;
pub mod signals;
pub mod suite;
pub mod testbed;
pub mod tools;
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
    /// Run a scenario or a reproduction suite (TOML) and write runs/points as CSV and JSON into --out.
    Run(RunArgs),
    /// Write report.md and SVG plots from a run or suite directory.
    Report(ReportArgs),
    /// Break the namespace LAN while rmcast transfers (a receiver or the
    /// sender killed or stopped, a link down, 20 % loss, a late joiner, two
    /// sessions on one group, a full disk) and check what rmcast must do;
    /// prints a table (needs root; see docs/lab.md, "Chaos").
    Chaos(ChaosArgs),
    /// Plot Hunt's controller trace (`rmcast send --rate-trace FILE`) as
    /// an SVG of spacing over time.
    PlotTrace(report::trace_plot::PlotTraceArgs),
    /// Internal: NORM file sender (used by the NORM peer driver).
    #[command(hide = true)]
    NormSend(tools::NormSendArgs),
    /// Internal: NORM file receiver.
    #[command(hide = true)]
    NormRecv(tools::NormRecvArgs),
    /// Internal: MultiTCP sender (one TCP connection per receiver).
    #[command(hide = true)]
    TcpSend(tools::TcpSendArgs),
    /// Internal: MultiTCP receiver.
    #[command(hide = true)]
    TcpRecv(tools::TcpRecvArgs),
    /// Internal: raw UDP multicast sender, no flow control (blast tool).
    #[command(hide = true)]
    BlastSend(tools::blast::BlastSendArgs),
    /// Internal: blast receiver (counts what arrived, reports JSON).
    #[command(hide = true)]
    BlastRecv(tools::blast::BlastRecvArgs),
    /// Internal: one node of the PRMP paper's symmetric rounds experiment.
    #[command(hide = true)]
    Rounds(tools::rounds::RoundsArgs),
    /// Internal: the files under a receiver's directory with their sizes
    /// and BLAKE3s, as JSON (the ssh testbed verifies copies where they are).
    #[command(hide = true)]
    ListCopies {
        /// The receiver's directory.
        dir: PathBuf,
    },
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
    /// Segments joined by relay hosts, receivers per segment (`10,10,10`;
    /// replaces --receivers): one bridge each, relay rK on segments K-1 and K.
    #[arg(long, value_delimiter = ',')]
    pub segments: Vec<u16>,
    /// With --segments: the segment each relay 1.. receives from (`0,0`:
    /// both off segment 0); default the chain 0,1,…
    #[arg(long, value_delimiter = ',')]
    pub relay_from: Vec<usize>,
}

/// `lab chaos`.
// The doc comments are the command's --help text, not rustdoc markup.
#[allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]
#[derive(Args, Debug)]
pub struct ChaosArgs {
    /// Work directory: DIR/<scenario>/ keeps each scenario's logs and
    /// copies; DIR/chaos.md gets the table.
    #[arg(long, short = 'o')]
    pub out: PathBuf,
    /// The rmcast binary (as for `lab run`).
    #[arg(long, value_name = "PATH")]
    pub rmcast: Option<PathBuf>,
    /// Run only these scenarios (comma-separated; default all).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
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

/// Where a suite runs (`--backend`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendArg {
    /// The testbed (netns or local), real processes.
    Lab,
    /// The simulator, rmcast's UDP protocols and TCP overlays at any group size.
    Sim,
    /// Both.
    Both,
}

/// `lab run`.
// The doc comments are the command's --help text, not rustdoc markup.
#[allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Scenario or suite file (TOML; a file with [[experiment]] is a suite, see docs/suites.md).
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
    /// Override the scenario's object sizes (comma-separated: `1MB,256MiB`).
    #[arg(long, value_delimiter = ',', value_name = "SIZE,SIZE")]
    pub sizes: Vec<String>,
    /// Override the scenario's repeats.
    #[arg(long)]
    pub repeats: Option<u32>,
    /// Run on this testbed instead of the scenario's (or the suite's
    /// experiments'): `ssh` runs on the hosts of --inventory.
    #[arg(long, value_enum, value_name = "KIND")]
    pub testbed: Option<scenario::TestbedKind>,
    /// The ssh testbed's hosts: a TOML inventory (address, interface, user,
    /// key, work directory per host; the sender first). See docs/lab.md.
    #[arg(long, value_name = "FILE")]
    pub inventory: Option<PathBuf>,
    /// Write report.md after the run.
    #[arg(long)]
    pub report: bool,
    /// Suites: run the quick variant (every [experiment.quick] applied).
    #[arg(long)]
    pub quick: bool,
    /// Suites: where to run [default: lab].
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// Suites: run only these experiments (ids, comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "ID,ID")]
    pub only_experiment: Vec<String>,
    /// Suites: simulator seeds per point (overrides the suite's `seeds`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub seeds: Option<u32>,
}

/// `lab report`.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A directory written by `lab run` (several suite directories with --to:
    /// one index of every claim's verdict, one report per suite beside it).
    #[arg(required = true, num_args = 1..)]
    pub dirs: Vec<PathBuf>,
    /// Suites: write the report here instead of DIR/report.md, its plots
    /// into `<PATH without .md>/` (linked relatively). With several
    /// directories, PATH is the index and each suite's report goes to
    /// `<PATH without .md>/<suite>.md`.
    #[arg(long, value_name = "PATH")]
    pub to: Option<PathBuf>,
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
            let segments = if a.segments.is_empty() {
                None
            } else {
                let seg = if a.relay_from.is_empty() {
                    testbed::Segments::new(&a.segments)
                } else {
                    testbed::Segments::with_relays(&a.segments, &a.relay_from)
                };
                Some(seg.map_err(anyhow::Error::msg)?)
            };
            let spec = testbed::NetnsSpec {
                receivers: segments.as_ref().map_or(a.receivers, |s| s.total() as u16),
                rate_bits_per_s: units::parse_rate_opt(&a.rate).map_err(anyhow::Error::msg)?,
                mtu: a.mtu,
                segments,
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
            let text = std::fs::read_to_string(&a.scenario)
                .with_context(|| format!("cannot read {}", a.scenario.display()))?;
            if suite::is_suite(&text) {
                return run_suite_command(a);
            }
            if a.quick || a.backend.is_some() || !a.only_experiment.is_empty() || a.seeds.is_some()
            {
                bail!(
                    "--quick, --backend, --only-experiment and --seeds apply to suites (files with [[experiment]]); {} is a scenario",
                    a.scenario.display()
                );
            }
            let mut scenario = scenario::Scenario::load(&a.scenario)
                .with_context(|| format!("scenario {}", a.scenario.display()))?;
            if !a.sizes.is_empty() {
                scenario.sizes = a.sizes;
                scenario.validate().context("--sizes")?;
            }
            let rmcast = resolve_rmcast(a.rmcast.as_deref())?;
            let opts = scenario::runner::RunOptions {
                // Absolute: the ssh testbed maps the paths under it.
                out: std::path::absolute(&a.out)?,
                rmcast,
                self_cmd: self_command()?,
                only: a.only,
                receivers: a.receivers,
                repeats: a.repeats,
                testbed: a.testbed,
                inventory: a.inventory,
            };
            let summary = scenario::runner::run_scenario(&scenario, &opts)?;
            if a.report {
                report::scenario::write_report(&a.out)?;
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
        LabCommand::Chaos(a) => run_chaos(a),
        LabCommand::PlotTrace(a) => {
            report::trace_plot::run(&a)?;
            Ok(0)
        }
        LabCommand::Report(a) => {
            if a.dirs.len() > 1 {
                let Some(to) = a.to.as_deref() else {
                    bail!("several directories need --to PATH (the index to write)");
                };
                let path = report::suite::write_index(&a.dirs, to)?;
                eprintln!("rmcast-lab: wrote {}", path.display());
                return Ok(0);
            }
            let dir = &a.dirs[0];
            let path = if dir.join(suite::run::POINTS_FILE).is_file() {
                report::suite::write_report(dir, a.to.as_deref())?
            } else if a.to.is_some() {
                bail!(
                    "--to applies to suite directories; {} has no {}",
                    dir.display(),
                    suite::run::POINTS_FILE
                );
            } else {
                report::scenario::write_report(dir)?
            };
            eprintln!("rmcast-lab: wrote {}", path.display());
            Ok(0)
        }
        LabCommand::NormSend(a) => tools::norm_send(&a),
        LabCommand::NormRecv(a) => tools::norm_recv(&a),
        LabCommand::TcpSend(a) => tools::tcp_send(&a),
        LabCommand::TcpRecv(a) => tools::tcp_recv(&a),
        LabCommand::BlastSend(a) => tools::blast::blast_send(&a),
        LabCommand::BlastRecv(a) => tools::blast::blast_recv(&a),
        LabCommand::Rounds(a) => tools::rounds::rounds(&a),
        LabCommand::ListCopies { dir } => {
            println!(
                "{}",
                serde_json::to_string(&scenario::files::list_copies(&dir)?)?
            );
            Ok(0)
        }
    }
}

/// `lab run SUITE`: runs a reproduction suite; exit 0 when every point succeeded.
fn run_suite_command(a: RunArgs) -> Result<i32> {
    if !a.receivers.is_empty() || !a.sizes.is_empty() {
        bail!(
            "--receivers and --sizes apply to scenarios; a suite sets its receivers and sizes per experiment"
        );
    }
    let mut suite = suite::Suite::load(&a.scenario, a.quick)?;
    // Overrides are part of the suite as run (DIR/suite.toml, the report).
    for e in &mut suite.experiment {
        if let Some(s) = a.seeds {
            e.seeds = s;
        }
        if let Some(r) = a.repeats {
            e.repeats = r;
        }
    }
    let backends = match a.backend.unwrap_or(BackendArg::Lab) {
        BackendArg::Lab => vec![suite::Backend::Lab],
        BackendArg::Sim => vec![suite::Backend::Sim],
        BackendArg::Both => vec![suite::Backend::Lab, suite::Backend::Sim],
    };
    let rmcast = if backends.contains(&suite::Backend::Lab) {
        Some(resolve_rmcast(a.rmcast.as_deref())?)
    } else {
        None
    };
    let opts = suite::run::SuiteOptions {
        out: std::path::absolute(&a.out)?,
        backends,
        only_experiments: a.only_experiment,
        only_series: a.only,
        rmcast,
        self_cmd: self_command()?,
        repeats: a.repeats,
        seeds: a.seeds,
        quick: a.quick,
        command: command_line(),
        testbed: a.testbed,
        inventory: a.inventory,
    };
    let summary = suite::run::run_suite(&suite, &opts)?;
    if a.report {
        let path = report::suite::write_report(&a.out, None)?;
        eprintln!("rmcast-lab: wrote {}", path.display());
    }
    eprintln!(
        "rmcast-lab: suite {}: {} points, {} failed; results in {}",
        suite.name,
        summary.points,
        summary.failed,
        a.out.display()
    );
    Ok(if summary.failed == 0 { 0 } else { 1 })
}

/// This process's command line, shell-quoted where needed (for the report).
fn command_line() -> String {
    std::env::args()
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"$`\\".contains(c)) {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
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

/// `lab chaos`: every (or each `--only`) scenario in turn; exit 1 if any failed.
fn run_chaos(a: ChaosArgs) -> Result<i32> {
    if !testbed::is_root() {
        bail!("lab chaos builds namespace LANs and needs root");
    }
    signals::install();
    let rmcast = resolve_rmcast(a.rmcast.as_deref())?;
    for name in &a.only {
        if !chaos::SCENARIOS.iter().any(|(n, _)| n == name) {
            bail!("no chaos scenario {name}");
        }
    }
    let mut rows = Vec::new();
    let mut failed = 0;
    for (name, _) in chaos::SCENARIOS {
        if !a.only.is_empty() && !a.only.iter().any(|n| n == name) {
            continue;
        }
        signals::check()?;
        eprintln!("rmcast-lab chaos: {name}");
        let work = a.out.join(name);
        let _ = std::fs::remove_dir_all(&work);
        match chaos::run(name, &work, &rmcast) {
            Ok(row) => rows.push(row),
            Err(e) => {
                failed += 1;
                eprintln!("rmcast-lab chaos: {name} FAILED: {e:#}");
                rows.push(chaos::Row {
                    scenario: name.to_string(),
                    outcome: format!("FAILED: {}", e.to_string().lines().next().unwrap_or("")),
                    detect: None,
                    wall: std::time::Duration::ZERO,
                });
            }
        }
    }
    let table = chaos::table(&rows);
    std::fs::write(a.out.join("chaos.md"), &table)?;
    print!("{table}");
    Ok(if failed == 0 { 0 } else { 1 })
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
