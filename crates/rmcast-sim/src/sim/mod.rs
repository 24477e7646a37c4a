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

mod app;
mod batch;
mod check;
mod faults;
mod hosts;
mod net;
mod read;
mod timers;

use check::*;
use faults::*;
use timers::*;

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
    /// A multicast frame reaches several hosts at once: `Sim::fanouts[i]`
    /// lists them in the order their `AtHost` events would have popped.
    AtHosts(u32),
    /// The host's CPU is free to read its next datagram.
    Cpu(u16),
    /// The host's uplink has room for the datagram it holds back.
    Writable(u16),
    /// The host's protocol timer, with the generation that armed it.
    Timer(u16, u64),
    Crash(u16),
    /// A restarted sender starts.
    Start(u16),
    /// The host stops for this many nanoseconds.
    Pause(u16, u64),
    /// The host's link goes down for this many nanoseconds.
    LinkDown(u16, u64),
    Garbage,
    /// The sender host's driver finished hashing the object.
    HashReady(u16),
    /// A receiver host's TCP catch-up (`Laggard::Tcp`) of its session (by
    /// handle index) may start once the multicast data is all acknowledged:
    /// look.
    CatchUpReady(u16, u16),
    /// A receiver host's TCP catch-up of its session is over.
    CatchUp(u16, u16),
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

/// One multicast frame reaching several hosts at the same instant, as one
/// event: a group of N would otherwise push and pop N heap entries per
/// frame (and the heap held N of them per frame in flight).
#[derive(Default)]
struct Fanout {
    pkt: u32,
    frag: u16,
    /// The hosts, in the order the switch copied the frame to them.
    hosts: Vec<u16>,
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

/// A receiver's application for one session: the delivery ledger.
///
/// It keeps no copy of the object: each chunk is checked against the
/// sender's bytes when the machine delivers it, so what a receiver holds is
/// known from the bitmap alone, and memory per receiver stays one bit per
/// packet (10,000 receivers of 64 MiB fit in a few GiB).
#[derive(Default)]
struct RxApp {
    /// Bit per packet index: delivered by the machine (or found "on disk").
    delivered: Vec<u64>,
    /// Packets of the offer (bits of `delivered` in use).
    packets: u32,
    /// Packets delivered so far; all of them once `delivered_count == packets`.
    delivered_count: u32,
    /// Leading packets all delivered: `0..prefix` (resume's barrier test).
    prefix: u32,
    /// Object bytes of the offer.
    size: u64,
    payload_size: u64,
    /// Every chunk delivered so far equals the object's bytes where it
    /// lands; a wrong one clears it for good, and the hash verdict fails.
    all_matched: bool,
    rank: Option<u16>,
    hash_ok: bool,
    all_data_at: Option<u64>,
    ended_at: Option<u64>,
    failure: Option<String>,
    /// Resume and delta: the first packet after the manifest, and the
    /// packets this receiver finds "on its disk" once it holds the
    /// packets before it (`Scenario::held`); `None` once reported.
    held: Option<(u32, Vec<(u32, u32)>)>,
    /// Moved to a TCP catch-up (`Laggard::Tcp`) holding this many bytes.
    moved_from: Option<u64>,
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
    /// The host does nothing before then (a restarted sender).
    starts_at: u64,
    /// The host's link is down until this virtual time (0: up).
    link_down_until: u64,
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
    /// A host's private copy of the datagram it reads: sealed packets are
    /// opened in place, and a multicast slot is shared by every host.
    scratch: Vec<u8>,
    /// The transmit buffer every host's machine writes into, allocated
    /// once: a datagram is copied into the pool as soon as it is written,
    /// so one buffer serves all hosts (64 KiB each added up to 640 MiB at
    /// 10,000 receivers).
    tx_buf: Vec<u8>,
    /// Receiver hosts `senders..ended_hosts` have all ended (crashed, or
    /// their endpoint finished): the end-of-run test resumes from there
    /// instead of scanning every host after every event.
    ended_hosts: usize,
    heap: BinaryHeap<Scheduled>,
    /// Events pushed for the current instant (a host's CPU reading the
    /// datagram that just arrived, mostly), in push order. They come after
    /// every event already scheduled for this instant and before any later
    /// one, which a FIFO gives without the heap's log N.
    now_queue: VecDeque<Scheduled>,
    /// The hosts' protocol timers (the `Ev::Timer` events), beside `heap`.
    timers: Timers,
    /// `Ev::AtHosts` batches, reused through `free_fanouts` so the loop
    /// stops allocating once warm.
    fanouts: Vec<Fanout>,
    free_fanouts: Vec<u32>,
    /// The hosts of the fan-out being built (`Sim::at_switch`), kept for reuse.
    fanout_hosts: Vec<u16>,
    seq: u64,
    now: u64,
    events: u64,
    drops: Drops,
    garbage_rng: ChaCha8Rng,
    garbage_injected: u64,
    control_rng: ChaCha8Rng,
    /// Duplication and reordering draws (`Scenario::duplicate`,
    /// `Scenario::reorder`), seeded apart so every other draw stays.
    net_rng: ChaCha8Rng,
    cpu_jitter: u64,
    reasm_timeout: u64,
    log: SenderLog,
    /// Threads that read a fan-out's datagrams (`batch.rs`); 1 reads
    /// every datagram on the event loop's.
    threads: usize,
    /// The run of `Cpu` events being handled (host, sequence number),
    /// what each reader read, and every host's place in the run, kept
    /// for reuse (`batch.rs`).
    cpu_batch: Vec<(u16, u64)>,
    reads: Vec<Option<Result<read::Read, Fail>>>,
    ahead: Vec<Option<Result<read::Read, Fail>>>,
    run_position: Vec<u32>,
    /// The reader threads' buffers.
    reader_bufs: Vec<read::ReaderBufs>,
}

type Fail = Failure;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

pub(crate) fn run(sc: &Scenario) -> Result<RunReport, SimError> {
    run_threads(sc, batch::default_threads())
}

/// [`run`] with the datagrams of a large fan-out read on `threads`
/// threads: the same report whatever their number (`batch.rs`).
pub(crate) fn run_threads(sc: &Scenario, threads: usize) -> Result<RunReport, SimError> {
    let mut sim = match Sim::new(sc, threads) {
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

impl Host {
    /// Dead, or not started yet: it neither hears nor does anything.
    fn down(&self, now: u64) -> bool {
        self.crashed_at.is_some() || now < self.starts_at
    }
}

impl<'s> Sim<'s> {
    fn new(sc: &'s Scenario, threads: usize) -> Result<Self, Fail> {
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
        if sc.restart.is_some() && sc.senders != 1 {
            return Err(Failure::Scenario(
                "a restart needs exactly one sender".into(),
            ));
        }
        let mut master = ChaCha8Rng::seed_from_u64(sc.seed);
        let size = usize::try_from(sc.object_size).expect("object fits in memory");
        let mut config = sc.config.clone();
        config.receivers = sc.receivers;
        // A restart runs as two senders: the first dies, the second (host 1)
        // starts later with the first's object.
        let restart_ns = sc.restart.as_ref().map(|r| nanos(r.at) + nanos(r.after));
        let senders = usize::from(sc.senders) + usize::from(restart_ns.is_some());
        // Sender 0 draws first and alone when S = 1, so single-sender runs
        // replay exactly as before several senders existed.
        let mut sides: Vec<SenderSide> = Vec::with_capacity(senders);
        let mut machines = Vec::with_capacity(senders);
        for k in 0..senders {
            let mut object = vec![0u8; size];
            ChaCha8Rng::seed_from_u64(master.next_u64()).fill_bytes(&mut object);
            if restart_ns.is_some() && k == 1 {
                object.clone_from(&sides[0].object);
            }
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
            let info = if senders == 1 || restart_ns.is_some() {
                ObjectInfo {
                    name: "object.bin".into(),
                    ..info
                }
            } else {
                info
            };
            let mut config = config.clone();
            if config.group_key.is_some() {
                // Drawn only when sealing: plain runs replay as before.
                master.fill_bytes(&mut config.session_nonce);
            }
            let born = Instant::from_nanos(if k == 1 { restart_ns.unwrap_or(0) } else { 0 });
            let sender = Sender::new(config, session, isn, info, born).map_err(Failure::Config)?;
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
                starts_at: if h == 1 { restart_ns.unwrap_or(0) } else { 0 },
                link_down_until: 0,
                counters: HostCounters::default(),
            });
        }
        let mut sim = Sim {
            sc,
            senders,
            sides,
            hosts,
            pool: Pool::default(),
            scratch: Vec::with_capacity(rmcast_wire::MAX_DATAGRAM),
            tx_buf: vec![0; MAX_DATAGRAM],
            ended_hosts: senders,
            heap: BinaryHeap::new(),
            now_queue: VecDeque::new(),
            fanouts: Vec::new(),
            free_fanouts: Vec::new(),
            fanout_hosts: Vec::new(),
            timers: Timers::new(n + senders),
            seq: 0,
            now: 0,
            events: 0,
            drops: Drops::default(),
            garbage_rng: ChaCha8Rng::seed_from_u64(master.next_u64()),
            garbage_injected: 0,
            control_rng: ChaCha8Rng::seed_from_u64(master.next_u64()),
            net_rng: ChaCha8Rng::seed_from_u64(sc.seed ^ 0x5EED_D0B1_E0DE),
            cpu_jitter: nanos(sc.cost.jitter),
            reasm_timeout: nanos(sc.reassembly_timeout),
            log: SenderLog {
                finished: vec![None; senders],
                failed_at: vec![None; n + 1],
                ..SenderLog::default()
            },
            threads: threads.max(1),
            cpu_batch: Vec::new(),
            reads: Vec::new(),
            ahead: Vec::new(),
            run_position: Vec::new(),
            reader_bufs: Vec::new(),
        };
        for c in &sc.crashes {
            if (1..=sc.receivers).contains(&c.receiver) {
                let host = usize::from(c.receiver) + senders - 1;
                sim.push(nanos(c.at), Ev::Crash(host as u16));
            }
        }
        for d in &sc.link_downs {
            if (1..=sc.receivers).contains(&d.receiver) {
                let host = usize::from(d.receiver) + senders - 1;
                sim.push(nanos(d.at), Ev::LinkDown(host as u16, nanos(d.duration)));
            }
        }
        for p in &sc.pauses {
            if (1..=sc.receivers).contains(&p.receiver) {
                let host = usize::from(p.receiver) + senders - 1;
                sim.push(nanos(p.at), Ev::Pause(host as u16, nanos(p.duration)));
            }
        }
        if let Some(r) = &sc.restart {
            sim.push(nanos(r.at), Ev::Crash(0));
            sim.push(restart_ns.unwrap_or(0), Ev::Start(1));
        }
        if let Some(at) = sc.hash_ready_at {
            for h in 0..senders {
                let at = nanos(at).max(sim.hosts[h].starts_at);
                sim.push(at, Ev::HashReady(h as u16));
            }
        }
        if sc.garbage_per_s > 0.0 {
            let first = sim.next_garbage_gap();
            sim.push(first, Ev::Garbage);
        }
        Ok(sim)
    }

    /// Arms host `h`'s protocol timer for `at`: it takes its place in the
    /// order of events as a pushed event would.
    fn push_timer(&mut self, h: usize, at: u64, generation: u64) {
        self.seq += 1;
        self.timers.set(h as u16, at, self.seq, generation);
    }

    /// The next event: the earliest, by (time, insertion counter), of the
    /// heap's, the timers' and the current instant's queue's first.
    fn pop_event(&mut self) -> Option<Scheduled> {
        let key = |e: &Scheduled| (e.at, e.seq);
        let heap = self.heap.peek().map(key);
        let timer = self.timers.peek();
        let queued = self.now_queue.front().map(key);
        let earliest = [heap, timer, queued].into_iter().flatten().min()?;
        if queued == Some(earliest) {
            self.now_queue.pop_front()
        } else if timer == Some(earliest) {
            let (h, at, seq, generation) = self.timers.pop()?;
            Some(Scheduled {
                at,
                seq,
                ev: Ev::Timer(h, generation),
            })
        } else {
            self.heap.pop()
        }
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        let e = Scheduled {
            at,
            seq: self.seq,
            ev,
        };
        // Pushed for the current instant, it follows everything queued for
        // it so far (its counter is the largest): the queue stays in order.
        if at == self.now {
            self.now_queue.push_back(e);
        } else {
            self.heap.push(e);
        }
    }

    /// Schedules frame `frag` of `pkt` (one reference held per host) to
    /// reach `hosts` at `at`, in that order: one event however many.
    pub(super) fn push_fanout(&mut self, at: u64, pkt: u32, frag: u16, hosts: &[u16]) {
        match hosts {
            [] => {}
            &[h] => self.push(at, Ev::AtHost(h, pkt, frag)),
            _ => {
                let i = self.free_fanouts.pop().unwrap_or_else(|| {
                    self.fanouts.push(Fanout::default());
                    (self.fanouts.len() - 1) as u32
                });
                let f = &mut self.fanouts[i as usize];
                f.pkt = pkt;
                f.frag = frag;
                f.hosts.clear();
                f.hosts.extend_from_slice(hosts);
                self.push(at, Ev::AtHosts(i));
            }
        }
    }

    /// Delivers a fan-out's frame to its hosts one by one, each counted as
    /// the event it stands for; returns whether the run is over (tested
    /// after each host, as the loop tests after each event).
    fn at_hosts(&mut self, i: u32) -> bool {
        let (pkt, frag) = {
            let f = &self.fanouts[i as usize];
            (f.pkt, f.frag)
        };
        let mut hosts = std::mem::take(&mut self.fanouts[i as usize].hosts);
        let mut over = false;
        for (k, &h) in hosts.iter().enumerate() {
            if over {
                self.pool.release(pkt);
                continue;
            }
            if k > 0 {
                self.events += 1;
            }
            self.at_host(usize::from(h), pkt, frag);
            over = self.run_is_over();
        }
        hosts.clear();
        self.fanouts[i as usize].hosts = hosts;
        self.free_fanouts.push(i);
        over
    }

    fn run_is_over(&mut self) -> bool {
        self.log.finished_at.is_some() && self.all_receivers_ended()
    }

    fn run_loop(&mut self) -> Result<(), Fail> {
        let limit = nanos(self.sc.time_limit);
        // Every machine starts at time zero: the sender announces, receivers listen.
        for h in 0..self.hosts.len() {
            if self.hosts[h].starts_at == 0 {
                let end = self.service(h, 0)?;
                self.hosts[h].cpu_free = end;
            }
        }
        while let Some(Scheduled { at, ev, .. }) = self.pop_event() {
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
                Ev::AtHosts(i) => {
                    if self.at_hosts(i) {
                        break;
                    }
                    continue;
                }
                Ev::Cpu(h) => {
                    if self.cpu_run(usize::from(h))? {
                        break;
                    }
                    continue;
                }
                Ev::Writable(h) => self.writable(usize::from(h))?,
                Ev::Timer(h, generation) => self.timer(usize::from(h), generation)?,
                Ev::Crash(h) => self.crash(usize::from(h)),
                Ev::Start(h) => {
                    let (h, now) = (usize::from(h), self.now);
                    self.hosts[h].cpu_free = self.service(h, now)?;
                }
                Ev::Pause(h, ns) => self.pause(usize::from(h), ns),
                Ev::LinkDown(h, ns) => {
                    let host = &mut self.hosts[usize::from(h)];
                    host.link_down_until = host.link_down_until.max(self.now.saturating_add(ns));
                }
                Ev::Garbage => self.garbage(),
                Ev::HashReady(h) => self.hash_ready(usize::from(h))?,
                Ev::CatchUpReady(h, s) => self.catch_up_ready(usize::from(h), usize::from(s)),
                Ev::CatchUp(h, s) => self.catch_up(usize::from(h), usize::from(s))?,
            }
            if self.run_is_over() {
                break;
            }
        }
        if self.log.finished_at.is_none() {
            return Err(Failure::TimeLimit(self.sc.time_limit));
        }
        Ok(())
    }

    /// Whether every receiver host has ended. A host that ended stays
    /// ended in practice, so the scan resumes where it stopped; the final
    /// answer is confirmed by a full scan (and the cursor steps back to the
    /// first host found live, if any), so it is exact either way.
    fn all_receivers_ended(&mut self) -> bool {
        let ended = |h: &Host| {
            h.crashed_at.is_some()
                || matches!(&h.machine, Machine::Receivers(rxs) if rxs.endpoint.is_finished())
        };
        while self.ended_hosts < self.hosts.len() && ended(&self.hosts[self.ended_hosts]) {
            self.ended_hosts += 1;
        }
        if self.ended_hosts < self.hosts.len() {
            return false;
        }
        match self.hosts[self.senders..].iter().position(|h| !ended(h)) {
            Some(live) => {
                self.ended_hosts = self.senders + live;
                false
            }
            None => true,
        }
    }
}

#[cfg(test)]
mod tests;
