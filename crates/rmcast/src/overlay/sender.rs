//! The overlay sender: session control and the sender's own data edges.
//!
//! The session's decisions are [`SenderMachine`]'s (rmcast-proto); this is
//! its TCP driver. One thread accepts control connections, one reads each
//! of them, one hashes the object, one writes each data edge (told by the
//! machine when to start feeding), and the caller's thread runs the loop
//! that hands their news to the machine and carries out what it polls.

use super::frame::FrameReader;
use super::io::{self, Clock, TICK, XferError};
use super::secure::{self, SegmentOut};
use super::{GroupKey, OverlaySendConfig, io_err};
use crate::sender::Hashed;
use crate::{Error, Progress, SendReport, SenderStats, SessionId};
use rmcast_proto::Instant as ProtoInstant;
use rmcast_proto::overlay::{
    ControlOp, DataOp, SegmentSet, Segments, SenderConfig, SenderEvent, SenderMachine, SenderPhase,
};
use rmcast_proto::security::{Opener, Sealer};
use rmcast_wire::overlay::Msg;
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Bytes the sender hands to the kernel per write on an edge carrying every segment.
const WRITE_CHUNK: usize = 256 << 10;
/// Key exchanges in progress at once, at most (keyed): connections beyond
/// wait in the listen backlog until one ends, so a flood of idle
/// connections cannot pile up threads and a burst of receivers all get in.
const HANDSHAKES_MAX: usize = 64;

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
        if let Some(seg) = cfg.segment_size
            && (seg == 0 || seg > super::MAX_SEGMENT_SIZE)
        {
            return Err(Error::Invalid(format!(
                "segment size {seg} is outside 1..={} bytes",
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
        let (name, map) = crate::sender::map_file(path, self.cfg.name.as_deref())?;
        self.send_bytes(&name, map.bytes(), progress)
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

/// What the driver's loop hears about from its threads.
enum Ev {
    /// A new control connection (its reader runs already), with the
    /// sealer of its sending direction when keyed.
    Conn(u64, TcpStream, SocketAddr, Option<Box<Sealer>>),
    /// A connection from this address failed authentication (and is gone).
    AuthFailed(SocketAddr, String),
    /// A control message, or why the connection ended.
    Ctl(u64, Result<Msg, String>),
    /// A data edge to `rank` carrying a set finished, or why it failed.
    Edge(u16, SegmentSet, Result<(), String>),
    /// The object's hash is ready.
    Hashed(Hashed),
}

/// Drives a [`SenderMachine`] over TCP: threads accept and read control
/// connections, hash the object and write data edges; this loop feeds
/// their news to the machine and carries out what it polls.
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
    let segment_size = cfg.segment_size_for(size);
    // Chosen once: the feeders read it from here, not by choosing again.
    let resolved = OverlaySendConfig {
        segment_size: Some(segment_size),
        ..cfg.clone()
    };
    let cfg = &resolved;
    let total = Segments::new(size, segment_size).count();
    let session = SessionId(rand::random());
    let wanted = cfg.receivers;
    let protocol = cfg.shape.name();
    tracing::info!(
        "session {session}: {protocol} offering {name:?} ({size} bytes, {total} segments of {}) \
         on {control_addr}, waiting for {wanted} receiver(s)",
        segment_size
    );
    let clock = Clock::start();
    let mut m = SenderMachine::new(
        clock.now(),
        SenderConfig {
            shape: cfg.shape,
            receivers: wanted,
            segment_size,
            join_wait: cfg.join_wait,
            inactivity: cfg.inactivity,
            stall_timeout: stall_timeout(cfg, segment_size),
            session: session.0,
            name: name.to_owned(),
            size,
            control_addr,
        },
    );

    let stop = AtomicBool::new(false);
    let accept_stop = io::AcceptStop::new(&listener);
    let abort = AtomicBool::new(false);
    let segments_sent = AtomicU64::new(0);
    let (tx, rx) = mpsc::channel::<Ev>();
    let sign = cfg.signing_key.as_deref().map(|k| (k, name, size));
    let mut conns: HashMap<u64, (TcpStream, Option<Box<Sealer>>)> = HashMap::new();
    // Per child: where to tell its edge thread to start feeding, and from
    // which segment of the set. By child and set: the pipeline sends two
    // classes to some children.
    let mut feeds: HashMap<(u16, SegmentSet), mpsc::Sender<(SegmentSet, u64)>> = HashMap::new();

    std::thread::scope(|scope| {
        {
            let (stop, tx, listener) = (&stop, tx.clone(), &listener);
            let key = cfg.key.clone();
            let hs = Handshakes {
                key,
                session: session.0,
                limit: cfg.inactivity,
            };
            scope.spawn(move || accept_loop(scope, listener, stop, tx, hs));
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
        let mut last_progress = Instant::now() - Duration::from_secs(1);
        let mut finished = false;
        while !finished {
            if !m.report().cancelled
                && cfg
                    .cancel
                    .as_ref()
                    .is_some_and(|c| c.load(Ordering::Relaxed))
            {
                m.cancel(clock.now());
            }
            while let Some(op) = m.poll_transmit() {
                match op {
                    ControlOp::Send { conn, msg } => {
                        let Some((stream, sealer)) = conns.get_mut(&conn) else {
                            continue;
                        };
                        if let Err(e) =
                            io::send_msg(stream, sealer.as_deref_mut(), &msg, cfg.inactivity)
                        {
                            m.handle_send_failed(clock.now(), conn, &e.to_string());
                        }
                    }
                    ControlOp::Close { conn } => {
                        if let Some((c, _)) = conns.remove(&conn) {
                            let _ = c.shutdown(std::net::Shutdown::Both);
                        }
                    }
                }
            }
            while let Some(op) = m.poll_data() {
                match op {
                    DataOp::Connect {
                        child,
                        addr,
                        segments,
                        hello,
                        back: _,
                    } => {
                        let (ftx, frx) = mpsc::channel();
                        feeds.insert((child, segments), ftx);
                        let (tx, abort, sent) = (tx.clone(), &abort, &segments_sent);
                        let key = cfg.key.as_ref();
                        scope.spawn(move || {
                            let r = connect_child(addr, &hello, cfg.inactivity, abort, key)
                                .and_then(|(mut st, sealer, _)| {
                                    let (set, first) = wait_feed(&frx, abort)?;
                                    feed(&mut st, sealer, data, (set, first), cfg, abort, sent)
                                });
                            let r = r.map_err(|e| e.to_string());
                            let _ = tx.send(Ev::Edge(child, segments, r));
                        });
                    }
                    DataOp::Feed {
                        child,
                        segments,
                        first,
                    } => {
                        if let Some(f) = feeds.get(&(child, segments)) {
                            let _ = f.send((segments, first));
                        }
                    }
                    DataOp::Verify { .. }
                    | DataOp::Drop { .. }
                    | DataOp::WriteBack { .. }
                    | DataOp::Abandon { .. } => {
                        unreachable!("the sender verifies nothing and has no parents")
                    }
                }
            }
            while let Some(ev) = m.poll_event() {
                match ev {
                    SenderEvent::Registered(rank, name, addr) => tracing::info!(
                        "receiver {name:?} registered (data at {addr}), {rank} of {wanted}"
                    ),
                    SenderEvent::Assigned => {
                        tracing::info!("all {wanted} receiver(s) registered; assignments sent");
                    }
                    SenderEvent::Started => tracing::debug!("everyone ready; data flows"),
                    SenderEvent::MemberFailed(text) => tracing::warn!("{text}"),
                    SenderEvent::Reattached {
                        rank,
                        segments,
                        from,
                        have,
                    } => tracing::warn!(
                        "re-attaching rank {rank} to the sender in place of rank {from}: \
                         {segments:?} from its segment {have} on"
                    ),
                    SenderEvent::Finished => finished = true,
                }
            }
            if finished {
                break;
            }
            if let Some(cb) = progress.as_deref_mut()
                && last_progress.elapsed() >= Duration::from_millis(100)
            {
                last_progress = Instant::now();
                let (phase, done) = match m.phase() {
                    SenderPhase::Joining => ("waiting for receivers", 0),
                    SenderPhase::Preparing => ("preparing", 0),
                    _ => ("sending", m.min_progress()),
                };
                cb(Progress {
                    done_bytes: done,
                    total_bytes: size,
                    phase,
                    joined: None,
                });
            }
            match rx.recv_timeout(clock.wait(m.poll_timeout())) {
                Ok(ev) => on_event(&mut m, &mut conns, &clock, sign, ev),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    unreachable!("the loop holds a sender")
                }
            }
            // Take everything already queued before acting again.
            while let Ok(ev) = rx.try_recv() {
                on_event(&mut m, &mut conns, &clock, sign, ev);
            }
            m.handle_timeout(clock.now());
        }
        accept_stop.stop(&stop);
        abort.store(true, Ordering::Relaxed);
        for (c, _) in conns.values() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    });

    let r = m.report();
    if r.cancelled {
        return Err(Error::Cancelled);
    }
    let end = clock.now();
    let last = r.last_confirmation.unwrap_or(end);
    let secs =
        |from: Option<ProtoInstant>| from.map_or(0.0, |t| last.saturating_since(t).as_secs_f64());
    let (seconds, data_seconds) = (secs(r.assigned_at), secs(r.started_at));
    let verified = r.members.iter().filter(|m| m.verified).count();
    let ok = r.error.is_none() && verified == usize::from(wanted);
    let data_packets = segments_sent.load(Ordering::Relaxed);
    let st = m.stats();
    let stats = SenderStats {
        data_packets,
        control_packets: st.control_received,
        control_sent: st.control_sent,
        malformed: st.malformed,
        ..SenderStats::default()
    };
    if !r.auth_failures.is_empty() && r.error.is_none() {
        // Reported too (SendReport::auth_failures): the session went on
        // without them.
        tracing::warn!(
            "session {session}: {} connection(s) refused: {}",
            st.auth_failed,
            r.auth_failures.join("; ")
        );
    }
    if let Some(cb) = progress {
        cb(Progress {
            done_bytes: if ok { size } else { 0 },
            total_bytes: size,
            phase: "done",
            joined: None,
        });
    }
    let report = SendReport {
        protocol: protocol.to_owned(),
        receivers: r.members.len() as u16,
        bytes: size,
        seconds,
        goodput_mbps: crate::goodput_mbps(size, seconds),
        verified,
        data_packets,
        retransmitted_packets: 0,
        control_packets: st.control_received,
        ok,
        error: r.error,
        members: r.members,
        missing: 0,
        stats,
        session,
        data_seconds,
        sealed: cfg.key.is_some(),
        auth_failures: r.auth_failures,
        skipped_bytes: 0,
        fec: None,
        auto: None,
        hybrid: None,
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

/// Hands one thread's news to the machine.
fn on_event(
    m: &mut SenderMachine,
    conns: &mut HashMap<u64, (TcpStream, Option<Box<Sealer>>)>,
    clock: &Clock,
    sign: Option<(&crate::SigningKey, &str, u64)>,
    ev: Ev,
) {
    let now = clock.now();
    match ev {
        Ev::Conn(conn, stream, peer, sealer) => {
            tracing::debug!("control connection {conn} from {peer}");
            conns.insert(conn, (stream, sealer));
            m.handle_connected(now, conn, peer);
        }
        Ev::AuthFailed(peer, why) => {
            tracing::warn!("connection from {peer} {why}");
            m.handle_auth_failed(now, peer, &why);
        }
        Ev::Ctl(conn, Ok(msg)) => m.handle_msg(now, conn, msg),
        Ev::Ctl(conn, Err(why)) if why == io::PEER_SEALS => {
            // A keyed receiver at a keyless sender: told so, and named.
            if let Some(peer) = conns.get(&conn).and_then(|(s, _)| s.peer_addr().ok()) {
                let why = format!("{why}: run every member with the same --key FILE");
                tracing::warn!("connection from {peer} {why}");
                m.handle_auth_failed(now, peer, &why);
            }
            m.handle_closed(now, conn, &why, false);
        }
        Ev::Ctl(conn, Err(why)) => {
            let malformed = why.starts_with(io::MALFORMED);
            if malformed {
                tracing::debug!("control connection {conn}: {why}");
            }
            m.handle_closed(now, conn, &why, malformed);
        }
        Ev::Edge(rank, set, r) => {
            if r.is_ok() {
                tracing::debug!("data edge to rank {rank} done");
            }
            m.handle_child_done(now, rank, set, r);
        }
        Ev::Hashed(h) => {
            tracing::debug!("hashed the object in {:.1} ms", h.took.as_secs_f64() * 1e3);
            match sign {
                Some((key, name, size)) => {
                    let sig = crate::keys::sign_object(key, &h.hash, size, name);
                    m.handle_signed_hash(now, h.hash, sig);
                }
                None => m.handle_hash(now, h.hash),
            }
        }
    }
}

/// What a keyed sender's connections must prove before they count.
struct Handshakes {
    key: Option<Arc<GroupKey>>,
    session: u64,
    limit: Duration,
}

/// Accepts control connections until `stop`, starting a thread for each
/// that exchanges keys (keyed) and then reads it.
fn accept_loop<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    listener: &'scope TcpListener,
    stop: &'scope AtomicBool,
    tx: mpsc::Sender<Ev>,
    hs: Handshakes,
) {
    let mut next_conn = 0u64;
    let busy = Arc::new(AtomicUsize::new(0));
    loop {
        // At the cap, the next connections wait in the listen backlog
        // until a key exchange ends (a burst of receivers all get in).
        while hs.key.is_some() && busy.load(Ordering::Relaxed) >= HANDSHAKES_MAX {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let Some(accepted) = io::accept_unless(listener, stop) else {
            return;
        };
        match accepted {
            Ok((mut stream, peer)) => {
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
                let (rtx, key, busy) = (tx.clone(), hs.key.clone(), busy.clone());
                let (session, limit) = (hs.session, hs.limit);
                if key.is_some() {
                    busy.fetch_add(1, Ordering::Relaxed);
                }
                scope.spawn(move || {
                    let (sealer, frames) = match &key {
                        None => (None, FrameReader::default()),
                        Some(key) => {
                            let r =
                                secure::respond(&mut stream, "sender", key, session, stop, limit);
                            busy.fetch_sub(1, Ordering::Relaxed);
                            match r {
                                Ok(ch) => {
                                    (Some(Box::new(ch.sealer)), FrameReader::sealed(ch.opener))
                                }
                                Err(e) => {
                                    if e.is_auth() {
                                        let _ = rtx.send(Ev::AuthFailed(peer, e.to_string()));
                                    } else {
                                        tracing::debug!("control connection from {peer} {e}");
                                    }
                                    let _ = stream.shutdown(std::net::Shutdown::Both);
                                    return;
                                }
                            }
                        }
                    };
                    // The connection must be known before its first message arrives.
                    if rtx.send(Ev::Conn(conn, stream, peer, sealer)).is_err() {
                        return;
                    }
                    io::control_reader(reader, frames, stop, |m| {
                        rtx.send(Ev::Ctl(conn, m)).is_ok()
                    });
                });
            }
            Err(e) => {
                tracing::warn!("cannot accept a control connection: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Waits until the machine says to feed this edge.
fn wait_feed(
    rx: &mpsc::Receiver<(SegmentSet, u64)>,
    abort: &AtomicBool,
) -> Result<(SegmentSet, u64), XferError> {
    loop {
        match rx.recv_timeout(TICK) {
            Ok(set) => return Ok(set),
            Err(mpsc::RecvTimeoutError::Timeout) if !abort.load(Ordering::Relaxed) => {}
            Err(_) => return Err(XferError::Aborted),
        }
    }
}

/// Opens a data connection to a child and introduces it; keyed, after the
/// key exchange, returning the sealer of the segments to come and the
/// opener of what the child may write back on the connection.
pub(super) fn connect_child(
    addr: SocketAddr,
    hello: &Msg,
    limit: Duration,
    abort: &AtomicBool,
    key: Option<&Arc<GroupKey>>,
) -> Result<(TcpStream, Option<Sealer>, Option<Opener>), XferError> {
    let mut s = io::connect(addr, limit).map_err(XferError::Io)?;
    let Some(key) = key else {
        io::write_all(&mut s, &hello.to_frame(), abort, limit)?;
        return Ok((s, None, None));
    };
    let session = match hello {
        Msg::DataHello { session, .. } => Some(*session),
        _ => None,
    };
    let mut ch = secure::initiate(&mut s, key, session, abort, limit).map_err(|e| match e {
        secure::HandshakeError::Io(e) => e,
        e => XferError::Auth(format!("the child at {addr} {e}")),
    })?;
    io::send_msg(&mut s, Some(&mut ch.sealer), hello, limit)?;
    Ok((s, Some(ch.sealer), Some(ch.opener)))
}

/// Writes the segments of `set` from its `first`-th on from `data` to a
/// child, paced if asked; keyed, each sealed in a frame of its own.
fn feed(
    stream: &mut TcpStream,
    sealer: Option<Sealer>,
    data: &[u8],
    (set, first): (SegmentSet, u64),
    cfg: &OverlaySendConfig,
    abort: &AtomicBool,
    sent: &AtomicU64,
) -> Result<(), XferError> {
    let segment_size = cfg.segment_size_for(data.len() as u64); // set by run()
    let seg = segment_size as usize;
    let total = Segments::new(data.len() as u64, segment_size).count();
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
    let batch = if cfg.pace_bytes_per_s.is_some() {
        0
    } else {
        WRITE_CHUNK
    };
    let mut out = SegmentOut::new(sealer, seg, batch);
    if set == SegmentSet::All && cfg.pace_bytes_per_s.is_none() && !out.sealed() {
        // Contiguous: hand the kernel big pieces, whole segments each.
        let chunk = seg * (WRITE_CHUNK / seg).max(1);
        let from = (first as usize).saturating_mul(seg).min(data.len());
        for piece in data[from..].chunks(chunk) {
            io::write_all(stream, piece, abort, cfg.inactivity)?;
            sent.fetch_add(piece.len().div_ceil(seg) as u64, Ordering::Relaxed);
        }
        return Ok(());
    }
    for i in first..set.count(total) {
        let k = set.nth(i) as usize;
        let bytes = &data[k * seg..((k + 1) * seg).min(data.len())];
        out.segment(stream, bytes, abort, cfg.inactivity)?;
        sent.fetch_add(1, Ordering::Relaxed);
        written += bytes.len() as u64;
        pace(written)?;
    }
    out.flush(stream, abort, cfg.inactivity)
}

/// The machine's stall timeout: the configured one, but never shorter than
/// four segments take at the test pace (a paced link is slow, not stalled).
fn stall_timeout(cfg: &OverlaySendConfig, segment_size: u32) -> Option<Duration> {
    let limit = cfg.stall_timeout?;
    let floor = cfg.pace_bytes_per_s.map_or(Duration::ZERO, |rate| {
        Duration::from_secs_f64(4.0 * f64::from(segment_size) / rate.max(1) as f64)
    });
    Some(limit.max(floor))
}
