//! The receiving endpoint: every receiver session of one socket set.
//!
//! One process may receive several sessions on one group (several senders,
//! `rmcast recv --sessions N`): one [`Receiver`] machine per session, all
//! fed from the same two sockets. The [`Endpoint`] owns those machines and
//! decides, for each datagram, which of them sees it — the one rule the
//! UDP runtime and the simulator both drive, as quinn-proto's `Endpoint`
//! routes datagrams to its connections. Like the machines it never touches
//! a socket or a clock.
//!
//! The rule:
//!
//! - **One session** (`sessions == 1`): the one machine sees every datagram,
//!   strays included, and counts them itself (`ReceiverStats::foreign`,
//!   `malformed`), exactly as a lone [`Receiver`] always has.
//! - **Several**: a `RateNak` from our own feedback address is our own,
//!   looped back by the group, and is dropped. Anything else goes to the
//!   machine whose session its header names; failing that, to the one
//!   machine still listening for the next announcement (a datagram without
//!   a readable header counts as naming no session). When a listener hears
//!   its session announced, a new listener starts, until `sessions`
//!   machines exist. What finds no machine is dropped and counted in
//!   [`EndpointStats`].
//!
//! Handles are indices in the order sessions were started and stay valid
//! for the endpoint's life: machines are never removed.

use crate::{DataChunk, NoReadBack, ReadBack, Receiver, ReceiverConfig, ReceiverEvent};
use crate::{Instant, Kind, SessionId, Transmit};
use std::net::SocketAddr;

/// What an [`Endpoint`] receives, and as whom.
#[derive(Clone, Debug)]
pub struct EndpointConfig {
    /// The first machine's configuration. Later listeners copy it with
    /// `session: None` and a receiver id derived from this one's.
    pub receiver: ReceiverConfig,
    /// At most this many sessions at once (at least one).
    pub sessions: usize,
    /// Our own feedback address: our multicast `RateNak`s come back on the
    /// group socket from it, and are not another member's.
    pub own_addr: Option<SocketAddr>,
}

/// One session of an [`Endpoint`]: an index in the order sessions started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionHandle(pub usize);

/// Datagrams the endpoint dropped because they belong to no machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Well-formed datagrams naming a session we do not receive, with no
    /// listener left to take them.
    pub unrouted: u64,
    /// Datagrams without a readable header, with no listener left.
    pub malformed: u64,
    /// Our own `RateNak`s, looped back by the group.
    pub own_rate_naks: u64,
}

/// A session announced on the group (a `Hello` heard), whether or not a
/// machine of this endpoint took it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeenSession {
    /// The announced session.
    pub session: SessionId,
    /// The address its `Hello` came from.
    pub sender: SocketAddr,
}

/// At most this many announced sessions are remembered
/// ([`Endpoint::sessions_seen`]): a hostile group cannot grow the list.
pub const SEEN_SESSIONS_MAX: usize = 16;

/// The receiver sessions of one socket set, and the rule routing each
/// datagram to its session.
pub struct Endpoint {
    config: EndpointConfig,
    machines: Vec<Receiver>,
    /// Every session announced on the group, in the order first heard
    /// (bounded): a receiver says which sessions it saw and which it took.
    seen: Vec<SeenSession>,
    /// Where the next transmit pass starts, so no session starves the rest.
    next_tx: usize,
    stats: EndpointStats,
    /// Continuous service: slots whose machine ended and was reported
    /// ([`Endpoint::retire`]), waiting to listen again.
    retired: Vec<usize>,
    /// Slots that started listening again since
    /// [`Endpoint::take_restarted`] last looked.
    restarted: Vec<SessionHandle>,
    /// Listeners started so far (each gets its own receiver id).
    listeners: u64,
}

impl Endpoint {
    /// An endpoint with one machine listening, starting at `now`.
    pub fn new(config: EndpointConfig, now: Instant) -> Self {
        assert!(
            config.sessions >= 1,
            "an endpoint receives at least one session"
        );
        let first = Receiver::new(config.receiver.clone(), now);
        Self {
            config,
            machines: vec![first],
            next_tx: 0,
            seen: Vec::new(),
            stats: EndpointStats::default(),
            retired: Vec::new(),
            restarted: Vec::new(),
            listeners: 1,
        }
    }

    /// Continuous service (`rmcast serve --max-concurrent`): the driver is
    /// done with session `h`, whose machine ended. Its slot takes a later
    /// session: at once if no machine is listening (it listens now), else
    /// once the listener takes a session. Either way
    /// [`Endpoint::take_restarted`] names it when it listens again, and the
    /// driver starts over for it. At most [`EndpointConfig::sessions`]
    /// sessions are ever live at once.
    pub fn retire(&mut self, h: SessionHandle, now: Instant) {
        if !self.machines[h.0].is_finished() || self.retired.contains(&h.0) {
            return;
        }
        if self.listener().is_none() {
            self.restart(h.0, now);
        } else {
            self.retired.push(h.0);
        }
    }

    /// Slots that listen again since the last call (see [`Endpoint::retire`]).
    pub fn take_restarted(&mut self) -> Vec<SessionHandle> {
        std::mem::take(&mut self.restarted)
    }

    fn restart(&mut self, slot: usize, now: Instant) {
        self.machines[slot] = Receiver::new(self.listener_config(), now);
        self.restarted.push(SessionHandle(slot));
    }

    /// The most sessions this endpoint takes.
    pub fn max_sessions(&self) -> usize {
        self.config.sessions
    }

    /// Machines started so far (sessions joined, plus a listener if any).
    pub fn session_count(&self) -> usize {
        self.machines.len()
    }

    /// The counters of datagrams dropped for belonging to no machine.
    pub fn stats(&self) -> &EndpointStats {
        &self.stats
    }

    /// The sessions announced on the group so far, in the order first heard
    /// (at most [`SEEN_SESSIONS_MAX`]). A machine takes the first it hears;
    /// the others tell the user that several senders share the group.
    #[must_use]
    pub fn sessions_seen(&self) -> &[SeenSession] {
        &self.seen
    }

    /// The announcement (`Hello`) a datagram is, read from its header
    /// (clear on a sealed packet too).
    fn announcement(datagram: &[u8]) -> Option<SessionId> {
        match rmcast_wire::peek_header(datagram) {
            Ok((Kind::Hello, header)) => Some(header.session),
            _ => None,
        }
    }

    /// Notes an announcement of `session` from `from`.
    fn note_announcement(&mut self, from: SocketAddr, session: SessionId) {
        if self.seen.len() < SEEN_SESSIONS_MAX && !self.seen.iter().any(|s| s.session == session) {
            self.seen.push(SeenSession {
                session,
                sender: from,
            });
        }
    }

    /// True when sealing: announcements count only once a machine opened them.
    fn sealed(&self) -> bool {
        self.config.receiver.group_key.is_some()
    }

    /// The machine of session `h`.
    pub fn session(&self, h: SessionHandle) -> &Receiver {
        &self.machines[h.0]
    }

    /// The machine of session `h`, for the application's calls
    /// (`accept_offer`, `confirm`, `leave`, ...).
    pub fn session_mut(&mut self, h: SessionHandle) -> &mut Receiver {
        &mut self.machines[h.0]
    }

    /// Every machine with its handle, in the order they started.
    pub fn iter(&self) -> impl Iterator<Item = (SessionHandle, &Receiver)> {
        self.machines
            .iter()
            .enumerate()
            .map(|(i, m)| (SessionHandle(i), m))
    }

    /// Every machine mutably, with its handle, in the order they started.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (SessionHandle, &mut Receiver)> {
        self.machines
            .iter_mut()
            .enumerate()
            .map(|(i, m)| (SessionHandle(i), m))
    }

    /// The machine still listening for the next announcement, if any.
    pub fn listener(&self) -> Option<SessionHandle> {
        self.machines
            .iter()
            .position(|m| m.session().is_none() && !m.is_finished())
            .map(SessionHandle)
    }

    /// True once every machine ended (and no more will start).
    pub fn is_finished(&self) -> bool {
        self.machines.iter().all(Receiver::is_finished)
    }

    /// Which machine should see `datagram` from `from`; `None` (counted)
    /// when none should. Drivers that drop data on purpose before the
    /// machine sees it (test loss) call this, then [`Endpoint::deliver`];
    /// the rest call [`Endpoint::handle_datagram`].
    pub fn route(&mut self, from: SocketAddr, datagram: &[u8]) -> Option<SessionHandle> {
        if !self.sealed()
            && let Some(session) = Self::announcement(datagram)
        {
            self.note_announcement(from, session);
        }
        if self.config.sessions == 1 {
            // One session: its machine sees everything and counts strays.
            return Some(SessionHandle(0));
        }
        let header = rmcast_wire::peek_header(datagram).ok();
        if let Some((Kind::RateNak, _)) = header
            && Some(from) == self.config.own_addr
        {
            self.stats.own_rate_naks += 1;
            return None;
        }
        let named = header.and_then(|(_, h)| {
            self.machines
                .iter()
                .position(|m| m.session() == Some(h.session))
        });
        let routed = named.map(SessionHandle).or_else(|| self.listener());
        if routed.is_none() {
            // A session beyond the ones we receive, or the group's senders
            // talking among themselves: not ours.
            match header {
                Some(_) => self.stats.unrouted += 1,
                None => self.stats.malformed += 1,
            }
        }
        routed
    }

    /// Hands `datagram` to session `h`'s machine (as [`Endpoint::route`]
    /// chose) and returns the object bytes to store, if any. If that machine
    /// was listening and has just heard its session announced, a new
    /// listener starts (until `sessions` machines exist).
    pub fn deliver<'a>(
        &mut self,
        h: SessionHandle,
        now: Instant,
        from: SocketAddr,
        datagram: &'a mut [u8],
    ) -> Option<DataChunk<'a>> {
        self.deliver_reading(h, now, from, datagram, &mut NoReadBack)
    }

    /// [`Endpoint::deliver`] to a machine that keeps no copy of its data
    /// packets ([`ReceiverConfig::fec_read_back`]): `store` gives back what
    /// session `h` was delivered, when FEC rebuilds a block
    /// ([`Receiver::handle_datagram_reading`]).
    pub fn deliver_reading<'a>(
        &mut self,
        h: SessionHandle,
        now: Instant,
        from: SocketAddr,
        datagram: &'a mut [u8],
        store: &mut dyn ReadBack,
    ) -> Option<DataChunk<'a>> {
        // Sealed: an announcement is noted only if its machine opened it (a
        // forged Hello must not fill the list of sessions seen).
        let announced = Self::announcement(datagram).filter(|_| self.sealed());
        let machine = &mut self.machines[h.0];
        let refused = machine.stats().auth.refused();
        let was_listening = machine.session().is_none();
        let chunk = machine.handle_datagram_reading(now, from, datagram, store);
        let authentic = machine.stats().auth.refused() == refused;
        if let Some(session) = announced
            && authentic
        {
            self.note_announcement(from, session);
        }
        let machine = &mut self.machines[h.0];
        if was_listening && machine.session().is_some() {
            if let Some(slot) = self.retired.pop() {
                self.restart(slot, now);
            } else if self.machines.len() < self.config.sessions {
                self.start_listener(now);
            }
        }
        chunk
    }

    /// A data packet session `h`'s machine rebuilt from FEC parity, to
    /// store like a received one: call after each [`Endpoint::deliver`]
    /// (or [`Endpoint::handle_datagram`]) until it gives `None`.
    pub fn poll_repaired(&mut self, h: SessionHandle) -> Option<DataChunk<'_>> {
        self.machines[h.0].poll_repaired()
    }

    /// Routes `datagram` and hands it to its machine: the session it went
    /// to and the object bytes to store, or `None` if it was dropped.
    pub fn handle_datagram<'a>(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &'a mut [u8],
    ) -> Option<(SessionHandle, Option<DataChunk<'a>>)> {
        let h = self.route(from, datagram)?;
        Some((h, self.deliver(h, now, from, datagram)))
    }

    /// Lets every machine whose deadline has passed handle it.
    pub fn handle_timeout(&mut self, now: Instant) {
        for m in &mut self.machines {
            if m.poll_timeout().is_some_and(|t| now >= t) {
                m.handle_timeout(now);
            }
        }
    }

    /// The earliest deadline of any machine.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.machines
            .iter()
            .filter_map(Receiver::poll_timeout)
            .min()
    }

    /// The next datagram any session owes, taking the sessions round robin
    /// (each call starts after the session that sent last).
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<(SessionHandle, Transmit)> {
        let n = self.machines.len();
        let first = self.next_tx % n;
        let (i, t) = (0..n).find_map(|k| {
            let i = (first + k) % n;
            self.machines[i].poll_transmit(now, buf).map(|t| (i, t))
        })?;
        self.next_tx = i + 1;
        Some((SessionHandle(i), t))
    }

    /// The next event of any session, the earliest started session first.
    pub fn poll_event(&mut self) -> Option<(SessionHandle, ReceiverEvent)> {
        self.machines
            .iter_mut()
            .enumerate()
            .find_map(|(i, m)| m.poll_event().map(|e| (SessionHandle(i), e)))
    }

    fn start_listener(&mut self, now: Instant) {
        let config = self.listener_config();
        self.machines.push(Receiver::new(config, now));
    }

    /// A new listener's configuration: the first machine's, for any
    /// session, with a receiver id of its own.
    fn listener_config(&mut self) -> ReceiverConfig {
        let k = self.listeners;
        self.listeners += 1;
        ReceiverConfig {
            receiver_id: mix(self.config.receiver.receiver_id ^ mix(k)),
            session: None,
            ..self.config.receiver.clone()
        }
    }
}

/// SplitMix64 finaliser: a distinct receiver id per listener from one seed.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    //! One routing rule: by session, else the listener, else dropped and counted.

    use super::*;
    use crate::{ProtocolId, Seq};
    use proptest::prelude::*;
    use rmcast_wire::{
        Body, Header, Hello, Offer, Packet, RANK_SENDER, RateNak, RateNakKind, Welcome,
    };
    use std::time::Duration;

    const T0: Instant = Instant::ZERO;

    fn sender(k: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], 5000 + k))
    }

    fn own() -> SocketAddr {
        "10.0.0.9:7000".parse().unwrap()
    }

    fn packet(session: u64, rank: u16, body: Body<'_>) -> Vec<u8> {
        let mut buf = vec![0u8; 4096];
        let n = Packet {
            header: Header::new(SessionId(session), rank),
            body,
        }
        .encode(&mut buf)
        .unwrap();
        buf.truncate(n);
        buf
    }

    fn hello(session: u64) -> Vec<u8> {
        packet(
            session,
            RANK_SENDER,
            Body::Hello(Hello {
                receivers_wanted: 1,
                protocol: ProtocolId::NakPoll,
            }),
        )
    }

    fn endpoint(sessions: usize) -> Endpoint {
        Endpoint::new(
            EndpointConfig {
                receiver: ReceiverConfig {
                    receiver_id: 77,
                    ..ReceiverConfig::default()
                },
                sessions,
                own_addr: Some(own()),
            },
            T0,
        )
    }

    /// The receiver id in the `Join` session `h` owes now.
    fn join_id(ep: &mut Endpoint, h: SessionHandle) -> u64 {
        let mut buf = vec![0u8; crate::MAX_DATAGRAM];
        let t = ep
            .session_mut(h)
            .poll_transmit(T0, &mut buf)
            .expect("a Join");
        match Packet::decode(&buf[..t.len]).unwrap().body {
            Body::Join(j) => j.receiver_id,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_retired_slot_listens_again_and_at_most_the_limit_is_live() {
        let mut ep = endpoint(2);
        ep.handle_datagram(T0, sender(1), &mut hello(5));
        ep.handle_datagram(T0, sender(2), &mut hello(6));
        assert_eq!(ep.session_count(), 2);
        assert_eq!(ep.listener(), None, "two live sessions: nobody listens");
        // A third sender's session is nobody's while both run.
        assert_eq!(ep.route(sender(3), &hello(7)), None);
        // Session 5 ends; its slot listens again at once.
        ep.session_mut(SessionHandle(0)).leave("done");
        ep.retire(SessionHandle(0), T0);
        assert_eq!(ep.take_restarted(), [SessionHandle(0)]);
        assert!(ep.take_restarted().is_empty());
        assert_eq!(ep.listener(), Some(SessionHandle(0)));
        ep.handle_datagram(T0, sender(3), &mut hello(7));
        let first = join_id(&mut ep, SessionHandle(0));
        // Session 7 took slot 0: nothing listens, so the slot of session 6,
        // once it ends, listens at once (a second retire changes nothing).
        ep.session_mut(SessionHandle(1)).leave("done");
        ep.retire(SessionHandle(1), T0);
        ep.retire(SessionHandle(1), T0);
        assert_eq!(ep.take_restarted(), [SessionHandle(1)]);
        assert_eq!(ep.route(sender(4), &hello(8)), Some(SessionHandle(1)));
        assert_eq!(ep.session_count(), 2, "never more slots than the limit");
        // With a listener up, an ended slot waits for the listener to take
        // a session, then listens.
        let mut ep = endpoint(3);
        ep.handle_datagram(T0, sender(1), &mut hello(5));
        assert_eq!(ep.listener(), Some(SessionHandle(1)));
        ep.session_mut(SessionHandle(0)).leave("done");
        ep.retire(SessionHandle(0), T0);
        assert!(ep.take_restarted().is_empty(), "one listener at a time");
        ep.handle_datagram(T0, sender(2), &mut hello(6));
        assert_eq!(ep.take_restarted(), [SessionHandle(0)]);
        assert_eq!(ep.session_count(), 2, "the ended slot, not a new one");
        // A fresh listener joins with an id of its own.
        assert_ne!(first, 77);
    }

    #[test]
    fn each_datagram_goes_to_the_session_its_header_names() {
        let mut ep = endpoint(2);
        assert_eq!(
            ep.handle_datagram(T0, sender(1), &mut hello(5))
                .map(|r| r.0),
            Some(SessionHandle(0))
        );
        assert_eq!(
            ep.session_count(),
            2,
            "a listener starts once the first is taken"
        );
        assert_eq!(
            ep.handle_datagram(T0, sender(2), &mut hello(6))
                .map(|r| r.0),
            Some(SessionHandle(1))
        );
        assert_eq!(ep.session(SessionHandle(0)).session(), Some(SessionId(5)));
        assert_eq!(ep.session(SessionHandle(1)).session(), Some(SessionId(6)));
        // Repeated announcements find their own machines, whatever the order.
        assert_eq!(ep.route(sender(2), &hello(6)), Some(SessionHandle(1)));
        assert_eq!(ep.route(sender(1), &hello(5)), Some(SessionHandle(0)));
        assert_eq!(ep.listener(), None);
        assert_eq!(ep.stats(), &EndpointStats::default());
    }

    #[test]
    fn every_announced_session_is_remembered_once_and_the_list_is_bounded() {
        let mut ep = endpoint(1);
        ep.handle_datagram(T0, sender(1), &mut hello(5));
        ep.handle_datagram(T0, sender(2), &mut hello(6));
        ep.handle_datagram(T0, sender(1), &mut hello(5));
        assert_eq!(ep.session(SessionHandle(0)).session(), Some(SessionId(5)));
        assert_eq!(
            ep.sessions_seen(),
            &[
                SeenSession {
                    session: SessionId(5),
                    sender: sender(1)
                },
                SeenSession {
                    session: SessionId(6),
                    sender: sender(2)
                },
            ]
        );
        for k in 0..100 {
            ep.route(sender(3), &hello(1000 + k));
        }
        assert_eq!(ep.sessions_seen().len(), SEEN_SESSIONS_MAX);
    }

    #[test]
    fn an_offer_of_a_new_session_starts_it_and_its_events_name_it() {
        let mut ep = endpoint(2);
        ep.handle_datagram(T0, sender(1), &mut hello(5));
        ep.handle_datagram(T0, sender(2), &mut hello(6));
        let id = join_id(&mut ep, SessionHandle(1));
        assert_ne!(
            id,
            join_id(&mut ep, SessionHandle(0)),
            "each session its own id"
        );
        let welcome = packet(
            6,
            RANK_SENDER,
            Body::Welcome(Welcome {
                receiver_id: id,
                rank: 0,
                upstream: None,
            }),
        );
        let offer = packet(
            6,
            RANK_SENDER,
            Body::Offer(Offer {
                object_size: 2500,
                isn: Seq(10),
                payload_size: 1000,
                window: 8,
                protocol: ProtocolId::NakPoll,
                protocol_param: 0,
                receivers: 1,
                test_loss_ppm: 0,
                fec: None,
                name: "obj.bin",
            }),
        );
        ep.handle_datagram(T0, sender(2), &mut welcome.clone());
        ep.handle_datagram(T0, sender(2), &mut offer.clone());
        let events: Vec<_> = std::iter::from_fn(|| ep.poll_event()).collect();
        assert!(matches!(
            events[0],
            (
                SessionHandle(1),
                ReceiverEvent::Admitted {
                    session: SessionId(6),
                    rank: 0,
                    ..
                }
            )
        ));
        assert!(
            matches!(&events[1], (SessionHandle(1), ReceiverEvent::Offer(o)) if o.name == "obj.bin"),
            "{:?}",
            events.iter().map(|e| e.0).collect::<Vec<_>>()
        );
        assert_eq!(events.len(), 2);
    }

    #[test]
    fn strays_with_no_machine_left_are_dropped_and_counted() {
        let mut ep = endpoint(2);
        // With a listener, strays go to it, which counts them itself.
        assert_eq!(
            ep.route(sender(3), b"not a datagram"),
            Some(SessionHandle(0))
        );
        ep.handle_datagram(T0, sender(1), &mut hello(5));
        ep.handle_datagram(T0, sender(2), &mut hello(6));
        assert_eq!(
            ep.handle_datagram(T0, sender(3), &mut hello(7))
                .map(|r| r.0),
            None
        );
        assert_eq!(
            ep.handle_datagram(T0, sender(3), &mut b"garbage".to_vec())
                .map(|r| r.0),
            None
        );
        let own_nak = packet(
            5,
            0,
            Body::RateNak(RateNak {
                kind: RateNakKind::Exp,
                seq: Seq(3),
            }),
        );
        assert_eq!(ep.route(own(), &own_nak), None);
        // Another member's RateNak about our session reaches its machine.
        assert_eq!(ep.route(sender(4), &own_nak), Some(SessionHandle(0)));
        assert_eq!(
            ep.stats(),
            &EndpointStats {
                unrouted: 1,
                malformed: 1,
                own_rate_naks: 1,
            }
        );
    }

    #[test]
    fn no_more_sessions_start_than_asked_for() {
        let mut ep = endpoint(3);
        for s in 1..=5 {
            ep.handle_datagram(T0, sender(s as u16), &mut hello(s));
        }
        assert_eq!(ep.session_count(), 3);
        let joined: Vec<_> = ep.iter().map(|(_, m)| m.session()).collect();
        assert_eq!(joined, [1, 2, 3].map(|s| Some(SessionId(s))));
        assert_eq!(ep.stats().unrouted, 2);
    }

    #[test]
    fn one_session_sees_every_datagram_and_counts_strays_itself() {
        let mut ep = endpoint(1);
        ep.handle_datagram(T0, sender(1), &mut hello(5));
        assert_eq!(ep.session_count(), 1);
        let nak = packet(
            5,
            0,
            Body::RateNak(RateNak {
                kind: RateNakKind::Exp,
                seq: Seq(3),
            }),
        );
        for bytes in [hello(7), b"garbage".to_vec(), nak] {
            assert_eq!(ep.route(own(), &bytes), Some(SessionHandle(0)));
            ep.deliver(SessionHandle(0), T0, own(), &mut bytes.clone());
        }
        let stats = ep.session(SessionHandle(0)).stats();
        assert_eq!(
            (stats.foreign, stats.malformed, stats.rate_naks_heard),
            (1, 1, 1)
        );
        assert_eq!(ep.stats(), &EndpointStats::default());
    }

    #[test]
    fn transmits_take_the_sessions_round_robin() {
        let mut ep = endpoint(2);
        ep.handle_datagram(T0, sender(1), &mut hello(5));
        ep.handle_datagram(T0, sender(2), &mut hello(6));
        let mut buf = vec![0u8; crate::MAX_DATAGRAM];
        // Each owes a Join; session 0 goes first.
        assert_eq!(
            ep.poll_transmit(T0, &mut buf).map(|t| t.0),
            Some(SessionHandle(0))
        );
        // Both owe their repeat later: the pass starts after session 0.
        let later = T0 + Duration::from_secs(1);
        ep.handle_timeout(later);
        let order: Vec<_> = std::iter::from_fn(|| ep.poll_transmit(later, &mut buf))
            .map(|t| t.0.0)
            .take(4)
            .collect();
        assert_eq!(order, [1, 0]);
    }

    proptest! {
        /// Any byte strings, well-formed announcements among them, from any
        /// of a few addresses: nothing panics and the limit holds.
        #[test]
        fn arbitrary_datagrams_never_panic_it(
            sessions in 1usize..4,
            inputs in proptest::collection::vec(
                (0u16..4, prop_oneof![
                    (0u64..6).prop_map(hello),
                    proptest::collection::vec(any::<u8>(), 0..64),
                    (0u64..6, any::<Vec<u8>>()).prop_map(|(s, tail)| {
                        let mut p = hello(s);
                        p.truncate(24);
                        p.extend(tail.into_iter().take(40));
                        p
                    }),
                ]),
                0..64,
            ),
        ) {
            let mut ep = endpoint(sessions);
            let mut buf = vec![0u8; crate::MAX_DATAGRAM];
            for (i, (who, bytes)) in inputs.iter().enumerate() {
                let now = T0 + Duration::from_millis(i as u64 * 30);
                let from = if *who == 3 { own() } else { sender(*who) };
                ep.handle_datagram(now, from, &mut bytes.clone());
                ep.handle_timeout(now);
                while ep.poll_event().is_some() {}
                let mut sent = 0;
                while ep.poll_transmit(now, &mut buf).is_some() {
                    sent += 1;
                    prop_assert!(sent < 1000, "transmits without end");
                }
                prop_assert!(ep.session_count() <= sessions);
            }
        }
    }
}
