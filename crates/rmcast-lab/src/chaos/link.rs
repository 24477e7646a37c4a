//! Network faults: a receiver's link down for 5 s (tolerated with a longer
//! peer timeout, named with a shorter one), and 20 % loss on every receiver.

use super::process::{
    SENDER_TIMEOUT, SLACK, failure_of, naming_bound, removal, sender_failed_naming, short, start,
    transfer_time, verified_or_clean, wait_named,
};
use super::{Ctx, Lan, PEER_TIMEOUT, secs, setup};
use crate::procs::Exit;
use anyhow::{Result, ensure};
use std::time::{Duration, Instant};

const DOWN: Duration = Duration::from_secs(5);

/// Link down 5 s a quarter into the transfer, with `--peer-timeout 8s`
/// (receivers' sender timeout 10 s). Expected: nobody is named, everyone
/// completes byte-exact; the time is from the link coming back to the
/// sender's success.
pub(super) fn link_down_tolerated(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    let mut lan = Lan::new(ctx.work, ctx.rmcast, setup())?;
    let (r, s) = start(
        &mut lan,
        &["--sender-timeout", "10s"],
        &["--peer-timeout", "8s"],
    )?;
    lan.watch(s, &removal("h2"));
    lan.wait_written(r[1], lan.setup.size / 4, Duration::from_secs(15))?;
    lan.link(2, false)?;
    lan.pause(DOWN);
    lan.link(2, true)?;
    let up = Instant::now();
    let (exit, at) = lan.wait_exit(s, Duration::from_secs(20))?;
    ensure!(exit == Exit::Code(0), "sender: {exit:?}\n{}", lan.text(s));
    ensure!(lan.seen(s, &removal("h2")).is_none(), "h2 was named");
    for (k, p) in r.iter().enumerate() {
        // A verified receiver ends on the sender's Bye, or, when all three
        // were lost (0.8 % a receiver at 20 % loss), by itself once the
        // sender has been silent for --sender-timeout (10 s).
        let (e, _) = lan.wait_exit(*p, Duration::from_secs(15))?;
        ensure!(e == Exit::Code(0), "h{}: {e:?}\n{}", k + 1, lan.text(*p));
        ensure!(lan.verified(k + 1, 0)?, "h{} not byte-exact", k + 1);
    }
    let recovered = at.saturating_duration_since(up);
    lan.finish()?;
    Ok((
        format!(
            "nobody named; all 3 byte-exact, {} after the link came back",
            secs(recovered)
        ),
        Some(recovered),
    ))
}

/// Link down 5 s a quarter in, with `--peer-timeout 2s`. Expected: the
/// sender names h2 within the peer timeout + RTO + slack and exits 1 with
/// h2 (only) in its failures; h1 and h3 byte-exact; h2 ends by itself,
/// nonzero.
pub(super) fn link_down_named(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    let mut lan = Lan::new(ctx.work, ctx.rmcast, setup())?;
    let pt = format!("{}ms", PEER_TIMEOUT.as_millis());
    let (r, s) = start(
        &mut lan,
        &["--sender-timeout", SENDER_TIMEOUT],
        &["--peer-timeout", &pt],
    )?;
    lan.watch(s, &removal("h2"));
    lan.wait_written(r[1], lan.setup.size / 4, Duration::from_secs(15))?;
    let t = Instant::now();
    lan.link(2, false)?;
    let detect = wait_named(&mut lan, s, "h2", t, naming_bound())?;
    lan.pause(DOWN.saturating_sub(t.elapsed()));
    lan.link(2, true)?;
    let (why, at) = sender_failed_naming(&mut lan, s, &["h2"], SLACK)?;
    for (i, p) in [(1, r[0]), (3, r[2])] {
        let (e, _) = lan.wait_exit(p, Duration::from_secs(5))?;
        ensure!(e == Exit::Code(0), "h{i}: {e:?}\n{}", lan.text(p));
        ensure!(lan.verified(i, 0)?, "h{i} not byte-exact");
    }
    ensure!(
        !verified_or_clean(&mut lan, r[1], 2, Duration::from_secs(10))?,
        "h2 verified although it was removed"
    );
    let h2 = failure_of(&lan.text(r[1]));
    lan.finish()?;
    Ok((
        format!(
            "named h2 ({}); sender exit 1 after {}; h1, h3 byte-exact; h2 failed: {}",
            short(&why),
            secs(at.saturating_duration_since(t)),
            short(&h2)
        ),
        Some(detect),
    ))
}

/// 20 % random input loss (nftables) on every receiver. Expected: all
/// byte-exact within 30 s; the time is the whole transfer.
pub(super) fn loss_20(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    let mut lan = Lan::new(ctx.work, ctx.rmcast, setup())?;
    lan.set_loss(0.2)?;
    let (r, s) = start(&mut lan, &["--sender-timeout", "10s"], &[])?;
    let t = Instant::now();
    let bound = Duration::from_secs(30);
    let (exit, at) = lan.wait_exit(s, bound)?;
    ensure!(exit == Exit::Code(0), "sender: {exit:?}\n{}", lan.text(s));
    for (k, p) in r.iter().enumerate() {
        // A verified receiver ends on the sender's Bye, or, when all three
        // were lost (0.8 % a receiver at 20 % loss), by itself once the
        // sender has been silent for --sender-timeout (10 s).
        let (e, _) = lan.wait_exit(*p, Duration::from_secs(15))?;
        ensure!(e == Exit::Code(0), "h{}: {e:?}\n{}", k + 1, lan.text(*p));
        ensure!(lan.verified(k + 1, 0)?, "h{} not byte-exact", k + 1);
    }
    let drops = lan.loss_drops()?;
    ensure!(drops > 0, "the loss rule dropped nothing");
    let took = at - t;
    let ideal = transfer_time(&lan);
    let resent = lan.report(s)?["retransmitted_packets"].clone();
    lan.finish()?;
    Ok((
        format!(
            "all 3 byte-exact in {} ({drops} packets dropped, {resent} resent; {} at no loss)",
            secs(took),
            secs(ideal)
        ),
        Some(took),
    ))
}
