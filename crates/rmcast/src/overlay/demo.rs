//! One overlay sender and N receiver threads on loopback, with a
//! byte-for-byte check of every received copy.

use super::{OverlayRecvConfig, OverlaySendConfig, OverlaySender, io_err, recv_to_dir};
use crate::demo::{same_contents, work_dir, write_object};
use crate::{DemoReport, Error, Progress, RecvReport};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// An overlay demonstration: what to send, over which shape, to how many.
#[derive(Clone, Debug)]
pub struct OverlayDemoConfig {
    /// Receiver threads (the sender waits for all of them).
    pub receivers: u16,
    /// Object size in bytes.
    pub size: u64,
    /// Seed of the pseudo-random object.
    pub seed: u64,
    /// Sender settings; `receivers` is replaced, and the control address
    /// defaults to loopback with a free port.
    pub send: OverlaySendConfig,
    /// Keep the object and the received copies in this directory instead of a temporary one.
    pub keep_dir: Option<PathBuf>,
}

impl Default for OverlayDemoConfig {
    fn default() -> Self {
        Self {
            receivers: 4,
            size: 4 << 20,
            seed: 1,
            send: OverlaySendConfig {
                control: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
                join_wait: Duration::from_secs(10),
                ..OverlaySendConfig::default()
            },
            keep_dir: None,
        }
    }
}

/// Runs one overlay sender and `cfg.receivers` receiver threads on
/// loopback: writes a pseudo-random object of `cfg.size` bytes, sends it,
/// and compares every received file with it byte for byte. The working
/// directory is removed afterwards unless `keep_dir` is set.
pub fn demo(
    cfg: &OverlayDemoConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<DemoReport, Error> {
    if cfg.receivers == 0 {
        return Err(Error::Invalid("a demo needs at least one receiver".into()));
    }
    let (dir, _temp) = work_dir(cfg.keep_dir.as_deref(), "rmcast-overlay-demo-")?;
    let object = dir.join("object.bin");
    write_object(&object, cfg.size, cfg.seed)?;

    let mut send = cfg.send.clone();
    send.receivers = cfg.receivers;
    send.name = Some("object.bin".into());
    let sender = OverlaySender::bind(&send)?;
    let control = sender.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..cfg.receivers)
        .map(|i| {
            let rc = OverlayRecvConfig {
                sender: control,
                out_dir: dir.join(format!("recv-{i}")),
                name: format!("demo-{i}"),
                connect_timeout: Some(send.join_wait),
                inactivity: send.inactivity,
                cancel: Some(stop.clone()),
                key: send.key.clone(),
                ..OverlayRecvConfig::default()
            };
            std::thread::Builder::new()
                .name(format!("overlay-recv-{i}"))
                .spawn(move || recv_to_dir(&rc, None).map_err(|e| e.to_string()))
                .map_err(io_err("cannot start a receiver thread"))
        })
        .collect::<Result<_, _>>()?;

    let sent = sender.send_file(&object, progress);
    if sent.is_err() {
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
        all_files_match &= match r {
            Ok(RecvReport {
                path: Some(path), ..
            }) => same_contents(&object, path.as_ref()).unwrap_or(false),
            _ => false,
        };
    }
    Ok(DemoReport {
        send,
        receivers,
        all_files_match,
    })
}
