//! Object transfer: the `Sender` and `Receiver` machines of one session,
//! the feedback policies that make them the ack, nak-poll, ring and tree
//! protocols, and the sender's rate control (Hunt's controller and the
//! group of senders it shares a multicast group with).
//!
//! The message-stream engine (PRMP) is [`crate::stream`], beside this.

pub(crate) mod policy;
pub(crate) mod rate;
pub(crate) mod receiver;
pub(crate) mod sender;
