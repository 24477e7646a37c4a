//! The overlay sender: session control and the sender's own data edges.
//!
//! One thread accepts control connections, one reads each of them, one
//! writes each data edge of the pipelined shapes (a single one serves the
//! children in turn for store-and-forward shapes), and the caller's thread
//! runs the session: registration, assignment, start, liveness, report.

use super::io::{self, TICK, XferError};
use super::topology::{Forwarding, SENDER, SegmentSet, Topology};
use super::{OverlaySendConfig, io_err, segment_count};
use crate::sender::Hashed;
use crate::{Error, MemberOutcome, Progress, SendReport, SenderStats, SessionId, Status};
use rmcast_wire::overlay::{Assignment, MAX_NAME, Msg, Peer};
use rmcast_wire::truncate_utf8;
use std::collections::HashMap;
use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Bytes the sender hands to the kernel per write on an edge carrying every segment.
const WRITE_CHUNK: usize = 256 << 10;
/// Longest the sender waits for the last words of receivers after a failure.
const FAREWELL_MAX: Duration = Duration::from_secs(2);
/// Longest a receiver's report of a failed neighbour waits for the
/// neighbour's own death to be noticed (which then names the culprit).
const BLAME_GRACE: Duration = Duration::from_secs(1);
/// Connections that have not registered yet, at most.
const PENDING_MAX: usize = 256;

/// A sender bound to its control address, ready to run one session.
#[derive(Debug)]
pub struct OverlaySender {
    listener: TcpListener,
    cfg: OverlaySendConfig,
}

/// Sends the file at `path` over the overlay `cfg.shape` to `cfg.receivers`
/// receivers that register at `cfg.control`.
///
/// Returns `Ok` once the session is over, also when receivers failed
/// (`report.ok == false`; `report.error` names the failed node); `Err` only
/// for local problems or cancellation. The file is memory-mapped: it must
/// not be truncated while it is sent.
pub fn send_file(
    path: &Path,
    cfg: &OverlaySendConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<SendReport, Error> {
    OverlaySender::bind(cfg)?.send_file(path, progress)
}

/// Sends `data` under `name` (see [`send_file`]).
pub fn send_bytes(
    name: &str,
    data: &[u8],
    cfg: &OverlaySendConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<SendReport, Error> {
    OverlaySender::bind(cfg)?.send_bytes(name, data, progress)
}

impl OverlaySender {
    /// Checks `cfg` and binds the control address (port 0: any free port).
    pub fn bind(cfg: &OverlaySendConfig) -> Result<Self, Error> {
        if cfg.receivers == 0 {
            return Err(Error::Invalid(
                "an overlay needs at least one receiver".into(),
            ));
        }
        if cfg.segment_size == 0 || cfg.segment_size > super::MAX_SEGMENT_SIZE {
            return Err(Error::Invalid(format!(
                "segment size {} is outside 1..={} bytes",
                cfg.segment_size,
                super::MAX_SEGMENT_SIZE
            )));
        }
        if let super::OverlayShape::Tree { fanout: 0 } = cfg.shape {
            return Err(Error::Invalid("a tree needs a fanout of at least 1".into()));
        }
        if cfg.inactivity < Duration::from_millis(200) {
            return Err(Error::Invalid(
                "the inactivity timeout must be at least 200 ms".into(),
            ));
        }
        if cfg.pace_bytes_per_s == Some(0) {
            return Err(Error::Invalid("a pace of 0 bytes/s never ends".into()));
        }
        let listener = TcpListener::bind(cfg.control).map_err(io_err(format!(
            "cannot listen for receivers on {}",
            cfg.control
        )))?;
        Ok(Self {
            listener,
            cfg: cfg.clone(),
        })
    }

    /// The control address receivers must register at.
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.listener
            .local_addr()
            .map_err(io_err("cannot read the control address"))
    }

    /// Sends the file at `path` (see [`send_file`]).
    pub fn send_file(
        self,
        path: &Path,
        progress: Option<&mut dyn FnMut(Progress)>,
    ) -> Result<SendReport, Error> {
        let file = File::open(path).map_err(io_err(format!("cannot open {}", path.display())))?;
        let meta = file
            .metadata()
            .map_err(io_err(format!("cannot inspect {}", path.display())))?;
        if !meta.is_file() {
            return Err(Error::Invalid(format!(
                "{} is not a regular file",
                path.display()
            )));
        }
        let name = match &self.cfg.name {
            Some(n) => n.clone(),
            None => path
                .file_name()
                .and_then(|n| n.to_str())
                .map(str::to_owned)
                .ok_or_else(|| {
                    Error::Invalid(format!(
                        "the name of {} is not UTF-8; give the object a name",
                        path.display()
                    ))
                })?,
        };
        if meta.len() == 0 {
            return self.send_bytes(&name, &[], progress);
        }
        // SAFETY: read-only mapping; the caller must not truncate the file
        // during the transfer (documented on `send_file`).
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(io_err(format!("cannot map {} into memory", path.display())))?;
        self.send_bytes(&name, &map, progress)
    }

    /// Sends `data` under `name` (see [`send_file`]).
    pub fn send_bytes(
        self,
        name: &str,
        data: &[u8],
        progress: Option<&mut dyn FnMut(Progress)>,
    ) -> Result<SendReport, Error> {
        crate::safe_relative_path(name).map_err(Error::Invalid)?;
        run(self.listener, &self.cfg, name, data, progress)
    }
}

/// What the session loop hears about.
enum Ev {
    /// A new control connection (its reader runs already).
    Conn(u64, TcpStream, SocketAddr),
    /// A control message, or why the connection ended.
    Ctl(u64, Result<Msg, String>),
    /// A data edge to `rank` finished, or why it failed.
    Edge(u16, Result<(), String>),
    /// The object's hash is ready.
    Hashed(Hashed),
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

struct Member {
    conn: u64,
    stream: TcpStream,
    name: String,
    data_addr: SocketAddr,
    last_heard: Instant,
    bytes: u64,
    state: State,
    reason: Option<String>,
}

impl Member {
    fn open(&self) -> bool {
        matches!(self.state, State::Joined | State::Ready)
    }
}

fn describe(rank: u16, m: &Member) -> String {
    format!("receiver rank {rank} {:?} at {}", m.name, m.data_addr)
}

fn who(m: &Member) -> String {
    format!("receiver {:?} at {}", m.name, m.data_addr)
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Phase {
    Joining,
    Preparing,
    Sending,
}

/// Everything the session loop keeps.
struct Session<'a> {
    cfg: &'a OverlaySendConfig,
    members: Vec<Member>,
    pending: HashMap<u64, (TcpStream, Instant)>,
    error: Option<String>,
    /// Failures receivers reported, applied at the deadline unless a death explains them.
    deferred: Vec<(usize, String, Instant)>,
    control_received: u64,
    control_sent: u64,
    malformed: u64,
    /// The object's hash, once the hashing thread has it.
    hash: Option<[u8; 32]>,
    /// Whether every member has been sent the hash.
    hash_sent: bool,
}

impl Session<'_> {
    fn rank_of(&self, conn: u64) -> Option<usize> {
        self.members.iter().position(|m| m.conn == conn)
    }

    /// Marks member `i` failed; the first failure becomes the session's error.
    fn fail(&mut self, i: usize, what: String) {
        let m = &mut self.members[i];
        if !m.open() && m.state != State::Reported {
            return;
        }
        let text = format!("{} {what}", describe(i as u16 + 1, m));
        tracing::warn!("{text}");
        m.state = State::Failed;
        m.reason = Some(what);
        self.error.get_or_insert(text);
    }

    fn send(&mut self, i: usize, msg: &Msg) {
        let limit = self.cfg.inactivity;
        match io::send_msg(&mut self.members[i].stream, msg, limit) {
            Ok(()) => self.control_sent += 1,
            Err(e) => self.fail(
                i,
                format!("cannot be reached on its control connection: {e}"),
            ),
        }
    }
}

fn run(
    listener: TcpListener,
    cfg: &OverlaySendConfig,
    name: &str,
    data: &[u8],
    mut progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<SendReport, Error> {
    let control_addr = listener
        .local_addr()
        .map_err(io_err("cannot read the control address"))?;
    listener
        .set_nonblocking(true)
        .map_err(io_err("cannot make the control socket non-blocking"))?;
    let size = data.len() as u64;
    let total = segment_count(size, cfg.segment_size);
    let session = SessionId(rand::random());
    let wanted = cfg.receivers;
    let protocol = cfg.shape.name();
    tracing::info!(
        "session {session}: {protocol} offering {name:?} ({size} bytes, {total} segments of {}) \
         on {control_addr}, waiting for {wanted} receiver(s)",
        cfg.segment_size
    );

    let stop = AtomicBool::new(false);
    let abort = AtomicBool::new(false);
    let segments_sent = AtomicU64::new(0);
    let (tx, rx) = mpsc::channel::<Ev>();
    let mut s = Session {
        cfg,
        members: Vec::new(),
        pending: HashMap::new(),
        error: None,
        deferred: Vec::new(),
        control_received: 0,
        control_sent: 0,
        malformed: 0,
        hash: None,
        hash_sent: false,
    };
    let started = Instant::now();
    let mut assigned_at: Option<Instant> = None;
    let mut start_at: Option<Instant> = None;
    let mut last_confirmation: Option<Instant> = None;
    let mut cancelled = false;

    std::thread::scope(|scope| {
        {
            let (stop, tx, listener) = (&stop, tx.clone(), &listener);
            scope.spawn(move || accept_loop(scope, listener, stop, tx));
        }
        {
            // The hash goes out in its own message when ready: the session
            // forms and data flows meanwhile.
            let (stop, tx) = (&stop, tx.clone());
            scope.spawn(move || {
                if let Some(h) = crate::sender::hash_object(data, stop) {
                    let delay = cfg.hash_delay.unwrap_or_default();
                    if io::sleep_unless(stop, delay) {
                        let _ = tx.send(Ev::Hashed(h));
                    }
                }
            });
        }
        let heartbeat =
            (cfg.inactivity / 5).clamp(Duration::from_millis(50), Duration::from_secs(1));
        let mut last_beat = Instant::now();
        let mut last_progress = Instant::now() - Duration::from_secs(1);
        let mut phase = Phase::Joining;
        loop {
            let now = Instant::now();
            if cfg
                .cancel
                .as_ref()
                .is_some_and(|c| c.load(Ordering::Relaxed))
            {
                cancelled = true;
                s.error = Some("the sender was interrupted".into());
                break;
            }
            match phase {
                Phase::Joining if s.members.len() == usize::from(wanted) => {
                    assign(&mut s, session, name, size, control_addr);
                    assigned_at = Some(now);
                    phase = Phase::Preparing;
                    tracing::info!("all {wanted} receiver(s) registered; assignments sent");
                }
                Phase::Joining if now.duration_since(started) >= cfg.join_wait => {
                    let mut msg = format!(
                        "only {} of {wanted} receivers registered within {:.1} s",
                        s.members.len(),
                        cfg.join_wait.as_secs_f64()
                    );
                    if !s.members.is_empty() {
                        let names: Vec<String> =
                            s.members.iter().map(|m| format!("{:?}", m.name)).collect();
                        msg.push_str(&format!(" ({})", names.join(", ")));
                    }
                    s.error = Some(msg);
                    break;
                }
                Phase::Preparing if s.members.iter().all(|m| m.state == State::Ready) => {
                    for i in 0..s.members.len() {
                        s.send(i, &Msg::Start);
                    }
                    start_at = Some(now);
                    phase = Phase::Sending;
                    let topo = Topology::build(cfg.shape, wanted);
                    spawn_edges(
                        scope,
                        &topo,
                        &s.members,
                        data,
                        cfg,
                        session.0,
                        &abort,
                        &segments_sent,
                        &tx,
                    );
                }
                Phase::Sending if s.members.iter().all(|m| m.state == State::Complete) => break,
                _ => {}
            }
            if phase != Phase::Joining
                && !s.hash_sent
                && let Some(hash) = s.hash
            {
                for i in 0..s.members.len() {
                    if s.members[i].open() {
                        s.send(i, &Msg::Hash { hash });
                    }
                }
                s.hash_sent = true;
            }
            let due: Vec<(usize, String)> = s
                .deferred
                .iter()
                .filter(|(_, _, at)| now >= *at)
                .map(|(i, text, _)| (*i, text.clone()))
                .collect();
            s.deferred.retain(|(_, _, at)| now < *at);
            for (i, text) in due {
                s.fail(i, text);
            }
            if s.error.is_some() {
                break;
            }
            if now.duration_since(last_beat) >= heartbeat {
                last_beat = now;
                for i in 0..s.members.len() {
                    if s.members[i].open() {
                        s.send(i, &Msg::Heartbeat);
                    }
                }
            }
            for i in 0..s.members.len() {
                let silent = now.saturating_duration_since(s.members[i].last_heard);
                if s.members[i].open() && silent >= cfg.inactivity {
                    if phase == Phase::Joining {
                        tracing::warn!("{} went silent; dropping it", who(&s.members[i]));
                        s.members[i].state = State::Failed;
                    } else {
                        s.fail(i, format!("went silent for {:.1} s", silent.as_secs_f64()));
                    }
                }
            }
            if phase == Phase::Joining {
                s.members.retain(|m| m.state != State::Failed);
            }
            s.pending
                .retain(|_, (_, since)| now.duration_since(*since) < cfg.inactivity);
            if let Some(cb) = progress.as_deref_mut()
                && now.duration_since(last_progress) >= Duration::from_millis(100)
            {
                last_progress = now;
                let (phase_name, done) = match phase {
                    Phase::Joining => ("waiting for receivers", 0),
                    Phase::Preparing => ("preparing", 0),
                    Phase::Sending => (
                        "sending",
                        s.members.iter().map(|m| m.bytes).min().unwrap_or(0),
                    ),
                };
                cb(Progress {
                    done_bytes: done,
                    total_bytes: size,
                    phase: phase_name,
                });
            }
            match rx.recv_timeout(TICK) {
                Ok(ev) => on_event(&mut s, ev, phase, &mut last_confirmation),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    unreachable!("the loop holds a sender")
                }
            }
            // Take everything already queued before looking at phases again.
            while let Ok(ev) = rx.try_recv() {
                on_event(&mut s, ev, phase, &mut last_confirmation);
            }
        }
        // The session is over: stop data edges, tell whoever still waits.
        if let Some(text) = s.error.clone() {
            abort.store(true, Ordering::Relaxed);
            for i in 0..s.members.len() {
                if s.members[i].open() {
                    s.send(i, &Msg::Abort { text: text.clone() });
                }
            }
            // Collect last words (Complete or a closed connection) briefly.
            let farewell = Instant::now();
            let limit = FAREWELL_MAX.min(cfg.inactivity);
            while phase != Phase::Joining
                && s.members.iter().any(|m| m.open())
                && farewell.elapsed() < limit
            {
                if let Ok(ev) = rx.recv_timeout(TICK) {
                    let before = s.error.clone();
                    on_event(&mut s, ev, phase, &mut last_confirmation);
                    s.error = before;
                }
            }
            for (i, why, _) in std::mem::take(&mut s.deferred) {
                let m = &mut s.members[i];
                if m.state == State::Reported {
                    m.state = State::Failed;
                    m.reason = Some(why);
                }
            }
            for m in s.members.iter_mut().filter(|m| m.open()) {
                m.state = State::Failed;
                m.reason = Some(format!("aborted: {text}"));
            }
        }
        stop.store(true, Ordering::Relaxed);
        abort.store(true, Ordering::Relaxed);
        for m in &s.members {
            let _ = m.stream.shutdown(std::net::Shutdown::Both);
        }
        for (c, _) in s.pending.values() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    });

    if cancelled {
        return Err(Error::Cancelled);
    }
    let end = Instant::now();
    let last = last_confirmation.unwrap_or(end);
    let seconds = assigned_at.map_or(0.0, |t| last.saturating_duration_since(t).as_secs_f64());
    let data_seconds = start_at.map_or(0.0, |t| last.saturating_duration_since(t).as_secs_f64());
    let members: Vec<MemberOutcome> = s
        .members
        .iter()
        .enumerate()
        .map(|(i, m)| MemberOutcome {
            rank: i as u16 + 1,
            name: m.name.clone(),
            addr: m.data_addr,
            verified: m.state == State::Complete,
            reason: m.reason.clone(),
        })
        .collect();
    let verified = members.iter().filter(|m| m.verified).count();
    let ok = s.error.is_none() && verified == usize::from(wanted);
    let data_packets = segments_sent.load(Ordering::Relaxed);
    let stats = SenderStats {
        data_packets,
        control_packets: s.control_received,
        control_sent: s.control_sent,
        malformed: s.malformed,
        ..SenderStats::default()
    };
    if let Some(cb) = progress {
        cb(Progress {
            done_bytes: if ok { size } else { 0 },
            total_bytes: size,
            phase: "done",
        });
    }
    let report = SendReport {
        protocol: protocol.to_owned(),
        receivers: members.len() as u16,
        bytes: size,
        seconds,
        goodput_mbps: crate::goodput_mbps(size, seconds),
        verified,
        data_packets,
        retransmitted_packets: 0,
        control_packets: s.control_received,
        ok,
        error: s.error,
        members,
        stats,
        session,
        data_seconds,
    };
    tracing::info!(
        "session {session}: {} of {} receiver(s) verified {size} bytes in {:.3} s ({:.1} Mbit/s)",
        report.verified,
        wanted,
        report.seconds,
        report.goodput_mbps
    );
    Ok(report)
}

/// Accepts control connections until `stop`, starting a reader for each.
fn accept_loop<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    listener: &'scope TcpListener,
    stop: &'scope AtomicBool,
    tx: mpsc::Sender<Ev>,
) {
    let mut next_conn = 0u64;
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, peer)) => {
                let setup = stream
                    .set_nonblocking(false)
                    .and_then(|()| io::tune(&stream))
                    .and_then(|()| stream.try_clone());
                let reader = match setup {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!("dropping control connection from {peer}: {e}");
                        continue;
                    }
                };
                next_conn += 1;
                let conn = next_conn;
                // The connection must be known before its first message arrives.
                if tx.send(Ev::Conn(conn, stream, peer)).is_err() {
                    return;
                }
                let rtx = tx.clone();
                scope.spawn(move || {
                    io::control_reader(reader, stop, |m| rtx.send(Ev::Ctl(conn, m)).is_ok());
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                tracing::warn!("cannot accept a control connection: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn on_event(s: &mut Session<'_>, ev: Ev, phase: Phase, last_confirmation: &mut Option<Instant>) {
    let now = Instant::now();
    match ev {
        Ev::Conn(conn, stream, peer) => {
            if phase != Phase::Joining || s.pending.len() >= PENDING_MAX {
                let mut stream = stream;
                let _ = io::send_msg(
                    &mut stream,
                    &Msg::Abort {
                        text: "this session is not accepting receivers".into(),
                    },
                    TICK,
                );
                return;
            }
            tracing::debug!("control connection {conn} from {peer}");
            s.pending.insert(conn, (stream, now));
        }
        Ev::Ctl(conn, Ok(msg)) => {
            if let Some((stream, _)) = s.pending.remove(&conn) {
                match msg {
                    Msg::Register { name, data_addr }
                        if phase == Phase::Joining
                            && s.members.len() < usize::from(s.cfg.receivers) =>
                    {
                        let mut data_addr = data_addr;
                        if data_addr.ip().is_unspecified()
                            && let Ok(peer) = stream.peer_addr()
                        {
                            data_addr.set_ip(peer.ip());
                        }
                        s.control_received += 1;
                        tracing::info!(
                            "receiver {name:?} registered (data at {data_addr}), {} of {}",
                            s.members.len() + 1,
                            s.cfg.receivers
                        );
                        s.members.push(Member {
                            conn,
                            stream,
                            name: truncate_utf8(&name, MAX_NAME).to_owned(),
                            data_addr,
                            last_heard: now,
                            bytes: 0,
                            state: State::Joined,
                            reason: None,
                        });
                    }
                    _ => {
                        s.malformed += 1;
                        let _ = stream.shutdown(std::net::Shutdown::Both);
                    }
                }
                return;
            }
            let Some(i) = s.rank_of(conn) else { return };
            s.control_received += 1;
            s.members[i].last_heard = now;
            match msg {
                Msg::Ready { status, text } if phase == Phase::Preparing => {
                    if status == Status::Ok {
                        if s.members[i].state == State::Joined {
                            s.members[i].state = State::Ready;
                        }
                    } else {
                        s.fail(i, format!("refused the object: {text}"));
                    }
                }
                Msg::Progress { bytes } => s.members[i].bytes = bytes,
                Msg::Complete { status, text } => {
                    if status == Status::Ok {
                        if s.members[i].open() {
                            s.members[i].state = State::Complete;
                            *last_confirmation = Some(now);
                            tracing::debug!("rank {} complete", i + 1);
                        }
                    } else {
                        // It may be reporting a neighbour that died: give the
                        // neighbour's own control connection a moment to say
                        // so, so that the error names the node that died.
                        let grace = (s.cfg.inactivity / 4).min(BLAME_GRACE);
                        if s.members[i].open() {
                            s.members[i].state = State::Reported;
                            s.deferred.push((i, format!("failed: {text}"), now + grace));
                        }
                    }
                }
                _ => s.malformed += 1,
            }
        }
        Ev::Ctl(conn, Err(why)) => {
            if s.pending.remove(&conn).is_some() {
                if why.starts_with(io::MALFORMED) {
                    s.malformed += 1;
                    tracing::debug!("dropped control connection {conn}: {why}");
                }
                return;
            }
            let Some(i) = s.rank_of(conn) else { return };
            if s.members[i].state == State::Reported {
                return; // it said why already
            }
            if phase == Phase::Joining {
                tracing::warn!("{} left before the start: {why}", who(&s.members[i]));
                s.members.remove(i);
            } else {
                s.fail(i, format!("died: {why} before it completed"));
            }
        }
        Ev::Edge(rank, Ok(())) => tracing::debug!("data edge to rank {rank} done"),
        Ev::Edge(rank, Err(why)) => {
            let i = usize::from(rank) - 1;
            if i < s.members.len() {
                s.fail(i, format!("stopped taking data: {why}"));
            }
        }
        Ev::Hashed(h) => {
            tracing::debug!("hashed the object in {:.1} ms", h.took.as_secs_f64() * 1e3);
            s.hash = Some(h.hash);
        }
    }
}

/// Sends every receiver its assignment.
fn assign(
    s: &mut Session<'_>,
    session: SessionId,
    name: &str,
    size: u64,
    control_addr: SocketAddr,
) {
    let topo = Topology::build(s.cfg.shape, s.members.len() as u16);
    debug_assert_eq!(topo.check(), Ok(()));
    let peer = |rank: u16, segments: SegmentSet, members: &[Member]| {
        if rank == SENDER {
            Peer {
                rank,
                name: "sender".into(),
                addr: control_addr,
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
    for i in 0..s.members.len() {
        let rank = i as u16 + 1;
        let plan = topo.node(rank);
        let a = Assignment {
            session: session.0,
            rank,
            receivers: s.members.len() as u16,
            shape: s.cfg.shape,
            segment_size: s.cfg.segment_size,
            size,
            name: name.to_owned(),
            inactivity_ms: s.cfg.inactivity.as_millis().min(u128::from(u32::MAX)) as u32,
            parents: plan
                .parents
                .iter()
                .map(|l| peer(l.peer, l.segments, &s.members))
                .collect(),
            children: plan
                .children
                .iter()
                .map(|l| peer(l.peer, l.segments, &s.members))
                .collect(),
        };
        s.send(i, &Msg::Assign(Box::new(a)));
    }
}

/// Starts the threads that feed the sender's children.
#[allow(clippy::too_many_arguments)]
fn spawn_edges<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    topo: &Topology,
    members: &[Member],
    data: &'scope [u8],
    cfg: &'scope OverlaySendConfig,
    session: u64,
    abort: &'scope AtomicBool,
    sent: &'scope AtomicU64,
    tx: &mpsc::Sender<Ev>,
) {
    let children: Vec<(u16, SocketAddr, SegmentSet)> = topo
        .node(SENDER)
        .children
        .iter()
        .map(|l| {
            let m = &members[usize::from(l.peer) - 1];
            (l.peer, m.data_addr, l.segments)
        })
        .collect();
    match Forwarding::of(cfg.shape) {
        Forwarding::Pipelined => {
            for (rank, addr, set) in children {
                let tx = tx.clone();
                scope.spawn(move || {
                    let r = connect_child(addr, session, rank, cfg.inactivity, abort)
                        .and_then(|mut stream| feed(&mut stream, data, set, cfg, abort, sent));
                    let _ = tx.send(Ev::Edge(rank, r.map_err(|e| e.to_string())));
                });
            }
        }
        Forwarding::StoreAndForward => {
            let tx = tx.clone();
            scope.spawn(move || {
                // Connect everyone first (they wait for their parent), then
                // serve the children one after the other, in step order.
                let mut streams = Vec::new();
                for &(rank, addr, _) in &children {
                    match connect_child(addr, session, rank, cfg.inactivity, abort) {
                        Ok(st) => streams.push(st),
                        Err(e) => {
                            let _ = tx.send(Ev::Edge(rank, Err(e.to_string())));
                            return;
                        }
                    }
                }
                for ((rank, _, set), mut stream) in children.into_iter().zip(streams) {
                    let r = feed(&mut stream, data, set, cfg, abort, sent);
                    let failed = r.is_err();
                    let _ = tx.send(Ev::Edge(rank, r.map_err(|e| e.to_string())));
                    if failed {
                        return;
                    }
                }
            });
        }
    }
}

/// Opens a data connection to a child and introduces it.
fn connect_child(
    addr: SocketAddr,
    session: u64,
    rank: u16,
    limit: Duration,
    abort: &AtomicBool,
) -> Result<TcpStream, XferError> {
    let mut s = io::connect(addr, limit).map_err(XferError::Io)?;
    let hello = Msg::DataHello {
        session,
        from: SENDER,
        to: rank,
    };
    io::write_all(&mut s, &hello.to_frame(), abort, limit)?;
    Ok(s)
}

/// Writes the segments of `set` from `data` to a child, paced if asked.
fn feed(
    stream: &mut TcpStream,
    data: &[u8],
    set: SegmentSet,
    cfg: &OverlaySendConfig,
    abort: &AtomicBool,
    sent: &AtomicU64,
) -> Result<(), XferError> {
    let seg = cfg.segment_size as usize;
    let total = segment_count(data.len() as u64, cfg.segment_size);
    let started = Instant::now();
    let mut written = 0u64;
    let pace = |written: u64| -> Result<(), XferError> {
        if let Some(rate) = cfg.pace_bytes_per_s {
            let due = Duration::from_secs_f64(written as f64 / rate as f64);
            let ahead = due.saturating_sub(started.elapsed());
            if !ahead.is_zero() && !io::sleep_unless(abort, ahead) {
                return Err(XferError::Aborted);
            }
        }
        Ok(())
    };
    if set == SegmentSet::All && cfg.pace_bytes_per_s.is_none() {
        // Contiguous: hand the kernel big pieces, whole segments each.
        let chunk = seg * (WRITE_CHUNK / seg).max(1);
        for piece in data.chunks(chunk) {
            io::write_all(stream, piece, abort, cfg.inactivity)?;
            sent.fetch_add(piece.len().div_ceil(seg) as u64, Ordering::Relaxed);
        }
        return Ok(());
    }
    for i in 0..set.count(total) {
        let k = set.nth(i) as usize;
        let bytes = &data[k * seg..((k + 1) * seg).min(data.len())];
        io::write_all(stream, bytes, abort, cfg.inactivity)?;
        sent.fetch_add(1, Ordering::Relaxed);
        written += bytes.len() as u64;
        pace(written)?;
    }
    Ok(())
}
