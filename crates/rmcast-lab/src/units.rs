//! Sizes and rates as people write them: `4MiB`, `20MB`, `100mbit`, `none`.

/// Parses a byte count with the CLI's rules (`rmcast::parse_size`:
/// `4MiB`, `4M` and `4k` are binary, `20MB` and `1kB` decimal), so a size
/// means the same in a scenario file and on the command line.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bytes = rmcast::parse_size(s)?;
    if bytes == 0 || bytes > 10_000_000_000_000 {
        return Err(format!("size `{s}` is out of range (1 B to 10 TB)"));
    }
    Ok(bytes)
}

/// Parses a rate in bits per second with the CLI's rules
/// (`rmcast::parse_rate`: `100mbit`, `1gbit`, `500kbit`, `90000000`).
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let r = rmcast::parse_rate(s)?;
    if !(1_000..=1_000_000_000_000).contains(&r) {
        return Err(format!("rate `{s}` is out of range (1kbit to 1000gbit)"));
    }
    Ok(r)
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

/// The value after `flag` in a tool's argument list (`--size 1024` or
/// `--size=1024`), the first occurrence.
pub fn arg_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == flag {
            return it.next().map(String::as_str);
        }
        if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            return Some(v);
        }
    }
    None
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
