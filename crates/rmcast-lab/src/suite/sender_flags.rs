//! The rmcast sender flags a suite series gives in `args`, in the CLI's
//! names and syntax: passed through to `rmcast send` on the lab (with the
//! suite-only `--poll-interval-pct` turned into `--poll-interval`), or
//! applied to the simulator's sender configuration. Values go through the
//! CLI's own parsers (`rmcast::parse_size`, `parse_rate`, `parse_duration`).

use super::XValue;
use crate::units::arg_value;
use rmcast::{ProtocolId, Repair, SenderConfig, TreeShape, parse_duration};

/// Replaces `{x}` in every argument.
pub(super) fn substitute(args: &[String], x: Option<&XValue>) -> Vec<String> {
    args.iter()
        .map(|a| match x {
            Some(x) => a.replace("{x}", &x.text()),
            None => a.clone(),
        })
        .collect()
}

/// Parses a `--poll-interval-pct` value: a percentage in (0, 100].
fn parse_pct(v: &str) -> Result<f64, String> {
    v.parse()
        .ok()
        .filter(|p: &f64| *p > 0.0 && *p <= 100.0)
        .ok_or_else(|| format!("--poll-interval-pct `{v}` is not a percentage in (0, 100]"))
}

/// The poll interval `--poll-interval-pct P` stands for: max(1, window × P / 100).
fn poll_interval_for_pct(window: u32, pct: f64) -> u32 {
    ((f64::from(window) * pct / 100.0) as u32).max(1)
}

/// Turns the suite-only `--poll-interval-pct P` into rmcast's
/// `--poll-interval max(1, window × P / 100)` (window from `--window`, or the default).
pub fn lab_sender_args(args: &[String]) -> Result<Vec<String>, String> {
    let Some(pct) = arg_value(args, "--poll-interval-pct") else {
        return Ok(args.to_vec());
    };
    if arg_value(args, "--poll-interval").is_some() {
        return Err("give --poll-interval or --poll-interval-pct, not both".into());
    }
    let pct = parse_pct(pct)?;
    let window: u32 = match arg_value(args, "--window") {
        Some(w) => w
            .parse()
            .map_err(|_| format!("--window `{w}` is not a number"))?,
        None => SenderConfig::default().window,
    };
    let poll = poll_interval_for_pct(window, pct);
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--poll-interval-pct" {
            it.next();
        } else if a.starts_with("--poll-interval-pct=") {
        } else {
            out.push(a.clone());
            continue;
        }
        out.extend(["--poll-interval".to_string(), poll.to_string()]);
    }
    Ok(out)
}

/// Sender flags the simulator understands (the CLI's names and meanings).
pub const SIM_FLAGS: [&str; 12] = [
    "--window",
    "--fec",
    "--packet-size",
    "--poll-interval",
    "--poll-interval-pct",
    "--tree-height",
    "--tree-shape",
    "--repair",
    "--suppress",
    "--rto",
    "--peer-timeout",
    "--rate",
];

/// Splits sender arguments into (flag, value) pairs (`--flag value` or
/// `--flag=value`), refusing a flag not in `known` (named as `what`).
pub(super) fn flag_pairs<'a>(
    args: &'a [String],
    known: &[&str],
    what: &str,
) -> Result<Vec<(&'a str, String)>, String> {
    let mut pairs = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        if !known.contains(&flag) {
            return Err(format!(
                "{what} flag `{a}` is not known to the simulator (it knows {})",
                known.join(", ")
            ));
        }
        let v = match inline {
            Some(v) => v,
            None => it
                .next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))?,
        };
        pairs.push((flag, v));
    }
    Ok(pairs)
}

/// Applies rmcast sender flags to a configuration whose protocol is set.
pub fn apply_sender_flags(args: &[String], c: &mut SenderConfig) -> Result<(), String> {
    let mut pct: Option<f64> = None;
    for (flag, v) in flag_pairs(args, &SIM_FLAGS, "sender")? {
        let num = |what: &str| format!("{flag} `{v}` is not {what}");
        match flag {
            "--window" => c.window = v.parse().map_err(|_| num("a packet count"))?,
            "--packet-size" => {
                c.packet_size = rmcast::parse_size(&v)? as usize;
            }
            "--poll-interval" => {
                c.poll_interval = Some(v.parse().map_err(|_| num("a packet count"))?);
            }
            "--poll-interval-pct" => pct = Some(parse_pct(&v)?),
            "--tree-height" => c.tree_height = v.parse().map_err(|_| num("a chain length"))?,
            "--tree-shape" => {
                c.tree_shape = match v.as_str() {
                    "flat" => TreeShape::Flat,
                    "binary" => TreeShape::Binary,
                    _ => return Err(num("flat or binary")),
                }
            }
            "--repair" => {
                c.repair = match v.as_str() {
                    "selective" => Repair::Selective,
                    "go-back-n" | "gbn" => Repair::GoBackN,
                    _ => return Err(num("selective or go-back-n")),
                }
            }
            "--suppress" => c.suppress = parse_duration(&v)?,
            "--rto" => {
                c.rto = parse_duration(&v)?;
                c.rto_max = c.rto_max.max(c.rto);
            }
            "--peer-timeout" => c.peer_timeout = parse_duration(&v)?,
            "--fec" => c.fec = rmcast::FecShape::from_setting(&v)?,
            _ => c.rate_bits_per_s = Some(rmcast::parse_rate(&v)?),
        }
        if (flag == "--poll-interval" || flag == "--poll-interval-pct")
            && c.protocol != ProtocolId::NakPoll
        {
            return Err(format!("{flag} applies to protocol nak-poll only"));
        }
        if flag.starts_with("--tree-") && c.protocol != ProtocolId::Tree {
            return Err(format!("{flag} applies to protocol tree only"));
        }
    }
    if let Some(p) = pct {
        if c.poll_interval.is_some() {
            return Err("give --poll-interval or --poll-interval-pct, not both".into());
        }
        c.poll_interval = Some(poll_interval_for_pct(c.window, p));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcast::Repair;
    use std::time::Duration;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sender_flags_set_the_configuration_like_the_cli() {
        let mut c = SenderConfig {
            protocol: ProtocolId::NakPoll,
            ..SenderConfig::default()
        };
        apply_sender_flags(
            &strings(&[
                "--window",
                "40",
                "--packet-size=8KiB",
                "--poll-interval-pct",
                "50",
                "--repair",
                "go-back-n",
                "--suppress",
                "2ms",
                "--rto",
                "1s",
                "--fec",
                "64:2",
            ]),
            &mut c,
        )
        .unwrap();
        assert_eq!(c.fec, Some(rmcast::FecShape::new(64, 2)));
        assert_eq!(c.window, 40);
        assert_eq!(c.packet_size, 8192);
        assert_eq!(c.poll_interval, Some(20));
        assert_eq!(c.repair, Repair::GoBackN);
        assert_eq!(c.suppress, Duration::from_millis(2));
        assert_eq!(c.rto, Duration::from_secs(1));
        assert!(c.rto_max >= c.rto);
    }

    #[test]
    fn unknown_or_misplaced_sender_flags_are_errors() {
        let mut c = SenderConfig {
            protocol: ProtocolId::Ack,
            ..SenderConfig::default()
        };
        let e = apply_sender_flags(&strings(&["--fanout", "2"]), &mut c).unwrap_err();
        assert!(
            e.contains("`--fanout` is not known to the simulator"),
            "{e}"
        );
        let e = apply_sender_flags(&strings(&["--tree-height", "3"]), &mut c).unwrap_err();
        assert!(e.contains("tree only"), "{e}");
        let e = apply_sender_flags(&strings(&["--poll-interval", "3"]), &mut c).unwrap_err();
        assert!(e.contains("nak-poll only"), "{e}");
        let e = apply_sender_flags(&strings(&["--window"]), &mut c).unwrap_err();
        assert!(e.contains("needs a value"), "{e}");
        let e = apply_sender_flags(&strings(&["--window", "many"]), &mut c).unwrap_err();
        assert!(e.contains("`many` is not a packet count"), "{e}");
    }

    #[test]
    fn the_lab_gets_poll_interval_pct_as_a_poll_interval() {
        let a =
            lab_sender_args(&strings(&["--window", "100", "--poll-interval-pct", "85"])).unwrap();
        assert_eq!(a, strings(&["--window", "100", "--poll-interval", "85"]));
        let a = lab_sender_args(&strings(&["--poll-interval-pct=10"])).unwrap();
        assert_eq!(a, strings(&["--poll-interval", "51"]));
        assert!(lab_sender_args(&strings(&["--poll-interval-pct", "0"])).is_err());
        let plain = strings(&["--window", "8"]);
        assert_eq!(lab_sender_args(&plain).unwrap(), plain);
    }
}
