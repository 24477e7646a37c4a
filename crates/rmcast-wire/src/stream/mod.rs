//! PRMP, the message-stream service's packets (types `0x50`–`0x62`).
//!
//! PRMP (polling-based reliable multicast, Barcellos et al.) shares the
//! 16-byte common [`Header`] with the object engine, including the reserved
//! `FLAG_AUTH` bit and `key_hint` byte, but has its own packet types and is
//! decoded by [`StreamPacket::decode`]; [`crate::Packet::decode`] refuses
//! these types as `UnknownKind`, so an object receiver never mistakes a
//! stream for an object. Layouts are documented in `docs/wire-format.md`.
//!
//! Feedback is planned by the sender: a receiver answers only when a poll
//! names it ([`PollRequest`]), with a [`Response`] that acknowledges and
//! negatively acknowledges at once (cumulative point plus bitmap) and
//! advertises its free receive buffer (flow control).

use crate::Seq;
use crate::cursor::{Reader, Writer};
use crate::enums::wire_enum;
use crate::header::{read_header, write_header};
use crate::{DecodeError, EncodeError, Header};

/// Data flag: the packet carries the first fragment of a message.
pub const DATA_FIRST: u8 = 0x01;
/// Data flag: the packet carries the last fragment of a message.
pub const DATA_LAST: u8 = 0x02;
/// Most receivers one poll request can name.
pub const MAX_POLL_ENTRIES: usize = 64;
/// Bytes one poll entry takes on the wire (rank `u16`, delay `u32`).
pub const POLL_ENTRY_LEN: usize = 6;
/// Fixed part of a `StreamData` datagram without a poll: header, seq, flags, poll count.
pub const STREAM_DATA_OVERHEAD: usize = crate::HEADER_LEN + 6;
/// Extra bytes a poll request of `n` entries adds to a packet.
#[must_use]
pub const fn poll_request_len(entries: usize) -> usize {
    if entries == 0 {
        0
    } else {
        8 + entries * POLL_ENTRY_LEN
    }
}

wire_enum! {
    /// PRMP packet types; the value is the type byte on the wire.
    pub enum StreamKind (DecodeError, DecodeError::UnknownKind) {
        /// Sender → group: a session admits receivers for a while (announcement model).
        Announce = 0x50,
        /// Receiver → sender: please admit me (answer to an `Announce`).
        ConnectRequest = 0x51,
        /// Sender → receiver: handshake step 1, join with this rank.
        Invite = 0x52,
        /// Receiver → sender: handshake step 2, I join, with this buffer.
        Accept = 0x53,
        /// Sender → receiver: handshake step 3, you are a member.
        Confirm = 0x54,
        /// Receiver → sender: I leave the session.
        Leave = 0x55,
        /// Sender → receiver: your leave is recorded.
        LeaveAck = 0x56,
        /// Sender → group or receiver: the stream ends at `final_seq`; a poll.
        Close = 0x57,
        /// Receiver → sender: answer to a `Close` poll (response layout).
        CloseAck = 0x58,
        /// Sender → receiver: you are not (or no longer) a member.
        Reset = 0x59,
        /// Sender → group or receiver: a fragment of a message, maybe with a poll.
        Data = 0x60,
        /// Sender → group or receiver: a standalone poll (also keepalive, window probe).
        Poll = 0x61,
        /// Receiver → sender: answer to a poll: ACK, NACK bitmap, free buffer.
        Response = 0x62,
    }
}

/// `Announce`: a session is admitting receivers (announcement model).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announce {
    /// Most receivers the session admits.
    pub receivers_max: u16,
    /// Payload bytes per data packet.
    pub payload_size: u16,
    /// Packets of the largest message: a receiver's buffer must hold one.
    pub message_packets_max: u32,
    /// Milliseconds until admission closes.
    pub admission_left_ms: u32,
}

/// `ConnectRequest`: a receiver answers an announcement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectRequest<'a> {
    /// Random identity the receiver picked; makes repeated requests idempotent.
    pub receiver_id: u64,
    /// Receive buffer in packets.
    pub buffer_packets: u32,
    /// Name for reports.
    pub name: &'a str,
}

/// `Invite`: handshake step 1 (SYN), sent by unicast.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Invite {
    /// Sender's handshake cookie; the `Accept` and `Confirm` echo it.
    pub nonce: u64,
    /// The rank (member id) the receiver gets.
    pub rank: u16,
    /// Payload bytes per data packet (at least 1).
    pub payload_size: u16,
    /// Sequence number of the stream's first data packet.
    pub isn: Seq,
    /// Packets of the largest message.
    pub message_packets_max: u32,
}

/// `Accept`: handshake step 2 (SYN-ACK).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accept<'a> {
    /// The invite's nonce.
    pub nonce: u64,
    /// The receiver's random identity.
    pub receiver_id: u64,
    /// Receive buffer in packets: the initial advertised window.
    pub buffer_packets: u32,
    /// Name for reports.
    pub name: &'a str,
}

wire_enum! {
    /// Why the sender resets a receiver.
    pub enum ResetReason (DecodeError, |_| DecodeError::BadField("reset.reason")) {
        /// Admission is over (no admission mid-session).
        AdmissionClosed = 1,
        /// The session admits no more receivers.
        SessionFull = 2,
        /// The receiver was removed (suspected dead, or gave up on).
        Removed = 3,
        /// The receiver's buffer cannot hold the largest message.
        BufferTooSmall = 4,
        /// The sender does not know this receiver.
        NotMember = 5,
    }
}

/// One receiver named in a poll request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PollEntry {
    /// Rank of the receiver that must respond.
    pub rank: u16,
    /// Microseconds to wait after receipt before responding, so the response
    /// lands in the epoch the sender planned for it.
    pub delay_us: u32,
}

/// The raw entries of a poll request (borrowed, [`POLL_ENTRY_LEN`] bytes each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollEntries<'a> {
    raw: &'a [u8],
}

impl<'a> PollEntries<'a> {
    /// Entries over `raw`, which must hold whole entries (at most [`MAX_POLL_ENTRIES`]).
    pub fn from_raw(raw: &'a [u8]) -> Result<Self, DecodeError> {
        if !raw.len().is_multiple_of(POLL_ENTRY_LEN)
            || raw.len() / POLL_ENTRY_LEN > MAX_POLL_ENTRIES
        {
            return Err(DecodeError::BadField("poll.entries"));
        }
        Ok(Self { raw })
    }

    /// Number of entries.
    #[must_use]
    pub fn len(&self) -> usize {
        self.raw.len() / POLL_ENTRY_LEN
    }

    /// True when there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The raw bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// The entries in order.
    pub fn iter(&self) -> impl Iterator<Item = PollEntry> + 'a {
        self.raw.chunks_exact(POLL_ENTRY_LEN).map(|c| PollEntry {
            rank: u16::from_be_bytes([c[0], c[1]]),
            delay_us: u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
        })
    }

    /// The entry naming `rank`, if any.
    #[must_use]
    pub fn find(&self, rank: u16) -> Option<PollEntry> {
        self.iter().find(|e| e.rank == rank)
    }

    /// Writes `entries` into `out` and returns the bytes used; `None` when
    /// `out` is too small or there are more than [`MAX_POLL_ENTRIES`].
    pub fn write(entries: &[PollEntry], out: &mut [u8]) -> Option<usize> {
        let len = entries.len() * POLL_ENTRY_LEN;
        if entries.len() > MAX_POLL_ENTRIES || out.len() < len {
            return None;
        }
        for (e, c) in entries.iter().zip(out.chunks_exact_mut(POLL_ENTRY_LEN)) {
            c[..2].copy_from_slice(&e.rank.to_be_bytes());
            c[2..].copy_from_slice(&e.delay_us.to_be_bytes());
        }
        Some(len)
    }
}

/// A poll request: who must respond, and after how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollRequest<'a> {
    /// Sender's poll number; the response echoes it.
    pub poll_id: u32,
    /// Sender's clock in microseconds (wrapping); echoed for RTT estimation.
    pub ts_us: u32,
    /// The receivers named (at least one).
    pub entries: PollEntries<'a>,
}

/// `Data`: one fragment of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamData<'a> {
    /// Sequence number.
    pub seq: Seq,
    /// [`DATA_FIRST`] and/or [`DATA_LAST`]; other bits must be zero.
    pub flags: u8,
    /// A piggybacked poll request.
    pub poll: Option<PollRequest<'a>>,
    /// The fragment's bytes (to the end of the datagram).
    pub payload: &'a [u8],
}

/// `Poll` and `Close` bodies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollBody<'a> {
    /// `Poll`: one past the highest sequence number sent so far, so a receiver
    /// learns of lost tail packets. `Close`: one past the stream's last packet.
    pub next_seq: Seq,
    /// Who must respond (a `Close` may name nobody: it then only informs).
    pub poll: Option<PollRequest<'a>>,
}

/// `Response` and `CloseAck` bodies: a receiver's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response<'a> {
    /// The poll answered.
    pub poll_id: u32,
    /// The poll's `ts_us`.
    pub echo_ts_us: u32,
    /// Microseconds between the poll's receipt and this response.
    pub held_us: u32,
    /// Next sequence number expected: every packet before it is held.
    pub cumulative: Seq,
    /// Free receive buffer in packets from `cumulative`: the sender may send
    /// up to (not including) `cumulative + window_packets`.
    pub window_packets: u32,
    /// Bit `i` (LSB first within each byte) set when `cumulative + 1 + i` is held.
    pub bitmap: &'a [u8],
}

impl Response<'_> {
    /// Whether the response says `seq` is held (`cumulative` itself never is).
    #[must_use]
    pub fn holds(&self, seq: Seq) -> bool {
        if seq < self.cumulative {
            return true;
        }
        let Some(bit) = seq.since(self.cumulative).checked_sub(1) else {
            return false;
        };
        self.bitmap
            .get((bit / 8) as usize)
            .is_some_and(|b| b & (1 << (bit % 8)) != 0)
    }

    /// The exclusive right edge of the advertised window.
    #[must_use]
    pub fn window_end(&self) -> Seq {
        self.cumulative.add(self.window_packets)
    }
}

/// A PRMP packet body, by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamBody<'a> {
    /// See [`Announce`].
    Announce(Announce),
    /// See [`ConnectRequest`].
    ConnectRequest(ConnectRequest<'a>),
    /// See [`Invite`].
    Invite(Invite),
    /// See [`Accept`].
    Accept(Accept<'a>),
    /// Handshake step 3, echoing the invite's nonce.
    Confirm {
        /// The invite's nonce.
        nonce: u64,
    },
    /// A receiver leaves; the text says why.
    Leave {
        /// Why, for a human.
        text: &'a str,
    },
    /// The sender recorded a leave.
    LeaveAck,
    /// See [`PollBody`]; `next_seq` is the final sequence number.
    Close(PollBody<'a>),
    /// See [`Response`].
    CloseAck(Response<'a>),
    /// The receiver is not a member.
    Reset {
        /// Why.
        reason: ResetReason,
    },
    /// See [`StreamData`].
    Data(StreamData<'a>),
    /// See [`PollBody`].
    Poll(PollBody<'a>),
    /// See [`Response`].
    Response(Response<'a>),
}

impl StreamBody<'_> {
    /// The packet type of this body.
    #[must_use]
    pub fn kind(&self) -> StreamKind {
        match self {
            Self::Announce(_) => StreamKind::Announce,
            Self::ConnectRequest(_) => StreamKind::ConnectRequest,
            Self::Invite(_) => StreamKind::Invite,
            Self::Accept(_) => StreamKind::Accept,
            Self::Confirm { .. } => StreamKind::Confirm,
            Self::Leave { .. } => StreamKind::Leave,
            Self::LeaveAck => StreamKind::LeaveAck,
            Self::Close(_) => StreamKind::Close,
            Self::CloseAck(_) => StreamKind::CloseAck,
            Self::Reset { .. } => StreamKind::Reset,
            Self::Data(_) => StreamKind::Data,
            Self::Poll(_) => StreamKind::Poll,
            Self::Response(_) => StreamKind::Response,
        }
    }
}

/// A whole PRMP datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamPacket<'a> {
    /// The common header (rank: the receiver's, or `RANK_SENDER`).
    pub header: Header,
    /// The typed body.
    pub body: StreamBody<'a>,
}

fn read_poll<'a>(r: &mut Reader<'a>) -> Result<Option<PollRequest<'a>>, DecodeError> {
    let count = usize::from(r.u8()?);
    if count == 0 {
        return Ok(None);
    }
    if count > MAX_POLL_ENTRIES {
        return Err(DecodeError::BadField("poll.count"));
    }
    let poll_id = r.u32()?;
    let ts_us = r.u32()?;
    let entries = PollEntries::from_raw(r.bytes(count * POLL_ENTRY_LEN)?)?;
    Ok(Some(PollRequest {
        poll_id,
        ts_us,
        entries,
    }))
}

fn write_poll(w: &mut Writer<'_>, poll: &Option<PollRequest<'_>>) -> Result<(), EncodeError> {
    match poll {
        None => w.u8(0),
        Some(p) => {
            let n = p.entries.len();
            if n == 0 {
                // Zero entries is the encoding of "no poll"; never write a
                // poll the decoder would read back as absent.
                return w.u8(0);
            }
            w.u8(n as u8)?;
            w.u32(p.poll_id)?;
            w.u32(p.ts_us)?;
            w.bytes(p.entries.as_bytes())
        }
    }
}

fn read_response<'a>(r: &mut Reader<'a>) -> Result<Response<'a>, DecodeError> {
    let poll_id = r.u32()?;
    let echo_ts_us = r.u32()?;
    let held_us = r.u32()?;
    let cumulative = Seq(r.u32()?);
    let window_packets = r.u32()?;
    let len = usize::from(r.u16()?);
    Ok(Response {
        poll_id,
        echo_ts_us,
        held_us,
        cumulative,
        window_packets,
        bitmap: r.bytes(len)?,
    })
}

fn write_response(w: &mut Writer<'_>, x: &Response<'_>) -> Result<(), EncodeError> {
    w.u32(x.poll_id)?;
    w.u32(x.echo_ts_us)?;
    w.u32(x.held_us)?;
    w.u32(x.cumulative.0)?;
    w.u32(x.window_packets)?;
    let len = u16::try_from(x.bitmap.len()).map_err(|_| EncodeError::BitmapTooLong)?;
    w.u16(len)?;
    w.bytes(x.bitmap)
}

impl<'a> StreamPacket<'a> {
    /// Parses a PRMP datagram. Any input gives a packet or an error, never a
    /// panic; object-engine types give `UnknownKind`.
    pub fn decode(datagram: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(datagram);
        let (kind, header) = read_header(&mut r, StreamKind::from_u8, 0)?;
        let body = match kind {
            StreamKind::Announce => {
                let receivers_max = r.u16()?;
                let payload_size = r.u16()?;
                if payload_size == 0 {
                    return Err(DecodeError::BadField("payload_size"));
                }
                StreamBody::Announce(Announce {
                    receivers_max,
                    payload_size,
                    message_packets_max: r.u32()?,
                    admission_left_ms: r.u32()?,
                })
            }
            StreamKind::ConnectRequest => StreamBody::ConnectRequest(ConnectRequest {
                receiver_id: r.u64()?,
                buffer_packets: r.u32()?,
                name: r.text()?,
            }),
            StreamKind::Invite => {
                let nonce = r.u64()?;
                let rank = r.u16()?;
                let payload_size = r.u16()?;
                if payload_size == 0 {
                    return Err(DecodeError::BadField("payload_size"));
                }
                StreamBody::Invite(Invite {
                    nonce,
                    rank,
                    payload_size,
                    isn: Seq(r.u32()?),
                    message_packets_max: r.u32()?,
                })
            }
            StreamKind::Accept => StreamBody::Accept(Accept {
                nonce: r.u64()?,
                receiver_id: r.u64()?,
                buffer_packets: r.u32()?,
                name: r.text()?,
            }),
            StreamKind::Confirm => StreamBody::Confirm { nonce: r.u64()? },
            StreamKind::Leave => StreamBody::Leave { text: r.text()? },
            StreamKind::LeaveAck => StreamBody::LeaveAck,
            StreamKind::Close | StreamKind::Poll => {
                let next_seq = Seq(r.u32()?);
                let poll = read_poll(&mut r)?;
                let b = PollBody { next_seq, poll };
                if kind == StreamKind::Close {
                    StreamBody::Close(b)
                } else {
                    StreamBody::Poll(b)
                }
            }
            StreamKind::CloseAck => StreamBody::CloseAck(read_response(&mut r)?),
            StreamKind::Response => StreamBody::Response(read_response(&mut r)?),
            StreamKind::Reset => StreamBody::Reset {
                reason: ResetReason::from_u8(r.u8()?)?,
            },
            StreamKind::Data => {
                let seq = Seq(r.u32()?);
                let flags = r.u8()?;
                if flags & !(DATA_FIRST | DATA_LAST) != 0 {
                    return Err(DecodeError::BadField("data.flags"));
                }
                let poll = read_poll(&mut r)?;
                StreamBody::Data(StreamData {
                    seq,
                    flags,
                    poll,
                    payload: r.rest(),
                })
            }
        };
        r.finish()?;
        Ok(StreamPacket { header, body })
    }

    /// Writes the packet into `buf` and returns its length.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        let mut w = Writer::new(buf);
        write_header(&mut w, &self.header, self.body.kind().to_u8())?;
        match &self.body {
            StreamBody::Announce(a) => {
                w.u16(a.receivers_max)?;
                w.u16(a.payload_size)?;
                w.u32(a.message_packets_max)?;
                w.u32(a.admission_left_ms)?;
            }
            StreamBody::ConnectRequest(c) => {
                w.u64(c.receiver_id)?;
                w.u32(c.buffer_packets)?;
                w.text(c.name)?;
            }
            StreamBody::Invite(i) => {
                w.u64(i.nonce)?;
                w.u16(i.rank)?;
                w.u16(i.payload_size)?;
                w.u32(i.isn.0)?;
                w.u32(i.message_packets_max)?;
            }
            StreamBody::Accept(a) => {
                w.u64(a.nonce)?;
                w.u64(a.receiver_id)?;
                w.u32(a.buffer_packets)?;
                w.text(a.name)?;
            }
            StreamBody::Confirm { nonce } => w.u64(*nonce)?,
            StreamBody::Leave { text } => w.text(text)?,
            StreamBody::LeaveAck => {}
            StreamBody::Close(b) | StreamBody::Poll(b) => {
                w.u32(b.next_seq.0)?;
                write_poll(&mut w, &b.poll)?;
            }
            StreamBody::CloseAck(x) | StreamBody::Response(x) => write_response(&mut w, x)?,
            StreamBody::Reset { reason } => w.u8(reason.to_u8())?,
            StreamBody::Data(d) => {
                w.u32(d.seq.0)?;
                w.u8(d.flags)?;
                write_poll(&mut w, &d.poll)?;
                w.bytes(d.payload)?;
            }
        }
        Ok(w.len())
    }
}

#[cfg(test)]
mod tests;
