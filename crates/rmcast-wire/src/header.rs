//! The 16-byte common header every datagram starts with, shared by the
//! object-transfer packets ([`crate::transfer`]) and PRMP ([`crate::stream`]).

use crate::cursor::{Reader, Writer};
use crate::{DecodeError, EncodeError};

/// The two bytes every rmcast datagram starts with: ASCII "RM".
pub const MAGIC: [u8; 2] = *b"RM";
/// The wire format version this crate speaks. Version 4 interleaves FEC
/// blocks (the `Offer`'s `fec_depth`); version 3 seals every datagram
/// under the group key ([`crate::seal`]) unless both ends run insecure;
/// version 2 moved the object's hash from `Offer` to `Close`. An older
/// peer's packets are refused as `BadVersion`.
pub const VERSION: u8 = 4;
/// Length of the common header.
pub const HEADER_LEN: usize = 16;
/// The rank field of packets sent by the sender.
pub const RANK_SENDER: u16 = 0xFFFF;
/// The rank field of a receiver that has not been admitted yet.
pub const RANK_UNASSIGNED: u16 = 0xFFFE;
/// Largest number of receivers a session can admit (ranks 0..MAX_RECEIVERS).
pub const MAX_RECEIVERS: u16 = 0xFFF0;
/// Largest UDP payload over IPv4 (65,535 - 20 - 8).
pub const MAX_DATAGRAM: usize = 65_507;

/// Header flag: the datagram is sealed ([`crate::seal`]): its body is
/// encrypted and a trailer and a 16-byte tag follow it. The plain decoders
/// refuse it; `rmcast-proto` opens it first.
pub const FLAG_AUTH: u8 = 0x01;
/// Header flag (object transfer only): the sender sent this datagram to
/// one receiver alone, by unicast (an `Offer` or `Close` asked again of a
/// member still silent, a poll of one member). Whatever it makes the
/// receiver owe goes at once, not in the receiver's spread slot of a large
/// group: one answer cannot implode. Plain and sealed packets may carry it
/// (opening keeps it); PRMP's decoder refuses it.
pub const FLAG_ALONE: u8 = 0x04;

/// Sets `flag` in the header of `datagram`, a packet just encoded (at
/// least [`HEADER_LEN`] bytes).
pub fn set_flag(datagram: &mut [u8], flag: u8) {
    datagram[4] |= flag;
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

/// The common header of every datagram (16 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Flag bits: [`FLAG_ALONE`] on an object-transfer packet, else zero
    /// (a sealed datagram's clear header also has [`FLAG_AUTH`] and
    /// `FLAG_NONCE`, cleared when it is opened).
    pub flags: u8,
    /// On a sealed packet the low byte of the group key's id; zero on a
    /// plain one.
    pub key_hint: u8,
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
            key_hint: 0,
            rank,
            session,
        }
    }
}

/// Reads the 16-byte header every rmcast datagram starts with (both
/// engines' kinds: `kind` maps the type byte, refusing the other engine's).
/// Flags outside `allowed` and a non-zero key hint are refused: a sealed
/// datagram is opened before it is decoded.
pub(crate) fn read_header<K>(
    r: &mut Reader<'_>,
    kind: impl FnOnce(u8) -> Result<K, DecodeError>,
    allowed: u8,
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
    if flags & !allowed != 0 {
        return Err(DecodeError::UnsupportedFlags(flags));
    }
    let key_hint = r.u8()?;
    if key_hint != 0 {
        return Err(DecodeError::BadField("key_hint"));
    }
    let header = Header {
        flags,
        key_hint,
        rank: r.u16()?,
        session: SessionId(r.u64()?),
    };
    Ok((kind, header))
}

/// Writes the 16-byte header with the type byte `kind`.
pub(crate) fn write_header(w: &mut Writer<'_>, h: &Header, kind: u8) -> Result<(), EncodeError> {
    w.bytes(&MAGIC)?;
    w.u8(VERSION)?;
    w.u8(kind)?;
    w.u8(h.flags)?;
    w.u8(h.key_hint)?;
    w.u16(h.rank)?;
    w.u64(h.session.0)
}
