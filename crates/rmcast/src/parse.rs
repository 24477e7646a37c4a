//! The size, rate and duration syntax of the command line, shared by the
//! CLI's flags and the lab's scenario and suite files.

use std::time::Duration;

/// Splits "12.5 MiB" into exact decimal digits and a unit, or says why not.
fn split(s: &str, what: &str, example: &str) -> Result<(u128, u32, String), String> {
    let t = s.trim();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(end);
    let bad =
        || format!("invalid {what} {s:?}: expected a number with an optional unit, like {example}");
    if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
        return Err(bad());
    }
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if frac.contains('.') || frac.len() > 18 {
        return Err(bad());
    }
    let digits = format!("{int}{frac}");
    let mantissa: u128 = digits.parse().map_err(|_| bad())?;
    Ok((
        mantissa,
        frac.len() as u32,
        unit.trim().to_ascii_lowercase(),
    ))
}

/// `mantissa / 10^scale * multiplier`, rounded down, if it fits in a u64.
fn scale(mantissa: u128, scale: u32, multiplier: u128, s: &str, what: &str) -> Result<u64, String> {
    let value = mantissa
        .checked_mul(multiplier)
        .map(|v| v / 10u128.pow(scale))
        .and_then(|v| u64::try_from(v).ok())
        .ok_or_else(|| format!("{what} {s:?} is too large"))?;
    Ok(value)
}

/// Parses a byte count: a plain number or one with a unit. Binary units:
/// `k`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB` (powers of 1024); decimal
/// units: `KB`, `MB`, `GB`, `TB` (powers of 1000); `B` is bytes. Units are
/// case-insensitive, fractions allowed ("1.5GiB"), rounded down.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let example = "64MiB, 10MB, 4k or 1000001";
    let (mantissa, frac, unit) = split(s, "size", example)?;
    let multiplier: u128 = match unit.as_str() {
        "" | "b" => 1,
        "k" | "ki" | "kib" => 1 << 10,
        "m" | "mi" | "mib" => 1 << 20,
        "g" | "gi" | "gib" => 1 << 30,
        "t" | "ti" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => {
            return Err(format!(
                "invalid size {s:?}: unknown unit {unit:?} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB or k, M, G, T), like {example}"
            ));
        }
    };
    scale(mantissa, frac, multiplier, s, "size")
}

/// Parses a rate in bits per second: a plain number or one with a decimal
/// unit `kbit`, `mbit`, `gbit`, `tbit` (also `k`, `m`, `g`, `t`, and an
/// optional `/s`, e.g. "90mbit", "1gbit", "12.5mbit/s"). Must be positive.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let example = "90mbit, 1gbit, 500kbit or 100000000";
    let (mantissa, frac, unit) = split(s, "rate", example)?;
    let unit = unit.strip_suffix("/s").unwrap_or(&unit).trim_end();
    let multiplier: u128 = match unit {
        "" | "bit" | "b" | "bps" => 1,
        "k" | "kbit" | "kb" => 1_000,
        "m" | "mbit" | "mb" => 1_000_000,
        "g" | "gbit" | "gb" => 1_000_000_000,
        "t" | "tbit" | "tb" => 1_000_000_000_000,
        "kbps" | "mbps" | "gbps" | "kib" | "mib" | "gib" => {
            return Err(format!(
                "invalid rate {s:?}: {unit:?} is ambiguous; give bits per second, like {example}"
            ));
        }
        _ => {
            return Err(format!(
                "invalid rate {s:?}: unknown unit {unit:?} (use bit, kbit, mbit, gbit), like {example}"
            ));
        }
    };
    let rate = scale(mantissa, frac, multiplier, s, "rate")?;
    if rate == 0 {
        return Err(format!(
            "invalid rate {s:?}: must be above 0 bits per second"
        ));
    }
    Ok(rate)
}

/// Parses a duration: `50ms`, `2s`, `1.5s`, `1m`, `250us`, `100ns`, `1h`;
/// a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration `{s}`: expected e.g. 50ms, 2s, 1.5s, 1m"))?;
    let scale = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "ns" => 1e-9,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "invalid duration unit `{other}` in `{s}`: use ns, us, ms, s, m or h"
            ));
        }
    };
    let secs = value * scale;
    if !secs.is_finite() || secs > 1e9 {
        return Err(format!("duration `{s}` is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A duration written like `50ms`, `2s`, `1.5s`, `1m`, `250us` (a flag's
/// value type: [`parse_duration`] through `FromStr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl std::str::FromStr for HumanDuration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_duration(s).map(HumanDuration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_binary_and_decimal_units() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1000001"), Ok(1_000_001));
        assert_eq!(parse_size("10MB"), Ok(10_000_000));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("4 kb"), Ok(4000));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size(" 7B "), Ok(7));
        assert_eq!(parse_size("2m"), Ok(2 << 20));
    }

    #[test]
    fn garbage_sizes_are_rejected_with_a_hint() {
        for bad in [
            "",
            "abc",
            "-1",
            "1.2.3",
            ".5k",
            "5.k",
            "10 parsecs",
            "1e6",
            "99999999999TiB",
        ] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad:?}: {e}");
        }
        assert!(parse_size("abc").unwrap_err().contains("64MiB"));
    }

    #[test]
    fn rates_in_bits_per_second() {
        assert_eq!(parse_rate("90mbit"), Ok(90_000_000));
        assert_eq!(parse_rate("1gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("500kbit"), Ok(500_000));
        assert_eq!(parse_rate("100000000"), Ok(100_000_000));
        assert_eq!(parse_rate("12.5mbit"), Ok(12_500_000));
        assert_eq!(parse_rate("1Gbit/s"), Ok(1_000_000_000));
    }

    #[test]
    fn garbage_rates_are_rejected() {
        for bad in ["", "fast", "0", "0mbit", "10mbps", "10 furlongs", "-5mbit"] {
            assert!(parse_rate(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_rate("10mbps").unwrap_err().contains("ambiguous"));
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("50ms").unwrap(), Duration::from_millis(50));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert!(
            parse_duration("fast")
                .unwrap_err()
                .contains("invalid duration")
        );
        assert!(parse_duration("5 parsecs").unwrap_err().contains("unit"));
    }
}
