//! Behaviour of the sender and receiver machines against each other over an
//! ideal in-memory network (every datagram delivered after a fixed delay,
//! unless a test's drop rule says otherwise). The lossy, rate-limited
//! network lives in rmcast-sim; these tests pin protocol rules.

use rmcast_proto::{
    Dest, Instant, ObjectInfo, ProtocolId, Receiver, ReceiverConfig, ReceiverEvent, Repair, Sender,
    SenderConfig, SenderEvent, Seq, SessionId, Status, TreeShape,
};
use rmcast_wire::{Body, Kind, Packet};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

const DELAY: Duration = Duration::from_micros(50);

fn sender_addr() -> SocketAddr {
    "10.0.0.1:4000".parse().unwrap()
}

fn receiver_addr(k: usize) -> SocketAddr {
    format!("10.0.1.{}:5000", k + 1).parse().unwrap()
}

struct Node {
    machine: Receiver,
    data: Vec<u8>,
    delivered: Vec<bool>,
    refuse: bool,
    crashed: bool,
    events: Vec<ReceiverEvent>,
}

/// Decides whether to drop a datagram: (kind, bytes, receiver index or None for the sender).
type DropRule = Box<dyn FnMut(Kind, &[u8], Option<usize>) -> bool>;

/// Datagram in flight: (arrival, from, to (None = group), bytes).
type Flight = (Instant, SocketAddr, Option<SocketAddr>, Vec<u8>);

struct Net {
    now: Instant,
    sender: Sender,
    object: Vec<u8>,
    nodes: Vec<Node>,
    flights: VecDeque<Flight>,
    sender_events: Vec<SenderEvent>,
    drop_rule: DropRule,
    sent_kinds: Vec<Kind>,
}

fn object_bytes(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i * 7 + i / 251) as u8).collect()
}

impl Net {
    fn new(config: SenderConfig, receivers: usize, size: usize, isn: Seq) -> Net {
        let object = object_bytes(size);
        let info = ObjectInfo {
            size: size as u64,
            name: "obj.bin".into(),
            hash: Some(*blake3_stub(&object)),
        };
        let sender = Sender::new(config, SessionId(42), isn, info, Instant::ZERO).unwrap();
        let nodes = (0..receivers)
            .map(|k| Node {
                machine: Receiver::new(
                    ReceiverConfig {
                        receiver_id: 1000 + k as u64,
                        name: format!("r{k}"),
                        ..ReceiverConfig::default()
                    },
                    Instant::ZERO,
                ),
                data: Vec::new(),
                delivered: Vec::new(),
                refuse: false,
                crashed: false,
                events: Vec::new(),
            })
            .collect();
        Net {
            now: Instant::ZERO,
            sender,
            object,
            nodes,
            flights: VecDeque::new(),
            sender_events: Vec::new(),
            drop_rule: Box::new(|_, _, _| false),
            sent_kinds: Vec::new(),
        }
    }

    /// Drains transmits and events until neither yields anything (an event
    /// handler may call a mutator that owes a transmit).
    fn flush(&mut self) {
        for _ in 0..4 {
            self.flush_once();
        }
    }

    fn flush_once(&mut self) {
        let mut buf = vec![0u8; rmcast_proto::MAX_DATAGRAM];
        while let Some(t) = self
            .sender
            .poll_transmit(self.now, &self.object[..], &mut buf)
        {
            self.sent_kinds.push(t.kind);
            let to = match t.dest {
                Dest::Group => None,
                Dest::Unicast(a) => Some(a),
            };
            self.flights
                .push_back((self.now + DELAY, sender_addr(), to, buf[..t.len].to_vec()));
        }
        while let Some(e) = self.sender.poll_event() {
            self.sender_events.push(e);
        }
        for k in 0..self.nodes.len() {
            if self.nodes[k].crashed {
                continue;
            }
            while let Some(t) = self.nodes[k].machine.poll_transmit(self.now, &mut buf) {
                let Dest::Unicast(to) = t.dest else {
                    panic!("receivers only unicast")
                };
                self.flights.push_back((
                    self.now + DELAY,
                    receiver_addr(k),
                    Some(to),
                    buf[..t.len].to_vec(),
                ));
            }
            while let Some(e) = self.nodes[k].machine.poll_event() {
                let node = &mut self.nodes[k];
                match &e {
                    ReceiverEvent::Offer(o) => {
                        if node.refuse {
                            node.machine.refuse_offer(Status::NoSpace, "disk full");
                        } else {
                            node.data = vec![0; o.size as usize];
                            node.delivered = vec![false; o.size as usize];
                            node.machine.accept_offer();
                        }
                    }
                    ReceiverEvent::AllData => {
                        let hash = *blake3_stub(&node.data);
                        let ok = node.machine.expected_hash() == Some(hash);
                        let status = if ok { Status::Ok } else { Status::HashMismatch };
                        node.machine.confirm(status, hash, "");
                    }
                    _ => {}
                }
                node.events.push(e);
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let mut t = self.sender.poll_timeout();
        for n in self.nodes.iter().filter(|n| !n.crashed) {
            if let Some(d) = n.machine.poll_timeout() {
                t = Some(t.map_or(d, |x| x.min(d)));
            }
        }
        if let Some(f) = self.flights.front() {
            t = Some(t.map_or(f.0, |x| x.min(f.0)));
        }
        t
    }

    /// Runs until the sender finishes or `limit` of simulated time passes.
    fn run(&mut self, limit: Duration) {
        self.run_to(limit, |_| false);
        // Let the receivers hear the Byes.
        while let Some((_, from, to, bytes)) = self.flights.pop_front() {
            self.deliver(from, to, &bytes);
        }
        self.flush();
    }

    /// Runs until the sender finishes, `stop` says so, or `limit` of
    /// simulated time passes.
    fn run_to(&mut self, limit: Duration, mut stop: impl FnMut(&mut Net) -> bool) {
        let end = Instant::ZERO + limit;
        self.flush();
        while !self.sender.is_finished() && !stop(self) {
            let Some(t) = self.next_deadline() else { break };
            assert!(
                t <= end,
                "run did not finish within {limit:?}: next deadline {t:?}, sender {:?} {:?}",
                self.sender.poll_timeout(),
                self.sender.stats()
            );
            self.now = self.now.max(t);
            while self.flights.front().is_some_and(|f| f.0 <= self.now) {
                let (_, from, to, bytes) = self.flights.pop_front().unwrap();
                self.deliver(from, to, &bytes);
            }
            if self.sender.poll_timeout().is_some_and(|d| d <= self.now) {
                self.sender.handle_timeout(self.now);
            }
            for n in self.nodes.iter_mut().filter(|n| !n.crashed) {
                if n.machine.poll_timeout().is_some_and(|d| d <= self.now) {
                    n.machine.handle_timeout(self.now);
                }
            }
            self.flush();
        }
    }

    fn deliver(&mut self, from: SocketAddr, to: Option<SocketAddr>, bytes: &[u8]) {
        let kind = rmcast_wire::peek_header(bytes).unwrap().0;
        if to == Some(sender_addr()) {
            if !(self.drop_rule)(kind, bytes, None) {
                self.sender
                    .handle_datagram(self.now, from, &mut bytes.to_vec());
            }
            return;
        }
        for k in 0..self.nodes.len() {
            if to.is_some_and(|a| a != receiver_addr(k)) || self.nodes[k].crashed {
                continue;
            }
            if (self.drop_rule)(kind, bytes, Some(k)) {
                continue;
            }
            let now = self.now;
            let node = &mut self.nodes[k];
            let mut copy = bytes.to_vec();
            if let Some(chunk) = node.machine.handle_datagram(now, from, &mut copy) {
                let start = chunk.offset as usize;
                for i in start..start + chunk.bytes.len() {
                    assert!(!node.delivered[i], "byte {i} delivered twice to r{k}");
                    node.delivered[i] = true;
                }
                node.data[start..start + chunk.bytes.len()].copy_from_slice(chunk.bytes);
            }
        }
    }

    fn assert_all_verified(&self) {
        let outcome = self.sender.outcome().expect("finished");
        assert!(outcome.ok, "outcome not ok: {outcome:?}");
        assert_eq!(outcome.verified(), self.nodes.len());
        for (k, n) in self.nodes.iter().enumerate() {
            assert_eq!(n.data, self.object, "r{k} holds different bytes");
            assert!(
                n.events.contains(&ReceiverEvent::Finished),
                "r{k} did not finish: {:?}",
                n.events
            );
        }
    }
}

/// A stand-in digest (the engine never hashes; it compares what drivers say).
fn blake3_stub(data: &[u8]) -> Box<[u8; 32]> {
    let mut h = [0u8; 32];
    for (i, b) in data.iter().enumerate() {
        let j = i % 32;
        h[j] = h[j].wrapping_mul(31).wrapping_add(*b ^ (i / 32) as u8);
    }
    h[0] ^= data.len() as u8;
    Box::new(h)
}

fn config(protocol: ProtocolId, receivers: u16) -> SenderConfig {
    SenderConfig {
        protocol,
        receivers,
        packet_size: 124, // 100-byte payloads keep objects small
        window: 16,
        peer_timeout: Duration::from_millis(500),
        ..SenderConfig::default()
    }
}

/// Every protocol variant, for tests that must hold for all of them.
fn every_protocol(receivers: u16) -> Vec<(String, SenderConfig)> {
    let mut out = Vec::new();
    for repair in [Repair::Selective, Repair::GoBackN] {
        let variants = [
            ("ack", ProtocolId::Ack, 1, TreeShape::Flat),
            ("nak-poll", ProtocolId::NakPoll, 1, TreeShape::Flat),
            ("ring", ProtocolId::Ring, 1, TreeShape::Flat),
            ("tree-h1", ProtocolId::Tree, 1, TreeShape::Flat),
            ("tree-h2", ProtocolId::Tree, 2, TreeShape::Flat),
            ("tree-hN", ProtocolId::Tree, receivers, TreeShape::Flat),
            ("tree-binary", ProtocolId::Tree, 1, TreeShape::Binary),
        ];
        for (name, protocol, height, shape) in variants {
            let mut c = config(protocol, receivers);
            c.repair = repair;
            c.tree_height = height;
            c.tree_shape = shape;
            out.push((format!("{name}/{repair:?}"), c));
        }
    }
    out
}

#[test]
fn every_protocol_delivers_every_size_exactly_once() {
    for (name, cfg) in every_protocol(3) {
        for size in [0, 1, 99, 100, 101, 1599, 1600, 1601, 10_000] {
            let mut net = Net::new(cfg.clone(), 3, size, Seq(7));
            net.run(Duration::from_secs(5));
            net.assert_all_verified();
            let _ = &name;
        }
    }
}

#[test]
fn every_protocol_repairs_random_loss() {
    for (name, cfg) in every_protocol(5) {
        let mut net = Net::new(cfg, 5, 100 * 300, Seq(u32::MAX - 100));
        let mut x = 0x2545_f491_4f6c_dd1du64;
        net.drop_rule = Box::new(move |_, _, _| {
            // xorshift: 5 % of every datagram, data and feedback alike
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % 100 < 5
        });
        net.run(Duration::from_secs(30));
        let outcome = net.sender.outcome().unwrap();
        assert!(outcome.ok, "{name}: {outcome:?}");
        for n in &net.nodes {
            assert_eq!(n.data, net.object, "{name}");
        }
    }
}

#[test]
fn ring_receivers_take_turns_acknowledging() {
    let mut cfg = config(ProtocolId::Ring, 4);
    cfg.window = 16;
    let mut net = Net::new(cfg, 4, 100 * 200, Seq(0));
    net.run(Duration::from_secs(5));
    net.assert_all_verified();
    let s = net.sender.stats();
    // One ack per data packet, and every receiver acks the last one.
    assert_eq!(s.acks, 199 + 4);
    for n in &net.nodes {
        let acks = n.machine.stats().acks;
        assert!((49..=51).contains(&acks), "each receiver acks ~1/N: {acks}");
    }
}

#[test]
fn tree_of_height_one_behaves_like_the_ack_protocol() {
    let run = |protocol| {
        let mut cfg = config(protocol, 4);
        cfg.tree_height = 1;
        let mut net = Net::new(cfg, 4, 100 * 200, Seq(0));
        net.run(Duration::from_secs(5));
        net.assert_all_verified();
        let s = net.sender.stats().clone();
        (s.acks, s.data_packets, s.retransmitted_packets)
    };
    assert_eq!(run(ProtocolId::Tree), run(ProtocolId::Ack));
}

#[test]
fn flat_tree_sender_hears_only_the_chain_heads() {
    let mut cfg = config(ProtocolId::Tree, 7);
    cfg.tree_height = 3; // chains 0-1-2, 3-4-5, 6
    let mut net = Net::new(cfg, 7, 100 * 200, Seq(0));
    net.run(Duration::from_secs(5));
    net.assert_all_verified();
    // One aggregated ack per head per packet, and every receiver acks every
    // packet once; a few coalesce when a child's advance and the node's own
    // arrive between two transmit opportunities (tolerance 5 %).
    let s = net.sender.stats();
    assert!(
        (570..=600).contains(&s.acks),
        "sender heard {} acks",
        s.acks
    );
    let relayed: u64 = net.nodes.iter().map(|n| n.machine.stats().acks).sum();
    assert!(
        (1330..=1400).contains(&relayed),
        "receivers sent {relayed} acks"
    );
}

#[test]
fn binary_tree_delivers_with_relayed_acks() {
    let mut cfg = config(ProtocolId::Tree, 7);
    cfg.tree_shape = TreeShape::Binary;
    let mut net = Net::new(cfg, 7, 100 * 200, Seq(0));
    net.run(Duration::from_secs(5));
    net.assert_all_verified();
    // Only roots 0 and 1 report to the sender, about once per packet each.
    let acks = net.sender.stats().acks;
    assert!((380..=400).contains(&acks), "sender heard {acks} acks");
}

#[test]
fn a_crashed_relay_in_a_chain_is_named_and_the_rest_finish() {
    let mut cfg = config(ProtocolId::Tree, 6);
    cfg.tree_height = 3; // chains 0-1-2, 3-4-5: crash 1, the middle of the first
    let mut net = Net::new(cfg, 6, 100 * 1000, Seq(0));
    net.flush();
    while net.nodes[1].machine.received_bytes() < 1000 {
        let t = net.next_deadline().unwrap();
        net.now = net.now.max(t);
        while net.flights.front().is_some_and(|f| f.0 <= net.now) {
            let (_, from, to, bytes) = net.flights.pop_front().unwrap();
            net.deliver(from, to, &bytes);
        }
        net.flush();
    }
    net.nodes[1].crashed = true;
    net.run(Duration::from_secs(20));
    let outcome = net.sender.outcome().unwrap();
    assert!(!outcome.ok);
    let failed: Vec<&str> = outcome
        .members
        .iter()
        .filter(|m| !m.verified)
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(failed, vec!["r1"], "{outcome:?}");
}

#[test]
fn a_packet_one_receiver_lacks_is_repaired_by_unicast_to_it() {
    let mut net = Net::new(config(ProtocolId::NakPoll, 3), 3, 100 * 50, Seq(0));
    net.drop_rule = Box::new(|kind, bytes, to| {
        kind == Kind::Data
            && to == Some(2)
            && matches!(Packet::decode(bytes), Ok(Packet { body: Body::Data(d), .. }) if d.seq == Seq(10))
            && matches!(Packet::decode(bytes), Ok(Packet { header, .. }) if header.rank == rmcast_wire::RANK_SENDER)
    });
    // Drop only the first copy: afterwards the rule sees a unicast.
    let mut dropped = false;
    let mut inner = std::mem::replace(&mut net.drop_rule, Box::new(|_, _, _| false));
    net.drop_rule = Box::new(move |k, b, to| {
        if !dropped && inner(k, b, to) {
            dropped = true;
            return true;
        }
        false
    });
    net.run(Duration::from_secs(5));
    net.assert_all_verified();
    let s = net.sender.stats();
    assert_eq!((s.unicast_repairs, s.multicast_repairs), (1, 0), "{s:?}");
    assert_eq!(s.retransmitted_packets, 1);
}

#[test]
fn a_packet_several_receivers_lack_is_repaired_once_by_multicast() {
    let mut net = Net::new(config(ProtocolId::NakPoll, 3), 3, 100 * 50, Seq(0));
    let mut drops = 0;
    net.drop_rule = Box::new(move |kind, bytes, to| {
        let hit = kind == Kind::Data
            && to.is_some_and(|k| k >= 1)
            && matches!(Packet::decode(bytes), Ok(Packet { body: Body::Data(d), .. }) if d.seq == Seq(10));
        if hit && drops < 2 {
            drops += 1;
            return true;
        }
        false
    });
    net.run(Duration::from_secs(5));
    net.assert_all_verified();
    let s = net.sender.stats();
    assert_eq!((s.unicast_repairs, s.multicast_repairs), (0, 1), "{s:?}");
    assert_eq!(s.retransmitted_packets, 1);
}

#[test]
fn sequence_numbers_wrap_past_two_to_the_32() {
    for protocol in [ProtocolId::Ack, ProtocolId::NakPoll] {
        let mut net = Net::new(config(protocol, 2), 2, 5_000, Seq(u32::MAX - 20));
        net.run(Duration::from_secs(5));
        net.assert_all_verified();
    }
}

#[test]
fn ack_protocol_sends_one_ack_per_receiver_per_data_packet() {
    let mut net = Net::new(config(ProtocolId::Ack, 4), 4, 100 * 200, Seq(0));
    net.run(Duration::from_secs(5));
    net.assert_all_verified();
    let s = net.sender.stats();
    assert_eq!(s.data_packets, 200);
    assert_eq!(s.retransmitted_packets, 0);
    assert_eq!(s.acks, 4 * 200);
}

#[test]
fn nak_poll_acks_only_polled_packets() {
    let mut cfg = config(ProtocolId::NakPoll, 4);
    cfg.poll_interval = Some(10);
    let mut net = Net::new(cfg, 4, 100 * 200, Seq(0));
    net.run(Duration::from_secs(5));
    net.assert_all_verified();
    let s = net.sender.stats();
    assert_eq!(s.data_packets, 200);
    // Polls at packets 9, 19, ..., 199: 20 polls, 4 answers each.
    assert_eq!(s.acks, 4 * 20);
    assert_eq!(s.naks, 0);
}

#[test]
fn nak_on_gap_repairs_a_lost_packet_before_the_timeout() {
    for protocol in [ProtocolId::Ack, ProtocolId::NakPoll] {
        let mut cfg = config(protocol, 2);
        cfg.rto = Duration::from_secs(1); // a timeout would show in the elapsed time
        cfg.rto_max = Duration::from_secs(1);
        let mut net = Net::new(cfg, 2, 100 * 50, Seq(0));
        let mut dropped = false;
        net.drop_rule = Box::new(move |kind, bytes, to| {
            if kind == Kind::Data
                && to == Some(1)
                && !dropped
                && let Ok(Packet {
                    body: Body::Data(d),
                    ..
                }) = Packet::decode(bytes)
                && d.seq == Seq(5)
            {
                dropped = true;
                return true;
            }
            false
        });
        net.run(Duration::from_secs(5));
        net.assert_all_verified();
        let s = net.sender.stats();
        assert!(s.naks >= 1, "{protocol:?}: no NAK");
        assert!(s.retransmitted_packets >= 1);
        assert_eq!(
            s.timeouts, 0,
            "{protocol:?}: repaired by timeout, not by NAK"
        );
    }
}

/// A lost answer is asked for again by unicast once the others' have come
/// (a re-poll), or else by the retransmission timer's stall poll.
#[test]
fn lost_poll_answers_are_recovered_by_a_re_poll_or_the_retransmission_timer() {
    let mut cfg = config(ProtocolId::NakPoll, 2);
    cfg.poll_interval = Some(8);
    let mut net = Net::new(cfg, 2, 100 * 40, Seq(0));
    let mut acks_seen = 0;
    net.drop_rule = Box::new(move |kind, _, to| {
        if kind == Kind::Ack && to.is_none() {
            acks_seen += 1;
            return acks_seen <= 3; // the first few answers vanish
        }
        false
    });
    net.run(Duration::from_secs(10));
    net.assert_all_verified();
    let s = net.sender.stats();
    assert!(s.timeouts + s.repolls >= 1, "{s:?}");
}

#[test]
fn sender_never_holds_more_than_the_window() {
    let mut cfg = config(ProtocolId::NakPoll, 3);
    cfg.window = 8;
    let mut net = Net::new(cfg, 3, 100 * 100, Seq(0));
    net.flush();
    let mut max_outstanding = 0;
    while !net.sender.is_finished() {
        let t = net.next_deadline().unwrap();
        net.now = net.now.max(t);
        while net.flights.front().is_some_and(|f| f.0 <= net.now) {
            let (_, from, to, bytes) = net.flights.pop_front().unwrap();
            net.deliver(from, to, &bytes);
        }
        if net.sender.poll_timeout().is_some_and(|d| d <= net.now) {
            net.sender.handle_timeout(net.now);
        }
        net.flush();
        max_outstanding = max_outstanding.max(net.sender.outstanding());
    }
    assert!(
        max_outstanding <= 8,
        "outstanding {max_outstanding} > window 8"
    );
    assert_eq!(
        max_outstanding, 8,
        "the window should fill on a fast network"
    );
}

#[test]
fn too_few_receivers_fail_with_a_count_after_the_wait() {
    let mut cfg = config(ProtocolId::Ack, 3);
    cfg.join_wait = Duration::from_secs(2);
    let mut net = Net::new(cfg, 2, 1000, Seq(0));
    net.run(Duration::from_secs(5));
    let outcome = net.sender.outcome().unwrap();
    assert!(!outcome.ok);
    let err = outcome.error.as_deref().unwrap();
    assert!(err.contains("only 2 of 3 receivers"), "{err}");
    assert!(err.contains("r0") && err.contains("r1"), "{err}");
    // Receivers that joined hear the aborting Bye and fail rather than hang.
    for n in &net.nodes {
        assert!(
            n.events
                .iter()
                .any(|e| matches!(e, ReceiverEvent::Failed(_))),
            "{:?}",
            n.events
        );
    }
}

#[test]
fn ranks_follow_registration_order_and_joins_are_idempotent() {
    let mut net = Net::new(config(ProtocolId::Ack, 3), 3, 10, Seq(0));
    net.run(Duration::from_secs(5));
    net.assert_all_verified();
    for (k, n) in net.nodes.iter().enumerate() {
        assert_eq!(n.machine.rank(), Some(k as u16));
    }
    let joined: Vec<u16> = net
        .sender_events
        .iter()
        .filter_map(|e| match e {
            SenderEvent::Joined { rank, .. } => Some(*rank),
            _ => None,
        })
        .collect();
    assert_eq!(joined, vec![0, 1, 2]);
}

#[test]
fn a_fourth_receiver_is_told_the_session_is_full() {
    let mut net = Net::new(config(ProtocolId::Ack, 3), 4, 10, Seq(0));
    net.run(Duration::from_secs(5));
    let full = &net.nodes[3].events;
    assert!(
        full.iter()
            .any(|e| matches!(e, ReceiverEvent::Failed(why) if why.contains("full"))),
        "{full:?}"
    );
    assert!(net.sender.outcome().unwrap().ok);
}

#[test]
fn a_refusing_receiver_fails_alone_with_its_reason() {
    let mut net = Net::new(config(ProtocolId::NakPoll, 3), 3, 5000, Seq(0));
    net.nodes[1].refuse = true;
    net.run(Duration::from_secs(5));
    let outcome = net.sender.outcome().unwrap();
    assert!(!outcome.ok);
    assert_eq!(outcome.verified(), 2);
    let why = outcome.members[1].reason.as_deref().unwrap();
    assert!(
        why.contains("refused") && why.contains("disk full"),
        "{why}"
    );
}

#[test]
fn a_crashed_receiver_is_removed_after_the_peer_timeout() {
    // Whatever the laggard policy: a silent receiver is no laggard (once
    // `after` is past a quarter of the peer timeout, 125 ms here).
    let tcp = rmcast_proto::Laggard::Tcp {
        after: Duration::from_millis(200),
        port: 7702,
    };
    for (protocol, laggard) in [
        (ProtocolId::Ack, rmcast_proto::Laggard::Wait),
        (ProtocolId::NakPoll, rmcast_proto::Laggard::Wait),
        (ProtocolId::NakPoll, tcp),
    ] {
        let mut cfg = config(protocol, 3);
        cfg.laggard = laggard;
        let mut net = Net::new(cfg, 3, 100 * 1000, Seq(0));
        // Crash r2 as soon as it holds a few packets.
        net.flush();
        while net.nodes[2].machine.received_bytes() < 500 {
            let t = net.next_deadline().unwrap();
            net.now = net.now.max(t);
            while net.flights.front().is_some_and(|f| f.0 <= net.now) {
                let (_, from, to, bytes) = net.flights.pop_front().unwrap();
                net.deliver(from, to, &bytes);
            }
            net.flush();
        }
        net.nodes[2].crashed = true;
        let crash_at = net.now;
        net.run(Duration::from_secs(10));
        let outcome = net.sender.outcome().unwrap();
        assert!(!outcome.ok);
        assert_eq!(
            outcome.verified(),
            2,
            "{protocol:?} {laggard:?}: {outcome:?}"
        );
        let why = outcome.members[2].reason.as_deref().unwrap();
        assert!(why.contains("silent"), "{why}");
        assert_eq!(outcome.members[2].caught_up_from, None, "{laggard:?}");
        // peer timeout (0.5 s) plus at most two backed-off timeouts.
        let bound = Duration::from_millis(500) + 2 * SenderConfig::default().rto_max;
        assert!(
            net.now.saturating_since(crash_at) <= bound,
            "took {:?}",
            net.now.saturating_since(crash_at)
        );
    }
}

#[test]
fn foreign_and_malformed_datagrams_are_counted_and_ignored() {
    let mut net = Net::new(config(ProtocolId::Ack, 1), 1, 1000, Seq(0));
    net.run(Duration::from_secs(5));
    let foreign_session = {
        let mut buf = [0u8; 64];
        let p = Packet {
            header: rmcast_wire::Header::new(SessionId(7), rmcast_wire::RANK_SENDER),
            body: Body::Close(rmcast_wire::Close {
                hash: [0; 32],
                signature: None,
            }),
        };
        let n = p.encode(&mut buf).unwrap();
        buf[..n].to_vec()
    };
    let node = &mut net.nodes[0];
    let before = node.machine.stats().clone();
    let from = sender_addr();
    assert!(
        node.machine
            .handle_datagram(net.now, from, &mut b"GET / HTTP/1.1".to_vec())
            .is_none()
    );
    assert!(
        node.machine
            .handle_datagram(net.now, from, &mut [])
            .is_none()
    );
    assert!(
        node.machine
            .handle_datagram(net.now, from, &mut foreign_session.clone())
            .is_none()
    );
    let after = node.machine.stats();
    assert_eq!(after.malformed, before.malformed + 2);
    assert!(after.foreign > before.foreign);
    let s_before = net.sender.stats().clone();
    net.sender
        .handle_datagram(net.now, receiver_addr(0), &mut b"\x00\x01garbage".to_vec());
    net.sender
        .handle_datagram(net.now, receiver_addr(0), &mut foreign_session.clone());
    assert_eq!(net.sender.stats().malformed, s_before.malformed + 1);
    assert_eq!(net.sender.stats().foreign, s_before.foreign + 1);
}

#[test]
fn invalid_configurations_are_rejected_with_reasons() {
    let info = ObjectInfo {
        size: 10,
        name: "x".into(),
        hash: Some([0; 32]),
    };
    let bad =
        |c: SenderConfig| Sender::new(c, SessionId(1), Seq(0), info.clone(), Instant::ZERO).err();
    assert!(
        bad(SenderConfig {
            packet_size: 24,
            ..SenderConfig::default()
        })
        .is_some()
    );
    assert!(
        bad(SenderConfig {
            packet_size: 65_508,
            ..SenderConfig::default()
        })
        .is_some()
    );
    assert!(
        bad(SenderConfig {
            window: 0,
            ..SenderConfig::default()
        })
        .is_some()
    );
    assert!(
        bad(SenderConfig {
            receivers: 0,
            ..SenderConfig::default()
        })
        .is_some()
    );
    let e = bad(SenderConfig {
        protocol: ProtocolId::NakPoll,
        window: 10,
        poll_interval: Some(11),
        ..SenderConfig::default()
    })
    .unwrap();
    assert!(e.to_string().contains("poll interval 11"), "{e}");
    let e = bad(SenderConfig {
        protocol: ProtocolId::Ring,
        receivers: 8,
        window: 8,
        ..SenderConfig::default()
    })
    .unwrap();
    assert!(e.to_string().contains("--window 9"), "{e}");
    assert!(
        bad(SenderConfig {
            protocol: ProtocolId::Tree,
            tree_height: 0,
            ..SenderConfig::default()
        })
        .is_some()
    );
}

#[test]
fn a_leave_after_verifying_keeps_the_receiver_verified() {
    let mut net = Net::new(config(ProtocolId::Ack, 2), 2, 1000, Seq(0));
    net.run(Duration::from_secs(5));
    net.assert_all_verified();
    // A Leave arriving late (Ctrl-C during the Bye wait) changes nothing.
    let mut buf = [0u8; 64];
    let leave = Packet {
        header: rmcast_wire::Header::new(SessionId(42), 1),
        body: Body::Leave(rmcast_wire::Leave {
            text: "interrupted",
        }),
    };
    let n = leave.encode(&mut buf).unwrap();
    net.sender
        .handle_datagram(net.now, receiver_addr(1), &mut buf[..n]);
    assert!(net.sender.outcome().unwrap().ok);
    assert!(net.sender.poll_event().is_none());
}

impl Net {
    /// Runs until `done(sender)` holds (or the sender finishes).
    fn run_until(&mut self, limit: Duration, done: impl Fn(&Sender) -> bool) {
        let end = Instant::ZERO + limit;
        self.flush();
        while !self.sender.is_finished() && !done(&self.sender) {
            let t = self.next_deadline().expect("something to do");
            assert!(t <= end, "not reached within {limit:?}");
            self.now = self.now.max(t);
            while self.flights.front().is_some_and(|f| f.0 <= self.now) {
                let (_, from, to, bytes) = self.flights.pop_front().unwrap();
                self.deliver(from, to, &bytes);
            }
            if self.sender.poll_timeout().is_some_and(|d| d <= self.now) {
                self.sender.handle_timeout(self.now);
            }
            self.flush();
        }
    }
}

fn group_packet(session: u64, rank: u16, body: Body<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; 64];
    let header = rmcast_wire::Header::new(SessionId(session), rank);
    let n = Packet { header, body }.encode(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn hunt_sender_backs_off_on_another_sessions_rate_nak_only() {
    use rmcast_proto::{HuntParams, RateControl};
    use rmcast_wire::{RateNak, RateNakKind};
    let cfg = SenderConfig {
        rate_control: Some(RateControl::Hunt(HuntParams::thesis())),
        ..config(ProtocolId::NakPoll, 1)
    };
    let mut net = Net::new(cfg, 1, 100_000, Seq(1));
    net.run_until(Duration::from_secs(5), |s| s.stats().data_packets > 10);
    let before = net.sender.rate().unwrap().stats().backoffs;
    let spacing = net.sender.rate().unwrap().spacing();
    let nak = |session| {
        group_packet(
            session,
            0,
            Body::RateNak(RateNak {
                kind: RateNakKind::Exp,
                seq: Seq(5),
            }),
        )
    };
    // About our own stream: the unicast feedback covers it.
    net.sender
        .handle_datagram(net.now, receiver_addr(0), &mut nak(42));
    assert_eq!(net.sender.rate().unwrap().stats().backoffs, before);
    // About another sender's: the whole group backs off.
    net.sender
        .handle_datagram(net.now, receiver_addr(0), &mut nak(7));
    assert_eq!(net.sender.rate().unwrap().stats().backoffs, before + 1);
    assert!(net.sender.rate().unwrap().spacing() > spacing);
    assert_eq!(net.sender.stats().group_naks, 1);
    assert_eq!(net.sender.stats().foreign, 0);
}

#[test]
fn group_sender_adopts_the_leaders_rate_and_reports_its_own() {
    use rmcast_proto::{HuntParams, RateControl, RateGroupConfig};
    use rmcast_wire::{RateSync, RateSyncOp};
    let cfg = SenderConfig {
        rate_control: Some(RateControl::Hunt(HuntParams::adaptive())),
        rate_group: Some(RateGroupConfig::default()),
        ..config(ProtocolId::NakPoll, 1)
    };
    let mut net = Net::new(cfg, 1, 100_000, Seq(1));
    net.run_until(Duration::from_secs(5), |s| s.stats().data_packets > 10);
    assert!(net.sent_kinds.contains(&Kind::RateReport), "heartbeats");
    // Session 7 < 42 leads: its set is adopted.
    let set = group_packet(
        7,
        rmcast_wire::RANK_SENDER,
        Body::RateSync(RateSync {
            epoch: 3,
            op: RateSyncOp::Set {
                spacing_ns: 250_000,
                members: 2,
            },
        }),
    );
    net.sender
        .handle_datagram(net.now, "10.0.0.9:4000".parse().unwrap(), &mut set.clone());
    let c = net.sender.rate().unwrap();
    assert_eq!(c.spacing(), Duration::from_micros(250));
    assert_eq!(c.stats().resyncs, 1);
    assert_eq!(net.sender.rate_group().unwrap().applied_epoch(), 3);
    // It finishes, and says it leaves.
    net.run(Duration::from_secs(20));
    net.assert_all_verified();
    let reports = net
        .sent_kinds
        .iter()
        .filter(|k| **k == Kind::RateReport)
        .count();
    assert!(reports >= 2, "{reports}");
}

/// Seconds a one-receiver nak-poll transfer of `packets` full packets of
/// `packet_size` bytes takes, paced at `per_second` of them *on the wire*
/// (each costs its size plus 42 bytes of UDP, IPv4 and Ethernet headers, as
/// tc counts).
fn paced_transfer_seconds(packet_size: usize, per_second: u64, packets: usize) -> f64 {
    let mut cfg = config(ProtocolId::NakPoll, 1);
    cfg.packet_size = packet_size;
    cfg.window = 4096;
    let wire = (packet_size + rmcast_proto::WIRE_OVERHEAD_BYTES) as u64;
    cfg.rate_bits_per_s = Some(wire * 8 * per_second);
    let payload = packet_size - rmcast_wire::DATA_HEADER_LEN;
    let mut net = Net::new(cfg, 1, packets * payload, Seq(0));
    net.run(Duration::from_secs(10));
    net.assert_all_verified();
    net.now.saturating_since(Instant::ZERO).as_secs_f64()
}

#[test]
fn a_paced_sender_counts_each_datagram_as_the_wire_does() {
    // The first 65,000 bytes of tokens go at once (42 datagrams), the rest
    // at 1000/s: 1.958 s. Counting the payload alone would take 1.904 s.
    let t = paced_transfer_seconds(1472, 1000, 2000);
    assert!((1.95..1.99).contains(&t), "took {t:.3} s");
}

#[test]
fn a_paced_sender_with_large_datagrams_bursts_two_not_sixteen() {
    // The bucket holds two 50,000-byte packets (it used to hold 16: an
    // 800 kB burst at link speed), so two go at once and the other 198 at
    // the pace: 1.98 s (1.845 s with 16).
    let t = paced_transfer_seconds(50_000, 100, 200);
    assert!((1.975..2.02).contains(&t), "took {t:.3} s");
}

/// `receivers` under `--laggard tcp --laggard-after 100ms`, the last of
/// which takes one data packet in ten (it answers all the same): a laggard.
fn lagging_net(receivers: usize) -> Net {
    let mut cfg = config(ProtocolId::NakPoll, receivers as u16);
    cfg.laggard = rmcast_proto::Laggard::Tcp {
        after: Duration::from_millis(100),
        port: 7702,
    };
    cfg.rto_max = Duration::from_millis(200);
    let mut net = Net::new(cfg, receivers, 40_000, Seq(5));
    let (slow, mut n) = (receivers - 1, 0u64);
    net.drop_rule = Box::new(move |kind, _, to| {
        if kind == Kind::Data && to == Some(slow) {
            n += 1;
            return !n.is_multiple_of(10);
        }
        false
    });
    net
}

#[test]
fn a_laggard_moved_to_tcp_is_told_only_once_the_groups_data_is_out() {
    let mut net = lagging_net(3);
    net.run_to(Duration::from_secs(30), |net| {
        (net.nodes[2].events.iter()).any(|e| matches!(e, ReceiverEvent::Moved { .. }))
    });
    let moved = (net.sender_events.iter())
        .find_map(|e| match e {
            SenderEvent::Moved { rank, from, .. } => Some((*rank, *from)),
            _ => None,
        })
        .expect("the sender moved the laggard");
    let to = (net.nodes[2].events.iter())
        .find_map(|e| match e {
            ReceiverEvent::Moved { to, from } => Some((*to, *from)),
            _ => None,
        })
        .expect("r2 was told");
    assert_eq!(to.0, SocketAddr::new(sender_addr().ip(), 7702));
    assert!(to.1 < 40_000, "it held {} bytes", to.1);
    // Told only once the group's data is out: no data packet follows the
    // first Move, and the first Close comes with it.
    let first_move = (net.sent_kinds.iter())
        .position(|k| *k == Kind::Move)
        .expect("a Move went out");
    assert!(
        !net.sent_kinds[first_move..].contains(&Kind::Data),
        "data after the Move: {:?}",
        &net.sent_kinds[first_move..]
    );
    assert_eq!(net.sent_kinds.get(first_move + 1), Some(&Kind::Close));
    // The other two verified meanwhile; the session waits for the moved one.
    assert!(!net.sender.is_finished());
    for k in 0..2 {
        assert!(
            net.nodes[k].events.contains(&ReceiverEvent::AllData),
            "r{k} got every byte while r2 lagged"
        );
    }
    // The driver's catch-up ends well: both machines hear it.
    let now = net.now;
    net.sender.catch_up_done(now, moved.0, Ok(()));
    net.nodes[2].machine.catch_up_done(now, Ok(()));
    net.nodes[2].data = net.object.clone();
    net.run(Duration::from_secs(40));
    let outcome = net.sender.outcome().expect("finished");
    assert!(outcome.ok, "{outcome:?}");
    assert_eq!(outcome.verified(), 3);
    let m = &outcome.members[usize::from(moved.0)];
    assert_eq!(m.caught_up_from, Some(moved.1));
    assert!(net.nodes[2].events.contains(&ReceiverEvent::Finished));
    // The moved receiver heard the group's verdict in the Bye, as the
    // others did.
    assert_eq!(net.nodes[2].machine.group_outcome(), Some(&Ok(())));
}

#[test]
fn a_failed_catch_up_fails_the_moved_receiver_named_and_the_session_ends() {
    let mut net = lagging_net(2);
    // Two receivers: the median is the faster one, so r1 lags behind it.
    net.run_to(Duration::from_secs(30), |net| {
        (net.sender_events.iter()).any(|e| matches!(e, SenderEvent::Moved { .. }))
            && net.sent_kinds.contains(&Kind::Move)
    });
    let now = net.now;
    net.sender
        .catch_up_done(now, 1, Err("no route to host".into()));
    net.run(Duration::from_secs(40));
    let outcome = net.sender.outcome().expect("finished");
    assert!(!outcome.ok);
    let why = outcome.members[1].reason.as_deref().unwrap_or("");
    assert!(why.contains("catch-up failed: no route to host"), "{why}");
    assert!(outcome.members[0].verified);
}
