//! The end of a transfer: the `Close` brings the hash to verify against
//! (the first one wins), every byte in and the hash known asks the
//! application to verify, its verdict goes in a `Complete`, and the
//! sender's `Bye` ends the session.

use super::{Phase, Receiver, truncate};
use crate::ReceiverEvent;
use rmcast_wire::{HASH_LEN, Status};

impl Receiver {
    /// The sender's `Close`, carrying the object's hash.
    pub(super) fn on_close(&mut self, hash: [u8; HASH_LEN]) {
        match self.phase {
            Phase::Confirmed => {
                // A repeat: the hash comes only with a Close, so this
                // receiver's Complete (or others') went unheard.
                self.complete_owed = true;
                self.feedback.widen_spread();
            }
            Phase::Receiving | Phase::Verifying => {
                // The first Close's hash is the one verified
                // against; a later Close with a different hash
                // (a confused or hostile sender, or a forged
                // datagram) is ignored rather than switching the
                // target mid-verification. The sender's own check
                // of our Complete hash catches a mismatch anyway.
                self.expected_hash.get_or_insert(hash);
                let waiting = self.phase == Phase::Receiving;
                self.check_all_data();
                // Ack a Close that finds this receiver missing
                // bytes or still verifying (so the sender hears it
                // is alive). A Close that completes what it needs
                // is answered by the Complete the application now
                // owes, as when every byte came after the hash.
                if !(waiting && self.phase == Phase::Verifying) {
                    self.feedback.acks_owed += 1;
                }
            }
            _ => {}
        }
    }

    pub(super) fn check_all_data(&mut self) {
        if self.phase != Phase::Receiving {
            return;
        }
        if let Some(t) = &self.transfer
            && t.cumulative == t.packets
            && self.expected_hash.is_some()
        {
            self.phase = Phase::Verifying;
            self.events.push_back(ReceiverEvent::AllData);
        }
    }

    /// Reports the verification of the whole object to the sender.
    /// `status` is `Ok` when the bytes hash to [`Receiver::expected_hash`].
    pub fn confirm(&mut self, status: Status, hash: [u8; HASH_LEN], text: &str) {
        if self.phase != Phase::Verifying {
            return;
        }
        self.verdict = Some((status, hash, truncate(text)));
        self.complete_owed = true;
        if status == Status::Ok {
            self.phase = Phase::Confirmed;
        } else {
            self.fail(format!("verification failed: {text}"));
        }
    }

    /// The sender's `Bye`: the end after our verified copy, else a failure
    /// with the sender's reason.
    pub(super) fn on_bye(&mut self, text: &str) {
        if self.phase == Phase::Confirmed {
            self.group = Some(if text.is_empty() {
                Ok(())
            } else {
                Err(text.to_owned())
            });
            self.phase = Phase::Done;
            self.events.push_back(ReceiverEvent::Finished);
        } else {
            let why = if text.is_empty() {
                "no reason given"
            } else {
                text
            };
            self.fail(format!(
                "the sender ended the session before this receiver finished: {why}"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    //! The hash to verify against comes from `Close`: no verification
    //! before it, and the first one wins.

    use super::super::test_support::{PAYLOAD, events, holding, packet, sender, with_every_byte};
    use crate::{HASH_LEN, Instant, Kind, ReceiverEvent, Status};
    use rmcast_wire::{Body, Close, Data, POLL_NONE, Seq};

    #[test]
    fn every_byte_in_is_not_enough_to_verify_without_the_close_hash() {
        let mut r = with_every_byte();
        assert_eq!(r.expected_hash(), None);
        assert!(
            !events(&mut r).contains(&ReceiverEvent::AllData),
            "asked to verify before the hash is known"
        );
        // Nothing to confirm yet: a verdict now is ignored.
        r.confirm(Status::Ok, [1; HASH_LEN], "");
        let mut buf = vec![0u8; 4096];
        while let Some(t) = r.poll_transmit(Instant::ZERO, &mut buf) {
            assert_ne!(t.kind, Kind::Complete);
        }

        let close = packet(Body::Close(Close {
            hash: [1; HASH_LEN],
            signature: None,
        }));
        r.handle_datagram(Instant::ZERO, sender(), &mut close.clone());
        assert_eq!(r.expected_hash(), Some([1; HASH_LEN]));
        assert_eq!(events(&mut r), [ReceiverEvent::AllData]);
        r.confirm(Status::Ok, [1; HASH_LEN], "");
        let t = r.poll_transmit(Instant::ZERO, &mut buf).unwrap();
        assert_eq!(t.kind, Kind::Complete, "the Complete answers the Close");
    }

    #[test]
    fn the_first_close_hash_wins() {
        let mut r = with_every_byte();
        let first = packet(Body::Close(Close {
            hash: [1; HASH_LEN],
            signature: None,
        }));
        let other = packet(Body::Close(Close {
            hash: [2; HASH_LEN],
            signature: None,
        }));
        r.handle_datagram(Instant::ZERO, sender(), &mut first.clone());
        r.handle_datagram(Instant::ZERO, sender(), &mut other.clone());
        assert_eq!(r.expected_hash(), Some([1; HASH_LEN]));
        assert_eq!(events(&mut r), [ReceiverEvent::AllData]);
    }

    #[test]
    fn a_close_before_the_last_byte_is_acked_and_verification_waits_for_it() {
        let now = Instant::ZERO;
        let mut r = holding(&[0, 2]);
        let _ = events(&mut r);
        let mut buf = vec![0u8; 4096];
        while r.poll_transmit(now, &mut buf).is_some() {}
        let close = packet(Body::Close(Close {
            hash: [3; HASH_LEN],
            signature: None,
        }));
        r.handle_datagram(now, sender(), &mut close.clone());
        assert_eq!(r.expected_hash(), Some([3; HASH_LEN]));
        assert!(!events(&mut r).contains(&ReceiverEvent::AllData));
        let t = r.poll_transmit(now, &mut buf).expect("the Close is acked");
        assert_eq!(t.kind, Kind::Ack);
        // The missing packet arrives: now, and only now, verify.
        let data = packet(Body::Data(Data {
            seq: Seq(11),
            poll: POLL_NONE,
            copy: 1,
            payload: &[0u8; PAYLOAD as usize],
        }));
        assert!(
            r.handle_datagram(now, sender(), &mut data.clone())
                .is_some()
        );
        assert_eq!(events(&mut r), [ReceiverEvent::AllData]);
    }
}
