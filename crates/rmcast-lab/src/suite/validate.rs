//! Checks of a suite file beyond its TOML shape: names, x values, series,
//! claims; each error names the experiment (and series or claim) at fault.

use super::{
    Backend, ClaimKind, Experiment, Metric, RMCAST_PROTOCOLS, SeriesKind, XKind, XValue, kind_name,
};
use anyhow::{Result, bail};

/// Refuses a name that is not `[a-z0-9-]+`.
pub(super) fn check_name(what: &str, s: &str) -> Result<()> {
    if s.is_empty()
        || !s
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        bail!("{what} `{s}` must match [a-z0-9-]+");
    }
    Ok(())
}

/// Checks one resolved experiment (`label` names it in errors).
pub(super) fn validate(label: &str, e: &Experiment) -> Result<()> {
    check_name(&format!("{label}: id"), &e.id)?;
    let xk = e.x_kind();
    if xk == XKind::Param {
        check_name(&format!("{label}: x"), &e.x.replace('_', "-"))?;
    }
    if e.values.is_empty() {
        bail!("{label}: `values` is empty");
    }
    if e.sim_values.as_ref().is_some_and(Vec::is_empty) {
        bail!("{label}: `sim_values` is empty");
    }
    for (field, vals) in [
        ("values", Some(&e.values)),
        ("sim_values", e.sim_values.as_ref()),
    ] {
        for v in vals.into_iter().flatten() {
            e.x_number(v)
                .map_err(|why| anyhow::anyhow!("{label}: {field}: {why}"))?;
        }
    }
    if xk == XKind::Receivers
        && let Some(v) = e.values.iter().find(|v| !matches!(v, XValue::Int(1..=250)))
        && e.backends.contains(&Backend::Lab)
    {
        bail!(
            "{label}: values: the lab hosts 1..=250 receivers, not `{}` (put larger groups in sim_values)",
            v.text()
        );
    }
    match xk {
        XKind::Receivers => {}
        _ => match e.receivers {
            None => bail!("{label}: `receivers` is required when x is not receivers"),
            Some(0) => bail!("{label}: `receivers` must be at least 1"),
            Some(_) => {}
        },
    }
    match (&e.size, xk) {
        (_, XKind::Size) => {}
        (None, _) => bail!("{label}: `size` is required when x is not size"),
        (Some(s), _) => {
            s.bytes()
                .map_err(|why| anyhow::anyhow!("{label}: size: {why}"))?;
        }
    }
    if e.backends.is_empty() {
        bail!("{label}: `backends` is empty");
    }
    if e.rates.len() != 1 {
        bail!(
            "{label}: `rates` must name exactly one link rate (got {}); use one experiment per rate",
            e.rates.len()
        );
    }
    crate::units::parse_rate_opt(&e.rates[0])
        .map_err(|why| anyhow::anyhow!("{label}: rates: {why}"))?;
    if !(0.0..1.0).contains(&e.loss) {
        bail!("{label}: `loss` must be in 0..1 (1 % is 0.01)");
    }
    if !(1.0..=1000.0).contains(&e.loss_burst) {
        bail!(
            "{label}: `loss_burst` is a mean burst length in frames, 1..=1000 (1: each frame lost on its own)"
        );
    }
    if e.loss_burst > 1.0 && e.backends.contains(&Backend::Lab) {
        bail!(
            "{label}: `loss_burst` = {} needs backends = [\"sim\"]: the lab's nftables rule drops each frame on its own",
            e.loss_burst
        );
    }
    if !(68..=65535).contains(&e.mtu) {
        bail!("{label}: `mtu` must be in 68..=65535");
    }
    if e.repeats == 0 {
        bail!("{label}: `repeats` must be at least 1");
    }
    if !(1..=1000).contains(&e.seeds) {
        bail!("{label}: `seeds` must be in 1..=1000");
    }
    if e.stall_s <= 0.0 || e.max_run_s <= 0.0 {
        bail!("{label}: `stall_s` and `max_run_s` must be positive");
    }
    if e.series.is_empty() {
        bail!("{label}: no [[experiment.series]]");
    }
    let mut uses_x = false;
    for (k, s) in e.series.iter().enumerate() {
        let sl = format!("{label}, series `{}`", s.name);
        if s.name.trim().is_empty() {
            bail!("{label}, series #{}: `name` is empty", k + 1);
        }
        if s.name.contains(['@', '/', '|']) {
            bail!("{sl}: the name may not contain @, / or |");
        }
        if e.series[..k].iter().any(|o| o.name == s.name) {
            bail!("{label}: duplicate series name `{}`", s.name);
        }
        match (s.kind, s.protocol.as_deref()) {
            (SeriesKind::Rmcast, None) => {}
            (SeriesKind::Rmcast, Some(p)) if RMCAST_PROTOCOLS.contains(&p) => {}
            (SeriesKind::Rmcast, Some(p)) => bail!(
                "{sl}: unknown rmcast protocol `{p}` (one of {})",
                RMCAST_PROTOCOLS.join(", ")
            ),
            (_, Some(_)) => bail!("{sl}: `protocol` applies to kind = \"rmcast\" only"),
            (_, None) => {}
        }
        if s.kind == SeriesKind::Cascade {
            bail!(
                "{sl}: kind = \"cascade\" needs a segmented testbed, which only scenarios have (`segments`, docs/lab.md)"
            );
        }
        if s.model
            && (s.kind != SeriesKind::Rmcast
                || !s.protocol.as_deref().is_some_and(|p| p.starts_with("tcp-"))
                || !matches!(
                    e.metric,
                    Metric::Seconds | Metric::LatencyMs | Metric::GoodputMbps
                ))
        {
            bail!(
                "{sl}: `model = true` is the formula of a TCP overlay: kind = \"rmcast\", a tcp-* protocol, and metric seconds, latency_ms or goodput_mbps"
            );
        }
        if let Some(f) = s.rate_fraction
            && !(0.01..=1.0).contains(&f)
        {
            bail!("{sl}: rate_fraction must be in 0.01..=1");
        }
        if let Some(k) = s.senders {
            let hunt = s
                .args
                .windows(2)
                .any(|w| w[0] == "--rate-control" && w[1] == "hunt");
            if !(1..=64).contains(&k) || (k > 1 && (s.kind != SeriesKind::Rmcast || !hunt)) {
                bail!(
                    "{sl}: senders must be 1..=64, above 1 only for rmcast with args --rate-control hunt"
                );
            }
        }
        let x_in_args = s.args.iter().chain(&s.recv_args).any(|a| a.contains("{x}"));
        if x_in_args && xk != XKind::Param {
            bail!(
                "{sl}: args use {{x}}, but x = {} is set by the runner, not by a tool argument",
                e.x
            );
        }
        uses_x |= x_in_args;
        for (px, py) in &s.paper {
            e.x_number(px)
                .map_err(|why| anyhow::anyhow!("{sl}: paper point x: {why}"))?;
            if !py.is_finite() {
                bail!("{sl}: paper point y must be a finite number");
            }
        }
        if let Some(b) = &s.backends
            && b.is_empty()
        {
            bail!("{sl}: `backends` is empty");
        }
    }
    if xk == XKind::Param && !uses_x {
        bail!(
            "{label}: x = `{}` is a parameter, but no series uses {{x}} in its args",
            e.x
        );
    }
    for (k, c) in e.claim.iter().enumerate() {
        let cl = format!("{label}, claim #{} ({:?})", k + 1, c.kind);
        for s in &c.series {
            if !e.series.iter().any(|o| &o.name == s) {
                bail!("{cl}: series `{s}` does not exist in this experiment");
            }
        }
        let n = c.series.len();
        let want = match c.kind {
            ClaimKind::Order => n >= 2,
            ClaimKind::Ratio => n == 2,
            _ => n == 1,
        };
        if !want {
            bail!(
                "{cl}: `{}` needs {} series, got {n}",
                kind_name(c.kind),
                match c.kind {
                    ClaimKind::Order => "two or more",
                    ClaimKind::Ratio => "exactly two",
                    _ => "exactly one",
                }
            );
        }
        let needs_value = matches!(
            c.kind,
            ClaimKind::Ratio | ClaimKind::Below | ClaimKind::Above | ClaimKind::Near
        );
        match (needs_value, c.value) {
            (true, None) => bail!("{cl}: `{}` needs `value`", kind_name(c.kind)),
            (true, Some(v)) if !v.is_finite() => bail!("{cl}: `value` must be finite"),
            _ => {}
        }
        if !(0.0..1.0).contains(&c.tolerance) {
            bail!("{cl}: `tolerance` must be in 0..1 (relative; 5 % is 0.05)");
        }
        if let Some(at) = &c.at {
            e.x_number(at)
                .map_err(|why| anyhow::anyhow!("{cl}: at: {why}"))?;
        }
    }
    Ok(())
}
