//! One sender and N receiver threads over loopback, with a byte-for-byte
//! check of every received copy.

use crate::net::io_err;
use crate::{Error, Progress, RecvConfig, RecvReport, SendConfig, SendReport, recv_to_dir};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A loopback demonstration: what to send and to how many receivers.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    /// Receiver threads (the sender waits for all of them).
    pub receivers: u16,
    /// Object size in bytes.
    pub size: u64,
    /// Seed of the pseudo-random object (and of the receivers' test loss).
    pub seed: u64,
    /// Sender settings; `proto.receivers` is replaced by `receivers`.
    pub send: SendConfig,
    /// Test loss every receiver applies to data packets (0..=1).
    pub loss: f64,
    /// Keep the object and the received copies in this directory instead of a temporary one.
    pub keep_dir: Option<PathBuf>,
}

impl Default for DemoConfig {
    fn default() -> Self {
        Self {
            receivers: 4,
            size: 4 << 20,
            seed: 1,
            send: SendConfig {
                group: random_group(),
                ..SendConfig::default()
            },
            loss: 0.0,
            keep_dir: None,
        }
    }
}

/// What a demonstration produced.
#[derive(Clone, Debug)]
pub struct DemoReport {
    /// The sender's report.
    pub send: SendReport,
    /// Each receiver's report, or why it failed.
    pub receivers: Vec<Result<RecvReport, String>>,
    /// True when every receiver stored a copy identical to the original.
    pub all_files_match: bool,
}

/// 239.77.0.1 with a random port in 20000..60000, so parallel runs never meet.
#[must_use]
pub fn random_group() -> SocketAddrV4 {
    SocketAddrV4::new(
        Ipv4Addr::new(239, 77, 0, 1),
        rand::random_range(20000..60000),
    )
}

/// Writes `size` pseudo-random bytes from `seed` to `path`.
pub(crate) fn write_object(path: &Path, size: u64, seed: u64) -> Result<(), Error> {
    let file = File::create(path).map_err(io_err(format!("cannot create {}", path.display())))?;
    let mut w = BufWriter::new(file);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        rng.fill_bytes(&mut chunk[..n]);
        w.write_all(&chunk[..n])
            .map_err(io_err(format!("cannot write {}", path.display())))?;
        left -= n as u64;
    }
    w.flush()
        .map_err(io_err(format!("cannot write {}", path.display())))?;
    Ok(())
}

/// True when the two files hold the same bytes.
pub(crate) fn same_contents(a: &Path, b: &Path) -> std::io::Result<bool> {
    let (mut fa, mut fb) = (File::open(a)?, File::open(b)?);
    if fa.metadata()?.len() != fb.metadata()?.len() {
        return Ok(false);
    }
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = fa.read(&mut ba)?;
        if n == 0 {
            return Ok(true);
        }
        fb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

/// The demo's working directory: `keep` if given (created), else a
/// temporary one removed when the returned guard drops.
pub(crate) fn work_dir(
    keep: Option<&Path>,
    prefix: &str,
) -> Result<(PathBuf, Option<tempfile::TempDir>), Error> {
    if let Some(d) = keep {
        std::fs::create_dir_all(d).map_err(io_err(format!("cannot create {}", d.display())))?;
        return Ok((d.to_path_buf(), None));
    }
    let temp = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(io_err("cannot create a temporary directory"))?;
    Ok((temp.path().to_path_buf(), Some(temp)))
}

/// Runs one sender and `cfg.receivers` receiver threads on loopback: writes a
/// pseudo-random object of `cfg.size` bytes, sends it, and compares every
/// received file with it byte for byte. The working directory is removed
/// afterwards unless `keep_dir` is set.
pub fn demo(
    cfg: &DemoConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<DemoReport, Error> {
    if cfg.receivers == 0 {
        return Err(Error::Invalid("a demo needs at least one receiver".into()));
    }
    crate::check_loss(cfg.loss)?;
    let (dir, _temp) = work_dir(cfg.keep_dir.as_deref(), "rmcast-demo-")?;
    let object = dir.join("object.bin");
    write_object(&object, cfg.size, cfg.seed)?;

    let mut send = cfg.send.clone();
    send.proto.receivers = cfg.receivers;
    send.name = Some("object.bin".into());
    let stop = Arc::new(AtomicBool::new(false));
    let listen = send.proto.join_wait + Duration::from_secs(5);
    let handles: Vec<_> = (0..cfg.receivers)
        .map(|i| {
            let rc = RecvConfig {
                group: send.group,
                iface: send.iface,
                out_dir: dir.join(format!("recv-{i}")),
                name: format!("demo-{i}"),
                loss: cfg.loss,
                seed: cfg.seed.wrapping_add(u64::from(i)),
                listen_timeout: Some(listen),
                socket_buffer_bytes: send.socket_buffer_bytes,
                cancel: Some(stop.clone()),
                group_key: send.proto.group_key.clone(),
                ..RecvConfig::default()
            };
            std::thread::Builder::new()
                .name(format!("rmcast-recv-{i}"))
                .spawn(move || recv_to_dir(&rc, None).map_err(|e| e.to_string()))
                .map_err(io_err("cannot start a receiver thread"))
        })
        .collect::<Result<_, _>>()?;

    let sent = crate::send_file(&object, &send, progress);
    if sent.is_err() {
        // Nothing more will come; don't let the receivers wait for it.
        stop.store(true, Ordering::Relaxed);
    }
    let receivers: Vec<Result<RecvReport, String>> = handles
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| Err("receiver thread panicked".into()))
        })
        .collect();
    let send = sent?;
    let mut all_files_match = receivers.len() == usize::from(cfg.receivers);
    for r in &receivers {
        let same = match r {
            Ok(RecvReport {
                path: Some(path), ..
            }) => same_contents(&object, path).unwrap_or(false),
            _ => false,
        };
        all_files_match &= same;
    }
    Ok(DemoReport {
        send,
        receivers,
        all_files_match,
    })
}
