//! What the commands print: a human summary on stderr, or exactly one JSON
//! object on stdout under `--json`.

use serde_json::{Value, json};

fn mib(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
    } else if bytes >= 1 << 10 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

/// The JSON object of a send (or demo) report.
pub fn send_json(r: &rmcast::SendReport, demo: Option<&rmcast::DemoReport>) -> Value {
    let mut v = r.to_json();
    if let Some(d) = demo {
        let files_ok = d.all_files_match;
        v["ok"] = json!(r.ok && files_ok);
        v["all_files_match"] = json!(files_ok);
        v["receiver_errors"] = json!(
            d.receivers
                .iter()
                .filter_map(|x| x.as_ref().err().cloned())
                .collect::<Vec<_>>()
        );
    }
    v
}

/// The names of `--expect` that no member of the session matches (a
/// member's name, or the host part of its default `HOST:PID` name).
pub fn never_came(expected: &[String], r: &rmcast::SendReport) -> Vec<String> {
    // A hybrid session's lobby receivers came even when the session never
    // formed and sent them away (they are no members then).
    let lobby = r.hybrid.iter().flat_map(|h| h.tcp.iter().chain(&h.refused));
    let came: Vec<&str> = (r.members.iter().map(|m| m.name.as_str()))
        .chain(lobby.map(String::as_str))
        .collect();
    expected
        .iter()
        .filter(|e| {
            !came.iter().any(|name| {
                *name == e.as_str()
                    || name
                        .split_once(':')
                        .is_some_and(|(host, _)| host == e.as_str())
            })
        })
        .cloned()
        .collect()
}

/// `send --json`'s object: the report and the expected receivers that
/// never came.
pub fn send_json_expected(r: &rmcast::SendReport, never_came: &[String]) -> Value {
    let mut v = send_json(r, None);
    v["never_came"] = json!(never_came);
    v
}

/// Prints a send report, with the expected receivers that never came.
pub fn print_send_expected(r: &rmcast::SendReport, json: bool, never_came: &[String]) {
    if json {
        println!("{}", send_json_expected(r, never_came));
        return;
    }
    if !never_came.is_empty() {
        eprintln!(
            "rmcast send: expected but never came: {}",
            never_came.join(", ")
        );
    }
    print_send(r, false, None);
}

/// Every receiver that came verified, but some never registered: the
/// session started without them (`--min-receivers`).
pub fn partial(r: &rmcast::SendReport) -> bool {
    r.missing > 0 && r.error.is_none() && r.verified == r.members.len()
}

/// Prints a send or demo report.
pub fn print_send(r: &rmcast::SendReport, json: bool, demo: Option<&rmcast::DemoReport>) {
    if json {
        println!("{}", send_json(r, demo));
        return;
    }
    let what = if demo.is_some() { "demo" } else { "send" };
    let ok = r.ok && demo.is_none_or(|d| d.all_files_match);
    // A failed transfer has no goodput: the figure would count bytes some
    // receiver never verified.
    let speed = if ok || partial(r) {
        format!(": {:.1} Mbit/s goodput", r.goodput_mbps)
    } else {
        String::from(", failed")
    };
    let fec = r
        .fec
        .map(|f| format!(", FEC {}", f.setting()))
        .unwrap_or_default();
    let protocol = match &r.auto {
        Some(_) => format!("{} (auto{fec})", r.protocol),
        None => format!("{}{fec}", r.protocol),
    };
    eprintln!(
        "rmcast {what}: {} to {} with {protocol} in {:.3} s{speed}",
        mib(r.bytes),
        count(r.receivers as u64, "receiver"),
        r.seconds,
    );
    let retx_pct = if r.data_packets == 0 {
        0.0
    } else {
        100.0 * r.retransmitted_packets as f64 / r.data_packets as f64
    };
    let per_data = if r.data_packets == 0 {
        0.0
    } else {
        r.control_packets as f64 / r.data_packets as f64
    };
    let parity = if r.stats.parity_packets == 0 {
        String::new()
    } else {
        format!(
            ", FEC parity {} ({:.1} %)",
            r.stats.parity_packets,
            100.0 * r.stats.parity_packets as f64 / r.data_packets.max(1) as f64
        )
    };
    eprintln!(
        "  data packets {}, retransmitted {} ({retx_pct:.1} %){parity}, control packets received {} ({per_data:.2} per data packet)",
        r.data_packets, r.retransmitted_packets, r.control_packets
    );
    eprintln!(
        "  {}/{} verified; {}",
        r.verified,
        count(r.receivers as u64, "receiver"),
        if r.sealed {
            "sealed under the group key"
        } else {
            "INSECURE: unauthenticated, in the clear"
        }
    );
    if let Some(h) = &r.hybrid {
        if !h.refused.is_empty() {
            eprintln!(
                "  hybrid: {} over multicast; {} did not hear the group within {} ms and were \
                 refused (a directory tree goes over multicast only): {}",
                h.multicast.len(),
                h.refused.len(),
                h.probe_wait.as_millis(),
                h.refused.join(", ")
            );
        } else if h.tcp.is_empty() {
            eprintln!("  hybrid: every receiver heard the group: all over multicast");
        } else {
            eprintln!(
                "  hybrid: {} over multicast, {} over {} (did not hear the group within {} ms): {}",
                h.multicast.len(),
                h.tcp.len(),
                h.tcp_protocol,
                h.probe_wait.as_millis(),
                h.tcp.join(", ")
            );
        }
    }
    if let Some(e) = &r.error {
        eprintln!("  error: {e}");
    }
    for f in &r.auth_failures {
        eprintln!("  did not authenticate: {f}");
    }
    for m in &r.members {
        if let (Some(from), true) = (m.caught_up_from, m.verified) {
            eprintln!(
                "  receiver {} ({} at {}) fell far behind the group and caught up over TCP \
                 from byte {from} (--laggard tcp): verified",
                m.rank, m.name, m.addr
            );
        }
    }
    for m in r.members.iter().filter(|m| !m.verified) {
        eprintln!(
            "  receiver {} ({} at {}) failed: {}",
            m.rank,
            m.name,
            m.addr,
            m.reason.as_deref().unwrap_or("did not confirm")
        );
    }
    if let Some(d) = demo {
        for e in d.receivers.iter().filter_map(|x| x.as_ref().err()) {
            eprintln!("  receiver error: {e}");
        }
        if !d.all_files_match {
            eprintln!("  received files differ from the original");
        }
    }
    if ok {
        eprintln!("  ok");
    } else if partial(r) {
        eprintln!(
            "  PARTIAL: every receiver that came verified; {} never registered (--min-receivers)",
            count(u64::from(r.missing), "receiver")
        );
    } else {
        eprintln!("  FAILED");
    }
}

/// "1 receiver", "8 receivers".
pub fn count(n: u64, noun: &str) -> String {
    plural(n, noun, &format!("{noun}s"))
}

/// "1 directory", "2 directories".
pub fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// Prints a receive report (or the reason it failed).
pub fn print_recv(r: Result<&rmcast::RecvReport, &str>, json: bool) {
    match (r, json) {
        (Ok(r), true) => println!("{}", recv_json(r)),
        (Err(e), true) => println!("{}", json!({ "ok": false, "error": e })),
        (Ok(r), false) => eprintln!("rmcast recv: {}", recv_line(r)),
        (Err(e), false) => eprintln!("rmcast recv: failed: {e}"),
    }
}

/// Prints several sessions' outcomes (`rmcast recv --sessions N`): one
/// line each, or one JSON object `{ok, sessions: [...]}`; true if all verified.
pub fn print_recv_sessions(
    results: &[Result<rmcast::RecvReport, rmcast::Error>],
    json: bool,
) -> bool {
    let ok = results.iter().all(|r| r.as_ref().is_ok_and(|r| r.verified));
    if json {
        let sessions: Vec<_> = results
            .iter()
            .map(|r| match r {
                Ok(r) => recv_json(r),
                Err(e) => json!({ "ok": false, "error": e.to_string() }),
            })
            .collect();
        println!("{}", json!({ "ok": ok, "sessions": sessions }));
    } else {
        for r in results {
            match r {
                Ok(r) => print_recv(Ok(r), false),
                Err(e) => print_recv(Err(&e.to_string()), false),
            }
        }
    }
    ok
}

/// "1.0 MiB verified and stored as DIR/NAME (0.1 s, 80.0 Mbit/s)", and
/// whether it replaced a file of that name.
pub fn recv_line(r: &rmcast::RecvReport) -> String {
    let what = match r.tree {
        Some(t) => format!(
            "a tree of {}, {} and {} ({})",
            count(t.files, "file"),
            plural(t.dirs, "directory", "directories"),
            count(t.symlinks, "symbolic link"),
            mib(r.bytes)
        ),
        None => mib(r.bytes),
    };
    format!(
        "{what} verified and stored as {} ({:.3} s, {:.1} Mbit/s){}{}",
        r.path
            .as_ref()
            .map_or_else(|| "<memory>".into(), |p| p.display().to_string()),
        r.seconds,
        r.goodput_mbps,
        if r.replaced {
            if r.tree.is_some() {
                "; it replaced the previous version of that directory"
            } else {
                "; it replaced the previous version of that file"
            }
        } else {
            ""
        },
        match r.caught_up_from {
            Some(from) => format!(
                "; it fell far behind the group, and the sender moved it to a TCP catch-up \
                 (--laggard tcp): bytes from {from} on came over TCP"
            ),
            None => String::new(),
        }
    )
}

/// `recv --json`'s object for one session.
pub fn recv_json(r: &rmcast::RecvReport) -> serde_json::Value {
    r.to_json()
}
