//! Sockets, the clock and the non-blocking send path shared by both drivers.

use crate::Error;
use mio::net::UdpSocket;
use mio::{Interest, Poll, Token};
use rmcast_proto::Instant;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Longest a driver sleeps before it looks at its cancel flag again.
pub(crate) const MAX_WAIT: Duration = Duration::from_millis(100);
/// Datagrams received per socket before the driver turns back to sending.
pub(crate) const RX_BURST: usize = 1024;
/// Datagrams sent before the driver turns back to receiving.
pub(crate) const TX_BURST: usize = 1024;

/// The process-wide clock the machines run on: nanoseconds since the first
/// reading, so every sender and receiver in a process shares one epoch.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Clock;

impl Clock {
    /// The current time as the protocol engine sees it.
    pub(crate) fn now(self) -> Instant {
        static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
        let epoch = *EPOCH.get_or_init(std::time::Instant::now);
        Instant::from_nanos(u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

/// Seconds between two protocol instants.
pub(crate) fn secs_between(from: Instant, to: Instant) -> f64 {
    to.saturating_since(from).as_secs_f64()
}

/// True once the caller's cancel flag is raised.
pub(crate) fn is_cancelled(flag: Option<&std::sync::Arc<AtomicBool>>) -> bool {
    flag.is_some_and(|f| f.load(Ordering::Relaxed))
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

/// Which kernel buffer to size.
#[derive(Clone, Copy)]
enum Buffer {
    Recv,
    Send,
}

/// Sizes a socket buffer: `SO_*BUFFORCE` when privileged, else `SO_*BUF`
/// (capped by the sysctl), then warns when the kernel gave less.
fn size_buffer(socket: &Socket, which: Buffer, bytes: usize, what: &str) {
    let (force, sysctl) = match which {
        Buffer::Recv => (libc::SO_RCVBUFFORCE, "net.core.rmem_max"),
        Buffer::Send => (libc::SO_SNDBUFFORCE, "net.core.wmem_max"),
    };
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt on an open descriptor with a pointer to a c_int
    // and its exact length.
    let forced = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            force,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    } == 0;
    if !forced {
        let set = match which {
            Buffer::Recv => socket.set_recv_buffer_size(bytes),
            Buffer::Send => socket.set_send_buffer_size(bytes),
        };
        if let Err(e) = set {
            tracing::warn!("{what}: cannot set the socket buffer to {bytes} bytes: {e}");
        }
    }
    let got = match which {
        Buffer::Recv => socket.recv_buffer_size(),
        Buffer::Send => socket.send_buffer_size(),
    };
    // Linux reports twice the requested size (bookkeeping overhead).
    match got {
        Ok(got) if got < bytes => tracing::warn!(
            "{what}: socket buffer is {got} bytes, asked for {bytes}; \
             raise the sysctl {sysctl} (or run as root) to avoid drops"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("{what}: cannot read the socket buffer size: {e}"),
    }
}

fn new_udp(what: &str) -> Result<Socket, Error> {
    Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
        .map_err(io_err(format!("cannot create the {what} UDP socket")))
}

fn into_mio(socket: Socket, what: &str) -> Result<UdpSocket, Error> {
    socket.set_nonblocking(true).map_err(io_err(format!(
        "cannot make the {what} socket non-blocking"
    )))?;
    let std: std::net::UdpSocket = socket.into();
    Ok(UdpSocket::from_std(std))
}

/// Sets the outgoing multicast interface, TTL and loopback on a socket.
fn multicast_out(socket: &Socket, iface: Ipv4Addr, ttl: u32) -> Result<(), Error> {
    socket
        .set_multicast_if_v4(&iface)
        .map_err(io_err(format!("cannot send multicast through {iface}")))?;
    socket
        .set_multicast_ttl_v4(ttl)
        .map_err(io_err(format!("cannot set multicast TTL {ttl}")))?;
    socket
        .set_multicast_loop_v4(true)
        .map_err(io_err("cannot enable multicast loopback"))?;
    Ok(())
}

/// The sender's single socket: bound to `iface:0`, sends to the group and
/// to receivers, receives their feedback.
pub(crate) fn sender_socket(
    iface: Ipv4Addr,
    ttl: u32,
    buffer_bytes: usize,
) -> Result<UdpSocket, Error> {
    let socket = new_udp("sender")?;
    let local = SocketAddrV4::new(iface, 0);
    socket
        .bind(&SockAddr::from(local))
        .map_err(io_err(format!("cannot bind the sender socket to {local}")))?;
    multicast_out(&socket, iface, ttl)?;
    size_buffer(&socket, Buffer::Send, buffer_bytes, "sender socket");
    size_buffer(&socket, Buffer::Recv, buffer_bytes, "sender socket");
    into_mio(socket, "sender")
}

/// The receiver's multicast socket: bound to the group's address and port
/// (shared with other receivers on the host) and joined on `iface`.
pub(crate) fn group_socket(
    group: SocketAddrV4,
    iface: Ipv4Addr,
    buffer_bytes: usize,
) -> Result<UdpSocket, Error> {
    let socket = new_udp("multicast")?;
    socket
        .set_reuse_address(true)
        .map_err(io_err("cannot set SO_REUSEADDR on the multicast socket"))?;
    socket
        .set_reuse_port(true)
        .map_err(io_err("cannot set SO_REUSEPORT on the multicast socket"))?;
    // Bound to the group address, the socket only sees this group; this
    // also keeps out groups other sockets of the process joined.
    let _ = socket.set_multicast_all_v4(false);
    size_buffer(&socket, Buffer::Recv, buffer_bytes, "multicast socket");
    socket.bind(&SockAddr::from(group)).map_err(io_err(format!(
        "cannot bind the multicast socket to {group}"
    )))?;
    socket
        .join_multicast_v4(group.ip(), &iface)
        .map_err(io_err(format!(
            "cannot join group {} on {iface}",
            group.ip()
        )))?;
    into_mio(socket, "multicast")
}

/// The receiver's unicast socket: bound to `iface:0`; feedback goes out of
/// it and the sender's unicast replies come back to it.
pub(crate) fn feedback_socket(
    iface: Ipv4Addr,
    ttl: u32,
    buffer_bytes: usize,
) -> Result<UdpSocket, Error> {
    let socket = new_udp("feedback")?;
    let local = SocketAddrV4::new(iface, 0);
    socket.bind(&SockAddr::from(local)).map_err(io_err(format!(
        "cannot bind the feedback socket to {local}"
    )))?;
    multicast_out(&socket, iface, ttl)?;
    size_buffer(&socket, Buffer::Recv, buffer_bytes, "feedback socket");
    into_mio(socket, "feedback")
}

/// Logs send failures at most once a second, with a count of the rest.
#[derive(Debug, Default)]
pub(crate) struct ErrorLog {
    last: Option<std::time::Instant>,
    suppressed: u64,
}

impl ErrorLog {
    /// Records one failure of `what`.
    pub(crate) fn record(&mut self, what: &str, e: &io::Error) {
        let now = std::time::Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            self.suppressed += 1;
            return;
        }
        if self.suppressed > 0 {
            tracing::warn!(
                "{what}: {e} (and {} similar errors in the last second; treated as losses)",
                self.suppressed
            );
        } else {
            tracing::warn!("{what}: {e} (treated as a loss)");
        }
        self.last = Some(now);
        self.suppressed = 0;
    }
}

/// A non-blocking socket registered with a poll, with the datagram that
/// could not be sent yet (the bytes stay in the caller's transmit buffer).
pub(crate) struct Port {
    pub(crate) socket: UdpSocket,
    token: Token,
    writable_armed: bool,
    /// Destination and length of `tx_buf[..len]` waiting for writability.
    pub(crate) pending: Option<(SocketAddr, usize)>,
    errors: ErrorLog,
    name: &'static str,
}

impl Port {
    /// Registers `socket` for readability under `token`.
    pub(crate) fn new(
        poll: &Poll,
        mut socket: UdpSocket,
        token: Token,
        name: &'static str,
    ) -> Result<Self, Error> {
        poll.registry()
            .register(&mut socket, token, Interest::READABLE)
            .map_err(io_err(format!("cannot register the {name} socket")))?;
        Ok(Self {
            socket,
            token,
            writable_armed: false,
            pending: None,
            errors: ErrorLog::default(),
            name,
        })
    }

    /// Sends `bytes` to `to`. Returns false when the socket is full: the
    /// datagram is then remembered as pending and must be retried from
    /// the same buffer with [`Port::retry`].
    pub(crate) fn send(&mut self, bytes: &[u8], to: SocketAddr) -> bool {
        debug_assert!(self.pending.is_none());
        loop {
            match self.socket.send_to(bytes, to) {
                Ok(_) => return true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.pending = Some((to, bytes.len()));
                    return false;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.errors.record(self.name, &e);
                    return true;
                }
            }
        }
    }

    /// Retries the pending datagram held in `tx_buf`; true when none is left.
    pub(crate) fn retry(&mut self, tx_buf: &[u8]) -> bool {
        match self.pending.take() {
            None => true,
            Some((to, len)) => self.send(&tx_buf[..len], to),
        }
    }

    /// Asks for a writability wake-up exactly while a datagram is pending.
    pub(crate) fn update_interest(&mut self, poll: &Poll) -> Result<(), Error> {
        let want = self.pending.is_some();
        if want != self.writable_armed {
            let interest = if want {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            poll.registry()
                .reregister(&mut self.socket, self.token, interest)
                .map_err(io_err(format!(
                    "cannot re-register the {} socket",
                    self.name
                )))?;
            self.writable_armed = want;
        }
        Ok(())
    }

    /// Receives up to [`RX_BURST`] datagrams into `buf`, handing each to
    /// `f`. Returns true when it stopped at the bound with more possibly
    /// waiting (the caller must not sleep before draining again).
    pub(crate) fn drain(&mut self, buf: &mut [u8], mut f: impl FnMut(SocketAddr, &[u8])) -> bool {
        for _ in 0..RX_BURST {
            match self.socket.recv_from(buf) {
                Ok((n, from)) => f(from, &buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => self.errors.record(self.name, &e),
            }
        }
        true
    }
}

/// Waits for socket readiness for at most `wait`; interruptions count as wake-ups.
pub(crate) fn wait(poll: &mut Poll, events: &mut mio::Events, wait: Duration) -> Result<(), Error> {
    match poll.poll(events, Some(wait)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
        Err(e) => Err(Error::Io {
            context: "cannot wait for socket events".into(),
            source: e,
        }),
    }
}

/// Invokes a progress callback at most ten times a second (and always for
/// the final report).
pub(crate) struct Ticker {
    last: Option<std::time::Instant>,
    last_phase: &'static str,
}

impl Ticker {
    pub(crate) fn new() -> Self {
        Self {
            last: None,
            last_phase: "",
        }
    }

    /// True when a progress report is due now.
    pub(crate) fn due(&mut self, phase: &'static str, force: bool) -> bool {
        let now = std::time::Instant::now();
        let due = force
            || phase != self.last_phase
            || self
                .last
                .is_none_or(|t| now.duration_since(t) >= Duration::from_millis(100));
        if due {
            self.last = Some(now);
            self.last_phase = phase;
        }
        due
    }
}
