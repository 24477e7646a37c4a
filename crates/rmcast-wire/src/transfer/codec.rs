//! Parse and emit for the object-transfer packets.

use super::body::*;
use super::rate::{RateNak, RateNakKind, RatePhase, RateReport, RateSync, RateSyncOp};
use super::{
    DATA_HEADER_LEN, ECHO_COPY_MAX, HAVE_RANGE_LEN, Kind, PARITY_HEADER_LEN, ProtocolId, Status,
    WELCOMES_ENTRY_LEN,
};
use crate::cursor::{Reader, Writer};
use crate::header::{FLAG_ALONE, read_header, write_header};
use crate::{DecodeError, EncodeError, HEADER_LEN, Header, MAGIC, Seq, SessionId, VERSION};

impl<'a> Packet<'a> {
    /// Parses a datagram. Any input gives a packet or an error, never a panic.
    pub fn decode(datagram: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(datagram);
        let (kind, header) = read_header(&mut r, Kind::from_u8, FLAG_ALONE)?;
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
                let body = r.bytes(WELCOMES_ENTRY_LEN)?;
                Body::Welcome(Welcome::from_bytes(body.try_into().expect("16 bytes"))?)
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
                let fec = match (r.u16()?, r.u16()?, r.u16()?, r.u16()?) {
                    (0, 0, 0, 0) => None,
                    (data, proactive, space, depth) => {
                        let shape = FecShape {
                            data,
                            proactive,
                            space,
                            depth,
                        };
                        if !shape.is_valid() {
                            return Err(DecodeError::BadField("offer.fec"));
                        }
                        Some(shape)
                    }
                };
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
                    fec,
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
            Kind::Close => Body::Close(Close {
                hash: r.array()?,
                signature: match r.u8()? {
                    0 => None,
                    1 => Some(r.array()?),
                    _ => return Err(DecodeError::BadField("signed")),
                },
            }),
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
            Kind::Move => Body::Move(Move {
                rank: r.u16()?,
                port: match r.u16()? {
                    0 => return Err(DecodeError::BadField("move.port")),
                    p => p,
                },
            }),
            Kind::Behind => Body::Behind(Behind {
                receivers: r.u16()?,
                names: r.text()?,
            }),
            Kind::Welcomes => {
                let count = usize::from(r.u8()?);
                let entries = r.bytes(count * WELCOMES_ENTRY_LEN)?;
                if !welcomes_valid(entries) {
                    return Err(DecodeError::BadField("welcomes"));
                }
                Body::Welcomes(Welcomes { entries })
            }
            Kind::Have => {
                let part = r.u16()?;
                let parts = r.u16()?;
                let count = usize::from(r.u16()?);
                if !have_part_valid(part, parts, count) {
                    return Err(DecodeError::BadField("have.part"));
                }
                let ranges = r.bytes(count * HAVE_RANGE_LEN)?;
                if !have_ranges_valid(ranges) {
                    return Err(DecodeError::BadField("have.ranges"));
                }
                Body::Have(Have {
                    part,
                    parts,
                    ranges,
                })
            }
            Kind::Parity => Body::Parity(Parity {
                seq: Seq(r.u32()?),
                block: r.u32()?,
                index: r.u16()?,
                poll: r.u16()?,
                payload: r.rest(),
            }),
            Kind::RateNak => {
                let kind = RateNakKind::from_u8(r.u8()?)?;
                Body::RateNak(RateNak {
                    kind,
                    seq: Seq(r.u32()?),
                })
            }
            Kind::RateReport => {
                let epoch = r.u32()?;
                let phase = RatePhase::from_u8(r.u8()?)?;
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
        write_header(&mut w, &self.header, self.body.kind().to_u8())?;
        match &self.body {
            Body::Hello(h) => {
                w.u16(h.receivers_wanted)?;
                w.u8(h.protocol.to_u8())?;
            }
            Body::Join(j) => {
                w.u64(j.receiver_id)?;
                w.text(j.name)?;
            }
            Body::Welcome(x) => w.bytes(&x.to_bytes()?)?,
            Body::Offer(o) => {
                w.u64(o.object_size)?;
                w.u32(o.isn.0)?;
                w.u16(o.payload_size)?;
                w.u32(o.window)?;
                w.u8(o.protocol.to_u8())?;
                w.u16(o.protocol_param)?;
                w.u16(o.receivers)?;
                w.u32(o.test_loss_ppm)?;
                match o.fec {
                    None => {
                        w.u16(0)?;
                        w.u16(0)?;
                        w.u16(0)?;
                        w.u16(0)?;
                    }
                    Some(f) if f.is_valid() => {
                        w.u16(f.data)?;
                        w.u16(f.proactive)?;
                        w.u16(f.space)?;
                        w.u16(f.depth)?;
                    }
                    Some(_) => return Err(EncodeError::BadFec),
                }
                w.text(o.name)?;
            }
            Body::OfferReply(x) => {
                w.u8(x.status.to_u8())?;
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
            Body::Close(c) => {
                w.bytes(&c.hash)?;
                match &c.signature {
                    None => w.u8(0)?,
                    Some(sig) => {
                        w.u8(1)?;
                        w.bytes(sig)?;
                    }
                }
            }
            Body::Complete(c) => {
                w.u8(c.status.to_u8())?;
                w.bytes(&c.hash)?;
                w.text(c.text)?;
            }
            Body::Bye(b) => {
                w.u8(u8::from(b.aborted))?;
                w.text(b.text)?;
            }
            Body::Leave(l) => w.text(l.text)?,
            Body::Move(m) => {
                if m.port == 0 {
                    return Err(EncodeError::BadMovePort);
                }
                w.u16(m.rank)?;
                w.u16(m.port)?;
            }
            Body::Behind(b) => {
                w.u16(b.receivers)?;
                w.text(b.names)?;
            }
            Body::Welcomes(x) => {
                if !welcomes_valid(x.entries) {
                    return Err(EncodeError::BadWelcomes);
                }
                let count = x.entries.len() / WELCOMES_ENTRY_LEN;
                w.u8(u8::try_from(count).map_err(|_| EncodeError::BadWelcomes)?)?;
                w.bytes(x.entries)?;
            }
            Body::Have(h) => {
                let ranges = h.ranges.len() / HAVE_RANGE_LEN;
                if !have_part_valid(h.part, h.parts, ranges) || !have_ranges_valid(h.ranges) {
                    return Err(EncodeError::BadHave);
                }
                w.u16(h.part)?;
                w.u16(h.parts)?;
                let count = u16::try_from(h.ranges.len() / HAVE_RANGE_LEN)
                    .map_err(|_| EncodeError::BadHave)?;
                w.u16(count)?;
                w.bytes(h.ranges)?;
            }
            Body::Parity(p) => {
                w.u32(p.seq.0)?;
                w.u32(p.block)?;
                w.u16(p.index)?;
                w.u16(p.poll)?;
                w.bytes(p.payload)?;
            }
            Body::RateNak(n) => {
                w.u8(n.kind.to_u8())?;
                w.u32(n.seq.0)?;
            }
            Body::RateReport(x) => {
                w.u32(x.epoch)?;
                w.u8(x.phase.to_u8())?;
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
    write_header(&mut w, header, Kind::Data.to_u8())?;
    w.u32(seq.0)?;
    w.u16(poll)?;
    w.u16(copy)?;
    debug_assert_eq!(w.len(), DATA_HEADER_LEN);
    Ok(w.len())
}

/// Writes a parity packet's header and fixed fields into
/// `buf[..PARITY_HEADER_LEN]`, leaving the parity bytes to the caller.
pub fn encode_parity_header(
    buf: &mut [u8],
    header: &Header,
    seq: Seq,
    block: u32,
    index: u16,
    poll: u16,
) -> Result<usize, EncodeError> {
    let mut w = Writer::new(buf);
    write_header(&mut w, header, Kind::Parity.to_u8())?;
    w.u32(seq.0)?;
    w.u32(block)?;
    w.u16(index)?;
    w.u16(poll)?;
    debug_assert_eq!(w.len(), PARITY_HEADER_LEN);
    Ok(w.len())
}

/// Reads only the header of a datagram (for cheap filtering by session):
/// a plain packet's, or a sealed one's (its header is in the clear).
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
        key_hint: r.u8()?,
        rank: r.u16()?,
        session: SessionId(r.u64()?),
    };
    if header.flags & crate::header::FLAG_AUTH != 0 {
        if header.flags & !(crate::seal::SEAL_FLAGS | FLAG_ALONE) != 0 {
            return Err(DecodeError::UnsupportedFlags(header.flags));
        }
        return Ok((kind, header));
    }
    if header.flags & !FLAG_ALONE != 0 {
        return Err(DecodeError::UnsupportedFlags(header.flags));
    }
    if header.key_hint != 0 {
        return Err(DecodeError::BadField("key_hint"));
    }
    Ok((kind, header))
}
