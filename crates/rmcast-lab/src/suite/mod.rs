//! Reproduction suites (`lab/suites/<paper>.toml`, format in
//! `docs/suites.md`): one `[[experiment]]` per published figure or table,
//! `[defaults]` merged into every experiment, `[experiment.quick]` replacing
//! fields under `--quick`. This module parses and checks a suite; running
//! it is [`crate::suite::run`], rendering it [`crate::report::suite`].
//!
//! Every error names the experiment (and series or claim) and the field,
//! and the quick variant of every experiment is checked even when the full
//! one is run, so a broken `[experiment.quick]` fails before CI does.

pub mod claims;
mod lab;
mod load;
pub mod points;
pub mod run;
pub mod sender_flags;
pub mod sim;
pub mod sim_overlay;
mod validate;

use crate::scenario::TestbedKind;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where an experiment runs.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The lab's testbed (`netns` or `local`), real processes.
    Lab,
    /// rmcast-sim, the protocol state machines on a simulated LAN.
    Sim,
}

impl Backend {
    /// Its name in files and the report.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Lab => "lab",
            Backend::Sim => "sim",
        }
    }
}

/// What an experiment plots on y (table in docs/suites.md).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Object bits / time to verified completion, Mbit/s.
    GoodputMbps,
    /// Time to verified completion, s.
    Seconds,
    /// Time to verified completion, ms.
    LatencyMs,
    /// Successful runs / runs.
    SuccessRate,
    /// (bytes on the wire − object size) / object size.
    OverheadRatio,
    /// rmcast's control packets per data packet.
    ControlPerData,
    /// blast: mean per-receiver loss.
    Loss,
    /// blast: the worst receiver's loss.
    LossMax,
    /// Sender CPU seconds per GB of object.
    CpuSenderSPerGb,
    /// symmetric: T, the slowest node's START to its last round's messages, s.
    TSeconds,
    /// symmetric: C, bytes all hosts transmitted, 10^6 bytes.
    CostMb,
}

impl Metric {
    /// Its name in suite files.
    pub fn name(self) -> &'static str {
        match self {
            Metric::GoodputMbps => "goodput_mbps",
            Metric::Seconds => "seconds",
            Metric::LatencyMs => "latency_ms",
            Metric::SuccessRate => "success_rate",
            Metric::OverheadRatio => "overhead_ratio",
            Metric::ControlPerData => "control_per_data",
            Metric::Loss => "loss",
            Metric::LossMax => "loss_max",
            Metric::CpuSenderSPerGb => "cpu_sender_s_per_gb",
            Metric::TSeconds => "t_seconds",
            Metric::CostMb => "cost_mb",
        }
    }
}

/// The tool a series runs: the scenarios' tool kinds, one list for both.
pub use crate::scenario::ToolKind as SeriesKind;

/// How a claim is judged (table in docs/suites.md).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ClaimKind {
    /// y(s0) ≥ y(s1) ≥ … at `at`.
    Order,
    /// One series varies by at most `tolerance` over x.
    Flat,
    /// Every step in x raises y.
    Increasing,
    /// Every step in x lowers y.
    Decreasing,
    /// y(s0) / y(s1) ≥ value at `at`.
    Ratio,
    /// y(s0) < value at `at`.
    Below,
    /// y(s0) > value at `at`.
    Above,
    /// |y(s0) − value| ≤ tolerance × value at `at`.
    Near,
}

/// The simulator's host model.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// The FSU paper's Pentium III cluster (`Scenario::fsu_2004`).
    Fsu,
    /// A current host (`Scenario::default`).
    Modern,
}

/// An x value as written: a number, or a string (a size with a unit).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum XValue {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// Text, e.g. `"426502B"` or `"8MB"`.
    Text(String),
}

impl XValue {
    /// The value as it is substituted for `{x}` and shown in tables.
    pub fn text(&self) -> String {
        match self {
            XValue::Int(i) => i.to_string(),
            XValue::Float(f) => f.to_string(),
            XValue::Text(s) => s.clone(),
        }
    }

    /// The value as a size in bytes (numbers are bytes).
    pub fn bytes(&self) -> Result<u64, String> {
        match self {
            XValue::Int(i) if *i > 0 => Ok(*i as u64),
            XValue::Float(f) if *f >= 1.0 && f.fract() == 0.0 => Ok(*f as u64),
            XValue::Text(s) => crate::units::parse_size(s),
            other => Err(format!("`{}` is not a size", other.text())),
        }
    }

    /// The value as a plain number (text may be a number or a size with a unit).
    pub fn number(&self) -> Result<f64, String> {
        match self {
            XValue::Int(i) => Ok(*i as f64),
            XValue::Float(f) if f.is_finite() => Ok(*f),
            XValue::Float(f) => Err(format!("`{f}` is not a finite number")),
            XValue::Text(s) => s
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .or_else(|| crate::units::parse_size(s).ok().map(|b| b as f64))
                .ok_or_else(|| format!("`{s}` is neither a number nor a size like 8MB")),
        }
    }
}

/// One line of an experiment's plot.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Series {
    /// Legend; unique in the experiment.
    pub name: String,
    /// The tool.
    pub kind: SeriesKind,
    /// rmcast: --protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Extra sender arguments; `{x}` is replaced by the x value.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra receiver arguments; `{x}` is replaced by the x value.
    #[serde(default)]
    pub recv_args: Vec<String>,
    /// Sending rate as a fraction of the link rate (as in scenarios).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_fraction: Option<f64>,
    /// rmcast with `--rate-control hunt`: senders on one group (lab only; default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub senders: Option<u16>,
    /// Published (x, y) points.
    #[serde(default)]
    pub paper: Vec<(XValue, f64)>,
    /// Where the published points come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paper_note: Option<String>,
    /// Narrows the experiment's backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backends: Option<Vec<Backend>>,
    /// A `tcp-*` series that is the papers' formula for the shape
    /// (`rmcast_sim::overlay_model`), computed at each point, not measured:
    /// it appears under the simulator backend only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub model: bool,
}

/// A published claim, judged per backend.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// The paper's claim in words.
    pub text: String,
    /// How it is judged.
    pub kind: ClaimKind,
    /// The series it is about (order: descending).
    pub series: Vec<String>,
    /// The x where it is checked (default: the largest x all its series were measured at).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<XValue>,
    /// ratio/below/above: the threshold; near: the reference y.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// Relative slack.
    #[serde(default = "default_tolerance")]
    pub tolerance: f64,
    /// The mechanism, shown with the verdict.
    #[serde(default)]
    pub why: String,
}

fn default_tolerance() -> f64 {
    0.05
}

/// One experiment after `[defaults]` (and, under `--quick`, `[experiment.quick]`) were applied.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// Unique id, `[a-z0-9-]+`.
    pub id: String,
    /// The paper's figure number and caption.
    #[serde(default)]
    pub caption: String,
    /// `receivers`, `size`, or a parameter name substituted for `{x}`.
    pub x: String,
    /// Axis label (default: x).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x_label: Option<String>,
    /// Log-scale x axis.
    #[serde(default)]
    pub x_log: bool,
    /// x values on the lab.
    pub values: Vec<XValue>,
    /// x values in the sim (default: values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim_values: Option<Vec<XValue>>,
    /// Fixed N when x is not receivers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receivers: Option<u16>,
    /// Fixed object size when x is not size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<XValue>,
    /// What y is.
    pub metric: Metric,
    /// Axis label (default: the metric).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y_label: Option<String>,
    /// Log-scale y axis.
    #[serde(default)]
    pub y_log: bool,
    /// Where it can run.
    #[serde(default = "default_backends")]
    pub backends: Vec<Backend>,
    /// Why a backend is missing or differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lab_note: Option<String>,
    /// Lab testbed.
    #[serde(default = "default_testbed")]
    pub testbed: TestbedKind,
    /// Link rate (exactly one).
    #[serde(default = "default_rates")]
    pub rates: Vec<String>,
    /// Loss probability on the receivers' input.
    #[serde(default)]
    pub loss: f64,
    /// Mean length, in frames, of a run of lost frames: 1 (the default)
    /// loses each frame on its own; more loses the same `loss` in
    /// Gilbert–Elliott bursts of that mean length (simulator only).
    #[serde(default = "default_loss_burst")]
    pub loss_burst: f64,
    /// MTU.
    #[serde(default = "default_mtu")]
    pub mtu: u32,
    /// Lab repeats per point.
    #[serde(default = "default_one")]
    pub repeats: u32,
    /// Sim seeds per point.
    #[serde(default = "default_seeds")]
    pub seeds: u32,
    /// Sim host model.
    #[serde(default = "default_preset")]
    pub preset: Preset,
    /// Lab: no progress for this long fails a run.
    #[serde(default = "default_stall_s")]
    pub stall_s: f64,
    /// Lab: hard cap on one run; sim: the virtual-time limit.
    #[serde(default = "default_max_run_s")]
    pub max_run_s: f64,
    /// The lines of the plot.
    pub series: Vec<Series>,
    /// The paper's claims.
    #[serde(default)]
    pub claim: Vec<Claim>,
}

fn default_backends() -> Vec<Backend> {
    vec![Backend::Lab, Backend::Sim]
}
fn default_testbed() -> TestbedKind {
    TestbedKind::Netns
}
fn default_rates() -> Vec<String> {
    vec!["100mbit".into()]
}
fn default_loss_burst() -> f64 {
    1.0
}
fn default_mtu() -> u32 {
    1500
}
fn default_one() -> u32 {
    1
}
fn default_seeds() -> u32 {
    3
}
fn default_preset() -> Preset {
    Preset::Modern
}
fn default_stall_s() -> f64 {
    15.0
}
fn default_max_run_s() -> f64 {
    600.0
}

/// What x is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XKind {
    /// The number of receivers.
    Receivers,
    /// The object size.
    Size,
    /// A sender/receiver parameter, substituted for `{x}` in the args.
    Param,
}

impl Experiment {
    /// What x is.
    pub fn x_kind(&self) -> XKind {
        match self.x.as_str() {
            "receivers" => XKind::Receivers,
            "size" => XKind::Size,
            _ => XKind::Param,
        }
    }

    /// The x values a backend runs.
    pub fn values_for(&self, b: Backend) -> &[XValue] {
        match (b, &self.sim_values) {
            (Backend::Sim, Some(v)) => v,
            _ => &self.values,
        }
    }

    /// The numeric position of an x value (bytes for sizes).
    pub fn x_number(&self, v: &XValue) -> Result<f64, String> {
        match self.x_kind() {
            XKind::Size => v.bytes().map(|b| b as f64),
            XKind::Receivers => match v {
                XValue::Int(n) if (1..=65520).contains(n) => Ok(*n as f64),
                _ => Err(format!(
                    "`{}` is not a receiver count (an integer 1..=65520)",
                    v.text()
                )),
            },
            XKind::Param => v.number(),
        }
    }

    /// The fixed object size (when x is not size).
    pub fn size_bytes(&self) -> Option<u64> {
        self.size.as_ref().and_then(|s| s.bytes().ok())
    }

    /// The series that run on a backend.
    pub fn series_on(&self, b: Backend) -> impl Iterator<Item = &Series> {
        self.series.iter().filter(move |s| {
            self.backends.contains(&b)
                && s.backends.as_ref().is_none_or(|v| v.contains(&b))
                && !(s.model && b == Backend::Lab)
        })
    }

    /// The x-axis label.
    pub fn x_label(&self) -> String {
        self.x_label.clone().unwrap_or_else(|| self.x.clone())
    }

    /// The y-axis label.
    pub fn y_label(&self) -> String {
        self.y_label
            .clone()
            .unwrap_or_else(|| self.metric.name().to_string())
    }
}

/// A suite: the paper's experiments.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    /// `[a-z0-9-]+`.
    pub name: String,
    /// File in ../shared/papers.
    #[serde(default)]
    pub paper: String,
    /// The paper's authors and title.
    #[serde(default)]
    pub title: String,
    /// Shown under the suite heading.
    #[serde(default)]
    pub notes: String,
    /// The experiments, resolved (defaults merged, quick applied).
    pub experiment: Vec<Experiment>,
}

/// Whether TOML text is a suite (it has `[[experiment]]`) rather than a plain scenario.
pub fn is_suite(text: &str) -> bool {
    toml::from_str::<toml::Table>(text).is_ok_and(|t| t.contains_key("experiment"))
}

pub use crate::tools::rmcast::PROTOCOLS as RMCAST_PROTOCOLS;

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
    /// Run the lab experiments on this testbed instead (`--testbed`).
    pub testbed: Option<TestbedKind>,
    /// The ssh testbed's inventory (`--inventory`).
    pub inventory: Option<PathBuf>,
}

/// A claim kind's name in suite files.
pub fn kind_name(k: ClaimKind) -> &'static str {
    match k {
        ClaimKind::Order => "order",
        ClaimKind::Flat => "flat",
        ClaimKind::Increasing => "increasing",
        ClaimKind::Decreasing => "decreasing",
        ClaimKind::Ratio => "ratio",
        ClaimKind::Below => "below",
        ClaimKind::Above => "above",
        ClaimKind::Near => "near",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
name = "t"
[defaults]
rates = ["100mbit"]
seeds = 2
preset = "fsu"

[[experiment]]
id = "fig8"
caption = "Fig. 8"
x = "receivers"
values = [1, 2]
sim_values = [1, 30]
size = "426502B"
metric = "goodput_mbps"
[experiment.quick]
values = [1]
seeds = 1
[[experiment.series]]
name = "ack"
kind = "rmcast"
protocol = "ack"
paper = [[1, 92], [30, 68.0]]
[[experiment.series]]
name = "nak"
kind = "rmcast"
protocol = "nak-poll"
[[experiment.claim]]
text = "nak beats ack"
kind = "order"
series = ["nak", "ack"]
at = 30

[[experiment]]
id = "win"
x = "window"
values = [2, 8]
receivers = 4
size = "1MB"
metric = "seconds"
[[experiment.series]]
name = "ack"
kind = "rmcast"
protocol = "ack"
args = ["--window", "{x}"]
"#;

    fn err(text: &str) -> String {
        format!("{:#}", Suite::parse(text, false).unwrap_err())
    }

    #[test]
    fn defaults_merge_and_quick_replaces_fields() {
        let s = Suite::parse(BASE, false).unwrap();
        assert_eq!(s.experiment.len(), 2);
        let e = &s.experiment[0];
        assert_eq!(e.seeds, 2);
        assert_eq!(e.preset, Preset::Fsu);
        assert_eq!(e.values.len(), 2);
        assert_eq!(e.series[0].paper[0], (XValue::Int(1), 92.0));
        assert_eq!(e.size_bytes(), Some(426_502));
        assert_eq!(s.experiment[1].seeds, 2);
        assert_eq!(s.experiment[1].preset, Preset::Fsu);
        let q = Suite::parse(BASE, true).unwrap();
        assert_eq!(q.experiment[0].values, vec![XValue::Int(1)]);
        assert_eq!(q.experiment[0].seeds, 1);
        assert_eq!(q.experiment[0].sim_values.as_ref().unwrap().len(), 2);
    }

    #[test]
    fn quick_skip_leaves_the_experiment_out_of_the_quick_run_only() {
        let text = BASE.replace("values = [1]\nseeds = 1", "skip = true");
        assert_eq!(Suite::parse(&text, true).unwrap().experiment.len(), 1);
        assert_eq!(Suite::parse(&text, false).unwrap().experiment.len(), 2);
    }

    #[test]
    fn the_resolved_suite_round_trips_through_toml() {
        let s = Suite::parse(BASE, true).unwrap();
        let again = Suite::parse_resolved(&s.to_toml().unwrap()).unwrap();
        assert_eq!(again.experiment.len(), s.experiment.len());
        assert_eq!(again.experiment[0].values, s.experiment[0].values);
        assert_eq!(again.experiment[0].claim[0].series, ["nak", "ack"]);
        assert_eq!(again.experiment[1].series[0].args, ["--window", "{x}"]);
    }

    #[test]
    fn unknown_fields_name_the_experiment_and_series() {
        let e = err(&BASE.replace(
            "protocol = \"nak-poll\"",
            "protocol = \"nak-poll\"\nwindw = 3",
        ));
        assert!(
            e.contains("experiment `fig8`, series `nak`") && e.contains("windw"),
            "{e}"
        );
        let e = err(&BASE.replace("caption = \"Fig. 8\"", "caption = \"Fig. 8\"\ncolour = 1"));
        assert!(
            e.contains("experiment `fig8`") && e.contains("colour"),
            "{e}"
        );
        let e = err(&BASE.replace("seeds = 1", "seeds = 1\nbogus = 2"));
        assert!(
            e.contains("experiment `fig8` (quick)") && e.contains("bogus"),
            "{e}"
        );
        assert!(err(&format!("{BASE}\nextra = 1")).contains("experiment `win`"));
        assert!(
            err(&BASE.replace("name = \"t\"", "name = \"t\"\nauthor = \"x\"")).contains("author")
        );
    }

    #[test]
    fn unknown_metric_kind_and_claim_kind_are_refused() {
        let e = err(&BASE.replace("metric = \"seconds\"", "metric = \"speed\""));
        assert!(e.contains("experiment `win`") && e.contains("speed"), "{e}");
        let e = err(&BASE.replace(
            "kind = \"rmcast\"\nprotocol = \"nak-poll\"",
            "kind = \"ftp\"",
        ));
        assert!(e.contains("series `nak`") && e.contains("ftp"), "{e}");
        let e = err(&BASE.replace("kind = \"order\"", "kind = \"sorted\""));
        assert!(e.contains("claim #1") && e.contains("sorted"), "{e}");
        let e = err(&BASE.replace("protocol = \"nak-poll\"", "protocol = \"fast\""));
        assert!(e.contains("unknown rmcast protocol `fast`"), "{e}");
    }

    #[test]
    fn loss_bursts_reach_the_simulator_and_are_refused_on_the_lab() {
        let sim_only = BASE.replace(
            "preset = \"fsu\"",
            "preset = \"fsu\"\nloss = 0.02\nbackends = [\"sim\"]",
        );
        let s = Suite::parse(
            &sim_only.replace("loss = 0.02", "loss = 0.02\nloss_burst = 8"),
            false,
        )
        .unwrap();
        let e = &s.experiment[0];
        assert_eq!(e.loss_burst, 8.0);
        let sc = super::sim::sim_scenario(e, &e.series[0], &e.values[0]).unwrap();
        assert_eq!(sc.loss, rmcast_sim::LossModel::bursty(0.02, 8.0));
        assert!((sc.loss.mean_loss() - 0.02).abs() < 1e-9);
        // Unset, each frame is lost on its own.
        let s = Suite::parse(&sim_only, false).unwrap();
        let e = &s.experiment[0];
        let sc = super::sim::sim_scenario(e, &e.series[0], &e.values[0]).unwrap();
        assert_eq!(sc.loss, rmcast_sim::LossModel::Bernoulli(0.02));
        let e = err(&BASE.replace("seeds = 2", "seeds = 2\nloss_burst = 8"));
        assert!(
            e.contains("`loss_burst` = 8 needs backends = [\"sim\"]"),
            "{e}"
        );
        let e = err(&sim_only.replace("loss = 0.02", "loss = 0.02\nloss_burst = 0.5"));
        assert!(e.contains("`loss_burst` is a mean burst length"), "{e}");
    }

    #[test]
    fn structural_mistakes_are_refused_with_the_field() {
        let e = err(&BASE.replace("id = \"win\"", "id = \"fig8\""));
        assert!(e.contains("duplicate experiment id `fig8`"), "{e}");
        let e = err(&BASE.replace("series = [\"nak\", \"ack\"]", "series = [\"nak\", \"tcp\"]"));
        assert!(e.contains("series `tcp` does not exist"), "{e}");
        let e = err(&BASE.replace("name = \"nak\"", "name = \"ack\""));
        assert!(e.contains("duplicate series name `ack`"), "{e}");
        let e = err(&BASE.replace(
            "protocol = \"nak-poll\"",
            "protocol = \"nak-poll\"\nargs = [\"--window\", \"{x}\"]",
        ));
        assert!(e.contains("x = receivers is set by the runner"), "{e}");
        let e = err(&BASE.replace("values = [2, 8]", "values = []"));
        assert!(e.contains("experiment `win`: `values` is empty"), "{e}");
        let e = err(&BASE.replace("args = [\"--window\", \"{x}\"]", "args = []"));
        assert!(e.contains("no series uses {x}"), "{e}");
        let e = err(&BASE.replace("receivers = 4\n", ""));
        assert!(e.contains("`receivers` is required"), "{e}");
        let e = err(&BASE.replace("size = \"1MB\"", "size = \"1 parsec\""));
        assert!(e.contains("experiment `win`: size"), "{e}");
        let e = err(&BASE.replace("kind = \"order\"", "kind = \"ratio\""));
        assert!(e.contains("needs `value`"), "{e}");
        let e = err(&BASE.replace("series = [\"nak\", \"ack\"]", "series = [\"nak\"]"));
        assert!(e.contains("two or more"), "{e}");
        let e = err(&BASE.replace("sim_values = [1, 30]", "sim_values = [1, \"x\"]"));
        assert!(e.contains("sim_values"), "{e}");
        let e = err(&BASE.replace("values = [1, 2]", "values = [1, 300]"));
        assert!(e.contains("1..=250"), "{e}");
        let e = err(&BASE.replace("rates = [\"100mbit\"]", "rates = [\"100mbit\", \"1gbit\"]"));
        assert!(e.contains("exactly one link rate"), "{e}");
        let e = err(&BASE.replace("[defaults]", "[defaults]\nid = \"x\""));
        assert!(e.contains("[defaults] cannot set `id`"), "{e}");
        let e = err(&BASE.replace("id = \"fig8\"", "id = \"Fig 8\""));
        assert!(e.contains("[a-z0-9-]+"), "{e}");
    }

    #[test]
    fn plain_scenarios_are_not_suites() {
        assert!(is_suite(BASE));
        assert!(!is_suite(
            "name='x'\nreceivers=[1]\nsizes=['1MiB']\n[[tools]]\nname='a'\nkind='rmcast'\n"
        ));
    }

    #[test]
    fn size_experiments_take_sizes_with_units() {
        let text = BASE
            .replace(
                "x = \"window\"\nvalues = [2, 8]\nreceivers = 4\nsize = \"1MB\"",
                "x = \"size\"\nvalues = [\"256KB\", \"8MB\", 1000]\nreceivers = 4",
            )
            .replace("args = [\"--window\", \"{x}\"]", "");
        let s = Suite::parse(&text, false).unwrap();
        let e = &s.experiment[1];
        let xs: Vec<f64> = e.values.iter().map(|v| e.x_number(v).unwrap()).collect();
        assert_eq!(xs, [256_000.0, 8_000_000.0, 1000.0]);
    }
}
