//! The PRMP receiving endpoint: a driver thread, the group socket, a
//! unicast socket for responses and invitations, one machine.

use super::Shared;
use crate::net::{self, Clock, MAX_WAIT, Outgoing, Port};
use crate::{DEFAULT_GROUP, DEFAULT_SOCKET_BUFFER_BYTES, Error, check_group, goodput_mbps};
use mio::{Events, Poll, Token, Waker};
use rmcast_proto::security::GroupKey;
use rmcast_proto::stream::{
    StreamReceiver as Machine, StreamReceiverConfig, StreamReceiverEvent, StreamReceiverStats,
};
use rmcast_proto::{Dest, Instant, SessionId};
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const GROUP: Token = Token(0);
const UNICAST: Token = Token(1);
const ALARM: Token = Token(2);
const WAKE: Token = Token(3);

/// How to join a stream.
#[derive(Clone, Debug)]
pub struct StreamRecvConfig {
    /// Multicast group and port to listen on.
    pub group: SocketAddrV4,
    /// Local interface address to join the group on and answer from.
    pub iface: Ipv4Addr,
    /// Port of the unicast socket (`iface:port`) that answers the sender
    /// and takes invitations; 0 picks a free one (fine for announcements;
    /// an inviting sender must know it).
    pub port: u16,
    /// Multicast TTL of the unicast socket (it sends only unicast).
    pub ttl: u32,
    /// Kernel receive buffer size to ask for, in bytes.
    pub socket_buffer_bytes: usize,
    /// Protocol settings (buffer, name, session to join, timers).
    pub proto: StreamReceiverConfig,
    /// Give up when no session admitted this receiver within this time
    /// (`None`: wait forever; a receiver that hears only datagrams it cannot
    /// authenticate still gives up after `proto.sender_timeout`).
    pub connect_timeout: Option<Duration>,
    /// The group key: every datagram is sealed under it (`None`: insecure,
    /// plain packets). Set here or in `proto.group_key`; this one wins.
    pub group_key: Option<Arc<GroupKey>>,
}

impl Default for StreamRecvConfig {
    fn default() -> Self {
        Self {
            group: DEFAULT_GROUP,
            iface: Ipv4Addr::LOCALHOST,
            port: 0,
            ttl: 1,
            socket_buffer_bytes: DEFAULT_SOCKET_BUFFER_BYTES,
            proto: StreamReceiverConfig {
                receiver_id: rand::random(),
                name: crate::default_receiver_name(),
                ..StreamReceiverConfig::default()
            },
            connect_timeout: None,
            group_key: None,
        }
    }
}

/// What a receiver got.
#[derive(Clone, Debug)]
pub struct StreamRecvReport {
    /// The session joined, if any.
    pub session: Option<SessionId>,
    /// Rank given, if admitted.
    pub rank: Option<u16>,
    /// Messages read by the application.
    pub messages: u64,
    /// Message bytes read by the application.
    pub bytes: u64,
    /// Seconds from admission to the end of the stream (or now).
    pub seconds: f64,
    /// `bytes * 8 / seconds / 1e6`.
    pub goodput_mbps: f64,
    /// True when the sender closed the stream and every message was read.
    pub complete: bool,
    /// Why the session failed for this receiver, if it did.
    pub failure: Option<String>,
    /// The machine's counters (`stats.auth`: datagrams sealed, opened and
    /// refused).
    pub stats: StreamReceiverStats,
    /// What was refused before the machine saw it, by source, in words
    /// (`None`: nothing).
    pub auth_failures: Option<String>,
}

struct State {
    machine: Machine,
    opened: Instant,
    connected_at: Option<Instant>,
    closed_at: Option<Instant>,
    failed: Option<String>,
    left: bool,
    bytes: u64,
    events: VecDeque<StreamReceiverEvent>,
    error: Option<String>,
    done: bool,
    stop: bool,
    reader_waiting: bool,
}

/// The receiving end of a PRMP stream (blocking API).
///
/// ```no_run
/// use rmcast::stream::{StreamRecvConfig, StreamReceiver};
/// let mut r = StreamReceiver::open(StreamRecvConfig::default())?;
/// while let Some(msg) = r.read()? {
///     println!("{} bytes", msg.len());
/// }
/// let report = r.finish();
/// assert!(report.complete);
/// # Ok::<(), rmcast::Error>(())
/// ```
pub struct StreamReceiver {
    shared: Arc<Shared<State>>,
    thread: Option<JoinHandle<()>>,
    local: SocketAddr,
    clock: Clock,
}

impl StreamReceiver {
    /// Joins `cfg.group` and waits, in the background, for a sender's
    /// invitation (on [`StreamReceiver::local_addr`]) or announcement.
    pub fn open(mut cfg: StreamRecvConfig) -> Result<Self, Error> {
        check_group(cfg.group)?;
        if cfg.group_key.is_some() {
            cfg.proto.group_key = cfg.group_key.clone();
        }
        let poll = Poll::new().map_err(net::io_err("cannot create an event loop"))?;
        let group_socket = net::group_socket(cfg.group, cfg.iface, cfg.socket_buffer_bytes)?;
        let unicast = net::feedback_socket(
            SocketAddrV4::new(cfg.iface, cfg.port),
            cfg.ttl,
            cfg.socket_buffer_bytes,
        )?;
        let local = unicast
            .local_addr()
            .map_err(net::io_err("cannot read the unicast socket's address"))?;
        let group_port = Port::new(&poll, group_socket, GROUP, "stream group socket", 32)?;
        let unicast_port = Port::new(&poll, unicast, UNICAST, "stream unicast socket", 8)?;
        let alarm = net::Alarm::new(&poll, ALARM)?;
        let waker =
            Waker::new(poll.registry(), WAKE).map_err(net::io_err("cannot create a waker"))?;
        let clock = Clock;
        let now = clock.now();
        let shared = Arc::new(Shared {
            state: std::sync::Mutex::new(State {
                machine: Machine::new(cfg.proto.clone(), now),
                opened: now,
                connected_at: None,
                closed_at: None,
                failed: None,
                left: false,
                bytes: 0,
                events: VecDeque::new(),
                error: None,
                done: false,
                stop: false,
                reader_waiting: false,
            }),
            cond: std::sync::Condvar::new(),
            waker,
        });
        let driver = Driver {
            shared: shared.clone(),
            poll,
            group_port,
            unicast_port,
            alarm,
            group: SocketAddr::V4(cfg.group),
            connect_timeout: cfg.connect_timeout,
            clock,
        };
        let thread = std::thread::Builder::new()
            .name("prmp-receiver".into())
            .spawn(move || driver.run())
            .map_err(net::io_err("cannot start the stream driver thread"))?;
        Ok(Self {
            shared,
            thread: Some(thread),
            local,
            clock,
        })
    }

    /// The unicast address a sender invites (`--invite`) and answers to.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Events so far (`Connected`, `Closed`, `Failed`, `Left`), without waiting.
    pub fn events(&self) -> Vec<StreamReceiverEvent> {
        self.shared.lock().events.drain(..).collect()
    }

    /// The session and rank, once admitted.
    #[must_use]
    pub fn membership(&self) -> Option<(SessionId, u16)> {
        let st = self.shared.lock();
        st.machine.session().zip(st.machine.rank())
    }

    /// Blocks until the next whole message is there and appends it to
    /// `out`; returns its length, or `None` at the end of the stream (the
    /// sender closed it and every message was read, or this receiver left).
    /// Fails when the session failed for this receiver (removed, refused,
    /// sender silent, no session within the connect timeout).
    pub fn read_into(&mut self, out: &mut Vec<u8>) -> Result<Option<usize>, Error> {
        let mut st = self.shared.lock();
        loop {
            if let Some(n) = st.machine.read(out) {
                st.bytes += n as u64;
                return Ok(Some(n));
            }
            if st.machine.at_end() || st.left {
                return Ok(None);
            }
            if let Some(f) = &st.failed {
                return Err(Error::Failed(f.clone()));
            }
            if let Some(e) = &st.error {
                return Err(Error::Failed(e.clone()));
            }
            if st.done {
                return Err(Error::Failed("the stream driver ended".into()));
            }
            st.reader_waiting = true;
            st = self.shared.wait_timeout(st, MAX_WAIT);
        }
    }

    /// The next whole message (see [`StreamReceiver::read_into`]).
    pub fn read(&mut self) -> Result<Option<Vec<u8>>, Error> {
        let mut out = Vec::new();
        Ok(self.read_into(&mut out)?.map(|_| out))
    }

    /// Ends this receiver's part: if the stream is not over, leaves the
    /// session (the sender reports `Left`); otherwise lingers to answer the
    /// sender's last polls (the machine's `linger`). Returns what was received.
    pub fn finish(mut self) -> StreamRecvReport {
        self.stop_driver();
        let st = self.shared.lock();
        let now = self.clock.now();
        let from = st.connected_at.unwrap_or(st.opened);
        let seconds = net::secs_between(from, st.closed_at.unwrap_or(now));
        StreamRecvReport {
            session: st.machine.session(),
            rank: st.machine.rank(),
            messages: st.machine.stats().messages_read,
            bytes: st.bytes,
            seconds,
            goodput_mbps: goodput_mbps(st.bytes, seconds),
            complete: st.machine.at_end(),
            failure: st.failed.clone().or_else(|| st.error.clone()),
            stats: st.machine.stats().clone(),
            auth_failures: st.machine.auth_failures().describe(),
        }
    }

    fn stop_driver(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        {
            let mut st = self.shared.lock();
            // A receiver that read the whole stream stays to confirm the
            // sender's close (then lingers, as after `Closed`), even when the
            // close has not arrived yet: leaving then would make the sender
            // report it `Left` though it holds everything (seen under load,
            // 10 nodes closing at once on 2 cores). The machine still ends on
            // its own if the sender falls silent.
            if st.closed_at.is_none() && st.failed.is_none() && !st.done && !st.machine.at_end() {
                let now = self.clock.now();
                st.machine.leave(now);
            }
        }
        self.shared.wake_driver();
        let _ = thread.join();
    }
}

impl Drop for StreamReceiver {
    fn drop(&mut self) {
        self.stop_driver();
    }
}

struct Driver {
    shared: Arc<Shared<State>>,
    poll: Poll,
    group_port: Port,
    unicast_port: Port,
    alarm: net::Alarm,
    group: SocketAddr,
    connect_timeout: Option<Duration>,
    clock: Clock,
}

impl Driver {
    fn run(mut self) {
        if let Err(e) = self.drive() {
            tracing::error!("stream receiver: {e}");
            self.shared.lock().error = Some(e.to_string());
        }
        self.shared.lock().done = true;
        self.shared.cond.notify_all();
    }

    fn drive(&mut self) -> Result<(), Error> {
        let mut events = Events::with_capacity(16);
        let mut rx_backlog = false;
        loop {
            let now = self.clock.now();
            let wait;
            {
                let mut st = self.shared.lock();
                let group = self.group;
                let machine = &mut st.machine;
                let tx_more = self.unicast_port.transmit(|buf| {
                    let t = machine.poll_transmit(now, buf)?;
                    Some(Outgoing {
                        to: match t.dest {
                            Dest::Group => group,
                            Dest::Unicast(a) => a,
                        },
                        len: t.len,
                        batchable: false,
                    })
                });
                let mut notify = false;
                while let Some(e) = st.machine.poll_event() {
                    notify = true;
                    match &e {
                        StreamReceiverEvent::Connected { session, rank } => {
                            tracing::info!("joined session {session} with rank {rank}");
                            st.connected_at = Some(now);
                        }
                        StreamReceiverEvent::Closed => st.closed_at = Some(now),
                        StreamReceiverEvent::Failed(why) => st.failed = Some(why.clone()),
                        StreamReceiverEvent::Left => st.left = true,
                    }
                    st.events.push_back(e);
                }
                if st.connected_at.is_none()
                    && st.failed.is_none()
                    && st.machine.session().is_none()
                    && self
                        .connect_timeout
                        .is_some_and(|t| now.saturating_since(st.opened) >= t)
                {
                    let why = format!(
                        "no sender admitted this receiver within {:.1} s",
                        self.connect_timeout.unwrap_or_default().as_secs_f64()
                    );
                    st.failed = Some(match st.machine.auth_failures().describe() {
                        Some(refused) => format!("{why}; {refused}"),
                        None => why,
                    });
                    notify = true;
                    st.stop = true;
                }
                if notify && st.reader_waiting {
                    st.reader_waiting = false;
                    self.shared.cond.notify_all();
                }
                let finished = st.machine.is_finished() || st.stop;
                if finished && !self.unicast_port.has_pending() && !tx_more {
                    return Ok(());
                }
                wait = if rx_backlog || tx_more {
                    Duration::ZERO
                } else {
                    st.machine
                        .poll_timeout()
                        .map_or(MAX_WAIT, |t| t.saturating_since(now))
                        .min(MAX_WAIT)
                };
            }
            self.unicast_port.update_interest(&self.poll)?;
            net::wait(&mut self.poll, &mut events, Some(&self.alarm), wait)?;
            let now = self.clock.now();
            let mut st = self.shared.lock();
            let before = st.machine.stats().data_packets;
            let machine = &mut st.machine;
            let more_group = self.group_port.drain(|from, bytes| {
                machine.handle_datagram(now, from, bytes);
            });
            let more_unicast = self.unicast_port.drain(|from, bytes| {
                machine.handle_datagram(now, from, bytes);
            });
            rx_backlog = more_group || more_unicast;
            if st.machine.poll_timeout().is_some_and(|t| now >= t) {
                st.machine.handle_timeout(now);
            }
            if st.reader_waiting && st.machine.stats().data_packets != before {
                st.reader_waiting = false;
                self.shared.cond.notify_all();
            }
        }
    }
}
