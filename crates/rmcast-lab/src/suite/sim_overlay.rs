//! The simulator backend for the TCP overlays: `tcp-*` series run on
//! [`rmcast_sim::overlay`] (the same sans-IO machines as the TCP runtime,
//! links modelled), and `model = true` series give the papers' formula for
//! the shape ([`rmcast_sim::overlay_model`]) at the same point.
//!
//! What the overlay simulator measures is the data phase: from the
//! sender's Start to the last receiver's confirmation (registration and
//! process start-up are not modelled). `seconds` and `latency_ms` are that
//! time, `goodput_mbps` the object's size over it.

use super::sender_flags::{flag_pairs, substitute};
use super::{Experiment, Metric, Series, XKind, XValue};
use crate::units;
use rmcast::overlay::{OverlayShape, parse_shape};
use rmcast_sim::overlay::OverlayScenario;
use rmcast_sim::overlay_model::{ModelInput, model_time};
use std::time::Duration;

/// Overlay flags the simulator understands (the CLI's names and meanings).
pub const OVERLAY_SIM_FLAGS: [&str; 2] = ["--segment-size", "--fanout"];

/// Data connections one simulated host may hold: a process's default
/// open-file limit (`ulimit -n`), which a real node meets first.
pub const HOST_CONNECTIONS: usize = 1024;

/// One point's overlay run, or its model.
#[derive(Clone, Debug)]
pub enum OverlayCase {
    /// The overlay simulator runs it.
    Run(OverlayScenario),
    /// The formula gives it.
    Model(ModelInput),
}

/// The overlay shape of a `tcp-*` series (its `--fanout` applied), if it is one.
pub fn overlay_shape(s: &Series) -> Option<OverlayShape> {
    let p = s.protocol.as_deref()?;
    if !p.starts_with("tcp-") {
        return None;
    }
    let mut fanout = 2;
    for w in s.args.windows(2) {
        if w[0] == "--fanout" {
            fanout = w[1].parse().ok()?;
        }
    }
    parse_shape(p, fanout)
}

/// The overlay case for a series at one x (seed 1).
pub fn overlay_case(e: &Experiment, s: &Series, x: &XValue) -> Result<OverlayCase, String> {
    let shape = overlay_shape(s).ok_or("not a TCP overlay")?;
    let xk = e.x_kind();
    let nodes = match xk {
        XKind::Receivers => u16::try_from(e.x_number(x)? as u64)
            .map_err(|_| "the overlay simulator takes at most 65,535 receivers")?,
        _ => e.receivers.ok_or("no receivers")?,
    };
    if nodes == 0 {
        return Err("an overlay needs at least one receiver".into());
    }
    let size = match xk {
        XKind::Size => x.bytes()?,
        _ => e.size_bytes().ok_or("no size")?,
    };
    let rate =
        units::parse_rate_opt(&e.rates[0])?.ok_or("the simulator needs a link rate, not `none`")?;
    let mut sc = OverlayScenario {
        shape,
        nodes,
        size,
        rate_bits_per_s: rate,
        max_connections: HOST_CONNECTIONS,
        time_limit: Duration::from_secs_f64(e.max_run_s),
        ..OverlayScenario::default()
    };
    let xp = (xk == XKind::Param).then_some(x);
    let args = substitute(&s.args, xp);
    for (flag, v) in flag_pairs(&args, &OVERLAY_SIM_FLAGS, "overlay")? {
        if flag == "--segment-size" {
            let seg = units::parse_size(&v)?;
            sc.segment_size = u32::try_from(seg)
                .ok()
                .filter(|&b| (1..=16 << 20).contains(&b))
                .ok_or_else(|| format!("--segment-size `{v}` is outside 1 byte..16 MiB"))?;
        }
    }
    Ok(if s.model {
        OverlayCase::Model(ModelInput {
            shape,
            nodes,
            size,
            segment_size: sc.segment_size,
            rate_bits_per_s: rate,
            latency: sc.latency,
        })
    } else {
        OverlayCase::Run(sc)
    })
}

impl OverlayCase {
    /// The case's metric with `seed`, or why the run failed.
    pub fn run(&self, metric: Metric, seed: u64) -> Result<f64, String> {
        let (seconds, size) = match self {
            Self::Model(m) => (model_time(m).as_secs_f64(), m.size),
            Self::Run(sc) => {
                let mut sc = sc.clone();
                sc.seed = seed;
                let r = rmcast_sim::overlay::run_overlay(&sc).map_err(|e| {
                    let text = e.to_string();
                    // The scenario's debug dump follows the reason: keep the reason.
                    text.split(" (OverlayScenario")
                        .next()
                        .unwrap_or("")
                        .to_owned()
                })?;
                (r.data_time.as_secs_f64(), sc.size)
            }
        };
        Ok(match metric {
            Metric::Seconds => seconds,
            Metric::LatencyMs => seconds * 1e3,
            Metric::GoodputMbps => size as f64 * 8.0 / seconds.max(1e-12) / 1e6,
            Metric::SuccessRate => 1.0,
            other => return Err(format!("`{}` not modelled for overlays", other.name())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::Suite;

    const SUITE: &str = r#"
name = "t"
title = "t"
[[experiment]]
id = "scale"
x = "receivers"
values = [1]
sim_values = [7, 30]
size = "1MiB"
metric = "seconds"
rates = ["1gbit"]
[[experiment.series]]
name = "chain"
kind = "rmcast"
protocol = "tcp-chain"
args = ["--segment-size", "16KiB"]
[[experiment.series]]
name = "chain model"
kind = "rmcast"
protocol = "tcp-chain"
model = true
args = ["--segment-size", "16KiB"]
[[experiment.series]]
name = "tree"
kind = "rmcast"
protocol = "tcp-tree"
args = ["--fanout", "3"]
"#;

    #[test]
    fn overlay_series_run_in_the_simulator_beside_their_model() {
        let suite = Suite::parse(SUITE, false).expect("a valid suite");
        let e = &suite.experiment[0];
        let x = XValue::Int(30);
        let run = overlay_case(e, &e.series[0], &x).unwrap();
        let model = overlay_case(e, &e.series[1], &x).unwrap();
        let OverlayCase::Run(sc) = &run else {
            panic!("a run: {run:?}")
        };
        assert_eq!(
            (sc.nodes, sc.segment_size, sc.size),
            (30, 16 << 10, 1 << 20)
        );
        assert!(matches!(model, OverlayCase::Model(_)));
        let measured = run.run(Metric::Seconds, 1).unwrap();
        let formula = model.run(Metric::Seconds, 1).unwrap();
        // 1 MiB at 1 Gbit/s is 8.4 ms; 30 hops of a 16 KiB segment
        // (131 µs) and the default 50 µs delay are 5.4 ms more.
        assert!((0.0137..0.0139).contains(&formula), "{formula}");
        // The model is the lower bound the simulator's hops sit above.
        assert!(
            measured > formula && measured < 2.0 * formula,
            "{measured} vs {formula}"
        );
        let OverlayCase::Run(tree) = overlay_case(e, &e.series[2], &x).unwrap() else {
            panic!("a run")
        };
        assert_eq!(tree.shape, OverlayShape::Tree { fanout: 3 });
    }

    #[test]
    fn unknown_overlay_flags_are_named() {
        let mut suite = Suite::parse(SUITE, false).expect("a valid suite");
        let e = &mut suite.experiment[0];
        e.series[0].args = vec!["--window".into(), "64".into()];
        let err = overlay_case(e, &e.series[0], &XValue::Int(7)).unwrap_err();
        assert!(err.contains("`--window` is not known"), "{err}");
        e.series[0].args = vec!["--segment-size".into(), "32MiB".into()];
        let err = overlay_case(e, &e.series[0], &XValue::Int(7)).unwrap_err();
        assert!(err.contains("outside 1 byte..16 MiB"), "{err}");
    }

    #[test]
    fn a_model_must_be_a_tcp_overlay_with_a_time_metric() {
        let bad = SUITE.replace(
            "protocol = \"tcp-chain\"\nmodel = true",
            "protocol = \"nak-poll\"\nmodel = true",
        );
        let err = Suite::parse(&bad, false).unwrap_err().to_string();
        assert!(
            err.contains("`model = true` is the formula of a TCP overlay"),
            "{err}"
        );
        let bad = SUITE.replace("metric = \"seconds\"", "metric = \"control_per_data\"");
        let err = Suite::parse(&bad, false).unwrap_err().to_string();
        assert!(err.contains("`model = true`"), "{err}");
    }

    #[test]
    fn the_lab_never_runs_a_model() {
        let suite = Suite::parse(SUITE, false).expect("a valid suite");
        let e = &suite.experiment[0];
        let model = &e.series[1];
        assert!(super::super::sim::series_runs_on(
            model,
            super::super::Backend::Sim
        ));
        assert!(!super::super::sim::series_runs_on(
            model,
            super::super::Backend::Lab
        ));
        let lab: Vec<&str> = (e.series_on(super::super::Backend::Lab))
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(lab, ["chain", "tree"]);
    }
}
