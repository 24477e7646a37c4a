//! Healing: a member that fails once data flows is cut out, its children
//! detached from it and re-attached to the sender; and the stall
//! detection that finds such members (a single wedged node of a pipelined
//! shape, or the whole session).

use super::{ControlOp, Member, SenderEvent, SenderMachine, SenderPhase, State};
use crate::Instant;
use crate::overlay::topology::{Forwarding, SENDER, SegmentSet};
use crate::overlay::{DataOp, Rank, Segments};
use rmcast_wire::overlay::Msg;
use std::time::Duration;

impl SenderMachine {
    /// Marks member `i` failed. Before data flows the first failure
    /// becomes the session's error (while closing, the error stays the one
    /// that closed it); once it flows the member is cut out, told so, and
    /// its children are detached from it, and the session goes on.
    pub(super) fn fail(&mut self, now: Instant, i: usize, what: String) {
        let m = &mut self.members[i];
        if !m.open() && m.state != State::Reported {
            return;
        }
        let text = format!("{} {what}", m.describe(i as Rank + 1));
        m.state = State::Failed;
        m.reason = Some(what.clone());
        self.events
            .push_back(SenderEvent::MemberFailed(text.clone()));
        match self.phase {
            SenderPhase::Closing => {}
            SenderPhase::Sending if self.error.is_none() => {
                self.cut_count += 1;
                self.cut_out.get_or_insert(text);
                self.send(
                    i,
                    Msg::Abort {
                        text: format!("this receiver was cut out of the session: it {what}"),
                    },
                );
                let conn = self.members[i].conn;
                self.transmits.push_back(ControlOp::Close { conn });
                self.detach(now, i as Rank + 1);
            }
            _ => {
                self.error.get_or_insert(text);
            }
        }
    }

    /// Tells the open children of `rank` (cut out) to drop their edges
    /// from it; each answers with `Orphaned`. The stall clocks of every
    /// node below it start again: they stored nothing lately because of
    /// it, and their progress reports lag the re-attachment.
    pub(super) fn detach(&mut self, now: Instant, rank: Rank) {
        let Some(topo) = &self.topo else { return };
        let mut children: Vec<Rank> = (topo.node(rank).children.iter()).map(|l| l.peer).collect();
        children.dedup();
        let mut below = vec![false; self.members.len() + 1];
        let mut todo = children.clone();
        while let Some(r) = todo.pop() {
            if !std::mem::replace(&mut below[usize::from(r)], true) {
                self.members[usize::from(r) - 1].stall_from = now;
                todo.extend(topo.node(r).children.iter().map(|l| l.peer));
            }
        }
        for c in children {
            let j = usize::from(c) - 1;
            if self.members[j].open() {
                self.send(j, Msg::Detach { rank });
            }
        }
    }

    /// Member `i` says its edge carrying `segments` from `from` broke
    /// after `have` segments: the sender feeds it from there.
    pub(super) fn reattach(
        &mut self,
        now: Instant,
        i: usize,
        from: Rank,
        segments: SegmentSet,
        have: u64,
    ) {
        let rank = i as Rank + 1;
        let total = Segments::new(self.cfg.size, self.cfg.segment_size).count();
        let is_edge = self
            .topo
            .as_ref()
            .is_some_and(|t| (t.node(rank).parents.iter()).any(|l| l.segments == segments));
        if !is_edge || have > segments.count(total) {
            self.stats.malformed += 1;
            return;
        }
        self.stats.reattached += 1;
        self.last_progress = now;
        self.members[i].stall_from = now;
        self.reattached.insert((rank, segments));
        self.events.push_back(SenderEvent::Reattached {
            rank,
            segments,
            from,
            have,
        });
        self.data.push_back(DataOp::Connect {
            child: rank,
            addr: self.members[i].data_addr,
            segments,
            hello: Msg::DataHello {
                session: self.cfg.session,
                from: SENDER,
                to: rank,
                segments,
                first: have,
            },
            back: None,
        });
        self.data.push_back(DataOp::Feed {
            child: rank,
            segments,
            first: have,
        });
    }

    /// Store-and-forward: the next queued child still in the session.
    pub(super) fn feed_next(&mut self) {
        while let Some((child, segments)) = self.feed_queue.pop_front() {
            if self.members[usize::from(child) - 1].open() {
                self.feeding = Some((child, segments));
                self.data.push_back(DataOp::Feed {
                    child,
                    segments,
                    first: 0,
                });
                return;
            }
        }
    }

    /// How long a receiver of a pipelined overlay may store nothing while
    /// its parents go on before it is cut out as stalled, once data flows:
    /// half the stall timeout, so that it is cut out before the whole
    /// session counts as stalled (a parent whose writes to it block gets
    /// going again after the inactivity timeout, less than that).
    /// Store-and-forward children wait for their turn by design: for them
    /// only the session's stall counts.
    pub(super) fn node_stall_limit(&self) -> Option<Duration> {
        let limit = self.cfg.stall_timeout? / 2;
        (self.phase == SenderPhase::Sending
            && self.error.is_none()
            && Forwarding::of(self.cfg.shape) == Forwarding::Pipelined)
            .then_some(limit)
    }

    /// Receivers that stored nothing for the limit while every parent they
    /// depend on went on: the sender; complete; cut out (and so replaced by
    /// the sender); storing bytes well after this one stopped (a quarter
    /// of the limit covers the progress reports' own period); or holding
    /// an eighth of the object more than it (the pipeline's and the
    /// bintree's parents get other classes from elsewhere while the
    /// wedged node holds theirs back). Their own data path is wedged.
    /// Below a wedged node everything stops at about the same time, at
    /// about the same count (a child stores what its parent stored a
    /// moment before), so a node whose parent stopped with it is not
    /// blamed; the parent is.
    pub(super) fn stalled_nodes(&self, now: Instant) -> Vec<(usize, String)> {
        let (Some(limit), Some(topo)) = (self.node_stall_limit(), &self.topo) else {
            return Vec::new();
        };
        let ahead = (self.cfg.size / 8).max(u64::from(self.cfg.segment_size));
        let went_on = |rank: Rank, m: &Member| {
            rank == SENDER || {
                let p = &self.members[usize::from(rank) - 1];
                !p.open() || p.moved >= m.moved + limit / 4 || p.bytes >= m.bytes + ahead
            }
        };
        (self.members.iter().enumerate())
            .filter(|(_, m)| {
                m.open() && m.bytes < self.cfg.size && now.saturating_since(m.stall_from) >= limit
            })
            .filter(|(i, m)| {
                let plan = topo.node(*i as Rank + 1);
                plan.parents.iter().all(|l| went_on(l.peer, m))
            })
            .map(|(i, m)| {
                let why = format!(
                    "stalled: stored no new byte for {:.1} s (at {} of {} bytes) while the \
                     nodes feeding it went on",
                    now.saturating_since(m.stall_from).as_secs_f64(),
                    m.bytes,
                    self.cfg.size
                );
                (i, why)
            })
            .collect()
    }

    /// When the data phase counts as stalled, if it is under way.
    pub(super) fn stall_deadline(&self) -> Option<Instant> {
        let limit = self.cfg.stall_timeout?;
        (self.phase == SenderPhase::Sending && self.error.is_none())
            .then(|| self.last_progress + limit)
    }

    /// The stall's report: how long, and the receivers furthest behind.
    pub(super) fn stalled(&self, now: Instant) -> String {
        let waiting: Vec<(usize, &Member)> = (self.members.iter().enumerate())
            .filter(|(_, m)| m.open() && m.state != State::Complete)
            .collect();
        let least = waiting.iter().map(|(_, m)| m.bytes).min().unwrap_or(0);
        let behind: Vec<String> = (waiting.iter())
            .filter(|(_, m)| m.bytes == least)
            .map(|(i, m)| m.describe(*i as Rank + 1))
            .collect();
        let more = behind.len().saturating_sub(3);
        format!(
            "the transfer stalled: no receiver stored a new byte for {:.1} s \
             ({} of {} receivers unfinished; furthest behind, at {least} of {} bytes: {}{})",
            now.saturating_since(self.last_progress).as_secs_f64(),
            waiting.len(),
            self.members.len(),
            self.cfg.size,
            behind[..behind.len() - more].join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            },
        )
    }
}
