//! What a sender tells its driver: events as they happen, counters, and
//! the outcome of a finished session.

use rmcast_wire::SessionId;
use std::net::SocketAddr;

/// Something the sending application should know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SenderEvent {
    /// Another session was announced on this sender's group (receivers
    /// take the first session they hear: the two split them).
    OtherSession {
        /// The other session.
        session: SessionId,
        /// Where its announcement came from.
        sender: SocketAddr,
    },
    /// A receiver registered and got `rank`.
    Joined {
        /// Rank given.
        rank: u16,
        /// The receiver's name.
        name: String,
        /// Its unicast address.
        addr: SocketAddr,
    },
    /// Every admitted receiver is registered; the object is being offered.
    AllJoined,
    /// `--protocol auto` ([`SenderConfig::auto`](crate::SenderConfig::auto))
    /// chose the data phase for the group that registered; comes just
    /// before [`SenderEvent::AllJoined`].
    Chose(Box<crate::AutoChoice>),
    /// The join wait ran out with `joined` of `wanted` registered, at
    /// least `SenderConfig::min_receivers`: the session goes on with them
    /// (an [`SenderEvent::AllJoined`] follows).
    StartedShort {
        /// Receivers registered.
        joined: u16,
        /// Receivers expected.
        wanted: u16,
    },
    /// A receiver accepted the offer.
    Accepted {
        /// Its rank.
        rank: u16,
    },
    /// A receiver was removed from the session.
    MemberFailed {
        /// Its rank.
        rank: u16,
        /// Its name.
        name: String,
        /// Why, for a human.
        reason: String,
    },
    /// A receiver far behind the group was moved to a TCP catch-up
    /// ([`Laggard::Tcp`](crate::Laggard::Tcp)): the driver is to serve it
    /// the object from byte `from` on, and report how that ended with
    /// [`Sender::catch_up_done`](crate::Sender::catch_up_done).
    Moved {
        /// Its rank.
        rank: u16,
        /// Its name.
        name: String,
        /// Its unicast address (the catch-up comes from its IP).
        addr: SocketAddr,
        /// The bytes it held from the start of the object.
        from: u64,
        /// Why, for a human.
        reason: String,
    },
    /// A receiver confirmed a verified copy.
    Verified {
        /// Its rank.
        rank: u16,
    },
    /// The session is over; see [`Sender::outcome`](crate::Sender::outcome).
    Finished,
}

/// How one receiver fared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberOutcome {
    /// Rank in the session.
    pub rank: u16,
    /// Name it registered with.
    pub name: String,
    /// Its unicast address.
    pub addr: SocketAddr,
    /// Whether it confirmed a hash-verified copy.
    pub verified: bool,
    /// Why not, when not.
    pub reason: Option<String>,
    /// It fell far behind the group and was moved to a TCP catch-up
    /// ([`Laggard::Tcp`](crate::Laggard::Tcp)) holding this many bytes of
    /// the object; `verified` says how that ended.
    pub caught_up_from: Option<u64>,
}

/// The result of a finished session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// True when every admitted receiver verified the object.
    pub ok: bool,
    /// A session-level failure (too few receivers, aborted), if any.
    pub error: Option<String>,
    /// Every admitted receiver, by rank.
    pub members: Vec<MemberOutcome>,
    /// Receivers expected that never registered (the session started
    /// without them under `SenderConfig::min_receivers`).
    pub missing: u16,
}

impl Outcome {
    /// Number of receivers that confirmed a verified copy.
    #[must_use]
    pub fn verified(&self) -> usize {
        self.members.iter().filter(|m| m.verified).count()
    }
}

/// Counters a driver reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// First transmissions of data packets.
    pub data_packets: u64,
    /// Data packets sent again.
    pub retransmitted_packets: u64,
    /// Every non-data packet received (with a valid header for this session).
    pub control_packets: u64,
    /// Acks received.
    pub acks: u64,
    /// Naks received.
    pub naks: u64,
    /// Control packets the sender sent.
    pub control_sent: u64,
    /// Datagrams that failed to decode.
    pub malformed: u64,
    /// Well-formed datagrams of another session or role.
    pub foreign: u64,
    /// Retransmission timeouts that fired.
    pub timeouts: u64,
    /// Members asked again by unicast because their answer went missing
    /// while the others' arrived, instead of waiting for a timeout: the
    /// window's base resent polling them, or the `Offer` or `Close`.
    pub repolls: u64,
    /// Go-back-N rewinds (timeouts and NAKs).
    pub rewinds: u64,
    /// Selective repairs sent to one receiver.
    pub unicast_repairs: u64,
    /// Selective repairs multicast to the group.
    pub multicast_repairs: u64,
    /// `RateNak`s of other senders' sessions heard (each an
    /// [`crate::ErrorSignal::Group`] for the rate controller).
    pub group_naks: u64,
    /// Other group rate-control packets heard (`RateReport`, `RateSync`).
    pub group_packets: u64,
    /// Group rate-control packets sent (`RateNak` LAST, `RateReport`, `RateSync`).
    pub group_sent: u64,
    /// Keepalives: the last data packet again, polling no one, multicast
    /// while every byte is acknowledged but the object's hash (and so the
    /// `Close`) is not ready, so that receivers do not time the sender out.
    pub keepalives: u64,
    /// Sealing: packets sealed and opened, and those refused, by reason.
    pub auth: crate::security::AuthStats,
    /// Packets receivers said they lacked after acknowledging them (never
    /// repaired; see the overclaim limit).
    pub overclaimed_packets: u64,
    /// Resume and delta: packets never sent because every receiver held
    /// them already.
    pub skipped_packets: u64,
    /// Resume and delta: receivers whose `Have` report arrived complete.
    pub have_reports: u64,
    /// FEC parity packets sent, proactive and on demand (not counted in
    /// `retransmitted_packets`).
    pub parity_packets: u64,
}
