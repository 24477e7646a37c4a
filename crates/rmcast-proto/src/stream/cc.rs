//! PRMP's congestion control: one TCP-like congestion window for the group.

/// Whether the group congestion window limits sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CongestionControl {
    /// Only the send window and the receivers' windows limit (a LAN).
    #[default]
    Off,
    /// Slow start, additive increase per fully-acknowledged packet, collapse
    /// to one packet on the first NACK of a packet (the paper's rule).
    TcpLike,
}

/// The group congestion window in packets.
///
/// Grows by one packet per fully-acknowledged packet below `ssthresh` (slow
/// start: doubling per round trip), then by one packet per window's worth of
/// fully-acknowledged packets (additive increase). The first NACK of a packet
/// is the group's equivalent of a TCP timeout: `ssthresh` becomes half the
/// window and the window collapses to 1. NACKs of packets sent before the
/// last collapse belong to the same loss episode and do not collapse again
/// (as NewReno's recovery point), so one burst costs one collapse.
#[derive(Clone, Debug)]
pub struct CongestionWindow {
    cwnd_packets: u32,
    ssthresh_packets: u32,
    max_packets: u32,
    /// Fully-acknowledged packets counted toward the next additive step.
    acked_in_step: u32,
    /// Transmission number at the last collapse: packets first sent before
    /// it were in flight when the collapse happened.
    recover_at: u64,
    collapses: u64,
}

impl CongestionWindow {
    /// A window starting at one packet, growing to at most `max_packets`.
    #[must_use]
    pub fn new(max_packets: u32) -> Self {
        Self {
            cwnd_packets: 1,
            ssthresh_packets: max_packets.max(2),
            max_packets: max_packets.max(1),
            acked_in_step: 0,
            recover_at: 0,
            collapses: 0,
        }
    }

    /// The window in packets.
    #[must_use]
    pub fn cwnd_packets(&self) -> u32 {
        self.cwnd_packets
    }

    /// The slow-start threshold in packets.
    #[must_use]
    pub fn ssthresh_packets(&self) -> u32 {
        self.ssthresh_packets
    }

    /// How many times the window collapsed.
    #[must_use]
    pub fn collapses(&self) -> u64 {
        self.collapses
    }

    /// `n` packets became fully acknowledged (every live receiver holds them).
    pub fn on_fully_acked(&mut self, n: u32) {
        for _ in 0..n {
            if self.cwnd_packets < self.ssthresh_packets {
                self.cwnd_packets += 1;
            } else {
                self.acked_in_step += 1;
                if self.acked_in_step >= self.cwnd_packets {
                    self.acked_in_step = 0;
                    self.cwnd_packets += 1;
                }
            }
            self.cwnd_packets = self.cwnd_packets.min(self.max_packets);
        }
    }

    /// A packet was NACKed for the first time; `first_sent_no` is the
    /// transmission number of its first transmission, `now_sent_no` the
    /// number of transmissions so far.
    pub fn on_first_nack(&mut self, first_sent_no: u64, now_sent_no: u64) {
        if first_sent_no <= self.recover_at && self.collapses > 0 {
            return;
        }
        self.ssthresh_packets = (self.cwnd_packets / 2).max(2);
        self.cwnd_packets = 1;
        self.acked_in_step = 0;
        self.recover_at = now_sent_no;
        self.collapses += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_then_additive_increase() {
        let mut w = CongestionWindow::new(1000);
        w.on_fully_acked(15);
        assert_eq!(w.cwnd_packets(), 16);
        w.on_first_nack(1, 20);
        assert_eq!((w.cwnd_packets(), w.ssthresh_packets()), (1, 8));
        w.on_fully_acked(7);
        assert_eq!(w.cwnd_packets(), 8);
        // Additive: 8 more packets for +1, then 9 for the next.
        w.on_fully_acked(7);
        assert_eq!(w.cwnd_packets(), 8);
        w.on_fully_acked(1);
        assert_eq!(w.cwnd_packets(), 9);
        w.on_fully_acked(9);
        assert_eq!(w.cwnd_packets(), 10);
    }

    #[test]
    fn one_loss_episode_collapses_once() {
        let mut w = CongestionWindow::new(100);
        w.on_fully_acked(31);
        w.on_first_nack(40, 64);
        w.on_fully_acked(3);
        assert_eq!(w.cwnd_packets(), 4);
        // Another packet of the same flight: no second collapse.
        w.on_first_nack(50, 70);
        assert_eq!((w.cwnd_packets(), w.collapses()), (4, 1));
        // A packet sent after the collapse: a new episode.
        w.on_first_nack(65, 80);
        assert_eq!((w.cwnd_packets(), w.collapses()), (1, 2));
    }

    #[test]
    fn window_never_exceeds_its_maximum() {
        let mut w = CongestionWindow::new(5);
        w.on_fully_acked(100);
        assert_eq!(w.cwnd_packets(), 5);
    }
}
