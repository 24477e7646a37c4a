//! How fast data enters the network: off (the window alone), a fixed token
//! bucket, or Hunt's controller, which also takes part in the rate group
//! of several senders on one multicast group.

use super::{Phase, Sender, SenderConfig};
use crate::transfer::rate::{OwnRate, RateGroup};
use crate::{ErrorSignal, Instant, Pacer, RateControl, RateController, WIRE_OVERHEAD_BYTES};
use rmcast_wire::{Body, Feedback, Header, SessionId};
use std::time::Duration;

/// Smallest pacer bucket: one full UDP GSO batch.
const PACER_BURST_BYTES: u64 = 65_000;
/// The pacer's bucket also holds this fraction of a second of the rate
/// (1/500 s = 2 ms) where that is more than one GSO batch.
const PACER_BURST_PER_S: u64 = 500;

/// How data packets are paced, built from [`RateControl`].
#[derive(Clone, Debug)]
pub(super) enum Mode {
    Off,
    Fixed(Pacer),
    Hunt(Box<RateController>),
    Find(Box<crate::RateFinder>),
}

/// The sender's pacing and its part in the rate group.
#[derive(Debug)]
pub(super) struct Pacing {
    pub(super) mode: Mode,
    /// The group's membership and rate resynchronisation (several senders).
    pub(super) group: Option<RateGroup>,
    /// The last data packet `poll_transmit` chose was held back by the
    /// pacing allowance (so the allowance's deadline is a wake-up).
    pub(super) blocked: bool,
}

impl Pacing {
    /// The pacing `config` asks for, starting at `now`.
    pub(super) fn new(config: &SenderConfig, session: SessionId, now: Instant) -> Self {
        let mode = match config.rate_control() {
            RateControl::Off => Mode::Off,
            RateControl::Fixed { bytes_per_s } => {
                Mode::Fixed(fixed_pacer(config, bytes_per_s, now))
            }
            RateControl::Hunt(params) => Mode::Hunt(Box::new(RateController::new(params, now))),
            RateControl::Find => {
                let wire = (config.packet_size + WIRE_OVERHEAD_BYTES) as u64;
                let window = u64::from(config.window) * wire;
                Mode::Find(Box::new(crate::RateFinder::new(now, window)))
            }
        };
        let group = match (&mode, &config.rate_group) {
            (Mode::Hunt(_), Some(g)) => Some(RateGroup::new(g.clone(), session, now)),
            _ => None,
        };
        Self {
            mode,
            group,
            blocked: false,
        }
    }
}

impl Sender {
    /// Feeds Hunt's controller an RTT sample: the time since the echoed
    /// packet went out, if it went out once (Karn: a resent packet's echo
    /// is ambiguous).
    pub(super) fn rtt_sample(&mut self, now: Instant, f: &Feedback<'_>) {
        let Mode::Hunt(c) = &mut self.pacing.mode else {
            return;
        };
        let echo = f.echo.since(self.isn);
        if echo < self.window.base || echo >= self.window.high {
            return;
        }
        let w = (echo % self.config.window) as usize;
        if !self.window.lack[w].resent {
            c.on_rtt_sample(now.saturating_since(self.window.sent_at[w]));
        }
    }

    /// A group-scoped rate-control packet, of any session.
    pub(super) fn on_group_packet(&mut self, now: Instant, header: Header, body: &Body<'_>) {
        if header.session == self.session {
            // Our own stream's errors reach us as feedback already, and
            // our own reports and syncs looped back are nothing new.
            return;
        }
        if let Body::RateNak(_) = body {
            if matches!(self.pacing.mode, Mode::Hunt(_)) && self.phase == Phase::Sending {
                self.stats.group_naks += 1;
                self.rate_error(now, ErrorSignal::Group);
            }
            return;
        }
        self.stats.group_packets += 1;
        let Some(own) = self.own_rate() else {
            return;
        };
        let Some(g) = &mut self.pacing.group else {
            return;
        };
        if let Some(spacing) = g.handle(now, header.session, body, own) {
            self.adopt_rate(now, spacing);
        }
        self.group_step(now);
    }

    /// Runs the group machine's timers; adopts a rate a round produced.
    pub(super) fn group_step(&mut self, now: Instant) {
        let Some(own) = self.own_rate() else {
            return;
        };
        if let Some(spacing) = self.pacing.group.as_mut().and_then(|g| g.step(now, own)) {
            self.adopt_rate(now, spacing);
        }
        if let (Some(g), Mode::Hunt(c)) = (&self.pacing.group, &mut self.pacing.mode) {
            c.set_senders(g.senders());
        }
    }

    fn adopt_rate(&mut self, now: Instant, spacing: Duration) {
        if let Mode::Hunt(c) = &mut self.pacing.mode {
            c.resync(now, spacing);
        }
    }

    /// What the group machine needs to know about this sender.
    pub(super) fn own_rate(&self) -> Option<OwnRate> {
        let Mode::Hunt(c) = &self.pacing.mode else {
            return None;
        };
        Some(OwnRate {
            spacing_ns: u64::try_from(c.spacing().as_nanos()).unwrap_or(u64::MAX),
            transmissions: self.window.transmissions,
        })
    }

    /// `RateControl::Find`: every receiver acknowledged up to the window's
    /// base at `now`, a delivery-rate sample.
    pub(super) fn rate_found(&mut self, now: Instant) {
        if let Mode::Find(f) = &mut self.pacing.mode {
            // On the wire, as the pacer counts: each packet with its headers.
            let wire = (self.config.packet_size + WIRE_OVERHEAD_BYTES) as u64;
            f.on_acked(now, u64::from(self.window.base) * wire);
        }
    }

    pub(super) fn rate_error(&mut self, now: Instant, signal: ErrorSignal) {
        if let Mode::Hunt(c) = &mut self.pacing.mode {
            c.on_error(now, signal);
        }
    }

    /// When the allowance lets go the packet it held back at the last
    /// [`Sender::poll_transmit`], if it held one back.
    pub(super) fn held_by_pacer_until(&self) -> Option<Instant> {
        if !self.pacing.blocked {
            return None;
        }
        match &self.pacing.mode {
            Mode::Off => None,
            Mode::Fixed(p) => Some(p.ready_at(self.config.packet_size + WIRE_OVERHEAD_BYTES)),
            Mode::Hunt(c) => Some(c.ready_at()),
            Mode::Find(f) => Some(
                f.pacer_ref()
                    .ready_at(self.config.packet_size + WIRE_OVERHEAD_BYTES),
            ),
        }
    }
}

/// The token bucket of [`RateControl::Fixed`]. A burst of one full UDP GSO
/// batch (65,000 bytes: 44 packets of 1472): the runtime sends a burst in
/// one system call, and a 16-packet bucket held only 188 µs of tokens at
/// 1 Gbit/s, so a sender that woke every ~300 µs lost tokens (paced
/// 1 Gbit/s reached ~530 Mbit/s). At high rates the bucket holds 2 ms of
/// the rate (250 kB at 1 Gbit/s), so that a sender descheduled for a
/// millisecond or two on a busy host catches up instead of losing the
/// tokens (one GSO batch is only 0.5 ms there). With packets larger than a
/// GSO batch allows (IP-fragmented datagrams) it holds two packets, enough
/// to send back to back, and no more: it used to hold 16, so 50,000-byte
/// packets left in an 800 kB burst at link speed, 67 ms of a 95 Mbit/s
/// pace, which a switch port's buffer would drop and which made large
/// packets look faster than their pace in the lab. (Two packets on top of
/// the allowance, tried too, gave 50,000-byte packets a 165 kB head start
/// against 8 KB packets' 82 kB, which decided the lab's 2 MB packet-size
/// comparisons.) The price is paid by senders late by more than the
/// bucket: 65,507-byte (45-fragment) packets paced at 0.95 of 1 Gbit/s to 2
/// receivers on the netns lab ran at 0.85–0.95 of their pace instead of 1.0 (on
/// veth the sender's own system calls carry the emulated network's
/// delivery, so it wakes late); 1472-byte packets are unchanged.
fn fixed_pacer(config: &SenderConfig, bytes_per_s: u64, now: Instant) -> Pacer {
    Pacer::new(
        bytes_per_s.saturating_mul(8),
        PACER_BURST_BYTES
            .max(2 * (config.packet_size + WIRE_OVERHEAD_BYTES) as u64)
            .max(bytes_per_s / PACER_BURST_PER_S),
        now,
    )
}
