//! Running a suite on its backends.
//!
//! - **lab**: each experiment becomes one ordinary [`Scenario`] (x =
//!   receivers or size maps onto the scenario's lists; a parameter x gives
//!   one tool per series and x value, `{x}` substituted) run by
//!   [`runner::run_scenario`] into `DIR/<exp>/lab`; its per-point medians
//!   become suite points ([`super::lab`]).
//! - **sim**: rmcast's UDP protocols on [`rmcast_sim`], `seeds` seeds per
//!   point on up to `available_parallelism` threads, medians over the seeds
//!   that passed every invariant. Tools the simulator does not model are
//!   "lab only" (not an error) ([`super::sim`]).
//!
//! Every point lands in `DIR/suite-points.json` (+ `.csv`), rewritten after
//! each experiment so an interrupted run keeps what it measured.

use super::{Backend, Experiment, Series, Suite, XValue, lab, sim};
use crate::scenario::metrics::{self, Spread};
use crate::signals;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub use super::sim::series_runs_on;

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
    pub(super) fn new(e: &Experiment, b: Backend, s: &str, x: &XValue) -> SuitePoint {
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

    pub(super) fn failed(mut self, why: impl Into<String>) -> SuitePoint {
        self.ok = false;
        self.status = "failed".into();
        self.reasons.push(why.into());
        self
    }

    pub(super) fn not_applicable(mut self, why: impl Into<String>) -> SuitePoint {
        self.status = "n/a".into();
        self.reasons.push(why.into());
        self
    }

    pub(super) fn with_spread(mut self, s: Option<Spread>) -> SuitePoint {
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
                Backend::Sim => sim::run_sim(e, &series, opts.seeds.unwrap_or(e.seeds)),
                Backend::Lab => {
                    let rmcast = opts
                        .rmcast
                        .clone()
                        .context("the lab backend needs the rmcast binary")?;
                    lab::run_lab(suite, e, &series, opts, &rmcast)?
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
                .map(|f| metrics::csv_field(f))
                .collect::<Vec<_>>()
                .join(","),
        );
        csv.push('\n');
    }
    std::fs::write(dir.join("suite-points.csv"), csv)?;
    Ok(())
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

    #[test]
    fn utc_dates_are_civil() {
        let s = utc_now();
        assert!(
            s.len() == 23 && s.ends_with(" UTC") && s.starts_with("20"),
            "{s}"
        );
    }
}
