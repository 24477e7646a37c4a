//! What a receiver tells its driver: the offer, events, the bytes to
//! store, and counters.

use rmcast_wire::{ProtocolId, Seq, SessionId};
use std::net::SocketAddr;

/// The object a sender offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OfferInfo {
    /// Name to store it under, as sent (the driver must check it is safe).
    pub name: String,
    /// Length in bytes.
    pub size: u64,
    /// Protocol of the data phase.
    pub protocol: ProtocolId,
    /// Object bytes per data packet.
    pub payload_size: u16,
    /// Sender window in packets.
    pub window: u32,
    /// Receivers in the session.
    pub receivers: u16,
    /// Data packets in the object.
    pub packets: u32,
    /// Sequence number of the first data packet.
    pub isn: Seq,
    /// Test knob: drop this many data packets per million before handing
    /// them to the machine (the driver applies it; see `rmcast send --loss`).
    pub test_loss_ppm: u32,
    /// Block FEC the sender runs (`rmcast send --fec`), if any.
    pub fec: Option<rmcast_wire::FecShape>,
}

/// Something the receiving application must know or act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReceiverEvent {
    /// Admitted to `session` with `rank`.
    Admitted {
        /// The session joined.
        session: SessionId,
        /// Rank given by the sender.
        rank: u16,
        /// The sender's unicast address.
        sender: SocketAddr,
    },
    /// The object on offer: answer with [`Receiver::accept_offer`] or
    /// [`Receiver::refuse_offer`].
    ///
    /// [`Receiver::accept_offer`]: crate::Receiver::accept_offer
    /// [`Receiver::refuse_offer`]: crate::Receiver::refuse_offer
    Offer(OfferInfo),
    /// Every byte has been delivered and the sender's `Close` said which
    /// hash they must have ([`Receiver::expected_hash`]): verify them and
    /// call [`Receiver::confirm`].
    ///
    /// [`Receiver::expected_hash`]: crate::Receiver::expected_hash
    /// [`Receiver::confirm`]: crate::Receiver::confirm
    AllData,
    /// The sender moved this receiver, far behind the group, to a TCP
    /// catch-up (`rmcast send --laggard tcp`): connect to `to`, fetch the
    /// object from byte `from` on (the bytes before it are held and in
    /// order), verify, and report with
    /// [`Receiver::catch_up_done`](crate::Receiver::catch_up_done). The
    /// machine takes no more of the session's packets meanwhile.
    Moved {
        /// The sender's catch-up address.
        to: SocketAddr,
        /// The bytes held in order from the start of the object.
        from: u64,
    },
    /// The session ended after this receiver confirmed; nothing more to do.
    Finished,
    /// The transfer failed; the text says why.
    Failed(String),
}

/// A slice of the object to store at `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataChunk<'a> {
    /// Object offset of the first byte.
    pub offset: u64,
    /// The bytes (borrowed from the datagram).
    pub bytes: &'a [u8],
}

/// Counters a driver reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    /// Data packets that brought new bytes.
    pub data_packets: u64,
    /// Data packets already held.
    pub duplicates: u64,
    /// Data packets beyond the window (dropped).
    pub out_of_window: u64,
    /// Acks sent.
    pub acks: u64,
    /// Naks sent.
    pub naks: u64,
    /// Naks not sent: what they were for arrived while they waited for
    /// the receiver's slot in a large group (repair another receiver
    /// asked for).
    pub naks_suppressed: u64,
    /// EXP `RateNak`s multicast to the group.
    pub rate_naks: u64,
    /// `RateNak`s about this session heard from other members (each
    /// suppresses this receiver's own for an interval).
    pub rate_naks_heard: u64,
    /// Datagrams that failed to decode.
    pub malformed: u64,
    /// Well-formed datagrams of another session or role.
    pub foreign: u64,
    /// Sealing: packets sealed and opened, and those refused, by reason.
    pub auth: crate::security::AuthStats,
    /// Resume and delta: packets the driver found on its disk
    /// ([`crate::Receiver::report_held`]), never received.
    pub held_packets: u64,
    /// FEC: parity packets kept for a block that lacked packets.
    pub parity_packets: u64,
    /// FEC: parity packets not needed (the block was whole, or held
    /// enough already, or the same one came twice).
    pub parity_unneeded: u64,
    /// FEC: data packets rebuilt from parity.
    pub repaired_packets: u64,
}
