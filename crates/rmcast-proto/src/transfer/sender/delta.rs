//! Resume and delta ([`crate::SenderConfig::have_after`]): packets the
//! receivers hold already are not sent.
//!
//! The object's first bytes (a tree's manifest) go first. Each receiver
//! then finds on its disk the chunks it holds (an earlier version under
//! the same name, what an interrupted session left), stores them, and
//! reports the packets they cover in `Have` packets. The window waits at
//! the barrier (the first packet after the manifest) until every live
//! member's report is complete or the wait runs out (`have_wait` of
//! silence, `have_wait_max` in all: a member that never reports is taken
//! to hold nothing). Then the plan is fixed:
//!
//! - a packet every member holds is not sent: the window steps over it,
//!   and every member's cumulative point moves past it;
//! - a packet exactly one member lacks goes to it by unicast (skipped if
//!   that member has left);
//! - any other packet goes to the group, as without a plan.
//!
//! A member's reported ranges also extend its cumulative point whenever
//! its feedback moves it (the receiver holds them; its own feedback says
//! so once its earlier gaps fill), and its repairs never include them. The
//! last packet sent before a stretch every member holds polls everyone
//! directly, so the window does not wait a timeout to step over it.

use super::{Phase, Sender};
use crate::{Dest, Instant};
use rmcast_wire::{Have, POLL_DIRECT};
use std::net::SocketAddr;

/// One member's report, as its parts arrive.
#[derive(Debug, Default)]
struct Report {
    /// Which parts arrived, one flag per part of the report (empty: no
    /// part seen yet, or only "still looking").
    got: Vec<bool>,
    /// Ranges from the parts so far (sorted and merged once complete).
    ranges: Vec<(u32, u32)>,
    complete: bool,
    /// Last "still looking" or part heard.
    heard: Option<Instant>,
}

/// A stretch of packets and how many members held it when the plan was
/// fixed; `holders_xor` is the XOR of their ranks (with one lacker, the
/// XOR of every rank with it names the lacker).
#[derive(Clone, Copy, Debug)]
struct Segment {
    start: u32,
    holders: u16,
    holders_xor: u16,
}

/// What is done with the packet the window reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Plan {
    /// No plan, or a packet two or more members lack: to the group.
    Group,
    /// Nobody lacks packets up to (not including) this index.
    SkipTo(u32),
    /// Only this member lacks it.
    Only(SocketAddr),
}

#[derive(Debug)]
pub(super) struct Delta {
    /// First packet after the manifest: the window waits here.
    pub(super) barrier: u32,
    reports: Vec<Report>,
    /// When the window first waited at the barrier.
    waiting_since: Option<Instant>,
    /// The plan, once fixed: segments by start, covering `barrier..`.
    segments: Option<Vec<Segment>>,
    /// Ranks in data when the plan was fixed.
    planned: Vec<u16>,
}

impl Delta {
    pub(super) fn new(barrier: u32) -> Self {
        Self {
            barrier,
            reports: Vec::new(),
            waiting_since: None,
            segments: None,
            planned: Vec::new(),
        }
    }

    fn report(&mut self, rank: u16) -> &mut Report {
        let i = usize::from(rank);
        if self.reports.len() <= i {
            self.reports.resize_with(i + 1, Report::default);
        }
        &mut self.reports[i]
    }

    /// The end of the range of `rank`'s complete report that holds packet
    /// `index`, if one does.
    fn held_until(&self, rank: u16, index: u32) -> Option<u32> {
        let r = self.reports.get(usize::from(rank)).filter(|r| r.complete)?;
        let i = r.ranges.partition_point(|&(first, _)| first <= index);
        let (first, count) = *r.ranges.get(i.checked_sub(1)?)?;
        let end = first.saturating_add(count);
        (index < end).then_some(end)
    }

    /// Whether `rank` reported holding packet `index` (false before its
    /// report is complete).
    pub(super) fn holds(&self, rank: u16, index: u32) -> bool {
        self.held_until(rank, index).is_some()
    }

    /// `cumulative` moved past the range `rank` holds from it, if any (its
    /// ranges are merged: no range starts where another ends).
    pub(super) fn extend(&self, rank: u16, cumulative: u32) -> u32 {
        self.held_until(rank, cumulative).unwrap_or(cumulative)
    }

    /// The plan for packet `index`; `live(rank)` is the address of a
    /// member still in the data phase (none for one that left).
    pub(super) fn plan(
        &self,
        index: u32,
        live: impl Fn(u16) -> Option<SocketAddr>,
        packets: u32,
    ) -> Plan {
        let Some(segments) = &self.segments else {
            return Plan::Group;
        };
        let i = segments.partition_point(|s| s.start <= index);
        if i == 0 {
            return Plan::Group;
        }
        let s = segments[i - 1];
        let members = self.planned.len();
        let end = segments.get(i).map_or(packets, |n| n.start);
        match members.saturating_sub(usize::from(s.holders)) {
            0 => Plan::SkipTo(end),
            1 => {
                let lacker = self.planned.iter().fold(s.holders_xor, |x, &r| x ^ r);
                match live(lacker) {
                    Some(addr) => Plan::Only(addr),
                    // It left: nobody alive lacks these packets.
                    None => Plan::SkipTo(end),
                }
            }
            _ => Plan::Group,
        }
    }

    /// Whether the window must wait at `index` for reports.
    pub(super) fn waits_at(&self, index: u32) -> bool {
        self.segments.is_none() && index >= self.barrier
    }

    /// Fixes the plan from the complete reports of `live` ranks.
    fn fix(&mut self, live: &[u16]) {
        let mut events: Vec<(u32, bool, u16)> = Vec::new();
        for &rank in live {
            if let Some(r) = self.reports.get(usize::from(rank)).filter(|r| r.complete) {
                for &(first, count) in &r.ranges {
                    let end = (u64::from(first) + u64::from(count)).min(u64::from(u32::MAX));
                    let first = first.max(self.barrier);
                    if u64::from(first) < end {
                        events.push((first, true, rank));
                        events.push((end as u32, false, rank));
                    }
                }
            }
        }
        events.sort_unstable_by_key(|&(at, starts, _)| (at, starts));
        let mut segments = vec![Segment {
            start: self.barrier,
            holders: 0,
            holders_xor: 0,
        }];
        let (mut holders, mut xor) = (0u16, 0u16);
        for (at, starts, rank) in events {
            if starts {
                holders += 1;
            } else {
                holders -= 1;
            }
            xor ^= rank;
            let last = segments.last_mut().expect("one segment at least");
            if last.start == at {
                last.holders = holders;
                last.holders_xor = xor;
            } else {
                segments.push(Segment {
                    start: at,
                    holders,
                    holders_xor: xor,
                });
            }
        }
        self.planned = live.to_vec();
        self.segments = Some(segments);
    }
}

/// Sorts and merges ranges (adjacent ones join).
fn merge(ranges: &mut Vec<(u32, u32)>) {
    ranges.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
    for &(first, count) in ranges.iter() {
        let end = u64::from(first) + u64::from(count);
        if let Some(last) = out.last_mut() {
            let last_end = u64::from(last.0) + u64::from(last.1);
            if u64::from(first) <= last_end {
                let new_end = last_end.max(end);
                last.1 = u32::try_from(new_end - u64::from(last.0)).unwrap_or(u32::MAX);
                continue;
            }
        }
        out.push((first, count));
    }
    *ranges = out;
}

/// The address of member `rank` if it is still in the data phase.
fn live_addr(members: &[super::membership::Member], rank: u16) -> Option<SocketAddr> {
    members
        .get(usize::from(rank))
        .filter(|m| m.in_data())
        .map(|m| m.addr)
}

/// Most parts a report may have (a member cannot make the sender hold
/// more than this many parts' worth of ranges: 2 MiB).
const MAX_PARTS: u16 = 2048;

impl Sender {
    /// A `Have` from member `i` (rank `rank`).
    pub(super) fn on_have(&mut self, now: Instant, i: usize, h: &Have<'_>) {
        let packets = self.packets;
        let Some(delta) = &mut self.delta else {
            self.stats.foreign += 1;
            return;
        };
        if !self.members.list[i].in_data() {
            return;
        }
        // A report that comes after the plan was fixed (a member paused
        // past the wait) changes no plan, but it is the member's word for
        // what it holds: its cumulative point may now lie past what was
        // sent, and that must not read as acknowledging packets never sent.
        let late = delta.segments.is_some();
        self.members.list[i].last_heard = now;
        let rank = i as u16;
        let r = delta.report(rank);
        if r.complete {
            return;
        }
        r.heard = Some(now);
        if h.parts == 0 {
            // Still looking: its disk is being read; keep waiting.
            if !late {
                self.progress_at = now;
            }
            return;
        }
        if h.parts > MAX_PARTS || (!r.got.is_empty() && r.got.len() != usize::from(h.parts)) {
            self.stats.malformed += 1;
            return;
        }
        if r.got.is_empty() {
            r.got = vec![false; usize::from(h.parts)];
        }
        let part = usize::from(h.part);
        if r.got[part] {
            return;
        }
        r.got[part] = true;
        r.ranges.extend(
            h.ranges()
                .filter(|&(first, _)| first < packets)
                .map(|(first, count)| (first, count.min(packets - first))),
        );
        if r.got.iter().all(|&g| g) {
            merge(&mut r.ranges);
            r.complete = true;
            self.progress_at = now;
        }
        if !late {
            self.try_fix_plan(now);
        }
    }

    /// Fixes the plan once every live member's report is complete, or the
    /// wait ran out; then steps over what everyone holds.
    pub(super) fn try_fix_plan(&mut self, now: Instant) {
        let Some(delta) = &mut self.delta else {
            return;
        };
        if delta.segments.is_some() || self.phase != Phase::Sending {
            return;
        }
        let live: Vec<u16> = (0..self.members.list.len())
            .filter(|&i| self.members.list[i].in_data())
            .map(|i| i as u16)
            .collect();
        let all_in = live.iter().all(|&r| {
            delta
                .reports
                .get(usize::from(r))
                .is_some_and(|r| r.complete)
        });
        let over = delta
            .wait_deadline(self.config.have_wait, self.config.have_wait_max)
            .is_some_and(|d| now >= d);
        if !(all_in || over) {
            return;
        }
        delta.fix(&live);
        self.stats.have_reports = live
            .iter()
            .filter(|&&r| {
                delta
                    .reports
                    .get(usize::from(r))
                    .is_some_and(|r| r.complete)
            })
            .count() as u64;
        // Every member's cumulative point steps over what it holds.
        for (rank, m) in self.members.list.iter_mut().enumerate() {
            if m.in_data() {
                m.cumulative = delta.extend(rank as u16, m.cumulative);
            }
        }
        self.progress_at = now;
        self.advance_base(now);
    }

    /// Notes that the window reached the barrier (the wait starts).
    pub(super) fn note_waiting(&mut self, now: Instant) {
        if let Some(delta) = &mut self.delta
            && delta.waits_at(self.window.next)
            && delta.waiting_since.is_none()
        {
            delta.waiting_since = Some(now);
        }
    }

    /// When the wait at the barrier ends without every report.
    pub(super) fn have_deadline(&self) -> Option<Instant> {
        let delta = self.delta.as_ref()?;
        if delta.segments.is_some() || self.phase != Phase::Sending {
            return None;
        }
        delta.wait_deadline(self.config.have_wait, self.config.have_wait_max)
    }

    /// The packet the window reaches: stepped over while everyone holds
    /// it; whether it goes to one member only; whether it must poll
    /// everyone (the last before a stretch everyone holds).
    pub(super) fn window_plan(&mut self, index: u32) -> (Option<Dest>, Option<u16>) {
        let Some(delta) = &self.delta else {
            return (None, None);
        };
        let members = &self.members.list;
        let live = |rank: u16| live_addr(members, rank);
        let dest = match delta.plan(index, live, self.packets) {
            // Alone in the session, the group is that member.
            Plan::Only(addr) if members.iter().filter(|m| m.in_data()).nth(1).is_some() => {
                Some(Dest::Unicast(addr))
            }
            _ => None,
        };
        // The manifest's last packet, and the last before a stretch
        // everyone holds, ask everyone at once where they stand.
        let poll = (index + 1 == delta.barrier
            || (index + 1 < self.packets
                && matches!(delta.plan(index + 1, live, self.packets), Plan::SkipTo(_))))
        .then_some(POLL_DIRECT);
        (dest, poll)
    }

    /// Steps the window over packets nobody lacks; returns whether the
    /// packet it reached is one nobody lacks that must wait for the
    /// packets in flight before it (nothing may go meanwhile).
    pub(super) fn skip_held(&mut self, now: Instant) -> bool {
        let Some(delta) = &self.delta else {
            return false;
        };
        let mut moved = false;
        let mut blocked = false;
        while self.window.next < self.packets {
            let members = &self.members.list;
            let live = |rank: u16| live_addr(members, rank);
            let Plan::SkipTo(end) = delta.plan(self.window.next, live, self.packets) else {
                break;
            };
            let from = self.window.next;
            let end = end.min(self.packets);
            // The window never spans more than its size: with packets in
            // flight before the stretch, wait for them (the packet before
            // it polled everyone); once none are, every member's point
            // steps over the stretch below.
            if self.window.base < from
                && u64::from(end) > u64::from(self.window.base) + u64::from(self.config.window)
            {
                blocked = true;
                break;
            }
            // Slots of packets never sent must not read as lost.
            for index in from
                .max(self.window.high)
                .max(end.saturating_sub(self.config.window))..end
            {
                let w = self.window.slot(index);
                self.window.lack[w] = super::window::Lack {
                    sent_no: u64::MAX,
                    first_sent_no: u64::MAX,
                    ..Default::default()
                };
                self.window.sent_at[w] = now;
            }
            if end > self.window.high {
                let fresh = end - from.max(self.window.high);
                self.stats.skipped_packets += u64::from(fresh);
                self.window.high = end;
            }
            self.window.next = end;
            moved = true;
        }
        if moved {
            for (rank, m) in self.members.list.iter_mut().enumerate() {
                if m.in_data() {
                    m.cumulative = delta.extend(rank as u16, m.cumulative);
                }
            }
            self.advance_base(now);
        }
        blocked
    }
}

impl Delta {
    fn wait_deadline(
        &self,
        wait: std::time::Duration,
        wait_max: std::time::Duration,
    ) -> Option<Instant> {
        let since = self.waiting_since?;
        let heard = self
            .reports
            .iter()
            .filter(|r| !r.complete)
            .filter_map(|r| r.heard)
            .max()
            .unwrap_or(since)
            .max(since);
        Some((heard + wait).min(since + wait_max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(ranges: &[(u32, u32)]) -> Report {
        let mut ranges = ranges.to_vec();
        merge(&mut ranges);
        Report {
            got: vec![true],
            ranges,
            complete: true,
            heard: None,
        }
    }

    fn addr(rank: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 5000 + rank))
    }

    #[test]
    fn ranges_merge_and_extend_the_cumulative_point() {
        let mut d = Delta::new(2);
        d.reports = vec![report(&[(10, 5), (15, 5), (30, 1)])];
        assert_eq!(d.reports[0].ranges, [(10, 10), (30, 1)]);
        assert_eq!(d.extend(0, 10), 20);
        assert_eq!(d.extend(0, 12), 20);
        assert_eq!(d.extend(0, 20), 20);
        assert_eq!(d.extend(0, 30), 31);
        assert_eq!(d.extend(1, 10), 10, "no report: nothing held");
        assert!(d.holds(0, 19) && !d.holds(0, 20) && d.holds(0, 30) && !d.holds(0, 9));
    }

    #[test]
    fn the_plan_skips_what_all_hold_and_unicasts_what_one_lacks() {
        let mut d = Delta::new(2);
        d.reports = vec![
            report(&[(0, 50)]),
            report(&[(0, 40), (45, 5)]),
            report(&[(0, 30)]),
        ];
        let live = |rank: u16| (rank < 3).then(|| addr(rank));
        let two = |rank: u16| (rank < 2).then(|| addr(rank));
        assert_eq!(
            d.plan(5, live, 100),
            Plan::Group,
            "no plan before the reports"
        );
        assert!(d.waits_at(2) && !d.waits_at(1));
        d.fix(&[0, 1, 2]);
        assert!(!d.waits_at(2));
        assert_eq!(
            d.plan(0, live, 100),
            Plan::Group,
            "the manifest went already"
        );
        assert_eq!(d.plan(2, live, 100), Plan::SkipTo(30));
        assert_eq!(d.plan(29, live, 100), Plan::SkipTo(30));
        assert_eq!(d.plan(30, live, 100), Plan::Only(addr(2)));
        assert_eq!(d.plan(40, live, 100), Plan::Group, "1 and 2 lack it");
        assert_eq!(d.plan(45, live, 100), Plan::Only(addr(2)));
        assert_eq!(d.plan(50, live, 100), Plan::Group);
        assert_eq!(d.plan(99, live, 100), Plan::Group);
        // Member 2 left: what only it lacked is nobody's business.
        assert_eq!(d.plan(30, two, 100), Plan::SkipTo(40));
    }
}
