//! Judging a paper's claim on one backend's medians (the table in
//! docs/suites.md): `holds`, `does not hold`, or `not measured` when a
//! series or the x the claim needs is missing, always with the values used.

use crate::suite::{Claim, ClaimKind};
use std::collections::BTreeMap;

/// A claim's outcome on one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The data agree with the claim.
    Holds,
    /// The data contradict it.
    DoesNotHold,
    /// A series or the x the claim needs was not measured.
    NotMeasured,
}

impl Verdict {
    /// Its words in the report.
    pub fn words(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::DoesNotHold => "does not hold",
            Verdict::NotMeasured => "not measured",
        }
    }
}

/// A verdict and the values it used.
#[derive(Clone, Debug, PartialEq)]
pub struct Judgement {
    /// The outcome.
    pub verdict: Verdict,
    /// The values used, in words (`at x=30: nak 85.1 ≥ ack 60.2`).
    pub detail: String,
}

/// Each series' measured (x, y) medians on one backend, sorted by x.
pub type Data = BTreeMap<String, Vec<(f64, f64)>>;

fn same_x(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn y_at(data: &Data, series: &str, x: f64) -> Option<f64> {
    data.get(series)?
        .iter()
        .find(|(px, _)| same_x(*px, x))
        .map(|p| p.1)
}

/// A number in a verdict: 4 significant digits, no exponent for everyday sizes.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e7).contains(&a) {
        format!("{v:.3e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    } else {
        format!("{v:.4}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

fn pct(t: f64) -> String {
    format!("{} %", num(t * 100.0))
}

fn not_measured(detail: String) -> Judgement {
    Judgement {
        verdict: Verdict::NotMeasured,
        detail,
    }
}

fn judged(ok: bool, detail: String) -> Judgement {
    Judgement {
        verdict: if ok {
            Verdict::Holds
        } else {
            Verdict::DoesNotHold
        },
        detail,
    }
}

/// The x a point claim is checked at: `at`, or the largest x at which
/// every series of the claim was measured.
fn claim_x(claim: &Claim, at: Option<f64>, data: &Data) -> Result<f64, String> {
    if let Some(x) = at {
        return Ok(x);
    }
    let first = data.get(&claim.series[0]).cloned().unwrap_or_default();
    first
        .iter()
        .rev()
        .map(|p| p.0)
        .find(|&x| claim.series.iter().all(|s| y_at(data, s, x).is_some()))
        .ok_or_else(|| {
            format!(
                "no x at which {} were all measured",
                claim.series.join(", ")
            )
        })
}

/// Judges `claim` on one backend's data; `at` is the claim's x as a number.
pub fn judge(claim: &Claim, at: Option<f64>, data: &Data) -> Judgement {
    let tol = claim.tolerance;
    let value = claim.value.unwrap_or(f64::NAN);
    match claim.kind {
        ClaimKind::Flat | ClaimKind::Increasing | ClaimKind::Decreasing => {
            let s = &claim.series[0];
            let pts = data.get(s).cloned().unwrap_or_default();
            if pts.len() < 2 {
                return not_measured(format!(
                    "{s} measured at {} x value(s), needs 2 or more",
                    pts.len()
                ));
            }
            let list = pts
                .iter()
                .map(|(x, y)| format!("{}→{}", num(*x), num(*y)))
                .collect::<Vec<_>>()
                .join(", ");
            match claim.kind {
                ClaimKind::Flat => {
                    let min = pts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
                    let max = pts.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
                    judged(
                        max <= min * (1.0 + tol),
                        format!(
                            "{s}: max {} vs min {} × (1 + {}) = {} ({list})",
                            num(max),
                            num(min),
                            pct(tol),
                            num(min * (1.0 + tol))
                        ),
                    )
                }
                _ => {
                    let up = claim.kind == ClaimKind::Increasing;
                    let bad = pts.windows(2).find(|w| {
                        let (a, b) = (w[0].1, w[1].1);
                        if up {
                            b < a * (1.0 - tol)
                        } else {
                            b > a * (1.0 + tol)
                        }
                    });
                    let detail = match bad {
                        None => format!(
                            "{s}: every step {} within {} ({list})",
                            if up { "rises" } else { "falls" },
                            pct(tol)
                        ),
                        Some(w) => format!(
                            "{s}: from x={} to x={} y goes {} → {}, against the claim beyond {} ({list})",
                            num(w[0].0),
                            num(w[1].0),
                            num(w[0].1),
                            num(w[1].1),
                            pct(tol)
                        ),
                    };
                    judged(bad.is_none(), detail)
                }
            }
        }
        ClaimKind::Order
        | ClaimKind::Ratio
        | ClaimKind::Below
        | ClaimKind::Above
        | ClaimKind::Near => {
            let x = match claim_x(claim, at, data) {
                Ok(x) => x,
                Err(why) => return not_measured(why),
            };
            let mut ys = Vec::new();
            for s in &claim.series {
                match y_at(data, s, x) {
                    Some(y) => ys.push(y),
                    None => return not_measured(format!("{s} was not measured at x={}", num(x))),
                }
            }
            let head = format!("at x={}: ", num(x));
            match claim.kind {
                ClaimKind::Order => {
                    let bad = (0..ys.len() - 1).find(|&i| ys[i] < ys[i + 1] * (1.0 - tol));
                    let chain = claim
                        .series
                        .iter()
                        .zip(&ys)
                        .map(|(s, y)| format!("{s} {}", num(*y)))
                        .collect::<Vec<_>>()
                        .join(" ≥ ");
                    let detail = match bad {
                        None => format!("{head}{chain} (tolerance {})", pct(tol)),
                        Some(i) => format!(
                            "{head}{chain}: {} {} < {} {} × (1 − {})",
                            claim.series[i],
                            num(ys[i]),
                            claim.series[i + 1],
                            num(ys[i + 1]),
                            pct(tol)
                        ),
                    };
                    judged(bad.is_none(), detail)
                }
                ClaimKind::Ratio => {
                    let r = ys[0] / ys[1];
                    let need = value * (1.0 - tol);
                    judged(
                        r.is_finite() && r >= need,
                        format!(
                            "{head}{} {} / {} {} = {} vs {} × (1 − {}) = {}",
                            claim.series[0],
                            num(ys[0]),
                            claim.series[1],
                            num(ys[1]),
                            num(r),
                            num(value),
                            pct(tol),
                            num(need)
                        ),
                    )
                }
                ClaimKind::Below => judged(
                    ys[0] < value,
                    format!("{head}{} {} < {}", claim.series[0], num(ys[0]), num(value)),
                ),
                ClaimKind::Above => judged(
                    ys[0] > value,
                    format!("{head}{} {} > {}", claim.series[0], num(ys[0]), num(value)),
                ),
                _ => {
                    let d = (ys[0] - value).abs();
                    judged(
                        d <= tol * value.abs(),
                        format!(
                            "{head}|{} {} − {}| = {} vs {} × {} = {}",
                            claim.series[0],
                            num(ys[0]),
                            num(value),
                            num(d),
                            pct(tol),
                            num(value),
                            num(tol * value.abs())
                        ),
                    )
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::ClaimKind::*;

    fn claim(kind: ClaimKind, series: &[&str], value: Option<f64>, tolerance: f64) -> Claim {
        Claim {
            text: String::new(),
            kind,
            series: series.iter().map(|s| s.to_string()).collect(),
            at: None,
            value,
            tolerance,
            why: String::new(),
        }
    }

    fn data(rows: &[(&str, &[(f64, f64)])]) -> Data {
        rows.iter()
            .map(|(s, p)| (s.to_string(), p.to_vec()))
            .collect()
    }

    fn v(c: &Claim, at: Option<f64>, d: &Data) -> Verdict {
        judge(c, at, d).verdict
    }

    #[test]
    fn order_holds_within_tolerance_and_fails_beyond_it() {
        let c = claim(Order, &["nak", "ring", "ack"], None, 0.05);
        let d = data(&[
            ("nak", &[(1.0, 50.0), (30.0, 90.0)]),
            ("ring", &[(30.0, 80.0)]),
            ("ack", &[(30.0, 60.0)]),
        ]);
        // Default x: the largest at which all three were measured.
        let j = judge(&c, None, &d);
        assert_eq!(j.verdict, Verdict::Holds, "{}", j.detail);
        assert!(
            j.detail.contains("at x=30: nak 90 ≥ ring 80 ≥ ack 60"),
            "{}",
            j.detail
        );
        // ring 84 vs ack 88: 84 ≥ 88 × 0.95 = 83.6 holds at the edge ...
        let d2 = data(&[
            ("nak", &[(30.0, 90.0)]),
            ("ring", &[(30.0, 84.0)]),
            ("ack", &[(30.0, 88.0)]),
        ]);
        assert_eq!(v(&c, None, &d2), Verdict::Holds);
        // ... 83 does not.
        let d3 = data(&[
            ("nak", &[(30.0, 90.0)]),
            ("ring", &[(30.0, 83.0)]),
            ("ack", &[(30.0, 88.0)]),
        ]);
        let j = judge(&c, None, &d3);
        assert_eq!(j.verdict, Verdict::DoesNotHold);
        assert!(j.detail.contains("ring 83 < ack 88"), "{}", j.detail);
        // A series missing at the x asked for.
        assert_eq!(v(&c, Some(1.0), &d), Verdict::NotMeasured);
        assert_eq!(
            v(&c, None, &data(&[("nak", &[(1.0, 1.0)])])),
            Verdict::NotMeasured
        );
    }

    #[test]
    fn flat_compares_max_with_min_plus_tolerance() {
        let c = claim(Flat, &["a"], None, 0.10);
        assert_eq!(
            v(&c, None, &data(&[("a", &[(1.0, 100.0), (2.0, 110.0)])])),
            Verdict::Holds
        );
        assert_eq!(
            v(&c, None, &data(&[("a", &[(1.0, 100.0), (2.0, 110.5)])])),
            Verdict::DoesNotHold
        );
        assert_eq!(
            v(&c, None, &data(&[("a", &[(1.0, 100.0)])])),
            Verdict::NotMeasured
        );
        assert_eq!(v(&c, None, &data(&[])), Verdict::NotMeasured);
    }

    #[test]
    fn increasing_and_decreasing_allow_tolerance_per_step() {
        let inc = claim(Increasing, &["a"], None, 0.05);
        let dec = claim(Decreasing, &["a"], None, 0.05);
        let rising = data(&[("a", &[(1.0, 10.0), (2.0, 20.0), (4.0, 19.0)])]);
        // 20 → 19 is a 5 % dip: still increasing within tolerance.
        assert_eq!(v(&inc, None, &rising), Verdict::Holds);
        assert_eq!(v(&dec, None, &rising), Verdict::DoesNotHold);
        let dipping = data(&[("a", &[(1.0, 10.0), (2.0, 20.0), (4.0, 18.9)])]);
        let j = judge(&inc, None, &dipping);
        assert_eq!(j.verdict, Verdict::DoesNotHold);
        assert!(j.detail.contains("from x=2 to x=4"), "{}", j.detail);
        let falling = data(&[("a", &[(1.0, 30.0), (2.0, 20.0), (4.0, 21.0)])]);
        assert_eq!(v(&dec, None, &falling), Verdict::Holds);
        let falling_too_little = data(&[("a", &[(1.0, 30.0), (2.0, 20.0), (4.0, 21.1)])]);
        assert_eq!(v(&dec, None, &falling_too_little), Verdict::DoesNotHold);
        assert_eq!(
            v(&dec, None, &data(&[("a", &[(1.0, 3.0)])])),
            Verdict::NotMeasured
        );
    }

    #[test]
    fn ratio_needs_value_times_one_minus_tolerance() {
        let c = claim(Ratio, &["a", "b"], Some(2.0), 0.05);
        let d = |a: f64| data(&[("a", &[(30.0, a)]), ("b", &[(30.0, 10.0)])]);
        assert_eq!(v(&c, None, &d(19.0)), Verdict::Holds); // 1.9 ≥ 1.9
        assert_eq!(v(&c, None, &d(18.9)), Verdict::DoesNotHold);
        assert_eq!(v(&c, Some(1.0), &d(30.0)), Verdict::NotMeasured);
        let j = judge(&c, None, &d(25.0));
        assert!(
            j.detail
                .contains("a 25 / b 10 = 2.5 vs 2 × (1 − 5 %) = 1.9"),
            "{}",
            j.detail
        );
    }

    #[test]
    fn below_and_above_are_strict() {
        let below = claim(Below, &["a"], Some(0.01), 0.05);
        let above = claim(Above, &["a"], Some(0.01), 0.05);
        let d = |y: f64| data(&[("a", &[(5.0, y)])]);
        assert_eq!(v(&below, None, &d(0.005)), Verdict::Holds);
        assert_eq!(v(&below, None, &d(0.01)), Verdict::DoesNotHold);
        assert_eq!(v(&above, None, &d(0.011)), Verdict::Holds);
        assert_eq!(v(&above, None, &d(0.01)), Verdict::DoesNotHold);
        assert_eq!(v(&above, Some(6.0), &d(1.0)), Verdict::NotMeasured);
    }

    #[test]
    fn near_allows_tolerance_times_value_either_side() {
        let c = claim(Near, &["a"], Some(68.0), 0.10);
        let d = |y: f64| data(&[("a", &[(30.0, y)])]);
        assert_eq!(v(&c, None, &d(74.8)), Verdict::Holds);
        assert_eq!(v(&c, None, &d(61.2)), Verdict::Holds);
        assert_eq!(v(&c, None, &d(74.9)), Verdict::DoesNotHold);
        assert_eq!(v(&c, None, &d(61.1)), Verdict::DoesNotHold);
        assert_eq!(v(&c, Some(1.0), &d(68.0)), Verdict::NotMeasured);
    }

    #[test]
    fn numbers_in_verdicts_are_short() {
        assert_eq!(num(92.0), "92");
        assert_eq!(num(85.123), "85.123");
        assert_eq!(num(1234.56), "1234.6");
        assert_eq!(num(0.0123), "0.0123");
        assert_eq!(num(2e9), "2.000e9");
        assert_eq!(num(1e6), "1000000");
    }
}
