//! `lab report DIR` for a suite directory: one section per experiment with
//! its caption, an SVG plot (one line per series and backend, the paper's
//! points as crosses), a table x | series | paper | lab | sim, and one
//! verdict line per claim and backend.

use crate::suite::{Backend, Claim, Experiment, Suite, XKind, kind_name};
use crate::suite_claims::{self, Data, Verdict, num};
use crate::suite_run::{self, RunMeta, SuitePoint};
use anyhow::{Context, Result};
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Writes the report (DIR/report.md, or `to`) and its plots; returns the report's path.
pub fn write_report(dir: &Path, to: Option<&Path>) -> Result<PathBuf> {
    let (suite, points, meta) = load(dir)?;
    let (path, plots, link) = match to {
        None => (
            dir.join("report.md"),
            dir.join("plots"),
            "plots".to_string(),
        ),
        Some(p) => {
            let stem = p.with_extension("");
            let link = stem
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "plots".into());
            (p.to_path_buf(), stem, link)
        }
    };
    std::fs::create_dir_all(&plots)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut links = BTreeMap::new();
    for e in &suite.experiment {
        let mine: Vec<&SuitePoint> = points.iter().filter(|p| p.experiment == e.id).collect();
        let file = format!("{}.svg", e.id);
        if plot_experiment(&plots.join(&file), e, &mine)? {
            links.insert(e.id.clone(), format!("{link}/{file}"));
        }
    }
    let md = render(
        &suite,
        &points,
        meta.as_ref(),
        &links,
        &dir.display().to_string(),
    );
    std::fs::write(&path, md).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Whether a claim is judged on a backend: the run used it, the experiment
/// runs there, and so does every series the claim names (a claim about a
/// lab-only tool has no simulator verdict).
fn judged_on(e: &Experiment, c: &Claim, b: Backend, ran: &[Backend]) -> bool {
    e.backends.contains(&b)
        && ran.contains(&b)
        && c.series.iter().all(|name| {
            e.series
                .iter()
                .find(|s| &s.name == name)
                .is_some_and(|s| suite_run::series_runs_on(s, b))
        })
}

/// A suite directory's suite (as run), points and run record.
fn load(dir: &Path) -> Result<(Suite, Vec<SuitePoint>, Option<RunMeta>)> {
    let text = std::fs::read_to_string(dir.join("suite.toml"))
        .with_context(|| format!("no suite.toml in {}", dir.display()))?;
    let suite =
        Suite::parse_resolved(&text).with_context(|| format!("{}/suite.toml", dir.display()))?;
    let points = suite_run::load_points(dir)?;
    let meta: Option<RunMeta> = std::fs::read_to_string(dir.join("suite-run.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    Ok((suite, points, meta))
}

/// The backends a directory's run used.
fn backends_run(points: &[SuitePoint], meta: Option<&RunMeta>) -> Vec<Backend> {
    match meta {
        Some(m) => m.backends.clone(),
        None => {
            let mut b: Vec<Backend> = points.iter().map(|p| p.backend).collect();
            b.sort();
            b.dedup();
            b
        }
    }
}

/// One claim of the index: (experiment id, claim text, [(backend, verdict)]).
type ClaimRow = (String, String, Vec<(Backend, Verdict)>);

/// Every claim's verdict on every backend that judged it.
fn claim_verdicts(suite: &Suite, points: &[SuitePoint], ran: &[Backend]) -> Vec<ClaimRow> {
    let mut rows = Vec::new();
    for e in &suite.experiment {
        let mine: Vec<&SuitePoint> = points.iter().filter(|p| p.experiment == e.id).collect();
        for c in &e.claim {
            let at = c.at.as_ref().and_then(|a| e.x_number(a).ok());
            let verdicts = [Backend::Lab, Backend::Sim]
                .into_iter()
                .filter(|&b| judged_on(e, c, b, ran))
                .map(|b| {
                    (
                        b,
                        suite_claims::judge(c, at, &backend_data(&mine, b)).verdict,
                    )
                })
                .collect();
            rows.push((e.id.clone(), c.text.trim().to_string(), verdicts));
        }
    }
    rows
}

/// `lab report DIR DIR... --to PATH`: each suite's report goes to
/// `<PATH without .md>/<suite>.md` (plots in `<suite>/` beside it); PATH
/// gets an index: per suite its run, then every claim with its verdicts.
pub fn write_index(dirs: &[PathBuf], to: &Path) -> Result<PathBuf> {
    let stem = to.with_extension("");
    let folder = stem
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut md = String::from(
        "# Reproductions of the papers\n\n\
         Generated by `rmcast lab report` from full suite runs (`lab/suites/*.toml`, \
         format in docs/suites.md). For each suite: how it was run, then every published \
         claim with its verdict on the namespace testbed (lab) and in the simulator (sim); \
         the suite's own report has the plots, the paper-vs-ours tables and the values each \
         verdict used. A claim about a tool the simulator does not model has no sim verdict.\n\n",
    );
    for dir in dirs {
        let (suite, points, meta) = load(dir)?;
        let report = stem.join(format!("{}.md", suite.name));
        write_report(dir, Some(&report))?;
        let _ = writeln!(
            md,
            "## [{}]({folder}/{}.md) — {}
",
            suite.name, suite.name, suite.title
        );
        if let Some(m) = &meta {
            let _ = writeln!(md, "- command: `{}`", m.command);
            let _ = writeln!(
                md,
                "- run: {} ({:.0} s){}, Linux {}, {} CPUs, commit {}",
                m.started_utc,
                m.seconds,
                if m.quick { ", quick variant" } else { "" },
                m.kernel,
                m.nproc,
                m.git_commit.as_deref().unwrap_or("unknown")
            );
        }
        let failed = points.iter().filter(|p| !p.ok).count();
        let _ = writeln!(
            md,
            "- points: {} ({failed} failed)
",
            points.len()
        );
        let ran = backends_run(&points, meta.as_ref());
        let rows = claim_verdicts(&suite, &points, &ran);
        md.push_str("| experiment | claim | lab | sim |\n|---|---|---|---|\n");
        let mut tally: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for (exp, text, verdicts) in &rows {
            let cell = |b: Backend| {
                verdicts
                    .iter()
                    .find(|(vb, _)| *vb == b)
                    .map_or("–", |(_, v)| v.words())
            };
            for (b, v) in verdicts {
                *tally.entry((b.name(), v.words())).or_default() += 1;
            }
            let _ = writeln!(
                md,
                "| {exp} | {} | {} | {} |",
                text.replace('|', "/"),
                cell(Backend::Lab),
                cell(Backend::Sim)
            );
        }
        let summary: Vec<String> = tally
            .iter()
            .map(|((b, v), n)| format!("{b} {v}: {n}"))
            .collect();
        let _ = writeln!(md, "\n{}\n", summary.join(" · "));
    }
    if let Some(parent) = to.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(to, md).with_context(|| format!("cannot write {}", to.display()))?;
    Ok(to.to_path_buf())
}

/// An x position as a person reads it (sizes in B/KB/MB/GB, decimal).
fn fmt_x(e: &Experiment, x: f64) -> String {
    if e.x_kind() != XKind::Size {
        return num(x);
    }
    for (k, unit) in [(1e9, "GB"), (1e6, "MB"), (1e3, "KB")] {
        if x >= k {
            return format!("{}{unit}", num(x / k));
        }
    }
    format!("{}B", num(x))
}

fn cell(p: Option<&SuitePoint>) -> String {
    let Some(p) = p else {
        return "–".into();
    };
    let first = |p: &SuitePoint| {
        let r = p.reasons.first().cloned().unwrap_or_default();
        let r: String = r.chars().take(90).collect();
        r.replace('|', "/")
    };
    match (p.status.as_str(), p.y) {
        ("n/a", _) if p.reasons.iter().any(|r| r.starts_with("lab only")) => "lab only".into(),
        ("n/a", _) => format!("n/a ({})", first(p)),
        (_, None) => format!("failed: {}", first(p)),
        (status, Some(y)) => {
            let mut s = num(y);
            if let (Some(lo), Some(hi)) = (p.min, p.max)
                && p.n > 1
                && hi > lo
            {
                let _ = write!(s, " ({}–{})", num(lo), num(hi));
            }
            if p.n > 1 || p.runs > 1 {
                let _ = write!(s, " n={}", p.n);
            }
            if status == "failed" {
                let _ = write!(s, " ⚠ {}", first(p));
            }
            s
        }
    }
}

/// The report's Markdown (plots already written; `links` maps experiment id to its SVG path).
pub fn render(
    suite: &Suite,
    points: &[SuitePoint],
    meta: Option<&RunMeta>,
    links: &BTreeMap<String, String>,
    dir: &str,
) -> String {
    let mut md = format!("# Reproduction: {}\n\n", suite.name);
    if !suite.title.is_empty() {
        let _ = writeln!(md, "**{}**", suite.title);
    }
    if !suite.paper.is_empty() {
        let _ = writeln!(md, "(paper: `../shared/papers/{}`)", suite.paper);
    }
    md.push('\n');
    if !suite.notes.is_empty() {
        let _ = writeln!(md, "{}\n", suite.notes.trim());
    }
    let ran = backends_run(points, meta);
    if let Some(m) = meta {
        let _ = writeln!(md, "- command: `{}`", m.command);
        let _ = writeln!(
            md,
            "- run: {} → {} ({:.0} s){}",
            m.started_utc,
            m.finished_utc,
            m.seconds,
            if m.quick { ", quick variant" } else { "" }
        );
        let _ = writeln!(md, "- machine: Linux {}, {} CPUs", m.kernel, m.nproc);
        let _ = writeln!(
            md,
            "- git commit: {}",
            m.git_commit.as_deref().unwrap_or("unknown")
        );
    }
    let failed = points.iter().filter(|p| !p.ok).count();
    let _ = writeln!(
        md,
        "- points: {} ({} failed); rendered from `{dir}` by `rmcast lab report`\n",
        points.len(),
        failed
    );
    md.push_str(
        "Cells give the median over the lab's repeats or the simulator's seeds, \
         (min–max) and n when more than one run counted. `lab only`: the simulator \
         does not model that tool. A verdict is judged on each backend's medians.\n\n",
    );
    for e in &suite.experiment {
        section(&mut md, e, points, &ran, links.get(&e.id));
    }
    md
}

fn section(
    md: &mut String,
    e: &Experiment,
    points: &[SuitePoint],
    ran: &[Backend],
    link: Option<&String>,
) {
    let mine: Vec<&SuitePoint> = points.iter().filter(|p| p.experiment == e.id).collect();
    let caption = if e.caption.is_empty() {
        &e.id
    } else {
        &e.caption
    };
    let _ = writeln!(md, "## {} — {}\n", e.id, caption);
    let setup = match e.x_kind() {
        XKind::Receivers => format!(
            "{} object",
            e.size.as_ref().map(|s| s.text()).unwrap_or_default()
        ),
        XKind::Size => format!("{} receivers", e.receivers.unwrap_or(0)),
        XKind::Param => format!(
            "{} receivers, {} object",
            e.receivers.unwrap_or(0),
            e.size.as_ref().map(|s| s.text()).unwrap_or_default()
        ),
    };
    let mut wheres = Vec::new();
    if e.backends.contains(&Backend::Lab) {
        wheres.push(format!(
            "lab: {} testbed, {} repeat(s)",
            format!("{:?}", e.testbed).to_lowercase(),
            e.repeats
        ));
    }
    if e.backends.contains(&Backend::Sim) {
        wheres.push(format!(
            "sim: {} hosts, {} seed(s)",
            format!("{:?}", e.preset).to_lowercase(),
            e.seeds
        ));
    }
    let _ = writeln!(
        md,
        "x = {}, y = {}; {setup}, {} links, loss {}, MTU {}; {}.\n",
        e.x_label(),
        e.metric.name(),
        e.rates.first().map_or("?", String::as_str),
        e.loss,
        e.mtu,
        wheres.join("; ")
    );
    if let Some(n) = &e.lab_note {
        let _ = writeln!(md, "*Note:* {}\n", n.trim());
    }
    if mine.is_empty() {
        md.push_str("*Not run in this directory.*\n\n");
    }
    if let Some(l) = link {
        let _ = writeln!(md, "![{}]({l})\n", e.id);
    }
    // x positions: every measured x and every paper x.
    let mut xs: Vec<(f64, String)> = Vec::new();
    let mut add_x = |x: f64, label: String| {
        if x.is_finite()
            && !xs
                .iter()
                .any(|(v, _)| (v - x).abs() <= 1e-9 * x.abs().max(1.0))
        {
            xs.push((x, label));
        }
    };
    for p in &mine {
        add_x(
            p.x,
            if e.x_kind() == XKind::Size {
                fmt_x(e, p.x)
            } else {
                p.x_text.clone()
            },
        );
    }
    for s in &e.series {
        for (px, _) in &s.paper {
            if let Ok(x) = e.x_number(px) {
                add_x(x, fmt_x(e, x));
            }
        }
    }
    xs.sort_by(|a, b| a.0.total_cmp(&b.0));
    md.push_str("| x | series | paper | lab | sim |\n|---|---|---|---|---|\n");
    let same = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
    for (x, label) in &xs {
        for s in &e.series {
            let paper = s
                .paper
                .iter()
                .find(|(px, _)| e.x_number(px).is_ok_and(|v| same(v, *x)))
                .map(|(_, y)| num(*y));
            let at = |b: Backend| {
                mine.iter()
                    .find(|p| p.backend == b && p.series == s.name && same(p.x, *x))
                    .copied()
            };
            let (lab, sim) = (at(Backend::Lab), at(Backend::Sim));
            if paper.is_none() && lab.is_none() && sim.is_none() {
                continue;
            }
            let _ = writeln!(
                md,
                "| {label} | {} | {} | {} | {} |",
                s.name,
                paper.unwrap_or_else(|| "–".into()),
                cell(lab),
                cell(sim)
            );
        }
    }
    md.push('\n');
    for s in &e.series {
        if let Some(n) = &s.paper_note {
            let _ = writeln!(md, "- paper values of {}: {}", s.name, n.trim());
        }
    }
    if e.series.iter().any(|s| s.paper_note.is_some()) {
        md.push('\n');
    }
    if !e.claim.is_empty() {
        md.push_str("**Claims**\n\n");
    }
    for c in &e.claim {
        let _ = writeln!(md, "- “{}” ({})", c.text.trim(), kind_name(c.kind));
        let at = c.at.as_ref().and_then(|a| e.x_number(a).ok());
        for b in [Backend::Lab, Backend::Sim] {
            if !judged_on(e, c, b, ran) {
                continue;
            }
            let data = backend_data(&mine, b);
            let j = suite_claims::judge(c, at, &data);
            let why = if c.why.trim().is_empty() || j.verdict == Verdict::NotMeasured {
                String::new()
            } else {
                format!(" — {}", c.why.trim())
            };
            let _ = writeln!(
                md,
                "  - {}: **{}** — {}{why}",
                b.name(),
                j.verdict.words(),
                j.detail
            );
        }
    }
    if !e.claim.is_empty() {
        md.push('\n');
    }
}

/// The medians a backend measured, per series, sorted by x.
fn backend_data(points: &[&SuitePoint], b: Backend) -> Data {
    let mut d: Data = BTreeMap::new();
    for p in points
        .iter()
        .filter(|p| p.backend == b && p.status != "n/a")
    {
        if let Some(y) = p.y {
            d.entry(p.series.clone()).or_default().push((p.x, y));
        }
    }
    for v in d.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    d
}

fn perr<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("plot: {e:?}")
}

/// Draws an experiment's plot; false when there was nothing to draw.
fn plot_experiment(path: &Path, e: &Experiment, points: &[&SuitePoint]) -> Result<bool> {
    let tx = |x: f64| if e.x_log { x.log10() } else { x };
    let ty = |y: f64| if e.y_log { y.log10() } else { y };
    let usable = |x: f64, y: f64| {
        x.is_finite() && y.is_finite() && (!e.x_log || x > 0.0) && (!e.y_log || y > 0.0)
    };
    // (legend, colour index, backend, points).
    type Line = (String, usize, Backend, Vec<(f64, f64)>);
    // (legend, colour index, points).
    type Paper = (String, usize, Vec<(f64, f64)>);
    let mut lines: Vec<Line> = Vec::new();
    let mut paper: Vec<Paper> = Vec::new();
    for (i, s) in e.series.iter().enumerate() {
        for b in [Backend::Lab, Backend::Sim] {
            let mut pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.backend == b && p.series == s.name)
                .filter_map(|p| p.y.map(|y| (p.x, y)))
                .filter(|&(x, y)| usable(x, y))
                .map(|(x, y)| (tx(x), ty(y)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            if !pts.is_empty() {
                lines.push((format!("{} ({})", s.name, b.name()), i, b, pts));
            }
        }
        let pp: Vec<(f64, f64)> = s
            .paper
            .iter()
            .filter_map(|(x, y)| e.x_number(x).ok().map(|x| (x, *y)))
            .filter(|&(x, y)| usable(x, y))
            .map(|(x, y)| (tx(x), ty(y)))
            .collect();
        if !pp.is_empty() {
            paper.push((format!("{} (paper)", s.name), i, pp));
        }
    }
    let all: Vec<(f64, f64)> = lines
        .iter()
        .flat_map(|l| l.3.iter().copied())
        .chain(paper.iter().flat_map(|p| p.2.iter().copied()))
        .collect();
    if all.is_empty() {
        return Ok(false);
    }
    let (xmin, xmax) = all
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (ymin, ymax) = all
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let xpad = ((xmax - xmin) * 0.05).max(if e.x_log { 0.05 } else { 0.5 });
    let (y0, y1) = if e.y_log {
        (ymin - 0.1, ymax + 0.1)
    } else {
        (ymin.min(0.0), (ymax * 1.1).max(ymin.min(0.0) + 1e-3))
    };
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(perr)?;
    let title = if e.caption.is_empty() {
        &e.id
    } else {
        &e.caption
    };
    let title: String = title.chars().take(90).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d((xmin - xpad)..(xmax + xpad), y0..y1)
        .map_err(perr)?;
    let fx = |v: &f64| fmt_x(e, if e.x_log { 10f64.powf(*v) } else { *v });
    let fy = |v: &f64| num(if e.y_log { 10f64.powf(*v) } else { *v });
    let xl = format!("{}{}", e.x_label(), if e.x_log { " (log)" } else { "" });
    let yl = format!("{}{}", e.y_label(), if e.y_log { " (log)" } else { "" });
    chart
        .configure_mesh()
        .x_desc(xl)
        .y_desc(yl)
        .x_label_formatter(&fx)
        .y_label_formatter(&fy)
        .draw()
        .map_err(perr)?;
    for (label, i, b, pts) in &lines {
        let color = Palette99::pick(*i).to_rgba();
        let style = color.stroke_width(2);
        match b {
            Backend::Lab => {
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), style))
                    .map_err(perr)?
                    .label(label.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
                    .map_err(perr)?;
            }
            Backend::Sim => {
                chart
                    .draw_series(DashedLineSeries::new(pts.iter().copied(), 6, 4, style))
                    .map_err(perr)?
                    .label(label.as_str())
                    .legend(move |(x, y)| TriangleMarker::new((x + 10, y), 5, color.filled()));
                chart
                    .draw_series(
                        pts.iter()
                            .map(|&p| TriangleMarker::new(p, 5, color.filled())),
                    )
                    .map_err(perr)?;
            }
        }
    }
    for (label, i, pts) in &paper {
        let color = Palette99::pick(*i).to_rgba();
        chart
            .draw_series(pts.iter().map(|&p| Cross::new(p, 6, color.stroke_width(2))))
            .map_err(perr)?
            .label(label.as_str())
            .legend(move |(x, y)| Cross::new((x + 10, y), 5, color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(perr)?;
    root.present().map_err(perr)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUITE: &str = r#"
name = "t"
title = "A paper"
[[experiment]]
id = "fig8"
caption = "Fig. 8: ack vs nak"
x = "receivers"
values = [1, 4]
size = "1MB"
metric = "goodput_mbps"
y_log = true
[[experiment.series]]
name = "ack"
kind = "rmcast"
protocol = "ack"
paper = [[1, 90.0], [4, 70.0]]
paper_note = "Fig. 8 text"
[[experiment.series]]
name = "nak"
kind = "rmcast"
protocol = "nak-poll"
[[experiment.series]]
name = "udpcast"
kind = "udpcast"
[[experiment.claim]]
text = "nak beats ack"
kind = "order"
series = ["nak", "ack"]
why = "fewer acks"
[[experiment.claim]]
text = "ack is near 70 at 4"
kind = "near"
series = ["ack"]
at = 4
value = 70.0
tolerance = 0.1
"#;

    fn pt(b: Backend, s: &str, x: f64, y: Option<f64>, status: &str) -> SuitePoint {
        SuitePoint {
            experiment: "fig8".into(),
            backend: b,
            series: s.into(),
            x,
            x_text: format!("{x}"),
            y,
            min: y.map(|y| y - 1.0),
            max: y.map(|y| y + 1.0),
            n: 3,
            runs: 3,
            ok: status != "failed",
            status: status.into(),
            reasons: if status == "n/a" {
                vec!["lab only: the simulator runs rmcast's UDP protocols".into()]
            } else if status == "failed" {
                vec!["h1: no output file".into()]
            } else {
                vec![]
            },
            wall_s: None,
        }
    }

    fn points() -> Vec<SuitePoint> {
        vec![
            pt(Backend::Lab, "ack", 1.0, Some(88.0), "ok"),
            pt(Backend::Lab, "ack", 4.0, Some(60.0), "ok"),
            pt(Backend::Lab, "nak", 1.0, Some(90.0), "ok"),
            pt(Backend::Lab, "nak", 4.0, Some(85.0), "ok"),
            pt(Backend::Lab, "udpcast", 4.0, None, "failed"),
            pt(Backend::Sim, "ack", 4.0, Some(72.0), "ok"),
            pt(Backend::Sim, "nak", 4.0, Some(60.0), "ok"),
            pt(Backend::Sim, "udpcast", 4.0, None, "n/a"),
        ]
    }

    #[test]
    fn the_report_has_table_rows_and_a_verdict_per_claim_and_backend() {
        let suite = Suite::parse(SUITE, false).unwrap();
        let meta = RunMeta {
            command: "rmcast lab run t.toml".into(),
            backends: vec![Backend::Lab, Backend::Sim],
            kernel: "6.1".into(),
            nproc: 2,
            ..RunMeta::default()
        };
        let md = render(&suite, &points(), Some(&meta), &BTreeMap::new(), "/tmp/x");
        assert!(md.contains("# Reproduction: t"), "{md}");
        assert!(md.contains("command: `rmcast lab run t.toml`"), "{md}");
        assert!(md.contains("machine: Linux 6.1, 2 CPUs"), "{md}");
        assert!(md.contains("## fig8 — Fig. 8: ack vs nak"), "{md}");
        assert!(md.contains("| x | series | paper | lab | sim |"), "{md}");
        assert!(
            md.contains("| 4 | ack | 70 | 60 (59–61) n=3 | 72 (71–73) n=3 |"),
            "{md}"
        );
        assert!(
            md.contains("| 4 | udpcast | – | failed: h1: no output file | lab only |"),
            "{md}"
        );
        // Order: holds on the lab (85 ≥ 60), not in the sim (70 < 72 × 0.95).
        assert!(
            md.contains(
                "  - lab: **holds** — at x=4: nak 85 ≥ ack 60 (tolerance 5 %) — fewer acks"
            ),
            "{md}"
        );
        assert!(
            md.contains("  - sim: **does not hold** — at x=4: nak 60 ≥ ack 72"),
            "{md}"
        );
        // Near 70 ± 10 %: 60 is not, 72 is.
        assert!(
            md.contains("  - lab: **does not hold** — at x=4: |ack 60 − 70|"),
            "{md}"
        );
        assert!(
            md.contains("  - sim: **holds** — at x=4: |ack 72 − 70|"),
            "{md}"
        );
        assert!(md.contains("paper values of ack: Fig. 8 text"), "{md}");
    }

    #[test]
    fn a_backend_that_did_not_run_gets_no_verdict_and_missing_points_are_not_measured() {
        let suite = Suite::parse(SUITE, false).unwrap();
        let meta = RunMeta {
            backends: vec![Backend::Sim],
            ..RunMeta::default()
        };
        let sim_only: Vec<SuitePoint> = points()
            .into_iter()
            .filter(|p| p.backend == Backend::Sim && p.series != "nak")
            .collect();
        let md = render(&suite, &sim_only, Some(&meta), &BTreeMap::new(), "d");
        assert!(!md.contains("  - lab:"), "{md}");
        assert!(
            md.contains("  - sim: **not measured** — no x at which nak, ack were all measured"),
            "{md}"
        );
    }

    #[test]
    fn write_report_draws_plots_and_links_them_relatively() {
        let dir = tempfile::tempdir().unwrap();
        let suite = Suite::parse(SUITE, false).unwrap();
        std::fs::write(dir.path().join("suite.toml"), suite.to_toml().unwrap()).unwrap();
        suite_run::write_points(dir.path(), &points()).unwrap();
        let p = write_report(dir.path(), None).unwrap();
        let md = std::fs::read_to_string(&p).unwrap();
        assert!(md.contains("![fig8](plots/fig8.svg)"), "{md}");
        let svg = std::fs::read_to_string(dir.path().join("plots/fig8.svg")).unwrap();
        assert!(
            svg.contains("ack (paper)") && svg.contains("nak (sim)"),
            "legend missing"
        );
        let to = dir.path().join("docs/repro.md");
        write_report(dir.path(), Some(&to)).unwrap();
        let md = std::fs::read_to_string(&to).unwrap();
        assert!(md.contains("![fig8](repro/fig8.svg)"), "{md}");
        assert!(dir.path().join("docs/repro/fig8.svg").is_file());
    }

    #[test]
    fn sizes_read_as_sizes() {
        let suite = Suite::parse(
            &SUITE
                .replace(
                    "x = \"receivers\"\nvalues = [1, 4]\nsize = \"1MB\"",
                    "x = \"size\"\nvalues = [\"256KB\"]\nreceivers = 2",
                )
                .replace("[[1, 90.0], [4, 70.0]]", "[[\"8MB\", 90.0]]")
                .replace("at = 4\n", ""),
            false,
        )
        .unwrap();
        assert_eq!(fmt_x(&suite.experiment[0], 8e6), "8MB");
        assert_eq!(fmt_x(&suite.experiment[0], 262_144.0), "262.1KB");
    }
}
