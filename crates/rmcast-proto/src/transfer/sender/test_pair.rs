//! A test harness: one sender and one receiver exchanging datagrams at
//! once, in virtual time.

use crate::{
    HASH_LEN, Instant, Kind, MAX_DATAGRAM, ObjectInfo, Receiver, ReceiverConfig, ReceiverEvent,
    Sender, SenderConfig, SenderEvent, Seq, SessionId, Status,
};
use std::net::SocketAddr;
use std::time::Duration;

pub(super) const SIZE: usize = 10_000;
/// Any digest will do: the machines compare hashes, never compute them.
pub(super) const HASH: [u8; HASH_LEN] = [0x42; HASH_LEN];

fn sender_addr() -> SocketAddr {
    "10.0.0.1:5000".parse().unwrap()
}

fn receiver_addr() -> SocketAddr {
    "10.0.0.2:6000".parse().unwrap()
}

/// One sender and one receiver, datagrams delivered at once, virtual time.
pub(super) struct Pair {
    pub(super) now: Instant,
    pub(super) sender: Sender,
    pub(super) receiver: Receiver,
    pub(super) data: Vec<u8>,
    /// Kinds the sender transmitted, in order.
    pub(super) sent: Vec<Kind>,
    pub(super) sender_events: Vec<SenderEvent>,
    /// The hash the receiver's application reports as its own: the
    /// `Close`'s (an honest, matching copy) unless set.
    pub(super) report_hash: Option<[u8; HASH_LEN]>,
    /// Why the receiver failed, if it did.
    pub(super) receiver_failure: Option<String>,
}

impl Pair {
    pub(super) fn new(hash: Option<[u8; HASH_LEN]>) -> Self {
        Self::with_size(SIZE, hash)
    }

    pub(super) fn with_size(size: usize, hash: Option<[u8; HASH_LEN]>) -> Self {
        let config = SenderConfig {
            receivers: 1,
            ..SenderConfig::default()
        };
        Self::with_config(size, hash, config)
    }

    pub(super) fn with_config(
        size: usize,
        hash: Option<[u8; HASH_LEN]>,
        config: SenderConfig,
    ) -> Self {
        let object = ObjectInfo {
            size: size as u64,
            name: "obj.bin".into(),
            hash,
        };
        let receiver = Receiver::new(
            ReceiverConfig {
                receiver_id: 7,
                name: "r".into(),
                ..ReceiverConfig::default()
            },
            Instant::ZERO,
        );
        Self {
            now: Instant::ZERO,
            sender: Sender::new(config, SessionId(9), Seq(100), object, Instant::ZERO).unwrap(),
            receiver,
            data: (0..size).map(|i| (i % 251) as u8).collect(),
            sent: Vec::new(),
            sender_events: Vec::new(),
            report_hash: None,
            receiver_failure: None,
        }
    }

    /// Exchanges datagrams until both sides are quiet.
    pub(super) fn exchange(&mut self) {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let mut any = false;
            while let Some(t) = self
                .sender
                .poll_transmit(self.now, &self.data[..], &mut buf)
            {
                any = true;
                self.sent.push(t.kind);
                let _ = self
                    .receiver
                    .handle_datagram(self.now, sender_addr(), &mut buf[..t.len]);
            }
            while let Some(e) = self.sender.poll_event() {
                self.sender_events.push(e);
            }
            while let Some(e) = self.receiver.poll_event() {
                match e {
                    ReceiverEvent::Offer(_) => self.receiver.accept_offer(),
                    ReceiverEvent::AllData => {
                        let expected = self.receiver.expected_hash().expect("known");
                        let hash = self.report_hash.unwrap_or(expected);
                        self.receiver.confirm(Status::Ok, hash, "");
                    }
                    ReceiverEvent::Failed(why) => self.receiver_failure = Some(why),
                    _ => {}
                }
            }
            while let Some(t) = self.receiver.poll_transmit(self.now, &mut buf) {
                any = true;
                self.sender
                    .handle_datagram(self.now, receiver_addr(), &mut buf[..t.len]);
            }
            if !any {
                return;
            }
        }
    }

    /// Runs timers and exchanges until `until` or the session is over.
    /// After each exchange no deadline may be in the past: a driver
    /// would spin.
    pub(super) fn run_until(&mut self, until: Instant) {
        loop {
            self.exchange();
            if self.sender.is_finished() {
                return;
            }
            let next = [self.sender.poll_timeout(), self.receiver.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
                .expect("a live session has a timer");
            assert!(
                next > self.now,
                "deadline {next:?} not after {:?}",
                self.now
            );
            if next > until {
                self.now = until;
                return;
            }
            self.now = next;
            if self.sender.poll_timeout().is_some_and(|t| t <= self.now) {
                self.sender.handle_timeout(self.now);
            }
            if self.receiver.poll_timeout().is_some_and(|t| t <= self.now) {
                self.receiver.handle_timeout(self.now);
            }
        }
    }

    pub(super) fn at(&self, secs: u64) -> Instant {
        Instant::ZERO + Duration::from_secs(secs)
    }
}

#[cfg(test)]
mod auto_tests {
    use super::{HASH, Pair, SIZE};
    use crate::{AutoConfig, SenderConfig, SenderEvent};
    use rmcast_wire::FecShape;
    use std::time::Duration;

    fn chose(p: &Pair) -> crate::AutoChoice {
        p.sender_events
            .iter()
            .find_map(|e| match e {
                SenderEvent::Chose(c) => Some((**c).clone()),
                _ => None,
            })
            .expect("auto chose")
    }

    #[test]
    fn auto_chooses_for_the_group_that_came_not_the_one_expected() {
        // 40 expected, one comes; the join wait starts the session with it
        // (min_receivers): the choice is row 1's (no FEC), for 1 receiver.
        let config = SenderConfig {
            receivers: 40,
            min_receivers: Some(1),
            join_wait: Duration::from_secs(1),
            auto: Some(AutoConfig::default()),
            ..SenderConfig::default()
        };
        let mut p = Pair::with_config(SIZE, Some(HASH), config);
        let end = p.at(10);
        p.run_until(end);
        let c = chose(&p);
        assert_eq!(c.inputs.receivers, 1);
        assert_eq!(c.row, 0);
        assert_eq!(c.fec, None);
        assert!(p.sender.is_finished());
        assert_eq!(p.sender.outcome().unwrap().members.len(), 1);
        assert!(p.sender.outcome().unwrap().members[0].verified);
    }

    #[test]
    fn the_chosen_fec_runs_and_the_event_comes_before_all_joined() {
        // A 2-receiver row with FEC, forced here on one receiver by keeping
        // it: the payload shrinks to FEC's, and the transfer completes.
        let config = SenderConfig {
            receivers: 1,
            fec: Some(FecShape::new(8, 1)),
            auto: Some(AutoConfig {
                keep_fec: true,
                ..AutoConfig::default()
            }),
            ..SenderConfig::default()
        };
        let plain = SenderConfig::default().payload_size();
        let mut p = Pair::with_config(SIZE, Some(HASH), config);
        assert_eq!(
            p.sender.payload_size(),
            plain - 4,
            "FEC's payload from the start"
        );
        let end = p.at(10);
        p.run_until(end);
        let c = chose(&p);
        assert_eq!(c.fec, Some(FecShape::new(8, 1)));
        assert_eq!(p.sender.config().fec, Some(FecShape::new(8, 1)));
        let at = |f: fn(&SenderEvent) -> bool| p.sender_events.iter().position(f).unwrap();
        assert!(
            at(|e| matches!(e, SenderEvent::Chose(_)))
                < at(|e| matches!(e, SenderEvent::AllJoined))
        );
        assert!(p.sender.outcome().unwrap().ok);
        assert!(p.sender.stats().parity_packets > 0);
    }
}

#[cfg(test)]
mod streaming_tests {
    //! A source that fills as the sender runs ([`crate::Sender::set_available`]):
    //! nothing beyond it goes out, nobody times out while it waits, and
    //! the session completes once the rest and the hash arrive.

    use super::{HASH, Pair, SIZE};
    use crate::{Kind, SenderConfig, SenderEvent};
    use rmcast_wire::FecShape;

    fn data_sent(p: &Pair) -> usize {
        p.sent.iter().filter(|k| **k == Kind::Data).count()
    }

    fn streams(config: SenderConfig) {
        let mut p = Pair::with_config(SIZE, None, config);
        p.sender.set_available(0);
        let payload = p.sender.payload_size() as u64;
        // Registration and the offer run; no data packet can go. Well past
        // peer_timeout and the receiver's sender_timeout: run_until also
        // checks that no deadline lies in the past (nothing spins).
        let until = p.at(15);
        p.run_until(until);
        assert_eq!(data_sent(&p), 0, "{:?}", p.sent);
        assert!(!p.sender.is_finished());
        // Kept alive by the Offer, one every rto_max (800 ms): a handful.
        let keepalives = p.sender.stats().keepalives;
        assert!((10..=20).contains(&keepalives), "{keepalives} keepalives");
        assert!(
            !p.sender_events
                .iter()
                .any(|e| matches!(e, SenderEvent::MemberFailed { .. })),
            "{:?}",
            p.sender_events
        );

        // Two and a half packets arrive: two whole packets go.
        p.sender.set_available(2 * payload + payload / 2);
        let until = p.at(16);
        p.run_until(until);
        assert_eq!(p.receiver.received_bytes(), 2 * payload);
        assert!(!p.sent.contains(&Kind::Close));
        // A smaller value once data went is ignored.
        p.sender.set_available(1);
        assert_eq!(p.sender.available(), 2 * payload + payload / 2);

        // The rest, then the hash: the session completes.
        p.sender.set_available(SIZE as u64);
        let until = p.at(18);
        p.run_until(until);
        assert_eq!(p.receiver.received_bytes(), SIZE as u64);
        assert!(!p.sender.is_finished(), "no Close without the hash");
        p.sender.set_object_hash(HASH);
        let until = p.at(25);
        p.run_until(until);
        let outcome = p.sender.outcome().expect("finished");
        assert!(outcome.ok, "{outcome:?}");
    }

    #[test]
    fn a_streamed_source_sends_what_it_holds_and_completes() {
        streams(SenderConfig {
            receivers: 1,
            ..SenderConfig::default()
        });
    }

    #[test]
    fn a_streamed_source_completes_with_fec() {
        streams(SenderConfig {
            receivers: 1,
            fec: Some(FecShape::new(4, 1)),
            ..SenderConfig::default()
        });
    }

    #[test]
    fn a_streamed_source_completes_with_interleaved_fec() {
        // Groups of 12: the two and a half packets first held lie in
        // three blocks, none of them whole.
        streams(SenderConfig {
            receivers: 1,
            fec: Some(FecShape::new(4, 1).with_depth(3)),
            ..SenderConfig::default()
        });
    }
}

#[cfg(test)]
mod behind_tests {
    //! A relay's `Behind`: the receivers behind it are named when it fails.

    use super::Pair;

    #[test]
    fn a_relay_that_leaves_has_the_receivers_behind_it_named() {
        // No hash yet: the session waits in Closing, the relay in it.
        let mut p = Pair::new(None);
        p.exchange();
        let long = "n".repeat(245);
        p.receiver
            .report_behind(4, &["b1", "b2", &long, "never-fits"]);
        p.exchange();
        p.receiver.leave("interrupted");
        let until = p.now + std::time::Duration::from_secs(5);
        p.run_until(until);
        let outcome = p.sender.outcome().expect("the only receiver left");
        let reason = outcome.members[0].reason.clone().unwrap_or_default();
        assert!(reason.contains("interrupted"), "{reason}");
        // Cut at a name's end within 255 bytes: one name did not fit.
        assert!(
            reason.ends_with(&format!(
                "4 receivers behind it, unserved: b1,b2,{long} and 1 more"
            )),
            "{reason}"
        );
    }
}

#[cfg(test)]
mod hybrid_tests {
    //! `Sender::serve_elsewhere`: receivers served over TCP in a hybrid
    //! session shrink the group this session waits for.
    use super::{HASH, Pair, SIZE};
    use crate::{AutoConfig, SenderConfig, SenderEvent};
    use std::time::Duration;

    fn waiting_for(receivers: u16) -> SenderConfig {
        SenderConfig {
            receivers,
            join_wait: Duration::from_secs(5),
            auto: Some(AutoConfig::default()),
            ..SenderConfig::default()
        }
    }

    fn all_joined(p: &Pair) -> bool {
        p.sender_events
            .iter()
            .any(|e| matches!(e, SenderEvent::AllJoined))
    }

    #[test]
    fn the_rest_served_elsewhere_before_anyone_joins_the_one_that_joins_gets_it() {
        let mut p = Pair::with_config(SIZE, Some(HASH), waiting_for(3));
        p.sender.serve_elsewhere(p.now, 2);
        let end = p.at(10);
        p.run_until(end);
        assert!(p.sender.is_finished());
        let outcome = p.sender.outcome().unwrap();
        assert!(outcome.ok, "{outcome:?}");
        assert_eq!(outcome.members.len(), 1);
        assert_eq!(outcome.missing, 0, "nobody is missing: two went TCP");
        let chose = p
            .sender_events
            .iter()
            .find_map(|e| match e {
                SenderEvent::Chose(c) => Some(c.inputs.receivers),
                _ => None,
            })
            .expect("auto chose");
        assert_eq!(chose, 1, "auto chooses for the multicast group");
    }

    #[test]
    fn a_joined_receiver_waits_until_the_tcp_side_accounts_for_the_rest() {
        let mut p = Pair::with_config(SIZE, Some(HASH), waiting_for(3));
        let soon = p.now + Duration::from_millis(200);
        p.run_until(soon);
        assert!(!all_joined(&p), "1 of 3 joined, nobody else accounted for");
        p.sender.serve_elsewhere(p.now, 1);
        p.run_until(p.now + Duration::from_millis(200));
        assert!(!all_joined(&p), "1 over multicast and 1 over TCP of 3");
        p.sender.serve_elsewhere(p.now, 2);
        p.run_until(p.now + Duration::from_millis(1));
        assert!(all_joined(&p), "offered at once");
        let end = p.at(10);
        p.run_until(end);
        assert!(all_joined(&p));
        let outcome = p.sender.outcome().unwrap();
        assert!(outcome.ok, "{outcome:?}");
        assert_eq!(outcome.members.len(), 1);
        // Registration is over: the count no longer matters.
        p.sender.serve_elsewhere(p.now, 3);
        assert!(p.sender.outcome().unwrap().ok);
    }

    #[test]
    fn everyone_served_elsewhere_ends_the_multicast_session_saying_so() {
        let mut p = Pair::with_config(SIZE, Some(HASH), waiting_for(2));
        p.sender.serve_elsewhere(p.now, 2);
        let end = p.at(10);
        p.run_until(end);
        assert!(p.sender.is_finished());
        let outcome = p.sender.outcome().unwrap();
        assert!(!outcome.ok);
        assert!(outcome.members.is_empty());
        let error = outcome.error.as_deref().unwrap_or_default();
        assert!(error.contains("served over TCP"), "{error}");
    }

    #[test]
    fn more_multicast_members_than_left_for_multicast_are_all_kept() {
        // A hand-picked protocol: the ring's rotation follows the group.
        let config = SenderConfig {
            receivers: 2,
            protocol: crate::ProtocolId::Ring,
            window: 8,
            join_wait: Duration::from_secs(5),
            ..SenderConfig::default()
        };
        let mut p = Pair::with_config(SIZE, Some(HASH), config);
        p.run_until(p.now + Duration::from_millis(200));
        assert!(!all_joined(&p));
        // Both counted over TCP while one has joined over multicast: it
        // is kept, and served.
        p.sender.serve_elsewhere(p.now, 2);
        let end = p.at(10);
        p.run_until(end);
        assert!(all_joined(&p));
        let outcome = p.sender.outcome().unwrap();
        assert!(outcome.ok, "{outcome:?}");
        assert_eq!(outcome.members.len(), 1);
    }

    /// When the sender alone (nobody answering) multicasts a `Hello`,
    /// from `p.now` until `until`.
    fn hellos(p: &mut Pair, until: crate::Instant) -> Vec<Duration> {
        let mut buf = vec![0u8; crate::MAX_DATAGRAM];
        let mut at = Vec::new();
        loop {
            while let Some(t) = p.sender.poll_transmit(p.now, &p.data[..], &mut buf) {
                if t.kind == crate::Kind::Hello {
                    at.push(p.now.saturating_since(crate::Instant::ZERO));
                }
            }
            match p.sender.poll_timeout() {
                Some(next) if next <= until => {
                    p.now = next;
                    p.sender.handle_timeout(next);
                }
                _ => return at,
            }
        }
    }

    #[test]
    fn announce_again_restarts_the_fast_hellos_at_most_one_per_10_ms() {
        let ms = Duration::from_millis;
        let mut p = Pair::with_config(SIZE, Some(HASH), waiting_for(3));
        let first = hellos(&mut p, crate::Instant::ZERO + ms(400));
        assert_eq!(
            first,
            [0, 10, 30, 70, 150, 250, 350].map(ms),
            "the fast start, then every 100 ms"
        );
        // A probe at 405 ms: Hellos at once, then 10, 20, 40, 80 ms apart.
        p.now = crate::Instant::ZERO + ms(405);
        p.sender.announce_again(p.now);
        let again = hellos(&mut p, crate::Instant::ZERO + ms(700));
        assert_eq!(again, [405, 415, 435, 475, 555, 655].map(ms));
        // Called again 3 ms after a Hello: the next waits the 10 ms.
        p.now = crate::Instant::ZERO + ms(700);
        p.sender.announce_again(p.now);
        let one = hellos(&mut p, crate::Instant::ZERO + ms(703));
        assert_eq!(one, [ms(700)]);
        p.now = crate::Instant::ZERO + ms(703);
        p.sender.announce_again(p.now);
        let burst = hellos(&mut p, crate::Instant::ZERO + ms(725));
        assert_eq!(burst, [710, 720].map(ms), "{burst:?}");
    }
}
