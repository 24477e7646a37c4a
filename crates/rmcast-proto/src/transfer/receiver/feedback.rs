//! What a receiver says about the data: cumulative acks and NAKs (with the
//! bitmap of packets held past the gap and the echo of the packet that
//! prompted them), Hunt's multicast `RateNak`, and under the tree the
//! relay's aggregated acks (the relaying itself is the tree policy's
//! [`Relay`](crate::transfer::policy::relay::Relay)).

use super::data::fill_bitmap;
use super::{Phase, Receiver};
use crate::transfer::emit;
use crate::transfer::policy::relay::ChildAck;
use crate::{Dest, FeedbackPolicy, Instant, Transmit};
#[cfg(doc)]
use rmcast_wire::POLL_DIRECT;
use rmcast_wire::{Body, Feedback, Header, RANK_SENDER, RateNak, RateNakKind, Seq};
use std::net::SocketAddr;

/// Feedback owed to the sender: acks count, a NAK flag, their echoes,
/// and the group's `RateNak`.
#[derive(Default)]
pub(super) struct FeedbackState {
    pub(super) acks_owed: u32,
    pub(super) nak_owed: bool,
    /// The NAK owed is for the gap the data stopped at (FEC's idle NAK),
    /// not for a group that is over.
    pub(super) nak_idle: bool,
    pub(super) last_echo: Seq,
    pub(super) nak_echo: Seq,
    /// The `copy` of the packets behind `last_echo` and `nak_echo`.
    pub(super) last_echo_copy: u8,
    pub(super) nak_echo_copy: u8,
    /// Scratch for the bitmap of held packets sent with feedback.
    pub(super) bitmap: Vec<u8>,
    /// When the last NAK went, and the cumulative index it reported.
    pub(super) last_nak: Option<(Instant, u32)>,
    /// An EXP `RateNak` owed to the group: the first message missing.
    pub(super) rate_nak_owed: Option<Seq>,
    /// When this session's last `RateNak` was sent or heard.
    pub(super) last_rate_nak: Option<Instant>,
    /// FEC: a gap inside the block still coming was not NAKed; NAK it at
    /// this time if no data comes before.
    pub(super) idle_nak_at: Option<Instant>,
    /// FEC: the latest data or parity packet heard, and its copy.
    pub(super) last_heard: (Seq, u8),
    /// A group larger than [`SPREAD_FROM`]: what is owed to the sender
    /// (feedback, the offer's answer, the verdict) goes at this time, this
    /// receiver's slot after it became owed. A ring of
    /// [`GROUP_ANSWERS_SPREAD_FROM`] or more: the same for an answer to a
    /// parity packet's poll of all that needed it.
    pub(super) hold_until: Option<Instant>,
    /// Doublings of this receiver's slot (up to [`SPREAD_WIDEN_MAX`]): an
    /// `Offer` or `Close` repeated after this receiver answered it, or a
    /// packet it holds polled again, means the group's answers were lost,
    /// most likely at the sender's port.
    pub(super) spread_shift: u8,
}

impl FeedbackState {
    /// The sender repeated what this receiver had answered: spread the
    /// next answers twice as wide.
    pub(super) fn widen_spread(&mut self) {
        self.spread_shift = (self.spread_shift + 1).min(SPREAD_WIDEN_MAX);
    }
}

/// Groups of more receivers than this spread what they owe the sender
/// (acks and NAKs, the offer's answer, the verdict): each receiver answers
/// [`SPREAD_SLOT`] × its rank after what prompted it, so that the answers
/// to one poll, offer or close (every receiver owes one) reach the sender
/// one after another instead of at once. 10,000 simultaneous answers
/// overflowed the sender's switch port in the simulator and had receivers
/// removed as silent; 1,000 did not.
pub const SPREAD_FROM: u16 = 1000;

/// Rings of this many receivers or more (up to [`SPREAD_FROM`]) spread
/// the answers every receiver that needed a parity packet owes at once
/// (its poll is [`POLL_DIRECT`]). In a ring each data packet polls one
/// receiver, so a parity packet's poll is the one moment many answer
/// together: a ring of 1,000 receivers with blocks interleaved 8 deep
/// under bursts of loss had half the group use one interleaving group's
/// parity and answer within microseconds, the sender's port dropped
/// 11,211 frames and the sender waited out two retransmission timeouts
/// (147 Mbit/s at 1 Gbit/s; spread, 628). Under nak-poll every receiver
/// answers the polled data packet at once anyway; spreading its parity
/// answers too moved nothing without feedback loss and was mixed with it
/// (`docs/performance.md`, "Every protocol under bursts"), so only the
/// ring does.
pub const GROUP_ANSWERS_SPREAD_FROM: u16 = 100;

/// How a group spreads what its receivers owe the sender.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Spread {
    /// Up to [`SPREAD_FROM`] but a ring from
    /// [`GROUP_ANSWERS_SPREAD_FROM`]: everything goes at once.
    Never,
    /// A ring up to [`SPREAD_FROM`]: answers to a parity packet's poll of
    /// all that needed it.
    GroupAnswers,
    /// Larger groups: everything owed to the sender.
    Everything,
}

/// The spacing of spread feedback (10,000 receivers answer within 20
/// ms): about what a sender spends receiving one small datagram (the
/// simulator's `HostCosts::modern`), and 1.6 times a feedback packet's
/// time on a 1 Gbit/s link. At 1 µs the answers to one poll came faster
/// than the sender could read them, with the NAKs of the same moment on
/// top: at 4,000 receivers its port dropped frames and it waited out
/// retransmission timeouts (`docs/performance.md`, "Past 1,000 receivers").
pub const SPREAD_SLOT: std::time::Duration = std::time::Duration::from_micros(2);

/// Most doublings of [`SPREAD_SLOT`] after repeated `Offer`s, `Close`s or
/// polls of a held packet: 16 µs, two answers' time on a 100 Mbit/s link.
/// The slot fits a 1 Gbit/s link; on a slower one the answers of
/// thousands of receivers overflowed the sender's port, and as the slots
/// go by rank the same receivers were dropped at every repeat (4,000
/// receivers at 100 Mbit/s: 731 removed as silent).
pub const SPREAD_WIDEN_MAX: u8 = 3;

impl Receiver {
    /// Acknowledgements and NAKs owed to the sender, a `RateNak` owed to
    /// the group, and under the tree the aggregated acks owed upstream.
    pub(super) fn poll_feedback(
        &mut self,
        now: Instant,
        sender: SocketAddr,
        header: Header,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        if self.transfer.is_none() || self.phase == Phase::Done {
            return None;
        }
        let owed = self.feedback.nak_owed || self.feedback.acks_owed > 0;
        let mut due = owed && self.spread_due(now);
        if due && self.feedback.nak_owed && !self.nak_still_needed() {
            // Suppressed: what the NAK was for arrived while it waited for
            // this receiver's slot (repair another receiver asked for).
            self.feedback.nak_owed = false;
            self.feedback.nak_idle = false;
            self.stats.naks_suppressed += 1;
            if self.feedback.acks_owed == 0 {
                self.feedback.hold_until = None;
                due = false;
            }
        }
        let t = self.transfer.as_ref()?;
        let to = Dest::Unicast(sender);
        let cumulative = t.isn.add(t.cumulative);
        if due {
            let held = self.feedback.hold_until.take().is_some();
            let nak = self.feedback.nak_owed;
            let mut bitmap = std::mem::take(&mut self.feedback.bitmap);
            fill_bitmap(t, &mut bitmap);
            self.fec_mark_parity(&mut bitmap);
            self.feedback.bitmap = bitmap;
            if let (Some(fec), Some(t)) = (&mut self.fec, &self.transfer) {
                fec.note_reported(t);
            }
            let feedback = Feedback {
                cumulative,
                echo: if nak {
                    self.feedback.nak_echo
                } else {
                    self.feedback.last_echo
                },
                echo_copy: if nak {
                    self.feedback.nak_echo_copy
                } else {
                    self.feedback.last_echo_copy
                },
                aggregate: false,
                bitmap: &self.feedback.bitmap,
            };
            let body = if nak {
                // A NAK carries everything an ack would.
                self.feedback.nak_owed = false;
                self.feedback.nak_idle = false;
                self.feedback.acks_owed = self.acks_owed_after_sending(held);
                self.stats.naks += 1;
                Body::Nak(feedback)
            } else {
                self.feedback.acks_owed = self.acks_owed_after_sending(held);
                self.stats.acks += 1;
                Body::Ack(feedback)
            };
            return emit(to, header, body, buf);
        }
        if let Some(seq) = self.feedback.rate_nak_owed.take() {
            self.stats.rate_naks += 1;
            let body = Body::RateNak(RateNak {
                kind: RateNakKind::Exp,
                seq,
            });
            return emit(Dest::Group, header, body, buf);
        }
        if let Some(relay) = &mut self.relay
            && let Some(aggregate) = relay.poll_report()
        {
            self.stats.acks += 1;
            let feedback = Feedback {
                cumulative: t.isn.add(aggregate),
                echo: self.feedback.last_echo,
                echo_copy: self.feedback.last_echo_copy,
                aggregate: true,
                bitmap: &[],
            };
            let dest = Dest::Unicast(relay.upstream().unwrap_or(sender));
            return emit(dest, header, Body::Ack(feedback), buf);
        }
        None
    }

    /// A verified receiver of a group that spreads its answers (over
    /// [`SPREAD_FROM`]) answers the sender's polls with its `Complete`:
    /// the `Close` goes there with the last data packet, so the last
    /// poll's ack and the verdict are owed together, and one answer says
    /// both (every byte is in, and verified) in the slot sized for one.
    /// Polls heard after it (a repair's, a re-poll of this member whose
    /// `Complete` was lost) are answered the same way. Not under a tree,
    /// whose relays wait for their children's acks.
    pub(super) fn verdict_answers_polls(&mut self) {
        let owed = self.feedback.acks_owed > 0 || self.feedback.nak_owed;
        if owed
            && self.phase == Phase::Confirmed
            && self.spread() == Spread::Everything
            && self.relay.is_none()
            && !matches!(self.policy, Some(FeedbackPolicy::Tree { .. }))
        {
            self.feedback.acks_owed = 0;
            self.feedback.nak_owed = false;
            self.complete_owed = true;
        }
    }

    /// The acks still owed once one feedback packet (ack or NAK) goes.
    /// Feedback carries the receiver's state when it goes, so one answers
    /// every poll heard before it: in a group that spreads its answers
    /// (over [`SPREAD_FROM`]) every ack owed goes as one, whatever came
    /// while it waited for its slot, and the polls that came meanwhile
    /// (the polled block's proactive parity, a close) cost no packet more;
    /// so does an answer of a ring of 100 to 1,000 that waited for its
    /// slot (`held`, see [`Receiver::spread_group_answer`]). Otherwise groups
    /// answer poll by poll, as the papers' protocols count them (one ack
    /// per polled packet even when the driver reads several packets before
    /// it asks for what to send).
    fn acks_owed_after_sending(&self, held: bool) -> u32 {
        match self.spread() {
            Spread::Everything => 0,
            Spread::GroupAnswers if held => 0,
            _ => self.feedback.acks_owed.saturating_sub(1),
        }
    }

    /// How this receiver's group spreads what its receivers owe the sender.
    fn spread(&self) -> Spread {
        let ring = matches!(self.policy, Some(FeedbackPolicy::Ring { .. }));
        match self.offer.as_ref().map(|o| o.receivers) {
            Some(n) if n > SPREAD_FROM => Spread::Everything,
            Some(n) if n >= GROUP_ANSWERS_SPREAD_FROM && ring => Spread::GroupAnswers,
            _ => Spread::Never,
        }
    }

    /// Whether what this receiver owes the sender (feedback, the offer's
    /// answer, the verdict) may go now: in a group of more than
    /// [`SPREAD_FROM`] in this receiver's slot after it became owed (the
    /// first call starts the wait; the caller clears `hold_until` when it
    /// sends); in a ring of 100 to 1,000 once the slot of an answer the
    /// group owes at once is over ([`Receiver::spread_group_answer`]);
    /// else at once.
    pub(super) fn spread_due(&mut self, now: Instant) -> bool {
        match self.spread() {
            Spread::Never => true,
            Spread::GroupAnswers => self.feedback.hold_until.is_none_or(|at| now >= at),
            Spread::Everything => match self.feedback.hold_until {
                Some(at) => now >= at,
                None => {
                    let offset = self.spread_offset();
                    self.feedback.hold_until = Some(now + offset);
                    offset.is_zero()
                }
            },
        }
    }

    /// This receiver's slot: [`SPREAD_SLOT`] × its rank, widened.
    fn spread_offset(&self) -> std::time::Duration {
        SPREAD_SLOT * (u32::from(self.rank) << self.feedback.spread_shift)
    }

    /// An ack that every receiver that needed a parity packet owes at once
    /// (the packet polled them all, [`POLL_DIRECT`]): in a ring of
    /// [`GROUP_ANSWERS_SPREAD_FROM`] to [`SPREAD_FROM`] receivers it waits
    /// for this receiver's slot (a larger group spreads everything anyway;
    /// other policies answer at once).
    pub(super) fn spread_group_answer(&mut self, now: Instant) {
        if self.spread() == Spread::GroupAnswers && self.feedback.hold_until.is_none() {
            self.feedback.hold_until = Some(now + self.spread_offset());
        }
    }

    /// Whether the NAK owed still asks for something: a gap remains, and
    /// under FEC one the parity already on its way cannot fill (a group
    /// that is over, or the gap the data stopped at).
    fn nak_still_needed(&self) -> bool {
        let Some(t) = &self.transfer else {
            return false;
        };
        if t.cumulative >= t.highest {
            return false;
        }
        match &self.fec {
            None => true,
            Some(fec) => self.feedback.nak_idle || fec.group_over(t.cumulative, t.highest - 1),
        }
    }

    /// FEC: the data stopped with a gap not NAKed (see `idle_nak_at`):
    /// NAK it now, echoing the last packet heard.
    pub(super) fn on_idle_nak(&mut self, now: Instant) {
        let Some(at) = self.feedback.idle_nak_at else {
            return;
        };
        if now < at {
            return;
        }
        self.feedback.idle_nak_at = None;
        if let Some(t) = &self.transfer
            && t.cumulative < t.highest
        {
            self.feedback.nak_owed = true;
            self.feedback.nak_idle = true;
            self.feedback.nak_echo = self.feedback.last_heard.0;
            self.feedback.nak_echo_copy = self.feedback.last_heard.1;
            self.feedback.last_nak = Some((now, t.cumulative));
        }
    }

    /// A group member's `RateNak`: another member's about our sender
    /// suppresses ours for a while; the rest is the senders' business.
    pub(super) fn on_rate_nak(&mut self, now: Instant, header: Header) {
        if header.session == self.session
            && header.rank != RANK_SENDER
            && self.phase != Phase::Listening
        {
            self.stats.rate_naks_heard += 1;
            self.feedback.last_rate_nak = Some(now);
        }
    }

    /// A datagram from another receiver: a child's aggregated ack under
    /// the tree, else feedback looped back or a stray peer.
    pub(super) fn on_peer_packet(&mut self, header: Header, body: &Body<'_>) {
        if let Body::Ack(f) = body
            && f.aggregate
            && header.session == self.session
            && self.on_child_ack(header.rank, f.cumulative)
        {
            return;
        }
        self.stats.foreign += 1;
    }

    /// Tree: a child's aggregated acknowledgement. Returns false if `rank`
    /// is not a child of this receiver (or nothing is being received).
    fn on_child_ack(&mut self, rank: u16, cumulative: Seq) -> bool {
        let (Some(relay), Some(t)) = (&mut self.relay, &self.transfer) else {
            return false;
        };
        match relay.on_child_ack(rank, cumulative.since(t.isn), t.packets, t.cumulative) {
            ChildAck::NotAChild => false,
            ChildAck::Malformed => {
                self.stats.malformed += 1;
                true
            }
            ChildAck::Taken => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{PAYLOAD, events, fresh, handshake_in, packet, sender};
    use super::{SPREAD_FROM, SPREAD_SLOT, SPREAD_WIDEN_MAX};
    use crate::{HASH_LEN, Instant, Kind, ReceiverEvent, Seq, Status};
    use rmcast_wire::{Body, Close, Data, POLL_ALL, POLL_DIRECT};
    use std::time::Duration;

    /// When the first data packet comes.
    const T0: Instant = Instant::from_nanos(1_000_000_000);

    /// A receiver of rank `rank` in a group of `group`, holding the first
    /// data packet, which polled everyone at [`T0`].
    fn polled(group: u16, rank: u16) -> crate::Receiver {
        let now = Instant::ZERO;
        let mut r = fresh();
        let (hello, welcome, offer) = handshake_in(group, rank);
        for p in [&hello, &welcome, &offer] {
            r.handle_datagram(now, sender(), &mut p.clone());
        }
        assert!(
            events(&mut r)
                .iter()
                .any(|e| matches!(e, ReceiverEvent::Offer(_)))
        );
        r.accept_offer();
        // The offer's answer goes in this receiver's slot too: let it.
        let mut buf = [0u8; 2048];
        let mut kinds: Vec<Kind> = std::iter::from_fn(|| r.poll_transmit(now, &mut buf))
            .map(|t| t.kind)
            .collect();
        kinds.extend(std::iter::from_fn(|| r.poll_transmit(T0, &mut buf)).map(|t| t.kind));
        assert!(kinds.contains(&Kind::OfferReply), "{kinds:?}");
        let now = T0;
        let data = polled_data(0);
        r.handle_datagram(now, sender(), &mut data.clone());
        r
    }

    /// The first data packet, copy `copy`, polling everyone.
    fn polled_data(copy: u16) -> Vec<u8> {
        let bytes = [0u8; PAYLOAD as usize];
        packet(Body::Data(Data {
            seq: Seq(10),
            poll: POLL_ALL,
            copy,
            payload: &bytes,
        }))
    }

    fn ack_at(r: &mut crate::Receiver, now: Instant) -> bool {
        let mut buf = [0u8; 2048];
        std::iter::from_fn(|| r.poll_transmit(now, &mut buf)).any(|t| t.kind == Kind::Ack)
    }

    #[test]
    fn a_small_group_answers_a_poll_at_once() {
        let mut r = polled(SPREAD_FROM, 700);
        assert!(ack_at(&mut r, T0));
    }

    #[test]
    fn a_large_group_answers_in_rank_order_slots() {
        let rank = 700;
        let mut r = polled(SPREAD_FROM + 1, rank);
        assert!(!ack_at(&mut r, T0), "held back");
        let due = T0 + SPREAD_SLOT * u32::from(rank);
        assert!(r.poll_timeout().is_some_and(|t| t <= due), "wakes for it");
        let early = T0 + SPREAD_SLOT * u32::from(rank - 1);
        assert!(!ack_at(&mut r, early), "not before its slot");
        assert!(ack_at(&mut r, due), "in its slot");
        // Rank 0 holds nothing back.
        let mut first = polled(SPREAD_FROM + 1, 0);
        assert!(ack_at(&mut first, T0));
    }

    #[test]
    fn a_poll_repeated_for_a_packet_held_widens_the_slots_up_to_eight_times() {
        let rank = 700;
        let mut r = polled(SPREAD_FROM + 1, rank);
        assert!(!ack_at(&mut r, T0), "held back");
        let mut now = T0 + SPREAD_SLOT * u32::from(rank);
        assert!(ack_at(&mut r, now), "first answer in the plain slot");
        let again = polled_data(1);
        for widen in 1..=5u32 {
            // The sender polls again (a stall poll): its answer was lost.
            now = now + Duration::from_millis(100);
            r.handle_datagram(now, sender(), &mut again.clone());
            assert!(!ack_at(&mut r, now), "repeat {widen}: held back");
            let slot = SPREAD_SLOT * (1 << widen.min(u32::from(SPREAD_WIDEN_MAX)));
            let due = now + slot * u32::from(rank);
            let early = now + slot * u32::from(rank - 1);
            assert!(
                !ack_at(&mut r, early),
                "repeat {widen}: not before its wider slot"
            );
            assert!(ack_at(&mut r, due), "repeat {widen}: in its wider slot");
            now = due;
        }
    }

    /// `datagram` as the sender sends it to one member alone.
    fn alone(mut datagram: Vec<u8>) -> Vec<u8> {
        rmcast_wire::set_flag(&mut datagram, rmcast_wire::FLAG_ALONE);
        datagram
    }

    #[test]
    fn a_poll_sent_alone_is_answered_at_once_and_leaves_the_slot_as_it_was() {
        let rank = 700;
        let mut r = polled(SPREAD_FROM + 1, rank);
        let mut now = T0 + SPREAD_SLOT * u32::from(rank);
        assert!(!ack_at(&mut r, T0), "held back");
        assert!(ack_at(&mut r, now), "first answer in the plain slot");
        // The sender lacks this member's answer alone and asks it alone.
        now = now + Duration::from_millis(100);
        r.handle_datagram(now, sender(), &mut alone(polled_data(1)));
        assert!(ack_at(&mut r, now), "asked alone: at once");
        // A poll of everyone again: the slot is the plain one, widened
        // once for this repeat, not for the one asked alone.
        now = now + Duration::from_millis(100);
        r.handle_datagram(now, sender(), &mut polled_data(2));
        assert!(!ack_at(&mut r, now), "a group's repeat: held back");
        let due = now + SPREAD_SLOT * 2 * u32::from(rank);
        let early = now + SPREAD_SLOT * 2 * u32::from(rank - 1);
        assert!(!ack_at(&mut r, early), "not before its slot");
        assert!(ack_at(&mut r, due), "in the slot widened once");
    }

    #[test]
    fn an_offer_asked_again_alone_is_answered_at_once_and_of_the_group_in_the_slot() {
        let rank = 700;
        let mut r = polled(SPREAD_FROM + 1, rank);
        let (_, _, offer) = handshake_in(SPREAD_FROM + 1, rank);
        let now = T0 + Duration::from_millis(100);
        r.handle_datagram(now, sender(), &mut offer.clone());
        assert!(
            !kinds_at(&mut r, now).contains(&Kind::OfferReply),
            "held back"
        );
        let mut r = polled(SPREAD_FROM + 1, rank);
        r.handle_datagram(now, sender(), &mut alone(offer));
        assert!(kinds_at(&mut r, now).contains(&Kind::OfferReply), "at once");
    }

    /// Packet `index` of the 3-packet object, not polling.
    fn data(index: u32) -> Vec<u8> {
        data_polling(index, rmcast_wire::POLL_NONE)
    }

    /// Packet `index` of the 3-packet object, with poll field `poll`.
    fn data_polling(index: u32, poll: u16) -> Vec<u8> {
        let bytes = [0u8; PAYLOAD as usize];
        let len = if index == 2 { 500 } else { PAYLOAD as usize };
        packet(Body::Data(Data {
            seq: Seq(10 + index),
            poll,
            copy: 0,
            payload: &bytes[..len],
        }))
    }

    fn kinds_at(r: &mut crate::Receiver, now: Instant) -> Vec<Kind> {
        let mut buf = [0u8; 2048];
        std::iter::from_fn(|| r.poll_transmit(now, &mut buf))
            .map(|t| t.kind)
            .collect()
    }

    #[test]
    fn a_large_group_answers_the_polls_heard_while_it_waits_with_one_ack() {
        let rank = 700;
        let due = T0 + SPREAD_SLOT * u32::from(rank);
        let mut r = polled(SPREAD_FROM + 1, rank);
        r.handle_datagram(T0, sender(), &mut data_polling(1, POLL_ALL));
        assert!(kinds_at(&mut r, T0).is_empty(), "held back");
        assert_eq!(kinds_at(&mut r, due), vec![Kind::Ack], "one for both polls");
        let later = due + Duration::from_secs(1);
        assert_eq!(kinds_at(&mut r, later), vec![], "and nothing after");
        assert_eq!(r.stats().acks, 1);
    }

    #[test]
    fn a_small_group_answers_poll_by_poll() {
        // Two polls read before the driver asks what to send: two acks,
        // as the papers' protocols count them.
        let mut r = polled(SPREAD_FROM, 700);
        r.handle_datagram(T0, sender(), &mut data_polling(1, POLL_ALL));
        assert_eq!(kinds_at(&mut r, T0), vec![Kind::Ack, Kind::Ack]);
    }

    #[test]
    fn a_nak_waiting_for_its_slot_is_dropped_when_the_repair_came_first() {
        let rank = 700;
        let due = T0 + SPREAD_SLOT * u32::from(rank);
        // Packet 1 lost: packet 2 owes a NAK, held for the slot with the ack.
        let mut r = polled(SPREAD_FROM + 1, rank);
        r.handle_datagram(T0, sender(), &mut data(2));
        assert!(kinds_at(&mut r, T0).is_empty(), "held back");
        // Another receiver's NAK brought packet 1 before this one's slot.
        r.handle_datagram(T0, sender(), &mut data(1));
        assert_eq!(
            kinds_at(&mut r, due),
            vec![Kind::Ack],
            "the poll's ack only"
        );
        assert_eq!(r.stats().naks, 0);
        assert_eq!(r.stats().naks_suppressed, 1);
        // Not repaired by the slot: the NAK goes.
        let mut r = polled(SPREAD_FROM + 1, rank);
        r.handle_datagram(T0, sender(), &mut data(2));
        assert!(kinds_at(&mut r, T0).is_empty(), "held back");
        assert_eq!(kinds_at(&mut r, due), vec![Kind::Nak]);
        assert_eq!(r.stats().naks_suppressed, 0);
    }

    /// A receiver of a group of `group`, rank 700, that got every packet
    /// (the last polling everyone) and then the `Close`, at [`T0`], and
    /// verified its copy: the `Close` came with the data, as a group over
    /// [`SPREAD_FROM`] sends it.
    fn verified_with_the_data(group: u16) -> crate::Receiver {
        let mut r = polled(group, 700);
        r.handle_datagram(T0, sender(), &mut data(1));
        r.handle_datagram(T0, sender(), &mut data_polling(2, POLL_ALL));
        let close = packet(Body::Close(Close {
            hash: [3; HASH_LEN],
            signature: None,
        }));
        r.handle_datagram(T0, sender(), &mut close.clone());
        assert!(events(&mut r).contains(&ReceiverEvent::AllData));
        r.confirm(Status::Ok, [3; HASH_LEN], "");
        r
    }

    #[test]
    fn a_large_group_answers_the_last_poll_and_the_close_with_one_complete() {
        let rank = 700u16;
        let due = T0 + SPREAD_SLOT * u32::from(rank);
        let mut r = verified_with_the_data(SPREAD_FROM + 1);
        assert!(kinds_at(&mut r, T0).is_empty(), "held back");
        assert_eq!(
            kinds_at(&mut r, due),
            vec![Kind::Complete],
            "one answer for the polls and the Close, in the slot"
        );
        let later = due + Duration::from_secs(1);
        assert_eq!(kinds_at(&mut r, later), vec![], "and nothing after");
        assert_eq!(r.stats().acks, 0);
        // Its Complete was lost and the sender polls it alone: the
        // Complete again, at once, not an ack.
        let mut poll = data_polling(2, POLL_DIRECT);
        rmcast_wire::set_flag(&mut poll, rmcast_wire::FLAG_ALONE);
        r.handle_datagram(later, sender(), &mut poll);
        assert_eq!(kinds_at(&mut r, later), vec![Kind::Complete]);
        assert_eq!(r.stats().acks, 0);
    }

    #[test]
    fn a_small_group_acks_the_polls_and_confirms_apart() {
        // Up to `SPREAD_FROM` the Close comes once every byte is acked
        // (the papers' protocols): the answers stay as they were, an ack
        // for each of the two polls beside the verdict.
        let mut r = verified_with_the_data(SPREAD_FROM);
        assert_eq!(
            kinds_at(&mut r, T0),
            vec![Kind::Complete, Kind::Ack, Kind::Ack]
        );
    }
}
