//! The data phase's sliding window: which packets are in flight
//! (`base..high`, `next` rewound by Go-back-N), when each slot last went
//! out and who reported it missing, the selective repairs queued, the
//! stall poll after a timeout, and the retransmission timeout itself.

use super::pacing::Mode;
use super::{Phase, Repair, Sender, membership};
use crate::transfer::receiver::SPREAD_FROM;
use crate::{Dest, ErrorSignal, Instant, PayloadSource, Transmit, WIRE_OVERHEAD_BYTES};
use rmcast_wire::{
    DATA_HEADER_LEN, ECHO_COPY_MAX, Feedback, Header, Kind, POLL_ALL, POLL_DIRECT, POLL_NONE,
    encode_data_header,
};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

/// Doublings of the Go-back-N rewind suppression (5 ms × 2⁸ = 1.28 s, past
/// any `rto_max` that caps it).
const REWIND_BACKOFF_MAX: u32 = 8;

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Lack {
    pub(super) count: u16,
    pub(super) rank: u16,
    /// The packet was sent more than once, so packets with higher indexes
    /// may have been sent before it.
    pub(super) resent: bool,
    /// Number of the packet's latest transmission (a counter over all data
    /// transmissions): orders sends exactly, whatever the clock resolution.
    pub(super) sent_no: u64,
    /// Number of its first transmission.
    pub(super) first_sent_no: u64,
    /// Transmissions so far; the next one goes out as `Data::copy` = this.
    pub(super) copies: u16,
}

/// What the next data packet is and why it goes.
struct NextData {
    index: u32,
    dest: Dest,
    poll: u16,
    why: Why,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    /// Retransmission of the base after a timeout, polling everyone directly.
    StallPoll,
    /// Retransmission of the base to one member holding it or silent
    /// since the last poll, polling it directly.
    Repoll,
    /// Selective repair of a packet receivers reported missing.
    Repair,
    /// The window's next packet (new, or Go-back-N resend).
    Window,
}

/// The window's state: indexes count packets from the object's start.
#[derive(Debug)]
pub(super) struct Window {
    /// Oldest packet some live receiver lacks.
    pub(super) base: u32,
    /// Next packet to transmit (rewound by Go-back-N).
    pub(super) next: u32,
    /// One past the highest packet ever transmitted.
    pub(super) high: u32,
    /// Last transmission time of packets `base..base+window`, by `index % window`.
    pub(super) sent_at: Vec<Instant>,
    /// First retransmission timeout of the current stall (base not moving):
    /// silence is judged from here, once everyone has been polled again.
    pub(super) stall_since: Option<Instant>,
    /// A NAK that arrived inside the suppression interval: rewind to this
    /// packet once the interval is over (one repair, however many NAKs).
    pub(super) deferred_rewind: Option<u32>,
    /// Go-back-N rewinds since the base last moved: each doubles the
    /// suppression interval of the next (see [`Sender::rewind_suppress`]).
    pub(super) rewinds_in_vain: u32,
    /// Selective repeat: per window slot, how many receivers reported the
    /// packet missing since its last transmission, and one of them.
    pub(super) lack: Vec<Lack>,
    /// Selective repeat: packets with `lack.count > 0`, in report order.
    pub(super) repairs: VecDeque<u32>,
    /// A retransmission of the window's base that polls everyone directly
    /// (after a timeout).
    pub(super) stall_poll: Option<u32>,
    /// Last data transmission (parity aside), advance of the base or
    /// timeout: the re-poll's quiet runs from it
    /// ([`Sender::repoll_deadline`]). Parity goes in answer to feedback,
    /// which the quiet already counts from; counted again as it went,
    /// parity sent once the answers had stopped held a re-poll of the
    /// members still silent back by up to a quiet.
    pub(super) last_data_activity: Instant,
    /// Last parity packet sent.
    pub(super) last_parity: Instant,
    /// When the latest data packet polling everyone went out (a poll
    /// round's start), how many times that round's missing answers were
    /// asked for again (at most `REPOLLS`), and when last.
    pub(super) poll_at: Option<Instant>,
    /// The index of the packet that polled at `poll_at`.
    pub(super) poll_index: u32,
    pub(super) repolled: u8,
    pub(super) repolled_at: Option<Instant>,
    /// When the first feedback after `poll_at` came.
    pub(super) first_answer_at: Option<Instant>,
    /// Members to re-poll by unicast, by rank.
    pub(super) repolls: VecDeque<u16>,
    /// When the last feedback arrived (from anyone).
    pub(super) last_feedback: Instant,
    /// Data transmissions so far (numbers `Lack::sent_no`).
    pub(super) transmissions: u64,
}

impl Window {
    /// Last transmission, parity included, or advance of the base: the
    /// RTO counts from it.
    pub(super) fn last_activity(&self) -> Instant {
        self.last_data_activity.max(self.last_parity)
    }

    /// A member answered (feedback, or a `Complete` while sending): the
    /// re-polls count their quiet from it, and the first after a poll
    /// times the round.
    pub(super) fn answer_heard(&mut self, now: Instant) {
        self.last_feedback = now;
        if self.poll_at.is_some() {
            self.first_answer_at.get_or_insert(now);
        }
    }

    /// An empty window of `size` packets.
    pub(super) fn new(size: u32, now: Instant) -> Self {
        Self {
            base: 0,
            next: 0,
            high: 0,
            sent_at: vec![Instant::ZERO; size as usize],
            stall_since: None,
            deferred_rewind: None,
            rewinds_in_vain: 0,
            lack: vec![Lack::default(); size as usize],
            repairs: VecDeque::with_capacity(size as usize),
            stall_poll: None,
            last_data_activity: now,
            last_parity: now,
            poll_at: None,
            poll_index: 0,
            repolled: 0,
            repolled_at: None,
            first_answer_at: None,
            repolls: VecDeque::new(),
            last_feedback: now,
            transmissions: 0,
        }
    }

    /// The slot of packet `index` in the per-slot rings.
    pub(super) fn slot(&self, index: u32) -> usize {
        (index % self.sent_at.len() as u32) as usize
    }
}

impl Sender {
    /// The next data packet, if the window, a repair or the stall poll has
    /// one and the pacing lets it go now.
    pub(super) fn poll_data(
        &mut self,
        now: Instant,
        header: Header,
        source: &(impl PayloadSource + ?Sized),
        buf: &mut [u8],
    ) -> Option<Transmit> {
        self.pacing.blocked = false;
        if self.phase == Phase::Sending
            && self.window.stall_poll.is_none()
            && let Some(p) = self.fec_next(now)
        {
            let len = self.fec.as_ref()?.datagram_len();
            if !self.pace(now, len) {
                return None;
            }
            self.fec_write(now, header, p, source, &mut buf[..len])?;
            self.window.last_parity = now;
            return Some(Transmit {
                dest: Dest::Group,
                len,
                kind: Kind::Parity,
            });
        }
        if self.phase == Phase::Sending
            && let Some(next) = self.next_data(now)
        {
            let index = next.index;
            let len = self.datagram_len(index);
            if !self.pace(now, len) {
                return None;
            }
            let w = self.window.slot(index);
            // Which copy of the packet this is (the slot still describes the
            // packet a window earlier when this one goes out first).
            let copy = if index < self.window.high {
                self.window.lack[w].copies
            } else {
                0
            };
            self.write_data(header, index, next.poll, copy, source, &mut buf[..len])?;
            match next.why {
                Why::StallPoll => {
                    self.window.stall_poll = None;
                    self.stats.retransmitted_packets += 1;
                    self.window.lack[w].resent = true;
                }
                Why::Repoll => {
                    self.window.repolls.pop_front();
                    self.stats.repolls += 1;
                    self.stats.retransmitted_packets += 1;
                    self.window.lack[w].resent = true;
                }
                Why::Repair => {
                    self.window.repairs.pop_front();
                    self.window.lack[w] = Lack {
                        resent: true,
                        first_sent_no: self.window.lack[w].first_sent_no,
                        copies: self.window.lack[w].copies,
                        ..Lack::default()
                    };
                    self.stats.retransmitted_packets += 1;
                    if matches!(next.dest, Dest::Unicast(_)) {
                        self.stats.unicast_repairs += 1;
                    } else {
                        self.stats.multicast_repairs += 1;
                    }
                }
                Why::Window => {
                    if index < self.window.high {
                        self.stats.retransmitted_packets += 1;
                        self.window.lack[w].resent = true;
                    } else {
                        self.stats.data_packets += 1;
                        self.window.high = index + 1;
                        self.window.lack[w] = Lack::default();
                        self.fec_on_first_send(index, next.poll);
                    }
                    self.window.next += 1;
                }
            }
            self.window.sent_at[w] = now;
            self.window.transmissions += 1;
            let lack = &mut self.window.lack[w];
            lack.sent_no = self.window.transmissions;
            if lack.copies == 0 {
                lack.first_sent_no = self.window.transmissions;
            }
            lack.copies = lack.copies.saturating_add(1);
            if next.why != Why::Repoll {
                // A re-poll does not restart the RTO: a member that stays
                // silent (crashed) is the timeout's to find.
                self.window.last_data_activity = now;
            }
            if next.dest == Dest::Group && matches!(next.poll, POLL_ALL | POLL_DIRECT) {
                // A new poll round: its answers are what the base waits on.
                self.window.poll_at = Some(now);
                self.window.poll_index = index;
                self.window.repolled = 0;
                self.window.repolled_at = None;
                self.window.first_answer_at = None;
            }
            return Some(Transmit {
                dest: next.dest,
                len,
                kind: Kind::Data,
            });
        }
        if self.close_with_data_due() {
            return self.close_with_data(now, header, buf);
        }
        None
    }

    /// Whether the pacing lets a datagram of `len` bytes go now (taking
    /// its allowance if so).
    fn pace(&mut self, now: Instant, len: usize) -> bool {
        let allowed = match &mut self.pacing.mode {
            Mode::Off => true,
            Mode::Fixed(p) => p.try_take(now, len + WIRE_OVERHEAD_BYTES),
            Mode::Find(f) => f.pacer().try_take(now, len + WIRE_OVERHEAD_BYTES),
            Mode::Hunt(c) => {
                c.on_timer(now);
                c.try_take(now)
            }
        };
        self.pacing.blocked = !allowed;
        allowed
    }

    /// The data packet to send next, if any may go now: a stall poll first,
    /// then due selective repairs, then the window's next packet.
    fn next_data(&mut self, now: Instant) -> Option<NextData> {
        while let Some(&rank) = self.window.repolls.front() {
            match self.members.list.get(usize::from(rank)) {
                // Still lacking packets sent: its word is still wanted.
                Some(m) if m.in_data() && m.cumulative < self.window.high => {
                    return Some(NextData {
                        index: self.window.base,
                        dest: Dest::Unicast(m.addr),
                        poll: POLL_DIRECT,
                        why: Why::Repoll,
                    });
                }
                // Answered meanwhile, or gone.
                _ => _ = self.window.repolls.pop_front(),
            }
        }
        if let Some(index) = self.window.stall_poll {
            return Some(NextData {
                index,
                dest: Dest::Group,
                poll: POLL_DIRECT,
                why: Why::StallPoll,
            });
        }
        self.drop_stale_repairs();
        if let Some(&index) = self.window.repairs.front() {
            let w = self.window.slot(index);
            if now >= self.window.sent_at[w] + self.config.suppress {
                let lack = self.window.lack[w];
                let live = self.members.list.iter().filter(|m| m.in_data()).count();
                let dest = match self.members.list.get(usize::from(lack.rank)) {
                    Some(m) if lack.count == 1 && live > 1 => Dest::Unicast(m.addr),
                    _ => Dest::Group,
                };
                // In a group that spreads its answers, a repair polls
                // nobody: every receiver answering every resent packet
                // brought 10,000 acks per repair to a sender that can read
                // a few hundred per millisecond (the simulator at 10,000
                // receivers). The next poll, or the timeout's stall poll,
                // hears whether the repair arrived.
                let poll = if self.members.list.len() > usize::from(SPREAD_FROM) {
                    POLL_NONE
                } else {
                    self.policy.repair_poll()
                };
                return Some(NextData {
                    index,
                    dest,
                    poll,
                    why: Why::Repair,
                });
            }
        }
        if self.delta.is_some() {
            let blocked = self.skip_held(now);
            if blocked || self.phase != Phase::Sending {
                return None; // waiting for acks, or everyone held the rest
            }
            if self
                .delta
                .as_ref()
                .is_some_and(|d| d.waits_at(self.window.next))
            {
                self.note_waiting(now);
                return None;
            }
        }
        if !self.can_send_data() {
            return None;
        }
        let index = self.window.next;
        let (only, poll_all) = self.window_plan(index);
        // A Go-back-N retransmission of the window's base asks everyone
        // directly for their state, so a lost poll, ack or relay never
        // stalls the window for long.
        let poll = if index < self.window.high && index == self.window.base {
            POLL_DIRECT
        } else {
            poll_all.unwrap_or_else(|| self.policy.poll_for(index, self.packets))
        };
        Some(NextData {
            index,
            dest: only.unwrap_or(Dest::Group),
            poll,
            why: Why::Window,
        })
    }

    /// Forgets queued repairs of packets every receiver now holds, and
    /// repairs for a single receiver that has left the session.
    fn drop_stale_repairs(&mut self) {
        while let Some(&index) = self.window.repairs.front() {
            let w = self.window.slot(index);
            let lack = self.window.lack[w];
            let gone = lack.count == 1
                && self
                    .members
                    .list
                    .get(usize::from(lack.rank))
                    .is_none_or(|m| !m.in_data());
            if index < self.window.base || lack.count == 0 || gone {
                self.window.repairs.pop_front();
                if index >= self.window.base {
                    self.window.lack[w] = Lack::default();
                }
            } else {
                break;
            }
        }
    }

    /// Selective repeat: a receiver's feedback names as lost every packet
    /// sent before the packet it echoes that is not in its bitmap (a LAN
    /// keeps datagrams in order, so those are not in flight any more).
    /// Returns the latest transmission time among the packets it newly
    /// marks missing for this receiver, if any.
    fn note_missing(&mut self, rank: u16, cumulative: u32, f: &Feedback<'_>) -> Option<Instant> {
        let echo = f.echo.since(self.isn);
        let echo_sent = self.echo_sent_no(echo, f.echo_copy)?;
        // In order and nothing resent: the receiver holds everything sent
        // before the echo. This is the common case; it costs no scan.
        if f.bitmap.is_empty()
            && cumulative > echo
            && !self.window.lack[self.window.slot(echo)].resent
        {
            return None;
        }
        let mut newest: Option<Instant> = None;
        for index in cumulative.max(self.window.base)..self.feedback_end(f) {
            let w = self.window.slot(index);
            if self.window.lack[w].sent_no >= echo_sent
                || f.holds(self.isn.add(index))
                || self.delta.as_ref().is_some_and(|d| d.holds(rank, index))
            {
                continue;
            }
            let lack = &mut self.window.lack[w];
            let new = if lack.count == 0 {
                lack.count = 1;
                lack.rank = rank;
                self.window.repairs.push_back(index);
                true
            } else if lack.rank != rank {
                lack.count = lack.count.saturating_add(1);
                true
            } else {
                false
            };
            if new {
                newest = newest.max(Some(self.window.sent_at[w]));
            }
        }
        newest
    }

    /// The packet index before which feedback `f` speaks: the window's
    /// high edge, or the reach of a bitmap the receiver may have cut short
    /// ([`Feedback::reach`]). Past it the receiver's losses are not
    /// known: a receiver more than 2,048 packets behind its highest
    /// packet would otherwise be taken to lack every packet past its
    /// bitmap (under FEC, whole blocks: their parity ran out and their
    /// data was resent, 41 % of the object at 10,000 receivers).
    pub(super) fn feedback_end(&self, f: &Feedback<'_>) -> u32 {
        f.reach().map_or(self.window.high, |r| {
            r.since(self.isn).min(self.window.high)
        })
    }

    /// The transmission number of the copy of data packet `echo` that
    /// feedback answered (`echo_copy`), or `None` when its slot no longer
    /// describes it (stale, or not ours: nothing to infer).
    ///
    /// The echoed packet's slot must still describe it: nothing a window
    /// or more after it was sent. It may lie below the base: the answer
    /// to a stall poll (a resend of the base) moves the base past the
    /// echo before this runs, and with one receiver lagging that answer
    /// is the only news of what the stall lost. Discarding it repaired
    /// one packet per RTO after a partition (the fault campaign's
    /// nak-poll-hunt seed 742: 37 packets, 60 s, no repair sent).
    ///
    /// The copy answered is its latest one or (when it answered an
    /// earlier copy, or the wire could not say which) its first: what
    /// went out between two copies may not have arrived when the receiver
    /// answered the earlier one.
    pub(super) fn echo_sent_no(&self, echo: u32, echo_copy: u8) -> Option<u64> {
        if echo >= self.window.high || self.window.high - echo > self.config.window {
            return None;
        }
        let echoed = self.window.lack[self.window.slot(echo)];
        Some(
            if u16::from(echo_copy) + 1 == echoed.copies && echo_copy < ECHO_COPY_MAX {
                echoed.sent_no
            } else {
                echoed.first_sent_no
            },
        )
    }

    pub(super) fn on_feedback(
        &mut self,
        now: Instant,
        rank: u16,
        from: SocketAddr,
        f: &Feedback<'_>,
        nak: bool,
    ) {
        let Some(i) = self.member_index(rank, from) else {
            return;
        };
        let cumulative = f.cumulative.since(self.isn);
        // A receiver's point may lie past what was sent by what it
        // reported holding (resume, delta), never further.
        let reach = match &self.delta {
            Some(d) => d.extend(rank, self.window.high),
            None => self.window.high,
        };
        if cumulative > reach {
            // Acknowledges packets never sent: corrupt or hostile; ignore.
            self.stats.malformed += 1;
            return;
        }
        self.members.list[i].last_heard = now;
        self.window.answer_heard(now);
        if !self.members.list[i].in_data() {
            return;
        }
        self.rtt_sample(now, f);
        let mut advanced = false;
        // A tree root's aggregate speaks for its whole subtree.
        for r in self.policy.speaks_for(rank, f.aggregate) {
            if let Some(m) = self.members.list.get_mut(usize::from(r))
                && m.in_data()
                && cumulative > m.cumulative
            {
                // What it reported holding (resume, delta) lies behind it
                // too once its feedback reaches it.
                m.cumulative = match &self.delta {
                    Some(d) => d.extend(r, cumulative),
                    None => cumulative,
                };
                m.history.note(m.cumulative, now, self.config.rto_max);
                advanced = true;
            }
        }
        if advanced {
            self.advance_base(now);
        }
        if self.phase != Phase::Sending {
            return;
        }
        // Packets it already acknowledged are never repaired again, whatever
        // this feedback says (an older one overtaken, or a member asking for
        // repairs it cannot need); asking for many is a reason to remove it.
        // Only a claim below what it had acknowledged `rto_max` ago counts:
        // feedback the network reordered or duplicated is older news, not a
        // claim (under 20 % reordering every member of an ack session was
        // removed for "asking again": the fault campaign's reordering
        // class). Nothing it acknowledged is repaired either way.
        let known = self.members.list[i].cumulative;
        let settled = self.members.list[i]
            .history
            .settled(now, self.config.rto_max);
        if !f.aggregate && cumulative < settled && (nak || !f.bitmap.is_empty()) {
            let claimed = u64::from(settled - cumulative);
            self.stats.overclaimed_packets += claimed;
            let m = &mut self.members.list[i];
            m.overclaims += claimed;
            let limit = membership::OVERCLAIM_LIMIT_WINDOWS * u64::from(self.config.window);
            if m.overclaims > limit {
                let why = format!(
                    "asked again for {} packets it had acknowledged (more than {} windows): \
                     a confused or hostile receiver",
                    m.overclaims,
                    membership::OVERCLAIM_LIMIT_WINDOWS
                );
                self.fail_member(now, i, why);
                self.after_member_change(now);
                return;
            }
        }
        match self.config.repair {
            Repair::Selective if self.fec.is_some() => {
                if !f.aggregate
                    && let Some(sent_at) = self.fec_note_missing(rank, cumulative.max(known), f)
                {
                    self.rate_error(now, ErrorSignal::Exp { sent_at });
                }
            }
            Repair::Selective => {
                if !f.aggregate
                    && let Some(sent_at) = self.note_missing(rank, cumulative.max(known), f)
                {
                    // Hunt's EXP: a member lacks a packet it was not known
                    // to lack.
                    self.rate_error(now, ErrorSignal::Exp { sent_at });
                }
            }
            Repair::GoBackN => {
                if nak && cumulative < self.window.next && cumulative >= self.window.base {
                    let w = self.window.slot(cumulative);
                    let sent_at = self.window.sent_at[w];
                    self.rate_error(now, ErrorSignal::Exp { sent_at });
                    if now.saturating_since(self.window.sent_at[w]) >= self.rewind_suppress() {
                        self.rewind(cumulative);
                    } else {
                        let earliest = self
                            .window
                            .deferred_rewind
                            .map_or(cumulative, |d| d.min(cumulative));
                        self.window.deferred_rewind = Some(earliest);
                    }
                }
            }
        }
    }

    pub(super) fn advance_base(&mut self, now: Instant) {
        let base = self
            .members
            .list
            .iter()
            .filter(|m| m.in_data())
            .map(|m| m.cumulative)
            .min()
            .unwrap_or(self.packets);
        if base > self.window.high {
            // Packets nobody lacked (resume, delta), never sent.
            self.stats.skipped_packets += u64::from(base - self.window.high);
            self.window.high = base;
        }
        if base > self.window.base {
            self.window.base = base;
            self.rate_found(now);
            self.progress_at = now;
            self.window.last_data_activity = now;
            self.rto = self.config.rto;
            self.window.stall_since = None;
            self.window.rewinds_in_vain = 0;
            if self.window.deferred_rewind.is_some_and(|d| d < base) {
                self.window.deferred_rewind = None;
            }
            if self.window.next < base {
                self.window.next = base;
            }
        }
        if self.phase == Phase::Sending && self.window.base >= self.packets {
            self.enter(Phase::Closing, now);
            self.after_member_change(now);
        }
    }

    fn rewind(&mut self, to: u32) {
        debug_assert!(to >= self.window.base && to <= self.window.high);
        if to < self.window.next {
            self.window.next = to;
            self.stats.rewinds += 1;
            self.window.rewinds_in_vain = (self.window.rewinds_in_vain + 1).min(REWIND_BACKOFF_MAX);
        }
    }

    /// How long after a packet's last transmission a NAK may rewind to it:
    /// `suppress`, doubled for each rewind since the base last moved, up to
    /// `rto_max`. A rewind resends the window at once; a receiver that
    /// cannot take it (a slow reader behind a small socket buffer) loses
    /// the base again in the burst and NAKs again, and rewinds every
    /// `suppress` kept its buffer full forever (the fault campaign's
    /// nak-poll-gbn seed 5207: 4,510 rewinds, 502,851 resends, the
    /// watchdog ended it).
    pub(super) fn rewind_suppress(&self) -> Duration {
        let backed_off = self
            .config
            .suppress
            .saturating_mul(1 << self.window.rewinds_in_vain);
        backed_off.min(self.config.rto_max.max(self.config.suppress))
    }

    pub(super) fn can_send_data(&self) -> bool {
        self.window.next < self.readable_packets()
            && self.window.next < self.window.base.saturating_add(self.config.window)
    }

    /// Sending: runs Hunt's timers, a deferred Go-back-N rewind, and the
    /// retransmission timeout (a stall poll or a rewind, backing off).
    pub(super) fn on_window_timeout(&mut self, now: Instant) {
        if let Mode::Hunt(c) = &mut self.pacing.mode {
            c.on_timer(now);
        }
        if self.have_deadline().is_some_and(|d| now >= d) {
            self.try_fix_plan(now);
        }
        self.drop_stale_repairs();
        if let Some(index) = self.window.deferred_rewind
            && now >= self.window.sent_at[self.window.slot(index)] + self.rewind_suppress()
        {
            self.window.deferred_rewind = None;
            if index >= self.window.base && index < self.window.next {
                self.rewind(index);
            }
        }
        if self.repoll_deadline().is_some_and(|d| now >= d) {
            self.start_repoll(now);
        }
        if self.rto_deadline().is_some_and(|d| now >= d) {
            self.stats.timeouts += 1;
            // Hunt's LAST: an acknowledgement timeout is an error,
            // multicast so that every sender of the group backs off.
            self.rate_error(now, ErrorSignal::Last);
            let oldest = self.isn.add(self.window.base);
            if let Some(g) = &mut self.pacing.group {
                g.note_timeout(oldest);
            }
            self.window.stall_since.get_or_insert(now);
            self.check_peers(now);
            if self.phase == Phase::Sending && self.window.base < self.window.high {
                match self.config.repair {
                    Repair::GoBackN => self.rewind(self.window.base),
                    // Ask everyone directly what they hold; their
                    // answers name the packets to repair.
                    Repair::Selective => self.window.stall_poll = Some(self.window.base),
                }
                self.rto = (self.rto * 2).min(self.config.rto_max);
                // Restart the timer from now even if the window or
                // pacer holds the retransmission back.
                self.window.last_data_activity = now;
            }
        }
    }

    /// The retransmission timer runs while something is unacknowledged and
    /// fires after an RTO with neither a data transmission nor progress of
    /// the window's base: a sender still sending is not stuck, and a poll
    /// may lie a whole poll interval after the base.
    ///
    /// While the allowance holds back a packet that could go, the sender is
    /// waiting on itself, not on the receivers: the timer counts from when
    /// the packet may go. Counting from the last transmission made every
    /// gap between two packets a timeout once Hunt's spacing exceeded the
    /// RTO, and every timeout is an error that widens the spacing: under
    /// loss the rate fell to its floor and stayed there (issue 19's hang).
    pub(super) fn rto_deadline(&self) -> Option<Instant> {
        if self.window.base >= self.window.high {
            return None;
        }
        let from = match self.held_by_pacer_until() {
            Some(ready) => self.window.last_activity().max(ready),
            None => self.window.last_activity(),
        };
        Some(from + self.rto)
    }

    /// Writes data packet `index` (header and payload) into `buf`, which is
    /// exactly [`Sender::datagram_len`] long.
    pub(super) fn write_data(
        &self,
        header: Header,
        index: u32,
        poll: u16,
        copy: u16,
        source: &(impl PayloadSource + ?Sized),
        buf: &mut [u8],
    ) -> Option<()> {
        let head = encode_data_header(buf, &header, self.isn.add(index), poll, copy).ok()?;
        source.read_at(
            u64::from(index) * self.payload_size as u64,
            &mut buf[head..],
        );
        Some(())
    }

    pub(super) fn datagram_len(&self, index: u32) -> usize {
        let offset = u64::from(index) * self.payload_size as u64;
        let payload = (self.object.size - offset).min(self.payload_size as u64) as usize;
        DATA_HEADER_LEN + payload
    }
}
