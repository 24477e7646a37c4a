//! One chaos scenario's namespace LAN: the lab's own testbed
//! ([`Netns`]) and process handling ([`ProcSet`]), plus what every
//! scenario needs to break things and to prove afterwards that nothing of
//! it is left: rmcast receivers and senders started by PID, bounded waits,
//! faults (signals, links, loss, a full disk) and the closing checks.

use crate::procs::{Exit, Proc, ProcSet};
use crate::scenario::files::{hash_file, make_object_k};
use crate::testbed::{Netns, NetnsSpec, Testbed, list_namespaces, run_cmd};
use anyhow::{Context, Result, bail, ensure};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The multicast group every chaos transfer uses (the LAN is its own).
pub const GROUP: &str = "239.77.0.1:7700";

/// What a scenario's LAN looks like.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Receivers h1..hN.
    pub receivers: u16,
    /// Object size in bytes.
    pub size: u64,
    /// Link rate (tbf on every host), also the sender's `--rate`.
    pub rate_bits_per_s: u64,
}

/// A tmpfs mounted over a receiver's output directory; unmounted on drop.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = run_cmd("umount", &["-l", &self.0.display().to_string()], None);
    }
}

/// A started process: its index in the scenario's [`ProcSet`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P(pub usize);

/// A scenario's LAN and everything it started. Dropped on any error:
/// processes are killed by PID, the tmpfs unmounted, the namespaces removed
/// (fields drop in that order).
pub struct Lan {
    procs: ProcSet,
    mounts: Vec<Mount>,
    tb: Testbed,
    /// The testbed id (`rml…`).
    pub id: String,
    /// Scenario work directory: objects, logs, `h1`..`hN` output dirs.
    pub work: PathBuf,
    rmcast: PathBuf,
    /// What was built.
    pub setup: Setup,
    /// Objects sent (k = 0 first), for the closing byte-exact check.
    objects: Vec<PathBuf>,
    /// Texts awaited in a process's output, and when each first appeared.
    watches: Vec<(P, String, Option<Instant>)>,
}

impl Lan {
    /// Builds the LAN (namespaces, 10.77.0.0/24, tbf at the rate) and object 0.
    pub fn new(work: &Path, rmcast: &Path, setup: Setup) -> Result<Lan> {
        std::fs::create_dir_all(work)?;
        let netns = Netns::create(&NetnsSpec {
            receivers: setup.receivers,
            rate_bits_per_s: Some(setup.rate_bits_per_s),
            mtu: 1500,
            segments: None,
        })?;
        let id = netns.id.clone();
        let mut lan = Lan {
            procs: ProcSet::default(),
            mounts: Vec::new(),
            tb: Testbed::Netns(netns),
            id,
            work: work.to_path_buf(),
            rmcast: rmcast.to_path_buf(),
            setup,
            objects: Vec::new(),
            watches: Vec::new(),
        };
        lan.object(0)?;
        for i in 1..=lan.setup.receivers as usize {
            std::fs::create_dir_all(lan.out_dir(i))?;
        }
        Ok(lan)
    }

    /// Object `k` (pseudo-random, distinct per k), created on first use.
    pub fn object(&mut self, k: usize) -> Result<PathBuf> {
        let p = make_object_k(&self.work, self.setup.size, k)?;
        if !self.objects.contains(&p) {
            self.objects.push(p.clone());
        }
        Ok(p)
    }

    /// Receiver `i`'s output directory.
    pub fn out_dir(&self, i: usize) -> PathBuf {
        self.work.join(format!("h{i}"))
    }

    /// Host `i`'s namespace.
    pub fn ns(&self, i: usize) -> &str {
        self.tb.hosts()[i].ns.as_deref().expect("netns host")
    }

    fn spawn(&mut self, host: usize, label: String, args: Vec<String>) -> Result<P> {
        self.spawn_env(host, label, args, &[])
    }

    fn spawn_env(
        &mut self,
        host: usize,
        label: String,
        args: Vec<String>,
        env: &[(&str, String)],
    ) -> Result<P> {
        let mut cmd = self
            .tb
            .command(host, &self.rmcast.display().to_string(), &args);
        // Plain log lines in the files (tracing honours NO_COLOR).
        cmd.env("NO_COLOR", "1");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let p = Proc::spawn(cmd, label, host, &self.work)?;
        self.procs.procs.push(p);
        Ok(P(self.procs.procs.len() - 1))
    }

    /// `rmcast recv` on host `i` (named `hI`, into `out_dir(i)`), plus `extra`.
    pub fn recv(&mut self, i: usize, extra: &[&str]) -> Result<P> {
        let addr = self.tb.hosts()[i].addr.to_string();
        self.spawn_recv(i, &["--group", GROUP, "--iface", &addr], extra)
    }

    /// `rmcast recv` on host `i` with `args`, named `hI`, into
    /// `out_dir(i)`, 20 s timeout, `--json`, then `extra` (last, so that
    /// it may repeat a flag to override it).
    fn spawn_recv(&mut self, i: usize, args: &[&str], extra: &[&str]) -> Result<P> {
        let mut all: Vec<String> = vec!["recv".to_string()];
        all.extend(args.iter().map(|s| s.to_string()));
        all.extend([
            "--out".to_string(),
            self.out_dir(i).display().to_string(),
            "--name".to_string(),
            format!("h{i}"),
            "--timeout".to_string(),
            "20s".to_string(),
            "--json".to_string(),
        ]);
        all.extend(extra.iter().map(|s| s.to_string()));
        let n = self.procs.procs.len();
        self.spawn(i, format!("h{i} recv {n}"), all)
    }

    /// `rmcast send` of object `k` on h0: nak-poll, paced at the link rate,
    /// `--receivers n`, plus `extra` (which may repeat a flag to override it).
    pub fn send(&mut self, k: usize, n: usize, extra: &[&str]) -> Result<P> {
        let object = self.object(k)?.display().to_string();
        let iface = self.tb.hosts()[0].addr.to_string();
        let (n, rate) = (n.to_string(), self.setup.rate_bits_per_s.to_string());
        let args = [
            &object,
            "--group",
            GROUP,
            "--iface",
            &iface,
            "--receivers",
            &n,
            "--protocol",
            "nak-poll",
            "--rate",
            &rate,
        ];
        self.spawn_send(&args, extra)
    }

    /// `rmcast send` on h0 with `args`, `--json`, then `extra` (last, so
    /// that it may repeat a flag to override it).
    fn spawn_send(&mut self, args: &[&str], extra: &[&str]) -> Result<P> {
        let all: Vec<String> = ["send"]
            .iter()
            .chain(args)
            .chain(&["--json"])
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
        let m = self.procs.procs.len();
        self.spawn(0, format!("h0 send {m}"), all)
    }

    /// The TCP overlay's control address: h0's, port 7701.
    pub fn overlay_control(&self) -> String {
        format!("{}:7701", self.tb.hosts()[0].addr)
    }

    /// `rmcast recv` on host `i` (named `hI`, into `out_dir(i)`) of a TCP
    /// overlay: it registers at [`Lan::overlay_control`] and takes data on
    /// any port of its address.
    pub fn recv_overlay(&mut self, i: usize) -> Result<P> {
        let control = self.overlay_control();
        let listen = format!("{}:0", self.tb.hosts()[i].addr);
        self.spawn_recv(i, &["--sender", &control, "--listen", &listen], &[])
    }

    /// `rmcast send` of object 0 on h0 over the TCP overlay `protocol`
    /// (`tcp-chain`, ...) to `n` receivers, plus `extra`. Overlays pace
    /// themselves: no `--rate`; the LAN's tbf sets the rate.
    pub fn send_overlay(&mut self, protocol: &str, n: usize, extra: &[&str]) -> Result<P> {
        let object = self.object(0)?.display().to_string();
        let (control, n) = (self.overlay_control(), n.to_string());
        let args = [
            &object,
            "--protocol",
            protocol,
            "--control",
            &control,
            "--receivers",
            &n,
        ];
        self.spawn_send(&args, extra)
    }

    /// The process behind `p`.
    pub fn proc(&mut self, p: P) -> &mut Proc {
        &mut self.procs.procs[p.0]
    }

    /// Its stdout and stderr so far.
    pub fn text(&self, p: P) -> String {
        let pr = &self.procs.procs[p.0];
        let out = std::fs::read_to_string(&pr.stdout).unwrap_or_default();
        let err = std::fs::read_to_string(&pr.stderr).unwrap_or_default();
        format!("{out}{err}")
    }

    /// From now on, notes when `needle` first appears in `p`'s output
    /// (checked every few milliseconds while the scenario waits).
    pub fn watch(&mut self, p: P, needle: &str) {
        self.watches.push((p, needle.to_string(), None));
    }

    /// When the watched `needle` first appeared in `p`'s output.
    pub fn seen(&mut self, p: P, needle: &str) -> Option<Instant> {
        self.tick();
        self.watches
            .iter()
            .find(|(q, n, _)| *q == p && n == needle)
            .and_then(|w| w.2)
    }

    /// Reaps what ended and checks the watches.
    fn tick(&mut self) {
        self.procs.poll_all();
        for k in 0..self.watches.len() {
            if self.watches[k].2.is_none() {
                let (p, needle) = (self.watches[k].0, self.watches[k].1.clone());
                if self.text(p).contains(&needle) {
                    self.watches[k].2 = Some(Instant::now());
                }
            }
        }
    }

    /// Sleeps `d` while watching (processes reaped as they end, so their
    /// end times are exact).
    pub fn pause(&mut self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until && !crate::signals::interrupted() {
            self.tick();
            std::thread::sleep(
                Duration::from_millis(5).min(until.saturating_duration_since(Instant::now())),
            );
        }
    }

    /// Waits (bounded) until `p` exits; its exit and when it was reaped.
    pub fn wait_exit(&mut self, p: P, within: Duration) -> Result<(Exit, Instant)> {
        let deadline = Instant::now() + within;
        loop {
            crate::signals::check()?;
            self.tick();
            if let Some(e) = self.procs.procs[p.0].ended {
                return Ok((e.exit, e.at));
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} still runs after {within:?}; its output:\n{}",
                    self.procs.procs[p.0].label,
                    self.text(p)
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A process's `--json` report (the last JSON line on its stdout).
    pub fn report(&self, p: P) -> Result<serde_json::Value> {
        let out = std::fs::read_to_string(&self.procs.procs[p.0].stdout)?;
        let line = out.lines().rev().find(|l| l.starts_with('{'));
        serde_json::from_str(line.unwrap_or_default())
            .with_context(|| format!("the --json report:\n{}", self.text(p)))
    }

    /// The sender's `--json` report: `failures` as (name, reason).
    pub fn failures(&self, p: P) -> Result<Vec<(String, String)>> {
        let v = self.report(p)?;
        Ok(v["failures"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| {
                (
                    f["name"].as_str().unwrap_or("").to_string(),
                    f["reason"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect())
    }

    /// Waits (bounded) until receiver process `p` has written `bytes`
    /// (its `wchar`): the transfer is under way.
    pub fn wait_written(&mut self, p: P, bytes: u64, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        loop {
            crate::signals::check()?;
            self.tick();
            let pr = &self.procs.procs[p.0];
            ensure!(
                pr.ended.is_none(),
                "{} ended before writing {bytes} bytes:\n{}",
                pr.label,
                self.text(p)
            );
            if pr.wchar() >= bytes {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "{} wrote only {} of {bytes} bytes in {within:?}",
                pr.label,
                pr.wchar()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Sends a signal to `p` (by PID, only while unreaped).
    pub fn signal(&mut self, p: P, sig: libc::c_int) {
        if sig == libc::SIGKILL {
            self.proc(p).kill(sig, "chaos");
        } else {
            self.proc(p).signal(sig);
        }
    }

    /// `ip link set eth0 up|down` inside host `i`'s namespace.
    pub fn link(&self, i: usize, up: bool) -> Result<()> {
        let state = if up { "up" } else { "down" };
        run_cmd(
            "ip",
            &["-n", self.ns(i), "link", "set", "eth0", state],
            None,
        )?;
        if up {
            // The route set at build time went with the carrier: restore it.
            let _ = run_cmd(
                "ip",
                &[
                    "-n",
                    self.ns(i),
                    "route",
                    "replace",
                    "default",
                    "dev",
                    "eth0",
                ],
                None,
            );
            let _ = run_cmd(
                "ip",
                &[
                    "-n",
                    self.ns(i),
                    "route",
                    "replace",
                    "224.0.0.0/4",
                    "dev",
                    "eth0",
                ],
                None,
            );
        }
        Ok(())
    }

    /// Host `i`'s network stops carrying multicast to it: an nftables
    /// table of its own in its namespace drops every incoming packet to
    /// 224.0.0.0/4 (counted; gone with the namespace).
    pub fn drop_multicast(&self, i: usize) -> Result<()> {
        let script = "table ip rmcast_chaos_nomcast {\n  chain input {\n    \
                      type filter hook input priority -10; policy accept;\n    \
                      ip daddr 224.0.0.0/4 counter drop\n  }\n}\n";
        run_cmd(
            "ip",
            &["netns", "exec", self.ns(i), "nft", "-f", "-"],
            Some(script),
        )
        .context("dropping multicast with nftables")?;
        Ok(())
    }

    /// Multicast packets [`Lan::drop_multicast`] dropped on host `i`.
    pub fn multicast_drops(&self, i: usize) -> Result<u64> {
        let text = run_cmd(
            "ip",
            &[
                "netns",
                "exec",
                self.ns(i),
                "nft",
                "list",
                "table",
                "ip",
                "rmcast_chaos_nomcast",
            ],
            None,
        )?;
        Ok(crate::testbed::nft_counted_packets(&text))
    }

    /// `rmcast bcast` of object 0 as torchrun starts it on host `i`: rank
    /// `i` of `size`, `MASTER_ADDR` h0's address, `MASTER_PORT` `port`
    /// (the group's; rank 0's TCP lobby takes the next); into
    /// `out_dir(i)`, `--json`, plus `extra`. Rank 0 is h0, the sender.
    pub fn bcast(&mut self, i: usize, size: usize, port: u16, extra: &[&str]) -> Result<P> {
        let object = self.object(0)?.display().to_string();
        let master = self.tb.hosts()[0].addr.to_string();
        let mut args: Vec<String> = vec!["bcast".into(), object, "--out".into()];
        args.push(self.out_dir(i).display().to_string());
        args.extend(["--wait".into(), "30s".into(), "--json".into()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let env = [
            ("RANK", i.to_string()),
            ("WORLD_SIZE", size.to_string()),
            ("MASTER_ADDR", master),
            ("MASTER_PORT", port.to_string()),
        ];
        let n = self.procs.procs.len();
        self.spawn_env(i, format!("h{i} bcast {n}"), args, &env)
    }

    /// `rmcast recv --sender` on host `i` for a hybrid session: it
    /// registers at [`Lan::overlay_control`], listens for the group on its
    /// own address, and takes TCP data on any port of it.
    pub fn recv_hybrid(&mut self, i: usize) -> Result<P> {
        // The host alone: the lobby is at the group's port + 1; the TCP
        // half's peers connect to the --iface address.
        let sender = self.tb.hosts()[0].addr.to_string();
        let addr = self.tb.hosts()[i].addr.to_string();
        let args = ["--sender", &sender, "--group", GROUP, "--iface", &addr];
        self.spawn_recv(i, &args, &[])
    }

    /// `rmcast send` of object 0 on h0 in a hybrid session: the default
    /// protocol (auto) with the lobby it opens by itself on a LAN (at the
    /// group's port + 1, [`Lan::overlay_control`]), the multicast half
    /// paced at `rate` bit/s, to `n` receivers, plus `extra`.
    pub fn send_hybrid(&mut self, n: usize, rate: u64, extra: &[&str]) -> Result<P> {
        let object = self.object(0)?.display().to_string();
        let iface = self.tb.hosts()[0].addr.to_string();
        let (n, rate) = (n.to_string(), rate.to_string());
        let args = [
            &object,
            "--group",
            GROUP,
            "--iface",
            &iface,
            "--receivers",
            &n,
            "--rate",
            &rate,
        ];
        self.spawn_send(&args, extra)
    }

    /// Host `i` can take in only `rate` bit/s (a tbf on its switch port).
    pub fn shape_download(&self, i: usize, rate: u64) -> Result<()> {
        match &self.tb {
            Testbed::Netns(t) => t.shape_download(i, rate),
            _ => bail!("a chaos LAN is a netns testbed"),
        }
    }

    /// Random input loss `p` on every receiver (the lab's nftables rule).
    pub fn set_loss(&mut self, p: f64) -> Result<()> {
        self.tb.set_loss(p)
    }

    /// Packets the loss rules dropped so far.
    pub fn loss_drops(&self) -> Result<u64> {
        self.tb.loss_drops()
    }

    /// Mounts a tmpfs of `bytes` over receiver `i`'s output directory.
    pub fn small_disk(&mut self, i: usize, bytes: u64) -> Result<()> {
        let dir = self.out_dir(i);
        run_cmd(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={bytes}"),
                "rmcast-chaos",
                &dir.display().to_string(),
            ],
            None,
        )
        .context("mounting a tmpfs")?;
        self.mounts.push(Mount(dir));
        Ok(())
    }

    /// Whether receiver `i` holds a byte-exact copy of object `k`.
    pub fn verified(&mut self, i: usize, k: usize) -> Result<bool> {
        let obj = self.object(k)?;
        let copy = self.out_dir(i).join(obj.file_name().expect("object name"));
        Ok(copy.is_file() && hash_file(&copy)? == hash_file(&obj)?)
    }

    /// Hidden part files (`.NAME.rmcast-part-*`) in receiver `i`'s directory.
    pub fn part_files(&self, i: usize) -> Vec<PathBuf> {
        std::fs::read_dir(self.out_dir(i))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".rmcast-part-"))
            .map(|e| e.path())
            .collect()
    }

    /// Ends the scenario and proves nothing of it is left: every process
    /// it started has ended by itself (one still running is killed and is
    /// an error), every visible file in an output directory is a
    /// byte-exact copy of the object of its name (no complete-looking
    /// unverified file), the tmpfs is gone, the namespaces are gone, and no
    /// process mentions the work directory.
    pub fn finish(mut self) -> Result<()> {
        let mut problems = Vec::new();
        for k in 0..self.procs.procs.len() {
            let pr = &mut self.procs.procs[k];
            if !pr.poll() {
                problems.push(format!("{} was still running at the end", pr.label));
                pr.kill_and_reap("chaos: still running at the end");
            }
        }
        let names: Vec<_> = self
            .objects
            .iter()
            .map(|o| (o.file_name().expect("name").to_owned(), o.clone()))
            .collect();
        for i in 1..=self.setup.receivers as usize {
            for e in std::fs::read_dir(self.out_dir(i))
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = e.file_name();
                if name.to_string_lossy().starts_with('.') {
                    continue;
                }
                let exact = match names.iter().find(|(n, _)| *n == name) {
                    Some((_, obj)) => hash_file(&e.path())? == hash_file(obj)?,
                    None => false,
                };
                if !exact {
                    problems.push(format!(
                        "h{i} holds {} and it is not a verified copy",
                        e.path().display()
                    ));
                }
            }
        }
        self.mounts.clear();
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let work = self.work.display().to_string();
        if mounts.contains(&work) {
            problems.push(format!("a mount under {work} remains"));
        }
        if let Err(e) = self.tb.teardown() {
            problems.push(format!("teardown: {e:#}"));
        }
        let left: Vec<String> = list_namespaces()
            .into_iter()
            .filter(|n| n.starts_with(&self.id))
            .collect();
        if !left.is_empty() {
            problems.push(format!("namespaces remain: {left:?}"));
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let procs = processes_mentioning(&work);
            if procs.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                problems.push(format!("processes remain: {procs:?}"));
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        ensure!(problems.is_empty(), "left behind: {}", problems.join("; "));
        Ok(())
    }
}

/// Processes whose command line contains `needle` (PID: command line).
pub fn processes_mentioning(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| {
            let c = std::fs::read(e.path().join("cmdline")).ok()?;
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            c.contains(needle)
                .then(|| format!("{}: {c}", e.file_name().to_string_lossy()))
        })
        .collect()
}
