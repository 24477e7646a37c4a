//! Process faults: a receiver SIGKILLed or SIGSTOPped mid-transfer, the
//! sender SIGKILLed mid-transfer.

use super::{Ctx, Lan, P, PEER_TIMEOUT, secs, setup};
use crate::procs::Exit;
use anyhow::{Result, ensure};
use std::time::{Duration, Instant};

/// Receivers give up on a silent sender after this (`--sender-timeout`).
pub(super) const SENDER_TIMEOUT: &str = "3s";
/// The largest RTO (rmcast's `rto_max`): removal waits for the stall poll.
pub(super) const RTO_MAX: Duration = Duration::from_millis(800);
/// Scheduling slack on a loaded 2-core box.
pub(super) const SLACK: Duration = Duration::from_secs(3);

/// How long the object takes at the link rate.
pub(super) fn transfer_time(lan: &Lan) -> Duration {
    Duration::from_secs_f64(lan.setup.size as f64 * 8.0 / lan.setup.rate_bits_per_s as f64)
}

/// Starts receivers h1..hN with `extra`, settles, starts the sender of
/// object 0 to all with `--wait 10s` and `sender_extra`.
pub(super) fn start(lan: &mut Lan, extra: &[&str], sender_extra: &[&str]) -> Result<(Vec<P>, P)> {
    let n = lan.setup.receivers as usize;
    let mut r = Vec::new();
    for i in 1..=n {
        r.push(lan.recv(i, extra)?);
    }
    lan.pause(Duration::from_millis(300));
    let mut args = vec!["--wait", "10s"];
    args.extend_from_slice(sender_extra);
    let s = lan.send(0, n, &args)?;
    Ok((r, s))
}

/// Waits for receiver `p` (host `i`) and checks it verified or failed
/// cleanly (nonzero exit; `finish` proves it left no visible file).
/// Returns whether it verified.
pub(super) fn verified_or_clean(lan: &mut Lan, p: P, i: usize, within: Duration) -> Result<bool> {
    let (exit, _) = lan.wait_exit(p, within)?;
    if exit == Exit::Code(0) {
        ensure!(
            lan.verified(i, 0)?,
            "h{i} exited 0 without a byte-exact copy"
        );
        Ok(true)
    } else {
        ensure!(
            matches!(exit, Exit::Code(c) if c != 0),
            "h{i} ended by {exit:?}, not by itself"
        );
        Ok(false)
    }
}

/// What the sender logs (warning) when it removes receiver `name`:
/// `receiver "h2" (rank 1) failed: REASON`.
pub(super) fn removal(name: &str) -> String {
    format!("receiver \"{name}\" (rank")
}

/// Waits until the sender `s` (watching [`removal`]`(name)`) names `name`,
/// at most `bound` after the fault at `t`; returns how long it took.
pub(super) fn wait_named(
    lan: &mut Lan,
    s: P,
    name: &str,
    t: Instant,
    bound: Duration,
) -> Result<Duration> {
    let needle = removal(name);
    let deadline = t + bound + SLACK;
    loop {
        crate::signals::check()?;
        if let Some(at) = lan.seen(s, &needle) {
            let took = at - t;
            ensure!(
                took <= bound,
                "the sender named {name} after {} (bound {})",
                secs(took),
                secs(bound)
            );
            return Ok(took);
        }
        ensure!(
            Instant::now() < deadline && lan.proc(s).ended.is_none(),
            "the sender did not name {name} within {}:\n{}",
            secs(bound + SLACK),
            lan.text(s)
        );
        lan.pause(Duration::from_millis(5));
    }
}

/// Waits (the transfer's time + `slack`) for the sender to exit 1 with
/// exactly `names` in its report's failures; returns the first one's
/// reason and when it exited.
pub(super) fn sender_failed_naming(
    lan: &mut Lan,
    s: P,
    names: &[&str],
    slack: Duration,
) -> Result<(String, Instant)> {
    let within = transfer_time(lan) + slack;
    let (exit, at) = lan.wait_exit(s, within)?;
    let text = lan.text(s);
    ensure!(
        exit == Exit::Code(1),
        "sender: {exit:?}, want exit 1:\n{text}"
    );
    let failures = lan.failures(s)?;
    let mut got: Vec<&str> = failures.iter().map(|(n, _)| n.as_str()).collect();
    got.sort_unstable();
    ensure!(
        got == names,
        "the sender's failures are {failures:?}, want {names:?}"
    );
    Ok((failures[0].1.clone(), at))
}

fn peer_timeout_arg() -> String {
    format!("{}ms", PEER_TIMEOUT.as_millis())
}

/// The bound on naming a receiver that went silent mid-transfer: the
/// peer timeout, counted from the stall poll (up to the largest RTO).
pub(super) fn naming_bound() -> Duration {
    PEER_TIMEOUT + RTO_MAX + SLACK
}

/// SIGKILL of h2 a quarter into the transfer. Expected: the sender names
/// h2 within the peer timeout + RTO + slack, and exits 1 with h2 (only) in
/// its failures once the others are done; h1 and h3 verify or fail
/// cleanly; h2's part file stays (nobody can remove it) until the next
/// `rmcast recv` into that directory, offered the same name, removes it
/// and receives a byte-exact copy.
pub(super) fn kill_receiver(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    let mut lan = Lan::new(ctx.work, ctx.rmcast, setup())?;
    let pt = peer_timeout_arg();
    let (r, s) = start(
        &mut lan,
        &["--sender-timeout", SENDER_TIMEOUT],
        &["--peer-timeout", &pt],
    )?;
    lan.watch(s, &removal("h2"));
    lan.wait_written(r[1], lan.setup.size / 4, Duration::from_secs(15))?;
    let t = Instant::now();
    lan.signal(r[1], libc::SIGKILL);
    let detect = wait_named(&mut lan, s, "h2", t, naming_bound())?;
    let (why, at) = sender_failed_naming(&mut lan, s, &["h2"], SLACK)?;
    let mut ok = 0;
    for (i, p) in [(1, r[0]), (3, r[2])] {
        ok += usize::from(verified_or_clean(&mut lan, p, i, Duration::from_secs(10))?);
    }
    let parts = lan.part_files(2);
    ensure!(
        parts.len() == 1,
        "the killed receiver's part file stays until the next recv: {parts:?}"
    );
    // The next receiver into the same directory, offered the same name.
    let r2 = lan.recv(2, &["--sender-timeout", SENDER_TIMEOUT])?;
    lan.pause(Duration::from_millis(300));
    let s2 = lan.send(0, 1, &["--wait", "10s"])?;
    let (e2, _) = lan.wait_exit(s2, Duration::from_secs(20))?;
    ensure!(
        e2 == Exit::Code(0),
        "second transfer to h2: {e2:?}\n{}",
        lan.text(s2)
    );
    let (e2r, _) = lan.wait_exit(r2, Duration::from_secs(5))?;
    ensure!(e2r == Exit::Code(0), "second h2: {e2r:?}");
    ensure!(lan.verified(2, 0)?, "h2's second copy is not byte-exact");
    let parts = lan.part_files(2);
    ensure!(parts.is_empty(), "stale part file not removed: {parts:?}");
    lan.finish()?;
    Ok((
        format!(
            "named h2 ({}); sender exit 1 after {}; {ok}/2 others verified; h2's part file \
             stayed, removed by the next recv",
            short(&why),
            secs(at - t)
        ),
        Some(detect),
    ))
}

/// SIGSTOP of h2 a quarter in, for the peer timeout + 2 s, then SIGCONT.
/// Expected: the sender names and removes h2 within the peer timeout +
/// RTO + slack and exits 1 with h2 (only) in its failures; h1 and h3
/// complete byte-exact; h2, resumed, ends by itself with a nonzero exit.
pub(super) fn stop_receiver(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    let mut lan = Lan::new(ctx.work, ctx.rmcast, setup())?;
    let pt = peer_timeout_arg();
    let (r, s) = start(
        &mut lan,
        &["--sender-timeout", SENDER_TIMEOUT],
        &["--peer-timeout", &pt],
    )?;
    lan.watch(s, &removal("h2"));
    lan.wait_written(r[1], lan.setup.size / 4, Duration::from_secs(15))?;
    let t = Instant::now();
    lan.signal(r[1], libc::SIGSTOP);
    let detect = wait_named(&mut lan, s, "h2", t, naming_bound())?;
    let stopped = PEER_TIMEOUT + Duration::from_secs(2);
    lan.pause(stopped.saturating_sub(t.elapsed()));
    lan.signal(r[1], libc::SIGCONT);
    let (why, at) = sender_failed_naming(&mut lan, s, &["h2"], SLACK)?;
    for (i, p) in [(1, r[0]), (3, r[2])] {
        let (e, _) = lan.wait_exit(p, Duration::from_secs(10))?;
        ensure!(e == Exit::Code(0), "h{i}: {e:?}\n{}", lan.text(p));
        ensure!(lan.verified(i, 0)?, "h{i}'s copy is not byte-exact");
    }
    let (e, _) = lan.wait_exit(r[1], Duration::from_secs(10))?;
    ensure!(
        matches!(e, Exit::Code(c) if c != 0),
        "resumed h2: {e:?}\n{}",
        lan.text(r[1])
    );
    let h2 = failure_of(&lan.text(r[1]));
    lan.finish()?;
    Ok((
        format!(
            "named h2 ({}); sender exit 1 after {}; h1, h3 byte-exact; h2 resumed and failed: {}",
            short(&why),
            secs(at - t),
            short(&h2)
        ),
        Some(detect),
    ))
}

/// Every receiver of `r` exits 1 by itself within its sender timeout plus
/// slack after the sender went away at `t` (waiting `extra` longer before
/// calling it stuck), leaving no part file; returns when the last one did.
fn receivers_end_by_themselves(
    lan: &mut Lan,
    r: &[P],
    t: Instant,
    extra: Duration,
) -> Result<Duration> {
    let bound = Duration::from_secs(3) + SLACK;
    let mut last = Duration::ZERO;
    for (k, p) in r.iter().enumerate() {
        let (e, at) = lan.wait_exit(*p, bound + extra)?;
        ensure!(e == Exit::Code(1), "h{}: {e:?}, want exit 1", k + 1);
        last = last.max(at - t);
        let parts = lan.part_files(k + 1);
        ensure!(parts.is_empty(), "h{} left {parts:?}", k + 1);
    }
    ensure!(
        last <= bound,
        "receivers took {} (bound {})",
        secs(last),
        secs(bound)
    );
    Ok(last)
}

/// SIGKILL of the sender a quarter in. Expected: every receiver ends by
/// itself within its sender timeout + slack, exit 1, without a
/// complete-looking file and without its part file.
pub(super) fn kill_sender(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    let mut lan = Lan::new(ctx.work, ctx.rmcast, setup())?;
    let (r, s) = start(&mut lan, &["--sender-timeout", SENDER_TIMEOUT], &[])?;
    lan.wait_written(r[0], lan.setup.size / 4, Duration::from_secs(15))?;
    let t = Instant::now();
    lan.signal(s, libc::SIGKILL);
    let last = receivers_end_by_themselves(&mut lan, &r, t, Duration::from_secs(10))?;
    let why = failure_of(&lan.text(r[0]));
    lan.finish()?;
    Ok((
        format!(
            "all 3 receivers exit 1 by themselves, no file: {}",
            short(&why)
        ),
        Some(last),
    ))
}

/// SIGSTOP of the sender a quarter in, for 2 s longer than the receivers'
/// sender timeout, then SIGCONT. Expected: every receiver ends by itself
/// within its sender timeout plus slack, exit 1, no file, no part file;
/// the resumed sender exits 1 within the peer timeout plus RTO and slack
/// with all three in its failures. The time is the last receiver's exit
/// after the stop.
pub(super) fn stop_sender(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    let mut lan = Lan::new(ctx.work, ctx.rmcast, setup())?;
    let pt = peer_timeout_arg();
    let (r, s) = start(
        &mut lan,
        &["--sender-timeout", SENDER_TIMEOUT],
        &["--peer-timeout", &pt],
    )?;
    lan.wait_written(r[0], lan.setup.size / 4, Duration::from_secs(15))?;
    let t = Instant::now();
    lan.signal(s, libc::SIGSTOP);
    let last = receivers_end_by_themselves(&mut lan, &r, t, Duration::from_secs(5))?;
    lan.pause((Duration::from_secs(3) + Duration::from_secs(2)).saturating_sub(t.elapsed()));
    let resumed = Instant::now();
    lan.signal(s, libc::SIGCONT);
    let (exit, at) = lan.wait_exit(s, naming_bound() + Duration::from_secs(10))?;
    let text = lan.text(s);
    ensure!(
        exit == Exit::Code(1),
        "resumed sender: {exit:?}, want 1:\n{text}"
    );
    let took = at - resumed;
    ensure!(
        took <= naming_bound(),
        "the resumed sender took {} (bound {})",
        secs(took),
        secs(naming_bound())
    );
    let failures = lan.failures(s)?;
    let mut names: Vec<&str> = failures.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    ensure!(
        names == ["h1", "h2", "h3"],
        "the sender's failures: {failures:?}"
    );
    let why = failure_of(&lan.text(r[0]));
    lan.finish()?;
    Ok((
        format!(
            "all 3 receivers exit 1 by themselves ({}); resumed sender exit 1 after {} naming all 3 ({})",
            short(&why),
            secs(took),
            short(&failures[0].1)
        ),
        Some(last),
    ))
}

/// A receiver's failure as it reported it (`--json`'s `error`), else the
/// last line of its output.
pub(super) fn failure_of(text: &str) -> String {
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v["error"].as_str().map(String::from))
        .unwrap_or_else(|| last_line(text))
}

/// At most 90 characters of `s`.
pub(super) fn short(s: &str) -> String {
    if s.chars().count() > 90 {
        format!("{}…", s.chars().take(90).collect::<String>())
    } else {
        s.to_string()
    }
}

/// The last non-empty line of a process's output, shortened.
pub(super) fn last_line(text: &str) -> String {
    let l = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    l.trim().to_string()
}
