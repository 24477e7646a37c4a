//! Sealing for the stream machines: the one gate every PRMP datagram
//! passes, in and out (issue 16, [`crate::security`]).
//!
//! A machine with a group key opens every datagram in place before anything
//! else reads it, and seals every datagram it wrote in the caller's buffer
//! before handing it out; a machine without one passes plain packets and
//! refuses sealed ones (it cannot read them). Either way a refused datagram
//! is counted in [`AuthStats`], noted by source in [`AuthFailures`] (the
//! text of the machine's failure messages) and dropped: it changes no other
//! state and causes no reply.

pub(crate) use crate::security::Seal;
use crate::security::overhead;
use rmcast_wire::RANK_SENDER;
use rmcast_wire::seal::SEAL_OVERHEAD_DATA;

/// The bytes sealing adds to a sender's data packet: what a keyed sender
/// takes off each packet's payload, so sealed data datagrams keep the size
/// the configured payload gives unsealed ones.
pub const SEAL_DATA_OVERHEAD: usize = SEAL_OVERHEAD_DATA;

/// The bytes sealing adds to a receiver's packet (party, counter, tag).
pub const SEAL_RECEIVER_OVERHEAD: usize = overhead(0, false);

/// The payload of a sender's data packet: `payload_size`, less the seal's
/// overhead when keyed (`None` when nothing is left).
#[must_use]
pub(crate) fn packet_payload(payload_size: u16, keyed: bool) -> Option<u16> {
    if keyed {
        payload_size
            .checked_sub(SEAL_DATA_OVERHEAD as u16)
            .filter(|&p| p > 0)
    } else {
        Some(payload_size).filter(|&p| p > 0)
    }
}

const _: () = assert!(overhead(RANK_SENDER, false) == SEAL_DATA_OVERHEAD);
