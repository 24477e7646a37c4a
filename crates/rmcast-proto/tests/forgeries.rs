//! Forgeries change nothing: a sealed sender and its receivers run twice in
//! lockstep over an ideal in-memory network, the same datagrams at the same
//! instants; one copy also receives, before every real datagram, a burst
//! of forgeries aimed at the same machine — replays of what that machine
//! already accepted, real packets with a bit flipped or cut short, plain
//! packets naming the session, packets sealed under another key that
//! carries the right key hint, and noise. After each forgery the attacked
//! machine owes nothing (no reply), yields no bytes and no event, and keeps
//! its deadline; at the end the two copies sent byte-identical datagrams,
//! delivered the same object and differ only in their refusal counters,
//! which account for every forgery.
//!
//! `RMCAST_FORGERY_SEEDS` / `RMCAST_FORGERIES` scale it (defaults: 4 seeds,
//! 25,000 forgeries each: 10⁵ in all). A failure prints its seed.

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use rmcast_proto::security::{GroupKey, KEY_LEN, Keyring};
use rmcast_proto::{
    Dest, Instant, ObjectInfo, ProtocolId, Receiver, ReceiverConfig, ReceiverEvent, Sender,
    SenderConfig, Seq, SessionId, Status,
};
use rmcast_wire::{Body, Bye, Close, Data, Header, Packet, RANK_SENDER};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

const DELAY: Duration = Duration::from_micros(50);
const SESSION: SessionId = SessionId(0x5E55_1011);

fn sender_addr() -> SocketAddr {
    "10.0.0.1:4000".parse().unwrap()
}

fn receiver_addr(k: usize) -> SocketAddr {
    format!("10.0.1.{}:5000", k + 1).parse().unwrap()
}

fn key() -> Arc<GroupKey> {
    Arc::new(GroupKey::from_secret([0x42; KEY_LEN]))
}

/// Who a datagram is for: the sender, or receiver k.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Who {
    Sender,
    Receiver(usize),
}

struct World {
    now: Instant,
    sender: Sender,
    rxs: Vec<Receiver>,
    data: Vec<Vec<u8>>,
    object: Vec<u8>,
    flights: VecDeque<(Instant, SocketAddr, Who, Vec<u8>)>,
    /// Every datagram sent, in order, by whom.
    sent: Vec<(Who, Vec<u8>)>,
    /// Per machine, the sealed datagrams it accepted (for replays).
    accepted: Vec<Vec<Vec<u8>>>,
}

fn slot(w: Who) -> usize {
    match w {
        Who::Sender => 0,
        Who::Receiver(k) => k + 1,
    }
}

impl World {
    fn new(receivers: usize, size: usize) -> World {
        let object: Vec<u8> = (0..size).map(|i| (i * 7 + i / 251) as u8).collect();
        let config = SenderConfig {
            protocol: ProtocolId::NakPoll,
            receivers: receivers as u16,
            window: 64,
            group_key: Some(key()),
            session_nonce: [0x17; 16],
            ..SenderConfig::default()
        };
        let info = ObjectInfo {
            size: size as u64,
            name: "obj.bin".into(),
            hash: Some([0xAB; 32]),
        };
        let sender = Sender::new(config, SESSION, Seq(7), info, Instant::ZERO).unwrap();
        let rxs = (0..receivers)
            .map(|k| {
                Receiver::new(
                    ReceiverConfig {
                        receiver_id: 1000 + k as u64,
                        name: format!("r{k}"),
                        group_key: Some(key()),
                        ..ReceiverConfig::default()
                    },
                    Instant::ZERO,
                )
            })
            .collect();
        World {
            now: Instant::ZERO,
            sender,
            rxs,
            data: vec![Vec::new(); receivers],
            object,
            flights: VecDeque::new(),
            sent: Vec::new(),
            accepted: vec![Vec::new(); receivers + 1],
        }
    }

    fn flush(&mut self) {
        let mut buf = vec![0u8; rmcast_proto::MAX_DATAGRAM];
        for _ in 0..4 {
            while let Some(t) = self
                .sender
                .poll_transmit(self.now, &self.object[..], &mut buf)
            {
                let bytes = buf[..t.len].to_vec();
                self.sent.push((Who::Sender, bytes.clone()));
                let targets: Vec<Who> = match t.dest {
                    Dest::Group => (0..self.rxs.len()).map(Who::Receiver).collect(),
                    Dest::Unicast(a) => (0..self.rxs.len())
                        .filter(|&k| receiver_addr(k) == a)
                        .map(Who::Receiver)
                        .collect(),
                };
                for to in targets {
                    self.flights
                        .push_back((self.now + DELAY, sender_addr(), to, bytes.clone()));
                }
            }
            while self.sender.poll_event().is_some() {}
            for k in 0..self.rxs.len() {
                while let Some(t) = self.rxs[k].poll_transmit(self.now, &mut buf) {
                    let bytes = buf[..t.len].to_vec();
                    self.sent.push((Who::Receiver(k), bytes.clone()));
                    self.flights.push_back((
                        self.now + DELAY,
                        receiver_addr(k),
                        Who::Sender,
                        bytes,
                    ));
                }
                while let Some(e) = self.rxs[k].poll_event() {
                    match e {
                        ReceiverEvent::Offer(o) => {
                            self.data[k] = vec![0; o.size as usize];
                            self.rxs[k].accept_offer();
                        }
                        ReceiverEvent::AllData => {
                            let ok = self.data[k] == self.object;
                            let status = if ok { Status::Ok } else { Status::HashMismatch };
                            self.rxs[k].confirm(status, [0xAB; 32], "");
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    /// Delivers one datagram; returns whether the machine took it (its
    /// refusal counters did not move).
    fn deliver(&mut self, from: SocketAddr, to: Who, bytes: &[u8]) -> bool {
        let mut copy = bytes.to_vec();
        match to {
            Who::Sender => {
                let before = self.sender.stats().auth.refused();
                self.sender.handle_datagram(self.now, from, &mut copy);
                let took = self.sender.stats().auth.refused() == before;
                if took {
                    self.accepted[0].push(bytes.to_vec());
                }
                took
            }
            Who::Receiver(k) => {
                let before = self.rxs[k].stats().auth.refused();
                if let Some(c) = self.rxs[k].handle_datagram(self.now, from, &mut copy) {
                    let at = c.offset as usize;
                    self.data[k][at..at + c.bytes.len()].copy_from_slice(c.bytes);
                }
                let took = self.rxs[k].stats().auth.refused() == before;
                if took {
                    self.accepted[k + 1].push(bytes.to_vec());
                }
                took
            }
        }
    }

    fn deadline(&self) -> Option<Instant> {
        let mut t = self.sender.poll_timeout();
        for r in &self.rxs {
            if let Some(d) = r.poll_timeout() {
                t = Some(t.map_or(d, |x| x.min(d)));
            }
        }
        if let Some(f) = self.flights.front() {
            t = Some(t.map_or(f.0, |x| x.min(f.0)));
        }
        t
    }

    fn timeouts(&mut self) {
        if self.sender.poll_timeout().is_some_and(|d| d <= self.now) {
            self.sender.handle_timeout(self.now);
        }
        for r in &mut self.rxs {
            if r.poll_timeout().is_some_and(|d| d <= self.now) {
                r.handle_timeout(self.now);
            }
        }
    }

    fn deadline_of(&self, who: Who) -> Option<Instant> {
        match who {
            Who::Sender => self.sender.poll_timeout(),
            Who::Receiver(k) => self.rxs[k].poll_timeout(),
        }
    }

    /// Whether `who` owes a datagram now (drains it if so).
    fn owes(&mut self, who: Who) -> bool {
        let mut buf = vec![0u8; rmcast_proto::MAX_DATAGRAM];
        match who {
            Who::Sender => self
                .sender
                .poll_transmit(self.now, &self.object[..], &mut buf)
                .is_some(),
            Who::Receiver(k) => self.rxs[k].poll_transmit(self.now, &mut buf).is_some(),
        }
    }
}

/// What the attacker can make without the key, for a machine that already
/// accepted `seen` and with `heard` every datagram on the wire so far.
fn forgery(
    rng: &mut StdRng,
    seen: &[Vec<u8>],
    heard: &[(Who, Vec<u8>)],
    wrong: &mut Keyring,
    hint: u8,
) -> (Vec<u8>, &'static str) {
    let any_heard = |rng: &mut StdRng| heard[rng.random_range(0..heard.len())].1.clone();
    match rng.random_range(0..7u8) {
        0 if !seen.is_empty() => (seen[rng.random_range(0..seen.len())].clone(), "replay"),
        1 if !heard.is_empty() => {
            let mut p = any_heard(rng);
            let i = rng.random_range(0..p.len());
            p[i] ^= 1 << rng.random_range(0..8);
            (p, "bit flip")
        }
        2 if !heard.is_empty() => {
            let mut p = any_heard(rng);
            p.truncate(rng.random_range(0..p.len()));
            (p, "truncated")
        }
        3 => {
            let body = match rng.random_range(0..3u8) {
                0 => Body::Close(Close {
                    hash: [0x5A; 32],
                    signature: None,
                }),
                1 => Body::Bye(Bye {
                    aborted: true,
                    text: "intruder",
                }),
                _ => Body::Data(Data {
                    seq: Seq(7 + rng.random_range(0..64)),
                    poll: 0,
                    copy: 0,
                    payload: &[0xEE; 100],
                }),
            };
            let mut buf = vec![0u8; 512];
            let n = Packet {
                header: Header::new(SESSION, RANK_SENDER),
                body,
            }
            .encode(&mut buf)
            .unwrap();
            buf.truncate(n);
            (buf, "plain")
        }
        4 => {
            // Sealed under another key, its hint byte set to ours: only the
            // tag can tell.
            let mut buf = vec![0u8; 512];
            let n = Packet {
                header: Header::new(SESSION, RANK_SENDER),
                body: Body::Close(Close {
                    hash: [0x77; 32],
                    signature: None,
                }),
            }
            .encode(&mut buf)
            .unwrap();
            let n = wrong.seal(&mut buf, n, rng.random_bool(0.5)).unwrap();
            buf[5] = hint;
            buf.truncate(n);
            (buf, "wrong key")
        }
        5 if !heard.is_empty() => {
            // A real envelope with its counter moved ahead: a fresh counter
            // and a stale tag.
            let mut p = any_heard(rng);
            if p.len() > 40 {
                let at = p.len() - 16 - 8;
                let c = u64::from_be_bytes(p[at..at + 8].try_into().unwrap());
                p[at..at + 8].copy_from_slice(&(c + rng.random_range(1..1000)).to_be_bytes());
            }
            (p, "counter moved")
        }
        _ => {
            let mut p = vec![0u8; rng.random_range(0..200)];
            rng.fill_bytes(&mut p);
            if p.len() >= 6 && rng.random_bool(0.5) {
                p[..6].copy_from_slice(&[b'R', b'M', rmcast_wire::VERSION, 0x06, 0x01, hint]);
            }
            (p, "noise")
        }
    }
}

fn run(seed: u64, forgeries: usize) {
    let receivers = 3;
    let size = 200_000;
    let mut clean = World::new(receivers, size);
    let mut attacked = World::new(receivers, size);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut wrong = Keyring::for_sender(
        Arc::new(GroupKey::from_secret([0x99; KEY_LEN])),
        SESSION,
        [0x17; 16],
    );
    let hint = key().id().hint();
    // Spread the forgeries over the datagrams the session will carry.
    let per_datagram = forgeries.div_ceil(300).max(1);
    let (mut injected, mut refused_expected) = (0usize, 0u64);
    clean.flush();
    attacked.flush();
    let end = Instant::ZERO + Duration::from_secs(60);
    while !clean.sender.is_finished() {
        let t = clean.deadline().expect("a live session has a deadline");
        assert_eq!(
            Some(t),
            attacked.deadline(),
            "seed {seed}: deadlines diverged"
        );
        assert!(t <= end, "seed {seed}: the session did not finish");
        clean.now = clean.now.max(t);
        attacked.now = clean.now;
        while clean.flights.front().is_some_and(|f| f.0 <= clean.now) {
            // Whatever the last datagram made owed goes first, in both: a
            // machine then owes nothing when the forgeries arrive.
            clean.flush();
            attacked.flush();
            let (_, from, to, bytes) = clean.flights.pop_front().unwrap();
            let (_, afrom, ato, abytes) = attacked.flights.pop_front().unwrap();
            assert_eq!((from, to, &bytes), (afrom, ato, &abytes), "seed {seed}");
            if injected < forgeries {
                for _ in 0..per_datagram.min(forgeries - injected) {
                    let seen = &attacked.accepted[slot(to)];
                    let (f, what) = forgery(&mut rng, seen, &attacked.sent, &mut wrong, hint);
                    let deadline = attacked.deadline_of(to);
                    if deadline.is_none() {
                        break; // a machine that ended reads nothing
                    }
                    let spoofed = if to == Who::Sender {
                        receiver_addr(0)
                    } else {
                        sender_addr()
                    };
                    let took = attacked.deliver(spoofed, to, &f);
                    assert!(
                        !took,
                        "seed {seed}: a {what} forgery to {to:?} was accepted: {f:02x?}"
                    );
                    assert!(
                        !attacked.owes(to),
                        "seed {seed}: a {what} forgery to {to:?} caused a reply"
                    );
                    assert_eq!(
                        attacked.deadline_of(to),
                        deadline,
                        "seed {seed}: a {what} forgery moved a timer"
                    );
                    injected += 1;
                    refused_expected += 1;
                }
            }
            clean.deliver(from, to, &bytes);
            attacked.deliver(from, to, &bytes);
        }
        clean.timeouts();
        attacked.timeouts();
        clean.flush();
        attacked.flush();
        assert_eq!(
            clean.sent.len(),
            attacked.sent.len(),
            "seed {seed}: replies diverged"
        );
    }
    assert_eq!(
        clean.sent, attacked.sent,
        "seed {seed}: the datagrams sent differ"
    );
    assert!(clean.sender.outcome().unwrap().ok, "seed {seed}");
    for k in 0..receivers {
        assert_eq!(attacked.data[k], clean.object, "seed {seed}: r{k}'s copy");
    }
    let refused = |w: &World| {
        w.sender.stats().auth.refused()
            + w.rxs.iter().map(|r| r.stats().auth.refused()).sum::<u64>()
    };
    assert_eq!(refused(&clean), 0, "seed {seed}");
    assert_eq!(
        refused(&attacked),
        refused_expected,
        "seed {seed}: every forgery counted once"
    );
    let mut zero = attacked.sender.stats().clone();
    zero.auth = clean.sender.stats().auth;
    assert_eq!(
        &zero,
        clean.sender.stats(),
        "seed {seed}: sender stats beyond auth"
    );
    for k in 0..receivers {
        let mut zero = attacked.rxs[k].stats().clone();
        zero.auth = clean.rxs[k].stats().auth;
        assert_eq!(
            &zero,
            clean.rxs[k].stats(),
            "seed {seed}: r{k} stats beyond auth"
        );
    }
    assert!(
        injected * 10 >= forgeries * 9,
        "seed {seed}: only {injected} of {forgeries} forgeries injected"
    );
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn a_hundred_thousand_forgeries_change_nothing_and_get_no_reply() {
    let seeds = env("RMCAST_FORGERY_SEEDS", 4) as u64;
    let forgeries = env("RMCAST_FORGERIES", 25_000);
    for seed in 0..seeds {
        run(seed, forgeries);
    }
}
