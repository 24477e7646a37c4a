//! The hybrid sender's driver: the multicast session runs on the caller's
//! thread; beside it, one thread accepts lobby connections (one more per
//! connection does its key exchange, then reads its frames), and one
//! drives the lobby's machine ([`rmcast_proto::hybrid::Lobby`]): it hands
//! the machine what the connections say and what the multicast half did,
//! carries out what it asks, and runs the TCP overlay when it asks for it.

use super::{HybridConfig, HybridReport, Split};
use crate::overlay::frame::FrameReader;
use crate::overlay::io;
use crate::overlay::{OverlaySender, secure};
use crate::{Error, EventHook, Progress, SendReport};
use rmcast_proto::SenderEvent;
use rmcast_proto::hybrid::{ConnId, Lobby, LobbyConfig, LobbyOp};
use rmcast_proto::security::Sealer;
use rmcast_wire::overlay::Msg;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// How often the lobby tells its registered receivers (waiting for the
/// overlay, or served by either half and waiting for the verdict) that the
/// sender is alive (their inactivity timeout is seconds).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// The driver's longest sleep: it looks at the multicast half this often.
const LOOK_EVERY: Duration = Duration::from_millis(5);
/// Lobby connections in their key exchange at once, at most: more wait in
/// the listen backlog until one ends, so a flood of idle connections
/// cannot pile up threads, and a burst of receivers (a job's ranks the
/// moment rank 0 listens) is let in as fast as the exchanges go.
const HANDSHAKES_MAX: usize = 64;

/// Why receivers of a tree's session were not served.
const REFUSED_TREE: &str =
    "did not hear the group and were refused (a directory tree goes over multicast only)";

/// What the lobby's driver hears.
enum Ev {
    /// A connection is ready (its key exchange done): its write half.
    Connected(ConnId, TcpStream, Option<Box<Sealer>>),
    /// A frame from a connection, or why it ended.
    Msg(ConnId, Result<Msg, String>),
    /// The multicast half admitted its n-th receiver.
    Joined(u16),
    /// The multicast half closed its registration.
    RegistrationClosed,
    /// The multicast half ended (`mc_over` says so too; this wakes the
    /// driver at once rather than at its next look).
    MulticastOver,
}

/// The overlay running on its thread, and the names of its receivers.
type Running<'s> = (
    std::thread::ScopedJoinHandle<'s, Result<SendReport, Error>>,
    Vec<String>,
);

/// A lobby connection's write half, with its sealer when keyed.
type Conns = HashMap<ConnId, (TcpStream, Option<Box<Sealer>>)>;

/// The TCP half's outcome.
struct Tcp {
    report: SendReport,
    names: Vec<String>,
    /// When it ended, from the start of the session.
    ended: Duration,
}

/// How the TCP half ended.
enum Half {
    /// Nobody was waiting in the lobby.
    Nobody,
    /// Receivers of the lobby were not served (named, and why): the
    /// multicast half ended before its registration closed, or they did
    /// not hear the group of a session without a TCP half (a tree).
    SentAway(Vec<String>, &'static str),
    /// The overlay ran.
    Served(Box<Tcp>),
}

/// Sends the file at `path` in a hybrid session (see [`crate::hybrid`]).
///
/// Returns `Ok` once both halves are over, also when receivers failed
/// (`report.ok == false`); `Err` only for local problems or cancellation.
/// A directory tree goes over multicast only (the TCP overlay carries one
/// file): a receiver that does not hear the group is refused, named in
/// the report, and the session fails.
pub fn send_file(
    path: &Path,
    cfg: &HybridConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<SendReport, Error> {
    HybridSender::bind(cfg)?.send_file(path, progress)
}

/// Sends `data` under `name` in a hybrid session (see [`send_file`]).
pub fn send_bytes(
    name: &str,
    data: &[u8],
    cfg: &HybridConfig,
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<SendReport, Error> {
    HybridSender::bind(cfg)?.send_bytes(name, data, progress)
}

/// A hybrid sender with its lobby bound, ready to run one session.
#[derive(Debug)]
pub struct HybridSender {
    listener: TcpListener,
    cfg: HybridConfig,
}

impl HybridSender {
    /// Checks `cfg` and binds the lobby (`cfg.overlay.control`; port 0:
    /// any free port).
    pub fn bind(cfg: &HybridConfig) -> Result<Self, Error> {
        if cfg.multicast.proto.receivers == 0 {
            return Err(Error::Invalid(
                "a session needs at least one receiver".into(),
            ));
        }
        if !(Duration::from_millis(50)..=Duration::from_secs(60)).contains(&cfg.probe_wait) {
            return Err(Error::Invalid(format!(
                "the probe wait must be 50 ms to 60 s, not {:?}",
                cfg.probe_wait
            )));
        }
        if cfg.overlay.key.is_some() != cfg.multicast.proto.group_key.is_some() {
            return Err(Error::Invalid(
                "both halves of a hybrid session run under the group key, or neither".into(),
            ));
        }
        let listener = TcpListener::bind(cfg.overlay.control).map_err(|source| Error::Io {
            context: format!("cannot listen for receivers on {}", cfg.overlay.control),
            source,
        })?;
        listener.set_nonblocking(true).map_err(|source| Error::Io {
            context: "cannot make the lobby socket non-blocking".into(),
            source,
        })?;
        Ok(Self {
            listener,
            cfg: cfg.clone(),
        })
    }

    /// The address receivers register at (`rmcast recv --sender`).
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.listener.local_addr().map_err(|source| Error::Io {
            context: "cannot read the lobby's address".into(),
            source,
        })
    }

    /// Sends the file at `path` (see [`send_file`]).
    pub fn send_file(
        self,
        path: &Path,
        progress: Option<&mut dyn FnMut(Progress)>,
    ) -> Result<SendReport, Error> {
        if path.is_dir() {
            let (name, tree) =
                crate::sender::tree_object(path, self.cfg.multicast.name.as_deref())?;
            return run(self.listener, &self.cfg, &name, tree.as_slice(), progress);
        }
        let (name, map) = crate::sender::map_file(path, self.cfg.multicast.name.as_deref())?;
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

/// Runs one hybrid session on the bound lobby.
fn run(
    listener: TcpListener,
    cfg: &HybridConfig,
    name: &str,
    data: &[u8],
    progress: Option<&mut dyn FnMut(Progress)>,
) -> Result<SendReport, Error> {
    let start = Instant::now();
    let (tx, rx) = mpsc::channel::<Ev>();
    let mut mc = cfg.multicast.clone();
    let user_hook = mc.on_event.take();
    // Told on the multicast thread; the rank of the n-th receiver admitted
    // is n - 1.
    let hook_tx = tx.clone();
    mc.on_event = Some(EventHook(Arc::new(move |e: &SenderEvent| {
        let ev = match e {
            SenderEvent::Joined { rank, .. } => Some(Ev::Joined(rank.saturating_add(1))),
            SenderEvent::AllJoined => Some(Ev::RegistrationClosed),
            _ => None,
        };
        if let Some(ev) = ev {
            let _ = hook_tx.send(ev);
        }
        if let Some(h) = &user_hook {
            (h.0)(e);
        }
    })));
    let split = Split::default();
    let mc_over = AtomicBool::new(false);
    let abort = AtomicBool::new(false);
    let accept_stop = io::AcceptStop::new(&listener);
    let over_tx = tx.clone();
    let (split, mc_over, abort, listener) = (&split, &mc_over, &abort, &listener);
    std::thread::scope(|scope| {
        scope.spawn(move || accept(scope, listener, cfg, split, abort, &tx));
        let driver = scope.spawn(move || drive(scope, cfg, name, data, split, mc_over, &rx, start));
        let mc = crate::sender::run(name, data, &mc, progress, Some(split));
        mc_over.store(true, Ordering::Release);
        let _ = over_tx.send(Ev::MulticastOver);
        let (tcp, lobby) = driver.join().unwrap_or_else(|_| {
            let why = "the TCP half of the session panicked".to_owned();
            (Err(Error::Failed(why)), None)
        });
        let report = merge(mc, tcp, cfg);
        if let Some((lobby, conns)) = lobby {
            tell_verdict(lobby, conns, &report, cfg);
        }
        accept_stop.stop(abort);
        report
    })
}

/// Both halves are over: every receiver still on its lobby connection
/// (whichever half served it) hears whether the whole session verified.
fn tell_verdict(
    mut lobby: Lobby,
    mut conns: Conns,
    report: &Result<SendReport, Error>,
    cfg: &HybridConfig,
) {
    let verdict = match report {
        Ok(r) if r.ok => Ok(()),
        Ok(r) => Err(verdict_text(r)),
        Err(e) => Err(format!("the sender failed: {e}")),
    };
    lobby.handle_session_over(verdict);
    let limit = cfg.overlay.inactivity;
    while let Some(op) = lobby.poll_op() {
        match op {
            LobbyOp::Send(c, m) => {
                let sent = send_on(&mut conns, c, &m, limit);
                if !sent {
                    tracing::debug!("lobby connection {c}: cannot send the verdict");
                }
            }
            LobbyOp::Close(c) => close(&mut conns, c),
            _ => {}
        }
    }
}

/// Writes `m` on lobby connection `c`; false when it is gone or failed.
fn send_on(conns: &mut Conns, c: ConnId, m: &Msg, limit: Duration) -> bool {
    conns
        .get_mut(&c)
        .is_some_and(|(s, sealer)| io::send_msg(s, sealer.as_deref_mut(), m, limit).is_ok())
}

/// Closes lobby connection `c` (after what was written on it).
fn close(conns: &mut Conns, c: ConnId) {
    if let Some((s, _)) = conns.remove(&c) {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
}

/// Accepts lobby connections; for each, a thread does the key exchange
/// (keyed) and then reads its frames for the driver.
fn accept<'s, 'e: 's>(
    scope: &'s std::thread::Scope<'s, 'e>,
    listener: &'e TcpListener,
    cfg: &'e HybridConfig,
    split: &'e Split,
    abort: &'e AtomicBool,
    tx: &mpsc::Sender<Ev>,
) {
    let handshakes = Arc::new(AtomicUsize::new(0));
    let mut next: ConnId = 0;
    // Nothing is accepted before the multicast session has its id (a
    // `Probe` names it, a keyed exchange is bound to it): connections that
    // come first wait in the backlog, not in a handshake slot.
    let session = loop {
        if let Some(id) = split.session() {
            break id.0;
        }
        if abort.load(Ordering::Acquire) {
            return;
        }
        std::thread::sleep(LOOK_EVERY);
    };
    loop {
        while handshakes.load(Ordering::Acquire) >= HANDSHAKES_MAX {
            if abort.load(Ordering::Acquire) {
                return;
            }
            std::thread::sleep(LOOK_EVERY);
        }
        let Some(r) = io::accept_unless(listener, abort) else {
            return;
        };
        let (mut s, from) = match r {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("cannot accept a lobby connection: {e}");
                std::thread::sleep(LOOK_EVERY);
                continue;
            }
        };
        handshakes.fetch_add(1, Ordering::AcqRel);
        next += 1;
        let (id, tx, handshakes) = (next, tx.clone(), handshakes.clone());
        scope.spawn(move || {
            let ready = greet(&mut s, cfg, session, abort);
            handshakes.fetch_sub(1, Ordering::AcqRel);
            let (reader, sealer) = match ready.and_then(|(frames, sealer)| {
                let r = s.try_clone().map_err(|e| e.to_string())?;
                Ok(((r, frames), sealer))
            }) {
                Ok(x) => x,
                Err(why) => return tracing::debug!("lobby connection from {from}: {why}"),
            };
            if tx.send(Ev::Connected(id, s, sealer)).is_err() {
                return;
            }
            io::control_reader(reader.0, reader.1, abort, |m| {
                tx.send(Ev::Msg(id, m)).is_ok()
            });
        });
    }
}

/// A lobby connection's key exchange (keyed) for the multicast session
/// `session`: the reader and the sealer of the connection.
fn greet(
    s: &mut TcpStream,
    cfg: &HybridConfig,
    session: u64,
    abort: &AtomicBool,
) -> Result<(FrameReader, Option<Box<Sealer>>), String> {
    io::tune(s).map_err(|e| e.to_string())?;
    match &cfg.overlay.key {
        None => Ok((FrameReader::default(), None)),
        Some(key) => {
            let limit = cfg.overlay.inactivity;
            let ch = secure::respond(s, "sender", key, session, abort, limit)
                .map_err(|e| e.to_string())?;
            Ok((FrameReader::sealed(ch.opener), Some(Box::new(ch.sealer))))
        }
    }
}

/// Why a session failed, for its receivers: the session's error, and the
/// receivers that did not verify, each with its reason (the first few).
fn verdict_text(r: &SendReport) -> String {
    const NAMED: usize = 4;
    let mut parts = Vec::new();
    if let Some(e) = &r.error {
        parts.push(e.clone());
    }
    let failed: Vec<_> = r.members.iter().filter(|m| !m.verified).collect();
    if !failed.is_empty() {
        let mut text = format!(
            "{} of {} receivers did not verify: ",
            failed.len(),
            r.members.len()
        );
        for (i, m) in failed.iter().take(NAMED).enumerate() {
            if i > 0 {
                text.push_str("; ");
            }
            let why = m.reason.as_deref().unwrap_or("no reason given");
            let _ = write!(text, "{:?}: {why}", m.name);
        }
        if failed.len() > NAMED {
            let _ = write!(text, "; and {} more", failed.len() - NAMED);
        }
        parts.push(text);
    }
    if parts.is_empty() {
        parts.push(format!("{} receivers verified", r.verified));
    }
    parts.join("; ")
}

/// The lobby's driver: feeds the machine, carries out its ops, runs the
/// overlay when asked; returns once the multicast half is over and the
/// overlay (if any) too, with the lobby and its connections (the session's
/// verdict is still to be told on them).
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn drive<'s, 'e: 's>(
    scope: &'s std::thread::Scope<'s, 'e>,
    cfg: &'e HybridConfig,
    name: &'e str,
    data: &'e [u8],
    split: &'e Split,
    mc_over: &'e AtomicBool,
    rx: &mpsc::Receiver<Ev>,
    start: Instant,
) -> (Result<Half, Error>, Option<(Lobby, Conns)>) {
    let clock = io::Clock::start();
    let session = loop {
        if let Some(id) = split.session() {
            break id;
        }
        if mc_over.load(Ordering::Acquire) {
            return (Ok(Half::Nobody), None);
        }
        std::thread::sleep(LOOK_EVERY);
    };
    let mut lobby = Lobby::new(LobbyConfig {
        receivers: cfg.multicast.proto.receivers,
        group: SocketAddr::V4(cfg.multicast.group),
        session: session.0,
        probe_wait: cfg.probe_wait,
        heartbeat: HEARTBEAT_EVERY,
        refuse_unheard: name.ends_with(crate::tree::TREE_SUFFIX).then(|| {
            format!(
                "this receiver did not hear the multicast group {}, and the directory tree \
                 {name} goes over multicast only (the TCP overlay carries one file: tar it)",
                cfg.multicast.group
            )
        }),
    });
    let limit = cfg.overlay.inactivity;
    let mut conns: Conns = HashMap::new();
    let mut overlay: Option<Running<'s>> = None;
    let mut sent_away = Vec::new();
    loop {
        while let Some(op) = lobby.poll_op() {
            match op {
                LobbyOp::Send(c, m) => {
                    if !send_on(&mut conns, c, &m, limit) {
                        lobby.handle_closed(c);
                    }
                }
                LobbyOp::Close(c) => close(&mut conns, c),
                LobbyOp::Announce => split.announce(),
                LobbyOp::ServeElsewhere(k) => split.serve_elsewhere(k),
                LobbyOp::OpenOverlay(list) => {
                    let (ov, control_port) = match open_overlay(cfg, name, list.len()) {
                        Ok(x) => x,
                        Err(e) => return (Err(e), Some((lobby, conns))),
                    };
                    for (c, _) in &list {
                        let ip = conns
                            .get(c)
                            .and_then(|(s, _)| s.local_addr().ok())
                            .map_or(cfg.overlay.control.ip(), |a| a.ip());
                        lobby.redirect(&[*c], SocketAddr::new(ip, control_port));
                    }
                    let names = list.into_iter().map(|(_, n)| n).collect();
                    let h = scope.spawn(move || ov.send_bytes(name, data, None));
                    overlay = Some((h, names));
                }
            }
        }
        let over = mc_over.load(Ordering::Acquire);
        if over {
            // Everything the multicast half said is queued by now: its
            // registration may have closed just before it ended.
            let (now, mut fed) = (clock.now(), false);
            while let Ok(ev) = rx.try_recv() {
                feed(&mut lobby, &mut conns, now, ev);
                fed = true;
            }
            if fed {
                continue;
            }
        }
        if over && !lobby.is_closed() {
            sent_away = lobby.handle_multicast_over(
                "the sender's session ended before every receiver registered",
            );
            continue;
        }
        if over && overlay.as_ref().is_none_or(|(h, _)| h.is_finished()) {
            break;
        }
        let wait = lobby
            .poll_timeout()
            .map_or(LOOK_EVERY, |t| {
                clock
                    .at(t)
                    .saturating_duration_since(std::time::Instant::now())
            })
            .min(LOOK_EVERY);
        match rx.recv_timeout(wait) {
            Ok(ev) => {
                let now = clock.now();
                feed(&mut lobby, &mut conns, now, ev);
                while let Ok(ev) = rx.try_recv() {
                    feed(&mut lobby, &mut conns, now, ev);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(LOOK_EVERY),
        }
        let now = clock.now();
        if lobby.poll_timeout().is_some_and(|t| t <= now) {
            lobby.handle_timeout(now);
        }
    }
    // The lobby connections stay open for the verdict.
    let half = match overlay {
        Some((h, names)) => h
            .join()
            .unwrap_or_else(|_| Err(Error::Failed("the TCP overlay panicked".to_owned())))
            .map(|report| {
                Half::Served(Box::new(Tcp {
                    report,
                    names,
                    ended: start.elapsed(),
                }))
            }),
        None if !sent_away.is_empty() => Ok(Half::SentAway(
            sent_away,
            "registered over TCP and were sent away",
        )),
        None if lobby.refused().is_empty() => Ok(Half::Nobody),
        None => Ok(Half::SentAway(lobby.refused().to_vec(), REFUSED_TREE)),
    };
    (half, Some((lobby, conns)))
}

/// Hands one event to the machine.
fn feed(lobby: &mut Lobby, conns: &mut Conns, now: rmcast_proto::Instant, ev: Ev) {
    match ev {
        Ev::Connected(c, s, sealer) => {
            conns.insert(c, (s, sealer));
            lobby.handle_connected(c);
        }
        Ev::Msg(c, Ok(m)) => lobby.handle_msg(now, c, m),
        Ev::Msg(c, Err(why)) => {
            tracing::debug!("lobby connection {c}: {why}");
            conns.remove(&c);
            lobby.handle_closed(c);
        }
        Ev::Joined(n) => lobby.handle_joined(n),
        Ev::RegistrationClosed => lobby.handle_registration_closed(),
        Ev::MulticastOver => {}
    }
}

/// Binds the TCP overlay for `k` receivers on another port of the lobby's
/// address: the sender, and the port to redirect them to.
fn open_overlay(cfg: &HybridConfig, name: &str, k: usize) -> Result<(OverlaySender, u16), Error> {
    let mut ov = cfg.overlay.clone();
    ov.receivers = u16::try_from(k).unwrap_or(u16::MAX);
    ov.shape = cfg
        .tcp_shape
        .unwrap_or_else(|| super::tcp_shape_for(ov.receivers));
    ov.control = SocketAddr::new(cfg.overlay.control.ip(), 0);
    ov.join_wait = cfg.multicast.proto.join_wait;
    if ov.name.is_none() {
        ov.name = Some(name.to_owned());
    }
    let overlay = OverlaySender::bind(&ov)?;
    let port = overlay.local_addr()?.port();
    tracing::info!(
        "serving {k} receiver(s) that did not hear the group over {} (port {port})",
        ov.shape.name()
    );
    Ok((overlay, port))
}

/// One report of both halves.
fn merge(
    mc: Result<SendReport, Error>,
    tcp: Result<Half, Error>,
    cfg: &HybridConfig,
) -> Result<SendReport, Error> {
    let tcp = tcp?;
    let mut m = mc?;
    let tcp_protocol = match &tcp {
        Half::Served(t) => t.report.protocol.clone(),
        _ => String::new(),
    };
    let hybrid = |multicast: Vec<String>, tcp: Vec<String>| HybridReport {
        multicast,
        tcp,
        tcp_protocol: tcp_protocol.clone(),
        probe_wait: cfg.probe_wait,
        refused: Vec::new(),
    };
    let names = |r: &SendReport| r.members.iter().map(|x| x.name.clone()).collect::<Vec<_>>();
    let t = match tcp {
        Half::Served(t) => t,
        Half::Nobody => {
            m.hybrid = Some(hybrid(names(&m), Vec::new()));
            return Ok(m);
        }
        Half::SentAway(away, why) => {
            // The multicast half's count left them out: say who they were.
            let e = m.error.get_or_insert_with(String::new);
            if m.members.is_empty() && why == REFUSED_TREE {
                // The multicast half had nobody left ("every receiver is
                // served over TCP"): these are the whole story.
                e.clear();
                let _ = write!(e, "all {} receivers {why}: {}", away.len(), away.join(", "));
            } else {
                if !e.is_empty() {
                    e.push_str("; ");
                }
                let _ = write!(e, "{} more {why}: {}", away.len(), away.join(", "));
            }
            m.ok = false;
            m.hybrid = Some(if why == REFUSED_TREE {
                HybridReport {
                    refused: away,
                    ..hybrid(names(&m), Vec::new())
                }
            } else {
                hybrid(names(&m), away)
            });
            return Ok(m);
        }
    };
    let t = *t;
    let mut r = t.report;
    if m.members.is_empty() {
        // Nobody heard the group: the overlay was the whole session.
        r.hybrid = Some(hybrid(Vec::new(), t.names));
        r.seconds = t.ended.as_secs_f64().max(r.seconds);
        r.goodput_mbps = crate::goodput_mbps(r.bytes, r.seconds);
        return Ok(r);
    }
    let n = m.members.len() as u16;
    for x in &mut r.members {
        x.rank = n + x.rank.saturating_sub(1);
    }
    m.hybrid = Some(hybrid(names(&m), t.names));
    m.protocol = format!("{}+{}", m.protocol, r.protocol);
    m.receivers += r.receivers;
    m.verified += r.verified;
    m.seconds = m.seconds.max(t.ended.as_secs_f64());
    m.data_seconds = m.data_seconds.max(r.data_seconds);
    m.goodput_mbps = crate::goodput_mbps(m.bytes, m.seconds);
    m.data_packets += r.data_packets;
    m.control_packets += r.control_packets;
    m.error = match (m.error.take(), r.error) {
        (Some(a), Some(b)) => Some(format!("multicast: {a}; TCP: {b}")),
        (Some(a), None) => Some(format!("multicast: {a}")),
        (None, Some(b)) => Some(format!("TCP: {b}")),
        (None, None) => None,
    };
    m.ok = m.ok && r.ok;
    m.members.append(&mut r.members);
    m.auth_failures.append(&mut r.auth_failures);
    Ok(m)
}
