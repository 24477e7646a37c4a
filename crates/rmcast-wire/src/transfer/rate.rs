//! The group rate control's kinds (`0x40`–`0x42`): group-scoped packets
//! every member may receive, whatever session it runs (`docs/rate-control.md`).

#[cfg(doc)]
use crate::RANK_SENDER;
use crate::enums::wire_enum;
use crate::{DecodeError, Seq};

wire_enum! {
    /// Which error a [`RateNak`] reports: the two NACKs of Hunt's protocol.
    pub enum RateNakKind (DecodeError, |_| DecodeError::BadField("rate_nak.kind")) {
        /// A receiver found a gap: `seq` is the first message it lacks.
        Exp = 1,
        /// The sender's acknowledgement timer expired: `seq` is the oldest
        /// unacknowledged message.
        Last = 2,
    }
}

/// `RateNak`: an error in one sender's stream, multicast to the group so
/// that every sender backs off. The header's session is the sender's
/// session the error concerns; its rank is the reporter's (a receiver's
/// rank in that session, or [`RANK_SENDER`] for `Last`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateNak {
    /// EXP or LAST.
    pub kind: RateNakKind,
    /// The message concerned.
    pub seq: Seq,
}

wire_enum! {
    /// Where a sender stands in the group's rate control.
    pub enum RatePhase (DecodeError, |_| DecodeError::BadField("rate_report.phase")) {
        /// Announced, not sending data yet.
        Idle = 0,
        /// In its data phase.
        Sending = 1,
        /// Done sending: its share of the rate goes to the others.
        Leaving = 2,
    }
}

/// `RateReport`: a sender's rate (the header's session says whose).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateReport {
    /// The resynchronisation round it answers, or the last one applied
    /// (an unsolicited report).
    pub epoch: u32,
    /// Where the sender stands.
    pub phase: RatePhase,
    /// Its minimum spacing between data packets, nanoseconds (at least 1).
    pub spacing_ns: u64,
    /// Data packets it multicast since the last resynchronisation.
    pub messages: u64,
}

/// What a [`RateSync`] asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateSyncOp {
    /// Every sender answers with a [`RateReport`] for this epoch.
    Request,
    /// Every sender adopts this spacing as its new initial rate.
    Set {
        /// The spacing, nanoseconds (at least 1).
        spacing_ns: u64,
        /// How many senders' rates it was computed from.
        members: u16,
    },
}

/// `RateSync`: the leader's resynchronisation (the header's session is the
/// leader's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateSync {
    /// Round number; larger is newer.
    pub epoch: u32,
    /// Request or set.
    pub op: RateSyncOp,
}
