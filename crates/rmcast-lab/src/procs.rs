//! Processes the runner starts: spawned into their own process group with
//! a parent-death signal, reaped with `wait4` (exit status and CPU time),
//! and only ever killed by their own PID. A process on a remote host (the
//! ssh testbed) is the local `ssh` client plus the remote PID that the
//! remote shell printed before it exec'd the tool: signals go to that PID
//! over ssh ([`Remote`]).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// exit(code).
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

/// A finished process.
#[derive(Clone, Copy, Debug)]
pub struct Ended {
    /// When the runner saw it end.
    pub at: Instant,
    /// Exit code or signal.
    pub exit: Exit,
    /// User CPU seconds (wait4 rusage).
    pub user_s: f64,
    /// System CPU seconds.
    pub sys_s: f64,
}

/// A process the runner started.
pub struct Proc {
    /// Label, e.g. `h3 udp-receiver`.
    pub label: String,
    /// Host index (0 = sender).
    pub host: usize,
    /// The PID (of the tool itself: `ip netns exec` execs it).
    pub pid: i32,
    /// When it was started.
    pub started: Instant,
    /// Set once reaped.
    pub ended: Option<Ended>,
    /// Whether the runner killed it (and why).
    pub killed_by_us: Option<String>,
    /// Its stdout file.
    pub stdout: PathBuf,
    /// Its stderr file.
    pub stderr: PathBuf,
    /// Where it runs when that is not this host (the ssh testbed).
    pub remote: Option<Remote>,
}

/// The remote half of a process started over ssh.
#[derive(Clone, Debug)]
pub struct Remote {
    /// The inventory's name of the host.
    pub node: String,
    /// The `ssh … DESTINATION` argv that runs a command there.
    pub ssh: Vec<String>,
    /// The tool's user and system CPU seconds, once it ended and its shell
    /// said them.
    pub cpu: Option<(f64, f64)>,
}

/// What a remote shell writes on stderr before the tool's PID (once the
/// tool runs, so it may follow the tool's first output).
pub const REMOTE_PID_PREFIX: &str = "rmcast-lab-pid=";

/// The line before the remote shell's `times` (its children's CPU, the
/// tool's), last on stderr once the tool ended.
pub const REMOTE_TIMES_MARK: &str = "rmcast-lab-times";

/// The remote PID a remote process's stderr file names.
pub fn remote_pid_in(stderr: &Path) -> Option<i32> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(stderr)
        .ok()?
        .take(64 * 1024)
        .read_to_end(&mut head)
        .ok()?;
    let text = String::from_utf8_lossy(&head);
    let at = text.find(REMOTE_PID_PREFIX)? + REMOTE_PID_PREFIX.len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok().filter(|&p| p > 1)
}

/// The tool's user and system CPU seconds from the remote shell's `times`
/// at the end of its stderr (`0m0.152000s 0m0.040000s`, the children's line).
pub fn remote_times_in(stderr: &Path) -> Option<(f64, f64)> {
    let text = tail(stderr, 4096);
    let after = &text[text.rfind(REMOTE_TIMES_MARK)? + REMOTE_TIMES_MARK.len()..];
    let children = after
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .nth(1)?;
    let mut t = children.split_whitespace().map(parse_times_field);
    Some((t.next()??, t.next()??))
}

/// `1m2.500s` → 62.5.
fn parse_times_field(f: &str) -> Option<f64> {
    let (m, s) = f.strip_suffix('s')?.split_once('m')?;
    Some(m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
}

/// A remote process's stderr without the lab's own lines (the PID, the
/// closing `times`).
fn strip_remote_lines(text: &str) -> String {
    let body = match text.rfind(REMOTE_TIMES_MARK) {
        Some(at) => &text[..at],
        None => text,
    };
    body.lines()
        .filter(|l| !l.contains(REMOTE_PID_PREFIX))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

/// Waits for a short-lived helper (ssh) up to `limit`, then kills it by
/// its PID and fails.
pub(crate) fn wait_bounded(
    mut child: std::process::Child,
    limit: Duration,
) -> Result<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(st);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!(
                "process {} did not finish within {} s",
                child.id(),
                limit.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

impl Proc {
    /// Spawns `cmd` with stdin from /dev/null and stdout/stderr into files.
    pub fn spawn(mut cmd: Command, label: String, host: usize, dir: &Path) -> Result<Proc> {
        let base = label.replace([' ', '/'], "_");
        let stdout = dir.join(format!("{base}.stdout"));
        let stderr = dir.join(format!("{base}.stderr"));
        cmd.stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout)?)
            .stderr(std::fs::File::create(&stderr)?);
        use std::os::unix::process::CommandExt;
        // Own process group: a Ctrl-C at the terminal reaches only the runner,
        // which then stops everything in order.
        cmd.process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                // If the runner dies (even by SIGKILL), its tools die with it.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {label} ({:?})", cmd.get_program()))?;
        let pid = child.id() as i32;
        drop(child); // reaped by wait4 below, not by std
        Ok(Proc {
            label,
            host,
            pid,
            started: Instant::now(),
            ended: None,
            killed_by_us: None,
            stdout,
            stderr,
            remote: None,
        })
    }

    /// The PID on the remote host (ssh testbed), once its shell said it.
    pub fn remote_pid(&self) -> Option<i32> {
        self.remote.as_ref()?;
        remote_pid_in(&self.stderr)
    }

    /// Sends `sig` to the remote PID over ssh (bounded). Before the remote
    /// shell printed its PID there is nothing to signal but the local
    /// client: it is waited for up to 2 s.
    fn signal_remote(&self, sig: libc::c_int) -> bool {
        let Some(r) = &self.remote else {
            return false;
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        let pid = loop {
            if let Some(pid) = self.remote_pid() {
                break pid;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut c = Command::new(&r.ssh[0]);
        c.args(&r.ssh[1..])
            .arg(format!("kill -{sig} {pid} 2>/dev/null"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c.spawn()
            .map_err(anyhow::Error::from)
            .and_then(|child| wait_bounded(child, Duration::from_secs(10)))
            .is_ok_and(|st| st.success())
    }

    /// [`Proc::spawn`] for the ssh client of a tool on a remote host.
    pub fn spawn_remote(
        cmd: Command,
        label: String,
        host: usize,
        dir: &Path,
        remote: Remote,
    ) -> Result<Proc> {
        let mut p = Proc::spawn(cmd, label, host, dir)?;
        p.remote = Some(remote);
        // The tool started when the remote shell says its PID, not when ssh
        // starts here: a run's time then leaves out the session's set-up
        // (which the controller's clock alone measures; the hosts' clocks
        // are never compared).
        let deadline = Instant::now() + Duration::from_secs(15);
        while p.remote_pid().is_none() && Instant::now() < deadline && !p.poll() {
            std::thread::sleep(Duration::from_millis(1));
        }
        if p.remote_pid().is_some() {
            p.started = Instant::now();
        }
        Ok(p)
    }

    /// Reaps the process if it ended; true once it has.
    pub fn poll(&mut self) -> bool {
        if self.ended.is_some() {
            return true;
        }
        let mut status: libc::c_int = 0;
        // SAFETY: zeroed rusage is a valid out-parameter.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: pid is our child; status and ru are valid pointers.
        let r = unsafe { libc::wait4(self.pid, &mut status, libc::WNOHANG, &mut ru) };
        if r == self.pid {
            let exit = if libc::WIFSIGNALED(status) {
                Exit::Signal(libc::WTERMSIG(status))
            } else {
                Exit::Code(libc::WEXITSTATUS(status))
            };
            let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            let (mut user_s, mut sys_s) = (secs(ru.ru_utime), secs(ru.ru_stime));
            if let Some(r) = &mut self.remote {
                // The tool's own, as the remote shell measured it.
                r.cpu = remote_times_in(&self.stderr);
                (user_s, sys_s) = r.cpu.unwrap_or((0.0, 0.0));
            }
            self.ended = Some(Ended {
                at: Instant::now(),
                exit,
                user_s,
                sys_s,
            });
            true
        } else if r < 0 {
            // ECHILD: not ours any more; record it as gone.
            self.ended = Some(Ended {
                at: Instant::now(),
                exit: Exit::Code(-1),
                user_s: 0.0,
                sys_s: 0.0,
            });
            true
        } else {
            false
        }
    }

    /// Sends `sig` to this PID (only while it has not been reaped) and notes why.
    pub fn kill(&mut self, sig: libc::c_int, why: &str) {
        if self.poll() {
            return;
        }
        if self.killed_by_us.is_none() {
            self.killed_by_us = Some(why.to_string());
        }
        // A remote tool is signalled where it runs; its ssh client then
        // ends by itself. The client is only killed when that failed.
        if self.signal_remote(sig) {
            return;
        }
        // SAFETY: the PID is our unreaped child, so it cannot have been reused.
        unsafe { libc::kill(self.pid, sig) };
    }

    /// Sends a signal without marking the process as killed (fault injection: SIGSTOP).
    pub fn signal(&self, sig: libc::c_int) {
        if self.ended.is_none() && !self.signal_remote(sig) {
            // SAFETY: as in `kill`.
            unsafe { libc::kill(self.pid, sig) };
        }
    }

    /// Kills with SIGKILL and waits (bounded) until reaped.
    pub fn kill_and_reap(&mut self, why: &str) {
        self.kill(libc::SIGKILL, why);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.poll() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if self.remote.is_some() && !self.poll() {
            // The remote tool is gone but its client hangs on: end the client.
            // SAFETY: as in `kill`.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            let deadline = Instant::now() + Duration::from_secs(2);
            while !self.poll() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// The process state letter from /proc (R, S, D, T for stopped, Z).
    pub fn state(&self) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        stat.rsplit_once(") ")?.1.chars().next()
    }

    /// Bytes written so far (/proc/PID/io `wchar`), for progress detection.
    pub fn wchar(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/io", self.pid))
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| {
                    l.strip_prefix("wchar: ")
                        .and_then(|n| n.trim().parse().ok())
                })
            })
            .unwrap_or(0)
    }

    /// CPU seconds (user + system), once ended; a remote tool's as its
    /// host's shell measured it (none if it did not say).
    pub fn cpu_s(&self) -> Option<f64> {
        self.ended
            .filter(|_| self.remote.as_ref().is_none_or(|r| r.cpu.is_some()))
            .map(|e| e.user_s + e.sys_s)
    }

    /// The last `n` bytes of stderr, lossily decoded (without a remote
    /// shell's own lines).
    pub fn stderr_tail(&self, n: usize) -> String {
        if self.remote.is_none() {
            return tail(&self.stderr, n);
        }
        let t = strip_remote_lines(&tail(&self.stderr, n + 512));
        let start = t.len().saturating_sub(n);
        let start = (start..=t.len())
            .find(|&i| t.is_char_boundary(i))
            .unwrap_or(t.len());
        t[start..].trim().to_string()
    }
}

/// The last `n` bytes of a file, lossily decoded and trimmed.
pub fn tail(path: &Path, n: usize) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let start = bytes.len().saturating_sub(n);
    String::from_utf8_lossy(&bytes[start..]).trim().to_string()
}

/// Every process of one run; kills and reaps the rest when dropped.
#[derive(Default)]
pub struct ProcSet {
    /// The processes, receivers first, sender last.
    pub procs: Vec<Proc>,
}

impl ProcSet {
    /// Reaps whatever ended; true when all have.
    pub fn poll_all(&mut self) -> bool {
        let mut all = true;
        for p in &mut self.procs {
            all &= p.poll();
        }
        all
    }

    /// SIGKILLs every process still running (by PID) and reaps it.
    pub fn kill_all(&mut self, why: &str) {
        for p in &mut self.procs {
            p.kill(libc::SIGKILL, why);
        }
        for p in &mut self.procs {
            p.kill_and_reap(why);
        }
    }
}

impl Drop for ProcSet {
    fn drop(&mut self) {
        self.kill_all("runner stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn a_remote_shell_s_lines_are_read_and_left_out_of_the_tail() {
        // The tool wrote first, without a newline; the shell's PID line
        // landed after it; dash's `times` closes the file.
        let f = file(
            "starting...rmcast-lab-pid=4242\nwarning: late\nerror: gave up\n\
             rmcast-lab-times\n0m0.004000s 0m0.000000s\n1m2.500000s 0m0.250000s\n",
        );
        assert_eq!(remote_pid_in(f.path()), Some(4242));
        assert_eq!(remote_times_in(f.path()), Some((62.5, 0.25)));
        let mut p = Proc {
            label: "h1 tool".into(),
            host: 1,
            pid: 0,
            started: Instant::now(),
            ended: None,
            killed_by_us: None,
            stdout: f.path().into(),
            stderr: f.path().into(),
            remote: Some(Remote {
                node: "n1".into(),
                ssh: vec!["ssh".into()],
                cpu: None,
            }),
        };
        assert_eq!(p.stderr_tail(400), "warning: late\nerror: gave up");
        assert_eq!(p.stderr_tail(8), "gave up");
        // bash's `times` has milliseconds; no times at all: no CPU.
        let g = file("rmcast-lab-pid=7\nrmcast-lab-times\n0m0.001s 0m0.000s\n0m0.152s 0m0.040s\n");
        assert_eq!(remote_times_in(g.path()), Some((0.152, 0.04)));
        let h = file("rmcast-lab-pid=1\n");
        assert_eq!(remote_pid_in(h.path()), None, "never PID 1");
        assert_eq!(remote_times_in(h.path()), None);
        p.ended = Some(Ended {
            at: Instant::now(),
            exit: Exit::Code(0),
            user_s: 0.0,
            sys_s: 0.0,
        });
        assert_eq!(
            p.cpu_s(),
            None,
            "a remote tool whose CPU was not said has none"
        );
        p.remote.as_mut().unwrap().cpu = Some((1.0, 0.5));
        assert_eq!(
            p.cpu_s(),
            Some(0.0),
            "the Ended record carries it once polled"
        );
    }
}
