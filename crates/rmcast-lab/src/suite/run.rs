//! Running a suite on its backends.
//!
//! - **lab**: each experiment becomes one ordinary [`Scenario`] (x =
//!   receivers or size maps onto the scenario's lists; a parameter x gives
//!   one tool per series and x value, `{x}` substituted) run by
//!   [`runner::run_scenario`] into `DIR/<exp>/lab`; its per-point medians
//!   become suite points.
//! - **sim**: rmcast's UDP protocols on [`rmcast_sim`], `seeds` seeds per
//!   point on up to `available_parallelism` threads, medians over the seeds
//!   that passed every invariant. Tools the simulator does not model are
//!   "lab only" (not an error).
//!
//! Every point lands in `DIR/suite-points.json` (+ `.csv`), rewritten after
//! each experiment so an interrupted run keeps what it measured.

use crate::scenario::metrics::{self, PointRecord, Spread};
use crate::scenario::runner;
use crate::scenario::{Copies, Inject, Scenario, Tool};
use crate::signals;
use crate::suite::{Backend, Experiment, Metric, Preset, Series, SeriesKind, Suite, XKind, XValue};
use crate::units;
use anyhow::{Context, Result, bail};
use rmcast::{ProtocolId, Repair, SenderConfig, TreeShape, parse_duration};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How to run a suite.
pub struct SuiteOptions {
    /// Output directory.
    pub out: PathBuf,
    /// Backends asked for (`--backend`).
    pub backends: Vec<Backend>,
    /// Only these experiment ids (empty: all).
    pub only_experiments: Vec<String>,
    /// Only these series names (empty: all).
    pub only_series: Vec<String>,
    /// The rmcast binary (needed by the lab backend).
    pub rmcast: Option<PathBuf>,
    /// How to call this program's hidden subcommands.
    pub self_cmd: Vec<String>,
    /// Override the lab repeats.
    pub repeats: Option<u32>,
    /// Override the sim seeds.
    pub seeds: Option<u32>,
    /// Whether the quick variant runs (recorded in the metadata).
    pub quick: bool,
    /// The command line, for the report's header.
    pub command: String,
}

/// One point of a suite: a series at one x on one backend.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SuitePoint {
    /// Experiment id.
    pub experiment: String,
    /// Where it was measured.
    pub backend: Backend,
    /// Series name.
    pub series: String,
    /// x as a number (bytes for sizes).
    pub x: f64,
    /// x as written in the suite.
    pub x_text: String,
    /// Median of y over the successful runs (success_rate: the rate).
    pub y: Option<f64>,
    /// Smallest y.
    pub min: Option<f64>,
    /// Largest y.
    pub max: Option<f64>,
    /// Runs the median is over.
    pub n: usize,
    /// Runs attempted (lab repeats or sim seeds).
    pub runs: usize,
    /// False when the point failed (exit status 1).
    pub ok: bool,
    /// `ok`, `failed`, or `n/a` (the backend does not run this series or metric; not an error).
    pub status: String,
    /// Failure reasons, notes.
    pub reasons: Vec<String>,
    /// Wall-clock seconds spent on the point (sim: all its seeds, one thread's time each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_s: Option<f64>,
}

impl SuitePoint {
    fn new(e: &Experiment, b: Backend, s: &str, x: &XValue) -> SuitePoint {
        SuitePoint {
            experiment: e.id.clone(),
            backend: b,
            series: s.to_string(),
            x: e.x_number(x).unwrap_or(f64::NAN),
            x_text: x.text(),
            y: None,
            min: None,
            max: None,
            n: 0,
            runs: 0,
            ok: true,
            status: "ok".into(),
            reasons: Vec::new(),
            wall_s: None,
        }
    }

    fn failed(mut self, why: impl Into<String>) -> SuitePoint {
        self.ok = false;
        self.status = "failed".into();
        self.reasons.push(why.into());
        self
    }

    fn not_applicable(mut self, why: impl Into<String>) -> SuitePoint {
        self.status = "n/a".into();
        self.reasons.push(why.into());
        self
    }

    fn with_spread(mut self, s: Option<Spread>) -> SuitePoint {
        if let Some(s) = s {
            self.y = Some(s.median);
            self.min = Some(s.min);
            self.max = Some(s.max);
        }
        self
    }
}

/// When and where a suite ran, for the report's header (`DIR/suite-run.json`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunMeta {
    /// The command line.
    pub command: String,
    /// Start, UTC.
    pub started_utc: String,
    /// End, UTC.
    pub finished_utc: String,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// `uname -r`.
    pub kernel: String,
    /// CPUs available.
    pub nproc: usize,
    /// `git rev-parse HEAD` of the working directory (+dirty), if any.
    pub git_commit: Option<String>,
    /// The quick variant.
    pub quick: bool,
    /// Backends run.
    pub backends: Vec<Backend>,
    /// Experiments run (empty: all).
    pub only_experiments: Vec<String>,
}

/// What a suite run did.
pub struct SuiteSummary {
    /// Points measured (n/a ones included).
    pub points: usize,
    /// Points that failed.
    pub failed: usize,
}

/// `DIR/suite-points.json`.
pub const POINTS_FILE: &str = "suite-points.json";

/// Runs the suite's experiments on the chosen backends; writes `DIR/suite.toml`,
/// `DIR/suite-run.json`, `DIR/suite-points.{json,csv}` and `DIR/<exp>/lab/`.
pub fn run_suite(suite: &Suite, opts: &SuiteOptions) -> Result<SuiteSummary> {
    for id in &opts.only_experiments {
        if !suite.experiment.iter().any(|e| &e.id == id) {
            bail!(
                "--only-experiment: no experiment `{id}` in suite {} (ids: {})",
                suite.name,
                suite
                    .experiment
                    .iter()
                    .map(|e| e.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    let t0 = Instant::now();
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("cannot create {}", opts.out.display()))?;
    // Points of an earlier run of the same suite are kept unless re-measured.
    let same_suite = std::fs::read_to_string(opts.out.join("suite.toml"))
        .ok()
        .and_then(|t| Suite::parse_resolved(&t).ok())
        .is_some_and(|s| s.name == suite.name);
    let mut points: Vec<SuitePoint> = if same_suite {
        load_points(&opts.out).unwrap_or_default()
    } else {
        Vec::new()
    };
    std::fs::write(opts.out.join("suite.toml"), suite.to_toml()?)?;
    let mut meta = RunMeta {
        command: opts.command.clone(),
        started_utc: utc_now(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        nproc: std::thread::available_parallelism().map_or(1, usize::from),
        git_commit: git_commit(),
        quick: opts.quick,
        backends: opts.backends.clone(),
        only_experiments: opts.only_experiments.clone(),
        ..RunMeta::default()
    };
    std::fs::write(
        opts.out.join("suite-run.json"),
        serde_json::to_string_pretty(&meta)?,
    )?;
    let mut summary = SuiteSummary {
        points: 0,
        failed: 0,
    };
    for e in &suite.experiment {
        if !opts.only_experiments.is_empty() && !opts.only_experiments.contains(&e.id) {
            continue;
        }
        // Sim first: it is quick, and its numbers are useful while the lab runs.
        for b in [Backend::Sim, Backend::Lab] {
            if !opts.backends.contains(&b) || !e.backends.contains(&b) {
                continue;
            }
            signals::check()?;
            let series: Vec<&Series> = e
                .series_on(b)
                .filter(|s| opts.only_series.is_empty() || opts.only_series.contains(&s.name))
                .collect();
            if series.is_empty() {
                continue;
            }
            eprintln!(
                "rmcast-lab: suite {} experiment {} on {}",
                suite.name,
                e.id,
                b.name()
            );
            let new = match b {
                Backend::Sim => run_sim(e, &series, opts.seeds.unwrap_or(e.seeds)),
                Backend::Lab => {
                    let rmcast = opts
                        .rmcast
                        .clone()
                        .context("the lab backend needs the rmcast binary")?;
                    run_lab(suite, e, &series, opts, &rmcast)?
                }
            };
            summary.points += new.len();
            summary.failed += new.iter().filter(|p| !p.ok).count();
            points.retain(|p| !(p.experiment == e.id && p.backend == b));
            points.extend(new);
            write_points(&opts.out, &points)?;
        }
    }
    write_points(&opts.out, &points)?;
    meta.finished_utc = utc_now();
    meta.seconds = t0.elapsed().as_secs_f64();
    std::fs::write(
        opts.out.join("suite-run.json"),
        serde_json::to_string_pretty(&meta)?,
    )?;
    Ok(summary)
}

/// Reads `DIR/suite-points.json`.
pub fn load_points(dir: &Path) -> Result<Vec<SuitePoint>> {
    let text = std::fs::read_to_string(dir.join(POINTS_FILE))
        .with_context(|| format!("no {POINTS_FILE} in {}", dir.display()))?;
    Ok(serde_json::from_str(&text)?)
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Writes `DIR/suite-points.json` and `DIR/suite-points.csv`.
pub fn write_points(dir: &Path, points: &[SuitePoint]) -> Result<()> {
    std::fs::write(dir.join(POINTS_FILE), serde_json::to_string_pretty(points)?)?;
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v}"));
    let mut csv = String::from(
        "experiment,backend,series,x,x_text,y,min,max,n,runs,ok,status,wall_s,reasons\n",
    );
    for p in points {
        let row = [
            p.experiment.clone(),
            p.backend.name().into(),
            p.series.clone(),
            format!("{}", p.x),
            p.x_text.clone(),
            opt(p.y),
            opt(p.min),
            opt(p.max),
            p.n.to_string(),
            p.runs.to_string(),
            p.ok.to_string(),
            p.status.clone(),
            opt(p.wall_s),
            p.reasons.join(" | "),
        ];
        csv.push_str(
            &row.iter()
                .map(|f| csv_field(f))
                .collect::<Vec<_>>()
                .join(","),
        );
        csv.push('\n');
    }
    std::fs::write(dir.join("suite-points.csv"), csv)?;
    Ok(())
}

// ---------------------------------------------------------------- lab

/// rmcast protocols the lab's scenario runner starts.
const LAB_PROTOCOLS: [&str; 9] = [
    "ack",
    "nak-poll",
    "ring",
    "tree",
    "tcp-direct",
    "tcp-tree",
    "tcp-binomial",
    "tcp-chain",
    "tcp-bintree",
];

/// Replaces `{x}` in every argument.
fn substitute(args: &[String], x: Option<&XValue>) -> Vec<String> {
    args.iter()
        .map(|a| match x {
            Some(x) => a.replace("{x}", &x.text()),
            None => a.clone(),
        })
        .collect()
}

/// Turns the suite-only `--poll-interval-pct P` into rmcast's
/// `--poll-interval max(1, window × P / 100)` (window from `--window`, or the default).
pub fn lab_sender_args(args: &[String]) -> Result<Vec<String>, String> {
    let Some(pct) = crate::units::arg_value(args, "--poll-interval-pct") else {
        return Ok(args.to_vec());
    };
    if crate::units::arg_value(args, "--poll-interval").is_some() {
        return Err("give --poll-interval or --poll-interval-pct, not both".into());
    }
    let pct: f64 = pct
        .parse()
        .ok()
        .filter(|p: &f64| *p > 0.0 && *p <= 100.0)
        .ok_or_else(|| format!("--poll-interval-pct `{pct}` is not a percentage in (0, 100]"))?;
    let window: u32 = match crate::units::arg_value(args, "--window") {
        Some(w) => w
            .parse()
            .map_err(|_| format!("--window `{w}` is not a number"))?,
        None => SenderConfig::default().window,
    };
    let poll = ((f64::from(window) * pct / 100.0) as u32).max(1);
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--poll-interval-pct" {
            it.next();
        } else if a.starts_with("--poll-interval-pct=") {
        } else {
            out.push(a.clone());
            continue;
        }
        out.extend(["--poll-interval".to_string(), poll.to_string()]);
    }
    Ok(out)
}

/// The scenario tool for a series at one x, or why the lab cannot run it.
fn lab_tool(s: &Series, name: String, x: Option<&XValue>) -> Result<Tool, String> {
    let kind = s.kind;
    if let Some(p) = s.protocol.as_deref()
        && !LAB_PROTOCOLS.contains(&p)
    {
        return Err(format!(
            "not supported: the lab's scenario runner does not start rmcast --protocol {p} yet"
        ));
    }
    Ok(Tool {
        name,
        kind,
        protocol: s.protocol.clone(),
        rate_fraction: s.rate_fraction,
        args: lab_sender_args(&substitute(&s.args, x))?,
        recv_args: substitute(&s.recv_args, x),
        senders: s.senders,
    })
}

/// Keeps a tool name usable as a directory name.
fn tool_name(series: &str, x: Option<&XValue>) -> String {
    match x {
        None => series.to_string(),
        Some(x) => {
            let t: String = x
                .text()
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || ".-_".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            format!("{series}@{t}")
        }
    }
}

/// One metric of a lab point, or why the lab cannot measure it.
fn lab_metric(m: Metric, p: &PointRecord) -> Option<Spread> {
    let scale = |s: Option<Spread>, k: f64| {
        s.map(|s| Spread {
            median: s.median * k,
            min: s.min * k,
            max: s.max * k,
        })
    };
    match m {
        Metric::GoodputMbps => p.goodput_mbps,
        Metric::Seconds => p.seconds,
        Metric::LatencyMs => scale(p.seconds, 1e3),
        Metric::SuccessRate => p.success_rate.map(|r| Spread {
            median: r,
            min: r,
            max: r,
        }),
        Metric::OverheadRatio => scale(p.overhead_bytes, 1.0 / p.size_bytes.max(1) as f64),
        Metric::ControlPerData => p.control_per_data_packet,
        Metric::CpuSenderSPerGb => p.cpu_sender_s_per_gb,
        Metric::Loss => p.loss_mean,
        Metric::LossMax => p.loss_max,
        Metric::TSeconds => p.seconds,
        Metric::CostMb => scale(p.tx_bytes, 1e-6),
    }
}

fn run_lab(
    suite: &Suite,
    e: &Experiment,
    series: &[&Series],
    opts: &SuiteOptions,
    rmcast: &Path,
) -> Result<Vec<SuitePoint>> {
    let xs = e.values_for(Backend::Lab);
    let xk = e.x_kind();
    let mut points = Vec::new();
    let mut tools: Vec<Tool> = Vec::new();
    // Tool name → (series, x index when x is a parameter).
    let mut owner: BTreeMap<String, (String, Option<usize>)> = BTreeMap::new();
    for s in series {
        let per_x: Vec<Option<usize>> = if xk == XKind::Param {
            (0..xs.len()).map(Some).collect()
        } else {
            vec![None]
        };
        for xi in per_x {
            let x = xi.map(|i| &xs[i]);
            let name = tool_name(&s.name, x);
            match lab_tool(s, name.clone(), x) {
                Ok(t) => {
                    owner.insert(name, (s.name.clone(), xi));
                    tools.push(t);
                }
                Err(why) => {
                    let targets: Vec<&XValue> = x.map_or(xs.iter().collect(), |x| vec![x]);
                    for x in targets {
                        points
                            .push(SuitePoint::new(e, Backend::Lab, &s.name, x).failed(why.clone()));
                    }
                }
            }
        }
    }
    if tools.is_empty() {
        return Ok(points);
    }
    let size_text = |v: &XValue| match v {
        XValue::Text(t) => t.clone(),
        other => format!("{}B", other.text()),
    };
    let sc = Scenario {
        name: format!("{}-{}", suite.name, e.id),
        testbed: e.testbed,
        receivers: match xk {
            XKind::Receivers => xs
                .iter()
                .map(|v| e.x_number(v).unwrap_or(1.0) as u16)
                .collect(),
            _ => vec![e.receivers.unwrap_or(1)],
        },
        sizes: match xk {
            XKind::Size => xs.iter().map(size_text).collect(),
            _ => vec![e.size.as_ref().map(size_text).unwrap_or_default()],
        },
        rates: e.rates.clone(),
        loss: vec![e.loss],
        repeats: e.repeats,
        mtu: e.mtu,
        stall_s: e.stall_s,
        startup_s: 10.0,
        max_run_s: e.max_run_s,
        grace_s: 8.0,
        copies: Copies::default(),
        inject: Inject::default(),
        tools,
    };
    let expected: Vec<(String, Option<usize>)> = owner.values().cloned().collect();
    let dir = opts.out.join(&e.id).join("lab");
    if dir.join("runs.json").is_file() || dir.join("scenario.toml").is_file() {
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("cannot clear the earlier run in {}", dir.display()))?;
    }
    let run = sc.validate().and_then(|()| {
        runner::run_scenario(
            &sc,
            &runner::RunOptions {
                out: dir.clone(),
                rmcast: rmcast.to_path_buf(),
                self_cmd: opts.self_cmd.clone(),
                only: Vec::new(),
                receivers: Vec::new(),
                repeats: opts.repeats,
            },
        )
    });
    if let Err(err) = run {
        if signals::interrupted() {
            return Err(err);
        }
        let why = format!("lab run failed: {err:#}");
        eprintln!("rmcast-lab: experiment {}: {why}", e.id);
        for (s, xi) in &expected {
            let targets: Vec<&XValue> = xi.map_or(xs.iter().collect(), |i| vec![&xs[i]]);
            for x in targets {
                points.push(SuitePoint::new(e, Backend::Lab, s, x).failed(why.clone()));
            }
        }
        return Ok(points);
    }
    let recs = metrics::load_runs(&dir).unwrap_or_default();
    let mut seen: Vec<(String, usize)> = Vec::new();
    for p in metrics::points(&recs) {
        let Some((s, xi)) = owner.get(&p.tool) else {
            continue;
        };
        let xi = match (xi, xk) {
            (Some(i), _) => Some(*i),
            (None, XKind::Receivers) => xs
                .iter()
                .position(|v| e.x_number(v).is_ok_and(|n| n as usize == p.receivers)),
            (None, _) => xs
                .iter()
                .position(|v| v.bytes().is_ok_and(|b| b == p.size_bytes)),
        };
        let Some(xi) = xi else { continue };
        seen.push((s.clone(), xi));
        points.push(lab_point(e, s, &xs[xi], &p));
    }
    for (s, xi) in &expected {
        let targets: Vec<usize> = xi.map_or((0..xs.len()).collect(), |i| vec![i]);
        for i in targets {
            if !seen.contains(&(s.clone(), i)) {
                points.push(
                    SuitePoint::new(e, Backend::Lab, s, &xs[i])
                        .failed("no run of this point was recorded"),
                );
            }
        }
    }
    Ok(points)
}

fn lab_point(e: &Experiment, series: &str, x: &XValue, p: &PointRecord) -> SuitePoint {
    let mut pt = SuitePoint::new(e, Backend::Lab, series, x);
    pt.runs = p.runs;
    pt.n = p.successes;
    let tried = p.runs - p.unavailable;
    let spread = lab_metric(e.metric, p);
    pt = pt.with_spread(spread);
    pt.reasons = p.reasons.clone();
    if e.metric == Metric::SuccessRate {
        pt.n = tried;
        if tried == 0 {
            pt.ok = false;
            pt.status = "failed".into();
        }
    } else if p.successes < p.runs || pt.y.is_none() {
        pt.ok = false;
        pt.status = "failed".into();
        if pt.reasons.is_empty() {
            pt.reasons.push(format!(
                "{} of {} runs succeeded; `{}` not measured",
                p.successes,
                p.runs,
                e.metric.name()
            ));
        }
    }
    pt
}

// ---------------------------------------------------------------- sim

/// Whether `backend` can measure the series at all (its own `backends`,
/// and for the simulator: one of rmcast's UDP protocols).
pub fn series_runs_on(s: &Series, backend: Backend) -> bool {
    s.backends.as_ref().is_none_or(|b| b.contains(&backend))
        && (backend != Backend::Sim || sim_protocol(s).is_some())
}

/// rmcast's UDP protocols, the ones the simulator drives.
fn sim_protocol(s: &Series) -> Option<ProtocolId> {
    // Several senders run on the lab only.
    if s.kind != SeriesKind::Rmcast || s.senders.is_some_and(|k| k > 1) {
        return None;
    }
    Some(match s.protocol.as_deref().unwrap_or("nak-poll") {
        "ack" => ProtocolId::Ack,
        "nak-poll" => ProtocolId::NakPoll,
        "ring" => ProtocolId::Ring,
        "tree" => ProtocolId::Tree,
        _ => return None,
    })
}

/// Sender flags the simulator understands (the CLI's names and meanings).
pub const SIM_FLAGS: [&str; 11] = [
    "--window",
    "--packet-size",
    "--poll-interval",
    "--poll-interval-pct",
    "--tree-height",
    "--tree-shape",
    "--repair",
    "--suppress",
    "--rto",
    "--peer-timeout",
    "--rate",
];

/// Applies rmcast sender flags to a configuration whose protocol is set.
pub fn apply_sender_flags(args: &[String], c: &mut SenderConfig) -> Result<(), String> {
    let mut pct: Option<f64> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        if !SIM_FLAGS.contains(&flag) {
            return Err(format!(
                "sender flag `{a}` is not known to the simulator (it knows {})",
                SIM_FLAGS.join(", ")
            ));
        }
        let v = match inline {
            Some(v) => v,
            None => it
                .next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))?,
        };
        let num = |what: &str| format!("{flag} `{v}` is not {what}");
        match flag {
            "--window" => c.window = v.parse().map_err(|_| num("a packet count"))?,
            "--packet-size" => {
                c.packet_size = rmcast::parse_size(&v)? as usize;
            }
            "--poll-interval" => {
                c.poll_interval = Some(v.parse().map_err(|_| num("a packet count"))?);
            }
            "--poll-interval-pct" => {
                pct = Some(
                    v.parse()
                        .ok()
                        .filter(|p: &f64| *p > 0.0 && *p <= 100.0)
                        .ok_or_else(|| num("a percentage in (0, 100]"))?,
                );
            }
            "--tree-height" => c.tree_height = v.parse().map_err(|_| num("a chain length"))?,
            "--tree-shape" => {
                c.tree_shape = match v.as_str() {
                    "flat" => TreeShape::Flat,
                    "binary" => TreeShape::Binary,
                    _ => return Err(num("flat or binary")),
                }
            }
            "--repair" => {
                c.repair = match v.as_str() {
                    "selective" => Repair::Selective,
                    "go-back-n" | "gbn" => Repair::GoBackN,
                    _ => return Err(num("selective or go-back-n")),
                }
            }
            "--suppress" => c.suppress = parse_duration(&v)?,
            "--rto" => {
                c.rto = parse_duration(&v)?;
                c.rto_max = c.rto_max.max(c.rto);
            }
            "--peer-timeout" => c.peer_timeout = parse_duration(&v)?,
            _ => c.rate_bits_per_s = Some(rmcast::parse_rate(&v)?),
        }
        if (flag == "--poll-interval" || flag == "--poll-interval-pct")
            && c.protocol != ProtocolId::NakPoll
        {
            return Err(format!("{flag} applies to protocol nak-poll only"));
        }
        if flag.starts_with("--tree-") && c.protocol != ProtocolId::Tree {
            return Err(format!("{flag} applies to protocol tree only"));
        }
    }
    if let Some(p) = pct {
        if c.poll_interval.is_some() {
            return Err("give --poll-interval or --poll-interval-pct, not both".into());
        }
        c.poll_interval = Some(((f64::from(c.window) * p / 100.0) as u32).max(1));
    }
    Ok(())
}

/// The simulator scenario for a series at one x (seed 1).
pub fn sim_scenario(
    e: &Experiment,
    s: &Series,
    x: &XValue,
) -> Result<rmcast_sim::Scenario, String> {
    let protocol = sim_protocol(s).ok_or("lab only")?;
    let base = match e.preset {
        Preset::Fsu => rmcast_sim::Scenario::fsu_2004(),
        Preset::Modern => rmcast_sim::Scenario::default(),
    };
    let xk = e.x_kind();
    let receivers = match xk {
        XKind::Receivers => e.x_number(x)? as u16,
        _ => e.receivers.ok_or("no receivers")?,
    };
    let object_size = match xk {
        XKind::Size => x.bytes()?,
        _ => e.size_bytes().ok_or("no size")?,
    };
    let rate =
        units::parse_rate_opt(&e.rates[0])?.ok_or("the simulator needs a link rate, not `none`")?;
    let mut config = SenderConfig {
        protocol,
        ..SenderConfig::default()
    };
    if let Some(f) = s.rate_fraction {
        config.rate_bits_per_s = Some((rate as f64 * f) as u64);
    }
    let x = (xk == XKind::Param).then_some(x);
    apply_sender_flags(&substitute(&s.args, x), &mut config)?;
    config.receivers = receivers;
    Ok(rmcast_sim::Scenario {
        receivers,
        object_size,
        config,
        link_rate_bits_per_s: rate,
        mtu: e.mtu as usize,
        loss: if e.loss > 0.0 {
            rmcast_sim::LossModel::Bernoulli(e.loss)
        } else {
            rmcast_sim::LossModel::None
        },
        seed: 1,
        time_limit: Duration::from_secs_f64(e.max_run_s),
        ..base
    })
}

/// Bytes a datagram of `udp` payload bytes puts on the wire as the lab's
/// interface counters see it: IP packets (fragments) + 14-byte Ethernet headers.
fn l2_bytes(sc: &rmcast_sim::Scenario, udp: usize) -> u64 {
    (0..sc.fragments(udp))
        .map(|i| ((sc.fragment_ip_payload(udp, i) + 20).max(46) + 14) as u64)
        .sum()
}

/// rmcast's data header, bytes.
const DATA_HEADER: usize = 24;
/// A typical control datagram (ack, nak, poll), UDP payload bytes.
const CONTROL_BYTES: usize = 40;

/// One metric of a simulated run.
fn sim_metric(m: Metric, sc: &rmcast_sim::Scenario, r: &rmcast_sim::RunReport) -> Option<f64> {
    Some(match m {
        Metric::GoodputMbps => r.goodput_mbit_s,
        Metric::Seconds => r.seconds,
        Metric::LatencyMs => r.seconds * 1e3,
        Metric::SuccessRate => 1.0,
        Metric::ControlPerData => r.control_per_data,
        Metric::OverheadRatio => {
            // Estimated from the packet counts, in the lab's accounting.
            let ps = sc.config.packet_size;
            let chunk = (ps - DATA_HEADER) as u64;
            let k = r.data_packets.max(1);
            let last = sc.object_size.saturating_sub((k - 1) * chunk) as usize + DATA_HEADER;
            let data = (k - 1) * l2_bytes(sc, ps) + l2_bytes(sc, last.min(ps));
            let rtx = r.retransmitted_packets * l2_bytes(sc, ps);
            let control = (r.sender.control_sent + r.control_packets) * l2_bytes(sc, CONTROL_BYTES);
            (data + rtx + control) as f64 / sc.object_size as f64 - 1.0
        }
        Metric::Loss
        | Metric::LossMax
        | Metric::CpuSenderSPerGb
        | Metric::TSeconds
        | Metric::CostMb => return None,
    })
}

fn median_spread(mut v: Vec<f64>) -> Option<Spread> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some(Spread {
        median,
        min: v[0],
        max: v[n - 1],
    })
}

/// Runs every sim point of an experiment, seeds in parallel.
pub fn run_sim(e: &Experiment, series: &[&Series], seeds: u32) -> Vec<SuitePoint> {
    let xs = e.values_for(Backend::Sim);
    let mut points = Vec::new();
    // (series, x, scenario) for every point the simulator can run.
    let mut cells: Vec<(String, XValue, rmcast_sim::Scenario)> = Vec::new();
    let unmodelled = matches!(
        e.metric,
        Metric::Loss
            | Metric::LossMax
            | Metric::CpuSenderSPerGb
            | Metric::TSeconds
            | Metric::CostMb
    );
    for s in series {
        for x in xs {
            let pt = SuitePoint::new(e, Backend::Sim, &s.name, x);
            if sim_protocol(s).is_none() {
                points.push(pt.not_applicable(
                    "lab only: the simulator runs rmcast's UDP protocols (ack, nak-poll, ring, tree)",
                ));
            } else if unmodelled {
                points.push(pt.not_applicable(format!(
                    "the simulator does not model `{}`",
                    e.metric.name()
                )));
            } else {
                match sim_scenario(e, s, x) {
                    Ok(sc) => cells.push((s.name.clone(), x.clone(), sc)),
                    Err(why) => points.push(pt.failed(why)),
                }
            }
        }
    }
    let jobs: Vec<(usize, u64)> = (0..cells.len())
        .flat_map(|c| (1..=u64::from(seeds)).map(move |seed| (c, seed)))
        .collect();
    type Outcome = (Result<f64, String>, f64);
    let results: Mutex<Vec<Option<Outcome>>> = Mutex::new(vec![None; jobs.len()]);
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(jobs.len())
        .max(1);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    if signals::interrupted() {
                        break;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(c, seed)) = jobs.get(i) else { break };
                    let mut sc = cells[c].2.clone();
                    sc.seed = seed;
                    let t = Instant::now();
                    let out = match rmcast_sim::run(&sc) {
                        Ok(r) => sim_metric(e.metric, &sc, &r)
                            .ok_or_else(|| format!("`{}` not modelled", e.metric.name())),
                        Err(err) => Err(err.to_string().lines().next().unwrap_or("").to_string()),
                    };
                    let wall = t.elapsed().as_secs_f64();
                    results.lock().expect("no panic holds the lock")[i] = Some((out, wall));
                }
            });
        }
    });
    let results = results.into_inner().expect("threads joined");
    let series_of = |name: &str| series.iter().find(|s| s.name == name);
    for (c, (series, x, sc)) in cells.iter().enumerate() {
        let mut pt = SuitePoint::new(e, Backend::Sim, series, x);
        let mine: Vec<&Outcome> = jobs
            .iter()
            .zip(&results)
            .filter(|((jc, _), _)| *jc == c)
            .filter_map(|(_, r)| r.as_ref())
            .collect();
        pt.runs = mine.len();
        pt.wall_s = Some(mine.iter().map(|r| r.1).sum());
        let values: Vec<f64> = mine
            .iter()
            .filter_map(|r| r.0.as_ref().ok().copied())
            .collect();
        let errors: Vec<String> = mine
            .iter()
            .filter_map(|r| r.0.as_ref().err().cloned())
            .collect();
        pt.n = values.len();
        if e.metric == Metric::SuccessRate && !mine.is_empty() {
            let rate = values.len() as f64 / mine.len() as f64;
            pt = pt.with_spread(Some(Spread {
                median: rate,
                min: rate,
                max: rate,
            }));
            pt.n = mine.len();
            pt.reasons = errors;
        } else {
            pt = pt.with_spread(median_spread(values));
            if (mine.len() as u64) < u64::from(seeds) {
                pt = pt.failed("interrupted before every seed ran");
            }
            for err in errors {
                pt = pt.failed(err);
            }
        }
        if series_of(series).is_some_and(|s| !s.recv_args.is_empty()) {
            pt.reasons
                .push("note: recv_args are not simulated (ignored)".into());
        }
        eprintln!(
            "rmcast-lab: sim {} {} x={} N={}: {} {} ({} of {} seeds ok, {:.1} s)",
            e.id,
            series,
            x.text(),
            sc.receivers,
            e.metric.name(),
            pt.y.map_or("-".into(), |y| format!("{y:.4}")),
            pt.n,
            pt.runs,
            pt.wall_s.unwrap_or(0.0)
        );
        points.push(pt);
    }
    points
}

// ---------------------------------------------------------------- metadata

/// The current time, UTC, as `2026-01-31 12:34:56 UTC`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn git_commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let mut c = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .stderr(std::process::Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
    if dirty {
        c.push_str(" (with uncommitted changes)");
    }
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sender_flags_set_the_configuration_like_the_cli() {
        let mut c = SenderConfig {
            protocol: ProtocolId::NakPoll,
            ..SenderConfig::default()
        };
        apply_sender_flags(
            &strings(&[
                "--window",
                "40",
                "--packet-size=8KiB",
                "--poll-interval-pct",
                "50",
                "--repair",
                "go-back-n",
                "--suppress",
                "2ms",
                "--rto",
                "1s",
            ]),
            &mut c,
        )
        .unwrap();
        assert_eq!(c.window, 40);
        assert_eq!(c.packet_size, 8192);
        assert_eq!(c.poll_interval, Some(20));
        assert_eq!(c.repair, Repair::GoBackN);
        assert_eq!(c.suppress, Duration::from_millis(2));
        assert_eq!(c.rto, Duration::from_secs(1));
        assert!(c.rto_max >= c.rto);
    }

    #[test]
    fn unknown_or_misplaced_sender_flags_are_errors() {
        let mut c = SenderConfig {
            protocol: ProtocolId::Ack,
            ..SenderConfig::default()
        };
        let e = apply_sender_flags(&strings(&["--fanout", "2"]), &mut c).unwrap_err();
        assert!(
            e.contains("`--fanout` is not known to the simulator"),
            "{e}"
        );
        let e = apply_sender_flags(&strings(&["--tree-height", "3"]), &mut c).unwrap_err();
        assert!(e.contains("tree only"), "{e}");
        let e = apply_sender_flags(&strings(&["--poll-interval", "3"]), &mut c).unwrap_err();
        assert!(e.contains("nak-poll only"), "{e}");
        let e = apply_sender_flags(&strings(&["--window"]), &mut c).unwrap_err();
        assert!(e.contains("needs a value"), "{e}");
        let e = apply_sender_flags(&strings(&["--window", "many"]), &mut c).unwrap_err();
        assert!(e.contains("`many` is not a packet count"), "{e}");
    }

    #[test]
    fn the_lab_gets_poll_interval_pct_as_a_poll_interval() {
        let a =
            lab_sender_args(&strings(&["--window", "100", "--poll-interval-pct", "85"])).unwrap();
        assert_eq!(a, strings(&["--window", "100", "--poll-interval", "85"]));
        let a = lab_sender_args(&strings(&["--poll-interval-pct=10"])).unwrap();
        assert_eq!(a, strings(&["--poll-interval", "51"]));
        assert!(lab_sender_args(&strings(&["--poll-interval-pct", "0"])).is_err());
        let plain = strings(&["--window", "8"]);
        assert_eq!(lab_sender_args(&plain).unwrap(), plain);
    }

    #[test]
    fn utc_dates_are_civil() {
        let s = utc_now();
        assert!(
            s.len() == 23 && s.ends_with(" UTC") && s.starts_with("20"),
            "{s}"
        );
    }
}
