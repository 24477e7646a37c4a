//! PRMP's network: a seeded in-memory multicast LAN for the message-stream
//! machines ([`rmcast_proto::stream`]): one [`StreamSender`], N
//! [`StreamReceiver`]s, per-direction delay with uniform jitter (hence
//! reordering), Bernoulli loss and duplication, virtual time.
//!
//! It is a model of its own, simpler than the switched LAN of
//! [`crate::Scenario`] (no rates, queues, fragments or CPU costs): PRMP's
//! tests are about ordering, loss, membership and planning, and its golden
//! file (`tests/golden/prmp.txt`) pins what the machines did under exactly
//! this model, its splitmix64 draws and its event order.
//!
//! [`run`] plays a [`StreamScenario`] to the end and checks the stream's
//! invariants ([`check`]): the run ended (the sender closed), every receiver
//! read a prefix of what was sent, in order, each message once and whole,
//! every receiver that stayed in the session read all of it, no packet was
//! sent beyond a window a live receiver advertised, and no buffer outgrew
//! its bound. A failing run returns a [`StreamSimError`] naming its seed;
//! [`replay`] and [`run_or_panic`] (which honours `RMCAST_SIM_SEED`) replay
//! it. Every run replays exactly from its seed.

use rmcast_proto::stream::{
    Admission, MemberId, StreamEvent, StreamReceiver, StreamReceiverConfig, StreamReceiverEvent,
    StreamSender, StreamSenderConfig,
};
use rmcast_proto::{Dest, Instant};
use rmcast_wire::stream::{StreamBody, StreamPacket};
use rmcast_wire::{MAX_DATAGRAM, Seq, SessionId};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

/// splitmix64: small, seedable, good enough for a network model (and the
/// generator the golden file was made with: do not swap it).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose first state is `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in `[0, n)` (modulo bias and all; `n` = 0 gives 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// One direction of every link (sender to receivers, or back).
#[derive(Clone, Copy, Debug)]
pub struct Link {
    /// Fixed one-way delay.
    pub delay: Duration,
    /// Uniform extra delay in `[0, jitter)`: packets overtake each other.
    pub jitter: Duration,
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// Probability that a datagram that is not lost arrives twice.
    pub duplicate: f64,
}

impl Link {
    /// 250 µs one way, nothing lost, duplicated or reordered.
    pub const LAN: Link = Link {
        delay: Duration::from_micros(250),
        jitter: Duration::ZERO,
        loss: 0.0,
        duplicate: 0.0,
    };
}

/// The sender's address.
pub const SENDER: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5000));

/// Receiver `i`'s address (`10.0.{1 + i/200}.{1 + i%200}:6000`).
#[must_use]
pub fn receiver_addr(i: usize) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(
        Ipv4Addr::new(10, 0, 1 + (i / 200) as u8, 1 + (i % 200) as u8),
        6000,
    ))
}

/// One PRMP run: the machines' configurations, the network, what the
/// applications do and when.
#[derive(Clone, Debug)]
pub struct StreamScenario {
    /// Seeds the session id, the sender's nonces, the receivers' ids and
    /// every draw of the network.
    pub seed: u64,
    /// Number of receivers (ranks 0..receivers).
    pub receivers: usize,
    /// The sender's initial sequence number.
    pub isn: Seq,
    /// The sender; `Admission::Invite` with an empty list is filled with
    /// every receiver.
    pub sender: StreamSenderConfig,
    /// Every receiver (its `receiver_id` and `name` are set per receiver).
    pub receiver: StreamReceiverConfig,
    /// Sender to receivers.
    pub down: Link,
    /// Receivers to sender.
    pub up: Link,
    /// What the sending application sends, in order.
    pub messages: Vec<Vec<u8>>,
    /// Send the first message at this time (after admission).
    pub send_from: Instant,
    /// Close the stream once `send` accepted every message.
    pub close_when_sent: bool,
    /// `(i, from, until)`: receiver i's application reads nothing in `[from, until)`.
    pub pauses: Vec<(usize, Instant, Instant)>,
    /// `(i, at)`: receiver i stops for good at `at`.
    pub crashes: Vec<(usize, Instant)>,
    /// `(i, at)`: receiver i's application calls `leave` at `at`.
    pub leaves: Vec<(usize, Instant)>,
    /// Receivers that are not started at all (an invitee that never answers).
    pub absent: Vec<usize>,
    /// The run stops here if the sender has not closed by then.
    pub deadline: Instant,
}

impl StreamScenario {
    /// `receivers` on a [`Link::LAN`] both ways, default configurations, no
    /// messages, a 60 s deadline; the ISN is drawn from `seed`.
    #[must_use]
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

/// `s` seconds after the time origin.
#[must_use]
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

/// What happened in one run.
#[derive(Debug)]
pub struct StreamReport {
    /// The seed that replays it.
    pub seed: u64,
    /// Virtual time when the run stopped.
    pub end: Instant,
    /// The sender's events with the time they were polled.
    pub sender_events: Vec<(Instant, StreamEvent)>,
    /// Each receiver's events with the time they were polled.
    pub receiver_events: Vec<Vec<(Instant, StreamReceiverEvent)>>,
    /// What each receiver's application read, message by message.
    pub delivered: Vec<Vec<Vec<u8>>>,
    /// Messages `send` accepted.
    pub sent: usize,
    /// Arrival times at the sender of every `Response` / `CloseAck`.
    pub response_arrivals: Vec<Instant>,
    /// Data packets sent at or beyond the window edge a live receiver had
    /// advertised to the sender (must stay 0).
    pub beyond_edge: u64,
    /// Largest number of packets a receiver held unread.
    pub max_buffered: Vec<u32>,
    /// Largest number of packets in the sender's send buffer.
    pub sender_buffered_max: u32,
    /// (time, cwnd) after every sender transmission.
    pub cwnd_trace: Vec<(Instant, u32)>,
    /// The sender's counters at the end.
    pub sender_stats: rmcast_proto::stream::StreamSenderStats,
    /// Each receiver's counters at the end.
    pub receiver_stats: Vec<rmcast_proto::stream::StreamReceiverStats>,
    /// Whether the sender reported `Closed`.
    pub closed: bool,
    /// Simulation steps (instants visited).
    pub steps: u64,
}

impl StreamReport {
    /// When the sender first reported an event matching `pred`.
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

/// Plays `scenario` to the end without judging it (see [`run`]).
#[allow(clippy::needless_range_loop)] // one index names a receiver in several parallel vectors
#[must_use]
pub fn simulate(scenario: &StreamScenario) -> StreamReport {
    let mut sc = scenario.clone();
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
    let mut out = StreamReport {
        seed: sc.seed,
        end: Instant::ZERO,
        sender_events: Vec::new(),
        receiver_events: vec![Vec::new(); n],
        delivered: vec![Vec::new(); n],
        sent: 0,
        response_arrivals: Vec::new(),
        beyond_edge: 0,
        max_buffered: vec![0; n],
        sender_buffered_max: 0,
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
            // `send` is the only thing that fills the buffer: its high-water
            // mark is always seen here.
            out.sender_buffered_max = out.sender_buffered_max.max(sender.buffered_packets());
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

/// A run that broke an invariant: its seed, what broke, and the scenario.
#[derive(Debug)]
pub struct StreamSimError {
    /// The seed that replays it.
    pub seed: u64,
    /// Every invariant the run broke, one line each.
    pub failures: Vec<String>,
    /// The whole run.
    pub report: Box<StreamReport>,
    /// What was run.
    pub scenario: Box<StreamScenario>,
}

impl std::fmt::Display for StreamSimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "PRMP run with seed {} broke {} invariant(s) (replay: {}={} or rmcast_sim::stream::replay):",
            self.seed,
            self.failures.len(),
            crate::SEED_ENV,
            self.seed
        )?;
        for failure in &self.failures {
            writeln!(f, "  {failure}")?;
        }
        writeln!(
            f,
            "ended at {:?}, closed {}, sent {} of {} messages, sender events {:?}",
            self.report.end,
            self.report.closed,
            self.report.sent,
            self.scenario.messages.len(),
            self.report.sender_events
        )?;
        let mut sc = (*self.scenario).clone();
        sc.messages.clear();
        write!(f, "scenario (messages left out): {sc:?}")
    }
}

impl std::error::Error for StreamSimError {}

/// Whether receiver `i` is expected to read the whole stream: it was
/// started, never crashed, left, failed or was removed, and its reader was
/// not still paused when the run ended.
fn stayed(sc: &StreamScenario, report: &StreamReport, i: usize) -> bool {
    let id = MemberId(i as u16);
    !sc.absent.contains(&i)
        && !sc.crashes.iter().any(|&(r, t)| r == i && t <= report.end)
        && !sc.leaves.iter().any(|&(r, t)| r == i && t <= report.end)
        && !sc
            .pauses
            .iter()
            .any(|&(r, _, until)| r == i && until > report.end)
        && !report.sender_events.iter().any(|(_, e)| {
            matches!(e, StreamEvent::Removed { id: x, .. } | StreamEvent::Left(x) if *x == id)
        })
        && !report.receiver_events[i].iter().any(|(_, e)| {
            matches!(
                e,
                StreamReceiverEvent::Failed(_) | StreamReceiverEvent::Left
            )
        })
}

/// The invariants `report` breaks, one line each (empty: none): the run
/// ended (the sender closed, when the scenario closes), `send` took every
/// message, each receiver read a prefix of the stream in order (each
/// message once, whole), each receiver that stayed read all of it, nothing
/// was sent beyond an advertised window or dropped for lack of buffer, and
/// no buffer outgrew its configured size.
#[must_use]
pub fn check(sc: &StreamScenario, report: &StreamReport) -> Vec<String> {
    let mut failures = Vec::new();
    if sc.close_when_sent && !report.closed {
        failures.push(format!(
            "the sender did not close by {:?} (deadline {:?})",
            report.end, sc.deadline
        ));
    }
    // A stream whose every member crashed, left or was removed closes
    // early by design ("no member is left").
    let someone_stayed = (0..sc.receivers).any(|i| stayed(sc, report, i));
    if report.closed && report.sent != sc.messages.len() && someone_stayed {
        failures.push(format!(
            "closed after sending {} of {} messages",
            report.sent,
            sc.messages.len()
        ));
    }
    let sent = &sc.messages[..report.sent.min(sc.messages.len())];
    for (i, read) in report.delivered.iter().enumerate() {
        if let Some(k) = read.iter().zip(sent).position(|(got, want)| got != want) {
            failures.push(format!(
                "receiver {i}: message {k} differs from the one sent (out of order, twice or torn)"
            ));
        } else if read.len() > sent.len() {
            failures.push(format!(
                "receiver {i}: read {} messages, {} were sent",
                read.len(),
                sent.len()
            ));
        } else if read.len() < sent.len() && report.closed && stayed(sc, report, i) {
            failures.push(format!(
                "receiver {i}: stayed in the session and read {} of {} messages",
                read.len(),
                sent.len()
            ));
        }
    }
    if report.beyond_edge != 0 {
        failures.push(format!(
            "{} data packets sent beyond an advertised window",
            report.beyond_edge
        ));
    }
    for (i, stats) in report.receiver_stats.iter().enumerate() {
        if stats.beyond_window != 0 {
            failures.push(format!(
                "receiver {i}: {} packets arrived beyond its window",
                stats.beyond_window
            ));
        }
    }
    for (i, &held) in report.max_buffered.iter().enumerate() {
        if held > sc.receiver.buffer_packets {
            failures.push(format!(
                "receiver {i}: held {held} packets, its buffer is {}",
                sc.receiver.buffer_packets
            ));
        }
    }
    if report.sender_buffered_max > sc.sender.send_buffer_packets {
        failures.push(format!(
            "the sender buffered {} packets, its buffer is {}",
            report.sender_buffered_max, sc.sender.send_buffer_packets
        ));
    }
    failures
}

/// Plays `scenario` to the end and checks its invariants ([`check`]).
pub fn run(scenario: &StreamScenario) -> Result<StreamReport, StreamSimError> {
    let report = simulate(scenario);
    let failures = check(scenario, &report);
    if failures.is_empty() {
        Ok(report)
    } else {
        Err(StreamSimError {
            seed: scenario.seed,
            failures,
            report: Box::new(report),
            scenario: Box::new(scenario.clone()),
        })
    }
}

/// Runs `scenario` again with `seed` (to reproduce a reported failure).
pub fn replay(seed: u64, scenario: &StreamScenario) -> Result<StreamReport, StreamSimError> {
    let mut sc = scenario.clone();
    sc.seed = seed;
    run(&sc)
}

/// Runs `scenario` (its seed replaced by `RMCAST_SIM_SEED` when set) and
/// panics with the seed and what broke if an invariant fails.
#[track_caller]
pub fn run_or_panic(scenario: &StreamScenario) -> StreamReport {
    let seed = crate::seed_from_env(scenario.seed);
    match replay(seed, scenario) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("rmcast-sim stream: failing seed {seed}");
            panic!("{e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(seed: u64) -> StreamScenario {
        let mut sc = StreamScenario::new(seed, 3);
        sc.messages = messages(&mut Rng::new(seed), 40, 3000);
        sc.down.loss = 0.02;
        sc.down.jitter = Duration::from_micros(100);
        sc
    }

    #[test]
    fn a_seed_replays_the_same_run() {
        let a = run(&small(5)).expect("invariants hold");
        let mut other = small(5);
        other.seed = 77;
        let b = replay(5, &other).expect("invariants hold");
        assert_eq!(format!("{:?}", a), format!("{:?}", b));
        let c = run(&small(6)).expect("invariants hold");
        assert_ne!(a.response_arrivals, c.response_arrivals);
    }

    #[test]
    fn check_names_a_reader_that_got_a_message_twice_or_missed_the_end() {
        let sc = small(5);
        let mut report = simulate(&sc);
        assert!(check(&sc, &report).is_empty());
        let again = report.delivered[1][0].clone();
        report.delivered[1].insert(1, again);
        report.delivered[2].pop();
        let failures = check(&sc, &report);
        assert_eq!(failures.len(), 2, "{failures:?}");
        assert!(failures[0].starts_with("receiver 1: message 1 differs"));
        assert!(failures[1].starts_with("receiver 2: stayed"));
    }

    #[test]
    fn a_crashed_receiver_owes_only_a_prefix() {
        let mut sc = small(8);
        sc.crashes = vec![(0, secs(0.001))];
        let report = run(&sc).expect("invariants hold");
        assert!(report.delivered[0].len() < sc.messages.len());
        assert_eq!(report.delivered[1].len(), sc.messages.len());
    }

    #[test]
    fn a_run_that_cannot_close_by_its_deadline_fails_with_its_seed() {
        let mut sc = small(9);
        sc.deadline = secs(0.001);
        let e = run(&sc).expect_err("cannot close in 1 ms");
        assert_eq!(e.seed, 9);
        assert!(e.to_string().contains("seed 9"), "{e}");
        assert!(e.failures[0].contains("did not close"), "{e}");
    }
}
