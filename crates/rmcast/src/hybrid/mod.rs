//! Hybrid sessions: one send serves the receivers that hear the multicast
//! group over multicast, and those that do not over a TCP overlay.
//!
//! A receiver that does not know whether its network carries multicast
//! registers over TCP (`rmcast recv --sender HOST:PORT`) at the sender's
//! control address (the *lobby*). The sender answers its `Register` with a
//! `Probe`: the group and the multicast session's id. The receiver listens
//! on the group for [`DEFAULT_PROBE_WAIT`] (the sender announces the session
//! again at once and then quickly); if the session's `Hello`
//! reaches it, it joins the multicast session like any receiver (and the
//! lobby forgets it when the connection closes). If not, it says
//! `Unheard` and waits on the connection. The multicast session waits for
//! the receivers given (`-n`) less those that said `Unheard`
//! ([`rmcast_proto::Sender::serve_elsewhere`]); once both add up, the
//! multicast data phase starts, and the lobby opens a TCP overlay for the
//! rest ([`tcp_shape_for`] their number) on a port of its own and sends each of
//! them a `Redirect` to it. Both halves run at once; the send succeeds
//! only when every receiver of both verified. A receiver started with
//! plain `rmcast recv` (no `--sender`) joins the multicast half as always.
//!
//! The frames are the overlay's (`docs/wire-format.md`, types 13–15), sealed
//! under the group key like the rest of the overlay's control traffic. The
//! lobby's decisions are [`rmcast_proto::hybrid::Lobby`]'s; this module
//! drives it over TCP.

mod sender;

pub use sender::{HybridSender, send_bytes, send_file};

use crate::SendConfig;
use crate::overlay::{OverlaySendConfig, OverlayShape};
use mio::Waker;
use rmcast_proto::SessionId;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How long a receiver listens for the multicast session before it asks
/// for TCP. Each `Probe` makes the sender start its `Hello`s again from
/// their fast beginning ([`rmcast_proto::Sender::announce_again`]: at once,
/// then 10, 20, 40, 80 ms apart): a receiver that hears the group hears
/// four within 150 ms of being asked, five within 250 ms.
pub const DEFAULT_PROBE_WAIT: Duration = Duration::from_millis(250);

/// How to run a hybrid session.
#[derive(Clone, Debug)]
pub struct HybridConfig {
    /// The multicast half, and the session as a whole: `proto.receivers`
    /// counts every receiver (multicast and TCP), `proto.join_wait`
    /// bounds the registration of all of them.
    pub multicast: SendConfig,
    /// The TCP half: `control` is the lobby's address (receivers run
    /// `rmcast recv --sender` with it); the overlay itself listens on
    /// another port of the same address. `shape`, `receivers` and
    /// `join_wait` are set by the session (see `tcp_shape`).
    pub overlay: OverlaySendConfig,
    /// The TCP half's overlay; `None` (the default): [`tcp_shape_for`] the
    /// number of receivers that did not hear the group.
    pub tcp_shape: Option<OverlayShape>,
    /// How long receivers probe the group ([`DEFAULT_PROBE_WAIT`]).
    pub probe_wait: Duration,
}

/// The overlay that serves `k` receivers that do not hear the group:
/// `tcp-chain` up to 8, `tcp-bintree` beyond. Measured: with 6 receivers,
/// 8 MB and 20 Mbit/s per host on the namespace LAN (the lab's
/// `hybrid-no-multicast` scenario) a chain took 3.34 s in every run, a
/// bintree 3.84–4.20 s and the binomial pipeline 4.20–4.68 s; in the
/// simulator (`docs/overlays-at-scale.md`, 1 MiB at 1 Gbit/s) the chain's
/// depth costs more as the group grows (against the bintree: +6 % at 7
/// receivers, +19 % at 15, +43 % at 31).
#[must_use]
pub fn tcp_shape_for(k: u16) -> OverlayShape {
    if k <= 8 {
        OverlayShape::Chain
    } else {
        OverlayShape::Bintree
    }
}

/// Who took the object which way, in a hybrid session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HybridReport {
    /// Receivers of the multicast half, by name, in rank order.
    pub multicast: Vec<String>,
    /// Receivers that did not hear the group within the probe and were
    /// served over the TCP overlay, by name, in the order they said so.
    pub tcp: Vec<String>,
    /// The overlay that served them ("tcp-chain"; empty when nobody went
    /// TCP).
    pub tcp_protocol: String,
    /// How long each of them listened for the group.
    pub probe_wait: Duration,
    /// Receivers that did not hear the group of a session without a TCP
    /// half (a directory tree goes over multicast only), refused, by name.
    pub refused: Vec<String>,
}

/// What the lobby and the multicast half share: the count of receivers
/// served over TCP, the multicast session's id (the lobby's `Probe` names
/// it), and the multicast loop's waker.
#[derive(Default)]
pub(crate) struct Split {
    elsewhere: AtomicU16,
    /// A receiver was just asked to probe: announce the session again.
    announce: std::sync::atomic::AtomicBool,
    session: OnceLock<SessionId>,
    waker: OnceLock<Arc<Waker>>,
}

impl Split {
    /// Receivers served over TCP so far.
    pub(crate) fn elsewhere(&self) -> u16 {
        self.elsewhere.load(Ordering::Acquire)
    }

    /// Counts `k` receivers served over TCP and wakes the multicast loop.
    pub(crate) fn serve_elsewhere(&self, k: u16) {
        self.elsewhere.store(k, Ordering::Release);
        if let Some(w) = self.waker.get() {
            let _ = w.wake();
        }
    }

    /// Asks the multicast loop to announce its session again at once (a
    /// receiver is about to listen for it).
    pub(crate) fn announce(&self) {
        self.announce.store(true, Ordering::Release);
        if let Some(w) = self.waker.get() {
            let _ = w.wake();
        }
    }

    /// Whether the lobby asked for an announcement since the last call.
    pub(crate) fn take_announce(&self) -> bool {
        self.announce.swap(false, Ordering::AcqRel)
    }

    /// The multicast loop's id for its session (set once, at its start).
    pub(crate) fn set_session(&self, s: SessionId) {
        let _ = self.session.set(s);
    }

    /// The multicast session's id, once its loop started.
    pub(crate) fn session(&self) -> Option<SessionId> {
        self.session.get().copied()
    }

    /// The multicast loop's waker (set once, before its loop starts).
    pub(crate) fn set_waker(&self, w: Arc<Waker>) {
        let _ = self.waker.set(w);
    }
}
