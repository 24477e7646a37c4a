//! The progress watchdog ([`crate::SenderConfig::stall_timeout`]): while
//! sending, or closing once the hash is known, a session in which nothing
//! moved for that long is aborted with a reason that says where it stood.

use super::membership::MemberState;
use super::pacing::Mode;
use super::{Phase, Sender};
use crate::Instant;
use std::fmt::Write as _;

impl Sender {
    /// When the progress watchdog fires: while sending, and while closing
    /// once the `Close` could go (before it, the sender waits for its own
    /// hashing, which is no stall).
    pub(super) fn stall_deadline(&self) -> Option<Instant> {
        let watched = match self.phase {
            Phase::Sending => true,
            // Waiting only for receivers catching up over TCP: the driver
            // bounds those.
            Phase::Closing => {
                self.object.hash.is_some()
                    && (self.members.list.iter()).any(super::membership::Member::in_data)
            }
            _ => false,
        };
        watched.then(|| self.progress_at + self.config.stall_timeout())
    }

    /// What the watchdog says when it ends the session: where the window
    /// stands, who holds it back, and what the pacing and timers were doing.
    pub(super) fn stall_report(&self, now: Instant) -> String {
        let secs = now.saturating_since(self.progress_at).as_secs_f64();
        let mut msg = format!("no progress for {secs:.1} s (stall timeout) ");
        if self.phase == Phase::Sending {
            let _ = write!(
                msg,
                "while sending: {} of {} packets acknowledged by every receiver, {} sent, \
                 {} retransmission timeouts, RTO {} ms",
                self.window.base,
                self.packets,
                self.window.high,
                self.stats.timeouts,
                self.rto.as_millis()
            );
            let behind: Vec<String> = self
                .members
                .list
                .iter()
                .enumerate()
                .filter(|(_, m)| m.in_data() && m.cumulative == self.window.base)
                .take(8)
                .map(|(rank, m)| format!("rank {rank} {:?}", m.name))
                .collect();
            if !behind.is_empty() {
                let _ = write!(msg, "; holding the window back: {}", behind.join(", "));
            }
            if self.available < self.object.size {
                let _ = write!(
                    msg,
                    "; the streamed source holds {} of {} bytes",
                    self.available, self.object.size
                );
            }
        } else {
            msg.push_str("while closing: waiting for ");
            let waiting: Vec<String> = self
                .members
                .list
                .iter()
                .enumerate()
                .filter(|(_, m)| m.state == MemberState::Accepted)
                .take(8)
                .map(|(rank, m)| format!("rank {rank} {:?}", m.name))
                .collect();
            let _ = write!(msg, "{} to confirm", waiting.join(", "));
        }
        match &self.pacing.mode {
            Mode::Off => {}
            Mode::Fixed(_) => {
                let _ = write!(msg, "; paced at a fixed rate");
            }
            Mode::Find(f) => {
                let _ = write!(
                    msg,
                    "; paced at {:.1} Mbit/s, the rate found {:.1} Mbit/s ({:?})",
                    f.pace_bits_per_s() as f64 / 1e6,
                    f.found_bits_per_s() as f64 / 1e6,
                    f.state()
                );
            }
            Mode::Hunt(c) => {
                let _ = write!(
                    msg,
                    "; Hunt's rate {:.0} packets/s (spacing {:.3} ms, {:?}, {} back-offs)",
                    c.rate_pps(),
                    c.spacing().as_secs_f64() * 1e3,
                    c.state(),
                    c.stats().backoffs
                );
            }
        }
        msg
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_pair::{HASH, Pair};
    use crate::SenderConfig;
    use std::time::Duration;

    #[test]
    fn a_session_that_stops_moving_ends_naming_the_stall() {
        // Paced at 1 kbit/s: after the pacer's first bucket the window's
        // base cannot move (nak-poll polls only the last packet), while the
        // receiver stays alive and nothing times out.
        let config = SenderConfig {
            receivers: 1,
            rate_bits_per_s: Some(1_000),
            stall_timeout: Some(Duration::from_secs(10)),
            ..SenderConfig::default()
        };
        let mut p = Pair::with_config(200_000, Some(HASH), config);
        let until = p.at(60);
        p.run_until(until);
        assert!(p.sender.is_finished(), "the watchdog ended the session");
        assert!(p.now < p.at(11), "ended at {:?}", p.now);
        let error = p
            .sender
            .outcome()
            .and_then(|o| o.error.clone())
            .unwrap_or_default();
        assert!(error.contains("no progress for 10.0 s"), "{error}");
        assert!(error.contains("while sending: 0 of 139 packets"), "{error}");
        assert!(
            error.contains("holding the window back: rank 0 \"r\""),
            "{error}"
        );
        assert!(error.contains("paced at a fixed rate"), "{error}");
        // The receiver hears the reason in the Bye.
        let failure = p.receiver_failure.unwrap_or_default();
        assert!(failure.contains("no progress for 10.0 s"), "{failure}");
    }
}
