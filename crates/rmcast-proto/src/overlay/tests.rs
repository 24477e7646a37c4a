//! The overlay machines driven together with virtual time and instant
//! delivery: no sockets, no threads, no clock.

use super::*;
use crate::{Instant, Status};
use std::collections::VecDeque;

const HASH: [u8; 32] = [7; 32];
const SEC: Duration = Duration::from_secs(1);

fn addr(rank: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, (rank >> 8) as u8, rank as u8], 5000))
}

/// What a test wants to happen.
#[derive(Clone, Default)]
struct Plan {
    /// Registered receivers (the sender waits for `wanted`).
    joining: usize,
    wanted: u16,
    /// When the sender learns the hash.
    hash_at: Duration,
    /// This receiver (index) refuses the object.
    refuse: Option<usize>,
    /// This receiver (index) dies once this many segments reached it.
    die_after: Option<(usize, u64)>,
    /// The dying receiver's connections stay open (a hung host): only
    /// silence tells.
    quiet_death: bool,
    /// This receiver (index) takes no segment after this many, yet its
    /// machine runs on and heartbeats: a wedged data path.
    wedged: Option<(usize, u64)>,
}

/// The machines and the wires between them. Control frames and segments
/// are delivered at once; time moves only when nothing else can happen.
struct Net {
    now: Instant,
    sender: SenderMachine,
    nodes: Vec<NodeMachine>,
    alive: Vec<bool>,
    /// Per node: data connections from parents not yet introduced (node started late).
    results: Vec<Option<Result<(), NodeFailure>>>,
    /// Segments each node received so far.
    received: Vec<u64>,
    /// Per node, per child index: segments forwarded (pipelined).
    forwarded: Vec<Vec<u64>>,
    /// (parent rank, child rank) → parent index at the child.
    edges: Vec<(Rank, Rank, usize)>,
    plan: Plan,
    segs: Segments,
    hash_given: bool,
    /// Log of (node index, parent index, segment) deliveries in order.
    log: Vec<(usize, usize, u64)>,
    finished: bool,
}

impl Net {
    fn new(shape: OverlayShape, plan: Plan, size: u64, segment_size: u32) -> Self {
        let now = Instant::ZERO;
        let sender = SenderMachine::new(
            now,
            SenderConfig {
                shape,
                receivers: plan.wanted,
                segment_size,
                join_wait: 3 * SEC,
                inactivity: 2 * SEC,
                stall_timeout: Some(4 * SEC),
                session: 42,
                name: "obj.bin".into(),
                size,
                control_addr: addr(0),
            },
        );
        let n = plan.joining;
        let mut net = Self {
            now,
            sender,
            nodes: Vec::new(),
            alive: vec![true; n],
            results: vec![None; n],
            received: vec![0; n],
            forwarded: vec![Vec::new(); n],
            edges: Vec::new(),
            plan,
            segs: Segments::new(size, segment_size),
            hash_given: false,
            log: Vec::new(),
            finished: false,
        };
        for i in 0..n {
            net.sender.handle_connected(now, i as u64 + 1, addr(i + 1));
            net.nodes.push(NodeMachine::new(
                now,
                NodeConfig {
                    name: format!("node-{}", i + 1),
                    data_addr: addr(i + 1),
                    inactivity: 2 * SEC,
                    sender: "10.0.0.0:5000".into(),
                },
            ));
        }
        net
    }

    fn run(&mut self, limit: Duration) {
        while self.now.saturating_since(Instant::ZERO) < limit {
            let mut busy = self.pump();
            if self.finished
                && self
                    .results
                    .iter()
                    .zip(&self.alive)
                    .all(|(r, a)| r.is_some() || !a)
            {
                return;
            }
            if !self.hash_given && self.now >= Instant::ZERO + self.plan.hash_at {
                self.hash_given = true;
                self.sender.handle_hash(self.now, HASH);
                busy = true;
            }
            if busy {
                continue;
            }
            let mut next = Instant::ZERO + self.plan.hash_at;
            if self.hash_given {
                next = Instant::ZERO + limit;
            }
            next = next.min(self.sender.poll_timeout().unwrap_or(next));
            for (i, n) in self.nodes.iter().enumerate() {
                if self.alive[i]
                    && let Some(t) = n.poll_timeout()
                {
                    next = next.min(t);
                }
            }
            // A deadline that is due must move something: no busy loops.
            assert!(
                next > self.now || self.now == Instant::ZERO,
                "stuck at {:?}",
                self.now
            );
            self.now = next.max(self.now);
            self.sender.handle_timeout(self.now);
            for i in 0..self.nodes.len() {
                if self.alive[i] {
                    self.nodes[i].handle_timeout(self.now);
                }
            }
        }
        panic!("the session did not end within {limit:?}");
    }

    /// Delivers everything pending; true when anything moved.
    fn pump(&mut self) -> bool {
        let now = self.now;
        let mut moved = false;
        while let Some(op) = self.sender.poll_transmit() {
            moved = true;
            if let ControlOp::Send { conn, msg } = op {
                let i = conn as usize - 1;
                if self.alive[i] {
                    self.nodes[i].handle_msg(now, msg);
                }
            }
        }
        while let Some(ev) = self.sender.poll_event() {
            moved = true;
            self.finished |= ev == SenderEvent::Finished;
        }
        for i in 0..self.nodes.len() {
            if !self.alive[i] {
                continue;
            }
            while let Some(msg) = self.nodes[i].poll_transmit() {
                moved = true;
                self.sender.handle_msg(now, i as u64 + 1, msg);
            }
            while let Some(ev) = self.nodes[i].poll_event() {
                moved = true;
                match ev {
                    NodeEvent::Assigned(_) if self.plan.refuse == Some(i) => {
                        self.nodes[i].refuse(now, Status::TooLarge, "too big".into());
                    }
                    NodeEvent::Assigned(_) => self.nodes[i].accept(now),
                    NodeEvent::Started => {}
                    NodeEvent::Finished(r) => self.results[i] = Some(r),
                }
            }
            while let Some(op) = self.nodes[i].poll_data() {
                moved = true;
                self.data_op(i as Rank + 1, op);
            }
        }
        // The sender's data only once all else settled: every node has
        // its Start and has opened its children's connections (a real node
        // finds early connections in its listen backlog).
        if moved {
            return true;
        }
        while let Some(op) = self.sender.poll_data() {
            moved = true;
            self.data_op(0, op);
        }
        moved
    }

    fn data_op(&mut self, from: Rank, op: DataOp) {
        let now = self.now;
        match op {
            DataOp::Connect {
                child,
                segments,
                hello,
                ..
            } => self.open_edge(from, child, segments, &hello),
            DataOp::WriteBack { hello, .. } => {
                let Msg::DataHello { to, segments, .. } = hello else {
                    panic!("a write-back without a DataHello: {hello:?}");
                };
                self.open_edge(from, to, segments, &hello);
            }
            DataOp::Abandon { .. } => {}
            DataOp::Feed {
                child,
                segments,
                first,
            } => {
                for k in first..segments.count(self.segs.count()) {
                    self.deliver(from, child, segments.nth(k));
                }
                if from == 0 {
                    self.sender.handle_child_done(now, child, segments, Ok(()));
                } else {
                    let node = &mut self.nodes[usize::from(from) - 1];
                    let ci = (node.assignment().unwrap().children.iter())
                        .position(|p| p.rank == child && p.segments == segments)
                        .unwrap();
                    node.handle_child_done(now, ci, Ok(()));
                }
            }
            DataOp::Verify { hash, .. } => {
                let i = usize::from(from) - 1;
                let r = if hash == HASH {
                    Ok(())
                } else {
                    Err((Status::HashMismatch, "bad hash".into()))
                };
                self.nodes[i].handle_verified(now, r);
            }
            DataOp::Drop { parent } => {
                // The connection is closed: nothing more arrives on it,
                // and its reader ends.
                self.edges.retain(|e| !(e.1 == from && e.2 == parent));
                let node = &mut self.nodes[usize::from(from) - 1];
                node.handle_parent_failed(now, parent, "was dropped");
            }
        }
    }

    /// `from` opens edge `(from, child, segments)` (a connection, or the
    /// way back on one) and introduces it with `hello`.
    fn open_edge(&mut self, from: Rank, child: Rank, segments: SegmentSet, hello: &Msg) {
        let now = self.now;
        let c = usize::from(child) - 1;
        let pi = self.nodes[c]
            .handle_parent_hello(now, hello)
            .expect("the child accepts its parent");
        self.edges.push((from, child, pi));
        if from != 0 {
            let node = &self.nodes[usize::from(from) - 1];
            let a = node.assignment().unwrap();
            let ci = (a.children.iter())
                .position(|p| p.rank == child && p.segments == segments)
                .unwrap();
            let pipelined = Forwarding::of(a.shape) == Forwarding::Pipelined;
            let f = &mut self.forwarded[usize::from(from) - 1];
            f.resize(a.children.len(), 0);
            if pipelined && a.children[ci].segments.count(self.segs.count()) == 0 {
                self.nodes[usize::from(from) - 1].handle_child_done(now, ci, Ok(()));
            }
        }
    }

    /// Segment `index` reaches `to` from `from`, and goes on along its route.
    fn deliver(&mut self, from: Rank, to: Rank, index: u64) {
        let now = self.now;
        let mut work = VecDeque::from([(from, to, index)]);
        while let Some((from, to, index)) = work.pop_front() {
            let c = usize::from(to) - 1;
            if !self.alive[c] {
                continue;
            }
            if self.plan.wedged == Some((c, self.received[c])) {
                continue;
            }
            if let Some((who, after)) = self.plan.die_after
                && who == c
                && self.received[c] >= after
            {
                self.alive[c] = false;
                if !self.plan.quiet_death {
                    self.sender
                        .handle_closed(now, c as u64 + 1, "connection closed", false);
                    // Its kernel resets its connections: the children's
                    // readers fail.
                    let dead = c as Rank + 1;
                    let broken: Vec<(Rank, usize)> = (self.edges.iter())
                        .filter(|e| e.0 == dead)
                        .map(|e| (e.1, e.2))
                        .collect();
                    for (child, pi) in broken {
                        let k = usize::from(child) - 1;
                        if self.alive[k] {
                            self.nodes[k].handle_parent_failed(now, pi, "was reset");
                        }
                    }
                }
                continue;
            }
            // Two nodes may share several edges: the one whose set holds it.
            let parents = &self.nodes[c].assignment().unwrap().parents;
            let pi = (self.edges.iter())
                .find(|e| e.0 == from && e.1 == to && parents[e.2].segments.contains(index))
                .expect("connected")
                .2;
            self.received[c] += 1;
            self.log.push((c, pi, index));
            let route = self.nodes[c].handle_segment(now, pi, index);
            self.nodes[c].handle_stored(now, index, self.segs.len(index));
            let a = self.nodes[c].assignment().unwrap().clone();
            for ci in route {
                let child = a.children[ci].rank;
                work.push_back((to, child, index));
                let f = &mut self.forwarded[c];
                f.resize(a.children.len(), 0);
                f[ci] += 1;
                if f[ci] == a.children[ci].segments.count(self.segs.count()) {
                    self.nodes[c].handle_child_done(now, ci, Ok(()));
                }
            }
        }
    }
}

const SHAPES: [OverlayShape; 7] = [
    OverlayShape::Pipeline,
    OverlayShape::Direct,
    OverlayShape::Tree { fanout: 2 },
    OverlayShape::Tree { fanout: 3 },
    OverlayShape::Binomial,
    OverlayShape::Chain,
    OverlayShape::Bintree,
];

/// A receiver on its own at time zero (2 s inactivity), its Register queued.
fn lone_node() -> NodeMachine {
    NodeMachine::new(
        Instant::ZERO,
        NodeConfig {
            name: "n".into(),
            data_addr: addr(2),
            inactivity: 2 * SEC,
            sender: "s".into(),
        },
    )
}

fn plan(n: usize) -> Plan {
    Plan {
        joining: n,
        wanted: n as u16,
        ..Plan::default()
    }
}

#[test]
fn every_shape_delivers_every_segment_once_and_everyone_completes() {
    for shape in SHAPES {
        for n in [1usize, 2, 3, 7, 16] {
            for size in [0u64, 1, 100, 101, 1000] {
                let mut net = Net::new(shape, plan(n), size, 100);
                net.run(60 * SEC);
                let what = format!("{shape} n={n} size={size}");
                let report = net.sender.report();
                assert_eq!(report.error, None, "{what}");
                assert!(report.members.iter().all(|m| m.verified), "{what}");
                for (i, r) in net.results.iter().enumerate() {
                    assert_eq!(r, &Some(Ok(())), "{what} node {i}");
                    assert_eq!(net.received[i], net.segs.count(), "{what} node {i}");
                    assert_eq!(net.nodes[i].stored_bytes(), size, "{what} node {i}");
                }
            }
        }
    }
}

#[test]
fn nodes_wait_for_a_late_hash_before_they_verify() {
    for shape in [OverlayShape::Chain, OverlayShape::Tree { fanout: 2 }] {
        let mut p = plan(3);
        p.hash_at = 3 * SEC / 2;
        let mut net = Net::new(shape, p, 1000, 100);
        net.run(60 * SEC);
        let report = net.sender.report();
        assert_eq!(report.error, None, "{shape}");
        assert!(report.last_confirmation.unwrap() >= Instant::ZERO + 3 * SEC / 2);
    }
}

#[test]
fn pipelined_node_forwards_a_segment_as_soon_as_it_arrives() {
    let mut net = Net::new(OverlayShape::Chain, plan(3), 1000, 100);
    net.run(60 * SEC);
    // Segment 0 reached the end of the chain before segment 1 left the sender.
    let first_at_tail = net.log.iter().position(|&(c, _, k)| c == 2 && k == 0);
    let second_at_head = net.log.iter().position(|&(c, _, k)| c == 0 && k == 1);
    assert!(first_at_tail < second_at_head, "{:?}", net.log);
}

#[test]
fn store_and_forward_node_relays_only_after_verification() {
    let mut p = plan(3);
    p.hash_at = 5 * SEC / 2;
    let mut net = Net::new(OverlayShape::Tree { fanout: 1 }, p, 1000, 100);
    net.run(60 * SEC);
    assert_eq!(net.sender.report().error, None);
    // Rank 2 got nothing until rank 1 had the whole object (and the hash).
    let first_at_2 = net.log.iter().position(|&(c, _, _)| c == 1).unwrap();
    assert_eq!(first_at_2, 10, "{:?}", net.log);
}

#[test]
fn bintree_routes_each_segment_to_the_child_of_its_tree_only() {
    let mut net = Net::new(OverlayShape::Bintree, plan(7), 1000, 100);
    net.run(60 * SEC);
    assert_eq!(net.sender.report().error, None);
    // Every node got each segment exactly once.
    for c in 0..7 {
        let mut got: Vec<u64> = net.log.iter().filter(|e| e.0 == c).map(|e| e.2).collect();
        got.sort_unstable();
        assert_eq!(got, (0..10).collect::<Vec<_>>(), "node {c}");
    }
}

/// Every node but `dead` completed, verified, and got every segment
/// exactly once; the sender names `dead` as failed with `why`.
fn assert_healed(net: &Net, dead: usize, why: &str, what: &str) {
    let report = net.sender.report();
    let error = report.error.clone().unwrap_or_default();
    let name = format!("\"node-{}\"", dead + 1);
    assert!(
        error.contains(&name) && error.contains(why),
        "{what}: {error}"
    );
    let n = net.nodes.len();
    assert!(
        error.contains(&format!("{} of {n} receivers verified", n - 1)),
        "{what}: {error} {:#?}",
        report.members
    );
    assert!(!report.members[dead].verified, "{what}");
    assert!(report.members[dead].reason.is_some(), "{what}");
    for i in (0..n).filter(|&i| i != dead) {
        assert_eq!(net.results[i], Some(Ok(())), "{what}: node {i}");
        assert!(report.members[i].verified, "{what}: node {i}");
        let mut got: Vec<u64> = net.log.iter().filter(|e| e.0 == i).map(|e| e.2).collect();
        got.sort_unstable();
        let all: Vec<u64> = (0..net.segs.count()).collect();
        assert_eq!(got, all, "{what}: node {i} got each segment once");
    }
}

#[test]
fn a_node_that_dies_mid_transfer_is_cut_out_and_the_others_complete() {
    for shape in SHAPES {
        for (n, victim) in [(4usize, 1usize), (7, 1), (7, 2), (16, 3)] {
            let mut p = plan(n);
            p.die_after = Some((victim, 3));
            let mut net = Net::new(shape, p, 2000, 100);
            net.run(60 * SEC);
            assert_healed(&net, victim, "died", &format!("{shape} n={n}"));
        }
    }
}

#[test]
fn a_node_that_hangs_mid_transfer_is_cut_out_after_the_inactivity_timeout() {
    // Its connections stay open: only the sender's liveness check tells,
    // and its children are detached from it (Detach, Drop, Orphaned).
    for shape in [
        OverlayShape::Chain,
        OverlayShape::Bintree,
        OverlayShape::Pipeline,
    ] {
        let mut p = plan(7);
        p.die_after = Some((1, 3));
        p.quiet_death = true;
        let mut net = Net::new(shape, p, 2000, 100);
        net.run(60 * SEC);
        assert_healed(&net, 1, "went silent", &format!("{shape}"));
        assert!(net.sender.stats().reattached >= 1, "{shape}");
    }
}

#[test]
fn a_wedged_forwarder_is_cut_out_as_stalled_and_the_others_complete() {
    // Rank 2 stops taking data after 3 segments but keeps heartbeating:
    // nobody is silent. Its parents went on (the sender has everything),
    // so after half the stall timeout (4 s here) it is cut out and its
    // children are re-attached; nobody below it is blamed.
    for shape in [
        OverlayShape::Chain,
        OverlayShape::Bintree,
        OverlayShape::Pipeline,
    ] {
        for (n, victim) in [(7usize, 1usize), (7, 2), (16, 3)] {
            let mut p = plan(n);
            p.wedged = Some((victim, 3));
            let mut net = Net::new(shape, p, 2000, 100);
            net.run(60 * SEC);
            let what = format!("{shape} n={n} victim={victim}");
            assert_healed(&net, victim, "stalled", &what);
            let ended = net.now.saturating_since(Instant::ZERO);
            assert!(ended < 4 * SEC, "{what}: ended at {ended:?}");
        }
    }
}

#[test]
fn a_session_where_nothing_moves_ends_as_stalled_naming_who_is_behind() {
    // Store-and-forward children wait for their turn by design, so a
    // wedged tree node is caught by the session's stall timeout instead.
    let mut p = plan(4);
    p.wedged = Some((1, 3));
    let mut net = Net::new(OverlayShape::Tree { fanout: 1 }, p, 2000, 100);
    net.run(60 * SEC);
    let report = net.sender.report();
    let error = report.error.unwrap();
    assert!(error.contains("the transfer stalled"), "{error}");
    assert!(error.contains("\"node-3\""), "{error}");
    assert!(!report.members[1].verified);
}

#[test]
fn a_node_that_goes_silent_is_named_after_the_inactivity_timeout() {
    let mut p = plan(3);
    p.die_after = Some((2, 0));
    p.quiet_death = true;
    let mut net = Net::new(OverlayShape::Tree { fanout: 2 }, p, 1000, 100);
    net.run(60 * SEC);
    let error = net.sender.report().error.unwrap();
    assert!(
        error.contains("\"node-3\"") && error.contains("went silent"),
        "{error}"
    );
    assert!(net.now >= Instant::ZERO + 2 * SEC, "{:?}", net.now);
}

#[test]
fn too_few_receivers_fail_after_the_join_wait_naming_who_came() {
    let mut p = plan(1);
    p.wanted = 3;
    let mut net = Net::new(OverlayShape::Bintree, p, 10, 100);
    net.run(60 * SEC);
    let error = net.sender.report().error.unwrap();
    assert!(
        error.contains("only 1 of 3") && error.contains("node-1"),
        "{error}"
    );
    assert!(
        matches!(&net.results[0], Some(Err(NodeFailure::Failed(t))) if t.contains("only 1 of 3"))
    );
    assert!(net.now >= Instant::ZERO + 3 * SEC);
}

#[test]
fn connections_that_failed_authentication_are_counted_and_named_when_the_join_fails() {
    let mut p = plan(1);
    p.wanted = 2;
    let mut net = Net::new(OverlayShape::Chain, p, 10, 100);
    let outsider = SocketAddr::from(([10, 9, 9, 9], 4242));
    for _ in 0..AUTH_FAILURES_MAX + 3 {
        net.sender.handle_auth_failed(
            Instant::ZERO,
            outsider,
            "failed authentication — wrong group key?",
        );
    }
    // Nothing about the session changed: still joining, nobody extra.
    assert_eq!(net.sender.phase(), SenderPhase::Joining);
    assert_eq!(net.sender.registered(), 0);
    net.run(60 * SEC);
    let r = net.sender.report();
    let error = r.error.unwrap();
    assert!(
        error.contains("only 1 of 2")
            && error
                .contains("connection from 10.9.9.9:4242 failed authentication — wrong group key?"),
        "{error}"
    );
    assert_eq!(r.auth_failures.len(), AUTH_FAILURES_MAX);
    assert_eq!(net.sender.stats().auth_failed, AUTH_FAILURES_MAX as u64 + 3);
}

#[test]
fn a_refusing_receiver_is_named_and_nobody_starts() {
    let mut p = plan(3);
    p.refuse = Some(2);
    let mut net = Net::new(OverlayShape::Chain, p, 1000, 100);
    net.run(60 * SEC);
    let error = net.sender.report().error.unwrap();
    assert!(
        error.contains("\"node-3\"") && error.contains("refused"),
        "{error}"
    );
    assert!(matches!(net.results[2], Some(Err(NodeFailure::Refused(_)))));
    assert!(net.received.iter().all(|&r| r == 0));
}

/// A lone rank-2 node of a two-node chain, started, whose parent (rank 1)
/// sends all 10 segments of 100 bytes on one edge.
fn started_chain_node() -> NodeMachine {
    let mut node = lone_node();
    let t = Instant::ZERO;
    let a = rmcast_wire::overlay::Assignment {
        session: 1,
        rank: 2,
        receivers: 2,
        shape: OverlayShape::Chain,
        segment_size: 10,
        size: 100,
        name: "x".into(),
        inactivity_ms: 2000,
        parents: vec![rmcast_wire::overlay::Peer {
            rank: 1,
            name: "up".into(),
            addr: addr(1),
            segments: SegmentSet::All,
        }],
        children: vec![],
    };
    node.handle_msg(t, Msg::Assign(Box::new(a)));
    node.accept(t);
    node.handle_msg(t, Msg::Start);
    node
}

fn hello(from: Rank, segments: SegmentSet, first: u64) -> Msg {
    Msg::DataHello {
        session: 1,
        from,
        to: 2,
        segments,
        first,
    }
}

#[test]
fn a_broken_parent_edge_is_reported_and_resumed_where_it_broke() {
    let mut node = started_chain_node();
    let t = Instant::ZERO;
    assert!(
        node.handle_parent_hello(t, &hello(1, SegmentSet::Even, 0))
            .is_err(),
        "an edge the assignment does not have"
    );
    assert!(
        node.handle_parent_hello(t, &hello(1, SegmentSet::All, 1))
            .is_err(),
        "an assigned edge starts at its first segment"
    );
    assert_eq!(
        node.handle_parent_hello(t, &hello(1, SegmentSet::All, 0)),
        Ok(0)
    );
    assert!(
        node.handle_parent_hello(t, &hello(1, SegmentSet::All, 0))
            .is_err(),
        "a second connection"
    );
    for k in 0..3 {
        node.handle_segment(t, 0, k);
        node.handle_stored(t, k, 10);
    }
    let _ = std::iter::from_fn(|| node.poll_transmit()).count();
    node.handle_parent_failed(t, 0, "reset mid-transfer");
    assert_eq!(
        node.poll_transmit(),
        Some(Msg::Orphaned {
            from: 1,
            segments: SegmentSet::All,
            have: 3
        })
    );
    node.handle_timeout(t + SEC);
    assert_eq!(
        node.phase(),
        NodePhase::Receiving,
        "waits to be re-attached"
    );
    assert!(
        node.handle_parent_hello(t, &hello(1, SegmentSet::All, 0))
            .is_err(),
        "the parent that broke does not come back"
    );
    assert!(
        node.handle_parent_hello(t, &hello(0, SegmentSet::All, 2))
            .is_err(),
        "the sender must resume where the edge broke"
    );
    assert_eq!(
        node.handle_parent_hello(t, &hello(0, SegmentSet::All, 3)),
        Ok(0)
    );
    for k in 3..10 {
        node.handle_segment(t + SEC, 0, k);
        node.handle_stored(t + SEC, k, 10);
    }
    assert!(
        matches!(node.poll_data(), Some(DataOp::Verify { .. }))
            || node.phase() == NodePhase::Verifying
    );
    node.handle_msg(
        t + SEC,
        Msg::Hash {
            hash: HASH,
            signature: None,
        },
    );
    let _ = std::iter::from_fn(|| node.poll_data()).count();
    node.handle_verified(t + SEC, Ok(()));
    assert_eq!(node.result(), Some(&Ok(())));
}

#[test]
fn an_orphaned_edge_nobody_re_attaches_fails_naming_the_parent() {
    let mut node = started_chain_node();
    let t = Instant::ZERO;
    assert_eq!(
        node.handle_parent_hello(t, &hello(1, SegmentSet::All, 0)),
        Ok(0)
    );
    node.handle_parent_failed(t, 0, "reset mid-transfer");
    let mut at = t;
    while node.result().is_none() {
        at = node.poll_timeout().unwrap();
        node.handle_msg(at, Msg::Heartbeat);
        node.handle_timeout(at);
    }
    match node.result() {
        Some(Err(NodeFailure::Failed(why))) => assert!(
            why.contains("\"up\"") && why.contains("did not re-attach"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(at >= t + 2 * SEC, "{at:?}");
}

#[test]
fn a_detached_parent_is_dropped_then_reported() {
    let mut node = started_chain_node();
    let t = Instant::ZERO;
    assert_eq!(
        node.handle_parent_hello(t, &hello(1, SegmentSet::All, 0)),
        Ok(0)
    );
    node.handle_segment(t, 0, 0);
    let _ = std::iter::from_fn(|| node.poll_transmit()).count();
    node.handle_msg(t, Msg::Detach { rank: 7 });
    assert_eq!(node.poll_data(), None, "not a parent");
    assert!(!node.parent_dropping(0));
    node.handle_msg(t, Msg::Detach { rank: 1 });
    assert_eq!(node.poll_data(), Some(DataOp::Drop { parent: 0 }));
    assert!(node.parent_dropping(0), "the driver closes the connection");
    assert!(
        !std::iter::from_fn(|| node.poll_transmit()).any(|m| matches!(m, Msg::Orphaned { .. })),
        "not before its reader is gone"
    );
    node.handle_parent_failed(t, 0, "was dropped");
    // Its reader reported it (here, before the driver got to the drop):
    // the Orphaned goes out, the sender may re-attach at once, and a drop
    // carried out late must not close the re-attached connection.
    assert!(!node.parent_dropping(0), "a late drop closes nothing");
    let orphaned: Vec<Msg> = std::iter::from_fn(|| node.poll_transmit())
        .filter(|m| matches!(m, Msg::Orphaned { .. }))
        .collect();
    assert_eq!(
        orphaned,
        [Msg::Orphaned {
            from: 1,
            segments: SegmentSet::All,
            have: 1
        }]
    );
    // A second Detach (or a late reset) changes nothing.
    node.handle_msg(t, Msg::Detach { rank: 1 });
    node.handle_parent_failed(t, 0, "was reset");
    assert_eq!(node.poll_data(), None);
}

#[test]
fn the_sender_re_attaches_only_edges_of_the_overlay() {
    let mut net = Net::new(OverlayShape::Chain, plan(3), 1000, 100);
    // Up to Start: every node connected, nothing fed yet.
    while net.sender.phase() != SenderPhase::Sending {
        net.pump();
        net.now = net.now + Duration::from_millis(1);
        net.sender.handle_timeout(net.now);
    }
    let before = net.sender.stats();
    let t = net.now;
    // Rank 3's only edge is All from rank 2; Even is no edge of it, and
    // more segments than the object has are nonsense.
    for msg in [
        Msg::Orphaned {
            from: 2,
            segments: SegmentSet::Even,
            have: 0,
        },
        Msg::Orphaned {
            from: 2,
            segments: SegmentSet::All,
            have: 11,
        },
    ] {
        net.sender.handle_msg(t, 3, msg);
    }
    assert_eq!(net.sender.stats().malformed, before.malformed + 2);
    assert_eq!(net.sender.stats().reattached, 0);
    net.sender.handle_msg(
        t,
        3,
        Msg::Orphaned {
            from: 2,
            segments: SegmentSet::All,
            have: 4,
        },
    );
    let ops: Vec<DataOp> = std::iter::from_fn(|| net.sender.poll_data())
        .filter(|op| {
            matches!(
                op,
                DataOp::Connect { child: 3, .. } | DataOp::Feed { child: 3, .. }
            )
        })
        .collect();
    assert_eq!(ops.len(), 2, "{ops:?}");
    assert!(matches!(
        &ops[0],
        DataOp::Connect {
            hello: Msg::DataHello {
                from: 0,
                first: 4,
                ..
            },
            ..
        }
    ));
    assert!(matches!(ops[1], DataOp::Feed { first: 4, .. }));
    assert_eq!(net.sender.stats().reattached, 1);
}

#[test]
fn an_invalid_assignment_fails_the_receiver() {
    let mut node = lone_node();
    let a = rmcast_wire::overlay::Assignment {
        session: 1,
        rank: 5,
        receivers: 2,
        shape: OverlayShape::Chain,
        segment_size: 10,
        size: 100,
        name: "x".into(),
        inactivity_ms: 2000,
        parents: vec![],
        children: vec![],
    };
    node.handle_msg(Instant::ZERO, Msg::Assign(Box::new(a)));
    assert!(matches!(node.result(), Some(Err(NodeFailure::Failed(t))) if t.contains("invalid")));
}

#[test]
fn accepting_an_assignment_leaves_ready_to_poll_before_the_driver_sleeps() {
    let mut node = lone_node();
    assert!(matches!(node.poll_transmit(), Some(Msg::Register { .. })));
    assert!(!node.has_output());
    let a = rmcast_wire::overlay::Assignment {
        session: 1,
        rank: 1,
        receivers: 1,
        shape: OverlayShape::Chain,
        segment_size: 10,
        size: 100,
        name: "x".into(),
        inactivity_ms: 2000,
        parents: vec![rmcast_wire::overlay::Peer {
            rank: 0,
            name: "s".into(),
            addr: addr(0),
            segments: SegmentSet::All,
        }],
        children: vec![],
    };
    node.handle_msg(Instant::ZERO, Msg::Assign(Box::new(a)));
    assert!(matches!(node.poll_event(), Some(NodeEvent::Assigned(_))));
    assert!(!node.has_output());
    // The driver prepared storage while handling the event: what that
    // queued must make it poll again rather than sleep until the next
    // deadline (which once cost every session ~100 ms before Start).
    node.accept(Instant::ZERO);
    assert!(node.has_output());
    assert!(matches!(node.poll_transmit(), Some(Msg::Ready { .. })));
    assert!(!node.has_output());
}

#[test]
fn the_sender_sends_heartbeats_and_a_silent_sender_fails_the_node() {
    let mut node = lone_node();
    let mut t = Instant::ZERO;
    while node.result().is_none() {
        t = node.poll_timeout().unwrap();
        node.handle_timeout(t);
    }
    assert_eq!(t, Instant::ZERO + 2 * SEC);
    assert!(
        matches!(node.result(), Some(Err(NodeFailure::Failed(s))) if s.contains("went silent"))
    );
    // It said Progress every 200 ms meanwhile.
    let progress = std::iter::from_fn(|| node.poll_transmit())
        .filter(|m| matches!(m, Msg::Progress { .. }))
        .count();
    assert!(progress >= 9, "{progress}");
}

#[test]
fn segments_cover_the_object_exactly() {
    for (size, seg) in [(0u64, 8u32), (1, 8), (8, 8), (9, 8), (17, 8), (100, 1)] {
        let s = Segments::new(size, seg);
        let total: u64 = (0..s.count()).map(|k| s.len(k) as u64).sum();
        assert_eq!(total, size);
        assert!((0..s.count()).all(|k| s.len(k) > 0));
        let halves = s.set_bytes(SegmentSet::Even) + s.set_bytes(SegmentSet::Odd);
        assert_eq!(halves, s.set_bytes(SegmentSet::All));
    }
}

/// A lone rank-2 node of a pipeline, started, with edges both ways to
/// ranks 1 and 3: even segments from 1 and odd ones to 1 (rank 1 opens
/// that connection), odd segments from 3 and even ones to 3 (this node
/// opens that one).
fn started_duplex_node() -> NodeMachine {
    let mut node = lone_node();
    let t = Instant::ZERO;
    let peer = |rank: Rank, segments| rmcast_wire::overlay::Peer {
        rank,
        name: format!("node-{rank}"),
        addr: addr(usize::from(rank)),
        segments,
    };
    let a = rmcast_wire::overlay::Assignment {
        session: 1,
        rank: 2,
        receivers: 3,
        shape: OverlayShape::Pipeline,
        segment_size: 10,
        size: 100,
        name: "x".into(),
        inactivity_ms: 2000,
        parents: vec![peer(1, SegmentSet::Even), peer(3, SegmentSet::Odd)],
        children: vec![peer(1, SegmentSet::Odd), peer(3, SegmentSet::Even)],
    };
    node.handle_msg(t, Msg::Assign(Box::new(a)));
    node.accept(t);
    node.handle_msg(t, Msg::Start);
    node
}

#[test]
fn an_edge_to_a_peer_and_one_from_it_share_a_connection_opened_by_the_lower_rank() {
    let mut node = started_duplex_node();
    let t = Instant::ZERO;
    // Only the connection to rank 3 is opened here, and rank 3's edge
    // comes back on it.
    let ops: Vec<DataOp> = std::iter::from_fn(|| node.poll_data()).collect();
    assert!(
        matches!(
            ops[..],
            [DataOp::Connect {
                child: 3,
                segments: SegmentSet::Even,
                back: Some(1),
                ..
            }]
        ),
        "{ops:?}"
    );
    // Rank 1 opens its connection: the odd segments go back on it.
    assert_eq!(
        node.handle_parent_hello(t, &hello(1, SegmentSet::Even, 0)),
        Ok(0)
    );
    assert_eq!(
        node.poll_data(),
        Some(DataOp::WriteBack {
            parent: 0,
            child: 0,
            hello: Msg::DataHello {
                session: 1,
                from: 2,
                to: 1,
                segments: SegmentSet::Odd,
                first: 0,
            },
        })
    );
    // Rank 3's edge comes back on this node's connection, introduced as
    // any other.
    assert_eq!(
        node.handle_parent_hello(t, &hello(3, SegmentSet::Odd, 0)),
        Ok(1)
    );
    assert_eq!(node.poll_data(), None, "nothing more to open");
}

#[test]
fn a_connection_that_fails_breaks_the_edge_that_was_to_come_back_on_it() {
    let mut node = started_duplex_node();
    let t = Instant::ZERO;
    let _ = std::iter::from_fn(|| node.poll_data()).count();
    let _ = std::iter::from_fn(|| node.poll_transmit()).count();
    // The connection to rank 3 is refused: rank 3's edge back is orphaned
    // at once, not after the inactivity timeout.
    node.handle_child_done(t, 1, Err("connection refused".into()));
    assert_eq!(
        node.poll_transmit(),
        Some(Msg::Orphaned {
            from: 3,
            segments: SegmentSet::Odd,
            have: 0
        })
    );
    // Rank 1 never connects: the sender detaches it; the edge that was to
    // go back to it is abandoned (its routed segments released) and done.
    node.handle_msg(t, Msg::Detach { rank: 1 });
    assert_eq!(node.poll_data(), Some(DataOp::Abandon { child: 0 }));
    assert_eq!(
        node.poll_transmit(),
        Some(Msg::Orphaned {
            from: 1,
            segments: SegmentSet::Even,
            have: 0
        })
    );
    // The sender re-attaches both edges; once everything arrived and
    // verified, the node finishes without waiting for either child edge
    // back to a lost peer.
    for (from, set, pi) in [(0, SegmentSet::Even, 0), (0, SegmentSet::Odd, 1)] {
        assert_eq!(node.handle_parent_hello(t, &hello(from, set, 0)), Ok(pi));
    }
    for k in 0..10 {
        let route = node.handle_segment(t, (k % 2) as usize, k);
        // Even segments still go to rank 3's edge, whose writer failed:
        // the driver drops them.
        assert!(route.len() <= 1);
        node.handle_stored(t, k, 10);
    }
    node.handle_msg(
        t,
        Msg::Hash {
            hash: [7; 32],
            signature: None,
        },
    );
    assert!(matches!(node.poll_data(), Some(DataOp::Verify { .. })));
    node.handle_verified(t, Ok(()));
    assert_eq!(node.phase(), NodePhase::Done, "{:?}", node.result());
    assert_eq!(node.result(), Some(&Ok(())));
}
