//! A slow receiver among fast ones: h3 can take in 20 Mbit/s (a tbf on its
//! switch port), the other 7 the LAN's 100. Waited for (`--laggard wait`,
//! the default), it sets the group's pace and everyone verifies; ejected
//! (`--laggard eject --laggard-after 1s`), it is named and the other 7
//! finish at their own pace.

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
    let (waited, _) = session(&mut lan, n, &[], 0)?;
    for i in 1..=n {
        ensure!(
            lan.verified(i, 0)?,
            "waiting: h{i}'s copy is not byte-exact"
        );
    }
    // Ejected: the others go on.
    let (ejected, s) = session(
        &mut lan,
        n,
        &["--laggard", "eject", "--laggard-after", "1s"],
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

/// One session of object `k` to all `n` with `extra` flags: its time from
/// the receivers' start to the sender's exit, and the sender.
fn session(lan: &mut Lan, n: usize, extra: &[&str], k: usize) -> Result<(Duration, P)> {
    let s = lan.send(k, n, extra)?;
    lan.pause(Duration::from_millis(300));
    let t = Instant::now();
    let r: Vec<P> = (1..=n).map(|i| lan.recv(i, &[])).collect::<Result<_>>()?;
    let (exit, at) = lan.wait_exit(s, Duration::from_secs(30))?;
    let want = if extra.is_empty() { 0 } else { 1 };
    ensure!(
        exit == Exit::Code(want),
        "sender {extra:?}: {exit:?}, want exit {want}\n{}",
        lan.text(s)
    );
    for &p in &r {
        let _ = lan.wait_exit(p, Duration::from_secs(15))?;
    }
    Ok((at - t, s))
}
