//! What a session reports to C: a few plain fields, the receivers that
//! failed with their names and reasons, and the whole report as JSON (the
//! fields of the CLI's `--json`).

use crate::guard;
use rmcast::stream::{MemberInfo, StreamRecvReport, StreamSendReport};
use serde_json::{Value, json};
use std::ffi::{CString, c_char};

/// A receiver that did not get everything, as a report names it.
struct Failure {
    name: CString,
    addr: CString,
    reason: CString,
}

/// The report of a finished session (object send or receive, stream send
/// or receive), read with the `rmcast_report_*` functions and freed with
/// `rmcast_report_free`. Strings it hands out live as long as it does.
pub struct RmcastReport {
    pub(crate) ok: bool,
    bytes: u64,
    seconds: f64,
    goodput_mbps: f64,
    receivers: u64,
    verified: u64,
    error: Option<CString>,
    name: Option<CString>,
    path: Option<CString>,
    failures: Vec<Failure>,
    json: CString,
}

/// A C string of `s`, NULs escaped (names and reasons come from the network).
fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}

use rmcast::auth_json;

/// The JSON object of `rmcast send --json` (the library's one definition).
fn send_json(r: &rmcast::SendReport) -> Value {
    r.to_json()
}

/// The JSON object of `rmcast recv --json` (the library's one definition).
fn recv_json(r: &rmcast::RecvReport) -> Value {
    r.to_json()
}

fn member_json(m: &MemberInfo, reason: &str) -> Value {
    json!({ "name": m.name, "addr": m.addr.to_string(), "reason": reason })
}

impl RmcastReport {
    pub(crate) fn from_send(r: &rmcast::SendReport) -> Self {
        let failures = r
            .members
            .iter()
            .filter(|m| !m.verified)
            .map(|m| Failure {
                name: cstring(&m.name),
                addr: cstring(&m.addr.to_string()),
                reason: cstring(m.reason.as_deref().unwrap_or("did not confirm")),
            })
            .collect();
        Self {
            ok: r.ok,
            bytes: r.bytes,
            seconds: r.seconds,
            goodput_mbps: r.goodput_mbps,
            receivers: u64::from(r.receivers),
            verified: r.verified as u64,
            error: r.error.as_deref().map(cstring),
            name: None,
            path: None,
            failures,
            json: cstring(&send_json(r).to_string()),
        }
    }

    pub(crate) fn from_recv(r: &rmcast::RecvReport) -> Self {
        Self {
            ok: r.verified,
            bytes: r.bytes,
            seconds: r.seconds,
            goodput_mbps: r.goodput_mbps,
            receivers: 0,
            verified: u64::from(r.verified),
            error: None,
            name: Some(cstring(&r.name)),
            path: r.path.as_ref().map(|p| cstring(&p.display().to_string())),
            failures: Vec::new(),
            json: cstring(&recv_json(r).to_string()),
        }
    }

    pub(crate) fn from_stream_send(r: &StreamSendReport) -> Self {
        let mut failures: Vec<(&MemberInfo, String)> = r
            .removed
            .iter()
            .map(|(m, why)| (m, format!("removed: {}", why.describe())))
            .collect();
        failures.extend(r.left.iter().map(|m| (m, "left".to_owned())));
        let confirmed = r
            .members
            .iter()
            .filter(|m| m.close_confirmed && m.status == rmcast::stream::MemberStatus::Live)
            .count();
        let json = json!({
            "ok": r.ok,
            "session": r.session.to_string(),
            "receivers": r.established,
            "verified": confirmed,
            "messages": r.messages,
            "bytes": r.bytes,
            "seconds": r.seconds,
            "goodput_mbps": r.goodput_mbps,
            "auth": auth_json(&r.stats.auth, r.stats.auth.sealed > 0),
            "auth_failures": r.auth_failures,
            "failures": failures.iter().map(|(m, why)| member_json(m, why)).collect::<Vec<_>>(),
        });
        let error = (r.established == 0).then(|| cstring("no receiver joined the stream"));
        Self {
            ok: r.ok,
            bytes: r.bytes,
            seconds: r.seconds,
            goodput_mbps: r.goodput_mbps,
            receivers: r.established as u64,
            verified: confirmed as u64,
            error,
            name: None,
            path: None,
            failures: failures
                .iter()
                .map(|(m, why)| Failure {
                    name: cstring(&m.name),
                    addr: cstring(&m.addr.to_string()),
                    reason: cstring(why),
                })
                .collect(),
            json: cstring(&json.to_string()),
        }
    }

    pub(crate) fn from_stream_recv(r: &StreamRecvReport) -> Self {
        let json = json!({
            "ok": r.complete,
            "complete": r.complete,
            "session": r.session.map(|s| s.to_string()),
            "rank": r.rank,
            "messages": r.messages,
            "bytes": r.bytes,
            "seconds": r.seconds,
            "goodput_mbps": r.goodput_mbps,
            "error": r.failure,
            "auth": auth_json(&r.stats.auth, r.stats.auth.opened > 0 || r.stats.auth.sealed > 0),
            "auth_failures": r.auth_failures,
        });
        Self {
            ok: r.complete,
            bytes: r.bytes,
            seconds: r.seconds,
            goodput_mbps: r.goodput_mbps,
            receivers: 0,
            verified: u64::from(r.complete),
            error: r.failure.as_deref().map(cstring),
            name: None,
            path: None,
            failures: Vec::new(),
            json: cstring(&json.to_string()),
        }
    }

    /// One line for `rmcast_last_error` when the session was not ok.
    pub(crate) fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(e) = &self.error {
            parts.push(e.to_string_lossy().into_owned());
        }
        if self.receivers > 0 || !self.failures.is_empty() {
            parts.push(format!(
                "{} of {} receivers got everything",
                self.verified, self.receivers
            ));
        }
        for f in &self.failures {
            parts.push(format!(
                "{} at {}: {}",
                f.name.to_string_lossy(),
                f.addr.to_string_lossy(),
                f.reason.to_string_lossy()
            ));
        }
        if parts.is_empty() {
            parts.push("the session did not complete".into());
        }
        parts.join("; ")
    }
}

/// Reads a report field; NULL gives `default`.
fn field<T>(r: *const RmcastReport, default: T, f: impl FnOnce(&RmcastReport) -> T) -> T
where
    T: Copy,
{
    guard(default, || {
        // SAFETY: every public caller forwards its own contract: `r` is NULL
        // or a live report.
        unsafe { r.as_ref() }.map_or(default, f)
    })
}

fn opt_ptr(s: Option<&CString>) -> *const c_char {
    s.map_or(std::ptr::null(), |s| s.as_ptr())
}

/// 1 when the session succeeded for everyone (sender: every receiver
/// verified or confirmed everything; receiver: the object verified, or the
/// stream complete), else 0. NULL: 0.
///
/// # Safety
/// `r` is NULL or a live report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_report_ok(r: *const RmcastReport) -> i32 {
    field(r, 0, |r| i32::from(r.ok))
}

/// Object (or stream) bytes sent or received. NULL: 0.
///
/// # Safety
/// `r` is NULL or a live report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_report_bytes(r: *const RmcastReport) -> u64 {
    field(r, 0, |r| r.bytes)
}

/// Seconds the session took (sender: from the first announcement to the
/// last confirmation). NULL: 0.
///
/// # Safety
/// `r` is NULL or a live report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_report_seconds(r: *const RmcastReport) -> f64 {
    field(r, 0.0, |r| r.seconds)
}

/// Goodput in Mbit/s: `bytes * 8 / seconds / 1e6`. NULL: 0.
///
/// # Safety
/// `r` is NULL or a live report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_report_goodput_mbps(r: *const RmcastReport) -> f64 {
    field(r, 0.0, |r| r.goodput_mbps)
}

/// Sender: receivers admitted to the session. Receiver: 0. NULL: 0.
///
/// # Safety
/// `r` is NULL or a live report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_report_receivers(r: *const RmcastReport) -> u64 {
    field(r, 0, |r| r.receivers)
}

/// Sender: receivers that verified the object (or confirmed the whole
/// stream). Receiver: 1 if it did, else 0. NULL: 0.
///
/// # Safety
/// `r` is NULL or a live report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_report_verified(r: *const RmcastReport) -> u64 {
    field(r, 0, |r| r.verified)
}

/// A session-level failure in words (too few receivers, aborted, the
/// stream failed for this receiver), or NULL when there was none.
///
/// # Safety
/// `r` is NULL or a live report; the string lives as long as the report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_report_error(r: *const RmcastReport) -> *const c_char {
    field(r, std::ptr::null(), |r| opt_ptr(r.error.as_ref()))
}

/// Receiver: the object's name as offered; NULL for others.
///
/// # Safety
/// `r` is NULL or a live report; the string lives as long as the report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_report_name(r: *const RmcastReport) -> *const c_char {
    field(r, std::ptr::null(), |r| opt_ptr(r.name.as_ref()))
}

/// `rmcast_recv_file`: where the object was stored; NULL for others.
///
/// # Safety
/// `r` is NULL or a live report; the string lives as long as the report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_report_path(r: *const RmcastReport) -> *const c_char {
    field(r, std::ptr::null(), |r| opt_ptr(r.path.as_ref()))
}

/// Sender: how many receivers did not get everything (see
/// `rmcast_report_failure_*`). Receiver: 0. NULL: 0.
///
/// # Safety
/// `r` is NULL or a live report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_report_failure_count(r: *const RmcastReport) -> usize {
    field(r, 0, |r| r.failures.len())
}

/// The name failed receiver `i` (0-based, below
/// `rmcast_report_failure_count`) gave itself; NULL when out of range.
///
/// # Safety
/// `r` is NULL or a live report; the string lives as long as the report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_report_failure_name(
    r: *const RmcastReport,
    i: usize,
) -> *const c_char {
    field(r, std::ptr::null(), |r| {
        r.failures
            .get(i)
            .map_or(std::ptr::null(), |f| f.name.as_ptr())
    })
}

/// The unicast address (`"a.b.c.d:port"`) of failed receiver `i`; NULL
/// when out of range.
///
/// # Safety
/// `r` is NULL or a live report; the string lives as long as the report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_report_failure_addr(
    r: *const RmcastReport,
    i: usize,
) -> *const c_char {
    field(r, std::ptr::null(), |r| {
        r.failures
            .get(i)
            .map_or(std::ptr::null(), |f| f.addr.as_ptr())
    })
}

/// Why failed receiver `i` did not get everything, in words; NULL when out
/// of range.
///
/// # Safety
/// `r` is NULL or a live report; the string lives as long as the report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_report_failure_reason(
    r: *const RmcastReport,
    i: usize,
) -> *const c_char {
    field(r, std::ptr::null(), |r| {
        r.failures
            .get(i)
            .map_or(std::ptr::null(), |f| f.reason.as_ptr())
    })
}

/// The whole report as one JSON object: for object sends and receives the
/// fields of `rmcast send --json` / `rmcast recv --json`; for streams `ok`,
/// `session`, `receivers`, `verified`, `messages`, `bytes`, `seconds`,
/// `goodput_mbps`, `auth`, `auth_failures`, `failures` (sender) or
/// `complete`, `rank`, `error` (receiver). NULL report: NULL.
///
/// # Safety
/// `r` is NULL or a live report; the string lives as long as the report.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_report_json(r: *const RmcastReport) -> *const c_char {
    field(r, std::ptr::null(), |r| r.json.as_ptr())
}

/// Frees a report (NULL: nothing); its strings go with it.
///
/// # Safety
/// `r` is NULL or a report from this library not freed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rmcast_report_free(r: *mut RmcastReport) {
    guard((), || {
        if !r.is_null() {
            // SAFETY: the caller hands back a report made by this library.
            drop(unsafe { Box::from_raw(r) });
        }
    });
}
