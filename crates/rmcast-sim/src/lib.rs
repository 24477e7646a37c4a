//! rmcast's network simulator: a deterministic discrete-event model of a
//! switched LAN that drives the real sans-IO state machines of
//! `rmcast-proto` and checks invariants on every run.
//!
//! # What it models
//!
//! Host 0 runs [`rmcast_proto::Sender`], hosts 1..=N each run a
//! [`rmcast_proto::Receiver`]. With [`Scenario::senders`] = S > 1, hosts
//! 0..S each run a sender (own session, object, sequence space and rate
//! state) to the same group, hosts S..S+N are the receivers, each running
//! one receiver machine per session in an [`rmcast_proto::Endpoint`] that
//! routes datagrams by session id as the runtime's does, and the senders hear the group's multicast too. Host `h` has the fake address
//! `10.0.{(h+1)>>8}.{(h+1)&255}:5000`. Every host has an uplink into one
//! switch, and the switch has one output port per host. Every uplink and
//! port is a FIFO transmitter with a rate and a drop-tail queue in wire bytes
//! (UDP payload + 28 bytes of IP/UDP + the Ethernet overhead). A datagram
//! larger than the MTU travels as IP fragments, each its own frame (own wire
//! size, queueing and loss draw); the receiving host reassembles it (bounded
//! memory, a timeout) and loses it if any fragment is missing. Each hop adds
//! a propagation delay; the switch stores and forwards each frame, copying a
//! multicast one to every receiver's port (never back to its source) and a
//! unicast one to its owner's. A data frame may be lost on a receiver's port
//! (Bernoulli or Gilbert–Elliott); receiver-to-sender frames may be lost on
//! the sender's port. A host whose uplink is full holds its next datagram
//! until it fits, still reading input meanwhile. A host has a socket receive
//! buffer (whole datagrams; drops when full) and one CPU: each datagram
//! received or sent costs a per-packet plus a per-byte time ([`HostCost`];
//! the machine sees a datagram when its cost is spent; [`Scenario::fsu_2004`]
//! is the paper's Pentium III cluster). Receivers may crash at a given
//! time; an intruder may inject random bytes and well-formed packets of other
//! sessions. Time is virtual, every random choice comes from the scenario's
//! seed, and events are ordered by (time, insertion counter), so a seed
//! replays a run exactly.
//!
//! After every run it checks, per sender, that every receiver the sender reports verified
//! holds exactly the bytes that sender sent, that nothing was delivered twice (or with
//! wrong bytes), that without crashes the sender's outcome is ok, that the
//! sender's outstanding packets never exceed its window, that queues and
//! socket buffers stayed within their limits, and that the sender finished
//! before the time limit (the outstanding count is checked after every step
//! of the sender; [`Scenario::trace_outstanding`] records it over the run
//! in [`RunReport::outstanding_trace`]). A failing run returns a [`SimError`] whose
//! `Display` names the seed, the machines' state and the whole scenario.
//!
//! # What it does not model (yet)
//!
//! Ethernet collisions or pause frames, switch buffer sharing between ports,
//! cascaded switches, kernel scheduling and interrupt coalescing, a separate
//! per-fragment CPU cost (folded into the per-byte cost), reordering (so
//! fragments never overtake each other), checksum corruption (a lost frame
//! vanishes), and the CPU cost of hashing or storing the object. It
//! ignores [`rmcast_proto::OfferInfo::test_loss_ppm`]: the runtime applies
//! that knob, the simulator has its own [`LossModel`].

#![warn(missing_docs)]

pub mod campaign;
pub mod overlay;
pub mod overlay_model;
mod report;
mod scenario;
mod sim;
pub mod stream;

pub use report::{
    Drops, Failure, OutstandingSample, RateSample, ReceiverReport, RunReport, SenderReport,
    SimError,
};
pub use scenario::{Crash, HostCost, LinkDown, LossModel, MIN_MTU, Pause, Restart, Scenario};
pub use sim::host_addr;

/// Environment variable that makes the test helpers replay one seed.
pub const SEED_ENV: &str = "RMCAST_SIM_SEED";

/// Runs one scenario to the end and checks its invariants.
pub fn run(scenario: &Scenario) -> Result<RunReport, SimError> {
    sim::run(scenario)
}

/// Runs one scenario as [`run`] does, reading the datagrams of a large
/// fan-out (hundreds of receivers) on `threads` threads. The report is
/// the same, bit for bit, whatever `threads` is; only the time it takes
/// differs. [`run`] uses the machine's threads, or `RMCAST_SIM_THREADS`.
pub fn run_with_threads(scenario: &Scenario, threads: usize) -> Result<RunReport, SimError> {
    sim::run_threads(scenario, threads)
}

/// Runs `scenario` again with `seed` (to reproduce a reported failure).
pub fn replay(seed: u64, scenario: &Scenario) -> Result<RunReport, SimError> {
    let mut s = scenario.clone();
    s.seed = seed;
    run(&s)
}

/// The seed in `RMCAST_SIM_SEED` if set and valid, else `default`.
#[must_use]
pub fn seed_from_env(default: u64) -> u64 {
    std::env::var(SEED_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Runs `scenario` (its seed replaced by `RMCAST_SIM_SEED` when set) and
/// panics with the seed and the replay recipe if it fails.
#[track_caller]
pub fn run_or_panic(scenario: &Scenario) -> RunReport {
    let seed = seed_from_env(scenario.seed);
    match replay(seed, scenario) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("rmcast-sim: failing seed {seed}");
            panic!("{e}");
        }
    }
}
