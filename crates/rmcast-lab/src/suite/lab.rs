//! The lab backend of a suite: an experiment becomes one ordinary
//! [`Scenario`] (x = receivers or size maps onto the scenario's lists; a
//! parameter x gives one tool per series and x value, `{x}` substituted),
//! run by [`runner::run_scenario`]; its per-point medians become suite points.

use super::points::SuitePoint;
use super::sender_flags::{lab_sender_args, substitute};
use super::{Backend, Experiment, Metric, Series, Suite, SuiteOptions, XKind, XValue};
use crate::scenario::metrics::{self, PointRecord, Spread};
use crate::scenario::runner;
use crate::scenario::{Copies, Inject, Scenario, Tool};
use crate::signals;
use crate::tools;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// The scenario tool for a series at one x, or why the lab cannot run it.
fn lab_tool(s: &Series, name: String, x: Option<&XValue>) -> Result<Tool, String> {
    let kind = s.kind;
    if let Some(p) = s.protocol.as_deref()
        && !tools::rmcast::PROTOCOLS.contains(&p)
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
        relay_args: Vec::new(),
        senders: s.senders,
        env: Default::default(),
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

/// Tool name → (series, x index when x is a parameter).
type Owners = BTreeMap<String, (String, Option<usize>)>;

/// Runs an experiment's lab points: one scenario, then its per-point medians.
pub(super) fn run_lab(
    suite: &Suite,
    e: &Experiment,
    series: &[&Series],
    opts: &SuiteOptions,
    rmcast: &Path,
) -> Result<Vec<SuitePoint>> {
    let xs = e.values_for(Backend::Lab);
    let (tools, owner, mut points) = lab_tools(e, series);
    if tools.is_empty() {
        return Ok(points);
    }
    let sc = lab_scenario(suite, e, tools);
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
                testbed: opts.testbed,
                inventory: opts.inventory.clone(),
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
    points.extend(points_from_runs(e, &dir, &owner, &expected));
    Ok(points)
}

/// The scenario tools of the series (one per x value when x is a
/// parameter), who owns each, and a failed point for each series the lab
/// cannot run.
fn lab_tools(e: &Experiment, series: &[&Series]) -> (Vec<Tool>, Owners, Vec<SuitePoint>) {
    let xs = e.values_for(Backend::Lab);
    let xk = e.x_kind();
    let mut points = Vec::new();
    let mut tools: Vec<Tool> = Vec::new();
    let mut owner = Owners::new();
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
    (tools, owner, points)
}

/// The experiment as a scenario: x = receivers or size becomes the
/// scenario's list, anything else its single value.
fn lab_scenario(suite: &Suite, e: &Experiment, tools: Vec<Tool>) -> Scenario {
    let xs = e.values_for(Backend::Lab);
    let xk = e.x_kind();
    let size_text = |v: &XValue| match v {
        XValue::Text(t) => t.clone(),
        other => format!("{}B", other.text()),
    };
    Scenario {
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
        segments: None,
        relay_from: None,
        claims: Vec::new(),
    }
}

/// The suite points of the scenario run in `dir`: one per recorded point
/// of an owned tool, and a failed one for every expected point without a run.
fn points_from_runs(
    e: &Experiment,
    dir: &Path,
    owner: &Owners,
    expected: &[(String, Option<usize>)],
) -> Vec<SuitePoint> {
    let xs = e.values_for(Backend::Lab);
    let xk = e.x_kind();
    let mut points = Vec::new();
    let recs = metrics::load_runs(dir).unwrap_or_default();
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
    for (s, xi) in expected {
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
    points
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
