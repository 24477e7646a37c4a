//! `--laggard tcp`: a receiver far behind the multicast group catches up
//! over TCP while the group goes on at its own pace.
//!
//! The sender's machine decides who moves ([`rmcast_proto::Laggard::Tcp`])
//! and, once the group's data is out, sends it a `Move` naming the port of
//! the [`Server`] here. The
//! receiver's machine stops taking the session's packets
//! ([`rmcast_proto::ReceiverEvent::Moved`]) and its driver runs [`fetch`]:
//!
//! 1. It connects to the sender's address at that port and, under a group
//!    key, runs the overlay's key exchange for the multicast session's id.
//! 2. It sends `CatchUp { rank, from }`: the bytes it holds in order (and
//!    has hashed already).
//! 3. While the multicast half still sends data, the sender sends a
//!    `Heartbeat` every second: a catch-up must not take the uplink the
//!    group's data needs (the group goes on at full rate; the laggard is
//!    slow anyway). Once every other receiver acknowledged every byte, it
//!    sends `Start`, then the object from `from` to its end: as they are,
//!    or sealed in data frames of [`SEGMENT`] bytes each (the last
//!    shorter).
//! 4. The sender sends `Hash` (with the signature of a signed object) once
//!    it has it.
//! 5. The receiver stores and verifies the object as the multicast path
//!    does, and ends with `Complete`. The sender hands the verdict to its
//!    machine ([`rmcast_proto::Sender::catch_up_done`]).
//!
//! Every wait is bounded (the sender's `peer_timeout`, the receiver's
//! `sender_timeout`): a moved receiver that never connects, or a catch-up
//! that stalls, fails and is named. The frames are the overlay's
//! (`docs/wire-format.md`).

use crate::overlay::frame::FrameReader;
use crate::overlay::io::{self, XferError};
use crate::overlay::secure::{self, SegmentOut};
use rmcast_proto::security::{FRAME_OVERHEAD, FrameKind, GroupKey, Opener, Sealer};
use rmcast_wire::overlay::Msg;
use rmcast_wire::{HASH_LEN, SIGNATURE_LEN, Status};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// Bytes per sealed data frame of a catch-up (both ends must agree).
pub const SEGMENT: usize = 64 * 1024;
/// How often waits look at the abort flag and the hash.
const LOOK_EVERY: Duration = Duration::from_millis(5);
/// Catch-up connections served at once beyond one per moved receiver the
/// server still expects: more are closed at once, so a flood of idle
/// connections cannot pile up threads, nor crowd out a moved receiver
/// (however many were moved, each has its place).
const CONNECTIONS_MAX: usize = 64;
/// How often a catch-up that waits for the multicast data to end hears
/// that the sender is alive (the receiver's limit is seconds).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// The object's hash and signature, as the catch-ups send them.
pub(crate) type Hashed = ([u8; HASH_LEN], Option<[u8; SIGNATURE_LEN]>);

/// A catch-up's verdict, by rank, for the sender's machine.
pub(crate) type Verdict = (u16, Result<(), String>);

/// A moved receiver the server expects.
struct Expected {
    ip: IpAddr,
    moved_at: Instant,
    claimed: bool,
}

/// What the sender's loop and the catch-up threads share.
pub(crate) struct Server {
    listener: TcpListener,
    /// Wakes the accepting thread when the server stops.
    accept_stop: io::AcceptStop,
    /// The multicast session's id (the key exchange is bound to it), set
    /// before any receiver is moved.
    session: OnceLock<u64>,
    expected: Mutex<HashMap<u16, Expected>>,
    hash: OnceLock<Hashed>,
    /// The multicast half sent its last data: catch-ups may take the uplink.
    released: AtomicBool,
    released_at: OnceLock<Instant>,
    abort: AtomicBool,
    /// Connections being served.
    serving: std::sync::atomic::AtomicUsize,
    /// Verdicts, by rank, for the sender's machine.
    done_tx: Mutex<mpsc::Sender<Verdict>>,
}

impl Server {
    /// Binds the catch-up port on `ip` (any free port); the verdicts come
    /// out of the returned receiver.
    pub(crate) fn bind(ip: IpAddr) -> Result<(Self, mpsc::Receiver<Verdict>), crate::Error> {
        let listener = TcpListener::bind((ip, 0))
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|source| crate::Error::Io {
                context: format!("cannot listen for TCP catch-ups (--laggard tcp) on {ip}"),
                source,
            })?;
        let (tx, rx) = mpsc::channel();
        Ok((
            Self {
                accept_stop: io::AcceptStop::new(&listener),
                listener,
                session: OnceLock::new(),
                expected: Mutex::new(HashMap::new()),
                hash: OnceLock::new(),
                released: AtomicBool::new(false),
                released_at: OnceLock::new(),
                abort: AtomicBool::new(false),
                serving: std::sync::atomic::AtomicUsize::new(0),
                done_tx: Mutex::new(tx),
            },
            rx,
        ))
    }

    /// The port receivers are moved to.
    pub(crate) fn port(&self) -> u16 {
        self.listener.local_addr().map_or(0, |a| a.port())
    }

    /// The multicast session's id, once the session has one.
    pub(crate) fn set_session(&self, session: u64) {
        let _ = self.session.set(session);
    }

    /// The machine moved the receiver of `rank` at `addr`: expect it.
    pub(crate) fn expect(&self, rank: u16, addr: SocketAddr) {
        let e = Expected {
            ip: addr.ip(),
            moved_at: Instant::now(),
            claimed: false,
        };
        self.lock().insert(rank, e);
    }

    /// The receiver of `rank` is done another way (it answered the Close,
    /// or failed): no longer expected.
    pub(crate) fn forget(&self, rank: u16) {
        self.lock().remove(&rank);
    }

    /// The object's hash, once known (the catch-ups end with it).
    pub(crate) fn set_hash(&self, h: Hashed) {
        let _ = self.hash.set(h);
    }

    /// Every receiver of the multicast half acknowledged every byte (or
    /// none is left): the catch-ups may send (the machine sends its
    /// `Move`s now).
    pub(crate) fn release(&self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            let _ = self.released_at.set(Instant::now());
        }
    }

    /// Moved receivers that have not connected within `limit` of being
    /// told (at the release, or their move if later): their verdicts (and
    /// they are no longer expected).
    pub(crate) fn overdue(&self, limit: Duration) -> Vec<Verdict> {
        let Some(&released) = self.released_at.get() else {
            return Vec::new(); // nobody was told yet
        };
        let mut map = self.lock();
        let late: Vec<u16> = (map.iter())
            .filter(|(_, e)| !e.claimed && e.moved_at.max(released).elapsed() >= limit)
            .map(|(r, _)| *r)
            .collect();
        late.into_iter()
            .map(|r| {
                map.remove(&r);
                let why = format!(
                    "it did not connect for its catch-up within {:.1} s (did it hear the Move? \
                     can it reach the sender over TCP?)",
                    limit.as_secs_f64()
                );
                (r, Err(why))
            })
            .collect()
    }

    /// Stops the server: its threads end within [`LOOK_EVERY`] or their
    /// current write's stall limit.
    pub(crate) fn stop(&self) {
        self.accept_stop.stop(&self.abort);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u16, Expected>> {
        self.expected.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claims `rank` for a connection from `ip`.
    fn claim(&self, rank: u16, ip: IpAddr) -> Result<(), String> {
        match self.lock().get_mut(&rank) {
            Some(e) if e.claimed => Err(format!("rank {rank} is catching up already")),
            Some(e) if e.ip != ip => Err(format!("rank {rank} was moved at {}, not {ip}", e.ip)),
            Some(e) => {
                e.claimed = true;
                Ok(())
            }
            None => Err(format!("rank {rank} was not moved to a TCP catch-up")),
        }
    }

    /// Accepts catch-ups until stopped; each runs on a thread of `scope`
    /// (at most [`CONNECTIONS_MAX`] more at once than receivers expected).
    pub(crate) fn run<'s, 'e: 's>(
        &'e self,
        scope: &'s std::thread::Scope<'s, 'e>,
        data: &'e [u8],
        key: Option<&'e Arc<GroupKey>>,
        limit: Duration,
        wake: impl Fn() + Send + Sync + Copy + 'e,
    ) {
        while let Some(r) = io::accept_unless(&self.listener, &self.abort) {
            let Ok((s, peer)) = r else {
                std::thread::sleep(LOOK_EVERY);
                continue;
            };
            let Some(&session) = self.session.get() else {
                continue; // nobody was moved yet: a stranger
            };
            let places = CONNECTIONS_MAX + self.lock().len();
            if self.serving.fetch_add(1, Ordering::AcqRel) >= places {
                self.serving.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
            scope.spawn(move || {
                self.serve_and_report(s, peer, data, session, key, limit, wake);
                self.serving.fetch_sub(1, Ordering::AcqRel);
            });
        }
    }

    /// Serves one connection and hands a claimed rank's verdict on.
    #[allow(clippy::too_many_arguments)]
    fn serve_and_report(
        &self,
        s: TcpStream,
        peer: SocketAddr,
        data: &[u8],
        session: u64,
        key: Option<&Arc<GroupKey>>,
        limit: Duration,
        wake: impl Fn(),
    ) {
        let (rank, verdict) = self.serve(s, peer, data, session, key, limit);
        match rank {
            Some(rank) => {
                self.forget(rank);
                let tx = self.done_tx.lock().unwrap_or_else(|p| p.into_inner());
                let _ = tx.send((rank, verdict));
                wake();
            }
            None => {
                if let Err(why) = verdict {
                    tracing::warn!("catch-up connection from {peer} refused: {why}");
                }
            }
        }
    }

    /// Serves one catch-up connection: the rank it claimed (once claimed)
    /// and how it ended.
    fn serve(
        &self,
        mut s: TcpStream,
        peer: SocketAddr,
        data: &[u8],
        session: u64,
        key: Option<&Arc<GroupKey>>,
        limit: Duration,
    ) -> (Option<u16>, Result<(), String>) {
        let abort = &self.abort;
        if let Err(e) = io::tune(&s) {
            return (None, Err(e.to_string()));
        }
        let (mut reader, sealer) = match key {
            None => (FrameReader::default(), None),
            Some(key) => match secure::respond(&mut s, "sender", key, session, abort, limit) {
                Ok(ch) => (FrameReader::sealed(ch.opener), Some(ch.sealer)),
                Err(e) => return (None, Err(e.to_string())),
            },
        };
        let (rank, from) = match io::read_msg(&mut s, &mut reader, abort, limit) {
            Ok(Msg::CatchUp { rank, from }) => (rank, from),
            Ok(other) => return (None, Err(format!("sent {:?} first", other.kind()))),
            Err(e) => return (None, Err(e.to_string())),
        };
        if let Err(why) = self.claim(rank, peer.ip()) {
            // Closed without a word: a stranger learns nothing.
            return (None, Err(why));
        }
        let verdict = self
            .send(&mut s, &mut reader, sealer, data, from, limit)
            .map_err(|e| e.to_string());
        match &verdict {
            Ok(()) => tracing::info!(
                "rank {rank} at {peer} caught up over TCP ({} bytes) and verified",
                data.len() as u64 - from.min(data.len() as u64)
            ),
            Err(why) => tracing::warn!("rank {rank} at {peer}: TCP catch-up failed: {why}"),
        }
        (Some(rank), verdict)
    }

    /// Sends `data[from..]`, the hash, and reads the receiver's verdict.
    fn send(
        &self,
        s: &mut TcpStream,
        reader: &mut FrameReader,
        sealer: Option<Sealer>,
        data: &[u8],
        from: u64,
        limit: Duration,
    ) -> Result<(), XferError> {
        let abort = &self.abort;
        let Some(rest) = usize::try_from(from).ok().and_then(|f| data.get(f..)) else {
            return Err(XferError::Auth(format!(
                "asked from byte {from} of a {}-byte object",
                data.len()
            )));
        };
        let mut sealer = sealer;
        let mut beat = Instant::now();
        while !self.released.load(Ordering::Acquire) {
            if beat.elapsed() >= HEARTBEAT_EVERY {
                io::send_msg(s, sealer.as_mut(), &Msg::Heartbeat, limit)?;
                beat = Instant::now();
            }
            if !io::sleep_unless(abort, LOOK_EVERY) {
                return Err(XferError::Aborted);
            }
        }
        io::send_msg(s, sealer.as_mut(), &Msg::Start, limit)?;
        let mut out = SegmentOut::new(sealer, SEGMENT, 4 * SEGMENT);
        if out.sealed() {
            for seg in rest.chunks(SEGMENT) {
                out.segment(s, seg, abort, limit)?;
            }
            out.flush(s, abort, limit)?;
        } else {
            io::write_all(s, rest, abort, limit)?;
        }
        let (hash, signature) = loop {
            if let Some(h) = self.hash.get() {
                break *h;
            }
            if !io::sleep_unless(abort, LOOK_EVERY) {
                return Err(XferError::Aborted);
            }
        };
        let mut sealer = out.into_sealer();
        io::send_msg(s, sealer.as_mut(), &Msg::Hash { hash, signature }, limit)?;
        match io::read_msg(s, reader, abort, limit)? {
            Msg::Complete {
                status: Status::Ok, ..
            } => Ok(()),
            Msg::Complete { status, text } => Err(XferError::Auth(format!(
                "could not verify the object ({status:?}): {text}"
            ))),
            other => Err(XferError::Auth(format!(
                "answered with {:?} instead of Complete",
                other.kind()
            ))),
        }
    }
}

/// A receiver's catch-up after its bytes are in: the connection, to send
/// the verdict on, and what the sender says the object hashes to.
pub(crate) struct Fetched {
    stream: TcpStream,
    sealer: Option<Sealer>,
    /// The object's hash.
    pub(crate) hash: [u8; HASH_LEN],
    /// The sender's signature of it, if signed.
    pub(crate) signature: Option<[u8; SIGNATURE_LEN]>,
}

impl Fetched {
    /// Tells the sender the verdict (best effort: the connection closes
    /// after it either way).
    pub(crate) fn confirm(mut self, status: Status, text: &str, limit: Duration) {
        let m = Msg::Complete {
            status,
            text: text.to_owned(),
        };
        if let Err(e) = io::send_msg(&mut self.stream, self.sealer.as_mut(), &m, limit) {
            tracing::warn!("cannot tell the sender the catch-up's verdict: {e}");
        }
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        // Wait for the sender to close (or a moment), so that the verdict
        // is read before the connection is reset.
        let mut byte = [0u8; 1];
        let never = AtomicBool::new(false);
        let _ = io::read_exact(&mut self.stream, &mut byte, &never, Some(limit.min(LINGER)));
    }
}

/// How long a receiver waits for the sender to read its verdict.
const LINGER: Duration = Duration::from_secs(1);

/// What a receiver's catch-up fetches.
pub(crate) struct Request {
    /// The sender's catch-up address (the `Move`'s).
    pub(crate) to: SocketAddr,
    /// The multicast session's id (the key exchange is bound to it).
    pub(crate) session: u64,
    /// This receiver's rank.
    pub(crate) rank: u16,
    /// Bytes held in order from the start.
    pub(crate) from: u64,
    /// The object's size.
    pub(crate) size: u64,
    /// The group key, when sealed.
    pub(crate) key: Option<Arc<GroupKey>>,
    /// The longest wait for the sender.
    pub(crate) limit: Duration,
}

/// Connects, fetches the object from `req.from` to its end (each piece
/// handed to `store` at its offset) and the sender's hash.
pub(crate) fn fetch(
    req: &Request,
    abort: &AtomicBool,
    mut store: impl FnMut(u64, &[u8]) -> std::io::Result<()>,
) -> Result<Fetched, String> {
    let limit = req.limit;
    let mut s = io::connect(req.to, limit).map_err(|e| {
        format!(
            "cannot connect to the sender's catch-up port {}: {e}",
            req.to
        )
    })?;
    let (opener, mut sealer) = match &req.key {
        None => (None, None),
        Some(key) => {
            let ch = secure::initiate(&mut s, key, Some(req.session), abort, limit)
                .map_err(|e| format!("the sender's catch-up port {}: {e}", req.to))?;
            (Some(ch.opener), Some(ch.sealer))
        }
    };
    let hello = Msg::CatchUp {
        rank: req.rank,
        from: req.from,
    };
    io::send_msg(&mut s, sealer.as_mut(), &hello, limit).map_err(|e| e.to_string())?;
    // `Heartbeat`s while the group's data goes out, then `Start`.
    let mut reader = opener.map_or_else(FrameReader::default, FrameReader::sealed);
    loop {
        match io::read_msg(&mut s, &mut reader, abort, limit) {
            Ok(Msg::Heartbeat) => {}
            Ok(Msg::Start) => break,
            Ok(Msg::Abort { text }) => {
                return Err(format!("the sender refused the catch-up: {text}"));
            }
            Ok(other) => {
                return Err(format!(
                    "the sender sent {:?} instead of Start",
                    other.kind()
                ));
            }
            Err(XferError::Closed) => {
                return Err("the sender closed the catch-up (it refused it, or ended)".into());
            }
            Err(e) => return Err(format!("waiting for the catch-up to start: {e}")),
        }
    }
    let opener = reader.into_opener();
    let opener = read_rest(&mut s, req, opener, abort, &mut store).map_err(|e| match e {
        XferError::Closed => "the sender closed the catch-up (it refused it, or ended)".into(),
        e => e.to_string(),
    })?;
    let mut reader = opener.map_or_else(FrameReader::default, FrameReader::sealed);
    match io::read_msg(&mut s, &mut reader, abort, limit) {
        Ok(Msg::Hash { hash, signature }) => Ok(Fetched {
            stream: s,
            sealer,
            hash,
            signature,
        }),
        Ok(Msg::Abort { text }) => Err(format!("the sender refused the catch-up: {text}")),
        Ok(other) => Err(format!(
            "the sender sent {:?} instead of the hash",
            other.kind()
        )),
        Err(e) => Err(format!("waiting for the object's hash: {e}")),
    }
}

/// Reads the object's bytes from `req.from` on; the opener back.
fn read_rest(
    s: &mut TcpStream,
    req: &Request,
    mut opener: Option<Opener>,
    abort: &AtomicBool,
    store: &mut impl FnMut(u64, &[u8]) -> std::io::Result<()>,
) -> Result<Option<Opener>, XferError> {
    let mut buf = vec![0u8; SEGMENT + FRAME_OVERHEAD];
    let mut at = req.from;
    while at < req.size {
        let len = usize::try_from(req.size - at).map_or(SEGMENT, |n| n.min(SEGMENT));
        let bytes: &[u8] = match opener.as_mut() {
            None => {
                io::read_exact(s, &mut buf[..len], abort, Some(req.limit))?;
                &buf[..len]
            }
            Some(op) => {
                let frame = &mut buf[..len + FRAME_OVERHEAD];
                io::read_exact(s, frame, abort, Some(req.limit))?;
                match op.open_in_place(frame) {
                    Ok((FrameKind::Data, plain)) => plain,
                    Ok(_) => {
                        return Err(XferError::Auth(format!(
                            "the sender sent a control frame where byte {at} belongs"
                        )));
                    }
                    Err(e) => {
                        return Err(XferError::Auth(format!(
                            "the bytes from {at} on failed authentication: {e}"
                        )));
                    }
                }
            }
        };
        store(at, bytes).map_err(XferError::Io)?;
        at += bytes.len() as u64;
    }
    Ok(opener)
}

#[cfg(test)]
mod tests {
    //! The catch-up's two ends over loopback TCP, without a multicast
    //! session around them.

    use super::*;
    use std::net::Ipv4Addr;

    const LIMIT: Duration = Duration::from_secs(5);

    fn object() -> Vec<u8> {
        (0..300_000u32).map(|i| (i * 7 + i / 1000) as u8).collect()
    }

    /// Runs a server for `data` with rank 1 expected from loopback; `f`
    /// gets its address. Returns `f`'s result and the verdicts that came.
    fn with_server<T>(
        data: &[u8],
        key: Option<&Arc<GroupKey>>,
        hash: Hashed,
        f: impl FnOnce(SocketAddr) -> T + Send,
    ) -> (T, Vec<Verdict>)
    where
        T: Send,
    {
        let (server, verdicts) = Server::bind(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        server.set_session(42);
        server.set_hash(hash);
        server.expect(1, "127.0.0.1:9".parse().unwrap());
        server.release();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, server.port()));
        let out = std::thread::scope(|scope| {
            let server = &server;
            scope.spawn(move || server.run(scope, data, key, LIMIT, || {}));
            let out = f(addr);
            // The verdict is sent once the receiver's Complete is read.
            std::thread::sleep(Duration::from_millis(100));
            server.stop();
            out
        });
        (out, verdicts.try_iter().collect())
    }

    fn fetch_all(
        addr: SocketAddr,
        rank: u16,
        from: u64,
        data: &[u8],
        key: Option<&Arc<GroupKey>>,
    ) -> Result<(Vec<u8>, Fetched), String> {
        let mut copy = data[..from as usize].to_vec();
        copy.resize(data.len(), 0);
        let req = Request {
            to: addr,
            session: 42,
            rank,
            from,
            size: data.len() as u64,
            key: key.cloned(),
            limit: LIMIT,
        };
        let never = AtomicBool::new(false);
        let f = fetch(&req, &never, |at, bytes| {
            copy[at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
            Ok(())
        })?;
        Ok((copy, f))
    }

    #[test]
    fn a_receiver_fetches_the_rest_and_the_hash_and_its_verdict_comes_back() {
        for key in [None, Some(Arc::new(GroupKey::from_secret([7; 32])))] {
            let data = object();
            let hash = *blake3::hash(&data).as_bytes();
            let (got, verdicts) = with_server(&data, key.as_ref(), (hash, None), |addr| {
                let (copy, f) = fetch_all(addr, 1, 100_001, &data, key.as_ref()).unwrap();
                assert!(copy == data, "keyed {}: the copy differs", key.is_some());
                assert_eq!(f.hash, hash);
                f.confirm(Status::Ok, "", LIMIT);
            });
            let () = got;
            assert_eq!(verdicts, [(1, Ok(()))], "keyed {}", key.is_some());
        }
    }

    #[test]
    fn idle_strangers_cannot_crowd_out_a_moved_receiver() {
        let data = object();
        let hash = *blake3::hash(&data).as_bytes();
        let (got, verdicts) = with_server(&data, None, (hash, None), |addr| {
            // As many idle connections as the server takes beyond the
            // receivers it expects, all accepted before rank 1 connects.
            let idle: Vec<TcpStream> = (0..CONNECTIONS_MAX)
                .map(|_| TcpStream::connect(addr).unwrap())
                .collect();
            std::thread::sleep(Duration::from_millis(300));
            let got = fetch_all(addr, 1, 0, &data, None).map(|(copy, f)| {
                f.confirm(Status::Ok, "", LIMIT);
                copy == data
            });
            drop(idle);
            got
        });
        assert_eq!(got, Ok(true));
        assert_eq!(verdicts, [(1, Ok(()))]);
    }

    #[test]
    fn a_failed_verification_is_the_senders_verdict_too() {
        let data = object();
        let (_, verdicts) = with_server(&data, None, ([1; HASH_LEN], None), |addr| {
            let (_, f) = fetch_all(addr, 1, 0, &data, None).unwrap();
            f.confirm(Status::HashMismatch, "bytes differ", LIMIT);
        });
        let [(1, Err(why))] = &verdicts[..] else {
            panic!("{verdicts:?}");
        };
        assert!(why.contains("bytes differ"), "{why}");
    }

    /// A catch-up of `rank` under `theirs` the server (keyed `ours`) turns
    /// away: why, and that no verdict came.
    fn turned_away(
        rank: u16,
        ours: Option<&Arc<GroupKey>>,
        theirs: Option<&Arc<GroupKey>>,
    ) -> String {
        let data = object();
        let (got, verdicts) = with_server(&data, ours, ([1; HASH_LEN], None), |addr| {
            fetch_all(addr, rank, 0, &data, theirs).map(|_| ())
        });
        assert!(verdicts.is_empty(), "{verdicts:?}");
        got.unwrap_err()
    }

    #[test]
    fn a_rank_that_was_not_moved_is_turned_away_without_a_verdict() {
        let why = turned_away(2, None, None);
        assert!(why.contains("closed"), "{why}");
    }

    #[test]
    fn a_wrong_key_fails_the_key_exchange() {
        let ours = Arc::new(GroupKey::from_secret([7; 32]));
        let theirs = Arc::new(GroupKey::from_secret([8; 32]));
        let why = turned_away(1, Some(&ours), Some(&theirs));
        assert!(why.contains("key"), "{why}");
    }

    #[test]
    fn a_catch_up_waits_for_the_multicast_data_to_end_hearing_heartbeats() {
        let data = object();
        let hash = *blake3::hash(&data).as_bytes();
        let (server, verdicts) = Server::bind(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        server.set_session(42);
        server.set_hash((hash, None));
        server.expect(1, "127.0.0.1:9".parse().unwrap());
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, server.port()));
        let hold = Duration::from_millis(2500);
        std::thread::scope(|scope| {
            let server = &server;
            let data = &data[..];
            scope.spawn(move || server.run(scope, data, None, LIMIT, || {}));
            let started = Instant::now();
            let fetcher = scope.spawn(move || {
                // A limit shorter than the hold: only the heartbeats keep
                // the receiver waiting.
                let req = Request {
                    to: addr,
                    session: 42,
                    rank: 1,
                    from: 0,
                    size: data.len() as u64,
                    key: None,
                    limit: Duration::from_millis(1500),
                };
                let never = AtomicBool::new(false);
                let f = fetch(&req, &never, |_, _| Ok(())).unwrap();
                let took = started.elapsed();
                f.confirm(Status::Ok, "", LIMIT);
                took
            });
            std::thread::sleep(hold);
            server.release();
            let took = fetcher.join().unwrap();
            assert!(took >= hold, "the data came before the release: {took:?}");
            std::thread::sleep(Duration::from_millis(100));
            server.stop();
        });
        assert_eq!(verdicts.try_iter().collect::<Vec<_>>(), [(1, Ok(()))]);
    }

    #[test]
    fn a_moved_receiver_that_never_connects_is_overdue_and_named_why() {
        let (server, _) = Server::bind(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        server.expect(3, "127.0.0.1:9".parse().unwrap());
        assert!(
            server.overdue(Duration::ZERO).is_empty(),
            "not told before the release"
        );
        server.release();
        assert!(server.overdue(Duration::from_secs(60)).is_empty());
        let late = server.overdue(Duration::ZERO);
        let [(3, Err(why))] = &late[..] else {
            panic!("{late:?}");
        };
        assert!(why.contains("did not connect"), "{why}");
        assert!(server.overdue(Duration::ZERO).is_empty(), "named once");
    }
}
