//! Sockets, the clock and the non-blocking send path shared by both drivers.

use crate::Error;
use crate::batch::{GSO_MAX_SEGMENTS, Pushed, TxBatch, gro_split};
use crate::udp::{self, RxRing};
use mio::net::UdpSocket;
use mio::{Interest, Poll, Token};
use rmcast_proto::{Instant, Kind};
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

/// Wraps an I/O error with what was being done, for a message a human can act on.
pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
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

/// A sender's ear on the group (several senders, Hunt's rate group): the
/// group socket of a receiver, with a kernel packet filter that keeps only
/// the group-wide rate packets (`RateNak`, `RateReport`, `RateSync`, kinds
/// 0x40–0x42), so the group's data — its own looped back included — never
/// reaches the process. Read it without GRO (see [`Port::with_gro`]).
pub(crate) fn rate_group_socket(
    group: SocketAddrV4,
    iface: Ipv4Addr,
    buffer_bytes: usize,
) -> Result<UdpSocket, Error> {
    let socket = group_socket(group, iface, buffer_bytes)?;
    let rate_kinds = Kind::RateNak.to_u8()..=Kind::RateSync.to_u8();
    attach_kind_filter(socket.as_raw_fd(), rate_kinds).map_err(io_err(
        "cannot attach the rate packet filter to the group socket",
    ))?;
    Ok(socket)
}

/// A sender's ear on the group while it waits for its receivers: the group
/// socket of a receiver, filtered in the kernel to session announcements
/// (`Hello`), so the sender hears another sender announcing on its group
/// (the two would split the receivers) and nothing else. Read it without
/// GRO; drop it once every receiver joined (no data reaches it anyway).
pub(crate) fn announcement_socket(
    group: SocketAddrV4,
    iface: Ipv4Addr,
    buffer_bytes: usize,
) -> Result<UdpSocket, Error> {
    let socket = group_socket(group, iface, buffer_bytes)?;
    let hello = Kind::Hello.to_u8();
    attach_kind_filter(socket.as_raw_fd(), hello..=hello).map_err(io_err(
        "cannot attach the announcement filter to the group socket",
    ))?;
    Ok(socket)
}

/// Classic BPF on a UDP socket sees the datagram from its UDP header: the
/// rmcast kind byte (payload offset 3) is at offset 8 + 3.
const KIND_OFFSET: u32 = 8 + 3;

/// Keeps only datagrams whose rmcast kind byte lies in `kinds`.
fn attach_kind_filter(fd: libc::c_int, kinds: std::ops::RangeInclusive<u8>) -> io::Result<()> {
    const BPF_LD_B_ABS: u16 = (libc::BPF_LD | libc::BPF_B | libc::BPF_ABS) as u16;
    const BPF_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const BPF_JGT_K: u16 = (libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K) as u16;
    const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let ins = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let mut prog = [
        ins(BPF_LD_B_ABS, 0, 0, KIND_OFFSET), // A = kind (a short datagram: drop)
        ins(BPF_JGE_K, 0, 2, u32::from(*kinds.start())), // kind below: drop
        ins(BPF_JGT_K, 1, 0, u32::from(*kinds.end())), // kind above: drop
        ins(BPF_RET_K, 0, 0, u32::MAX),       // keep the whole datagram
        ins(BPF_RET_K, 0, 0, 0),              // drop
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: setsockopt on an open descriptor with a valid sock_fprog
    // whose program outlives the call (the kernel copies it).
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&raw const fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The receiver's unicast socket: bound to `local` (`iface:0` for the
/// object receiver; a stream receiver may be invited on a fixed port);
/// feedback goes out of it and the sender's unicast replies come back to it.
pub(crate) fn feedback_socket(
    local: SocketAddrV4,
    ttl: u32,
    buffer_bytes: usize,
) -> Result<UdpSocket, Error> {
    let socket = new_udp("feedback")?;
    socket.bind(&SockAddr::from(local)).map_err(io_err(format!(
        "cannot bind the feedback socket to {local}"
    )))?;
    multicast_out(&socket, *local.ip(), ttl)?;
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

/// A datagram a producer wrote into the slot [`Port::transmit`] lent it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outgoing {
    /// Where it goes.
    pub(crate) to: SocketAddr,
    /// Its length: the slot's first `len` bytes.
    pub(crate) len: usize,
    /// Whether it may share a GSO batch (data packets; control packets go alone).
    pub(crate) batchable: bool,
}

/// How a port moves datagrams through the kernel.
#[derive(Clone, Copy, Debug)]
struct Offload {
    /// Batches go out as one `sendmsg` with `UDP_SEGMENT`.
    gso: bool,
    /// Largest segment a GSO send may carry: a segment that does not fit in
    /// one frame of the path (an IP-fragmented datagram, e.g. the FSU
    /// paper's 8 KB packets on a 1500-byte MTU) makes the kernel refuse the
    /// whole batch with `EMSGSIZE`; such segments then go by `sendmmsg`,
    /// which fragments them. Learned from the first refusal.
    gso_max_segment: usize,
    /// The kernel hands over coalesced buffers with their segment size.
    gro: bool,
    /// `sendmmsg`/`recvmmsg` are there (always, since Linux 3.0).
    mmsg: bool,
}

/// System calls and datagrams, for the end-of-session debug line.
#[derive(Debug, Default)]
struct IoCounts {
    send_calls: u64,
    sent: u64,
    /// Sends the kernel refused for lack of room (`EAGAIN`, `ENOBUFS`) since
    /// the driver last asked ([`Port::take_send_failures`]).
    send_failures: u64,
    recv_calls: u64,
    received: u64,
}

/// Set once some port has logged that GSO does not work here.
static GSO_FALLBACK_LOGGED: AtomicBool = AtomicBool::new(false);

/// A non-blocking socket registered with a poll, with batched I/O: data
/// datagrams to one destination leave in GSO batches (or `sendmmsg`), and
/// `recvmmsg` reads several (GRO-coalesced) buffers per call. What could
/// not be sent yet stays in the port's batch until the socket is writable.
pub(crate) struct Port {
    pub(crate) socket: UdpSocket,
    token: Token,
    writable_armed: bool,
    tx: TxBatch,
    rx: RxRing,
    offload: Offload,
    counts: IoCounts,
    errors: ErrorLog,
    name: &'static str,
}

impl Port {
    /// Registers `socket` for readability under `token`, with `rx_slots`
    /// receive buffers of 64 KiB, and turns on the offloads the kernel has
    /// (unless `RMCAST_NO_GSO` / `RMCAST_NO_GRO` say no).
    pub(crate) fn new(
        poll: &Poll,
        socket: UdpSocket,
        token: Token,
        name: &'static str,
        rx_slots: usize,
    ) -> Result<Self, Error> {
        Self::with_gro(poll, socket, token, name, rx_slots, true)
    }

    /// [`Port::new`], with GRO only if `allow_gro` (a socket with a packet
    /// filter must see every datagram on its own: a coalesced buffer is
    /// filtered by its first segment's header).
    pub(crate) fn with_gro(
        poll: &Poll,
        mut socket: UdpSocket,
        token: Token,
        name: &'static str,
        rx_slots: usize,
        allow_gro: bool,
    ) -> Result<Self, Error> {
        poll.registry()
            .register(&mut socket, token, Interest::READABLE)
            .map_err(io_err(format!("cannot register the {name} socket")))?;
        let fd = socket.as_raw_fd();
        let gso = if udp::env_flag("RMCAST_NO_GSO") {
            tracing::debug!("{name}: GSO off (RMCAST_NO_GSO); sending with sendmmsg");
            false
        } else {
            udp::gso_supported(fd)
        };
        let gro = if !allow_gro {
            false
        } else if udp::env_flag("RMCAST_NO_GRO") {
            tracing::debug!("{name}: GRO off (RMCAST_NO_GRO)");
            false
        } else {
            udp::enable_gro(fd)
        };
        tracing::debug!("{name}: GSO {gso}, GRO {gro}");
        Ok(Self {
            socket,
            token,
            writable_armed: false,
            tx: TxBatch::new(GSO_MAX_SEGMENTS),
            rx: RxRing::new(rx_slots),
            offload: Offload {
                gso,
                gso_max_segment: usize::MAX,
                gro,
                mmsg: true,
            },
            counts: IoCounts::default(),
            errors: ErrorLog::default(),
            name,
        })
    }

    /// True while datagrams wait for the socket to take them.
    pub(crate) fn has_pending(&self) -> bool {
        !self.tx.is_empty()
    }

    /// Sends what is still waiting, then asks `next` for datagrams (each
    /// written into the slot it is lent) and sends them in batches, until
    /// `next` has none, the socket is full, or [`TX_BURST`] were produced.
    /// Returns true when it stopped at that bound (more may be ready).
    pub(crate) fn transmit(&mut self, mut next: impl FnMut(&mut [u8]) -> Option<Outgoing>) -> bool {
        let mut produced = 0;
        loop {
            if produced == TX_BURST {
                self.flush();
                return true;
            }
            let Some(slot) = self.tx.slot() else {
                // A datagram waits behind the batch: the batch goes first.
                if !self.send_batch() {
                    return false;
                }
                continue;
            };
            let Some(out) = next(slot) else {
                self.flush();
                return false;
            };
            produced += 1;
            match self.tx.push(out.to, out.len, out.batchable) {
                Pushed::Joined => {}
                Pushed::Full | Pushed::Behind => {
                    if !self.send_batch() {
                        return false;
                    }
                }
            }
        }
    }

    /// Sends everything queued; false when the socket is full.
    fn flush(&mut self) -> bool {
        while !self.tx.is_empty() {
            if !self.send_batch() {
                return false;
            }
        }
        true
    }

    /// Sends the current batch (not the datagram behind it); false when the
    /// socket is full. Errors other than a full socket are logged and the
    /// datagrams counted as lost: the protocol repairs losses anyway.
    fn send_batch(&mut self) -> bool {
        let fd = self.socket.as_raw_fd();
        loop {
            let Some((to, bytes, segment)) = self.tx.unsent() else {
                return true;
            };
            let count = self.tx.unsent_count();
            let to = SockAddr::from(to);
            let gso = self.offload.gso && segment <= self.offload.gso_max_segment;
            // A GSO send is all or nothing; the others fail on their first datagram.
            let all_or_nothing = count > 1 && gso;
            let result = if count == 1 {
                udp::send_one(fd, &to, bytes).map(|()| 1)
            } else if gso {
                match udp::send_gso(fd, &to, bytes, segment) {
                    Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                        tracing::debug!(
                            "{}: GSO refused {segment}-byte segments ({e}); sending them with sendmmsg",
                            self.name
                        );
                        self.offload.gso_max_segment = segment - 1;
                        continue;
                    }
                    Err(e) if udp::is_gso_refusal(&e) => {
                        self.offload.gso = false;
                        if !GSO_FALLBACK_LOGGED.swap(true, Ordering::Relaxed) {
                            tracing::warn!(
                                "{}: UDP GSO refused ({e}); sending with sendmmsg instead",
                                self.name
                            );
                        }
                        continue;
                    }
                    r => r.map(|()| count),
                }
            } else if self.offload.mmsg {
                match udp::send_mmsg(fd, &to, bytes, segment) {
                    Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                        self.offload.mmsg = false;
                        continue;
                    }
                    r => r,
                }
            } else {
                udp::send_one(fd, &to, &bytes[..segment]).map(|()| 1)
            };
            match result {
                Ok(sent) => {
                    self.counts.send_calls += 1;
                    self.counts.sent += sent as u64;
                    if self.tx.advance(sent) {
                        return true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Back pressure: the host cannot take datagrams as fast
                    // as the machine makes them (a rate-control error signal).
                    self.counts.send_failures += 1;
                    return false;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if e.raw_os_error() == Some(libc::ENOBUFS) {
                        self.counts.send_failures += 1;
                    }
                    self.errors.record(self.name, &e);
                    let lost = if all_or_nothing { count } else { 1 };
                    if self.tx.advance(lost) {
                        return true;
                    }
                }
            }
        }
    }

    /// Send calls refused for lack of room (`EAGAIN`, `ENOBUFS`) since the
    /// last call; the sender feeds them to its rate control.
    pub(crate) fn take_send_failures(&mut self) -> u64 {
        std::mem::take(&mut self.counts.send_failures)
    }

    /// Asks for a writability wake-up exactly while datagrams are pending.
    pub(crate) fn update_interest(&mut self, poll: &Poll) -> Result<(), Error> {
        let want = self.has_pending();
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

    /// Receives up to about [`RX_BURST`] datagrams, handing each to `f`
    /// (GRO buffers are split back into their datagrams), writable: a sealed
    /// datagram is opened where it lies, without a copy. Returns true when
    /// it stopped at the bound with more possibly waiting (the caller must
    /// not sleep before draining again).
    pub(crate) fn drain(&mut self, mut f: impl FnMut(SocketAddr, &mut [u8])) -> bool {
        let fd = self.socket.as_raw_fd();
        let mut handled = 0;
        while handled < RX_BURST {
            match udp::recv_mmsg(fd, &mut self.rx, self.offload.mmsg) {
                Ok(filled) => {
                    self.counts.recv_calls += 1;
                    for i in 0..filled {
                        let (bytes, meta) = self.rx.get_mut(i);
                        if meta.truncated {
                            let e = io::Error::other(format!(
                                "a received buffer of {} bytes was cut off; dropped",
                                meta.len
                            ));
                            self.errors.record(self.name, &e);
                            handled += 1;
                            continue;
                        }
                        let Some(from) = meta.from else {
                            handled += 1;
                            continue;
                        };
                        for range in gro_split(bytes.len(), meta.stride) {
                            f(from, &mut bytes[range]);
                            handled += 1;
                            self.counts.received += 1;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) && self.offload.mmsg => {
                    self.offload.mmsg = false;
                }
                Err(e) => {
                    self.errors.record(self.name, &e);
                    handled += 1;
                }
            }
        }
        true
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        let c = &self.counts;
        tracing::debug!(
            "{}: sent {} datagrams in {} calls (GSO {}), received {} datagrams in {} calls (GRO {})",
            self.name,
            c.sent,
            c.send_calls,
            self.offload.gso,
            c.received,
            c.recv_calls,
            self.offload.gro
        );
    }
}

/// Waits shorter than this go through the [`Alarm`]: epoll counts its
/// timeout in whole milliseconds (mio rounds up), which would cap a paced
/// sender at one pacer bucket per millisecond.
const PRECISE_BELOW: Duration = Duration::from_millis(10);

/// A one-shot `timerfd` registered with the poll, for wake-ups with
/// microsecond precision.
pub(crate) struct Alarm {
    fd: std::os::fd::OwnedFd,
    token: Token,
}

impl Alarm {
    /// A disarmed alarm that wakes `poll` under `token`.
    pub(crate) fn new(poll: &Poll, token: Token) -> Result<Self, Error> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain system call; the descriptor is owned below.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(Error::Io {
                context: "cannot create a timer".into(),
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        poll.registry()
            .register(
                &mut mio::unix::SourceFd(&fd.as_raw_fd()),
                token,
                Interest::READABLE,
            )
            .map_err(io_err("cannot register the timer"))?;
        Ok(Self { fd, token })
    }

    /// Fires once, `after` from now (replacing any earlier setting).
    fn set(&self, after: Duration) {
        let after = after.max(Duration::from_nanos(1));
        // SAFETY: an all-zero itimerspec is a valid (disarming) one.
        let mut spec: libc::itimerspec = unsafe { std::mem::zeroed() };
        spec.it_value.tv_sec = after.as_secs() as libc::time_t;
        spec.it_value.tv_nsec = after.subsec_nanos() as _;
        // SAFETY: a valid timerfd and a valid itimerspec; no old value wanted.
        unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                0,
                &raw const spec,
                std::ptr::null_mut(),
            )
        };
    }

    /// Consumes an expiry, so the descriptor is quiet until the next one.
    fn clear(&self) {
        let mut ticks = 0u64;
        // SAFETY: reads at most 8 bytes into `ticks`; EAGAIN when not expired.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), (&raw mut ticks).cast(), 8) };
    }
}

/// Waits for socket readiness for at most `wait`; interruptions count as
/// wake-ups. With an alarm, short waits end on time rather than on the
/// next millisecond.
pub(crate) fn wait(
    poll: &mut Poll,
    events: &mut mio::Events,
    alarm: Option<&Alarm>,
    wait: Duration,
) -> Result<(), Error> {
    let mut timeout = wait;
    if let Some(a) = alarm
        && !wait.is_zero()
        && wait < PRECISE_BELOW
    {
        a.set(wait);
        // The alarm ends the wait; the timeout is only a backstop.
        timeout = wait + Duration::from_millis(1);
    }
    let result = match poll.poll(events, Some(timeout)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
        Err(e) => Err(Error::Io {
            context: "cannot wait for socket events".into(),
            source: e,
        }),
    };
    if let Some(a) = alarm
        && events.iter().any(|e| e.token() == a.token)
    {
        a.clear();
    }
    result
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
