//! Tree relaying: how acknowledgements travel along the tree.
//!
//! A receiver keeps its children's cumulative reports and sends one
//! aggregated ack upstream (to its parent, or the sender for a root) per
//! advance of the minimum over itself and its subtree ([`Relay`]). The
//! sender applies a root's aggregate to the root's whole subtree
//! (`SenderPolicy::speaks_for`) and, once any member failed, stops
//! trusting the relays ([`RelayHealth`]): its parent would wait for it
//! forever and its children report to a dead address.

use super::Children;
use rmcast_wire::{POLL_ALL, POLL_DIRECT};
use std::net::SocketAddr;

/// The sender's view of the relays: intact until a member fails.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RelayHealth {
    /// A member failed, so relayed acks no longer cover its subtree nor
    /// its ancestors; every poll goes directly to the sender from now on.
    broken: bool,
}

impl RelayHealth {
    /// A member failed: fall back to direct acknowledgements (the ack
    /// protocol's cost) rather than crawl one stall poll per RTO.
    pub(crate) fn on_member_failed(&mut self) {
        self.broken = true;
    }

    /// The poll a packet the policy polls with `poll` carries.
    pub(crate) fn route(&self, poll: u16) -> u16 {
        match poll {
            POLL_ALL if self.broken => POLL_DIRECT,
            poll => poll,
        }
    }

    /// The poll of a selective repair: an intact tree reports through its
    /// relays (direct answers to repairs, all N of them for a multicast
    /// one, tripled the tree's resends under loss in the simulator).
    pub(crate) fn repair_poll(&self) -> u16 {
        if self.broken { POLL_DIRECT } else { POLL_ALL }
    }
}

/// What a child's aggregated acknowledgement was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChildAck {
    /// Not from a child of this receiver.
    NotAChild,
    /// From a child, but beyond the object: corrupt or hostile.
    Malformed,
    /// Taken into the aggregate.
    Taken,
}

/// A tree receiver's relaying state: its children's reports and the
/// aggregated acks it owes upstream.
#[derive(Clone, Debug)]
pub(crate) struct Relay {
    /// Where aggregated acknowledgements go (`None`: the sender).
    upstream: Option<SocketAddr>,
    /// The children's ranks and their reported cumulative indexes.
    children: Children,
    child_cumulative: [u32; 2],
    /// The aggregated cumulative index last reported upstream, and the
    /// highest one an owed report will carry.
    reported: u32,
    pending: u32,
    /// Aggregated acks owed upstream, one per advance (as the ack protocol
    /// owes one per polled packet).
    owed: u32,
}

impl Relay {
    /// A relay reporting to `upstream` (the parent the `Welcome` named) for
    /// `children`.
    pub(crate) fn new(children: Children, upstream: Option<SocketAddr>) -> Self {
        Self {
            upstream,
            children,
            child_cumulative: [0; 2],
            reported: 0,
            pending: 0,
            owed: 0,
        }
    }

    /// Where aggregated acks go; `None`: the sender.
    pub(crate) fn upstream(&self) -> Option<SocketAddr> {
        self.upstream
    }

    /// A child's aggregated acknowledgement up to packet `index` (of
    /// `packets`), this receiver holding everything before `own`.
    pub(crate) fn on_child_ack(
        &mut self,
        rank: u16,
        index: u32,
        packets: u32,
        own: u32,
    ) -> ChildAck {
        let Some(slot) = self.children.as_slice().iter().position(|&c| c == rank) else {
            return ChildAck::NotAChild;
        };
        if index > packets {
            return ChildAck::Malformed;
        }
        if index > self.child_cumulative[slot] {
            self.child_cumulative[slot] = index;
            self.update(own);
        }
        ChildAck::Taken
    }

    /// This receiver now holds everything before `own`: owe an ack
    /// upstream if the subtree's minimum advanced.
    pub(crate) fn update(&mut self, own: u32) {
        let n = self.children.as_slice().len();
        let aggregate = self.child_cumulative[..n]
            .iter()
            .fold(own, |a, &c| a.min(c));
        if aggregate > self.pending {
            self.pending = aggregate;
            self.owed += 1;
        }
    }

    /// The cumulative index the next owed aggregated ack carries, if one
    /// is owed. The pending advance is spread over the acks owed, so each
    /// relayed ack reports one packet's worth, as the parent would have
    /// seen them one at a time.
    pub(crate) fn poll_report(&mut self) -> Option<u32> {
        if self.owed == 0 {
            return None;
        }
        let span = self.pending.saturating_sub(self.reported);
        let step = span.div_ceil(self.owed).max(1);
        self.owed -= 1;
        let aggregate = (self.reported + step).min(self.pending);
        self.reported = aggregate;
        Some(aggregate)
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::FeedbackPolicy;
    use super::*;
    use crate::TreeShape;

    fn chain_head() -> Relay {
        // Flat chains of 3: rank 0's child is rank 1.
        let p = FeedbackPolicy::Tree {
            shape: TreeShape::Flat,
            height: 3,
            receivers: 3,
        };
        Relay::new(p.children(0), None)
    }

    #[test]
    fn a_relay_reports_the_minimum_over_itself_and_its_children() {
        let mut r = chain_head();
        r.update(5);
        assert_eq!(r.poll_report(), None, "the child has reported nothing");
        assert_eq!(r.on_child_ack(1, 3, 10, 5), ChildAck::Taken);
        assert_eq!(r.poll_report(), Some(3));
        assert_eq!(r.poll_report(), None);
    }

    #[test]
    fn a_relay_spreads_an_advance_over_the_acks_it_owes() {
        let mut r = chain_head();
        r.on_child_ack(1, 10, 10, 2);
        r.update(6);
        r.update(10);
        let reports: Vec<u32> = std::iter::from_fn(|| r.poll_report()).collect();
        assert_eq!(reports, vec![4, 7, 10]);
    }

    #[test]
    fn a_relay_ignores_strangers_and_flags_acks_beyond_the_object() {
        let mut r = chain_head();
        assert_eq!(r.on_child_ack(2, 1, 10, 5), ChildAck::NotAChild);
        assert_eq!(r.on_child_ack(1, 11, 10, 5), ChildAck::Malformed);
        assert_eq!(r.poll_report(), None);
    }

    #[test]
    fn a_failed_member_turns_relayed_polls_into_direct_ones() {
        let mut h = RelayHealth::default();
        assert_eq!(h.route(POLL_ALL), POLL_ALL);
        assert_eq!(h.repair_poll(), POLL_ALL);
        h.on_member_failed();
        assert_eq!(h.route(POLL_ALL), POLL_DIRECT);
        assert_eq!(h.route(3), 3);
        assert_eq!(h.repair_poll(), POLL_DIRECT);
    }
}
