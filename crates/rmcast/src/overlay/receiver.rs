//! The overlay receiver's TCP driver: registration, storage, relaying,
//! verification, all decided by [`NodeMachine`] (rmcast-proto).
//!
//! Threads of one receiver: a control reader; during the data phase an
//! acceptor for the parents' data connections, one reader per parent (each
//! with its own pool of segment buffers, so a slow child in one tree never
//! starves the other tree's stream), one disk writer, and one writer per
//! child (fed from the pool as segments arrive, pipelined shapes, or from
//! the verified file when the machine says so, store-and-forward shapes).
//! The machine sits behind a mutex: readers ask it where each segment goes
//! (the hot path, one short lock per segment), the caller's thread polls
//! it and carries out what it asks. The data phase's threads are in
//! `data`.
//!
//! A connection may carry an edge each way (`duplex_pairs`): its reader
//! and its writer are separate threads on clones of the socket, so the
//! two directions wait on each other no more than two connections would.
//! Whichever gives up on its direction shuts the whole socket down, so
//! the peer hears it on both.

use super::frame::FrameReader;
use super::io::{self, Clock, Pool, Seg, XferError};
use super::secure;
use super::sender::connect_child;
use super::{OverlayRecvConfig, edge_pool_slots, io_err, pool_slots, slot_len};
use crate::storage::{Placement, Sink, Target, prepare};
use crate::{Error, Progress, ReceiverStats, RecvReport, SessionId, Status};
use rmcast_proto::overlay::{
    DataOp, NodeConfig, NodeEvent, NodeFailure, NodeMachine, NodePhase, PROGRESS_EVERY, SegmentSet,
    Segments,
};
use rmcast_proto::security::Sealer;
use rmcast_proto::{OfferInfo, ProtocolId, Seq};
use rmcast_wire::overlay::{Assignment, Msg};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

mod data;
mod probe;

use data::{Back, accept_parents, child_failed, disk, node_keyed, read_back, serve_child};

/// Pause between attempts to reach a sender that is not listening yet.
const RETRY_EVERY: Duration = Duration::from_millis(200);
/// How long a receiver dials an absent sender before it says so, and how
/// often it says so again.
const WAIT_SAY_AFTER: Duration = Duration::from_secs(10);
const WAIT_SAY_EVERY: Duration = Duration::from_secs(60);

/// Receives one object from the overlay sender at `cfg.sender` into `cfg.out_dir`.
///
/// The object is written to a hidden partial file and renamed to its
/// offered name once its BLAKE3 hash matched; on failure the partial file
/// is removed. Returns `Err(Error::Failed)` when the transfer failed (the
/// text names the failed node when known), `Err(Error::Refused)` when this
/// receiver refused the object.
///
/// A hybrid sender (multicast for the receivers that hear its group, TCP
/// for the rest: [`crate::hybrid`]) first asks this receiver to probe the
/// group; it then takes the object over multicast
/// (`OverlayRecvConfig::multicast`), or, not hearing it, over the TCP
/// overlay the sender redirects it to.
pub fn recv_to_dir(
    cfg: &OverlayRecvConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<RecvReport, Error> {
    recv_once(cfg, progress, true).map(|r| *r)
}

/// How one registration ended: the object's report. (A hybrid session's
/// receiver that did not hear the group runs its registration with the TCP
/// overlay from inside the first one, keeping the lobby connection for the
/// session's verdict.)
type Done = Box<RecvReport>;

/// One registration with the sender at `cfg.sender`; `hybrid`: a `Probe`
/// and a `Redirect` are welcome (the first registration, not the
/// redirected one).
fn recv_once(
    cfg: &OverlayRecvConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
    hybrid: bool,
) -> Result<Done, Error> {
    std::fs::create_dir_all(&cfg.out_dir).map_err(io_err(format!(
        "cannot create output directory {}",
        cfg.out_dir.display()
    )))?;
    let listener = TcpListener::bind(cfg.listen)
        .map_err(io_err(format!("cannot listen for data on {}", cfg.listen)))?;
    let mut ctl = connect_sender(cfg)?;
    // Keyed: the key exchange comes before anything else on the connection.
    let (ctl_seal, frames, session) = match &cfg.key {
        None => (None, FrameReader::default(), None),
        Some(key) => {
            let never = AtomicBool::new(false);
            let abort = cfg.cancel.as_deref().unwrap_or(&never);
            match secure::initiate(&mut ctl, key, None, abort, cfg.inactivity) {
                Ok(ch) => (
                    Some(ch.sealer),
                    FrameReader::sealed(ch.opener),
                    Some(ch.session),
                ),
                Err(_) if abort.load(Ordering::Relaxed) => return Err(Error::Cancelled),
                Err(e) => {
                    return Err(Error::Failed(format!("the sender at {} {e}", cfg.sender)));
                }
            }
        }
    };
    let mut data_addr = listener
        .local_addr()
        .map_err(io_err("cannot read the data address"))?;
    if data_addr.ip().is_unspecified()
        && let Ok(local) = ctl.local_addr()
    {
        data_addr.set_ip(local.ip());
    }
    let clock = Clock::start();
    let machine = NodeMachine::new(
        clock.now(),
        NodeConfig {
            name: cfg.name.clone(),
            data_addr,
            inactivity: cfg.inactivity,
            sender: cfg.sender.to_string(),
        },
    );
    let reader = ctl
        .try_clone()
        .map_err(io_err("cannot clone the control socket"))?;
    let (tx, rx) = mpsc::channel::<Ev>();
    let node = Node {
        cfg,
        m: Mutex::new(machine),
        clock,
        tx,
        abort: AtomicBool::new(false),
        auth_failures: Mutex::new(Vec::new()),
        parent_streams: Mutex::new(Vec::new()),
        back_streams: Mutex::new(Vec::new()),
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let rtx = node.tx.clone();
        let stop_ref = &stop;
        scope.spawn(move || {
            io::control_reader(reader, frames, stop_ref, |m| rtx.send(Ev::Ctl(m)).is_ok());
        });
        tracing::info!("registering with {} (data at {data_addr})", cfg.sender);
        let mut driver = Driver {
            node: &node,
            ctl,
            ctl_seal,
            session,
            rx,
            accept_stop: io::AcceptStop::new(&listener),
            listener: Some(listener),
            sink: None,
            assignment: None,
            path: None,
            replaces: false,
            started: None,
            pools: Arc::new(Vec::new()),
            disk_tx: None,
            hybrid: hybrid.then(probe::Hybrid::default),
        };
        let result = driver.run(scope, progress);
        driver.accept_stop.stop(&node.abort);
        stop.store(true, Ordering::Relaxed);
        let _ = driver.ctl.shutdown(std::net::Shutdown::Both);
        result
    })
}
/// Connects to the sender, retrying while it is not listening yet.
fn connect_sender(cfg: &OverlayRecvConfig) -> Result<TcpStream, Error> {
    let started = Instant::now();
    let mut said = None::<Instant>;
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
                // A receiver started before its sender waits quietly; one
                // that keeps dialling says where, in case that is wrong.
                let waited = started.elapsed();
                if waited >= WAIT_SAY_AFTER && said.is_none_or(|t| t.elapsed() >= WAIT_SAY_EVERY) {
                    said = Some(Instant::now());
                    tracing::warn!(
                        "no sender at {} after {:.0} s ({e}); still trying{}",
                        cfg.sender,
                        waited.as_secs_f64(),
                        if cfg.connect_timeout.is_some() {
                            ""
                        } else {
                            " (--timeout bounds the wait)"
                        }
                    );
                }
                std::thread::sleep(RETRY_EVERY);
            }
        }
    }
}

/// What the driver's loop hears from its threads.
enum Ev {
    /// A control message from the sender, or why the connection ended.
    Ctl(Result<Msg, String>),
    /// A thread changed the machine: poll it.
    Poke,
    /// A parent's data connection failed, or ended early.
    ParentFailed(usize, String),
    /// The object is stored, verified and renamed into place.
    Verified(Option<PathBuf>),
    /// Storing or verifying failed.
    Disk(Status, String),
    /// The disk writer lost its input before the object was complete.
    DiskStopped,
    /// A child got everything, or why not.
    Child(usize, Result<(), String>),
}

/// What the threads share: the machine, the clock, the way back to the loop.
struct Node<'a> {
    cfg: &'a OverlayRecvConfig,
    m: Mutex<NodeMachine>,
    clock: Clock,
    tx: mpsc::Sender<Ev>,
    /// Raised when the session is over: every thread stops.
    abort: AtomicBool,
    /// Data connections that failed authentication, for the failure report.
    auth_failures: Mutex<Vec<String>>,
    /// Each parent edge's current connection, for `DataOp::Drop`: stored
    /// under the machine's lock when the machine takes the connection, so
    /// a drop it asks for later always finds it.
    parent_streams: Mutex<Vec<Option<TcpStream>>>,
    /// Each accepted parent connection's other direction, for a
    /// `DataOp::WriteBack`: the stream and (keyed) the sealer of this
    /// end's key exchange. Stored under the machine's lock, as above.
    back_streams: Mutex<Vec<Option<WayBack>>>,
}

/// The other direction of an accepted parent connection: the stream, and
/// keyed, the sealer of this end's key exchange.
type WayBack = (TcpStream, Option<Sealer>);

impl Node<'_> {
    fn lock(&self) -> MutexGuard<'_, NodeMachine> {
        self.m.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The object's hash and the sender's signature of it, as the sender sent
/// them: what the stored copy is verified against.
type Expected = ([u8; 32], Option<[u8; 64]>);

/// What a child's writer thread is told to send.
enum ChildCmd {
    /// A routed segment, in a pool slot.
    Seg(Seg),
    /// The whole share, from the verified file.
    File(PathBuf, SegmentSet),
}

/// The caller's thread: polls the machine, talks to the sender, starts threads.
struct Driver<'n, 'a> {
    node: &'n Node<'a>,
    ctl: TcpStream,
    /// Keyed: seals what goes to the sender.
    ctl_seal: Option<Sealer>,
    /// Keyed: the session the key exchange was for.
    session: Option<u64>,
    rx: mpsc::Receiver<Ev>,
    listener: Option<TcpListener>,
    /// Wakes the thread accepting on `listener` when the node is done.
    accept_stop: io::AcceptStop,
    /// Storage, from the assignment until the data phase takes it.
    sink: Option<Sink>,
    assignment: Option<Box<Assignment>>,
    /// The verified file.
    path: Option<Option<PathBuf>>,
    /// The accepted object replaces a file of the same name once verified.
    replaces: bool,
    started: Option<Instant>,
    pools: Arc<Vec<Pool>>,
    /// The disk writer's input, for the readers of parent edges that come
    /// back on connections this node opens (from the data phase on).
    disk_tx: Option<mpsc::SyncSender<Seg>>,
    /// The first registration: a hybrid sender's `Probe` and `Redirect`
    /// are welcome (`None` on the redirected one).
    hybrid: Option<probe::Hybrid>,
}

fn cancelled(cfg: &OverlayRecvConfig) -> bool {
    cfg.cancel
        .as_ref()
        .is_some_and(|c| c.load(Ordering::Relaxed))
}

impl<'n, 'a> Driver<'n, 'a> {
    fn run<'s>(
        &mut self,
        scope: &'s std::thread::Scope<'s, 'n>,
        mut progress: Option<&mut dyn FnMut(Progress)>,
    ) -> Result<Done, Error> {
        let node = self.node;
        let report = |p: &mut Option<&mut dyn FnMut(Progress)>, done, total, phase| {
            if let Some(cb) = p.as_deref_mut() {
                cb(Progress {
                    done_bytes: done,
                    total_bytes: total,
                    phase,
                    joined: None,
                });
            }
        };
        report(&mut progress, 0, 0, "waiting for the sender");
        let mut children: Vec<Option<mpsc::SyncSender<ChildCmd>>> = Vec::new();
        let mut child_rxs: Vec<Option<mpsc::Receiver<ChildCmd>>> = Vec::new();
        let mut hash_tx: Option<mpsc::Sender<Expected>> = None;
        let mut last_progress = Instant::now() - PROGRESS_EVERY;
        let result = loop {
            if cancelled(node.cfg) {
                return Err(Error::Cancelled);
            }
            let (msgs, events, ops, deadline) = {
                let mut m = node.lock();
                let msgs: Vec<Msg> = std::iter::from_fn(|| m.poll_transmit()).collect();
                let events: Vec<NodeEvent> = std::iter::from_fn(|| m.poll_event()).collect();
                let ops: Vec<DataOp> = std::iter::from_fn(|| m.poll_data()).collect();
                (msgs, events, ops, m.poll_timeout())
            };
            let inactivity = node.lock().inactivity();
            for msg in &msgs {
                if let Err(e) = io::send_msg(&mut self.ctl, self.ctl_seal.as_mut(), msg, inactivity)
                {
                    let why = format!("cannot talk to the sender: {e}");
                    node.lock().handle_closed(node.clock.now(), &why);
                    break;
                }
            }
            let mut finished = None;
            for ev in events {
                match ev {
                    NodeEvent::Assigned(a) => self.prepare(a),
                    NodeEvent::Started => {
                        let a = self.assignment.clone().expect("assigned");
                        report(&mut progress, 0, a.size, "receiving");
                        let slots = pool_slots(a.segment_size);
                        for _ in &a.children {
                            let (ctx, crx) = mpsc::sync_channel(slots);
                            children.push(Some(ctx));
                            child_rxs.push(Some(crx));
                        }
                        let (htx, hrx) = mpsc::channel();
                        hash_tx = Some(htx);
                        self.start_data(scope, &a, &children, hrx);
                    }
                    NodeEvent::Finished(r) => finished = Some(r),
                }
            }
            if let Some(r) = finished {
                break r;
            }
            for op in ops {
                let a = self.assignment.clone().expect("assigned");
                match op {
                    DataOp::Connect {
                        child,
                        addr,
                        segments,
                        hello,
                        back,
                    } => {
                        let ci = (a.children.iter())
                            .position(|c| c.rank == child && c.segments == segments);
                        let Some(crx) = ci.and_then(|ci| child_rxs[ci].take()) else {
                            continue;
                        };
                        let ci = ci.unwrap_or_default();
                        let pools = self.pools.clone();
                        let reader = back.zip(self.disk_tx.clone()).map(|(pi, disk_tx)| Back {
                            pi,
                            disk_tx,
                            children: children.clone(),
                        });
                        scope.spawn(move || {
                            let limit = node.lock().inactivity();
                            let key = node.cfg.key.as_ref();
                            let r = connect_child(addr, &hello, limit, &node.abort, key).and_then(
                                |(s, sealer, opener)| {
                                    if let Some(b) = reader {
                                        let rs = s.try_clone().map_err(XferError::Io)?;
                                        let (a, pools) = (a.clone(), pools.clone());
                                        scope.spawn(move || {
                                            read_back(node, &a, rs, opener, &pools, b)
                                        });
                                    }
                                    Ok((s, sealer))
                                },
                            );
                            match r {
                                Ok((s, sealer)) => {
                                    serve_child(node, &a, ci, s, sealer, None, &crx, &pools);
                                }
                                Err(e) => child_failed(node, ci, &e, &crx, &pools),
                            }
                        });
                    }
                    DataOp::WriteBack {
                        parent,
                        child: ci,
                        hello,
                    } => {
                        let taken = (node.back_streams.lock())
                            .unwrap_or_else(|e| e.into_inner())
                            .get_mut(parent)
                            .and_then(Option::take);
                        let Some(crx) = child_rxs.get_mut(ci).and_then(Option::take) else {
                            continue;
                        };
                        let pools = self.pools.clone();
                        scope.spawn(move || match taken {
                            Some((s, sealer)) => {
                                serve_child(node, &a, ci, s, sealer, Some(&hello), &crx, &pools);
                            }
                            None => child_failed(node, ci, &XferError::Closed, &crx, &pools),
                        });
                    }
                    DataOp::Abandon { child: ci } => {
                        // What was routed to it goes back to the pools;
                        // what would be, fails to send and is released.
                        if let Some(crx) = child_rxs.get_mut(ci).and_then(Option::take) {
                            for cmd in crx.try_iter() {
                                if let ChildCmd::Seg(seg) = cmd {
                                    self.pools[seg.pool as usize].release(seg.slot);
                                }
                            }
                        }
                    }
                    DataOp::Feed {
                        child, segments, ..
                    } => {
                        let ci = (a.children.iter())
                            .position(|c| c.rank == child && c.segments == segments);
                        if let (Some(ci), Some(Some(path))) = (ci, &self.path)
                            && let Some(tx) = &children[ci]
                        {
                            let _ = tx.send(ChildCmd::File(path.clone(), segments));
                        }
                    }
                    DataOp::Verify { hash, signature } => {
                        if let Some(tx) = hash_tx.take() {
                            let _ = tx.send((hash, signature));
                        }
                    }
                    DataOp::Drop { parent } => {
                        // Its reader ends and reports the edge broken. Only
                        // while the machine still waits for that: once the
                        // reader failed by itself (and shut its socket
                        // down), the edge is orphaned, and the connection
                        // now stored may be the sender's re-attachment
                        // (the Orphaned went out before this ran).
                        let m = node.lock();
                        if m.parent_dropping(parent) {
                            let mut streams =
                                (node.parent_streams.lock()).unwrap_or_else(|e| e.into_inner());
                            if let Some(s) = streams.get_mut(parent).and_then(Option::take) {
                                let _ = s.shutdown(std::net::Shutdown::Both);
                            }
                        }
                        drop(m);
                    }
                }
            }
            if let Some(a) = &self.assignment
                && self.started.is_some()
                && last_progress.elapsed() >= PROGRESS_EVERY
            {
                last_progress = Instant::now();
                let (bytes, phase) = {
                    let m = node.lock();
                    (m.stored_bytes(), m.phase())
                };
                let phase = match phase {
                    NodePhase::Forwarding => "forwarding",
                    NodePhase::Verifying => "verifying",
                    _ => "receiving",
                };
                report(&mut progress, bytes, a.size, phase);
            }
            let p = progress
                .as_deref_mut()
                .map(|p| p as &mut dyn FnMut(Progress));
            if let Some(done) = self.hybrid_step(p)? {
                return Ok(done);
            }
            if node.lock().has_output() {
                // Answering an event queued more (prepare's Ready): send it
                // now, not at the next wake-up (that cost ~100 ms a session).
                continue;
            }
            let ev = self.rx.recv_timeout(node.clock.wait(deadline));
            let mut m = node.lock();
            let now = node.clock.now();
            let more: Vec<Ev> = std::iter::from_fn(|| self.rx.try_recv().ok()).collect();
            for ev in ev.into_iter().chain(more) {
                self.on_event(&mut m, now, ev);
            }
            m.handle_timeout(now);
        };
        // The machine's last words (its Complete) go out before we leave.
        let inactivity = node.lock().inactivity();
        let last: Vec<Msg> = std::iter::from_fn(|| node.lock().poll_transmit()).collect();
        for msg in last {
            if io::send_msg(&mut self.ctl, self.ctl_seal.as_mut(), &msg, inactivity).is_err() {
                break;
            }
        }
        self.accept_stop.stop(&node.abort);
        let a = match (result, self.assignment.take()) {
            (Ok(()), Some(a)) => a,
            (Ok(()), None) => unreachable!("success needs an assignment"),
            (Err(NodeFailure::Refused(why)), _) => return Err(Error::Refused(why)),
            (Err(NodeFailure::Failed(mut why)), a) => {
                // Whoever failed authentication may be why data never came.
                for f in node
                    .auth_failures
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                {
                    why.push_str("; ");
                    why.push_str(f);
                }
                if let Some(a) = a {
                    tracing::warn!("rank {}: transfer failed: {why}", a.rank);
                }
                return Err(Error::Failed(why));
            }
        };
        let seconds = self.started.map_or(0.0, |t| t.elapsed().as_secs_f64());
        report(&mut progress, a.size, a.size, "done");
        Ok(Box::new(RecvReport {
            path: self.path.take().flatten(),
            name: a.name.clone(),
            bytes: a.size,
            seconds,
            goodput_mbps: crate::goodput_mbps(a.size, seconds),
            rank: Some(a.rank),
            session: Some(SessionId(a.session)),
            verified: true,
            stats: ReceiverStats::default(),
            test_dropped_packets: 0,
            replaced: self.replaces,
            tree: None,
            held_bytes: 0,
            group: None,
            caught_up_from: None,
        }))
    }

    /// Prepares storage for the assigned object and answers the machine.
    fn prepare(&mut self, a: Box<Assignment>) {
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
            fec: None,
        };
        let target = Target::Dir(self.node.cfg.out_dir.clone());
        let now = self.node.clock.now();
        let cfg = &self.node.cfg;
        let placement = Placement {
            no_clobber: cfg.no_clobber,
            merge_tree: false,
        };
        match prepare(&target, &offer, session, cfg.max_bytes, placement) {
            Ok(sink) => {
                self.replaces = sink.replaces();
                self.sink = Some(sink);
                self.node.lock().accept(now);
            }
            Err((status, text)) => self.node.lock().refuse(now, status, text),
        }
        self.assignment = Some(a);
    }

    /// Starts the data phase's threads: disk writer and parent acceptor.
    fn start_data<'s>(
        &mut self,
        scope: &'s std::thread::Scope<'s, 'n>,
        a: &Assignment,
        children: &[Option<mpsc::SyncSender<ChildCmd>>],
        hash_rx: mpsc::Receiver<Expected>,
    ) {
        self.started = Some(Instant::now());
        let total = Segments::new(a.size, a.segment_size).count();
        let slot_bytes = slot_len(a.segment_size, node_keyed(self.node));
        self.pools = Arc::new(
            (a.parents.iter())
                .map(|p| {
                    let slots = edge_pool_slots(a.segment_size, p.segments.count(total));
                    Pool::new(slots, slot_bytes)
                })
                .collect(),
        );
        let slots = pool_slots(a.segment_size);
        let node = self.node;
        let (disk_tx, disk_rx) = mpsc::sync_channel::<Seg>(slots * self.pools.len().max(1));
        self.disk_tx = Some(disk_tx.clone());
        let sink = self.sink.take().expect("prepared before the start");
        let segs = Segments::new(a.size, a.segment_size);
        let pools = self.pools.clone();
        let object = (a.name.clone(), a.size);
        scope.spawn(move || {
            let ev = disk(node, segs, sink, &disk_rx, &hash_rx, &pools, &object);
            let _ = node.tx.send(ev);
        });
        let listener = self.listener.take().expect("one data phase");
        let a = a.clone();
        let children = children.to_vec();
        let pools = self.pools.clone();
        scope.spawn(move || accept_parents(scope, node, &a, listener, &pools, &disk_tx, &children));
    }

    fn on_event(&mut self, m: &mut NodeMachine, now: rmcast_proto::Instant, ev: Ev) {
        match ev {
            Ev::Ctl(Ok(Msg::Assign(a))) if self.session.is_some_and(|s| s != a.session) => {
                m.handle_closed(
                    now,
                    "the sender's assignment names another session than its key exchange",
                );
            }
            Ev::Ctl(Ok(msg @ (Msg::Probe { .. } | Msg::Redirect { .. } | Msg::Verdict { .. }))) => {
                self.on_hybrid(m, now, msg);
            }
            Ev::Ctl(Ok(msg)) => m.handle_msg(now, msg),
            Ev::Ctl(Err(why)) => m.handle_closed(now, &why),
            Ev::Poke => {}
            Ev::ParentFailed(pi, why) => m.handle_parent_failed(now, pi, &why),
            Ev::Verified(path) => {
                if let Some(a) = &self.assignment {
                    tracing::info!("rank {}: verified {:?}", a.rank, a.name);
                }
                self.path = Some(path);
                m.handle_verified(now, Ok(()));
            }
            Ev::Disk(status, why) => m.handle_verified(now, Err((status, why))),
            Ev::DiskStopped => {
                m.handle_data_stopped(now, "the object stopped arriving before it was complete");
            }
            Ev::Child(ci, r) => {
                if let (Err(why), Some(a)) = (&r, &self.assignment) {
                    // The sender hears of it from the child itself.
                    tracing::warn!("cannot forward to child {}: {why}", a.children[ci]);
                }
                m.handle_child_done(now, ci, r);
            }
        }
    }
}
