//! A receiver's part in the overlay, sans-IO: register, take the
//! assignment, get ready, receive from the parents, relay to the children,
//! verify, report, and blame the right node when something breaks.
//!
//! Pipelined shapes (chain, bintree, and direct's leaves) forward each
//! segment as it arrives: [`NodeMachine::handle_segment`] returns the
//! children that want it, so the driver can hand the same buffer to its
//! disk writer and to those children's connections (segment `k` goes out
//! while `k+1` comes in). Store-and-forward shapes (tree, binomial) feed
//! the children one after the other from the verified copy
//! ([`DataOp::Feed`]).

use super::topology::{Forwarding, SENDER, duplex_pairs};
use super::{DataOp, PROGRESS_EVERY, Rank, Segments};
use crate::{Instant, Status};
use rmcast_wire::overlay::{Assignment, Msg, SegmentSet};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

/// How long a receiver that lost a parent waits for the sender's verdict
/// (longer than the sender's own grace for the same purpose), so that the
/// sender, which hears from everyone, names the node that died.
const BLAME_GRACE: Duration = Duration::from_millis(1500);

/// Who this receiver is.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// Its name in the sender's reports.
    pub name: String,
    /// Where it listens for data from its parents.
    pub data_addr: SocketAddr,
    /// The sender silent this long fails the transfer (until the
    /// assignment brings the sender's own value).
    pub inactivity: Duration,
    /// The sender, for messages ("the sender at ...").
    pub sender: String,
}

/// Why a receiver's transfer ended without a verified copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeFailure {
    /// This receiver refused the object (the driver's `refuse`).
    Refused(String),
    /// The transfer failed; the text names the node to blame when known.
    Failed(String),
}

/// What the driver hears from the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEvent {
    /// The sender assigned a place and an object: prepare storage, then
    /// call [`NodeMachine::accept`] or [`NodeMachine::refuse`].
    Assigned(Box<Assignment>),
    /// Data begins: parents will connect to this node's data address.
    Started,
    /// The transfer is over (the final `Complete` is queued before this).
    Finished(Result<(), NodeFailure>),
}

/// Where the receiver stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodePhase {
    /// Registered, waiting for the assignment.
    Registered,
    /// Assigned; the driver is preparing storage.
    Preparing,
    /// Ready, waiting for Start.
    Ready,
    /// Receiving (and relaying).
    Receiving,
    /// Every byte stored, waiting for the hash or the verification.
    Verifying,
    /// Verified; still relaying to children.
    Forwarding,
    /// Over.
    Done,
}

/// The children a segment goes to (indices into the assignment's children).
pub type Route = Vec<usize>;

/// Where a parent edge stands in the self-healing (see the module's
/// documentation of [`super`]).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Edge {
    /// Connected or waiting to be: segments flow from `feeder`.
    Live,
    /// The sender detached the feeder: its connection is being dropped,
    /// and [`NodeMachine::handle_parent_failed`] will follow.
    Dropping,
    /// Broken; the sender was told where it stands (`Orphaned`) and has
    /// until the deadline to re-attach it. Why it broke, for the failure.
    Orphaned(String, Instant),
}

#[derive(Debug)]
struct Data {
    a: Box<Assignment>,
    segs: Segments,
    pipelined: bool,
    started: Instant,
    /// Segments read from each parent edge so far; `None` until it connected.
    from_parent: Vec<Option<u64>>,
    /// Who feeds each parent edge: the assignment's parent, or the sender
    /// once it re-attached the edge.
    feeder: Vec<Rank>,
    /// Each parent edge's healing state.
    edges: Vec<Edge>,
    children_done: Vec<bool>,
    stored_segments: u64,
    stored_bytes: u64,
    verify_asked: bool,
    verified: bool,
    /// A failure that another node's death may explain: why, and when to
    /// give up waiting for the sender's verdict.
    suspect: Option<(String, Instant)>,
    /// Store-and-forward children still to feed, in order.
    feed_next: usize,
    /// For each parent edge, the child edge this node writes back on its
    /// connection ([`duplex_pairs`]; the peer opens it), until it does.
    rides: Vec<Option<usize>>,
    /// For each child edge, the parent edge that comes back on the
    /// connection this node opens for it.
    back: Vec<Option<usize>>,
}

impl Data {
    /// Whether parent edge `pi` brought every segment it carries.
    fn edge_complete(&self, pi: usize) -> bool {
        self.from_parent[pi] == Some(self.a.parents[pi].segments.count(self.segs.count()))
    }

    /// Parent edges still waited on that never connected (an orphaned
    /// one has a deadline of its own).
    fn unconnected(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.a.parents.len())
            .filter(|&pi| self.from_parent[pi].is_none() && self.edges[pi] == Edge::Live)
    }
}

/// One receiver of the overlay.
#[derive(Debug)]
pub struct NodeMachine {
    cfg: NodeConfig,
    phase: NodePhase,
    inactivity: Duration,
    last_heard: Instant,
    last_sent: Instant,
    hash: Option<([u8; 32], Option<[u8; 64]>)>,
    assignment: Option<Box<Assignment>>,
    data: Option<Data>,
    result: Option<Result<(), NodeFailure>>,
    transmits: VecDeque<Msg>,
    ops: VecDeque<DataOp>,
    events: VecDeque<NodeEvent>,
}

impl NodeMachine {
    /// A receiver whose control connection to the sender just opened; its
    /// `Register` is the first frame to write.
    #[must_use]
    pub fn new(now: Instant, cfg: NodeConfig) -> Self {
        let register = Msg::Register {
            name: cfg.name.clone(),
            data_addr: cfg.data_addr,
        };
        Self {
            inactivity: cfg.inactivity,
            cfg,
            phase: NodePhase::Registered,
            last_heard: now,
            last_sent: now,
            hash: None,
            assignment: None,
            data: None,
            result: None,
            transmits: VecDeque::from([register]),
            ops: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// A control frame from the sender.
    pub fn handle_msg(&mut self, now: Instant, msg: Msg) {
        if self.phase == NodePhase::Done {
            return;
        }
        self.last_heard = now;
        match msg {
            Msg::Abort { text } => {
                self.fail(now, format!("the sender aborted the transfer: {text}"));
            }
            Msg::Hash { hash, signature } => {
                self.hash.get_or_insert((hash, signature));
            }
            Msg::Assign(a) if self.phase == NodePhase::Registered => {
                if let Err(why) = check_assignment(&a) {
                    self.fail(now, format!("the sender's assignment is invalid: {why}"));
                    return;
                }
                self.inactivity = Duration::from_millis(u64::from(a.inactivity_ms));
                self.phase = NodePhase::Preparing;
                self.assignment = Some(a.clone());
                self.events.push_back(NodeEvent::Assigned(a));
            }
            Msg::Start if self.phase == NodePhase::Ready => self.start(now),
            Msg::Detach { rank } => self.detach(now, rank),
            _ => {}
        }
        self.step(now);
    }

    /// The control connection closed or failed (reading or writing).
    pub fn handle_closed(&mut self, now: Instant, why: &str) {
        let text = format!("lost the sender at {}: {why}", self.cfg.sender);
        self.fail(now, text);
    }

    /// Storage is prepared: tell the sender this receiver is ready.
    pub fn accept(&mut self, now: Instant) {
        if self.phase == NodePhase::Preparing {
            self.send(
                now,
                Msg::Ready {
                    status: Status::Ok,
                    text: String::new(),
                },
            );
            self.phase = NodePhase::Ready;
        }
    }

    /// Storage cannot be prepared (`status` says why): refuse the object.
    pub fn refuse(&mut self, now: Instant, status: Status, text: String) {
        if self.phase == NodePhase::Preparing {
            self.send(
                now,
                Msg::Ready {
                    status,
                    text: text.clone(),
                },
            );
            self.end(Err(NodeFailure::Refused(text)));
        }
    }

    /// A data connection introduced itself with `hello`. Returns the
    /// parent's index in the assignment, or why the connection is to be
    /// dropped (wrong session, not a parent, a second connection).
    pub fn handle_parent_hello(&mut self, now: Instant, hello: &Msg) -> Result<usize, String> {
        let Some(d) = self.data.as_mut() else {
            return Err("no data expected now".into());
        };
        let (from, segments, first) = match *hello {
            Msg::DataHello {
                session,
                from,
                to,
                segments,
                first,
            } if session == d.a.session && to == d.a.rank => (from, segments, first),
            _ => return Err(format!("unexpected {hello:?}")),
        };
        // The sender re-attaching an orphaned edge, from where it broke.
        let orphan = (d.edges.iter().zip(&d.a.parents)).position(|(e, p)| {
            matches!(e, Edge::Orphaned(..)) && p.segments == segments && from == SENDER
        });
        if let Some(pi) = orphan {
            let have = d.from_parent[pi].unwrap_or(0);
            if first != have {
                return Err(format!(
                    "the sender re-attaches {segments:?} from segment {first}, \
                     but {have} of them arrived"
                ));
            }
            d.from_parent[pi] = Some(have);
            d.feeder[pi] = SENDER;
            d.edges[pi] = Edge::Live;
            self.step(now);
            return Ok(pi);
        }
        if first != 0 {
            return Err(format!(
                "rank {from} starts {segments:?} at segment {first}"
            ));
        }
        // Two nodes may share several edges (the pipeline's twins): the
        // set names the edge.
        let Some(pi) = (d.a.parents.iter()).position(|p| p.rank == from && p.segments == segments)
        else {
            return Err(format!("rank {from} is not a parent for {segments:?}"));
        };
        if d.from_parent[pi].is_some() || d.edges[pi] != Edge::Live {
            return Err(format!(
                "a second data connection from rank {from} for {segments:?}"
            ));
        }
        d.from_parent[pi] = Some(0);
        if let Some(ci) = d.rides[pi].take() {
            let c = &d.a.children[ci];
            self.ops.push_back(DataOp::WriteBack {
                parent: pi,
                child: ci,
                hello: Msg::DataHello {
                    session: d.a.session,
                    from: d.a.rank,
                    to: c.rank,
                    segments: c.segments,
                    first: 0,
                },
            });
        }
        self.step(now);
        Ok(pi)
    }

    /// Segment `index` was read whole from parent `pi`'s stream (the
    /// driver holds its bytes). Returns the children to forward it to now;
    /// every segment is also to be stored.
    pub fn handle_segment(&mut self, now: Instant, pi: usize, index: u64) -> Route {
        let Some(d) = self.data.as_mut() else {
            return Route::new();
        };
        let set = d.a.parents[pi].segments;
        let got = d.from_parent[pi].get_or_insert(0);
        debug_assert_eq!(set.nth(*got), index, "segments arrive in set order");
        *got += 1;
        let route = if d.pipelined {
            (d.a.children.iter().enumerate())
                .filter(|(_, c)| c.segments.contains(index))
                .map(|(i, _)| i)
                .collect()
        } else {
            Route::new()
        };
        if *got == set.count(d.segs.count()) {
            self.step(now);
        }
        route
    }

    /// Segment `index` (`len` bytes) is in storage.
    pub fn handle_stored(&mut self, now: Instant, index: u64, len: usize) {
        let _ = index;
        if let Some(d) = self.data.as_mut() {
            d.stored_segments += 1;
            d.stored_bytes += len as u64;
            if d.stored_segments == d.segs.count() {
                self.step(now);
            }
        }
    }

    /// Parent edge `pi`'s stream failed, ended early, or was dropped
    /// ([`DataOp::Drop`]) with `why`, and its reader is gone: no segment
    /// of it is read after this call. The sender hears where the edge
    /// stands ([`Msg::Orphaned`]) and re-attaches it; if it does not
    /// within the inactivity timeout, the transfer fails naming the parent.
    pub fn handle_parent_failed(&mut self, now: Instant, pi: usize, why: &str) {
        let Some(d) = self.data.as_ref() else { return };
        if d.edge_complete(pi) {
            return; // it had sent everything
        }
        if matches!(d.edges[pi], Edge::Orphaned(..)) {
            // Already reported, waiting for the sender: a connection that
            // broke since (one opened to its parent) tells nothing new.
            return;
        }
        let p = &d.a.parents[pi];
        let text = if d.feeder[pi] == p.rank {
            format!("parent {p} {why}")
        } else {
            format!("the sender, re-attached in place of parent {p}, {why}")
        };
        self.orphan(now, pi, text);
        self.step(now);
    }

    /// The object stopped arriving for a reason the driver saw (its disk
    /// writer lost its input, say); another node's death may explain it.
    pub fn handle_data_stopped(&mut self, now: Instant, why: &str) {
        self.suspect(now, why.to_owned());
    }

    /// The driver verified and committed the stored copy (`Ok`), or not.
    pub fn handle_verified(&mut self, now: Instant, result: Result<(), (Status, String)>) {
        match result {
            Ok(()) => {
                if let Some(d) = self.data.as_mut() {
                    d.verified = true;
                    if !d.pipelined {
                        self.feed_next_child();
                    }
                }
                self.step(now);
            }
            Err((status, why)) => self.finish_data(now, Some((status, why))),
        }
    }

    /// Child `ci`'s stream was written to the end, or failed. A failed
    /// child is the child's own business: the sender hears of it from the
    /// child, and this node's copy stays valid.
    ///
    /// A connection this node opened that failed before the parent edge
    /// coming back on it ([`DataOp::Connect`]'s `back`) introduced itself
    /// breaks that edge too: the sender hears it is orphaned.
    pub fn handle_child_done(&mut self, now: Instant, ci: usize, result: Result<(), String>) {
        let mut orphaned = None;
        if let Some(d) = self.data.as_mut() {
            d.children_done[ci] = true;
            if let (Err(why), Some(pi)) = (&result, d.back[ci])
                && d.from_parent[pi].is_none()
                && d.edges[pi] == Edge::Live
            {
                let p = &d.a.parents[pi];
                orphaned = Some((pi, format!("parent {p} could not be reached: {why}")));
            }
            if !d.pipelined && d.verified {
                self.feed_next_child();
            }
        }
        if let Some((pi, why)) = orphaned {
            self.orphan(now, pi, why);
        }
        self.step(now);
    }

    /// Deadlines passed: progress reports, sender silence, blame.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.step(now);
    }

    /// The next control frame for the sender.
    pub fn poll_transmit(&mut self) -> Option<Msg> {
        self.transmits.pop_front()
    }

    /// The next data connection to open, child to feed, or verification.
    pub fn poll_data(&mut self) -> Option<DataOp> {
        self.ops.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<NodeEvent> {
        self.events.pop_front()
    }

    /// Whether a frame, data operation or event is waiting to be polled: a
    /// driver that answered an event (`accept` after `Assigned`) polls
    /// again before it sleeps.
    #[must_use]
    pub fn has_output(&self) -> bool {
        !(self.transmits.is_empty() && self.ops.is_empty() && self.events.is_empty())
    }

    /// When to call [`handle_timeout`](Self::handle_timeout) next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.phase == NodePhase::Done {
            return None;
        }
        let mut at = (self.last_sent + PROGRESS_EVERY).min(self.last_heard + self.inactivity);
        if let Some(d) = &self.data {
            if d.unconnected().next().is_some() {
                at = at.min(d.started + self.inactivity);
            }
            if let Some((_, t)) = &d.suspect {
                at = at.min(*t);
            }
            for e in &d.edges {
                if let Edge::Orphaned(_, t) = e {
                    at = at.min(*t);
                }
            }
        }
        Some(at)
    }

    /// Where the receiver stands.
    #[must_use]
    pub fn phase(&self) -> NodePhase {
        self.phase
    }

    /// The assignment, once it came.
    #[must_use]
    pub fn assignment(&self) -> Option<&Assignment> {
        self.assignment.as_deref()
    }

    /// Bytes stored so far.
    #[must_use]
    pub fn stored_bytes(&self) -> u64 {
        self.data.as_ref().map_or(0, |d| d.stored_bytes)
    }

    /// The result, once [`NodeEvent::Finished`] came.
    #[must_use]
    pub fn result(&self) -> Option<&Result<(), NodeFailure>> {
        self.result.as_ref()
    }

    /// Whether parent edge `pi` waits for its connection to be closed
    /// ([`DataOp::Drop`]): false once its reader reported it broken
    /// ([`handle_parent_failed`](Self::handle_parent_failed)), when the
    /// connection the driver holds for it may already be the sender's
    /// re-attachment, which a late drop must not close.
    #[must_use]
    pub fn parent_dropping(&self, pi: usize) -> bool {
        (self.data.as_ref()).is_some_and(|d| d.edges.get(pi) == Some(&Edge::Dropping))
    }

    /// The inactivity timeout in force (the sender's, once assigned).
    #[must_use]
    pub fn inactivity(&self) -> Duration {
        self.inactivity
    }

    fn send(&mut self, now: Instant, msg: Msg) {
        self.last_sent = now;
        self.transmits.push_back(msg);
    }

    fn start(&mut self, now: Instant) {
        let a = self.assignment.clone().expect("assigned before start");
        let pipelined = Forwarding::of(a.shape) == Forwarding::Pipelined;
        let parents: Vec<Rank> = a.parents.iter().map(|p| p.rank).collect();
        let children: Vec<Rank> = a.children.iter().map(|c| c.rank).collect();
        let pairs = duplex_pairs(&parents, &children);
        let mut rides = vec![None; a.parents.len()];
        let mut back = vec![None; a.children.len()];
        for (ci, c) in a.children.iter().enumerate() {
            match pairs[ci] {
                // The peer opens this connection: write back once it did.
                Some(pi) if c.rank < a.rank => rides[pi] = Some(ci),
                pair => {
                    back[ci] = pair;
                    self.ops.push_back(DataOp::Connect {
                        child: c.rank,
                        addr: c.addr,
                        segments: c.segments,
                        hello: Msg::DataHello {
                            session: a.session,
                            from: a.rank,
                            to: c.rank,
                            segments: c.segments,
                            first: 0,
                        },
                        back: pair,
                    });
                }
            }
        }
        self.data = Some(Data {
            segs: Segments::new(a.size, a.segment_size),
            pipelined,
            started: now,
            from_parent: vec![None; a.parents.len()],
            feeder: a.parents.iter().map(|p| p.rank).collect(),
            edges: vec![Edge::Live; a.parents.len()],
            children_done: vec![false; a.children.len()],
            stored_segments: 0,
            stored_bytes: 0,
            verify_asked: false,
            verified: false,
            suspect: None,
            feed_next: 0,
            rides,
            back,
            a,
        });
        self.phase = NodePhase::Receiving;
        self.events.push_back(NodeEvent::Started);
    }

    fn feed_next_child(&mut self) {
        let Some(d) = self.data.as_mut() else { return };
        // A child whose stream ended before its turn (its connection
        // failed) is not waited on: it never blocks its siblings.
        while d.feed_next < d.a.children.len() && d.children_done[d.feed_next] {
            d.feed_next += 1;
        }
        // One child at a time: the next once the previous is done.
        if d.feed_next > 0 && !d.children_done[d.feed_next - 1] {
            return;
        }
        if let Some(c) = d.a.children.get(d.feed_next) {
            self.ops.push_back(DataOp::Feed {
                child: c.rank,
                segments: c.segments,
                first: 0,
            });
            d.feed_next += 1;
        }
    }

    /// The sender says `rank` is out: drop every unfinished edge from it.
    fn detach(&mut self, now: Instant, rank: Rank) {
        let Some(d) = self.data.as_mut() else { return };
        let mut unconnected = Vec::new();
        for pi in 0..d.a.parents.len() {
            if d.feeder[pi] != rank || d.edges[pi] != Edge::Live || d.edge_complete(pi) {
                continue;
            }
            if d.from_parent[pi].is_some() {
                d.edges[pi] = Edge::Dropping;
                self.ops.push_back(DataOp::Drop { parent: pi });
            } else {
                let p = &d.a.parents[pi];
                unconnected.push((pi, format!("parent {p} failed before it connected")));
            }
        }
        for (pi, why) in unconnected {
            self.orphan(now, pi, why);
        }
    }

    /// Parent edge `pi` is broken: ask the sender to re-attach it. A child
    /// edge that was to ride back on its connection never will: its peer
    /// is the broken parent, so it is done.
    fn orphan(&mut self, now: Instant, pi: usize, why: String) {
        let Some(d) = self.data.as_mut() else { return };
        if let Some(ci) = d.rides[pi].take() {
            d.children_done[ci] = true;
            self.ops.push_back(DataOp::Abandon { child: ci });
        }
        let p = &d.a.parents[pi];
        let msg = Msg::Orphaned {
            from: d.feeder[pi],
            segments: p.segments,
            have: d.from_parent[pi].unwrap_or(0),
        };
        d.edges[pi] = Edge::Orphaned(why, now + self.inactivity + BLAME_GRACE);
        self.send(now, msg);
    }

    fn suspect(&mut self, now: Instant, why: String) {
        if let Some(d) = self.data.as_mut() {
            d.suspect.get_or_insert((why, now + BLAME_GRACE));
            self.step(now);
        }
    }

    /// A failure: before the data phase the transfer just ends; during it,
    /// the sender gets a `Complete` saying why.
    fn fail(&mut self, now: Instant, why: String) {
        if self.phase == NodePhase::Done {
            return;
        }
        if self.data.is_some() {
            self.finish_data(now, Some((Status::Other, why)));
        } else {
            self.end(Err(NodeFailure::Failed(why)));
        }
    }

    /// Ends the data phase: `None` when everything is done.
    fn finish_data(&mut self, now: Instant, failure: Option<(Status, String)>) {
        if self.phase == NodePhase::Done {
            return;
        }
        let verified = self.data.as_ref().is_some_and(|d| d.verified);
        match (failure, verified) {
            (None, _) => {
                self.send(
                    now,
                    Msg::Complete {
                        status: Status::Ok,
                        text: String::new(),
                    },
                );
                self.end(Ok(()));
            }
            (Some(_), true) => {
                // Our copy is verified and in place; the rest is not ours to fix.
                self.send(
                    now,
                    Msg::Complete {
                        status: Status::Ok,
                        text: "verified; forwarding did not finish".into(),
                    },
                );
                self.end(Ok(()));
            }
            (Some((status, why)), false) => {
                self.send(
                    now,
                    Msg::Complete {
                        status,
                        text: why.clone(),
                    },
                );
                self.end(Err(NodeFailure::Failed(why)));
            }
        }
    }

    fn end(&mut self, result: Result<(), NodeFailure>) {
        self.phase = NodePhase::Done;
        self.result = Some(result.clone());
        self.events.push_back(NodeEvent::Finished(result));
    }

    fn step(&mut self, now: Instant) {
        if self.phase == NodePhase::Done {
            return;
        }
        let silent = now.saturating_since(self.last_heard);
        if silent >= self.inactivity {
            let why = format!(
                "the sender at {} went silent for {:.1} s",
                self.cfg.sender,
                silent.as_secs_f64()
            );
            self.fail(now, why);
            return;
        }
        let mut unconnected = Vec::new();
        if let Some(d) = self.data.as_ref()
            && now >= d.started + self.inactivity
        {
            // A parent that never connected: the sender re-attaches it.
            let limit = self.inactivity.as_secs_f64();
            unconnected = d
                .unconnected()
                .map(|pi| {
                    let p = &d.a.parents[pi];
                    (
                        pi,
                        format!("parent {p} did not connect within {limit:.1} s"),
                    )
                })
                .collect();
        }
        for (pi, why) in unconnected {
            self.orphan(now, pi, why);
        }
        if let Some(d) = self.data.as_mut() {
            let total = d.segs.count();
            if d.stored_segments == total && !d.verify_asked {
                self.phase = NodePhase::Verifying;
                if let Some((hash, signature)) = self.hash {
                    d.verify_asked = true;
                    self.ops.push_back(DataOp::Verify { hash, signature });
                }
            }
            if d.verified {
                self.phase = NodePhase::Forwarding;
            }
            let parents_done = (0..d.a.parents.len()).all(|pi| d.edge_complete(pi));
            let broken = d.edges.iter().find_map(|e| match e {
                Edge::Orphaned(why, at) if now >= *at => Some(why.clone()),
                _ => None,
            });
            if let Some(why) = broken {
                let limit = (self.inactivity + BLAME_GRACE).as_secs_f64();
                let why = format!("{why}, and the sender did not re-attach it within {limit:.1} s");
                self.finish_data(now, Some((Status::Other, why)));
                return;
            }
            if d.verified && parents_done && d.children_done.iter().all(|&c| c) {
                self.finish_data(now, None);
                return;
            }
            if let Some((why, at)) = d.suspect.clone()
                && now >= at
            {
                self.finish_data(now, Some((Status::Other, why)));
                return;
            }
        }
        if now.saturating_since(self.last_sent) >= PROGRESS_EVERY {
            let bytes = self.stored_bytes();
            self.send(now, Msg::Progress { bytes });
        }
    }
}

/// Longest common period of an assignment's segment sets.
const MAX_PERIOD: u64 = 1024;

/// Checks what the runtime relies on: a sane rank and segment size, every
/// segment from exactly one parent, every child's share from one parent.
fn check_assignment(a: &Assignment) -> Result<(), &'static str> {
    if a.rank == 0 || a.rank > a.receivers {
        return Err("rank out of range");
    }
    if a.segment_size == 0 || a.segment_size > super::MAX_SEGMENT_SIZE {
        return Err("segment size out of range");
    }
    // Segment k takes the paths of k % period: check one period (the
    // topologies' periods divide 2 log2 N; unrelated ones are refused
    // before their least common multiple grows).
    let sets = a.parents.iter().chain(&a.children).map(|p| p.segments);
    let period =
        SegmentSet::common_period(sets, MAX_PERIOD).ok_or("segment sets of unrelated periods")?;
    for probe in 0..period {
        let from = (a.parents.iter())
            .filter(|p| p.segments.contains(probe))
            .count();
        if from != 1 {
            return Err("segments must come from exactly one parent each");
        }
    }
    for c in &a.children {
        if !(a.parents.iter()).any(|p| c.segments.is_subset_of(p.segments)) {
            return Err("a child needs segments no single parent sends");
        }
    }
    if a.inactivity_ms < 100 {
        return Err("inactivity timeout too short");
    }
    Ok(())
}
