//! Keyed overlays: the handshake of `rmcast_proto::security::frames` over a
//! blocking socket, and the writer that seals segments in place.
//!
//! The frame layout, the key schedule and what they protect against are
//! described in `rmcast_proto::security::frames`. Here: every wait has a
//! deadline, a handshake that fails is reported with the peer's fault
//! named, and the side that refuses a peer answers it with one plain
//! `Abort` saying why (another key, no key, another session), so that the
//! peer fails with the cause instead of a closed connection. That answer is
//! not authenticated: it can only end a connection, which anyone on the
//! path can do anyway.

use super::io::{self, XferError};
use rmcast_proto::security::{
    Channel, FRAME_HEADER_LEN, FRAME_OVERHEAD, FrameError, FrameKind, GroupKey, HELLO_LEN,
    Initiator, Sealer, parse_frame_header, respond as respond_hello,
};
use rmcast_wire::overlay::{self as wire, Msg};
use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What a keyless sender answers a receiver that seals its frames (only a
/// sender reads a connection's first frame without having written one).
pub(crate) const NO_KEY_HERE: &str = "this sender runs without a group key (--insecure) and \
     got sealed frames: run every member with the same --key FILE, or all --insecure";
/// Longest a refusal is given to leave.
const REFUSAL_LIMIT: Duration = Duration::from_millis(500);

/// Why a connection's key exchange failed.
#[derive(Debug)]
pub(crate) enum HandshakeError {
    /// The peer's bytes failed: another key, none, forged, another session.
    Auth(FrameError),
    /// The peer refused us with a plain `Abort`: its reason.
    Refused(String),
    /// The connection closed, failed or stalled first.
    Io(XferError),
}

impl HandshakeError {
    /// Whether the peer is to be counted as having failed authentication
    /// (rather than having gone away).
    pub(crate) fn is_auth(&self) -> bool {
        matches!(self, Self::Auth(_))
    }
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auth(e) if e.is_key_mismatch() => {
                write!(f, "failed authentication — wrong group key? ({e})")
            }
            Self::Auth(FrameError::Unsealed) => {
                f.write_str("sent plain frames (it runs --insecure, without a group key)")
            }
            Self::Auth(e @ FrameError::OtherSession { .. }) => {
                write!(f, "belongs to another session ({e})")
            }
            Self::Auth(e) => write!(f, "failed authentication: {e}"),
            // The peer's text is unauthenticated: shown, but without control
            // characters (no terminal escapes from a stranger).
            Self::Refused(text) => write!(
                f,
                "refused the connection (its unauthenticated words: {:?})",
                text.chars()
                    .map(|c| if c.is_control() { '?' } else { c })
                    .collect::<String>()
            ),
            Self::Io(e) => write!(f, "broke off the key exchange: {e}"),
        }
    }
}

impl From<XferError> for HandshakeError {
    fn from(e: XferError) -> Self {
        Self::Io(e)
    }
}

/// Fresh randomness for one end of a handshake.
fn nonce() -> [u8; 16] {
    rand::random()
}

/// Fills `buf` by `deadline` (a total bound: a peer that trickles bytes
/// cannot hold a handshake open).
fn read_by(
    s: &mut TcpStream,
    buf: &mut [u8],
    abort: &AtomicBool,
    (started, limit): (Instant, Duration),
) -> Result<(), XferError> {
    let deadline = started + limit;
    let mut have = 0;
    while have < buf.len() {
        if abort.load(Ordering::Relaxed) {
            return Err(XferError::Aborted);
        }
        match s.read(&mut buf[have..]) {
            Ok(0) => return Err(XferError::Closed),
            Ok(n) => have += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(XferError::Io(e)),
        }
        if have < buf.len() && Instant::now() >= deadline {
            return Err(XferError::Stalled(started.elapsed()));
        }
    }
    Ok(())
}

/// The first frame a peer wrote: a hello, or a plain control frame.
enum First {
    Hello([u8; HELLO_LEN]),
    Plain(Msg),
}

fn read_first(
    s: &mut TcpStream,
    abort: &AtomicBool,
    deadline: (Instant, Duration),
) -> Result<First, HandshakeError> {
    let mut head = [0u8; FRAME_HEADER_LEN];
    read_by(s, &mut head, abort, deadline)?;
    if head[..2] == wire::MAGIC {
        let (kind, len) =
            Msg::parse_header(&head).map_err(|_| HandshakeError::Auth(FrameError::Unsealed))?;
        let mut payload = vec![0u8; len];
        read_by(s, &mut payload, abort, deadline)?;
        let msg = Msg::parse_payload(kind, &payload)
            .map_err(|_| HandshakeError::Auth(FrameError::Unsealed))?;
        return Ok(First::Plain(msg));
    }
    let h = parse_frame_header(&head).map_err(HandshakeError::Auth)?;
    if h.kind != FrameKind::Hello || h.frame_len() != HELLO_LEN {
        return Err(HandshakeError::Auth(FrameError::Malformed(
            "the first frame is not a hello",
        )));
    }
    let mut hello = [0u8; HELLO_LEN];
    hello[..FRAME_HEADER_LEN].copy_from_slice(&head);
    read_by(s, &mut hello[FRAME_HEADER_LEN..], abort, deadline)?;
    Ok(First::Hello(hello))
}

/// What a keyed `who` ("sender", "receiver") answers a peer that sent
/// plain frames.
fn key_required(who: &str) -> String {
    format!(
        "this {who} requires a group key and got plain frames (--insecure): run every member \
         with the same --key FILE"
    )
}

/// What a keyed `who` answers a peer whose hello does not verify.
fn bad_key(who: &str) -> String {
    format!(
        "this {who} could not authenticate the hello — wrong group key? every member needs \
         the same --key file"
    )
}

/// Tells a refused peer why, in one plain `Abort`, best effort.
pub(crate) fn refuse(s: &mut TcpStream, text: &str) {
    let never = AtomicBool::new(false);
    let frame = Msg::Abort {
        text: text.to_owned(),
    }
    .to_frame();
    let _ = io::write_all(s, &frame, &never, REFUSAL_LIMIT);
}

/// The connecting side: writes its hello, reads the answer, and returns the
/// connection's keys. `session`: the overlay session, when known.
pub(crate) fn initiate(
    s: &mut TcpStream,
    key: &Arc<GroupKey>,
    session: Option<u64>,
    abort: &AtomicBool,
    limit: Duration,
) -> Result<Channel, HandshakeError> {
    let deadline = (Instant::now(), limit);
    let init = Initiator::new(key.clone(), session, nonce());
    io::write_all(s, init.hello(), abort, limit)?;
    match read_first(s, abort, deadline)? {
        First::Hello(reply) => init.finish(&reply).map_err(HandshakeError::Auth),
        First::Plain(Msg::Abort { text }) => Err(HandshakeError::Refused(text)),
        First::Plain(_) => Err(HandshakeError::Auth(FrameError::Unsealed)),
    }
}

/// The accepting side (`who`: "sender", "receiver"): reads the peer's
/// hello for `session`, answers, and returns the connection's keys. A peer
/// refused is told why first.
pub(crate) fn respond(
    s: &mut TcpStream,
    who: &str,
    key: &GroupKey,
    session: u64,
    abort: &AtomicBool,
    limit: Duration,
) -> Result<Channel, HandshakeError> {
    let deadline = (Instant::now(), limit);
    let first = match read_first(s, abort, deadline) {
        Ok(f) => f,
        Err(HandshakeError::Auth(e)) => {
            if e.is_key_mismatch() {
                refuse(s, &bad_key(who));
            }
            return Err(HandshakeError::Auth(e));
        }
        Err(e) => return Err(e),
    };
    let hello = match first {
        First::Hello(h) => h,
        First::Plain(_) => {
            refuse(s, &key_required(who));
            return Err(HandshakeError::Auth(FrameError::Unsealed));
        }
    };
    match respond_hello(key, session, &hello, nonce()) {
        Ok((ch, reply)) => {
            io::write_all(s, &reply, abort, limit)?;
            Ok(ch)
        }
        Err(e) => {
            match e {
                e if e.is_key_mismatch() => refuse(s, &bad_key(who)),
                FrameError::OtherSession { .. } => {
                    refuse(s, &format!("this {who} is in another session: {e}"));
                }
                _ => {}
            }
            Err(HandshakeError::Auth(e))
        }
    }
}

/// Writes a data connection's segments: as they are (plain), or each in a
/// sealed frame built in one reusable buffer: no allocation per segment.
/// Sealed frames are gathered up to `batch` bytes per write (0: every
/// frame is written at once, for pipelined forwarding).
pub(crate) struct SegmentOut {
    sealer: Option<Sealer>,
    buf: Vec<u8>,
    at: usize,
    batch: usize,
}

impl SegmentOut {
    /// A writer for segments of at most `segment_size` bytes.
    pub(crate) fn new(sealer: Option<Sealer>, segment_size: usize, batch: usize) -> Self {
        let cap = if sealer.is_some() {
            batch.max(segment_size + FRAME_OVERHEAD)
        } else {
            0
        };
        Self {
            sealer,
            buf: vec![0u8; cap],
            at: 0,
            batch,
        }
    }

    /// The sealer back, for control frames after the segments (call
    /// [`SegmentOut::flush`] first).
    pub(crate) fn into_sealer(self) -> Option<Sealer> {
        debug_assert_eq!(self.at, 0, "segments left unwritten");
        self.sealer
    }

    /// Whether segments are sealed.
    pub(crate) fn sealed(&self) -> bool {
        self.sealer.is_some()
    }

    /// Writes one segment (sealed: queues it, writing when the batch is full).
    pub(crate) fn segment(
        &mut self,
        s: &mut TcpStream,
        bytes: &[u8],
        abort: &AtomicBool,
        stall: Duration,
    ) -> Result<(), XferError> {
        if self.sealer.is_none() {
            return io::write_all(s, bytes, abort, stall);
        }
        self.stage(s, bytes, abort, stall)?;
        self.flush_full(s, abort, stall)
    }

    /// Sealed only: writes one segment of `len` bytes that `fill` puts
    /// in place (read from a file straight into the frame).
    pub(crate) fn segment_with(
        &mut self,
        s: &mut TcpStream,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> std::io::Result<()>,
        abort: &AtomicBool,
        stall: Duration,
    ) -> Result<(), XferError> {
        self.stage_with(s, len, fill, abort, stall)?;
        self.flush_full(s, abort, stall)
    }

    /// Sealed only: seals a copy of `bytes` into the queue without writing
    /// it (unless the queue is full), so that the caller can let go of
    /// `bytes` before the write.
    pub(crate) fn stage(
        &mut self,
        s: &mut TcpStream,
        bytes: &[u8],
        abort: &AtomicBool,
        stall: Duration,
    ) -> Result<(), XferError> {
        self.stage_with(
            s,
            bytes.len(),
            |b| {
                b.copy_from_slice(bytes);
                Ok(())
            },
            abort,
            stall,
        )
    }

    fn stage_with(
        &mut self,
        s: &mut TcpStream,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> std::io::Result<()>,
        abort: &AtomicBool,
        stall: Duration,
    ) -> Result<(), XferError> {
        let frame = len + FRAME_OVERHEAD;
        if self.at + frame > self.buf.len() {
            self.flush(s, abort, stall)?;
            if frame > self.buf.len() {
                self.buf.resize(frame, 0);
            }
        }
        let sealer = self.sealer.as_mut().expect("a sealed writer");
        let f = &mut self.buf[self.at..self.at + frame];
        fill(&mut f[FRAME_HEADER_LEN..FRAME_HEADER_LEN + len]).map_err(XferError::Io)?;
        sealer
            .seal_in_place(FrameKind::Data, f)
            .map_err(|e| XferError::Io(std::io::Error::other(e)))?;
        self.at += frame;
        Ok(())
    }

    fn flush_full(
        &mut self,
        s: &mut TcpStream,
        abort: &AtomicBool,
        stall: Duration,
    ) -> Result<(), XferError> {
        if self.at >= self.batch {
            self.flush(s, abort, stall)?;
        }
        Ok(())
    }

    /// Writes what is queued.
    pub(crate) fn flush(
        &mut self,
        s: &mut TcpStream,
        abort: &AtomicBool,
        stall: Duration,
    ) -> Result<(), XferError> {
        if self.at > 0 {
            let n = std::mem::take(&mut self.at);
            io::write_all(s, &self.buf[..n], abort, stall)?;
        }
        Ok(())
    }
}
