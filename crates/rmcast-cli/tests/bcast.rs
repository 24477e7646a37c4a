//! `rmcast bcast` as a cluster's launcher starts it, on loopback: real
//! processes, real multicast (127.0.0.1, TTL 1), sealed under the test key.
//! Every process is started here and waited for with a bound (killed by
//! its PID past it).

mod common;

use common::{Proc, rmcast};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The variables of every launcher `rmcast bcast` reads, so the test's own
/// environment (a CI runner under Slurm, say) cannot leak in.
const LAUNCHER_VARS: [&str; 14] = [
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "RANK",
    "WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_JOB_ID",
    "OMPI_MCA_ess_base_jobid",
    "PMIX_NAMESPACE",
    "TORCHELASTIC_RUN_ID",
];

/// A port of its own per test run (the group port comes from MASTER_PORT;
/// rank 0's TCP lobby takes the next one). Both lie below Linux's
/// ephemeral range (32768–60999), where another test's outgoing connection
/// could hold the lobby's port and make rank 0's listen fail, and both are
/// free when picked.
fn port(salt: u16) -> u16 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let mut seed = std::process::id() ^ t ^ u32::from(salt).wrapping_mul(7919);
    for _ in 0..64 {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let p = 21_000 + ((seed >> 8) % 11_000) as u16;
        let udp = std::net::UdpSocket::bind(("0.0.0.0", p));
        let tcp = std::net::TcpListener::bind(("127.0.0.1", p + 1));
        if udp.is_ok() && tcp.is_ok() {
            return p;
        }
    }
    panic!("no free pair of ports in 21000–32000")
}

/// One rank as torchrun starts it: RANK, WORLD_SIZE, MASTER_ADDR/PORT.
fn torchrun_rank(rank: u32, size: u32, master_port: u16, path: &Path, out: &Path) -> Command {
    let mut c = rmcast();
    for v in LAUNCHER_VARS {
        c.env_remove(v);
    }
    c.env("RANK", rank.to_string())
        .env("WORLD_SIZE", size.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", master_port.to_string())
        .arg("bcast")
        .arg(path)
        .arg("--out")
        .arg(out)
        .args(["--wait", "20s"]);
    c
}

/// Starts the `size` ranks of a torchrun job sending `path` (the last
/// rank first, rank 0, the sender, last), each into `dir/rankR`; the ranks
/// in `deaf` are on a network that drops multicast: they listen on a group
/// nobody sends to (the hidden `--probe-group`), really listen and hear
/// nothing. Rank, its directory and its process, from rank `size - 1`.
fn start_ranks(
    size: u32,
    master_port: u16,
    path: &Path,
    dir: &Path,
    deaf: &[u32],
) -> Vec<(u32, PathBuf, Proc)> {
    let silent = master_port.wrapping_add(7_000).max(1024);
    (0..size)
        .rev()
        .map(|rank| {
            let out = dir.join(format!("rank{rank}"));
            let mut c = torchrun_rank(rank, size, master_port, path, &out);
            if deaf.contains(&rank) {
                c.args(["--probe-group", &format!("239.77.0.1:{silent}")]);
            }
            let p = Proc::spawn(&format!("rank {rank}"), &mut c);
            (rank, out, p)
        })
        .collect()
}

fn object(dir: &Path, len: usize) -> std::path::PathBuf {
    let path = dir.join("ckpt.bin");
    let bytes: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn torchrun_ranks_get_the_object_and_all_exit_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = object(dir.path(), 3_000_000);
    let mp = port(1);
    let size = 4;
    every_rank_verified(start_ranks(size, mp, &path, dir.path(), &[]), &path);
}

/// Waits for the ranks: each exits 0 saying every rank verified, and
/// each receiving rank holds a byte-exact copy of `path`; rank 0's stderr.
fn every_rank_verified(procs: Vec<(u32, PathBuf, Proc)>, path: &Path) -> String {
    let size = procs.len();
    let want = std::fs::read(path).unwrap();
    let mut rank0 = String::new();
    for (rank, out, p) in procs {
        let (code, _, err) = p.wait(Duration::from_secs(60));
        assert_eq!(code, 0, "rank {rank}:\n{err}");
        assert!(
            err.contains(&format!("rank {rank} of {size}: every rank verified")),
            "rank {rank}:\n{err}"
        );
        if rank == 0 {
            rank0 = err;
        } else {
            assert_eq!(
                std::fs::read(out.join("ckpt.bin")).unwrap(),
                want,
                "rank {rank}"
            );
        }
    }
    rank0
}

/// One rank cannot store the object (a directory stands where the file
/// goes): it refuses, the others verify their copies, and yet every rank
/// exits non-zero, the others saying which rank failed and why.
#[test]
fn one_rank_failing_fails_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let path = object(dir.path(), 1_000_000);
    let mp = port(2);
    let size = 3;
    let blocked = dir.path().join("rank2");
    std::fs::create_dir_all(blocked.join("ckpt.bin")).unwrap();
    for (rank, _, p) in start_ranks(size, mp, &path, dir.path(), &[]) {
        let (code, _, err) = p.wait(Duration::from_secs(60));
        assert_eq!(code, 1, "rank {rank}:\n{err}");
        if rank == 1 {
            assert!(
                err.contains("our copy verified, but not every rank's")
                    && err.contains("rank 2 of 3")
                    && err.contains("is a directory"),
                "rank 1 names rank 2 and why:\n{err}"
            );
            assert_eq!(
                std::fs::read(dir.path().join("rank1/ckpt.bin")).unwrap(),
                std::fs::read(&path).unwrap()
            );
        }
    }
}

/// Ranks 2 and 4 do not hear the group: rank 0's hybrid session serves
/// them over a TCP chain beside the multicast ones, and every rank exits 0
/// with rank 0's verdict on the whole job.
#[test]
fn ranks_that_do_not_hear_multicast_get_the_object_over_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let path = object(dir.path(), 2_000_000);
    let mp = port(4);
    let size = 5;
    let rank0 = every_rank_verified(start_ranks(size, mp, &path, dir.path(), &[2, 4]), &path);
    assert!(
        rank0.contains("hybrid: 2 over multicast, 2 over tcp-chain"),
        "rank 0 says who went which way:\n{rank0}"
    );
}

/// A directory tree goes over multicast only: the rank that does not hear
/// the group is refused by name, the one that does stores the tree, and
/// every rank exits 1 saying why.
#[test]
fn a_tree_names_the_rank_that_cannot_hear_multicast_on_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("ckpt");
    std::fs::create_dir_all(tree.join("shards")).unwrap();
    object(&tree.join("shards"), 500_000);
    let mp = port(5);
    let size = 3;
    for (rank, out, p) in start_ranks(size, mp, &tree, dir.path(), &[2]) {
        let (code, _, err) = p.wait(Duration::from_secs(60));
        assert_eq!(code, 1, "rank {rank}:\n{err}");
        match rank {
            1 => {
                assert!(
                    err.contains("our copy verified, but not every rank's")
                        && err.contains("rank 2 of 3")
                        && err.contains("did not hear the group"),
                    "rank 1 names rank 2 and why:\n{err}"
                );
                assert_eq!(
                    std::fs::read(out.join("ckpt/shards/ckpt.bin")).unwrap(),
                    std::fs::read(tree.join("shards/ckpt.bin")).unwrap()
                );
            }
            2 => assert!(err.contains("goes over multicast only"), "rank 2:\n{err}"),
            _ => assert!(err.contains("rank 2 of 3"), "rank 0:\n{err}"),
        }
    }
}

#[test]
fn an_inconsistent_launcher_environment_is_refused_naming_the_variables() {
    let dir = tempfile::tempdir().unwrap();
    let path = object(dir.path(), 10);
    let mut c = torchrun_rank(4, 4, port(3), &path, dir.path());
    let (code, _, err) = Proc::spawn("rank 4 of 4", &mut c).wait(Duration::from_secs(20));
    assert_eq!(code, 1);
    assert!(
        err.contains("rank 4 is not below the job's size 4") && err.contains("RANK=4"),
        "{err}"
    );
}

/// The command: `mpirun --oversubscribe --allow-run-as-root -np 9
/// rmcast bcast FILE --out DIR`, with Open MPI from Debian's packages
/// (`openmpi-bin`; .ci/run installs it). All 8 receivers share DIR.
#[test]
fn mpirun_starts_nine_ranks_and_every_one_verifies() {
    if Command::new("mpirun").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("RMCAST_CI_MPIRUN").is_none(),
            ".ci/run installed openmpi-bin: mpirun must be there"
        );
        eprintln!("skipped: no mpirun here (apt-get install openmpi-bin)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = object(dir.path(), 4_000_000);
    let out = dir.path().join("out");
    let mut c = Command::new("mpirun");
    for v in LAUNCHER_VARS {
        c.env_remove(v);
    }
    c.env("RMCAST_KEY_FILE", common::test_key())
        .args(["--oversubscribe", "--allow-run-as-root", "-np", "9"])
        .args(["-x", "RMCAST_KEY_FILE"])
        .arg(env!("CARGO_BIN_EXE_rmcast"))
        .arg("bcast")
        .arg(&path)
        .arg("--out")
        .arg(&out)
        .args(["--wait", "30s"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let (code, stdout, err) = Proc::spawn("mpirun", &mut c).wait(Duration::from_secs(90));
    assert_eq!(code, 0, "mpirun:\n{stdout}\n{err}");
    for rank in 0..9 {
        assert!(
            err.contains(&format!("rank {rank} of 9: every rank verified")),
            "rank {rank}:\n{err}"
        );
    }
    assert_eq!(
        std::fs::read(out.join("ckpt.bin")).unwrap(),
        std::fs::read(&path).unwrap()
    );
    // Nothing half-written left beside it.
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
}
