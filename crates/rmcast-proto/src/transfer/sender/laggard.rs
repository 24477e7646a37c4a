//! `Laggard::Eject` and `Laggard::Tcp`: a receiver that stays far behind
//! the rest of the group no longer sets the group's pace.
//!
//! While sending, every quarter of `after` (at least 25 ms) the sender
//! compares each receiver's acknowledged point with the group's median
//! receiver's. One at least half a window behind it is *lagging*; one
//! lagging for `after` in a row is ejected (failed and named) or moved to a
//! TCP catch-up, and the window moves on to the next slowest. A receiver
//! that keeps up, whatever its repairs, is never half a window behind the
//! median for long: the window holds the fast ones at most a window ahead
//! of the slowest, and acknowledgements come every poll. Half the group or
//! more being slow is the group's pace, not a laggard: nobody is ejected or
//! moved then. Nor is a receiver that stopped answering (for a quarter of
//! the peer timeout): that one may be dead or paused, and the peer timeout
//! removes it if it stays silent. (With `after` shorter than that quarter,
//! one that dies just as it falls behind may be moved first; its catch-up
//! then never comes, and the driver names it.)
//!
//! A moved receiver leaves the window at once: the group goes on at its own
//! pace. It is told only once the group's data is out (the sender enters
//! `Closing`): on a network that floods multicast (no IGMP snooping) its
//! link stays full of the group's data until then, and a TCP connection
//! across it would starve. Meanwhile it goes on taking what multicast
//! data it can, unrepaired. Then it is sent a `Move` naming the driver's
//! catch-up port (again whenever its feedback shows it did not hear one),
//! stops taking the session's packets and fetches the rest over TCP; the
//! driver reports the verdict with [`Sender::catch_up_done`]. The
//! farewell (whose `Bye` carries the group's verdict) waits for the moved
//! receivers. The driver bounds the catch-up (a receiver that never
//! connects, or stalls, is failed by it). One that got every byte over
//! multicast after all answers the `Close`, and that is its verdict.

use super::membership::{CTRL_QUEUE_MAX, MemberState};
use super::{Laggard, Sender};
use crate::{Instant, SenderEvent};
use std::time::Duration;

/// How the reason of a receiver ejected as a laggard begins (the
/// simulator's invariants tell such a failure from others by it).
pub const EJECTED_LAGGARD: &str = "ejected as a laggard";

/// The shortest interval between two looks.
const CHECK_MIN: Duration = Duration::from_millis(25);
/// The shortest interval between two `Move`s to one receiver.
const MOVE_AGAIN: Duration = Duration::from_millis(20);

impl Sender {
    /// Arms the first look when the data phase starts.
    pub(super) fn start_laggard_checks(&mut self, now: Instant) {
        self.laggard_check = (self.config.laggard.after()).map(|a| now + (a / 4).max(CHECK_MIN));
    }

    /// Marks the receivers far behind the group's median, and ejects or
    /// moves those that have been so for `after`.
    pub(super) fn check_laggards(&mut self, now: Instant) {
        let Some(after) = self.config.laggard.after() else {
            self.laggard_check = None;
            return;
        };
        self.laggard_check = Some(now + (after / 4).max(CHECK_MIN));
        let mut points: Vec<u32> = (self.members.list.iter())
            .filter(|m| m.in_data())
            .map(|m| m.cumulative)
            .collect();
        if points.len() < 2 {
            return;
        }
        let mid = points.len() / 2;
        let median = *points.select_nth_unstable(mid).1;
        let far = (self.config.window / 2).max(1);
        // A receiver that stopped answering is the peer timeout's to remove
        // (it may be dead, or only paused): a laggard is slow but talks.
        let silent = self.config.peer_timeout / 4;
        let mut lagging = Vec::new();
        for (i, m) in self.members.list.iter_mut().enumerate() {
            if !m.in_data() || m.cumulative.saturating_add(far) > median {
                m.lagging_since = None;
                continue;
            }
            let since = *m.lagging_since.get_or_insert(now);
            // Talking: heard within a quarter of the peer timeout. (Not
            // within `after`: a receiver slow to store answers in bursts,
            // one per batch it took from its socket, half a second apart
            // and more.)
            let talking = now.saturating_since(m.last_heard) <= silent;
            if talking && now.saturating_since(since) >= after {
                lagging.push((i, m.cumulative, since));
            }
        }
        let changed = !lagging.is_empty();
        for (i, held, since) in lagging {
            let how_far = format!(
                "at least {far} packets behind the group's median receiver for {:.1} s (it \
                 held {held} of {} packets, the median {median})",
                now.saturating_since(since).as_secs_f64(),
                self.packets
            );
            match self.config.laggard {
                Laggard::Tcp { port, .. } if port != 0 => {
                    let reason = format!("moved to a TCP catch-up (--laggard tcp): {how_far}");
                    self.move_member(now, i, held, reason);
                }
                Laggard::Tcp { .. } => {
                    let reason = format!(
                        "{EJECTED_LAGGARD} (--laggard tcp without a catch-up port): {how_far}"
                    );
                    self.fail_member(now, i, reason);
                }
                _ => {
                    let reason = format!("{EJECTED_LAGGARD} (--laggard eject): {how_far}");
                    self.fail_member(now, i, reason);
                }
            }
        }
        if changed {
            self.after_member_change(now);
        }
    }

    /// Takes receiver `i` (holding `held` packets) out of the multicast
    /// data and sends it a `Move`.
    fn move_member(&mut self, now: Instant, i: usize, held: u32, reason: String) {
        let from = (u64::from(held) * self.payload_size as u64).min(self.object.size);
        // Out of the window, as a failed member is, for every policy.
        self.policy.on_member_failed();
        self.progress_at = now;
        let m = &mut self.members.list[i];
        m.state = MemberState::Moved;
        m.caught_up_from = Some(from);
        m.lagging_since = None;
        self.events.push_back(SenderEvent::Moved {
            rank: i as u16,
            name: m.name.clone(),
            addr: m.addr,
            from,
            reason,
        });
        if self.phase != super::Phase::Sending {
            self.queue_move(now, i);
        }
    }

    /// The group's data is out: every moved receiver is told where to
    /// catch up.
    pub(super) fn send_moves(&mut self, now: Instant) {
        for i in 0..self.members.list.len() {
            if self.members.list[i].state == MemberState::Moved {
                self.queue_move(now, i);
            }
        }
    }

    /// Queues a `Move` to receiver `i` (at most one per [`MOVE_AGAIN`]).
    fn queue_move(&mut self, now: Instant, i: usize) {
        let m = &mut self.members.list[i];
        if m.move_sent
            .is_some_and(|t| now.saturating_since(t) < MOVE_AGAIN)
            || self.members.moves_owed.len() >= CTRL_QUEUE_MAX
        {
            return;
        }
        m.move_sent = Some(now);
        self.members.moves_owed.push_back(i as u16);
    }

    /// Feedback from a moved receiver: once the group's data is out, it
    /// did not hear its `Move` (or it crossed on the way): another goes.
    pub(super) fn on_moved_feedback(&mut self, now: Instant, i: usize) {
        self.members.list[i].last_heard = now;
        if self.phase != super::Phase::Sending {
            self.queue_move(now, i);
        }
    }

    /// The index of the moved receiver of `rank` at `from`, if it is one.
    pub(super) fn moved_member(&self, rank: u16, from: std::net::SocketAddr) -> Option<usize> {
        let i = usize::from(rank);
        let m = self.members.list.get(i)?;
        (m.state == MemberState::Moved && m.addr == from).then_some(i)
    }

    /// Whether any receiver is still catching up over TCP.
    pub(super) fn any_moved(&self) -> bool {
        (self.members.list.iter()).any(|m| m.state == MemberState::Moved)
    }

    /// The driver's verdict on the TCP catch-up of the receiver of `rank`
    /// (moved by [`Laggard::Tcp`], announced with [`SenderEvent::Moved`]):
    /// `Ok` once it confirmed a copy whose hash is the object's, or why not.
    /// Anything else (a rank not moved, a second verdict) is ignored.
    pub fn catch_up_done(&mut self, now: Instant, rank: u16, verdict: Result<(), String>) {
        let i = usize::from(rank);
        if self
            .members
            .list
            .get(i)
            .is_none_or(|m| m.state != MemberState::Moved)
        {
            return;
        }
        match verdict {
            Ok(()) => {
                let m = &mut self.members.list[i];
                m.state = MemberState::Verified;
                m.cumulative = self.packets;
                self.progress_at = now;
                self.events.push_back(SenderEvent::Verified { rank });
            }
            Err(why) => {
                self.fail_member(now, i, format!("its TCP catch-up failed: {why}"));
            }
        }
        self.after_member_change(now);
        self.arm_timers();
    }
}
