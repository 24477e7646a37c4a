//! Feedback policies: the only thing in which the reliability protocols differ.
//!
//! The engine around a policy is shared: session setup, the buffer handshake,
//! the sliding window, retransmission (Go-back-N or selective), suppression
//! and the close handshake. A policy decides which data packets ask for an
//! acknowledgement and from whom (the `poll` field of the data header), and,
//! for the tree, along which path acknowledgements travel.
//!
//! Receivers answer a poll addressed to them with a cumulative `Ack` and send
//! a `Nak` on a sequence gap whatever the policy; the sender frees a packet
//! once every live receiver's cumulative acknowledgement has passed it. That
//! release rule is exactly the ring's (receiver `k` is polled for packets
//! `s ≡ k (mod N)`, so once the acknowledgement for `s` and all earlier ones
//! are in, every receiver has reported past `s - N + 1`). The tree adds
//! relaying: a receiver reports its subtree's cumulative state to its parent
//! only once its children have reported theirs.
//!
//! One file per protocol: `ack.rs`, `nak_poll.rs`, `ring.rs`, `tree.rs`
//! (topology) with `tree/relay.rs` (relaying). [`FeedbackPolicy`] is the
//! public description; [`SenderPolicy`] is the hooks the `Sender` calls
//! (whom a packet polls, whom an acknowledgement speaks for), and the
//! `Receiver` takes its tree relay from [`relay::Relay`].

mod ack;
mod nak_poll;
mod ring;
mod tree;

pub(crate) use tree::relay;
pub use tree::{Children, TreeShape};

use rmcast_wire::{POLL_ALL, POLL_DIRECT, ProtocolId};

/// Which data packets ask which receivers for an acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeedbackPolicy {
    /// Every receiver acknowledges every data packet (the paper's ACK-based
    /// protocol): N control packets per data packet, all at the sender.
    Ack,
    /// Receivers stay silent except for NAKs; every `poll_interval`-th packet
    /// and the last one are acknowledged by all (NAK-based with polling):
    /// N / i control packets per data packet.
    NakPoll {
        /// Packets between polls (`i`); at most the window.
        poll_interval: u32,
    },
    /// Receivers take turns: rank `s mod N` acknowledges packet `s`
    /// (cumulatively), the last packet is acknowledged by all (ring-based):
    /// one control packet per data packet. The window must exceed N.
    Ring {
        /// Receivers in the ring.
        receivers: u16,
    },
    /// Every receiver acknowledges every packet to its parent once its
    /// children have (tree-based): N control packets per data packet, of
    /// which the sender processes only those of the roots.
    Tree {
        /// Arrangement of the receivers.
        shape: TreeShape,
        /// Chain length H of the flat tree (ignored by the binary tree).
        height: u16,
        /// Receivers in the tree.
        receivers: u16,
    },
}

impl FeedbackPolicy {
    /// The protocol this policy implements.
    #[must_use]
    pub fn protocol(&self) -> ProtocolId {
        match self {
            FeedbackPolicy::Ack => ProtocolId::Ack,
            FeedbackPolicy::NakPoll { .. } => ProtocolId::NakPoll,
            FeedbackPolicy::Ring { .. } => ProtocolId::Ring,
            FeedbackPolicy::Tree { .. } => ProtocolId::Tree,
        }
    }

    /// The offer's `protocol_param` for this policy.
    #[must_use]
    pub fn protocol_param(&self) -> u16 {
        match *self {
            FeedbackPolicy::Tree { shape, height, .. } => tree::protocol_param(shape, height),
            _ => 0,
        }
    }

    /// The policy a receiver follows, from the offer's fields. The poll
    /// interval does not matter to receivers (the sender chooses the polls).
    #[must_use]
    pub fn from_offer(protocol: ProtocolId, param: u16, receivers: u16) -> Option<Self> {
        Some(match protocol {
            ProtocolId::Ack => FeedbackPolicy::Ack,
            ProtocolId::NakPoll => FeedbackPolicy::NakPoll { poll_interval: 1 },
            ProtocolId::Ring => FeedbackPolicy::Ring { receivers },
            ProtocolId::Tree => {
                let (shape, height) = tree::from_param(param)?;
                FeedbackPolicy::Tree {
                    shape,
                    height,
                    receivers,
                }
            }
        })
    }

    /// Whether receivers relay aggregated acknowledgements (the tree).
    #[must_use]
    pub fn relays(&self) -> bool {
        matches!(self, FeedbackPolicy::Tree { .. })
    }

    /// The poll field for data packet `index` of an object of `packets` packets.
    #[must_use]
    pub fn poll_for(&self, index: u32, packets: u32) -> u16 {
        match *self {
            FeedbackPolicy::Ack => ack::poll_for(),
            FeedbackPolicy::NakPoll { poll_interval } => {
                nak_poll::poll_for(index, packets, poll_interval)
            }
            FeedbackPolicy::Ring { receivers } => ring::poll_for(index, packets, receivers),
            FeedbackPolicy::Tree { .. } => tree::poll_for(),
        }
    }

    /// The rank `rank` acknowledges to, or `None` for the sender.
    #[must_use]
    pub fn parent(&self, rank: u16) -> Option<u16> {
        match *self {
            FeedbackPolicy::Tree { shape, height, .. } => tree::parent(shape, height, rank),
            _ => None,
        }
    }

    /// The ranks that acknowledge to `rank`.
    #[must_use]
    pub fn children(&self, rank: u16) -> Children {
        match *self {
            FeedbackPolicy::Tree {
                shape,
                height,
                receivers,
            } => tree::children(shape, height, receivers, rank),
            _ => Children::default(),
        }
    }

    /// Every rank in `rank`'s subtree, itself first: the receivers an
    /// aggregated acknowledgement from `rank` speaks for. Allocation-free.
    pub fn subtree(&self, rank: u16) -> impl Iterator<Item = u16> + use<> {
        let tree = match *self {
            FeedbackPolicy::Tree {
                shape,
                height,
                receivers,
            } => Some((shape, height, receivers)),
            _ => None,
        };
        tree::subtree(rank, tree)
    }

    /// Whether a receiver of rank `rank` answers a data packet polling
    /// `poll` itself, to the sender: tree receivers report through their
    /// parent instead, and everyone answers a direct poll.
    pub(crate) fn answers_poll(&self, poll: u16, rank: u16) -> bool {
        poll == POLL_DIRECT || !self.relays() && (poll == POLL_ALL || poll == rank)
    }
}

/// The policy as the `Sender` uses it: the poll each packet carries and
/// whom an acknowledgement speaks for, with the tree's relays watched
/// ([`relay::RelayHealth`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SenderPolicy {
    policy: FeedbackPolicy,
    /// The tree's relays; `None` for policies without them.
    relays: Option<relay::RelayHealth>,
}

impl SenderPolicy {
    pub(crate) fn new(policy: FeedbackPolicy) -> Self {
        Self {
            policy,
            relays: policy.relays().then(relay::RelayHealth::default),
        }
    }

    /// The policy described.
    pub(crate) fn policy(&self) -> &FeedbackPolicy {
        &self.policy
    }

    /// The poll field of window packet `index` of `packets`.
    pub(crate) fn poll_for(&self, index: u32, packets: u32) -> u16 {
        let poll = self.policy.poll_for(index, packets);
        self.relays.map_or(poll, |r| r.route(poll))
    }

    /// The poll field of a selective repair: the receivers that lacked it
    /// say at once that they hold it now (the window may wait on exactly
    /// this packet, and the policy's next poll may lie beyond the window).
    pub(crate) fn repair_poll(&self) -> u16 {
        self.relays.map_or(POLL_DIRECT, |r| r.repair_poll())
    }

    /// A member was removed from the session.
    pub(crate) fn on_member_failed(&mut self) {
        if let Some(r) = &mut self.relays {
            r.on_member_failed();
        }
    }

    /// The ranks an acknowledgement from `rank` speaks for: its whole
    /// subtree when it is a relay's aggregate, else itself alone.
    pub(crate) fn speaks_for(
        &self,
        rank: u16,
        aggregate: bool,
    ) -> impl Iterator<Item = u16> + use<> {
        let policy = if aggregate && self.relays.is_some() {
            self.policy
        } else {
            FeedbackPolicy::Ack
        };
        policy.subtree(rank)
    }
}
