//! The TCP overlay (`rmcast_proto::overlay`) over modelled links: the same
//! [`SenderMachine`] and [`NodeMachine`]s the TCP runtime drives, at group
//! sizes no test machine can host (N = 1,000 and beyond).
//!
//! # The model
//!
//! Host 0 runs the sender, hosts `1..=N` one receiver each. Every host has
//! an uplink and a downlink of the same rate R. A TCP data connection is a
//! byte pipe from its parent's uplink to its child's downlink:
//!
//! - The uplink sends one segment at a time (`len / R`), serving the host's
//!   connections round-robin, segment by segment: with equal segments this
//!   is a fair share by bytes among the connections that have something to
//!   send (processor sharing at segment granularity).
//! - The segment then travels for the connection's propagation delay
//!   (`latency`, times a per-connection factor in `[1, 1 + jitter)` drawn
//!   from the seed), and queues at the child's downlink (FIFO, `len / R`).
//!   Only then the child's machine sees it (`handle_segment`), stores it at
//!   once (no disk model) and routes it to its children.
//! - Flow control: a connection carries at most `window_bytes` of segments
//!   that its child has not released yet (in flight, queued at the
//!   downlink, or waiting to be forwarded to the child's own children): the
//!   TCP window plus the runtime's per-stream buffer pool.
//! - Control frames take the propagation delay and no bandwidth (they are a
//!   few hundred bytes per receiver per session). A data connection opens
//!   two propagation delays after the machine asks for it (SYN, hello):
//!   the child's kernel takes it, and the bytes written to it, whatever
//!   the child's application does; the machine sees the hello (and then
//!   what its kernel read) once it has started and runs. A hello the
//!   machine refuses closes the connection.
//! - Keyed (`sealed`, the runtime with a group key): every segment crosses
//!   its links in a sealed frame, [`FRAME_OVERHEAD`] bytes longer, and a
//!   data connection opens two propagation delays later (its key
//!   exchange: one hello each way before the parent's first frame, which
//!   needs the child's application).
//!   Crypto costs no time here (it costs CPU, which is not modelled).
//! - A writer that has had something to write and a shut window (or an
//!   unfinished key exchange) for the inactivity timeout gives up, as the
//!   runtime's do: the parent's machine hears `handle_child_done(Err)`,
//!   and the connection closes.
//! - A receiver whose transfer is over (its machine finished) closes its
//!   data connections, as the runtime does when it returns.
//! - An edge written back on a connection its peer opened
//!   ([`DataOp::WriteBack`]: TCP's other direction) is a pipe of its own
//!   the other way, open at once (the key exchange is over): its hello
//!   reaches the peer's machine a propagation delay later, and a share of
//!   nothing is written with it. Segments routed to such an edge before
//!   the peer's connection arrived wait, held, as in the runtime's
//!   channel, and are released if it is abandoned ([`DataOp::Abandon`]).
//!   A node that closes the connection from one side (a drop, a writer
//!   that gave up) closes the other direction with it.
//! - A host may hold at most `max_connections` data connections; one more
//!   fails (the parent's machine hears `handle_child_done(Err)`). A
//!   connection carrying an edge each way counts once.
//! - The object's bytes are not carried: a segment is its index. Hashing is
//!   free and instant; the sender knows the hash at time zero.
//!
//! Receivers register in an order and at times drawn from the seed, so the
//! ranks, and with them the overlay, change with the seed; a seed replays a
//! run exactly (events are ordered by time, then by insertion).
//!
//! After the run it checks that every receiver got every segment exactly
//! once, stored the object's size, verified, and finished without error,
//! that the sender reports every member verified, and that the session
//! ended within `time_limit` of simulated time.
//!
//! # Faults
//!
//! [`OverlayFault`]s happen to hosts at set times:
//!
//! - A crash (SIGKILL): the host does nothing more. Its kernel closes its
//!   connections: a data connection that had been written to the end
//!   still delivers everything (FIN after the data); one that had not is
//!   reset, and the peer's machine hears it one propagation delay later
//!   (`handle_parent_failed`, `handle_child_done(Err)`, `handle_closed`).
//!   A connection opened to a dead host (or to one whose transfer is over)
//!   is refused.
//! - A pause (SIGSTOP, then SIGCONT, or never): the host's machine sees
//!   nothing and does nothing until it resumes, and its downlink stops
//!   (nobody reads the socket, so TCP's window closes); its connections
//!   stay open and what its kernel already holds keeps moving. Everything
//!   that happened meanwhile reaches the machine, in order, when it resumes.
//!
//! The overlay heals (see "Self-healing" in `rmcast_proto::overlay`): once
//! data flows, the sender cuts out a receiver that died (its control
//! connection reset), went silent for the inactivity timeout, stopped
//! taking data (its edge from the sender failed) or reported a failure,
//! and tells its children (`Detach`). A child closes its edges from it
//! ([`DataOp::Drop`]: nothing more of that connection reaches the child,
//! what its downlink still queued for it is discarded, the child's
//! machine hears `handle_parent_failed` at once and the parent's kernel
//! the close a propagation delay later), or has seen them reset already,
//! and says where it stands (`Orphaned`); the sender then opens a
//! connection of its own for each orphaned edge (hello with `first`) and
//! feeds it from that segment on ([`DataOp::Feed`] with `first`). After
//! that a child has two connections for the same parent edge over time:
//! the old one delivers nothing more.
//!
//! After a run with a crash or a pause without end, the checks are those
//! a user relies on: the session still ends within `time_limit`; every
//! receiver that the sender reports verified, and every receiver that
//! finished without error, holds every segment exactly once. A lasting
//! fault of receivers that strikes once data flows must be healed: every
//! other receiver finishes without error, verified, with every segment
//! exactly once; the sender reports none of them failed, and its error
//! names one of the hosts that failed first and says "K of N receivers
//! verified" (or there is no error, if the lost ones had finished). One
//! that strikes before data flows fails the session, naming one of the
//! hosts that failed (not an innocent one). With the sender dead, every
//! surviving receiver still ends by itself. A child refuses a connection
//! only after a lasting fault, and never the sender's. A pause that ends
//! (within the inactivity timeout) must change nothing: the run passes
//! the clean checks.
//!
//! It does not model TCP slow start, loss, retransmission or congestion
//! control, per-packet (rather than per-segment) pipelining inside a hop,
//! or disk and CPU costs.
//!
//! [`SenderMachine`]: rmcast_proto::overlay::SenderMachine
//! [`NodeMachine`]: rmcast_proto::overlay::NodeMachine
//! [`FRAME_OVERHEAD`]: rmcast_proto::security::FRAME_OVERHEAD
//! [`DataOp::Drop`]: rmcast_proto::overlay::DataOp::Drop
//! [`DataOp::WriteBack`]: rmcast_proto::overlay::DataOp::WriteBack
//! [`DataOp::Abandon`]: rmcast_proto::overlay::DataOp::Abandon
//! [`DataOp::Feed`]: rmcast_proto::overlay::DataOp::Feed

mod check;
mod net;
mod scenario;
mod sim;

pub use check::{OverlayError, OverlayReport};
pub use scenario::{OverlayFault, OverlayScenario};
use sim::Sim;

/// Runs `s` to the end and checks its invariants.
pub fn run_overlay(s: &OverlayScenario) -> Result<OverlayReport, OverlayError> {
    let mut sim = Sim::new(s);
    sim.run()
        .and_then(|()| sim.check())
        .map_err(|e| OverlayError(format!("seed {}: {e} ({s:?})", s.seed)))
}
