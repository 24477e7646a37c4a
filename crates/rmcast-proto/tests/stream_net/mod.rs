//! A seeded in-memory multicast network for PRMP tests: one sender, N
//! receivers, per-direction delay with jitter (hence reordering), loss and
//! duplication, virtual time. Every run replays from its seed, which every
//! failure message names.

#![allow(dead_code, clippy::needless_range_loop)]

use rmcast_proto::stream::{
    Admission, StreamEvent, StreamReceiver, StreamReceiverConfig, StreamReceiverEvent,
    StreamSender, StreamSenderConfig,
};
use rmcast_proto::{Dest, Instant};
use rmcast_wire::stream::{StreamBody, StreamPacket};
use rmcast_wire::{MAX_DATAGRAM, Seq, SessionId};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

/// splitmix64: small, seedable, good enough for a network model.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// One direction of every link.
#[derive(Clone, Copy, Debug)]
pub struct Link {
    pub delay: Duration,
    /// Uniform extra delay in `[0, jitter)`: packets overtake each other.
    pub jitter: Duration,
    pub loss: f64,
    pub duplicate: f64,
}

impl Link {
    pub const LAN: Link = Link {
        delay: Duration::from_micros(250),
        jitter: Duration::ZERO,
        loss: 0.0,
        duplicate: 0.0,
    };
}

pub const SENDER: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5000));

pub fn receiver_addr(i: usize) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(
        Ipv4Addr::new(10, 0, 1 + (i / 200) as u8, 1 + (i % 200) as u8),
        6000,
    ))
}

pub struct Scenario {
    pub seed: u64,
    pub receivers: usize,
    pub isn: Seq,
    /// `Admission::Invite` with an empty list is filled with every receiver.
    pub sender: StreamSenderConfig,
    pub receiver: StreamReceiverConfig,
    pub down: Link,
    pub up: Link,
    pub messages: Vec<Vec<u8>>,
    /// Send the first message at this time (after admission).
    pub send_from: Instant,
    pub close_when_sent: bool,
    /// Receiver i's application reads nothing in `[from, until)`.
    pub pauses: Vec<(usize, Instant, Instant)>,
    pub crashes: Vec<(usize, Instant)>,
    pub leaves: Vec<(usize, Instant)>,
    /// Receivers that are not started at all (an invitee that never answers).
    pub absent: Vec<usize>,
    pub deadline: Instant,
}

impl Scenario {
    pub fn new(seed: u64, receivers: usize) -> Self {
        Self {
            seed,
            receivers,
            isn: Seq((seed as u32).wrapping_mul(2_654_435_761)),
            sender: StreamSenderConfig::default(),
            receiver: StreamReceiverConfig::default(),
            down: Link::LAN,
            up: Link::LAN,
            messages: Vec::new(),
            send_from: Instant::ZERO,
            close_when_sent: true,
            pauses: Vec::new(),
            crashes: Vec::new(),
            leaves: Vec::new(),
            absent: Vec::new(),
            deadline: secs(60.0),
        }
    }
}

pub fn secs(s: f64) -> Instant {
    Instant::from_nanos((s * 1e9) as u64)
}

/// `count` messages of 0..=max bytes whose content names their index.
pub fn messages(rng: &mut Rng, count: usize, max: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|k| {
            let len = rng.below(max as u64 + 1) as usize;
            (0..len).map(|j| (k * 31 + j * 7) as u8).collect()
        })
        .collect()
}

#[derive(Debug)]
pub struct Outcome {
    pub seed: u64,
    pub end: Instant,
    pub sender_events: Vec<(Instant, StreamEvent)>,
    pub receiver_events: Vec<Vec<(Instant, StreamReceiverEvent)>>,
    pub delivered: Vec<Vec<Vec<u8>>>,
    pub sent: usize,
    /// Arrival times at the sender of every `Response` / `CloseAck`.
    pub response_arrivals: Vec<Instant>,
    /// Data packets that reached a receiver at or beyond the window edge it
    /// had advertised so far (must stay 0).
    pub beyond_edge: u64,
    /// Largest number of packets a receiver held unread.
    pub max_buffered: Vec<u32>,
    /// (time, cwnd) after every sender transmission.
    pub cwnd_trace: Vec<(Instant, u32)>,
    pub sender_stats: rmcast_proto::stream::StreamSenderStats,
    pub receiver_stats: Vec<rmcast_proto::stream::StreamReceiverStats>,
    pub closed: bool,
    pub steps: u64,
}

impl Outcome {
    pub fn first(&self, pred: impl Fn(&StreamEvent) -> bool) -> Option<Instant> {
        self.sender_events
            .iter()
            .find(|(_, e)| pred(e))
            .map(|(t, _)| *t)
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Ev {
    at: u64,
    order: u64,
    to: usize, // usize::MAX = sender
    from: SocketAddr,
    bytes: Vec<u8>,
}

const TO_SENDER: usize = usize::MAX;

struct World {
    now: Instant,
    rng: Rng,
    order: u64,
    queue: BinaryHeap<Reverse<Ev>>,
    down: Link,
    up: Link,
    crashed: Vec<bool>,
}

impl World {
    fn push(&mut self, link: Link, to: usize, from: SocketAddr, bytes: &[u8]) {
        if self.rng.unit() < link.loss {
            return;
        }
        let copies = if self.rng.unit() < link.duplicate {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let jitter = if link.jitter.is_zero() {
                0
            } else {
                self.rng.below(link.jitter.as_nanos() as u64)
            };
            let at = self.now.as_nanos() + link.delay.as_nanos() as u64 + jitter;
            self.order += 1;
            self.queue.push(Reverse(Ev {
                at,
                order: self.order,
                to,
                from,
                bytes: bytes.to_vec(),
            }));
        }
    }
}

pub fn run(mut sc: Scenario) -> Outcome {
    let n = sc.receivers;
    if let Admission::Invite { receivers, .. } = &mut sc.sender.admission
        && receivers.is_empty()
    {
        *receivers = (0..n).map(receiver_addr).collect();
    }
    let mut rng = Rng::new(sc.seed);
    let session = SessionId(rng.next_u64());
    let mut sender = StreamSender::new(
        sc.sender.clone(),
        session,
        sc.isn,
        rng.next_u64(),
        Instant::ZERO,
    )
    .unwrap_or_else(|e| panic!("seed {}: config: {e}", sc.seed));
    let mut receivers: Vec<StreamReceiver> = (0..n)
        .map(|i| {
            let mut c = sc.receiver.clone();
            c.receiver_id = rng.next_u64();
            c.name = format!("r{i}");
            StreamReceiver::new(c, Instant::ZERO)
        })
        .collect();
    let mut w = World {
        now: Instant::ZERO,
        rng,
        order: 0,
        queue: BinaryHeap::new(),
        down: sc.down,
        up: sc.up,
        crashed: vec![false; n],
    };
    for &i in &sc.absent {
        w.crashed[i] = true;
    }
    let mut out = Outcome {
        seed: sc.seed,
        end: Instant::ZERO,
        sender_events: Vec::new(),
        receiver_events: vec![Vec::new(); n],
        delivered: vec![Vec::new(); n],
        sent: 0,
        response_arrivals: Vec::new(),
        beyond_edge: 0,
        max_buffered: vec![0; n],
        cwnd_trace: Vec::new(),
        sender_stats: Default::default(),
        receiver_stats: Vec::new(),
        closed: false,
        steps: 0,
    };
    let mut left = vec![false; n];
    let mut edges: Vec<Option<Seq>> = vec![None; n];
    let mut gone = vec![false; n];
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut next_msg = 0;
    let mut close_called = false;
    let mut read_buf = Vec::new();
    loop {
        out.steps += 1;
        assert!(
            out.steps < 20_000_000,
            "seed {}: runaway simulation",
            sc.seed
        );
        let now = w.now;
        // Applications.
        if now >= sc.send_from {
            while next_msg < sc.messages.len() && sender.send(&sc.messages[next_msg]).is_ok() {
                next_msg += 1;
            }
            if next_msg == sc.messages.len() && sc.close_when_sent && !close_called {
                sender.close();
                close_called = true;
            }
        }
        for i in 0..n {
            if w.crashed[i] {
                continue;
            }
            if let Some(&(_, t)) = sc.crashes.iter().find(|(r, _)| *r == i)
                && now >= t
            {
                w.crashed[i] = true;
                continue;
            }
            if let Some(&(_, t)) = sc.leaves.iter().find(|(r, _)| *r == i)
                && now >= t
                && !left[i]
            {
                left[i] = true;
                receivers[i].leave(now);
            }
            out.max_buffered[i] = out.max_buffered[i].max(receivers[i].buffered_packets());
            let paused = sc
                .pauses
                .iter()
                .any(|&(r, from, until)| r == i && now >= from && now < until);
            if !paused {
                read_buf.clear();
                while let Some(len) = receivers[i].read(&mut read_buf) {
                    let start = read_buf.len() - len;
                    out.delivered[i].push(read_buf[start..].to_vec());
                }
            }
        }
        // Events and transmissions.
        while let Some(e) = sender.poll_event() {
            match e {
                StreamEvent::Closed => out.closed = true,
                StreamEvent::Removed { id, .. } | StreamEvent::Left(id) => {
                    gone[usize::from(id.0)] = true;
                }
                _ => {}
            }
            out.sender_events.push((now, e));
        }
        let mut sent_now = 0;
        while let Some(t) = sender.poll_transmit(now, &mut buf) {
            sent_now += 1;
            assert!(
                sent_now < 100_000,
                "seed {}: sender transmits forever",
                sc.seed
            );
            out.cwnd_trace
                .push((now, sender.congestion_window().cwnd_packets()));
            // Flow control, judged when the packet leaves: never at or
            // beyond the edge a live receiver advertised to the sender.
            if let Ok(p) = StreamPacket::decode(&buf[..t.len])
                && let StreamBody::Data(d) = p.body
            {
                for i in 0..n {
                    if !gone[i] && edges[i].is_some_and(|e| d.seq >= e) {
                        out.beyond_edge += 1;
                    }
                }
            }
            match t.dest {
                Dest::Group => {
                    for i in 0..n {
                        let down = w.down;
                        w.push(down, i, SENDER, &buf[..t.len]);
                    }
                }
                Dest::Unicast(a) => {
                    if let Some(i) = (0..n).find(|&i| receiver_addr(i) == a) {
                        let down = w.down;
                        w.push(down, i, SENDER, &buf[..t.len]);
                    }
                }
            }
        }
        for i in 0..n {
            if w.crashed[i] {
                continue;
            }
            while let Some(e) = receivers[i].poll_event() {
                out.receiver_events[i].push((now, e));
            }
            while let Some(t) = receivers[i].poll_transmit(now, &mut buf) {
                assert_eq!(t.dest, Dest::Unicast(SENDER), "seed {}", sc.seed);
                let up = w.up;
                w.push(up, TO_SENDER, receiver_addr(i), &buf[..t.len]);
            }
        }
        if out.closed && w.queue.is_empty() {
            break;
        }
        // Next instant.
        let mut next = w.queue.peek().map(|Reverse(e)| e.at);
        let mut wake = |t: Option<Instant>| {
            if let Some(t) = t {
                let t = t.as_nanos().max(now.as_nanos() + 1);
                next = Some(next.map_or(t, |x| x.min(t)));
            }
        };
        wake(sender.poll_timeout());
        for i in 0..n {
            if !w.crashed[i] {
                wake(receivers[i].poll_timeout());
            }
        }
        for &(_, from, until) in &sc.pauses {
            if from > now {
                wake(Some(from));
            }
            if until > now {
                wake(Some(until));
            }
        }
        for &(_, t) in sc.crashes.iter().chain(&sc.leaves) {
            if t > now {
                wake(Some(t));
            }
        }
        if sc.send_from > now {
            wake(Some(sc.send_from));
        }
        let Some(next) = next else { break };
        if next > sc.deadline.as_nanos() {
            break;
        }
        w.now = Instant::from_nanos(next.max(now.as_nanos()));
        let now = w.now;
        while w
            .queue
            .peek()
            .is_some_and(|Reverse(e)| e.at <= now.as_nanos())
        {
            let Reverse(ev) = w.queue.pop().unwrap();
            if ev.to == TO_SENDER {
                if let Ok(p) = StreamPacket::decode(&ev.bytes) {
                    let i = usize::from(p.header.rank);
                    let edge = match p.body {
                        StreamBody::Response(r) | StreamBody::CloseAck(r) => {
                            out.response_arrivals.push(now);
                            Some(r.window_end())
                        }
                        StreamBody::Accept(a) => Some(sc.isn.add(a.buffer_packets)),
                        _ => None,
                    };
                    if let Some(e) = edge
                        && i < n
                    {
                        edges[i] = Some(edges[i].map_or(e, |x| x.max(e)));
                    }
                }
                sender.handle_datagram(now, ev.from, &ev.bytes);
            } else if !w.crashed[ev.to] {
                receivers[ev.to].handle_datagram(now, ev.from, &ev.bytes);
            }
        }
        if sender.poll_timeout().is_some_and(|t| t <= now) {
            sender.handle_timeout(now);
        }
        for i in 0..n {
            if !w.crashed[i] && receivers[i].poll_timeout().is_some_and(|t| t <= now) {
                receivers[i].handle_timeout(now);
            }
        }
    }
    // Drain what the receivers still hold (the application reads after the end).
    for i in 0..n {
        if w.crashed[i] {
            continue;
        }
        let paused_forever = sc
            .pauses
            .iter()
            .any(|&(r, _, until)| r == i && until > w.now);
        if !paused_forever {
            read_buf.clear();
            while let Some(len) = receivers[i].read(&mut read_buf) {
                let start = read_buf.len() - len;
                out.delivered[i].push(read_buf[start..].to_vec());
            }
        }
        while let Some(e) = receivers[i].poll_event() {
            out.receiver_events[i].push((w.now, e));
        }
    }
    out.end = w.now;
    out.sent = next_msg;
    out.sender_stats = sender.stats().clone();
    out.receiver_stats = receivers.iter().map(|r| r.stats().clone()).collect();
    out
}
