//! Send-rate flow control after Hunt (Cornell, 1995), chapter 4: the sender
//! enforces a minimum spacing between data packets and adjusts it from the
//! presence or absence of errors.
//!
//! The controller is a sans-IO state machine with the thesis's two states,
//! its increase and decrease timers, and its back-off step (Table 4.1,
//! "Operation of protocol"):
//!
//! | State    | Input | Operation                                                        |
//! |----------|-------|------------------------------------------------------------------|
//! | Increase | I     | decrease the spacing (it stays positive), stay, re-arm the increase timer |
//! | Increase | E     | clear the increase timer, set the decrease timer, go to Decrease, add 2 × the last increase to the spacing |
//! | Decrease | E     | add 2 × the last increase to the spacing, restart the decrease timer |
//! | Decrease | D     | reset the back-off multiplier to one, arm the increase timer, go to Increase |
//!
//! I is the increase timer expiring, D the decrease timer expiring, E an
//! error (a gap a receiver reports, an acknowledgement timeout, a send the
//! kernel refused). In Increase the decrease timer is never set and in
//! Decrease the increase timer is never set.
//!
//! Two things are ours, both selectable so that the thesis's own variant
//! stays testable ([`HuntParams::thesis`]):
//!
//! * **Timers** ([`HuntTimers::Adaptive`]): the thesis fixed both timers at
//!   500 units of 40 µs = 20 ms (Table C.1) and proposed (sections 5.1.5
//!   and appendix C) to make them depend on the round-trip time to the
//!   slowest member, the group size and the current spacing. Ours are
//!   `increase = k_i × rtt + batch × spacing` and
//!   `decrease = (k_d + log2 group) × rtt + batch × spacing`: an increase
//!   waits until the previous one could have produced an error report, and
//!   the quiet period that ends a back-off grows with the number of members
//!   that can report one. The RTT includes the slowest receiver's queueing,
//!   so the rate climbs fast while its buffer is empty and slowly near
//!   overflow.
//! * **Errors per back-off**: the thesis's stop-and-wait sender had one
//!   packet in flight, so every error concerned a packet sent at the
//!   current spacing. A windowed sender learns of many losses of packets
//!   sent before it backed off; with [`HuntParams::ignore_stale_errors`]
//!   an error about a packet sent before the last back-off is counted but
//!   does not back off again (the same idea as TCP's one reduction per
//!   window).
//!
//! Pacing is a token allowance (a GCRA, the virtual-scheduling form of a
//! token bucket): one packet per spacing on average, but up to
//! `burst_packets` back to back, so a runtime that sends a GSO batch per
//! system call can use whole batches.

use crate::Instant;
use std::time::Duration;

/// How a sender limits the rate at which data packets enter the network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RateControl {
    /// No pacing: the window alone limits the sender.
    Off,
    /// A token bucket at a constant rate of UDP payload bytes per second.
    Fixed {
        /// Long-run rate, UDP payload bytes per second.
        bytes_per_s: u64,
    },
    /// Hunt's send-rate control: the spacing adapts to errors.
    Hunt(HuntParams),
    /// The sender finds the path's rate itself: it paces at the group's
    /// measured delivery rate, probing above it now and then
    /// ([`crate::RateFinder`]).
    Find,
}

/// The two states of Table 4.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HuntState {
    /// No recent error: the increase timer periodically shortens the spacing.
    Increase,
    /// A recent error: the spacing grows on every further error until the
    /// decrease timer expires without one.
    Decrease,
}

/// What went wrong (input E of Table 4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorSignal {
    /// EXP: a receiver lacks a packet (the first of a gap); `sent_at` is
    /// when the lost packet was last transmitted.
    Exp {
        /// Transmission time of the lost packet.
        sent_at: Instant,
    },
    /// LAST: the acknowledgement (retransmission) timer expired.
    Last,
    /// The runtime could not send (`ENOBUFS`, `EAGAIN`): the host itself
    /// is the bottleneck.
    SendFailure,
    /// Another sender's stream had an error (a multicast `RateNak` of
    /// another session, EXP or LAST): the group shares the slowest
    /// member's capacity, so every sender backs off.
    Group,
}

/// The spacing unit: how much an increase removes and a back-off adds
/// (times its multiplier).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HuntStep {
    /// A fixed unit (the thesis: one 40 µs clock unit).
    Fixed(Duration),
    /// `spacing / divisor` for back-offs. Increases hunt for the spacing
    /// of the last error: before any error they remove `spacing /
    /// divisor` (the rate grows geometrically, crossing decades in a
    /// bounded number of steps); above the last error's spacing they remove
    /// half the distance to it (a binary search back to the rate that last
    /// worked); at or below it they probe with a fine step of `spacing / (8
    /// × divisor)`, so the rate creeps over the group's capacity slowly and
    /// the slowest member's buffer overflows by a packet or two, not by a
    /// burst. After each quiet decrease period the last error's spacing
    /// moves half way to the spacing that proved quiet.
    Proportional {
        /// Divisor of the current spacing (at least 1).
        divisor: u32,
    },
}

/// How long the increase and decrease timers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HuntTimers {
    /// Constant timers (the thesis: 20 ms each, Table C.1).
    Fixed {
        /// Increase timer.
        increase: Duration,
        /// Decrease timer.
        decrease: Duration,
    },
    /// Timers from the measured RTT, the group size and the spacing.
    Adaptive(AdaptiveTimers),
}

/// Coefficients of [`HuntTimers::Adaptive`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveTimers {
    /// Round-trip times in the increase timer (`k_i`).
    pub increase_rtts: u32,
    /// Round-trip times in the decrease timer before the group term (`k_d`).
    pub decrease_rtts: u32,
    /// Spacings added to both timers: at least this many packets go out at
    /// a spacing before it changes again.
    pub batch_packets: u32,
    /// Shortest timer.
    pub min: Duration,
    /// Longest timer.
    pub max: Duration,
}

impl Default for AdaptiveTimers {
    fn default() -> Self {
        Self {
            increase_rtts: 8,
            decrease_rtts: 4,
            batch_packets: 16,
            min: Duration::from_micros(500),
            max: Duration::from_secs(1),
        }
    }
}

/// Parameters of Hunt's controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HuntParams {
    /// Spacing before any adjustment.
    pub initial_spacing: Duration,
    /// Smallest spacing (the fastest rate allowed; at least 1 ns).
    pub min_spacing: Duration,
    /// Largest spacing (the slowest rate a back-off can reach).
    pub max_spacing: Duration,
    /// Unit of increases and back-offs.
    pub step: HuntStep,
    /// Timer policy.
    pub timers: HuntTimers,
    /// Packets the allowance lets go back to back (at least 1; a GSO batch).
    pub burst_packets: u32,
    /// RTT assumed until the first measurement.
    pub initial_rtt: Duration,
    /// Count, but do not act on, errors about packets sent before the last
    /// back-off.
    pub ignore_stale_errors: bool,
    /// Shorten the spacing on an increase timer only if the allowance held
    /// a packet back since the last change: a sender limited by its window
    /// or its application has shown nothing about a faster rate.
    pub increase_only_when_limited: bool,
    /// Errors that arrive while the spacing is at least this many RTTs
    /// (times the senders sharing the group) are background loss, not
    /// overruns: a receiver answers each packet before the next arrives,
    /// so no queue can build and overflow. They are counted
    /// ([`RateStats::background_errors`]) and change nothing. Without this
    /// ceiling, loss that does not depend on the rate (a lossy link, a
    /// receiver's `--loss`) widens the spacing on every error and the rate
    /// falls to `max_spacing` (one packet a second) and stays there.
    /// `None`: every error acts (the thesis).
    pub background_spacing_rtts: Option<u32>,
}

impl HuntParams {
    /// The thesis's protocol as measured (Table 4.1 with Table C.1's
    /// values): 2000 µs initial spacing, a 40 µs unit, 20 ms timers, one
    /// packet per spacing, every error acted on.
    #[must_use]
    pub fn thesis() -> Self {
        Self {
            initial_spacing: Duration::from_micros(2000),
            min_spacing: Duration::from_micros(40),
            max_spacing: Duration::from_secs(1),
            step: HuntStep::Fixed(Duration::from_micros(40)),
            timers: HuntTimers::Fixed {
                increase: Duration::from_millis(20),
                decrease: Duration::from_millis(20),
            },
            burst_packets: 1,
            initial_rtt: Duration::from_millis(1),
            ignore_stale_errors: false,
            increase_only_when_limited: false,
            background_spacing_rtts: None,
        }
    }

    /// rmcast's default: the thesis's state machine with a proportional
    /// step, adaptive timers, GSO-sized bursts and stale errors ignored.
    #[must_use]
    pub fn adaptive() -> Self {
        Self {
            initial_spacing: Duration::from_micros(2000),
            min_spacing: Duration::from_nanos(1),
            max_spacing: Duration::from_secs(1),
            step: HuntStep::Proportional { divisor: 32 },
            timers: HuntTimers::Adaptive(AdaptiveTimers::default()),
            burst_packets: 16,
            initial_rtt: Duration::from_millis(1),
            ignore_stale_errors: true,
            increase_only_when_limited: true,
            background_spacing_rtts: Some(BACKGROUND_SPACING_RTTS),
        }
    }

    /// Starts at `packets_per_s` instead of the default spacing.
    #[must_use]
    pub fn starting_at(mut self, packets_per_s: f64) -> Self {
        if packets_per_s.is_finite() && packets_per_s > 0.0 {
            let ns = (1e9 / packets_per_s).clamp(1.0, u64::MAX as f64 / 2.0) as u64;
            self.initial_spacing = Duration::from_nanos(ns);
        }
        self
    }
}

impl Default for HuntParams {
    fn default() -> Self {
        Self::adaptive()
    }
}

/// Counters of what the controller did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RateStats {
    /// Increase-timer expiries (Table 4.1, Increase/I).
    pub increases: u64,
    /// Errors acted on (Increase/E and Decrease/E).
    pub backoffs: u64,
    /// Errors ignored as stale.
    pub stale_errors: u64,
    /// Errors ignored as background loss (see
    /// [`HuntParams::background_spacing_rtts`]).
    pub background_errors: u64,
    /// Decrease-timer expiries (Decrease/D).
    pub recoveries: u64,
    /// Rate resynchronisations adopted ([`RateController::resync`]).
    pub resyncs: u64,
}

/// rmcast's default [`HuntParams::background_spacing_rtts`]: with two RTTs
/// between packets every receiver is idle half the time (an RTT sample
/// includes the slowest member's time to take a packet in and answer).
pub const BACKGROUND_SPACING_RTTS: u32 = 2;

/// Largest back-off multiplier (2^20 units); the spacing cap binds long before.
const MAX_BACKOFF: u64 = 1 << 20;
/// The fastest spacing the controller represents: 1 ns.
const MIN_SPACING_NS: u64 = 1;

/// Hunt's send-rate controller for one sender (see the module page).
#[derive(Clone, Debug)]
pub struct RateController {
    params: HuntParams,
    state: HuntState,
    spacing_ns: u64,
    /// The multiplier of the last increase of the spacing ("last decrease
    /// multiplier" in Table 4.1): the next error adds twice it.
    backoff: u64,
    increase_at: Option<Instant>,
    decrease_at: Option<Instant>,
    /// GCRA theoretical arrival time of the next packet.
    tat: Instant,
    rtt: Duration,
    /// `rtt` is a measurement, not `HuntParams::initial_rtt`'s guess.
    rtt_measured: bool,
    group: u16,
    last_backoff_at: Option<Instant>,
    /// The allowance held a packet back since the spacing last changed.
    limited: bool,
    /// The spacing when the last run of errors began (the rate that was
    /// too fast), for the proportional step's search.
    error_spacing_ns: Option<u64>,
    /// Senders sharing the group's burst ([`RateController::set_senders`]).
    burst_share: u32,
    stats: RateStats,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl RateController {
    /// A controller in the Increase state at `params.initial_spacing`.
    #[must_use]
    pub fn new(params: HuntParams, now: Instant) -> Self {
        let min = ns(params.min_spacing).max(MIN_SPACING_NS);
        let max = ns(params.max_spacing).max(min);
        let spacing_ns = ns(params.initial_spacing).clamp(min, max);
        let mut c = Self {
            rtt: params.initial_rtt,
            rtt_measured: false,
            params,
            state: HuntState::Increase,
            spacing_ns,
            backoff: 1,
            increase_at: None,
            decrease_at: None,
            tat: now,
            group: 1,
            last_backoff_at: None,
            limited: false,
            error_spacing_ns: None,
            burst_share: 1,
            stats: RateStats::default(),
        };
        c.increase_at = Some(now + c.increase_timer());
        c
    }

    /// The state (Increase or Decrease).
    #[must_use]
    pub fn state(&self) -> HuntState {
        self.state
    }

    /// The current minimum spacing between data packets.
    #[must_use]
    pub fn spacing(&self) -> Duration {
        Duration::from_nanos(self.spacing_ns)
    }

    /// The current rate, packets per second (finite and positive).
    #[must_use]
    pub fn rate_pps(&self) -> f64 {
        1e9 / self.spacing_ns as f64
    }

    /// The back-off multiplier (1 after a quiet decrease period).
    #[must_use]
    pub fn backoff(&self) -> u64 {
        self.backoff
    }

    /// The RTT the adaptive timers use.
    #[must_use]
    pub fn rtt(&self) -> Duration {
        self.rtt
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> &RateStats {
        &self.stats
    }

    /// The parameters.
    #[must_use]
    pub fn params(&self) -> &HuntParams {
        &self.params
    }

    /// Sets the round-trip time to the slowest member.
    pub fn set_rtt(&mut self, rtt: Duration) {
        self.rtt = rtt;
        self.rtt_measured = true;
    }

    /// Feeds one RTT sample from any member: the estimate jumps up to a
    /// larger sample and decays by 1/8 of the difference towards a smaller
    /// one, so it follows the slowest member without per-member state.
    pub fn on_rtt_sample(&mut self, sample: Duration) {
        self.rtt_measured = true;
        if sample >= self.rtt {
            self.rtt = sample;
        } else {
            self.rtt -= (self.rtt - sample) / 8;
        }
    }

    /// Sets the number of members that can report errors (the adaptive
    /// decrease timer grows with its logarithm).
    pub fn set_group_size(&mut self, members: u16) {
        self.group = members.max(1);
    }

    /// The earliest pending timer (increase or decrease).
    #[must_use]
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.state {
            HuntState::Increase => self.increase_at,
            HuntState::Decrease => self.decrease_at,
        }
    }

    /// Length of the increase timer now.
    #[must_use]
    pub fn increase_timer(&self) -> Duration {
        match self.params.timers {
            HuntTimers::Fixed { increase, .. } => increase,
            HuntTimers::Adaptive(a) => self.adaptive(a, a.increase_rtts),
        }
    }

    /// Length of the decrease timer now.
    #[must_use]
    pub fn decrease_timer(&self) -> Duration {
        match self.params.timers {
            HuntTimers::Fixed { decrease, .. } => decrease,
            HuntTimers::Adaptive(a) => {
                let log2_group = 15 - self.group.max(1).leading_zeros();
                self.adaptive(a, a.decrease_rtts.saturating_add(log2_group))
            }
        }
    }

    fn adaptive(&self, a: AdaptiveTimers, rtts: u32) -> Duration {
        let rtt_part = ns(self.rtt).saturating_mul(u64::from(rtts));
        let batch_part = self.spacing_ns.saturating_mul(u64::from(a.batch_packets));
        let t = rtt_part.saturating_add(batch_part);
        Duration::from_nanos(t.clamp(ns(a.min), ns(a.max).max(ns(a.min))))
    }

    fn unit_ns(&self) -> u64 {
        match self.params.step {
            HuntStep::Fixed(d) => ns(d).max(1),
            HuntStep::Proportional { divisor } => {
                (self.spacing_ns / u64::from(divisor.max(1))).max(1)
            }
        }
    }

    /// What Increase/I removes from the spacing (see [`HuntStep`]).
    fn increase_ns(&self) -> u64 {
        let HuntStep::Proportional { divisor } = self.params.step else {
            return self.unit_ns();
        };
        let divisor = u64::from(divisor.max(1));
        let coarse = (self.spacing_ns / divisor).max(1);
        let fine = (self.spacing_ns / (8 * divisor)).max(1);
        // Errors above the background spacing say nothing about overruns:
        // a spacing up there goes back down to it in halving steps.
        match self
            .error_spacing_ns
            .map(|e| e.min(self.background_spacing_ns()))
        {
            None => coarse,
            Some(err) if self.spacing_ns > err.saturating_add(fine) => {
                ((self.spacing_ns - err) / 2).max(fine)
            }
            Some(_) => fine,
        }
    }

    /// The spacing at and above which errors are background loss
    /// ([`HuntParams::background_spacing_rtts`]); never below the minimum
    /// spacing, and none before the RTT was measured.
    fn background_spacing_ns(&self) -> u64 {
        match self.params.background_spacing_rtts {
            None => u64::MAX,
            Some(_) if !self.rtt_measured => u64::MAX,
            Some(rtts) => ns(self.rtt)
                .saturating_mul(u64::from(rtts))
                .saturating_mul(u64::from(self.burst_share))
                .max(self.min_ns()),
        }
    }

    fn min_ns(&self) -> u64 {
        ns(self.params.min_spacing).max(MIN_SPACING_NS)
    }

    fn max_ns(&self) -> u64 {
        ns(self.params.max_spacing).max(self.min_ns())
    }

    /// Handles an expired increase or decrease timer (inputs I and D); a
    /// timer checked late fires once, as in the thesis's implementation.
    pub fn on_timer(&mut self, now: Instant) {
        match self.state {
            HuntState::Increase => {
                if self.increase_at.is_some_and(|t| now >= t) {
                    // Table 4.1, Increase/I: shorten the spacing (it must
                    // stay positive), stay in Increase, set another timer.
                    if self.limited || !self.params.increase_only_when_limited {
                        let unit = self.increase_ns();
                        self.spacing_ns = self.spacing_ns.saturating_sub(unit).max(self.min_ns());
                        self.stats.increases += 1;
                    }
                    self.limited = false;
                    self.increase_at = Some(now + self.increase_timer());
                }
            }
            HuntState::Decrease => {
                if self.decrease_at.is_some_and(|t| now >= t) {
                    // Table 4.1, Decrease/D: a quiet period; the multiplier
                    // goes back to one, the increase timer starts, and the
                    // state is Increase.
                    self.backoff = 1;
                    // The errors were reported a feedback delay late, so the
                    // spacing at the first of them was faster than the
                    // group could take, and the spacing now is slower than
                    // it needed: the search aims half way between.
                    if let Some(err) = self.error_spacing_ns.as_mut() {
                        *err = err.midpoint(self.spacing_ns);
                    }
                    self.state = HuntState::Increase;
                    self.decrease_at = None;
                    self.increase_at = Some(now + self.increase_timer());
                    self.stats.recoveries += 1;
                }
            }
        }
        debug_assert!(self.invariants_hold());
    }

    /// Handles an error (input E); returns whether it backed off (false
    /// for an error judged stale).
    pub fn on_error(&mut self, now: Instant, signal: ErrorSignal) -> bool {
        if self.is_stale(now, signal) {
            self.stats.stale_errors += 1;
            return false;
        }
        if self.spacing_ns >= self.background_spacing_ns() {
            self.stats.background_errors += 1;
            return false;
        }
        if self.state == HuntState::Increase {
            self.error_spacing_ns = Some(self.spacing_ns);
        }
        // Table 4.1, Increase/E and Decrease/E: the spacing grows by twice
        // the last increase, and the decrease timer (re)starts.
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        let unit = self.unit_ns();
        let add = unit.saturating_mul(self.backoff);
        self.spacing_ns = self.spacing_ns.saturating_add(add).min(self.max_ns());
        self.state = HuntState::Decrease;
        self.increase_at = None;
        self.decrease_at = Some(now + self.decrease_timer());
        self.last_backoff_at = Some(now);
        self.stats.backoffs += 1;
        debug_assert!(self.invariants_hold());
        true
    }

    fn is_stale(&self, now: Instant, signal: ErrorSignal) -> bool {
        if !self.params.ignore_stale_errors {
            return false;
        }
        let Some(last) = self.last_backoff_at else {
            return false;
        };
        match signal {
            // The packet went out before the spacing last grew, or so soon
            // after that it met the queue the old spacing had built (a
            // back-off reaches the slowest member's buffer about one RTT
            // later): its loss says nothing about the current spacing.
            ErrorSignal::Exp { sent_at } => sent_at < last + self.rtt,
            // The runtime reports each failed send call; a burst of them
            // is one event per round trip. Likewise the group's NACKs: one
            // overflow at a member shows as gaps in every sender's stream
            // and as NACKs from every member that saw them.
            ErrorSignal::SendFailure | ErrorSignal::Group => now < last + self.rtt,
            // A timeout is rare and always news.
            ErrorSignal::Last => false,
        }
    }

    /// Adopts `spacing` as the new initial rate (the group leader's rate
    /// resynchronisation, thesis section 4.6.5): the Increase state, a
    /// multiplier of one and a fresh increase timer. A search that had
    /// found an error spacing goes on from the new spacing with fine
    /// probes; one still climbing from its start keeps climbing.
    pub fn resync(&mut self, now: Instant, spacing: Duration) {
        let spacing_ns = ns(spacing).clamp(self.min_ns(), self.max_ns());
        self.spacing_ns = spacing_ns;
        self.state = HuntState::Increase;
        self.backoff = 1;
        self.decrease_at = None;
        self.limited = false;
        if let Some(err) = self.error_spacing_ns.as_mut() {
            *err = spacing_ns;
        }
        // The new rate starts now, with neither debt nor credit: a credit
        // would let every sender of the group burst at once.
        let credit = spacing_ns.saturating_mul(u64::from(self.burst() - 1));
        self.tat = now + Duration::from_nanos(credit);
        self.increase_at = Some(now + self.increase_timer());
        self.stats.resyncs += 1;
        debug_assert!(self.invariants_hold());
    }

    fn invariants_hold(&self) -> bool {
        let spacing_ok = (self.min_ns()..=self.max_ns()).contains(&self.spacing_ns);
        let timers_ok = match self.state {
            HuntState::Increase => self.decrease_at.is_none() && self.increase_at.is_some(),
            HuntState::Decrease => self.increase_at.is_none() && self.decrease_at.is_some(),
        };
        spacing_ok && timers_ok && self.backoff >= 1
    }

    /// When the allowance next permits a packet.
    #[must_use]
    pub fn ready_at(&self) -> Instant {
        let slack = self.spacing_ns.saturating_mul(u64::from(self.burst() - 1));
        Instant::from_nanos(self.tat.as_nanos().saturating_sub(slack))
    }

    /// Packets the allowance lets go back to back: `burst_packets` shared
    /// among the group's senders (at least one each).
    #[must_use]
    pub fn burst(&self) -> u32 {
        (self.params.burst_packets.max(1) / self.burst_share).max(1)
    }

    /// Sets how many senders share the group (and so its slowest member's
    /// socket buffer): the burst allowance is divided among them, so that
    /// the senders' bursts together stay `burst_packets` long when they
    /// all resume at once (after a common back-off or a resynchronisation).
    pub fn set_senders(&mut self, senders: u16) {
        self.burst_share = u32::from(senders.max(1));
    }

    /// Whether a packet may go now; if so its allowance is taken. Up to
    /// [`RateController::burst`] go back to back after a pause, one per spacing on
    /// average.
    pub fn try_take(&mut self, now: Instant) -> bool {
        if now < self.ready_at() {
            self.limited = true;
            return false;
        }
        self.tat = self.tat.max(now) + Duration::from_nanos(self.spacing_ns);
        true
    }
}

#[cfg(test)]
mod tests;
