//! A scenario's claims (`[[claims]]`): a tool's goodput against the link
//! rate, judged on each of its points (median over the successful repeats)
//! as `holds`, `does not hold` or `not measured`, with the values used.
//! The runner prints the verdicts and writes `claims.json`; the report has
//! a section for them. (Suites have their own, richer claims: docs/suites.md.)
//!
//! ```toml
//! [[claims]]
//! text = "three cascaded segments: G ≥ 0.90 R"
//! tool = "cascade-nak-poll"
//! min_fraction_of_rate = 0.90
//! ```

use super::metrics::PointRecord;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One claim: the median goodput of `tool` ≥ `min_fraction_of_rate` × R.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// The claim in words.
    pub text: String,
    /// The tool (its `name`) it is about.
    pub tool: String,
    /// G / R that must be reached, in 0..=1 (R: the point's link rate).
    pub min_fraction_of_rate: f64,
}

/// A claim's outcome at one point of its tool.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ClaimVerdict {
    /// The claim in words.
    pub text: String,
    /// Its tool.
    pub tool: String,
    /// The point (`n=30 20MB 100mbit loss=0`).
    pub point: String,
    /// `holds`, `does not hold` or `not measured`.
    pub verdict: String,
    /// The values used.
    pub detail: String,
}

/// Judges every claim on every point of its tool; a claim whose tool has
/// no point gets one `not measured`.
pub fn judge(claims: &[Claim], points: &[PointRecord]) -> Vec<ClaimVerdict> {
    let mut out = Vec::new();
    for c in claims {
        let mine: Vec<&PointRecord> = points.iter().filter(|p| p.tool == c.tool).collect();
        if mine.is_empty() {
            out.push(ClaimVerdict {
                text: c.text.clone(),
                tool: c.tool.clone(),
                point: "-".into(),
                verdict: "not measured".into(),
                detail: format!("no run of {}", c.tool),
            });
        }
        for p in mine {
            let point = format!(
                "n={} {} {} loss={}",
                p.receivers,
                crate::units::fmt_size(p.size_bytes),
                p.rate,
                p.loss
            );
            let rate = crate::units::parse_rate_opt(&p.rate).ok().flatten();
            let (verdict, detail) = match (rate, p.goodput_mbps) {
                (None, _) => ("not measured", "unshaped link: no rate R".to_string()),
                (_, None) => (
                    "not measured",
                    format!("no successful run ({} of {})", p.successes, p.runs),
                ),
                (Some(r), Some(g)) => {
                    let r_mbps = r as f64 / 1e6;
                    let f = g.median / r_mbps;
                    let holds = f >= c.min_fraction_of_rate;
                    (
                        if holds { "holds" } else { "does not hold" },
                        format!(
                            "G {:.1} Mbit/s = {f:.3} R {} {:.2} R (R = {r_mbps:.0} Mbit/s; {} of {} runs ok)",
                            g.median,
                            if holds { "≥" } else { "<" },
                            c.min_fraction_of_rate,
                            p.successes,
                            p.runs
                        ),
                    )
                }
            };
            out.push(ClaimVerdict {
                text: c.text.clone(),
                tool: c.tool.clone(),
                point,
                verdict: verdict.into(),
                detail,
            });
        }
    }
    out
}

/// Writes `claims.json` into `dir` (nothing when there are no claims).
pub fn write(dir: &Path, verdicts: &[ClaimVerdict]) -> Result<()> {
    if !verdicts.is_empty() {
        std::fs::write(
            dir.join("claims.json"),
            serde_json::to_string_pretty(verdicts)?,
        )?;
    }
    Ok(())
}

/// One line per verdict, for the console and the report.
pub fn line(v: &ClaimVerdict) -> String {
    format!(
        "{} ({}, {}): **{}** — {}",
        v.text, v.tool, v.point, v.verdict, v.detail
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::metrics::Spread;

    fn point(tool: &str, g: Option<f64>) -> PointRecord {
        PointRecord {
            tool: tool.into(),
            receivers: 30,
            size_bytes: 20_000_000,
            rate: "100mbit".into(),
            runs: 1,
            successes: usize::from(g.is_some()),
            goodput_mbps: g.map(|m| Spread {
                median: m,
                min: m,
                max: m,
            }),
            ..PointRecord::default()
        }
    }

    #[test]
    fn goodput_is_judged_against_the_link_rate() {
        let claims = vec![
            Claim {
                text: "cascade ≥ 0.90 R".into(),
                tool: "cascade".into(),
                min_fraction_of_rate: 0.90,
            },
            Claim {
                text: "flat ≥ 0.93 R".into(),
                tool: "flat".into(),
                min_fraction_of_rate: 0.93,
            },
            Claim {
                text: "other".into(),
                tool: "missing".into(),
                min_fraction_of_rate: 0.5,
            },
        ];
        let v = judge(
            &claims,
            &[point("cascade", Some(91.0)), point("flat", Some(80.0))],
        );
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].verdict, "holds", "{:?}", v[0]);
        assert!(v[0].detail.contains("0.910 R ≥ 0.90 R"), "{}", v[0].detail);
        assert_eq!(v[1].verdict, "does not hold");
        assert_eq!(v[2].verdict, "not measured");
        let failed = judge(&claims[..1], &[point("cascade", None)]);
        assert_eq!(failed[0].verdict, "not measured");
        assert!(line(&v[0]).contains("**holds**"));
    }
}
