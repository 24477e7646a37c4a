//! Reliable multicast without IP multicast: TCP overlays with segmentation.
//!
//! The sender and the receivers build an overlay of TCP connections and
//! relay the object along it, after Happe & Vinter, "Improving TCP/IP
//! Multicasting with Message Segmentation". The shapes are described in
//! [`topology`]: `tcp-direct` (the sender writes to everyone), `tcp-tree`
//! and `tcp-binomial` (store-and-forward trees), `tcp-chain` (a pipeline
//! through all receivers), `tcp-bintree` (two pipelined binary trees fed
//! alternate segments; at most four connections per process, path length
//! `O(log n)`, nobody forwards more than the object) and `tcp-pipeline`
//! (the binomial pipeline: residue classes of segments along a hypercube,
//! every node sending and receiving at once).
//!
//! # Session
//!
//! 1. The sender listens on a control address ([`OverlaySendConfig::control`]).
//!    Each receiver listens for data on an address of its own
//!    ([`OverlayRecvConfig::listen`]), connects to the sender and registers
//!    (its name and data address).
//! 2. Once `receivers` registered (or `join_wait` passed: the session fails
//!    and says how many came), the sender ranks them in registration order
//!    (ranks `1..=n`), computes the [`Topology`] and sends each its
//!    assignment: rank, parents, children, which segments flow on each
//!    edge, and the object (name, size, segment size, session). The sender
//!    hashes the object (BLAKE3) on a thread of its own from the start and
//!    sends the hash in a message of its own once it has it and the
//!    receivers their assignments: no byte waits for the hash.
//! 3. Each receiver prepares a hidden partial file (refusing unsafe names,
//!    objects too large or without space) and answers Ready; when all are
//!    ready the sender says Start, and every node opens its data
//!    connections to its children (parent → child).
//! 4. Data flows. Pipelined nodes (chain, bintree) forward segment `k`
//!    while they receive `k+1` and write to disk, through a bounded pool of
//!    segment buffers per incoming edge; store-and-forward nodes (tree,
//!    binomial) forward only after the whole object arrived and verified.
//! 5. Every receiver verifies the hash (waiting for it if it is still to
//!    come), renames the file into place, finishes
//!    forwarding and reports Complete on the control connection.
//!
//! # Keys
//!
//! With a group key ([`OverlaySendConfig::key`], [`OverlayRecvConfig::key`])
//! every connection starts with a key exchange and then carries nothing but
//! sealed frames: every control message and every segment is encrypted and
//! authenticated under keys of that connection alone
//! (`rmcast_proto::security::frames` has the layout and the key schedule).
//! A connection that fails authentication (another key, no key, forged) is
//! dropped before the session hears of it, counted, and named in the
//! sender's report when the session fails for want of receivers
//! ("connection from ADDR failed authentication — wrong group key?");
//! the refused peer is told why and fails with that message. A keyed and a
//! keyless side refuse each other the same way, with a message saying
//! which side lacks the key.
//!
//! # Failures
//!
//! The control connections carry heartbeats both ways. Before data flows,
//! a receiver whose control connection closes, that stays silent for the
//! inactivity timeout, or that refuses the object fails the transfer with a
//! message naming it (rank, name, address); the sender tells everybody else
//! to abort and they delete their partial files.
//!
//! Once data flows the overlay heals itself: a receiver that dies, goes
//! silent, stops taking data or fails its copy is cut out and named, and
//! the children it fed are re-attached to the sender, which feeds each
//! broken edge from the segment where it broke (`Detach`, `Orphaned`, a
//! `DataHello` with `first`; `rmcast_proto::overlay` has the protocol). The
//! others complete with verified copies; the send reports the failed one
//! ("… died … (29 of 30 receivers verified)") and is not `ok`. A parent's
//! data connection is never timed out by its child: silence is the
//! sender's to judge, since it hears every node. Every blocking socket call
//! wakes at least every 100 ms, a write that moves no byte for the
//! inactivity timeout fails, a data phase in which no receiver stores a
//! byte for the stall timeout ends, and every wait has a bound, so a
//! transfer never hangs.
//!
//! The protocol itself (session, topology, routing, blame) is
//! `rmcast_proto::overlay`'s sans-IO machines; this module is their TCP
//! driver: sockets, threads, buffers and storage. The simulator
//! (`rmcast_sim::overlay`) drives the same machines over modelled links.
//!
//! This module is not the UDP multicast runtime (see [`crate::send_file`]);
//! it shares its storage, name checks and reports.

mod demo;
pub(crate) mod frame;
pub(crate) mod io;
mod receiver;
pub(crate) mod secure;
mod sender;
pub use rmcast_proto::overlay::topology;

pub use demo::{OverlayDemoConfig, demo};
pub use receiver::recv_to_dir;
pub use rmcast_proto::overlay::{
    AUTO_SEGMENT_MAX, AUTO_SEGMENT_MIN, MAX_SEGMENT_SIZE, auto_segment_size,
};
pub use rmcast_proto::security::GroupKey;
pub use sender::{OverlaySender, send_bytes, send_file};
pub use topology::{Forwarding, OverlayShape, SegmentSet, Topology, parse_shape};

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// The sender's control address when none is given: 127.0.0.1:7701.
pub const DEFAULT_CONTROL: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7701);
/// Where a receiver listens for data when not told: loopback, any port.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
/// How long a peer may stay silent (or a data connection still) by default.
pub const DEFAULT_INACTIVITY: Duration = Duration::from_secs(5);
/// Bytes of segment buffers per incoming data connection of a receiver.
const POOL_BYTES_PER_STREAM: usize = 2 << 20;

/// How to send one object over a TCP overlay.
#[derive(Clone, Debug)]
pub struct OverlaySendConfig {
    /// The overlay to build.
    pub shape: OverlayShape,
    /// Address receivers register at (`127.0.0.1:7701`).
    pub control: SocketAddr,
    /// Receivers to wait for (at least 1).
    pub receivers: u16,
    /// Bytes per segment (1..=[`MAX_SEGMENT_SIZE`]); `None` (the default):
    /// chosen from the shape, the group and the object's size
    /// ([`auto_segment_size`]).
    pub segment_size: Option<u32>,
    /// How long to wait for `receivers` to register.
    pub join_wait: Duration,
    /// A peer silent this long, or a data connection without progress this
    /// long, fails the transfer (also sent to the receivers).
    pub inactivity: Duration,
    /// Data flowing and no receiver storing a new byte for this long ends
    /// the session as stalled, naming the receivers furthest behind
    /// (default 20 s, at least four segments' time at `pace_bytes_per_s`);
    /// `None`: never.
    pub stall_timeout: Option<Duration>,
    /// Name receivers store the object under; `None`: the file's name.
    pub name: Option<String>,
    /// Raise to stop: the sender aborts the session.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Test knob: limit each of the sender's data connections to this many
    /// bytes per second (a stand-in for a slow link). `None` in production.
    pub pace_bytes_per_s: Option<u64>,
    /// Test knob: hold the object's hash back this long after hashing (a
    /// stand-in for an object that takes longer to hash than to send).
    /// `None` in production.
    pub hash_delay: Option<Duration>,
    /// The group key: every connection is authenticated and encrypted
    /// under it, and receivers without it are refused. `None`: plain TCP
    /// (`--insecure`).
    pub key: Option<Arc<GroupKey>>,
    /// Sign the object (hash, size, name) with this key (`rmcast send
    /// --sign`): nodes that `trust` its public half keep only signed content.
    pub signing_key: Option<Arc<crate::SigningKey>>,
}

impl OverlaySendConfig {
    /// The segment size for an object of `size` bytes: the one set, or
    /// the one [`auto_segment_size`] chooses.
    #[must_use]
    pub fn segment_size_for(&self, size: u64) -> u32 {
        self.segment_size
            .unwrap_or_else(|| auto_segment_size(self.shape, self.receivers, size))
    }
}

impl Default for OverlaySendConfig {
    fn default() -> Self {
        Self {
            shape: OverlayShape::Bintree,
            control: DEFAULT_CONTROL,
            receivers: 1,
            segment_size: None,
            join_wait: Duration::from_secs(30),
            inactivity: DEFAULT_INACTIVITY,
            stall_timeout: Some(rmcast_proto::overlay::DEFAULT_STALL_TIMEOUT),
            name: None,
            cancel: None,
            pace_bytes_per_s: None,
            hash_delay: None,
            key: None,
            signing_key: None,
        }
    }
}

/// How to receive one object over a TCP overlay.
#[derive(Clone, Debug)]
pub struct OverlayRecvConfig {
    /// The sender's control address (`127.0.0.1:7701`).
    pub sender: SocketAddr,
    /// Where to listen for data from parents (`127.0.0.1:0`: loopback, any
    /// port). An unspecified address (`0.0.0.0`) is announced as the
    /// address the control connection leaves from.
    pub listen: SocketAddr,
    /// Directory the object is stored in (created if missing).
    pub out_dir: PathBuf,
    /// Name shown in the sender's report and in failure messages.
    pub name: String,
    /// Keep trying to reach the sender this long (`None`: until cancelled).
    pub connect_timeout: Option<Duration>,
    /// The sender silent this long fails the transfer (before the sender's
    /// own value arrives with the assignment).
    pub inactivity: Duration,
    /// Refuse objects larger than this many bytes.
    pub max_bytes: Option<u64>,
    /// Refuse an object whose name is already taken under `out_dir`
    /// instead of replacing that file with the verified new version.
    pub no_clobber: bool,
    /// Raise to stop: the receiver leaves and removes its partial file.
    pub cancel: Option<Arc<AtomicBool>>,
    /// The group key (the sender's); `None`: plain TCP (`--insecure`).
    pub key: Option<Arc<GroupKey>>,
    /// Keep only objects signed by one of these keys (`rmcast recv
    /// --trust`); empty: signatures are not checked.
    pub trust: Vec<crate::PublicKey>,
    /// A hybrid sender ([`crate::hybrid`]) asks the receiver to listen for
    /// its multicast session first: how to take the object over multicast
    /// then. The group, the session and how long to listen come from the
    /// sender; the output directory, name, key, trust, limits and cancel
    /// flag from this configuration; the rest (interface, socket buffer)
    /// from here. `None`: such a sender's request fails the receive.
    pub multicast: Option<crate::RecvConfig>,
    /// Test knob: listen for a hybrid sender's session on this group
    /// instead of the one it names, as a receiver whose network drops the
    /// session's multicast would hear nothing. `None` in production.
    pub probe_group: Option<std::net::SocketAddrV4>,
}

impl Default for OverlayRecvConfig {
    fn default() -> Self {
        Self {
            sender: DEFAULT_CONTROL,
            listen: DEFAULT_LISTEN,
            out_dir: PathBuf::from("."),
            name: crate::default_receiver_name(),
            connect_timeout: None,
            inactivity: DEFAULT_INACTIVITY,
            max_bytes: None,
            no_clobber: false,
            cancel: None,
            key: None,
            trust: Vec::new(),
            multicast: Some(crate::RecvConfig::default()),
            probe_group: None,
        }
    }
}

/// Buffers in one incoming stream's pool.
fn pool_slots(segment_size: u32) -> usize {
    (POOL_BYTES_PER_STREAM / segment_size as usize).clamp(4, 1024)
}

/// Buffers in the pool of a parent edge that carries `carried` segments:
/// never more than it carries. A small object fed by many parents (a
/// pipeline node has up to 4 log2 N) would otherwise zero megabytes of
/// buffers per parent for nothing: 1 MB to 30 receivers over
/// `tcp-pipeline` spent 0.67 s of system time in it, on loopback.
fn edge_pool_slots(segment_size: u32, carried: u64) -> usize {
    let carried = usize::try_from(carried.max(1)).unwrap_or(usize::MAX);
    pool_slots(segment_size).min(carried)
}

/// Bytes one pool slot holds: a segment, or a sealed frame of one (opened
/// where it lies).
fn slot_len(segment_size: u32, sealed: bool) -> usize {
    segment_size as usize
        + if sealed {
            rmcast_proto::security::FRAME_OVERHEAD
        } else {
            0
        }
}

use crate::net::io_err;

#[cfg(test)]
mod pool_tests {
    use super::*;

    #[test]
    fn an_edge_pool_holds_at_most_what_the_edge_carries() {
        // 8 KiB segments: 2 MiB is 256 slots.
        assert_eq!(edge_pool_slots(8192, 1_000_000), 256);
        assert_eq!(edge_pool_slots(8192, 256), 256);
        assert_eq!(edge_pool_slots(8192, 15), 15);
        // An edge that carries nothing (a class beyond a tiny object)
        // still gets one slot; huge segments keep the floor of 4.
        assert_eq!(edge_pool_slots(8192, 0), 1);
        assert_eq!(edge_pool_slots(4 << 20, 100), 4);
        assert_eq!(edge_pool_slots(4 << 20, 2), 2);
    }
}
