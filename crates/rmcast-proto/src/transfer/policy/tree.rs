//! Tree-based: every receiver acknowledges every packet to its parent once
//! its children have, so the sender hears only the roots (N control
//! packets on the network, N/H at the sender).
//!
//! This file is the topology: the shapes, `parent`, `children` and
//! `subtree`, pure and tested for every N up to 64. How acknowledgements
//! travel along it — a receiver's aggregation of its children's reports,
//! the sender's fallback to direct polls once a relay died — is
//! [`relay`].

pub(crate) mod relay;

use rmcast_wire::POLL_ALL;

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

/// Every packet polls everyone; the relays carry the answers up.
pub(super) fn poll_for() -> u16 {
    POLL_ALL
}

/// The offer's `protocol_param`: the height, and the shape in bit 15.
pub(super) fn protocol_param(shape: TreeShape, height: u16) -> u16 {
    (height & !BINARY_BIT)
        | if shape == TreeShape::Binary {
            BINARY_BIT
        } else {
            0
        }
}

/// Shape and height from an offer's `protocol_param`; `None` for a flat
/// tree of height zero.
pub(super) fn from_param(param: u16) -> Option<(TreeShape, u16)> {
    let height = param & !BINARY_BIT;
    let shape = if param & BINARY_BIT != 0 {
        TreeShape::Binary
    } else {
        TreeShape::Flat
    };
    if height == 0 && shape == TreeShape::Flat {
        return None;
    }
    Some((shape, height))
}

/// The rank `rank` acknowledges to, or `None` for the sender.
pub(super) fn parent(shape: TreeShape, height: u16, rank: u16) -> Option<u16> {
    match shape {
        TreeShape::Flat => (!rank.is_multiple_of(height.max(1))).then(|| rank - 1),
        TreeShape::Binary => (rank >= 2).then(|| (rank - 2) / 2),
    }
}

/// The ranks that acknowledge to `rank`.
pub(super) fn children(shape: TreeShape, height: u16, receivers: u16, rank: u16) -> Children {
    let mut c = Children::default();
    match shape {
        TreeShape::Flat => {
            let next = u32::from(rank) + 1;
            if next < u32::from(receivers) && next % u32::from(height.max(1)) != 0 {
                c.push(next as u16);
            }
        }
        TreeShape::Binary => {
            for child in [2 * u32::from(rank) + 2, 2 * u32::from(rank) + 3] {
                if child < u32::from(receivers) {
                    c.push(child as u16);
                }
            }
        }
    }
    c
}

/// Every rank in `rank`'s subtree, itself first; `tree` is (shape, height,
/// receivers), `None` for a policy without relays (the subtree is `rank`
/// alone). Allocation-free.
pub(super) fn subtree(
    rank: u16,
    tree: Option<(TreeShape, u16, u16)>,
) -> impl Iterator<Item = u16> + use<> {
    let (receivers, shape, height) = match tree {
        Some((shape, height, receivers)) => {
            (u32::from(receivers), Some(shape), u32::from(height.max(1)))
        }
        None => (u32::from(rank) + 1, None, 1),
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

#[cfg(test)]
mod tests {
    use super::super::FeedbackPolicy;
    use super::TreeShape;

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
