//! Tool drivers: how each tool's receivers and sender are started on the
//! testbed, when a receiver counts as done, and whether its file can be
//! verified; plus the lab's own small NORM and MultiTCP programs.
//!
//! Settings follow /work/shared/notes/peers.md; docs/lab.md says why.

pub mod blast;
pub mod rounds;

use crate::scenario::{Tool, ToolKind};
use crate::testbed::Testbed;
use anyhow::{Context, Result, bail};
use clap::Args;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the runner needs to know to run one transfer.
pub struct Ctx<'a> {
    /// The testbed.
    pub tb: &'a Testbed,
    /// Receivers in this run (hosts 1..=n).
    pub n: usize,
    /// The object to send.
    pub object: &'a Path,
    /// Its size.
    pub size: u64,
    /// Receivers' output directories, index 1..=n (index 0 unused).
    pub out_dirs: &'a [PathBuf],
    /// Directory for status files.
    pub run_dir: &'a Path,
    /// Multicast group for this run.
    pub group: Ipv4Addr,
    /// Base port for this run (even; tools may use port and port + 1, MultiTCP port + i).
    pub port: u16,
    /// Link rate, if shaped.
    pub rate_bits_per_s: Option<u64>,
    /// Loss for tools that emulate it themselves (loopback testbed).
    pub tool_loss: f64,
    /// The rmcast binary.
    pub rmcast: &'a Path,
    /// How to call this program's hidden subcommands.
    pub self_cmd: &'a [String],
    /// The run's hard time limit (tools get it as their own timeout).
    pub limit_s: f64,
}

/// One process to start.
pub struct ProcSpec {
    /// Host index.
    pub host: usize,
    /// Program.
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
}

/// When a transfer is complete for timing purposes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// The sender exits 0 only once every receiver confirmed (rmcast, uftp,
    /// NORM watermark, MultiTCP acks, iperf3).
    SenderExit,
    /// The last of sender and receivers to exit (udpcast: receivers finish writing).
    AllExit,
}

/// The plan for one transfer.
pub struct Plan {
    /// Receivers, started first.
    pub receivers: Vec<ProcSpec>,
    /// The sender.
    pub sender: ProcSpec,
    /// Daemons (uftpd) do not exit: a status file line marks each one done.
    pub daemon_status: Option<(Vec<PathBuf>, &'static str)>,
    /// Timing rule.
    pub completion: Completion,
    /// Whether the receivers' files are compared with the original.
    pub verify: bool,
    /// Receivers the tool actually serves (iperf3: 1).
    pub served: usize,
    /// Seconds between starting receivers and the sender.
    pub settle_s: f64,
}

fn s<T: ToString>(x: T) -> String {
    x.to_string()
}

/// Whether `program` is on PATH.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

fn require(programs: &[&str], package: &str) -> Result<(), String> {
    for p in programs {
        if !on_path(p) {
            return Err(format!(
                "unavailable: `{p}` not installed (apt-get install {package})"
            ));
        }
    }
    Ok(())
}

/// The senders after the plan's own (rmcast `senders = S`): copies of its
/// sender, on h0 too, each offering its own object (`objects`: S − 1 paths).
pub fn more_senders(plan: &Plan, objects: &[PathBuf]) -> Vec<ProcSpec> {
    objects
        .iter()
        .map(|o| {
            let mut args = plan.sender.args.clone();
            // `send OBJECT ...`: the object is the first argument after `send`.
            args[1] = o.display().to_string();
            ProcSpec {
                host: plan.sender.host,
                program: plan.sender.program.clone(),
                args,
            }
        })
        .collect()
}

/// Builds the plan, or says why the tool cannot run here.
pub fn plan(tool: &Tool, c: &Ctx) -> Result<Plan, String> {
    let netns = c.tb.is_netns();
    let iface = c.tb.iface();
    let addr = |i: usize| c.tb.hosts()[i].addr;
    let frac = tool
        .rate_fraction
        .unwrap_or(if tool.kind == ToolKind::Norm {
            0.93
        } else {
            0.95
        });
    let paced = c.rate_bits_per_s.map(|r| (r as f64 * frac) as u64);
    let limit = format!("{}s", c.limit_s.ceil() as u64);
    let group = format!("{}:{}", c.group, c.port);
    let out = |i: usize| c.out_dirs[i].display().to_string();
    let object = c.object.display().to_string();
    let receivers = 1..=c.n;
    let plan = match tool.kind {
        ToolKind::Rmcast => {
            if !c.rmcast.is_file() {
                return Err(format!(
                    "unavailable: rmcast binary {} not found",
                    c.rmcast.display()
                ));
            }
            let rm = c.rmcast.display().to_string();
            let protocol = tool.protocol.clone().unwrap_or_else(|| s("nak-poll"));
            // tcp-* overlays: the sender's control address is h0's, port + 1.
            let overlay_control = protocol
                .starts_with("tcp-")
                .then(|| format!("{}:{}", addr(0), c.port + 1));
            let recv = receivers
                .map(|i| {
                    let mut args = vec![
                        s("recv"),
                        s("--group"),
                        group.clone(),
                        s("--iface"),
                        s(addr(i)),
                        s("--out"),
                        out(i),
                        s("--json"),
                        s("--timeout"),
                        limit.clone(),
                        s("--name"),
                        format!("h{i}"),
                    ];
                    if c.tool_loss > 0.0 {
                        args.extend([s("--loss"), s(c.tool_loss), s("--seed"), s(i)]);
                    }
                    if let Some(ctl) = &overlay_control {
                        // TCP overlay: register with the sender, accept data on any port.
                        args.extend([
                            s("--sender"),
                            ctl.clone(),
                            s("--listen"),
                            format!("{}:0", addr(i)),
                        ]);
                    }
                    if tool.sender_count() > 1 {
                        args.extend([s("--sessions"), s(tool.sender_count())]);
                    }
                    args.extend(tool.recv_args.iter().cloned());
                    ProcSpec {
                        host: i,
                        program: rm.clone(),
                        args,
                    }
                })
                .collect();
            let mut args = vec![
                s("send"),
                object,
                s("--group"),
                group,
                s("--iface"),
                s(addr(0)),
                s("--receivers"),
                s(c.n),
                s("--json"),
                s("--wait"),
                s("30s"),
                s("--protocol"),
                protocol,
            ];
            // TCP overlays pace themselves (rmcast refuses --rate for them).
            if let Some(r) = paced.filter(|_| overlay_control.is_none()) {
                args.extend([s("--rate"), s(r)]);
            }
            if let Some(ctl) = overlay_control {
                args.extend([s("--control"), ctl]);
            }
            args.extend(tool.args.iter().cloned());
            if tool.sender_count() > 1 && !args.iter().any(|a| a == "--rate-group") {
                args.push(s("--rate-group"));
            }
            Plan {
                receivers: recv,
                sender: ProcSpec {
                    host: 0,
                    program: rm,
                    args,
                },
                daemon_status: None,
                completion: Completion::SenderExit,
                verify: true,
                served: c.n,
                settle_s: 0.3,
            }
        }
        ToolKind::Udpcast => {
            if !netns {
                return Err(s(
                    "unavailable: udpcast needs the netns testbed (broadcast rendezvous)",
                ));
            }
            require(&["udp-sender", "udp-receiver"], "udpcast")?;
            let recv = receivers
                .map(|i| {
                    let mut args = vec![
                        s("--interface"),
                        s(iface),
                        s("--nokbd"),
                        s("--start-timeout"),
                        s(60),
                        s("--receive-timeout"),
                        s(30),
                        s("--portbase"),
                        s(c.port),
                        s("--file"),
                        format!("{}/object.bin", out(i)),
                    ];
                    args.extend(tool.recv_args.iter().cloned());
                    ProcSpec {
                        host: i,
                        program: s("udp-receiver"),
                        args,
                    }
                })
                .collect();
            let mut args = vec![
                s("--interface"),
                s(iface),
                s("--file"),
                object,
                s("--min-receivers"),
                s(c.n),
                s("--full-duplex"),
                s("--rexmit-hello-interval"),
                s(10),
                s("--nokbd"),
                s("--portbase"),
                s(c.port),
                s("--no-progress"),
            ];
            if let Some(r) = paced {
                args.extend([s("--max-bitrate"), format!("{}k", r / 1000)]);
            }
            args.extend(tool.args.iter().cloned());
            Plan {
                receivers: recv,
                sender: ProcSpec {
                    host: 0,
                    program: s("udp-sender"),
                    args,
                },
                daemon_status: None,
                completion: Completion::AllExit,
                verify: true,
                served: c.n,
                settle_s: 0.3,
            }
        }
        ToolKind::Uftp => {
            if !netns {
                return Err(s(
                    "unavailable: uftp needs the netns testbed (one address per receiver id)",
                ));
            }
            require(&["uftp", "uftpd"], "uftp")?;
            let uid = |i: usize| format!("0x{:08X}", u32::from(addr(i)));
            let status: Vec<PathBuf> = receivers
                .clone()
                .map(|i| c.run_dir.join(format!("h{i}.uftp-status")))
                .collect();
            let recv = receivers
                .map(|i| {
                    let mut args = vec![
                        s("-d"),
                        s("-I"),
                        s(iface),
                        s("-D"),
                        out(i),
                        s("-F"),
                        status[i - 1].display().to_string(),
                        s("-x"),
                        s(1),
                        s("-B"),
                        s(4194304),
                        s("-c"),
                        s(8388608),
                        s("-U"),
                        uid(i),
                        s("-p"),
                        s(c.port),
                    ];
                    args.extend(tool.recv_args.iter().cloned());
                    ProcSpec {
                        host: i,
                        program: s("uftpd"),
                        args,
                    }
                })
                .collect();
            let ids: Vec<String> = (1..=c.n).map(uid).collect();
            // uftp's -R is in kbit/s; unshaped links get 1 Gbit/s.
            let kbit = paced.unwrap_or(1_000_000_000) / 1000;
            let mut args = vec![
                s("-I"),
                s(iface),
                s("-R"),
                s(kbit),
                s("-H"),
                ids.join(","),
                s("-x"),
                s(1),
                s("-B"),
                s(4194304),
                s("-p"),
                s(c.port),
                s("-U"),
                uid(0),
            ];
            args.extend(tool.args.iter().cloned());
            args.push(object);
            Plan {
                receivers: recv,
                sender: ProcSpec {
                    host: 0,
                    program: s("uftp"),
                    args,
                },
                daemon_status: Some((status, "RESULT;")),
                completion: Completion::SenderExit,
                verify: true,
                served: c.n,
                settle_s: 0.5,
            }
        }
        ToolKind::Norm => {
            if !NORM_BUILT {
                return Err(s(
                    "unavailable: rmcast-lab was built without libnorm (apt-get install libnorm-dev, then rebuild)",
                ));
            }
            let me = &c.self_cmd[0];
            let prefix: Vec<String> = c.self_cmd[1..].to_vec();
            let recv = receivers
                .map(|i| {
                    let mut args = prefix.clone();
                    args.extend([
                        s("norm-recv"),
                        s("--dir"),
                        out(i),
                        s("--addr"),
                        s(c.group),
                        s("--port"),
                        s(c.port),
                        s("--iface"),
                        s(iface),
                        s("--id"),
                        s(i + 1),
                        s("--timeout"),
                        s(c.limit_s.ceil()),
                        s("--linger"),
                        s(2),
                    ]);
                    args.extend(tool.recv_args.iter().cloned());
                    ProcSpec {
                        host: i,
                        program: me.clone(),
                        args,
                    }
                })
                .collect();
            let ids: Vec<String> = (2..=c.n + 1).map(s).collect();
            let mut args = prefix;
            args.extend([
                s("norm-send"),
                object,
                s("--addr"),
                s(c.group),
                s("--port"),
                s(c.port),
                s("--iface"),
                s(iface),
                s("--rate-bps"),
                s(paced.unwrap_or(950_000_000)),
                s("--ids"),
                ids.join(","),
                s("--id"),
                s(1),
                s("--timeout"),
                s(c.limit_s.ceil()),
            ]);
            args.extend(tool.args.iter().cloned());
            Plan {
                receivers: recv,
                sender: ProcSpec {
                    host: 0,
                    program: me.clone(),
                    args,
                },
                daemon_status: None,
                completion: Completion::SenderExit,
                verify: true,
                served: c.n,
                settle_s: 0.3,
            }
        }
        ToolKind::Multitcp => {
            let me = &c.self_cmd[0];
            let prefix: Vec<String> = c.self_cmd[1..].to_vec();
            let port = |i: usize| c.port as usize + i;
            let recv = receivers
                .map(|i| {
                    let mut args = prefix.clone();
                    args.extend([
                        s("tcp-recv"),
                        s("--listen"),
                        format!("{}:{}", addr(i), port(i)),
                        s("--out"),
                        format!("{}/object.bin", out(i)),
                        s("--timeout"),
                        s(c.limit_s.ceil()),
                    ]);
                    ProcSpec {
                        host: i,
                        program: me.clone(),
                        args,
                    }
                })
                .collect();
            let to: Vec<String> = (1..=c.n)
                .map(|i| format!("{}:{}", addr(i), port(i)))
                .collect();
            let mut args = prefix;
            args.extend([
                s("tcp-send"),
                object,
                s("--to"),
                to.join(","),
                s("--timeout"),
                s(c.limit_s.ceil()),
            ]);
            Plan {
                receivers: recv,
                sender: ProcSpec {
                    host: 0,
                    program: me.clone(),
                    args,
                },
                daemon_status: None,
                completion: Completion::SenderExit,
                verify: true,
                served: c.n,
                settle_s: 0.3,
            }
        }
        ToolKind::Blast => {
            let (dgram, added_pps, count) =
                crate::tools::blast::plan_numbers(&tool.args, c.size, paced)?;
            let me = &c.self_cmd[0];
            let prefix: Vec<String> = c.self_cmd[1..].to_vec();
            let recv = receivers
                .map(|i| {
                    let mut args = prefix.clone();
                    args.extend([
                        s("blast-recv"),
                        s("--group"),
                        group.clone(),
                        s("--iface"),
                        s(addr(i)),
                        s("--timeout"),
                        s(c.limit_s.ceil()),
                        s("--report"),
                        blast_report(c.run_dir, i).display().to_string(),
                    ]);
                    args.extend(tool.recv_args.iter().cloned());
                    ProcSpec {
                        host: i,
                        program: me.clone(),
                        args,
                    }
                })
                .collect();
            let mut args = prefix;
            args.extend([
                s("blast-send"),
                s("--group"),
                group,
                s("--iface"),
                s(addr(0)),
                s("--ttl"),
                s(1),
                s("--timeout"),
                s(c.limit_s.ceil()),
                s("--report"),
                blast_report(c.run_dir, 0).display().to_string(),
                s("--size"),
                s(dgram),
            ]);
            if let Some(pps) = added_pps {
                args.extend([s("--pps"), format!("{pps:.1}")]);
            }
            if let Some(n) = count {
                args.extend([s("--count"), s(n)]);
            }
            args.extend(strip_flag(&tool.args, "--size"));
            Plan {
                receivers: recv,
                sender: ProcSpec {
                    host: 0,
                    program: me.clone(),
                    args,
                },
                daemon_status: None,
                completion: Completion::AllExit,
                verify: false,
                served: c.n,
                settle_s: 0.3,
            }
        }
        ToolKind::Iperf3 => {
            require(&["iperf3"], "iperf3")?;
            let server = vec![s("-s"), s("-1"), s("-B"), s(addr(1)), s("-p"), s(c.port)];
            let mut args = vec![
                s("-c"),
                s(addr(1)),
                s("-p"),
                s(c.port),
                s("-n"),
                s(c.size),
                s("-J"),
            ];
            args.extend(tool.args.iter().cloned());
            Plan {
                receivers: vec![ProcSpec {
                    host: 1,
                    program: s("iperf3"),
                    args: server,
                }],
                sender: ProcSpec {
                    host: 0,
                    program: s("iperf3"),
                    args,
                },
                daemon_status: None,
                completion: Completion::SenderExit,
                verify: false,
                served: 1,
                settle_s: 0.5,
            }
        }
        ToolKind::Symmetric => {
            return Err(
                "symmetric groups are run by crate::scenario::symmetric, not planned here".into(),
            );
        }
    };
    Ok(plan)
}

/// Where blast host `i` (0 = sender) writes its JSON report.
pub fn blast_report(run_dir: &Path, i: usize) -> PathBuf {
    run_dir.join(format!("h{i}.blast.json"))
}

/// `args` without `flag` and its value (`--flag V` or `--flag=V`).
fn strip_flag(args: &[String], flag: &str) -> Vec<String> {
    let eq = format!("{flag}=");
    let mut out = Vec::new();
    let mut skip = false;
    for a in args {
        if skip {
            skip = false;
        } else if a == flag {
            skip = true;
        } else if !a.starts_with(&eq) {
            out.push(a.clone());
        }
    }
    out
}

/// Whether the NORM driver was compiled in (libnorm-dev present at build time).
pub const NORM_BUILT: bool = cfg!(rml_norm);

#[cfg(rml_norm)]
unsafe extern "C" {
    fn rml_norm_send(
        file: *const libc::c_char,
        addr: *const libc::c_char,
        port: libc::c_int,
        iface: *const libc::c_char,
        rate_bps: f64,
        ids: *const libc::c_uint,
        n_ids: libc::c_int,
        my_id: libc::c_uint,
        timeout_s: f64,
    ) -> libc::c_int;
    fn rml_norm_recv(
        dir: *const libc::c_char,
        addr: *const libc::c_char,
        port: libc::c_int,
        iface: *const libc::c_char,
        my_id: libc::c_uint,
        timeout_s: f64,
        linger_s: f64,
    ) -> libc::c_int;
}

/// `lab norm-send`.
#[derive(Args, Debug)]
pub struct NormSendArgs {
    /// File to send.
    pub file: PathBuf,
    /// Multicast address.
    #[arg(long)]
    pub addr: Ipv4Addr,
    /// Port.
    #[arg(long)]
    pub port: u16,
    /// Interface name.
    #[arg(long)]
    pub iface: String,
    /// Fixed sending rate, bits per second (congestion control off).
    #[arg(long)]
    pub rate_bps: f64,
    /// NORM node ids of the receivers that must acknowledge.
    #[arg(long, value_delimiter = ',')]
    pub ids: Vec<u32>,
    /// This node's id.
    #[arg(long)]
    pub id: u32,
    /// Give up after this many seconds.
    #[arg(long)]
    pub timeout: f64,
}

/// `lab norm-recv`.
#[derive(Args, Debug)]
pub struct NormRecvArgs {
    /// Directory for the received file (stored as `object`).
    #[arg(long)]
    pub dir: PathBuf,
    /// Multicast address.
    #[arg(long)]
    pub addr: Ipv4Addr,
    /// Port.
    #[arg(long)]
    pub port: u16,
    /// Interface name.
    #[arg(long)]
    pub iface: String,
    /// This node's id.
    #[arg(long)]
    pub id: u32,
    /// Give up after this many seconds.
    #[arg(long)]
    pub timeout: f64,
    /// Seconds to stay after completion so the acknowledgement gets out.
    #[arg(long, default_value_t = 2.0)]
    pub linger: f64,
}

fn cstr(x: &str) -> Result<std::ffi::CString> {
    std::ffi::CString::new(x).context("NUL in argument")
}

/// Runs the NORM sender; exit code 0 once every receiver acknowledged.
pub fn norm_send(a: &NormSendArgs) -> Result<i32> {
    #[cfg(rml_norm)]
    {
        let file = cstr(&a.file.display().to_string())?;
        let addr = cstr(&a.addr.to_string())?;
        let iface = cstr(&a.iface)?;
        // SAFETY: every pointer is a live NUL-terminated string or a slice of n_ids u32s.
        let rc = unsafe {
            rml_norm_send(
                file.as_ptr(),
                addr.as_ptr(),
                a.port.into(),
                iface.as_ptr(),
                a.rate_bps,
                a.ids.as_ptr(),
                a.ids.len() as libc::c_int,
                a.id,
                a.timeout,
            )
        };
        Ok(rc)
    }
    #[cfg(not(rml_norm))]
    {
        let _ = (a, cstr);
        bail!("built without libnorm-dev: NORM is unavailable")
    }
}

/// Runs the NORM receiver; exit code 0 with a complete file.
pub fn norm_recv(a: &NormRecvArgs) -> Result<i32> {
    #[cfg(rml_norm)]
    {
        std::fs::create_dir_all(&a.dir)?;
        let dir = cstr(&a.dir.display().to_string())?;
        let addr = cstr(&a.addr.to_string())?;
        let iface = cstr(&a.iface)?;
        // SAFETY: every pointer is a live NUL-terminated string.
        let rc = unsafe {
            rml_norm_recv(
                dir.as_ptr(),
                addr.as_ptr(),
                a.port.into(),
                iface.as_ptr(),
                a.id,
                a.timeout,
                a.linger,
            )
        };
        Ok(rc)
    }
    #[cfg(not(rml_norm))]
    {
        let _ = a;
        bail!("built without libnorm-dev: NORM is unavailable")
    }
}

/// `lab tcp-send`.
#[derive(Args, Debug)]
pub struct TcpSendArgs {
    /// File to send.
    pub file: PathBuf,
    /// Receivers (ADDR:PORT, comma-separated): one TCP connection each.
    #[arg(long, value_delimiter = ',')]
    pub to: Vec<SocketAddr>,
    /// Give up after this many seconds.
    #[arg(long)]
    pub timeout: f64,
}

/// `lab tcp-recv`.
#[derive(Args, Debug)]
pub struct TcpRecvArgs {
    /// Address to listen on.
    #[arg(long)]
    pub listen: SocketAddr,
    /// File to write.
    #[arg(long)]
    pub out: PathBuf,
    /// Give up after this many seconds.
    #[arg(long)]
    pub timeout: f64,
}

/// MultiTCP sender: one thread and connection per receiver; each sends the
/// size (8 bytes, big endian) and the file, then waits for a one-byte
/// acknowledgement sent after the receiver wrote everything.
pub fn tcp_send(a: &TcpSendArgs) -> Result<i32> {
    let deadline = Instant::now() + Duration::from_secs_f64(a.timeout);
    let handles: Vec<_> =
        a.to.iter()
            .map(|&to| {
                let file = a.file.clone();
                std::thread::spawn(move || -> Result<()> {
                    let mut stream = loop {
                        match TcpStream::connect_timeout(&to, Duration::from_secs(1)) {
                            Ok(s) => break s,
                            Err(e) if Instant::now() < deadline => {
                                let _ = e;
                                std::thread::sleep(Duration::from_millis(50));
                            }
                            Err(e) => return Err(e).with_context(|| format!("connect {to}")),
                        }
                    };
                    let remaining = deadline
                        .saturating_duration_since(Instant::now())
                        .max(Duration::from_millis(1));
                    stream.set_write_timeout(Some(remaining))?;
                    stream.set_read_timeout(Some(remaining))?;
                    let mut f = std::fs::File::open(&file)?;
                    let size = f.metadata()?.len();
                    stream.write_all(&size.to_be_bytes())?;
                    let sent = std::io::copy(&mut f, &mut stream)
                        .with_context(|| format!("send to {to}"))?;
                    if sent != size {
                        bail!("sent {sent} of {size} bytes to {to}");
                    }
                    let mut ack = [0u8; 1];
                    stream
                        .read_exact(&mut ack)
                        .with_context(|| format!("acknowledgement from {to}"))?;
                    if ack[0] != 1 {
                        bail!("{to} reported a failure");
                    }
                    Ok(())
                })
            })
            .collect();
    let mut failed = 0;
    for (h, to) in handles.into_iter().zip(&a.to) {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                eprintln!("tcp-send: {to}: {e:#}");
                failed += 1;
            }
            Err(_) => {
                eprintln!("tcp-send: {to}: thread panicked");
                failed += 1;
            }
        }
    }
    Ok(i32::from(failed > 0))
}

/// MultiTCP receiver: accepts one connection, stores the file, acknowledges.
pub fn tcp_recv(a: &TcpRecvArgs) -> Result<i32> {
    let deadline = Instant::now() + Duration::from_secs_f64(a.timeout);
    let listener =
        TcpListener::bind(a.listen).with_context(|| format!("listen on {}", a.listen))?;
    listener.set_nonblocking(true)?;
    let mut stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e).context("no sender connected"),
        }
    };
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1)),
    ))?;
    let mut size = [0u8; 8];
    stream.read_exact(&mut size)?;
    let size = u64::from_be_bytes(size);
    if let Some(dir) = a.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::File::create(&a.out)?;
    let got = std::io::copy(&mut (&mut stream).take(size), &mut f)?;
    f.flush()?;
    let ok = got == size;
    stream.write_all(&[u8::from(ok)])?;
    if !ok {
        eprintln!("tcp-recv: got {got} of {size} bytes");
    }
    Ok(i32::from(!ok))
}
