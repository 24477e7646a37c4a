//! The stream machines sealed: a keyed sender and receiver driven by hand
//! over a lossless wire, against plain, foreign and forged datagrams.

use super::*;
use crate::security::{GroupKey, KEY_LEN, Keyring};
use proptest::prelude::*;
use rmcast_wire::stream::{StreamBody, StreamKind, StreamPacket};
use rmcast_wire::{MAX_DATAGRAM, Seq, SessionId, seal::is_sealed};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

const S: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::new(10, 0, 0, 1),
    5000,
));
const R: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::new(10, 0, 1, 1),
    6000,
));
const SESSION: SessionId = SessionId(0xABCD);
const NONCE: [u8; 16] = [7; 16];

fn key(b: u8) -> Arc<GroupKey> {
    Arc::new(GroupKey::from_secret([b; KEY_LEN]))
}

fn ms(x: u64) -> Instant {
    Instant::from_nanos(x * 1_000_000)
}

fn sender_config(key: Option<Arc<GroupKey>>) -> StreamSenderConfig {
    StreamSenderConfig {
        admission: Admission::Invite {
            receivers: vec![R],
            concurrency: 1,
        },
        payload_size: 100,
        message_bytes_max: 400,
        send_buffer_packets: 64,
        group_key: key,
        ..StreamSenderConfig::default()
    }
}

fn receiver_config(key: Option<Arc<GroupKey>>) -> StreamReceiverConfig {
    StreamReceiverConfig {
        receiver_id: 0x1D,
        buffer_packets: 16,
        sender_timeout: Duration::from_secs(2),
        linger: Duration::from_millis(50),
        group_key: key,
        ..StreamReceiverConfig::default()
    }
}

/// Who sent a datagram on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum From {
    Sender,
    Receiver,
}

/// A sender and a receiver on a lossless wire with 1 ms of delay each way,
/// stepped in virtual time; everything each sent is logged.
struct Pair {
    s: StreamSender,
    r: StreamReceiver,
    now: Instant,
    /// (sent at, by, bytes) of every datagram.
    wire: Vec<(Instant, From, Vec<u8>)>,
    in_flight: Vec<(Instant, From, Vec<u8>)>,
    read: Vec<Vec<u8>>,
    events: Vec<String>,
    to_send: Vec<Vec<u8>>,
    closed: bool,
}

impl Pair {
    fn new(skey: Option<Arc<GroupKey>>, rkey: Option<Arc<GroupKey>>, msgs: Vec<Vec<u8>>) -> Self {
        let s = StreamSender::new(sender_config(skey), SESSION, Seq(10), 99, NONCE, ms(0))
            .expect("valid");
        let r = StreamReceiver::new(receiver_config(rkey), ms(0));
        Self {
            s,
            r,
            now: ms(0),
            wire: Vec::new(),
            in_flight: Vec::new(),
            read: Vec::new(),
            events: Vec::new(),
            to_send: msgs.into_iter().rev().collect(),
            closed: false,
        }
    }

    /// One instant: applications, transmissions, then the next instant's
    /// arrivals and timers. False when nothing is left to happen.
    fn step(&mut self) -> bool {
        let now = self.now;
        while let Some(m) = self.to_send.last() {
            if self.s.send(m).is_err() {
                break;
            }
            self.to_send.pop();
        }
        if self.to_send.is_empty() && !self.closed {
            self.s.close();
            self.closed = true;
        }
        let mut out = Vec::new();
        while self.r.read(&mut out).is_some() {
            self.read.push(std::mem::take(&mut out));
        }
        let mut buf = vec![0u8; MAX_DATAGRAM];
        while let Some(t) = self.s.poll_transmit(now, &mut buf) {
            self.wire.push((now, From::Sender, buf[..t.len].to_vec()));
            self.in_flight.push((
                now + Duration::from_millis(1),
                From::Sender,
                buf[..t.len].to_vec(),
            ));
        }
        while let Some(t) = self.r.poll_transmit(now, &mut buf) {
            self.wire.push((now, From::Receiver, buf[..t.len].to_vec()));
            self.in_flight.push((
                now + Duration::from_millis(1),
                From::Receiver,
                buf[..t.len].to_vec(),
            ));
        }
        while let Some(e) = self.s.poll_event() {
            self.events.push(format!("{:?} s {e:?}", now));
        }
        while let Some(e) = self.r.poll_event() {
            self.events.push(format!("{:?} r {e:?}", now));
        }
        let next = [
            self.s.poll_timeout(),
            self.r.poll_timeout(),
            self.in_flight.iter().map(|f| f.0).min(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else { return false };
        self.now = next.max(Instant::from_nanos(now.as_nanos() + 1));
        let now = self.now;
        let (due, later): (Vec<_>, Vec<_>) = self.in_flight.drain(..).partition(|f| f.0 <= now);
        self.in_flight = later;
        for (_, from, mut bytes) in due {
            match from {
                From::Sender => self.r.handle_datagram(now, S, &mut bytes),
                From::Receiver => self.s.handle_datagram(now, R, &mut bytes),
            }
        }
        if self.s.poll_timeout().is_some_and(|t| t <= now) {
            self.s.handle_timeout(now);
        }
        if self.r.poll_timeout().is_some_and(|t| t <= now) {
            self.r.handle_timeout(now);
        }
        true
    }

    fn run(&mut self, until: Instant) {
        let mut steps = 0;
        while self.now < until && self.step() {
            steps += 1;
            assert!(steps < 200_000, "runaway");
        }
    }

    /// Everything observable but the refusal counters.
    fn observable(&self) -> String {
        let mut ss = self.s.stats().clone();
        let mut rs = self.r.stats().clone();
        for a in [&mut ss.auth, &mut rs.auth] {
            *a = crate::security::AuthStats {
                opened: a.opened,
                sealed: a.sealed,
                ..Default::default()
            };
        }
        format!(
            "{:?} {ss:?} {rs:?} {:?} {:?} {:?} {:?} {:?}",
            self.now,
            self.s.poll_timeout(),
            self.r.poll_timeout(),
            self.wire,
            self.read,
            self.events
        )
    }
}

fn msgs(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|k| (0..(k * 37) % 400).map(|j| (k * 13 + j) as u8).collect())
        .collect()
}

#[test]
fn a_keyed_pair_streams_byte_exact_and_nothing_travels_in_the_clear() {
    let sent = msgs(40);
    let mut p = Pair::new(Some(key(1)), Some(key(1)), sent.clone());
    p.run(ms(60_000));
    assert_eq!(p.read, sent);
    assert!(p.s.is_closed(), "{:?}", p.events);
    assert!(p.wire.iter().all(|(_, _, b)| is_sealed(b)));
    // Message bytes never appear on the wire.
    let needle = &sent[39][..32];
    assert!(
        !p.wire
            .iter()
            .any(|(_, _, b)| b.windows(32).any(|w| w == needle))
    );
    let (sa, ra) = (p.s.stats().auth, p.r.stats().auth);
    assert_eq!(sa.refused() + ra.refused(), 0, "{sa:?} {ra:?}");
    let by_sender = p.wire.iter().filter(|w| w.1 == From::Sender).count() as u64;
    assert_eq!((sa.sealed, ra.opened), (by_sender, by_sender));
    assert_eq!(ra.sealed, sa.opened);
}

#[test]
fn sealed_data_packets_keep_the_datagram_size_of_plain_ones() {
    let sent = vec![vec![5u8; 400]];
    let mut plain = Pair::new(None, None, sent.clone());
    let mut keyed = Pair::new(Some(key(1)), Some(key(1)), sent.clone());
    plain.run(ms(10_000));
    keyed.run(ms(10_000));
    assert_eq!((&plain.read, &keyed.read), (&sent, &sent));
    let mut observer = Keyring::new(key(1));
    let mut data = Vec::new();
    let mut plain_data = Vec::new();
    for (_, from, bytes) in &keyed.wire {
        let mut b = bytes.clone();
        let o = observer.open(&mut b).expect("authentic");
        let p = StreamPacket::decode(&b[..o.len]).unwrap();
        if *from == From::Sender
            && let StreamBody::Invite(i) = p.body
        {
            // Receivers allocate for the sealed payload.
            assert_eq!(usize::from(i.payload_size), 100 - SEAL_DATA_OVERHEAD);
        }
        if let StreamBody::Data(d) = p.body {
            let polls = d.poll.map_or(0, |q| q.entries.len());
            data.push((bytes.len(), d.payload.len(), polls));
        }
    }
    for (_, _, bytes) in &plain.wire {
        if let Ok(p) = StreamPacket::decode(bytes)
            && let StreamBody::Data(d) = p.body
        {
            let polls = d.poll.map_or(0, |q| q.entries.len());
            plain_data.push((bytes.len(), d.payload.len(), polls));
        }
    }
    // 400 bytes: 4 plain packets of 100, 6 sealed ones of 76 (5 full).
    assert_eq!(plain_data.iter().filter(|d| d.1 == 100).count(), 4);
    assert_eq!(data.iter().filter(|d| d.1 == 76).count(), 5);
    let full_plain = plain_data.iter().find(|d| d.1 == 100 && d.2 == 0).unwrap();
    let full_sealed = data.iter().find(|d| d.1 == 76 && d.2 == 0).unwrap();
    assert_eq!(full_plain.0, full_sealed.0, "{plain_data:?} {data:?}");
    assert!(data.iter().all(|d| d.1 <= 76));
}

#[test]
fn the_smallest_keyed_payload_leaves_room_for_the_seal() {
    let mut c = sender_config(Some(key(1)));
    c.payload_size = SEAL_DATA_OVERHEAD as u16;
    c.message_bytes_max = 1;
    assert_eq!(
        c.validate(),
        Err(StreamConfigError::Invalid("payload_size"))
    );
    c.payload_size += 1;
    assert_eq!(c.validate(), Ok(()));
    assert_eq!(c.packet_payload(), 1);
}

/// The first failure a receiver reported, if any.
fn failure(p: &Pair) -> Option<&String> {
    p.events.iter().find(|e| e.contains("Failed"))
}

#[test]
fn a_keyed_receiver_that_hears_only_plain_packets_fails_saying_why() {
    let mut p = Pair::new(None, Some(key(1)), msgs(3));
    p.run(ms(5_000));
    let f = failure(&p).expect("the receiver gave up");
    assert!(
        f.contains("heard nothing it could authenticate for 2.0 s"),
        "{f}"
    );
    assert!(f.contains("unsealed packet"), "{f}");
    assert!(
        f.contains("give both sides --key, or both --insecure"),
        "{f}"
    );
    assert!(p.r.is_finished());
    assert!(
        !p.wire.iter().any(|w| w.1 == From::Receiver),
        "it never answered"
    );
    assert!(p.r.stats().auth.unsealed > 0);
    // The sender gave up on it too, and ended.
    assert!(p.s.is_closed());
}

#[test]
fn a_keyless_receiver_that_hears_only_sealed_packets_fails_saying_why() {
    let mut p = Pair::new(Some(key(1)), None, msgs(3));
    p.run(ms(5_000));
    let f = failure(&p).expect("the receiver gave up");
    assert!(f.contains("this side has no group key"), "{f}");
    assert!(f.contains("pass --key FILE"), "{f}");
    assert!(!p.wire.iter().any(|w| w.1 == From::Receiver));
    assert!(p.r.stats().auth.no_key > 0);
    assert_eq!(p.r.stats().malformed, 0, "refused before decoding");
}

#[test]
fn a_receiver_with_another_key_fails_saying_why() {
    let mut p = Pair::new(Some(key(1)), Some(key(2)), msgs(3));
    p.run(ms(5_000));
    let f = failure(&p).expect("the receiver gave up");
    assert!(
        f.contains("another group key") || f.contains("failed authentication"),
        "{f}"
    );
    assert!(f.contains("every member needs the same --key file"), "{f}");
}

#[test]
fn a_member_whose_sender_turns_to_forgeries_says_so_when_it_times_out() {
    let mut p = Pair::new(Some(key(1)), Some(key(1)), msgs(3));
    // Joined, then only forged packets under another key arrive.
    while !p.events.iter().any(|e| e.contains("Connected")) {
        assert!(p.step());
    }
    let mut other = Pair::new(Some(key(2)), Some(key(2)), msgs(1));
    other.run(ms(50));
    let t0 = p.now;
    let mut forged: Vec<Vec<u8>> = other
        .wire
        .iter()
        .filter(|w| w.1 == From::Sender)
        .map(|w| w.2.clone())
        .collect();
    for (k, f) in forged.iter_mut().enumerate() {
        p.r.handle_datagram(t0 + Duration::from_millis(k as u64), S, f);
    }
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut event = None;
    for _ in 0..100 {
        let t = p.r.poll_timeout().expect("a timer");
        p.r.handle_timeout(t);
        while p.r.poll_transmit(t, &mut buf).is_some() {}
        event = p.r.poll_event();
        if event.is_some() {
            break;
        }
    }
    match event {
        Some(StreamReceiverEvent::Failed(f)) => {
            assert!(
                f.starts_with("sender silent for 2.0 s; 10.0.0.1:5000: "),
                "{f}"
            );
            assert!(f.contains("wrong group key?"), "{f}");
        }
        other => panic!("{other:?}"),
    }
}

/// Ways to forge a datagram from what was on the wire.
#[derive(Clone, Debug)]
enum Forge {
    BitFlip { pick: usize, bit: usize },
    Truncate { pick: usize, len: usize },
    Replay { pick: usize },
    ForeignSession { pick: usize, bit: u8 },
    Unsealed { pick: usize },
    WrongKey { pick: usize },
    Garbage(Vec<u8>),
}

fn forge_strategy() -> impl Strategy<Value = Forge> {
    prop_oneof![
        (any::<usize>(), any::<usize>()).prop_map(|(pick, bit)| Forge::BitFlip { pick, bit }),
        (any::<usize>(), any::<usize>()).prop_map(|(pick, len)| Forge::Truncate { pick, len }),
        any::<usize>().prop_map(|pick| Forge::Replay { pick }),
        (any::<usize>(), 0u8..64).prop_map(|(pick, bit)| Forge::ForeignSession { pick, bit }),
        any::<usize>().prop_map(|pick| Forge::Unsealed { pick }),
        any::<usize>().prop_map(|pick| Forge::WrongKey { pick }),
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(Forge::Garbage),
    ]
}

/// The forged datagram and whom it goes to (the original's addressee).
fn forge(f: &Forge, wire: &[(Instant, From, Vec<u8>)], other: &mut Keyring) -> (From, Vec<u8>) {
    let at = |pick: usize| &wire[pick % wire.len()];
    let to = |from: From| match from {
        From::Sender => From::Receiver,
        From::Receiver => From::Sender,
    };
    let plain = |b: &[u8]| {
        // A fresh observer learns the session from the first nonce packet
        // (the Invite), then opens this one.
        let mut k = Keyring::new(key(1));
        let mut first = wire[0].2.clone();
        let o = k.open(&mut first).expect("the invite opens");
        if b == wire[0].2.as_slice() {
            first.truncate(o.len);
            return first;
        }
        let mut b = b.to_vec();
        let o = k.open(&mut b).expect("a delivered datagram opens");
        b.truncate(o.len);
        b
    };
    match f {
        Forge::BitFlip { pick, bit } => {
            let (_, from, b) = at(*pick);
            let mut b = b.clone();
            let bit = bit % (b.len() * 8);
            b[bit / 8] ^= 1 << (bit % 8);
            (to(*from), b)
        }
        Forge::Truncate { pick, len } => {
            let (_, from, b) = at(*pick);
            (to(*from), b[..len % b.len()].to_vec())
        }
        Forge::Replay { pick } => {
            let (_, from, b) = at(*pick);
            (to(*from), b.clone())
        }
        Forge::ForeignSession { pick, bit } => {
            let (_, from, b) = at(*pick);
            let mut b = b.clone();
            b[8 + usize::from(bit / 8)] ^= 1 << (bit % 8);
            (to(*from), b)
        }
        Forge::Unsealed { pick } => {
            let (_, from, b) = at(*pick);
            (to(*from), plain(b))
        }
        Forge::WrongKey { pick } => {
            let (_, from, b) = at(*pick);
            let mut p = plain(b);
            let n = p.len();
            if p[6..8] != rmcast_wire::RANK_SENDER.to_be_bytes() {
                // Receiver packets: the other key's sender side cannot
                // seal them; a garbage tag under our hint does instead.
                let mut b = b.clone();
                let l = b.len();
                b[l - 1] ^= 0xFF;
                return (to(*from), b);
            }
            p.resize(n + rmcast_wire::seal::SEAL_OVERHEAD_MAX, 0);
            let len = other.seal(&mut p, n, true).expect("seals");
            p.truncate(len);
            (to(*from), p)
        }
        Forge::Garbage(g) if g.len() % 2 == 0 => (From::Sender, g.clone()),
        Forge::Garbage(g) => (From::Receiver, g.clone()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Forged, modified, cut, replayed, foreign, plain and random datagrams
    /// fed into a live keyed sender and receiver change nothing: the pair
    /// behaves, datagram for datagram and instant for instant, as a twin
    /// that never saw them, and neither answers them.
    #[test]
    fn forgeries_change_no_state_and_get_no_reply(
        at_steps in proptest::collection::vec(1usize..400, 1..6),
        forgeries in proptest::collection::vec(forge_strategy(), 1..40),
    ) {
        let sent = msgs(30);
        let mut clean = Pair::new(Some(key(1)), Some(key(1)), sent.clone());
        let mut attacked = Pair::new(Some(key(1)), Some(key(1)), sent.clone());
        let mut other = Keyring::for_sender(key(2), SESSION, [9; 16]);
        let mut refused = 0u64;
        let mut step = 0usize;
        loop {
            step += 1;
            prop_assert!(step < 200_000);
            // Only what was delivered already: a datagram still in flight
            // delivered early is not a forgery.
            let now = attacked.now;
            let delivered: Vec<_> = attacked
                .wire
                .iter()
                .filter(|w| w.0 + Duration::from_millis(1) <= now)
                .cloned()
                .collect();
            if at_steps.contains(&step) && !delivered.is_empty() {
                let before = attacked.observable();
                for f in &forgeries {
                    let (to, mut bytes) = forge(f, &delivered, &mut other);
                    match to {
                        From::Receiver => attacked.r.handle_datagram(now, S, &mut bytes),
                        From::Sender => attacked.s.handle_datagram(now, R, &mut bytes),
                    }
                    refused += 1;
                }
                // Nothing changed, not even what it would send now.
                prop_assert_eq!(before, attacked.observable());
            }
            let a = clean.step();
            let b = attacked.step();
            prop_assert_eq!(a, b);
            prop_assert_eq!(clean.observable(), attacked.observable());
            if !a {
                break;
            }
        }
        prop_assert_eq!(&attacked.read, &sent);
        let total = |p: &Pair| p.s.stats().auth.refused() + p.r.stats().auth.refused();
        prop_assert_eq!(total(&attacked) - total(&clean), refused);
    }
}

#[test]
fn every_kind_the_pair_sends_is_sealed_with_the_nonce_but_data() {
    let mut p = Pair::new(Some(key(1)), Some(key(1)), msgs(20));
    p.run(ms(60_000));
    let mut seen = Vec::new();
    let mut observer = Keyring::new(key(1));
    for (_, from, b) in &p.wire {
        let nonce = b[4] & rmcast_wire::seal::FLAG_NONCE != 0;
        let kind = StreamKind::from_u8(b[3]).unwrap();
        let mut c = b.clone();
        observer.open(&mut c).expect("authentic");
        match from {
            From::Sender => assert_eq!(nonce, kind != StreamKind::Data, "{kind:?}"),
            From::Receiver => assert!(!nonce, "{kind:?}"),
        }
        if !seen.contains(&kind) {
            seen.push(kind);
        }
    }
    assert!(seen.len() >= 7, "{seen:?}");
}
