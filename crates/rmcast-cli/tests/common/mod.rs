//! What the CLI's process tests share: a child process that is waited for
//! with a bound and killed (by its own PID) if it overstays or the test
//! drops it early.

use std::io::Read;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A child process of the test.
pub struct Proc {
    pub child: Child,
    pub what: String,
}

impl Proc {
    pub fn spawn(what: &str, cmd: &mut Command) -> Proc {
        Proc {
            child: cmd.spawn().expect("spawn rmcast"),
            what: what.to_owned(),
        }
    }

    /// Waits at most `limit`; returns (exit code, stdout, stderr), the
    /// streams empty when they were not piped. Past `limit` it kills the
    /// child and panics with its stderr.
    pub fn wait(mut self, limit: Duration) -> (i32, String, String) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut out = String::new();
                let mut err = String::new();
                if let Some(mut o) = self.child.stdout.take() {
                    o.read_to_string(&mut out).unwrap();
                }
                if let Some(mut e) = self.child.stderr.take() {
                    e.read_to_string(&mut err).unwrap();
                }
                return (status.code().unwrap_or(-1), out, err);
            }
            if start.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                panic!(
                    "{} did not exit within {limit:?}; stderr:\n{err}",
                    self.what
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A group key file for this test binary's processes (written once,
/// atomically, under Cargo's per-target temp directory): the tests run
/// sealed, as users do; the ones about `--insecure` say so.
#[allow(dead_code)]
pub fn test_key() -> &'static std::path::Path {
    static KEY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
        std::fs::create_dir_all(dir).unwrap();
        let exe = std::env::current_exe().unwrap();
        let stem = exe.file_stem().unwrap().to_string_lossy().into_owned();
        let path = dir.join(format!("{stem}-group.key"));
        let tmp = dir.join(format!("{stem}-group.key.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        rmcast::write_key(&tmp, &rmcast::generate_key()).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        path
    })
}

/// The names in `dir` (none if it does not exist).
#[allow(dead_code)]
pub fn entries(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|it| {
            it.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A file of `size` bytes of a fixed pattern, `dir/name`.
#[allow(dead_code)]
pub fn write_file(dir: &std::path::Path, name: &str, size: usize) -> std::path::PathBuf {
    let path = dir.join(name);
    let data: Vec<u8> = (0..size).map(|i| (i * 31 + i / 4099) as u8).collect();
    std::fs::write(&path, data).unwrap();
    path
}

/// `rmcast recv --json` on `group` into `out` as `name`, giving up after
/// 20 s without a session.
#[allow(dead_code)]
pub fn recv(group: &str, out: &std::path::Path, name: &str, extra: &[&str]) -> Proc {
    let mut cmd = rmcast();
    cmd.args(["recv", "--json", "--group", group, "--name", name, "--out"])
        .arg(out)
        .args(["--timeout", "20s"])
        .args(extra);
    Proc::spawn(name, &mut cmd)
}

/// Waits (at most 20 s, else panics saying `what`) until a receiver
/// stores into `dir`: its hidden part file is there, so data is flowing.
#[allow(dead_code)]
pub fn wait_for_part_file(dir: &std::path::Path, what: &str) {
    let start = Instant::now();
    while !entries(dir).iter().any(|n| n.contains("rmcast-part")) {
        assert!(start.elapsed() < Duration::from_secs(20), "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The `rmcast` binary under test, sealed under the test key, its output
/// piped.
#[allow(dead_code)]
pub fn rmcast() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rmcast"));
    c.env("RMCAST_KEY_FILE", test_key())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    c
}

/// Writes `bytes` at `rel` under `root`, creating the directories.
#[allow(dead_code)]
pub fn write(root: &std::path::Path, rel: &str, bytes: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

/// A loopback address with a port free at the moment (for a control
/// listener the test's sender binds next). It lies below Linux's ephemeral
/// range (32768–60999): a port the kernel hands out there could be taken
/// by another test's outgoing connection before the sender listens on it.
#[allow(dead_code)]
pub fn free_tcp_addr() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let mut seed = std::process::id() ^ t;
    for _ in 0..64 {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let p = 21_000 + ((seed >> 8) % 11_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", p)).is_ok() {
            return format!("127.0.0.1:{p}");
        }
    }
    panic!("no free port in 21000–32000")
}
