//! The send buffer's error control: per-packet slots, acknowledgements and
//! NACKs judged from responses, the choice between one multicast repair
//! and unicast repairs, and freeing what every live member holds.

use super::bits::Bits;
use super::member::{MemberId, MemberStatus, PollState};
use super::{SendError, StreamEvent, StreamSender};
use crate::stream::StreamTransmit as Transmit;
use crate::stream::cc::CongestionControl;
use crate::stream::ts_us;
use crate::{Dest, Instant};
use rmcast_wire::Seq;
use rmcast_wire::stream::Response;
use rmcast_wire::stream::{DATA_FIRST, DATA_LAST};
use std::collections::VecDeque;
use std::time::Duration;

/// Per packet of the send buffer.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Slot {
    pub(super) len: u16,
    pub(super) flags: u8,
    /// Transmission number of the latest transmission (0: never sent).
    pub(super) sent_no: u64,
    pub(super) first_sent_no: u64,
    pub(super) nacked_ever: bool,
    pub(super) lack_count: u16,
    pub(super) first_nack_at: Option<Instant>,
    pub(super) candidate: bool,
    pub(super) repair: Option<RepairMode>,
}

/// How a packet with NACKs is repaired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RepairMode {
    Multicast,
    Unicast,
}

/// The send buffer: packets `base .. tail` in slots by sequence number,
/// preallocated (`send_buffer_packets` × `payload_size` bytes and three
/// bitsets of `send_buffer_packets` × members bits).
#[derive(Debug)]
pub(super) struct SendBuffer {
    /// Oldest packet not yet held by every live member.
    pub(super) base: Seq,
    /// Next packet to transmit for the first time.
    pub(super) next_tx: Seq,
    /// Next sequence number `send` assigns.
    pub(super) tail: Seq,
    pub(super) isn: Seq,
    pub(super) buffer_packets: u32,
    pub(super) payload: Vec<u8>,
    pub(super) slots: Vec<Slot>,
    /// Per slot: members that reported the packet missing since its last transmission.
    pub(super) lack: Bits,
    /// Per slot: members that reported on the packet since its last transmission.
    pub(super) reported: Bits,
    /// Per slot: members still owed a unicast repair.
    pub(super) repair_to: Bits,
    /// Packets with NACKs, not yet decided.
    pub(super) candidates: VecDeque<Seq>,
    /// Packets decided for repair, in order.
    pub(super) repairs: VecDeque<Seq>,
    /// Data transmissions so far (first sends and repairs).
    pub(super) transmissions: u64,
}

impl SendBuffer {
    /// Whether queued data waits behind a member's closed window (its
    /// advertised right `edge` reached): what zero-window probes and the
    /// stall watchdog watch.
    pub(super) fn held_back_by(&self, edge: Seq) -> bool {
        self.tail != self.next_tx && edge <= self.next_tx
    }

    /// An empty buffer of `packets` slots of `payload_size` bytes whose
    /// first packet is `isn`, with room for `members` members' bits.
    pub(super) fn new(isn: Seq, packets: u32, payload_size: u16, members: usize) -> Self {
        let w = packets as usize;
        Self {
            base: isn,
            next_tx: isn,
            tail: isn,
            isn,
            buffer_packets: packets,
            payload: vec![0; w * usize::from(payload_size)],
            slots: vec![Slot::default(); w],
            lack: Bits::new(w, members),
            reported: Bits::new(w, members),
            repair_to: Bits::new(w, members),
            candidates: VecDeque::with_capacity(w),
            repairs: VecDeque::with_capacity(w),
            transmissions: 0,
        }
    }

    /// The slot of packet `s`.
    pub(super) fn slot(&self, s: Seq) -> usize {
        (s.since(self.isn) % self.buffer_packets) as usize
    }

    /// Packets in the buffer (unacknowledged or not yet sent).
    pub(super) fn buffered(&self) -> u32 {
        self.tail.since(self.base)
    }

    /// Queues one message as packets of `p` bytes with first/last flags,
    /// or nothing if they do not all fit.
    pub(super) fn push(&mut self, msg: &[u8], p: usize) -> Result<(), SendError> {
        let packets = msg.len().div_ceil(p).max(1) as u32;
        if self.buffered() + packets > self.buffer_packets {
            return Err(SendError::WouldBlock);
        }
        for i in 0..packets {
            let chunk =
                &msg[(i as usize * p).min(msg.len())..((i as usize + 1) * p).min(msg.len())];
            let w = self.slot(self.tail);
            self.payload[w * p..w * p + chunk.len()].copy_from_slice(chunk);
            let mut flags = 0;
            if i == 0 {
                flags |= DATA_FIRST;
            }
            if i + 1 == packets {
                flags |= DATA_LAST;
            }
            self.slots[w] = Slot {
                len: chunk.len() as u16,
                flags,
                ..Slot::default()
            };
            self.lack.clear_row(w);
            self.reported.clear_row(w);
            self.repair_to.clear_row(w);
            self.tail = self.tail.add(1);
        }
        Ok(())
    }

    /// Room for `members` members' bits in every row.
    pub(super) fn grow_members(&mut self, members: usize) {
        let rows = self.slots.len();
        self.lack.grow(rows, members);
        self.reported.grow(rows, members);
        self.repair_to.grow(rows, members);
    }

    /// Forgets the NACKs gathered for slot `w`.
    pub(super) fn clear_nacks(&mut self, w: usize) {
        let slot = &mut self.slots[w];
        slot.lack_count = 0;
        slot.first_nack_at = None;
        slot.candidate = false;
        self.lack.clear_row(w);
        self.reported.clear_row(w);
    }
}

impl StreamSender {
    /// A live member's answer to a poll (or to a close): its cumulative
    /// point and window, an RTT sample, and a verdict on every packet sent
    /// before the poll went out.
    pub(super) fn on_response(&mut self, now: Instant, i: usize, r: &Response<'_>, close: bool) {
        // A receiver cannot hold what was never sent: a response that says
        // so is hostile or corrupt, counted and ignored.
        if r.cumulative > self.buf.next_tx || r.cumulative < self.buf.isn {
            self.stats.malformed += 1;
            return;
        }
        let m = &mut self.members[i];
        m.last_heard = now;
        if r.cumulative > m.cum {
            m.cum = r.cumulative;
        }
        m.on_window(
            now,
            r.window_end(),
            self.buf.next_tx,
            self.config.epoch,
            self.config.probe_max,
        );
        let PollState::Outstanding {
            poll_id,
            mark,
            high,
            ..
        } = m.poll
        else {
            // A late answer to a poll already given up on: its cumulative
            // point and window still hold, its NACKs may be stale.
            self.advance_base();
            return;
        };
        if poll_id != r.poll_id {
            self.advance_base();
            return;
        }
        m.poll = PollState::Idle;
        let rtt_us = ts_us(now)
            .wrapping_sub(r.echo_ts_us)
            .saturating_sub(r.held_us);
        if rtt_us < 60_000_000 {
            m.rtt.sample(Duration::from_micros(u64::from(rtt_us)));
        }
        m.unanswered = 0;
        if m.suspected {
            m.suspected = false;
            self.events
                .push_back(StreamEvent::Unsuspected(MemberId(i as u16)));
        }
        if close && r.cumulative == self.buf.tail && self.close_requested {
            m.close_confirmed = true;
        }
        // Judge every packet sent before the poll went out: held is an ACK,
        // missing a NACK (a packet resent since then is not judged).
        let mut s = r.cumulative.max(self.buf.base);
        while s < high {
            let w = self.buf.slot(s);
            let slot = self.buf.slots[w];
            if slot.sent_no != 0 && slot.sent_no <= mark {
                self.buf.reported.set(w, i);
                if !r.holds(s) {
                    self.on_nack(now, s, w, i);
                }
            }
            s = s.add(1);
        }
        self.advance_base();
        self.maybe_closed();
    }

    pub(super) fn on_nack(&mut self, now: Instant, s: Seq, w: usize, i: usize) {
        let slot = &mut self.buf.slots[w];
        if let Some(mode) = slot.repair {
            // A repair is already queued; make sure it reaches this member.
            if mode == RepairMode::Unicast {
                self.buf.repair_to.set(w, i);
            }
            return;
        }
        if !self.buf.lack.get(w, i) {
            self.buf.lack.set(w, i);
            slot.lack_count += 1;
        }
        if !slot.nacked_ever {
            slot.nacked_ever = true;
            if self.config.congestion == CongestionControl::TcpLike {
                self.cwnd
                    .on_first_nack(slot.first_sent_no, self.buf.transmissions);
            }
        }
        slot.first_nack_at.get_or_insert(now);
        if !slot.candidate {
            slot.candidate = true;
            self.buf.candidates.push_back(s);
        }
    }

    /// Decides, for each packet with NACKs, whether to repair it now and how:
    /// by multicast once `repair_multicast_min` receivers lack it, otherwise
    /// by unicast to each once every live member reported (or the gathering
    /// time is over).
    pub(super) fn decide_repairs(&mut self, now: Instant) {
        let n = self.buf.candidates.len();
        for _ in 0..n {
            let Some(s) = self.buf.candidates.pop_front() else {
                break;
            };
            if s < self.buf.base {
                continue;
            }
            let w = self.buf.slot(s);
            if self.buf.slots[w].lack_count == 0 {
                self.buf.clear_nacks(w);
                continue;
            }
            let slot = self.buf.slots[w];
            let enough = slot.lack_count >= self.config.repair_multicast_min;
            let timed_out = slot
                .first_nack_at
                .is_some_and(|t| now >= t + self.config.repair_gather);
            let all_reported = self.members.iter().enumerate().all(|(i, m)| {
                m.status != MemberStatus::Live || m.cum > s || self.buf.reported.get(w, i)
            });
            if !(enough || timed_out || all_reported) {
                self.buf.candidates.push_back(s);
                continue;
            }
            if enough {
                self.buf.slots[w].repair = Some(RepairMode::Multicast);
            } else {
                for i in 0..self.members.len() {
                    if self.buf.lack.get(w, i) {
                        self.buf.repair_to.set(w, i);
                    }
                }
                self.buf.slots[w].repair = Some(RepairMode::Unicast);
            }
            self.buf.clear_nacks(w);
            self.buf.repairs.push_back(s);
        }
    }

    pub(super) fn advance_base(&mut self) {
        let Some(min) = self
            .members
            .iter()
            .filter(|m| m.status == MemberStatus::Live)
            .map(|m| m.cum)
            .min_by(|a, b| a.cmp(b))
        else {
            return;
        };
        if min > self.buf.base {
            let n = min.since(self.buf.base);
            if self.config.congestion == CongestionControl::TcpLike {
                self.cwnd.on_fully_acked(n);
            }
            // Everyone holds these: forget their repair state, so a stale
            // queue entry can never touch the slot's next packet.
            let mut s = self.buf.base;
            while s < min {
                let w = self.buf.slot(s);
                self.buf.slots[w].repair = None;
                self.buf.clear_nacks(w);
                self.buf.repair_to.clear_row(w);
                s = s.add(1);
            }
            self.buf.base = min;
        }
    }

    pub(super) fn repair_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(&s) = self.buf.repairs.front() {
            let w = self.buf.slot(s);
            if s < self.buf.base {
                // Freed (and its slot maybe reused) in `advance_base`.
                self.buf.repairs.pop_front();
                continue;
            }
            match self.buf.slots[w].repair {
                Some(RepairMode::Multicast) => {
                    self.buf.repairs.pop_front();
                    self.buf.slots[w].repair = None;
                    self.stats.multicast_repairs += 1;
                    return self.data_transmit(now, s, Dest::Group, buf);
                }
                Some(RepairMode::Unicast) => {
                    let Some(i) = self.buf.repair_to.first_set(w) else {
                        self.buf.repairs.pop_front();
                        self.buf.slots[w].repair = None;
                        continue;
                    };
                    self.buf.repair_to.clear(w, i);
                    let m = &self.members[i];
                    let cum = m.cum;
                    if m.status != MemberStatus::Live || cum > s {
                        continue;
                    }
                    self.stats.unicast_repairs += 1;
                    return self.data_transmit(now, s, Dest::Unicast(m.addr), buf);
                }
                None => {
                    self.buf.repairs.pop_front();
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use rmcast_wire::stream::StreamKind;

    /// `members` joined, three one-packet messages sent, everyone polled.
    fn three_packets_polled(members: usize) -> (StreamSender, Instant) {
        let mut s = joined(members, 64);
        for _ in 0..3 {
            s.send(&[9u8; 100]).unwrap();
        }
        drain(&mut s, ms(1));
        let who: Vec<usize> = (0..members).collect();
        let now = until_polled(&mut s, &who);
        (s, now)
    }

    fn data(out: &[(Dest, StreamKind, Vec<u8>)]) -> Vec<Dest> {
        out.iter()
            .filter(|o| o.1 == StreamKind::Data)
            .map(|o| o.0)
            .collect()
    }

    #[test]
    fn a_packet_one_member_lacks_is_resent_to_it_alone_once_everyone_reported() {
        let (mut s, now) = three_packets_polled(2);
        // Member 0 holds the 2nd and 3rd packets, not the 1st.
        respond(&mut s, 0, now, ISN, 63, &[0b11], false);
        assert!(data(&drain(&mut s, now)).is_empty(), "waits for member 1");
        respond(&mut s, 1, now, ISN.add(3), 61, &[], false);
        assert_eq!(data(&drain(&mut s, now)), [Dest::Unicast(addr(0))]);
        assert_eq!(s.stats().unicast_repairs, 1);
        assert_eq!(s.buf.base, ISN);
    }

    #[test]
    fn a_packet_two_members_lack_is_multicast_once() {
        let (mut s, now) = three_packets_polled(3);
        respond(&mut s, 0, now, ISN, 63, &[0b11], false);
        respond(&mut s, 1, now, ISN, 63, &[0b11], false);
        assert_eq!(data(&drain(&mut s, now)), [Dest::Group]);
        assert_eq!(s.stats().multicast_repairs, 1);
        assert_eq!(s.stats().unicast_repairs, 0);
    }

    #[test]
    fn a_nack_waits_at_most_the_gathering_time_for_the_others() {
        let (mut s, now) = three_packets_polled(2);
        respond(&mut s, 0, now, ISN, 63, &[0b11], false);
        assert!(data(&drain(&mut s, now)).is_empty());
        let gather = now + s.config.repair_gather;
        assert!(
            s.timer_table()
                .contains(&(super::super::timers::Timer::RepairGather(ISN), gather))
        );
        s.handle_timeout(gather);
        assert_eq!(data(&drain(&mut s, gather)), [Dest::Unicast(addr(0))]);
    }

    #[test]
    fn what_every_live_member_holds_leaves_the_buffer() {
        let (mut s, now) = three_packets_polled(2);
        assert_eq!(s.buffered_packets(), 3);
        respond(&mut s, 0, now, ISN.add(3), 61, &[], false);
        assert_eq!(s.buf.base, ISN);
        respond(&mut s, 1, now, ISN.add(2), 62, &[], false);
        assert_eq!((s.buf.base, s.buffered_packets()), (ISN.add(2), 1));
        assert_eq!(s.send_capacity_packets(), 63);
    }

    #[test]
    fn a_response_claiming_unsent_packets_is_counted_and_ignored() {
        let (mut s, now) = three_packets_polled(1);
        respond(&mut s, 0, now, ISN.add(9), 55, &[], false);
        assert_eq!(s.stats().malformed, 1);
        assert_eq!(s.members[0].cum, ISN);
    }
}
