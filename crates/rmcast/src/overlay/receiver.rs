//! The overlay receiver: registration, storage, relaying, verification.
//!
//! Threads of one receiver during the data phase: an acceptor for the
//! parents' data connections, one reader per parent (each with its own pool
//! of segment buffers, so a slow child in one tree never starves the other
//! tree's stream), one disk writer, and one writer per child (pipelined
//! shapes) or a single forwarder that serves the children in turn from the
//! verified file (store-and-forward shapes). The caller's thread talks to
//! the sender and decides.

use super::io::{self, Pool, Seg, TICK, XferError};
use super::topology::{Forwarding, SegmentSet};
use super::{OverlayRecvConfig, io_err, pool_slots, segment_count, segment_len};
use crate::storage::{Sink, Target, prepare};
use crate::{Error, Progress, ReceiverStats, RecvReport, SessionId, Status};
use rmcast_proto::{OfferInfo, ProtocolId, Seq};
use rmcast_wire::overlay::{Assignment, Msg, Peer};
use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Period of the receiver's progress reports (its heartbeat).
const PROGRESS_EVERY: Duration = Duration::from_millis(200);
/// How long a receiver that lost a parent waits for the sender's verdict
/// (longer than the sender's own grace for the same purpose).
const BLAME_GRACE: Duration = Duration::from_millis(1500);
/// Pause between attempts to reach a sender that is not listening yet.
const RETRY_EVERY: Duration = Duration::from_millis(200);

/// Receives one object from the overlay sender at `cfg.sender` into `cfg.out_dir`.
///
/// The object is written to a hidden partial file and renamed to its
/// offered name once its BLAKE3 hash matched; on failure the partial file
/// is removed. Returns `Err(Error::Failed)` when the transfer failed (the
/// text names the failed node when known), `Err(Error::Refused)` when this
/// receiver refused the object.
pub fn recv_to_dir(
    cfg: &OverlayRecvConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<RecvReport, Error> {
    std::fs::create_dir_all(&cfg.out_dir).map_err(io_err(format!(
        "cannot create output directory {}",
        cfg.out_dir.display()
    )))?;
    let listener = TcpListener::bind(cfg.listen)
        .map_err(io_err(format!("cannot listen for data on {}", cfg.listen)))?;
    let mut ctl = connect_sender(cfg)?;
    let mut data_addr = listener
        .local_addr()
        .map_err(io_err("cannot read the data address"))?;
    if data_addr.ip().is_unspecified()
        && let Ok(local) = ctl.local_addr()
    {
        data_addr.set_ip(local.ip());
    }
    io::send_msg(
        &mut ctl,
        &Msg::Register {
            name: cfg.name.clone(),
            data_addr,
        },
        cfg.inactivity,
    )
    .map_err(|e| Error::Failed(format!("cannot register with {}: {e}", cfg.sender)))?;
    tracing::info!("registered with {} (data at {data_addr})", cfg.sender);

    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<Ev>();
    let reader = ctl
        .try_clone()
        .map_err(io_err("cannot clone the control socket"))?;
    std::thread::scope(|scope| {
        let rtx = tx.clone();
        let stop_ref = &stop;
        scope.spawn(move || io::control_reader(reader, stop_ref, |m| rtx.send(Ev::Ctl(m)).is_ok()));
        let mut node = Node {
            cfg,
            ctl,
            tx,
            rx,
            last_heard: Instant::now(),
            last_sent: Instant::now(),
            bytes_hint: 0,
            inactivity: cfg.inactivity,
            hash: None,
        };
        let result = node.run(listener, progress);
        stop.store(true, Ordering::Relaxed);
        let _ = node.ctl.shutdown(std::net::Shutdown::Both);
        result
    })
}

/// Connects to the sender, retrying while it is not listening yet.
fn connect_sender(cfg: &OverlayRecvConfig) -> Result<TcpStream, Error> {
    let started = Instant::now();
    loop {
        if cfg
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            return Err(Error::Cancelled);
        }
        match io::connect(cfg.sender, cfg.inactivity) {
            Ok(s) => return Ok(s),
            Err(e) => {
                if cfg.connect_timeout.is_some_and(|t| started.elapsed() >= t) {
                    return Err(Error::Failed(format!(
                        "cannot reach the sender at {} within {:.1} s: {e}",
                        cfg.sender,
                        started.elapsed().as_secs_f64()
                    )));
                }
                tracing::debug!("sender at {} not reachable yet: {e}", cfg.sender);
                std::thread::sleep(RETRY_EVERY);
            }
        }
    }
}

/// What the decision loop hears about.
enum Ev {
    /// A control message from the sender, or why the connection ended.
    Ctl(Result<Msg, String>),
    /// A parent's data connection delivered everything, or why not.
    Parent(usize, Result<(), String>),
    /// The parents did not all connect in time.
    Accept(String),
    /// The object is stored, verified and renamed into place.
    Verified(Option<PathBuf>),
    /// Storing or verifying failed.
    Disk(Status, String),
    /// The disk writer stopped early because the readers did (their
    /// failure is the cause and is reported on its own).
    DiskStopped,
    /// A child got everything, or why not.
    Child(usize, Result<(), String>),
}

/// The receiver's session with the sender.
struct Node<'a> {
    cfg: &'a OverlayRecvConfig,
    ctl: TcpStream,
    tx: mpsc::Sender<Ev>,
    rx: mpsc::Receiver<Ev>,
    last_heard: Instant,
    /// When this receiver last said something (it heartbeats with Progress).
    last_sent: Instant,
    /// Bytes stored, as last reported by the data phase.
    bytes_hint: u64,
    inactivity: Duration,
    /// The object's hash, from the sender's `Hash` message (it may come
    /// before the start, or while data flows).
    hash: Option<[u8; 32]>,
}

fn cancelled(cfg: &OverlayRecvConfig) -> bool {
    cfg.cancel
        .as_ref()
        .is_some_and(|c| c.load(Ordering::Relaxed))
}

impl Node<'_> {
    /// Waits for the next control message, answering silence and EOF with
    /// an error. Non-control events are returned too.
    fn next(&mut self) -> Result<Option<Ev>, Error> {
        if cancelled(self.cfg) {
            return Err(Error::Cancelled);
        }
        if self.last_sent.elapsed() >= PROGRESS_EVERY {
            let bytes = self.bytes_hint;
            self.send(&Msg::Progress { bytes })?;
        }
        let silent = self.last_heard.elapsed();
        if silent >= self.inactivity {
            return Err(Error::Failed(format!(
                "the sender at {} went silent for {:.1} s",
                self.cfg.sender,
                silent.as_secs_f64()
            )));
        }
        match self.rx.recv_timeout(TICK) {
            Ok(Ev::Ctl(Ok(Msg::Abort { text }))) => Err(Error::Failed(format!(
                "the sender aborted the transfer: {text}"
            ))),
            Ok(Ev::Ctl(Err(why))) => Err(Error::Failed(format!(
                "lost the sender at {}: {why}",
                self.cfg.sender
            ))),
            Ok(Ev::Ctl(Ok(m))) => {
                self.last_heard = Instant::now();
                if let Msg::Hash { hash } = m {
                    self.hash.get_or_insert(hash);
                }
                Ok(Some(Ev::Ctl(Ok(m))))
            }
            Ok(ev) => Ok(Some(ev)),
            Err(_) => Ok(None),
        }
    }

    fn send(&mut self, m: &Msg) -> Result<(), Error> {
        self.last_sent = Instant::now();
        io::send_msg(&mut self.ctl, m, self.inactivity).map_err(|e| {
            Error::Failed(format!(
                "cannot talk to the sender at {}: {e}",
                self.cfg.sender
            ))
        })
    }

    fn run(
        &mut self,
        listener: TcpListener,
        mut progress: Option<&mut dyn FnMut(Progress)>,
    ) -> Result<RecvReport, Error> {
        let report = |p: &mut Option<&mut dyn FnMut(Progress)>, done, total, phase| {
            if let Some(cb) = p.as_deref_mut() {
                cb(Progress {
                    done_bytes: done,
                    total_bytes: total,
                    phase,
                });
            }
        };
        report(&mut progress, 0, 0, "waiting for the sender");
        let a = loop {
            if let Some(Ev::Ctl(Ok(Msg::Assign(a)))) = self.next()? {
                break a;
            }
        };
        check_assignment(&a)?;
        self.inactivity = Duration::from_millis(u64::from(a.inactivity_ms));
        let session = SessionId(a.session);
        tracing::info!(
            "session {session}: rank {} of {} in {}, {} parent(s), {} child(ren), {:?} ({} bytes)",
            a.rank,
            a.receivers,
            a.shape.name(),
            a.parents.len(),
            a.children.len(),
            a.name,
            a.size
        );
        let offer = OfferInfo {
            name: a.name.clone(),
            size: a.size,
            protocol: ProtocolId::Ack,
            payload_size: 0,
            window: 0,
            receivers: a.receivers,
            packets: 0,
            isn: Seq(0),
            test_loss_ppm: 0,
        };
        let sink = match prepare(
            &Target::Dir(self.cfg.out_dir.clone()),
            &offer,
            session,
            self.cfg.max_bytes,
        ) {
            Ok(sink) => sink,
            Err((status, text)) => {
                let _ = self.send(&Msg::Ready {
                    status,
                    text: text.clone(),
                });
                return Err(Error::Refused(text));
            }
        };
        self.send(&Msg::Ready {
            status: Status::Ok,
            text: String::new(),
        })?;
        report(&mut progress, 0, a.size, "waiting for the start");
        // Storage stays in `sink` until Start: dropped (and removed) on any error.
        let mut sink = Some(sink);
        loop {
            if let Some(Ev::Ctl(Ok(Msg::Start))) = self.next()? {
                break;
            }
        }
        let started = Instant::now();
        let outcome = self.data_phase(&a, listener, sink.take().expect("prepared"), &mut progress);
        let seconds = started.elapsed().as_secs_f64();
        let path = outcome?;
        report(&mut progress, a.size, a.size, "done");
        Ok(RecvReport {
            path,
            name: a.name.clone(),
            bytes: a.size,
            seconds,
            goodput_mbps: crate::goodput_mbps(a.size, seconds),
            rank: Some(a.rank),
            session: Some(session),
            verified: true,
            stats: ReceiverStats::default(),
            test_dropped_packets: 0,
        })
    }

    /// Receives, stores, forwards and verifies; returns the final path.
    fn data_phase(
        &mut self,
        a: &Assignment,
        listener: TcpListener,
        sink: Sink,
        progress: &mut Option<&mut dyn FnMut(Progress)>,
    ) -> Result<Option<PathBuf>, Error> {
        let total = segment_count(a.size, a.segment_size);
        let slots = pool_slots(a.segment_size);
        let pools: Vec<Pool> = a
            .parents
            .iter()
            .map(|_| Pool::new(slots, a.segment_size as usize))
            .collect();
        let abort = AtomicBool::new(false);
        let stored = AtomicU64::new(0);
        let mode = Forwarding::of(a.shape);
        let inactivity = self.inactivity;

        std::thread::scope(|scope| {
            let (pools, abort, stored) = (&pools, &abort, &stored);
            let (disk_tx, disk_rx) = mpsc::sync_channel::<Seg>(slots * pools.len().max(1));
            // The object's hash, passed to the disk writer once the sender sent it.
            let (hash_tx, hash_rx) = mpsc::channel::<[u8; 32]>();
            let mut hash_tx = Some(hash_tx);
            // Children.
            let mut child_txs: Vec<(SegmentSet, mpsc::SyncSender<Seg>)> = Vec::new();
            let mut forward_tx: Option<mpsc::Sender<PathBuf>> = None;
            match mode {
                Forwarding::Pipelined => {
                    for (ci, child) in a.children.iter().enumerate() {
                        let (ctx, crx) = mpsc::sync_channel::<Seg>(slots);
                        child_txs.push((child.segments, ctx));
                        let tx = self.tx.clone();
                        scope.spawn(move || {
                            let r = pipe_child(a, child, &crx, pools, abort, inactivity);
                            let failed = r.is_err();
                            let _ = tx.send(Ev::Child(ci, r.map_err(|e| e.to_string())));
                            if failed {
                                drain(&crx, pools, abort);
                            }
                        });
                    }
                }
                Forwarding::StoreAndForward if !a.children.is_empty() => {
                    let (ftx, frx) = mpsc::channel::<PathBuf>();
                    forward_tx = Some(ftx);
                    let tx = self.tx.clone();
                    scope.spawn(move || store_and_forward(a, &frx, abort, inactivity, &tx));
                }
                Forwarding::StoreAndForward => {}
            }
            // Disk.
            {
                let tx = self.tx.clone();
                scope.spawn(move || {
                    let ev = disk(a, sink, &disk_rx, &hash_rx, pools, abort, stored, total);
                    if let (Ev::Verified(Some(path)), Some(f)) = (&ev, &forward_tx) {
                        let _ = f.send(path.clone());
                    }
                    let _ = tx.send(ev);
                });
            }
            // Parents.
            {
                let tx = self.tx.clone();
                scope.spawn(move || {
                    accept_parents(
                        scope, a, listener, pools, disk_tx, child_txs, abort, inactivity, &tx,
                    );
                });
            }

            // Decide.
            let mut verified: Option<Option<PathBuf>> = None;
            let mut children_done = vec![false; a.children.len()];
            // Every parent must have connected and delivered, even when its
            // share is empty: it must not find this node gone.
            let mut parents_done = vec![false; a.parents.len()];
            let mut last_progress = Instant::now() - PROGRESS_EVERY;
            // A parent that vanished is usually a node that died, which the
            // sender names in an Abort soon; wait for that before blaming
            // the parent ourselves.
            let mut suspect: Option<(String, Instant)> = None;
            let result: Result<(), (Status, String)> = loop {
                if let Some(hash) = self.hash
                    && let Some(tx) = hash_tx.take()
                {
                    let _ = tx.send(hash);
                }
                if verified.is_some()
                    && children_done.iter().all(|&d| d)
                    && parents_done.iter().all(|&d| d)
                {
                    break Ok(());
                }
                if let Some((why, at)) = &suspect
                    && Instant::now() >= *at
                {
                    break Err((Status::Other, why.clone()));
                }
                self.bytes_hint = stored.load(Ordering::Relaxed);
                if last_progress.elapsed() >= PROGRESS_EVERY {
                    last_progress = Instant::now();
                    let bytes = self.bytes_hint;
                    if let Some(cb) = progress.as_deref_mut() {
                        let phase = if verified.is_some() {
                            "forwarding"
                        } else if bytes < a.size {
                            "receiving"
                        } else {
                            "verifying"
                        };
                        cb(Progress {
                            done_bytes: bytes,
                            total_bytes: a.size,
                            phase,
                        });
                    }
                }
                let ev = match self.next() {
                    Ok(Some(ev)) => ev,
                    Ok(None) => continue,
                    Err(e) => break Err((Status::Other, e.to_string())),
                };
                match ev {
                    Ev::Ctl(_) => {}
                    Ev::Parent(i, Ok(())) => parents_done[i] = true,
                    Ev::Parent(i, Err(why)) => {
                        let why = format!("parent {} {why}", a.parents[i]);
                        suspect.get_or_insert((why, Instant::now() + BLAME_GRACE));
                    }
                    Ev::Accept(why) => {
                        suspect.get_or_insert((why, Instant::now() + BLAME_GRACE));
                    }
                    Ev::Verified(path) => {
                        tracing::info!("rank {}: verified {:?}", a.rank, a.name);
                        verified = Some(path);
                    }
                    Ev::Disk(status, why) => break Err((status, why)),
                    Ev::DiskStopped => {
                        let why = "the object stopped arriving before it was complete".to_owned();
                        suspect.get_or_insert((why, Instant::now() + BLAME_GRACE));
                    }
                    Ev::Child(i, r) => {
                        if let Err(why) = r {
                            // The sender hears of it from the child itself; a
                            // verified copy here stays valid.
                            tracing::warn!("cannot forward to child {}: {why}", a.children[i]);
                        }
                        children_done[i] = true;
                    }
                }
            };
            abort.store(true, Ordering::Relaxed);
            match (result, verified) {
                (Ok(()), Some(path)) => {
                    let _ = self.send(&Msg::Complete {
                        status: Status::Ok,
                        text: String::new(),
                    });
                    Ok(path)
                }
                (Err(_), Some(path)) => {
                    // Our copy is verified and in place; the rest is not ours to fix.
                    let _ = self.send(&Msg::Complete {
                        status: Status::Ok,
                        text: "verified; forwarding did not finish".into(),
                    });
                    Ok(path)
                }
                (Err((status, why)), None) => {
                    tracing::warn!("rank {}: transfer failed: {why}", a.rank);
                    let _ = self.send(&Msg::Complete {
                        status,
                        text: why.clone(),
                    });
                    Err(Error::Failed(why))
                }
                (Ok(()), None) => unreachable!("success needs verification"),
            }
        })
    }
}

fn check_assignment(a: &Assignment) -> Result<(), Error> {
    let bad = |why: &str| {
        Err(Error::Failed(format!(
            "the sender's assignment is invalid: {why}"
        )))
    };
    if a.rank == 0 || a.rank > a.receivers {
        return bad("rank out of range");
    }
    if a.segment_size == 0 || a.segment_size > super::MAX_SEGMENT_SIZE {
        return bad("segment size out of range");
    }
    for probe in [0u64, 1] {
        if a.parents
            .iter()
            .filter(|p| p.segments.contains(probe))
            .count()
            != 1
        {
            return bad("segments must come from exactly one parent each");
        }
    }
    for c in &a.children {
        if !a
            .parents
            .iter()
            .any(|p| c.segments.is_subset_of(p.segments))
        {
            return bad("a child needs segments no single parent sends");
        }
    }
    if a.inactivity_ms < 100 {
        return bad("inactivity timeout too short");
    }
    Ok(())
}

/// Accepts the parents' data connections and starts a reader for each.
#[allow(clippy::too_many_arguments)]
fn accept_parents<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    a: &'scope Assignment,
    listener: TcpListener,
    pools: &'scope [Pool],
    disk_tx: mpsc::SyncSender<Seg>,
    child_txs: Vec<(SegmentSet, mpsc::SyncSender<Seg>)>,
    abort: &'scope AtomicBool,
    inactivity: Duration,
    tx: &mpsc::Sender<Ev>,
) {
    if let Err(e) = listener.set_nonblocking(true) {
        let _ = tx.send(Ev::Accept(format!("cannot poll the data listener: {e}")));
        return;
    }
    let mut connected = vec![false; a.parents.len()];
    let started = Instant::now();
    while connected.iter().any(|c| !c) {
        if abort.load(Ordering::Relaxed) {
            return;
        }
        if started.elapsed() >= inactivity {
            let missing: Vec<String> = a
                .parents
                .iter()
                .zip(&connected)
                .filter(|(_, c)| !**c)
                .map(|(p, _)| p.to_string())
                .collect();
            let _ = tx.send(Ev::Accept(format!(
                "parent {} did not connect within {:.1} s",
                missing.join(" and "),
                inactivity.as_secs_f64()
            )));
            return;
        }
        let (mut stream, peer) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(e) => {
                tracing::warn!("cannot accept a data connection: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if let Err(e) = stream
            .set_nonblocking(false)
            .and_then(|()| io::tune(&stream))
        {
            tracing::warn!("dropping data connection from {peer}: {e}");
            continue;
        }
        let from = match io::read_msg(&mut stream, abort, inactivity) {
            Ok(Msg::DataHello { session, from, to }) if session == a.session && to == a.rank => {
                from
            }
            other => {
                tracing::warn!("dropping data connection from {peer}: unexpected {other:?}");
                continue;
            }
        };
        let Some(pi) = a.parents.iter().position(|p| p.rank == from) else {
            tracing::warn!("dropping data connection from {peer}: rank {from} is not a parent");
            continue;
        };
        if connected[pi] {
            tracing::warn!("dropping a second data connection from rank {from}");
            continue;
        }
        connected[pi] = true;
        let parent = &a.parents[pi];
        let wanting: Vec<(SegmentSet, mpsc::SyncSender<Seg>)> = child_txs
            .iter()
            .filter(|(set, _)| set.is_subset_of(parent.segments))
            .cloned()
            .collect();
        let disk_tx = disk_tx.clone();
        let tx = tx.clone();
        scope.spawn(move || {
            let r = read_parent(
                a,
                pi,
                &mut stream,
                &pools[pi],
                &disk_tx,
                &wanting,
                abort,
                inactivity,
            );
            let _ = tx.send(Ev::Parent(pi, r.map_err(|e| e.to_string())));
        });
    }
}

/// Reads the segments a parent sends and hands each to the disk writer and
/// to the children that want it.
#[allow(clippy::too_many_arguments)]
fn read_parent(
    a: &Assignment,
    pi: usize,
    stream: &mut TcpStream,
    pool: &Pool,
    disk_tx: &mpsc::SyncSender<Seg>,
    children: &[(SegmentSet, mpsc::SyncSender<Seg>)],
    abort: &AtomicBool,
    inactivity: Duration,
) -> Result<(), XferError> {
    let set = a.parents[pi].segments;
    let total = segment_count(a.size, a.segment_size);
    let store_and_forward = Forwarding::of(a.shape) == Forwarding::StoreAndForward;
    for i in 0..set.count(total) {
        let index = set.nth(i);
        let len = segment_len(a.size, a.segment_size, index);
        let slot = pool.acquire(abort).ok_or(XferError::Aborted)?;
        // A store-and-forward parent starts only once it holds everything:
        // the wait for the first byte is bounded by the sender's liveness
        // checks, not by this connection.
        let stall = (!(store_and_forward && i == 0)).then_some(inactivity);
        let r = io::read_exact(stream, &mut pool.fill(slot)[..len], abort, stall);
        if let Err(e) = r {
            pool.share(slot, 1);
            pool.release(slot);
            return Err(e);
        }
        let wanting = children.iter().filter(|(s, _)| s.contains(index)).count();
        pool.share(slot, 1 + wanting);
        let seg = Seg {
            pool: pi as u32,
            slot,
            index,
            len: len as u32,
        };
        if disk_tx.send(seg).is_err() {
            pool.release(slot);
        }
        for (_, ctx) in children.iter().filter(|(s, _)| s.contains(index)) {
            if ctx.send(seg).is_err() {
                pool.release(slot);
            }
        }
    }
    Ok(())
}

/// Writes every segment to storage, then verifies against the sender's hash
/// (waiting for it if it has not come yet) and commits.
#[allow(clippy::too_many_arguments)]
fn disk(
    a: &Assignment,
    mut sink: Sink,
    rx: &mpsc::Receiver<Seg>,
    expected: &mpsc::Receiver<[u8; 32]>,
    pools: &[Pool],
    abort: &AtomicBool,
    stored: &AtomicU64,
    total: u64,
) -> Ev {
    let seg_size = u64::from(a.segment_size);
    let mut got = 0u64;
    while got < total {
        match rx.recv_timeout(TICK) {
            Ok(seg) => {
                let pool = &pools[seg.pool as usize];
                let r = sink.write(
                    seg.index * seg_size,
                    &pool.view(seg.slot)[..seg.len as usize],
                );
                pool.release(seg.slot);
                if let Err(e) = r {
                    let status = if e.raw_os_error() == Some(libc::ENOSPC) {
                        Status::NoSpace
                    } else {
                        Status::Io
                    };
                    return Ev::Disk(status, format!("cannot write the object: {e}"));
                }
                got += 1;
                stored.fetch_add(u64::from(seg.len), Ordering::Relaxed);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if abort.load(Ordering::Relaxed) {
                    return Ev::DiskStopped;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return Ev::DiskStopped,
        }
    }
    let got = match sink.hash() {
        Ok(h) => h,
        Err(e) => return Ev::Disk(Status::Io, format!("cannot read back the object: {e}")),
    };
    let want = loop {
        match expected.recv_timeout(TICK) {
            Ok(h) => break h,
            Err(mpsc::RecvTimeoutError::Timeout) if !abort.load(Ordering::Relaxed) => {}
            Err(_) => return Ev::DiskStopped,
        }
    };
    if got != want {
        return Ev::Disk(
            Status::HashMismatch,
            "the received bytes do not match the object's BLAKE3 hash".into(),
        );
    }
    match sink.commit() {
        Ok(path) => Ev::Verified(path),
        Err(e) => Ev::Disk(Status::Io, format!("cannot store the object: {e}")),
    }
}

/// Opens a data connection to `child` and introduces this node.
fn connect_child(
    a: &Assignment,
    child: &Peer,
    abort: &AtomicBool,
    inactivity: Duration,
) -> Result<TcpStream, XferError> {
    let mut s = io::connect(child.addr, inactivity).map_err(XferError::Io)?;
    let hello = Msg::DataHello {
        session: a.session,
        from: a.rank,
        to: child.rank,
    };
    io::write_all(&mut s, &hello.to_frame(), abort, inactivity)?;
    Ok(s)
}

/// Pipelined forwarding to one child, straight from the pool.
fn pipe_child(
    a: &Assignment,
    child: &Peer,
    rx: &mpsc::Receiver<Seg>,
    pools: &[Pool],
    abort: &AtomicBool,
    inactivity: Duration,
) -> Result<(), XferError> {
    let mut s = connect_child(a, child, abort, inactivity)?;
    let total = segment_count(a.size, a.segment_size);
    for i in 0..child.segments.count(total) {
        let seg = loop {
            match rx.recv_timeout(TICK) {
                Ok(seg) => break seg,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if abort.load(Ordering::Relaxed) {
                        return Err(XferError::Aborted);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return Err(XferError::Aborted),
            }
        };
        debug_assert_eq!(seg.index, child.segments.nth(i));
        let pool = &pools[seg.pool as usize];
        let r = io::write_all(
            &mut s,
            &pool.view(seg.slot)[..seg.len as usize],
            abort,
            inactivity,
        );
        pool.release(seg.slot);
        r?;
    }
    Ok(())
}

/// Releases whatever still arrives for a child that failed, so the pool
/// never runs dry because of it.
fn drain(rx: &mpsc::Receiver<Seg>, pools: &[Pool], abort: &AtomicBool) {
    loop {
        match rx.recv_timeout(TICK) {
            Ok(seg) => pools[seg.pool as usize].release(seg.slot),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if abort.load(Ordering::Relaxed) {
                    return;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Store-and-forward: connect every child now, wait for the verified file,
/// then send it to the children one after the other.
fn store_and_forward(
    a: &Assignment,
    ready: &mpsc::Receiver<PathBuf>,
    abort: &AtomicBool,
    inactivity: Duration,
    tx: &mpsc::Sender<Ev>,
) {
    let mut streams = Vec::with_capacity(a.children.len());
    for (ci, child) in a.children.iter().enumerate() {
        match connect_child(a, child, abort, inactivity) {
            Ok(s) => streams.push(s),
            Err(e) => {
                for cj in ci..a.children.len() {
                    let _ = tx.send(Ev::Child(cj, Err(e.to_string())));
                }
                for cj in 0..ci {
                    let _ = tx.send(Ev::Child(cj, Err("not served".into())));
                }
                return;
            }
        }
    }
    let path = loop {
        match ready.recv_timeout(TICK) {
            Ok(p) => break p,
            Err(mpsc::RecvTimeoutError::Timeout) if !abort.load(Ordering::Relaxed) => {}
            Err(_) => return,
        }
    };
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) => {
            for ci in 0..a.children.len() {
                let _ = tx.send(Ev::Child(
                    ci,
                    Err(format!("cannot reopen {}: {e}", path.display())),
                ));
            }
            return;
        }
    };
    let mut buf = vec![0u8; (256 << 10).max(a.segment_size as usize)];
    for (ci, mut s) in streams.into_iter().enumerate() {
        let r = send_file_range(&file, a.size, &mut s, &mut buf, abort, inactivity);
        let _ = tx.send(Ev::Child(ci, r.map_err(|e| e.to_string())));
    }
}

fn send_file_range(
    file: &File,
    size: u64,
    s: &mut TcpStream,
    buf: &mut [u8],
    abort: &AtomicBool,
    inactivity: Duration,
) -> Result<(), XferError> {
    let mut offset = 0u64;
    while offset < size {
        let n = (size - offset).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..n], offset)
            .map_err(XferError::Io)?;
        io::write_all(s, &buf[..n], abort, inactivity)?;
        offset += n as u64;
    }
    Ok(())
}
