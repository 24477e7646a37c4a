//! The event loop: hosts, links, the switch, and the drivers of the real
//! state machines.

use crate::report::{dur, secs};
use crate::{
    Drops, Failure, LossModel, OutstandingSample, RateSample, ReceiverReport, RunReport, Scenario,
    SenderReport, SimError,
};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rmcast_proto::{
    DataChunk, Dest, Endpoint, EndpointConfig, EndpointStats, Instant, Kind, MAX_DATAGRAM,
    ObjectInfo, Receiver, ReceiverConfig, ReceiverEvent, ReceiverStats, Sender, SenderEvent, Seq,
    SessionId, Status,
};
use rmcast_wire::{
    Body, Bye, Close, Data, Feedback, Header, Offer, Packet, ProtocolId, RANK_SENDER, VERSION,
    Welcome,
};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

const UDP_PORT: u16 = 5000;
/// Source index of injected garbage: a host outside the session.
const INTRUDER: u16 = u16::MAX;
/// Consecutive timer expiries at one instant before a host counts as livelocked.
const LIVELOCK_FIRES: u32 = 10_000;
/// Datagrams one service round may emit before the simulator calls it runaway.
const TRANSMIT_BOUND: usize = 1 << 20;

/// The fake unicast address of host `h` (0 is the sender): 10.0.hi.lo:5000.
#[must_use]
pub fn host_addr(h: usize) -> SocketAddr {
    let x = h + 1;
    SocketAddr::from(([10, 0, (x >> 8) as u8, (x & 0xff) as u8], UDP_PORT))
}

fn intruder_addr() -> SocketAddr {
    SocketAddr::from(([10, 0, 255, 254], UDP_PORT))
}

fn host_of(addr: SocketAddr, hosts: usize) -> Option<usize> {
    match addr {
        SocketAddr::V4(a) if a.port() == UDP_PORT => {
            let o = a.ip().octets();
            if o[0] != 10 || o[1] != 0 {
                return None;
            }
            let x = (usize::from(o[2]) << 8) | usize::from(o[3]);
            x.checked_sub(1).filter(|&h| h < hosts)
        }
        _ => None,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Group,
    Host(u16),
}

/// A datagram in flight, shared by every copy the switch makes and every
/// fragment of it.
struct Slot {
    bytes: Vec<u8>,
    refs: u32,
    src: u16,
    route: Route,
    /// `None` for injected garbage.
    kind: Option<Kind>,
    /// IP fragments it travels as.
    frags: u16,
    /// Unique per datagram of the run (the IP identification, never reused).
    ip_id: u64,
}

/// Reusable datagram buffers, reference-counted by hand so a multicast to N
/// ports holds one copy and the event loop stops allocating once warm.
#[derive(Default)]
struct Pool {
    slots: Vec<Slot>,
    free: Vec<u32>,
    next_ip_id: u64,
}

impl Pool {
    fn alloc(&mut self, bytes: &[u8], src: u16, route: Route, kind: Option<Kind>) -> u32 {
        self.next_ip_id += 1;
        let ip_id = self.next_ip_id;
        if let Some(id) = self.free.pop() {
            let s = &mut self.slots[id as usize];
            s.bytes.clear();
            s.bytes.extend_from_slice(bytes);
            s.refs = 1;
            s.src = src;
            s.route = route;
            s.kind = kind;
            s.frags = 1;
            s.ip_id = ip_id;
            id
        } else {
            self.slots.push(Slot {
                bytes: bytes.to_vec(),
                refs: 1,
                src,
                route,
                kind,
                frags: 1,
                ip_id,
            });
            (self.slots.len() - 1) as u32
        }
    }

    fn retain(&mut self, id: u32) {
        self.slots[id as usize].refs += 1;
    }

    fn release(&mut self, id: u32) {
        let s = &mut self.slots[id as usize];
        debug_assert!(s.refs > 0);
        s.refs -= 1;
        if s.refs == 0 {
            self.free.push(id);
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    /// A frame (datagram, fragment index) finished crossing a host's uplink
    /// and reaches the switch.
    AtSwitch(u32, u16),
    /// A frame (host, datagram, fragment index) finished crossing a switch
    /// port and reaches the host.
    AtHost(u16, u32, u16),
    /// The host's CPU is free to read its next datagram.
    Cpu(u16),
    /// The host's uplink has room for the datagram it holds back.
    Writable(u16),
    /// The host's protocol timer, with the generation that armed it.
    Timer(u16, u64),
    Crash(u16),
    Garbage,
    /// The sender host's driver finished hashing the object.
    HashReady(u16),
}

struct Scheduled {
    at: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    /// Reversed: `BinaryHeap` is a max-heap and the earliest event goes first;
    /// the insertion counter breaks ties so runs are exactly reproducible.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A FIFO transmitter: a rate and a drop-tail queue in wire bytes.
struct Link {
    busy_until: u64,
    /// (finish time, wire bytes) of every frame queued or on the wire.
    fifo: VecDeque<(u64, usize)>,
    bytes: usize,
    limit: usize,
    max_bytes: usize,
}

impl Link {
    fn new(limit: usize) -> Self {
        Self {
            busy_until: 0,
            fifo: VecDeque::new(),
            bytes: 0,
            limit,
            max_bytes: 0,
        }
    }

    fn drain(&mut self, now: u64) {
        while let Some(&(finish, b)) = self.fifo.front() {
            if finish > now {
                break;
            }
            self.bytes -= b;
            self.fifo.pop_front();
        }
    }

    /// The earliest time from `now` at which `wire` more bytes fit, or
    /// `None` if they never fit.
    fn room_at(&mut self, now: u64, wire: usize) -> Option<u64> {
        if wire > self.limit {
            return None;
        }
        self.drain(now);
        let mut bytes = self.bytes;
        if bytes + wire <= self.limit {
            return Some(now);
        }
        for &(finish, b) in &self.fifo {
            bytes -= b;
            if bytes + wire <= self.limit {
                return Some(finish);
            }
        }
        unreachable!("an empty queue has room for anything under its limit")
    }

    /// Queues a frame at `now`; returns when its last bit leaves, or `None` when dropped.
    fn admit(&mut self, now: u64, wire: usize, rate_bits_per_s: u64) -> Option<u64> {
        self.drain(now);
        if self.bytes + wire > self.limit {
            return None;
        }
        let tx_ns = (wire as u128 * 8_000_000_000).div_ceil(u128::from(rate_bits_per_s)) as u64;
        let finish = self.busy_until.max(now) + tx_ns;
        self.busy_until = finish;
        self.fifo.push_back((finish, wire));
        self.bytes += wire;
        assert!(self.bytes <= self.limit, "queue over its limit");
        self.max_bytes = self.max_bytes.max(self.bytes);
        Some(finish)
    }
}

enum Machine {
    Sender(Box<Sender>),
    /// One receiver machine per sender session, routed by the endpoint
    /// (the runtime's rule).
    Receivers(Box<Rxs>),
}

/// A receiver host's sessions: the endpoint's machines, and `apps[h]`
/// the application of session `h`.
struct Rxs {
    endpoint: Endpoint,
    apps: Vec<RxApp>,
}

impl Rxs {
    /// One application per machine, for listeners the endpoint started.
    fn sync_apps(&mut self) {
        let n = self.endpoint.session_count();
        self.apps.resize_with(n, RxApp::default);
    }
}

/// Index of the sender whose session `machine` joined; with one sender,
/// that sender whatever the machine heard (as before the endpoint).
fn side_of(sides: &[SenderSide], machine: &Receiver) -> Option<usize> {
    if sides.len() == 1 {
        return Some(0);
    }
    let session = machine.session()?;
    sides.iter().position(|s| s.session == session)
}

/// A receiver's application for one session: the object buffer and the
/// delivery ledger.
#[derive(Default)]
struct RxApp {
    data: Vec<u8>,
    /// Bit per packet index: delivered by the machine already.
    delivered: Vec<u64>,
    payload_size: u64,
    rank: Option<u16>,
    hash_ok: bool,
    all_data_at: Option<u64>,
    ended_at: Option<u64>,
    failure: Option<String>,
}

/// What happened to a host's input, whatever session it belonged to.
#[derive(Default)]
struct HostCounters {
    data_lost: u64,
    fragment_loss: u64,
    socket_overflow: u64,
    garbage_seen: u64,
}

/// A datagram being reassembled at a host. Holds one reference to its slot.
struct Reasm {
    ip_id: u64,
    src: u16,
    pkt: u32,
    /// When its first fragment arrived.
    first_at: u64,
    /// Fragments arrived so far.
    received: u16,
    /// Fragment index expected next; fragments of one datagram arrive in
    /// order (one FIFO path), so any other index means one was lost.
    next: u16,
    /// IP payload bytes held.
    bytes: usize,
}

struct Host {
    machine: Machine,
    /// Transmit buffer, allocated once.
    buf: Vec<u8>,
    uplink: Link,
    /// The switch output port towards this host.
    port: Link,
    loss_rng: ChaCha8Rng,
    loss_bad: bool,
    /// When the loss chain last stepped (virtual ns).
    loss_at: u64,
    cpu_rng: ChaCha8Rng,
    /// Data frames (fragments count one each) that reached this host's switch port so far.
    data_frames: u64,
    /// Incomplete datagrams, oldest first.
    reasm: Vec<Reasm>,
    reasm_bytes: usize,
    socket: VecDeque<u32>,
    socket_bytes: usize,
    max_socket_bytes: usize,
    cpu_free: u64,
    cpu_scheduled: bool,
    /// A datagram waiting for room on the uplink (with `blocking_send`).
    pending_send: Option<u32>,
    /// When the scheduled `Writable` event fires, if one is.
    writable_at: Option<u64>,
    timer_at: Option<u64>,
    timer_gen: u64,
    fires_at_same_instant: u32,
    last_fire: u64,
    crashed_at: Option<u64>,
    counters: HostCounters,
}

#[derive(Default)]
struct SenderLog {
    /// When each sender finished.
    finished: Vec<Option<u64>>,
    /// When the last sender finished, once all have.
    finished_at: Option<u64>,
    /// When a sender first failed each receiver (by receiver number 1..=N).
    failed_at: Vec<Option<u64>>,
    last_verdict_at: u64,
}

/// Per sender: its session, object and what the run recorded of it.
struct SenderSide {
    session: SessionId,
    object: Vec<u8>,
    hash: [u8; 32],
    max_outstanding: u32,
    outstanding_trace: Vec<OutstandingSample>,
    rate_trace: Vec<RateSample>,
}

struct Sim<'s> {
    sc: &'s Scenario,
    /// Number of senders (hosts 0..S).
    senders: usize,
    sides: Vec<SenderSide>,
    hosts: Vec<Host>,
    pool: Pool,
    heap: BinaryHeap<Scheduled>,
    seq: u64,
    now: u64,
    events: u64,
    drops: Drops,
    garbage_rng: ChaCha8Rng,
    garbage_injected: u64,
    control_rng: ChaCha8Rng,
    cpu_jitter: u64,
    reasm_timeout: u64,
    window: u32,
    log: SenderLog,
}

type Fail = Failure;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

pub(crate) fn run(sc: &Scenario) -> Result<RunReport, SimError> {
    let mut sim = match Sim::new(sc) {
        Ok(s) => s,
        Err(failure) => {
            return Err(SimError {
                seed: sc.seed,
                scenario: Box::new(sc.clone()),
                failure,
                snapshot: String::new(),
            });
        }
    };
    match sim.run_loop().and_then(|()| {
        sim.settle_reassembly();
        sim.check_final()
    }) {
        Ok(()) => Ok(sim.report()),
        Err(failure) => Err(SimError {
            seed: sc.seed,
            scenario: Box::new(sc.clone()),
            failure,
            snapshot: sim.snapshot(),
        }),
    }
}

impl<'s> Sim<'s> {
    fn new(sc: &'s Scenario) -> Result<Self, Fail> {
        if sc.mtu < crate::scenario::MIN_MTU {
            return Err(Failure::Scenario(format!(
                "mtu {} is below IPv4's minimum of {}",
                sc.mtu,
                crate::scenario::MIN_MTU
            )));
        }
        if sc.senders == 0 {
            return Err(Failure::Scenario("a run needs at least one sender".into()));
        }
        let mut master = ChaCha8Rng::seed_from_u64(sc.seed);
        let size = usize::try_from(sc.object_size).expect("object fits in memory");
        let mut config = sc.config.clone();
        config.receivers = sc.receivers;
        let window = config.window;
        let senders = usize::from(sc.senders);
        // Sender 0 draws first and alone when S = 1, so single-sender runs
        // replay exactly as before several senders existed.
        let mut sides: Vec<SenderSide> = Vec::with_capacity(senders);
        let mut machines = Vec::with_capacity(senders);
        for k in 0..senders {
            let mut object = vec![0u8; size];
            ChaCha8Rng::seed_from_u64(master.next_u64()).fill_bytes(&mut object);
            let hash = *blake3::hash(&object).as_bytes();
            let mut session = SessionId(master.next_u64());
            while sides.iter().any(|x| x.session == session) {
                session = SessionId(master.next_u64());
            }
            let isn = Seq(sc.isn.unwrap_or_else(|| master.next_u32()));
            let info = ObjectInfo {
                size: sc.object_size,
                name: format!("object{k}.bin"),
                hash: sc.hash_ready_at.is_none().then_some(hash),
            };
            let info = if senders == 1 {
                ObjectInfo {
                    name: "object.bin".into(),
                    ..info
                }
            } else {
                info
            };
            let sender = Sender::new(config.clone(), session, isn, info, Instant::ZERO)
                .map_err(Failure::Config)?;
            machines.push(Machine::Sender(Box::new(sender)));
            sides.push(SenderSide {
                session,
                object,
                hash,
                max_outstanding: 0,
                outstanding_trace: Vec::new(),
                rate_trace: Vec::new(),
            });
        }
        let n = usize::from(sc.receivers);
        let mut hosts = Vec::with_capacity(n + senders);
        let mut machines = machines.into_iter();
        for h in 0..n + senders {
            let machine = if let Some(m) = machines.next() {
                m
            } else {
                let k = h + 1 - senders;
                // One draw per sender as before the endpoint, so the seeds
                // drawn after these stay where they were; the endpoint
                // derives its later listeners' ids from the first.
                let receiver_id = master.next_u64();
                for _ in 1..senders {
                    master.next_u64();
                }
                let rc = ReceiverConfig {
                    receiver_id,
                    name: format!("r{k}"),
                    session: if senders > 1 {
                        None
                    } else {
                        sc.receiver.session
                    },
                    ..sc.receiver.clone()
                };
                let endpoint = Endpoint::new(
                    EndpointConfig {
                        receiver: rc,
                        sessions: senders,
                        own_addr: Some(host_addr(h)),
                    },
                    Instant::ZERO,
                );
                Machine::Receivers(Box::new(Rxs {
                    endpoint,
                    apps: vec![RxApp::default()],
                }))
            };
            hosts.push(Host {
                machine,
                buf: vec![0; MAX_DATAGRAM],
                uplink: Link::new(sc.uplink_queue_bytes),
                port: Link::new(sc.port_queue_bytes),
                loss_rng: ChaCha8Rng::seed_from_u64(master.next_u64()),
                loss_bad: false,
                loss_at: 0,
                cpu_rng: ChaCha8Rng::seed_from_u64(master.next_u64()),
                data_frames: 0,
                reasm: Vec::new(),
                reasm_bytes: 0,
                socket: VecDeque::new(),
                socket_bytes: 0,
                max_socket_bytes: 0,
                cpu_free: 0,
                cpu_scheduled: false,
                pending_send: None,
                writable_at: None,
                timer_at: None,
                timer_gen: 0,
                fires_at_same_instant: 0,
                last_fire: 0,
                crashed_at: None,
                counters: HostCounters::default(),
            });
        }
        let mut sim = Sim {
            sc,
            senders,
            sides,
            hosts,
            pool: Pool::default(),
            heap: BinaryHeap::new(),
            seq: 0,
            now: 0,
            events: 0,
            drops: Drops::default(),
            garbage_rng: ChaCha8Rng::seed_from_u64(master.next_u64()),
            garbage_injected: 0,
            control_rng: ChaCha8Rng::seed_from_u64(master.next_u64()),
            cpu_jitter: nanos(sc.cost.jitter),
            reasm_timeout: nanos(sc.reassembly_timeout),
            window,
            log: SenderLog {
                finished: vec![None; senders],
                failed_at: vec![None; n + 1],
                ..SenderLog::default()
            },
        };
        for c in &sc.crashes {
            if (1..=sc.receivers).contains(&c.receiver) {
                let host = usize::from(c.receiver) + senders - 1;
                sim.push(nanos(c.at), Ev::Crash(host as u16));
            }
        }
        if let Some(at) = sc.hash_ready_at {
            for h in 0..senders {
                sim.push(nanos(at), Ev::HashReady(h as u16));
            }
        }
        if sc.garbage_per_s > 0.0 {
            let first = sim.next_garbage_gap();
            sim.push(first, Ev::Garbage);
        }
        Ok(sim)
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Scheduled {
            at,
            seq: self.seq,
            ev,
        });
    }

    fn run_loop(&mut self) -> Result<(), Fail> {
        let limit = nanos(self.sc.time_limit);
        // Every machine starts at time zero: the sender announces, receivers listen.
        for h in 0..self.hosts.len() {
            let end = self.service(h, 0)?;
            self.hosts[h].cpu_free = end;
        }
        while let Some(Scheduled { at, ev, .. }) = self.heap.pop() {
            if at > limit {
                if self.log.finished_at.is_none() {
                    return Err(Failure::TimeLimit(self.sc.time_limit));
                }
                break;
            }
            debug_assert!(at >= self.now, "time went backwards");
            self.now = at;
            self.events += 1;
            match ev {
                Ev::AtSwitch(pkt, frag) => self.at_switch(pkt, frag),
                Ev::AtHost(h, pkt, frag) => self.at_host(usize::from(h), pkt, frag),
                Ev::Cpu(h) => self.cpu(usize::from(h))?,
                Ev::Writable(h) => self.writable(usize::from(h))?,
                Ev::Timer(h, generation) => self.timer(usize::from(h), generation)?,
                Ev::Crash(h) => self.crash(usize::from(h)),
                Ev::Garbage => self.garbage(),
                Ev::HashReady(h) => self.hash_ready(usize::from(h))?,
            }
            if self.log.finished_at.is_some() && self.all_receivers_ended() {
                break;
            }
        }
        if self.log.finished_at.is_none() {
            return Err(Failure::TimeLimit(self.sc.time_limit));
        }
        Ok(())
    }

    fn all_receivers_ended(&self) -> bool {
        self.hosts[self.senders..].iter().all(|h| {
            h.crashed_at.is_some()
                || matches!(&h.machine, Machine::Receivers(rxs) if rxs.endpoint.is_finished())
        })
    }

    /// Drains a host's machine after an input at CPU time `now`: transmits
    /// (each costing its [`crate::HostCost`] send cost, and waiting first
    /// while the uplink is full if sends block), events (and the application's reactions,
    /// which may owe more transmits), then re-arms its timer. Returns the
    /// CPU time at which the host is free again.
    fn service(&mut self, h: usize, mut now: u64) -> Result<u64, Fail> {
        let mut sent = 0usize;
        let is_sender = h < self.senders;
        if is_sender {
            // The datagram or timer just handled may have moved the window.
            self.observe_sender(h, now)?;
        }
        loop {
            loop {
                if !self.writable_now(h, now) {
                    // Waiting for room on the uplink: no more sends for now.
                    break;
                }
                let host = &mut self.hosts[h];
                let at = Instant::from_nanos(now);
                let t = match &mut host.machine {
                    Machine::Sender(s) => s.poll_transmit(at, &self.sides[h].object, &mut host.buf),
                    Machine::Receivers(rxs) => rxs
                        .endpoint
                        .poll_transmit(at, &mut host.buf)
                        .map(|(_, t)| t),
                };
                if is_sender {
                    self.observe_sender(h, now)?;
                }
                let Some(t) = t else { break };
                sent += 1;
                if sent > TRANSMIT_BOUND {
                    return Err(invariant(
                        now,
                        format!("host {h} emits datagrams without end"),
                    ));
                }
                let route = match t.dest {
                    Dest::Group => Some(Route::Group),
                    Dest::Unicast(addr) => {
                        host_of(addr, self.hosts.len()).map(|d| Route::Host(d as u16))
                    }
                };
                let Some(route) = route else {
                    now += self.sc.cost_of(h).send_ns(t.len);
                    self.drops.no_route += 1;
                    continue;
                };
                let host = &self.hosts[h];
                let pkt = self
                    .pool
                    .alloc(&host.buf[..t.len], h as u16, route, Some(t.kind));
                self.pool.slots[pkt as usize].frags = self.frags(t.len);
                if self.sc.blocking_send {
                    let wire = self.sc.wire_bytes(t.len);
                    if let Some(at) = self.hosts[h].uplink.room_at(now, wire)
                        && at > now
                    {
                        // The socket is not writable: hold the datagram
                        // and go on reading input until it is.
                        self.hosts[h].pending_send = Some(pkt);
                        self.arm_writable(h, at);
                        break;
                    }
                }
                now += self.sc.cost_of(h).send_ns(t.len);
                self.uplink_send(h, now, pkt);
            }
            if !self.react(h, now)? {
                break;
            }
        }
        self.arm_timer(h, now);
        Ok(now)
    }

    /// Checks the sender's buffer after a step of its machine: never more
    /// packets outstanding than the window; records the trace when asked.
    fn observe_sender(&mut self, h: usize, now: u64) -> Result<(), Fail> {
        let Machine::Sender(s) = &self.hosts[h].machine else {
            unreachable!("hosts 0..S are senders");
        };
        let side = &mut self.sides[h];
        if self.sc.trace_rate
            && let Some(c) = s.rate()
        {
            let spacing_ns = u64::try_from(c.spacing().as_nanos()).unwrap_or(u64::MAX);
            let decrease = c.state() == rmcast_proto::HuntState::Decrease;
            let last = side.rate_trace.last();
            if last.is_none_or(|l| (l.spacing_ns, l.decrease) != (spacing_ns, decrease)) {
                side.rate_trace.push(RateSample {
                    at_ns: now,
                    spacing_ns,
                    decrease,
                    sent: s.stats().data_packets,
                    rtt_ns: u64::try_from(c.rtt().as_nanos()).unwrap_or(u64::MAX),
                });
            }
        }
        // Once every byte is acknowledged (or every receiver failed) nothing
        // is outstanding; `outstanding()` used to underflow then (see
        // tests/proto_findings.rs), so it is not asked.
        if s.acked_bytes() >= self.sc.object_size {
            return Ok(());
        }
        let outstanding = s.outstanding();
        if outstanding > self.window {
            return Err(Failure::Invariant {
                at: dur(now),
                what: format!(
                    "sender has {outstanding} packets outstanding, window is {}",
                    self.window
                ),
            });
        }
        side.max_outstanding = side.max_outstanding.max(outstanding);
        if self.sc.trace_outstanding {
            let sent = u32::try_from(s.stats().data_packets).unwrap_or(u32::MAX);
            let last = side.outstanding_trace.last();
            if last.is_none_or(|l| (l.sent, l.outstanding) != (sent, outstanding)) {
                side.outstanding_trace.push(OutstandingSample {
                    at_ns: now,
                    sent,
                    outstanding,
                });
            }
        }
        Ok(())
    }

    /// Handles the machine's events; returns whether any arrived.
    fn react(&mut self, h: usize, now: u64) -> Result<bool, Fail> {
        let mut any = false;
        let host = &mut self.hosts[h];
        match &mut host.machine {
            Machine::Sender(s) => {
                while let Some(e) = s.poll_event() {
                    any = true;
                    match e {
                        SenderEvent::Verified { .. } => self.log.last_verdict_at = now,
                        SenderEvent::MemberFailed { name, .. } => {
                            self.log.last_verdict_at = now;
                            let host = name.strip_prefix('r').and_then(|k| k.parse::<usize>().ok());
                            if let Some(slot) = host.and_then(|k| self.log.failed_at.get_mut(k)) {
                                slot.get_or_insert(now);
                            }
                        }
                        SenderEvent::Finished => {
                            self.log.finished[h] = Some(now);
                            if self.log.finished.iter().all(Option::is_some) {
                                self.log.finished_at = Some(now);
                            }
                        }
                        _ => {}
                    }
                }
            }
            Machine::Receivers(rxs) => {
                rxs.sync_apps();
                while let Some((s, e)) = rxs.endpoint.poll_event() {
                    any = true;
                    let r = rxs.endpoint.session_mut(s);
                    let app = &mut rxs.apps[s.0];
                    match e {
                        ReceiverEvent::Admitted { rank, .. } => app.rank = Some(rank),
                        ReceiverEvent::Offer(info) => {
                            if info.size != self.sc.object_size {
                                return Err(invariant(
                                    now,
                                    format!("host {h} was offered {info:?}"),
                                ));
                            }
                            app.data = vec![0; info.size as usize];
                            app.delivered = vec![0; (info.packets as usize).div_ceil(64)];
                            app.payload_size = u64::from(info.payload_size);
                            r.accept_offer();
                        }
                        ReceiverEvent::AllData => {
                            let Some(k) = side_of(&self.sides, r) else {
                                return Err(invariant(
                                    now,
                                    format!("host {h} holds all data of no sender's session"),
                                ));
                            };
                            let hash = self.sides[k].hash;
                            if r.expected_hash() != Some(hash) {
                                return Err(invariant(
                                    now,
                                    format!(
                                        "host {h} was asked to verify against {:?}",
                                        r.expected_hash()
                                    ),
                                ));
                            }
                            app.all_data_at = Some(now);
                            let got = *blake3::hash(&app.data).as_bytes();
                            if got == hash {
                                app.hash_ok = true;
                                r.confirm(Status::Ok, got, "");
                            } else {
                                r.confirm(Status::HashMismatch, got, "hash differs");
                            }
                        }
                        ReceiverEvent::Finished => app.ended_at = Some(now),
                        ReceiverEvent::Failed(why) => {
                            app.ended_at = Some(now);
                            app.failure = Some(why);
                        }
                    }
                }
            }
        }
        Ok(any)
    }

    fn arm_timer(&mut self, h: usize, now: u64) {
        let host = &mut self.hosts[h];
        let want = match &host.machine {
            Machine::Sender(s) => s.poll_timeout(),
            Machine::Receivers(rxs) => rxs.endpoint.poll_timeout(),
        }
        .map(|t| t.as_nanos().max(now))
        // A host waiting to send cannot act on an expiry before it may send
        // (the machine's deadline may be "transmit now").
        .map(|t| t.max(host.writable_at.unwrap_or(0)));
        if want == host.timer_at {
            return;
        }
        host.timer_at = want;
        host.timer_gen += 1;
        let generation = host.timer_gen;
        if let Some(t) = want {
            self.push(t, Ev::Timer(h as u16, generation));
        }
    }

    /// The driver's hashing thread hands the machine the hash and wakes the
    /// event loop, which transmits (once its CPU is free, as for a timer).
    fn hash_ready(&mut self, h: usize) -> Result<(), Fail> {
        let now = self.now;
        if self.hosts[h].cpu_free > now {
            let at = self.hosts[h].cpu_free;
            self.push(at, Ev::HashReady(h as u16));
            return Ok(());
        }
        let hash = self.sides[h].hash;
        if let Machine::Sender(s) = &mut self.hosts[h].machine {
            s.set_object_hash(hash);
        }
        let end = self.service(h, now)?;
        self.hosts[h].cpu_free = end;
        Ok(())
    }

    fn timer(&mut self, h: usize, generation: u64) -> Result<(), Fail> {
        let now = self.now;
        let host = &mut self.hosts[h];
        if generation != host.timer_gen || host.crashed_at.is_some() {
            return Ok(());
        }
        if host.cpu_free > now {
            // The CPU is busy: the expiry is handled when it frees up.
            let at = host.cpu_free;
            self.push(at, Ev::Timer(h as u16, generation));
            return Ok(());
        }
        if host.last_fire == now {
            host.fires_at_same_instant += 1;
            if host.fires_at_same_instant > LIVELOCK_FIRES {
                return Err(Failure::Livelock {
                    at: dur(now),
                    host: h as u16,
                });
            }
        } else {
            host.last_fire = now;
            host.fires_at_same_instant = 0;
        }
        host.timer_at = None;
        let at = Instant::from_nanos(now);
        match &mut host.machine {
            Machine::Sender(s) => s.handle_timeout(at),
            Machine::Receivers(rxs) => rxs.endpoint.handle_timeout(at),
        }
        let end = self.service(h, now)?;
        self.hosts[h].cpu_free = end;
        Ok(())
    }

    fn frags(&self, udp_payload: usize) -> u16 {
        u16::try_from(self.sc.fragments(udp_payload)).expect("at most 65,535 fragments")
    }

    /// Queues every fragment of a datagram (one reference held, given up
    /// here) on host `h`'s uplink; each fragment that fits travels on.
    fn uplink_send(&mut self, h: usize, now: u64, pkt: u32) {
        let slot = &self.pool.slots[pkt as usize];
        let (len, frags) = (slot.bytes.len(), slot.frags);
        for frag in 0..frags {
            let wire = self.sc.frame_wire_bytes(len, usize::from(frag));
            match self.hosts[h]
                .uplink
                .admit(now, wire, self.sc.link_rate_bits_per_s)
            {
                Some(finish) => {
                    let at = finish + nanos(self.sc.propagation_delay);
                    self.pool.retain(pkt);
                    self.push(at, Ev::AtSwitch(pkt, frag));
                }
                None => self.drops.uplink_overflow += 1,
            }
        }
        self.pool.release(pkt);
    }

    /// Store-and-forward of one frame: copies it to every port it is for.
    fn at_switch(&mut self, pkt: u32, frag: u16) {
        let slot = &self.pool.slots[pkt as usize];
        let (src, route) = (slot.src, slot.route);
        match route {
            Route::Group => {
                // A lone sender is no member of its group (as before
                // several senders existed); several senders hear each other.
                let first = usize::from(self.senders == 1);
                for p in first..self.hosts.len() {
                    if p != usize::from(src) {
                        self.pool.retain(pkt);
                        self.port_send(p, pkt, frag);
                    }
                }
            }
            Route::Host(d) => {
                if d != src {
                    self.pool.retain(pkt);
                    self.port_send(usize::from(d), pkt, frag);
                }
            }
        }
        self.pool.release(pkt);
    }

    /// Queues one frame (one reference held) on the switch port towards host
    /// `p`; the loss models draw once per frame.
    fn port_send(&mut self, p: usize, pkt: u32, frag: u16) {
        let now = self.now;
        let slot = &self.pool.slots[pkt as usize];
        let wire = self
            .sc
            .frame_wire_bytes(slot.bytes.len(), usize::from(frag));
        let kind = slot.kind;
        let Some(finish) = self.hosts[p]
            .port
            .admit(now, wire, self.sc.link_rate_bits_per_s)
        else {
            self.drops.port_overflow += 1;
            self.pool.release(pkt);
            return;
        };
        // Loss happens on the wire: the frame still used the port's time.
        let lost = if p < self.senders {
            kind.is_some()
                && self.sc.control_loss > 0.0
                && self.control_rng.random::<f64>() < self.sc.control_loss
        } else if kind == Some(Kind::Data) {
            let host = &mut self.hosts[p];
            let frame = host.data_frames;
            host.data_frames += 1;
            // The burst chain steps once per full-size frame time on the
            // link, so a burst lasts a bounded time however sparse the
            // traffic (a backed-off sender must not stretch it to seconds).
            let frame_ns =
                (self.sc.mtu as u64 + 38) * 8 * 1_000_000_000 / self.sc.link_rate_bits_per_s.max(1);
            let steps = ((now.saturating_sub(host.loss_at)) / frame_ns.max(1)).max(1);
            host.loss_at = now;
            let lost = match &self.sc.loss {
                LossModel::Frames(frames) => frames.contains(&frame),
                model => data_lost(model, &mut host.loss_rng, &mut host.loss_bad, steps),
            };
            if lost {
                host.counters.data_lost += 1;
            }
            lost
        } else {
            false
        };
        if lost {
            if p < self.senders {
                self.drops.control_loss += 1;
            } else {
                self.drops.data_loss += 1;
            }
            self.pool.release(pkt);
            return;
        }
        let at = finish + nanos(self.sc.propagation_delay);
        self.push(at, Ev::AtHost(p as u16, pkt, frag));
    }

    /// A frame reaches host `h` (one reference held): a whole datagram goes
    /// to the socket, a fragment to reassembly.
    fn at_host(&mut self, h: usize, pkt: u32, frag: u16) {
        let slot = &self.pool.slots[pkt as usize];
        let frags = slot.frags;
        if self.hosts[h].crashed_at.is_some() {
            if frag == 0 {
                self.drops.crashed_host += 1;
            }
            self.pool.release(pkt);
            return;
        }
        if frags == 1 {
            self.enqueue_socket(h, pkt);
            return;
        }
        let (ip_id, src, len) = (slot.ip_id, slot.src, slot.bytes.len());
        let now = self.now;
        let timeout = self.reasm_timeout;
        // Expired datagrams, and older ones from the same source (fragments
        // of one source never overtake each other, so those are lost).
        self.reasm_drop(h, |r| {
            now.saturating_sub(r.first_at) >= timeout || (r.src == src && r.ip_id < ip_id)
        });
        let bytes = self.sc.fragment_ip_payload(len, usize::from(frag));
        let limit = self.sc.reassembly_buffer_bytes;
        if len + 8 > limit {
            // Never fits in reassembly memory: lost, counted once.
            if frag == 0 {
                self.hosts[h].counters.fragment_loss += 1;
                self.drops.fragment_loss += 1;
            }
            self.pool.release(pkt);
            return;
        }
        // Make room: drop the oldest incomplete datagrams other than this one.
        while self.hosts[h].reasm_bytes + bytes > limit {
            let host = &self.hosts[h];
            let Some(oldest) = host.reasm.iter().position(|r| r.ip_id != ip_id) else {
                break;
            };
            let victim = host.reasm[oldest].ip_id;
            self.reasm_drop(h, |r| r.ip_id == victim);
        }
        let host = &mut self.hosts[h];
        let i = match host.reasm.iter().position(|r| r.ip_id == ip_id) {
            Some(i) => i,
            None => {
                self.pool.retain(pkt);
                host.reasm.push(Reasm {
                    ip_id,
                    src,
                    pkt,
                    first_at: now,
                    received: 0,
                    next: 0,
                    bytes: 0,
                });
                host.reasm.len() - 1
            }
        };
        let r = &mut host.reasm[i];
        debug_assert!(
            frag >= r.next,
            "fragments of one datagram overtook each other"
        );
        r.received += 1;
        r.next = frag + 1;
        r.bytes += bytes;
        host.reasm_bytes += bytes;
        if r.received == frags {
            let r = host.reasm.remove(i);
            host.reasm_bytes -= r.bytes;
            // The reassembly's reference goes to the socket.
            self.enqueue_socket(h, r.pkt);
        }
        self.pool.release(pkt);
    }

    /// Drops host `h`'s incomplete datagrams that match, counting each as
    /// fragment loss.
    fn reasm_drop(&mut self, h: usize, mut lost: impl FnMut(&Reasm) -> bool) {
        let host = &mut self.hosts[h];
        let mut k = 0;
        while k < host.reasm.len() {
            if lost(&host.reasm[k]) {
                let r = host.reasm.remove(k);
                host.reasm_bytes -= r.bytes;
                host.counters.fragment_loss += 1;
                self.drops.fragment_loss += 1;
                self.pool.release(r.pkt);
            } else {
                k += 1;
            }
        }
    }

    /// A whole datagram (one reference held) enters host `h`'s socket
    /// buffer, which counts UDP payload bytes, or is dropped if it is full.
    fn enqueue_socket(&mut self, h: usize, pkt: u32) {
        let now = self.now;
        let len = self.pool.slots[pkt as usize].bytes.len();
        let host = &mut self.hosts[h];
        if host.socket_bytes + len > self.sc.socket_buffer_bytes {
            self.drops.socket_overflow += 1;
            host.counters.socket_overflow += 1;
            self.pool.release(pkt);
            return;
        }
        host.socket.push_back(pkt);
        host.socket_bytes += len;
        host.max_socket_bytes = host.max_socket_bytes.max(host.socket_bytes);
        if !host.cpu_scheduled {
            host.cpu_scheduled = true;
            let at = host.cpu_free.max(now);
            self.push(at, Ev::Cpu(h as u16));
        }
    }

    /// Whether host `h` may hand the machine's next datagram to its uplink
    /// at `now`: always without `blocking_send`; else when nothing is held
    /// back and the uplink has room for the largest datagram the host sends
    /// (a socket is writable when a full-size send fits). If not, a
    /// `Writable` event is armed for when it is.
    fn writable_now(&mut self, h: usize, now: u64) -> bool {
        if !self.sc.blocking_send {
            return true;
        }
        if self.hosts[h].pending_send.is_some() {
            return false;
        }
        let largest = if h < self.senders {
            self.sc.config.packet_size
        } else {
            self.sc.mtu.saturating_sub(28).max(1)
        };
        let need = self.sc.wire_bytes(largest);
        match self.hosts[h].uplink.room_at(now, need) {
            Some(at) if at > now => {
                self.arm_writable(h, at);
                false
            }
            _ => true,
        }
    }

    fn arm_writable(&mut self, h: usize, at: u64) {
        let host = &mut self.hosts[h];
        if host.writable_at.is_none() {
            host.writable_at = Some(at);
            self.push(at, Ev::Writable(h as u16));
        }
    }

    /// The uplink has room again: send the held-back datagram, if any (its
    /// send cost starts once the CPU is free), and let the machine go on.
    fn writable(&mut self, h: usize) -> Result<(), Fail> {
        let now = self.now;
        let host = &mut self.hosts[h];
        if host.crashed_at.is_some() {
            return Ok(());
        }
        if host.cpu_free > now {
            let at = host.cpu_free;
            self.push(at, Ev::Writable(h as u16));
            return Ok(());
        }
        host.writable_at = None;
        let mut t = now;
        if let Some(pkt) = host.pending_send.take() {
            t += self
                .sc
                .cost_of(h)
                .send_ns(self.pool.slots[pkt as usize].bytes.len());
            self.uplink_send(h, t, pkt);
        }
        let end = self.service(h, t)?;
        self.hosts[h].cpu_free = end;
        Ok(())
    }

    fn cpu(&mut self, h: usize) -> Result<(), Fail> {
        let host = &mut self.hosts[h];
        if host.crashed_at.is_some() {
            return Ok(());
        }
        if host.cpu_free > self.now {
            // Busy (a timer or a send ran meanwhile): read when it frees up.
            let at = host.cpu_free;
            self.push(at, Ev::Cpu(h as u16));
            return Ok(());
        }
        let Some(pkt) = host.socket.pop_front() else {
            host.cpu_scheduled = false;
            return Ok(());
        };
        let slot = &self.pool.slots[pkt as usize];
        // The application read it: the socket buffer frees the space now.
        host.socket_bytes -= slot.bytes.len();
        let jitter = if self.cpu_jitter > 0 {
            host.cpu_rng.random_range(0..=self.cpu_jitter)
        } else {
            0
        };
        let t = self.now + self.sc.cost_of(h).recv_ns(slot.bytes.len()) + jitter;
        let from = if slot.src == INTRUDER {
            intruder_addr()
        } else {
            host_addr(usize::from(slot.src))
        };
        if slot.kind.is_none() {
            host.counters.garbage_seen += 1;
        }
        let at = Instant::from_nanos(t);
        match &mut host.machine {
            Machine::Sender(s) => s.handle_datagram(at, from, &slot.bytes),
            Machine::Receivers(rxs) => {
                // The endpoint routes it, as the runtime's does.
                let routed = rxs.endpoint.handle_datagram(at, from, &slot.bytes);
                rxs.sync_apps();
                if let Some((s, Some(chunk))) = routed {
                    let Some(k) = side_of(&self.sides, rxs.endpoint.session(s)) else {
                        return Err(invariant(
                            t,
                            format!("host {h}: data of no sender's session delivered"),
                        ));
                    };
                    if let Err(what) = deliver(&mut rxs.apps[s.0], &self.sides[k].object, chunk) {
                        return Err(invariant(t, format!("host {h}: {what}")));
                    }
                }
            }
        }
        self.pool.release(pkt);
        let end = self.service(h, t)?;
        let host = &mut self.hosts[h];
        host.cpu_free = end;
        if host.socket.is_empty() {
            host.cpu_scheduled = false;
        } else {
            self.push(end, Ev::Cpu(h as u16));
        }
        Ok(())
    }

    fn crash(&mut self, h: usize) {
        let now = self.now;
        let host = &mut self.hosts[h];
        if host.crashed_at.is_some() {
            return;
        }
        host.crashed_at = Some(now);
        host.socket_bytes = 0;
        host.reasm_bytes = 0;
        for r in std::mem::take(&mut host.reasm) {
            self.pool.release(r.pkt);
        }
        if let Some(pkt) = host.pending_send.take() {
            self.pool.release(pkt);
        }
        let queued: Vec<u32> = host.socket.drain(..).collect();
        for pkt in queued {
            self.drops.crashed_host += 1;
            self.pool.release(pkt);
        }
    }

    fn next_garbage_gap(&mut self) -> u64 {
        let u: f64 = self.garbage_rng.random::<f64>().max(1e-12);
        let gap_s = -u.ln() / self.sc.garbage_per_s;
        self.now + (gap_s * 1e9) as u64 + 1
    }

    /// Injects one garbage datagram from an intruder outside the session,
    /// straight into the switch: to the group or to the sender.
    fn garbage(&mut self) {
        if self.log.finished_at.is_some() {
            return;
        }
        let next = self.next_garbage_gap();
        self.push(next, Ev::Garbage);
        self.garbage_injected += 1;
        let mut buf = [0u8; 512];
        let rng = &mut self.garbage_rng;
        let to_sender = rng.random_bool(0.25);
        let len = match rng.random_range(0..4u8) {
            0 => {
                let len = rng.random_range(0..300usize);
                rng.fill_bytes(&mut buf[..len]);
                len
            }
            1 => {
                // Looks like rmcast at first glance, then garbage.
                let len = rng.random_range(4..300usize);
                rng.fill_bytes(&mut buf[..len]);
                buf[..3].copy_from_slice(&[b'R', b'M', VERSION]);
                len
            }
            2 => {
                // A well-formed packet of a foreign session.
                let session = SessionId(rng.next_u64() | 1);
                let mut session = session;
                if self.sides.iter().any(|x| x.session == session) {
                    session = SessionId(session.0 ^ 2);
                }
                while self.sides.iter().any(|x| x.session == session) {
                    session = SessionId(session.0.wrapping_add(4));
                }
                foreign_packet(rng, session, &mut buf)
            }
            _ => {
                // Our session id, but from an address that is not the sender's.
                foreign_packet(rng, self.sides[0].session, &mut buf)
            }
        };
        let route = if to_sender {
            Route::Host(0)
        } else {
            Route::Group
        };
        let pkt = self.pool.alloc(&buf[..len], INTRUDER, route, None);
        let frags = self.frags(len);
        self.pool.slots[pkt as usize].frags = frags;
        // Straight into the switch, every fragment at once (one reference each).
        for _ in 1..frags {
            self.pool.retain(pkt);
        }
        for frag in 0..frags {
            self.at_switch(pkt, frag);
        }
    }

    /// At the end of a run, counts the incomplete datagrams that are surely
    /// lost (one fragment missing before the last one that arrived, or past
    /// the reassembly timeout); the others were still in flight.
    fn settle_reassembly(&mut self) {
        let now = self.now;
        let timeout = self.reasm_timeout;
        for h in 0..self.hosts.len() {
            self.reasm_drop(h, |r| {
                r.received < r.next || now.saturating_sub(r.first_at) >= timeout
            });
        }
    }

    fn check_final(&mut self) -> Result<(), Fail> {
        let now = self.now;
        let crashed = |h: usize| self.hosts[h].crashed_at.is_some();
        for k in 0..self.senders {
            let Machine::Sender(s) = &self.hosts[k].machine else {
                unreachable!("hosts 0..S are senders");
            };
            let outcome = s.outcome().expect("finished sender has an outcome").clone();
            let object = &self.sides[k].object;
            for m in &outcome.members {
                let Some(h) = host_of(m.addr, self.hosts.len()).filter(|&h| h >= self.senders)
                else {
                    return Err(invariant(now, format!("member {m:?} is no receiver host")));
                };
                if m.verified && self.rx(h, k).is_none_or(|(_, app)| app.data != *object) {
                    return Err(invariant(
                        now,
                        format!(
                            "sender {k} reports host {h} verified, but its bytes differ from the object"
                        ),
                    ));
                }
                if !m.verified && m.reason.is_none() {
                    return Err(invariant(
                        now,
                        format!("member {m:?} failed without a reason"),
                    ));
                }
            }
            if self.sc.crashes.is_empty() && !outcome.ok {
                return Err(invariant(
                    now,
                    format!("no crash configured, yet sender {k}'s outcome is {outcome:#?}"),
                ));
            }
            if outcome.error.is_none() {
                for h in self.senders..self.hosts.len() {
                    if crashed(h) {
                        continue;
                    }
                    let verified = outcome
                        .members
                        .iter()
                        .any(|m| m.verified && m.addr == host_addr(h));
                    if !verified {
                        return Err(invariant(
                            now,
                            format!("live host {h} is not verified by sender {k}: {outcome:#?}"),
                        ));
                    }
                }
            }
        }
        for h in self.senders..self.hosts.len() {
            let Machine::Receivers(rxs) = &self.hosts[h].machine else {
                unreachable!("hosts S.. are receivers");
            };
            for (_, r) in rxs.endpoint.iter() {
                if !crashed(h) && !r.is_finished() {
                    return Err(invariant(
                        now,
                        match side_of(&self.sides, r) {
                            Some(k) => {
                                format!("live host {h}'s receiver of sender {k} never ended")
                            }
                            None => format!("live host {h}'s listener for a session never ended"),
                        },
                    ));
                }
            }
        }
        for (h, host) in self.hosts.iter().enumerate() {
            if host.socket_bytes > self.sc.socket_buffer_bytes
                || host.max_socket_bytes > self.sc.socket_buffer_bytes
            {
                return Err(invariant(
                    now,
                    format!("host {h}'s socket buffer went over its limit"),
                ));
            }
        }
        Ok(())
    }

    /// Receiver host `h`'s machine and application for sender `k`'s
    /// session, if it joined it.
    fn rx(&self, h: usize, k: usize) -> Option<(&Receiver, &RxApp)> {
        let Machine::Receivers(rxs) = &self.hosts[h].machine else {
            unreachable!("hosts S.. are receivers");
        };
        rxs.endpoint
            .iter()
            .find(|(_, r)| side_of(&self.sides, r) == Some(k))
            .map(|(s, r)| (r, &rxs.apps[s.0]))
    }

    fn report(&self) -> RunReport {
        let Machine::Sender(s) = &self.hosts[0].machine else {
            unreachable!("host 0 is the sender");
        };
        let stats = s.stats().clone();
        let finished = self.log.finished[0].unwrap_or(self.now);
        let seconds = secs(finished);
        let per_data = |x: u64| {
            if stats.data_packets == 0 {
                0.0
            } else {
                x as f64 / stats.data_packets as f64
            }
        };
        let receivers: Vec<ReceiverReport> = self.hosts[self.senders..]
            .iter()
            .enumerate()
            .map(|(i, host)| {
                let Machine::Receivers(rxs) = &host.machine else {
                    unreachable!("hosts S.. are receivers");
                };
                // One sender: its machine; several: the worst of them.
                let latest = |f: fn(&RxApp) -> Option<u64>| -> Option<f64> {
                    let all: Option<Vec<u64>> = rxs.apps.iter().map(f).collect();
                    all.and_then(|v| v.into_iter().max()).map(secs)
                };
                let c = &host.counters;
                ReceiverReport {
                    host: (i + 1) as u16,
                    name: format!("r{}", i + 1),
                    addr: host_addr(i + self.senders),
                    // Sender 0's session, as before the endpoint.
                    rank: self.rx(i + self.senders, 0).and_then(|(_, app)| app.rank),
                    hash_ok: rxs.apps.iter().all(|a| a.hash_ok),
                    all_data_seconds: latest(|a| a.all_data_at),
                    ended_seconds: latest(|a| a.ended_at),
                    failure: rxs.apps.iter().find_map(|a| a.failure.clone()),
                    crashed_seconds: host.crashed_at.map(secs),
                    sender_failed_seconds: self.log.failed_at[i + 1].map(secs),
                    stats: sum_stats(
                        rxs.endpoint.iter().map(|(_, r)| r.stats()),
                        rxs.endpoint.stats(),
                    ),
                    data_lost: c.data_lost,
                    data_frames: host.data_frames,
                    fragment_loss: c.fragment_loss,
                    socket_overflow: c.socket_overflow,
                    garbage_seen: c.garbage_seen,
                }
            })
            .collect();
        let feedback_sent = receivers.iter().map(|r| r.stats.acks + r.stats.naks).sum();
        RunReport {
            seed: self.sc.seed,
            seconds,
            verdicts_seconds: secs(self.log.last_verdict_at),
            goodput_mbit_s: if seconds > 0.0 {
                self.sc.object_size as f64 * 8.0 / seconds / 1e6
            } else {
                0.0
            },
            data_packets: stats.data_packets,
            retransmitted_packets: stats.retransmitted_packets,
            control_packets: stats.control_packets,
            control_per_data: per_data(stats.control_packets),
            feedback_per_data: per_data(stats.acks + stats.naks),
            feedback_sent,
            drops: self.drops.clone(),
            garbage_injected: self.garbage_injected,
            sender_garbage_seen: self.hosts[0].counters.garbage_seen,
            outcome: s
                .outcome()
                .cloned()
                .expect("finished sender has an outcome"),
            sender: stats,
            receivers,
            max_socket_buffer_bytes: self
                .hosts
                .iter()
                .map(|h| h.max_socket_bytes)
                .max()
                .unwrap_or(0),
            max_port_queue_bytes: self
                .hosts
                .iter()
                .map(|h| h.port.max_bytes)
                .max()
                .unwrap_or(0),
            max_uplink_queue_bytes: self
                .hosts
                .iter()
                .map(|h| h.uplink.max_bytes)
                .max()
                .unwrap_or(0),
            events: self.events,
            max_outstanding: self.sides[0].max_outstanding,
            outstanding_trace: self.sides[0].outstanding_trace.clone(),
            rate_trace: self.sides[0].rate_trace.clone(),
            senders: (0..self.senders).map(|k| self.sender_report(k)).collect(),
        }
    }

    fn sender_report(&self, k: usize) -> SenderReport {
        let Machine::Sender(s) = &self.hosts[k].machine else {
            unreachable!("hosts 0..S are senders");
        };
        let side = &self.sides[k];
        SenderReport {
            host: k as u16,
            session: side.session,
            seconds: secs(self.log.finished[k].unwrap_or(self.now)),
            stats: s.stats().clone(),
            outcome: s
                .outcome()
                .cloned()
                .expect("finished sender has an outcome"),
            rate: s.rate().map(|c| c.stats().clone()),
            group: s.rate_group().map(|g| g.stats().clone()),
            max_outstanding: side.max_outstanding,
            outstanding_trace: if k == 0 {
                Vec::new()
            } else {
                side.outstanding_trace.clone()
            },
            rate_trace: if k == 0 {
                Vec::new()
            } else {
                side.rate_trace.clone()
            },
        }
    }

    /// The machines' state for a failure report.
    fn snapshot(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "  virtual time {:.6} s, {} events, drops {:?}",
            secs(self.now),
            self.events,
            self.drops
        );
        for (h, host) in self.hosts.iter().enumerate() {
            let crashed = host
                .crashed_at
                .map(|t| format!(" CRASHED at {:.6} s", secs(t)))
                .unwrap_or_default();
            match &host.machine {
                Machine::Sender(s) => {
                    // `outstanding()` underflows once every receiver failed.
                    let outstanding = if s.acked_bytes() < self.sc.object_size {
                        s.outstanding()
                    } else {
                        0
                    };
                    let _ = writeln!(
                        out,
                        "  host {h} sender {}: finished {}, joined {}, packets {}, acked {} of {} bytes, outstanding {}, timer {:?}, {:?}",
                        s.session(),
                        s.is_finished(),
                        s.joined(),
                        s.packets(),
                        s.acked_bytes(),
                        self.sc.object_size,
                        outstanding,
                        s.poll_timeout(),
                        s.stats()
                    );
                }
                Machine::Receivers(rxs) => {
                    let k = h + 1 - self.senders;
                    for (s, r) in rxs.endpoint.iter() {
                        let session = side_of(&self.sides, r).map_or_else(
                            || "listening".to_string(),
                            |k| self.sides[k].session.to_string(),
                        );
                        let failure = &rxs.apps.get(s.0).and_then(|a| a.failure.clone());
                        let _ = writeln!(
                            out,
                            "  host {h} r{k}{crashed} (session {}): rank {:?}, finished {}, holds {} bytes in order, failure {:?}, timer {:?}, socket {} B, {:?}",
                            session,
                            r.rank(),
                            r.is_finished(),
                            r.received_bytes(),
                            failure,
                            r.poll_timeout(),
                            host.socket_bytes,
                            r.stats()
                        );
                    }
                }
            }
        }
        out
    }
}

/// The counters of several receiver machines on one host, added up, with
/// what their endpoint dropped counted as the strays one machine would
/// have counted (one session: the endpoint drops nothing).
fn sum_stats<'a>(
    all: impl Iterator<Item = &'a ReceiverStats>,
    dropped: &EndpointStats,
) -> ReceiverStats {
    let mut t = ReceiverStats {
        foreign: dropped.unrouted,
        malformed: dropped.malformed,
        ..ReceiverStats::default()
    };
    for x in all {
        t.data_packets += x.data_packets;
        t.duplicates += x.duplicates;
        t.out_of_window += x.out_of_window;
        t.acks += x.acks;
        t.naks += x.naks;
        t.rate_naks += x.rate_naks;
        t.rate_naks_heard += x.rate_naks_heard;
        t.malformed += x.malformed;
        t.foreign += x.foreign;
    }
    t
}

fn invariant(at: u64, what: String) -> Fail {
    Failure::Invariant { at: dur(at), what }
}

/// Stores a delivered chunk, checking it is new, aligned and the right bytes.
fn deliver(app: &mut RxApp, object: &[u8], chunk: DataChunk<'_>) -> Result<(), String> {
    if app.payload_size == 0 {
        return Err(format!(
            "data delivered at offset {} before any offer",
            chunk.offset
        ));
    }
    if !chunk.offset.is_multiple_of(app.payload_size) {
        return Err(format!("chunk at unaligned offset {}", chunk.offset));
    }
    let index = chunk.offset / app.payload_size;
    let (word, bit) = ((index / 64) as usize, index % 64);
    let start = chunk.offset as usize;
    let end = start + chunk.bytes.len();
    if word >= app.delivered.len() || end > app.data.len() {
        return Err(format!("chunk {}..{} lies outside the object", start, end));
    }
    if app.delivered[word] & (1 << bit) != 0 {
        return Err(format!(
            "packet {index} (bytes {start}..{end}) delivered twice"
        ));
    }
    if chunk.bytes != &object[start..end] {
        return Err(format!(
            "packet {index} (bytes {start}..{end}) delivered with wrong bytes"
        ));
    }
    app.delivered[word] |= 1 << bit;
    app.data[start..end].copy_from_slice(chunk.bytes);
    Ok(())
}

/// Draws one frame's fate; the Gilbert–Elliott chain first advances
/// `steps` steps (closed form for a two-state chain).
fn data_lost(model: &LossModel, rng: &mut ChaCha8Rng, bad: &mut bool, steps: u64) -> bool {
    match *model {
        LossModel::None | LossModel::Frames(_) => false,
        LossModel::Bernoulli(p) => p > 0.0 && rng.random::<f64>() < p,
        LossModel::GilbertElliott {
            p_good_to_bad,
            p_bad_to_good,
            loss_in_bad,
            loss_in_good,
        } => {
            if steps <= 1 {
                let flip = if *bad { p_bad_to_good } else { p_good_to_bad };
                if rng.random::<f64>() < flip {
                    *bad = !*bad;
                }
            } else {
                // P(bad after n steps) = π + (x₀ − π)·(1 − p_gb − p_bg)^n.
                let total = p_good_to_bad + p_bad_to_good;
                let stationary = if total > 0.0 {
                    p_good_to_bad / total
                } else {
                    0.0
                };
                let decay = (1.0 - total).powi(steps.min(i32::MAX as u64) as i32);
                let start = if *bad { 1.0 } else { 0.0 };
                *bad = rng.random::<f64>() < stationary + (start - stationary) * decay;
            }
            let p = if *bad { loss_in_bad } else { loss_in_good };
            rng.random::<f64>() < p
        }
    }
}

/// Writes a well-formed packet (never a `Hello`, which would lure listening
/// receivers into another session) of `session` into `buf`.
fn foreign_packet(rng: &mut ChaCha8Rng, session: SessionId, buf: &mut [u8]) -> usize {
    let header = Header::new(session, RANK_SENDER);
    let mut payload = [0u8; 64];
    rng.fill_bytes(&mut payload);
    let seq = Seq(rng.next_u32());
    if rng.random_bool(0.1) {
        // Receiver-style feedback, to the group: foreign for everyone.
        let fb = Feedback {
            cumulative: seq,
            echo: seq,
            echo_copy: 0,
            aggregate: false,
            bitmap: &[],
        };
        let packet = Packet {
            header: Header::new(session, 0),
            body: Body::Ack(fb),
        };
        return packet.encode(buf).expect("fits");
    }
    let body = match rng.random_range(0..5u8) {
        0 => Body::Data(Data {
            seq,
            poll: 0xFFFF,
            copy: 0,
            payload: &payload[..rng.random_range(1..64)],
        }),
        1 => Body::Offer(Offer {
            object_size: 1000,
            isn: seq,
            payload_size: 1000,
            window: 4,
            protocol: ProtocolId::Ack,
            protocol_param: 0,
            receivers: 1,
            test_loss_ppm: 0,
            name: "intruder",
        }),
        2 => Body::Close(Close { hash: [7; 32] }),
        3 => Body::Bye(Bye {
            aborted: true,
            text: "intruder",
        }),
        _ => Body::Welcome(Welcome {
            receiver_id: rng.next_u64(),
            rank: 0,
            upstream: None,
        }),
    };
    Packet { header, body }.encode(buf).expect("fits")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_addresses_round_trip_up_to_a_thousand_receivers() {
        for h in 0..=1000 {
            assert_eq!(host_of(host_addr(h), 1001), Some(h));
        }
        assert_eq!(host_of(intruder_addr(), 1001), None);
    }

    #[test]
    fn earliest_event_pops_first_and_ties_keep_insertion_order() {
        let mut heap = BinaryHeap::new();
        for (at, seq) in [(5, 1), (3, 2), (5, 0), (3, 3)] {
            heap.push(Scheduled {
                at,
                seq,
                ev: Ev::Garbage,
            });
        }
        let order: Vec<(u64, u64)> =
            std::iter::from_fn(|| heap.pop().map(|s| (s.at, s.seq))).collect();
        assert_eq!(order, vec![(3, 2), (3, 3), (5, 0), (5, 1)]);
    }

    #[test]
    fn link_drops_tail_when_full_and_drains_at_its_rate() {
        // 1000 wire bytes at 8 Mbit/s take 1 ms.
        let mut link = Link::new(2500);
        assert_eq!(link.admit(0, 1000, 8_000_000), Some(1_000_000));
        assert_eq!(link.admit(0, 1000, 8_000_000), Some(2_000_000));
        assert_eq!(link.admit(0, 1000, 8_000_000), None);
        // After the first frame left there is room again.
        assert_eq!(link.admit(1_000_000, 1000, 8_000_000), Some(3_000_000));
        assert!(link.max_bytes <= 2500);
    }

    #[test]
    fn gilbert_elliott_chain_loses_about_its_mean() {
        let model = LossModel::bursty(0.05, 5.0);
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut bad = false;
        let lost = (0..200_000)
            .filter(|_| data_lost(&model, &mut rng, &mut bad, 1))
            .count();
        let share = lost as f64 / 200_000.0;
        assert!((0.04..0.06).contains(&share), "lost {share}");
    }

    #[test]
    fn a_long_silence_ends_a_burst_as_time_passes() {
        // Bursts of ~5 frames: after 10,000 frame times in the bad state the
        // chain has forgotten where it started and loses at its mean.
        let model = LossModel::bursty(0.05, 5.0);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let lost = (0..20_000)
            .filter(|_| {
                let mut bad = true;
                data_lost(&model, &mut rng, &mut bad, 10_000)
            })
            .count();
        let share = lost as f64 / 20_000.0;
        assert!((0.04..0.06).contains(&share), "lost {share}");
        // One step later the same chain is still almost surely bad.
        let mut bad = true;
        let still = (0..1000)
            .filter(|_| {
                bad = true;
                data_lost(&model, &mut rng, &mut bad, 1)
            })
            .count();
        assert!(still > 700, "{still}");
    }
}
