//! Several senders on one group: who the senders are, and Hunt's rate
//! resynchronisation among them (thesis section 4.6.5).
//!
//! Every sender of a group runs its own session, sequence space and
//! [`crate::RateController`]. What they share is the slowest member's
//! capacity, so the controllers must agree: a multicast `RateNak` backs
//! every sender off at once (the [`crate::Sender`] feeds it to its
//! controller as [`crate::ErrorSignal::Group`]), and this machine keeps
//! their rates from drifting apart.
//!
//! * **Membership.** Each sender multicasts a `RateReport` (its spacing,
//!   its data packets since the last resynchronisation, its phase) every
//!   `report_interval`; a sender not heard for `peer_timeout` is gone, and
//!   one whose report says `Leaving` is done sending.
//! * **Leader.** The first member in the agreed order: the lowest session
//!   id among the senders not leaving.
//! * **Resynchronisation.** On a membership change, and when its
//!   `resync_interval` timer expires, the leader multicasts a `RateSync`
//!   request; every sender answers with a `RateReport` of that epoch. When
//!   all have answered (or after `gather`) the leader averages the rates of
//!   the senders that sent data since the last resynchronisation and
//!   multicasts the average as a `RateSync` set; every sender, the leader
//!   included, adopts it as its new initial rate
//!   ([`crate::RateController::resync`]).
//!
//! One change to the thesis's average: a sender that leaves gives its rate
//! to the others. The leader adds the rates of every member that sent
//! since the last round, leavers included, and divides by the number of
//! members that sent and stay; with a stable membership this is exactly
//! the average, and when one of S senders finishes the others take over
//! its share at once instead of climbing to it.
//!
//! Like every machine in this crate it is sans-IO: the owning sender feeds
//! it datagrams and time and asks it what to multicast and when to wake up.

use crate::Instant;
use rmcast_wire::{
    Body, RateNak, RateNakKind, RatePhase, RateReport, RateSync, RateSyncOp, Seq, SessionId,
};
use std::time::Duration;

/// Largest number of other senders a member tracks; reports from further
/// sessions are ignored (counted in [`RateGroupStats::peers_refused`]).
pub const MAX_PEERS: usize = 256;

/// How the senders of a group coordinate their rates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateGroupConfig {
    /// Period of each sender's `RateReport` (its heartbeat).
    pub report_interval: Duration,
    /// A sender not heard this long has left the group.
    pub peer_timeout: Duration,
    /// Period of the leader's resynchronisation when membership is stable.
    pub resync_interval: Duration,
    /// How long the leader waits for the answers to a request.
    pub gather: Duration,
}

impl Default for RateGroupConfig {
    fn default() -> Self {
        Self {
            report_interval: Duration::from_millis(100),
            peer_timeout: Duration::from_millis(1000),
            resync_interval: Duration::from_millis(500),
            gather: Duration::from_millis(10),
        }
    }
}

/// Counters of the group machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RateGroupStats {
    /// Rounds this member started as leader.
    pub rounds: u64,
    /// Rates this member multicast as leader.
    pub sets_sent: u64,
    /// Rates adopted (own and others' sets).
    pub adopted: u64,
    /// Membership changes seen (joins, leaves, timeouts).
    pub membership_changes: u64,
    /// Reports from senders beyond [`MAX_PEERS`], ignored.
    pub peers_refused: u64,
}

/// What the owning sender knows about itself, passed on each call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnRate {
    /// Its controller's spacing, nanoseconds.
    pub spacing_ns: u64,
    /// Data packets it has multicast so far (first and repeated).
    pub transmissions: u64,
}

#[derive(Clone, Copy, Debug)]
struct Peer {
    session: SessionId,
    last_heard: Instant,
    phase: RatePhase,
    spacing_ns: u64,
    messages: u64,
    /// Epoch of its latest report.
    answered: u32,
}

/// One sender's view of the group's senders and its part in the
/// resynchronisation (see the module page).
#[derive(Clone, Debug)]
pub struct RateGroup {
    config: RateGroupConfig,
    session: SessionId,
    phase: RatePhase,
    peers: Vec<Peer>,
    /// Highest epoch seen or started.
    epoch: u32,
    /// Epoch of the last set adopted.
    applied: u32,
    /// The leader's round in progress: its epoch and when it closes.
    round: Option<(u32, Instant)>,
    /// Membership changed since the last round began.
    changed: bool,
    resync_at: Instant,
    report_at: Instant,
    /// Transmissions when the last set was adopted.
    messages_base: u64,
    owe_report: Option<u32>,
    owe_request: Option<u32>,
    owe_set: Option<(u32, u64, u16)>,
    owe_last: Option<Seq>,
    stats: RateGroupStats,
}

impl RateGroup {
    /// A member for sender `session`, announcing itself at `now`.
    #[must_use]
    pub fn new(config: RateGroupConfig, session: SessionId, now: Instant) -> Self {
        Self {
            resync_at: now + config.resync_interval,
            config,
            session,
            phase: RatePhase::Idle,
            peers: Vec::new(),
            epoch: 0,
            applied: 0,
            round: None,
            changed: false,
            report_at: now,
            messages_base: 0,
            owe_report: None,
            owe_request: None,
            owe_set: None,
            owe_last: None,
            stats: RateGroupStats::default(),
        }
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> &RateGroupStats {
        &self.stats
    }

    /// The other senders heard and not yet gone (leavers included until a
    /// round has counted their share).
    #[must_use]
    pub fn peers(&self) -> usize {
        self.peers.len()
    }

    /// The senders of the group not leaving, this one included (while it
    /// is not leaving itself).
    #[must_use]
    pub fn senders(&self) -> u16 {
        let others = self
            .peers
            .iter()
            .filter(|p| p.phase != RatePhase::Leaving)
            .count();
        let me = usize::from(self.phase != RatePhase::Leaving);
        u16::try_from(others + me).unwrap_or(u16::MAX).max(1)
    }

    /// Whether this member leads the resynchronisation: it is not leaving
    /// and its session id is the lowest among the senders not leaving.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        self.phase != RatePhase::Leaving
            && self
                .peers
                .iter()
                .filter(|p| p.phase != RatePhase::Leaving)
                .all(|p| p.session.0 > self.session.0)
    }

    /// The epoch of the last rate adopted (0: none yet).
    #[must_use]
    pub fn applied_epoch(&self) -> u32 {
        self.applied
    }

    /// The owning sender's phase changed; `Leaving` multicasts a farewell
    /// report and ends this member's part.
    pub fn set_phase(&mut self, phase: RatePhase) {
        if self.phase == phase || self.phase == RatePhase::Leaving {
            return;
        }
        self.phase = phase;
        self.owe_report = Some(self.applied);
        if phase == RatePhase::Leaving {
            self.round = None;
            self.owe_request = None;
            self.owe_set = None;
        }
    }

    /// The sender's acknowledgement timer expired with `seq` outstanding:
    /// multicast a LAST `RateNak` so every sender backs off.
    pub fn note_timeout(&mut self, seq: Seq) {
        if self.phase != RatePhase::Leaving {
            self.owe_last = Some(seq);
        }
    }

    /// Handles a group packet from another sender's session. Returns a
    /// spacing the sender must adopt ([`crate::RateController::resync`]).
    pub fn handle(
        &mut self,
        now: Instant,
        from: SessionId,
        body: &Body<'_>,
        own: OwnRate,
    ) -> Option<Duration> {
        if from == self.session || self.phase == RatePhase::Leaving {
            return None;
        }
        match *body {
            Body::RateReport(r) => {
                self.on_report(now, from, r);
                self.step(now, own)
            }
            Body::RateSync(s) => {
                self.epoch = self.epoch.max(s.epoch);
                if let Some(p) = self.peers.iter_mut().find(|p| p.session == from) {
                    p.last_heard = now;
                }
                match s.op {
                    RateSyncOp::Request => {
                        self.owe_report = Some(s.epoch);
                        None
                    }
                    RateSyncOp::Set { spacing_ns, .. } => {
                        if s.epoch <= self.applied {
                            return None;
                        }
                        // Another leader's newer round supersedes ours.
                        if self.round.is_some_and(|(e, _)| e <= s.epoch) {
                            self.round = None;
                            self.owe_request = None;
                        }
                        Some(self.adopt(s.epoch, spacing_ns, own))
                    }
                }
            }
            _ => None,
        }
    }

    fn on_report(&mut self, now: Instant, from: SessionId, r: RateReport) {
        self.epoch = self.epoch.max(r.epoch);
        if let Some(p) = self.peers.iter_mut().find(|p| p.session == from) {
            if p.phase != r.phase && r.phase == RatePhase::Leaving {
                self.changed = true;
                self.stats.membership_changes += 1;
            }
            *p = Peer {
                session: from,
                last_heard: now,
                phase: r.phase,
                spacing_ns: r.spacing_ns,
                messages: r.messages,
                answered: r.epoch,
            };
            return;
        }
        if r.phase == RatePhase::Leaving {
            // A farewell from a sender we never knew: nothing to share.
            return;
        }
        if self.peers.len() >= MAX_PEERS {
            self.stats.peers_refused += 1;
            return;
        }
        self.peers.push(Peer {
            session: from,
            last_heard: now,
            phase: r.phase,
            spacing_ns: r.spacing_ns,
            messages: r.messages,
            answered: r.epoch,
        });
        self.changed = true;
        self.stats.membership_changes += 1;
    }

    fn adopt(&mut self, epoch: u32, spacing_ns: u64, own: OwnRate) -> Duration {
        self.applied = epoch;
        self.epoch = self.epoch.max(epoch);
        self.messages_base = own.transmissions;
        self.stats.adopted += 1;
        Duration::from_nanos(spacing_ns.max(1))
    }

    /// Expires silent peers, closes the leader's round when every sender
    /// answered or its time is up, and starts a round on a membership
    /// change or when the resynchronisation timer expires. Returns a
    /// spacing to adopt when a round closed with a new rate.
    pub fn step(&mut self, now: Instant, own: OwnRate) -> Option<Duration> {
        if self.phase == RatePhase::Leaving {
            return None;
        }
        if now >= self.report_at {
            self.owe_report.get_or_insert(self.applied);
            self.report_at = now + self.config.report_interval;
        }
        let timeout = self.config.peer_timeout;
        let before = self.peers.len();
        self.peers.retain(|p| now < p.last_heard + timeout);
        if self.peers.len() != before {
            self.changed = true;
            self.stats.membership_changes += (before - self.peers.len()) as u64;
        }
        if let Some((epoch, until)) = self.round {
            let all = self
                .peers
                .iter()
                .filter(|p| p.phase != RatePhase::Leaving)
                .all(|p| p.answered == epoch);
            if !all && now < until {
                return None;
            }
            self.round = None;
            return self.close_round(epoch, own);
        }
        if !self.is_leader() || self.peers.is_empty() {
            self.changed = false;
            if !self.is_leader() {
                self.resync_at = now + self.config.resync_interval;
            }
            return None;
        }
        if self.changed || now >= self.resync_at {
            self.changed = false;
            self.epoch = self.epoch.wrapping_add(1).max(1);
            self.round = Some((self.epoch, now + self.config.gather));
            self.owe_request = Some(self.epoch);
            self.resync_at = now + self.config.resync_interval;
            self.stats.rounds += 1;
        }
        None
    }

    /// The leader's average: the rates (packets per second) of the members
    /// that sent since the last round, over the members that sent and stay.
    fn close_round(&mut self, epoch: u32, own: OwnRate) -> Option<Duration> {
        const NS2: u128 = 1_000_000_000_000_000_000; // rate × spacing, in ns²
        let mut sum: u128 = 0;
        let mut staying: u32 = 0;
        let own_messages = own.transmissions.saturating_sub(self.messages_base);
        if own_messages > 0 {
            sum += NS2 / u128::from(own.spacing_ns.max(1));
            staying += 1;
        }
        for p in &self.peers {
            if p.messages > 0 {
                sum += NS2 / u128::from(p.spacing_ns.max(1));
                if p.phase != RatePhase::Leaving {
                    staying += 1;
                }
            }
        }
        // Leavers have given their share.
        self.peers.retain(|p| p.phase != RatePhase::Leaving);
        if staying == 0 || sum == 0 {
            return None;
        }
        let spacing_ns = (NS2 * u128::from(staying) / sum).clamp(1, u128::from(u64::MAX)) as u64;
        let members = u16::try_from(staying).unwrap_or(u16::MAX);
        self.owe_set = Some((epoch, spacing_ns, members));
        self.stats.sets_sent += 1;
        Some(self.adopt(epoch, spacing_ns, own))
    }

    /// The next group packet to multicast, if one is owed (the header is
    /// the sender's, with its session and `RANK_SENDER`).
    pub fn poll_transmit(&mut self, own: OwnRate) -> Option<Body<'static>> {
        if let Some(seq) = self.owe_last.take() {
            return Some(Body::RateNak(RateNak {
                kind: RateNakKind::Last,
                seq,
            }));
        }
        if let Some((epoch, spacing_ns, members)) = self.owe_set.take() {
            return Some(Body::RateSync(RateSync {
                epoch,
                op: RateSyncOp::Set {
                    spacing_ns,
                    members,
                },
            }));
        }
        if let Some(epoch) = self.owe_request.take() {
            return Some(Body::RateSync(RateSync {
                epoch,
                op: RateSyncOp::Request,
            }));
        }
        if let Some(epoch) = self.owe_report.take() {
            return Some(Body::RateReport(RateReport {
                epoch,
                phase: self.phase,
                spacing_ns: own.spacing_ns.max(1),
                messages: own.transmissions.saturating_sub(self.messages_base),
            }));
        }
        None
    }

    /// When [`RateGroup::step`] must run next (`None` once leaving).
    #[must_use]
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.phase == RatePhase::Leaving {
            return None;
        }
        let mut t = self.report_at;
        if let Some((_, until)) = self.round {
            t = t.min(until);
        } else if self.is_leader() && !self.peers.is_empty() {
            t = t.min(self.resync_at);
        }
        for p in &self.peers {
            t = t.min(p.last_heard + self.config.peer_timeout);
        }
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * MS)
    }

    fn own(spacing_us: u64, transmissions: u64) -> OwnRate {
        OwnRate {
            spacing_ns: spacing_us * 1000,
            transmissions,
        }
    }

    fn report(epoch: u32, phase: RatePhase, spacing_us: u64, messages: u64) -> Body<'static> {
        Body::RateReport(RateReport {
            epoch,
            phase,
            spacing_ns: spacing_us * 1000,
            messages,
        })
    }

    fn drain(g: &mut RateGroup, o: OwnRate) -> Vec<Body<'static>> {
        std::iter::from_fn(|| g.poll_transmit(o)).collect()
    }

    #[test]
    fn announces_itself_at_once_and_then_every_report_interval() {
        let mut g = RateGroup::new(RateGroupConfig::default(), SessionId(5), at(0));
        assert_eq!(g.next_deadline(), Some(at(0)));
        assert_eq!(g.step(at(0), own(100, 0)), None);
        let out = drain(&mut g, own(100, 0));
        assert_eq!(out, vec![report(0, RatePhase::Idle, 100, 0)]);
        assert_eq!(g.next_deadline(), Some(at(100)));
        g.step(at(100), own(90, 7));
        assert_eq!(
            drain(&mut g, own(90, 7)),
            vec![report(0, RatePhase::Idle, 90, 7)]
        );
    }

    #[test]
    fn lowest_session_leads_and_a_leaver_hands_over() {
        let mut g = RateGroup::new(RateGroupConfig::default(), SessionId(5), at(0));
        assert!(g.is_leader());
        g.handle(
            at(1),
            SessionId(3),
            &report(0, RatePhase::Sending, 100, 1),
            own(100, 0),
        );
        assert!(!g.is_leader());
        g.handle(
            at(2),
            SessionId(9),
            &report(0, RatePhase::Sending, 100, 1),
            own(100, 0),
        );
        assert!(!g.is_leader());
        g.handle(
            at(3),
            SessionId(3),
            &report(0, RatePhase::Leaving, 100, 1),
            own(100, 0),
        );
        assert!(g.is_leader());
    }

    #[test]
    fn leader_requests_on_a_membership_change_and_sets_the_average() {
        let mut g = RateGroup::new(RateGroupConfig::default(), SessionId(1), at(0));
        g.step(at(0), own(100, 0));
        drain(&mut g, own(100, 0));
        // A second sender appears: a round starts at once.
        let o = own(100, 1000);
        assert_eq!(
            g.handle(
                at(1),
                SessionId(2),
                &report(0, RatePhase::Sending, 200, 500),
                o
            ),
            None
        );
        let out = drain(&mut g, o);
        assert_eq!(
            out,
            vec![Body::RateSync(RateSync {
                epoch: 1,
                op: RateSyncOp::Request
            })]
        );
        // Its answer closes the round: rates 10,000 and 5,000 packets/s
        // average to 7,500 (a spacing of 133.333 µs).
        let adopted = g.handle(
            at(2),
            SessionId(2),
            &report(1, RatePhase::Sending, 200, 600),
            o,
        );
        assert_eq!(adopted, Some(Duration::from_nanos(133_333)));
        assert_eq!(g.applied_epoch(), 1);
        assert_eq!(
            drain(&mut g, o),
            vec![Body::RateSync(RateSync {
                epoch: 1,
                op: RateSyncOp::Set {
                    spacing_ns: 133_333,
                    members: 2
                }
            })]
        );
        assert_eq!(g.stats().rounds, 1);
        assert_eq!(g.stats().sets_sent, 1);
    }

    #[test]
    fn round_closes_after_gather_without_every_answer() {
        let cfg = RateGroupConfig::default();
        let mut g = RateGroup::new(cfg.clone(), SessionId(1), at(0));
        let o = own(100, 10);
        g.handle(
            at(0),
            SessionId(2),
            &report(0, RatePhase::Sending, 100, 5),
            o,
        );
        g.handle(
            at(0),
            SessionId(3),
            &report(0, RatePhase::Sending, 400, 5),
            o,
        );
        drain(&mut g, o);
        // Only session 2 answers; at the gather deadline the leader uses
        // the latest report of 3 (its heartbeat).
        assert_eq!(
            g.handle(
                at(1),
                SessionId(2),
                &report(1, RatePhase::Sending, 100, 9),
                o
            ),
            None
        );
        let close = at(0) + cfg.gather;
        assert_eq!(g.next_deadline(), Some(close));
        // 10,000 + 10,000 + 2,500 packets/s over three: 7,500.
        assert_eq!(g.step(close, o), Some(Duration::from_nanos(133_333)));
    }

    #[test]
    fn senders_without_data_since_the_last_round_are_not_averaged() {
        let mut g = RateGroup::new(RateGroupConfig::default(), SessionId(1), at(0));
        let o = own(100, 10);
        g.handle(at(0), SessionId(2), &report(0, RatePhase::Idle, 2000, 0), o);
        drain(&mut g, o);
        // Nobody but the leader sent: the average is its own rate.
        let r = g.handle(at(1), SessionId(2), &report(1, RatePhase::Idle, 2000, 0), o);
        assert_eq!(r, Some(Duration::from_micros(100)));
        // Nobody sent at all: no set.
        let mut h = RateGroup::new(RateGroupConfig::default(), SessionId(1), at(0));
        h.handle(
            at(0),
            SessionId(2),
            &report(0, RatePhase::Idle, 2000, 0),
            own(100, 0),
        );
        drain(&mut h, own(100, 0));
        let r = h.handle(
            at(1),
            SessionId(2),
            &report(1, RatePhase::Idle, 2000, 0),
            own(100, 0),
        );
        assert_eq!(r, None);
        assert!(drain(&mut h, own(100, 0)).is_empty());
    }

    #[test]
    fn a_leavers_share_goes_to_the_senders_that_stay() {
        let mut g = RateGroup::new(RateGroupConfig::default(), SessionId(1), at(0));
        let o = own(200, 100);
        g.handle(
            at(0),
            SessionId(2),
            &report(0, RatePhase::Sending, 200, 50),
            o,
        );
        drain(&mut g, o);
        g.handle(
            at(1),
            SessionId(2),
            &report(1, RatePhase::Sending, 200, 50),
            o,
        );
        drain(&mut g, o);
        let o = own(200, 300);
        // Session 2 finishes: its 5,000 packets/s go to the leader.
        let r = g.handle(
            at(2),
            SessionId(2),
            &report(1, RatePhase::Leaving, 200, 90),
            o,
        );
        assert_eq!(r, None, "the round waits for nobody else but starts now");
        let out = drain(&mut g, o);
        assert!(matches!(
            out[..],
            [Body::RateSync(RateSync {
                op: RateSyncOp::Request,
                epoch: 2
            })]
        ));
        assert_eq!(g.step(at(2), o), Some(Duration::from_micros(100)));
        assert_eq!(g.peers(), 0);
    }

    #[test]
    fn members_answer_requests_and_adopt_newer_sets_only() {
        let mut g = RateGroup::new(RateGroupConfig::default(), SessionId(7), at(0));
        let o = own(300, 40);
        g.handle(
            at(0),
            SessionId(2),
            &report(0, RatePhase::Sending, 100, 5),
            o,
        );
        let req = Body::RateSync(RateSync {
            epoch: 4,
            op: RateSyncOp::Request,
        });
        assert_eq!(g.handle(at(1), SessionId(2), &req, o), None);
        let out = drain(&mut g, o);
        assert!(
            out.contains(&report(4, RatePhase::Idle, 300, 40)),
            "{out:?}"
        );
        let set = |epoch, spacing_ns| {
            Body::RateSync(RateSync {
                epoch,
                op: RateSyncOp::Set {
                    spacing_ns,
                    members: 2,
                },
            })
        };
        assert_eq!(
            g.handle(at(2), SessionId(2), &set(4, 150_000), o),
            Some(Duration::from_micros(150))
        );
        // Old or repeated sets are ignored.
        assert_eq!(g.handle(at(3), SessionId(2), &set(4, 1), o), None);
        assert_eq!(g.handle(at(3), SessionId(2), &set(3, 1), o), None);
        // Messages count from the adoption on.
        g.set_phase(RatePhase::Sending);
        assert_eq!(
            drain(&mut g, own(150, 45)),
            vec![report(4, RatePhase::Sending, 150, 5)]
        );
    }

    #[test]
    fn silent_peers_expire_and_trigger_a_round() {
        let cfg = RateGroupConfig::default();
        let mut g = RateGroup::new(cfg.clone(), SessionId(9), at(0));
        let o = own(100, 1);
        g.handle(
            at(0),
            SessionId(2),
            &report(0, RatePhase::Sending, 100, 5),
            o,
        );
        g.handle(
            at(0),
            SessionId(20),
            &report(0, RatePhase::Sending, 100, 5),
            o,
        );
        assert!(!g.is_leader());
        let gone = at(0) + cfg.peer_timeout;
        assert!(g.next_deadline().unwrap() <= gone);
        g.step(gone, o);
        assert_eq!(g.peers(), 0);
        assert!(g.stats().membership_changes >= 4);
    }

    #[test]
    fn a_timeout_multicasts_last_and_leaving_ends_the_part() {
        let mut g = RateGroup::new(RateGroupConfig::default(), SessionId(9), at(0));
        g.step(at(0), own(100, 0));
        drain(&mut g, own(100, 0));
        g.note_timeout(Seq(77));
        assert_eq!(
            drain(&mut g, own(100, 0)),
            vec![Body::RateNak(RateNak {
                kind: RateNakKind::Last,
                seq: Seq(77)
            })]
        );
        g.set_phase(RatePhase::Leaving);
        assert_eq!(
            drain(&mut g, own(100, 3)),
            vec![report(0, RatePhase::Leaving, 100, 3)]
        );
        assert_eq!(g.next_deadline(), None);
        g.note_timeout(Seq(78));
        assert!(
            g.handle(
                at(1),
                SessionId(1),
                &report(0, RatePhase::Sending, 1, 1),
                own(100, 3)
            )
            .is_none()
        );
        assert!(drain(&mut g, own(100, 3)).is_empty());
    }

    #[test]
    fn the_resync_timer_repeats_rounds_with_a_stable_membership() {
        let cfg = RateGroupConfig::default();
        let mut g = RateGroup::new(cfg.clone(), SessionId(1), at(0));
        let o = own(100, 10);
        g.handle(
            at(0),
            SessionId(2),
            &report(0, RatePhase::Sending, 100, 5),
            o,
        );
        g.handle(
            at(1),
            SessionId(2),
            &report(1, RatePhase::Sending, 100, 5),
            o,
        );
        drain(&mut g, o);
        assert_eq!(g.stats().rounds, 1);
        let next = at(0) + cfg.resync_interval;
        assert!(g.next_deadline().unwrap() <= next);
        // Keep the peer alive with heartbeats until then.
        g.handle(
            at(499),
            SessionId(2),
            &report(1, RatePhase::Sending, 100, 5),
            o,
        );
        g.step(next, o);
        assert_eq!(g.stats().rounds, 2);
    }
}
