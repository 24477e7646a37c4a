//! Golden files for the fsu suite on the simulator (`--quick`), pinned byte
//! for byte so that a refactoring of rmcast-proto or rmcast-sim proves it
//! preserved behaviour; any difference is a bug or a fix to name.
//!
//! - `tests/golden/fsu_sim_quick_report.txt`: what
//!   `rmcast-lab run lab/suites/fsu.toml --backend sim --quick --report`
//!   writes: `report.md`, then `suite-points.json`. Wall-clock fields are
//!   left out: the report header's `command` (it names temporary paths),
//!   `run` (dates and elapsed seconds), `machine` (kernel, CPUs) and
//!   `git commit` lines, and every point's `wall_s`; the output directory
//!   is written `OUT`. The plots (SVG, drawn from the same points) and
//!   `suite-points.csv` (the JSON's numbers again) are not pinned.
//! - `tests/golden/fsu_sim_quick_runs.txt`: every simulator run behind
//!   those points (each experiment × series × x × seed, the quick
//!   variant), one line each with the blake3 of its whole `RunReport`
//!   (rendered by rmcast-sim's `tests/common/report_text.rs`).
//!
//! Bless: `RMCAST_GOLDEN_BLESS=1 cargo test -p rmcast-lab --test golden`.

#[path = "../../rmcast-sim/tests/common/golden.rs"]
mod golden;
#[path = "../../rmcast-sim/tests/common/report_text.rs"]
mod report_text;

use rmcast_lab::suite::sim::{series_runs_on, sim_scenario};
use rmcast_lab::suite::{Backend, Suite};
use std::path::Path;
use std::process::Command;

const DIR: &str = env!("CARGO_MANIFEST_DIR");
const LAB: &str = env!("CARGO_BIN_EXE_rmcast-lab");
const SUITE: &str = "lab/suites/fsu.toml";

fn workspace() -> &'static Path {
    Path::new(DIR)
        .parent()
        .and_then(Path::parent)
        .expect("crates/rmcast-lab")
}

/// Report header lines that hold wall-clock or machine facts.
const VOLATILE: [&str; 4] = ["- command: ", "- run: ", "- machine: ", "- git commit: "];

#[test]
fn golden_fsu_sim_quick_report() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = Command::new(LAB)
        .current_dir(workspace())
        .args([
            "run",
            SUITE,
            "--backend",
            "sim",
            "--quick",
            "--report",
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("run rmcast-lab");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let out_str = out.to_str().expect("a UTF-8 temp path");
    let report = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    let mut text = String::from("##### report.md\n");
    for line in report.lines() {
        if !VOLATILE.iter().any(|p| line.starts_with(p)) {
            text.push_str(&line.replace(out_str, "OUT"));
            text.push('\n');
        }
    }
    let points = std::fs::read_to_string(out.join("suite-points.json")).expect("points");
    let mut points: Vec<serde_json::Value> = serde_json::from_str(&points).unwrap();
    for p in &mut points {
        p.as_object_mut().expect("a point").remove("wall_s");
    }
    text.push_str("##### suite-points.json (without wall_s)\n");
    text.push_str(&serde_json::to_string_pretty(&points).unwrap());
    text.push('\n');
    golden::compare(DIR, "fsu_sim_quick_report", &text);
}

#[test]
fn golden_fsu_sim_quick_runs() {
    let suite = Suite::load(&workspace().join(SUITE), true).expect("the fsu suite");
    let mut text = String::new();
    for e in &suite.experiment {
        if !e.backends.contains(&Backend::Sim) {
            continue;
        }
        for s in e.series_on(Backend::Sim) {
            if !series_runs_on(s, Backend::Sim) {
                continue;
            }
            for x in e.values_for(Backend::Sim) {
                let label = format!("{} {} x={}", e.id, s.name, x.text());
                let sc = match sim_scenario(e, s, x) {
                    Ok(sc) => sc,
                    Err(why) => {
                        text.push_str(&format!("{label}: no scenario: {why}\n"));
                        continue;
                    }
                };
                // The seeds run_sim gives the points: 1..=seeds.
                for seed in 1..=u64::from(e.seeds) {
                    let run = rmcast_sim::replay(seed, &sc);
                    let line = match run {
                        Ok(r) => report_text::summary_line(&label, &r),
                        Err(err) => format!(
                            "{label}: seed {seed} failed: {}",
                            err.to_string().lines().next().unwrap_or("")
                        ),
                    };
                    text.push_str(&line);
                    text.push('\n');
                }
            }
        }
    }
    golden::compare(DIR, "fsu_sim_quick_runs", &text);
}
