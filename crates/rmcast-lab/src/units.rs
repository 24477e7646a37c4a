//! Sizes and rates as people write them: `4MiB`, `20MB`, `100mbit`, `none`.

/// Parses a byte count: `1000001`, `64KiB`, `4MiB`, `1GiB`, `20MB`, `1kB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid size `{s}`: expected e.g. 4MiB, 20MB, 1000001"))?;
    let scale: f64 = match unit.trim() {
        "" | "B" | "b" => 1.0,
        "k" | "kB" | "KB" => 1e3,
        "M" | "MB" => 1e6,
        "G" | "GB" => 1e9,
        "K" | "KiB" => 1024.0,
        "Mi" | "MiB" => 1024.0 * 1024.0,
        "Gi" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        other => return Err(format!("invalid size unit `{other}` in `{s}`")),
    };
    let bytes = value * scale;
    if !(1.0..=1e13).contains(&bytes) {
        return Err(format!("size `{s}` is out of range"));
    }
    Ok(bytes.round() as u64)
}

/// Parses a rate in bits per second: `100mbit`, `1gbit`, `500kbit`, `90000000`.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid rate `{s}`: expected e.g. 100mbit, 1gbit, none"))?;
    let scale = match unit.trim() {
        "" | "bit" => 1e0,
        "k" | "kbit" => 1e3,
        "m" | "mbit" => 1e6,
        "g" | "gbit" => 1e9,
        other => {
            return Err(format!(
                "invalid rate unit `{other}` in `{s}` (use kbit, mbit, gbit)"
            ));
        }
    };
    let r = value * scale;
    if !(1e3..=1e12).contains(&r) {
        return Err(format!("rate `{s}` is out of range"));
    }
    Ok(r.round() as u64)
}

/// Parses a rate or `none` (no shaping).
pub fn parse_rate_opt(s: &str) -> Result<Option<u64>, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        Ok(None)
    } else {
        parse_rate(s).map(Some)
    }
}

/// Writes a rate the way tc and the scenario files do: `100mbit`, `1gbit`, `none`.
pub fn fmt_rate(r: Option<u64>) -> String {
    match r {
        None => "none".into(),
        Some(r) if r % 1_000_000_000 == 0 => format!("{}gbit", r / 1_000_000_000),
        Some(r) if r % 1_000_000 == 0 => format!("{}mbit", r / 1_000_000),
        Some(r) if r % 1_000 == 0 => format!("{}kbit", r / 1_000),
        Some(r) => format!("{r}bit"),
    }
}

/// Writes a byte count compactly: `4MiB`, `20MB`, `1000001B`.
pub fn fmt_size(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}MiB", b >> 20)
    } else if b >= 1_000_000 && b.is_multiple_of(1_000_000) {
        format!("{}MB", b / 1_000_000)
    } else if b >= 1024 && b.is_multiple_of(1024) {
        format!("{}KiB", b >> 10)
    } else {
        format!("{b}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_rates_round_trip_through_their_names() {
        assert_eq!(parse_size("4MiB").unwrap(), 4 << 20);
        assert_eq!(parse_size("20MB").unwrap(), 20_000_000);
        assert_eq!(fmt_size(20_000_000), "20MB");
        assert_eq!(fmt_size(4 << 20), "4MiB");
        assert_eq!(parse_rate("100mbit").unwrap(), 100_000_000);
        assert_eq!(parse_rate_opt("none").unwrap(), None);
        assert_eq!(fmt_rate(Some(1_000_000_000)), "1gbit");
        assert!(parse_rate("100mbps").is_err());
        assert!(parse_size("x").is_err());
    }
}
