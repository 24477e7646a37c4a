//! The object-transfer packets: session setup, data, feedback, close, and
//! the group rate control's kinds (types `0x01`–`0x11`, `0x40`–`0x42`).
//!
//! Every datagram is the 16-byte common [`Header`](crate::Header) and the
//! body of its [`Kind`]. [`Packet::decode`] turns any byte string into a
//! packet or a [`DecodeError`], never a panic;
//! [`Packet::encode`] writes one into a caller's buffer. Bodies borrow from
//! the datagram (payloads, bitmaps, names), so decoding copies nothing.
//! Everything here is re-exported at the crate root (`rmcast_wire::Packet`).

mod body;
mod codec;
mod rate;

pub use body::{
    Behind, BlockMembers, Body, Bye, Close, Complete, Data, FEC_MAX_BLOCK, FEC_MAX_DEPTH, FecShape,
    Feedback, HAVE_MAX_RANGES, HAVE_RANGE_LEN, Have, Hello, Join, Leave, Move, Offer, OfferReply,
    Packet, Parity, SIGNATURE_LEN, WELCOMES_ENTRY_LEN, WELCOMES_MAX, Welcome, Welcomes,
    encode_have_ranges, encode_welcome_entry, signed_object_message,
};
pub use codec::{encode_data_header, encode_parity_header, peek_header};
pub use rate::{RateNak, RateNakKind, RatePhase, RateReport, RateSync, RateSyncOp};

use crate::DecodeError;
use crate::enums::wire_enum;
use crate::header::HEADER_LEN;

/// Length of the common header plus the data body's fixed fields.
pub const DATA_HEADER_LEN: usize = HEADER_LEN + 8;
/// Length of the common header plus the parity body's fixed fields.
pub const PARITY_HEADER_LEN: usize = HEADER_LEN + 12;
/// Length of a BLAKE3 digest.
pub const HASH_LEN: usize = 32;

/// Poll field value: every receiver must acknowledge this data packet.
pub const POLL_ALL: u16 = 0xFFFF;
/// Largest `Feedback::echo_copy` the wire carries (7 bits).
pub const ECHO_COPY_MAX: u8 = 0x7F;
/// Most bitmap bytes a receiver sends with `Ack`/`Nak` feedback: 2,048
/// packets past its cumulative point. A receiver further behind its
/// highest packet cuts the bitmap there, so a bitmap this long says
/// nothing about the packets past its end ([`Feedback::reach`]).
pub const FEEDBACK_BITMAP_MAX: usize = 256;
/// Poll field value: nobody acknowledges this data packet.
pub const POLL_NONE: u16 = 0xFFFE;
/// Poll field value: every receiver acknowledges this data packet directly
/// to the sender, whatever the protocol's usual routing (used when the
/// window stalls, so a broken relay cannot hide who is missing what).
pub const POLL_DIRECT: u16 = 0xFFFD;

wire_enum! {
    /// The reliability protocol a session runs; carried in `Hello` and `Offer`.
    pub enum ProtocolId (DecodeError, |_| DecodeError::BadField("protocol")) {
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
}

impl ProtocolId {
    /// The protocol's name as reports and `rmcast --protocol` spell it
    /// (`nak-poll`; [`ProtocolId::name`] is the code's, `NakPoll`).
    #[must_use]
    pub fn cli_name(self) -> &'static str {
        match self {
            Self::Ack => "ack",
            Self::NakPoll => "nak-poll",
            Self::Ring => "ring",
            Self::Tree => "tree",
        }
    }
}

wire_enum! {
    /// Packet types. The numeric value is the type byte on the wire.
    pub enum Kind (DecodeError, DecodeError::UnknownKind) {
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
        /// Receiver → sender: packets of the object it holds already
        /// (resume, delta); the sender sends only what someone lacks.
        Have = 0x0D,
        /// Sender → group: a FEC parity packet of one block.
        Parity = 0x0E,
        /// Relay → its sender: the receivers behind it.
        Behind = 0x0F,
        /// Sender → receiver: catch up over TCP (`--laggard tcp`).
        Move = 0x10,
        /// Sender → group: `Welcome`s to many receivers at once (groups
        /// over 1,000).
        Welcomes = 0x11,
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
}

wire_enum! {
    /// Refusal reasons of an `OfferReply` and failures of a `Complete` (and
    /// of the TCP overlay's `Ready` and `Complete`).
    pub enum Status (DecodeError, |_| DecodeError::BadField("status")) {
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
        /// The object's signature is missing or does not verify under a key
        /// the receiver trusts (`rmcast recv --trust`).
        Untrusted = 6,
        /// Anything else; the text says what.
        Other = 255,
    }
}

#[cfg(test)]
mod tests;
