//! PRMP: a TCP-like reliable multicast message stream (Barcellos et al.).
//!
//! One [`StreamSender`] writes messages to a group of [`StreamReceiver`]s it
//! knows by name: admission by invitation or announcement with a three-way
//! handshake, FIFO exactly-once delivery of whole messages, flow control by
//! advertised receive windows (the sender never sends beyond the smallest, so
//! no message is ever dropped for lack of buffer), feedback only when polled
//! and planned so that at most `response_rate` responses per second reach
//! the sender (implosion control), selective repair by multicast or unicast
//! depending on how many receivers lack a packet, an optional TCP-like group
//! congestion window, failure detection by unanswered polls, and a close
//! that confirms every remaining receiver holds everything.
//!
//! Like the object engine, both machines are sans-IO: they take `now` and
//! datagrams, and hand out datagrams, a wake-up time and events. They share
//! [`crate::Dest`] and [`crate::Transmit`] with it; the packets are
//! `rmcast_wire::stream`. `docs/prmp.md` describes the service.
//!
//! With a group key in their configurations (`group_key`), both machines
//! seal every datagram they hand out and open every one they take in
//! place, before anything else reads it ([`crate::security`]); a datagram
//! that does not open is counted (`stats().auth`) and dropped without a
//! trace or a reply. Without one they speak plain packets and refuse
//! sealed ones, so a mismatch fails with a message that says so.

mod cc;
mod planner;
mod receiver;
mod rtt;
mod seal;
#[cfg(test)]
mod sealed_tests;
mod sender;

pub use cc::{CongestionControl, CongestionWindow};
pub use planner::PollPlanner;
pub use receiver::{
    StreamReceiver, StreamReceiverConfig, StreamReceiverEvent, StreamReceiverStats,
};
pub use rmcast_wire::stream::ResetReason;
pub use rtt::RttEstimator;
pub use seal::{SEAL_DATA_OVERHEAD, SEAL_RECEIVER_OVERHEAD};
pub use sender::{
    Admission, MemberId, MemberInfo, MemberStatus, RemoveReason, SendError, StreamConfigError,
    StreamEvent, StreamSender, StreamSenderConfig, StreamSenderStats,
};

use crate::Instant;

/// The wire's microsecond timestamp of `now` (wrapping every ~71 minutes).
pub(crate) fn ts_us(now: Instant) -> u32 {
    (now.as_nanos() / 1_000) as u32
}

/// A PRMP datagram a machine wrote into the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamTransmit {
    /// Where to send it.
    pub dest: crate::Dest,
    /// Its length: send `buf[..len]`.
    pub len: usize,
    /// Its packet type (for accounting; drivers need not decode).
    pub kind: rmcast_wire::stream::StreamKind,
}
