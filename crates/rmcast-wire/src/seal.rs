//! The sealed envelope: how an authenticated, encrypted datagram is laid out.
//!
//! A sealed datagram is a plain packet of either datagram family whose body
//! was encrypted in place, followed by a trailer and the AEAD tag:
//!
//! ```text
//! header (16, clear)  body (encrypted)  [sender nonce 16]  [party 8]  counter 8  tag 16
//!                                        FLAG_NONCE         rank != 0xFFFF
//! ```
//!
//! The header stays in the clear, so routing by session works before any key
//! is known, and it is authenticated: the associated data is the header and
//! the trailer's fields up to the tag. Its `flags` byte has [`FLAG_AUTH`]
//! (and [`FLAG_NONCE`] when the sender's session nonce is carried, and the
//! plain packet's [`FLAG_ALONE`] when it had it); its
//! `key_hint` byte is the low byte of the group key's id, so a peer with
//! another key is told so instead of seeing only bad tags.
//!
//! The trailer comes *after* the body so sealing moves no byte: an encoder
//! writes the plain packet as always, and sealing appends. Opening
//! decrypts the body where it lies and clears the sealing flags and the key
//! hint, leaving a plain packet the family's decoder reads.
//!
//! This module only splits and writes bytes; the keys, the cipher and the
//! replay window are `rmcast-proto`'s (`security/`). Layouts are documented
//! in `docs/wire-format.md`.

use crate::header::{FLAG_ALONE, FLAG_AUTH, HEADER_LEN, MAGIC, RANK_SENDER, VERSION};
use crate::{DecodeError, EncodeError, Header, SessionId};

/// Header flag: the sender's 16-byte session nonce is in the trailer, so a
/// peer that has not derived the session's keys yet can.
pub const FLAG_NONCE: u8 = 0x02;
/// Flags a sealed header may carry.
pub const SEAL_FLAGS: u8 = FLAG_AUTH | FLAG_NONCE;
/// Length of the AEAD tag (AES-256-GCM).
pub const TAG_LEN: usize = 16;
/// Length of the packet counter (the AEAD nonce's variable part).
pub const COUNTER_LEN: usize = 8;
/// Length of the party field: the receiver id of a receiver's packet.
pub const PARTY_LEN: usize = 8;
/// Length of the sender's session nonce.
pub const SENDER_NONCE_LEN: usize = 16;
/// Bytes sealing adds to a sender's data packet (counter and tag).
pub const SEAL_OVERHEAD_DATA: usize = COUNTER_LEN + TAG_LEN;
/// The most bytes sealing adds to any datagram.
pub const SEAL_OVERHEAD_MAX: usize = SENDER_NONCE_LEN + PARTY_LEN + COUNTER_LEN + TAG_LEN;

/// The sealed datagram's parts, as offsets into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// The clear header (flags include [`FLAG_AUTH`]).
    pub header: Header,
    /// The type byte (not interpreted here: either family's).
    pub kind: u8,
    /// End of the encrypted body: the body is `HEADER_LEN..body_end`.
    pub body_end: usize,
    /// The sender's session nonce, when [`FLAG_NONCE`] is set.
    pub sender_nonce: Option<[u8; SENDER_NONCE_LEN]>,
    /// Who sealed it: the receiver id of a receiver's packet; `None` for the
    /// sender's (rank [`RANK_SENDER`]).
    pub party: Option<u64>,
    /// The sealing party's packet counter.
    pub counter: u64,
    /// Where the tag starts (`len - TAG_LEN`); the associated data is
    /// `..HEADER_LEN` and `body_end..tag_at`.
    pub tag_at: usize,
}

/// The trailer's length for a packet with `flags` from `rank`.
#[must_use]
pub const fn trailer_len(flags: u8, rank: u16) -> usize {
    let nonce = if flags & FLAG_NONCE != 0 {
        SENDER_NONCE_LEN
    } else {
        0
    };
    let party = if rank == RANK_SENDER { 0 } else { PARTY_LEN };
    nonce + party + COUNTER_LEN + TAG_LEN
}

/// True if `datagram` starts with a header whose flags say it is sealed.
#[must_use]
pub fn is_sealed(datagram: &[u8]) -> bool {
    datagram.len() >= HEADER_LEN
        && datagram[..2] == MAGIC
        && datagram[2] == VERSION
        && datagram[4] & FLAG_AUTH != 0
}

impl Envelope {
    /// Splits a sealed datagram. Any byte string is either an envelope or
    /// an error: a plain packet is `UnsupportedFlags(0)`.
    pub fn parse(datagram: &[u8]) -> Result<Self, DecodeError> {
        let head = datagram.get(..HEADER_LEN).ok_or(DecodeError::Truncated)?;
        if head[..2] != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        if head[2] != VERSION {
            return Err(DecodeError::BadVersion(head[2]));
        }
        let flags = head[4];
        if flags & FLAG_AUTH == 0 || flags & !(SEAL_FLAGS | FLAG_ALONE) != 0 {
            return Err(DecodeError::UnsupportedFlags(flags));
        }
        let header = Header {
            flags,
            key_hint: head[5],
            rank: u16::from_be_bytes([head[6], head[7]]),
            session: SessionId(u64::from_be_bytes(head[8..16].try_into().expect("8 bytes"))),
        };
        let trailer = trailer_len(flags, header.rank);
        if datagram.len() < HEADER_LEN + trailer {
            return Err(DecodeError::Truncated);
        }
        let tag_at = datagram.len() - TAG_LEN;
        let body_end = datagram.len() - trailer;
        let mut at = body_end;
        let sender_nonce = (flags & FLAG_NONCE != 0).then(|| {
            let n: [u8; SENDER_NONCE_LEN] = datagram[at..at + SENDER_NONCE_LEN]
                .try_into()
                .expect("16 bytes");
            at += SENDER_NONCE_LEN;
            n
        });
        let party = (header.rank != RANK_SENDER).then(|| {
            let p = u64::from_be_bytes(datagram[at..at + PARTY_LEN].try_into().expect("8 bytes"));
            at += PARTY_LEN;
            p
        });
        let counter = u64::from_be_bytes(datagram[at..at + COUNTER_LEN].try_into().expect("8"));
        Ok(Self {
            header,
            kind: head[3],
            body_end,
            sender_nonce,
            party,
            counter,
            tag_at,
        })
    }
}

/// Turns the plain packet `buf[..plain_len]` into a sealed one's clear
/// parts: sets the header's flags and key hint and writes the trailer's
/// fields after the body. Returns where the tag goes (`tag_at`); the caller
/// encrypts `HEADER_LEN..plain_len` in place with the associated data
/// `buf[..HEADER_LEN]` ‖ `buf[plain_len..tag_at]`, and writes the tag at
/// `tag_at`. The datagram is then `tag_at + TAG_LEN` bytes long.
pub fn write_trailer(
    buf: &mut [u8],
    plain_len: usize,
    key_hint: u8,
    sender_nonce: Option<&[u8; SENDER_NONCE_LEN]>,
    party: Option<u64>,
    counter: u64,
) -> Result<usize, EncodeError> {
    if plain_len < HEADER_LEN {
        return Err(EncodeError::BufferTooSmall);
    }
    let rank = u16::from_be_bytes([buf[6], buf[7]]);
    if (rank == RANK_SENDER) != party.is_none() {
        // The party field's presence follows from the rank; a mismatch
        // would make the envelope unreadable.
        return Err(EncodeError::BadParty);
    }
    let flags = FLAG_AUTH
        | if sender_nonce.is_some() {
            FLAG_NONCE
        } else {
            0
        };
    let end = plain_len + trailer_len(flags, rank);
    if buf.len() < end {
        return Err(EncodeError::BufferTooSmall);
    }
    // The plain packet's own flag (FLAG_ALONE) stays, authenticated with
    // the rest of the header.
    buf[4] = flags | buf[4] & FLAG_ALONE;
    buf[5] = key_hint;
    let mut at = plain_len;
    if let Some(n) = sender_nonce {
        buf[at..at + SENDER_NONCE_LEN].copy_from_slice(n);
        at += SENDER_NONCE_LEN;
    }
    if let Some(p) = party {
        buf[at..at + PARTY_LEN].copy_from_slice(&p.to_be_bytes());
        at += PARTY_LEN;
    }
    buf[at..at + COUNTER_LEN].copy_from_slice(&counter.to_be_bytes());
    Ok(at + COUNTER_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn plain(rank: u16, body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&MAGIC);
        v.push(VERSION);
        v.push(0x06);
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(&rank.to_be_bytes());
        v.extend_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn a_senders_data_packet_round_trips_with_the_smallest_trailer() {
        let mut buf = plain(RANK_SENDER, b"payload");
        let n = buf.len();
        buf.resize(n + SEAL_OVERHEAD_MAX, 0);
        let tag_at = write_trailer(&mut buf, n, 0xAB, None, None, 77).unwrap();
        assert_eq!(tag_at, n + COUNTER_LEN);
        buf.truncate(tag_at + TAG_LEN);
        assert_eq!(buf.len() - n, SEAL_OVERHEAD_DATA);
        let e = Envelope::parse(&buf).unwrap();
        assert_eq!(e.header.flags, FLAG_AUTH);
        assert_eq!(e.header.key_hint, 0xAB);
        assert_eq!((e.body_end, e.tag_at, e.counter), (n, tag_at, 77));
        assert_eq!((e.sender_nonce, e.party, e.kind), (None, None, 0x06));
        assert!(is_sealed(&buf));
    }

    #[test]
    fn a_receivers_packet_with_the_nonce_carries_every_field() {
        let mut buf = plain(3, b"ack");
        let n = buf.len();
        buf.resize(n + SEAL_OVERHEAD_MAX, 0);
        let nonce = [9u8; SENDER_NONCE_LEN];
        let tag_at = write_trailer(&mut buf, n, 1, Some(&nonce), Some(0xDEAD), 5).unwrap();
        buf.truncate(tag_at + TAG_LEN);
        assert_eq!(buf.len(), n + SEAL_OVERHEAD_MAX);
        let e = Envelope::parse(&buf).unwrap();
        assert_eq!(e.header.flags, FLAG_AUTH | FLAG_NONCE);
        assert_eq!(e.sender_nonce, Some(nonce));
        assert_eq!(e.party, Some(0xDEAD));
        assert_eq!(e.counter, 5);
        assert_eq!(e.body_end, n);
    }

    #[test]
    fn sealing_keeps_the_alone_flag_and_no_other_bit_of_the_plain_header() {
        let mut buf = plain(RANK_SENDER, b"close");
        // Another bit in the plain header is not carried over.
        buf[4] = FLAG_ALONE | 0x08;
        let n = buf.len();
        buf.resize(n + SEAL_OVERHEAD_MAX, 0);
        let tag_at = write_trailer(&mut buf, n, 7, None, None, 1).unwrap();
        buf.truncate(tag_at + TAG_LEN);
        assert_eq!(
            Envelope::parse(&buf).unwrap().header.flags,
            FLAG_AUTH | FLAG_ALONE
        );
        // A bit outside the sealing flags and FLAG_ALONE is refused.
        buf[4] |= 0x08;
        assert_eq!(
            Envelope::parse(&buf),
            Err(DecodeError::UnsupportedFlags(FLAG_AUTH | FLAG_ALONE | 0x08))
        );
    }

    #[test]
    fn a_party_that_does_not_match_the_rank_is_refused() {
        let mut buf = plain(RANK_SENDER, b"x");
        let n = buf.len();
        buf.resize(n + SEAL_OVERHEAD_MAX, 0);
        assert_eq!(
            write_trailer(&mut buf, n, 0, None, Some(1), 0),
            Err(EncodeError::BadParty)
        );
        let mut buf = plain(2, b"x");
        buf.resize(n + SEAL_OVERHEAD_MAX, 0);
        assert_eq!(
            write_trailer(&mut buf, n, 0, None, None, 0),
            Err(EncodeError::BadParty)
        );
    }

    #[test]
    fn plain_and_short_packets_are_not_envelopes() {
        let p = plain(RANK_SENDER, b"");
        assert_eq!(Envelope::parse(&p), Err(DecodeError::UnsupportedFlags(0)));
        let mut short = p.clone();
        short[4] = FLAG_AUTH;
        assert_eq!(Envelope::parse(&short), Err(DecodeError::Truncated));
        let mut odd = p;
        odd[4] = FLAG_AUTH | 0x80;
        assert_eq!(
            Envelope::parse(&odd),
            Err(DecodeError::UnsupportedFlags(0x81))
        );
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_fail_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(e) = Envelope::parse(&bytes) {
                prop_assert!(e.body_end >= HEADER_LEN);
                prop_assert!(e.body_end <= e.tag_at);
                prop_assert_eq!(e.tag_at + TAG_LEN, bytes.len());
            }
        }

        #[test]
        fn written_trailers_parse_back(
            body in proptest::collection::vec(any::<u8>(), 0..64),
            rank in any::<u16>(),
            nonce in proptest::option::of(any::<[u8; 16]>()),
            party in any::<u64>(),
            counter in any::<u64>(),
            hint in any::<u8>(),
        ) {
            let mut buf = plain(rank, &body);
            let n = buf.len();
            buf.resize(n + SEAL_OVERHEAD_MAX, 0);
            let party = (rank != RANK_SENDER).then_some(party);
            let tag_at = write_trailer(&mut buf, n, hint, nonce.as_ref(), party, counter).unwrap();
            buf.truncate(tag_at + TAG_LEN);
            let e = Envelope::parse(&buf).unwrap();
            prop_assert_eq!(e.body_end, n);
            prop_assert_eq!(e.sender_nonce, nonce);
            prop_assert_eq!(e.party, party);
            prop_assert_eq!(e.counter, counter);
            prop_assert_eq!(e.header.key_hint, hint);
            prop_assert_eq!(e.tag_at, tag_at);
        }
    }
}
