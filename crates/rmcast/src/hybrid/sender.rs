//! The hybrid sender: the multicast session runs on the caller's thread;
//! beside it, one thread accepts lobby connections (and one greets each),
//! and one waits for registration to close, then serves the receivers that
//! did not hear the group over a TCP overlay.

use super::{HybridConfig, HybridReport, Split};
use crate::overlay::frame::FrameReader;
use crate::overlay::io;
use crate::overlay::{OverlaySender, secure};
use crate::{Error, EventHook, Progress, SendReport};
use rmcast_proto::SenderEvent;
use rmcast_proto::security::Sealer;
use rmcast_wire::overlay::Msg;
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How often the lobby tells the receivers waiting for the overlay that
/// the sender is alive (their inactivity timeout is seconds).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// How often the coordinator looks at the registration.
const LOOK_EVERY: Duration = Duration::from_millis(5);
/// Lobby connections greeted at once, at most: more are refused, so a
/// flood of idle connections cannot pile up threads.
const GREETING_MAX: usize = 1024;
/// How long a lobby connection may stay open after its `Probe` (a
/// receiver that heard the group keeps it until it is done).
const PROBED_MAX: Duration = Duration::from_secs(7 * 24 * 3600);

/// A receiver that did not hear the group, waiting for the overlay.
struct Waiting {
    name: String,
    stream: TcpStream,
    sealer: Option<Sealer>,
}

impl Waiting {
    fn say(&mut self, m: &Msg, limit: Duration) -> bool {
        io::send_msg(&mut self.stream, self.sealer.as_mut(), m, limit).is_ok()
    }
}

/// What the lobby's threads share.
struct Shared<'a> {
    cfg: &'a HybridConfig,
    split: Split,
    /// Receivers waiting for the overlay; `closed` once it was opened
    /// (or the session ended): later ones are refused.
    waiting: Mutex<(Vec<Waiting>, bool)>,
    /// Receivers the multicast half admitted.
    joined: Arc<AtomicU16>,
    /// The multicast half closed its registration (its data phase starts).
    registered: Arc<AtomicBool>,
    /// The multicast half is over.
    mc_over: AtomicBool,
    /// The session is over: every lobby thread stops.
    abort: AtomicBool,
    greeting: AtomicUsize,
}

impl Shared<'_> {
    fn lock(&self) -> MutexGuard<'_, (Vec<Waiting>, bool)> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn total(&self) -> u16 {
        self.cfg.multicast.proto.receivers
    }
}

/// The TCP half's outcome.
struct Tcp {
    report: SendReport,
    names: Vec<String>,
    /// When it ended, from the start of the session.
    ended: Duration,
}

/// Sends the file at `path` in a hybrid session (see [`crate::hybrid`]).
///
/// Returns `Ok` once both halves are over, also when receivers failed
/// (`report.ok == false`); `Err` only for local problems or cancellation.
/// A directory is refused: the TCP overlay carries one file.
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
            return Err(Error::Invalid(format!(
                "{} is a directory: a hybrid session (--control with a multicast protocol) \
                 sends one file, as its TCP overlay does; send the tree without --control, or \
                 tar it first",
                path.display()
            )));
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
    let joined = Arc::new(AtomicU16::new(0));
    let registered = Arc::new(AtomicBool::new(false));
    let mut mc = cfg.multicast.clone();
    let user_hook = mc.on_event.take();
    let (j, r) = (joined.clone(), registered.clone());
    mc.on_event = Some(EventHook(Arc::new(move |e: &SenderEvent| {
        match e {
            SenderEvent::Joined { .. } => {
                j.fetch_add(1, Ordering::AcqRel);
            }
            SenderEvent::AllJoined => r.store(true, Ordering::Release),
            _ => {}
        }
        if let Some(h) = &user_hook {
            (h.0)(e);
        }
    })));
    let shared = Shared {
        cfg,
        split: Split::default(),
        waiting: Mutex::new((Vec::new(), false)),
        joined,
        registered,
        mc_over: AtomicBool::new(false),
        abort: AtomicBool::new(false),
        greeting: AtomicUsize::new(0),
    };
    let sh = &shared;
    std::thread::scope(|scope| {
        scope.spawn(move || {
            while let Some(r) = io::accept_unless(&listener, &sh.abort) {
                match r {
                    Ok((s, from)) => {
                        if sh.greeting.fetch_add(1, Ordering::AcqRel) >= GREETING_MAX {
                            sh.greeting.fetch_sub(1, Ordering::AcqRel);
                            continue;
                        }
                        scope.spawn(move || {
                            if let Err(why) = greet(s, sh) {
                                tracing::debug!("lobby connection from {from}: {why}");
                            }
                            sh.greeting.fetch_sub(1, Ordering::AcqRel);
                        });
                    }
                    Err(e) => {
                        tracing::warn!("cannot accept a lobby connection: {e}");
                        std::thread::sleep(LOOK_EVERY);
                    }
                }
            }
        });
        let tcp = scope.spawn(move || serve_tcp(name, data, sh, start));
        let mc = crate::sender::run(name, data, &mc, progress, Some(&sh.split));
        sh.mc_over.store(true, Ordering::Release);
        let tcp = tcp.join().unwrap_or_else(|_| {
            Err(Error::Failed(
                "the TCP half of the session panicked".to_owned(),
            ))
        });
        sh.abort.store(true, Ordering::Release);
        merge(mc, tcp, cfg)
    })
}

/// Greets one lobby connection: key exchange, `Register`, `Probe`; then
/// waits until the receiver says `Unheard` (it joins the waiting) or
/// closes (it heard the group, or went away).
fn greet(mut s: TcpStream, sh: &Shared<'_>) -> Result<(), String> {
    io::tune(&s).map_err(|e| e.to_string())?;
    let limit = sh.cfg.overlay.inactivity;
    let session = loop {
        if let Some(id) = sh.split.session() {
            break id;
        }
        if sh.abort.load(Ordering::Acquire) {
            return Ok(());
        }
        std::thread::sleep(LOOK_EVERY);
    };
    let (mut sealer, mut reader) = match &sh.cfg.overlay.key {
        None => (None, FrameReader::default()),
        Some(key) => {
            let ch = secure::respond(&mut s, "sender", key, session.0, &sh.abort, limit)
                .map_err(|e| e.to_string())?;
            (Some(ch.sealer), FrameReader::sealed(ch.opener))
        }
    };
    let name = match io::read_msg(&mut s, &mut reader, &sh.abort, limit) {
        Ok(Msg::Register { name, .. }) => name,
        Ok(m) => {
            let text = format!("expected Register, got {:?}", m.kind());
            return Err(refuse(&mut s, &mut sealer, text, limit));
        }
        Err(e) => return Err(e.to_string()),
    };
    let late = |sh: &Shared<'_>| sh.registered.load(Ordering::Acquire) || sh.lock().1;
    if late(sh) {
        let text = format!("the session has its {} receivers already", sh.total());
        return Err(refuse(&mut s, &mut sealer, text, limit));
    }
    let probe = Msg::Probe {
        group: SocketAddr::V4(sh.cfg.multicast.group),
        session: session.0,
        wait_ms: u32::try_from(sh.cfg.probe_wait.as_millis()).unwrap_or(u32::MAX),
    };
    io::send_msg(&mut s, sealer.as_mut(), &probe, limit).map_err(|e| e.to_string())?;
    sh.split.announce();
    loop {
        match io::read_msg(&mut s, &mut reader, &sh.abort, PROBED_MAX) {
            Ok(Msg::Unheard) => break,
            // A receiver that heard the group says nothing more here.
            Ok(_) => {}
            Err(_) => return Ok(()),
        }
    }
    let mut w = sh.lock();
    let joined = sh.joined.load(Ordering::Acquire);
    if w.1
        || sh.registered.load(Ordering::Acquire)
        || usize::from(joined) + w.0.len() >= usize::from(sh.total())
    {
        drop(w);
        let text = format!("the session has its {} receivers already", sh.total());
        return Err(refuse(&mut s, &mut sealer, text, limit));
    }
    tracing::info!(
        "receiver {name:?} at {} did not hear the group: it will be served over TCP",
        s.peer_addr()
            .map_or_else(|_| "?".to_owned(), |a| a.to_string())
    );
    w.0.push(Waiting {
        name,
        stream: s,
        sealer,
    });
    sh.split.serve_elsewhere(w.0.len() as u16);
    Ok(())
}

/// Tells a lobby connection why it is refused (an `Abort`, best effort)
/// and returns the reason.
fn refuse(s: &mut TcpStream, sealer: &mut Option<Sealer>, text: String, limit: Duration) -> String {
    let _ = io::send_msg(
        s,
        sealer.as_mut(),
        &Msg::Abort { text: text.clone() },
        limit,
    );
    text
}

/// How the TCP half ended.
enum Half {
    /// Nobody was waiting in the lobby.
    Nobody,
    /// The multicast half ended before registration closed: the
    /// receivers waiting in the lobby (named) were sent away.
    SentAway(Vec<String>),
    /// The overlay ran.
    Served(Box<Tcp>),
}

/// Waits for registration to close, then serves the receivers waiting
/// in the lobby over the TCP overlay.
fn serve_tcp(name: &str, data: &[u8], sh: &Shared<'_>, start: Instant) -> Result<Half, Error> {
    let limit = sh.cfg.overlay.inactivity;
    let mut beat = Instant::now();
    let ready = loop {
        if sh.registered.load(Ordering::Acquire) || sh.split.elsewhere() >= sh.total() {
            break true;
        }
        if sh.mc_over.load(Ordering::Acquire) || sh.abort.load(Ordering::Acquire) {
            break false;
        }
        if beat.elapsed() >= HEARTBEAT_EVERY {
            beat = Instant::now();
            let mut w = sh.lock();
            let before = w.0.len();
            w.0.retain_mut(|x| x.say(&Msg::Heartbeat, limit));
            if w.0.len() != before {
                // Gone before the overlay opened: the multicast half waits
                // for them again (whoever comes).
                sh.split.serve_elsewhere(w.0.len() as u16);
            }
        }
        std::thread::sleep(LOOK_EVERY);
    };
    let mut waiting = {
        let mut w = sh.lock();
        w.1 = true;
        std::mem::take(&mut w.0)
    };
    if waiting.is_empty() {
        return Ok(Half::Nobody);
    }
    if !ready {
        for x in &mut waiting {
            x.say(
                &Msg::Abort {
                    text: "the sender's session ended before every receiver registered".into(),
                },
                limit,
            );
        }
        return Ok(Half::SentAway(
            waiting.iter().map(|x| x.name.clone()).collect(),
        ));
    }
    let mut ov = sh.cfg.overlay.clone();
    ov.receivers = waiting.len() as u16;
    ov.shape = sh
        .cfg
        .tcp_shape
        .unwrap_or_else(|| super::tcp_shape_for(ov.receivers));
    ov.control = SocketAddr::new(sh.cfg.overlay.control.ip(), 0);
    ov.join_wait = sh.cfg.multicast.proto.join_wait;
    if ov.name.is_none() {
        ov.name = Some(name.to_owned());
    }
    let overlay = OverlaySender::bind(&ov)?;
    let port = overlay.local_addr()?.port();
    tracing::info!(
        "serving {} receiver(s) that did not hear the group over {} (port {port})",
        waiting.len(),
        ov.shape.name()
    );
    for x in &mut waiting {
        let ip = x
            .stream
            .local_addr()
            .map_or(sh.cfg.overlay.control.ip(), |a| a.ip());
        let control = SocketAddr::new(ip, port);
        if !x.say(&Msg::Redirect { control }, limit) {
            tracing::warn!(
                "receiver {:?} left the lobby before the overlay opened",
                x.name
            );
        }
    }
    let names = waiting.iter().map(|x| x.name.clone()).collect();
    // The lobby connections stay open until the overlay is over: each
    // receiver reads its `Redirect` before it could see them close.
    let report = overlay.send_bytes(name, data, None)?;
    drop(waiting);
    Ok(Half::Served(Box::new(Tcp {
        report,
        names,
        ended: start.elapsed(),
    })))
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
    };
    let names = |r: &SendReport| r.members.iter().map(|x| x.name.clone()).collect::<Vec<_>>();
    let t = match tcp {
        Half::Served(t) => t,
        Half::Nobody => {
            m.hybrid = Some(hybrid(names(&m), Vec::new()));
            return Ok(m);
        }
        Half::SentAway(away) => {
            // The multicast half's count left them out: say who they were.
            let e = m.error.get_or_insert_with(String::new);
            let _ = write!(
                e,
                "; {} more registered over TCP and were sent away: {}",
                away.len(),
                away.join(", ")
            );
            m.ok = false;
            m.hybrid = Some(hybrid(names(&m), away));
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
