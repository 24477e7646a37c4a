//! rmcast's packet formats: parse and emit every datagram the protocols exchange.
//!
//! This crate is pure data: no sockets, no clocks, no allocation. Every
//! datagram starts with a 16-byte [`Header`] followed by the body of its
//! [`Kind`]. [`Packet::decode`] turns any byte string into a packet or a
//! [`DecodeError`], never a panic; [`Packet::encode`] writes a packet into a
//! caller's buffer. Bodies borrow from the datagram (data payloads, bitmaps,
//! names), so decoding copies nothing.
//!
//! The byte layout is documented in `docs/wire-format.md`.
//!
//! It is not the protocol: which packet is sent when lives in `rmcast-proto`.

mod cursor;
mod seq;
pub mod stream;

use std::net::{Ipv4Addr, SocketAddrV4};

use cursor::{Reader, Writer};
pub use seq::Seq;

/// The two bytes every rmcast datagram starts with: ASCII "RM".
pub const MAGIC: [u8; 2] = *b"RM";
/// The wire format version this crate speaks. Version 2 moved the object's
/// hash from `Offer` to `Close` (so a sender can announce before it has read
/// the object); a version-1 peer's packets are refused as `BadVersion`.
pub const VERSION: u8 = 2;
/// Length of the common header.
pub const HEADER_LEN: usize = 16;
/// Length of the common header plus the data body's fixed fields.
pub const DATA_HEADER_LEN: usize = HEADER_LEN + 8;
/// The rank field of packets sent by the sender.
pub const RANK_SENDER: u16 = 0xFFFF;
/// The rank field of a receiver that has not been admitted yet.
pub const RANK_UNASSIGNED: u16 = 0xFFFE;
/// Largest number of receivers a session can admit (ranks 0..MAX_RECEIVERS).
pub const MAX_RECEIVERS: u16 = 0xFFF0;
/// Largest UDP payload over IPv4 (65,535 - 20 - 8).
pub const MAX_DATAGRAM: usize = 65_507;
/// Length of a BLAKE3 digest.
pub const HASH_LEN: usize = 32;

/// Header flag: a 16-byte authentication tag follows the body. Reserved for
/// the authenticated wire format; this version rejects packets that set it.
pub const FLAG_AUTH: u8 = 0x01;

/// Why a byte string is not an rmcast packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than its header or body says it must be.
    #[error("truncated packet")]
    Truncated,
    /// Does not start with the rmcast magic: some other program's traffic.
    #[error("foreign packet (bad magic)")]
    BadMagic,
    /// An rmcast packet of a version this build does not speak.
    #[error("unsupported wire version {0}")]
    BadVersion(u8),
    /// Packet type byte not known.
    #[error("unknown packet type {0:#04x}")]
    UnknownKind(u8),
    /// Flags this version does not implement (authentication, reserved bits).
    #[error("unsupported header flags {0:#04x}")]
    UnsupportedFlags(u8),
    /// A field holds a value outside its range.
    #[error("invalid value in field `{0}`")]
    BadField(&'static str),
    /// A text field is not UTF-8.
    #[error("text field is not UTF-8")]
    BadText,
    /// Bytes left over after the body.
    #[error("trailing bytes after the packet body")]
    TrailingBytes,
}

/// Why a packet could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The destination buffer cannot hold the packet.
    #[error("buffer too small for packet")]
    BufferTooSmall,
    /// A text field is longer than 255 bytes.
    #[error("text field longer than 255 bytes")]
    TextTooLong,
    /// A bitmap is longer than 65,535 bytes.
    #[error("bitmap longer than 65535 bytes")]
    BitmapTooLong,
    /// A `Welcome` upstream address with an unspecified IP or a zero port.
    #[error("upstream address must have both an IP and a port")]
    BadUpstream,
}

/// Random per-transfer identifier: two transfers on one group never mix.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SessionId(pub u64);

impl core::fmt::Debug for SessionId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl core::fmt::Display for SessionId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// The reliability protocol a session runs; carried in `Hello` and `Offer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProtocolId {
    /// Every receiver acknowledges every data packet.
    Ack = 1,
    /// Receivers send NAKs on gaps; the sender polls every i-th packet.
    NakPoll = 2,
    /// Receivers take turns acknowledging (rotating token ring).
    Ring = 3,
    /// Acknowledgements aggregated along a tree of receivers. The offer's
    /// `protocol_param` holds the tree height in its low 15 bits and, in
    /// bit 15, the shape: 0 flat tree (chains), 1 binary tree.
    Tree = 4,
}

impl ProtocolId {
    fn from_u8(v: u8) -> Result<Self, DecodeError> {
        Ok(match v {
            1 => Self::Ack,
            2 => Self::NakPoll,
            3 => Self::Ring,
            4 => Self::Tree,
            _ => return Err(DecodeError::BadField("protocol")),
        })
    }
}

/// Packet types. The numeric value is the type byte on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Sender → group: a session exists, join it.
    Hello = 0x01,
    /// Receiver → sender: please admit me.
    Join = 0x02,
    /// Sender → receiver: admitted with a rank (or refused).
    Welcome = 0x03,
    /// Sender → group: object size, name and parameters (buffer handshake).
    Offer = 0x04,
    /// Receiver → sender: the offer is accepted or refused.
    OfferReply = 0x05,
    /// Sender → group: a slice of the object.
    Data = 0x06,
    /// Receiver → sender: cumulative and selective acknowledgement.
    Ack = 0x07,
    /// Receiver → sender: negative acknowledgement (same layout as Ack).
    Nak = 0x08,
    /// Sender → group: all data is out, here is the object's hash; report
    /// your verification.
    Close = 0x09,
    /// Receiver → sender: the object verified (or did not).
    Complete = 0x0A,
    /// Sender → group: the session is over (done or aborted).
    Bye = 0x0B,
    /// Receiver → sender: I am leaving the session.
    Leave = 0x0C,
    /// Member → group: Hunt's multicast NACK (EXP or LAST) about one
    /// sender's stream; every sender of the group backs off.
    RateNak = 0x40,
    /// Sender → group: its current rate and messages since the last
    /// resynchronisation (heartbeat, and the answer to a request).
    RateReport = 0x41,
    /// Group leader → group: a rate resynchronisation request, or the
    /// rate every sender adopts.
    RateSync = 0x42,
}

impl Kind {
    fn from_u8(v: u8) -> Result<Self, DecodeError> {
        Ok(match v {
            0x01 => Self::Hello,
            0x02 => Self::Join,
            0x03 => Self::Welcome,
            0x04 => Self::Offer,
            0x05 => Self::OfferReply,
            0x06 => Self::Data,
            0x07 => Self::Ack,
            0x08 => Self::Nak,
            0x09 => Self::Close,
            0x0A => Self::Complete,
            0x0B => Self::Bye,
            0x0C => Self::Leave,
            0x40 => Self::RateNak,
            0x41 => Self::RateReport,
            0x42 => Self::RateSync,
            other => return Err(DecodeError::UnknownKind(other)),
        })
    }
}

/// The common header of every datagram (16 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Flag bits; this version requires zero.
    pub flags: u8,
    /// Group key epoch of the authenticated format; zero in this version.
    pub key_epoch: u8,
    /// Who sent it: [`RANK_SENDER`], a receiver rank, or [`RANK_UNASSIGNED`].
    pub rank: u16,
    /// Which transfer it belongs to.
    pub session: SessionId,
}

impl Header {
    /// A header of this version with no flags.
    #[must_use]
    pub const fn new(session: SessionId, rank: u16) -> Self {
        Self {
            flags: 0,
            key_epoch: 0,
            rank,
            session,
        }
    }
}

/// `Hello`: announces a session on the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Receivers the sender waits for.
    pub receivers_wanted: u16,
    /// Protocol the session will run.
    pub protocol: ProtocolId,
}

/// `Join`: a receiver asks to be admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Join<'a> {
    /// Random identity the receiver picked; makes retransmitted joins idempotent.
    pub receiver_id: u64,
    /// Human-readable name used in reports (host:pid or `--name`).
    pub name: &'a str,
}

/// `Welcome`: the sender's answer to a `Join`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// The identity from the `Join` being answered.
    pub receiver_id: u64,
    /// The rank given, or [`RANK_UNASSIGNED`] if the session is full.
    pub rank: u16,
    /// Tree protocol: the unicast address of this receiver's parent, to
    /// which it relays aggregated acknowledgements. `None` (encoded
    /// 0.0.0.0:0): acknowledge to the sender.
    pub upstream: Option<SocketAddrV4>,
}

/// `Offer`: the object about to be sent and the session's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer<'a> {
    /// Object length in bytes.
    pub object_size: u64,
    /// Sequence number of the object's first data packet.
    pub isn: Seq,
    /// Object bytes per data packet (all but the last are full).
    pub payload_size: u16,
    /// Sender window in packets; receivers keep at most this far ahead.
    pub window: u32,
    /// Protocol the data phase runs.
    pub protocol: ProtocolId,
    /// Protocol parameter (tree height for `Tree`, otherwise 0).
    pub protocol_param: u16,
    /// Number of admitted receivers.
    pub receivers: u16,
    /// Test knob: receivers drop this many data packets per million at
    /// random (`rmcast send --loss`). Zero in production.
    pub test_loss_ppm: u32,
    /// File name (a relative path, checked by the receiver).
    pub name: &'a str,
}

/// Refusal reasons of an `OfferReply` and failures of a `Complete`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Accepted / verified.
    Ok = 0,
    /// Not enough disk space or memory for the object.
    NoSpace = 1,
    /// The name is absolute, contains `..`, or is otherwise unsafe.
    UnsafeName = 2,
    /// A local I/O error.
    Io = 3,
    /// The received bytes do not hash to the hash the sender announced (in `Close`).
    HashMismatch = 4,
    /// The object is larger than the receiver allows.
    TooLarge = 5,
    /// Anything else; the text says what.
    Other = 255,
}

impl Status {
    fn from_u8(v: u8) -> Result<Self, DecodeError> {
        Ok(match v {
            0 => Self::Ok,
            1 => Self::NoSpace,
            2 => Self::UnsafeName,
            3 => Self::Io,
            4 => Self::HashMismatch,
            5 => Self::TooLarge,
            255 => Self::Other,
            _ => return Err(DecodeError::BadField("status")),
        })
    }
}

/// `OfferReply`: a receiver accepts ([`Status::Ok`]) or refuses the offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OfferReply<'a> {
    /// `Ok` to accept, otherwise why not.
    pub status: Status,
    /// Details for a human.
    pub text: &'a str,
}

/// Poll field value: every receiver must acknowledge this data packet.
pub const POLL_ALL: u16 = 0xFFFF;
/// Largest `Feedback::echo_copy` the wire carries (7 bits).
pub const ECHO_COPY_MAX: u8 = 0x7F;

/// Poll field value: nobody acknowledges this data packet.
pub const POLL_NONE: u16 = 0xFFFE;
/// Poll field value: every receiver acknowledges this data packet directly
/// to the sender, whatever the protocol's usual routing (used when the
/// window stalls, so a broken relay cannot hide who is missing what).
pub const POLL_DIRECT: u16 = 0xFFFD;

/// `Data`: one packet of the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Data<'a> {
    /// Sequence number; the object offset is `(seq - isn) * payload_size`.
    pub seq: Seq,
    /// Who must acknowledge it: [`POLL_ALL`], [`POLL_NONE`] or one rank.
    pub poll: u16,
    /// Which transmission of `seq` this is: 0 the first, 1 the first resend,
    /// ... (saturating). Echoed in feedback, so the sender knows which copy
    /// a receiver answered.
    pub copy: u16,
    /// The object bytes.
    pub payload: &'a [u8],
}

/// `Ack` and `Nak` bodies: what a receiver holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feedback<'a> {
    /// Next sequence number expected: every packet before it is held.
    pub cumulative: Seq,
    /// Sequence number of the data packet that prompted this feedback (a
    /// poll, or the packet that revealed a gap): packets sent before it and
    /// missing from the bitmap are lost, not in flight.
    pub echo: Seq,
    /// The `copy` of that data packet, up to [`ECHO_COPY_MAX`] (which
    /// means "that many or more": the sender then assumes the first copy).
    pub echo_copy: u8,
    /// Tree protocol: `cumulative` holds for the sender's whole subtree
    /// (itself and every receiver below it), not just the sender.
    pub aggregate: bool,
    /// Bit `i` (LSB first within each byte) set when packet
    /// `cumulative + 1 + i` is held.
    pub bitmap: &'a [u8],
}

impl Feedback<'_> {
    /// Whether the bitmap says packet `seq` is held (`cumulative` itself never is).
    #[must_use]
    pub fn holds(&self, seq: Seq) -> bool {
        if seq < self.cumulative {
            return true;
        }
        let Some(bit) = seq.since(self.cumulative).checked_sub(1) else {
            return false;
        };
        let byte = (bit / 8) as usize;
        self.bitmap
            .get(byte)
            .is_some_and(|b| b & (1 << (bit % 8)) != 0)
    }
}

/// `Close`: every receiver holds every byte; the object's hash, to verify
/// against. It travels here rather than in the `Offer` so the sender can
/// start sending before it has read (hashed) the whole object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Close {
    /// BLAKE3 hash of the object.
    pub hash: [u8; HASH_LEN],
}

/// `Complete`: the receiver's verdict on the object it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Complete<'a> {
    /// `Ok` when the hash matched.
    pub status: Status,
    /// The hash the receiver computed.
    pub hash: [u8; HASH_LEN],
    /// Details for a human.
    pub text: &'a str,
}

/// `Bye`: the sender ends the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bye<'a> {
    /// `true` when the sender gave up instead of finishing.
    pub aborted: bool,
    /// Why, for a human.
    pub text: &'a str,
}

/// `Leave`: a receiver quits before the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leave<'a> {
    /// Why, for a human.
    pub text: &'a str,
}

/// Which error a [`RateNak`] reports: the two NACKs of Hunt's protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RateNakKind {
    /// A receiver found a gap: `seq` is the first message it lacks.
    Exp = 1,
    /// The sender's acknowledgement timer expired: `seq` is the oldest
    /// unacknowledged message.
    Last = 2,
}

/// `RateNak`: an error in one sender's stream, multicast to the group so
/// that every sender backs off. The header's session is the sender's
/// session the error concerns; its rank is the reporter's (a receiver's
/// rank in that session, or [`RANK_SENDER`] for `Last`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateNak {
    /// EXP or LAST.
    pub kind: RateNakKind,
    /// The message concerned.
    pub seq: Seq,
}

/// Where a sender stands in the group's rate control.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RatePhase {
    /// Announced, not sending data yet.
    Idle = 0,
    /// In its data phase.
    Sending = 1,
    /// Done sending: its share of the rate goes to the others.
    Leaving = 2,
}

/// `RateReport`: a sender's rate (the header's session says whose).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateReport {
    /// The resynchronisation round it answers, or the last one applied
    /// (an unsolicited report).
    pub epoch: u32,
    /// Where the sender stands.
    pub phase: RatePhase,
    /// Its minimum spacing between data packets, nanoseconds (at least 1).
    pub spacing_ns: u64,
    /// Data packets it multicast since the last resynchronisation.
    pub messages: u64,
}

/// What a [`RateSync`] asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateSyncOp {
    /// Every sender answers with a [`RateReport`] for this epoch.
    Request,
    /// Every sender adopts this spacing as its new initial rate.
    Set {
        /// The spacing, nanoseconds (at least 1).
        spacing_ns: u64,
        /// How many senders' rates it was computed from.
        members: u16,
    },
}

/// `RateSync`: the leader's resynchronisation (the header's session is the
/// leader's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateSync {
    /// Round number; larger is newer.
    pub epoch: u32,
    /// Request or set.
    pub op: RateSyncOp,
}

/// A packet body, by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body<'a> {
    /// See [`Hello`].
    Hello(Hello),
    /// See [`Join`].
    Join(Join<'a>),
    /// See [`Welcome`].
    Welcome(Welcome),
    /// See [`Offer`].
    Offer(Offer<'a>),
    /// See [`OfferReply`].
    OfferReply(OfferReply<'a>),
    /// See [`Data`].
    Data(Data<'a>),
    /// Positive feedback, see [`Feedback`].
    Ack(Feedback<'a>),
    /// Negative feedback, see [`Feedback`].
    Nak(Feedback<'a>),
    /// Sender announces the object's hash and asks every receiver for its
    /// `Complete`, see [`Close`].
    Close(Close),
    /// See [`Complete`].
    Complete(Complete<'a>),
    /// See [`Bye`].
    Bye(Bye<'a>),
    /// See [`Leave`].
    Leave(Leave<'a>),
    /// See [`RateNak`].
    RateNak(RateNak),
    /// See [`RateReport`].
    RateReport(RateReport),
    /// See [`RateSync`].
    RateSync(RateSync),
}

impl Body<'_> {
    /// The packet type of this body.
    #[must_use]
    pub fn kind(&self) -> Kind {
        match self {
            Body::Hello(_) => Kind::Hello,
            Body::Join(_) => Kind::Join,
            Body::Welcome(_) => Kind::Welcome,
            Body::Offer(_) => Kind::Offer,
            Body::OfferReply(_) => Kind::OfferReply,
            Body::Data(_) => Kind::Data,
            Body::Ack(_) => Kind::Ack,
            Body::Nak(_) => Kind::Nak,
            Body::Close(_) => Kind::Close,
            Body::Complete(_) => Kind::Complete,
            Body::Bye(_) => Kind::Bye,
            Body::Leave(_) => Kind::Leave,
            Body::RateNak(_) => Kind::RateNak,
            Body::RateReport(_) => Kind::RateReport,
            Body::RateSync(_) => Kind::RateSync,
        }
    }
}

/// A whole datagram: header and body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The common header.
    pub header: Header,
    /// The typed body.
    pub body: Body<'a>,
}

impl<'a> Packet<'a> {
    /// Parses a datagram. Any input gives a packet or an error, never a panic.
    pub fn decode(datagram: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(datagram);
        let (kind, header) = read_header(&mut r, Kind::from_u8)?;
        let body = match kind {
            Kind::Hello => {
                let receivers_wanted = r.u16()?;
                let protocol = ProtocolId::from_u8(r.u8()?)?;
                Body::Hello(Hello {
                    receivers_wanted,
                    protocol,
                })
            }
            Kind::Join => Body::Join(Join {
                receiver_id: r.u64()?,
                name: r.text()?,
            }),
            Kind::Welcome => {
                let receiver_id = r.u64()?;
                let rank = r.u16()?;
                let ip = Ipv4Addr::from(r.u32()?);
                let port = r.u16()?;
                let upstream = match (ip.is_unspecified(), port) {
                    (true, 0) => None,
                    (false, p) if p != 0 => Some(SocketAddrV4::new(ip, p)),
                    _ => return Err(DecodeError::BadField("welcome.upstream")),
                };
                Body::Welcome(Welcome {
                    receiver_id,
                    rank,
                    upstream,
                })
            }
            Kind::Offer => {
                let object_size = r.u64()?;
                let isn = Seq(r.u32()?);
                let payload_size = r.u16()?;
                if payload_size == 0 {
                    return Err(DecodeError::BadField("payload_size"));
                }
                let window = r.u32()?;
                if window == 0 {
                    return Err(DecodeError::BadField("window"));
                }
                let protocol = ProtocolId::from_u8(r.u8()?)?;
                let protocol_param = r.u16()?;
                let receivers = r.u16()?;
                let test_loss_ppm = r.u32()?;
                if test_loss_ppm > 1_000_000 {
                    return Err(DecodeError::BadField("test_loss_ppm"));
                }
                let name = r.text()?;
                Body::Offer(Offer {
                    object_size,
                    isn,
                    payload_size,
                    window,
                    protocol,
                    protocol_param,
                    receivers,
                    test_loss_ppm,
                    name,
                })
            }
            Kind::OfferReply => Body::OfferReply(OfferReply {
                status: Status::from_u8(r.u8()?)?,
                text: r.text()?,
            }),
            Kind::Data => {
                let seq = Seq(r.u32()?);
                let poll = r.u16()?;
                let copy = r.u16()?;
                Body::Data(Data {
                    seq,
                    poll,
                    copy,
                    payload: r.rest(),
                })
            }
            Kind::Ack | Kind::Nak => {
                let cumulative = Seq(r.u32()?);
                let echo = Seq(r.u32()?);
                // Bit 0: aggregate; bits 1–7: the echoed packet's copy.
                let bits = r.u8()?;
                let len = usize::from(r.u16()?);
                let fb = Feedback {
                    cumulative,
                    echo,
                    echo_copy: bits >> 1,
                    aggregate: bits & 1 == 1,
                    bitmap: r.bytes(len)?,
                };
                if kind == Kind::Ack {
                    Body::Ack(fb)
                } else {
                    Body::Nak(fb)
                }
            }
            Kind::Close => Body::Close(Close { hash: r.array()? }),
            Kind::Complete => Body::Complete(Complete {
                status: Status::from_u8(r.u8()?)?,
                hash: r.array()?,
                text: r.text()?,
            }),
            Kind::Bye => Body::Bye(Bye {
                aborted: match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(DecodeError::BadField("bye.aborted")),
                },
                text: r.text()?,
            }),
            Kind::Leave => Body::Leave(Leave { text: r.text()? }),
            Kind::RateNak => {
                let kind = match r.u8()? {
                    1 => RateNakKind::Exp,
                    2 => RateNakKind::Last,
                    _ => return Err(DecodeError::BadField("rate_nak.kind")),
                };
                Body::RateNak(RateNak {
                    kind,
                    seq: Seq(r.u32()?),
                })
            }
            Kind::RateReport => {
                let epoch = r.u32()?;
                let phase = match r.u8()? {
                    0 => RatePhase::Idle,
                    1 => RatePhase::Sending,
                    2 => RatePhase::Leaving,
                    _ => return Err(DecodeError::BadField("rate_report.phase")),
                };
                let spacing_ns = r.u64()?;
                if spacing_ns == 0 {
                    return Err(DecodeError::BadField("rate_report.spacing"));
                }
                Body::RateReport(RateReport {
                    epoch,
                    phase,
                    spacing_ns,
                    messages: r.u64()?,
                })
            }
            Kind::RateSync => {
                let epoch = r.u32()?;
                let op = r.u8()?;
                let spacing_ns = r.u64()?;
                let members = r.u16()?;
                let op = match (op, spacing_ns, members) {
                    (0, 0, 0) => RateSyncOp::Request,
                    (1, s, m) if s > 0 => RateSyncOp::Set {
                        spacing_ns: s,
                        members: m,
                    },
                    _ => return Err(DecodeError::BadField("rate_sync")),
                };
                Body::RateSync(RateSync { epoch, op })
            }
        };
        r.finish()?;
        Ok(Packet { header, body })
    }

    /// Writes the packet into `buf` and returns its length.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        let mut w = Writer::new(buf);
        write_header(&mut w, &self.header, self.body.kind())?;
        match &self.body {
            Body::Hello(h) => {
                w.u16(h.receivers_wanted)?;
                w.u8(h.protocol as u8)?;
            }
            Body::Join(j) => {
                w.u64(j.receiver_id)?;
                w.text(j.name)?;
            }
            Body::Welcome(x) => {
                w.u64(x.receiver_id)?;
                w.u16(x.rank)?;
                let up = x
                    .upstream
                    .unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
                if up.ip().is_unspecified() != (up.port() == 0) {
                    return Err(EncodeError::BadUpstream);
                }
                w.u32(u32::from(*up.ip()))?;
                w.u16(up.port())?;
            }
            Body::Offer(o) => {
                w.u64(o.object_size)?;
                w.u32(o.isn.0)?;
                w.u16(o.payload_size)?;
                w.u32(o.window)?;
                w.u8(o.protocol as u8)?;
                w.u16(o.protocol_param)?;
                w.u16(o.receivers)?;
                w.u32(o.test_loss_ppm)?;
                w.text(o.name)?;
            }
            Body::OfferReply(x) => {
                w.u8(x.status as u8)?;
                w.text(x.text)?;
            }
            Body::Data(d) => {
                w.u32(d.seq.0)?;
                w.u16(d.poll)?;
                w.u16(d.copy)?;
                w.bytes(d.payload)?;
            }
            Body::Ack(f) | Body::Nak(f) => {
                w.u32(f.cumulative.0)?;
                w.u32(f.echo.0)?;
                w.u8(u8::from(f.aggregate) | f.echo_copy.min(ECHO_COPY_MAX) << 1)?;
                let len = u16::try_from(f.bitmap.len()).map_err(|_| EncodeError::BitmapTooLong)?;
                w.u16(len)?;
                w.bytes(f.bitmap)?;
            }
            Body::Close(c) => w.bytes(&c.hash)?,
            Body::Complete(c) => {
                w.u8(c.status as u8)?;
                w.bytes(&c.hash)?;
                w.text(c.text)?;
            }
            Body::Bye(b) => {
                w.u8(u8::from(b.aborted))?;
                w.text(b.text)?;
            }
            Body::Leave(l) => w.text(l.text)?,
            Body::RateNak(n) => {
                w.u8(n.kind as u8)?;
                w.u32(n.seq.0)?;
            }
            Body::RateReport(x) => {
                w.u32(x.epoch)?;
                w.u8(x.phase as u8)?;
                w.u64(x.spacing_ns.max(1))?;
                w.u64(x.messages)?;
            }
            Body::RateSync(x) => {
                w.u32(x.epoch)?;
                let (op, spacing_ns, members) = match x.op {
                    RateSyncOp::Request => (0, 0, 0),
                    RateSyncOp::Set {
                        spacing_ns,
                        members,
                    } => (1, spacing_ns.max(1), members),
                };
                w.u8(op)?;
                w.u64(spacing_ns)?;
                w.u16(members)?;
            }
        }
        Ok(w.len())
    }
}

/// Reads the 16-byte header every rmcast datagram starts with (both
/// engines' kinds: `kind` maps the type byte, refusing the other engine's).
/// Until authentication lands, set flags and a non-zero key epoch are refused.
pub(crate) fn read_header<K>(
    r: &mut Reader<'_>,
    kind: impl FnOnce(u8) -> Result<K, DecodeError>,
) -> Result<(K, Header), DecodeError> {
    if r.array::<2>().map_err(|_| DecodeError::BadMagic)? != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    let version = r.u8()?;
    if version != VERSION {
        return Err(DecodeError::BadVersion(version));
    }
    let kind = kind(r.u8()?)?;
    let flags = r.u8()?;
    if flags != 0 {
        return Err(DecodeError::UnsupportedFlags(flags));
    }
    let key_epoch = r.u8()?;
    if key_epoch != 0 {
        return Err(DecodeError::BadField("key_epoch"));
    }
    let header = Header {
        flags,
        key_epoch,
        rank: r.u16()?,
        session: SessionId(r.u64()?),
    };
    Ok((kind, header))
}

/// Writes the 16-byte header with the type byte `kind`.
pub(crate) fn write_header_byte(
    w: &mut Writer<'_>,
    h: &Header,
    kind: u8,
) -> Result<(), EncodeError> {
    w.bytes(&MAGIC)?;
    w.u8(VERSION)?;
    w.u8(kind)?;
    w.u8(h.flags)?;
    w.u8(h.key_epoch)?;
    w.u16(h.rank)?;
    w.u64(h.session.0)
}

fn write_header(w: &mut Writer<'_>, h: &Header, kind: Kind) -> Result<(), EncodeError> {
    write_header_byte(w, h, kind as u8)
}

/// Writes a data packet's header into `buf[..DATA_HEADER_LEN]`, leaving the
/// payload to the caller (so it can be read straight from the object into the
/// send buffer, one copy in all).
pub fn encode_data_header(
    buf: &mut [u8],
    header: &Header,
    seq: Seq,
    poll: u16,
    copy: u16,
) -> Result<usize, EncodeError> {
    let mut w = Writer::new(buf);
    write_header(&mut w, header, Kind::Data)?;
    w.u32(seq.0)?;
    w.u16(poll)?;
    w.u16(copy)?;
    debug_assert_eq!(w.len(), DATA_HEADER_LEN);
    Ok(w.len())
}

/// Reads only the header of a datagram (for cheap filtering by session).
pub fn peek_header(datagram: &[u8]) -> Result<(Kind, Header), DecodeError> {
    let head = datagram.get(..HEADER_LEN).ok_or(DecodeError::Truncated)?;
    if head[..2] != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    if head[2] != VERSION {
        return Err(DecodeError::BadVersion(head[2]));
    }
    let kind = Kind::from_u8(head[3])?;
    let mut r = Reader::new(&head[4..]);
    let header = Header {
        flags: r.u8()?,
        key_epoch: r.u8()?,
        rank: r.u16()?,
        session: SessionId(r.u64()?),
    };
    if header.flags != 0 {
        return Err(DecodeError::UnsupportedFlags(header.flags));
    }
    if header.key_epoch != 0 {
        return Err(DecodeError::BadField("key_epoch"));
    }
    Ok((kind, header))
}

#[cfg(test)]
mod tests;
