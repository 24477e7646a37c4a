//! Group faults: a receiver joining late, and two transfers on one group
//! and port.

use super::process::{SENDER_TIMEOUT, SLACK, failure_of, last_line, short, transfer_time};
use super::{Ctx, GROUP, Lan, PEER_TIMEOUT, Setup, secs, setup};
use crate::procs::Exit;
use anyhow::{Result, ensure};
use std::time::{Duration, Instant};

/// h3 starts 2 s after the sender began waiting (`--wait 10s`).
/// Expected: all three complete byte-exact; the time is from h3's start
/// to the sender's success.
pub(super) fn late_joiner(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    let mut lan = Lan::new(ctx.work, ctx.rmcast, setup())?;
    let recv = ["--sender-timeout", SENDER_TIMEOUT];
    let mut r = vec![lan.recv(1, &recv)?, lan.recv(2, &recv)?];
    lan.pause(Duration::from_millis(300));
    let s = lan.send(0, 3, &["--wait", "10s"])?;
    lan.pause(Duration::from_secs(2));
    ensure!(
        !lan.proc(s).poll(),
        "the sender did not wait:\n{}",
        lan.text(s)
    );
    let t = Instant::now();
    r.push(lan.recv(3, &recv)?);
    let (exit, at) = lan.wait_exit(s, Duration::from_secs(20))?;
    ensure!(exit == Exit::Code(0), "sender: {exit:?}\n{}", lan.text(s));
    for (k, p) in r.iter().enumerate() {
        let (e, _) = lan.wait_exit(*p, Duration::from_secs(5))?;
        ensure!(e == Exit::Code(0), "h{}: {e:?}\n{}", k + 1, lan.text(*p));
        ensure!(lan.verified(k + 1, 0)?, "h{} not byte-exact", k + 1);
    }
    lan.finish()?;
    Ok((
        "h3 joined 2 s into --wait; all 3 byte-exact".into(),
        Some(at - t),
    ))
}

/// Two senders on h0, same group and port, different objects, each for
/// both receivers (`--wait 4s`). Expected: every process ends by itself;
/// a sender succeeds only if both receivers verified its object, else it
/// exits 1; a receiver verifies the object it took or fails with "other
/// sessions announced on this group and not taken"; every receiver logs
/// "another session on GROUP". The time is from the second sender's
/// start to the last exit. (Here both receivers usually take the first
/// announced session: it succeeds and the other waits out `--wait`.)
pub(super) fn colliding_sessions(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    collide(ctx, 2)
}

/// As [`colliding_sessions`], but each sender waits for 3 receivers and
/// only 2 exist, so neither session can start, whichever the receivers
/// took. Expected: both senders exit 1, both receivers fail and their
/// failure names the session they did not take.
pub(super) fn colliding_sessions_stuck(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    collide(ctx, 3)
}

fn collide(ctx: &Ctx, wanted: usize) -> Result<(String, Option<Duration>)> {
    let mut lan = Lan::new(
        ctx.work,
        ctx.rmcast,
        Setup {
            receivers: 2,
            ..setup()
        },
    )?;
    let recv = ["--sender-timeout", SENDER_TIMEOUT];
    let r = [lan.recv(1, &recv)?, lan.recv(2, &recv)?];
    lan.pause(Duration::from_millis(300));
    let pt = format!("{}ms", PEER_TIMEOUT.as_millis());
    let sender = ["--wait", "4s", "--peer-timeout", &pt];
    let a = lan.send(0, wanted, &sender)?;
    let b = lan.send(1, wanted, &sender)?;
    let t = Instant::now();
    // The sender that lost waits out --wait; the other transfers.
    let bound = Duration::from_secs(4) + 2 * transfer_time(&lan) + 2 * SLACK;
    let mut last = Duration::ZERO;
    let mut senders = Vec::new();
    for (k, p) in [(0, a), (1, b)] {
        let (e, at) = lan.wait_exit(p, bound + Duration::from_secs(10))?;
        last = last.max(at.saturating_duration_since(t));
        let ok = e == Exit::Code(0);
        ensure!(
            ok || e == Exit::Code(1),
            "sender {k}: {e:?}\n{}",
            lan.text(p)
        );
        if ok {
            for i in 1..=2 {
                ensure!(
                    lan.verified(i, k)?,
                    "sender {k} succeeded but h{i} lacks its object"
                );
            }
        }
        senders.push(if ok {
            "ok".to_string()
        } else {
            format!("exit 1 ({})", short(&failure_of(&lan.text(p))))
        });
    }
    let mut receivers = Vec::new();
    for (k, p) in r.iter().enumerate() {
        let i = k + 1;
        let (e, at) = lan.wait_exit(*p, Duration::from_secs(10))?;
        last = last.max(at.saturating_duration_since(t));
        let text = lan.text(*p);
        ensure!(
            text.contains(&format!("another session on {GROUP}")),
            "h{i} does not name the other session:\n{text}"
        );
        if e == Exit::Code(0) {
            ensure!(
                lan.verified(i, 0)? || lan.verified(i, 1)?,
                "h{i} exited 0 without a byte-exact copy"
            );
            receivers.push(format!("h{i} ok"));
        } else {
            ensure!(matches!(e, Exit::Code(c) if c != 0), "h{i} ended by {e:?}");
            ensure!(
                text.contains("other sessions announced on this group and not taken"),
                "h{i}'s failure does not name the other session:\n{}",
                last_line(&text)
            );
            receivers.push(format!("h{i} failed naming it"));
        }
    }
    ensure!(last <= bound, "took {} (bound {})", secs(last), secs(bound));
    if wanted > 2 {
        ensure!(
            senders.iter().all(|x| x != "ok") && receivers.iter().all(|x| !x.ends_with(" ok")),
            "a session ran with 2 of {wanted} receivers: senders {senders:?}, receivers {receivers:?}"
        );
    }
    lan.finish()?;
    Ok((
        format!(
            "senders: {}; receivers: {}; both named the other session",
            senders.join(", "),
            receivers.join(", ")
        ),
        Some(last),
    ))
}
