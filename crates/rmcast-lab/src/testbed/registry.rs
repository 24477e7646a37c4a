//! Every lab testbed on this machine, found by its namespaces' names
//! (`rml*`) and the state files under `/run/rmcast-lab`: listing them,
//! removing one or all, and sweeping those whose owner died.

use super::host::{ip, is_root};
use anyhow::{Result, bail};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where `lab up` and running testbeds record their owner and namespaces.
pub(super) const STATE_DIR: &str = "/run/rmcast-lab";

pub(super) fn state_path(id: &str) -> PathBuf {
    PathBuf::from(STATE_DIR).join(format!("{id}.json"))
}

/// Process ids inside a namespace (`ip netns pids`).
fn ns_pids(ns: &str) -> Vec<i32> {
    ip(&["netns", "pids", ns])
        .map(|t| {
            t.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Kills (by PID) what runs in the namespaces, deletes them, and checks
/// that none is left.
pub(super) fn remove_namespaces(names: &[String]) -> Result<()> {
    let existing = list_namespaces();
    let present: Vec<&String> = names.iter().filter(|n| existing.contains(n)).collect();
    for ns in &present {
        for pid in ns_pids(ns) {
            // Only our namespaces are searched, so these are processes we started.
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    // Host namespaces first (their veth ends go with them), the switch last.
    let mut errors = Vec::new();
    for ns in present
        .iter()
        .filter(|n| !n.ends_with("-sw"))
        .chain(present.iter().filter(|n| n.ends_with("-sw")))
    {
        let deadline = Instant::now() + Duration::from_secs(2);
        while !ns_pids(ns).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Err(e) = ip(&["netns", "del", ns]) {
            errors.push(format!("{ns}: {e:#}"));
        }
    }
    for ns in names {
        let _ = std::fs::remove_dir_all(PathBuf::from("/etc/netns").join(ns));
    }
    let still: Vec<String> = list_namespaces()
        .into_iter()
        .filter(|n| names.contains(n))
        .collect();
    if !still.is_empty() {
        bail!(
            "namespaces left behind: {} ({})",
            still.join(", "),
            errors.join("; ")
        );
    }
    Ok(())
}

/// Names from `ip netns list`.
pub fn list_namespaces() -> Vec<String> {
    ip(&["netns", "list"])
        .map(|t| {
            t.lines()
                .filter_map(|l| l.split_whitespace().next().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a namespace name is one this lab makes: `rml` + 5 id chars +
/// `-hN` (a host), `-rN` (a relay between segments) or `-sw` (the bridges).
pub fn is_lab_namespace(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("rml") else {
        return false;
    };
    let Some((id, suffix)) = rest.split_once('-') else {
        return false;
    };
    id.len() == 5
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && (suffix == "sw"
            || suffix
                .strip_prefix(['h', 'r'])
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())))
}

fn id_of(ns: &str) -> &str {
    ns.split_once('-').map_or(ns, |(id, _)| id)
}

/// Removes one testbed's namespaces; returns how many were removed.
pub fn remove_testbed(id: &str) -> Result<usize> {
    let names: Vec<String> = list_namespaces()
        .into_iter()
        .filter(|n| is_lab_namespace(n) && id_of(n) == id)
        .collect();
    remove_namespaces(&names)?;
    let _ = std::fs::remove_file(state_path(id));
    Ok(names.len())
}

/// Removes every lab testbed (namespaces named like ours); returns how many namespaces.
pub fn remove_all() -> Result<usize> {
    if !is_root() {
        bail!("removing namespaces needs root");
    }
    let names: Vec<String> = list_namespaces()
        .into_iter()
        .filter(|n| is_lab_namespace(n))
        .collect();
    remove_namespaces(&names)?;
    for e in std::fs::read_dir("/etc/netns")
        .into_iter()
        .flatten()
        .flatten()
    {
        if is_lab_namespace(&e.file_name().to_string_lossy()) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    if let Ok(dir) = std::fs::read_dir(STATE_DIR) {
        for e in dir.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
    Ok(names.len())
}

fn owner_alive(id: &str) -> Option<bool> {
    let text = std::fs::read_to_string(state_path(id)).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let pid = v["pid"].as_i64()? as i32;
    // SAFETY: signal 0 only checks that the process exists.
    Some(unsafe { libc::kill(pid, 0) } == 0)
}

/// Removes testbeds whose owning `lab run` died without cleaning up (SIGKILL).
/// `lab up` testbeds are kept: their owner exits on purpose.
pub(super) fn sweep_stale() {
    let mut ids: Vec<String> = list_namespaces()
        .iter()
        .filter(|n| is_lab_namespace(n))
        .map(|n| id_of(n).to_string())
        .collect();
    ids.sort();
    ids.dedup();
    for id in ids {
        let Ok(text) = std::fs::read_to_string(state_path(&id)) else {
            continue;
        };
        let kept = text.contains("\"kept\":true");
        if !kept && owner_alive(&id) == Some(false) {
            eprintln!("rmcast-lab: removing stale testbed {id} (its owner is gone)");
            let _ = remove_testbed(&id);
        }
    }
}

/// `lab status`: testbeds, namespaces, owners.
pub fn status() -> Result<String> {
    let names: Vec<String> = list_namespaces()
        .into_iter()
        .filter(|n| is_lab_namespace(n))
        .collect();
    let mut ids: Vec<String> = names.iter().map(|n| id_of(n).to_string()).collect();
    ids.sort();
    ids.dedup();
    let mut s = String::new();
    if ids.is_empty() {
        s.push_str("no lab testbeds\n");
    }
    for id in ids {
        let n = names.iter().filter(|x| id_of(x) == id).count();
        let owner = match owner_alive(&id) {
            Some(true) => "owner running",
            Some(false) => "owner gone (kept by `lab up`, or stale: `lab down ID`)",
            None => "no state file",
        };
        let _ = writeln!(s, "{id}: {n} namespaces, {owner}");
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_relays_and_switches_are_lab_namespaces_and_nothing_else_is() {
        for n in [
            "rmlabc12-h0",
            "rmlabc12-h30",
            "rmlabc12-r1",
            "rmlabc12-r15",
            "rmlabc12-sw",
        ] {
            assert!(is_lab_namespace(n), "{n}");
        }
        for n in [
            "rmlabc12-r",
            "rmlabc12-x1",
            "rmlab12-h0",
            "rmlABc12-h0",
            "other-h0",
            "rmlabc12-sw1",
            "rmlabc12-h1x",
        ] {
            assert!(!is_lab_namespace(n), "{n}");
        }
    }
}
