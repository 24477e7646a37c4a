//! Who takes part: admission (`Join`, `Welcome` with the rank and, for the
//! tree, the parent's address), the answers to the offer, peer timeouts,
//! leaving and failure. A failed member is owed a unicast `Bye` naming why.

use super::control::HELLO_FIRST;
use super::pacing::Mode;
use super::timers::Timer;
use super::{Phase, Sender};
use crate::transfer::emit;
use crate::transfer::policy::SenderPolicy;
use crate::transfer::receiver::{JOIN_ANSWER_WAIT, SPREAD_FROM, join_spread};
use crate::{Dest, Instant, SenderEvent, SessionId, Transmit};
use rmcast_wire::{
    Behind, Body, Header, OfferReply, RANK_UNASSIGNED, Status, WELCOMES_ENTRY_LEN, WELCOMES_MAX,
    Welcome, Welcomes, encode_welcome_entry,
};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::net::{SocketAddr, SocketAddrV4};
use std::time::Duration;

/// A `Hello` for lost `Join`s goes this long after the receivers' own wait
/// would let them take it (clock steps, the `Hello`'s own trip).
const LOST_JOIN_MARGIN: Duration = Duration::from_millis(1);

/// Bound on queued unicast control packets; peers retransmit what is dropped.
pub(super) const CTRL_QUEUE_MAX: usize = 4096;

/// In a group over [`SPREAD_FROM`] receivers, an admission waits at most
/// this long for others to share its `Welcomes` datagram (the joins come
/// spread over 2 µs each, so about 500 arrive meanwhile at 10,000, and a
/// receiver asks again only after [`JOIN_ANSWER_WAIT`]).
pub(super) const WELCOMES_WAIT: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MemberState {
    Admitted,
    Accepted,
    Verified,
    Failed,
    /// Moved to a TCP catch-up (`Laggard::Tcp`): out of the multicast
    /// data, its outcome up to the driver.
    Moved,
}

#[derive(Debug)]
pub(super) struct Member {
    pub(super) id: u64,
    pub(super) name: String,
    pub(super) addr: SocketAddr,
    pub(super) state: MemberState,
    /// Index of the next packet it lacks (everything before it is held).
    pub(super) cumulative: u32,
    pub(super) last_heard: Instant,
    pub(super) reason: Option<String>,
    /// Packets it said it lacked after it had acknowledged them (see
    /// [`OVERCLAIM_LIMIT_WINDOWS`]).
    pub(super) overclaims: u64,
    /// Where `cumulative` stood at moments past: a claim counts against
    /// it only below what it had acknowledged `rto_max` ago (see
    /// [`AckHistory`]).
    pub(super) history: AckHistory,
    /// A relay's receivers, as it reported them (`Behind`): named in its
    /// failure.
    pub(super) behind: Option<String>,
    /// Since when it has been far behind the group (`Laggard::Eject`).
    pub(super) lagging_since: Option<Instant>,
    /// Moved to a TCP catch-up holding this many bytes (`Laggard::Tcp`).
    pub(super) caught_up_from: Option<u64>,
    /// When its last `Move` was queued.
    pub(super) move_sent: Option<Instant>,
}

/// A member's cumulative point at a few moments (at most one sample per
/// quarter of the settling time, the last 8 kept): what it had
/// acknowledged at least a settling time ago. Feedback the network
/// delayed, reordered or duplicated (by less than that) never claims
/// below it, since a receiver's own point only grows.
#[derive(Debug, Default)]
pub(super) struct AckHistory {
    samples: [Option<(u32, Instant)>; 8],
    next: usize,
}

impl AckHistory {
    /// `cumulative` was reached at `now`.
    pub(super) fn note(&mut self, cumulative: u32, now: Instant, settle: Duration) {
        let newest = self.samples[(self.next + 7) % 8];
        if newest.is_none_or(|(_, at)| now.saturating_since(at) >= settle / 4) {
            self.samples[self.next] = Some((cumulative, now));
            self.next = (self.next + 1) % 8;
        }
    }

    /// The highest point reached at least `settle` before `now`.
    pub(super) fn settled(&self, now: Instant, settle: Duration) -> u32 {
        self.samples
            .iter()
            .flatten()
            .filter(|(_, at)| now.saturating_since(*at) >= settle)
            .map(|&(c, _)| c)
            .max()
            .unwrap_or(0)
    }
}

/// A receiver that asks again, in total, for this many windows of packets
/// it had already acknowledged is removed: a late feedback packet overtaken
/// by a newer one claims a few, an honest receiver never thousands. Its
/// claims are never repaired anyway (the repair scan starts at what it
/// acknowledged), so this only names a confused or hostile member.
pub(super) const OVERCLAIM_LIMIT_WINDOWS: u64 = 8;

impl Member {
    pub(super) fn in_data(&self) -> bool {
        self.state == MemberState::Accepted
    }
}

/// The session's receivers, by rank, and the unicast control packets
/// owed to them.
#[derive(Debug)]
pub(super) struct Membership {
    /// Every admitted receiver; its index is its rank.
    pub(super) list: Vec<Member>,
    /// `Welcome`s owed: to, receiver id, rank (or unassigned), parent.
    pub(super) welcomes: VecDeque<(SocketAddr, u64, u16, Option<SocketAddrV4>)>,
    /// A group over [`SPREAD_FROM`]: the admissions owed to the group in
    /// one `Welcomes` (at most [`WELCOMES_MAX`] a datagram), instead of a
    /// unicast `Welcome` each.
    pub(super) batch: Vec<Welcome>,
    /// When `batch` goes at the latest: [`WELCOMES_WAIT`] after its oldest
    /// admission (at once when full, or once registration is over).
    pub(super) batch_due: Option<Instant>,
    /// The entries of the `Welcomes` being written (kept for its capacity).
    pub(super) batch_bytes: Vec<u8>,
    /// Ranks removed from the session that are owed a unicast `Bye` with
    /// the reason: the session's closing Byes carry the session's error,
    /// not each removed member's.
    pub(super) byes_owed: VecDeque<u16>,
    /// `Move`s owed (`Laggard::Tcp`): ranks.
    pub(super) moves_owed: VecDeque<u16>,
    /// Other sessions announced on the group while this one waited for its
    /// receivers (at most [`OTHER_SESSIONS_MAX`]): receivers take the first
    /// session they hear, so senders sharing a group split them.
    pub(super) other_sessions: Vec<(SessionId, SocketAddr)>,
}

/// Other sessions a sender remembers (a hostile group cannot grow the list).
const OTHER_SESSIONS_MAX: usize = 8;

impl Membership {
    pub(super) fn new(receivers: u16) -> Self {
        Self {
            list: Vec::with_capacity(usize::from(receivers)),
            welcomes: VecDeque::new(),
            batch: Vec::new(),
            batch_due: None,
            batch_bytes: Vec::with_capacity(WELCOMES_MAX * WELCOMES_ENTRY_LEN),
            byes_owed: VecDeque::new(),
            moves_owed: VecDeque::new(),
            other_sessions: Vec::new(),
        }
    }
}

impl Sender {
    pub(super) fn on_join(&mut self, now: Instant, from: SocketAddr, receiver_id: u64, name: &str) {
        if let Some(rank) = self.members.list.iter().position(|m| m.id == receiver_id) {
            // Our Welcome was lost: say it again.
            self.members.list[rank].last_heard = now;
            self.queue_welcome(now, from, receiver_id, rank as u16);
            return;
        }
        if self.phase != Phase::Joining
            || self.members.list.len() >= usize::from(self.config.receivers)
        {
            self.queue_welcome(now, from, receiver_id, RANK_UNASSIGNED);
            return;
        }
        let rank = self.members.list.len() as u16;
        self.members.list.push(Member {
            id: receiver_id,
            name: name.to_owned(),
            addr: from,
            state: MemberState::Admitted,
            cumulative: 0,
            last_heard: now,
            reason: None,
            overclaims: 0,
            history: AckHistory::default(),
            behind: None,
            lagging_since: None,
            caught_up_from: None,
            move_sent: None,
        });
        self.queue_welcome(now, from, receiver_id, rank);
        self.events.push_back(SenderEvent::Joined {
            rank,
            name: name.to_owned(),
            addr: from,
        });
        if self.members.list.len() == usize::from(self.config.receivers) {
            self.registration_closed(now);
        } else {
            self.hello_for_lost_joins(now);
        }
    }

    /// A `Join` came and some are still missing: the next `Hello` goes
    /// once a receiver whose `Join` (or `Welcome`) was lost takes it as
    /// the sign to join again ([`JOIN_ANSWER_WAIT`] after its `Join`,
    /// which went within [`join_spread`] of the last `Hello`), instead of
    /// on the backoff (10, 20, 40 ms ...). A lost `Join` used to wait for
    /// the backoff's next `Hello`, which the wait ruled out for most of a
    /// large group: at 2,000 receivers (joins spread over 4 ms, a wait of
    /// 9 ms) the `Hello` at 10 ms let only the first millisecond's join
    /// again, and the rest waited for the one at 30 ms. With no `Join`
    /// since the last `Hello`, the backoff stands (the receivers missing
    /// may not be listening yet).
    fn hello_for_lost_joins(&mut self, now: Instant) {
        // What the last Hello said is what its joins are spread over.
        let wanted = self.hello_wanted;
        let joins_by = self.last_hello.map_or(now, |t| t + join_spread(wanted));
        let at = now.max(joins_by) + JOIN_ANSWER_WAIT + LOST_JOIN_MARGIN;
        self.timers.set(Timer::Control, Some(at));
    }

    /// Registration is over with the group that came: choose the data
    /// phase for it and offer the object.
    fn registration_closed(&mut self, now: Instant) {
        if let Err(e) = self.choose_data_phase(now) {
            self.abort(now, &e);
            return;
        }
        self.events.push_back(SenderEvent::AllJoined);
        self.enter(Phase::Offering, now);
        for m in &mut self.members.list {
            m.last_heard = now;
        }
    }

    /// A receiver is about to listen for this session (a hybrid session's
    /// lobby just asked it to probe the group): while registration is
    /// open, the `Hello`s start again from their fast beginning (at once,
    /// then 10, 20, 40 and 80 ms apart), so it hears one within a few
    /// milliseconds of joining instead of the next steady interval, and a
    /// short probe suffices. At most one `Hello` per 10 ms however often
    /// it is called. Ignored after registration.
    pub fn announce_again(&mut self, now: Instant) {
        if self.phase != Phase::Joining {
            return;
        }
        self.hellos_sent = 0;
        let soonest = self.last_hello.map_or(now, |t| (t + HELLO_FIRST).max(now));
        self.timers.set(Timer::Control, Some(soonest));
    }

    /// A hybrid session (multicast for the receivers that hear the group,
    /// a TCP overlay for the rest): `elsewhere` of the receivers the
    /// session waits for have registered over TCP and are served there, so
    /// this session waits for `receivers - elsewhere` (the count given at
    /// the start). Called again as the count grows, until registration
    /// closes; once the multicast members make up the rest, the object is
    /// offered to them at once. The ring's rotation and the tree's shape
    /// follow the smaller group, and auto chooses for it. Every receiver
    /// served elsewhere: the session ends, failed, with nobody to serve
    /// (the caller runs the overlay alone). Ignored after registration.
    pub fn serve_elsewhere(&mut self, now: Instant, elsewhere: u16) {
        if self.phase != Phase::Joining {
            return;
        }
        // More registered over multicast than are left for it (more
        // receivers came than the session waits for): keep them all.
        let joined = self.members.list.len() as u16;
        let wanted = self.wanted.saturating_sub(elsewhere).max(joined);
        if wanted == 0 {
            self.abort(now, "every receiver is served over TCP");
            return;
        }
        if wanted != self.config.receivers {
            self.config.receivers = wanted;
            if self.config.auto.is_none() {
                match self.config.policy() {
                    Ok(policy) => self.policy = SenderPolicy::new(policy),
                    Err(e) => {
                        self.abort(now, &format!("cannot run with {wanted} receivers: {e}"));
                        return;
                    }
                }
            }
        }
        if joined == wanted {
            self.registration_closed(now);
        }
    }

    fn queue_welcome(&mut self, now: Instant, to: SocketAddr, receiver_id: u64, rank: u16) {
        // Tree: the parent joined earlier (parents have lower ranks), so its
        // address is known now.
        let upstream = self
            .policy
            .policy()
            .parent(rank)
            .and_then(|p| self.members.list.get(usize::from(p)))
            .and_then(|m| match m.addr {
                SocketAddr::V4(a) => Some(a),
                SocketAddr::V6(_) => None,
            });
        if self.config.receivers > SPREAD_FROM {
            let m = &mut self.members;
            if m.batch.len() < CTRL_QUEUE_MAX {
                m.batch.push(Welcome {
                    receiver_id,
                    rank,
                    upstream,
                });
                m.batch_due.get_or_insert(now + WELCOMES_WAIT);
            }
        } else if self.members.welcomes.len() < CTRL_QUEUE_MAX {
            self.members
                .welcomes
                .push_back((to, receiver_id, rank, upstream));
        }
    }

    /// The next `Welcomes` of a large group, when it is due (see
    /// [`Membership::batch`]): every receiver that joined finds its own
    /// admission in it. At 10,000 receivers a unicast `Welcome` each kept
    /// the sender busy for 45 ms of joins spread over 20.
    pub(super) fn welcomes(
        &mut self,
        now: Instant,
        header: Header,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let m = &mut self.members;
        let due = m.batch_due?;
        if now < due && m.batch.len() < WELCOMES_MAX && self.phase == Phase::Joining {
            return None;
        }
        let n = m.batch.len().min(WELCOMES_MAX);
        let mut bytes = std::mem::take(&mut m.batch_bytes);
        bytes.clear();
        for w in m.batch.drain(..n) {
            encode_welcome_entry(&w, &mut bytes).expect("an upstream is a member's address");
        }
        if m.batch.is_empty() {
            m.batch_due = None;
        }
        self.stats.control_sent += 1;
        let body = Body::Welcomes(Welcomes { entries: &bytes });
        let t = emit(Dest::Group, header, body, buf);
        self.members.batch_bytes = bytes;
        t
    }

    /// The join wait ran out before every receiver registered: start with
    /// those that did if they are enough (`min_receivers`), else fail.
    pub(super) fn on_join_wait_over(&mut self, now: Instant) {
        let joined = self.members.list.len() as u16;
        if self.config.min_receivers.is_some_and(|min| joined >= min) {
            let wanted = self.config.receivers;
            self.config.receivers = joined;
            // The ring's rotation and the tree's shape follow the group,
            // and auto chooses for the group that came.
            if self.config.auto.is_some() {
                if let Err(e) = self.choose_data_phase(now) {
                    self.abort(now, &e);
                    return;
                }
            } else {
                match self.config.policy() {
                    Ok(policy) => self.policy = SenderPolicy::new(policy),
                    Err(e) => {
                        self.abort(now, &format!("cannot run with {joined} receivers: {e}"));
                        return;
                    }
                }
            }
            self.short = Some(wanted);
            self.events
                .push_back(SenderEvent::StartedShort { joined, wanted });
            self.events.push_back(SenderEvent::AllJoined);
            self.enter(Phase::Offering, now);
            for m in &mut self.members.list {
                m.last_heard = now;
            }
            return;
        }
        let mut msg = format!(
            "only {} of {} receivers registered within {:.1} s",
            self.members.list.len(),
            self.config.receivers,
            self.config.join_wait.as_secs_f64()
        );
        if !self.members.list.is_empty() {
            msg.push_str(" (");
            for (i, m) in self.members.list.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                let _ = write!(msg, "{sep}{} at {}", m.name, m.addr);
            }
            msg.push(')');
        }
        if !self.members.other_sessions.is_empty() {
            msg.push_str("; other sessions announced on this group meanwhile: ");
            for (i, (session, from)) in self.members.other_sessions.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                let _ = write!(msg, "{sep}{session} from {from}");
            }
            msg.push_str(
                " (a receiver takes the first session it hears: give each sender its own --group)",
            );
        }
        self.abort(now, &msg);
    }

    /// Another sender's announcement on our group (heard while joining).
    pub(super) fn on_other_session(&mut self, session: SessionId, from: SocketAddr) {
        let list = &mut self.members.other_sessions;
        if list.len() < OTHER_SESSIONS_MAX && !list.iter().any(|(s, _)| *s == session) {
            list.push((session, from));
            self.events.push_back(SenderEvent::OtherSession {
                session,
                sender: from,
            });
        }
    }

    /// A receiver's answer to the offer.
    pub(super) fn on_offer_reply(
        &mut self,
        now: Instant,
        rank: u16,
        from: SocketAddr,
        r: &OfferReply<'_>,
    ) {
        let Some(i) = self.member_index(rank, from) else {
            return;
        };
        self.members.list[i].last_heard = now;
        self.round.heard(now);
        if self.phase == Phase::Offering && self.members.list[i].state == MemberState::Admitted {
            if r.status == Status::Ok {
                self.members.list[i].state = MemberState::Accepted;
                self.progress_at = now;
                self.events.push_back(SenderEvent::Accepted { rank });
            } else {
                self.fail_member(
                    now,
                    i,
                    format!("refused the offer ({:?}): {}", r.status, r.text),
                );
            }
            self.maybe_start_sending(now);
        }
    }

    /// A receiver left the session.
    pub(super) fn on_leave(&mut self, now: Instant, rank: u16, from: SocketAddr, text: &str) {
        let Some(i) = self.member_index(rank, from) else {
            return;
        };
        // A receiver that leaves after verifying (Ctrl-C while
        // waiting for our Bye) still holds a verified copy.
        if !matches!(
            self.members.list[i].state,
            MemberState::Failed | MemberState::Verified
        ) {
            self.fail_member(now, i, format!("left the session: {}", text));
            self.after_member_change(now);
        }
    }

    pub(super) fn member_index(&mut self, rank: u16, from: SocketAddr) -> Option<usize> {
        let i = usize::from(rank);
        match self.members.list.get(i) {
            Some(m) if m.addr == from => Some(i),
            _ => {
                self.stats.foreign += 1;
                None
            }
        }
    }

    pub(super) fn fail_member(&mut self, now: Instant, i: usize, reason: String) {
        let m = &mut self.members.list[i];
        if m.state == MemberState::Failed {
            return;
        }
        self.policy.on_member_failed();
        m.state = MemberState::Failed;
        self.progress_at = now;
        if self.members.byes_owed.len() < CTRL_QUEUE_MAX {
            self.members.byes_owed.push_back(i as u16);
        }
        // A relay's receivers fail with it: say who they are.
        let reason = match &m.behind {
            Some(behind) => format!("{reason}; {behind}"),
            None => reason,
        };
        self.events.push_back(SenderEvent::MemberFailed {
            rank: i as u16,
            name: m.name.clone(),
            reason: reason.clone(),
        });
        m.reason = Some(reason);
    }

    /// A relay's report of the receivers behind it.
    pub(super) fn on_behind(&mut self, now: Instant, rank: u16, from: SocketAddr, b: &Behind<'_>) {
        let Some(i) = self.member_index(rank, from) else {
            return;
        };
        let m = &mut self.members.list[i];
        m.last_heard = now;
        let names = crate::truncate_utf8(b.names, 255);
        let listed = if names.is_empty() {
            0
        } else {
            names.split(',').count()
        };
        let more = match usize::from(b.receivers).saturating_sub(listed) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        m.behind = Some(format!(
            "{} receivers behind it, unserved: {names}{more}",
            b.receivers
        ));
    }

    /// Removes receivers that owe feedback and have been silent too long.
    pub(super) fn check_peers(&mut self, now: Instant) {
        let limit = self.config.peer_timeout;
        for i in 0..self.members.list.len() {
            let m = &self.members.list[i];
            let owes = match self.phase {
                Phase::Offering => m.state == MemberState::Admitted,
                Phase::Sending => m.in_data() && m.cumulative <= self.window.base,
                Phase::Closing => m.in_data(),
                _ => false,
            };
            // Silence counts from the later of the last word heard and the
            // start of the stall (when everyone was polled again).
            // Closing: a Complete is owed only once a Close has asked for
            // it, which waits for the object's hash.
            let since = match (self.phase, self.window.stall_since, self.close_sent) {
                (Phase::Sending, Some(stall), _) => m.last_heard.max(stall),
                (Phase::Sending, None, _) | (Phase::Closing, _, None) => continue,
                (Phase::Closing, _, Some(asked)) => m.last_heard.max(asked),
                _ => m.last_heard,
            };
            if owes && now.saturating_since(since) >= limit {
                let what = match self.phase {
                    Phase::Offering => "did not answer the offer".to_owned(),
                    Phase::Sending => format!(
                        "stopped acknowledging (holds {} of {} packets)",
                        m.cumulative, self.packets
                    ),
                    _ => "did not confirm the object".to_owned(),
                };
                let reason = format!(
                    "{what}; silent for {:.1} s",
                    now.saturating_since(m.last_heard).as_secs_f64()
                );
                self.fail_member(now, i, reason);
            }
        }
        self.after_member_change(now);
    }

    /// Moves the session on after a member was accepted, verified or failed.
    pub(super) fn after_member_change(&mut self, now: Instant) {
        match self.phase {
            Phase::Offering => self.maybe_start_sending(now),
            Phase::Sending => self.advance_base(now),
            // The farewell's verdict waits for the receivers catching up
            // over TCP (`Laggard::Tcp`); meanwhile the Close goes on
            // repeating, which keeps the verified receivers listening.
            Phase::Closing
                if !self.members.list.iter().any(Member::in_data) && !self.any_moved() =>
            {
                self.enter_farewell(now);
            }
            _ => {}
        }
    }

    fn maybe_start_sending(&mut self, now: Instant) {
        if self
            .members
            .list
            .iter()
            .any(|m| m.state == MemberState::Admitted)
        {
            return;
        }
        if !self.members.list.iter().any(Member::in_data) {
            self.error
                .get_or_insert_with(|| "no receiver accepted the object".to_owned());
            self.enter_farewell(now);
            return;
        }
        self.enter(Phase::Sending, now);
        self.start_laggard_checks(now);
        for m in &mut self.members.list {
            m.last_heard = now;
        }
        let live = self.members.list.iter().filter(|m| m.in_data()).count();
        if let Mode::Hunt(c) = &mut self.pacing.mode {
            c.set_group_size(u16::try_from(live).unwrap_or(u16::MAX));
        }
        // An empty object needs no data; a full window of nothing is done.
        self.advance_base(now);
    }
}
