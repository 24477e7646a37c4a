//! A relay composed of the machines alone, in virtual time: a sender, a
//! relay (a `Receiver` in group A feeding a `Sender` in group B through
//! `Sender::set_available`, its `Complete` held until group B's verdict,
//! as `rmcast relay` drives them), a direct receiver in A and two
//! receivers in B, every data and parity datagram lost independently per
//! receiver. For any seed, loss, object size and FEC setting: every copy
//! is byte-exact, the sender's outcome is ok with the relay counted once,
//! and no machine ever asks to be woken in the past.

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rmcast_proto::{
    Dest, FecShape, HASH_LEN, Instant, Kind, MAX_DATAGRAM, ObjectInfo, Receiver, ReceiverConfig,
    ReceiverEvent, Sender, SenderConfig, Seq, SessionId, Status,
};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

/// The machines compare hashes, never compute them: a fixed stand-in.
const HASH: [u8; HASH_LEN] = [0x5A; HASH_LEN];
const LATENCY: Duration = Duration::from_micros(100);

fn addr(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, i], 7000))
}

/// Group A: the sender (1) to the relay's receiver (2) and a direct
/// receiver (3). Group B: the relay's sender (4) to receivers 5 and 6.
const SENDER: usize = 0;
const RELAY_DOWN: usize = 1;
const GROUP_A: [usize; 2] = [2, 3];
const GROUP_B: [usize; 2] = [4, 5];
const RELAY_UP: usize = 2;

struct Datagram {
    at: Instant,
    from: SocketAddr,
    to: usize,
    bytes: Vec<u8>,
}

/// A receiving machine and its copy.
struct Copy {
    machine: Receiver,
    bytes: Vec<u8>,
}

struct Cascade {
    now: Instant,
    senders: [Sender; 2],
    receivers: Vec<Copy>,
    data: Vec<u8>,
    /// The relay's copy as its sender reads it.
    relay_copy: Vec<u8>,
    relay_verified: bool,
    relay_confirmed: bool,
    queue: VecDeque<Datagram>,
    rng: StdRng,
    loss: f64,
}

impl Cascade {
    fn new(size: usize, loss: f64, fec: Option<FecShape>, seed: u64) -> Self {
        let data: Vec<u8> = (0..size).map(|i| (i * 7 + i / 251) as u8).collect();
        let config = |receivers| SenderConfig {
            receivers,
            fec,
            ..SenderConfig::default()
        };
        let object = |hash| ObjectInfo {
            size: size as u64,
            name: "obj.bin".into(),
            hash,
        };
        let start = Instant::ZERO;
        let sender = Sender::new(config(2), SessionId(1), Seq(10), object(Some(HASH)), start)
            .expect("sender");
        let mut down = Sender::new(config(2), SessionId(2), Seq(90), object(None), start)
            .expect("relay's sender");
        down.set_available(0);
        let receivers = (0..4)
            .map(|i| Copy {
                machine: Receiver::new(
                    ReceiverConfig {
                        receiver_id: 100 + i,
                        name: format!("r{i}"),
                        ..ReceiverConfig::default()
                    },
                    start,
                ),
                bytes: vec![0; size],
            })
            .collect();
        Self {
            now: start,
            senders: [sender, down],
            receivers,
            relay_copy: vec![0; size],
            data,
            relay_verified: false,
            relay_confirmed: false,
            queue: VecDeque::new(),
            rng: StdRng::seed_from_u64(seed),
            loss,
        }
    }

    /// Node index of receiver `r` (2..=5) and its address.
    fn own(node: usize) -> SocketAddr {
        addr(node as u8 + 1)
    }

    fn send(&mut self, from: usize, dest: Dest, kind: Kind, bytes: &[u8]) {
        let to: Vec<usize> = match dest {
            Dest::Group if from == SENDER => GROUP_A.to_vec(),
            Dest::Group if from == RELAY_DOWN => GROUP_B.to_vec(),
            // A receiver's multicast (rate NAKs): nobody here listens.
            Dest::Group => Vec::new(),
            Dest::Unicast(a) => (0..6).filter(|&n| Self::own(n) == a).collect(),
        };
        for node in to {
            let lossy = matches!(kind, Kind::Data | Kind::Parity) && node >= 2;
            if lossy && self.rng.random_bool(self.loss) {
                continue;
            }
            self.queue.push_back(Datagram {
                at: self.now + LATENCY,
                from: Self::own(from),
                to: node,
                bytes: bytes.to_vec(),
            });
        }
    }

    /// Everything every machine has to say now, and their reactions.
    fn transmit(&mut self) {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let mut any = false;
            for s in 0..2 {
                let source = if s == SENDER {
                    &self.data
                } else {
                    &self.relay_copy
                };
                let mut out = Vec::new();
                while let Some(t) = self.senders[s].poll_transmit(self.now, &source[..], &mut buf) {
                    out.push((t.dest, t.kind, buf[..t.len].to_vec()));
                }
                for (dest, kind, bytes) in out {
                    any = true;
                    self.send(s, dest, kind, &bytes);
                }
                while self.senders[s].poll_event().is_some() {}
            }
            for r in 0..4 {
                let node = r + 2;
                while let Some(e) = self.receivers[r].machine.poll_event() {
                    any = true;
                    self.on_event(node, e);
                }
                let mut out = Vec::new();
                while let Some(t) = self.receivers[r].machine.poll_transmit(self.now, &mut buf) {
                    out.push((t.dest, t.kind, buf[..t.len].to_vec()));
                }
                for (dest, kind, bytes) in out {
                    any = true;
                    self.send(node, dest, kind, &bytes);
                }
            }
            any |= self.relay_step();
            if !any {
                return;
            }
        }
    }

    fn on_event(&mut self, node: usize, e: ReceiverEvent) {
        let copy = &mut self.receivers[node - 2];
        match e {
            ReceiverEvent::Offer(_) => copy.machine.accept_offer(),
            ReceiverEvent::AllData => {
                let intact = copy.bytes == self.data;
                if node == RELAY_UP {
                    // The relay's own copy; its verdict waits for group B.
                    assert!(intact, "the relay's copy differs");
                    self.relay_verified = true;
                    self.senders[RELAY_DOWN].set_object_hash(HASH);
                } else {
                    let hash = if intact { HASH } else { [0; HASH_LEN] };
                    copy.machine.confirm(Status::Ok, hash, "");
                }
            }
            ReceiverEvent::Failed(why) => panic!("receiver at node {node} failed: {why}"),
            _ => {}
        }
    }

    /// The relay's glue: its sender may send what its receiver holds in
    /// order; its Complete goes once group B's outcome is in.
    fn relay_step(&mut self) -> bool {
        let up = &self.receivers[RELAY_UP - 2];
        let held = up.machine.received_bytes();
        let before = self.senders[RELAY_DOWN].available();
        if held > before {
            let (from, to) = (before as usize, held as usize);
            self.relay_copy[from..to].copy_from_slice(&up.bytes[from..to]);
            self.senders[RELAY_DOWN].set_available(held);
        }
        if self.relay_verified
            && !self.relay_confirmed
            && let Some(outcome) = self.senders[RELAY_DOWN].outcome()
        {
            self.relay_confirmed = true;
            let (status, text) = if outcome.ok {
                (Status::Ok, String::new())
            } else {
                (
                    Status::Other,
                    format!("group B failed: {:?}", outcome.error),
                )
            };
            self.receivers[RELAY_UP - 2]
                .machine
                .confirm(status, HASH, &text);
            return true;
        }
        held > before
    }

    fn deliver(&mut self, d: Datagram) {
        let mut bytes = d.bytes;
        if d.to < 2 {
            self.senders[d.to].handle_datagram(self.now, d.from, &mut bytes);
            return;
        }
        let copy = &mut self.receivers[d.to - 2];
        if let Some(chunk) = copy.machine.handle_datagram(self.now, d.from, &mut bytes) {
            let at = chunk.offset as usize;
            copy.bytes[at..at + chunk.bytes.len()].copy_from_slice(chunk.bytes);
        }
        while let Some(chunk) = copy.machine.poll_repaired() {
            let at = chunk.offset as usize;
            copy.bytes[at..at + chunk.bytes.len()].copy_from_slice(chunk.bytes);
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let timers = self.senders.iter().filter_map(Sender::poll_timeout).chain(
            self.receivers
                .iter()
                .filter_map(|c| c.machine.poll_timeout()),
        );
        timers.chain(self.queue.front().map(|d| d.at)).min()
    }

    /// Runs until the first sender finished (or `limit` of virtual time).
    fn run(&mut self, limit: Duration) {
        let end = Instant::ZERO + limit;
        let mut still = 0u32;
        while !self.senders[SENDER].is_finished() {
            self.transmit();
            let Some(next) = self.next_deadline() else {
                panic!("nothing to wait for, and the session is not over");
            };
            assert!(
                next >= self.now,
                "a deadline in the past: {next:?} < {:?}",
                self.now
            );
            assert!(next <= end, "not finished within {limit:?}");
            // A timer that stays due after it was handled spins a driver.
            still = if next == self.now { still + 1 } else { 0 };
            assert!(
                still < 10_000,
                "woken at {next:?} again and again: senders {:?}, receivers {:?}",
                self.senders
                    .iter()
                    .map(Sender::poll_timeout)
                    .collect::<Vec<_>>(),
                self.receivers
                    .iter()
                    .map(|c| c.machine.poll_timeout())
                    .collect::<Vec<_>>()
            );
            self.now = next.max(self.now);
            while self.queue.front().is_some_and(|d| d.at <= self.now) {
                let d = self.queue.pop_front().expect("checked");
                self.deliver(d);
            }
            for s in &mut self.senders {
                if s.poll_timeout().is_some_and(|t| t <= self.now) {
                    s.handle_timeout(self.now);
                }
            }
            for c in &mut self.receivers {
                if c.machine.poll_timeout().is_some_and(|t| t <= self.now) {
                    c.machine.handle_timeout(self.now);
                }
            }
        }
    }
}

fn cascade(size: usize, loss: f64, fec: Option<FecShape>, seed: u64) {
    let mut c = Cascade::new(size, loss, fec, seed);
    c.run(Duration::from_secs(120));
    let outcome = c.senders[SENDER].outcome().expect("finished");
    assert!(outcome.ok, "seed {seed}: {outcome:?}");
    assert_eq!(outcome.members.len(), 2, "the relay counts once");
    let down = c.senders[RELAY_DOWN]
        .outcome()
        .expect("group B finished first");
    assert!(down.ok, "seed {seed}: {down:?}");
    for (i, copy) in c.receivers.iter().enumerate() {
        assert!(copy.bytes == c.data, "seed {seed}: copy {i} differs");
    }
    if loss >= 0.05 && size > 100_000 {
        // Losses behind the relay are the relay's to repair.
        let s = c.senders[RELAY_DOWN].stats();
        assert!(
            s.retransmitted_packets + s.parity_packets > 0,
            "seed {seed}: the relay repaired nothing under {loss} loss: {s:?}"
        );
    }
}

#[test]
fn a_cascade_without_loss_completes() {
    cascade(300_000, 0.0, None, 1);
}

#[test]
fn a_cascade_of_an_empty_object_completes() {
    cascade(0, 0.0, None, 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_cascade_is_byte_exact_under_independent_loss(
        seed in any::<u64>(),
        size in 1usize..400_000,
        loss in prop::sample::select(vec![0.0, 0.01, 0.05, 0.2]),
        fec in prop::sample::select(vec![None, Some((16u16, 0u16)), Some((8, 2))]),
    ) {
        cascade(size, loss, fec.map(|(k, p)| FecShape::new(k, p)), seed);
    }
}
