//! The TCP overlay's protocol, sans-IO: who relays which segments to whom
//! ([`topology`]), the session the sender runs ([`SenderMachine`]) and the
//! part every receiver plays ([`NodeMachine`]).
//!
//! Without IP multicast, the object travels over TCP along a tree of
//! receivers (Happe & Vinter, segmented trees). TCP orders, retransmits and
//! flow-controls, so what is left for a protocol is the session (register,
//! assign, ready, start, hash, complete), the overlay's shape, the
//! pipelining (which segment goes to which child as soon as it arrived) and
//! failure detection (heartbeats, silence, naming the node that died).
//!
//! The machines never touch a socket or read a clock. A driver (the TCP
//! runtime in `rmcast::overlay`, the simulator in `rmcast_sim::overlay`, a
//! unit test) owns the connections and the bytes, and feeds the machines
//! what happened, each input with `now`:
//!
//! ```text
//! control connection opened / closed / failed      handle_connected, handle_closed
//! a control frame decoded                          handle_msg
//! a data connection from a parent introduced       NodeMachine::handle_parent_hello
//! segment k read from a parent's stream            NodeMachine::handle_segment -> children to forward it to
//! segment k stored, the stored copy verified       NodeMachine::handle_stored, handle_verified
//! a parent's stream failed (or was dropped)        NodeMachine::handle_parent_failed
//! a child's stream written to the end, or failed   handle_child_done
//! the object hashed (sender)                       SenderMachine::handle_hash
//! a deadline passed                                handle_timeout
//! ```
//!
//! and asks what to do: `poll_transmit` (control frames to write),
//! `poll_data` ([`DataOp`]: open a data connection, feed a child its share,
//! verify the stored copy), `poll_event`, `poll_timeout`.
//!
//! A data connection carries one [`Msg::DataHello`] frame, then the raw
//! bytes of its [`SegmentSet`] in index order ([`Segments`] says where each
//! segment lies): the driver moves bytes, the machine decides which.
//!
//! # Self-healing
//!
//! Once data flows, a receiver that fails (dies, goes silent, stops taking
//! data, reports a failure) is cut out of the session and named; the rest
//! go on. The sender sends [`Msg::Detach`] to the failed node's children;
//! each closes its edges from it ([`DataOp::Drop`]) and answers with
//! [`Msg::Orphaned`]: which edge, and how many of its segments arrived
//! whole. A child whose parent's stream breaks first says the same
//! unasked. The sender, which holds the whole object, then feeds each
//! orphaned edge itself from that segment on (a [`Msg::DataHello`] whose
//! `first` is where the child stands), so the child goes on from what it
//! holds, and its own children never notice. The session succeeds only if
//! every receiver verified; otherwise its error names the first node that
//! failed, and every other receiver still has its verified copy.

mod node;
mod sender;
pub mod topology;

pub use node::{NodeConfig, NodeEvent, NodeFailure, NodeMachine, NodePhase, Route};
pub use sender::{
    AUTH_FAILURES_MAX, ControlOp, SenderConfig, SenderEvent, SenderMachine, SenderPhase,
    SenderStats, SessionReport,
};
pub use topology::{
    Forwarding, Link, NodePlan, OverlayShape, SENDER, SegmentSet, Topology, duplex_pairs,
    parse_shape,
};

use rmcast_wire::overlay::Msg;
use std::net::SocketAddr;
use std::time::Duration;

/// A receiver's rank: the sender is 0 ([`SENDER`]), receivers `1..=n`.
pub type Rank = u16;

/// Largest segment size a receiver accepts (16 MiB).
pub const MAX_SEGMENT_SIZE: u32 = 16 << 20;

/// How long a data phase may go without a receiver storing a new byte
/// before the sender ends it as stalled ([`SenderConfig::stall_timeout`]).
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(20);

/// Smallest segment [`auto_segment_size`] picks (the papers' 8 KB).
pub const AUTO_SEGMENT_MIN: u32 = 8 << 10;
/// Largest segment [`auto_segment_size`] picks.
pub const AUTO_SEGMENT_MAX: u32 = 128 << 10;
/// [`auto_segment_size`] keeps the pipeline's fill within this share of
/// the object's own time (1/50: 2 %).
const FILL_SHARE: u64 = 50;

/// The segment size for `size` bytes to `receivers` over `shape` when the
/// user did not choose one: the largest power of two in
/// [`AUTO_SEGMENT_MIN`]..=[`AUTO_SEGMENT_MAX`] whose pipeline fill — two
/// segment times per hop (the parent's uplink, the child's downlink) over
/// the overlay's depth — costs at most 2 % of the object's time.
///
/// Measured (docs/performance.md, "Segment size"): on 100 Mbit/s links
/// 8–128 KiB segments move 20 MB equally well within the lab's noise and
/// 512 KiB loses 10–25 %; per-segment work (system calls, pool turnover)
/// favours large segments on busy CPUs, the fill favours small ones on deep
/// overlays and small objects (the simulator: 1 MB to 12 receivers at
/// 100 Mbit/s, 32 KiB segments cost the chain 32 % of its goodput). So a
/// small object or a deep chain keeps 8 KiB, a large object on a shallow
/// overlay gets up to 128 KiB. Store-and-forward shapes forward whole
/// verified copies, so only framing depends on it: they count as one hop.
#[must_use]
pub fn auto_segment_size(shape: OverlayShape, receivers: u16, size: u64) -> u32 {
    let hops = match Forwarding::of(shape) {
        Forwarding::StoreAndForward => 1,
        Forwarding::Pipelined => Topology::build(shape, receivers.max(1)).depth().max(1) as u64,
    };
    let budget = size / (FILL_SHARE * 2 * hops);
    let mut seg = AUTO_SEGMENT_MIN;
    while seg < AUTO_SEGMENT_MAX && u64::from(seg) * 2 <= budget {
        seg *= 2;
    }
    seg
}

/// Period of a receiver's `Progress` reports (its heartbeat).
pub const PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// Where the segments of an object lie: `size` bytes cut into pieces of
/// `segment_size` (the last one may be shorter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segments {
    /// Object size in bytes.
    pub size: u64,
    /// Bytes per segment (at least 1).
    pub segment_size: u32,
}

impl Segments {
    /// Segments of an object of `size` bytes.
    #[must_use]
    pub fn new(size: u64, segment_size: u32) -> Self {
        assert!(segment_size > 0, "segments must hold at least one byte");
        Self { size, segment_size }
    }

    /// Number of segments.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.size.div_ceil(u64::from(self.segment_size))
    }

    /// Byte offset of segment `index`.
    #[must_use]
    pub fn offset(&self, index: u64) -> u64 {
        index * u64::from(self.segment_size)
    }

    /// Bytes in segment `index` (which must exist).
    #[must_use]
    pub fn len(&self, index: u64) -> usize {
        debug_assert!(index < self.count());
        (self.size - self.offset(index)).min(u64::from(self.segment_size)) as usize
    }

    /// Whether the object has no segment at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Bytes a stream carrying `set` moves in all.
    #[must_use]
    pub fn set_bytes(&self, set: SegmentSet) -> u64 {
        (0..set.count(self.count()))
            .map(|i| self.len(set.nth(i)) as u64)
            .sum()
    }
}

/// What a machine asks its driver to do with data connections and storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataOp {
    /// Open a data connection to `child` at `addr` and write `hello` (a
    /// [`Msg::DataHello`]) first. Segments follow: routed ones
    /// ([`NodeMachine::handle_segment`]) or a whole [`DataOp::Feed`].
    Connect {
        /// The child's rank.
        child: Rank,
        /// Where it listens for data.
        addr: SocketAddr,
        /// What the connection carries (two nodes may share several
        /// edges: rank and set name one).
        segments: SegmentSet,
        /// The first frame of the connection.
        hello: Msg,
        /// Node only: the parent edge (an index into the assignment's
        /// parents) that the child writes back on this connection
        /// ([`duplex_pairs`]): read its `DataHello` and segments from
        /// the connection as from an accepted one
        /// ([`NodeMachine::handle_parent_hello`]). If the connection
        /// cannot be opened, report that edge failed too.
        back: Option<usize>,
    },
    /// Node only: write child edge `child`'s stream back on the
    /// connection parent edge `parent` came in on ([`duplex_pairs`]):
    /// `hello` first, then the segments as for a [`DataOp::Connect`]
    /// (keyed, sealed with the sealer of that connection's own key
    /// exchange, the direction the child opens).
    WriteBack {
        /// The parent edge whose connection it rides.
        parent: usize,
        /// The child edge (an index into the assignment's children).
        child: usize,
        /// The first frame of this direction.
        hello: Msg,
    },
    /// Node only: child edge `child` was to be written back
    /// ([`DataOp::WriteBack`]) on a connection that broke before it was
    /// opened: it never will be. Release whatever was routed to it; the
    /// machine already counts it done.
    Abandon {
        /// The child edge.
        child: usize,
    },
    /// Write the child's whole share (`segments`, in index order, from
    /// its `first`-th segment on) from the object (sender) or the verified
    /// stored copy (store-and-forward node), then report
    /// [`handle_child_done`](NodeMachine::handle_child_done).
    Feed {
        /// The child's rank.
        child: Rank,
        /// What its connection carries.
        segments: SegmentSet,
        /// Position in `segments` of the first segment to write: 0, or
        /// where an orphaned child's stream broke (the sender re-attaching
        /// it).
        first: u64,
    },
    /// Node only: close the data connection of parent edge `parent` (an
    /// index into the assignment's parents): the sender detached the node
    /// it comes from. Its reader then ends, and the driver reports
    /// [`NodeMachine::handle_parent_failed`] as for any broken stream.
    Drop {
        /// The parent edge.
        parent: usize,
    },
    /// Node only: every byte is stored and the hash is known. Hash the
    /// stored copy, compare it with `hash`, commit the file and report
    /// [`NodeMachine::handle_verified`].
    Verify {
        /// The object's BLAKE3 hash, as the sender sent it.
        hash: [u8; 32],
        /// The sender's signature of the object, if it sent one: a driver
        /// that trusts only signed content checks it before committing.
        signature: Option<[u8; 64]>,
    },
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod auto_segment_tests {
    use super::*;

    #[test]
    fn small_objects_and_deep_chains_keep_8_kib() {
        for shape in [
            OverlayShape::Chain,
            OverlayShape::Bintree,
            OverlayShape::Pipeline,
        ] {
            assert_eq!(
                auto_segment_size(shape, 12, 1_000_000),
                8 << 10,
                "{shape:?}"
            );
        }
        assert_eq!(
            auto_segment_size(OverlayShape::Chain, 1000, 16 << 20),
            8 << 10
        );
        assert_eq!(
            auto_segment_size(OverlayShape::Chain, 30, 20_000_000),
            8 << 10
        );
    }

    #[test]
    fn large_objects_on_shallow_overlays_get_larger_segments() {
        // 20 MB to 12: chain depth 12 → 16 KiB; bintree depth 4 → 32 KiB.
        assert_eq!(
            auto_segment_size(OverlayShape::Chain, 12, 20_000_000),
            16 << 10
        );
        assert_eq!(
            auto_segment_size(OverlayShape::Bintree, 12, 20_000_000),
            32 << 10
        );
        assert_eq!(
            auto_segment_size(OverlayShape::Pipeline, 1000, 1 << 30),
            AUTO_SEGMENT_MAX
        );
        assert_eq!(
            auto_segment_size(OverlayShape::Binomial, 30, 1 << 30),
            AUTO_SEGMENT_MAX
        );
        assert_eq!(
            auto_segment_size(OverlayShape::Direct, 1, 100 << 20),
            AUTO_SEGMENT_MAX
        );
    }

    #[test]
    fn the_fill_stays_within_two_percent_of_the_object_or_at_the_floor() {
        let shapes = [
            OverlayShape::Direct,
            OverlayShape::Chain,
            OverlayShape::Bintree,
            OverlayShape::Pipeline,
        ];
        for shape in shapes {
            for n in [1u16, 2, 5, 12, 30, 100, 513] {
                for size in [0u64, 1, 100_000, 1 << 20, 20_000_000, 1 << 30] {
                    let seg = u64::from(auto_segment_size(shape, n, size));
                    assert!(seg.is_power_of_two());
                    assert!((8 << 10..=128 << 10).contains(&seg));
                    let hops = Topology::build(shape, n).depth().max(1) as u64;
                    assert!(
                        seg == 8 << 10 || 2 * hops * seg * 50 <= size,
                        "{shape:?} N = {n}, {size} bytes: {seg} over {hops} hops"
                    );
                }
            }
        }
    }
}
