//! The overlay's control messages and their framing.
//!
//! Every message is one frame: an 8-byte header, then the payload.
//!
//! ```text
//! 0      2        3      4              8
//! +------+--------+------+--------------+----------------+
//! | "RO" | ver 2  | type | payload len  | payload ...    |
//! +------+--------+------+--------------+----------------+
//! ```
//!
//! Integers are big-endian. Strings are a `u16` length and UTF-8 bytes;
//! socket addresses a family byte (4 or 6), the address bytes and a `u16`
//! port. The decoder checks every length before reading a field, refuses
//! payloads over [`MAX_PAYLOAD`] before allocating, and turns any byte
//! string into a message or a [`DecodeError`], never a panic.
//!
//! Data connections start with one `DataHello` frame and then carry the raw
//! bytes of the edge's segments in index order: both ends know the segment
//! size, the object size and the edge's [`SegmentSet`], so no per-segment
//! header is needed (TCP orders and checksums; BLAKE3 verifies end to end).

use super::topology::{OverlayShape, SegmentSet};
use crate::Status;
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// First two bytes of every frame.
pub(crate) const MAGIC: [u8; 2] = *b"RO";
/// Version this code speaks (2: the object's hash left `Assign` for its own
/// `Hash` message, sent once the sender has it).
pub(crate) const VERSION: u8 = 2;
/// Bytes of the frame header.
pub(crate) const HEADER_LEN: usize = 8;
/// Largest payload accepted (an assignment with many children fits).
pub(crate) const MAX_PAYLOAD: usize = 1 << 20;
/// Longest receiver name kept (longer names are cut at a character boundary).
pub(crate) const MAX_NAME: usize = 255;

/// Why bytes are not a valid frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DecodeError {
    #[error("not an rmcast overlay frame (bad magic)")]
    Magic,
    #[error("unsupported overlay protocol version {0}")]
    Version(u8),
    #[error("unknown message type {0}")]
    Type(u8),
    #[error("payload of {0} bytes is too long")]
    TooLong(usize),
    #[error("frame is truncated")]
    Truncated,
    #[error("bad field: {0}")]
    BadField(&'static str),
    #[error("trailing bytes after the message")]
    Trailing,
}

/// A peer as a node must know it: who, where, and which segments flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Peer {
    pub(crate) rank: u16,
    pub(crate) name: String,
    pub(crate) addr: SocketAddr,
    pub(crate) segments: SegmentSet,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.rank == 0 {
            write!(f, "the sender at {}", self.addr)
        } else {
            write!(f, "rank {} {:?} at {}", self.rank, self.name, self.addr)
        }
    }
}

/// Everything a receiver must know to take part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Assignment {
    pub(crate) session: u64,
    pub(crate) rank: u16,
    pub(crate) receivers: u16,
    pub(crate) shape: OverlayShape,
    pub(crate) segment_size: u32,
    pub(crate) size: u64,
    pub(crate) name: String,
    pub(crate) inactivity_ms: u32,
    pub(crate) parents: Vec<Peer>,
    pub(crate) children: Vec<Peer>,
}

/// One control message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Msg {
    /// Receiver → sender: join, with the address children-data arrives on.
    Register { name: String, data_addr: SocketAddr },
    /// Sender → receiver: rank, topology position and object.
    Assign(Box<Assignment>),
    /// Receiver → sender: storage prepared (`Ok`) or refused.
    Ready { status: Status, text: String },
    /// Sender → receivers: everyone is ready; open data connections.
    Start,
    /// Receiver → sender: bytes stored so far (also its heartbeat).
    Progress { bytes: u64 },
    /// Sender → receiver: still alive.
    Heartbeat,
    /// Receiver → sender: verified and done forwarding, or why not.
    Complete { status: Status, text: String },
    /// Sender → receiver: the transfer failed; discard the partial file.
    Abort { text: String },
    /// Parent → child, first frame of a data connection.
    DataHello { session: u64, from: u16, to: u16 },
    /// Sender → receiver: the object's BLAKE3 hash. The sender hashes while
    /// the session forms and data flows, and sends it once, when it has it
    /// and the receiver has its assignment.
    Hash { hash: [u8; 32] },
}

const T_REGISTER: u8 = 1;
const T_ASSIGN: u8 = 2;
const T_READY: u8 = 3;
const T_START: u8 = 4;
const T_PROGRESS: u8 = 5;
const T_HEARTBEAT: u8 = 6;
const T_COMPLETE: u8 = 7;
const T_ABORT: u8 = 8;
const T_DATA_HELLO: u8 = 9;
const T_HASH: u8 = 10;

fn status_code(s: Status) -> u8 {
    s as u8
}

fn status_from(v: u8) -> Option<Status> {
    Some(match v {
        0 => Status::Ok,
        1 => Status::NoSpace,
        2 => Status::UnsafeName,
        3 => Status::Io,
        4 => Status::HashMismatch,
        5 => Status::TooLarge,
        255 => Status::Other,
        _ => return None,
    })
}

/// Cuts `s` to at most `max` bytes at a character boundary.
pub(crate) fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

struct Out<'a>(&'a mut Vec<u8>);

impl Out<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn str(&mut self, s: &str) {
        let s = truncate(s, usize::from(u16::MAX));
        self.u16(s.len() as u16);
        self.0.extend_from_slice(s.as_bytes());
    }
    fn addr(&mut self, a: SocketAddr) {
        match a.ip() {
            IpAddr::V4(ip) => {
                self.u8(4);
                self.0.extend_from_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                self.u8(6);
                self.0.extend_from_slice(&ip.octets());
            }
        }
        self.u16(a.port());
    }
    fn peers(&mut self, peers: &[Peer]) {
        self.u16(peers.len().min(usize::from(u16::MAX)) as u16);
        for p in peers.iter().take(usize::from(u16::MAX)) {
            self.u16(p.rank);
            self.str(truncate(&p.name, MAX_NAME));
            self.addr(p.addr);
            self.u8(p.segments.code());
        }
    }
}

struct In<'a> {
    buf: &'a [u8],
}

impl<'a> In<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_be_bytes(a))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }
    fn str(&mut self) -> Result<String, DecodeError> {
        let n = usize::from(self.u16()?);
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| DecodeError::BadField("string is not UTF-8"))
    }
    fn addr(&mut self) -> Result<SocketAddr, DecodeError> {
        let ip = match self.u8()? {
            4 => {
                let mut a = [0u8; 4];
                a.copy_from_slice(self.take(4)?);
                IpAddr::V4(Ipv4Addr::from(a))
            }
            6 => {
                let mut a = [0u8; 16];
                a.copy_from_slice(self.take(16)?);
                IpAddr::V6(Ipv6Addr::from(a))
            }
            _ => return Err(DecodeError::BadField("address family")),
        };
        Ok(SocketAddr::new(ip, self.u16()?))
    }
    fn status(&mut self) -> Result<Status, DecodeError> {
        status_from(self.u8()?).ok_or(DecodeError::BadField("status"))
    }
    fn peers(&mut self) -> Result<Vec<Peer>, DecodeError> {
        let n = usize::from(self.u16()?);
        // Each peer takes at least 10 bytes: refuse counts the payload cannot hold.
        if n > self.buf.len() / 10 {
            return Err(DecodeError::Truncated);
        }
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let rank = self.u16()?;
            let name = self.str()?;
            let addr = self.addr()?;
            let segments =
                SegmentSet::from_code(self.u8()?).ok_or(DecodeError::BadField("segment set"))?;
            v.push(Peer {
                rank,
                name,
                addr,
                segments,
            });
        }
        Ok(v)
    }
}

impl Msg {
    fn kind(&self) -> u8 {
        match self {
            Msg::Register { .. } => T_REGISTER,
            Msg::Assign(_) => T_ASSIGN,
            Msg::Ready { .. } => T_READY,
            Msg::Start => T_START,
            Msg::Progress { .. } => T_PROGRESS,
            Msg::Heartbeat => T_HEARTBEAT,
            Msg::Complete { .. } => T_COMPLETE,
            Msg::Abort { .. } => T_ABORT,
            Msg::DataHello { .. } => T_DATA_HELLO,
            Msg::Hash { .. } => T_HASH,
        }
    }

    /// Appends the whole frame (header and payload) to `out`.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(self.kind());
        out.extend_from_slice(&[0; 4]);
        let mut o = Out(out);
        match self {
            Msg::Register { name, data_addr } => {
                o.str(truncate(name, MAX_NAME));
                o.addr(*data_addr);
            }
            Msg::Assign(a) => {
                o.u64(a.session);
                o.u16(a.rank);
                o.u16(a.receivers);
                let (code, fanout) = a.shape.code();
                o.u8(code);
                o.u32(fanout);
                o.u32(a.segment_size);
                o.u64(a.size);
                o.str(&a.name);
                o.u32(a.inactivity_ms);
                o.peers(&a.parents);
                o.peers(&a.children);
            }
            Msg::Ready { status, text } | Msg::Complete { status, text } => {
                o.u8(status_code(*status));
                o.str(text);
            }
            Msg::Start | Msg::Heartbeat => {}
            Msg::Progress { bytes } => o.u64(*bytes),
            Msg::Abort { text } => o.str(text),
            Msg::DataHello { session, from, to } => {
                o.u64(*session);
                o.u16(*from);
                o.u16(*to);
            }
            Msg::Hash { hash } => o.0.extend_from_slice(hash),
        }
        let len = (out.len() - start - HEADER_LEN) as u32;
        out[start + 4..start + 8].copy_from_slice(&len.to_be_bytes());
    }

    /// The frame as a new vector.
    pub(crate) fn to_frame(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(64);
        self.encode(&mut v);
        v
    }

    /// Decodes a header: the message type and the payload length.
    pub(crate) fn parse_header(h: &[u8]) -> Result<(u8, usize), DecodeError> {
        if h.len() < HEADER_LEN {
            return Err(DecodeError::Truncated);
        }
        if h[0..2] != MAGIC {
            return Err(DecodeError::Magic);
        }
        if h[2] != VERSION {
            return Err(DecodeError::Version(h[2]));
        }
        if !(T_REGISTER..=T_HASH).contains(&h[3]) {
            return Err(DecodeError::Type(h[3]));
        }
        let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
        if len > MAX_PAYLOAD {
            return Err(DecodeError::TooLong(len));
        }
        Ok((h[3], len))
    }

    /// Decodes the payload of a message of type `kind`.
    pub(crate) fn parse_payload(kind: u8, payload: &[u8]) -> Result<Self, DecodeError> {
        let mut i = In { buf: payload };
        let msg = match kind {
            T_REGISTER => Msg::Register {
                name: i.str()?,
                data_addr: i.addr()?,
            },
            T_ASSIGN => {
                let session = i.u64()?;
                let rank = i.u16()?;
                let receivers = i.u16()?;
                let code = i.u8()?;
                let fanout = i.u32()?;
                let shape =
                    OverlayShape::from_code(code, fanout).ok_or(DecodeError::BadField("shape"))?;
                let segment_size = i.u32()?;
                if segment_size == 0 {
                    return Err(DecodeError::BadField("segment size"));
                }
                let size = i.u64()?;
                Msg::Assign(Box::new(Assignment {
                    session,
                    rank,
                    receivers,
                    shape,
                    segment_size,
                    size,
                    name: i.str()?,
                    inactivity_ms: i.u32()?,
                    parents: i.peers()?,
                    children: i.peers()?,
                }))
            }
            T_READY => Msg::Ready {
                status: i.status()?,
                text: i.str()?,
            },
            T_START => Msg::Start,
            T_PROGRESS => Msg::Progress { bytes: i.u64()? },
            T_HEARTBEAT => Msg::Heartbeat,
            T_COMPLETE => Msg::Complete {
                status: i.status()?,
                text: i.str()?,
            },
            T_ABORT => Msg::Abort { text: i.str()? },
            T_DATA_HELLO => Msg::DataHello {
                session: i.u64()?,
                from: i.u16()?,
                to: i.u16()?,
            },
            T_HASH => {
                let mut hash = [0u8; 32];
                hash.copy_from_slice(i.take(32)?);
                Msg::Hash { hash }
            }
            other => return Err(DecodeError::Type(other)),
        };
        if !i.buf.is_empty() {
            return Err(DecodeError::Trailing);
        }
        Ok(msg)
    }

    /// Decodes one whole frame; returns the message and the bytes it took.
    #[cfg(test)]
    pub(crate) fn decode(bytes: &[u8]) -> Result<(Self, usize), DecodeError> {
        let (kind, len) = Self::parse_header(bytes)?;
        let payload = bytes
            .get(HEADER_LEN..HEADER_LEN + len)
            .ok_or(DecodeError::Truncated)?;
        Ok((Self::parse_payload(kind, payload)?, HEADER_LEN + len))
    }
}

/// Reads frames from a blocking socket with a read timeout, keeping a
/// partly read frame across timeouts.
#[derive(Default)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
    have: usize,
    want: usize,
    kind: u8,
}

impl FrameReader {
    /// Reads until a whole frame arrived (`Ok(Some)`), the read timed out
    /// (`Ok(None)`), or the connection ended or sent garbage (`Err`).
    pub(crate) fn read(&mut self, r: &mut impl Read) -> io::Result<Option<Msg>> {
        loop {
            if self.want == 0 {
                self.want = HEADER_LEN;
                self.have = 0;
                self.buf.resize(HEADER_LEN, 0);
            }
            while self.have < self.want {
                match r.read(&mut self.buf[self.have..self.want]) {
                    Ok(0) => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "connection closed",
                        ));
                    }
                    Ok(n) => self.have += n,
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                    {
                        return Ok(None);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            if self.want == HEADER_LEN && self.kind == 0 {
                let (kind, len) = Msg::parse_header(&self.buf)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                self.kind = kind;
                self.want = HEADER_LEN + len;
                self.buf.resize(self.want, 0);
                if len > 0 {
                    continue;
                }
            }
            let kind = std::mem::take(&mut self.kind);
            self.want = 0;
            let msg = Msg::parse_payload(kind, &self.buf[HEADER_LEN..])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            return Ok(Some(msg));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, RngCore, SeedableRng};

    fn samples() -> Vec<Msg> {
        let peer = |rank, segments| Peer {
            rank,
            name: format!("node-{rank}"),
            addr: "127.0.0.1:4000".parse().unwrap(),
            segments,
        };
        vec![
            Msg::Register {
                name: "host:1".into(),
                data_addr: "127.0.0.1:5555".parse().unwrap(),
            },
            Msg::Register {
                name: String::new(),
                data_addr: "[::1]:7".parse().unwrap(),
            },
            Msg::Assign(Box::new(Assignment {
                session: 0x0123_4567_89ab_cdef,
                rank: 3,
                receivers: 7,
                shape: OverlayShape::Tree { fanout: 3 },
                segment_size: 8192,
                size: 10_000_000,
                name: "dir/obj.bin".into(),
                inactivity_ms: 5000,
                parents: vec![peer(1, SegmentSet::Even), peer(7, SegmentSet::Odd)],
                children: vec![peer(6, SegmentSet::Even)],
            })),
            Msg::Ready {
                status: Status::Ok,
                text: String::new(),
            },
            Msg::Start,
            Msg::Progress { bytes: u64::MAX },
            Msg::Heartbeat,
            Msg::Complete {
                status: Status::HashMismatch,
                text: "bad".into(),
            },
            Msg::Abort {
                text: "rank 2 died".into(),
            },
            Msg::DataHello {
                session: 9,
                from: 0,
                to: 65535,
            },
            Msg::Hash { hash: [7; 32] },
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in samples() {
            let frame = m.to_frame();
            assert_eq!(Msg::decode(&frame), Ok((m.clone(), frame.len())), "{m:?}");
            let mut r = FrameReader::default();
            assert_eq!(r.read(&mut &frame[..]).unwrap(), Some(m));
        }
    }

    #[test]
    fn fixed_bytes_of_a_data_hello() {
        let frame = Msg::DataHello {
            session: 1,
            from: 2,
            to: 3,
        }
        .to_frame();
        assert_eq!(
            frame,
            [
                b'R', b'O', 2, 9, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 3
            ]
        );
    }

    #[test]
    fn bad_headers_are_refused() {
        let good = Msg::Start.to_frame();
        let mut bad = good.clone();
        bad[0] = b'X';
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Magic));
        let mut bad = good.clone();
        bad[2] = 1;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Version(1)));
        let mut bad = good.clone();
        bad[3] = T_HASH + 1;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Type(T_HASH + 1)));
        let mut bad = good.clone();
        bad[3] = 0;
        assert_eq!(Msg::decode(&bad), Err(DecodeError::Type(0)));
        let mut bad = good;
        bad[4] = 0xff;
        assert!(matches!(Msg::decode(&bad), Err(DecodeError::TooLong(_))));
    }

    #[test]
    fn truncations_and_extensions_of_valid_frames_never_panic() {
        for m in samples() {
            let frame = m.to_frame();
            for cut in 0..frame.len() {
                assert!(Msg::decode(&frame[..cut]).is_err());
            }
            let mut longer = frame.clone();
            longer.push(0);
            let len = u32::from_be_bytes([longer[4], longer[5], longer[6], longer[7]]) + 1;
            longer[4..8].copy_from_slice(&len.to_be_bytes());
            assert!(Msg::decode(&longer).is_err());
        }
    }

    #[test]
    fn arbitrary_bytes_decode_to_a_message_or_an_error() {
        let mut rng = StdRng::seed_from_u64(0x5eed);
        let samples: Vec<Vec<u8>> = samples().iter().map(Msg::to_frame).collect();
        for round in 0..200_000 {
            let bytes: Vec<u8> = if round % 2 == 0 {
                // Random garbage behind a plausible header.
                let len = rng.random_range(0..200usize);
                let mut v = vec![0u8; HEADER_LEN + len];
                rng.fill_bytes(&mut v);
                v[0..2].copy_from_slice(&MAGIC);
                v[2] = VERSION;
                v[3] = rng.random_range(0..=T_HASH + 1);
                v[4..8].copy_from_slice(&(len as u32).to_be_bytes());
                v
            } else {
                // A valid frame with a few bytes flipped.
                let mut v = samples[round % samples.len()].clone();
                for _ in 0..rng.random_range(1..4) {
                    let i = rng.random_range(0..v.len());
                    v[i] = rng.random();
                }
                v
            };
            let _ = Msg::decode(&bytes);
            let _ = FrameReader::default().read(&mut &bytes[..]);
        }
    }

    #[test]
    fn frame_reader_keeps_a_partial_frame_across_timeouts() {
        struct Trickle<'a> {
            data: &'a [u8],
            calls: usize,
        }
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                self.calls += 1;
                if self.calls.is_multiple_of(2) {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                if self.data.is_empty() {
                    return Ok(0);
                }
                buf[0] = self.data[0];
                self.data = &self.data[1..];
                Ok(1)
            }
        }
        let m = samples()[2].clone();
        let frame = m.to_frame();
        let mut src = Trickle {
            data: &frame,
            calls: 0,
        };
        let mut r = FrameReader::default();
        let mut got = None;
        for _ in 0..10 * frame.len() {
            if let Some(msg) = r.read(&mut src).unwrap() {
                got = Some(msg);
                break;
            }
        }
        assert_eq!(got, Some(m));
        assert!(r.read(&mut src).is_err() || r.read(&mut src).is_err());
    }
}
