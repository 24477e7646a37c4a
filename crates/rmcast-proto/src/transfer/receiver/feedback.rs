//! What a receiver says about the data: cumulative acks and NAKs (with the
//! bitmap of packets held past the gap and the echo of the packet that
//! prompted them), Hunt's multicast `RateNak`, and under the tree the
//! relay's aggregated acks (the relaying itself is the tree policy's
//! [`Relay`](crate::transfer::policy::relay::Relay)).

use super::data::fill_bitmap;
use super::{Phase, Receiver};
use crate::transfer::emit;
use crate::transfer::policy::relay::ChildAck;
use crate::{Dest, Instant, Transmit};
use rmcast_wire::{Body, Feedback, Header, RANK_SENDER, RateNak, RateNakKind, Seq};
use std::net::SocketAddr;

/// Feedback owed to the sender: acks count, a NAK flag, their echoes,
/// and the group's `RateNak`.
#[derive(Default)]
pub(super) struct FeedbackState {
    pub(super) acks_owed: u32,
    pub(super) nak_owed: bool,
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
}

impl Receiver {
    /// Acknowledgements and NAKs owed to the sender, a `RateNak` owed to
    /// the group, and under the tree the aggregated acks owed upstream.
    pub(super) fn poll_feedback(
        &mut self,
        sender: SocketAddr,
        header: Header,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let t = self.transfer.as_ref()?;
        if self.phase == Phase::Done {
            return None;
        }
        let to = Dest::Unicast(sender);
        let cumulative = t.isn.add(t.cumulative);
        if self.feedback.nak_owed || self.feedback.acks_owed > 0 {
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
                self.feedback.acks_owed = self.feedback.acks_owed.saturating_sub(1);
                self.stats.naks += 1;
                Body::Nak(feedback)
            } else {
                self.feedback.acks_owed -= 1;
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
