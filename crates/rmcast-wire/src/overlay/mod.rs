//! The TCP overlay's control messages and their framing (`tcp-*` protocols).
//!
//! Without IP multicast, `rmcast::overlay` relays the object along a tree
//! of TCP connections. Every control message is one frame: an 8-byte
//! header, then the payload.
//!
//! ```text
//! 0      2        3      4              8
//! +------+--------+------+--------------+----------------+
//! | "RO" | ver 4  | type | payload len  | payload ...    |
//! +------+--------+------+--------------+----------------+
//! ```
//!
//! Integers are big-endian. Strings are a `u16` length and UTF-8 bytes;
//! socket addresses a family byte (4 or 6), the address bytes and a `u16`
//! port. [`Msg::parse_header`] refuses payloads over [`MAX_PAYLOAD`] before
//! anyone allocates for them, and [`Msg::decode`] turns any byte string into
//! a message or a [`DecodeError`], never a panic; what decodes re-encodes to
//! the same bytes. Messages own their strings and peer lists: they are few
//! and small, and outlive the read buffer. Reading frames from a socket is
//! the runtime's business (`rmcast::overlay`), not this module's.
//!
//! Data connections start with one [`Msg::DataHello`] frame and then carry
//! the raw bytes of the edge's segments in index order: both ends know the
//! segment size, the object size and the edge's [`SegmentSet`], so no
//! per-segment header is needed (TCP orders and checksums; BLAKE3 verifies
//! end to end).

mod codec;

use std::net::SocketAddr;

use crate::enums::wire_enum;
use crate::{HASH_LEN, Status};

/// First two bytes of every frame.
pub const MAGIC: [u8; 2] = *b"RO";
/// First two bytes of a sealed frame: a keyed overlay wraps every frame
/// and segment in one (`rmcast_proto::security::frames`). Listed here so
/// that a plain reader can tell "the peer has a group key" from garbage.
pub const SEALED_MAGIC: [u8; 2] = *b"RS";
/// Version this code speaks (2: the object's hash left `Assign` for its own
/// `Hash` message, sent once the sender has it; 3: segment sets in
/// `DataHello`; 4: `DataHello` says where its stream starts, and `Detach`
/// and `Orphaned` re-attach the children of a node that failed).
pub const VERSION: u8 = 5;
/// Bytes of the frame header.
pub const HEADER_LEN: usize = 8;
/// Largest payload accepted (an assignment with many children fits).
pub const MAX_PAYLOAD: usize = 1 << 20;
/// Longest receiver name on the wire, in bytes (longer names are cut at a
/// character boundary when encoded, and refused when decoded).
pub const MAX_NAME: usize = 255;

/// Why bytes are not a valid frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Does not start with `RO`: not an overlay frame.
    #[error("not an rmcast overlay frame (bad magic)")]
    Magic,
    /// Starts with [`SEALED_MAGIC`]: the peer seals its frames under a
    /// group key, and this side reads plain ones.
    #[error(
        "the peer seals its frames under a group key, and this side has none (give both --key FILE)"
    )]
    Sealed,
    /// An overlay version this build does not speak.
    #[error("unsupported overlay protocol version {0}")]
    Version(u8),
    /// Message type byte not known.
    #[error("unknown message type {0}")]
    Type(u8),
    /// The header announces a payload over [`MAX_PAYLOAD`].
    #[error("payload of {0} bytes is too long")]
    TooLong(usize),
    /// Shorter than its header or payload says it must be.
    #[error("frame is truncated")]
    Truncated,
    /// A field holds a value outside its range.
    #[error("bad field: {0}")]
    BadField(&'static str),
    /// Bytes left over after the message.
    #[error("trailing bytes after the message")]
    Trailing,
}

/// The shared readers report in the datagram families' terms; say the
/// same things in the overlay's.
impl From<crate::DecodeError> for DecodeError {
    fn from(e: crate::DecodeError) -> Self {
        match e {
            crate::DecodeError::Truncated => Self::Truncated,
            crate::DecodeError::TrailingBytes => Self::Trailing,
            crate::DecodeError::BadText => Self::BadField("string is not UTF-8"),
            crate::DecodeError::BadField(f) => Self::BadField(f),
            crate::DecodeError::BadMagic => Self::Magic,
            crate::DecodeError::BadVersion(v) => Self::Version(v),
            crate::DecodeError::UnknownKind(t) => Self::Type(t),
            crate::DecodeError::UnsupportedFlags(_) => Self::BadField("flags"),
        }
    }
}

wire_enum! {
    /// Message types; the value is the type byte of the frame header.
    pub enum MsgKind (DecodeError, DecodeError::Type) {
        /// Receiver → sender: join.
        Register = 1,
        /// Sender → receiver: rank, position and object.
        Assign = 2,
        /// Receiver → sender: storage prepared or refused.
        Ready = 3,
        /// Sender → receivers: open data connections now.
        Start = 4,
        /// Receiver → sender: bytes stored (its heartbeat too).
        Progress = 5,
        /// Sender → receiver: still alive.
        Heartbeat = 6,
        /// Receiver → sender: verified and done, or why not.
        Complete = 7,
        /// Sender → receiver: discard the partial file.
        Abort = 8,
        /// Parent → child: first frame of a data connection.
        DataHello = 9,
        /// Sender → receiver: the object's hash.
        Hash = 10,
        /// Sender → receiver: a node is out of the session; drop its edges.
        Detach = 11,
        /// Receiver → sender: an edge broke; where its stream stands.
        Orphaned = 12,
        /// Sender → receiver (hybrid session): listen for the multicast
        /// session first.
        Probe = 13,
        /// Receiver → sender: it did not hear the multicast session.
        Unheard = 14,
        /// Sender → receiver: register with the TCP overlay at this address.
        Redirect = 15,
        /// Receiver → sender (`--laggard tcp`): the first frame of a TCP
        /// catch-up.
        CatchUp = 16,
        /// Sender → receiver (hybrid session): the whole session's outcome,
        /// on the lobby connection.
        Verdict = 17,
    }
}

wire_enum! {
    /// The shape byte of an `Assign` (the fanout travels beside it).
    pub enum ShapeCode (DecodeError, |_| DecodeError::BadField("shape")) {
        /// [`OverlayShape::Direct`].
        Direct = 1,
        /// [`OverlayShape::Tree`].
        Tree = 2,
        /// [`OverlayShape::Binomial`].
        Binomial = 3,
        /// [`OverlayShape::Chain`].
        Chain = 4,
        /// [`OverlayShape::Bintree`].
        Bintree = 5,
        /// [`OverlayShape::Pipeline`].
        Pipeline = 6,
    }
}

wire_enum! {
    /// The family byte of a socket address.
    pub enum AddrFamily (DecodeError, |_| DecodeError::BadField("address family")) {
        /// IPv4: 4 address bytes follow.
        V4 = 4,
        /// IPv6: 16 address bytes follow.
        V6 = 6,
    }
}

/// Which segments an edge carries, in increasing index order.
///
/// The chain and the trees send every segment, the segmented bintree the
/// even ones down one tree and the odd ones down the other, and the
/// binomial pipeline (`tcp-pipeline`) cuts the object into residue classes
/// modulo `2 log2 N` at most, one or a few per edge. A set is canonical:
/// [`SegmentSet::residues`] builds every set, reduced to its smallest
/// period, so two equal sets compare equal and encode alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SegmentSet {
    /// Every segment.
    All,
    /// Segments 0, 2, 4, …
    Even,
    /// Segments 1, 3, 5, …
    Odd,
    /// The segments whose index modulo `modulus` is a set bit of
    /// `residues`; only [`SegmentSet::residues`] builds one (a period of
    /// 3 to [`SegmentSet::MAX_MODULUS`], not one of the sets above).
    Residues {
        /// The period, 3 ..= [`SegmentSet::MAX_MODULUS`].
        modulus: u8,
        /// Bit `r` set: segments `k` with `k % modulus == r` belong.
        residues: u32,
    },
}

/// The set byte of a peer in an `Assign`; [`SET_RESIDUES`] is followed by
/// the modulus (`u8`) and the residue mask (`u32`).
pub(crate) const SET_ALL: u8 = 0;
pub(crate) const SET_EVEN: u8 = 1;
pub(crate) const SET_ODD: u8 = 2;
pub(crate) const SET_RESIDUES: u8 = 3;

impl SegmentSet {
    /// Largest period a set may have.
    pub const MAX_MODULUS: u8 = 32;

    /// The set of segments whose index modulo `modulus` is a set bit of
    /// `residues`, in its canonical form (reduced to its smallest period:
    /// `residues(4, 0b0101)` is [`SegmentSet::Even`]). `None` when empty,
    /// when `modulus` is 0 or over [`SegmentSet::MAX_MODULUS`], or when a
    /// bit at or above `modulus` is set.
    #[must_use]
    pub fn residues(modulus: u8, residues: u32) -> Option<Self> {
        if modulus == 0 || modulus > Self::MAX_MODULUS || residues == 0 {
            return None;
        }
        let m = u32::from(modulus);
        if m < 32 && residues >> m != 0 {
            return None;
        }
        let bit = |r: u32| residues >> r & 1;
        let period = (1..=m)
            .find(|&d| m % d == 0 && (0..m).all(|r| bit(r) == bit(r % d)))
            .unwrap_or(m);
        let mask = if period == 32 {
            residues
        } else {
            residues & ((1 << period) - 1)
        };
        Some(match (period, mask) {
            (1, _) => Self::All,
            (2, 1) => Self::Even,
            (2, 2) => Self::Odd,
            _ => Self::Residues {
                modulus: period as u8,
                residues: mask,
            },
        })
    }

    /// The period and residue mask of the set (`All` is `(1, 1)`).
    #[must_use]
    pub fn classes(self) -> (u32, u32) {
        match self {
            Self::All => (1, 1),
            Self::Even => (2, 1),
            Self::Odd => (2, 2),
            Self::Residues { modulus, residues } => (u32::from(modulus), residues),
        }
    }

    /// True when segment `index` belongs to the set.
    #[must_use]
    pub fn contains(self, index: u64) -> bool {
        let (m, mask) = self.classes();
        mask >> (index % u64::from(m)) & 1 == 1
    }

    /// How many of `total` segments belong to the set.
    #[must_use]
    pub fn count(self, total: u64) -> u64 {
        let (m, mask) = self.classes();
        let m = u64::from(m);
        let rest = (total % m) as u32;
        let below = if rest == 0 {
            0
        } else {
            (mask & (u32::MAX >> (32 - rest))).count_ones()
        };
        total / m * u64::from(mask.count_ones()) + u64::from(below)
    }

    /// The index of the `i`-th segment of the set.
    #[must_use]
    pub fn nth(self, i: u64) -> u64 {
        let (m, mut mask) = self.classes();
        let per = u64::from(mask.count_ones());
        for _ in 0..i % per {
            mask &= mask - 1;
        }
        i / per * u64::from(m) + u64::from(mask.trailing_zeros())
    }

    /// True when every segment of `self` is in `other`.
    #[must_use]
    pub fn is_subset_of(self, other: Self) -> bool {
        let period = Self::common_period([self, other], u64::MAX).expect("no limit");
        (0..period).all(|k| !self.contains(k) || other.contains(k))
    }

    /// The least common multiple of the sets' periods (1 for none): segment
    /// `k` is in each set exactly when segment `k % period` is. `None` once
    /// it exceeds `max` (periods up to 32 keep it below 2^47).
    #[must_use]
    pub fn common_period(sets: impl IntoIterator<Item = Self>, max: u64) -> Option<u64> {
        let mut period = 1u64;
        for set in sets {
            let m = u64::from(set.classes().0);
            period = period / gcd(period, m) * m;
            if period > max {
                return None;
            }
        }
        Some(period)
    }

    /// Bytes the set takes in an `Assign`.
    pub(crate) fn wire_len(self) -> usize {
        match self {
            Self::Residues { .. } => 1 + 1 + 4,
            _ => 1,
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The overlay a transfer runs over (see `rmcast::overlay::topology`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OverlayShape {
    /// The sender writes the object to each receiver over its own connection.
    Direct,
    /// Store-and-forward tree of constant fanout with the sender at the root.
    Tree {
        /// Children per node (at least 1).
        fanout: u32,
    },
    /// Store-and-forward binomial tree.
    Binomial,
    /// Pipelined chain through all receivers (segmented seqtree).
    Chain,
    /// Two pipelined binary trees fed alternate segments (segmented bintree).
    Bintree,
    /// The binomial pipeline: every node sends and receives at once from
    /// the first segments, along a hypercube (`tcp-pipeline`).
    Pipeline,
}

impl OverlayShape {
    /// The protocol name as the CLI and reports spell it, e.g. `"tcp-bintree"`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Direct => "tcp-direct",
            Self::Tree { .. } => "tcp-tree",
            Self::Binomial => "tcp-binomial",
            Self::Chain => "tcp-chain",
            Self::Bintree => "tcp-bintree",
            Self::Pipeline => "tcp-pipeline",
        }
    }

    /// The shape byte and the fanout as an `Assign` carries them (the
    /// fanout is 0 for every shape but the tree).
    #[must_use]
    pub fn code(self) -> (u8, u32) {
        let (code, fanout) = match self {
            Self::Direct => (ShapeCode::Direct, 0),
            Self::Tree { fanout } => (ShapeCode::Tree, fanout),
            Self::Binomial => (ShapeCode::Binomial, 0),
            Self::Chain => (ShapeCode::Chain, 0),
            Self::Bintree => (ShapeCode::Bintree, 0),
            Self::Pipeline => (ShapeCode::Pipeline, 0),
        };
        (code.to_u8(), fanout)
    }

    /// The shape of a shape byte and fanout; `None` for an unknown byte, a
    /// tree of fanout 0, or a fanout on a shape that has none (so that
    /// every accepted pair is the one [`OverlayShape::code`] writes).
    #[must_use]
    pub fn from_code(code: u8, fanout: u32) -> Option<Self> {
        let shape = match ShapeCode::from_u8(code).ok()? {
            ShapeCode::Tree => return (fanout > 0).then_some(Self::Tree { fanout }),
            ShapeCode::Direct => Self::Direct,
            ShapeCode::Binomial => Self::Binomial,
            ShapeCode::Chain => Self::Chain,
            ShapeCode::Bintree => Self::Bintree,
            ShapeCode::Pipeline => Self::Pipeline,
        };
        (fanout == 0).then_some(shape)
    }
}

impl std::fmt::Display for OverlayShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tree { fanout } => write!(f, "tcp-tree (fanout {fanout})"),
            other => f.write_str(other.name()),
        }
    }
}

/// A peer as a node must know it: who, where, and which segments flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Its rank: 0 the sender, `1..=n` the receivers.
    pub rank: u16,
    /// Its name for reports (at most [`MAX_NAME`] bytes on the wire).
    pub name: String,
    /// Where it listens for data (or the sender's address).
    pub addr: SocketAddr,
    /// The segments that flow on the edge to or from it.
    pub segments: SegmentSet,
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

/// Everything a receiver must know to take part (the `Assign` message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// Session id: random per transfer, echoed in every `DataHello`.
    pub session: u64,
    /// The receiver's rank (`1..=receivers`).
    pub rank: u16,
    /// How many receivers the session has.
    pub receivers: u16,
    /// The overlay's shape.
    pub shape: OverlayShape,
    /// Bytes per segment (at least 1).
    pub segment_size: u32,
    /// Object length in bytes.
    pub size: u64,
    /// File name (a relative path, checked by the receiver).
    pub name: String,
    /// Silence after which a peer is declared dead, in milliseconds.
    pub inactivity_ms: u32,
    /// Where this receiver's segments come from.
    pub parents: Vec<Peer>,
    /// Where it sends segments, in the order it serves them.
    pub children: Vec<Peer>,
}

/// One control message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Receiver → sender: join, with the address children-data arrives on.
    Register {
        /// Its name for reports (at most [`MAX_NAME`] bytes on the wire).
        name: String,
        /// Where it listens for data connections.
        data_addr: SocketAddr,
    },
    /// Sender → receiver: rank, topology position and object.
    Assign(Box<Assignment>),
    /// Receiver → sender: storage prepared (`Ok`) or refused.
    Ready {
        /// `Ok`, or why not.
        status: Status,
        /// Details for a human.
        text: String,
    },
    /// Sender → receivers: everyone is ready; open data connections.
    Start,
    /// Receiver → sender: bytes stored so far (also its heartbeat).
    Progress {
        /// Bytes stored.
        bytes: u64,
    },
    /// Sender → receiver: still alive.
    Heartbeat,
    /// Receiver → sender: verified and done forwarding, or why not.
    Complete {
        /// `Ok`, or why not.
        status: Status,
        /// Details for a human.
        text: String,
    },
    /// Sender → receiver: the transfer failed; discard the partial file.
    Abort {
        /// Why, for a human.
        text: String,
    },
    /// Parent → child, first frame of a data connection.
    DataHello {
        /// The session's id.
        session: u64,
        /// The parent's rank.
        from: u16,
        /// The child's rank.
        to: u16,
        /// The segments the connection carries: the edge's, which tells
        /// apart two edges between the same two nodes (the pipeline's
        /// twins exchange one class per connection).
        segments: SegmentSet,
        /// Position in the edge's set of the first segment the connection
        /// carries: 0 for the edges of the assignment; a node re-attaching
        /// an orphaned edge starts where the child's stream broke (the
        /// child's [`Msg::Orphaned`] `have`).
        first: u64,
    },
    /// Sender → receiver: the object's BLAKE3 hash. The sender hashes while
    /// the session forms and data flows, and sends it once, when it has it
    /// and the receiver has its assignment.
    Hash {
        /// The hash.
        hash: [u8; HASH_LEN],
        /// The sender's Ed25519 signature of the object (`rmcast send
        /// --sign`), over [`crate::signed_object_message`] of this hash,
        /// the object's size and name; `None`: unsigned. On the wire: a
        /// flag byte (0 or 1), then the 64 bytes when 1.
        signature: Option<[u8; crate::SIGNATURE_LEN]>,
    },
    /// Sender → receiver: the node of `rank` failed and is out of the
    /// session. Close every data edge from it that is not complete and
    /// answer each with [`Msg::Orphaned`]; the sender re-attaches them.
    Detach {
        /// The failed node's rank.
        rank: u16,
    },
    /// Receiver → sender: the data edge from `from` carrying `segments`
    /// broke (or was detached) after `have` of its segments arrived whole;
    /// the receiver waits to be re-attached from segment `have` of the set.
    Orphaned {
        /// The parent the edge came from.
        from: u16,
        /// The edge's segment set.
        segments: SegmentSet,
        /// Segments of the set that arrived whole, in set order.
        have: u64,
    },
    /// Sender → receiver, answering `Register` in a hybrid session
    /// (multicast for those that hear it, a TCP overlay for the rest): join
    /// `group` and listen for the multicast session `session` for
    /// `wait_ms`. A receiver that hears it takes the object over multicast
    /// and closes this connection; one that does not says [`Msg::Unheard`].
    Probe {
        /// The session's multicast group and port.
        group: SocketAddr,
        /// The multicast session's id (its `Hello`s carry it).
        session: u64,
        /// How long to listen before giving up, ms.
        wait_ms: u32,
    },
    /// Receiver → sender: it did not hear the multicast session of the
    /// [`Msg::Probe`]; it waits on this connection for a [`Msg::Redirect`]
    /// (or an [`Msg::Abort`]).
    Unheard,
    /// Sender → receiver that said [`Msg::Unheard`]: the TCP overlay of the
    /// session's receivers that cannot hear the group takes registrations
    /// at `control`; register there as with any overlay sender.
    Redirect {
        /// The overlay sender's control address.
        control: SocketAddr,
    },
    /// Receiver → sender, on the catch-up port a multicast session's `Move`
    /// named (`rmcast send --laggard tcp`): send the object from byte
    /// `from` on. The sender answers with the bytes (in data frames when
    /// sealed), then a [`Msg::Hash`]; the receiver ends with a
    /// [`Msg::Complete`].
    CatchUp {
        /// The receiver's rank in the multicast session.
        rank: u16,
        /// The bytes it holds from the start of the object (it has them
        /// hashed already).
        from: u64,
    },
    /// Sender → receiver, on a hybrid session's lobby connection once both
    /// halves are over: whether every receiver of the session, multicast
    /// and TCP, verified its copy. The lobby keeps every registered
    /// receiver's connection open until then (heartbeating it), whichever
    /// half served it, so each can exit with the group's outcome (`rmcast
    /// bcast`); the connection closes after it.
    Verdict {
        /// Every receiver verified.
        ok: bool,
        /// Why not (empty when `ok`), for a human.
        text: String,
    },
}

/// One of every overlay message, with awkward values (an empty name, IPv6,
/// the largest progress): for the tests of this crate and of the drivers
/// that frame these messages over a stream.
#[must_use]
pub fn sample_messages() -> Vec<Msg> {
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
            segments: SegmentSet::Odd,
            first: 0,
        },
        Msg::DataHello {
            session: 9,
            from: 0,
            to: 2,
            segments: SegmentSet::All,
            first: u64::MAX,
        },
        Msg::Detach { rank: 65535 },
        Msg::Orphaned {
            from: 3,
            segments: SegmentSet::Even,
            have: 1234,
        },
        Msg::Hash {
            hash: [7; 32],
            signature: None,
        },
        Msg::Hash {
            hash: [8; 32],
            signature: Some([9; 64]),
        },
        Msg::Probe {
            group: "239.77.0.1:7700".parse().unwrap(),
            session: u64::MAX,
            wait_ms: 500,
        },
        Msg::Unheard,
        Msg::CatchUp {
            rank: 3,
            from: u64::MAX,
        },
        Msg::Redirect {
            control: "[::1]:65535".parse().unwrap(),
        },
        Msg::Verdict {
            ok: true,
            text: String::new(),
        },
        Msg::Verdict {
            ok: false,
            text: "rank 7 \"h7\" died".into(),
        },
    ]
}

#[cfg(test)]
mod tests;
