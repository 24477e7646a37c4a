//! The simulator's state, its event queue and loop, and the driving of
//! the sender's and the nodes' machines.

use super::{OverlayFault, OverlayScenario};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rmcast_proto::Instant;
use rmcast_proto::overlay::{
    ControlOp, DataOp, NodeConfig, NodeEvent, NodeMachine, Rank, SegmentSet, Segments,
    SenderConfig, SenderEvent, SenderMachine,
};
use rmcast_proto::security::FRAME_OVERHEAD;
use rmcast_wire::overlay::Msg;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

pub(super) enum Ev {
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
pub(super) struct Pipe {
    pub(super) from: usize,
    pub(super) to: usize,
    /// The child's index among its parent's children (nodes only).
    pub(super) ci: Option<usize>,
    /// The parent's index at the child, once introduced.
    pub(super) pi: Option<usize>,
    pub(super) hello: Msg,
    /// The edge's segments.
    pub(super) set: SegmentSet,
    /// Segments the child's kernel read before its application took the
    /// connection: they reach the machine once it does.
    pub(super) unread: Vec<u64>,
    pub(super) delay_ns: u64,
    pub(super) open: bool,
    /// Routed segments waiting for the uplink.
    pub(super) queue: VecDeque<u64>,
    /// A whole share to feed: set, next position, count.
    pub(super) feed: Option<(SegmentSet, u64, u64)>,
    pub(super) share: u64,
    pub(super) routed: bool,
    pub(super) sent: u64,
    pub(super) outstanding: u64,
    pub(super) in_rr: bool,
    pub(super) done: bool,
    /// The parent end is gone: nothing more is sent.
    pub(super) broken: bool,
    /// The child heard that the parent end is gone, or closed its end
    /// itself: nothing more arrives.
    pub(super) cut: bool,
    /// Since when the writer has had something to write and the window
    /// has been shut.
    pub(super) stalled_since: Option<u64>,
    /// The other direction of the same TCP connection, once its child end
    /// wrote an edge back on it (`DataOp::WriteBack`).
    pub(super) reverse: Option<usize>,
}

impl Pipe {
    /// A connection `from → to` for edge `set` (`share` segments to send),
    /// not open yet, nothing sent, not routed.
    pub(super) fn new(
        (from, to): (usize, usize),
        ci: Option<usize>,
        hello: Msg,
        set: SegmentSet,
        delay_ns: u64,
        share: u64,
    ) -> Self {
        Self {
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
            share,
            routed: false,
            sent: 0,
            outstanding: 0,
            in_rr: false,
            done: false,
            broken: false,
            cut: false,
            stalled_since: None,
            reverse: None,
        }
    }
}

#[derive(Default)]
pub(super) struct Host {
    pub(super) up_busy: bool,
    pub(super) rr: VecDeque<usize>,
    pub(super) down_busy: bool,
    pub(super) down: VecDeque<(usize, u64)>,
    pub(super) connections: usize,
    /// Segments held for forwarding: index → (incoming pipe, children left).
    pub(super) holds: HashMap<u64, (usize, usize)>,
    /// Per child index, its pipe.
    pub(super) child_pipes: Vec<Option<usize>>,
    /// Segments routed to a child edge to be written back on a connection
    /// not opened yet: child index → indices.
    pub(super) parked: HashMap<usize, Vec<u64>>,
    /// Data connections waiting for this node's Start.
    pub(super) early: Vec<usize>,
    pub(super) received: Vec<u64>,
    pub(super) finished: Option<Result<(), String>>,
    /// Crashed: does nothing more.
    pub(super) dead: bool,
    /// Paused until then (`u64::MAX`: for good).
    pub(super) paused_until: Option<u64>,
}

pub(super) struct Sim<'a> {
    pub(super) s: &'a OverlayScenario,
    pub(super) segs: Segments,
    pub(super) rng: ChaCha8Rng,
    pub(super) now: u64,
    seq: u64,
    heap: BinaryHeap<Queued>,
    pub(super) sender: SenderMachine,
    pub(super) nodes: Vec<Option<NodeMachine>>,
    pub(super) hosts: Vec<Host>,
    pub(super) pipes: Vec<Pipe>,
    armed: Vec<Option<u64>>,
    pub(super) host_of_rank: HashMap<Rank, usize>,
    pub(super) rank_of_host: Vec<Rank>,
    /// (parent host, child rank, the edge's set) → pipe.
    pub(super) pipe_of: HashMap<(usize, Rank, SegmentSet), usize>,
    sender_done: bool,
    /// Data connections a child refused: (parent host, child host, why).
    pub(super) refused: Vec<(usize, usize, String)>,
    /// See [`OverlayReport::unforwarded_bytes`](super::OverlayReport::unforwarded_bytes).
    pub(super) unforwarded: u64,
    hash: [u8; 32],
    pub(super) moved: u64,
    pub(super) events: u64,
    pub(super) max_conn: usize,
}

fn addr(h: usize) -> SocketAddr {
    SocketAddr::from(([10, (h >> 16) as u8, (h >> 8) as u8, h as u8], 5000))
}

impl<'a> Sim<'a> {
    pub(super) fn new(s: &'a OverlayScenario) -> Self {
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

    pub(super) fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Queued {
            at,
            seq: self.seq,
            ev,
        });
    }

    pub(super) fn t(&self) -> Instant {
        Instant::from_nanos(self.now)
    }

    pub(super) fn latency(&self) -> u64 {
        self.s.latency.as_nanos() as u64
    }

    pub(super) fn tx_ns(&self, index: u64) -> u64 {
        let overhead = if self.s.sealed { FRAME_OVERHEAD } else { 0 };
        let bits = (self.segs.len(index) + overhead) as u128 * 8;
        (bits * 1_000_000_000 / u128::from(self.s.rate_bits_per_s.max(1))) as u64
    }

    /// Gone for good: crashed, or paused without end.
    pub(super) fn lost(&self, h: usize) -> bool {
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

    pub(super) fn run(&mut self) -> Result<(), String> {
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
                    let from = self.pipes[p].from;
                    self.close_reverse(from, p)?;
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

    pub(super) fn drive_sender(&mut self) {
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
                DataOp::Verify { .. }
                | DataOp::Drop { .. }
                | DataOp::WriteBack { .. }
                | DataOp::Abandon { .. } => Ok(()),
            };
            if let Err(e) = r {
                self.hosts[0].finished = Some(Err(e));
            }
        }
        let t = self.sender.poll_timeout();
        self.arm(0, t);
    }

    pub(super) fn drive_node(&mut self, h: usize) -> Result<(), String> {
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
                    DataOp::WriteBack {
                        parent,
                        child,
                        hello,
                    } => self.write_back(h, parent, child, hello)?,
                    DataOp::Abandon { child } => self.abandon(h, child),
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
}
