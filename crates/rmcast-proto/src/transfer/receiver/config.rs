//! How a receiver behaves ([`ReceiverConfig`]).

use rmcast_wire::SessionId;
use std::time::Duration;

/// How a receiver behaves.
#[derive(Clone, Debug)]
pub struct ReceiverConfig {
    /// Random identity; makes retransmitted joins idempotent.
    pub receiver_id: u64,
    /// Name shown in the sender's reports (at most 255 bytes are sent).
    pub name: String,
    /// Join only this session; `None` joins the first one announced.
    pub session: Option<SessionId>,
    /// Period of `Join` retransmission until admitted.
    pub join_interval: Duration,
    /// Give up when the sender is silent this long during a transfer.
    pub sender_timeout: Duration,
    /// Give up when no session is announced within this time (`None`: wait forever).
    pub listen_timeout: Option<Duration>,
    /// Minimum spacing of NAKs that repeat the same gap.
    pub nak_interval: Duration,
    /// Hunt's multicast NACK (several senders on one group): on a new gap
    /// in the sender's stream, also multicast an EXP `RateNak` to the
    /// group, so that every sender backs off; at most one per this
    /// interval, counting those other members sent about the same sender.
    /// `None` (the default): feedback goes to the sender only.
    pub rate_nak_interval: Option<Duration>,
    /// The group key: every datagram must open under it, and this
    /// receiver's own are sealed under the session's keys derived from it.
    /// `None` runs insecure, which the sender must do too.
    pub group_key: Option<std::sync::Arc<crate::security::GroupKey>>,
    /// FEC without a copy: keep none of the data packets delivered, and
    /// read a block's back from the driver's storage when parity rebuilds
    /// it ([`Receiver::handle_datagram_reading`](super::Receiver::handle_datagram_reading)).
    /// About one block buffer per receiver instead of one per unfinished
    /// block, and a packet copied only when its block is rebuilt; the
    /// driver must be able to read back every chunk it was handed.
    /// `false` (the default): the receiver keeps its own copies, for
    /// drivers that cannot read back (a stream to a pipe).
    pub fec_read_back: bool,
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        Self {
            receiver_id: 0,
            name: String::new(),
            session: None,
            join_interval: Duration::from_millis(100),
            sender_timeout: Duration::from_secs(10),
            listen_timeout: None,
            nak_interval: Duration::from_millis(5),
            rate_nak_interval: None,
            group_key: None,
            fec_read_back: false,
        }
    }
}
