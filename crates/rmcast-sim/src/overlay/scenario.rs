//! The scenario of an overlay run, and the faults it may hold.

use rmcast_proto::overlay::OverlayShape;
use std::time::Duration;

/// One overlay run: shape, group, object and links.
#[derive(Clone, Debug)]
pub struct OverlayScenario {
    /// The overlay.
    pub shape: OverlayShape,
    /// Receivers.
    pub nodes: u16,
    /// Object size in bytes.
    pub size: u64,
    /// Bytes per segment.
    pub segment_size: u32,
    /// Every host's uplink and downlink rate.
    pub rate_bits_per_s: u64,
    /// One-way propagation delay of a connection.
    pub latency: Duration,
    /// Per-connection spread of the delay: factor in `[1, 1 + jitter)`.
    pub jitter: f64,
    /// Unreleased bytes a data connection may carry.
    pub window_bytes: u64,
    /// Data connections a host may hold.
    pub max_connections: usize,
    /// The machines' inactivity timeout.
    pub inactivity: Duration,
    /// The sender's stall timeout (`SenderConfig::stall_timeout`).
    pub stall_timeout: Option<Duration>,
    /// The session must end within this much simulated time.
    pub time_limit: Duration,
    /// Seed of every random choice.
    pub seed: u64,
    /// Keyed: segments travel in sealed frames, connections exchange keys.
    pub sealed: bool,
    /// What goes wrong, and when (see the module's documentation).
    pub faults: Vec<OverlayFault>,
}

/// A fault of one host (0 is the sender, `1..=nodes` the receivers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverlayFault {
    /// The host dies at `at` (SIGKILL): its connections close or reset.
    Crash {
        /// The host.
        host: u16,
        /// When.
        at: Duration,
    },
    /// The host stops at `at` (SIGSTOP) for `duration`, or for good
    /// (`None`): its connections stay open and go quiet.
    Pause {
        /// The host.
        host: u16,
        /// When.
        at: Duration,
        /// For how long; `None`: it never resumes.
        duration: Option<Duration>,
    },
}

impl OverlayFault {
    /// A lasting fault of `host` at `at`: a stop for good (SIGSTOP without
    /// SIGCONT) when `stop`, else a crash (SIGKILL).
    #[must_use]
    pub fn lasting(host: u16, at: Duration, stop: bool) -> Self {
        if stop {
            Self::Pause {
                host,
                at,
                duration: None,
            }
        } else {
            Self::Crash { host, at }
        }
    }

    /// The host it happens to.
    #[must_use]
    pub fn host(&self) -> u16 {
        match *self {
            Self::Crash { host, .. } | Self::Pause { host, .. } => host,
        }
    }

    /// When it happens.
    #[must_use]
    pub fn at(&self) -> Duration {
        match *self {
            Self::Crash { at, .. } | Self::Pause { at, .. } => at,
        }
    }

    /// Whether the host is gone for good (a crash, or a pause without end).
    #[must_use]
    pub fn is_lasting(&self) -> bool {
        matches!(
            self,
            Self::Crash { .. } | Self::Pause { duration: None, .. }
        )
    }
}

impl Default for OverlayScenario {
    fn default() -> Self {
        Self {
            shape: OverlayShape::Bintree,
            nodes: 8,
            size: 1 << 20,
            segment_size: 8 << 10,
            rate_bits_per_s: 1_000_000_000,
            latency: Duration::from_micros(50),
            jitter: 0.2,
            window_bytes: 2 << 20,
            max_connections: 1024,
            inactivity: Duration::from_secs(5),
            stall_timeout: Some(rmcast_proto::overlay::DEFAULT_STALL_TIMEOUT),
            time_limit: Duration::from_secs(3600),
            seed: 1,
            sealed: false,
            faults: Vec::new(),
        }
    }
}
