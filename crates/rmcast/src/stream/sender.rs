//! The PRMP sending endpoint: a driver thread, one socket, one machine.

use super::Shared;
use crate::net::{self, Clock, MAX_WAIT, Outgoing, Port};
use crate::{DEFAULT_GROUP, DEFAULT_SOCKET_BUFFER_BYTES, Error, check_group, goodput_mbps};
use mio::{Events, Poll, Token, Waker};
use rmcast_proto::security::GroupKey;
use rmcast_proto::stream::{
    Admission, MemberInfo, MemberStatus, RemoveReason, SendError, StreamEvent,
    StreamSender as Machine, StreamSenderConfig, StreamSenderStats,
};
use rmcast_proto::{Dest, Instant, Seq, SessionId};
use rmcast_wire::stream::StreamKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

const SOCKET: Token = Token(0);
const ALARM: Token = Token(1);
const WAKE: Token = Token(2);

/// How to open a stream.
#[derive(Clone, Debug)]
pub struct StreamSendConfig {
    /// Multicast group and port of the session.
    pub group: SocketAddrV4,
    /// Local interface address: the socket binds to it and multicast leaves through it.
    pub iface: Ipv4Addr,
    /// Multicast TTL (1 keeps packets on the local network segment).
    pub ttl: u32,
    /// Kernel socket buffer size to ask for, in bytes.
    pub socket_buffer_bytes: usize,
    /// Protocol settings: admission (invitation or announcement), buffers,
    /// response rate, timers, congestion control.
    pub proto: StreamSenderConfig,
    /// Announcement model: end admission as soon as this many receivers
    /// joined, instead of at the end of the announcement's duration.
    pub wanted: Option<usize>,
    /// The group key: every datagram is sealed under it (`None`: insecure,
    /// plain packets). Set here or in `proto.group_key`; this one wins.
    pub group_key: Option<Arc<GroupKey>>,
}

impl Default for StreamSendConfig {
    fn default() -> Self {
        Self {
            group: DEFAULT_GROUP,
            iface: Ipv4Addr::LOCALHOST,
            ttl: 1,
            socket_buffer_bytes: DEFAULT_SOCKET_BUFFER_BYTES,
            proto: StreamSenderConfig::default(),
            wanted: None,
            group_key: None,
        }
    }
}

/// An event of the session, with the member it is about as the sender
/// knew it at that moment.
#[derive(Clone, Debug)]
pub struct SenderEvent {
    /// Time since the stream was opened.
    pub elapsed: Duration,
    /// What happened.
    pub event: StreamEvent,
    /// The member named by the event, if any.
    pub member: Option<MemberInfo>,
}

/// How a stream ended.
#[derive(Clone, Debug)]
pub struct StreamSendReport {
    /// The session id.
    pub session: SessionId,
    /// Receivers in the session when admission ended.
    pub established: usize,
    /// Every member the sender knew, with its final status.
    pub members: Vec<MemberInfo>,
    /// Members removed, and why.
    pub removed: Vec<(MemberInfo, RemoveReason)>,
    /// Members that left on their own.
    pub left: Vec<MemberInfo>,
    /// Messages sent.
    pub messages: u64,
    /// Message bytes sent.
    pub bytes: u64,
    /// Seconds from the end of admission to the confirmed close.
    pub seconds: f64,
    /// `bytes * 8 / seconds / 1e6`.
    pub goodput_mbps: f64,
    /// The machine's counters (`stats.auth`: datagrams sealed, opened and
    /// refused).
    pub stats: StreamSenderStats,
    /// What was refused before the machine saw it, by source, in words
    /// (`None`: nothing): why a receiver that never answered may have.
    pub auth_failures: Option<String>,
    /// True when at least one receiver was admitted, `wanted` (if set)
    /// were, and every admitted receiver confirmed it holds every message
    /// (none removed, none left).
    pub ok: bool,
}

struct State {
    machine: Machine,
    started: Instant,
    established: Option<(Instant, usize)>,
    closed_at: Option<Instant>,
    removed: Vec<(MemberInfo, RemoveReason)>,
    left: Vec<MemberInfo>,
    bytes: u64,
    /// The driver failed (sockets); the text says how.
    error: Option<String>,
    /// The driver thread has ended.
    done: bool,
    /// The application asked the driver to stop.
    stop: bool,
    /// The driver is (about to be) asleep in its poll.
    sleeping: bool,
    /// Packets an application thread waits to queue (0: nobody waits).
    need_packets: u32,
    /// An application thread waits for the session to be established or closed.
    waiting: bool,
}

/// The sending end of a PRMP stream (blocking API).
///
/// ```no_run
/// use rmcast::stream::{Admission, StreamSendConfig, StreamSender};
/// let mut cfg = StreamSendConfig::default();
/// cfg.proto.admission = Admission::Announce {
///     duration: std::time::Duration::from_secs(30),
///     interval: std::time::Duration::from_millis(100),
///     receivers_max: 4,
/// };
/// cfg.wanted = Some(4);
/// let mut s = StreamSender::open(cfg)?;
/// s.send(b"hello")?;
/// let report = s.close()?;
/// assert!(report.ok);
/// # Ok::<(), rmcast::Error>(())
/// ```
pub struct StreamSender {
    shared: Arc<Shared<State>>,
    thread: Option<JoinHandle<()>>,
    events: Option<mpsc::Receiver<SenderEvent>>,
    local: SocketAddr,
    session: SessionId,
    payload_size: usize,
    message_bytes_max: usize,
    wanted: Option<usize>,
}

impl StreamSender {
    /// Opens a session on `cfg.group` and starts admitting receivers
    /// (inviting `Admission::Invite`'s addresses, or announcing). Returns at
    /// once; [`StreamSender::send`] may be called before admission ends
    /// (messages wait in the send buffer).
    pub fn open(mut cfg: StreamSendConfig) -> Result<Self, Error> {
        check_group(cfg.group)?;
        if cfg.group_key.is_some() {
            cfg.proto.group_key = cfg.group_key.clone();
        }
        let poll = Poll::new().map_err(net::io_err("cannot create an event loop"))?;
        let socket = net::sender_socket(cfg.iface, cfg.ttl, cfg.socket_buffer_bytes)?;
        let local = socket
            .local_addr()
            .map_err(net::io_err("cannot read the sender socket's address"))?;
        let port = Port::new(&poll, socket, SOCKET, "stream sender socket", 32)?;
        let alarm = net::Alarm::new(&poll, ALARM)?;
        let waker =
            Waker::new(poll.registry(), WAKE).map_err(net::io_err("cannot create a waker"))?;
        let clock = Clock;
        let now = clock.now();
        let session = SessionId(rand::random());
        // Message bytes per packet: sealing takes its room off the payload.
        let payload_size = usize::from(cfg.proto.packet_payload());
        let message_bytes_max = cfg.proto.message_bytes_max as usize;
        let machine = Machine::new(
            cfg.proto.clone(),
            session,
            Seq(rand::random()),
            rand::random(),
            rand::random(),
            now,
        )
        .map_err(|e| Error::Invalid(format!("invalid stream settings: {e:?}")))?;
        let shared = Arc::new(Shared {
            state: std::sync::Mutex::new(State {
                machine,
                started: now,
                established: None,
                closed_at: None,
                removed: Vec::new(),
                left: Vec::new(),
                bytes: 0,
                error: None,
                done: false,
                stop: false,
                sleeping: false,
                need_packets: 0,
                waiting: false,
            }),
            cond: std::sync::Condvar::new(),
            waker,
        });
        let (tx, rx) = mpsc::channel();
        let announce = matches!(cfg.proto.admission, Admission::Announce { .. });
        let driver = Driver {
            shared: shared.clone(),
            poll,
            port,
            alarm,
            group: SocketAddr::V4(cfg.group),
            wanted: cfg.wanted.filter(|_| announce),
            events: tx,
            clock,
        };
        let thread = std::thread::Builder::new()
            .name("prmp-sender".into())
            .spawn(move || driver.run())
            .map_err(net::io_err("cannot start the stream driver thread"))?;
        tracing::info!(
            "session {session}: stream on {} from {local}, {}",
            cfg.group,
            cfg.proto
                .group_key
                .as_ref()
                .map_or("insecure".into(), |k| format!(
                    "sealed under key {}",
                    k.id()
                ))
        );
        Ok(Self {
            shared,
            thread: Some(thread),
            events: Some(rx),
            local,
            session,
            payload_size,
            message_bytes_max,
            wanted: cfg.wanted,
        })
    }

    /// The session id.
    #[must_use]
    pub fn session(&self) -> SessionId {
        self.session
    }

    /// The sender socket's address (receivers' responses go there).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Events so far, without waiting (empty once [`StreamSender::take_events`] was called).
    pub fn events(&self) -> impl Iterator<Item = SenderEvent> + '_ {
        self.events.iter().flat_map(|rx| rx.try_iter())
    }

    /// Hands the event channel to the caller (e.g. a thread that logs
    /// events while another blocks in `send`); the channel ends when the
    /// driver does.
    pub fn take_events(&mut self) -> Option<mpsc::Receiver<SenderEvent>> {
        self.events.take()
    }

    /// Every member known so far.
    #[must_use]
    pub fn members(&self) -> Vec<MemberInfo> {
        self.shared.lock().machine.members()
    }

    /// Blocks until admission is over (at most `timeout`, if given) and
    /// returns how many receivers are in the session (`None` on timeout).
    pub fn wait_established(&self, timeout: Option<Duration>) -> Result<Option<usize>, Error> {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        let mut st = self.shared.lock();
        loop {
            if let Some((_, n)) = st.established {
                return Ok(Some(n));
            }
            if let Some(e) = &st.error {
                return Err(Error::Failed(e.clone()));
            }
            if st.done {
                return Err(Error::Failed("the stream driver ended".into()));
            }
            let wait = match deadline {
                Some(d) => match d.checked_duration_since(std::time::Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(MAX_WAIT),
                    _ => return Ok(None),
                },
                None => MAX_WAIT,
            };
            st.waiting = true;
            st = self.shared.wait_timeout(st, wait);
        }
    }

    /// Queues one message (at most `message_bytes_max` bytes), blocking
    /// while the send buffer cannot take it. Never drops: `Ok` means every
    /// receiver that stays in the session will read it. Fails when the
    /// session is over (every receiver gone, or closed) or the driver failed.
    pub fn send(&mut self, msg: &[u8]) -> Result<(), Error> {
        if msg.len() > self.message_bytes_max {
            return Err(Error::Invalid(format!(
                "a message of {} bytes is larger than the largest ({})",
                msg.len(),
                self.message_bytes_max
            )));
        }
        let packets = msg.len().div_ceil(self.payload_size).max(1) as u32;
        let mut st = self.shared.lock();
        loop {
            if let Some(e) = &st.error {
                return Err(Error::Failed(e.clone()));
            }
            match st.machine.send(msg) {
                Ok(()) => {
                    st.bytes += msg.len() as u64;
                    st.need_packets = 0;
                    if st.sleeping {
                        st.sleeping = false;
                        drop(st);
                        self.shared.wake_driver();
                    }
                    return Ok(());
                }
                Err(SendError::WouldBlock) => {
                    if st.done {
                        return Err(Error::Failed("the stream driver ended".into()));
                    }
                    st.need_packets = packets;
                    if st.sleeping {
                        st.sleeping = false;
                        self.shared.wake_driver();
                    }
                    st = self.shared.wait_timeout(st, MAX_WAIT);
                }
                Err(SendError::TooLarge) => {
                    return Err(Error::Invalid("message too large".into()));
                }
                Err(SendError::Closed) => {
                    let why = if st.machine.live_members() == 0 {
                        "every receiver is gone"
                    } else {
                        "the stream is closed"
                    };
                    return Err(Error::Failed(why.into()));
                }
            }
        }
    }

    /// Ends the stream and blocks until every remaining receiver confirmed
    /// it holds every message (or none is left), then reports who did.
    pub fn close(mut self) -> Result<StreamSendReport, Error> {
        {
            let mut st = self.shared.lock();
            st.machine.close();
            self.shared.wake_driver();
            loop {
                if st.closed_at.is_some() || st.done {
                    break;
                }
                st.waiting = true;
                st = self.shared.wait_timeout(st, MAX_WAIT);
            }
        }
        self.stop();
        let st = self.shared.lock();
        if st.closed_at.is_none() {
            return Err(Error::Failed(
                st.error
                    .clone()
                    .unwrap_or_else(|| "the stream driver ended".into()),
            ));
        }
        let members = st.machine.members();
        let established = st.established.map_or(0, |(_, n)| n);
        let from = st.established.map_or(st.started, |(t, _)| t);
        let seconds = net::secs_between(from, st.closed_at.unwrap_or(from));
        let confirmed = members
            .iter()
            .filter(|m| m.status == MemberStatus::Live && m.close_confirmed)
            .count();
        let ok = established > 0
            && self.wanted.is_none_or(|w| established >= w)
            && st.removed.is_empty()
            && st.left.is_empty()
            && confirmed == established;
        let stats = st.machine.stats().clone();
        Ok(StreamSendReport {
            session: self.session,
            established,
            members,
            removed: st.removed.clone(),
            left: st.left.clone(),
            messages: stats.messages,
            bytes: st.bytes,
            seconds,
            goodput_mbps: goodput_mbps(st.bytes, seconds),
            stats,
            auth_failures: st.machine.auth_failures().describe(),
            ok,
        })
    }

    fn stop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake_driver();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for StreamSender {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Driver {
    shared: Arc<Shared<State>>,
    poll: Poll,
    port: Port,
    alarm: net::Alarm,
    group: SocketAddr,
    wanted: Option<usize>,
    events: mpsc::Sender<SenderEvent>,
    clock: Clock,
}

impl Driver {
    fn run(mut self) {
        if let Err(e) = self.drive() {
            tracing::error!("stream sender: {e}");
            self.shared.lock().error = Some(e.to_string());
        }
        let mut st = self.shared.lock();
        st.done = true;
        drop(st);
        self.shared.cond.notify_all();
    }

    fn drive(&mut self) -> Result<(), Error> {
        let mut events = Events::with_capacity(16);
        let mut rx_backlog = false;
        let mut joined = 0usize;
        loop {
            let now = self.clock.now();
            let wait;
            {
                let mut st = self.shared.lock();
                if st.stop {
                    return Ok(());
                }
                let group = self.group;
                let machine = &mut st.machine;
                let tx_more = self.port.transmit(|buf| {
                    let t = machine.poll_transmit(now, buf)?;
                    Some(Outgoing {
                        to: match t.dest {
                            Dest::Group => group,
                            Dest::Unicast(a) => a,
                        },
                        len: t.len,
                        batchable: t.kind == StreamKind::Data,
                    })
                });
                let mut notify = false;
                let mut again = false;
                while let Some(e) = st.machine.poll_event() {
                    notify = true;
                    let member = match e {
                        StreamEvent::Joined(id)
                        | StreamEvent::Suspected(id)
                        | StreamEvent::Unsuspected(id)
                        | StreamEvent::Left(id)
                        | StreamEvent::Removed { id, .. } => {
                            st.machine.members().into_iter().nth(usize::from(id.0))
                        }
                        _ => None,
                    };
                    match (&e, &member) {
                        (StreamEvent::Joined(_), _) => {
                            joined += 1;
                            if self.wanted.is_some_and(|w| joined >= w) {
                                st.machine.end_admission(now);
                                again = true;
                            }
                        }
                        (StreamEvent::Established { members }, _) => {
                            st.established = Some((now, *members));
                        }
                        (StreamEvent::Removed { reason, .. }, Some(m)) => {
                            st.removed.push((m.clone(), *reason));
                        }
                        (StreamEvent::Left(_), Some(m)) => st.left.push(m.clone()),
                        (StreamEvent::Closed, _) => st.closed_at = Some(now),
                        _ => {}
                    }
                    let _ = self.events.send(SenderEvent {
                        elapsed: now.saturating_since(st.started),
                        event: e,
                        member,
                    });
                }
                if st.need_packets > 0 && st.machine.send_capacity_packets() >= st.need_packets {
                    notify = true;
                }
                if st.machine.is_closed() && !self.port.has_pending() && !tx_more && !again {
                    drop(st);
                    self.shared.cond.notify_all();
                    return Ok(());
                }
                if notify && (st.need_packets > 0 || st.waiting) {
                    st.waiting = false;
                    self.shared.cond.notify_all();
                }
                wait = if rx_backlog || tx_more || again {
                    Duration::ZERO
                } else {
                    st.machine
                        .poll_timeout()
                        .map_or(MAX_WAIT, |t| t.saturating_since(now))
                        .min(MAX_WAIT)
                };
                st.sleeping = !wait.is_zero();
            }
            self.port.update_interest(&self.poll)?;
            net::wait(&mut self.poll, &mut events, Some(&self.alarm), wait)?;
            let now = self.clock.now();
            let mut st = self.shared.lock();
            st.sleeping = false;
            let machine = &mut st.machine;
            rx_backlog = self.port.drain(|from, bytes| {
                machine.handle_datagram(now, from, bytes);
            });
            if st.machine.poll_timeout().is_some_and(|t| now >= t) {
                st.machine.handle_timeout(now);
            }
        }
    }
}
