//! `--json-events`: one JSON object per line on stdout for each event of a
//! session, for dashboards and scripts: `joined`, `started_short`,
//! `chose` (what `--protocol auto` chose, and why), `all_joined`,
//! `receiver_done`, `receiver_failed`, `receiver_moved` (`--laggard tcp`:
//! to a TCP catch-up; `receiver_done` or `receiver_failed` follows),
//! `other_session`
//! (sender), `progress` (at most once a second, and on every change of
//! phase), and `finished` last, carrying the report `--json` would print.
//! Every object has `event` and `t` (seconds since the command started).

use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Writes the events of one command.
pub struct Events {
    start: Instant,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    last_progress: Option<Instant>,
    last_phase: &'static str,
    /// Receivers' names by rank, from their `joined` events.
    names: HashMap<u16, String>,
}

impl Events {
    pub fn new() -> Arc<Events> {
        Arc::new(Events {
            start: Instant::now(),
            state: Mutex::new(State::default()),
        })
    }

    /// Writes one event line (and flushes: a reader sees it at once).
    pub fn emit(&self, event: &str, mut fields: Value) {
        fields["event"] = json!(event);
        fields["t"] = json!((self.start.elapsed().as_secs_f64() * 1000.0).round() / 1000.0);
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{fields}");
        let _ = out.flush();
    }

    /// A progress report: written once a second, or when the phase changes.
    pub fn progress(&self, p: rmcast::Progress) {
        let now = Instant::now();
        {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let due = s
                .last_progress
                .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1));
            if !due && s.last_phase == p.phase {
                return;
            }
            s.last_progress = Some(now);
            s.last_phase = p.phase;
        }
        let mut v = json!({
            "phase": p.phase,
            "bytes": p.done_bytes,
            "total": p.total_bytes,
        });
        if let Some((joined, wanted)) = p.joined {
            v["joined"] = json!(joined);
            v["wanted"] = json!(wanted);
        }
        self.emit("progress", v);
    }

    /// A sender's event from the library.
    pub fn sender(&self, e: &rmcast::SenderEvent) {
        use rmcast::SenderEvent as E;
        let name_of = |rank: u16| {
            let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            s.names.get(&rank).cloned().unwrap_or_default()
        };
        match e {
            E::Joined { rank, name, addr } => {
                self.state
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .names
                    .insert(*rank, name.clone());
                self.emit(
                    "joined",
                    json!({ "rank": rank, "name": name, "addr": addr.to_string() }),
                );
            }
            E::StartedShort { joined, wanted } => {
                self.emit(
                    "started_short",
                    json!({ "joined": joined, "wanted": wanted }),
                );
            }
            E::Chose(c) => self.emit(
                "chose",
                json!({
                    "protocol": rmcast::protocol_name(c.protocol),
                    "fec": rmcast::auto::fec_text(c.fec),
                    "window": c.window,
                    "row": c.row + 1,
                    "explain": c.to_string(),
                }),
            ),
            E::AllJoined => self.emit("all_joined", json!({})),
            E::Verified { rank } => {
                self.emit(
                    "receiver_done",
                    json!({ "rank": rank, "name": name_of(*rank) }),
                );
            }
            E::MemberFailed { rank, name, reason } => self.emit(
                "receiver_failed",
                json!({ "rank": rank, "name": name, "reason": reason }),
            ),
            E::Moved {
                rank,
                name,
                addr,
                from,
                reason,
            } => self.emit(
                "receiver_moved",
                json!({
                    "rank": rank,
                    "name": name,
                    "addr": addr.to_string(),
                    "from": from,
                    "reason": reason,
                }),
            ),
            E::OtherSession { session, sender } => self.emit(
                "other_session",
                json!({ "session": session.to_string(), "sender": sender.to_string() }),
            ),
            E::Accepted { .. } | E::Finished => {}
        }
    }
}
