//! `lab report DIR`: report.md with a table per point and SVG plots
//! (goodput, success and overhead against receivers; goodput against
//! object size), one line per tool.

use crate::scenario::metrics::{self, PointRecord, Spread};
use crate::units;
use anyhow::{Context, Result};
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn fmt_spread(s: Option<Spread>, scale: f64, digits: usize) -> String {
    match s {
        None => "–".into(),
        Some(s) if (s.max - s.min).abs() < 1e-12 => format!("{:.*}", digits, s.median / scale),
        Some(s) => format!(
            "{:.*} ({:.*}–{:.*})",
            digits,
            s.median / scale,
            digits,
            s.min / scale,
            digits,
            s.max / scale
        ),
    }
}

/// Writes report.md (and plots/*.svg) into `dir`; returns the report's path.
pub fn write_report(dir: &Path) -> Result<PathBuf> {
    let runs =
        metrics::load_runs(dir).with_context(|| format!("no runs.json in {}", dir.display()))?;
    let pts = metrics::points(&runs);
    let plots = dir.join("plots");
    std::fs::create_dir_all(&plots)?;
    let scenario = std::fs::read_to_string(dir.join("scenario.toml")).unwrap_or_default();
    let name = scenario
        .lines()
        .find_map(|l| l.strip_prefix("name = "))
        .unwrap_or("\"?\"")
        .trim_matches('"')
        .to_string();
    let mut md = format!("# rmcast lab report: {name}\n\n");
    let ok = runs.iter().filter(|r| r.status == "ok").count();
    let unavailable = runs.iter().filter(|r| r.status == "unavailable").count();
    let _ = writeln!(
        md,
        "{} runs: {ok} succeeded, {} failed, {unavailable} could not start.\n",
        runs.len(),
        runs.len() - ok - unavailable
    );
    if let Ok(tb) = std::fs::read_to_string(dir.join("testbeds.txt")) {
        md.push_str("## Testbeds\n\n");
        for l in tb.lines().filter(|l| !l.starts_with("namespaces:")) {
            // An indented line (the ssh testbed's hosts) nests under its testbed.
            match l.strip_prefix("  ") {
                Some(inner) => {
                    let _ = writeln!(md, "  - {}", inner.trim_start());
                }
                None => {
                    let _ = writeln!(md, "- {l}");
                }
            }
        }
        md.push('\n');
    }
    md.push_str(
        "## Metrics\n\n\
         S = successful runs / runs; G = object bits / (sender start → every receiver holds a verified copy), Mbit/s; \
         N = bytes all hosts transmitted (Ethernet frames as the interfaces count them) − object size, MB; \
         C = bytes on all host links (Σ tx + Σ rx) / object size; ctrl/data = rmcast's control packets per data packet; \
         fb/data = packets all receivers sent per packet the sender sent; CPU in seconds per GB of object \
         (sender; mean receiver). Cells give the median over successful repeats and (min–max).\n\n",
    );
    md.push_str("| tool | N | size | rate | loss | S | G Mbit/s | time s | N MB | C | ctrl/data | fb/data | CPU snd s/GB | CPU rcv s/GB | notes |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for p in &pts {
        let s = match p.success_rate {
            None => "n/a".to_string(),
            Some(s) => format!(
                "{}/{} ({:.0} %)",
                p.successes,
                p.runs - p.unavailable,
                s * 100.0
            ),
        };
        let notes = p.reasons.join("; ").replace('|', "/");
        let notes: String = notes.chars().take(220).collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            p.tool,
            p.receivers,
            units::fmt_size(p.size_bytes),
            p.rate,
            p.loss,
            s,
            fmt_spread(p.goodput_mbps, 1.0, 1),
            fmt_spread(p.seconds, 1.0, 2),
            fmt_spread(p.overhead_bytes, 1e6, 2),
            fmt_spread(p.cost, 1.0, 1),
            fmt_spread(p.control_per_data_packet, 1.0, 3),
            fmt_spread(p.feedback_per_data_packet, 1.0, 3),
            fmt_spread(p.cpu_sender_s_per_gb, 1.0, 1),
            fmt_spread(p.cpu_receiver_s_per_gb, 1.0, 1),
            notes
        );
    }
    if let Ok(sc) = toml::from_str::<crate::scenario::Scenario>(&scenario)
        && !sc.claims.is_empty()
    {
        md.push_str("\n## Claims\n\n");
        for v in crate::scenario::claims::judge(&sc.claims, &pts) {
            let _ = writeln!(md, "- {}", crate::scenario::claims::line(&v));
        }
    }
    let relayed: Vec<_> = runs.iter().filter(|r| !r.relays.is_empty()).collect();
    if !relayed.is_empty() {
        md.push_str("\n## Relays\n\n| run | tool | segments | relay | from → to | members | exit | CPU s |\n|---|---|---|---|---|---|---|---|\n");
        for r in relayed {
            for x in &r.relays {
                let exit = match x.exit {
                    Some(crate::procs::Exit::Code(c)) => format!("{c}"),
                    Some(crate::procs::Exit::Signal(s)) => format!("signal {s}"),
                    None => "-".into(),
                };
                let _ = writeln!(
                    md,
                    "| {} | {} | {:?} | {} | {} → {} | {} | {exit} | {} |",
                    r.seq,
                    r.tool,
                    r.segments,
                    x.name,
                    x.from,
                    x.to,
                    x.receivers,
                    x.cpu_s.map_or("-".into(), |c| format!("{c:.2}")),
                );
            }
        }
    }
    md.push_str("\n## Plots\n\n");
    // Versus receivers, one plot per (size, rate, loss).
    let mut by_case: BTreeMap<(u64, String, String), Vec<&PointRecord>> = BTreeMap::new();
    for p in &pts {
        by_case
            .entry((p.size_bytes, p.rate.clone(), format!("{}", p.loss)))
            .or_default()
            .push(p);
    }
    for ((size, rate, loss), ps) in &by_case {
        let tag = format!("{}-{rate}-l{loss}", units::fmt_size(*size));
        let case = format!("{} object, {rate}, loss {loss}", units::fmt_size(*size));
        let metrics: [(&str, &str, Metric); 3] = [
            ("goodput", "goodput G (Mbit/s)", |p| {
                p.goodput_mbps.map(|s| s.median)
            }),
            ("success", "success rate S (%)", |p| {
                p.success_rate.map(|s| s * 100.0)
            }),
            ("overhead", "network overhead N (MB)", |p| {
                p.overhead_bytes.map(|s| s.median / 1e6)
            }),
        ];
        for (key, ylabel, f) in metrics {
            let series = series_of(ps, |p| p.receivers as f64, f);
            if series.values().all(|v| v.is_empty()) {
                continue;
            }
            let file = format!("{key}-vs-receivers-{tag}.svg");
            plot(
                &plots.join(&file),
                &format!("{ylabel} vs receivers — {case}"),
                "receivers",
                ylabel,
                &series,
            )?;
            let _ = writeln!(md, "![{key} vs receivers, {case}](plots/{file})\n");
        }
    }
    // Versus object size, one plot per (receivers, rate, loss) with more than one size.
    let mut by_n: BTreeMap<(usize, String, String), Vec<&PointRecord>> = BTreeMap::new();
    for p in &pts {
        by_n.entry((p.receivers, p.rate.clone(), format!("{}", p.loss)))
            .or_default()
            .push(p);
    }
    for ((n, rate, loss), ps) in &by_n {
        let mut sizes: Vec<u64> = ps.iter().map(|p| p.size_bytes).collect();
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.len() < 2 {
            continue;
        }
        let series = series_of(
            ps,
            |p| p.size_bytes as f64 / 1e6,
            |p| p.goodput_mbps.map(|s| s.median),
        );
        let file = format!("goodput-vs-size-n{n}-{rate}-l{loss}.svg");
        plot(
            &plots.join(&file),
            &format!("goodput vs object size — {n} receivers, {rate}, loss {loss}"),
            "object size (MB)",
            "goodput G (Mbit/s)",
            &series,
        )?;
        let _ = writeln!(md, "![goodput vs size, {n} receivers](plots/{file})\n");
    }
    let path = dir.join("report.md");
    std::fs::write(&path, md)?;
    Ok(path)
}

/// Reads one metric of a point.
type Metric = fn(&PointRecord) -> Option<f64>;

type Series = BTreeMap<String, Vec<(f64, f64)>>;

fn series_of(
    ps: &[&PointRecord],
    x: impl Fn(&PointRecord) -> f64,
    y: impl Fn(&PointRecord) -> Option<f64>,
) -> Series {
    let mut s: Series = BTreeMap::new();
    for p in ps {
        let e = s.entry(p.tool.clone()).or_default();
        if let Some(v) = y(p) {
            e.push((x(p), v));
        }
    }
    for v in s.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    s
}

fn plot(path: &Path, title: &str, xlabel: &str, ylabel: &str, series: &Series) -> Result<()> {
    let all: Vec<(f64, f64)> = series.values().flatten().copied().collect();
    let (xmin, xmax) = all
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let ymax = all.iter().fold(0.0f64, |a, p| a.max(p.1));
    let pad = ((xmax - xmin) * 0.05).max(0.5);
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((xmin - pad)..(xmax + pad), 0.0..(ymax * 1.1).max(1e-3))
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .x_desc(xlabel)
        .y_desc(ylabel)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    for (i, (tool, pts)) in series.iter().enumerate() {
        if pts.is_empty() {
            continue;
        }
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?
            .label(tool.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(())
}
