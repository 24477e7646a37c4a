//! A full disk: h2's output directory is a 1 MB tmpfs, the object 4 MB.

use super::process::{
    SENDER_TIMEOUT, SLACK, failure_of, removal, sender_failed_naming, short, start, wait_named,
};
use super::{Ctx, Lan, setup};
use crate::procs::Exit;
use anyhow::{Result, ensure};
use std::time::{Duration, Instant};

/// Expected: h2 refuses the offer (or fails) naming "no space" or "does
/// not fit" and exits nonzero; the sender names h2 and exits 1 with h2
/// (only) in its failures; h1 and h3 complete byte-exact. The time is from
/// the sender's start to its naming h2.
pub(super) fn full_disk(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    let mut lan = Lan::new(ctx.work, ctx.rmcast, setup())?;
    lan.small_disk(2, 1_000_000)?;
    let (r, s) = start(&mut lan, &["--sender-timeout", SENDER_TIMEOUT], &[])?;
    let t = Instant::now();
    lan.watch(s, &removal("h2"));
    let detect = wait_named(&mut lan, s, "h2", t, Duration::from_secs(3))?;
    let (e2, _) = lan.wait_exit(r[1], Duration::from_secs(10))?;
    let h2 = failure_of(&lan.text(r[1]));
    ensure!(matches!(e2, Exit::Code(c) if c != 0), "h2: {e2:?}\n{h2}");
    let said = |x: &str| {
        let x = x.to_lowercase();
        x.contains("no space") || x.contains("does not fit")
    };
    ensure!(said(&h2), "h2 does not say why: {h2}");
    let (why, _) = sender_failed_naming(&mut lan, s, &["h2"], 2 * SLACK)?;
    ensure!(
        said(&why),
        "the sender's reason for h2 does not say why: {why}"
    );
    for (i, p) in [(1, r[0]), (3, r[2])] {
        let (e, _) = lan.wait_exit(p, Duration::from_secs(5))?;
        ensure!(e == Exit::Code(0), "h{i}: {e:?}\n{}", lan.text(p));
        ensure!(lan.verified(i, 0)?, "h{i} not byte-exact");
    }
    lan.finish()?;
    Ok((
        format!(
            "h2 refused ({}); sender exit 1 naming h2 ({}); h1, h3 byte-exact",
            short(&h2),
            short(&why)
        ),
        Some(detect),
    ))
}
