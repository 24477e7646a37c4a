//! Poll planning (implosion control): which live members need a poll, the
//! epoch [`PollPlanner`](crate::stream::PollPlanner) reserves for each
//! answer, and the poll entries a data packet or a standalone `Poll` /
//! `Close` carries.

use super::member::{MemberStatus, PollState};
use super::output::emit;
use super::{Phase, StreamSender};
use crate::stream::StreamTransmit as Transmit;
use crate::stream::ts_us;
use crate::{Dest, Instant};
use rmcast_wire::Seq;
use rmcast_wire::stream::{
    MAX_POLL_ENTRIES, PollBody, PollEntries, PollEntry, PollRequest, StreamBody,
};

impl StreamSender {
    /// Plans a poll for every live member that needs one and has none:
    /// unacknowledged data, a closed window holding back queued data
    /// (probe, spaced by a growing gap), a pending close confirmation, or a
    /// keepalive. The poll's arrival is reserved in the planner and its
    /// send time set back by the member's RTT.
    pub(super) fn plan_polls(&mut self, now: Instant) {
        if matches!(self.phase, Phase::Admitting | Phase::Done) {
            return;
        }
        let closing = self.phase == Phase::Closing;
        for i in 0..self.members.len() {
            let m = &self.members[i];
            if m.status != MemberStatus::Live || m.poll != PollState::Idle {
                continue;
            }
            let unacked = m.cum < self.buf.next_tx;
            let blocked = self.buf.held_back_by(m.edge) && now >= m.next_probe;
            let close = closing && !m.close_confirmed;
            let keepalive = now >= m.last_heard + self.config.keepalive;
            if !(unacked || blocked || close || keepalive) {
                continue;
            }
            let srtt = m.rtt.srtt();
            let Some((epoch, arrival)) = self.planner.reserve(now, now + srtt) else {
                return;
            };
            let send_at = arrival.saturating_since(Instant::ZERO).saturating_sub(srtt);
            let send_at = Instant::from_nanos(send_at.as_nanos() as u64).max(now);
            self.members[i].poll = PollState::Planned { send_at, epoch };
        }
    }

    /// Moves up to [`MAX_POLL_ENTRIES`] planned polls due by `until` into the
    /// entry buffer, marking them outstanding; `high` is one past the
    /// highest seq the carrying packet lets the receiver know of.
    pub(super) fn collect_polls(&mut self, now: Instant, until: Instant, high: Seq) -> usize {
        let mut n = 0;
        let id = self.poll_ids.wrapping_add(1);
        for i in 0..self.members.len() {
            if n == MAX_POLL_ENTRIES {
                break;
            }
            let m = &mut self.members[i];
            let PollState::Planned { send_at, .. } = m.poll else {
                continue;
            };
            if m.status != MemberStatus::Live || send_at > until {
                continue;
            }
            let delay = send_at.saturating_since(now);
            let backoff = 1u32 << m.unanswered.min(16);
            let rto = (m.rtt.rto(self.config.rto_min, self.config.rto_max) * backoff)
                .min(self.config.rto_max);
            m.poll = PollState::Outstanding {
                poll_id: id,
                deadline: now + delay + rto,
                mark: self.buf.transmissions,
                high,
            };
            self.entries[n] = PollEntry {
                rank: i as u16,
                delay_us: delay.as_micros().min(u32::MAX as u128) as u32,
            };
            self.entry_members[n] = i as u16;
            n += 1;
        }
        if n > 0 {
            self.poll_ids = id;
            self.stats.polls += n as u64;
        }
        n
    }

    /// Encodes the first `n` collected entries; the request borrows them.
    pub(super) fn encode_entries(&mut self, now: Instant, n: usize) {
        if n > 0 {
            self.entries_len = PollEntries::write(&self.entries[..n], &mut self.entries_raw)
                .expect("at most MAX_POLL_ENTRIES entries fit the buffer");
            self.poll_ts_us = ts_us(now);
        }
    }

    pub(super) fn encoded_poll(&self, n: usize) -> Option<PollRequest<'_>> {
        if n == 0 {
            return None;
        }
        Some(PollRequest {
            poll_id: self.poll_ids,
            ts_us: self.poll_ts_us,
            entries: PollEntries::from_raw(&self.entries_raw[..self.entries_len]).ok()?,
        })
    }

    pub(super) fn poll_standalone(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let n = self.collect_polls(now, now, self.buf.next_tx);
        if n == 0 {
            return None;
        }
        self.stats.standalone_polls += 1;
        let dest = if n == 1 {
            Dest::Unicast(self.members[usize::from(self.entry_members[0])].addr)
        } else {
            Dest::Group
        };
        self.encode_entries(now, n);
        let poll = self.encoded_poll(n);
        let b = PollBody {
            next_seq: self.buf.next_tx,
            poll,
        };
        let body = if self.phase == Phase::Closing {
            StreamBody::Close(b)
        } else {
            StreamBody::Poll(b)
        };
        emit(dest, self.header(), body, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use rmcast_wire::stream::StreamKind;

    #[test]
    fn new_data_plans_one_poll_per_member_and_one_datagram_carries_them_all() {
        let mut s = joined(3, 64);
        s.send(&[1u8; 100]).unwrap();
        drain(&mut s, ms(1));
        for m in &s.members {
            assert!(matches!(
                m.poll,
                PollState::Planned { .. } | PollState::Outstanding { .. }
            ));
        }
        until_polled(&mut s, &[0, 1, 2]);
        assert_eq!(s.stats().polls, 3);
        let carriers = s.stats().standalone_polls + u64::from(s.stats().piggybacked_polls > 0);
        assert_eq!(carriers, 1, "{:?}", s.stats());
    }

    #[test]
    fn a_lone_poll_goes_unicast() {
        let mut s = joined(1, 64);
        s.send(&[1u8; 100]).unwrap();
        drain(&mut s, ms(1));
        let t = match s.members[0].poll {
            PollState::Planned { send_at, .. } => send_at,
            other => panic!("{other:?}"),
        };
        s.handle_timeout(t);
        let out = drain(&mut s, t);
        assert_eq!(kinds(&out), [StreamKind::Poll]);
        assert_eq!(out[0].0, Dest::Unicast(addr(0)));
    }

    #[test]
    fn the_response_rate_spreads_answers_over_epochs() {
        let mut config = invite_config(3);
        config.response_rate = 200; // one response per 5 ms epoch
        let mut s = sender(config);
        drain(&mut s, Instant::ZERO);
        for i in 0..3 {
            accept(&mut s, i, ms(1), 64);
        }
        s.send(&[1u8; 100]).unwrap();
        drain(&mut s, ms(1));
        let mut epochs: Vec<u64> = s
            .members
            .iter()
            .filter_map(|m| match m.poll {
                PollState::Planned { epoch, .. } => Some(epoch),
                _ => None,
            })
            .collect();
        epochs.dedup();
        assert_eq!(
            epochs.len(),
            3,
            "{:?}",
            s.members.iter().map(|m| m.poll).collect::<Vec<_>>()
        );
    }
}
