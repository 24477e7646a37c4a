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

use rmcast_wire::{POLL_ALL, POLL_NONE, ProtocolId};

/// How a tree protocol arranges the receivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreeShape {
    /// The paper's flat tree (Fig. 5): ⌈N/H⌉ chains of at most H receivers;
    /// the sender hears only the chain heads. At most N/H receivers transmit
    /// at once.
    Flat,
    /// A binary tree that grows with N (the paper's Fig. 4): the sender's
    /// children are ranks 0 and 1, rank r's children are 2r+2 and 2r+3.
    /// Height ⌈log2(N+2)⌉ - 1, up to N/2 simultaneous transmissions.
    Binary,
}

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

/// Bit 15 of a tree offer's `protocol_param`: binary shape.
const BINARY_BIT: u16 = 0x8000;

/// Up to two child ranks (a flat tree node has at most one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Children {
    ranks: [u16; 2],
    len: u8,
}

impl Children {
    fn push(&mut self, rank: u16) {
        self.ranks[usize::from(self.len)] = rank;
        self.len += 1;
    }

    /// The child ranks.
    #[must_use]
    pub fn as_slice(&self) -> &[u16] {
        &self.ranks[..usize::from(self.len)]
    }
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
            FeedbackPolicy::Tree { shape, height, .. } => {
                (height & !BINARY_BIT)
                    | if shape == TreeShape::Binary {
                        BINARY_BIT
                    } else {
                        0
                    }
            }
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
                let height = param & !BINARY_BIT;
                let shape = if param & BINARY_BIT != 0 {
                    TreeShape::Binary
                } else {
                    TreeShape::Flat
                };
                if height == 0 && shape == TreeShape::Flat {
                    return None;
                }
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
        let last = index + 1 == packets;
        match *self {
            FeedbackPolicy::Ack | FeedbackPolicy::Tree { .. } => POLL_ALL,
            FeedbackPolicy::NakPoll { poll_interval } => {
                if last || (index + 1).is_multiple_of(poll_interval) {
                    POLL_ALL
                } else {
                    POLL_NONE
                }
            }
            FeedbackPolicy::Ring { receivers } => {
                if last {
                    POLL_ALL
                } else {
                    (index % u32::from(receivers)) as u16
                }
            }
        }
    }

    /// The rank `rank` acknowledges to, or `None` for the sender.
    #[must_use]
    pub fn parent(&self, rank: u16) -> Option<u16> {
        match *self {
            FeedbackPolicy::Tree {
                shape: TreeShape::Flat,
                height,
                ..
            } => (!rank.is_multiple_of(height.max(1))).then(|| rank - 1),
            FeedbackPolicy::Tree {
                shape: TreeShape::Binary,
                ..
            } => (rank >= 2).then(|| (rank - 2) / 2),
            _ => None,
        }
    }

    /// The ranks that acknowledge to `rank`.
    #[must_use]
    pub fn children(&self, rank: u16) -> Children {
        let mut c = Children::default();
        match *self {
            FeedbackPolicy::Tree {
                shape: TreeShape::Flat,
                height,
                receivers,
            } => {
                let next = u32::from(rank) + 1;
                if next < u32::from(receivers) && next % u32::from(height.max(1)) != 0 {
                    c.push(next as u16);
                }
            }
            FeedbackPolicy::Tree {
                shape: TreeShape::Binary,
                receivers,
                ..
            } => {
                for child in [2 * u32::from(rank) + 2, 2 * u32::from(rank) + 3] {
                    if child < u32::from(receivers) {
                        c.push(child as u16);
                    }
                }
            }
            _ => {}
        }
        c
    }

    /// Every rank in `rank`'s subtree, itself first: the receivers an
    /// aggregated acknowledgement from `rank` speaks for. Allocation-free.
    pub fn subtree(&self, rank: u16) -> impl Iterator<Item = u16> + use<> {
        let (receivers, shape, height) = match *self {
            FeedbackPolicy::Tree {
                shape,
                height,
                receivers,
            } => (u32::from(receivers), Some(shape), u32::from(height.max(1))),
            _ => (u32::from(rank) + 1, None, 1),
        };
        let r = u32::from(rank);
        // Flat: the rest of the chain. Binary: level d of the subtree of heap
        // index i = r + 1 (sender = index 0) spans indices
        // [(i+1)·2^d − 1, (i+1)·2^d − 1 + 2^d).
        let flat_end = match shape {
            Some(TreeShape::Flat) => ((r / height + 1) * height).min(receivers),
            _ => r + 1,
        };
        let binary = shape == Some(TreeShape::Binary);
        (0u32..32)
            .take_while(move |&d| !binary && d == 0 || binary && ((r + 2) << d) - 2 < receivers)
            .flat_map(move |d| {
                if binary {
                    let first = ((r + 2) << d) - 2;
                    first..(first + (1 << d)).min(receivers)
                } else {
                    r..flat_end
                }
            })
            .map(|x| x as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nak_poll_polls_every_ith_and_the_last_packet() {
        let p = FeedbackPolicy::NakPoll { poll_interval: 4 };
        let polled: Vec<u32> = (0..10).filter(|&i| p.poll_for(i, 10) == POLL_ALL).collect();
        assert_eq!(polled, vec![3, 7, 9]);
    }

    #[test]
    fn ack_polls_every_packet() {
        assert!((0..10).all(|i| FeedbackPolicy::Ack.poll_for(i, 10) == POLL_ALL));
    }

    #[test]
    fn ring_rotates_the_token_and_everyone_acks_the_last_packet() {
        let p = FeedbackPolicy::Ring { receivers: 3 };
        let polls: Vec<u16> = (0..7).map(|i| p.poll_for(i, 7)).collect();
        assert_eq!(polls, vec![0, 1, 2, 0, 1, 2, POLL_ALL]);
    }

    fn flat(height: u16, receivers: u16) -> FeedbackPolicy {
        FeedbackPolicy::Tree {
            shape: TreeShape::Flat,
            height,
            receivers,
        }
    }

    fn binary(receivers: u16) -> FeedbackPolicy {
        FeedbackPolicy::Tree {
            shape: TreeShape::Binary,
            height: 0,
            receivers,
        }
    }

    #[test]
    fn flat_tree_forms_chains_of_height_h() {
        let p = flat(3, 8); // chains 0-1-2, 3-4-5, 6-7
        let parents: Vec<Option<u16>> = (0..8).map(|r| p.parent(r)).collect();
        assert_eq!(
            parents,
            vec![
                None,
                Some(0),
                Some(1),
                None,
                Some(3),
                Some(4),
                None,
                Some(6)
            ]
        );
        assert_eq!(p.children(1).as_slice(), &[2]);
        assert_eq!(p.children(2).as_slice(), &[] as &[u16]);
        assert_eq!(p.children(7).as_slice(), &[] as &[u16]);
        assert_eq!(p.subtree(3).collect::<Vec<_>>(), vec![3, 4, 5]);
        assert_eq!(p.subtree(7).collect::<Vec<_>>(), vec![7]);
        assert_eq!(p.subtree(6).collect::<Vec<_>>(), vec![6, 7]);
    }

    #[test]
    fn flat_tree_of_height_one_is_the_ack_protocol() {
        let p = flat(1, 5);
        for r in 0..5 {
            assert_eq!(p.parent(r), None);
            assert!(p.children(r).as_slice().is_empty());
            assert_eq!(p.subtree(r).collect::<Vec<_>>(), vec![r]);
        }
    }

    #[test]
    fn binary_tree_grows_from_the_sender() {
        let p = binary(7);
        assert_eq!(p.parent(0), None);
        assert_eq!(p.parent(1), None);
        assert_eq!(p.parent(2), Some(0));
        assert_eq!(p.parent(5), Some(1));
        assert_eq!(p.children(0).as_slice(), &[2, 3]);
        assert_eq!(p.children(1).as_slice(), &[4, 5]);
        assert_eq!(p.children(2).as_slice(), &[6]);
        assert_eq!(p.subtree(0).collect::<Vec<_>>(), vec![0, 2, 3, 6]);
        assert_eq!(p.subtree(1).collect::<Vec<_>>(), vec![1, 4, 5]);
    }

    #[test]
    fn subtrees_and_parents_agree_for_every_shape_and_size() {
        for n in 1..=64u16 {
            for p in [flat(1, n), flat(3, n), flat(n, n), binary(n)] {
                let mut covered = vec![0u32; usize::from(n)];
                for r in 0..n {
                    // Each rank's subtree is itself plus its children's subtrees.
                    let mut expect = vec![r];
                    for &c in p.children(r).as_slice() {
                        assert_eq!(p.parent(c), Some(r), "{p:?} child {c} of {r}");
                        expect.extend(p.subtree(c));
                    }
                    let mut got: Vec<u16> = p.subtree(r).collect();
                    got.sort_unstable();
                    expect.sort_unstable();
                    assert_eq!(got, expect, "{p:?} rank {r}");
                    if p.parent(r).is_none() {
                        for x in p.subtree(r) {
                            covered[usize::from(x)] += 1;
                        }
                    }
                }
                // The roots' subtrees partition the receivers.
                assert!(covered.iter().all(|&c| c == 1), "{p:?}: {covered:?}");
            }
        }
    }

    #[test]
    fn tree_parameters_survive_the_offer() {
        for p in [flat(6, 30), binary(30)] {
            let back = FeedbackPolicy::from_offer(p.protocol(), p.protocol_param(), 30).unwrap();
            match (p, back) {
                (FeedbackPolicy::Tree { shape: a, .. }, FeedbackPolicy::Tree { shape: b, .. }) => {
                    assert_eq!(a, b)
                }
                _ => panic!(),
            }
            assert_eq!(back.parent(5), p.parent(5));
        }
    }
}
