//! Running a suite on its backends.
//!
//! - **lab**: each experiment becomes one ordinary [`crate::scenario::Scenario`] (x =
//!   receivers or size maps onto the scenario's lists; a parameter x gives
//!   one tool per series and x value, `{x}` substituted) run by
//!   [`crate::scenario::runner::run_scenario`] into `DIR/<exp>/lab`; its per-point medians
//!   become suite points (`lab.rs`).
//! - **sim**: rmcast's UDP protocols on [`rmcast_sim`], `seeds` seeds per
//!   point on up to `available_parallelism` threads, medians over the seeds
//!   that passed every invariant. Tools the simulator does not model are
//!   "lab only" (not an error) ([`super::sim`]).
//!
//! Every point lands in `DIR/suite-points.json` (+ `.csv`), rewritten after
//! each experiment so an interrupted run keeps what it measured.

use super::{Backend, Series, Suite, lab, sim};
use crate::signals;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::time::Instant;

pub use super::SuiteOptions;
pub use super::points::{POINTS_FILE, SuitePoint, load_points, write_points};
pub use super::sim::series_runs_on;

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
