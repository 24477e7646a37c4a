//! Re-polls: a poll round whose answers have stopped while the window
//! waits on a few members is asked again, member by member, by unicast
//! (`Why::Repoll` in `window.rs` sends them), instead of waiting for the
//! retransmission timeout.

use super::{Phase, Sender};
use crate::transfer::receiver::SPREAD_FROM;
use crate::{FeedbackPolicy, Instant};

/// Fewest members one round asks again by unicast (see
/// [`Sender::repoll_deadline`]): a few answers lost at random are asked
/// for again at once; more missing than [`repoll_max`] is another matter
/// (a port that overflowed, receivers gone), left to the retransmission
/// timeout.
pub(super) const REPOLL_MAX: usize = 8;

/// Most times one poll round asks its silent members again, each a quiet
/// after the last (see [`Sender::repoll_deadline`]): the answer to a
/// re-poll can be lost too (at 1 % feedback loss, one in five re-polls of
/// 20 members), and with one re-poll per round such a loss at the object's
/// end waited for the RTO's stall poll, which every member answers.
const REPOLLS: u8 = 3;

/// Most members one round asks again in a group of `members`: 8, or one
/// in 64 (1.6 %) of a large group, whose answers lose that many to
/// random feedback loss of 1 % (2,000 receivers: 31).
pub(super) fn repoll_max(members: usize) -> usize {
    REPOLL_MAX.max(members / 64)
}

impl Sender {
    /// When to poll again, by unicast, the members holding the window's
    /// base or silent since the poll: once the sender has nothing to send
    /// (the window is full, or all is sent; no repair queued), a poll's
    /// answers have begun, and no feedback has come for the longest of the
    /// suppression interval, twice the time the first answer took, and a
    /// quarter of the RTO (slow readers answer late: the fsu preset's
    /// hosts reading 50 KB datagrams were re-polled with `suppress`
    /// alone). A lost answer, NAK or repair otherwise held the window
    /// for a whole RTO, and the RTO's stall poll asks everyone: at 1,000
    /// receivers and 0.1 % feedback loss some answer of almost every poll
    /// is lost. At most [`REPOLLS`] times per poll round (the RTO's stall
    /// poll starts one), each a quiet after the last, and every silent
    /// member at once: re-polling only the members at the base, at every
    /// stall of it, went round after round at the object's end, 30 ms a
    /// round (2,000 receivers, 1 % feedback loss: 179 Mbit/s; 388 with one
    /// re-poll of every silent member per round). With one per round, a
    /// re-poll's own lost answer waited for the RTO's stall poll: at 2,000
    /// × 8 MiB and 1 % feedback loss the median of 12 seeds went from 317
    /// to 412 Mbit/s with three (and the `Hello` for lost joins, and the
    /// `Offer`/`Close` asked again up to three times).
    ///
    /// A group over [`SPREAD_FROM`] waits without the quarter of the RTO,
    /// and only a quarter of `suppress` ([`Sender::round_quiet`]): its
    /// members answer in slots of their own, back to back, whose spread
    /// the quiet already allows for (it runs from the last answer), and at
    /// the object's end the longer quiet was paid whenever an answer was
    /// lost, which at 1 % feedback loss is nearly every session (2,000 ×
    /// 8 MiB, 1 % data and feedback loss, 6 seeds, median: 498.1 Mbit/s
    /// with the quarter RTO, 567.9 with `suppress`, 653.0 with a quarter of
    /// it and parity aside, below; 10,000: 353.8, 387.2, 412.3).
    ///
    /// The quiet runs from the last answer, the last data packet sent, the
    /// base's last advance and the last re-poll, but not from parity: parity
    /// goes in answer to feedback the quiet already counts from, and a
    /// block's parity probe (`fec_probe_at`) sent after the answers had
    /// stopped held the re-poll back by up to a whole quiet (2,000 × 8 MiB,
    /// 1 % data and feedback loss, 6 seeds: median 567.9 → 575.1 Mbit/s;
    /// 10,000: 387.2 → 394.1).
    ///
    /// O(1): who holds the base is looked at when it fires
    /// ([`Sender::start_repoll`]). Nak-poll only: its polls are a window
    /// apart, so a lost answer holds the window until the next one, which
    /// the full window keeps from going. The ack protocol polls every
    /// packet (the next ack makes up for a lost one), and there most lost
    /// acks are a sender's port overflowing, where re-polls only add load
    /// (the golden `small ports` and `goodput` scenarios: 16 % slower); the
    /// tree's relays answer for their subtrees; the ring polls by turns.
    pub(super) fn repoll_deadline(&self) -> Option<Instant> {
        let poll_at = self.window.poll_at?;
        let idle = self.phase == Phase::Sending
            && self.window.repolled < REPOLLS
            && self.window.repolls.is_empty()
            && self.window.stall_poll.is_none()
            && self.window.repairs.is_empty()
            && self.window.base < self.window.high
            && matches!(self.policy.policy(), FeedbackPolicy::NakPoll { .. })
            && !self.can_send_data();
        // Only once the round's answers have begun; quiet for at least
        // twice as long as the first of them took: slow readers answer
        // late.
        let first = self.window.first_answer_at?;
        if !idle {
            return None;
        }
        let quiet = self.round_quiet(poll_at, first);
        let quiet = if self.members.list.len() > usize::from(SPREAD_FROM) {
            quiet
        } else {
            quiet.max(self.config.rto / 4)
        };
        let since = (self
            .window
            .last_feedback
            .max(self.window.last_data_activity))
        .max(self.window.repolled_at.unwrap_or(Instant::ZERO));
        Some(since + quiet)
    }

    /// The answers are over and the window waits: poll again, directly,
    /// each member that still lacks packets sent and holds the base, was
    /// not heard since the poll, or lacks a packet up to the poll's own, if
    /// they are a few ([`repoll_max`]). One whose answer was lost answers
    /// now; one whose NAK or repair was lost says again what it lacks or
    /// takes the base. Members behind the base's holder are asked in the
    /// same round: asked only once they held the base, a member whose
    /// repair was lost at the object's end waited for the round after, and
    /// with the round's three re-poll spent, for the RTO (2,000 receivers
    /// and 1 % feedback loss: two seeds of twelve, 50–80 ms each).
    pub(super) fn start_repoll(&mut self, now: Instant) {
        self.window.repolled += 1;
        self.window.repolled_at = Some(now);
        let (base, high) = (self.window.base, self.window.high);
        let (poll_at, polled) = (self.window.poll_at, self.window.poll_index);
        let max = repoll_max(self.members.list.len());
        let mut stale = Vec::new();
        let mut behind = Vec::new();
        for (rank, m) in self.members.list.iter().enumerate() {
            if !m.in_data() || m.cumulative >= high {
                continue;
            }
            let silent = poll_at.is_some_and(|p| m.last_heard < p);
            if m.cumulative <= base || silent {
                if stale.len() == max {
                    // Too many to be chance: the RTO's.
                    return;
                }
                stale.push(rank as u16);
            } else if m.cumulative <= polled && behind.len() < max {
                behind.push(rank as u16);
            }
        }
        // Those behind the poll only as far as the bound leaves room: many
        // of them are the window's ordinary repairs, not lost answers.
        let room = max - stale.len();
        stale.extend(behind.into_iter().take(room));
        self.window.repolls.extend(stale);
    }
}
