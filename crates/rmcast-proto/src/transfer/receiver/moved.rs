//! `Move` (`--laggard tcp`): the sender takes a receiver far behind the
//! group out of the multicast data; its driver fetches the rest over TCP.

use super::{Phase, Receiver};
use crate::{Instant, ReceiverEvent};
use std::net::SocketAddr;

impl Receiver {
    /// The driver's verdict on the TCP catch-up a
    /// [`ReceiverEvent::Moved`] asked for, at `now`: `Ok` once the bytes
    /// fetched over TCP completed a copy that verified against the sender's
    /// hash (and the sender was told), or why not. Ignored unless moved.
    ///
    /// A verified copy waits for the sender's `Bye`, as any confirmed
    /// receiver does: it carries the group's verdict (`rmcast bcast`'s exit
    /// status), and the sender says it once every moved receiver is done.
    /// (The `Bye`s that came meanwhile are still in the socket: the driver
    /// reports before it reads on.)
    pub fn catch_up_done(&mut self, now: Instant, verdict: Result<(), String>) {
        if self.phase != Phase::Moved {
            return;
        }
        match verdict {
            Ok(()) => {
                self.phase = Phase::Confirmed;
                self.last_from_sender = now;
            }
            Err(why) => self.fail(format!("the TCP catch-up failed: {why}")),
        }
    }

    /// The sender moves this receiver to a TCP catch-up. Taken while data
    /// still comes (in `Receiving`); a receiver that holds every byte
    /// already answers the `Close` instead, and the sender takes that
    /// answer as the moved receiver's verdict.
    pub(super) fn on_move(&mut self, from: SocketAddr, m: rmcast_wire::Move) {
        if m.rank != self.rank || self.phase != Phase::Receiving {
            return;
        }
        self.phase = Phase::Moved;
        self.feedback.hold_until = None;
        self.events.push_back(ReceiverEvent::Moved {
            to: SocketAddr::new(from.ip(), m.port),
            from: self.received_bytes(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{PAYLOAD, events, holding, packet, sender, with_every_byte};
    use crate::{HASH_LEN, Instant, ReceiverEvent};
    use rmcast_wire::{Body, Bye, Close, Data, Move, POLL_ALL, Seq};
    use std::net::SocketAddr;
    use std::time::Duration;

    fn move_to(rank: u16) -> Vec<u8> {
        packet(Body::Move(Move { rank, port: 7702 }))
    }

    #[test]
    fn a_move_names_the_senders_address_and_what_is_held_and_silences_the_machine() {
        let now = Instant::ZERO;
        let mut r = holding(&[0, 2]);
        let _ = events(&mut r);
        r.handle_datagram(now, sender(), &mut move_to(0));
        let to: SocketAddr = "10.0.0.1:7702".parse().unwrap();
        // Packet 1 is missing: only the first is held in order.
        assert_eq!(
            events(&mut r),
            [ReceiverEvent::Moved {
                to,
                from: u64::from(PAYLOAD)
            }]
        );
        assert_eq!(r.poll_timeout(), None, "no sender timeout while moved");
        r.handle_timeout(now + Duration::from_secs(60));
        assert!(!r.is_finished());
        // The session's packets are ignored, and nothing is sent: not even
        // an answer to a poll.
        let data = packet(Body::Data(Data {
            seq: Seq(11),
            poll: POLL_ALL,
            copy: 0,
            payload: &[0u8; PAYLOAD as usize],
        }));
        assert!(
            r.handle_datagram(now, sender(), &mut data.clone())
                .is_none()
        );
        let mut buf = vec![0u8; 4096];
        assert!(r.poll_transmit(now, &mut buf).is_none());
        assert!(events(&mut r).is_empty());
        r.catch_up_done(now, Ok(()));
        // It waits for the group's verdict, in the sender's Bye.
        assert!(events(&mut r).is_empty());
        assert!(!r.is_finished());
        let bye = packet(Body::Bye(Bye {
            aborted: false,
            text: "",
        }));
        r.handle_datagram(now, sender(), &mut bye.clone());
        assert_eq!(events(&mut r), [ReceiverEvent::Finished]);
        assert_eq!(r.group_outcome(), Some(&Ok(())));
    }

    #[test]
    fn a_failed_catch_up_fails_the_receiver_with_its_reason() {
        let mut r = holding(&[0]);
        let _ = events(&mut r);
        r.handle_datagram(Instant::ZERO, sender(), &mut move_to(0));
        let _ = events(&mut r);
        r.catch_up_done(Instant::ZERO, Err("no route".into()));
        let e = events(&mut r);
        assert!(
            matches!(&e[..], [ReceiverEvent::Failed(why)] if why.contains("no route")),
            "{e:?}"
        );
    }

    #[test]
    fn a_move_for_another_rank_or_after_every_byte_is_verified_is_ignored() {
        let now = Instant::ZERO;
        let mut r = holding(&[0]);
        let _ = events(&mut r);
        r.handle_datagram(now, sender(), &mut move_to(1));
        assert!(events(&mut r).is_empty(), "rank 1's Move is not ours");
        // A verdict ignored when not moved.
        r.catch_up_done(now, Ok(()));
        assert!(!r.is_finished());

        // Every byte in and the Close heard: the Complete answers for it.
        let mut r = with_every_byte();
        let close = packet(Body::Close(Close {
            hash: [1; HASH_LEN],
            signature: None,
        }));
        r.handle_datagram(now, sender(), &mut close.clone());
        let _ = events(&mut r);
        r.handle_datagram(now, sender(), &mut move_to(0));
        assert!(events(&mut r).is_empty());
    }
}
