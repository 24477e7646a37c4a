//! Joining a session: the first `Hello` heard (of the session wanted), the
//! `Join`s until a `Welcome` gives a rank, and the offer (kept if it
//! overtook the `Welcome`) with the application's answer to it.

use super::data::Transfer;
use super::feedback::{SPREAD_FROM, SPREAD_SLOT};
use super::{Phase, Receiver, truncate};
use crate::transfer::policy::relay::Relay;
use crate::{FeedbackPolicy, Instant, OfferInfo, ReceiverEvent};
use rmcast_wire::{Body, Header, Offer, RANK_UNASSIGNED, Status, Welcome};
use std::net::SocketAddr;
use std::time::Duration;

impl Receiver {
    /// Listening: the first `Hello` of the session wanted starts joining it.
    pub(super) fn on_listening(
        &mut self,
        now: Instant,
        from: SocketAddr,
        header: Header,
        body: &Body<'_>,
    ) {
        if let Body::Hello(hello) = body
            && self.config.session.is_none_or(|s| s == header.session)
        {
            self.session = header.session;
            self.sender = Some(from);
            self.seal
                .take_session(header.session, self.config.receiver_id);
            self.phase = Phase::Joining;
            self.join_at = now + join_delay(self.config.receiver_id, hello.receivers_wanted);
            self.last_from_sender = now;
            return;
        }
        self.stats.foreign += 1;
    }

    /// A `Hello` while joining: the sender still wants receivers. If this
    /// receiver's `Join` went long enough ago ([`JOIN_ANSWER_WAIT`]) and
    /// no `Welcome` came, one of them was lost: join again in this
    /// receiver's slot rather than after the whole `join_interval` (100
    /// ms; the Hellos come 10, 20, 40, 80 ms apart at first, so a lost
    /// `Join` costs one of those).
    pub(super) fn on_hello_joining(&mut self, now: Instant, receivers_wanted: u16) {
        if self.phase == Phase::Joining
            && self
                .join_sent
                .is_some_and(|sent| now >= sent + JOIN_ANSWER_WAIT)
        {
            let again = now + join_delay(self.config.receiver_id, receivers_wanted);
            self.join_at = self.join_at.min(again);
        }
    }

    /// The sender's `Welcome`: admitted with a rank (and, under the tree,
    /// the parent to report to), or turned away from a full session.
    pub(super) fn on_welcome(&mut self, from: SocketAddr, w: &Welcome) {
        if w.receiver_id == self.config.receiver_id && self.phase == Phase::Joining {
            if w.rank == RANK_UNASSIGNED {
                self.fail(format!("session {} is full", self.session));
            } else {
                self.rank = w.rank;
                self.upstream = w.upstream.map(SocketAddr::V4);
                self.phase = Phase::Admitted;
                self.events.push_back(ReceiverEvent::Admitted {
                    session: self.session,
                    rank: w.rank,
                    sender: from,
                });
                if let Some(offer) = self.early_offer.take() {
                    self.take_up_offer(offer);
                }
            }
        }
    }

    /// The sender's `Offer`: shown to the application once admitted; kept
    /// for the `Welcome` if it overtook it; answered again if repeated.
    pub(super) fn on_offer(&mut self, o: &Offer<'_>) {
        match self.phase {
            Phase::Admitted | Phase::Joining => {
                let Some(offer) = parse_offer(o) else {
                    self.stats.malformed += 1;
                    return;
                };
                if self.phase == Phase::Admitted {
                    self.take_up_offer(offer);
                } else {
                    // The group's Offer overtook our Welcome (they
                    // come on different sockets, and the Offer goes
                    // out as soon as the last receiver joined): keep
                    // it for the Welcome instead of waiting a whole
                    // retransmission timeout (50 ms) for its repeat.
                    self.early_offer.get_or_insert(offer);
                }
            }
            Phase::Receiving | Phase::Verifying | Phase::Confirmed => {
                // Answered already: the sender lacks answers.
                self.reply_owed = true;
                self.feedback.widen_spread();
            }
            _ => {}
        }
    }

    /// Takes up an offer once admitted (a rank is needed for the policy's
    /// children): the application is asked to accept or refuse it.
    fn take_up_offer(&mut self, (info, policy): (OfferInfo, FeedbackPolicy)) {
        self.policy = Some(policy);
        self.relay = policy
            .relays()
            .then(|| Relay::new(policy.children(self.rank), self.upstream));
        self.offer = Some(info.clone());
        self.phase = Phase::Deciding;
        self.events.push_back(ReceiverEvent::Offer(info));
    }

    /// Accepts the offered object (after preparing storage for it).
    pub fn accept_offer(&mut self) {
        if self.phase != Phase::Deciding {
            return;
        }
        let o = self.offer.as_ref().expect("deciding implies an offer");
        let words = (o.packets as usize).div_ceil(64);
        if let Some(shape) = o.fec {
            match super::fec::FecReceiver::new(
                shape,
                o.payload_size,
                o.window,
                self.config.fec_read_back,
            ) {
                Some(fec) => self.fec = Some(fec),
                None => {
                    let ring = crate::fec::ring_bytes(shape, o.payload_size.into(), o.window);
                    let text = format!(
                        "FEC of blocks of {} packets ({} interleaved) over a window of {} \
                         packets of {} bytes needs {} MiB of buffers, over this receiver's {} MiB",
                        shape.data,
                        shape.depth,
                        o.window,
                        o.payload_size,
                        ring >> 20,
                        crate::fec::MAX_RING_BYTES >> 20
                    );
                    self.refuse_offer(Status::NoSpace, &text);
                    return;
                }
            }
        }
        self.transfer = Some(Transfer {
            isn: o.isn,
            payload_size: u64::from(o.payload_size),
            size: o.size,
            packets: o.packets,
            window: o.window,
            held: vec![0; words],
            cumulative: 0,
            highest: 0,
        });
        self.reply = Some((Status::Ok, String::new()));
        self.reply_owed = true;
        self.phase = Phase::Receiving;
        self.check_all_data();
    }

    /// Refuses the offered object; the receiver then ends.
    pub fn refuse_offer(&mut self, status: Status, text: &str) {
        if self.phase != Phase::Deciding {
            return;
        }
        let status = if status == Status::Ok {
            Status::Other
        } else {
            status
        };
        self.reply = Some((status, truncate(text)));
        self.reply_owed = true;
        self.fail(format!("refused the offer: {text}"));
    }
}

/// How long after its `Join` a receiver takes a `Hello` without a
/// `Welcome` to mean that one of the two was lost: many round trips on a
/// LAN, and a tenth of the join interval's default; in a group over
/// [`SPREAD_FROM`], five times the longest a `Welcomes` list holds an
/// admission back.
///
/// Such a group used to wait out the whole join spread as well (25 ms at
/// 10,000): while the sender answered each `Join` with a unicast
/// `Welcome` (4.5 µs each), a `Hello` 5 ms after a `Join` found hundreds
/// unanswered yet, and their joins again, all at once, overflowed the
/// sender's port (915 frames dropped in the simulator). The lists answer
/// every `Join` within a millisecond, so a lost one need not wait for the
/// spread to end.
pub(crate) const JOIN_ANSWER_WAIT: Duration = Duration::from_millis(5);

/// How long after a `Hello` the `Join`s it prompts may come: nothing in a
/// group of up to [`SPREAD_FROM`], else as many slots as receivers wanted
/// ([`join_delay`]).
pub(crate) fn join_spread(receivers_wanted: u16) -> Duration {
    if receivers_wanted <= SPREAD_FROM {
        return Duration::ZERO;
    }
    SPREAD_SLOT * u32::from(receivers_wanted)
}

/// How long a receiver waits after the sender's first `Hello` before its
/// first `Join`: nothing in a group of up to [`SPREAD_FROM`], else a slot
/// of [`SPREAD_SLOT`] picked by its random identity among as many slots as
/// receivers wanted. Every receiver hears the same `Hello` at once, and
/// 4,000 `Join`s at one instant overflowed the sender's switch port in the
/// simulator: the receivers whose `Join` was dropped waited a whole
/// `join_interval` (100 ms) to try again.
fn join_delay(receiver_id: u64, receivers_wanted: u16) -> Duration {
    if receivers_wanted <= SPREAD_FROM {
        return Duration::ZERO;
    }
    let slot = receiver_id % u64::from(receivers_wanted);
    SPREAD_SLOT * u32::try_from(slot).unwrap_or(0)
}

/// An Offer's terms, or `None` when they cannot describe an object
/// (a packet count that does not fit, an unknown protocol parameter).
fn parse_offer(o: &rmcast_wire::Offer<'_>) -> Option<(OfferInfo, FeedbackPolicy)> {
    let packets = match u32::try_from(o.object_size.div_ceil(u64::from(o.payload_size))) {
        Ok(p) if p < u32::MAX => p,
        _ => return None,
    };
    let policy = FeedbackPolicy::from_offer(o.protocol, o.protocol_param, o.receivers)?;
    let info = OfferInfo {
        name: o.name.to_owned(),
        size: o.object_size,
        protocol: o.protocol,
        payload_size: o.payload_size,
        window: o.window,
        receivers: o.receivers,
        isn: o.isn,
        test_loss_ppm: o.test_loss_ppm,
        fec: o.fec,
        packets,
    };
    Some((info, policy))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{events, fresh, handshake, sender};
    use crate::{Instant, Kind, ReceiverEvent};

    const SIZE: u64 = super::super::test_support::SIZE;

    #[test]
    fn a_hello_long_after_a_join_without_a_welcome_joins_again_at_once() {
        use super::JOIN_ANSWER_WAIT;
        use std::time::Duration;
        let t0 = Instant::ZERO;
        let (mut r, hello) = joining(1);
        assert_eq!(joins_at(&mut r, t0), 1, "the first Join");
        // A Hello soon after: the Welcome may still be on its way.
        let soon = t0 + JOIN_ANSWER_WAIT / 2;
        r.handle_datagram(soon, sender(), &mut hello.clone());
        assert_eq!(joins_at(&mut r, soon), 0);
        // Later, and still no Welcome: the Join or the Welcome was lost.
        let later = t0 + JOIN_ANSWER_WAIT;
        assert!(later < t0 + Duration::from_millis(100), "before the retry");
        r.handle_datagram(later, sender(), &mut hello.clone());
        assert_eq!(joins_at(&mut r, later), 1, "joins again at once");
    }

    #[test]
    fn a_large_group_joins_again_in_its_slot_without_waiting_out_the_spread() {
        use super::super::feedback::SPREAD_SLOT;
        use super::super::test_support::ID;
        use super::{JOIN_ANSWER_WAIT, join_delay};
        let wanted = 10_000u16;
        let (mut r, hello) = joining(wanted);
        let slot = join_delay(ID, wanted);
        assert!(slot > std::time::Duration::ZERO, "pick an ID with a slot");
        let sent = Instant::ZERO + slot;
        assert_eq!(joins_at(&mut r, sent), 1, "the first Join, in its slot");
        // Just before the wait is over, a `Welcomes` list may still be on
        // its way: no Join again.
        let soon = sent + (JOIN_ANSWER_WAIT - std::time::Duration::from_micros(1));
        r.handle_datagram(soon, sender(), &mut hello.clone());
        assert_eq!(joins_at(&mut r, soon + slot), 0, "the answer may be coming");
        // Once it is over, a Hello without a Welcome: join again, in the
        // slot, though the 20 ms over which 10,000 join are not.
        let later = sent + JOIN_ANSWER_WAIT;
        assert!(later < Instant::ZERO + SPREAD_SLOT * u32::from(wanted));
        r.handle_datagram(later, sender(), &mut hello.clone());
        assert_eq!(joins_at(&mut r, later), 0, "not before its slot");
        assert_eq!(joins_at(&mut r, later + slot), 1, "joins again in its slot");
    }

    /// A receiver that heard the `Hello` of a session wanting `group`
    /// receivers at time zero, and that `Hello`.
    fn joining(group: u16) -> (crate::Receiver, Vec<u8>) {
        let mut r = fresh();
        let (hello, _, _) = super::super::test_support::handshake_in(group, 0);
        r.handle_datagram(Instant::ZERO, sender(), &mut hello.clone());
        (r, hello)
    }

    /// The `Join`s `r` sends at `now`.
    fn joins_at(r: &mut crate::Receiver, now: Instant) -> usize {
        let mut buf = [0u8; 2048];
        std::iter::from_fn(|| r.poll_transmit(now, &mut buf))
            .filter(|t| t.kind == Kind::Join)
            .count()
    }

    #[test]
    fn a_large_group_spreads_its_first_joins_over_a_slot_per_receiver() {
        use super::super::feedback::{SPREAD_FROM, SPREAD_SLOT};
        use super::join_delay;
        use std::time::Duration;
        assert_eq!(join_delay(12_345, SPREAD_FROM), Duration::ZERO);
        let wanted = 4000;
        let delays: Vec<Duration> = (0..wanted)
            .map(|id| join_delay(id, wanted as u16))
            .collect();
        assert_eq!(delays[0], Duration::ZERO);
        assert_eq!(delays[3999], SPREAD_SLOT * 3999);
        assert_eq!(join_delay(4000 + 7, 4000), SPREAD_SLOT * 7);
        let mut sorted = delays.clone();
        sorted.dedup();
        assert_eq!(
            sorted.len(),
            delays.len(),
            "one slot per identity mod the group"
        );
    }

    #[test]
    fn a_welcomes_to_the_group_admits_only_the_receivers_it_names() {
        use super::super::test_support::{ID, packet};
        use rmcast_wire::{Body, Welcome, Welcomes, encode_welcome_entry};
        let list = |ids: &[(u64, u16)]| {
            let mut entries = Vec::new();
            for &(receiver_id, rank) in ids {
                let w = Welcome {
                    receiver_id,
                    rank,
                    upstream: None,
                };
                encode_welcome_entry(&w, &mut entries).unwrap();
            }
            packet(Body::Welcomes(Welcomes { entries: &entries }))
        };
        let now = Instant::ZERO;
        let (mut r, _) = joining(2000);
        r.handle_datagram(now, sender(), &mut list(&[(ID + 1, 0), (ID + 2, 1)]));
        assert!(events(&mut r).is_empty(), "others' admissions");
        r.handle_datagram(
            now,
            sender(),
            &mut list(&[(ID + 3, 2), (ID, 1234), (ID + 4, 3)]),
        );
        let ev = events(&mut r);
        assert!(
            matches!(ev[..], [ReceiverEvent::Admitted { rank: 1234, .. }]),
            "{ev:?}"
        );
        // A later list naming it again changes nothing.
        r.handle_datagram(now, sender(), &mut list(&[(ID, 7)]));
        assert!(events(&mut r).is_empty());
    }

    #[test]
    fn an_offer_that_overtakes_the_welcome_is_taken_up_with_it() {
        let now = Instant::ZERO;
        let mut r = fresh();
        let (hello, welcome, offer) = handshake();
        r.handle_datagram(now, sender(), &mut hello.clone());
        r.handle_datagram(now, sender(), &mut offer.clone());
        assert!(
            !events(&mut r)
                .iter()
                .any(|e| matches!(e, ReceiverEvent::Offer(_))),
            "an offer before the Welcome has no rank to go with it"
        );
        r.handle_datagram(now, sender(), &mut welcome.clone());
        let ev = events(&mut r);
        assert!(matches!(ev[0], ReceiverEvent::Admitted { rank: 0, .. }));
        assert!(
            matches!(&ev[1], ReceiverEvent::Offer(o) if o.size == SIZE && o.packets == 3),
            "{ev:?}"
        );
        r.accept_offer();
        let mut buf = vec![0u8; 4096];
        let kinds: Vec<Kind> = std::iter::from_fn(|| r.poll_transmit(now, &mut buf))
            .map(|t| t.kind)
            .collect();
        assert!(kinds.contains(&Kind::OfferReply), "{kinds:?}");
    }
}
