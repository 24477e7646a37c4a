//! The end of a session: the receivers' `Complete`s checked against the
//! object's hash, the farewell (`Bye`s), and the outcome.

use super::membership::MemberState;
use super::{Phase, Sender};
use crate::{Instant, MemberOutcome, Outcome, SenderEvent};
use rmcast_wire::{Complete, HASH_LEN, Status};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

/// Byes sent at the end (multicast, unacknowledged, so repeated).
const BYE_COUNT: u8 = 3;
/// Gap between Byes. Every receiver has confirmed by then and nothing else
/// is in flight, so the copies guard against a lost datagram, not a burst;
/// the sender's exit waits `(BYE_COUNT - 1) × BYE_SPACING` for them (10 ms
/// spacing cost 20 ms, 1.2 % of a 20 MB transfer at 100 Mbit/s). A receiver
/// that hears none finishes anyway once the sender falls silent.
pub(super) const BYE_SPACING: Duration = Duration::from_millis(2);

impl Sender {
    /// A receiver's verdict on its copy.
    pub(super) fn on_complete(
        &mut self,
        now: Instant,
        rank: u16,
        from: SocketAddr,
        c: &Complete<'_>,
    ) {
        let Some(i) = self.member_index(rank, from) else {
            return;
        };
        self.members.list[i].last_heard = now;
        self.round.heard(now);
        if self.phase == Phase::Sending {
            // A Complete while sending answers the poll of a Close that
            // went with the data (`close_with_data`), as an ack would.
            self.window.answer_heard(now);
        }
        // A receiver moved to a TCP catch-up just as its last bytes came
        // over multicast answers the Close: that is its verdict.
        if !self.members.list[i].in_data() && self.members.list[i].state != MemberState::Moved {
            return;
        }
        match (c.status, self.object.hash) {
            (Status::Ok, Some(hash)) if c.hash == hash => {
                self.members.list[i].state = MemberState::Verified;
                self.progress_at = now;
                self.members.list[i].cumulative = self.packets;
                self.events.push_back(SenderEvent::Verified { rank });
            }
            // The receiver checked against the hash in our Close,
            // so this cannot happen unless something is broken:
            // do not count a copy we know to differ as verified.
            (Status::Ok, Some(hash)) => self.fail_member(
                now,
                i,
                format!(
                    "reported a verified copy whose hash ({}…) differs from the \
                     object's ({}…)",
                    short_hex(&c.hash),
                    short_hex(&hash)
                ),
            ),
            // No Close has asked yet (it needs the hash): nothing
            // verified against it. The receiver answers the Close.
            (Status::Ok, None) => return,
            _ => {
                // A relay's verdict speaks for the receivers behind it: its
                // report of them (`Behind`) is not added.
                self.members.list[i].behind = None;
                self.fail_member(
                    now,
                    i,
                    format!("could not verify the object ({:?}): {}", c.status, c.text),
                );
            }
        }
        self.after_member_change(now);
    }

    pub(super) fn enter_farewell(&mut self, now: Instant) {
        self.enter(
            Phase::Farewell {
                byes_left: BYE_COUNT,
            },
            now,
        );
        self.control_due = true;
        self.members.welcomes.clear();
        self.members.batch.clear();
        self.members.batch_due = None;
        self.members.byes_owed.clear();
    }

    pub(super) fn finish(&mut self) {
        self.phase = Phase::Done;
        let members: Vec<MemberOutcome> = self
            .members
            .list
            .iter()
            .enumerate()
            .map(|(rank, m)| MemberOutcome {
                rank: rank as u16,
                name: m.name.clone(),
                addr: m.addr,
                verified: m.state == MemberState::Verified,
                reason: m.reason.clone(),
                caught_up_from: m.caught_up_from,
            })
            .collect();
        let ok = self.error.is_none()
            && self.short.is_none()
            && members.len() == usize::from(self.config.receivers)
            && members.iter().all(|m| m.verified);
        let missing = self
            .short
            .map_or(0, |wanted| wanted.saturating_sub(self.config.receivers));
        self.outcome = Some(Outcome {
            ok,
            error: self.error.clone(),
            members,
            missing,
        });
        self.events.push_back(SenderEvent::Finished);
    }
}

/// The first 8 bytes of a hash in hex, for reasons a human reads.
fn short_hex(hash: &[u8; HASH_LEN]) -> String {
    hash[..8].iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    //! The hash arrives late: `Close` waits for it, nothing busy-loops or
    //! times out meanwhile, and a `Complete` with another hash fails.

    use super::super::test_pair::{HASH, Pair, SIZE};
    use crate::{HASH_LEN, Kind, SenderConfig, SenderEvent};
    use std::time::Duration;

    #[test]
    fn no_close_before_the_hash_and_one_at_once_after_it() {
        let mut p = Pair::new(None);
        // Well past peer_timeout (5 s) and the receiver's sender_timeout
        // (10 s): nobody may be timed out for a Close never sent.
        let until = p.at(15);
        p.run_until(until);
        assert_eq!(
            p.sender.acked_bytes(),
            SIZE as u64,
            "every byte acknowledged"
        );
        assert!(!p.sent.contains(&Kind::Close), "{:?}", p.sent);
        assert!(p.sender.stats().keepalives > 0, "receivers kept hearing us");
        assert!(
            !p.sender_events
                .iter()
                .any(|e| matches!(e, SenderEvent::MemberFailed { .. })),
            "{:?}",
            p.sender_events
        );
        assert!(!p.receiver.is_finished(), "the receiver is still waiting");
        // Keepalives back off to rto_max: a handful, not a flood.
        let max = SenderConfig::default().rto_max;
        assert!(p.sender.stats().keepalives <= 15 / max.as_secs().max(1) + 10);

        p.sender.set_object_hash(HASH);
        let before = p.sent.len();
        p.exchange();
        assert_eq!(
            p.sent.get(before),
            Some(&Kind::Close),
            "{:?}",
            &p.sent[before..]
        );
        assert_eq!(p.receiver.expected_hash(), Some(HASH));
        let until = p.now + Duration::from_secs(5);
        p.run_until(until);
        let outcome = p.sender.outcome().expect("finished");
        assert!(outcome.ok, "{outcome:?}");
    }

    #[test]
    fn a_hash_set_before_close_is_due_changes_nothing() {
        let mut p = Pair::new(None);
        // Give the hash while the session is still being set up.
        p.exchange();
        p.sender.set_object_hash(HASH);
        let until = p.at(5);
        p.run_until(until);
        assert!(p.sender.outcome().is_some_and(|o| o.ok));
        assert_eq!(p.sender.stats().keepalives, 0);
        assert_eq!(p.sent.iter().filter(|k| **k == Kind::Close).count(), 1);
        // Later calls do not change the hash announced.
        p.sender.set_object_hash([0; HASH_LEN]);
        assert_eq!(p.sender.object_hash(), Some(HASH));
    }

    #[test]
    fn an_empty_object_waits_for_its_hash_without_spinning() {
        let mut p = Pair::with_size(0, None);
        let until = p.at(2);
        p.run_until(until);
        assert!(!p.sent.contains(&Kind::Close));
        assert_eq!(p.sender.stats().keepalives, 0, "no data packet to repeat");
        p.sender.set_object_hash(HASH);
        let until = p.at(4);
        p.run_until(until);
        assert!(p.sender.outcome().is_some_and(|o| o.ok));
    }

    #[test]
    fn a_member_whose_complete_hash_differs_fails_naming_both() {
        let mut p = Pair::new(Some(HASH));
        p.report_hash = Some([0x11; HASH_LEN]);
        let until = p.at(5);
        p.run_until(until);
        let outcome = p.sender.outcome().expect("finished");
        assert!(!outcome.ok);
        let reason = outcome.members[0].reason.as_deref().unwrap_or("");
        assert!(reason.contains("differs"), "{reason}");
        assert!(reason.contains("1111111111111111"), "{reason}");
        assert!(reason.contains("4242424242424242"), "{reason}");
    }
}
