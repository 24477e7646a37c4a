//! The ssh testbed: the same scenarios on real hosts named in an inventory
//! file, driven over OpenSSH (the tool every cluster already has, not a
//! daemon of rmcast's own).
//!
//! - **Connections.** One master connection per host (`ssh -M -N -f`,
//!   `ControlPersist` bounding its idle life), which every later command
//!   multiplexes, so a probe costs a round trip and not a handshake. A
//!   step that visits every host visits them at once (`Ssh::run_each`),
//!   each host's own commands in turn on its master. The
//!   masters are told to exit (`ssh -O exit`) at teardown, and killed by
//!   their PID (`ssh -O check` says it) should they not.
//! - **Files.** Each host gets a session directory `WORKDIR/rmcast-lab-ID`,
//!   removed at teardown. A local path under the run's output directory is
//!   the same path below `SESSION/fs` there, one under the run's tmpfs
//!   copies (`copies = "tmpfs"`) below `/dev/shm/rmcast-lab-ID` there;
//!   a program given by path is copied to `SESSION/bin`. What a command
//!   reads is copied before the run starts ([`Ssh::stage`]), with `ssh …
//!   'cat > FILE'`. The receivers' copies are hashed where they are (this
//!   program's `list-copies`, [`Ssh::list_copies_each`]) and judged from the
//!   listing by the netns testbed's rules; the run directory (status
//!   files, reports) comes back with `tar` over ssh ([`Ssh::fetch_all`]).
//! - **Processes.** A tool runs as the child of a remote shell that says
//!   its PID (`rmcast-lab-pid=…` on stderr), waits for it and then says
//!   its CPU time (`times`); the runner stops it by that PID over ssh
//!   ([`crate::procs::Remote`]). A watchdog beside it ends it by the same
//!   PID (checked by start time) if the runner never does, so nothing
//!   outlives the scenario's time cap by more than 10 s.
//! - **Clocks.** Never compared across hosts: a run's time is a duration on
//!   the controller (from starting the sender's ssh to its end), and
//!   rmcast's own figures are the sender host's.
//! - **The network is the network.** Rates are what the tools are paced
//!   to; nothing is shaped. A scenario's loss is injected with the same
//!   nftables rule as the netns testbed's (root on the receivers, a table
//!   of the lab's own, removed at teardown).

mod inventory;

pub use inventory::{HostSettings, Hosts, Inventory, InventoryHost, InventoryRelay, SshHost};

use super::host::{nft_counted_packets, parse_counters};
use super::{Host, IfCounters, LabKey, RelayHost, Segments};
use crate::procs::{Proc, REMOTE_PID_PREFIX, REMOTE_TIMES_MARK, Remote, wait_bounded};
use crate::scenario::files::CopyFile;
use anyhow::{Context, Result, bail};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Quotes a word for a POSIX shell.
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// The nftables table the ssh testbed's loss lives in.
const LOSS_TABLE: &str = "rmcast_lab_loss";

/// How long one control command over ssh may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(60);

/// A command for [`Ssh::run_each`]: the host, its shell script, its stdin
/// (shared: one program copied to a hundred hosts is read and held once).
type Job = (usize, String, Option<Arc<[u8]>>);

/// Files read for uploads, by local path, so each is read once per step.
type Reads = HashMap<PathBuf, Arc<[u8]>>;

/// The ssh testbed: hosts h0..hN of an inventory.
pub struct Ssh {
    /// This testbed's id (in the remote session directories' names).
    pub id: String,
    pub(super) hosts: Vec<Host>,
    /// Relays between segments (empty unless segmented).
    pub(super) relays: Vec<RelayHost>,
    /// The segments, when the testbed has several.
    pub(super) segments: Option<Segments>,
    /// Hosts h0..hN, then relays r1..rK: a node index is an index here.
    remote: Vec<SshHost>,
    /// Per host: `WORKDIR/rmcast-lab-ID`.
    session: Vec<String>,
    /// The control sockets.
    control: tempfile::TempDir,
    pub(super) key: LabKey,
    /// Local directories whose files have the same path below `SESSION/fs`.
    roots: Vec<PathBuf>,
    /// The local tmpfs directory of the copies (`copies = "tmpfs"`): on
    /// the hosts its files go below [`Ssh::remote_tmpfs`], on their tmpfs.
    tmpfs: PathBuf,
    /// (host, local path) already copied or created there.
    staged: RefCell<HashSet<(usize, PathBuf)>>,
    loss: f64,
    probes: RefCell<Probes>,
    torn_down: bool,
    /// Seconds after which a remote tool's watchdog ends it.
    max_life_s: u64,
    /// Hosts whose master connection is up (teardown visits only these).
    connected: Vec<bool>,
    /// The master connections' PIDs here, as `ssh -O check` said them.
    masters: Vec<Option<i32>>,
}

/// What the progress probes last saw, and the probes in flight.
#[derive(Default)]
struct Probes {
    /// Per host: bytes allocated under its copies, and its status file.
    seen: Vec<(u64, Option<String>)>,
    in_flight: Vec<(usize, Child)>,
    next: Option<Instant>,
}

impl Ssh {
    /// Connects to hosts 0..=`receivers` of the inventory (segmented: the
    /// sender, then each segment's receivers from the hosts on it, and the
    /// relay feeding each segment), a master connection each; makes their
    /// session directories and checks that each has its interfaces with
    /// their addresses. `max_life_s` bounds every remote process (a
    /// watchdog there ends it). Paths under `roots` are mapped below each
    /// host's session directory, paths under `tmpfs` below its
    /// `/dev/shm`.
    pub fn connect(
        inventory: &Hosts,
        receivers: u16,
        segments: Option<Segments>,
        roots: Vec<PathBuf>,
        tmpfs: PathBuf,
        max_life_s: u64,
    ) -> Result<Ssh> {
        let (remote, relays) = match &segments {
            None => (Self::flat(inventory, receivers)?, Vec::new()),
            Some(seg) => Self::segmented(inventory, seg)?,
        };
        let want = remote.len();
        let id = format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() % 1_000_000)
        );
        let session = remote
            .iter()
            .map(|h| format!("{}/rmcast-lab-{id}", h.workdir.display()))
            .collect();
        let control = tempfile::Builder::new()
            .prefix(&super::owned_temp_prefix("ssh-"))
            .tempdir()?;
        let hosts = remote[..remote.len() - relays.len()]
            .iter()
            .map(|h| Host {
                ns: None,
                addr: h.data_address,
            })
            .collect();
        let mut tb = Ssh {
            id,
            hosts,
            relays,
            segments,
            remote,
            session,
            control,
            key: LabKey::new()?,
            roots,
            tmpfs,
            staged: RefCell::default(),
            loss: 0.0,
            probes: RefCell::default(),
            torn_down: false,
            max_life_s,
            connected: vec![false; want],
            masters: vec![None; want],
        };
        for i in 0..want {
            tb.masters[i] = tb.start_master(i)?;
            tb.connected[i] = true;
        }
        let jobs = (0..want)
            .map(|i| {
                let mut script =
                    format!("mkdir -p {s}/fs {s}/bin", s = shell_quote(&tb.session[i]));
                for (ifc, _) in tb.remote[i].interfaces() {
                    let ifc = shell_quote(ifc);
                    let _ = write!(
                        script,
                        " && cat /sys/class/net/{ifc}/address >/dev/null && \
                         (ip -4 -o addr show dev {ifc} 2>/dev/null || echo no-ip-command)"
                    );
                }
                (i, script, None)
            })
            .collect();
        for (i, out) in tb.run_each(jobs).into_iter().enumerate() {
            let h = &tb.remote[i];
            let out = out.with_context(|| format!("{}: preparing {}", h.name, tb.session[i]))?;
            for (ifc, addr) in h.interfaces() {
                let want_addr = format!("inet {addr}/");
                if !out.contains("no-ip-command") && !out.contains(&want_addr) {
                    bail!(
                        "{}: interface {ifc} does not have the address {addr}",
                        h.name
                    );
                }
            }
        }
        let mut reads = Reads::new();
        let keys = (0..want)
            .map(|i| tb.upload_job(i, tb.key.path(), &tb.key_path(i), "600", &mut reads))
            .collect::<Result<Vec<_>>>()?;
        tb.run_all(keys)?;
        Ok(tb)
    }

    /// Hosts h0..hN of a flat testbed: the inventory's first N + 1.
    fn flat(inventory: &Hosts, receivers: u16) -> Result<Vec<SshHost>> {
        let want = usize::from(receivers) + 1;
        if inventory.hosts.len() < want {
            bail!(
                "the inventory has {} host(s); {receivers} receivers need {want} (h0 sends)",
                inventory.hosts.len()
            );
        }
        Ok(inventory.hosts[..want].to_vec())
    }

    /// Hosts h0..hN in the layout's order (each segment's receivers from
    /// the inventory's hosts on it), then relays r1..rK, and the relays'
    /// places on the segments.
    fn segmented(inventory: &Hosts, seg: &Segments) -> Result<(Vec<SshHost>, Vec<RelayHost>)> {
        let mut remote = vec![inventory.hosts[0].clone()];
        for s in 0..seg.count() {
            let want = seg.hosts_on(s).count();
            let on: Vec<&SshHost> = inventory
                .hosts
                .iter()
                .skip(1)
                .filter(|h| h.segment == s)
                .collect();
            if on.len() < want {
                bail!(
                    "segment {s} needs {want} receivers; the inventory has {} host(s) with segment = {s} (besides h0)",
                    on.len()
                );
            }
            remote.extend(on[..want].iter().map(|h| (*h).clone()));
        }
        let mut relays = Vec::new();
        let mut relay_hosts = Vec::new();
        for k in 1..=seg.relays() {
            let from = seg.relay_from(k);
            let Some(r) = inventory.relays.iter().find(|r| r.segment == k) else {
                bail!(
                    "the scenario's relay {k} feeds segment {k}: the inventory has no [[relays]] entry with to_segment = {k}"
                );
            };
            if r.from_segment.is_some_and(|f| f != from) {
                bail!(
                    "relay {:?} receives from segment {} in the inventory, from segment {from} in the scenario",
                    r.name,
                    r.from_segment.unwrap_or_default()
                );
            }
            relays.push(RelayHost {
                ns: None,
                up_addr: r.data_address,
                down_addr: r.down.as_ref().map_or(r.data_address, |d| d.1),
                from,
                to: k,
            });
            relay_hosts.push(r.clone());
        }
        remote.extend(relay_hosts);
        Ok((remote, relays))
    }

    /// The `ssh … DESTINATION` argv for host `i` through its master.
    pub fn ssh_argv(&self, i: usize) -> Vec<String> {
        let mut v = vec!["ssh".to_string()];
        v.extend(self.base_options(i));
        v.extend([
            "-o".into(),
            "ControlMaster=no".into(),
            "-o".into(),
            format!("ControlPath={}", self.control_path(i).display()),
        ]);
        v.push(self.remote[i].address.clone());
        v
    }

    fn base_options(&self, i: usize) -> Vec<String> {
        let h = &self.remote[i];
        let mut v = vec![
            "-p".to_string(),
            h.port.to_string(),
            "-o".into(),
            "BatchMode=yes".into(),
            "-o".into(),
            "ConnectTimeout=10".into(),
            "-o".into(),
            "ServerAliveInterval=5".into(),
            "-o".into(),
            "ServerAliveCountMax=6".into(),
        ];
        if let Some(u) = &h.user {
            v.extend(["-l".into(), u.clone()]);
        }
        if let Some(k) = &h.key {
            v.extend(["-i".into(), k.display().to_string()]);
        }
        v.extend(h.options.iter().cloned());
        v
    }

    fn control_path(&self, i: usize) -> PathBuf {
        self.control.path().join(format!("h{i}"))
    }

    /// Opens host `i`'s master connection (it forks into the background
    /// once authenticated; `ControlPersist` ends it after 5 idle minutes
    /// should teardown never come); its PID, which `ssh -O check` says.
    fn start_master(&self, i: usize) -> Result<Option<i32>> {
        let log = std::fs::File::create(self.control.path().join(format!("h{i}.log")))?;
        let mut c = Command::new("ssh");
        c.args(self.base_options(i))
            .args(["-M", "-N", "-f", "-o", "ControlPersist=300", "-o"])
            .arg(format!("ControlPath={}", self.control_path(i).display()))
            .arg(&self.remote[i].address)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let status = wait_bounded(
            c.spawn()
                .context("cannot run ssh (apt-get install openssh-client)")?,
            CONTROL_TIMEOUT,
        )?;
        if !status.success() {
            let log = std::fs::read_to_string(self.control.path().join(format!("h{i}.log")))
                .unwrap_or_default();
            bail!(
                "{}: cannot connect over ssh to {} ({status}): {}",
                self.remote[i].name,
                self.remote[i].address,
                log.trim()
            );
        }
        let check = Command::new("ssh")
            .args(self.base_options(i))
            .args(["-O", "check", "-o"])
            .arg(format!("ControlPath={}", self.control_path(i).display()))
            .arg(&self.remote[i].address)
            .stdin(Stdio::null())
            .output()
            .context("cannot run ssh")?;
        // "Master running (pid=12345)"
        let text = String::from_utf8_lossy(&check.stderr);
        Ok(text
            .split("pid=")
            .nth(1)
            .and_then(|t| t.split(')').next()?.trim().parse().ok()))
    }

    /// Ends host `i`'s master connection: asked over its control socket,
    /// then, should it still run after 2 s, SIGKILLed by its PID (checked
    /// to be an ssh process still).
    fn stop_master(&self, i: usize) {
        let mut c = Command::new("ssh");
        c.args(self.base_options(i))
            .args(["-O", "exit", "-o"])
            .arg(format!("ControlPath={}", self.control_path(i).display()))
            .arg(&self.remote[i].address)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Ok(child) = c.spawn() {
            let _ = wait_bounded(child, Duration::from_secs(10));
        }
        let Some(pid) = self.masters[i] else { return };
        let running = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // "PID (ssh) S …": an ssh that is not a zombie.
            stat.contains("(ssh) ") && !stat.contains("(ssh) Z")
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        while running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if running() {
            // SAFETY: kill has no memory preconditions; the PID is our
            // master's, checked just above to be an ssh process.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    /// Runs the jobs (host, shell command, its stdin), the hosts at once
    /// and each host's jobs in turn, and waits for all: a step that visits
    /// every host costs the slowest host's round trips, not their sum (a
    /// remote login shell's start-up files run for every command), and a
    /// host's master connection never carries more than one of them (sshd
    /// allows 10 sessions on a connection by default). Results in the
    /// jobs' order.
    fn run_each(&self, jobs: Vec<Job>) -> Vec<Result<String>> {
        let mut by_host: Vec<(usize, Vec<usize>)> = Vec::new();
        for (k, (i, _, _)) in jobs.iter().enumerate() {
            match by_host.iter_mut().find(|(h, _)| h == i) {
                Some((_, ks)) => ks.push(k),
                None => by_host.push((*i, vec![k])),
            }
        }
        let clients: Vec<(Vec<String>, &str)> = by_host
            .iter()
            .map(|&(i, _)| (self.ssh_argv(i), self.remote[i].name.as_str()))
            .collect();
        let jobs = &jobs;
        let mut results: Vec<Option<Result<String>>> = jobs.iter().map(|_| None).collect();
        std::thread::scope(|s| {
            let running: Vec<_> = by_host
                .iter()
                .zip(&clients)
                .map(|((_, ks), (argv, name))| {
                    s.spawn(move || {
                        ks.iter()
                            .map(|&k| {
                                let (_, script, stdin) = &jobs[k];
                                (k, run_argv(argv, name, script, stdin.clone()))
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for h in running {
                // A panicking job leaves its host's results None (below).
                for (k, r) in h.join().unwrap_or_default() {
                    results[k] = Some(r);
                }
            }
        });
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("an ssh job panicked"))))
            .collect()
    }

    /// The job (for [`Ssh::run_each`]) that copies a local file to `remote`
    /// on host `i` (`ssh … 'cat > FILE'`) with the given mode, and what it
    /// does, for its error.
    fn upload_job(
        &self,
        i: usize,
        local: &Path,
        remote: &str,
        mode: &str,
        reads: &mut Reads,
    ) -> Result<(Job, String)> {
        let data = match reads.get(local) {
            Some(d) => d.clone(),
            None => {
                let d: Arc<[u8]> = std::fs::read(local)
                    .with_context(|| format!("reading {}", local.display()))?
                    .into();
                reads.insert(local.to_path_buf(), d.clone());
                d
            }
        };
        let dir = Path::new(remote)
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "/".into());
        let part = format!("{remote}.part");
        let script = format!(
            "mkdir -p {d} && cat > {p} && chmod {mode} {p} && mv -f {p} {r}",
            d = shell_quote(&dir),
            p = shell_quote(&part),
            r = shell_quote(remote)
        );
        let what = format!("copying {} to {}", local.display(), self.remote[i].name);
        Ok(((i, script, Some(data)), what))
    }

    /// Runs `jobs`, each with what it does, at once (`Ssh::run_each`);
    /// the first failure, said with what it was doing.
    fn run_all(&self, jobs: Vec<(Job, String)>) -> Result<()> {
        let (jobs, whats): (Vec<Job>, Vec<String>) = jobs.into_iter().unzip();
        for (done, what) in self.run_each(jobs).into_iter().zip(whats) {
            done.context(what)?;
        }
        Ok(())
    }

    /// Host `i`'s copy of the testbed's key.
    fn key_path(&self, i: usize) -> String {
        format!("{}/lab.key", self.session[i])
    }

    /// Where a local path under the roots lives on host `i` (None: not under them).
    pub fn map(&self, i: usize, local: &Path) -> Option<String> {
        if let Ok(rest) = local.strip_prefix(&self.tmpfs) {
            return Some(format!("{}/{}", self.remote_tmpfs(), rest.display()));
        }
        if !local.is_absolute() || !self.roots.iter().any(|r| local.starts_with(r)) {
            return None;
        }
        Some(format!("{}/fs{}", self.session[i], local.display()))
    }

    /// [`Ssh::map`] of a path the lab made (its absence is a bug here).
    fn mapped(&self, i: usize, local: &Path) -> Result<String> {
        self.map(i, local)
            .with_context(|| format!("{} is not under the lab's directories", local.display()))
    }

    /// The hosts' directory for copies on tmpfs, removed at teardown.
    fn remote_tmpfs(&self) -> String {
        format!("/dev/shm/rmcast-lab-{}", self.id)
    }

    /// Where a program given by path runs from on host `i`.
    fn program_path(&self, i: usize, program: &str) -> String {
        let p = Path::new(program);
        if p.is_absolute() {
            let name = p
                .file_name()
                .map_or_else(|| "program".into(), |n| n.to_string_lossy().into_owned());
            format!("{}/bin/{name}", self.session[i])
        } else {
            program.to_string()
        }
    }

    /// Copies what a command on host `i` reads (its program when given by
    /// path, files named in its arguments) and makes the directories it
    /// writes into, once per host.
    pub fn stage(&self, i: usize, program: &str, args: &[String]) -> Result<()> {
        self.stage_many(std::iter::once((i, program, args)))
    }

    /// [`Ssh::stage`] for several commands, every host's copies at once.
    pub fn stage_many<'a>(
        &self,
        procs: impl IntoIterator<Item = (usize, &'a str, &'a [String])>,
    ) -> Result<()> {
        let mut jobs = Vec::new();
        let mut reads = Reads::new();
        for (i, program, args) in procs {
            self.stage_jobs(i, program, args, &mut jobs, &mut reads)?;
        }
        self.run_all(jobs)
    }

    /// The uploads and `mkdir` that stage `program args` on host `i`
    /// (what is staged already is not again).
    fn stage_jobs(
        &self,
        i: usize,
        program: &str,
        args: &[String],
        jobs: &mut Vec<(Job, String)>,
        reads: &mut Reads,
    ) -> Result<()> {
        let mut dirs = Vec::new();
        let p = Path::new(program);
        if p.is_absolute() && self.staged.borrow_mut().insert((i, p.to_path_buf())) {
            let meta = std::fs::metadata(p).with_context(|| format!("program {program}"))?;
            if !meta.is_file() {
                bail!("program {program} is not a file");
            }
            jobs.push(self.upload_job(i, p, &self.program_path(i, program), "755", reads)?);
        }
        for a in args {
            let local = Path::new(a);
            let Some(remote) = self.map(i, local) else {
                continue;
            };
            if !self.staged.borrow_mut().insert((i, local.to_path_buf())) {
                continue;
            }
            match std::fs::metadata(local) {
                Ok(m) if m.is_file() => {
                    jobs.push(self.upload_job(i, local, &remote, "644", reads)?);
                }
                Ok(m) if m.is_dir() => dirs.push(remote),
                _ => {
                    if let Some(parent) = Path::new(&remote).parent() {
                        dirs.push(parent.display().to_string());
                    }
                }
            }
        }
        if !dirs.is_empty() {
            let quoted: Vec<String> = dirs.iter().map(|d| shell_quote(d)).collect();
            let script = format!("mkdir -p {}", quoted.join(" "));
            let what = format!("{}: making the run's directories", self.remote[i].name);
            jobs.push(((i, script, None), what));
        }
        Ok(())
    }

    /// The ssh client that runs `program args` on host `i` with `env` and
    /// the testbed's key: the remote shell says its PID, then execs the
    /// tool, so the PID is the tool's.
    pub fn command(
        &self,
        i: usize,
        program: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> Command {
        let mut words = vec![
            "env".to_string(),
            format!("{}={}", rmcast::KEY_FILE_ENV, self.key_path(i)),
        ];
        words.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
        words.push(self.program_path(i, program));
        words.extend(
            args.iter()
                .map(|a| self.map(i, Path::new(a)).unwrap_or_else(|| a.clone())),
        );
        let quoted: Vec<String> = words.iter().map(|w| shell_quote(w)).collect();
        // The shell starts the tool as its child and says its PID; a
        // watchdog ends the tool by that PID after the testbed's longest
        // life, should the runner never come back to do it (the runner
        // died, the network went): it checks each second that the PID is
        // still the tool (its start time), leaves within a second of the
        // tool's end, and holds none of the session's descriptors. When
        // the tool ends, the shell says its CPU time (`times`, children's
        // line) and exits with its status.
        let script = format!(
            "cd {dir} || exit 126; {tool} & p=$!; \
             st=$(cut -d' ' -f22 /proc/$p/stat 2>/dev/null); \
             (n=0; while [ $n -lt {life} ]; do sleep 1; \
             [ \"$(cut -d' ' -f22 /proc/$p/stat 2>/dev/null)\" = \"$st\" ] || exit 0; n=$((n+1)); done; \
             kill -9 $p) </dev/null >/dev/null 2>&1 & \
             echo {REMOTE_PID_PREFIX}$p >&2; wait $p; rc=$?; \
             echo {REMOTE_TIMES_MARK} >&2; times >&2; exit $rc",
            dir = shell_quote(&self.session[i]),
            tool = quoted.join(" "),
            life = self.max_life_s,
        );
        let argv = self.ssh_argv(i);
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]).arg(script);
        c
    }

    /// Stages and starts `program args` on host `i` (see [`Ssh::command`]).
    pub fn spawn(
        &self,
        i: usize,
        program: &str,
        args: &[String],
        env: &[(String, String)],
        label: String,
        dir: &Path,
    ) -> Result<Proc> {
        self.stage(i, program, args)?;
        let cmd = self.command(i, program, args, env);
        Proc::spawn_remote(
            cmd,
            label,
            i,
            dir,
            Remote {
                node: self.remote[i].name.clone(),
                ssh: self.ssh_argv(i),
                cpu: None,
            },
        )
    }

    /// Brings back what hosts 0..n wrote under `local` (a directory under
    /// the roots), merged into it: `tar` over ssh, from every host at once.
    pub fn fetch_all(&self, n: usize, local: &Path) -> Result<()> {
        std::fs::create_dir_all(local)?;
        let jobs = (0..n)
            .map(|i| {
                Ok((
                    self.ssh_argv(i),
                    self.remote[i].name.as_str(),
                    self.mapped(i, local)?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        std::thread::scope(|s| {
            let running: Vec<_> = jobs
                .iter()
                .map(|(argv, name, remote)| s.spawn(move || fetch_argv(argv, name, remote, local)))
                .collect();
            for h in running {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a fetch over ssh panicked")))?;
            }
            Ok(())
        })
    }

    /// The files under each `(i, local)`'s place on host `i`, hashed there
    /// by this program (`self_cmd`, copied to the host) and listed back as
    /// JSON; every host at once.
    pub fn list_copies_each(
        &self,
        dirs: &[(usize, &Path)],
        self_cmd: &[String],
    ) -> Result<Vec<Vec<CopyFile>>> {
        self.stage_many(
            dirs.iter()
                .map(|&(i, _)| (i, self_cmd[0].as_str(), &[][..])),
        )?;
        let jobs = dirs
            .iter()
            .map(|&(i, local)| {
                let mut words = vec![self.program_path(i, &self_cmd[0])];
                words.extend(self_cmd[1..].iter().cloned());
                words.extend(["list-copies".to_string(), self.mapped(i, local)?]);
                let quoted: Vec<String> = words.iter().map(|w| shell_quote(w)).collect();
                Ok((i, quoted.join(" "), None))
            })
            .collect::<Result<Vec<Job>>>()?;
        dirs.iter()
            .zip(self.run_each(jobs))
            .map(|(&(i, _), text)| {
                let name = &self.remote[i].name;
                let text = text.with_context(|| format!("{name}: listing the copies"))?;
                serde_json::from_str(text.trim())
                    .with_context(|| format!("{name}: the copies' listing"))
            })
            .collect()
    }

    /// Removes each `(i, local)`'s place on host `i` (a run's copies), on
    /// every host at once; each host's outcome.
    pub fn remove_each(&self, dirs: &[(usize, &Path)]) -> Vec<Result<()>> {
        let mut jobs = Vec::new();
        let mut results: Vec<Result<()>> = Vec::new();
        for &(i, local) in dirs {
            match self.mapped(i, local) {
                Ok(remote) => {
                    jobs.push((i, format!("rm -rf {}", shell_quote(&remote)), None));
                    results.push(Ok(()));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        let mut done = self.run_each(jobs).into_iter();
        for (r, &(i, local)) in results.iter_mut().zip(dirs) {
            if r.is_ok() {
                *r = done
                    .next()
                    .expect("one job per mapped directory")
                    .map(|_| ());
                // Staged again if a later command names it.
                self.staged.borrow_mut().remove(&(i, local.to_path_buf()));
            }
        }
        results
    }

    /// Progress of hosts 1..: bytes allocated under each `dirs[k]` (host
    /// k) and the text of its status file, as last seen. Probes run in the
    /// background, one `du` per host a second, so the watcher never waits
    /// on the network.
    pub fn probe(
        &self,
        dirs: &[PathBuf],
        status: Option<&[PathBuf]>,
    ) -> Vec<(u64, Option<String>)> {
        let mut p = self.probes.borrow_mut();
        if p.seen.len() != dirs.len() {
            p.seen = vec![(0, None); dirs.len()];
        }
        // Collect the probes that answered.
        let mut still = Vec::new();
        for (k, mut child) in std::mem::take(&mut p.in_flight) {
            match child.try_wait() {
                Ok(Some(_)) => {
                    let mut text = String::new();
                    if let Some(mut o) = child.stdout.take() {
                        let _ = o.read_to_string(&mut text);
                    }
                    let mut lines = text.splitn(2, '\n');
                    let bytes = lines
                        .next()
                        .and_then(|l| l.split_whitespace().next()?.parse().ok());
                    let st = lines.next().map(str::to_string).filter(|t| !t.is_empty());
                    if let Some(b) = bytes {
                        p.seen[k] = (b, st);
                    }
                }
                Ok(None) => still.push((k, child)),
                Err(_) => {}
            }
        }
        p.in_flight = still;
        let now = Instant::now();
        if p.in_flight.is_empty() && p.next.is_none_or(|t| now >= t) {
            p.next = Some(now + Duration::from_secs(1));
            for (k, d) in dirs.iter().enumerate().skip(1) {
                let Some(remote) = self.map(k, d) else {
                    continue;
                };
                let mut script = format!("du -sB1 {} 2>/dev/null || echo 0", shell_quote(&remote));
                if let Some(f) = status.and_then(|s| s.get(k - 1))
                    && let Some(rf) = self.map(k, f)
                {
                    let _ = write!(script, "; cat {} 2>/dev/null", shell_quote(&rf));
                }
                let argv = self.ssh_argv(k);
                if let Ok(child) = Command::new(&argv[0])
                    .args(&argv[1..])
                    .arg(script)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                {
                    p.in_flight.push((k, child));
                }
            }
        }
        p.seen.clone()
    }

    /// Ends the probes still in flight (their ssh clients, by PID).
    pub fn stop_probes(&self) {
        let mut p = self.probes.borrow_mut();
        for (_, mut c) in std::mem::take(&mut p.in_flight) {
            let _ = c.kill();
            let _ = c.wait();
        }
        p.seen.clear();
        p.next = None;
    }

    /// Counters of the tools' interface on hosts 0..n.
    pub fn counters(&self, n: usize) -> Result<Vec<IfCounters>> {
        self.read_counters((0..n).map(|i| (i, self.remote[i].iface.as_str())))
    }

    /// Counters of every relay interface (upstream, then downstream, of r1,
    /// then r2, …).
    pub fn relay_counters(&self) -> Result<Vec<IfCounters>> {
        self.read_counters((self.hosts.len()..self.remote.len()).flat_map(|i| {
            self.remote[i]
                .interfaces()
                .into_iter()
                .map(move |(ifc, _)| (i, ifc))
        }))
    }

    /// The counters of each (host, interface), read on all hosts at once.
    fn read_counters<'a>(
        &self,
        ifaces: impl Iterator<Item = (usize, &'a str)>,
    ) -> Result<Vec<IfCounters>> {
        let jobs = ifaces
            .map(|(i, iface)| {
                let ifc = shell_quote(iface);
                let files = ["tx_bytes", "tx_packets", "rx_bytes", "rx_packets"]
                    .map(|f| format!("/sys/class/net/{ifc}/statistics/{f}"))
                    .join(" ");
                (i, format!("cat {files}"), None)
            })
            .collect();
        self.run_each(jobs)
            .into_iter()
            .map(|text| parse_counters(&text?))
            .collect()
    }

    /// Random loss with probability `p` on the receivers' UDP and TCP input
    /// (the netns testbed's nftables rule, in a table of the lab's own);
    /// 0 removes it. Needs root and `nft` on the receivers.
    pub fn set_loss(&mut self, p: f64) -> Result<()> {
        if !(0.0..1.0).contains(&p) {
            bail!("loss {p} is outside 0..1");
        }
        if p == 0.0 && self.loss == 0.0 {
            return Ok(());
        }
        let per_100k = (p * 100_000.0).round() as u64;
        let mut script = format!("add table inet {LOSS_TABLE}\ndelete table inet {LOSS_TABLE}\n");
        if per_100k > 0 {
            writeln!(
                script,
                "table inet {LOSS_TABLE} {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n    \
                 iifname {{ IFACES }} meta l4proto udp numgen random mod 100000 < {per_100k} counter drop\n    \
                 iifname {{ IFACES }} tcp dport != SSHPORT numgen random mod 100000 < {per_100k} counter drop\n  }}\n}}"
            )?;
        }
        let jobs = (1..self.remote.len())
            .map(|i| {
                // The lab's own ssh connections (to sshd's port) are spared.
                let ifaces: Vec<String> = self.remote[i]
                    .interfaces()
                    .iter()
                    .map(|(ifc, _)| format!("\"{ifc}\""))
                    .collect();
                let s = script
                    .replace("IFACES", &ifaces.join(", "))
                    .replace("SSHPORT", &self.remote[i].port.to_string());
                (i, "nft -f -".to_string(), Some(s.into_bytes().into()))
            })
            .collect();
        for (i, done) in (1..).zip(self.run_each(jobs)) {
            done.with_context(|| {
                format!(
                    "{}: setting loss with nftables (needs root and nft there)",
                    self.remote[i].name
                )
            })?;
        }
        self.loss = p;
        Ok(())
    }

    /// Packets the loss rules dropped so far, summed over receivers.
    pub fn loss_drops(&self) -> Result<u64> {
        if self.loss == 0.0 {
            return Ok(0);
        }
        let jobs = (1..self.remote.len())
            .map(|i| (i, format!("nft list table inet {LOSS_TABLE}"), None))
            .collect();
        let mut total = 0;
        for text in self.run_each(jobs) {
            total += nft_counted_packets(&text?);
        }
        Ok(total)
    }

    /// Host `i`'s interface.
    pub fn iface(&self, i: usize) -> &str {
        &self.remote[i].iface
    }

    /// What was built: which inventory host is which lab host.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "ssh testbed {}: {} hosts and {} relay host(s) from the inventory, not shaped (tools paced to the scenario's rate)",
            self.id,
            self.hosts.len(),
            self.relays.len()
        );
        if let Some(seg) = &self.segments {
            let _ = write!(
                s,
                ", segments {:?} joined by {} relay(s)",
                seg.per_segment(),
                self.relays.len()
            );
        }
        for (i, h) in self.remote.iter().enumerate() {
            let node = if i < self.hosts.len() {
                format!("h{i}")
            } else {
                format!("r{}", i - self.hosts.len() + 1)
            };
            let down = h
                .down
                .as_ref()
                .map(|(ifc, a)| format!(", {ifc} {a}"))
                .unwrap_or_default();
            let _ = write!(
                s,
                "\n  {node} = {} ({}{}, {} {}{down}, session {}, ssh master pid {})",
                h.name,
                h.user
                    .as_deref()
                    .map(|u| format!("{u}@"))
                    .unwrap_or_default(),
                h.address,
                h.iface,
                h.data_address,
                self.session[i],
                self.masters[i].map_or_else(|| "unknown".into(), |p| p.to_string()),
            );
        }
        s
    }

    /// Removes the loss rules and the session directories, and ends the
    /// master connections. Every step is tried on every host.
    pub fn teardown(&mut self) -> Result<()> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        self.stop_probes();
        let hosts: Vec<usize> = (0..self.remote.len())
            .filter(|&i| self.connected[i])
            .collect();
        let jobs = hosts
            .iter()
            .map(|&i| {
                let mut script = format!(
                    "rm -rf {} {}",
                    shell_quote(&self.session[i]),
                    shell_quote(&self.remote_tmpfs())
                );
                if self.loss != 0.0 && i > 0 {
                    let _ = write!(
                        script,
                        "; nft delete table inet {LOSS_TABLE} 2>/dev/null; true"
                    );
                }
                (i, script, None)
            })
            .collect();
        let errors: Vec<String> = self
            .run_each(jobs)
            .into_iter()
            .filter_map(|r| r.err().map(|e| format!("{e:#}")))
            .collect();
        for i in hosts {
            self.stop_master(i);
        }
        if !errors.is_empty() {
            bail!("ssh testbed teardown: {}", errors.join("; "));
        }
        Ok(())
    }
}

/// Runs `script` through the ssh client `argv` (to host `name`), bounded;
/// fails with its stderr.
fn run_argv(argv: &[String], name: &str, script: &str, stdin: Option<Arc<[u8]>>) -> Result<String> {
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..])
        .arg(script)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().context("cannot run ssh")?;
    let feeder = stdin.map(|data| {
        let mut pipe = child.stdin.take().expect("stdin is piped");
        std::thread::spawn(move || pipe.write_all(&data))
    });
    let mut out = child.stdout.take().expect("stdout is piped");
    let mut err = child.stderr.take().expect("stderr is piped");
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let status = wait_bounded(child, CONTROL_TIMEOUT);
    if let Some(f) = feeder {
        let _ = f.join();
    }
    let out = reader.join().unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    let status = status?;
    if !status.success() {
        bail!(
            "{}: `{script}` failed ({status}): {}",
            name,
            String::from_utf8_lossy(&err).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Brings back what the host behind the ssh client `argv` (named `name`)
/// wrote under `remote` into `local`: `tar` over ssh.
fn fetch_argv(argv: &[String], name: &str, remote: &str, local: &Path) -> Result<()> {
    let q = shell_quote(remote);
    // Always an archive (of an empty directory when nothing was written),
    // streamed straight into tar here.
    let mut ssh = Command::new(&argv[0])
        .args(&argv[1..])
        .arg(format!("mkdir -p {q} && cd {q} && tar -cf - ."))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot run ssh")?;
    let pipe = ssh.stdout.take().expect("stdout is piped");
    let tar = Command::new("tar")
        .args(["-xf", "-", "-C"])
        .arg(local)
        .stdin(Stdio::from(pipe))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run tar")?;
    let status = wait_bounded(ssh, CONTROL_TIMEOUT)?;
    let out = tar.wait_with_output()?;
    if !status.success() {
        bail!("{}: fetching {remote} failed ({status})", name);
    }
    if !out.status.success() {
        bail!(
            "unpacking {}'s {remote}: {}",
            name,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl Drop for Ssh {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!("rmcast-lab: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn a_segmented_layout_takes_each_segments_hosts_and_its_relay() {
        let text = r#"
            [defaults]
            workdir = "/w"
            iface = "eth0"
            [[hosts]]
            name = "s"
            address = "10.0.0.1"
            [[hosts]]
            name = "b1"
            address = "10.0.1.2"
            segment = 1
            [[hosts]]
            name = "a1"
            address = "10.0.0.2"
            [[hosts]]
            name = "b2"
            address = "10.0.1.3"
            segment = 1
            [[relays]]
            name = "r"
            address = "10.0.0.254"
            down_address = "10.0.1.1"
            down_iface = "eth1"
            to_segment = 1
        "#;
        let hosts = toml::from_str::<Inventory>(text)
            .unwrap()
            .resolve()
            .unwrap();
        let seg = Segments::new(&[1, 2]).unwrap();
        let (remote, relays) = Ssh::segmented(&hosts, &seg).unwrap();
        let names: Vec<&str> = remote.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["s", "a1", "b1", "b2", "r"]);
        assert_eq!(relays.len(), 1);
        assert_eq!((relays[0].from, relays[0].to), (0, 1));
        assert_eq!(relays[0].up_addr, Ipv4Addr::new(10, 0, 0, 254));
        assert_eq!(relays[0].down_addr, Ipv4Addr::new(10, 0, 1, 1));
        assert_eq!(remote[4].interfaces().len(), 2);
        // Too few hosts on a segment, no relay for one, a relay that says
        // another upstream than the scenario.
        let err = |seg: Segments, h: &Hosts| format!("{:#}", Ssh::segmented(h, &seg).unwrap_err());
        assert!(
            err(Segments::new(&[1, 3]).unwrap(), &hosts).contains("segment 1 needs 3 receivers")
        );
        assert!(err(Segments::new(&[1, 1, 1]).unwrap(), &hosts).contains("segment 2 needs 1"));
        let mut none = hosts.clone();
        none.relays.clear();
        assert!(err(Segments::new(&[1, 2]).unwrap(), &none).contains("with to_segment = 1"));
        let mut other = hosts.clone();
        other.relays[0].from_segment = Some(1);
        assert!(
            err(Segments::new(&[1, 2]).unwrap(), &other).contains("from segment 0 in the scenario")
        );
        // The inventory's own mistakes.
        let refused = |bad: &str, instead: &str| {
            let t = text.replace(bad, instead);
            let inv = toml::from_str::<Inventory>(&t).unwrap();
            format!("{:#}", inv.resolve().unwrap_err())
        };
        for (bad, instead) in [
            ("to_segment = 1", "to_segment = 0"),
            ("down_iface = \"eth1\"", "down_iface = \"a b\""),
        ] {
            let e = refused(bad, instead);
            assert!(e.contains("relay 0"), "{instead}: {e}");
        }
        let e = refused(
            "name = \"s\"\n            address = \"10.0.0.1\"",
            "name = \"s\"\n            address = \"10.0.0.1\"\n            segment = 1",
        );
        assert!(e.contains("sits on segment 0"), "{e}");
    }

    #[test]
    fn quoting_survives_a_shell() {
        for w in [
            "plain",
            "",
            "two words",
            "it's",
            "$HOME",
            "a\"b",
            "x;rm -rf /",
            "\\",
        ] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", shell_quote(w)))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), w, "{w:?}");
        }
    }
}
