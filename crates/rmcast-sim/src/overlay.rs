//! The TCP overlay (`rmcast_proto::overlay`) over modelled links: the same
//! [`SenderMachine`] and [`NodeMachine`]s the TCP runtime drives, at group
//! sizes no test machine can host (N = 1,000 and beyond).
//!
//! # The model
//!
//! Host 0 runs the sender, hosts `1..=N` one receiver each. Every host has
//! an uplink and a downlink of the same rate R. A TCP data connection is a
//! byte pipe from its parent's uplink to its child's downlink:
//!
//! - The uplink sends one segment at a time (`len / R`), serving the host's
//!   connections round-robin, segment by segment: with equal segments this
//!   is a fair share by bytes among the connections that have something to
//!   send (processor sharing at segment granularity).
//! - The segment then travels for the connection's propagation delay
//!   (`latency`, times a per-connection factor in `[1, 1 + jitter)` drawn
//!   from the seed), and queues at the child's downlink (FIFO, `len / R`).
//!   Only then the child's machine sees it (`handle_segment`), stores it at
//!   once (no disk model) and routes it to its children.
//! - Flow control: a connection carries at most `window_bytes` of segments
//!   that its child has not released yet (in flight, queued at the
//!   downlink, or waiting to be forwarded to the child's own children): the
//!   TCP window plus the runtime's per-stream buffer pool.
//! - Control frames take the propagation delay and no bandwidth (they are a
//!   few hundred bytes per receiver per session). A data connection opens
//!   two propagation delays after the machine asks for it (SYN, hello):
//!   the child's kernel takes it, and the bytes written to it, whatever
//!   the child's application does; the machine sees the hello (and then
//!   what its kernel read) once it has started and runs. A hello the
//!   machine refuses closes the connection.
//! - Keyed (`sealed`, the runtime with a group key): every segment crosses
//!   its links in a sealed frame, [`FRAME_OVERHEAD`] bytes longer, and a
//!   data connection opens two propagation delays later (its key
//!   exchange: one hello each way before the parent's first frame, which
//!   needs the child's application).
//!   Crypto costs no time here (it costs CPU, which is not modelled).
//! - A writer that has had something to write and a shut window (or an
//!   unfinished key exchange) for the inactivity timeout gives up, as the
//!   runtime's do: the parent's machine hears `handle_child_done(Err)`,
//!   and the connection closes.
//! - A receiver whose transfer is over (its machine finished) closes its
//!   data connections, as the runtime does when it returns.
//! - A host may hold at most `max_connections` data connections; one more
//!   fails (the parent's machine hears `handle_child_done(Err)`).
//! - The object's bytes are not carried: a segment is its index. Hashing is
//!   free and instant; the sender knows the hash at time zero.
//!
//! Receivers register in an order and at times drawn from the seed, so the
//! ranks, and with them the overlay, change with the seed; a seed replays a
//! run exactly (events are ordered by time, then by insertion).
//!
//! After the run it checks that every receiver got every segment exactly
//! once, stored the object's size, verified, and finished without error,
//! that the sender reports every member verified, and that the session
//! ended within `time_limit` of simulated time.
//!
//! # Faults
//!
//! [`OverlayFault`]s happen to hosts at set times:
//!
//! - A crash (SIGKILL): the host does nothing more. Its kernel closes its
//!   connections: a data connection that had been written to the end
//!   still delivers everything (FIN after the data); one that had not is
//!   reset, and the peer's machine hears it one propagation delay later
//!   (`handle_parent_failed`, `handle_child_done(Err)`, `handle_closed`).
//!   A connection opened to a dead host (or to one whose transfer is over)
//!   is refused.
//! - A pause (SIGSTOP, then SIGCONT, or never): the host's machine sees
//!   nothing and does nothing until it resumes, and its downlink stops
//!   (nobody reads the socket, so TCP's window closes); its connections
//!   stay open and what its kernel already holds keeps moving. Everything
//!   that happened meanwhile reaches the machine, in order, when it resumes.
//!
//! The overlay heals (see "Self-healing" in `rmcast_proto::overlay`): once
//! data flows, the sender cuts out a receiver that died (its control
//! connection reset), went silent for the inactivity timeout, stopped
//! taking data (its edge from the sender failed) or reported a failure,
//! and tells its children (`Detach`). A child closes its edges from it
//! ([`DataOp::Drop`]: nothing more of that connection reaches the child,
//! what its downlink still queued for it is discarded, the child's
//! machine hears `handle_parent_failed` at once and the parent's kernel
//! the close a propagation delay later), or has seen them reset already,
//! and says where it stands (`Orphaned`); the sender then opens a
//! connection of its own for each orphaned edge (hello with `first`) and
//! feeds it from that segment on ([`DataOp::Feed`] with `first`). After
//! that a child has two connections for the same parent edge over time:
//! the old one delivers nothing more.
//!
//! After a run with a crash or a pause without end, the checks are those
//! a user relies on: the session still ends within `time_limit`; every
//! receiver that the sender reports verified, and every receiver that
//! finished without error, holds every segment exactly once. A lasting
//! fault of receivers that strikes once data flows must be healed: every
//! other receiver finishes without error, verified, with every segment
//! exactly once; the sender reports none of them failed, and its error
//! names one of the hosts that failed first and says "K of N receivers
//! verified" (or there is no error, if the lost ones had finished). One
//! that strikes before data flows fails the session, naming one of the
//! hosts that failed (not an innocent one). With the sender dead, every
//! surviving receiver still ends by itself. A child refuses a connection
//! only after a lasting fault, and never the sender's. A pause that ends
//! (within the inactivity timeout) must change nothing: the run passes
//! the clean checks.
//!
//! It does not model TCP slow start, loss, retransmission or congestion
//! control, per-packet (rather than per-segment) pipelining inside a hop,
//! or disk and CPU costs.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rmcast_proto::Instant;
use rmcast_proto::overlay::{
    ControlOp, DataOp, Forwarding, NodeConfig, NodeEvent, NodeMachine, NodePhase, OverlayShape,
    Rank, SegmentSet, Segments, SenderConfig, SenderEvent, SenderMachine,
};
use rmcast_proto::security::FRAME_OVERHEAD;
use rmcast_wire::overlay::Msg;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

/// One overlay run: shape, group, object and links.
#[derive(Clone, Debug)]
pub struct OverlayScenario {
    /// The overlay.
    pub shape: OverlayShape,
    /// Receivers.
    pub nodes: u16,
    /// Object size in bytes.
    pub size: u64,
    /// Bytes per segment.
    pub segment_size: u32,
    /// Every host's uplink and downlink rate.
    pub rate_bits_per_s: u64,
    /// One-way propagation delay of a connection.
    pub latency: Duration,
    /// Per-connection spread of the delay: factor in `[1, 1 + jitter)`.
    pub jitter: f64,
    /// Unreleased bytes a data connection may carry.
    pub window_bytes: u64,
    /// Data connections a host may hold.
    pub max_connections: usize,
    /// The machines' inactivity timeout.
    pub inactivity: Duration,
    /// The sender's stall timeout (`SenderConfig::stall_timeout`).
    pub stall_timeout: Option<Duration>,
    /// The session must end within this much simulated time.
    pub time_limit: Duration,
    /// Seed of every random choice.
    pub seed: u64,
    /// Keyed: segments travel in sealed frames, connections exchange keys.
    pub sealed: bool,
    /// What goes wrong, and when (see the module's documentation).
    pub faults: Vec<OverlayFault>,
}

/// A fault of one host (0 is the sender, `1..=nodes` the receivers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverlayFault {
    /// The host dies at `at` (SIGKILL): its connections close or reset.
    Crash {
        /// The host.
        host: u16,
        /// When.
        at: Duration,
    },
    /// The host stops at `at` (SIGSTOP) for `duration`, or for good
    /// (`None`): its connections stay open and go quiet.
    Pause {
        /// The host.
        host: u16,
        /// When.
        at: Duration,
        /// For how long; `None`: it never resumes.
        duration: Option<Duration>,
    },
}

impl OverlayFault {
    /// A lasting fault of `host` at `at`: a stop for good (SIGSTOP without
    /// SIGCONT) when `stop`, else a crash (SIGKILL).
    #[must_use]
    pub fn lasting(host: u16, at: Duration, stop: bool) -> Self {
        if stop {
            Self::Pause {
                host,
                at,
                duration: None,
            }
        } else {
            Self::Crash { host, at }
        }
    }

    /// The host it happens to.
    #[must_use]
    pub fn host(&self) -> u16 {
        match *self {
            Self::Crash { host, .. } | Self::Pause { host, .. } => host,
        }
    }

    /// When it happens.
    #[must_use]
    pub fn at(&self) -> Duration {
        match *self {
            Self::Crash { at, .. } | Self::Pause { at, .. } => at,
        }
    }

    /// Whether the host is gone for good (a crash, or a pause without end).
    #[must_use]
    pub fn is_lasting(&self) -> bool {
        matches!(
            self,
            Self::Crash { .. } | Self::Pause { duration: None, .. }
        )
    }
}

impl Default for OverlayScenario {
    fn default() -> Self {
        Self {
            shape: OverlayShape::Bintree,
            nodes: 8,
            size: 1 << 20,
            segment_size: 8 << 10,
            rate_bits_per_s: 1_000_000_000,
            latency: Duration::from_micros(50),
            jitter: 0.2,
            window_bytes: 2 << 20,
            max_connections: 1024,
            inactivity: Duration::from_secs(5),
            stall_timeout: Some(rmcast_proto::overlay::DEFAULT_STALL_TIMEOUT),
            time_limit: Duration::from_secs(3600),
            seed: 1,
            sealed: false,
            faults: Vec::new(),
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct OverlayReport {
    /// From Start to the last receiver's confirmation.
    pub data_time: Duration,
    /// From time zero to the end of the session.
    pub total_time: Duration,
    /// `size / R`: the time one link needs for the object.
    pub object_time: Duration,
    /// Segments that crossed a link.
    pub segments_moved: u64,
    /// Most data connections one host held.
    pub max_connections_used: usize,
    /// Events processed.
    pub events: u64,
    /// The session failed (after a fault: it named a host that failed), or
    /// the sender died.
    pub failed: bool,
    /// From time zero to Start (the data phase), if it came.
    pub started: Option<Duration>,
    /// Receivers the sender reports verified.
    pub verified: usize,
    /// The host of each rank (index 0: the sender, host 0).
    pub host_of_rank: Vec<u16>,
    /// Orphaned edges the sender took over (`SenderStats::reattached`).
    pub reattached: u64,
    /// Bytes the hosts lost for good (a crash, a pause without end) still
    /// owed their children when the fault struck: their children's shares
    /// less what they had written of them. The sender feeds that itself
    /// once it cut them out.
    pub unforwarded_bytes: u64,
}

/// A failed run: which invariant broke, with the seed to replay it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverlayError(pub String);

impl std::fmt::Display for OverlayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OverlayError {}

/// Runs `s` to the end and checks its invariants.
pub fn run_overlay(s: &OverlayScenario) -> Result<OverlayReport, OverlayError> {
    let mut sim = Sim::new(s);
    sim.run()
        .and_then(|()| sim.check())
        .map_err(|e| OverlayError(format!("seed {}: {e} ({s:?})", s.seed)))
}

enum Ev {
    Join(usize),
    ToNode(usize, Msg),
    ToSender(usize, Msg),
    Timer(usize),
    /// A data connection is established (its child's kernel accepted it):
    /// its parent may write.
    Established(usize),
    Hello(usize),
    UplinkDone(usize),
    Arrive(usize, u64),
    DownlinkDone(usize),
    /// A fault starts.
    Fault(OverlayFault),
    /// A paused host resumes.
    Resume(usize),
    /// The data connection's parent end is gone: its child hears it.
    ParentLost(usize),
    /// The data connection's child end closed it (`DataOp::Drop`, a
    /// refused hello, the child ended): its parent's kernel hears it.
    ChildClosed(usize),
    /// The parent's writer of pipe `p` has made no progress since then:
    /// at the inactivity timeout it gives up.
    WriteStall(usize, u64),
    /// The data connection ended at its parent (`Err`: reset or refused).
    ChildDone(usize, Result<(), String>),
    /// The sender's control connection to host `h` was reset.
    SenderLost(usize),
    /// Host `h`'s control connection to the sender was reset.
    NodeLostSender(usize),
}

struct Queued {
    at: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Queued {
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq)) // min-heap
    }
}

/// A data connection.
struct Pipe {
    from: usize,
    to: usize,
    /// The child's index among its parent's children (nodes only).
    ci: Option<usize>,
    /// The parent's index at the child, once introduced.
    pi: Option<usize>,
    hello: Msg,
    /// The edge's segments.
    set: SegmentSet,
    /// Segments the child's kernel read before its application took the
    /// connection: they reach the machine once it does.
    unread: Vec<u64>,
    delay_ns: u64,
    open: bool,
    /// Routed segments waiting for the uplink.
    queue: VecDeque<u64>,
    /// A whole share to feed: set, next position, count.
    feed: Option<(SegmentSet, u64, u64)>,
    share: u64,
    routed: bool,
    sent: u64,
    outstanding: u64,
    in_rr: bool,
    done: bool,
    /// The parent end is gone: nothing more is sent.
    broken: bool,
    /// The child heard that the parent end is gone, or closed its end
    /// itself: nothing more arrives.
    cut: bool,
    /// Since when the writer has had something to write and the window
    /// has been shut.
    stalled_since: Option<u64>,
}

#[derive(Default)]
struct Host {
    up_busy: bool,
    rr: VecDeque<usize>,
    down_busy: bool,
    down: VecDeque<(usize, u64)>,
    connections: usize,
    /// Segments held for forwarding: index → (incoming pipe, children left).
    holds: HashMap<u64, (usize, usize)>,
    /// Per child index, its pipe.
    child_pipes: Vec<Option<usize>>,
    /// Data connections waiting for this node's Start.
    early: Vec<usize>,
    received: Vec<u64>,
    finished: Option<Result<(), String>>,
    /// Crashed: does nothing more.
    dead: bool,
    /// Paused until then (`u64::MAX`: for good).
    paused_until: Option<u64>,
}

struct Sim<'a> {
    s: &'a OverlayScenario,
    segs: Segments,
    rng: ChaCha8Rng,
    now: u64,
    seq: u64,
    heap: BinaryHeap<Queued>,
    sender: SenderMachine,
    nodes: Vec<Option<NodeMachine>>,
    hosts: Vec<Host>,
    pipes: Vec<Pipe>,
    armed: Vec<Option<u64>>,
    host_of_rank: HashMap<Rank, usize>,
    rank_of_host: Vec<Rank>,
    /// (parent host, child rank, the edge's set) → pipe.
    pipe_of: HashMap<(usize, Rank, SegmentSet), usize>,
    sender_done: bool,
    /// Data connections a child refused: (parent host, child host, why).
    refused: Vec<(usize, usize, String)>,
    /// See [`OverlayReport::unforwarded_bytes`].
    unforwarded: u64,
    hash: [u8; 32],
    moved: u64,
    events: u64,
    max_conn: usize,
}

fn addr(h: usize) -> SocketAddr {
    SocketAddr::from(([10, (h >> 16) as u8, (h >> 8) as u8, h as u8], 5000))
}

impl<'a> Sim<'a> {
    fn new(s: &'a OverlayScenario) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(s.seed);
        let n = usize::from(s.nodes);
        let hash: [u8; 32] = rng.random();
        let sender = SenderMachine::new(
            Instant::ZERO,
            SenderConfig {
                shape: s.shape,
                receivers: s.nodes,
                segment_size: s.segment_size,
                join_wait: s.time_limit,
                inactivity: s.inactivity,
                stall_timeout: s.stall_timeout,
                session: rng.random(),
                name: "object.bin".into(),
                size: s.size,
                control_addr: addr(0),
            },
        );
        let mut sim = Self {
            s,
            segs: Segments::new(s.size, s.segment_size),
            rng,
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            sender,
            nodes: (0..=n).map(|_| None).collect(),
            hosts: (0..=n).map(|_| Host::default()).collect(),
            pipes: Vec::new(),
            armed: vec![None; n + 1],
            host_of_rank: HashMap::new(),
            rank_of_host: vec![0; n + 1],
            pipe_of: HashMap::new(),
            sender_done: false,
            refused: Vec::new(),
            unforwarded: 0,
            hash,
            moved: 0,
            events: 0,
            max_conn: 0,
        };
        sim.sender.handle_hash(Instant::ZERO, hash);
        for h in 1..=n {
            // Receivers come up within the first millisecond, in a seeded order.
            let at = sim.rng.random_range(0..1_000_000u64);
            sim.push(at, Ev::Join(h));
        }
        for f in &s.faults {
            sim.push(f.at().as_nanos() as u64, Ev::Fault(*f));
        }
        sim.drive_sender();
        sim
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Queued {
            at,
            seq: self.seq,
            ev,
        });
    }

    fn t(&self) -> Instant {
        Instant::from_nanos(self.now)
    }

    fn latency(&self) -> u64 {
        self.s.latency.as_nanos() as u64
    }

    fn tx_ns(&self, index: u64) -> u64 {
        let overhead = if self.s.sealed { FRAME_OVERHEAD } else { 0 };
        let bits = (self.segs.len(index) + overhead) as u128 * 8;
        (bits * 1_000_000_000 / u128::from(self.s.rate_bits_per_s.max(1))) as u64
    }

    /// Gone for good: crashed, or paused without end.
    fn lost(&self, h: usize) -> bool {
        self.hosts[h].dead || self.hosts[h].paused_until == Some(u64::MAX)
    }

    fn done(&self) -> bool {
        (self.sender_done || self.lost(0))
            && (1..self.hosts.len()).all(|h| self.hosts[h].finished.is_some() || self.lost(h))
    }

    /// The host whose application an event reaches (`None`: the network's
    /// or a kernel's own work, which goes on whatever the host does).
    fn target(&self, ev: &Ev) -> Option<usize> {
        match *ev {
            Ev::Join(h)
            | Ev::ToNode(h, _)
            | Ev::Timer(h)
            | Ev::DownlinkDone(h)
            | Ev::NodeLostSender(h)
            | Ev::Resume(h) => Some(h),
            Ev::ToSender(..) | Ev::SenderLost(_) => Some(0),
            Ev::Hello(p) | Ev::ParentLost(p) => Some(self.pipes[p].to),
            Ev::ChildDone(p, _) | Ev::WriteStall(p, _) => Some(self.pipes[p].from),
            Ev::ChildClosed(_) | Ev::Established(_) => None,
            Ev::UplinkDone(h) if self.hosts[h].dead => Some(h),
            Ev::UplinkDone(_) | Ev::Arrive(..) | Ev::Fault(_) => None,
        }
    }

    fn run(&mut self) -> Result<(), String> {
        let limit = self.s.time_limit.as_nanos() as u64;
        while let Some(q) = self.heap.pop() {
            if self.done() {
                return Ok(());
            }
            if q.at > limit {
                return Err(format!(
                    "the session did not end within {:?}",
                    self.s.time_limit
                ));
            }
            self.now = q.at;
            self.events += 1;
            self.handle(q.ev)?;
        }
        if self.done() {
            Ok(())
        } else {
            Err("the simulation ran out of events before the session ended".into())
        }
    }

    fn handle(&mut self, ev: Ev) -> Result<(), String> {
        let now = self.t();
        if let Some(h) = self.target(&ev) {
            if self.hosts[h].dead {
                return Ok(());
            }
            if let Some(until) = self.hosts[h].paused_until
                && !matches!(ev, Ev::Resume(_))
            {
                // Stopped: it happens when the host resumes, in order.
                if until != u64::MAX {
                    if matches!(ev, Ev::Timer(_)) {
                        self.armed[h] = Some(until);
                    }
                    self.push(until, ev);
                }
                return Ok(());
            }
        }
        match ev {
            Ev::Fault(f) => self.fault(f)?,
            Ev::Resume(h) => {
                if self.hosts[h].paused_until == Some(self.now) {
                    self.hosts[h].paused_until = None;
                    self.serve_downlink(h);
                }
            }
            Ev::ParentLost(p) => {
                if self.pipes[p].cut {
                    // The child closed it first (a drop): it knows.
                    return Ok(());
                }
                self.cut(p);
                let to = self.pipes[p].to;
                if let Some(pi) = self.pipes[p].pi
                    && let Some(m) = self.nodes[to].as_mut()
                {
                    m.handle_parent_failed(now, pi, "closed its connection before the end");
                    self.drive_node(to)?;
                }
            }
            Ev::ChildClosed(p) => {
                if !self.pipes[p].broken {
                    self.break_pipe(p);
                }
                if !self.pipes[p].done {
                    self.pipes[p].done = true;
                    self.child_done(p, Err("connection reset by peer".into()))?;
                }
            }
            Ev::WriteStall(p, since) => {
                let pipe = &self.pipes[p];
                if pipe.stalled_since == Some(since) && !pipe.broken && !pipe.done {
                    // The runtime's writer gives up (`no progress for …`)
                    // and closes the connection.
                    let at = self.now + pipe.delay_ns;
                    self.break_pipe(p);
                    self.pipes[p].done = true;
                    self.push(at, Ev::ParentLost(p));
                    let stalled = Duration::from_nanos(self.now - since);
                    let why = format!("no progress for {:.1} s", stalled.as_secs_f64());
                    self.child_done(p, Err(why))?;
                }
            }
            Ev::ChildDone(p, r) => self.child_done(p, r)?,
            Ev::SenderLost(h) => {
                self.sender
                    .handle_closed(now, h as u64, "connection reset by peer", false);
                self.drive_sender();
            }
            Ev::NodeLostSender(h) => {
                if let Some(m) = self.nodes[h].as_mut() {
                    m.handle_closed(now, "connection reset by peer");
                }
                self.drive_node(h)?;
            }
            Ev::Join(h) => {
                self.sender.handle_connected(now, h as u64, addr(h));
                self.nodes[h] = Some(NodeMachine::new(
                    now,
                    NodeConfig {
                        name: format!("host-{h}"),
                        data_addr: addr(h),
                        inactivity: self.s.inactivity,
                        sender: "host-0".into(),
                    },
                ));
                self.drive_sender();
                self.drive_node(h)?;
            }
            Ev::ToNode(h, msg) => {
                if let Some(m) = self.nodes[h].as_mut() {
                    m.handle_msg(now, msg);
                }
                self.drive_node(h)?;
            }
            Ev::ToSender(h, msg) => {
                self.sender.handle_msg(now, h as u64, msg);
                self.drive_sender();
            }
            Ev::Timer(h) => {
                if self.armed[h] == Some(self.now) {
                    self.armed[h] = None;
                    let next = if h == 0 {
                        self.sender.handle_timeout(now);
                        self.drive_sender();
                        self.sender.poll_timeout()
                    } else if let Some(m) = self.nodes[h].as_mut() {
                        m.handle_timeout(now);
                        self.drive_node(h)?;
                        self.nodes[h].as_ref().and_then(NodeMachine::poll_timeout)
                    } else {
                        None
                    };
                    // A deadline that is due must move something: a machine
                    // that asks again for the instant it just handled would
                    // spin its driver (here: time would stand still).
                    if let Some(t) = next
                        && t <= now
                    {
                        return Err(format!(
                            "host {h}'s machine, woken at {:?}, asks to be woken at {:?} \
                             again: a busy loop",
                            now.saturating_since(Instant::ZERO),
                            t.saturating_since(Instant::ZERO)
                        ));
                    }
                }
            }
            Ev::Hello(p) => self.hello(p)?,
            Ev::Established(p) => {
                let pipe = &self.pipes[p];
                if !pipe.broken && !pipe.cut && !pipe.open {
                    self.pipes[p].open = true;
                    self.check_pipe_done(p)?;
                    self.kick(p);
                }
            }
            Ev::UplinkDone(h) => {
                let p = self.hosts[h].rr.pop_front().expect("a pipe was served");
                let pipe = &mut self.pipes[p];
                pipe.in_rr = false;
                let index = pipe.queue.pop_front().expect("it had a segment");
                if pipe.broken {
                    // Reset while on the wire: it never arrives.
                    if pipe.routed {
                        self.release(h, index);
                    }
                    self.hosts[h].up_busy = false;
                    self.serve_uplink(h);
                    return Ok(());
                }
                pipe.sent += 1;
                let (at, routed) = (self.now + pipe.delay_ns, pipe.routed);
                self.moved += 1;
                self.push(at, Ev::Arrive(p, index));
                if routed {
                    self.release(h, index);
                }
                self.check_pipe_done(p)?;
                self.kick(p);
                self.hosts[h].up_busy = false;
                self.serve_uplink(h);
            }
            Ev::Arrive(p, index) => {
                if self.pipes[p].cut {
                    return Ok(());
                }
                let to = self.pipes[p].to;
                self.hosts[to].down.push_back((p, index));
                self.serve_downlink(to);
            }
            Ev::DownlinkDone(h) => {
                let (p, index) = self.hosts[h].down.pop_front().expect("queued");
                self.hosts[h].down_busy = false;
                self.serve_downlink(h);
                if !self.pipes[p].cut {
                    self.segment_in(h, p, index)?;
                }
            }
        }
        Ok(())
    }

    /// Segment `index` reached node `h` on pipe `p`.
    fn segment_in(&mut self, h: usize, p: usize, index: u64) -> Result<(), String> {
        let now = self.t();
        let Some(pi) = self.pipes[p].pi else {
            // Read before the application took the connection.
            self.pipes[p].unread.push(index);
            return Ok(());
        };
        let Some(m) = self.nodes[h].as_mut() else {
            return Err(format!("host {h} got data before it joined"));
        };
        let route = m.handle_segment(now, pi, index);
        m.handle_stored(now, index, self.segs.len(index));
        self.hosts[h].received.push(index);
        // A child whose connection is gone takes nothing: its share of the
        // buffer is free at once (the runtime's send to its ended writer
        // fails).
        let mut live = Vec::with_capacity(route.len());
        for ci in route {
            let cp = self.hosts[h].child_pipes.get(ci).copied().flatten();
            let cp = cp.ok_or("a segment routed to a child never connected")?;
            if !self.pipes[cp].broken {
                live.push(cp);
            }
        }
        if live.is_empty() {
            self.unhold(p);
        } else {
            self.hosts[h].holds.insert(index, (p, live.len()));
            for cp in live {
                self.pipes[cp].queue.push_back(index);
                self.kick(cp);
            }
        }
        self.drive_node(h)
    }

    /// One child of host `h` took its copy of `index`.
    fn release(&mut self, h: usize, index: u64) {
        let Some(e) = self.hosts[h].holds.get_mut(&index) else {
            return;
        };
        e.1 -= 1;
        if e.1 == 0 {
            let (p, _) = self.hosts[h].holds.remove(&index).expect("held");
            self.unhold(p);
        }
    }

    /// The child of pipe `p` released one segment: the window opens.
    fn unhold(&mut self, p: usize) {
        self.pipes[p].outstanding -= 1;
        self.kick(p);
    }

    fn window(&self) -> u64 {
        (self.s.window_bytes / u64::from(self.s.segment_size)).max(1)
    }

    /// Puts pipe `p` in its uplink's round-robin when it can send.
    fn kick(&mut self, p: usize) {
        let w = self.window();
        let pipe = &mut self.pipes[p];
        if pipe.queue.is_empty()
            && let Some((set, next, count)) = pipe.feed.as_mut()
            && *next < *count
        {
            pipe.queue.push_back(set.nth(*next));
            *next += 1;
        }
        if !pipe.open || pipe.broken || pipe.in_rr || pipe.queue.is_empty() {
            return;
        }
        if pipe.outstanding < w {
            pipe.in_rr = true;
            pipe.stalled_since = None;
            let from = pipe.from;
            self.hosts[from].rr.push_back(p);
            self.serve_uplink(from);
        } else if pipe.stalled_since.is_none() {
            // Something to write and the window shut: the runtime's writer
            // gives up if it stays so for the inactivity timeout.
            pipe.stalled_since = Some(self.now);
            let at = self.now + self.s.inactivity.as_nanos() as u64;
            self.push(at, Ev::WriteStall(p, self.now));
        }
    }

    /// Nothing more of pipe `p` reaches its child: what its downlink
    /// queued for it is discarded (the segment it is reading finishes and
    /// is dropped).
    fn cut(&mut self, p: usize) {
        self.pipes[p].cut = true;
        self.pipes[p].unread.clear();
        let host = &mut self.hosts[self.pipes[p].to];
        let mut keep = usize::from(host.down_busy);
        host.down.retain(|&(q, _)| {
            if keep > 0 {
                keep -= 1;
                return true;
            }
            q != p
        });
    }

    fn serve_uplink(&mut self, h: usize) {
        if self.hosts[h].up_busy {
            return;
        }
        let Some(&p) = self.hosts[h].rr.front() else {
            return;
        };
        let index = *self.pipes[p].queue.front().expect("ready pipe");
        self.pipes[p].outstanding += 1;
        self.hosts[h].up_busy = true;
        let at = self.now + self.tx_ns(index);
        self.push(at, Ev::UplinkDone(h));
    }

    fn serve_downlink(&mut self, h: usize) {
        if self.hosts[h].down_busy {
            return;
        }
        let Some(&(_, index)) = self.hosts[h].down.front() else {
            return;
        };
        self.hosts[h].down_busy = true;
        let at = self.now + self.tx_ns(index);
        self.push(at, Ev::DownlinkDone(h));
    }

    fn check_pipe_done(&mut self, p: usize) -> Result<(), String> {
        let pipe = &self.pipes[p];
        let fed_out = pipe.feed.is_some_and(|(_, next, count)| next == count);
        if pipe.done || pipe.sent < pipe.share || !(pipe.routed || fed_out) {
            return Ok(());
        }
        self.pipes[p].done = true;
        self.child_done(p, Ok(()))
    }

    fn child_done(&mut self, p: usize, r: Result<(), String>) -> Result<(), String> {
        let (from, to, ci) = (self.pipes[p].from, self.pipes[p].to, self.pipes[p].ci);
        let now = self.t();
        if self.hosts[from].dead || self.hosts[from].paused_until.is_some() {
            // Its application hears of it when (if) it runs again.
            self.push(self.now, Ev::ChildDone(p, r));
            return Ok(());
        }
        if from == 0 {
            let rank = self.rank_of(to);
            let set = self.pipes[p].set;
            self.sender.handle_child_done(now, rank, set, r);
            self.drive_sender();
            Ok(())
        } else {
            if let Some(m) = self.nodes[from].as_mut() {
                m.handle_child_done(now, ci.expect("node pipes know their child"), r);
            }
            self.drive_node(from)
        }
    }

    fn fault(&mut self, f: OverlayFault) -> Result<(), String> {
        let h = usize::from(f.host());
        if f.is_lasting() && h != 0 && !self.lost(h) {
            self.unforwarded += self.owed_bytes(h);
        }
        match f {
            OverlayFault::Crash { host, .. } => self.crash(usize::from(host)),
            OverlayFault::Pause { host, duration, .. } => {
                let h = usize::from(host);
                let until = duration.map_or(u64::MAX, |d| self.now + d.as_nanos() as u64);
                self.hosts[h].paused_until = Some(until);
                if until != u64::MAX {
                    self.push(until, Ev::Resume(h));
                }
                Ok(())
            }
        }
    }

    /// Host `h` dies: every connection it had closes, or is reset where it
    /// had not been written to the end.
    fn crash(&mut self, h: usize) -> Result<(), String> {
        if self.hosts[h].dead {
            return Ok(());
        }
        self.hosts[h].dead = true;
        let lat = self.latency();
        if h == 0 {
            for k in 1..self.hosts.len() {
                if self.nodes[k].is_some() {
                    self.push(self.now + lat, Ev::NodeLostSender(k));
                }
            }
        } else if self.nodes[h].is_some() {
            self.push(self.now + lat, Ev::SenderLost(h));
        }
        for p in 0..self.pipes.len() {
            let pipe = &self.pipes[p];
            if pipe.broken || (pipe.from != h && pipe.to != h) {
                continue;
            }
            let written = pipe.done;
            let (at, from) = (self.now + pipe.delay_ns, pipe.from);
            self.break_pipe(p);
            if written {
                continue; // FIN after the last byte: nothing to report
            }
            if from == h {
                self.push(at, Ev::ParentLost(p));
            } else {
                self.pipes[p].done = true;
                let why = "connection reset by peer".to_owned();
                self.push(at, Ev::ChildDone(p, Err(why)));
            }
        }
        Ok(())
    }

    /// Nothing more is sent on pipe `p`: what it had queued is dropped (and
    /// the parent's hold on it released), except the segment on the wire.
    fn break_pipe(&mut self, p: usize) {
        let from = self.pipes[p].from;
        let on_wire = self.hosts[from].up_busy && self.hosts[from].rr.front() == Some(&p);
        let pipe = &mut self.pipes[p];
        pipe.broken = true;
        pipe.feed = None;
        let keep = usize::from(on_wire).min(pipe.queue.len());
        let dropped: Vec<u64> = pipe.queue.drain(keep..).collect();
        let routed = pipe.routed;
        if !on_wire && pipe.in_rr {
            pipe.in_rr = false;
            self.hosts[from].rr.retain(|&q| q != p);
        }
        if routed && !self.hosts[from].dead {
            for index in dropped {
                self.release(from, index);
            }
        }
    }

    /// Node `h` closes the connection of its parent edge `pi` (the sender
    /// detached its parent): nothing more of it reaches the node, which
    /// hears at once that the edge ended; the parent's kernel hears it a
    /// propagation delay later.
    fn drop_parent(&mut self, h: usize, pi: usize) -> Result<(), String> {
        let p = (0..self.pipes.len())
            .rev()
            .find(|&p| {
                let pipe = &self.pipes[p];
                pipe.to == h && pipe.pi == Some(pi) && !pipe.cut
            })
            .ok_or_else(|| format!("host {h} drops parent edge {pi}, which has no connection"))?;
        self.cut(p);
        let at = self.now + self.pipes[p].delay_ns;
        self.push(at, Ev::ChildClosed(p));
        let now = self.t();
        if let Some(m) = self.nodes[h].as_mut() {
            m.handle_parent_failed(now, pi, "was dropped (detached by the sender)");
        }
        Ok(())
    }

    /// Node `h`'s transfer is over: the runtime returns and its data
    /// connections close. One written to the end delivers everything (FIN
    /// after the data); any other is reset, and the peer hears it a
    /// propagation delay later.
    fn close_pipes(&mut self, h: usize) {
        for p in 0..self.pipes.len() {
            let pipe = &self.pipes[p];
            if pipe.broken || pipe.done {
                continue;
            }
            let (at, to, from, cut) = (self.now + pipe.delay_ns, pipe.to, pipe.from, pipe.cut);
            if to == h {
                if !cut {
                    self.cut(p);
                }
                self.push(at, Ev::ChildClosed(p));
            } else if from == h {
                self.break_pipe(p);
                self.push(at, Ev::ParentLost(p));
            }
        }
    }

    /// What host `h`'s children are still owed by it: their shares less
    /// what it has written of them.
    fn owed_bytes(&self, h: usize) -> u64 {
        let Some(a) = self.nodes[h].as_ref().and_then(NodeMachine::assignment) else {
            return 0;
        };
        let total = self.segs.count();
        let mut owed = 0;
        for (ci, c) in a.children.iter().enumerate() {
            let share = self.segs.set_bytes(c.segments);
            let count = c.segments.count(total);
            let sent = (self.hosts[h].child_pipes.get(ci).copied().flatten())
                .map_or(0, |p| self.pipes[p].sent);
            let written = if sent >= count {
                share
            } else {
                sent * u64::from(self.s.segment_size)
            };
            owed += share.saturating_sub(written);
        }
        owed
    }

    fn rank_of(&self, h: usize) -> Rank {
        self.rank_of_host[h]
    }

    fn hello(&mut self, p: usize) -> Result<(), String> {
        let to = self.pipes[p].to;
        let now = self.t();
        if self.pipes[p].broken || self.pipes[p].cut {
            return Ok(()); // one end closed it before the child took it
        }
        let Some(m) = self.nodes[to].as_mut() else {
            return Err(format!("host {to} got a connection before it joined"));
        };
        if matches!(
            m.phase(),
            NodePhase::Registered | NodePhase::Preparing | NodePhase::Ready
        ) {
            // Not started yet: the connection waits in the listen backlog.
            self.hosts[to].early.push(p);
            return Ok(());
        }
        let pi = match m.handle_parent_hello(now, &self.pipes[p].hello) {
            Ok(pi) => pi,
            Err(e) => {
                // The child closes the connection; its parent hears it.
                let from = self.pipes[p].from;
                self.refused.push((from, to, e));
                self.cut(p);
                let at = self.now + self.pipes[p].delay_ns;
                self.push(at, Ev::ChildClosed(p));
                return Ok(());
            }
        };
        let pipe = &mut self.pipes[p];
        pipe.pi = Some(pi);
        if !pipe.open {
            // Keyed: the key exchange is over, the parent may write.
            pipe.open = true;
            pipe.stalled_since = None;
        }
        for index in std::mem::take(&mut self.pipes[p].unread) {
            self.segment_in(to, p, index)?;
        }
        self.check_pipe_done(p)?;
        self.kick(p);
        self.drive_node(to)
    }

    /// Opens a data connection from host `from` to rank `child` for `set`.
    fn connect(
        &mut self,
        from: usize,
        child: Rank,
        set: SegmentSet,
        hello: Msg,
    ) -> Result<(), String> {
        let to = *self
            .host_of_rank
            .get(&child)
            .ok_or("a connection to an unknown rank")?;
        let ci = if from == 0 {
            None
        } else {
            let a = self.nodes[from].as_ref().and_then(|m| m.assignment());
            a.and_then(|a| (a.children.iter()).position(|c| c.rank == child && c.segments == set))
        };
        let pipelined = Forwarding::of(self.s.shape) == Forwarding::Pipelined;
        let jitter = 1.0 + self.s.jitter * self.rng.random::<f64>();
        let delay_ns = (self.latency() as f64 * jitter) as u64;
        let p = self.pipes.len();
        self.pipes.push(Pipe {
            from,
            to,
            ci,
            pi: None,
            hello,
            set,
            unread: Vec::new(),
            delay_ns,
            open: false,
            queue: VecDeque::new(),
            feed: None,
            share: set.count(self.segs.count()),
            routed: from != 0 && pipelined,
            sent: 0,
            outstanding: 0,
            in_rr: false,
            done: false,
            broken: false,
            cut: false,
            stalled_since: None,
        });
        self.pipe_of.insert((from, child, set), p);
        if let Some(ci) = ci {
            let cps = &mut self.hosts[from].child_pipes;
            if cps.len() <= ci {
                cps.resize(ci + 1, None);
            }
            cps[ci] = Some(p);
        }
        for h in [from, to] {
            self.hosts[h].connections += 1;
            self.max_conn = self.max_conn.max(self.hosts[h].connections);
        }
        if self.hosts[from].connections > self.s.max_connections
            || self.hosts[to].connections > self.s.max_connections
        {
            self.pipes[p].done = true;
            return self.child_done(p, Err("connection limit reached".into()));
        }
        if self.hosts[to].dead || self.hosts[to].finished.is_some() {
            // Nobody listens (dead, or its transfer is over): refused, the
            // parent hears it a round trip later.
            self.pipes[p].broken = true;
            self.pipes[p].done = true;
            let at = self.now + 2 * delay_ns;
            self.push(at, Ev::ChildDone(p, Err("connection refused".into())));
            return Ok(());
        }
        // SYN and hello; keyed, the two hellos of the key exchange before.
        let trips = if self.s.sealed { 4 } else { 2 };
        let at = self.now + trips * delay_ns;
        if self.s.sealed {
            // The key exchange needs the child's application: the parent
            // writes once it answered, and gives up after the inactivity
            // timeout.
            self.pipes[p].stalled_since = Some(self.now);
            let limit = self.now + self.s.inactivity.as_nanos() as u64;
            self.push(limit, Ev::WriteStall(p, self.now));
        } else {
            // Plain, the child's kernel takes the connection and its bytes
            // whatever its application does (it may not run, or not have
            // started yet): the parent writes at once.
            self.push(at, Ev::Established(p));
        }
        self.push(at, Ev::Hello(p));
        Ok(())
    }

    /// Feeds the edge `(from, child, segments)` its share from the
    /// `first`-th segment on.
    fn feed(
        &mut self,
        from: usize,
        child: Rank,
        segments: SegmentSet,
        first: u64,
    ) -> Result<(), String> {
        let p = *(self.pipe_of.get(&(from, child, segments)))
            .ok_or("feeding a child never connected")?;
        let count = segments.count(self.segs.count());
        if first > count {
            return Err(format!(
                "feeding {segments:?} ({count} segments) from segment {first}"
            ));
        }
        self.pipes[p].feed = Some((segments, first, count));
        self.pipes[p].share = count - first;
        self.check_pipe_done(p)?;
        self.kick(p);
        Ok(())
    }

    fn arm(&mut self, h: usize, t: Option<Instant>) {
        let t = t.map(Instant::as_nanos);
        if let Some(t) = t
            && self.armed[h] != Some(t)
        {
            self.armed[h] = Some(t);
            self.push(t.max(self.now), Ev::Timer(h));
            self.armed[h] = Some(t.max(self.now));
        }
    }

    fn drive_sender(&mut self) {
        let lat = self.latency();
        while let Some(op) = self.sender.poll_transmit() {
            if let ControlOp::Send { conn, msg } = op {
                self.push(self.now + lat, Ev::ToNode(conn as usize, msg));
            }
        }
        while let Some(ev) = self.sender.poll_event() {
            match ev {
                SenderEvent::Registered(rank, name, _) => {
                    let h = name.trim_start_matches("host-").parse().unwrap_or(0);
                    self.host_of_rank.insert(rank, h);
                    self.rank_of_host[h] = rank;
                }
                SenderEvent::Finished => self.sender_done = true,
                _ => {}
            }
        }
        while let Some(op) = self.sender.poll_data() {
            let r = match op {
                DataOp::Connect {
                    child,
                    segments,
                    hello,
                    ..
                } => self.connect(0, child, segments, hello),
                DataOp::Feed {
                    child,
                    segments,
                    first,
                } => self.feed(0, child, segments, first),
                DataOp::Verify { .. } | DataOp::Drop { .. } => Ok(()),
            };
            if let Err(e) = r {
                self.hosts[0].finished = Some(Err(e));
            }
        }
        let t = self.sender.poll_timeout();
        self.arm(0, t);
    }

    fn drive_node(&mut self, h: usize) -> Result<(), String> {
        let lat = self.latency();
        let now = self.t();
        loop {
            let Some(m) = self.nodes[h].as_mut() else {
                return Ok(());
            };
            let msgs: Vec<Msg> = std::iter::from_fn(|| m.poll_transmit()).collect();
            let events: Vec<NodeEvent> = std::iter::from_fn(|| m.poll_event()).collect();
            let ops: Vec<DataOp> = std::iter::from_fn(|| m.poll_data()).collect();
            if msgs.is_empty() && events.is_empty() && ops.is_empty() {
                let t = m.poll_timeout();
                self.arm(h, t);
                return Ok(());
            }
            for msg in msgs {
                self.push(self.now + lat, Ev::ToSender(h, msg));
            }
            for ev in events {
                match ev {
                    NodeEvent::Assigned(_) => {
                        if let Some(m) = self.nodes[h].as_mut() {
                            m.accept(now);
                        }
                    }
                    NodeEvent::Started => {
                        for p in std::mem::take(&mut self.hosts[h].early) {
                            self.push(self.now, Ev::Hello(p));
                        }
                    }
                    NodeEvent::Finished(r) => {
                        self.hosts[h].finished = Some(r.map_err(|e| format!("{e:?}")));
                        self.close_pipes(h);
                    }
                }
            }
            for op in ops {
                match op {
                    DataOp::Connect {
                        child,
                        segments,
                        hello,
                        ..
                    } => self.connect(h, child, segments, hello)?,
                    DataOp::Feed {
                        child,
                        segments,
                        first,
                    } => self.feed(h, child, segments, first)?,
                    DataOp::Drop { parent } => self.drop_parent(h, parent)?,
                    DataOp::Verify { hash, .. } => {
                        let ok = hash == self.hash;
                        let r = if ok {
                            Ok(())
                        } else {
                            Err((rmcast_proto::Status::HashMismatch, "hash mismatch".into()))
                        };
                        if let Some(m) = self.nodes[h].as_mut() {
                            m.handle_verified(now, r);
                        }
                    }
                }
            }
        }
    }

    fn check(&mut self) -> Result<OverlayReport, String> {
        let lost: Vec<usize> = (0..self.hosts.len()).filter(|&h| self.lost(h)).collect();
        let total = self.segs.count();
        // Whatever went wrong: no copy is claimed good unless it is whole.
        for h in 1..self.hosts.len() {
            let host = &mut self.hosts[h];
            host.received.sort_unstable();
            if host.received.windows(2).any(|w| w[0] == w[1]) {
                return Err(format!("host {h} got a segment twice"));
            }
        }
        // Sorted without repeats: `total` of them ending at `total - 1` is
        // every segment exactly once.
        let whole = |sim: &Self, h: usize| {
            let got = &sim.hosts[h].received;
            let stored = sim.nodes[h].as_ref().map_or(0, NodeMachine::stored_bytes);
            got.len() as u64 == total
                && got.last().is_none_or(|&k| k + 1 == total)
                && stored == sim.s.size
        };
        for h in 1..self.hosts.len() {
            if matches!(self.hosts[h].finished, Some(Ok(()))) && !whole(self, h) {
                return Err(format!("host {h} finished without error but is not whole"));
            }
        }
        // A child refuses a connection only from a parent it gave up on,
        // and the sender connects only where it is expected: without a
        // lasting fault, none; never the sender's.
        let lasting = self.s.faults.iter().any(OverlayFault::is_lasting);
        if let Some((from, to, why)) =
            (self.refused.iter()).find(|(from, ..)| !lasting || *from == 0)
        {
            return Err(format!(
                "host {to} refused a connection from host {from}: {why}"
            ));
        }
        if lost.contains(&0) {
            // The sender died: every other host must still end by itself.
            return Ok(self.report(None));
        }
        let r = self.sender.report();
        for (i, m) in r.members.iter().enumerate() {
            let h = self.host_of_rank.get(&(i as Rank + 1)).copied();
            if m.verified && !h.is_some_and(|h| whole(self, h)) {
                return Err(format!("rank {} reported verified but is not whole", i + 1));
            }
        }
        if let Some(Err(e)) = &self.hosts[0].finished {
            return Err(format!("the sender's data plane failed: {e}"));
        }
        let n = usize::from(self.s.nodes);
        if !lost.is_empty() {
            // Receivers lost for good. Struck once data flowed, the session
            // heals: it goes on without them, and everyone else verifies.
            let started = r.started_at.map(Instant::as_nanos);
            let healing = (self.s.faults.iter())
                .filter(|f| f.is_lasting())
                .all(|f| started.is_some_and(|t| f.at().as_nanos() as u64 >= t));
            let e = r.error.as_deref().unwrap_or_default();
            if !healing {
                // Before data flowed, the session fails, naming one of them
                // (unless it got through after all).
                let all_verified = r.members.len() == n && r.members.iter().all(|m| m.verified);
                let names_one = lost.iter().any(|h| e.contains(&format!("\"host-{h}\"")));
                if !all_verified && !names_one {
                    return Err(format!(
                        "the session failed, blaming none of the hosts {lost:?} that failed: {e:?}"
                    ));
                }
                return Ok(self.report(Some(&r)));
            }
            if r.members.len() != n {
                return Err(format!("{} of {n} receivers registered", r.members.len()));
            }
            for h in (1..self.hosts.len()).filter(|h| !lost.contains(h)) {
                let rank = self.rank_of(h);
                let m = &r.members[usize::from(rank) - 1];
                if !m.verified {
                    return Err(format!(
                        "host {h} (rank {rank}), which did not fail, is not verified: {:?} \
                         (the session: {e:?})",
                        m.reason
                    ));
                }
                match &self.hosts[h].finished {
                    Some(Ok(())) => {}
                    other => return Err(format!("host {h} ended with {other:?}")),
                }
                if !whole(self, h) {
                    return Err(format!("host {h} did not get every segment exactly once"));
                }
            }
            let verified = r.members.iter().filter(|m| m.verified).count();
            if verified == n {
                // The lost ones had finished before they were lost.
                return match &r.error {
                    None => Ok(self.report(Some(&r))),
                    Some(e) => Err(format!("every receiver verified, yet: {e}")),
                };
            }
            // The first host it names is the first that failed: a lost one.
            let first = e
                .split("\"host-")
                .nth(1)
                .and_then(|t| t.split('"').next())
                .and_then(|t| t.parse::<usize>().ok());
            if !first.is_some_and(|h| lost.contains(&h)) {
                return Err(format!(
                    "the session names host {first:?} first, not one of the hosts {lost:?} \
                     that failed: {e:?}"
                ));
            }
            let count = format!("({verified} of {n} receivers verified");
            if !e.contains(&count) {
                return Err(format!("the session's error does not say {count:?}: {e:?}"));
            }
            return Ok(self.report(Some(&r)));
        }
        if let Some(e) = &r.error {
            return Err(format!("the sender failed: {e}"));
        }
        if r.members.len() != n || r.members.iter().any(|m| !m.verified) {
            return Err("not every member verified".into());
        }
        for h in 1..self.hosts.len() {
            match &self.hosts[h].finished {
                Some(Ok(())) => {}
                other => return Err(format!("host {h} ended with {other:?}")),
            }
            if !whole(self, h) {
                return Err(format!("host {h} did not get every segment exactly once"));
            }
        }
        if r.started_at.is_none() || r.last_confirmation.is_none() {
            return Err("never started, or never confirmed".into());
        }
        Ok(self.report(Some(&r)))
    }

    fn report(&self, r: Option<&rmcast_proto::overlay::SessionReport>) -> OverlayReport {
        let data_time = r
            .and_then(|r| Some(r.last_confirmation?.saturating_since(r.started_at?)))
            .unwrap_or_default();
        let bits = u128::from(self.s.size) * 8;
        OverlayReport {
            data_time,
            total_time: Duration::from_nanos(self.now),
            object_time: Duration::from_nanos(
                (bits * 1_000_000_000 / u128::from(self.s.rate_bits_per_s.max(1))) as u64,
            ),
            segments_moved: self.moved,
            max_connections_used: self.max_conn,
            events: self.events,
            failed: r.is_none_or(|r| r.error.is_some()),
            started: r
                .and_then(|r| r.started_at)
                .map(|t| Duration::from_nanos(t.as_nanos())),
            verified: r.map_or(0, |r| r.members.iter().filter(|m| m.verified).count()),
            host_of_rank: self.rank_hosts(),
            reattached: self.sender.stats().reattached,
            unforwarded_bytes: self.unforwarded,
        }
    }

    /// Host of each rank, the sender's at index 0.
    fn rank_hosts(&self) -> Vec<u16> {
        let mut v = vec![0u16; usize::from(self.s.nodes) + 1];
        for (&rank, &h) in &self.host_of_rank {
            if let Some(slot) = v.get_mut(usize::from(rank)) {
                *slot = h as u16;
            }
        }
        v
    }
}
