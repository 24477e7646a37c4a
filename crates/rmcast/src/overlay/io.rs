//! Blocking socket helpers with bounded waits, and the segment buffer pool.
//!
//! Every socket gets a short read and write timeout ([`TICK`]): a blocked
//! call wakes up at least that often to look at the abort flag and at how
//! long the peer has been stalled, so no thread ever waits forever.

use super::frame::FrameReader;
use rmcast_proto::security::Sealer;
use rmcast_wire::overlay::{DecodeError, Msg};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Longest a blocked socket call or queue wait sleeps before looking at
/// the abort flag again.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// The process clock as the overlay machines see it: time since the
/// session began (the machines never read a clock themselves).
pub(crate) struct Clock(pub(crate) Instant);

impl Clock {
    /// Starts counting now.
    pub(crate) fn start() -> Self {
        Self(Instant::now())
    }
    /// The machines' `now`.
    pub(crate) fn now(&self) -> rmcast_proto::Instant {
        rmcast_proto::Instant::from_nanos(self.0.elapsed().as_nanos() as u64)
    }
    /// The process instant of a machine deadline.
    pub(crate) fn at(&self, t: rmcast_proto::Instant) -> Instant {
        self.0 + Duration::from_nanos(t.as_nanos())
    }
    /// How long to sleep until deadline `t`, at most [`TICK`].
    pub(crate) fn wait(&self, t: Option<rmcast_proto::Instant>) -> Duration {
        t.map_or(TICK, |t| {
            self.at(t).saturating_duration_since(Instant::now())
        })
        .min(TICK)
    }
}

/// Why moving bytes over a data connection stopped.
#[derive(Debug)]
pub(crate) enum XferError {
    /// The local abort flag was raised.
    Aborted,
    /// The peer moved no byte for this long.
    Stalled(Duration),
    /// The connection closed early.
    Closed,
    /// A system call failed.
    Io(io::Error),
    /// The peer's bytes failed authentication, or its key exchange did:
    /// the text says how.
    Auth(String),
}

impl std::fmt::Display for XferError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Aborted => f.write_str("aborted"),
            Self::Stalled(d) => write!(f, "no progress for {:.1} s", d.as_secs_f64()),
            Self::Closed => f.write_str("connection closed mid-transfer"),
            Self::Io(e) => write!(f, "{e}"),
            Self::Auth(why) => f.write_str(why),
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Gives a stream the [`TICK`] timeouts and no Nagle delay.
pub(crate) fn tune(s: &TcpStream) -> io::Result<()> {
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(TICK))?;
    s.set_write_timeout(Some(TICK))?;
    Ok(())
}

/// Writes all of `bytes`; fails when `abort` is raised or the peer takes
/// no byte for `stall` (an inactivity timeout, not a total one).
pub(crate) fn write_all(
    s: &mut TcpStream,
    mut bytes: &[u8],
    abort: &AtomicBool,
    stall: Duration,
) -> Result<(), XferError> {
    let mut last = Instant::now();
    while !bytes.is_empty() {
        if abort.load(Ordering::Relaxed) {
            return Err(XferError::Aborted);
        }
        match s.write(bytes) {
            Ok(0) => return Err(XferError::Closed),
            Ok(n) => {
                bytes = &bytes[n..];
                last = Instant::now();
            }
            Err(e) if is_timeout(&e) => {
                if last.elapsed() >= stall {
                    return Err(XferError::Stalled(last.elapsed()));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(XferError::Io(e)),
        }
    }
    Ok(())
}

/// Fills `buf`; fails when `abort` is raised, the connection closes, or
/// no byte arrives for `stall` (`None`: wait as long as the abort flag allows).
pub(crate) fn read_exact(
    s: &mut TcpStream,
    buf: &mut [u8],
    abort: &AtomicBool,
    stall: Option<Duration>,
) -> Result<(), XferError> {
    let mut have = 0;
    let mut last = Instant::now();
    while have < buf.len() {
        if abort.load(Ordering::Relaxed) {
            return Err(XferError::Aborted);
        }
        match s.read(&mut buf[have..]) {
            Ok(0) => return Err(XferError::Closed),
            Ok(n) => {
                have += n;
                last = Instant::now();
            }
            Err(e) if is_timeout(&e) => {
                if stall.is_some_and(|d| last.elapsed() >= d) {
                    return Err(XferError::Stalled(last.elapsed()));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(XferError::Io(e)),
        }
    }
    Ok(())
}

/// Reads one control frame within `limit` with `reader` (plain or sealed).
pub(crate) fn read_msg(
    s: &mut TcpStream,
    reader: &mut FrameReader,
    abort: &AtomicBool,
    limit: Duration,
) -> Result<Msg, XferError> {
    let start = Instant::now();
    loop {
        if abort.load(Ordering::Relaxed) {
            return Err(XferError::Aborted);
        }
        match reader.read(s) {
            Ok(Some(m)) => return Ok(m),
            Ok(None) if start.elapsed() >= limit => {
                return Err(XferError::Stalled(start.elapsed()));
            }
            Ok(None) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(XferError::Closed),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                return Err(XferError::Auth(e.to_string()));
            }
            Err(e) => return Err(XferError::Io(e)),
        }
    }
}

/// Connects to `addr` within `limit`, then tunes the stream.
pub(crate) fn connect(addr: SocketAddr, limit: Duration) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, limit)?;
    tune(&s)?;
    Ok(s)
}

/// Sleeps `d` in [`TICK`] steps; false when `abort` was raised meanwhile.
pub(crate) fn sleep_unless(abort: &AtomicBool, d: Duration) -> bool {
    let end = Instant::now() + d;
    loop {
        if abort.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= end {
            return true;
        }
        std::thread::sleep((end - now).min(TICK));
    }
}

/// How long [`accept_unless`] waits for a connection before it looks at
/// the abort flag again, unless an [`AcceptStop`] wakes it first.
const ACCEPT_TICK: Duration = Duration::from_millis(20);

/// Accepts the next connection on the non-blocking `listener` as soon as
/// it arrives (the thread sleeps in `poll(2)`, not in steps), or `None`
/// once `abort` is raised: within [`ACCEPT_TICK`], or at once when it is
/// raised by [`AcceptStop::stop`].
pub(crate) fn accept_unless(
    listener: &TcpListener,
    abort: &AtomicBool,
) -> Option<io::Result<(TcpStream, SocketAddr)>> {
    let mut fd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    while !abort.load(Ordering::Acquire) {
        match listener.accept() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            // A listener stopped by `AcceptStop` fails its accepts (EINVAL).
            Err(_) if abort.load(Ordering::Acquire) => return None,
            r => return Some(r),
        }
        // SAFETY: `fd` is one valid pollfd that outlives the call, and the
        // listener's descriptor stays open while it is borrowed.
        let r = unsafe { libc::poll(&mut fd, 1, ACCEPT_TICK.as_millis() as libc::c_int) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Some(Err(e));
            }
        }
    }
    None
}

/// Wakes a thread in [`accept_unless`] at once when its session ends, so
/// that the process need not wait out the [`ACCEPT_TICK`] before it exits
/// (every send and receive that listens paid up to 20 ms for it).
/// `shutdown(2)` of a listening socket stops it listening and wakes its
/// `poll(2)`; the stop holds a duplicate of the descriptor, so it never
/// touches a socket that reused the number (if `dup(2)` failed, the
/// thread wakes at its next tick, as before).
pub(crate) struct AcceptStop(Option<TcpListener>);

impl AcceptStop {
    pub(crate) fn new(listener: &TcpListener) -> Self {
        Self(listener.try_clone().ok())
    }

    /// Raises `abort`, the accepting thread's flag, and wakes the thread:
    /// it returns `None`, and no connection is accepted any more.
    pub(crate) fn stop(&self, abort: &AtomicBool) {
        abort.store(true, Ordering::Release);
        if let Some(l) = &self.0 {
            // SAFETY: the descriptor is our own duplicate, open while `self` is.
            unsafe { libc::shutdown(l.as_raw_fd(), libc::SHUT_RD) };
        }
    }
}

/// How [`control_reader`] starts the reason when the peer sent garbage
/// (or, keyed, a frame that failed authentication).
pub(crate) const MALFORMED: &str = "malformed control frame";

/// The reason [`control_reader`] gives when a keyless side's peer seals
/// its frames (it was told so: [`super::secure::NO_KEY_HERE`]).
pub(crate) const PEER_SEALS: &str =
    "seals its frames (it has a group key) and this sender has none (--insecure)";

fn is_sealed_peer(e: &io::Error) -> bool {
    e.get_ref()
        .and_then(|i| i.downcast_ref::<DecodeError>())
        .is_some_and(|d| *d == DecodeError::Sealed)
}

/// Reads control frames from `s` with `reader` (plain or sealed) until it
/// closes, fails, or `stop` is raised, handing each (or the reason it
/// ended) to `deliver`. Returns when `deliver` returns false (the consumer
/// is gone). A plain reader whose peer seals tells the peer so before it
/// ends.
pub(crate) fn control_reader(
    mut s: TcpStream,
    mut reader: FrameReader,
    stop: &AtomicBool,
    mut deliver: impl FnMut(Result<Msg, String>) -> bool,
) {
    loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        match reader.read(&mut s) {
            Ok(Some(m)) => {
                if !deliver(Ok(m)) {
                    return;
                }
            }
            Ok(None) => {}
            Err(e) => {
                let why = if e.kind() == io::ErrorKind::UnexpectedEof {
                    "control connection closed".to_owned()
                } else if is_sealed_peer(&e) {
                    super::secure::refuse(&mut s, super::secure::NO_KEY_HERE);
                    PEER_SEALS.to_owned()
                } else if e.kind() == io::ErrorKind::InvalidData {
                    format!("{MALFORMED}: {e}")
                } else {
                    format!("control connection failed: {e}")
                };
                deliver(Err(why));
                return;
            }
        }
    }
}

/// Writes one control message, sealed when the connection has a
/// `sealer`, failing after `limit` without progress.
pub(crate) fn send_msg(
    s: &mut TcpStream,
    sealer: Option<&mut Sealer>,
    m: &Msg,
    limit: Duration,
) -> Result<(), XferError> {
    let never = AtomicBool::new(false);
    let frame = match sealer {
        None => m.to_frame(),
        Some(sealer) => sealer
            .seal_msg(m)
            .map_err(|e| XferError::Io(io::Error::other(e)))?,
    };
    write_all(s, &frame, &never, limit)
}

/// A segment sitting in a pool slot, as passed between threads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seg {
    /// Which pool (incoming stream) holds it.
    pub(crate) pool: u32,
    /// Pool slot holding the bytes.
    pub(crate) slot: u32,
    /// Segment index in the object.
    pub(crate) index: u64,
    /// Where in the slot the segment starts (after a sealed frame's header).
    pub(crate) at: u32,
    /// Bytes in the segment.
    pub(crate) len: u32,
}

impl Seg {
    /// Where the segment's bytes lie in its slot.
    pub(crate) fn range(&self) -> std::ops::Range<usize> {
        self.at as usize..(self.at + self.len) as usize
    }
}

/// A fixed set of segment buffers shared by a node's threads. A slot is
/// filled by one reader, then read by the disk writer and the children it
/// is forwarded to; the last of them to release it makes it free again.
/// No allocation happens per segment; the pool bounds a node's memory.
pub(crate) struct Pool {
    slots: Vec<RwLock<Box<[u8]>>>,
    refs: Vec<AtomicUsize>,
    free: Mutex<Vec<u32>>,
    freed: Condvar,
}

impl Pool {
    /// A pool of `slots` buffers of `segment_size` bytes each.
    pub(crate) fn new(slots: usize, segment_size: usize) -> Self {
        Self {
            slots: (0..slots)
                .map(|_| RwLock::new(vec![0u8; segment_size].into_boxed_slice()))
                .collect(),
            refs: (0..slots).map(|_| AtomicUsize::new(0)).collect(),
            free: Mutex::new((0..slots as u32).rev().collect()),
            freed: Condvar::new(),
        }
    }

    /// Takes a free slot, waiting while none is; `None` once `abort` is raised.
    pub(crate) fn acquire(&self, abort: &AtomicBool) -> Option<u32> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if abort.load(Ordering::Relaxed) {
                return None;
            }
            if let Some(slot) = free.pop() {
                return Some(slot);
            }
            free = self
                .freed
                .wait_timeout(free, TICK)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Sets how many holders must release `slot` before it is free.
    pub(crate) fn share(&self, slot: u32, holders: usize) {
        debug_assert!(holders > 0);
        self.refs[slot as usize].store(holders, Ordering::Release);
    }

    /// One holder is done with `slot`.
    pub(crate) fn release(&self, slot: u32) {
        let before = self.refs[slot as usize].fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "slot {slot} released too often");
        if before == 1 {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            free.push(slot);
            self.freed.notify_one();
        }
    }

    /// The buffer of `slot`, for filling (only its single owner may).
    pub(crate) fn fill(&self, slot: u32) -> std::sync::RwLockWriteGuard<'_, Box<[u8]>> {
        self.slots[slot as usize]
            .write()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The buffer of `slot`, for reading.
    pub(crate) fn view(&self, slot: u32) -> std::sync::RwLockReadGuard<'_, Box<[u8]>> {
        self.slots[slot as usize]
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Slots currently free (for tests).
    #[cfg(test)]
    pub(crate) fn free_slots(&self) -> usize {
        self.free.lock().map(|f| f.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_slot_is_free_again_after_its_last_holder_releases_it() {
        let pool = Pool::new(2, 16);
        let abort = AtomicBool::new(false);
        let a = pool.acquire(&abort).unwrap();
        pool.fill(a)[0] = 7;
        pool.share(a, 3);
        assert_eq!(pool.free_slots(), 1);
        pool.release(a);
        pool.release(a);
        assert_eq!(pool.free_slots(), 1);
        assert_eq!(pool.view(a)[0], 7);
        pool.release(a);
        assert_eq!(pool.free_slots(), 2);
    }

    #[test]
    fn a_stopped_listener_wakes_its_acceptor_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = AcceptStop::new(&listener);
        let ready = || {
            let mut fd = libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd; the listener is open.
            unsafe { libc::poll(&mut fd, 1, 0) }
        };
        // A listener nobody connects to keeps poll(2) asleep ...
        assert_eq!(ready(), 0);
        let abort = AtomicBool::new(false);
        std::thread::scope(|s| {
            let t = s.spawn(|| accept_unless(&listener, &abort).is_none());
            std::thread::sleep(Duration::from_millis(30));
            stop.stop(&abort);
            assert!(t.join().unwrap(), "an aborted acceptor accepts nothing");
        });
        // ... and a stopped one wakes it at once, not at its next tick.
        assert_eq!(ready(), 1);
        assert!(TcpStream::connect(listener.local_addr().unwrap()).is_err());
    }

    #[test]
    fn exhausted_pool_gives_up_when_aborted() {
        let pool = Pool::new(1, 4);
        let abort = AtomicBool::new(false);
        let _held = pool.acquire(&abort).unwrap();
        abort.store(true, Ordering::Relaxed);
        assert!(pool.acquire(&abort).is_none());
    }
}
