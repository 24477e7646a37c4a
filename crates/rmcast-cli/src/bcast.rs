//! `rmcast bcast`: one command line for every process of a job that a
//! cluster's launcher started (`mpirun`, `srun`, `torchrun`, a Kubernetes
//! indexed Job). Each process reads its rank and the job's size from the
//! launcher's environment; rank 0 sends PATH and every other rank receives
//! it into `--out`. Every rank exits 0 only when every rank verified, so
//! `mpirun` and `srun` report a failure whichever rank they look at.
//!
//! Where rank 0's host is known (`--sender`, `MASTER_ADDR`) the send is a
//! hybrid session (`rmcast::hybrid`): every receiving rank registers with
//! rank 0 over TCP (the port after the group's), listens for the multicast
//! session, and takes the object there, or, on a network that does not
//! carry multicast to it, over a TCP overlay in the same session; either
//! way it reads the whole job's outcome from rank 0's verdict on that
//! connection. Otherwise the ranks find rank 0 on the group, and read the
//! outcome from its multicast farewell.

use crate::args::{KeyArgs, ipv4_addr};
use anyhow::{Context, Result, bail};
use clap::Args;
use rmcast::HumanDuration;
use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// `rmcast bcast`.
#[derive(Args, Debug)]
pub struct BcastArgs {
    /// The file or directory tree rank 0 sends (other ranks need not have it).
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// Directory every other rank stores its copy in (created if missing).
    /// Rank 0 keeps PATH where it is.
    #[arg(long, short = 'o', value_name = "DIR")]
    pub out: PathBuf,
    /// This process's rank, 0 sends [default: from the launcher's
    /// environment: OMPI_COMM_WORLD_RANK, PMI_RANK, RANK or SLURM_PROCID].
    #[arg(long, requires = "size")]
    pub rank: Option<u32>,
    /// The number of ranks in the job [default: OMPI_COMM_WORLD_SIZE,
    /// PMI_SIZE, WORLD_SIZE or SLURM_NTASKS].
    #[arg(long, requires = "rank")]
    pub size: Option<u32>,
    /// Host of rank 0: picks the local interface that reaches it, and lets
    /// ranks that do not hear multicast get the object over TCP from it
    /// (the group's port + 1) [default: $MASTER_ADDR; neither: the ranks
    /// find rank 0 on the group, multicast only, on 127.0.0.1 unless
    /// --iface].
    #[arg(long, value_name = "HOST")]
    pub sender: Option<String>,
    /// Local interface address [default: the one routing to --sender].
    #[arg(long, value_name = "ADDR")]
    pub iface: Option<Ipv4Addr>,
    /// Multicast group and port [default: 239.77.0.1, port $MASTER_PORT,
    /// else one derived from the job's id (SLURM_JOB_ID,
    /// OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE, TORCHELASTIC_RUN_ID), else 7700].
    #[arg(long, value_name = "ADDR:PORT")]
    pub group: Option<SocketAddrV4>,
    /// How long rank 0 waits for the others to join, and they for it.
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    pub wait: HumanDuration,
    /// TESTING: listen for rank 0's multicast session on this group
    /// instead of the job's (one nobody sends to makes this rank behave as
    /// one whose network drops multicast: it goes TCP).
    #[arg(long, hide = true, value_name = "ADDR:PORT")]
    pub probe_group: Option<SocketAddrV4>,
    /// Print the rank's report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub keys: KeyArgs,
}

/// Where this process stands in its job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// Its rank, `0..size`.
    pub rank: u32,
    /// Ranks in the job.
    pub size: u32,
    /// Where the two came from, for messages.
    pub from: String,
}

/// The launchers whose variables say rank and size, innermost first: a
/// process that mpirun or torchrun started inside a Slurm allocation also
/// inherits the allocation's SLURM_PROCID, which is not its rank.
const LAUNCHERS: [(&str, &str, &str); 4] = [
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("MPICH / PMI", "PMI_RANK", "PMI_SIZE"),
    ("torchrun", "RANK", "WORLD_SIZE"),
    ("Slurm", "SLURM_PROCID", "SLURM_NTASKS"),
];

/// Rank and size from the flags, else from the environment (`get`).
pub fn place(
    rank: Option<u32>,
    size: Option<u32>,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<Place> {
    if let (Some(rank), Some(size)) = (rank, size) {
        return checked(rank, size, "--rank and --size".into());
    }
    let mut found: Vec<Place> = Vec::new();
    for (name, rank_var, size_var) in LAUNCHERS {
        let (r, s) = (get(rank_var), get(size_var));
        let (r, s) = match (r, s) {
            (None, None) => continue,
            (Some(r), Some(s)) => (r, s),
            (Some(_), None) => bail!("{rank_var} is set but {size_var} is not ({name})"),
            (None, Some(_)) => bail!("{size_var} is set but {rank_var} is not ({name})"),
        };
        let number = |var: &str, v: &str| {
            v.trim().parse::<u32>().with_context(|| {
                format!("{var}={v:?} is not a number (the {name} launcher's variable)")
            })
        };
        let from = format!("{rank_var}={r}, {size_var}={s} ({name})");
        found.push(checked(number(rank_var, &r)?, number(size_var, &s)?, from)?);
    }
    let Some(first) = found.first().cloned() else {
        bail!(
            "no rank in the environment: start rmcast bcast with mpirun, srun or torchrun \
             (which set OMPI_COMM_WORLD_RANK/SIZE, SLURM_PROCID/NTASKS or RANK/WORLD_SIZE), \
             or give --rank R --size N"
        );
    };
    // The innermost launcher decides; another that is not Slurm's
    // allocation must agree with it.
    for other in found.iter().skip(1) {
        if other.from.ends_with("(Slurm)") {
            if (other.rank, other.size) != (first.rank, first.size) {
                tracing::info!(
                    "{} taken over {} (an outer allocation)",
                    first.from,
                    other.from
                );
            }
            continue;
        }
        if (other.rank, other.size) != (first.rank, first.size) {
            bail!(
                "two launchers disagree on this process's place: {} but {}; \
                 unset one, or give --rank R --size N",
                first.from,
                other.from
            );
        }
    }
    Ok(first)
}

fn checked(rank: u32, size: u32, from: String) -> Result<Place> {
    if size == 0 {
        bail!("a job of 0 ranks: {from}");
    }
    if rank >= size {
        bail!("rank {rank} is not below the job's size {size}: {from}");
    }
    if size > 65_521 {
        bail!("{size} ranks: rmcast takes at most 65,520 receivers per session ({from})");
    }
    Ok(Place { rank, size, from })
}

/// The group's port when not given: `MASTER_PORT`, else one of 20000–31999
/// derived from the job's id (so two jobs on one network do not meet),
/// else 7700. The derived range stays below Linux's ephemeral ports
/// (32768–60999 by default): an outgoing connection that happens to hold
/// the lobby's port (the group's + 1) would make rank 0's listen fail.
fn group_port(get: &dyn Fn(&str) -> Option<String>) -> Result<u16> {
    if let Some(p) = get("MASTER_PORT") {
        return p
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|&p| p > 0)
            .with_context(|| format!("MASTER_PORT={p:?} is not a port"));
    }
    for var in [
        "SLURM_JOB_ID",
        "OMPI_MCA_ess_base_jobid",
        "PMIX_NAMESPACE",
        "TORCHELASTIC_RUN_ID",
    ] {
        if let Some(id) = get(var).filter(|v| !v.is_empty()) {
            // FNV-1a: the same port on every node of the job.
            let h = (id.bytes()).fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            return Ok(20_000 + (h % 12_000) as u16);
        }
    }
    Ok(7700)
}

/// The local address whose route reaches `host` (a UDP socket connected to
/// it: nothing is sent).
fn iface_towards(host: &str) -> Result<Ipv4Addr> {
    let target = ipv4_addr(host, 9, "rank 0's host")?;
    if target.ip().is_loopback() {
        return Ok(Ipv4Addr::LOCALHOST);
    }
    let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).context("a socket to find the route")?;
    s.connect(target)
        .with_context(|| format!("no route to rank 0's host {host} ({target})"))?;
    match s.local_addr()? {
        SocketAddr::V4(a) => Ok(*a.ip()),
        SocketAddr::V6(_) => bail!("no IPv4 route to rank 0's host {host}"),
    }
}

/// Runs this rank's part; `true` when every rank verified.
pub fn run(a: BcastArgs, cancel: Arc<AtomicBool>) -> Result<bool> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let place = place(a.rank, a.size, &env)?;
    let sender = a.sender.clone().or_else(|| env("MASTER_ADDR"));
    let iface = match (a.iface, &sender) {
        (Some(i), _) => i,
        (None, Some(host)) => iface_towards(host)?,
        (None, None) => Ipv4Addr::LOCALHOST,
    };
    let group = match a.group {
        Some(g) => g,
        None => SocketAddrV4::new(Ipv4Addr::new(239, 77, 0, 1), group_port(&env)?),
    };
    // Rank 0's lobby: TCP, the port after the group's (torchrun's own
    // store holds MASTER_PORT over TCP on rank 0's host).
    let lobby_port = group.port().checked_add(1).with_context(|| {
        format!(
            "the group's port {} leaves no port after it for rank 0's TCP lobby; give \
             --group ADDR:PORT with a lower port",
            group.port()
        )
    })?;
    let who = format!("rank {} of {}", place.rank, place.size);
    tracing::info!("{who} ({}), group {group}, interface {iface}", place.from);
    if place.rank == 0 && !a.path.exists() {
        bail!("{who}: {} does not exist", a.path.display());
    }
    if place.size == 1 {
        say(&format!("{who}: a job of one rank, nothing to send"));
        return Ok(true);
    }
    if place.rank == 0 {
        // `rmcast send` as a user would type it (paths as they are, not
        // as text: they need not be UTF-8).
        let mut argv: Vec<OsString> = vec!["rmcast".into(), "send".into()];
        argv.push(a.path.clone().into());
        argv.extend(["--receivers".into(), (place.size - 1).to_string().into()]);
        argv.extend([
            "--wait".into(),
            format!("{}ms", a.wait.0.as_millis()).into(),
        ]);
        argv.extend(["--group".into(), group.to_string().into()]);
        argv.extend(["--iface".into(), iface.to_string().into()]);
        if sender.is_some() {
            argv.extend(["--control".into(), format!("{iface}:{lobby_port}").into()]);
        }
        if let Some(k) = &a.keys.key {
            argv.extend(["--key".into(), k.clone().into()]);
        }
        if a.keys.insecure {
            argv.push("--insecure".into());
        }
        if a.json {
            argv.push("--json".into());
        }
        let ok = crate::send_argv(&argv, cancel)?;
        if !a.json {
            let verdict = if ok {
                "every rank verified"
            } else {
                "not every rank verified"
            };
            say(&format!("{who}: {verdict}"));
        }
        return Ok(ok);
    }
    let lobby = match &sender {
        Some(host) => Some(ipv4_addr(host, lobby_port, "rank 0's host")?),
        None => None,
    };
    receive(&a, &who, group, iface, lobby, cancel)
}

/// A receiving rank: its own copy, and the job's outcome, from rank 0's
/// verdict through its `lobby`, else from its multicast farewell.
fn receive(
    a: &BcastArgs,
    who: &str,
    group: SocketAddrV4,
    iface: Ipv4Addr,
    lobby: Option<SocketAddr>,
    cancel: Arc<AtomicBool>,
) -> Result<bool> {
    let (key, trust) = crate::receiver_setup(&a.keys, &[], &a.out, "bcast")?;
    // "rank 3 of 9 on HOST:PID": the sender's report names the rank.
    let name = format!("{who} on {}", rmcast::default_receiver_name());
    let multicast = rmcast::RecvConfig {
        group,
        iface,
        out_dir: a.out.clone(),
        name: name.clone(),
        cancel: Some(cancel.clone()),
        group_key: key.clone(),
        trust: trust.clone(),
        ..rmcast::RecvConfig::default()
    };
    let Some(lobby) = lobby else {
        if a.probe_group.is_some() {
            bail!("--probe-group needs rank 0's host (--sender or MASTER_ADDR)");
        }
        let cfg = rmcast::RecvConfig {
            listen_timeout: Some(a.wait.0),
            ..multicast
        };
        return finish(a, who, rmcast::recv_to_dir(&cfg, None));
    };
    let cfg = rmcast::overlay::OverlayRecvConfig {
        sender: lobby,
        listen: SocketAddr::new(iface.into(), 0),
        out_dir: a.out.clone(),
        name,
        connect_timeout: Some(a.wait.0),
        cancel: Some(cancel),
        key,
        trust,
        multicast: Some(multicast),
        probe_group: a.probe_group,
        ..rmcast::overlay::OverlayRecvConfig::default()
    };
    finish(a, who, rmcast::overlay::recv_to_dir(&cfg, None))
}

/// Reports this rank's copy; whether every rank verified.
fn finish(
    a: &BcastArgs,
    who: &str,
    got: Result<rmcast::RecvReport, rmcast::Error>,
) -> Result<bool> {
    let r = match got {
        Ok(r) => r,
        Err(e) => {
            crate::report::print_recv(Err(&e.to_string()), a.json);
            return Ok(false);
        }
    };
    crate::report::print_recv(Ok(&r), a.json);
    let (ok, text) = match &r.group {
        Some(Ok(())) => (true, "every rank verified".to_owned()),
        Some(Err(why)) => (
            false,
            format!("our copy verified, but not every rank's: {why}"),
        ),
        None => (
            false,
            "our copy verified, but rank 0's word on the other ranks never came".to_owned(),
        ),
    };
    if !a.json {
        say(&format!("{who}: {text}"));
    }
    Ok(ok)
}

/// One line on stderr in one write, so the lines of ranks that share a
/// terminal or a launcher's pipe do not interleave.
fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("rmcast bcast: {line}\n").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k: &str| m.get(k).cloned()
    }

    fn err(vars: &[(&str, &str)]) -> String {
        format!("{:#}", place(None, None, &env(vars)).unwrap_err())
    }

    #[test]
    fn every_launcher_gives_rank_and_size() {
        for (r, s) in [
            ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
            ("PMI_RANK", "PMI_SIZE"),
            ("RANK", "WORLD_SIZE"),
            ("SLURM_PROCID", "SLURM_NTASKS"),
        ] {
            let p = place(None, None, &env(&[(r, "3"), (s, "9")])).unwrap();
            assert_eq!((p.rank, p.size), (3, 9), "{r}");
            assert!(p.from.contains(r), "{}", p.from);
        }
    }

    #[test]
    fn flags_win_over_the_environment() {
        let p = place(
            Some(1),
            Some(2),
            &env(&[("RANK", "5"), ("WORLD_SIZE", "9")]),
        )
        .unwrap();
        assert_eq!((p.rank, p.size), (1, 2));
    }

    #[test]
    fn the_launcher_inside_a_slurm_allocation_decides() {
        // mpirun in an sbatch script: the tasks inherit the batch step's
        // SLURM_PROCID=0; Open MPI's rank is the process's.
        let p = place(
            None,
            None,
            &env(&[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "4"),
                ("OMPI_COMM_WORLD_RANK", "6"),
                ("OMPI_COMM_WORLD_SIZE", "8"),
            ]),
        )
        .unwrap();
        assert_eq!((p.rank, p.size), (6, 8));
        // srun with PMI: both agree.
        let p = place(
            None,
            None,
            &env(&[
                ("SLURM_PROCID", "2"),
                ("SLURM_NTASKS", "4"),
                ("PMI_RANK", "2"),
                ("PMI_SIZE", "4"),
            ]),
        )
        .unwrap();
        assert_eq!((p.rank, p.size), (2, 4));
    }

    #[test]
    fn inconsistent_environments_are_refused_naming_the_variables() {
        let e = err(&[("RANK", "0"), ("WORLD_SIZE", "0")]);
        assert!(e.contains("0 ranks") && e.contains("WORLD_SIZE=0"), "{e}");
        let e = err(&[("RANK", "4"), ("WORLD_SIZE", "4")]);
        assert!(
            e.contains("rank 4 is not below") && e.contains("RANK=4"),
            "{e}"
        );
        let e = err(&[("RANK", "1")]);
        assert!(e.contains("RANK is set but WORLD_SIZE is not"), "{e}");
        let e = err(&[("PMI_SIZE", "3")]);
        assert!(e.contains("PMI_SIZE is set but PMI_RANK is not"), "{e}");
        let e = err(&[("RANK", "one"), ("WORLD_SIZE", "4")]);
        assert!(e.contains("RANK=\"one\" is not a number"), "{e}");
        let e = err(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("RANK", "2"),
            ("WORLD_SIZE", "4"),
        ]);
        assert!(
            e.contains("disagree") && e.contains("OMPI_COMM_WORLD_RANK=1") && e.contains("RANK=2"),
            "{e}"
        );
        let e = err(&[]);
        assert!(
            e.contains("no rank in the environment") && e.contains("--rank"),
            "{e}"
        );
    }

    #[test]
    fn the_group_port_follows_master_port_or_the_job() {
        assert_eq!(
            group_port(&env(&[("MASTER_PORT", "29500")])).unwrap(),
            29500
        );
        assert!(group_port(&env(&[("MASTER_PORT", "x")])).is_err());
        let a = group_port(&env(&[("SLURM_JOB_ID", "1234")])).unwrap();
        let b = group_port(&env(&[("SLURM_JOB_ID", "1235")])).unwrap();
        assert!((20_000..32_000).contains(&a) && a != b, "{a} {b}");
        assert_eq!(group_port(&env(&[])).unwrap(), 7700);
    }

    #[test]
    fn the_interface_is_the_one_routing_to_rank_0() {
        assert_eq!(iface_towards("127.0.0.1").unwrap(), Ipv4Addr::LOCALHOST);
        assert_eq!(iface_towards("localhost").unwrap(), Ipv4Addr::LOCALHOST);
    }
}
