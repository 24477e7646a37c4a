//! The reports as JSON: one definition of the fields that `rmcast send
//! --json` / `rmcast recv --json` print and that the C library's
//! `rmcast_report_json` returns, so that every face of rmcast names them
//! alike.

use crate::{AuthStats, RecvReport, SendReport};
use serde_json::{Value, json};

/// The sealing counters: whether the session was sealed, and every packet
/// refused before the protocol saw it, by reason.
#[must_use]
pub fn auth_json(a: &AuthStats, sealed: bool) -> Value {
    json!({
        "sealed": sealed,
        "opened": a.opened,
        "refused": a.refused(),
        "unsealed": a.unsealed,
        "no_key": a.no_key,
        "malformed": a.malformed,
        "wrong_key": a.wrong_key,
        "unknown_session": a.unknown_session,
        "replayed": a.replayed,
        "too_old": a.too_old,
        "forged": a.forged,
    })
}

impl SendReport {
    /// The report as `rmcast send --json` prints it.
    #[must_use]
    pub fn to_json(&self) -> Value {
        let failures: Vec<Value> = self
            .members
            .iter()
            .filter(|m| !m.verified)
            .map(|m| {
                json!({
                    "rank": m.rank,
                    "name": m.name,
                    "addr": m.addr.to_string(),
                    "reason": m.reason.clone().unwrap_or_else(|| "did not confirm".into()),
                })
            })
            .collect();
        // `--laggard tcp`: who fell behind and caught up over TCP, and how
        // that ended (a failure is also in `failures`).
        let caught_up: Vec<Value> = (self.members.iter())
            .filter_map(|m| {
                let from = m.caught_up_from?;
                Some(json!({
                    "rank": m.rank,
                    "name": m.name,
                    "addr": m.addr.to_string(),
                    "from_bytes": from,
                    "verified": m.verified,
                }))
            })
            .collect();
        let control_per_data = if self.data_packets == 0 {
            0.0
        } else {
            self.control_packets as f64 / self.data_packets as f64
        };
        let s = &self.stats;
        let auto = self.auto.as_ref().map(|c| {
            let row = c.row();
            json!({
                "receivers": c.inputs.receivers,
                "object_bytes": c.inputs.object_bytes,
                "rate_bits_per_s": c.inputs.rate_bits_per_s,
                "delta": c.inputs.delta,
                "row": c.row + 1,
                "row_min_receivers": row.min_receivers,
                "why": row.why,
                "notes": c.notes,
                "window": c.window,
                "poll_interval": c.poll_interval,
                "explain": c.to_string(),
            })
        });
        let hybrid = self.hybrid.as_ref().map(|h| {
            json!({
                "multicast": h.multicast,
                "tcp": h.tcp,
                "tcp_protocol": h.tcp_protocol,
                "probe_wait_ms": h.probe_wait.as_millis() as u64,
                "refused": h.refused,
                "why": (!h.tcp.is_empty()).then(|| format!(
                    "{} receiver(s) did not hear the multicast session within {} ms of asking",
                    h.tcp.len(),
                    h.probe_wait.as_millis()
                )),
            })
        });
        json!({
            "protocol": self.protocol,
            "hybrid": hybrid,
            "fec": rmcast_proto::auto::fec_text(self.fec),
            "auto": auto,
            "receivers": self.receivers,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "data_seconds": self.data_seconds,
            "goodput_mbps": self.goodput_mbps,
            "verified": self.verified,
            "data_packets": self.data_packets,
            "retransmitted_packets": self.retransmitted_packets,
            "parity_packets": s.parity_packets,
            "control_packets": self.control_packets,
            "control_per_data_packet": control_per_data,
            "skipped_bytes": self.skipped_bytes,
            "skipped_packets": s.skipped_packets,
            "have_reports": s.have_reports,
            "acks": s.acks,
            "naks": s.naks,
            "timeouts": s.timeouts,
            "repolls": s.repolls,
            "unicast_repairs": s.unicast_repairs,
            "multicast_repairs": s.multicast_repairs,
            "group_naks": s.group_naks,
            "group_packets": s.group_packets,
            "group_sent": s.group_sent,
            "auth": auth_json(&s.auth, self.sealed),
            "auth_failures": self.auth_failures,
            "ok": self.ok,
            "error": self.error,
            "missing": self.missing,
            "failures": failures,
            "caught_up": caught_up,
        })
    }
}

impl RecvReport {
    /// The report as `rmcast recv --json` prints it.
    #[must_use]
    pub fn to_json(&self) -> Value {
        let s = &self.stats;
        json!({
            "ok": self.verified,
            "name": self.name,
            "path": self.path.as_ref().map(|p| p.display().to_string()),
            "bytes": self.bytes,
            "seconds": self.seconds,
            "goodput_mbps": self.goodput_mbps,
            "rank": self.rank,
            "session": self.session.map(|s| s.to_string()),
            "verified": self.verified,
            "replaced": self.replaced,
            "tree": self.tree.map(|t| json!({ "files": t.files, "dirs": t.dirs, "symlinks": t.symlinks })),
            "held_bytes": self.held_bytes,
            "held_packets": s.held_packets,
            "caught_up_from": self.caught_up_from,
            "group_ok": self.group.as_ref().map(Result::is_ok),
            "group_error": self.group.as_ref().and_then(|g| g.as_ref().err()),
            "data_packets": s.data_packets,
            "duplicates": s.duplicates,
            "acks": s.acks,
            "naks": s.naks,
            "malformed": s.malformed,
            "foreign": s.foreign,
            "auth": auth_json(&s.auth, s.auth.opened > 0 || s.auth.sealed > 0),
            "rate_naks": s.rate_naks,
            "rate_naks_heard": s.rate_naks_heard,
            "naks_suppressed": s.naks_suppressed,
        })
    }
}
