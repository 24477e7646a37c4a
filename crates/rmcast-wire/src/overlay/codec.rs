//! Parse and emit for the overlay's frames.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{
    AddrFamily, Assignment, DecodeError, HEADER_LEN, MAGIC, MAX_NAME, MAX_PAYLOAD, Msg, MsgKind,
    OverlayShape, Peer, SEALED_MAGIC, SET_ALL, SET_EVEN, SET_ODD, SET_RESIDUES, SegmentSet,
    VERSION,
};
use crate::cursor::{Reader, Writer};
use crate::{EncodeError, Status, truncate_utf8};

/// Longest string the `u16` length can carry; longer ones are cut.
const MAX_STR: usize = u16::MAX as usize;
/// Most peers one list carries; more are left out.
const MAX_PEERS: usize = u16::MAX as usize;
/// The fewest bytes a peer takes on the wire (rank, empty name, IPv4
/// address, segment set): a count the payload cannot hold is refused
/// before anything is allocated for it.
const PEER_LEN_MIN: usize = 2 + 2 + 7 + 1;

fn str_len(s: &str, max: usize) -> usize {
    2 + truncate_utf8(s, max).len()
}

fn addr_len(a: &SocketAddr) -> usize {
    match a {
        SocketAddr::V4(_) => 1 + 4 + 2,
        SocketAddr::V6(_) => 1 + 16 + 2,
    }
}

fn peers_len(peers: &[Peer]) -> usize {
    2 + peers
        .iter()
        .take(MAX_PEERS)
        .map(|p| 2 + str_len(&p.name, MAX_NAME) + addr_len(&p.addr) + p.segments.wire_len())
        .sum::<usize>()
}

fn write_addr(w: &mut Writer<'_>, a: &SocketAddr) -> Result<(), EncodeError> {
    match a.ip() {
        IpAddr::V4(ip) => {
            w.u8(AddrFamily::V4.to_u8())?;
            w.bytes(&ip.octets())?;
        }
        IpAddr::V6(ip) => {
            w.u8(AddrFamily::V6.to_u8())?;
            w.bytes(&ip.octets())?;
        }
    }
    w.u16(a.port())
}

fn write_peers(w: &mut Writer<'_>, peers: &[Peer]) -> Result<(), EncodeError> {
    w.u16(peers.len().min(MAX_PEERS) as u16)?;
    for p in peers.iter().take(MAX_PEERS) {
        w.u16(p.rank)?;
        w.text16(truncate_utf8(&p.name, MAX_NAME))?;
        write_addr(w, &p.addr)?;
        write_set(w, p.segments)?;
    }
    Ok(())
}

fn write_set(w: &mut Writer<'_>, set: SegmentSet) -> Result<(), EncodeError> {
    match set {
        SegmentSet::All => w.u8(SET_ALL),
        SegmentSet::Even => w.u8(SET_EVEN),
        SegmentSet::Odd => w.u8(SET_ODD),
        SegmentSet::Residues { modulus, residues } => {
            w.u8(SET_RESIDUES)?;
            w.u8(modulus)?;
            w.u32(residues)
        }
    }
}

/// A segment set; only the canonical encoding of a set is accepted.
fn read_set(r: &mut Reader<'_>) -> Result<SegmentSet, DecodeError> {
    let bad = DecodeError::BadField("segment set");
    Ok(match r.u8()? {
        SET_ALL => SegmentSet::All,
        SET_EVEN => SegmentSet::Even,
        SET_ODD => SegmentSet::Odd,
        SET_RESIDUES => {
            let (modulus, residues) = (r.u8()?, r.u32()?);
            let set = SegmentSet::Residues { modulus, residues };
            if SegmentSet::residues(modulus, residues) != Some(set) {
                return Err(bad);
            }
            set
        }
        _ => return Err(bad),
    })
}

fn read_str(r: &mut Reader<'_>) -> Result<String, DecodeError> {
    Ok(r.text16()?.to_owned())
}

/// A receiver's name: longer than [`MAX_NAME`] is refused, because no
/// encoder writes it (it cuts names), so accepting it would not be canonical.
fn read_name(r: &mut Reader<'_>) -> Result<String, DecodeError> {
    let name = r.text16()?;
    if name.len() > MAX_NAME {
        return Err(DecodeError::BadField("name"));
    }
    Ok(name.to_owned())
}

fn read_addr(r: &mut Reader<'_>) -> Result<SocketAddr, DecodeError> {
    let ip = match AddrFamily::from_u8(r.u8()?)? {
        AddrFamily::V4 => IpAddr::V4(Ipv4Addr::from(r.array::<4>()?)),
        AddrFamily::V6 => IpAddr::V6(Ipv6Addr::from(r.array::<16>()?)),
    };
    Ok(SocketAddr::new(ip, r.u16()?))
}

fn read_status(r: &mut Reader<'_>) -> Result<Status, DecodeError> {
    Ok(Status::from_u8(r.u8()?)?)
}

fn read_peers(r: &mut Reader<'_>) -> Result<Vec<Peer>, DecodeError> {
    let n = usize::from(r.u16()?);
    if n > r.remaining() / PEER_LEN_MIN {
        return Err(DecodeError::Truncated);
    }
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(Peer {
            rank: r.u16()?,
            name: read_name(r)?,
            addr: read_addr(r)?,
            segments: read_set(r)?,
        });
    }
    Ok(v)
}

impl Msg {
    /// The message's type.
    #[must_use]
    pub fn kind(&self) -> MsgKind {
        match self {
            Msg::Register { .. } => MsgKind::Register,
            Msg::Assign(_) => MsgKind::Assign,
            Msg::Ready { .. } => MsgKind::Ready,
            Msg::Start => MsgKind::Start,
            Msg::Progress { .. } => MsgKind::Progress,
            Msg::Heartbeat => MsgKind::Heartbeat,
            Msg::Complete { .. } => MsgKind::Complete,
            Msg::Abort { .. } => MsgKind::Abort,
            Msg::DataHello { .. } => MsgKind::DataHello,
            Msg::Hash { .. } => MsgKind::Hash,
            Msg::Detach { .. } => MsgKind::Detach,
            Msg::Orphaned { .. } => MsgKind::Orphaned,
            Msg::Probe { .. } => MsgKind::Probe,
            Msg::Unheard => MsgKind::Unheard,
            Msg::Redirect { .. } => MsgKind::Redirect,
            Msg::CatchUp { .. } => MsgKind::CatchUp,
            Msg::Verdict { .. } => MsgKind::Verdict,
        }
    }

    /// Bytes of the whole frame, header included.
    #[must_use]
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
            + match self {
                Msg::Register { name, data_addr } => str_len(name, MAX_NAME) + addr_len(data_addr),
                Msg::Assign(a) => {
                    8 + 2
                        + 2
                        + 1
                        + 4
                        + 4
                        + 8
                        + str_len(&a.name, MAX_STR)
                        + 4
                        + peers_len(&a.parents)
                        + peers_len(&a.children)
                }
                Msg::Ready { text, .. } | Msg::Complete { text, .. } => 1 + str_len(text, MAX_STR),
                Msg::Start | Msg::Heartbeat | Msg::Unheard => 0,
                Msg::Progress { .. } => 8,
                Msg::Abort { text } => str_len(text, MAX_STR),
                Msg::DataHello { segments, .. } => 8 + 2 + 2 + segments.wire_len() + 8,
                Msg::Detach { .. } => 2,
                Msg::Orphaned { segments, .. } => 2 + segments.wire_len() + 8,
                Msg::Probe { group, .. } => addr_len(group) + 8 + 4,
                Msg::Redirect { control } => addr_len(control),
                Msg::CatchUp { .. } => 2 + 8,
                Msg::Verdict { text, .. } => 1 + str_len(text, MAX_STR),
                Msg::Hash { hash, signature } => hash.len() + 1 + signature.map_or(0, |s| s.len()),
            }
    }

    /// Writes the whole frame into `buf` and returns its length
    /// ([`Msg::buffer_len`]). Strings too long for their field are cut at
    /// a character boundary, peer lists after 65,535 peers. A frame whose
    /// payload exceeds [`MAX_PAYLOAD`] is written, and refused by the reader.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        let len = self.buffer_len();
        let mut w = Writer::new(buf);
        w.bytes(&MAGIC)?;
        w.u8(VERSION)?;
        w.u8(self.kind().to_u8())?;
        w.u32((len - HEADER_LEN) as u32)?;
        match self {
            Msg::Register { name, data_addr } => {
                w.text16(truncate_utf8(name, MAX_NAME))?;
                write_addr(&mut w, data_addr)?;
            }
            Msg::Assign(a) => {
                w.u64(a.session)?;
                w.u16(a.rank)?;
                w.u16(a.receivers)?;
                let (code, fanout) = a.shape.code();
                w.u8(code)?;
                w.u32(fanout)?;
                w.u32(a.segment_size)?;
                w.u64(a.size)?;
                w.text16(truncate_utf8(&a.name, MAX_STR))?;
                w.u32(a.inactivity_ms)?;
                write_peers(&mut w, &a.parents)?;
                write_peers(&mut w, &a.children)?;
            }
            Msg::Ready { status, text } | Msg::Complete { status, text } => {
                w.u8(status.to_u8())?;
                w.text16(truncate_utf8(text, MAX_STR))?;
            }
            Msg::Start | Msg::Heartbeat | Msg::Unheard => {}
            Msg::Progress { bytes } => w.u64(*bytes)?,
            Msg::Abort { text } => w.text16(truncate_utf8(text, MAX_STR))?,
            Msg::DataHello {
                session,
                from,
                to,
                segments,
                first,
            } => {
                w.u64(*session)?;
                w.u16(*from)?;
                w.u16(*to)?;
                write_set(&mut w, *segments)?;
                w.u64(*first)?;
            }
            Msg::Detach { rank } => w.u16(*rank)?,
            Msg::Orphaned {
                from,
                segments,
                have,
            } => {
                w.u16(*from)?;
                write_set(&mut w, *segments)?;
                w.u64(*have)?;
            }
            Msg::Probe {
                group,
                session,
                wait_ms,
            } => {
                write_addr(&mut w, group)?;
                w.u64(*session)?;
                w.u32(*wait_ms)?;
            }
            Msg::Redirect { control } => write_addr(&mut w, control)?,
            Msg::CatchUp { rank, from } => {
                w.u16(*rank)?;
                w.u64(*from)?;
            }
            Msg::Verdict { ok, text } => {
                w.u8(u8::from(*ok))?;
                w.text16(truncate_utf8(text, MAX_STR))?;
            }
            Msg::Hash { hash, signature } => {
                w.bytes(hash)?;
                match signature {
                    None => w.u8(0)?,
                    Some(sig) => {
                        w.u8(1)?;
                        w.bytes(sig)?;
                    }
                }
            }
        }
        debug_assert_eq!(w.len(), len, "buffer_len disagrees with emit");
        Ok(w.len())
    }

    /// Appends the whole frame (header and payload) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + self.buffer_len(), 0);
        let written = self.emit(&mut out[start..]);
        // The buffer was sized by buffer_len, so emitting cannot run short.
        debug_assert_eq!(written, Ok(out.len() - start));
    }

    /// The frame as a new vector.
    #[must_use]
    pub fn to_frame(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.buffer_len());
        self.encode(&mut v);
        v
    }

    /// Decodes a frame header: the message type and the payload length,
    /// refusing a length over [`MAX_PAYLOAD`] before anyone allocates it.
    pub fn parse_header(h: &[u8]) -> Result<(MsgKind, usize), DecodeError> {
        let h = h.get(..HEADER_LEN).ok_or(DecodeError::Truncated)?;
        if h[0..2] == SEALED_MAGIC {
            return Err(DecodeError::Sealed);
        }
        if h[0..2] != MAGIC {
            return Err(DecodeError::Magic);
        }
        if h[2] != VERSION {
            return Err(DecodeError::Version(h[2]));
        }
        let kind = MsgKind::from_u8(h[3])?;
        let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
        if len > MAX_PAYLOAD {
            return Err(DecodeError::TooLong(len));
        }
        Ok((kind, len))
    }

    /// Decodes the payload of a message of type `kind`; the payload must
    /// end where the message does.
    pub fn parse_payload(kind: MsgKind, payload: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        let msg = match kind {
            MsgKind::Register => Msg::Register {
                name: read_name(&mut r)?,
                data_addr: read_addr(&mut r)?,
            },
            MsgKind::Assign => {
                let session = r.u64()?;
                let rank = r.u16()?;
                let receivers = r.u16()?;
                let code = r.u8()?;
                let fanout = r.u32()?;
                let shape =
                    OverlayShape::from_code(code, fanout).ok_or(DecodeError::BadField("shape"))?;
                let segment_size = r.u32()?;
                if segment_size == 0 {
                    return Err(DecodeError::BadField("segment size"));
                }
                let size = r.u64()?;
                Msg::Assign(Box::new(Assignment {
                    session,
                    rank,
                    receivers,
                    shape,
                    segment_size,
                    size,
                    name: read_str(&mut r)?,
                    inactivity_ms: r.u32()?,
                    parents: read_peers(&mut r)?,
                    children: read_peers(&mut r)?,
                }))
            }
            MsgKind::Ready => Msg::Ready {
                status: read_status(&mut r)?,
                text: read_str(&mut r)?,
            },
            MsgKind::Start => Msg::Start,
            MsgKind::Progress => Msg::Progress { bytes: r.u64()? },
            MsgKind::Heartbeat => Msg::Heartbeat,
            MsgKind::Complete => Msg::Complete {
                status: read_status(&mut r)?,
                text: read_str(&mut r)?,
            },
            MsgKind::Abort => Msg::Abort {
                text: read_str(&mut r)?,
            },
            MsgKind::DataHello => Msg::DataHello {
                session: r.u64()?,
                from: r.u16()?,
                to: r.u16()?,
                segments: read_set(&mut r)?,
                first: r.u64()?,
            },
            MsgKind::Detach => Msg::Detach { rank: r.u16()? },
            MsgKind::Orphaned => Msg::Orphaned {
                from: r.u16()?,
                segments: read_set(&mut r)?,
                have: r.u64()?,
            },
            MsgKind::Probe => Msg::Probe {
                group: read_addr(&mut r)?,
                session: r.u64()?,
                wait_ms: r.u32()?,
            },
            MsgKind::Unheard => Msg::Unheard,
            MsgKind::Redirect => Msg::Redirect {
                control: read_addr(&mut r)?,
            },
            MsgKind::CatchUp => Msg::CatchUp {
                rank: r.u16()?,
                from: r.u64()?,
            },
            MsgKind::Verdict => Msg::Verdict {
                ok: match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(DecodeError::BadField("ok")),
                },
                text: read_str(&mut r)?,
            },
            MsgKind::Hash => Msg::Hash {
                hash: r.array()?,
                signature: match r.u8()? {
                    0 => None,
                    1 => Some(r.array()?),
                    _ => return Err(DecodeError::BadField("signed")),
                },
            },
        };
        r.finish()?;
        Ok(msg)
    }

    /// Decodes the frame at the start of `bytes`; returns the message and
    /// the bytes it took (what follows is the next frame's).
    pub fn decode(bytes: &[u8]) -> Result<(Self, usize), DecodeError> {
        let (kind, len) = Self::parse_header(bytes)?;
        let payload = bytes
            .get(HEADER_LEN..HEADER_LEN + len)
            .ok_or(DecodeError::Truncated)?;
        Ok((Self::parse_payload(kind, payload)?, HEADER_LEN + len))
    }
}
