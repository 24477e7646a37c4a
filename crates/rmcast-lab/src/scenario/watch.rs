//! Watching a run: start the receivers, let them settle, start the
//! sender(s), then poll until every process ended or the failure detector
//! fires (no progress for `stall_s`, the run's time limit, receivers that
//! outlive the sender by the grace time).

use super::Scenario;
use super::record::wait_reaped;
use crate::procs::{Exit, Proc, ProcSet};
use crate::signals;
use crate::testbed::Testbed;
use crate::tools::{Plan, ProcSpec};
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the watcher saw.
#[derive(Default)]
pub(crate) struct Watch {
    pub(crate) reasons: Vec<String>,
    pub(crate) sender_started: bool,
}

/// Starts the receivers, then the sender, and watches until all are done
/// or a failure is detected.
#[allow(clippy::too_many_arguments)]
pub(crate) fn watch_run(
    sc: &Scenario,
    tb: &Testbed,
    plan: &Plan,
    extra: &[ProcSpec],
    run_dir: &Path,
    out_dirs: &[PathBuf],
    set: &mut ProcSet,
    limit_s: f64,
) -> Result<Watch> {
    let mut w = Watch::default();
    start_receivers(tb, plan, run_dir, set)?;
    let n_recv = set.procs.len();
    settle(plan.settle_s)?;
    set.poll_all();
    if set.procs.iter().any(|p| p.ended.is_some()) {
        w.reasons.push(if plan.relays.is_empty() {
            "a receiver ended before the sender started".into()
        } else {
            "a receiver or relay ended before the sender started".into()
        });
        return Ok(w);
    }
    start_senders(tb, plan, extra, run_dir, set)?;
    w.sender_started = true;
    watch_until_done(sc, tb, plan, out_dirs, set, n_recv, limit_s, &mut w.reasons)?;
    Ok(w)
}

/// Starts every receiver of the plan, then its relays (cascades).
fn start_receivers(tb: &Testbed, plan: &Plan, run_dir: &Path, set: &mut ProcSet) -> Result<()> {
    for r in plan.receivers.iter().chain(&plan.relays) {
        set.procs.push(tb.spawn(
            r.host,
            &r.program,
            &r.args,
            &r.env,
            format!("{} {}", tb.node_name(r.host), base(&r.program, &r.args)),
            run_dir,
        )?);
    }
    Ok(())
}

/// Gives the receivers `settle_s` to join before the sender starts.
fn settle(settle_s: f64) -> Result<()> {
    let settle_until = Instant::now() + Duration::from_secs_f64(settle_s);
    while Instant::now() < settle_until {
        signals::check()?;
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Starts the plan's sender and the extra senders (numbered when there are several).
fn start_senders(
    tb: &Testbed,
    plan: &Plan,
    extra: &[ProcSpec],
    run_dir: &Path,
    set: &mut ProcSet,
) -> Result<()> {
    for (k, s) in std::iter::once(&plan.sender).chain(extra).enumerate() {
        let which = if extra.is_empty() {
            "sender".to_string()
        } else {
            format!("sender {}", k + 1)
        };
        set.procs.push(tb.spawn(
            s.host,
            &s.program,
            &s.args,
            &s.env,
            format!(
                "{} {} ({which})",
                tb.node_name(s.host),
                base(&s.program, &s.args)
            ),
            run_dir,
        )?);
    }
    Ok(())
}

/// Watches the running processes (receivers and relays first, `n_recv` of
/// them, then the senders) until all ended or a failure is detected; adds the
/// failures to `reasons` and kills what still runs.
#[allow(clippy::too_many_arguments)]
fn watch_until_done(
    sc: &Scenario,
    tb: &Testbed,
    plan: &Plan,
    out_dirs: &[PathBuf],
    set: &mut ProcSet,
    n_recv: usize,
    limit_s: f64,
    reasons: &mut Vec<String>,
) -> Result<()> {
    let t0 = Instant::now();
    let hard = t0 + Duration::from_secs_f64(limit_s);
    let stall = Duration::from_secs_f64(sc.stall_s);
    let grace = Duration::from_secs_f64(sc.grace_s);
    let mut last_progress = t0;
    let mut progress = 0u64;
    let mut next_probe = t0;
    let mut stopped = false;
    let mut daemons_done = vec![false; n_recv];
    loop {
        signals::check()?;
        let now = Instant::now();
        let all_ended = set.poll_all();
        if all_ended {
            break;
        }
        // Fault injection: stall one receiver.
        if let Some(k) = sc.inject.stop_receiver
            && !stopped
            && now >= t0 + Duration::from_secs_f64(sc.inject.stop_after_s)
            && (1..=n_recv).contains(&k)
        {
            set.procs[k - 1].signal(libc::SIGSTOP);
            stopped = true;
        }
        if now >= next_probe {
            next_probe = now + Duration::from_millis(250);
            let status = plan.daemon_status.as_ref().map(|(f, _)| f.as_slice());
            let seen = tb.probe(out_dirs, status);
            let p: u64 = seen.iter().map(|(b, _)| b).sum::<u64>()
                + set
                    .procs
                    .iter()
                    .filter(|p| p.ended.is_none())
                    .map(Proc::wchar)
                    .sum::<u64>();
            if p != progress {
                progress = p;
                last_progress = now;
            }
            if let Some((_, needle)) = &plan.daemon_status {
                for (i, (_, text)) in seen.iter().enumerate().skip(1) {
                    if text.as_deref().is_some_and(|t| t.contains(needle)) {
                        daemons_done[i - 1] = true;
                    }
                }
            }
        }
        // Several senders: done when the last one is.
        let sender_end = set.procs[n_recv..]
            .iter()
            .map(|p| p.ended.map(|e| e.at))
            .collect::<Option<Vec<_>>>()
            .and_then(|v| v.into_iter().max());
        let receivers_ended = set.procs[..n_recv].iter().all(|p| p.ended.is_some());
        if let Some(end) = sender_end {
            if plan.daemon_status.is_some() && daemons_done.iter().all(|&d| d) {
                for p in &mut set.procs[..n_recv] {
                    p.kill(libc::SIGTERM, "daemon finished");
                }
                wait_reaped(set, Duration::from_secs(2));
                break;
            }
            if receivers_ended {
                break;
            }
            let failed = set.procs[n_recv..]
                .iter()
                .any(|p| !matches!(p.ended.map(|e| e.exit), Some(Exit::Code(0))));
            let wait = if failed {
                grace.min(Duration::from_secs(3))
            } else {
                grace
            };
            if now.duration_since(end) > wait {
                for (k, p) in set.procs[..n_recv].iter_mut().enumerate() {
                    if p.ended.is_none() {
                        let state = p
                            .state()
                            .map(|c| format!(" (process state {c})"))
                            .unwrap_or_default();
                        let why = if plan.daemon_status.is_some() && daemons_done[k] {
                            "daemon finished".to_string()
                        } else {
                            format!(
                                "{} did not finish within {:.0} s after the sender ended{state}",
                                p.label,
                                wait.as_secs_f64()
                            )
                        };
                        if why != "daemon finished" {
                            reasons.push(why.clone());
                        }
                        p.kill(libc::SIGKILL, &why);
                    }
                }
                wait_reaped(set, Duration::from_secs(2));
                break;
            }
        }
        if now >= hard {
            let why = format!(
                "performance failure: not finished after {limit_s:.0} s (goodput below 1 % of expected, or the {:.0} s cap)",
                sc.max_run_s
            );
            reasons.push(why.clone());
            set.kill_all(&why);
            break;
        }
        if now.duration_since(last_progress) > stall {
            let states: Vec<String> = set
                .procs
                .iter()
                .filter(|p| p.ended.is_none())
                .map(|p| format!("{} state {}", p.label, p.state().unwrap_or('?')))
                .collect();
            let why = format!(
                "deadlock/livelock: no progress for {:.0} s (receivers' files and writes unchanged); still running: {}",
                stall.as_secs_f64(),
                states.join(", ")
            );
            reasons.push(why.clone());
            set.kill_all(&why);
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

/// A short label for a process: the program name, or the hidden subcommand.
fn base(program: &str, args: &[String]) -> String {
    let name = Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.starts_with("rmcast")
        && let Some(sub) = args.iter().find(|a| {
            matches!(
                a.as_str(),
                "send"
                    | "recv"
                    | "relay"
                    | "norm-send"
                    | "norm-recv"
                    | "tcp-send"
                    | "tcp-recv"
                    | "blast-send"
                    | "blast-recv"
            )
        })
    {
        return format!("{name} {sub}");
    }
    name
}
