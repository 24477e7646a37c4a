//! A suite's points: one series at one x on one backend, and the points
//! file (`DIR/suite-points.json` and `.csv`) that holds them all.

use super::{Backend, Experiment, XValue};
use crate::scenario::metrics::{self, Spread};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `DIR/suite-points.json`.
pub const POINTS_FILE: &str = "suite-points.json";

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
