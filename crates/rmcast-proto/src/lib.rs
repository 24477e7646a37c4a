//! rmcast's protocol engine: sans-IO state machines for a reliable multicast
//! sender and receiver.
//!
//! Nothing here touches a socket or reads a clock. A driver (the UDP runtime
//! in `rmcast`, the simulator in `rmcast-sim`, a fuzzer, a unit test) feeds
//! each machine datagrams and the current time, and asks it what to send and
//! when to wake it next, in the style of quinn-proto:
//!
//! ```text
//! loop {
//!     while let Some(e) = m.poll_event() { react (may call accept_offer, confirm, ...) }
//!     while let Some(t) = m.poll_transmit(now, &mut buf) { send buf[..t.len] to t.dest }
//!     sleep until m.poll_timeout() or a datagram arrives; now = clock
//!     m.handle_datagram(now, from, bytes)   // for each datagram
//!     m.handle_timeout(now)                 // when now >= poll_timeout()
//! }
//! ```
//!
//! Events come before transmits: a mutator called in reaction to an event
//! (accepting an offer, confirming a hash) owes a datagram that
//! `poll_transmit` sends at once, not at the next wake-up.
//!
//! A transfer is one session: the sender announces it ([`Sender`] multicasts
//! `Hello`), admits `receivers` receivers and gives each a rank, offers the
//! object (size, name, BLAKE3 hash; the buffer handshake), sends it under a
//! sliding window with Go-back-N retransmission, and collects every
//! receiver's verdict on its hash. The reliability protocols ([`ProtocolId`])
//! differ only in their feedback policy — which data packets ask whom for an
//! acknowledgement — so new protocols slot in without touching the rest.
//!
//! Beside object transfer, [`stream`] holds PRMP: a TCP-like reliable
//! multicast message stream (issue 8), driven the same way.
//!
//! This crate is not the runtime: it never reads files or hashes data; the
//! driver supplies payload bytes through [`PayloadSource`] and reports the
//! verification result through [`Receiver::confirm`].

mod endpoint;
pub mod fec;
pub mod hybrid;
pub mod overlay;
mod pacer;
pub mod security;
pub mod stream;
mod time;
mod transfer;

pub use endpoint::{
    Endpoint, EndpointConfig, EndpointStats, SEEN_SESSIONS_MAX, SeenSession, SessionHandle,
};
pub use pacer::Pacer;
pub use rmcast_wire::{
    FEC_MAX_BLOCK, FecShape, HASH_LEN, Kind, ProtocolId, Seq, SessionId, Status,
};
pub use time::Instant;
pub use transfer::auto::{self, AutoChoice, AutoConfig, AutoInputs};
pub use transfer::policy::{Children, FeedbackPolicy, TreeShape};
pub use transfer::rate::{
    AdaptiveTimers, ErrorSignal, HuntParams, HuntState, HuntStep, HuntTimers, RateControl,
    RateController, RateStats,
};
pub use transfer::rate::{FinderState, RateFinder};
pub use transfer::rate::{MAX_PEERS, OwnRate, RateGroup, RateGroupConfig, RateGroupStats};
pub use transfer::receiver::{
    DataChunk, NoReadBack, OfferInfo, ReadBack, Receiver, ReceiverConfig, ReceiverEvent,
    ReceiverStats,
};
pub use transfer::sender::{
    ConfigError, EJECTED_LAGGARD, Laggard, MemberOutcome, ObjectInfo, Outcome, Repair, Sender,
    SenderConfig, SenderEvent, SenderStats, WIRE_OVERHEAD_BYTES,
};

use std::net::SocketAddr;

/// Where a datagram goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// The session's multicast group (the driver knows its address).
    Group,
    /// One peer's unicast address.
    Unicast(SocketAddr),
}

/// A datagram the machine wrote into the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Where to send it.
    pub dest: Dest,
    /// Its length: send `buf[..len]`.
    pub len: usize,
    /// Its packet type (for accounting; drivers need not decode).
    pub kind: Kind,
}

/// Where the sender's payload bytes come from (memory, an mmap'd file).
pub trait PayloadSource {
    /// Copies `dst.len()` object bytes starting at `offset` into `dst`.
    /// The sender only asks for ranges inside the object.
    fn read_at(&self, offset: u64, dst: &mut [u8]);
}

impl PayloadSource for [u8] {
    fn read_at(&self, offset: u64, dst: &mut [u8]) {
        let start = usize::try_from(offset).expect("offset inside the object");
        dst.copy_from_slice(&self[start..start + dst.len()]);
    }
}

impl PayloadSource for Vec<u8> {
    fn read_at(&self, offset: u64, dst: &mut [u8]) {
        self.as_slice().read_at(offset, dst);
    }
}

/// Size of the buffer a driver must pass to `poll_transmit`: the largest
/// UDP datagram over IPv4.
pub const MAX_DATAGRAM: usize = rmcast_wire::MAX_DATAGRAM;

/// `s` cut to at most `max` bytes at a character boundary (text fields on
/// the wire hold at most 255 bytes).
pub(crate) fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
