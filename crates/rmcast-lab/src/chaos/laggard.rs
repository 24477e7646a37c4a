//! A slow receiver among fast ones: h3 can take in 20 Mbit/s (a tbf on its
//! switch port), the other 7 the LAN's 100. Waited for (`--laggard wait`),
//! it sets the group's pace and everyone verifies; ejected (`--laggard
//! eject --laggard-after 1s`), it is named and the other 7 finish at their
//! own pace; moved to a TCP catch-up (`--laggard tcp`, the default), the
//! other 7 finish at their link's rate and h3 still verifies.

use super::process::SLACK;
use super::{Ctx, Lan, P, Setup, secs};
use crate::procs::Exit;
use anyhow::{Result, ensure};
use std::time::{Duration, Instant};

const SLOW: usize = 3;
const SLOW_RATE: u64 = 20_000_000;

pub(super) fn eject(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    let setup = Setup {
        receivers: 8,
        size: 8_000_000,
        rate_bits_per_s: 100_000_000,
    };
    let mut lan = Lan::new(ctx.work, ctx.rmcast, setup)?;
    lan.shape_download(SLOW, SLOW_RATE)?;
    let n = lan.setup.receivers as usize;
    let wire = Duration::from_secs_f64(lan.setup.size as f64 * 8.0 / 100e6);
    let slow_wire = Duration::from_secs_f64(lan.setup.size as f64 * 8.0 / SLOW_RATE as f64);

    // Waited for: everyone verifies, at the slow one's pace.
    let (waited, _, _) = session(&mut lan, n, &["--laggard", "wait"], 0, 0)?;
    for i in 1..=n {
        ensure!(
            lan.verified(i, 0)?,
            "waiting: h{i}'s copy is not byte-exact"
        );
    }
    // Ejected: the others go on.
    let (ejected, s, _) = session(
        &mut lan,
        n,
        &["--laggard", "eject", "--laggard-after", "1s"],
        1,
        1,
    )?;
    let failures = lan.failures(s)?;
    let names: Vec<&str> = failures.iter().map(|(n, _)| n.as_str()).collect();
    ensure!(
        names == [format!("h{SLOW}")],
        "ejected {failures:?}, want h{SLOW} alone"
    );
    ensure!(
        failures[0].1.contains("laggard"),
        "h{SLOW}'s reason: {}",
        failures[0].1
    );
    for i in (1..=n).filter(|&i| i != SLOW) {
        ensure!(
            lan.verified(i, 1)?,
            "ejecting: h{i}'s copy is not byte-exact"
        );
    }
    // The slow one needs 5 × the others' time; ejected after 1 s of it,
    // the rest at the link's rate: well under the waited session.
    ensure!(
        waited >= slow_wire.mul_f64(0.8),
        "waiting took {}, less than the slow link allows ({})",
        secs(waited),
        secs(slow_wire)
    );
    ensure!(
        ejected <= Duration::from_secs(1) + wire * 3 + SLACK,
        "ejecting took {} (the 1 s before the ejection, the link's {} for the rest)",
        secs(ejected),
        secs(wire)
    );
    lan.finish()?;
    Ok((
        format!(
            "h{SLOW} at 20 of 100 Mbit/s: waited for, all 8 verified in {} (its link needs {}); \
             with --laggard eject --laggard-after 1s it was named ({}) and the other 7 \
             verified in {} (the link's time {})",
            secs(waited),
            secs(slow_wire),
            failures[0].1.chars().take(50).collect::<String>(),
            secs(ejected),
            secs(wire)
        ),
        None,
    ))
}

/// The bar for the 7 fast receivers while h3 is moved and catches up: each
/// verifies at this fraction of the goodput all 8 reach on the same LAN
/// when none is slow (measured first, in the same run) or more.
const FAST_OF_BASELINE: f64 = 0.93;

/// `--laggard tcp` (the default): h3 is moved to a TCP catch-up once it has
/// been half a window behind for 100 ms; the other 7 go on at the link's
/// rate (the catch-up waits until the group's data is out, so it does not
/// take their uplink), and h3 fetches the rest at its 20 Mbit/s. Measured
/// against the same session on the same LAN with h3 at full speed, where
/// nobody may be moved.
pub(super) fn tcp(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    let setup = Setup {
        receivers: 8,
        size: 32_000_000,
        rate_bits_per_s: 100_000_000,
    };
    let mut lan = Lan::new(ctx.work, ctx.rmcast, setup)?;
    let n = lan.setup.receivers as usize;
    let slow_wire = Duration::from_secs_f64(lan.setup.size as f64 * 8.0 / SLOW_RATE as f64);
    let extra = ["--laggard-after", "100ms"];

    // Nobody slow: nobody moved; the goodput every receiver reaches here.
    let (_, s, receivers) = session(&mut lan, n, &extra, 0, 0)?;
    ensure!(
        caught_up(&lan, s)?.is_empty(),
        "nobody is slow, yet {:?} caught up over TCP",
        caught_up(&lan, s)?
    );
    let mut baseline = Vec::new();
    for i in 1..=n {
        ensure!(
            lan.verified(i, 0)?,
            "baseline: h{i}'s copy is not byte-exact"
        );
        baseline.push(goodput(&lan, receivers[i - 1])?);
    }
    let baseline = baseline.iter().sum::<f64>() / baseline.len() as f64;

    // h3 at 20 Mbit/s.
    lan.shape_download(SLOW, SLOW_RATE)?;
    let (took, s, receivers) = session(&mut lan, n, &extra, 1, 0)?;
    let moved = caught_up(&lan, s)?;
    ensure!(
        moved == [format!("h{SLOW}")],
        "caught up over TCP: {moved:?}, want h{SLOW} alone\n{}",
        lan.text(s)
    );
    let mut fast = Vec::new();
    for i in 1..=n {
        ensure!(lan.verified(i, 1)?, "h{i}'s copy is not byte-exact");
        if i == SLOW {
            let r = lan.report(receivers[i - 1])?;
            ensure!(
                r["caught_up_from"].as_u64().is_some(),
                "h{SLOW}'s report does not say it caught up over TCP: {r}"
            );
        } else {
            fast.push(goodput(&lan, receivers[i - 1])?);
        }
    }
    let slowest_fast = fast.iter().copied().fold(f64::INFINITY, f64::min);
    ensure!(
        slowest_fast >= FAST_OF_BASELINE * baseline,
        "the 7 fast receivers verified at {fast:.1?} Mbit/s, one under {FAST_OF_BASELINE} of \
         the {baseline:.1} Mbit/s all 8 reach when none is slow, while h{SLOW} caught up"
    );
    lan.finish()?;
    Ok((
        format!(
            "h{SLOW} at 20 of 100 Mbit/s, --laggard tcp --laggard-after 100ms: the other 7 \
             verified at {slowest_fast:.1} Mbit/s or more, {:.3} of the {baseline:.1} all 8 reach \
             with none slow ({:.3} of the link); h{SLOW} moved to a TCP catch-up and verified; \
             the session took {} (h{SLOW}'s link needs {} for the whole object)",
            slowest_fast / baseline,
            slowest_fast / 100.0,
            secs(took),
            secs(slow_wire)
        ),
        None,
    ))
}

/// The names the sender's report lists as caught up over TCP.
fn caught_up(lan: &Lan, s: P) -> Result<Vec<String>> {
    let report = lan.report(s)?;
    Ok((report["caught_up"].as_array().into_iter().flatten())
        .filter_map(|m| m["name"].as_str().map(str::to_owned))
        .collect())
}

/// A receiver's goodput (Mbit/s) from its `--json` report.
fn goodput(lan: &Lan, r: P) -> Result<f64> {
    let v = lan.report(r)?;
    v["goodput_mbps"]
        .as_f64()
        .ok_or_else(|| anyhow::anyhow!("no goodput in {v}"))
}

/// One session of object `k` to all `n` with `extra` flags, the sender
/// expected to exit `want`: its time from the receivers' start to the
/// sender's exit, the sender, and the receivers (h1..hN).
fn session(
    lan: &mut Lan,
    n: usize,
    extra: &[&str],
    k: usize,
    want: i32,
) -> Result<(Duration, P, Vec<P>)> {
    let s = lan.send(k, n, extra)?;
    lan.pause(Duration::from_millis(300));
    let t = Instant::now();
    let r: Vec<P> = (1..=n).map(|i| lan.recv(i, &[])).collect::<Result<_>>()?;
    let (exit, at) = lan.wait_exit(s, Duration::from_secs(60))?;
    for &p in &r {
        let _ = lan.wait_exit(p, Duration::from_secs(15))?;
    }
    ensure!(
        exit == Exit::Code(want),
        "sender {extra:?}: {exit:?}, want exit {want}\n{}\nh{SLOW}:\n{}",
        lan.text(s),
        lan.text(r[SLOW - 1])
    );
    Ok((at - t, s, r))
}
