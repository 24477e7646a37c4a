//! Testbeds: a LAN of network namespaces (root, `netns.rs`), real hosts
//! over OpenSSH (`ssh/`), or loopback (no root). `registry.rs` finds and
//! removes the namespaces of any lab testbed, including those a crashed
//! run left behind.

mod host;
mod netns;
mod registry;
pub mod segments;
pub mod ssh;

pub(crate) use host::nft_counted_packets;
pub use host::{Host, IfCounters, is_root, run_cmd};
pub use netns::{Netns, NetnsSpec};
pub use registry::{is_lab_namespace, list_namespaces, remove_all, remove_testbed, status};
pub use segments::{RelayHost, Segments};
pub use ssh::{Hosts, Inventory, Ssh, SshHost};

use anyhow::Result;
use host::read_counters;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A testbed the runner drives.
pub enum Testbed {
    /// Loopback: every host is 127.0.0.1 in the current namespace.
    Local(Local),
    /// A namespace LAN.
    Netns(Netns),
    /// Real hosts of an inventory, over OpenSSH.
    Ssh(Box<Ssh>),
}

impl Testbed {
    /// Hosts, h0 first.
    pub fn hosts(&self) -> &[Host] {
        match self {
            Testbed::Local(l) => &l.hosts,
            Testbed::Netns(n) => &n.hosts,
            Testbed::Ssh(s) => &s.hosts,
        }
    }
    /// Relay hosts r1..rK, between the segments (empty unless segmented).
    pub fn relays(&self) -> &[RelayHost] {
        match self {
            Testbed::Local(l) => &l.relays,
            Testbed::Netns(n) => &n.relays,
            Testbed::Ssh(s) => &s.relays,
        }
    }
    /// The segments, when the testbed has several.
    pub fn segments(&self) -> Option<&Segments> {
        match self {
            Testbed::Local(l) => l.segments.as_ref(),
            Testbed::Netns(n) => n.segments(),
            Testbed::Ssh(s) => s.segments.as_ref(),
        }
    }
    /// The node index of relay `k` (1..): nodes are the hosts h0..hN, then
    /// the relays, so a [`crate::tools::ProcSpec`] can name either.
    pub fn relay_node(&self, k: usize) -> usize {
        self.hosts().len() + k - 1
    }
    /// A node's name: `hI` for a host, `rK` for a relay.
    pub fn node_name(&self, node: usize) -> String {
        let hosts = self.hosts().len();
        if node < hosts {
            format!("h{node}")
        } else {
            format!("r{}", node - hosts + 1)
        }
    }
    /// A node's namespace (None on loopback).
    fn node_ns(&self, node: usize) -> Option<&str> {
        let hosts = self.hosts();
        match hosts.get(node) {
            Some(h) => h.ns.as_deref(),
            None => self.relays()[node - hosts.len()].ns.as_deref(),
        }
    }
    /// The interface name host `i` uses.
    pub fn iface(&self, i: usize) -> &str {
        match self {
            Testbed::Local(_) => "lo",
            Testbed::Netns(_) => "eth0",
            Testbed::Ssh(s) => s.iface(i),
        }
    }
    /// Whether this is the namespace LAN.
    pub fn is_netns(&self) -> bool {
        matches!(self, Testbed::Netns(_))
    }
    /// Whether every host is 127.0.0.1 (loopback: no LAN, no per-host counters).
    pub fn is_loopback(&self) -> bool {
        matches!(self, Testbed::Local(_))
    }
    /// `local`, `netns` or `ssh` (the records' `testbed`).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Testbed::Local(_) => "local",
            Testbed::Netns(_) => "netns",
            Testbed::Ssh(_) => "ssh",
        }
    }
    /// The group key file every rmcast process of this testbed runs under.
    pub fn key(&self) -> &Path {
        match self {
            Testbed::Local(l) => l.key.path(),
            Testbed::Netns(n) => n.key.path(),
            Testbed::Ssh(s) => s.key.path(),
        }
    }

    /// Starts `program args` with `env` on node `i` (host hI, or a relay:
    /// [`Testbed::relay_node`]), stdout and stderr into `dir`, with the
    /// testbed's group key in `RMCAST_KEY_FILE` (rmcast's `send`, `recv`,
    /// `relay` and `pipe` read it; the peer tools ignore it; `--insecure`
    /// in `args` wins). On the ssh testbed the process runs on the host,
    /// its inputs copied there first.
    pub fn spawn(
        &self,
        i: usize,
        program: &str,
        args: &[String],
        env: &[(String, String)],
        label: String,
        dir: &Path,
    ) -> Result<crate::procs::Proc> {
        if let Testbed::Ssh(s) = self {
            return s.spawn(i, program, args, env, label, dir);
        }
        let mut cmd = self.command(i, program, args);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        crate::procs::Proc::spawn(cmd, label, i, dir)
    }

    /// Copies to each host what the given processes will read (ssh
    /// testbed; nothing to do elsewhere), so that it is not done, and
    /// counted, during the run.
    pub fn stage<'a>(
        &self,
        procs: impl IntoIterator<Item = (usize, &'a str, &'a [String])>,
    ) -> Result<()> {
        if let Testbed::Ssh(s) = self {
            s.stage_many(procs)?;
        }
        Ok(())
    }

    /// Brings back what every host wrote under the run's directory (ssh
    /// testbed: uftpd's status files, blast's reports; elsewhere they are
    /// here already). The receivers' copies stay where they are: see
    /// [`Testbed::verify_copies`].
    pub fn fetch_run_dir(&self, run_dir: &Path) -> Result<()> {
        if let Testbed::Ssh(s) = self {
            s.stop_probes();
            s.fetch_all(self.hosts().len(), run_dir)?;
        }
        Ok(())
    }

    /// Integrity of every receiver's copies (`out_dirs[1..]`) against the
    /// senders' `objects`: hashed here, or on the ssh testbed by each host
    /// (`SELF list-copies DIR`, `self_cmd` being how to call this program)
    /// with only the listing brought back.
    pub fn verify_copies(
        &self,
        out_dirs: &[PathBuf],
        objects: &[PathBuf],
        size: u64,
        self_cmd: &[String],
        reasons: &mut Vec<String>,
    ) -> Result<()> {
        match self {
            Testbed::Ssh(s) => {
                let mut listings = vec![Vec::new()];
                listings.extend(s.list_copies_each(&receiver_dirs(out_dirs), self_cmd)?);
                crate::scenario::judge::verify_listings(&listings, objects, size, reasons)
            }
            _ => crate::scenario::judge::verify_copies(out_dirs, objects, size, reasons),
        }
    }

    /// Removes the receivers' copies of a finished run (ssh testbed: on
    /// the hosts too).
    pub fn remove_copies(&self, out_dirs: &[PathBuf]) {
        if let Testbed::Ssh(s) = self {
            let dirs = receiver_dirs(out_dirs);
            for e in s.remove_each(&dirs).into_iter().filter_map(Result::err) {
                eprintln!("rmcast-lab: {e:#}");
            }
        }
        for d in &out_dirs[1..] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    /// Progress of receivers 1..: bytes allocated under each `dirs[k]` and
    /// the text of its `status[k - 1]` file, if any. Read here; on the ssh
    /// testbed as last probed (about once a second).
    pub fn probe(
        &self,
        dirs: &[PathBuf],
        status: Option<&[PathBuf]>,
    ) -> Vec<(u64, Option<String>)> {
        if let Testbed::Ssh(s) = self {
            return s.probe(dirs, status);
        }
        dirs.iter()
            .enumerate()
            .map(|(k, d)| {
                if k == 0 {
                    return (0, None);
                }
                let st = status
                    .and_then(|s| s.get(k - 1))
                    .and_then(|f| std::fs::read_to_string(f).ok());
                (crate::scenario::files::allocated_bytes(d), st)
            })
            .collect()
    }

    /// A command that runs `program args` on node `i` of a local or
    /// namespace testbed (the ssh testbed starts processes with
    /// [`Testbed::spawn`]), with the testbed's group key in `RMCAST_KEY_FILE`.
    pub fn command(&self, i: usize, program: &str, args: &[String]) -> Command {
        if let Testbed::Ssh(s) = self {
            return s.command(i, program, args, &[]);
        }
        let mut c = match self.node_ns(i) {
            None => {
                let mut c = Command::new(program);
                c.args(args);
                c
            }
            Some(ns) => {
                // `ip netns exec` execs the program: the PID we get is the tool's.
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]).args(args);
                c
            }
        };
        c.env(rmcast::KEY_FILE_ENV, self.key());
        c
    }
    /// Counters of hosts 0..n (loopback: the one `lo`, as host 0).
    pub fn counters(&self, n: usize) -> Result<Vec<IfCounters>> {
        match self {
            Testbed::Local(_) => Ok(vec![read_counters(None, "lo")?]),
            Testbed::Netns(t) => t.hosts[..n]
                .iter()
                .map(|h| read_counters(h.ns.as_deref(), "eth0"))
                .collect(),
            Testbed::Ssh(s) => s.counters(n),
        }
    }
    /// Counters of every relay interface (`eth0`, `eth1` of r1, then r2, …;
    /// loopback: none, `lo` counts everything already).
    pub fn relay_counters(&self) -> Result<Vec<IfCounters>> {
        match self {
            Testbed::Local(_) => Ok(Vec::new()),
            Testbed::Netns(t) => t.relay_counters(),
            Testbed::Ssh(s) => s.relay_counters(),
        }
    }
    /// Packets the tbf shapers dropped so far, summed over hosts.
    pub fn shaper_drops(&self) -> Result<u64> {
        match self {
            Testbed::Local(_) | Testbed::Ssh(_) => Ok(0),
            Testbed::Netns(t) => t.shaper_drops(),
        }
    }
    /// Packets the loss rules dropped so far, summed over receivers.
    pub fn loss_drops(&self) -> Result<u64> {
        match self {
            Testbed::Local(_) => Ok(0),
            Testbed::Netns(t) => t.loss_drops(),
            Testbed::Ssh(s) => s.loss_drops(),
        }
    }
    /// Sets the random loss on every receiver's input (netns and ssh;
    /// on loopback the tools emulate it).
    pub fn set_loss(&mut self, p: f64) -> Result<()> {
        match self {
            Testbed::Local(_) => Ok(()),
            Testbed::Netns(t) => t.set_loss(p),
            Testbed::Ssh(s) => s.set_loss(p),
        }
    }
    /// One paragraph on what was built.
    pub fn describe(&self) -> String {
        match self {
            Testbed::Local(l) => {
                let mut s = format!(
                    "local loopback testbed, {} hosts at 127.0.0.1",
                    l.hosts.len()
                );
                if let Some(seg) = &l.segments {
                    s.push_str(&format!(
                        ", segments {:?} joined by {} relay(s) (one group and port per segment)",
                        seg.per_segment(),
                        l.relays.len()
                    ));
                }
                s
            }
            Testbed::Netns(t) => t.describe(),
            Testbed::Ssh(s) => s.describe(),
        }
    }
    /// Removes everything (the Drop guard does this too).
    pub fn teardown(&mut self) -> Result<()> {
        match self {
            Testbed::Local(_) => Ok(()),
            Testbed::Netns(t) => t.teardown(),
            Testbed::Ssh(s) => s.teardown(),
        }
    }
}

/// The loopback testbed.
pub struct Local {
    hosts: Vec<Host>,
    relays: Vec<RelayHost>,
    segments: Option<Segments>,
    key: LabKey,
}

/// A testbed's group key: fresh per testbed, in a temporary file (mode
/// 0600) removed with the testbed, so the lab's one-liners need no key.
/// Its name carries the owner's PID (`owned_temp_prefix`).
pub struct LabKey {
    file: tempfile::TempPath,
}

impl LabKey {
    /// A fresh key in a new temporary file.
    pub fn new() -> Result<Self> {
        let mut f = tempfile::Builder::new()
            .prefix(&owned_temp_prefix(""))
            .suffix(".key")
            .tempfile_in(std::env::temp_dir())?;
        std::io::Write::write_all(&mut f, rmcast::generate_key().to_file().as_bytes())?;
        Ok(Self {
            file: f.into_temp_path(),
        })
    }

    /// The key file.
    pub fn path(&self) -> &Path {
        &self.file
    }
}

/// The prefix of every lab temporary in the temporary directory.
const TEMP_PREFIX: &str = "rmcast-lab-";

/// The name prefix of a lab temporary of `kind` (`""`: a group key file,
/// `"ssh-"`: the ssh testbed's control directory) owned by this process:
/// `rmcast-lab-[KIND]PID-`. A runner killed by SIGKILL never drops its
/// testbed, so the first call in a process removes those whose owner is
/// gone ([`remove_orphaned_temporaries`]).
pub(crate) fn owned_temp_prefix(kind: &str) -> String {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| remove_orphaned_temporaries(&std::env::temp_dir()));
    format!("{TEMP_PREFIX}{kind}{}-", std::process::id())
}

/// The owner's PID in the name of a lab temporary, if it is one: a key
/// file `rmcast-lab-PID-XXXXXX.key` or an ssh control directory
/// `rmcast-lab-ssh-PID-XXXXXX`.
fn temp_owner(name: &str) -> Option<i32> {
    let rest = name.strip_prefix(TEMP_PREFIX)?;
    let rest = match rest.strip_prefix("ssh-") {
        Some(dir) => dir,
        None => rest.strip_suffix(".key")?,
    };
    let (pid, _) = rest.split_once('-')?;
    pid.parse().ok().filter(|&p| p > 0)
}

/// Removes the lab temporaries in `dir` whose owner no longer runs.
/// Those of a live owner, and names of another form, are left alone.
fn remove_orphaned_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = temp_owner(&e.file_name().to_string_lossy()) else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if !gone {
            continue;
        }
        let path = e.path();
        // Not following links: a directory entry that is a link goes as a file.
        let _ = match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
    }
}

impl Local {
    /// A sender and `receivers` receivers, all 127.0.0.1.
    pub fn new(receivers: u16) -> Local {
        let hosts = (0..=receivers)
            .map(|_| Host {
                ns: None,
                addr: Ipv4Addr::LOCALHOST,
            })
            .collect();
        let key = LabKey::new().expect("cannot write a temporary key file");
        Local {
            hosts,
            relays: Vec::new(),
            segments: None,
            key,
        }
    }

    /// A segmented loopback testbed: the segments' hosts and relays, all
    /// 127.0.0.1 in this namespace, so only the groups keep the segments
    /// apart (the plan gives every segment its own group and port).
    pub fn segmented(segments: Segments) -> Local {
        let mut l = Local::new(segments.total() as u16);
        l.relays = (1..=segments.relays())
            .map(|k| RelayHost {
                ns: None,
                up_addr: Ipv4Addr::LOCALHOST,
                down_addr: Ipv4Addr::LOCALHOST,
                from: segments.relay_from(k),
                to: k,
            })
            .collect();
        l.segments = Some(segments);
        l
    }
}

/// The receivers' directories (`out_dirs[1..]`), each with its host.
fn receiver_dirs(out_dirs: &[PathBuf]) -> Vec<(usize, &Path)> {
    out_dirs
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, d)| (i, d.as_path()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_temporaries_name_their_owner() {
        assert_eq!(temp_owner("rmcast-lab-4242-aB3xYz.key"), Some(4242));
        assert_eq!(temp_owner("rmcast-lab-ssh-4242-aB3xYz"), Some(4242));
        assert_eq!(temp_owner("rmcast-lab-aB3xYz.key"), None, "the old form");
        assert_eq!(temp_owner("rmcast-lab-ssh-aB3xYz"), None, "the old form");
        // A remote session directory (`rmcast-lab-PID-MILLIS`) is not ours
        // to sweep here, nor is anything else.
        assert_eq!(temp_owner("rmcast-lab-4242-123456"), None);
        assert_eq!(temp_owner("rmcast-lab-4242-aB3xYz.json"), None);
        assert_eq!(temp_owner("rmcast-lab-0-x.key"), None);
        assert_eq!(temp_owner("other-4242-x.key"), None);
    }

    #[test]
    fn a_dead_owners_temporaries_are_removed_and_the_others_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        // A PID that ran and is gone: a child we started and reaped.
        let mut child = Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let files = [
            format!("{TEMP_PREFIX}{dead}-dead.key"),
            format!("{TEMP_PREFIX}{me}-mine.key"),
            format!("{TEMP_PREFIX}old-form.key"),
            "unrelated.key".to_string(),
        ];
        for f in &files {
            std::fs::write(dir.path().join(f), "k").unwrap();
        }
        let dirs = [
            format!("{TEMP_PREFIX}ssh-{dead}-dead"),
            format!("{TEMP_PREFIX}ssh-{me}-mine"),
            format!("{TEMP_PREFIX}{dead}-123456"),
        ];
        for d in &dirs {
            std::fs::create_dir(dir.path().join(d)).unwrap();
            std::fs::write(dir.path().join(d).join("h0.log"), "log").unwrap();
        }
        remove_orphaned_temporaries(dir.path());
        let left = |names: &[String]| -> Vec<bool> {
            names.iter().map(|f| dir.path().join(f).exists()).collect()
        };
        assert_eq!(left(&files), [false, true, true, true], "{files:?}");
        assert_eq!(left(&dirs), [false, true, true], "{dirs:?}");
    }

    #[test]
    fn a_lab_key_names_this_process_and_goes_with_it() {
        let key = LabKey::new().unwrap();
        let path = key.path().to_path_buf();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(temp_owner(&name), Some(std::process::id() as i32));
        drop(key);
        assert!(!path.exists());
    }
}
