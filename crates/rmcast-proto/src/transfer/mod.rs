//! Object transfer: the `Sender` and `Receiver` machines of one session,
//! the feedback policies that make them the ack, nak-poll, ring and tree
//! protocols, and the sender's rate control (Hunt's controller and the
//! group of senders it shares a multicast group with).
//!
//! The message-stream engine (PRMP) is [`crate::stream`], beside this.

pub mod auto;
pub(crate) mod policy;
pub(crate) mod rate;
pub(crate) mod receiver;
pub(crate) mod sender;

use crate::{Dest, Transmit};
use rmcast_wire::{Body, Header, Packet};

/// Encodes one control or feedback packet into `buf` as a datagram for
/// `dest`; `None` if `buf` is too small.
pub(crate) fn emit(dest: Dest, header: Header, body: Body<'_>, buf: &mut [u8]) -> Option<Transmit> {
    let kind = body.kind();
    let len = Packet { header, body }.encode(buf).ok()?;
    Some(Transmit { dest, len, kind })
}
