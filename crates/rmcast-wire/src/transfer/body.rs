//! The object-transfer bodies, one struct per packet type, borrowing from
//! the datagram they were decoded from.

use std::net::SocketAddrV4;

#[cfg(doc)]
use super::ECHO_COPY_MAX;
use super::rate::{RateNak, RateReport, RateSync};
use super::{FEEDBACK_BITMAP_MAX, HASH_LEN, Kind, ProtocolId, Status};
use crate::{Header, Seq};
#[cfg(doc)]
use crate::{POLL_ALL, POLL_NONE, RANK_UNASSIGNED};

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

/// `Welcomes`: the sender's answers to many `Join`s in one multicast
/// datagram (groups over 1,000 receivers, whose joins come spread over a
/// slot each): every receiver that joined looks for its own identity. Each
/// entry is a [`Welcome`] in its unicast layout, [`WELCOMES_ENTRY_LEN`]
/// bytes; a `u8` count (1 ..= [`WELCOMES_MAX`]) precedes them on the wire.
/// Checked by the decoder (every entry's upstream as a `Welcome`'s); write
/// entries with [`encode_welcome_entry`], read them with
/// [`Welcomes::entries`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Welcomes<'a> {
    /// The entries, back to back.
    pub entries: &'a [u8],
}

/// Bytes of one entry of a `Welcomes`: a `Welcome`'s body.
pub const WELCOMES_ENTRY_LEN: usize = 16;

/// Most entries one `Welcomes` carries: its datagram (1,041 bytes, 1,081
/// sealed) stays inside any LAN's MTU.
pub const WELCOMES_MAX: usize = 64;

impl Welcomes<'_> {
    /// The entries, in order. An entry whose upstream is malformed (only
    /// possible in a body not built by the decoder) is skipped.
    pub fn entries(&self) -> impl Iterator<Item = Welcome> + '_ {
        (self.entries.chunks_exact(WELCOMES_ENTRY_LEN))
            .filter_map(|c| Welcome::from_bytes(c.try_into().expect("whole entries")).ok())
    }
}

impl Welcome {
    /// Its body: the 16 bytes of a `Welcome`, and of each `Welcomes` entry.
    pub(crate) fn to_bytes(self) -> Result<[u8; WELCOMES_ENTRY_LEN], crate::EncodeError> {
        let up = (self.upstream).unwrap_or(SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0));
        if up.ip().is_unspecified() != (up.port() == 0) {
            return Err(crate::EncodeError::BadUpstream);
        }
        let mut b = [0u8; WELCOMES_ENTRY_LEN];
        b[0..8].copy_from_slice(&self.receiver_id.to_be_bytes());
        b[8..10].copy_from_slice(&self.rank.to_be_bytes());
        b[10..14].copy_from_slice(&up.ip().octets());
        b[14..16].copy_from_slice(&up.port().to_be_bytes());
        Ok(b)
    }

    /// Reads a body written by [`Welcome::to_bytes`]: an upstream of
    /// `0.0.0.0:0` is none, one with only one of IP and port zero is
    /// `BadField("welcome.upstream")`.
    pub(crate) fn from_bytes(b: &[u8; WELCOMES_ENTRY_LEN]) -> Result<Self, crate::DecodeError> {
        let ip = std::net::Ipv4Addr::new(b[10], b[11], b[12], b[13]);
        let upstream = match (ip.is_unspecified(), u16::from_be_bytes([b[14], b[15]])) {
            (true, 0) => None,
            (false, p) if p != 0 => Some(SocketAddrV4::new(ip, p)),
            _ => return Err(crate::DecodeError::BadField("welcome.upstream")),
        };
        Ok(Self {
            receiver_id: u64::from_be_bytes(b[0..8].try_into().expect("8 bytes")),
            rank: u16::from_be_bytes([b[8], b[9]]),
            upstream,
        })
    }
}

/// Appends `w` to `out` in a `Welcomes` entry's layout (a `Welcome`'s).
pub fn encode_welcome_entry(w: &Welcome, out: &mut Vec<u8>) -> Result<(), crate::EncodeError> {
    out.extend_from_slice(&w.to_bytes()?);
    Ok(())
}

/// Whether `bytes` are a well-formed `Welcomes` list: 1 ..= [`WELCOMES_MAX`]
/// whole entries, each upstream none or a full address.
pub(crate) fn welcomes_valid(bytes: &[u8]) -> bool {
    let n = bytes.len() / WELCOMES_ENTRY_LEN;
    bytes.len().is_multiple_of(WELCOMES_ENTRY_LEN)
        && (1..=WELCOMES_MAX).contains(&n)
        && (bytes.chunks_exact(WELCOMES_ENTRY_LEN))
            .all(|c| Welcome::from_bytes(c.try_into().expect("whole entries")).is_ok())
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
    /// Block FEC over the data packets (`rmcast send --fec K:P`), or
    /// `None` (encoded as three zeros): repair by retransmission only.
    pub fec: Option<FecShape>,
    /// File name (a relative path, checked by the receiver).
    pub name: &'a str,
}

/// A session's block FEC (issue 20). The data packets are dealt to blocks
/// in *interleaving groups* of K·D packets: packet `i` belongs to block
/// `⌊i / (K·D)⌋·D + i mod D`, so block `b` holds every D-th packet of its
/// group, starting at `⌊b / D⌋·K·D + b mod D` ([`FecShape::members`]; the
/// last group's blocks are shorter). With D = 1 (no interleaving) data
/// packets `b·K .. b·K + K` form block `b`; with D > 1 a burst of up to D
/// consecutive losses costs each block at most one packet. A block's
/// parity packets come from one Reed–Solomon code for its data packets and
/// `space` parity packets (over GF(2⁸) while the two make at most 256,
/// else over GF(2¹⁶); docs/wire-format.md, `Parity`), so parity packet `i`
/// of a block is the same whenever it is sent. A receiver that holds any
/// `K` of a block's packets rebuilds its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FecShape {
    /// K: data packets per block, 1..=1024.
    pub data: u16,
    /// P: parity packets sent with every block before anyone asks (0 to
    /// [`FecShape::space`]).
    pub proactive: u16,
    /// Parity packets the code makes per block (1..=1024): the most a
    /// block can be repaired with before the sender resends its data.
    pub space: u16,
    /// D: blocks interleaved in one group, 1..=[`FEC_MAX_DEPTH`] (1: none).
    pub depth: u16,
}

/// Most data packets in a FEC block, and most parity packets of one.
pub const FEC_MAX_BLOCK: u16 = 1024;

/// Most blocks one interleaving group deals its packets to.
pub const FEC_MAX_DEPTH: u16 = 64;

/// The data packets of one FEC block: `count` packets from `first`, every
/// `step`-th ([`FecShape::members`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockMembers {
    /// Index of the block's first data packet.
    pub first: u32,
    /// Distance between two of its packets: the interleaving depth D.
    pub step: u32,
    /// Its packets (0 for a block past the object's end).
    pub count: u32,
}

impl BlockMembers {
    /// Index of the block's last data packet (`first` when it has none).
    #[must_use]
    pub fn last(&self) -> u32 {
        self.first + self.count.saturating_sub(1) * self.step
    }

    /// Index of its `j`-th packet (`j` below `count`).
    #[must_use]
    pub fn at(&self, j: u32) -> u32 {
        self.first + j * self.step
    }

    /// Its packets' indexes, in order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + use<> {
        let (first, step) = (self.first, self.step);
        (0..self.count).map(move |j| first + j * step)
    }

    /// Its packets at or after `from` and before `to`, in order.
    pub fn within(&self, from: u32, to: u32) -> impl Iterator<Item = u32> + use<> {
        self.iter()
            .skip_while(move |&i| i < from)
            .take_while(move |&i| i < to)
    }
}

impl FecShape {
    /// K data and P proactive parity packets per block, with room for K
    /// parity packets in all (at least P, at most [`FEC_MAX_BLOCK`]): a
    /// block can be repaired even where a receiver lost all of it. (K up
    /// to 128 keeps K + space within 256 and the GF(2⁸) code, whose
    /// decoding costs what a block lacks: 6 µs for one lost packet of 64
    /// on this project's VM, against the GF(2¹⁶) code's fixed 0.2 ms.) No
    /// interleaving: see [`FecShape::with_depth`].
    #[must_use]
    pub fn new(data: u16, proactive: u16) -> Self {
        Self {
            data,
            proactive,
            space: data.max(proactive).min(FEC_MAX_BLOCK),
            depth: 1,
        }
    }

    /// The same blocks, `depth` of them interleaved per group.
    #[must_use]
    pub fn with_depth(self, depth: u16) -> Self {
        Self { depth, ..self }
    }

    /// Whether the four fields are within the code's limits.
    #[must_use]
    pub fn is_valid(&self) -> bool {
        (1..=FEC_MAX_BLOCK).contains(&self.data)
            && (1..=FEC_MAX_BLOCK).contains(&self.space)
            && self.proactive <= self.space
            && (1..=FEC_MAX_DEPTH).contains(&self.depth)
    }

    /// Data packets in one interleaving group: K·D.
    #[must_use]
    pub fn group_len(&self) -> u32 {
        u32::from(self.data.max(1)) * u32::from(self.depth.max(1))
    }

    /// The block data packet `index` belongs to.
    #[must_use]
    pub fn block_of(&self, index: u32) -> u32 {
        let d = u32::from(self.depth.max(1));
        (index / self.group_len()).saturating_mul(d) + index % d
    }

    /// The first block of data packet `index`'s interleaving group: the
    /// blocks that can hold packets at or after `index` start there.
    #[must_use]
    pub fn group_first_block(&self, index: u32) -> u32 {
        (index / self.group_len()).saturating_mul(u32::from(self.depth.max(1)))
    }

    /// Where data packet `index` sits in its block (0 to K − 1): the
    /// position the code gives it.
    #[must_use]
    pub fn position(&self, index: u32) -> u16 {
        // Below K: the offset in the group is below K·D.
        ((index % self.group_len()) / u32::from(self.depth.max(1))) as u16
    }

    /// [`Self::block_of`] and [`Self::position`] at once, with one
    /// division where the blocks are not interleaved (a receiver asks this
    /// for every data packet it stores).
    #[must_use]
    pub fn locate(&self, index: u32) -> (u32, u16) {
        let g = self.group_len();
        let (group, offset) = (index / g, index % g);
        match u32::from(self.depth) {
            0 | 1 => (group, offset as u16),
            d => (group.saturating_mul(d) + offset % d, (offset / d) as u16),
        }
    }

    /// The data packets of block `block` in an object of `packets`.
    #[must_use]
    pub fn members(&self, block: u32, packets: u32) -> BlockMembers {
        let d = u64::from(self.depth.max(1));
        let b = u64::from(block);
        let first = (b / d) * u64::from(self.group_len()) + b % d;
        let count = match u64::from(packets).checked_sub(first) {
            Some(rest) if rest > 0 => rest.div_ceil(d).min(u64::from(self.data)),
            _ => 0,
        };
        BlockMembers {
            first: u32::try_from(first).unwrap_or(u32::MAX),
            step: d as u32,
            count: count as u32,
        }
    }

    /// Blocks in an object of `packets` data packets.
    #[must_use]
    pub fn blocks(&self, packets: u32) -> u32 {
        let g = self.group_len();
        let d = u32::from(self.depth.max(1));
        (packets / g) * d + (packets % g).min(d)
    }

    /// The setting that names this shape (`"K:P"`, or `"K:P:D"` when
    /// interleaved), as [`FecShape::from_setting`] reads it.
    #[must_use]
    pub fn setting(&self) -> String {
        if self.depth > 1 {
            format!("{}:{}:{}", self.data, self.proactive, self.depth)
        } else {
            format!("{}:{}", self.data, self.proactive)
        }
    }

    /// The user's setting `"K:P"` or `"K:P:D"` (`rmcast send --fec`,
    /// Python's `fec=`): K data packets per block, P proactive parity
    /// packets, D blocks interleaved (1 when left out); `"off"` is `None`.
    /// The error says what is wrong, for a human.
    pub fn from_setting(s: &str) -> Result<Option<Self>, String> {
        if s.eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        let mut parts = s.split(':');
        let (Some(k), Some(p), d, None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(format!(
                "{s:?} is not K:P or K:P:D (e.g. 64:0, 64:2, 64:2:8) or off: K data packets \
                 per block, P parity packets sent with every block, D blocks interleaved"
            ));
        };
        let k: u16 = k
            .trim()
            .parse()
            .map_err(|e| format!("K in {s:?}: {e} (1..=1024)"))?;
        let p: u16 = p
            .trim()
            .parse()
            .map_err(|e| format!("P in {s:?}: {e} (0..=1024)"))?;
        let d: u16 = match d {
            None => 1,
            Some(d) => d
                .trim()
                .parse()
                .map_err(|e| format!("D in {s:?}: {e} (1..={FEC_MAX_DEPTH})"))?,
        };
        if !(1..=FEC_MAX_BLOCK).contains(&k) {
            return Err(format!(
                "K = {k} data packets per block is outside 1..=1024"
            ));
        }
        if p > FEC_MAX_BLOCK {
            return Err(format!(
                "P = {p} parity packets per block is outside 0..=1024"
            ));
        }
        if !(1..=FEC_MAX_DEPTH).contains(&d) {
            return Err(format!(
                "D = {d} interleaved blocks is outside 1..={FEC_MAX_DEPTH}"
            ));
        }
        Ok(Some(Self::new(k, p).with_depth(d)))
    }

    /// Bytes of a parity packet's payload for `payload_size`-byte data
    /// packets: the symbol rounded up to even (as GF(2¹⁶) wants; the GF(2⁸)
    /// code keeps the same length).
    #[must_use]
    pub fn parity_len(payload_size: u16) -> usize {
        usize::from(payload_size) + usize::from(payload_size) % 2
    }
}

/// `Parity`: one FEC parity packet of a block (sessions whose `Offer`
/// carries a [`FecShape`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parity<'a> {
    /// Names this transmission for feedback's `echo`: parity transmissions
    /// are numbered on from the object's last data packet (the session's
    /// n-th parity transmission is `isn` + packets + n), so a receiver that
    /// answers a parity packet's poll tells the sender exactly which
    /// transmissions it had heard.
    pub seq: Seq,
    /// The block, counted from the object's first.
    pub block: u32,
    /// Which of the block's parity packets, below [`FecShape::space`].
    pub index: u16,
    /// Who must acknowledge it, as [`Data::poll`].
    pub poll: u16,
    /// The parity bytes ([`FecShape::parity_len`] of the payload size).
    pub payload: &'a [u8],
}

/// `OfferReply`: a receiver accepts ([`Status::Ok`]) or refuses the offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OfferReply<'a> {
    /// `Ok` to accept, otherwise why not.
    pub status: Status,
    /// Details for a human.
    pub text: &'a str,
}

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
    /// The first packet this feedback says nothing about, if any: the one
    /// past a bitmap of [`FEEDBACK_BITMAP_MAX`] bytes or more, which the
    /// receiver may have cut short. A shorter bitmap ends past the
    /// receiver's highest packet, and speaks for every packet: what lies
    /// beyond it is not held.
    #[must_use]
    pub fn reach(&self) -> Option<Seq> {
        if self.bitmap.len() < FEEDBACK_BITMAP_MAX {
            return None;
        }
        // The wire's length field is 16 bits: at most 524,280 bits.
        let bits = self.bitmap.len().min(usize::from(u16::MAX)) as u32 * 8;
        Some(self.cumulative.add(1).add(bits))
    }

    /// Whether the bitmap says packet `seq` is held (`cumulative` itself
    /// never is). Past [`Feedback::reach`] this answers `false` but means
    /// "not known".
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
    /// The sender's Ed25519 signature of the object (`rmcast send --sign`):
    /// over [`signed_object_message`]'s bytes. `None`: unsigned.
    pub signature: Option<[u8; SIGNATURE_LEN]>,
}

/// Length of an Ed25519 signature.
pub const SIGNATURE_LEN: usize = 64;

/// The bytes a `Close`'s signature signs: a domain label, the object's
/// hash, size and name, so a signature vouches for this content under this
/// name and nothing else.
#[must_use]
pub fn signed_object_message(hash: &[u8; HASH_LEN], size: u64, name: &str) -> Vec<u8> {
    let label = b"rmcast v3 signed object\0";
    let mut m = Vec::with_capacity(label.len() + HASH_LEN + 8 + name.len());
    m.extend_from_slice(label);
    m.extend_from_slice(hash);
    m.extend_from_slice(&size.to_be_bytes());
    m.extend_from_slice(name.as_bytes());
    m
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

/// `Behind`: a relay tells its sender who receives through it (`rmcast
/// relay`), so that if the relay dies the sender's report names them too.
/// Best effort, sent once the relay's own group has registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Behind<'a> {
    /// Receivers behind the relay (its group's members).
    pub receivers: u16,
    /// Their names, comma-separated, cut to what a text field holds (255
    /// bytes); `receivers` says how many there are in all.
    pub names: &'a str,
}

/// `Move`: the sender moves a receiver that lags far behind the group to a
/// TCP catch-up (`rmcast send --laggard tcp`): it is to stop taking the
/// multicast data, connect to the sender's address at `port` and fetch
/// the rest of the object there. Unicast to the receiver, repeated while
/// it still sends feedback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    /// The rank moved (the receiver checks it is its own).
    pub rank: u16,
    /// The sender's TCP port for the catch-up, on the address the session's
    /// packets come from.
    pub port: u16,
}

/// `Have`: one part of a receiver's report of the packets it holds already
/// (chunks of a tree it found on its disk, verified by their hashes), so the
/// sender sends only what some receiver lacks. Ranges are packet indexes
/// counted from the object's first packet, ascending, not overlapping.
/// `parts` = 0 (with `part` 0 and no ranges) says "still looking, wait for
/// my report".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Have<'a> {
    /// This packet's number in the report, below `parts`.
    pub part: u16,
    /// How many packets the whole report has; 0 for "still looking".
    pub parts: u16,
    /// The ranges (a `u16` count of them precedes them on the wire),
    /// [`HAVE_RANGE_LEN`] bytes each: first packet (`u32`) and
    /// count (`u32`, at least 1). Checked by the decoder; write them with
    /// [`encode_have_ranges`], read them with [`Have::ranges`].
    pub ranges: &'a [u8],
}

/// Bytes of one range of a `Have`.
pub const HAVE_RANGE_LEN: usize = 8;

/// Most ranges one `Have` carries: its datagram stays under 1,100 bytes,
/// inside any LAN's MTU once sealed.
pub const HAVE_MAX_RANGES: usize = 128;

impl Have<'_> {
    /// The ranges as `(first packet, count)`.
    pub fn ranges(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.ranges.chunks_exact(HAVE_RANGE_LEN).map(|c| {
            (
                u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
                u32::from_be_bytes([c[4], c[5], c[6], c[7]]),
            )
        })
    }
}

/// Appends `ranges` (`(first packet, count)`) in a `Have`'s layout.
pub fn encode_have_ranges(ranges: &[(u32, u32)], out: &mut Vec<u8>) {
    for &(first, count) in ranges {
        out.extend_from_slice(&first.to_be_bytes());
        out.extend_from_slice(&count.to_be_bytes());
    }
}

/// Whether a `Have`'s numbering is well-formed: a part of its report, or
/// the "still looking" form.
pub(crate) fn have_part_valid(part: u16, parts: u16, ranges: usize) -> bool {
    if parts == 0 {
        part == 0 && ranges == 0
    } else {
        part < parts
    }
}

/// Whether `bytes` are well-formed `Have` ranges: whole ranges, each of at
/// least one packet inside the `u32` index space, ascending, disjoint.
pub(crate) fn have_ranges_valid(bytes: &[u8]) -> bool {
    if !bytes.len().is_multiple_of(HAVE_RANGE_LEN) {
        return false;
    }
    let view = Have {
        part: 0,
        parts: 1,
        ranges: bytes,
    };
    let mut end = 0u64;
    for (first, count) in view.ranges() {
        let first = u64::from(first);
        if count == 0 || first < end {
            return false;
        }
        end = first + u64::from(count);
        if end > 1 << 32 {
            return false;
        }
    }
    true
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
    /// See [`Have`].
    Have(Have<'a>),
    /// See [`RateNak`].
    RateNak(RateNak),
    /// See [`RateReport`].
    RateReport(RateReport),
    /// See [`RateSync`].
    RateSync(RateSync),
    /// See [`Parity`].
    Parity(Parity<'a>),
    /// See [`Behind`].
    Behind(Behind<'a>),
    /// See [`Move`].
    Move(Move),
    /// See [`Welcomes`].
    Welcomes(Welcomes<'a>),
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
            Body::Have(_) => Kind::Have,
            Body::RateNak(_) => Kind::RateNak,
            Body::RateReport(_) => Kind::RateReport,
            Body::RateSync(_) => Kind::RateSync,
            Body::Parity(_) => Kind::Parity,
            Body::Behind(_) => Kind::Behind,
            Body::Move(_) => Kind::Move,
            Body::Welcomes(_) => Kind::Welcomes,
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
