//! `rmcast lab plot-trace`: Hunt's controller trace (the CSV of
//! `rmcast send --rate-trace`, or of the simulator's rate-control test) as
//! an SVG of spacing over time.

use anyhow::{Context, Result, bail};
use clap::Args;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// `lab plot-trace`.
#[derive(Args, Debug)]
pub struct PlotTraceArgs {
    /// The trace: CSV with the columns t_s,spacing_us,rate_pps,state,sent,rtt_us.
    pub csv: PathBuf,
    /// The SVG to write.
    #[arg(long, short = 'o')]
    pub out: PathBuf,
    /// Title of the plot [default: the CSV's file name].
    #[arg(long)]
    pub title: Option<String>,
    /// Draw the capacity the controller should settle at (packets/s), as
    /// its spacing (a dashed line).
    #[arg(long, value_name = "PPS")]
    pub capacity: Option<f64>,
}

/// One row of a trace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TracePoint {
    /// Seconds since the sender started.
    pub t_s: f64,
    /// The controller's spacing, microseconds.
    pub spacing_us: f64,
    /// True in the Decrease state (after an error).
    pub decrease: bool,
    /// RTT estimate, microseconds.
    pub rtt_us: f64,
}

/// Parses a trace CSV (header line first).
pub fn parse_trace(text: &str) -> Result<Vec<TracePoint>> {
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let col = |name: &str| {
        cols.iter()
            .position(|c| *c == name)
            .with_context(|| format!("the trace has no {name} column (header: {header})"))
    };
    let (t, sp, st, rtt) = (
        col("t_s")?,
        col("spacing_us")?,
        col("state")?,
        col("rtt_us")?,
    );
    let mut out = Vec::new();
    for (i, line) in lines.enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let num = |k: usize| -> Result<f64> {
            f.get(k)
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("line {}: bad number in {line:?}", i + 2))
        };
        out.push(TracePoint {
            t_s: num(t)?,
            spacing_us: num(sp)?,
            decrease: f.get(st).is_some_and(|s| *s == "decrease"),
            rtt_us: num(rtt)?,
        });
    }
    if out.is_empty() {
        bail!("the trace has no rows");
    }
    Ok(out)
}

/// Writes the SVG: spacing (µs, log scale) over time as a step line, the
/// rows in the Decrease state marked, the optional capacity dashed.
pub fn plot_trace(
    points: &[TracePoint],
    title: &str,
    capacity: Option<f64>,
    out: &Path,
) -> Result<()> {
    let e = |e| anyhow::anyhow!("{e:?}");
    let tmax = points.last().map_or(1.0, |p| p.t_s).max(1e-3);
    let cap_us = capacity.filter(|c| *c > 0.0).map(|c| 1e6 / c);
    let (mut lo, mut hi) = points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| {
        (a.min(p.spacing_us), b.max(p.spacing_us))
    });
    if let Some(c) = cap_us {
        lo = lo.min(c);
        hi = hi.max(c);
    }
    let (lo, hi) = ((lo * 0.8).max(1e-3), hi * 1.25);
    let root = SVGBackend::new(out, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..tmax * 1.02, (lo..hi).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("time since the sender started (s)")
        .y_desc("spacing between packets (µs, log)")
        .draw()
        .map_err(e)?;
    let mut steps = Vec::with_capacity(points.len() * 2);
    for w in points.windows(2) {
        steps.push((w[0].t_s, w[0].spacing_us));
        steps.push((w[1].t_s, w[0].spacing_us));
    }
    if let Some(p) = points.last() {
        steps.push((p.t_s, p.spacing_us));
    }
    let blue = RGBColor(30, 90, 200);
    chart
        .draw_series(LineSeries::new(steps, blue.stroke_width(1)))
        .map_err(e)?
        .label("spacing")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], blue.stroke_width(2)));
    chart
        .draw_series(
            points
                .iter()
                .filter(|p| p.decrease)
                .map(|p| Circle::new((p.t_s, p.spacing_us), 2, RED.filled())),
        )
        .map_err(e)?
        .label("back-off (Decrease state)")
        .legend(|(x, y)| Circle::new((x + 10, y), 3, RED.filled()));
    if let Some(c) = cap_us {
        let dashes: Vec<_> = (0..60)
            .map(|k| {
                let a = tmax * f64::from(k) / 60.0;
                PathElement::new(vec![(a, c), (a + tmax / 120.0, c)], BLACK.stroke_width(1))
            })
            .collect();
        chart
            .draw_series(dashes)
            .map_err(e)?
            .label(format!("capacity ({:.0} packets/s)", 1e6 / c))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(1)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}

/// Runs `lab plot-trace`.
pub fn run(a: &PlotTraceArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.csv)
        .with_context(|| format!("cannot read {}", a.csv.display()))?;
    let points = parse_trace(&text)?;
    let title = a.title.clone().unwrap_or_else(|| {
        format!(
            "Hunt's spacing over time: {}",
            a.csv
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        )
    });
    plot_trace(&points, &title, a.capacity, &a.out)?;
    eprintln!("rmcast-lab: wrote {}", a.out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_parses_and_plots() {
        let csv = "t_s,spacing_us,rate_pps,state,sent,rtt_us\n\
                   0.0,2000.0,500,increase,0,1000.0\n\
                   0.5,100.0,10000,decrease,100,150.0\n\
                   1.0,110.0,9090,increase,5000,200.0\n";
        let pts = parse_trace(csv).unwrap();
        assert_eq!(pts.len(), 3);
        assert!(pts[1].decrease && !pts[2].decrease);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("t.svg");
        plot_trace(&pts, "t", Some(9000.0), &out).unwrap();
        let svg = std::fs::read_to_string(&out).unwrap();
        assert!(svg.contains("<svg") && svg.contains("capacity"));
        assert!(parse_trace("t_s,x\n").is_err());
    }
}
