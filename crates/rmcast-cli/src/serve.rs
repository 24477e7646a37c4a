//! `rmcast serve`: a receiving service. It takes the sessions announced on
//! its group one after another, each into `--out` under the name its
//! sender gives, and logs one line per session. A session that fails or is
//! refused is reported and the service goes on; only what would fail every
//! next session too (the sockets, the output directory, the key) ends it.

use crate::args::ServeArgs;
use crate::{receiver_setup, report};
use anyhow::{Context, Result};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What the service does after a session's end.
enum Flow {
    On,
    Stop,
    /// An error every next session would meet too (sockets, settings).
    Fatal(rmcast::Error),
}

/// Serves until stopped, `--once`/`--sessions N` are done, or nothing is
/// announced for `--idle-timeout`. True when every session taken verified.
pub fn run(a: ServeArgs, cancel: Arc<AtomicBool>) -> Result<bool> {
    let (key, trust) = receiver_setup(&a.keys, &a.trust, &a.out, "serve")?;
    let mut cfg = rmcast::RecvConfig {
        group: a.group,
        iface: a.iface,
        out_dir: a.out.clone(),
        sender_timeout: a.sender_timeout.0,
        listen_timeout: a.idle_timeout.map(|d| d.0),
        cancel: Some(cancel.clone()),
        socket_buffer_bytes: usize::try_from(a.socket_buffer).unwrap_or(usize::MAX),
        max_bytes: a.max_size,
        no_clobber: a.no_clobber,
        merge_tree: !a.atomic_tree,
        group_key: key,
        trust,
        ..rmcast::RecvConfig::default()
    };
    if let Some(name) = a.name {
        cfg.name = name;
    }
    let limit = if a.once { Some(1) } else { a.sessions };
    if !a.json {
        eprintln!(
            "rmcast serve: {} on {} via {}, storing into {}{}",
            cfg.name,
            cfg.group,
            cfg.iface,
            a.out.display(),
            match limit {
                Some(n) => format!(", for {}", report::count(n, "session")),
                None => String::from("; Ctrl-C stops"),
            }
        );
    }
    let events = a.json_events.then(crate::events::Events::new);
    // On a terminal, the running session's progress; lines go above it.
    let bar = crate::progress_bar(a.json || a.json_events, "serve");
    let mut bar_progress = crate::progress_fn(&bar);
    let mut progress = |p: rmcast::Progress| {
        bar_progress(p);
        if let Some(ev) = &events {
            ev.progress(p);
        }
    };
    let say = |line: String| match &bar {
        Some(b) => b.suspend(|| eprintln!("{line}")),
        None => eprintln!("{line}"),
    };
    let (mut taken, mut failed) = (0u64, 0u64);
    // One session's end: logged; false when the service stops.
    let mut on_session = |result: Result<rmcast::RecvReport, rmcast::Error>| -> Flow {
        let ended = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs_f64();
        let flow = match result {
            Ok(r) => {
                taken += 1;
                let session = r.session.map_or_else(|| "?".into(), |s| s.to_string());
                let mut v = report::recv_json(&r);
                v["ended_unix_s"] = json!(ended);
                if let Some(ev) = &events {
                    ev.emit("session", json!({ "ok": r.verified, "report": v }));
                } else if a.json {
                    println!("{v}");
                } else {
                    say(format!(
                        "rmcast serve: session {session}: {}",
                        report::recv_line(&r)
                    ));
                }
                Flow::On
            }
            Err(rmcast::Error::Cancelled) => Flow::Stop,
            Err(e @ (rmcast::Error::Refused(_) | rmcast::Error::Failed(_))) => {
                taken += 1;
                failed += 1;
                let v = json!({ "ok": false, "error": e.to_string(), "ended_unix_s": ended });
                if let Some(ev) = &events {
                    ev.emit("session", json!({ "ok": false, "report": v }));
                } else if a.json {
                    println!("{v}");
                } else {
                    say(format!("rmcast serve: session failed: {e}; serving on"));
                }
                Flow::On
            }
            Err(rmcast::Error::NoSession(why)) => {
                if !a.json && !a.json_events {
                    say(format!("rmcast serve: {why} (--idle-timeout); stopping"));
                }
                failed += u64::from(limit.is_some());
                Flow::Stop
            }
            // What would fail every next session too: sockets, settings.
            Err(e) => Flow::Fatal(e),
        };
        match flow {
            Flow::On if limit.is_some_and(|n| taken >= n) => Flow::Stop,
            other => other,
        }
    };
    if a.max_concurrent > 1 {
        let mut fatal = None;
        rmcast::serve_to_dir(
            &cfg,
            usize::from(a.max_concurrent),
            Some(&mut progress),
            &mut |r| match on_session(r) {
                Flow::On => true,
                Flow::Stop => false,
                Flow::Fatal(e) => {
                    fatal = Some(e);
                    false
                }
            },
        )
        .context("rmcast serve cannot go on")?;
        if let Some(e) = fatal {
            return Err(e).context("rmcast serve cannot go on");
        }
    } else {
        // `on_session` says Stop once --once / --sessions N are done.
        loop {
            match on_session(rmcast::recv_to_dir(&cfg, Some(&mut progress))) {
                Flow::On => {}
                Flow::Stop => break,
                Flow::Fatal(e) => {
                    if cancel.load(Ordering::SeqCst) {
                        break;
                    }
                    return Err(e).context("rmcast serve cannot go on");
                }
            }
        }
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    if let Some(ev) = &events {
        ev.emit(
            "finished",
            json!({ "ok": failed == 0, "sessions": taken, "failed": failed }),
        );
    }
    if !a.json && !a.json_events {
        eprintln!(
            "rmcast serve: {} taken, {} failed",
            report::count(taken, "session"),
            failed
        );
    }
    Ok(failed == 0)
}
