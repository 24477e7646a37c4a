//! Parsers of flag values: each error says what was expected.

use super::*;

/// `host`'s first IPv4 address, at `port`; errors name it as `what` (the
/// flag or the role it came from).
pub fn ipv4_addr(host: &str, port: u16, what: &str) -> anyhow::Result<std::net::SocketAddr> {
    use anyhow::Context as _;
    use std::net::ToSocketAddrs as _;
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {what} {host:?}"))?
        .find(std::net::SocketAddr::is_ipv4)
        .with_context(|| format!("{what} {host:?} has no IPv4 address"))
}

pub(super) fn parse_sender(s: &str) -> Result<SenderArg, String> {
    let bad = || format!("invalid sender `{s}`: expected HOST or HOST:PORT, like 10.0.0.1:7701");
    let (host, port) = match s.rsplit_once(':') {
        Some((h, p)) => {
            let port = p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(bad)?;
            (h, Some(port))
        }
        None => (s, None),
    };
    if host.is_empty() || host.contains(':') || host.chars().any(char::is_whitespace) {
        return Err(bad());
    }
    Ok(SenderArg {
        host: host.to_owned(),
        port,
    })
}

pub(super) fn parse_probability(s: &str) -> Result<f64, String> {
    let p: f64 = s
        .parse()
        .map_err(|_| format!("invalid probability `{s}`: expected a number like 0.05"))?;
    if !(0.0..=1.0).contains(&p) {
        return Err(format!("probability {p} is outside 0..1 (5 % is 0.05)"));
    }
    Ok(p)
}

/// `--fec`: a block shape, or `None` for `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FecArg(pub Option<rmcast::FecShape>);

pub(super) fn parse_fec(s: &str) -> Result<FecArg, String> {
    rmcast::FecShape::from_setting(s).map(FecArg)
}

/// `--segment-size`: bytes, or `None` for `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentSize(pub Option<u64>);

pub(super) fn parse_segment_size(s: &str) -> Result<SegmentSize, String> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(SegmentSize(None));
    }
    parse_size(s)
        .map(|b| SegmentSize(Some(b)))
        .map_err(|e| format!("{e} (or `auto`)"))
}

pub(super) fn parse_size(s: &str) -> Result<u64, String> {
    rmcast::parse_size(s)
}

pub(super) fn parse_rate(s: &str) -> Result<u64, String> {
    let r = rmcast::parse_rate(s)?;
    if r == 0 {
        return Err("rate must be greater than zero".into());
    }
    Ok(r)
}
