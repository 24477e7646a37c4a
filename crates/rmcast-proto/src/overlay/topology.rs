//! Who sends which segments to whom: the overlay shapes, without sockets.
//!
//! Nodes are numbered by rank: the sender is rank 0 ([`SENDER`]) and the
//! receivers are ranks `1..=n`, in the order they registered. The object is
//! cut into segments of a fixed size (the last one may be shorter); every
//! edge of the overlay carries a [`SegmentSet`]: all segments, or only the
//! even- or odd-numbered ones.
//!
//! The shapes follow Happe & Vinter, "Improving TCP/IP Multicasting with
//! Message Segmentation":
//!
//! - [`OverlayShape::Direct`]: the sender writes the object to every receiver
//!   over its own connection (MultiTCP). Multicast time `(n-1)b + d`: the
//!   sender's link carries the object `n` times.
//! - [`OverlayShape::Tree`]: a complete tree of constant fanout `f` with the
//!   sender at the root (heap numbering: the children of `p` are
//!   `f*p+1 ..= f*p+f`). Store-and-forward: a node forwards only once it holds
//!   the whole object, to its children one after the other, so the time is
//!   about `h(d + f b)` with `h = ⌊log_f n⌋`.
//! - [`OverlayShape::Binomial`]: the binomial tree of the paper's Fig. 1b. In
//!   step `k` every node `p < 2^k` that holds the object sends it to
//!   `p + 2^k`; so the parent of `p` is `p` without its highest set bit and a
//!   node serves its children in increasing `k` (largest subtree first).
//!   Store-and-forward; `⌈log2(n+1)⌉` steps.
//! - [`OverlayShape::Chain`]: the paper's "segmented seqtree", a pipeline
//!   `0 → 1 → … → n`. Every node sends and receives the object at most once
//!   and holds at most two connections, but the path is `n` hops long, which
//!   costs `(n-1)(d + b_s)` of start-up delay for small objects.
//! - [`OverlayShape::Bintree`]: the paper's "segmented bintree" (Fig. 3). Two
//!   binary trees over all receivers; the sender feeds the even segments to
//!   the root of tree A and the odd ones to the root of tree B. Tree A is
//!   the heap over ranks `1, 2, …, n` (interior nodes `1..=⌊n/2⌋`), tree B
//!   the heap over the same ranks in reverse order `n, n-1, …, 1` (interior
//!   nodes `⌈n/2⌉+1..=n`). The interior sets are disjoint, so every
//!   receiver is interior in at most one tree: it forwards at most two
//!   children × half the segments = the message size (plus at most one
//!   segment when the count is odd), and holds at most four connections
//!   (one parent per tree, at most two children). The depth is
//!   `⌊log2 n⌋ + 1` hops from the sender. The paper shows four connections
//!   is the minimum for an `O(log n)` path under the "forward at most the
//!   message size" constraint.
//!
//! - [`OverlayShape::Pipeline`]: the binomial pipeline (Ganesan &
//!   Seshadri; RDMC, Behrens et al., DSN 2018), built by `pipeline` (below). Every
//!   node sends and receives at once from the first segments, each segment
//!   reaches everyone within `⌊log2 N⌋ + 5` hops, and every node sends about
//!   the object once (the sender exactly once).
//!
//! Chain, bintree and pipeline are pipelined (a node forwards segment `k` while it
//! receives `k+1`); tree and binomial are the paper's unsegmented
//! store-and-forward variants; direct never forwards.

pub use rmcast_wire::overlay::{OverlayShape, SegmentSet};

/// The sender's rank.
pub const SENDER: u16 = 0;

/// Which edges of a node share a TCP connection: for each child edge (by
/// the peers' ranks, `children`), the parent edge (index into `parents`)
/// that comes back from the same peer on the same connection.
///
/// TCP is full duplex, and the two directions flow-control each other not
/// at all, so an edge to a peer and an edge from it ride one connection,
/// one each way, and wait on each other no more than on two connections:
/// the `k`-th edge to a peer pairs with the `k`-th edge from it, in the
/// assignment's order (which both ends get from the same topology, edges
/// between two nodes in the order of their segment sets). The node of the
/// lower rank opens the connection; the other writes its edge back on it.
/// A connection never carries two edges the same way, so no segment waits
/// behind another class's (the pipeline's twins exchange several classes:
/// one connection per class each way, paired).
#[must_use]
pub fn duplex_pairs(parents: &[u16], children: &[u16]) -> Vec<Option<usize>> {
    let mut taken = vec![false; parents.len()];
    (children.iter())
        .map(|&peer| {
            let pi = (0..parents.len()).find(|&pi| parents[pi] == peer && !taken[pi])?;
            taken[pi] = true;
            Some(pi)
        })
        .collect()
}

/// How a node relays what it receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forwarding {
    /// Segment by segment, while still receiving.
    Pipelined,
    /// Only once the whole object arrived and verified, one child after the other.
    StoreAndForward,
}

impl Forwarding {
    /// How nodes of `shape` relay the object.
    #[must_use]
    pub fn of(shape: OverlayShape) -> Self {
        match shape {
            OverlayShape::Tree { .. } | OverlayShape::Binomial => Self::StoreAndForward,
            OverlayShape::Direct
            | OverlayShape::Chain
            | OverlayShape::Bintree
            | OverlayShape::Pipeline => Self::Pipelined,
        }
    }
}

/// Parses a protocol name of the CLI into a shape; `None` for other names
/// (the UDP protocols) and for `tcp-tree` with a fanout of 0.
#[must_use]
pub fn parse_shape(protocol: &str, fanout: u32) -> Option<OverlayShape> {
    Some(match protocol {
        "tcp-direct" => OverlayShape::Direct,
        "tcp-tree" if fanout > 0 => OverlayShape::Tree { fanout },
        "tcp-binomial" => OverlayShape::Binomial,
        "tcp-chain" => OverlayShape::Chain,
        "tcp-bintree" => OverlayShape::Bintree,
        "tcp-pipeline" => OverlayShape::Pipeline,
        _ => return None,
    })
}

/// One end of an edge as seen from a node: the peer and what flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// The peer's rank.
    pub peer: u16,
    /// The segments that flow over the edge.
    pub segments: SegmentSet,
}

/// A node's place in the overlay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodePlan {
    /// Where this node's segments come from (empty for the sender).
    pub parents: Vec<Link>,
    /// Where it sends segments, in the order it serves them.
    pub children: Vec<Link>,
}

/// The whole overlay: one [`NodePlan`] per rank, the sender at index 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// The shape it was built from.
    pub shape: OverlayShape,
    /// Plans indexed by rank (`nodes[0]` is the sender).
    pub nodes: Vec<NodePlan>,
}

impl Topology {
    /// Builds the overlay of `shape` over `receivers` receivers (ranks
    /// `1..=receivers`). A tree fanout of 0 is treated as 1.
    #[must_use]
    pub fn build(shape: OverlayShape, receivers: u16) -> Self {
        let n = usize::from(receivers);
        let mut t = Self {
            shape,
            nodes: vec![NodePlan::default(); n + 1],
        };
        match shape {
            OverlayShape::Direct => {
                for r in 1..=n {
                    t.link(0, r, SegmentSet::All);
                }
            }
            OverlayShape::Chain => {
                for r in 1..=n {
                    t.link(r - 1, r, SegmentSet::All);
                }
            }
            OverlayShape::Tree { fanout } => {
                let f = fanout.max(1) as usize;
                for p in 0..=n {
                    for c in (f * p + 1)..=(f * p + f) {
                        if c > n {
                            break;
                        }
                        t.link(p, c, SegmentSet::All);
                    }
                }
            }
            OverlayShape::Binomial => {
                // Children in step order: p sends to p + 2^k for every
                // 2^k > p, smallest k (largest subtree) first.
                for p in 0..=n {
                    let mut step = 1usize;
                    while p + step <= n {
                        if step > p {
                            t.link(p, p + step, SegmentSet::All);
                        }
                        step *= 2;
                    }
                }
            }
            OverlayShape::Pipeline => {
                for (from, to, segments) in pipeline(n) {
                    t.link(from, to, segments);
                }
            }
            OverlayShape::Bintree => {
                if n == 0 {
                    return t;
                }
                if n == 1 {
                    // Both trees are the single receiver: one connection.
                    t.link(0, 1, SegmentSet::All);
                    return t;
                }
                // Heap position h (1-based) of tree A is rank h; of tree B, rank n+1-h.
                let a = |h: usize| h;
                let b = |h: usize| n + 1 - h;
                t.link(0, a(1), SegmentSet::Even);
                t.link(0, b(1), SegmentSet::Odd);
                for h in 2..=n {
                    t.link(a(h / 2), a(h), SegmentSet::Even);
                }
                for h in 2..=n {
                    t.link(b(h / 2), b(h), SegmentSet::Odd);
                }
            }
        }
        t
    }

    fn link(&mut self, from: usize, to: usize, segments: SegmentSet) {
        let (f, t) = (from as u16, to as u16);
        self.nodes[from].children.push(Link { peer: t, segments });
        self.nodes[to].parents.push(Link { peer: f, segments });
    }

    /// Number of receivers.
    #[must_use]
    pub fn receivers(&self) -> u16 {
        (self.nodes.len() - 1) as u16
    }

    /// The plan of `rank` (panics when out of range).
    #[must_use]
    pub fn node(&self, rank: u16) -> &NodePlan {
        &self.nodes[usize::from(rank)]
    }

    /// TCP connections `rank` holds: one per edge, but an edge to a peer
    /// and one from it share a connection, one each way
    /// ([`duplex_pairs`]).
    #[must_use]
    pub fn connections(&self, rank: u16) -> usize {
        let n = self.node(rank);
        let parents: Vec<u16> = n.parents.iter().map(|l| l.peer).collect();
        let children: Vec<u16> = n.children.iter().map(|l| l.peer).collect();
        let shared = duplex_pairs(&parents, &children).iter().flatten().count();
        n.parents.len() + n.children.len() - shared
    }

    /// Segments `rank` sends for an object of `segments` segments.
    #[must_use]
    pub fn sent_segments(&self, rank: u16, segments: u64) -> u64 {
        self.node(rank)
            .children
            .iter()
            .map(|l| l.segments.count(segments))
            .sum()
    }

    /// Longest path, in hops, from the sender to any receiver along edges
    /// that carry a given segment (the propagation path length).
    #[must_use]
    pub fn depth(&self) -> usize {
        let mut depth = 0;
        for probe in 0..self.period() {
            // Breadth-first from the sender along edges carrying `probe`.
            let mut level = vec![SENDER];
            let mut hops = 0;
            let mut seen = vec![false; self.nodes.len()];
            seen[0] = true;
            while !level.is_empty() {
                let mut next = Vec::new();
                for &r in &level {
                    for l in &self.node(r).children {
                        if l.segments.contains(probe) && !seen[usize::from(l.peer)] {
                            seen[usize::from(l.peer)] = true;
                            next.push(l.peer);
                        }
                    }
                }
                if !next.is_empty() {
                    hops += 1;
                }
                level = next;
            }
            depth = depth.max(hops);
        }
        depth
    }

    /// The period of the edges' segment sets together: segment `k` takes
    /// the same paths as segment `k % period`.
    #[must_use]
    pub fn period(&self) -> u64 {
        let sets = self
            .nodes
            .iter()
            .flat_map(|n| &n.children)
            .map(|l| l.segments);
        SegmentSet::common_period(sets, u64::MAX).expect("no limit")
    }

    /// Checks the invariants the runtime relies on: edges are symmetric,
    /// every receiver gets every segment from exactly one parent, every
    /// child edge carries a subset of one parent edge (so a node forwards
    /// only what one reader delivers, in order), and every receiver is
    /// reachable from the sender.
    pub fn check(&self) -> Result<(), String> {
        if self.nodes.is_empty() || !self.nodes[0].parents.is_empty() {
            return Err("the sender must exist and have no parents".into());
        }
        for (r, node) in self.nodes.iter().enumerate() {
            for c in &node.children {
                let back = self.nodes.get(usize::from(c.peer)).map(|n| {
                    n.parents
                        .iter()
                        .filter(|p| usize::from(p.peer) == r && p.segments == c.segments)
                        .count()
                });
                if back != Some(1) {
                    return Err(format!("edge {r} -> {} is not mirrored", c.peer));
                }
                if c.peer == 0 || usize::from(c.peer) == r {
                    return Err(format!("edge {r} -> {} is invalid", c.peer));
                }
            }
            if r == 0 {
                continue;
            }
            for probe in 0..self.period() {
                let from = node
                    .parents
                    .iter()
                    .filter(|p| p.segments.contains(probe))
                    .count();
                if from != 1 {
                    return Err(format!(
                        "rank {r} gets segment class {probe} from {from} parents"
                    ));
                }
            }
            for c in &node.children {
                if !node
                    .parents
                    .iter()
                    .any(|p| c.segments.is_subset_of(p.segments))
                {
                    return Err(format!(
                        "rank {r} forwards {:?} to {} but no single parent delivers it",
                        c.segments, c.peer
                    ));
                }
            }
        }
        // Reachability of both segment classes (no cycles feeding themselves).
        let d = self.depth();
        if d > self.nodes.len() {
            return Err("depth exceeds the number of nodes".into());
        }
        for probe in 0..self.period() {
            let mut seen = vec![false; self.nodes.len()];
            seen[0] = true;
            let mut stack = vec![0usize];
            while let Some(r) = stack.pop() {
                for l in &self.nodes[r].children {
                    let p = usize::from(l.peer);
                    if l.segments.contains(probe) && !seen[p] {
                        seen[p] = true;
                        stack.push(p);
                    }
                }
            }
            if let Some(r) = seen.iter().position(|s| !s) {
                return Err(format!("rank {r} never gets segment class {probe}"));
            }
        }
        Ok(())
    }
}

/// The class that virtual node `x` of the `dims`-cube sends across
/// dimension `i` in the binomial pipeline, or `None` when it sends nothing
/// there (`x` is `2^i`, whose neighbour across `i` is the sender).
///
/// Block `b` leaves the sender (node 0) across dimension `j = b mod dims`
/// at step `b`; at steps `b+1, …, b+dims-1` every node that holds it passes
/// it across dimensions `j+1, j+2, …` (mod `dims`), so after `dims` steps
/// every node with bit `j` set holds it (a binomial tree rooted at `2^j`);
/// at step `b+dims` those nodes pass it across `j` itself to every node
/// with bit `j` clear. In step `s` every node sends across dimension
/// `s mod dims` exactly one block, which is `s` minus a constant of the
/// node and the dimension: so each directed edge carries one residue class
/// mod `dims`, in index order, and the schedule needs no clock: TCP's
/// streams run it.
fn pipeline_class(x: usize, i: usize, dims: usize) -> Option<usize> {
    if x == 0 {
        return Some(i); // the sender: block s at step s
    }
    if x >> i & 1 == 1 {
        // Bit i set: the second phase, block s - dims, to the node with
        // bit i clear (nothing for 2^i, whose partner is the sender).
        return (x != 1 << i).then_some(i);
    }
    // Bit i clear: the first phase of the block whose tree x belongs to:
    // the class of x's first set bit after i, cyclically.
    (1..dims).map(|o| (i + o) % dims).find(|&b| x >> b & 1 == 1)
}

/// The binomial pipeline's edges over ranks `0..=receivers` as
/// `(from, to, segments)`: one residue class mod `d` per edge.
///
/// With `N = receivers + 1` nodes, `d = ⌊log2 N⌋` and `V = 2^d`, ranks
/// `0..V` are the nodes of a `d`-cube and run [`pipeline_class`]'s
/// schedule: for `N = 2^d` that is all.
///
/// Otherwise the `E = N - V` other ranks are twins: rank `V + j - 1` pairs
/// with cube node `j` (`1 ≤ j ≤ E`; never the sender, since `E < V`), and
/// the pair shares node `j`'s place in the cube by dimension: the cube
/// node takes the low half of the dimensions, `0..h` with `h = ⌊d/2⌋`
/// (what arrives across them, and what leaves), the twin the high half;
/// for odd `d`, dimension `h` is split: what arrives across it goes to the
/// cube node, what leaves, from the twin. Then each of the pair gives the
/// other, class by class, what it took in from the cube.
///
/// - **Load.** Both get every class once and send `d` classes' worth (the
///   object, as a cube node does: one class out per dimension it sends
///   across, one class to its twin per dimension it takes in from).
/// - **Peers.** A neighbour talks to one of the pair across a whole
///   dimension, so a cube node has its `d` peers, plus one when the
///   neighbour across a split dimension is a pair: at most `⌊log2 N⌋ + 1`.
///   A pair's members talk to half the cube each, and each other.
/// - **Connections.** An edge to a peer and one from it share a TCP
///   connection, one each way ([`duplex_pairs`]): at most `⌊log2 N⌋ + 1`
///   (the cube's `d`, exactly, for a power of two). No direction carries
///   two classes, which could hold each other back: the twins' exchange
///   merged into one stream each way deadlocked in the simulator
///   (buffers waiting in a cycle).
/// - **Depth.** A class whose dimensions at a pair lie on both sides of
///   its split (two per pair) pays one hop more there: every segment
///   reaches everyone within `⌊log2 N⌋ + 5` hops for every N up to
///   1,101. The pairs used to split the object instead (the cube node
///   played the whole cube for half the classes, its twin for the other
///   half): `+ 2` hops, but every neighbour of a pair talked to both,
///   `2 ⌊log2 N⌋` peers over `4 ⌊log2 N⌋` connections. The simulator
///   times the two the same (`docs/protocols.md`).
///
/// Every segment reaches each node from one parent; the edges that carry
/// one class form a tree (the class's binomial tree through the pairs),
/// so bounded buffers cannot wait on each other in a cycle.
fn pipeline(receivers: usize) -> Vec<(usize, usize, SegmentSet)> {
    let nodes = receivers + 1;
    if nodes < 2 {
        return Vec::new();
    }
    let dims = (usize::BITS - 1 - nodes.leading_zeros()) as usize;
    let cube = 1 << dims;
    let twins = nodes - cube;
    let h = dims / 2;
    let twin = |v: usize| (1..=twins).contains(&v).then(|| cube + v - 1);
    // The member of v's place that takes in, or sends, across dimension i.
    let arrives_at = |v: usize, i: usize| match twin(v) {
        Some(t) if i > h || (i == h && dims.is_multiple_of(2)) => t,
        _ => v,
    };
    let leaves_from = |v: usize, i: usize| match twin(v) {
        Some(t) if i >= h => t,
        _ => v,
    };
    let mut edges = Vec::new();
    for v in 0..cube {
        for i in 0..dims {
            let w = v ^ (1 << i);
            if let Some(c) = pipeline_class(v, i, dims) {
                edges.push((leaves_from(v, i), arrives_at(w, i), c));
            }
            // What v's place takes in across i, the member that got it
            // gives the other.
            if let (Some(t), Some(c)) = (twin(v), pipeline_class(w, i, dims)) {
                let got = arrives_at(v, i);
                edges.push((got, if got == v { t } else { v }, c));
            }
        }
    }
    edges.sort_unstable();
    (edges.into_iter())
        .map(|(from, to, class)| {
            let set = SegmentSet::residues(dims as u8, 1 << class).expect("one class");
            (from, to, set)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPES: [OverlayShape; 8] = [
        OverlayShape::Pipeline,
        OverlayShape::Direct,
        OverlayShape::Tree { fanout: 1 },
        OverlayShape::Tree { fanout: 2 },
        OverlayShape::Tree { fanout: 3 },
        OverlayShape::Binomial,
        OverlayShape::Chain,
        OverlayShape::Bintree,
    ];

    fn ceil_log2(x: usize) -> usize {
        (usize::BITS - (x - 1).leading_zeros()) as usize
    }

    /// Delivers every segment of an object by simulating the edges and
    /// counts how often each receiver gets each segment.
    fn deliveries(t: &Topology, segments: u64) -> Vec<Vec<u32>> {
        let n = t.nodes.len();
        let mut got = vec![vec![0u32; segments as usize]; n];
        for k in 0..segments {
            let mut stack = vec![0usize];
            while let Some(r) = stack.pop() {
                for l in &t.nodes[r].children {
                    if l.segments.contains(k) {
                        got[usize::from(l.peer)][k as usize] += 1;
                        stack.push(usize::from(l.peer));
                    }
                }
            }
        }
        got
    }

    #[test]
    fn every_shape_delivers_every_segment_exactly_once_for_1_to_100_receivers() {
        for shape in SHAPES {
            for n in 1..=100u16 {
                let t = Topology::build(shape, n);
                t.check().unwrap_or_else(|e| panic!("{shape} n={n}: {e}"));
                for segments in [0u64, 1, 2, 7, 8] {
                    let got = deliveries(&t, segments);
                    for (r, counts) in got.iter().enumerate().skip(1) {
                        assert!(
                            counts.iter().all(|&c| c == 1),
                            "{shape} n={n} segments={segments}: rank {r} got {counts:?}"
                        );
                    }
                }
            }
        }
    }

    fn floor_log2(x: usize) -> usize {
        (usize::BITS - 1 - x.leading_zeros()) as usize
    }

    /// Distinct peers (parents and children together) of `rank`.
    fn peers(t: &Topology, rank: u16) -> usize {
        let plan = t.node(rank);
        let mut p: Vec<u16> = (plan.parents.iter().chain(&plan.children))
            .map(|l| l.peer)
            .collect();
        p.sort_unstable();
        p.dedup();
        p.len()
    }

    /// Whether some buffers can wait on each other in a cycle: a node's
    /// reader of edge `a` waits for the writers of the edges it forwards
    /// `a`'s segments to, whose readers wait in turn.
    fn has_wait_cycle(t: &Topology) -> bool {
        let period = t.period();
        let edges: Vec<(usize, usize, SegmentSet)> = (t.nodes.iter().enumerate())
            .flat_map(|(r, n)| {
                n.children
                    .iter()
                    .map(move |l| (r, usize::from(l.peer), l.segments))
            })
            .collect();
        let shares =
            |a: SegmentSet, b: SegmentSet| (0..period).any(|k| a.contains(k) && b.contains(k));
        let next: Vec<Vec<usize>> = (edges.iter())
            .map(|&(_, to, set)| {
                (edges.iter().enumerate())
                    .filter(|&(_, &(from, _, s))| from == to && shares(set, s))
                    .map(|(i, _)| i)
                    .collect()
            })
            .collect();
        // Kahn's algorithm: a cycle leaves edges that never reach in-degree 0.
        let mut indeg = vec![0usize; edges.len()];
        for n in next.iter().flatten() {
            indeg[*n] += 1;
        }
        let mut ready: Vec<usize> = (0..edges.len()).filter(|&e| indeg[e] == 0).collect();
        let mut done = 0;
        while let Some(e) = ready.pop() {
            done += 1;
            for &n in &next[e] {
                indeg[n] -= 1;
                if indeg[n] == 0 {
                    ready.push(n);
                }
            }
        }
        done < edges.len()
    }

    #[test]
    fn pipeline_delivers_every_segment_once_within_its_bounds_for_1_to_130_receivers() {
        let alone = Topology::build(OverlayShape::Pipeline, 0);
        assert!(alone.check().is_ok() && alone.nodes[0].children.is_empty());
        for n in (1..=130u16).chain([255, 256, 511, 1000]) {
            let t = Topology::build(OverlayShape::Pipeline, n);
            t.check().unwrap_or_else(|e| panic!("n={n}: {e}"));
            let nodes = usize::from(n) + 1;
            let dims = floor_log2(nodes);
            let period = t.period();
            assert_eq!(period, dims as u64, "n={n}: one class per dimension");
            let segments = 3 * period + 1;
            let got = deliveries(&t, segments);
            for (r, counts) in got.iter().enumerate().skip(1) {
                assert!(
                    counts.iter().all(|&c| c == 1),
                    "n={n}: rank {r} got {counts:?}"
                );
            }
            // Every segment within ⌊log2 N⌋ + 5 hops: the cube's d + 1, a
            // hop at a pair where a class crosses its split, the twins'
            // exchange (measured for every N up to 1,101).
            assert!(t.depth() <= dims + 5, "n={n}: depth {}", t.depth());
            if nodes.is_power_of_two() {
                assert!(t.depth() <= dims + 1, "n={n}: depth {}", t.depth());
            }
            // The sender sends the object once; nobody sends more.
            let whole = 4 * period;
            assert_eq!(t.sent_segments(0, whole), whole, "n={n}");
            for r in 0..=n {
                assert!(t.sent_segments(r, whole) <= whole, "n={n} rank {r}");
                // Peers: ⌊log2 N⌋ for a power of two (the cube), one more
                // for a node whose neighbour across the split dimension is
                // a pair; a pair's members about half as many. An edge
                // to a peer and one from it share a connection, so the
                // issue's bound of ⌈log2 N⌉ + 1 connections holds, and
                // ⌊log2 N⌋ + 1 with it.
                let p = peers(&t, r);
                if nodes.is_power_of_two() {
                    assert_eq!(p, dims, "n={n} rank {r}");
                } else {
                    assert!(p <= dims + 1, "n={n} rank {r}: {p} peers");
                    let pair = usize::from(r) >= 1 << dims || usize::from(r) <= nodes - (1 << dims);
                    if pair && r != 0 {
                        assert!(
                            p <= dims.div_ceil(2) + 2,
                            "n={n} pair member {r}: {p} peers"
                        );
                    }
                }
                let c = t.connections(r);
                assert!(c <= dims + 1, "n={n} rank {r}: {c} connections");
                if nodes.is_power_of_two() {
                    assert_eq!(c, dims, "n={n} rank {r}: one connection per dimension");
                }
            }
            if n <= 130 {
                assert!(!has_wait_cycle(&t), "n={n}: buffers can wait in a cycle");
            }
        }
    }

    #[test]
    fn pipeline_of_a_power_of_two_is_the_cube_one_class_per_edge() {
        for dims in 1..=8usize {
            let nodes = 1usize << dims;
            let t = Topology::build(OverlayShape::Pipeline, (nodes - 1) as u16);
            assert_eq!(t.period(), dims as u64, "N={nodes}");
            for (r, plan) in t.nodes.iter().enumerate() {
                for l in plan.parents.iter().chain(&plan.children) {
                    let across = r ^ usize::from(l.peer);
                    assert!(across.is_power_of_two(), "N={nodes}: {r} - {}", l.peer);
                    assert_eq!(l.segments.classes().1.count_ones(), 1, "N={nodes}");
                }
                let senders_partner = r.is_power_of_two();
                let out = if r == 0 || !senders_partner {
                    dims
                } else {
                    dims - 1
                };
                assert_eq!(plan.children.len(), out, "N={nodes} rank {r}");
                assert_eq!(plan.parents.len(), if r == 0 { 0 } else { dims });
            }
        }
    }

    #[test]
    fn pipeline_of_eight_nodes_is_the_table_in_the_protocols_doc() {
        // docs/protocols.md, "tcp-pipeline": (to, class) per dimension.
        let table: [[Option<(u16, u32)>; 3]; 8] = [
            [Some((1, 0)), Some((2, 1)), Some((4, 2))],
            [None, Some((3, 0)), Some((5, 0))],
            [Some((3, 1)), None, Some((6, 1))],
            [Some((2, 0)), Some((1, 1)), Some((7, 0))],
            [Some((5, 2)), Some((6, 2)), None],
            [Some((4, 0)), Some((7, 2)), Some((1, 2))],
            [Some((7, 1)), Some((4, 1)), Some((2, 2))],
            [Some((6, 0)), Some((5, 1)), Some((3, 2))],
        ];
        let t = Topology::build(OverlayShape::Pipeline, 7);
        for (r, row) in table.iter().enumerate() {
            let mut expected: Vec<(u16, SegmentSet)> = (row.iter().flatten())
                .map(|&(to, class)| (to, SegmentSet::residues(3, 1 << class).unwrap()))
                .collect();
            expected.sort_unstable_by_key(|e| e.0);
            let got: Vec<(u16, SegmentSet)> = (t.nodes[r].children.iter())
                .map(|l| (l.peer, l.segments))
                .collect();
            assert_eq!(got, expected, "rank {r}");
        }
    }

    #[test]
    fn pipeline_of_six_nodes_is_the_table_in_the_protocols_doc() {
        // docs/protocols.md, "Other N": (to, class) of each rank.
        let table: [&[(u16, u32)]; 6] = [
            &[(1, 0), (5, 1)],
            &[(4, 0)],
            &[(3, 1), (5, 0)],
            &[(2, 0), (4, 1)],
            &[(1, 1), (3, 0)],
            &[(2, 1)],
        ];
        let t = Topology::build(OverlayShape::Pipeline, 5);
        for (r, row) in table.iter().enumerate() {
            let expected: Vec<(u16, SegmentSet)> = (row.iter())
                .map(|&(to, class)| (to, SegmentSet::residues(2, 1 << class).unwrap()))
                .collect();
            let got: Vec<(u16, SegmentSet)> = (t.nodes[r].children.iter())
                .map(|l| (l.peer, l.segments))
                .collect();
            assert_eq!(got, expected, "rank {r}");
        }
    }

    /// Runs the cube's schedule in lock-step rounds (the model of RDMC's
    /// analysis): in round `s` every node sends across dimension
    /// `s mod d`, one block, the next of that edge's class, if it holds
    /// it. All `K` blocks reach all `2^d` nodes within `K + d` rounds
    /// (RDMC's optimum is `K + d - 1`; the chain needs `K + N - 2`).
    #[test]
    fn pipeline_runs_in_k_plus_log_n_rounds_in_lock_step() {
        for dims in 1..=6usize {
            let nodes = 1usize << dims;
            let t = Topology::build(OverlayShape::Pipeline, (nodes - 1) as u16);
            for blocks in [1u64, 2, 5, 17, 64] {
                let mut has = vec![vec![false; blocks as usize]; nodes];
                has[0] = vec![true; blocks as usize];
                // Next position in each edge's class, per (node, dimension).
                let mut cursor = vec![vec![0u64; dims]; nodes];
                let mut rounds = 0;
                while has.iter().any(|h| h.iter().any(|&b| !b)) {
                    assert!(
                        rounds < blocks as usize + dims,
                        "N={nodes} K={blocks}: late"
                    );
                    let i = rounds % dims;
                    let mut sends = Vec::new();
                    for x in 0..nodes {
                        let y = x ^ (1 << i);
                        let Some(l) = t.nodes[x]
                            .children
                            .iter()
                            .find(|l| usize::from(l.peer) == y)
                        else {
                            continue;
                        };
                        if cursor[x][i] < l.segments.count(blocks) {
                            let b = l.segments.nth(cursor[x][i]);
                            if has[x][b as usize] {
                                sends.push((x, y, b));
                                cursor[x][i] += 1;
                            }
                        }
                    }
                    for (_, y, b) in sends {
                        assert!(!has[y][b as usize], "N={nodes}: block {b} twice at {y}");
                        has[y][b as usize] = true;
                    }
                    rounds += 1;
                }
            }
        }
    }

    #[test]
    fn bintree_holds_at_most_four_connections_and_forwards_at_most_the_message() {
        for n in 1..=100u16 {
            let t = Topology::build(OverlayShape::Bintree, n);
            for r in 0..=n {
                assert!(t.connections(r) <= 4, "n={n} rank {r}");
                for segments in [1u64, 2, 3, 100, 101] {
                    // Each receiver forwards at most the message (plus one
                    // segment when the even half is the larger one).
                    let sent = t.sent_segments(r, segments);
                    assert!(
                        sent <= segments + 1,
                        "n={n} rank {r} sends {sent}/{segments}"
                    );
                    if segments % 2 == 0 {
                        assert!(sent <= segments, "n={n} rank {r}");
                    }
                }
                let children = t.node(r).children.len();
                assert!(children <= 2, "n={n} rank {r} has {children} children");
            }
            assert!(t.connections(0) <= 2);
        }
    }

    #[test]
    fn bintree_depth_is_logarithmic() {
        for n in 1..=100usize {
            let t = Topology::build(OverlayShape::Bintree, n as u16);
            let log = (usize::BITS - 1 - n.leading_zeros()) as usize; // ⌊log2 n⌋
            assert_eq!(t.depth(), log + 1, "n={n}");
        }
        assert!(Topology::build(OverlayShape::Bintree, 1000).depth() <= 10);
    }

    #[test]
    fn bintree_interior_nodes_are_disjoint_between_the_two_trees() {
        for n in 2..=100u16 {
            let t = Topology::build(OverlayShape::Bintree, n);
            for r in 1..=n {
                let even = t
                    .node(r)
                    .children
                    .iter()
                    .any(|l| l.segments == SegmentSet::Even);
                let odd = t
                    .node(r)
                    .children
                    .iter()
                    .any(|l| l.segments == SegmentSet::Odd);
                assert!(!(even && odd), "n={n} rank {r} is interior in both trees");
                assert_eq!(t.node(r).parents.len(), 2, "n={n} rank {r}");
            }
        }
    }

    #[test]
    fn chain_is_a_pipeline_through_all_receivers() {
        for n in 1..=100u16 {
            let t = Topology::build(OverlayShape::Chain, n);
            assert_eq!(t.depth(), usize::from(n));
            for r in 0..=n {
                let plan = t.node(r);
                let parent: Vec<u16> = plan.parents.iter().map(|l| l.peer).collect();
                let child: Vec<u16> = plan.children.iter().map(|l| l.peer).collect();
                assert_eq!(parent, if r == 0 { vec![] } else { vec![r - 1] });
                assert_eq!(child, if r == n { vec![] } else { vec![r + 1] });
                assert!(t.connections(r) <= 2);
            }
        }
    }

    #[test]
    fn binomial_matches_the_papers_step_construction() {
        // n+1 = 8 processes: 0 sends to 1, 2, 4; 1 to 3, 5; 2 to 6; 3 to 7.
        let t = Topology::build(OverlayShape::Binomial, 7);
        let kids = |r: u16| -> Vec<u16> { t.node(r).children.iter().map(|l| l.peer).collect() };
        assert_eq!(kids(0), [1, 2, 4]);
        assert_eq!(kids(1), [3, 5]);
        assert_eq!(kids(2), [6]);
        assert_eq!(kids(3), [7]);
        assert!(kids(4).is_empty());
        for n in 1..=100u16 {
            let t = Topology::build(OverlayShape::Binomial, n);
            // ⌈log2(n+1)⌉ steps, the sender busy in each; the longest
            // path has as many hops as the rank with the most set bits.
            let steps = ceil_log2(usize::from(n) + 1);
            let hops = (1..=n).map(|r| r.count_ones() as usize).max().unwrap();
            assert_eq!(t.depth(), hops, "n={n}");
            assert!(hops <= steps);
            assert_eq!(t.node(0).children.len(), steps, "n={n}");
            for r in 1..=n {
                let high = 1u16 << (15 - r.leading_zeros());
                assert_eq!(t.node(r).parents[0].peer, r - high, "n={n} rank {r}");
            }
        }
    }

    #[test]
    fn fanout_tree_is_the_heap_of_that_fanout() {
        for f in 1..=4u32 {
            for n in 1..=100u16 {
                let t = Topology::build(OverlayShape::Tree { fanout: f }, n);
                for r in 1..=n {
                    assert_eq!(u32::from(t.node(r).parents[0].peer), (u32::from(r) - 1) / f);
                }
                for r in 0..=n {
                    assert!(t.node(r).children.len() <= f as usize);
                }
            }
        }
        assert_eq!(
            Topology::build(OverlayShape::Tree { fanout: 2 }, 100).depth(),
            6
        );
    }

    #[test]
    fn direct_has_the_sender_feed_everyone() {
        for n in 1..=100u16 {
            let t = Topology::build(OverlayShape::Direct, n);
            assert_eq!(t.node(0).children.len(), usize::from(n));
            assert_eq!(t.depth(), 1);
        }
    }

    #[test]
    fn shape_names_round_trip_through_the_parser() {
        for shape in SHAPES {
            let fanout = match shape {
                OverlayShape::Tree { fanout } => fanout,
                _ => 2,
            };
            assert_eq!(parse_shape(shape.name(), fanout), Some(shape));
            let (code, f) = shape.code();
            assert_eq!(OverlayShape::from_code(code, f), Some(shape));
        }
        assert_eq!(parse_shape("tcp-tree", 0), None);
        assert_eq!(parse_shape("ack", 2), None);
    }

    #[test]
    fn segment_sets_count_and_enumerate_consistently() {
        for set in [SegmentSet::All, SegmentSet::Even, SegmentSet::Odd] {
            for total in 0..20u64 {
                let listed: Vec<u64> = (0..set.count(total)).map(|i| set.nth(i)).collect();
                let expected: Vec<u64> = (0..total).filter(|&k| set.contains(k)).collect();
                assert_eq!(listed, expected);
            }
        }
    }
}
