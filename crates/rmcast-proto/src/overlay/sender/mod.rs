//! The overlay sender's session, sans-IO: registration, assignment, start,
//! the hash, liveness, blame and the report.
//!
//! The driver numbers control connections (`conn`, any `u64` it likes) and
//! tells the machine when one opens, what it said and when it ended. The
//! machine answers with control frames per connection ([`ControlOp`]) and,
//! once everyone is ready, with the sender's own data edges ([`DataOp`]):
//! every child of a pipelined shape is fed at once, the children of a
//! store-and-forward shape one after the other.
//!
//! Once data flows, a receiver that fails is cut out and its children are
//! re-attached to the sender (see "Self-healing" in [`super`]).

use super::topology::{Forwarding, SENDER, SegmentSet, Topology};
use super::{DataOp, Rank};
use crate::{Instant, MemberOutcome, Status};
use rmcast_wire::overlay::{Assignment, MAX_NAME, Msg, OverlayShape, Peer};
use rmcast_wire::truncate_utf8;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

mod heal;

/// Longest the sender waits for the last words of receivers after a failure.
const FAREWELL_MAX: Duration = Duration::from_secs(2);
/// Longest a receiver's report of a failed neighbour waits for the
/// neighbour's own death to be noticed (which then names the culprit).
const BLAME_GRACE: Duration = Duration::from_secs(1);
/// Connections that have not registered yet, at most.
const PENDING_MAX: usize = 256;
/// Connections that failed authentication the report names, at most (a
/// hostile network cannot grow the list).
pub const AUTH_FAILURES_MAX: usize = 8;

/// What the session is about.
#[derive(Clone, Debug)]
pub struct SenderConfig {
    /// The overlay to build.
    pub shape: OverlayShape,
    /// Receivers to wait for (at least 1).
    pub receivers: u16,
    /// Bytes per segment (at least 1).
    pub segment_size: u32,
    /// How long to wait for `receivers` to register.
    pub join_wait: Duration,
    /// A receiver silent this long fails the session (also sent to them).
    pub inactivity: Duration,
    /// Data flowing and no receiver storing a new byte (or completing) for
    /// this long ends the session as stalled, naming the slowest receivers:
    /// a forwarder wedged while its heartbeats go on ends instead of
    /// hanging. `None`: never (the receivers' silence still counts).
    pub stall_timeout: Option<Duration>,
    /// The session id (random, chosen by the driver).
    pub session: u64,
    /// The object's name and size.
    pub name: String,
    /// Object size in bytes.
    pub size: u64,
    /// The sender's control address (named in assignments as rank 0).
    pub control_addr: SocketAddr,
}

/// A control connection's fate, as the machine decides it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlOp {
    /// Write `msg` on connection `conn`.
    Send {
        /// The driver's connection number.
        conn: u64,
        /// The frame.
        msg: Msg,
    },
    /// Close connection `conn` (after what was queued for it before).
    Close {
        /// The driver's connection number.
        conn: u64,
    },
}

/// Something the driver may want to log or show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SenderEvent {
    /// A receiver registered (rank, name, data address).
    Registered(Rank, String, SocketAddr),
    /// Everyone registered; assignments went out.
    Assigned,
    /// Everyone is ready; data flows.
    Started,
    /// A receiver failed (the text names it). Once data flows it is cut
    /// out and the session goes on without it.
    MemberFailed(String),
    /// The sender took over an orphaned edge: it feeds `segments` to
    /// `rank` from the `have`-th on, in place of `from`.
    Reattached {
        /// The child.
        rank: Rank,
        /// The edge's segments.
        segments: SegmentSet,
        /// Who fed it before.
        from: Rank,
        /// Segments of the edge the child had.
        have: u64,
    },
    /// The session is over: see [`SenderMachine::report`].
    Finished,
}

/// Where the session stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SenderPhase {
    /// Waiting for receivers to register.
    Joining,
    /// Assignments sent, waiting for every Ready.
    Preparing,
    /// Data flows.
    Sending,
    /// Failed: collecting last words before finishing.
    Closing,
    /// Over.
    Done,
}

/// Control-plane counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// Control frames taken from registered receivers.
    pub control_received: u64,
    /// Control frames queued.
    pub control_sent: u64,
    /// Frames that made no sense where they came.
    pub malformed: u64,
    /// Connections dropped because they failed authentication (keyed
    /// overlays: another group key, none, or forged).
    pub auth_failed: u64,
    /// Orphaned edges the sender took over (self-healing).
    pub reattached: u64,
}

/// The session's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionReport {
    /// Every registered receiver, by rank.
    pub members: Vec<MemberOutcome>,
    /// The first failure, naming the node when one is to blame.
    pub error: Option<String>,
    /// When the assignments went out.
    pub assigned_at: Option<Instant>,
    /// When Start went out.
    pub started_at: Option<Instant>,
    /// When the last receiver confirmed.
    pub last_confirmation: Option<Instant>,
    /// Whether [`SenderMachine::cancel`] ended it.
    pub cancelled: bool,
    /// Connections that failed authentication, one line each ("connection
    /// from ADDR failed authentication — wrong group key?"), at most
    /// [`AUTH_FAILURES_MAX`]; [`SenderStats::auth_failed`] counts them all.
    pub auth_failures: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Joined,
    Ready,
    Complete,
    /// Reported a failure (deferred while the blame settles).
    Reported,
    Failed,
}

#[derive(Debug)]
struct Member {
    conn: u64,
    name: String,
    data_addr: SocketAddr,
    last_heard: Instant,
    bytes: u64,
    /// Last time `bytes` grew (from Start on).
    moved: Instant,
    /// Its own stall clock: `moved`, or later when it had to wait for a
    /// new parent (the sender re-attaching it).
    stall_from: Instant,
    state: State,
    reason: Option<String>,
}

impl Member {
    fn open(&self) -> bool {
        matches!(self.state, State::Joined | State::Ready)
    }
    fn describe(&self, rank: Rank) -> String {
        format!("receiver rank {rank} {:?} at {}", self.name, self.data_addr)
    }
}

/// The overlay sender: one session with `receivers` receivers.
#[derive(Debug)]
pub struct SenderMachine {
    cfg: SenderConfig,
    phase: SenderPhase,
    began: Instant,
    members: Vec<Member>,
    /// Connections that have not registered: when they came, their peer address.
    pending: HashMap<u64, (Instant, SocketAddr)>,
    error: Option<String>,
    /// Failures receivers reported, applied at the deadline unless a death explains them.
    deferred: Vec<(usize, String, Instant)>,
    hash: Option<[u8; 32]>,
    /// The object's signature (`rmcast send --sign`), sent with the hash.
    signature: Option<[u8; 64]>,
    hash_sent: bool,
    heartbeat: Duration,
    last_beat: Instant,
    farewell_until: Option<Instant>,
    /// Store-and-forward: children still to feed, in order.
    feed_queue: VecDeque<(Rank, SegmentSet)>,
    /// Store-and-forward: the child being fed now.
    feeding: Option<(Rank, SegmentSet)>,
    /// The overlay, once assigned.
    topo: Option<Topology>,
    /// Edges the sender feeds in place of a failed parent, until done.
    reattached: HashSet<(Rank, SegmentSet)>,
    /// The first receiver that failed once data flowed (the session went
    /// on without it), and how many did.
    cut_out: Option<String>,
    cut_count: usize,
    assigned_at: Option<Instant>,
    started_at: Option<Instant>,
    last_confirmation: Option<Instant>,
    /// Last time a receiver stored a new byte or completed (data phase).
    last_progress: Instant,
    /// When the machine last moved the session on (`step`).
    stepped: Instant,
    cancelled: bool,
    auth_failures: Vec<String>,
    stats: SenderStats,
    transmits: VecDeque<ControlOp>,
    data: VecDeque<DataOp>,
    events: VecDeque<SenderEvent>,
}

impl SenderMachine {
    /// A session that starts waiting for receivers at `now`.
    #[must_use]
    pub fn new(now: Instant, cfg: SenderConfig) -> Self {
        assert!(cfg.receivers > 0 && cfg.segment_size > 0);
        let heartbeat =
            (cfg.inactivity / 5).clamp(Duration::from_millis(50), Duration::from_secs(1));
        Self {
            cfg,
            phase: SenderPhase::Joining,
            began: now,
            members: Vec::new(),
            pending: HashMap::new(),
            error: None,
            deferred: Vec::new(),
            hash: None,
            signature: None,
            hash_sent: false,
            heartbeat,
            last_beat: now,
            farewell_until: None,
            feed_queue: VecDeque::new(),
            feeding: None,
            topo: None,
            reattached: HashSet::new(),
            cut_out: None,
            cut_count: 0,
            assigned_at: None,
            started_at: None,
            last_confirmation: None,
            last_progress: now,
            stepped: now,
            cancelled: false,
            auth_failures: Vec::new(),
            stats: SenderStats::default(),
            transmits: VecDeque::new(),
            data: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// A control connection from `peer` opened.
    pub fn handle_connected(&mut self, now: Instant, conn: u64, peer: SocketAddr) {
        if self.phase != SenderPhase::Joining || self.pending.len() >= PENDING_MAX {
            self.transmits.push_back(ControlOp::Send {
                conn,
                msg: Msg::Abort {
                    text: "this session is not accepting receivers".into(),
                },
            });
            self.transmits.push_back(ControlOp::Close { conn });
            return;
        }
        self.pending.insert(conn, (now, peer));
    }

    /// A connection from `peer` failed authentication before it became a
    /// control connection (the driver dropped it; the machine never saw it):
    /// counted, and named in the report. `why` completes "connection from
    /// `peer` …", e.g. "failed authentication — wrong group key?".
    pub fn handle_auth_failed(&mut self, now: Instant, peer: SocketAddr, why: &str) {
        self.stats.auth_failed += 1;
        if self.auth_failures.len() < AUTH_FAILURES_MAX {
            self.auth_failures
                .push(format!("connection from {peer} {why}"));
        }
        self.step(now);
    }

    /// A control frame arrived on `conn`.
    pub fn handle_msg(&mut self, now: Instant, conn: u64, msg: Msg) {
        if let Some((_, peer)) = self.pending.remove(&conn) {
            match msg {
                Msg::Register {
                    name,
                    mut data_addr,
                } if self.phase == SenderPhase::Joining
                    && self.members.len() < usize::from(self.cfg.receivers) =>
                {
                    if data_addr.ip().is_unspecified() {
                        data_addr.set_ip(peer.ip());
                    }
                    self.stats.control_received += 1;
                    let name = truncate_utf8(&name, MAX_NAME).to_owned();
                    let rank = self.members.len() as Rank + 1;
                    self.events
                        .push_back(SenderEvent::Registered(rank, name.clone(), data_addr));
                    self.members.push(Member {
                        conn,
                        name,
                        data_addr,
                        last_heard: now,
                        bytes: 0,
                        moved: now,
                        stall_from: now,
                        state: State::Joined,
                        reason: None,
                    });
                }
                _ => {
                    self.stats.malformed += 1;
                    self.transmits.push_back(ControlOp::Close { conn });
                }
            }
            self.step(now);
            return;
        }
        let Some(i) = self.index_of(conn) else { return };
        self.stats.control_received += 1;
        self.members[i].last_heard = now;
        match msg {
            Msg::Ready { status, text } if self.phase == SenderPhase::Preparing => {
                if status == Status::Ok {
                    if self.members[i].state == State::Joined {
                        self.members[i].state = State::Ready;
                    }
                } else {
                    self.fail(now, i, format!("refused the object: {text}"));
                }
            }
            Msg::Progress { bytes } => {
                if bytes > self.members[i].bytes {
                    self.last_progress = now;
                    self.members[i].moved = now;
                    self.members[i].stall_from = now;
                }
                self.members[i].bytes = bytes;
            }
            Msg::Orphaned {
                from,
                segments,
                have,
            } if self.phase == SenderPhase::Sending && self.members[i].open() => {
                self.reattach(now, i, from, segments, have);
            }
            Msg::Orphaned { .. } => {}
            Msg::Complete { status, text } => {
                if status == Status::Ok {
                    if self.members[i].open() {
                        self.members[i].state = State::Complete;
                        self.last_confirmation = Some(now);
                        self.last_progress = now;
                    }
                } else if self.members[i].open() {
                    // It may be reporting a neighbour that died: give the
                    // neighbour's own control connection a moment to say
                    // so, so that the error names the node that died.
                    let grace = (self.cfg.inactivity / 4).min(BLAME_GRACE);
                    self.members[i].state = State::Reported;
                    self.deferred
                        .push((i, format!("failed: {text}"), now + grace));
                }
            }
            _ => self.stats.malformed += 1,
        }
        self.step(now);
    }

    /// Connection `conn` ended: closed by the peer, failed, sent garbage
    /// (`malformed`), or a write to it failed. `why` says which.
    pub fn handle_closed(&mut self, now: Instant, conn: u64, why: &str, malformed: bool) {
        if self.pending.remove(&conn).is_some() {
            if malformed {
                self.stats.malformed += 1;
            }
            return;
        }
        let Some(i) = self.index_of(conn) else { return };
        if self.members[i].state == State::Reported {
            return; // it said why already
        }
        if self.phase == SenderPhase::Joining {
            self.members.remove(i);
        } else {
            self.fail(now, i, format!("died: {why} before it completed"));
        }
        self.step(now);
    }

    /// A write on `conn` failed: the receiver cannot be reached.
    pub fn handle_send_failed(&mut self, now: Instant, conn: u64, why: &str) {
        if let Some(i) = self.index_of(conn) {
            self.fail(
                now,
                i,
                format!("cannot be reached on its control connection: {why}"),
            );
            self.step(now);
        }
    }

    /// The object's hash is known.
    pub fn handle_hash(&mut self, now: Instant, hash: [u8; 32]) {
        self.hash = Some(hash);
        self.step(now);
    }

    /// The object's hash is known, with the sender's signature of it
    /// (over [`rmcast_wire::signed_object_message`]): both go to every node.
    pub fn handle_signed_hash(&mut self, now: Instant, hash: [u8; 32], signature: [u8; 64]) {
        self.signature = Some(signature);
        self.handle_hash(now, hash);
    }

    /// The data edge to `child` carrying `segments` was written to the
    /// end (`Ok`) or failed.
    pub fn handle_child_done(
        &mut self,
        now: Instant,
        child: Rank,
        segments: SegmentSet,
        result: Result<(), String>,
    ) {
        let edge = (child, segments);
        if !self.reattached.remove(&edge) {
            if self.feeding == Some(edge) {
                self.feeding = None;
                self.feed_next();
            } else {
                // A queued child whose connection failed before its turn.
                self.feed_queue.retain(|e| *e != edge);
            }
        }
        if let Err(why) = result {
            let i = usize::from(child).wrapping_sub(1);
            if i < self.members.len() {
                self.fail(now, i, format!("stopped taking data: {why}"));
            }
        }
        self.step(now);
    }

    /// Deadlines passed: heartbeats, silence, join wait, blame.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.step(now);
    }

    /// The application stops the session: everyone is told to abort.
    pub fn cancel(&mut self, now: Instant) {
        if self.phase == SenderPhase::Done {
            return;
        }
        self.cancelled = true;
        self.error = Some("the sender was interrupted".into());
        self.step(now);
    }

    /// The next control frame to write or connection to close.
    pub fn poll_transmit(&mut self) -> Option<ControlOp> {
        self.transmits.pop_front()
    }

    /// The next data connection to open or child to feed.
    pub fn poll_data(&mut self) -> Option<DataOp> {
        self.data.pop_front()
    }

    /// The next thing worth logging.
    pub fn poll_event(&mut self) -> Option<SenderEvent> {
        self.events.pop_front()
    }

    /// When to call [`handle_timeout`](Self::handle_timeout) next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.phase == SenderPhase::Done {
            return None;
        }
        let mut at = match self.phase {
            SenderPhase::Closing => self.farewell_until.unwrap_or(self.last_beat),
            _ => self.last_beat + self.heartbeat,
        };
        let mut earlier = |t: Instant| at = at.min(t);
        if self.phase == SenderPhase::Joining {
            earlier(self.began + self.cfg.join_wait);
        }
        for m in self.members.iter().filter(|m| m.open()) {
            earlier(m.last_heard + self.cfg.inactivity);
        }
        for (since, _) in self.pending.values() {
            earlier(*since + self.cfg.inactivity);
        }
        for (_, _, t) in &self.deferred {
            earlier(*t);
        }
        if let Some(t) = self.farewell_until {
            earlier(t);
        }
        if let Some(t) = self.stall_deadline() {
            earlier(t);
        }
        if let Some(limit) = self.node_stall_limit() {
            // A node past its limit but not to blame waits for news (a
            // progress report), not for the clock.
            let due = (self.members.iter().filter(|m| m.open()))
                .map(|m| m.stall_from + limit)
                .filter(|&t| t > self.stepped);
            for t in due {
                earlier(t);
            }
        }
        Some(at)
    }

    /// Where the session stands.
    #[must_use]
    pub fn phase(&self) -> SenderPhase {
        self.phase
    }

    /// Bytes every receiver reported stored (the slowest one's count).
    #[must_use]
    pub fn min_progress(&self) -> u64 {
        self.members.iter().map(|m| m.bytes).min().unwrap_or(0)
    }

    /// Receivers registered so far.
    #[must_use]
    pub fn registered(&self) -> usize {
        self.members.len()
    }

    /// Control-plane counters.
    #[must_use]
    pub fn stats(&self) -> SenderStats {
        self.stats
    }

    /// The result so far (final once [`SenderEvent::Finished`] came).
    #[must_use]
    pub fn report(&self) -> SessionReport {
        SessionReport {
            members: self
                .members
                .iter()
                .enumerate()
                .map(|(i, m)| MemberOutcome {
                    rank: i as Rank + 1,
                    name: m.name.clone(),
                    addr: m.data_addr,
                    verified: m.state == State::Complete,
                    reason: m.reason.clone(),
                    caught_up_from: None,
                })
                .collect(),
            error: self.error.clone(),
            assigned_at: self.assigned_at,
            started_at: self.started_at,
            last_confirmation: self.last_confirmation,
            cancelled: self.cancelled,
            auth_failures: self.auth_failures.clone(),
        }
    }

    fn index_of(&self, conn: u64) -> Option<usize> {
        self.members.iter().position(|m| m.conn == conn)
    }

    fn send(&mut self, i: usize, msg: Msg) {
        self.stats.control_sent += 1;
        self.transmits.push_back(ControlOp::Send {
            conn: self.members[i].conn,
            msg,
        });
    }

    fn send_open(&mut self, msg: &Msg) {
        for i in 0..self.members.len() {
            if self.members[i].open() {
                self.send(i, msg.clone());
            }
        }
    }

    /// Moves the session on: phase changes, the hash, blame, liveness.
    fn step(&mut self, now: Instant) {
        if self.phase == SenderPhase::Done {
            return;
        }
        self.stepped = now;
        let wanted = usize::from(self.cfg.receivers);
        match self.phase {
            SenderPhase::Joining if self.members.len() == wanted => self.assign(now),
            SenderPhase::Joining if now.saturating_since(self.began) >= self.cfg.join_wait => {
                let mut msg = format!(
                    "only {} of {wanted} receivers registered within {:.1} s",
                    self.members.len(),
                    self.cfg.join_wait.as_secs_f64()
                );
                if !self.members.is_empty() {
                    let names: Vec<String> = self
                        .members
                        .iter()
                        .map(|m| format!("{:?}", m.name))
                        .collect();
                    msg.push_str(&format!(" ({})", names.join(", ")));
                }
                // Whoever failed authentication is the likely missing one.
                for f in &self.auth_failures {
                    msg.push_str("; ");
                    msg.push_str(f);
                }
                self.error.get_or_insert(msg);
            }
            SenderPhase::Preparing if self.members.iter().all(|m| m.state == State::Ready) => {
                self.start(now);
            }
            SenderPhase::Sending
                if (self.members.iter())
                    .all(|m| matches!(m.state, State::Complete | State::Failed)) =>
            {
                self.finish();
                return;
            }
            _ => {}
        }
        if !matches!(self.phase, SenderPhase::Joining | SenderPhase::Closing)
            && !self.hash_sent
            && let Some(hash) = self.hash
        {
            self.send_open(&Msg::Hash {
                hash,
                signature: self.signature,
            });
            self.hash_sent = true;
        }
        let due: Vec<(usize, String)> = self
            .deferred
            .iter()
            .filter(|(_, _, at)| now >= *at)
            .map(|(i, text, _)| (*i, text.clone()))
            .collect();
        self.deferred.retain(|(_, _, at)| now < *at);
        for (i, text) in due {
            self.fail(now, i, text);
        }
        for i in 0..self.members.len() {
            let silent = now.saturating_since(self.members[i].last_heard);
            if self.members[i].open() && silent >= self.cfg.inactivity {
                if self.phase == SenderPhase::Joining {
                    self.members[i].state = State::Failed;
                } else {
                    self.fail(
                        now,
                        i,
                        format!("went silent for {:.1} s", silent.as_secs_f64()),
                    );
                }
            }
        }
        if self.phase == SenderPhase::Joining {
            let gone: Vec<u64> = (self.members.iter())
                .filter(|m| m.state == State::Failed)
                .map(|m| m.conn)
                .collect();
            self.members.retain(|m| m.state != State::Failed);
            for conn in gone {
                self.transmits.push_back(ControlOp::Close { conn });
            }
        }
        let inactivity = self.cfg.inactivity;
        let stale: Vec<u64> = (self.pending.iter())
            .filter(|(_, (since, _))| now.saturating_since(*since) >= inactivity)
            .map(|(c, _)| *c)
            .collect();
        for conn in stale {
            self.pending.remove(&conn);
            self.transmits.push_back(ControlOp::Close { conn });
        }
        if self.phase == SenderPhase::Closing {
            let quiet = !self.members.iter().any(Member::open);
            if quiet || self.farewell_until.is_some_and(|t| now >= t) {
                self.finish();
            }
            return;
        }
        for (i, why) in self.stalled_nodes(now) {
            self.fail(now, i, why);
        }
        if self.stall_deadline().is_some_and(|t| now >= t) {
            self.error = Some(self.stalled(now));
        }
        if let Some(text) = self.error.clone() {
            self.close(now, &text);
            return;
        }
        if now.saturating_since(self.last_beat) >= self.heartbeat {
            self.last_beat = now;
            self.send_open(&Msg::Heartbeat);
        }
    }

    fn assign(&mut self, now: Instant) {
        let n = self.members.len() as u16;
        let topo = Topology::build(self.cfg.shape, n);
        debug_assert_eq!(topo.check(), Ok(()));
        self.topo = Some(topo.clone());
        let peer = |rank: Rank, segments: SegmentSet, members: &[Member], ctl: SocketAddr| {
            if rank == SENDER {
                Peer {
                    rank,
                    name: "sender".into(),
                    addr: ctl,
                    segments,
                }
            } else {
                let m = &members[usize::from(rank) - 1];
                Peer {
                    rank,
                    name: m.name.clone(),
                    addr: m.data_addr,
                    segments,
                }
            }
        };
        let ctl = self.cfg.control_addr;
        for i in 0..self.members.len() {
            let rank = i as Rank + 1;
            let plan = topo.node(rank);
            let a = Assignment {
                session: self.cfg.session,
                rank,
                receivers: n,
                shape: self.cfg.shape,
                segment_size: self.cfg.segment_size,
                size: self.cfg.size,
                name: self.cfg.name.clone(),
                inactivity_ms: self.cfg.inactivity.as_millis().min(u128::from(u32::MAX)) as u32,
                parents: (plan.parents.iter())
                    .map(|l| peer(l.peer, l.segments, &self.members, ctl))
                    .collect(),
                children: (plan.children.iter())
                    .map(|l| peer(l.peer, l.segments, &self.members, ctl))
                    .collect(),
            };
            self.send(i, Msg::Assign(Box::new(a)));
        }
        self.assigned_at = Some(now);
        self.phase = SenderPhase::Preparing;
        self.events.push_back(SenderEvent::Assigned);
    }

    fn start(&mut self, now: Instant) {
        for m in &mut self.members {
            m.moved = now;
            m.stall_from = now;
        }
        self.send_open(&Msg::Start);
        self.started_at = Some(now);
        self.last_progress = now;
        self.phase = SenderPhase::Sending;
        self.events.push_back(SenderEvent::Started);
        let topo = Topology::build(self.cfg.shape, self.members.len() as u16);
        let children = topo.node(SENDER).children.clone();
        for l in &children {
            let m = &self.members[usize::from(l.peer) - 1];
            self.data.push_back(DataOp::Connect {
                child: l.peer,
                addr: m.data_addr,
                segments: l.segments,
                hello: Msg::DataHello {
                    session: self.cfg.session,
                    from: SENDER,
                    to: l.peer,
                    segments: l.segments,
                    first: 0,
                },
                back: None,
            });
        }
        let feeds = children.iter().map(|l| (l.peer, l.segments));
        match Forwarding::of(self.cfg.shape) {
            Forwarding::Pipelined => {
                for (child, segments) in feeds {
                    self.data.push_back(DataOp::Feed {
                        child,
                        segments,
                        first: 0,
                    });
                }
            }
            Forwarding::StoreAndForward => {
                // Everyone is connected first (they wait for their parent);
                // the children are then served one after the other.
                self.feed_queue = feeds.collect();
                self.feed_next();
            }
        }
    }

    /// The session failed with `text`: tell everyone still open, then
    /// collect last words for a moment.
    fn close(&mut self, now: Instant, text: &str) {
        self.send_open(&Msg::Abort {
            text: text.to_owned(),
        });
        self.feed_queue.clear();
        if self.phase == SenderPhase::Joining {
            self.finish();
            return;
        }
        self.phase = SenderPhase::Closing;
        self.farewell_until = Some(now + FAREWELL_MAX.min(self.cfg.inactivity));
        if !self.members.iter().any(Member::open) {
            self.finish();
        }
    }

    fn finish(&mut self) {
        if self.error.is_none()
            && let Some(first) = self.cut_out.take()
        {
            let verified = (self.members.iter())
                .filter(|m| m.state == State::Complete)
                .count();
            let more = match self.cut_count {
                0 | 1 => String::new(),
                n => format!("; {} more failed", n - 1),
            };
            self.error = Some(format!(
                "{first} ({verified} of {} receivers verified{more})",
                self.members.len()
            ));
        }
        if self.error.is_some() {
            for (i, why, _) in std::mem::take(&mut self.deferred) {
                let m = &mut self.members[i];
                if m.state == State::Reported {
                    m.state = State::Failed;
                    m.reason = Some(why);
                }
            }
            let text = self.error.clone().unwrap_or_default();
            for m in self.members.iter_mut().filter(|m| m.open()) {
                m.state = State::Failed;
                m.reason = Some(format!("aborted: {text}"));
            }
        }
        for conn in self.members.iter().map(|m| m.conn).collect::<Vec<_>>() {
            self.transmits.push_back(ControlOp::Close { conn });
        }
        for conn in self.pending.keys().copied().collect::<Vec<_>>() {
            self.transmits.push_back(ControlOp::Close { conn });
        }
        self.pending.clear();
        self.phase = SenderPhase::Done;
        self.events.push_back(SenderEvent::Finished);
    }
}
