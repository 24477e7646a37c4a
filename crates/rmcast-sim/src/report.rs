//! What a run produces: a report on success, an error that replays on failure.

use crate::Scenario;
use rmcast_proto::{
    ConfigError, Outcome, RateGroupStats, RateStats, ReceiverStats, SenderStats, SessionId,
};
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// Datagrams the network or the hosts dropped, by cause.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drops {
    /// A host's uplink queue was full (frames; only without `blocking_send`).
    pub uplink_overflow: u64,
    /// A switch output port queue was full (frames).
    pub port_overflow: u64,
    /// A host's socket receive buffer was full.
    pub socket_overflow: u64,
    /// Data frames lost by the loss model (each IP fragment is a frame).
    pub data_loss: u64,
    /// Datagrams a host could not reassemble: a fragment was lost (dropped
    /// when its reassembly timed out, when a newer datagram of the same
    /// source arrived, or when reassembly memory ran out).
    pub fragment_loss: u64,
    /// Receiver-to-sender frames lost by `control_loss`.
    pub control_loss: u64,
    /// Datagrams that reached a crashed host.
    pub crashed_host: u64,
    /// Unicast datagrams to an address no host owns.
    pub no_route: u64,
    /// Frames to or from a host while its link was down ([`crate::Scenario::link_downs`]).
    pub link_down: u64,
}

/// How one receiver host fared, from its own side.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceiverReport {
    /// Host number, 1..=N.
    pub host: u16,
    /// Name it registered with (`r{host}`).
    pub name: String,
    /// Its unicast address.
    pub addr: SocketAddr,
    /// Rank the sender gave it, if admitted.
    pub rank: Option<u16>,
    /// Whether its own hash check of the delivered bytes passed.
    pub hash_ok: bool,
    /// Virtual seconds at which every byte had been delivered.
    pub all_data_seconds: Option<f64>,
    /// Virtual seconds at which its machine ended (finished or failed).
    pub ended_seconds: Option<f64>,
    /// Why its machine failed, if it did.
    pub failure: Option<String>,
    /// Virtual seconds at which it crashed, if it did.
    pub crashed_seconds: Option<f64>,
    /// Virtual seconds at which the sender removed it from the session, if it did.
    pub sender_failed_seconds: Option<f64>,
    /// The machine's counters.
    pub stats: ReceiverStats,
    /// Data frames the loss model dropped on its port.
    pub data_lost: u64,
    /// Data frames (each IP fragment counts one) that its switch port took in.
    pub data_frames: u64,
    /// Datagrams it could not reassemble because a fragment was lost.
    pub fragment_loss: u64,
    /// Datagrams its socket buffer dropped.
    pub socket_overflow: u64,
    /// Garbage datagrams its machine processed.
    pub garbage_seen: u64,
}

/// The sender's buffer at one moment: recorded after each step of its
/// machine (a datagram handled, a timer, a datagram sent) whenever either
/// number changed, when [`crate::Scenario::trace_outstanding`] is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutstandingSample {
    /// Virtual time, nanoseconds.
    pub at_ns: u64,
    /// Data packets transmitted for the first time so far (the sender's
    /// highest index + 1).
    pub sent: u32,
    /// `Sender::outstanding()`: packets sent and not yet acknowledged by
    /// every live receiver; the window's base is `sent - outstanding`.
    pub outstanding: u32,
}

/// The sender's Hunt rate controller at one moment: recorded whenever its
/// spacing or state changed, when [`crate::Scenario::trace_rate`] is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateSample {
    /// Virtual time, nanoseconds.
    pub at_ns: u64,
    /// Minimum spacing between data packets, nanoseconds.
    pub spacing_ns: u64,
    /// Whether the controller is in its Decrease state.
    pub decrease: bool,
    /// Data packets transmitted for the first time so far.
    pub sent: u64,
    /// The controller's RTT estimate (the slowest member's), nanoseconds.
    pub rtt_ns: u64,
}

/// The measurements of a run that passed every invariant.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReport {
    /// The seed the run used.
    pub seed: u64,
    /// Virtual seconds from the start until the sender finished (after its Byes).
    pub seconds: f64,
    /// Virtual seconds until the sender held every receiver's verdict (before the Byes).
    pub verdicts_seconds: f64,
    /// Object bits / `seconds` / 10^6.
    pub goodput_mbit_s: f64,
    /// First transmissions of data packets.
    pub data_packets: u64,
    /// Data packets sent again.
    pub retransmitted_packets: u64,
    /// Control packets the sender received (every non-data packet of its session).
    pub control_packets: u64,
    /// `control_packets` / `data_packets` (0 when no data was sent).
    pub control_per_data: f64,
    /// Acks and naks the sender received / `data_packets` (Table 2's measure, without setup traffic).
    pub feedback_per_data: f64,
    /// Acks and naks the receivers sent.
    pub feedback_sent: u64,
    /// Drops by cause.
    pub drops: Drops,
    /// Garbage datagrams injected.
    pub garbage_injected: u64,
    /// Garbage datagrams the sender's machine processed.
    pub sender_garbage_seen: u64,
    /// The sender's verdict.
    pub outcome: Outcome,
    /// The sender's counters.
    pub sender: SenderStats,
    /// Every receiver, by host number.
    pub receivers: Vec<ReceiverReport>,
    /// Largest socket buffer occupancy seen on any host, in bytes.
    pub max_socket_buffer_bytes: usize,
    /// Largest switch port queue seen, in wire bytes.
    pub max_port_queue_bytes: usize,
    /// Largest uplink queue seen, in wire bytes.
    pub max_uplink_queue_bytes: usize,
    /// Events the simulator processed.
    pub events: u64,
    /// Largest `Sender::outstanding()` seen after any step of the sender
    /// during the data phase (the simulator checks it never exceeds the window).
    pub max_outstanding: u32,
    /// The sender's outstanding packets over the run (empty unless
    /// [`crate::Scenario::trace_outstanding`]).
    pub outstanding_trace: Vec<OutstandingSample>,
    /// The sender's spacing over the run (see [`crate::Scenario::trace_rate`]).
    pub rate_trace: Vec<RateSample>,
    /// Every sender (host 0..S), sender 0 included; the fields above are
    /// sender 0's, and its traces are there, not repeated here.
    pub senders: Vec<SenderReport>,
}

/// How one sender of a (multi-sender) run fared.
#[derive(Clone, Debug, PartialEq)]
pub struct SenderReport {
    /// Host number, 0..S.
    pub host: u16,
    /// Its session.
    pub session: SessionId,
    /// Virtual seconds until it finished.
    pub seconds: f64,
    /// Its counters.
    pub stats: SenderStats,
    /// Its verdict.
    pub outcome: Outcome,
    /// Its Hunt controller's counters, under Hunt.
    pub rate: Option<RateStats>,
    /// Its group machine's counters, with `SenderConfig::rate_group`.
    pub group: Option<RateGroupStats>,
    /// Largest outstanding count seen.
    pub max_outstanding: u32,
    /// Its outstanding packets over the run (empty for sender 0, whose
    /// trace is [`RunReport::outstanding_trace`]).
    pub outstanding_trace: Vec<OutstandingSample>,
    /// Its spacing over the run (empty for sender 0, see
    /// [`RunReport::rate_trace`]).
    pub rate_trace: Vec<RateSample>,
}

/// Why a run failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The sender refused the configuration.
    Config(ConfigError),
    /// The scenario itself cannot run (an MTU below 68, ...).
    Scenario(String),
    /// An invariant broke at this virtual time.
    Invariant {
        /// Virtual time of the violation.
        at: Duration,
        /// What broke.
        what: String,
    },
    /// The sender had not finished by the time limit.
    TimeLimit(Duration),
    /// A host's timer kept firing at one instant without progress.
    Livelock {
        /// Virtual time it was stuck at.
        at: Duration,
        /// Which host.
        host: u16,
    },
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Config(e) => write!(f, "bad configuration: {e}"),
            Failure::Scenario(e) => write!(f, "bad scenario: {e}"),
            Failure::Invariant { at, what } => {
                write!(f, "invariant broken at {:.6} s: {what}", at.as_secs_f64())
            }
            Failure::TimeLimit(limit) => write!(
                f,
                "the sender had not finished after {:.3} s of virtual time (stuck run)",
                limit.as_secs_f64()
            ),
            Failure::Livelock { at, host } => write!(
                f,
                "host {host}'s timer fired over and over at {:.6} s without progress \
                 (poll_timeout keeps returning a deadline handle_timeout does not clear)",
                at.as_secs_f64()
            ),
        }
    }
}

/// A failed run: what broke, the machines' state, and how to replay it.
#[derive(Clone, Debug)]
pub struct SimError {
    /// Seed of the failing run.
    pub seed: u64,
    /// The scenario that failed (with `seed` set).
    pub scenario: Box<Scenario>,
    /// What went wrong.
    pub failure: Failure,
    /// The machines' counters at the moment of failure, for a human.
    pub snapshot: String,
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "rmcast-sim run failed, seed {}: {}",
            self.seed, self.failure
        )?;
        writeln!(
            f,
            "replay: rmcast_sim::replay({}, &scenario), or set RMCAST_SIM_SEED={} for the test helpers",
            self.seed, self.seed
        )?;
        writeln!(f, "machines:\n{}", self.snapshot)?;
        write!(f, "scenario: {:#?}", self.scenario)
    }
}

impl std::error::Error for SimError {}

pub(crate) fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

pub(crate) fn dur(ns: u64) -> Duration {
    Duration::from_nanos(ns)
}
