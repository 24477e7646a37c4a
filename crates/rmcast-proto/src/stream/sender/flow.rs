//! Flow control by the receivers' advertised windows (a data packet leaves
//! only below the smallest right edge of a live member), zero-window probes
//! at a growing spacing, and the congestion window's gate on new data.

use super::StreamSender;
use super::member::{Member, MemberStatus};
use crate::Instant;
use crate::stream::cc::CongestionControl;
use rmcast_wire::Seq;
use std::time::Duration;

impl StreamSender {
    /// The exclusive right edge of the smallest advertised window: no data
    /// packet at or beyond it is ever sent.
    #[must_use]
    pub fn flow_edge(&self) -> Option<Seq> {
        self.members
            .iter()
            .filter(|m| m.status == MemberStatus::Live)
            .map(|m| m.edge)
            .min_by(|a, b| a.cmp(b))
    }

    pub(super) fn may_send_new(&self) -> bool {
        if self.buf.next_tx == self.buf.tail {
            return false;
        }
        if self.flow_edge().is_none_or(|edge| self.buf.next_tx >= edge) {
            return false;
        }
        if self.config.congestion == CongestionControl::TcpLike
            && self.in_flight_packets() >= self.cwnd.cwnd_packets()
        {
            return false;
        }
        true
    }
}

impl Member {
    /// Takes the window edge a response advertised (edges only grow) and
    /// spaces the next zero-window probe: back to one `epoch` when the
    /// window opened, doubled (up to `probe_max`) while it stays closed.
    pub(super) fn on_window(
        &mut self,
        now: Instant,
        window_end: Seq,
        next_tx: Seq,
        epoch: Duration,
        probe_max: Duration,
    ) {
        let old_edge = self.edge;
        if window_end > self.edge {
            self.edge = window_end;
        }
        let blocked_before = old_edge <= next_tx;
        if self.edge > old_edge {
            self.probe_gap = epoch;
        } else if blocked_before {
            self.probe_gap = (self.probe_gap * 2).min(probe_max);
        }
        self.next_probe = now + self.probe_gap;
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;

    #[test]
    fn a_closed_window_doubles_the_probe_gap_up_to_probe_max_and_an_open_one_resets_it() {
        let s = joined(1, 8);
        let mut m = s.members.into_iter().next().unwrap();
        let epoch = Duration::from_millis(5);
        let max = Duration::from_millis(30);
        let edge = m.edge;
        // Everything up to the edge was sent: the window is closed.
        let mut gaps = Vec::new();
        for k in 0..5 {
            m.on_window(ms(10 * k), edge, edge, epoch, max);
            gaps.push(m.probe_gap.as_millis());
        }
        assert_eq!(gaps, [10, 20, 30, 30, 30]);
        assert_eq!(m.next_probe, ms(40) + max);
        m.on_window(ms(50), edge.add(4), edge, epoch, max);
        assert_eq!((m.edge, m.probe_gap), (edge.add(4), epoch));
        // An edge never moves back.
        m.on_window(ms(60), edge, edge, epoch, max);
        assert_eq!(m.edge, edge.add(4));
    }

    #[test]
    fn no_data_leaves_at_or_beyond_the_smallest_advertised_edge() {
        let mut s = joined(2, 8);
        s.members[1].edge = ISN.add(3);
        assert_eq!(s.flow_edge(), Some(ISN.add(3)));
        for _ in 0..6 {
            s.send(&[1u8; 100]).unwrap();
        }
        let data = drain(&mut s, ms(2))
            .into_iter()
            .filter(|o| o.1 == rmcast_wire::stream::StreamKind::Data)
            .count();
        assert_eq!(data, 3);
        assert!(!s.may_send_new());
        // Member 1 gone: the edge is member 0's own.
        s.members[1].status = MemberStatus::Gone;
        assert_eq!(s.flow_edge(), Some(ISN.add(8)));
        assert!(s.may_send_new());
    }

    #[test]
    fn the_congestion_window_gates_new_data_when_tcp_like() {
        let mut config = invite_config(1);
        config.congestion = CongestionControl::TcpLike;
        let mut s = sender(config);
        drain(&mut s, Instant::ZERO);
        accept(&mut s, 0, ms(1), 64);
        for _ in 0..4 {
            s.send(&[1u8; 100]).unwrap();
        }
        let out = drain(&mut s, ms(2));
        let data = out
            .iter()
            .filter(|o| o.1 == rmcast_wire::stream::StreamKind::Data)
            .count();
        assert_eq!(data, 1, "cwnd starts at one packet");
    }

    /// Drives a 2-member stream for `until`: member 0 reads everything at
    /// once; member 1 answers every poll but reads only when `reads(now)`.
    /// Returns the events.
    fn two_readers(
        stall: Option<Duration>,
        until: Instant,
        reads: impl Fn(Instant) -> bool,
    ) -> (StreamSender, Vec<super::super::StreamEvent>) {
        let mut cfg = invite_config(2);
        cfg.stall_timeout = stall;
        let mut s = sender(cfg);
        drain(&mut s, Instant::ZERO);
        for i in 0..2 {
            accept(&mut s, i, ms(1), 8);
        }
        drain(&mut s, ms(1));
        let mut ev = events(&mut s);
        let mut queued = 0;
        let mut now = ms(1);
        for _ in 0..200_000 {
            while queued < 2000 && s.send(&[7u8; 100]).is_ok() {
                queued += 1;
            }
            drain(&mut s, now);
            for i in 0..2 {
                if s.members[i].status != MemberStatus::Live
                    || !matches!(
                        s.members[i].poll,
                        super::super::member::PollState::Outstanding { .. }
                    )
                {
                    continue;
                }
                let cum = s.buf.next_tx;
                let window = if i == 0 || reads(now) { 8 } else { 0 };
                respond(&mut s, i, now, cum, window, &[], false);
                drain(&mut s, now);
            }
            ev.extend(events(&mut s));
            let Some(t) = s.poll_timeout() else { break };
            if t > until {
                break;
            }
            now = t;
            s.handle_timeout(now);
        }
        (s, ev)
    }

    #[test]
    fn a_reader_that_stops_reading_is_removed_after_the_stall_timeout_and_the_rest_go_on() {
        use super::super::{RemoveReason, StreamEvent};
        let stall = Duration::from_millis(1500);
        let (s, ev) = two_readers(Some(stall), ms(5000), |_| false);
        let removed: Vec<_> = (ev.iter())
            .filter(|e| matches!(e, StreamEvent::Removed { .. }))
            .collect();
        assert_eq!(
            removed,
            [&StreamEvent::Removed {
                id: super::super::MemberId(1),
                reason: RemoveReason::Stalled
            }],
            "{ev:?}"
        );
        assert_eq!(s.members[0].status, MemberStatus::Live);
        // After it, the reader that reads got far past its window of 8.
        assert!(s.members[0].cum > ISN.add(100), "{:?}", s.members[0].cum);
        // Without a stall timeout it holds the group for ever (TCP's rule).
        let (s, ev) = two_readers(None, ms(5000), |_| false);
        assert!(!ev.iter().any(|e| matches!(e, StreamEvent::Removed { .. })));
        assert!(s.members[0].cum <= ISN.add(8));
    }

    #[test]
    fn a_slow_reader_that_reads_now_and_then_is_not_removed() {
        use super::super::StreamEvent;
        // Reads for 300 ms of every second (longer than `probe_max`, so a
        // probe finds it reading): its window keeps opening, and each
        // closed spell is shorter than the stall timeout.
        let (s, ev) = two_readers(Some(Duration::from_millis(1500)), ms(6000), |t| {
            t.as_nanos() % 1_000_000_000 < 300_000_000
        });
        assert!(
            !ev.iter().any(|e| matches!(e, StreamEvent::Removed { .. })),
            "{ev:?}"
        );
        assert!(s.members[1].cum > ISN.add(8));
    }
}
