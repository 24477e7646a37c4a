//! Window micro-benchmarks: the sender's `poll_transmit` + feedback loop of a
//! whole transfer against in-memory receivers (instant delivery, no loss),
//! and the token-bucket pacer on its own.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rmcast_proto::{
    Dest, Instant, ObjectInfo, Pacer, ProtocolId, Receiver, ReceiverConfig, ReceiverEvent, Sender,
    SenderConfig, Seq, SessionId, Status,
};
use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Duration;

const SIZE: usize = 2 << 20;
const RECEIVERS: usize = 8;
const HASH: [u8; 32] = [7; 32];
/// Simulated time per round of the loop below.
const TICK: Duration = Duration::from_micros(20);

fn sender_addr() -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1], 4000))
}

fn receiver_addr(k: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 1, k as u8 + 1], 5000))
}

/// Runs one transfer of `object` to `RECEIVERS` receivers; returns the data
/// packets sent. Datagrams are delivered at once; receivers' answers reach
/// the sender before its next transmit.
fn transfer(protocol: ProtocolId, object: &[u8], tx: &mut [u8], rx: &mut [u8]) -> u64 {
    let cfg = SenderConfig {
        protocol,
        receivers: RECEIVERS as u16,
        ..SenderConfig::default()
    };
    let info = ObjectInfo {
        size: object.len() as u64,
        name: "bench.bin".into(),
        hash: Some(HASH),
    };
    let mut now = Instant::ZERO;
    let mut sender = Sender::new(cfg, SessionId(1), Seq(7), info, now).expect("valid config");
    let mut receivers: Vec<Receiver> = (0..RECEIVERS)
        .map(|k| {
            let cfg = ReceiverConfig {
                receiver_id: k as u64 + 1,
                name: format!("r{k}"),
                ..ReceiverConfig::default()
            };
            Receiver::new(cfg, now)
        })
        .collect();
    for _round in 0..1_000_000 {
        while let Some(t) = sender.poll_transmit(now, object, tx) {
            for (k, r) in receivers.iter_mut().enumerate() {
                if matches!(t.dest, Dest::Unicast(a) if a != receiver_addr(k)) {
                    continue;
                }
                black_box(r.handle_datagram(now, sender_addr(), &mut tx[..t.len]));
                while let Some(e) = r.poll_event() {
                    match e {
                        ReceiverEvent::Offer(_) => r.accept_offer(),
                        ReceiverEvent::AllData => r.confirm(Status::Ok, HASH, ""),
                        _ => {}
                    }
                }
                while let Some(a) = r.poll_transmit(now, rx) {
                    sender.handle_datagram(now, receiver_addr(k), &mut rx[..a.len]);
                }
            }
        }
        while sender.poll_event().is_some() {}
        if sender.is_finished() {
            return sender.stats().data_packets;
        }
        now = now + TICK;
        if sender.poll_timeout().is_some_and(|t| t <= now) {
            sender.handle_timeout(now);
        }
        for r in &mut receivers {
            if r.poll_timeout().is_some_and(|t| t <= now) {
                r.handle_timeout(now);
            }
        }
    }
    panic!("the transfer did not finish");
}

fn window(c: &mut Criterion) {
    let object: Vec<u8> = (0..SIZE).map(|i| (i * 31 + i / 4099) as u8).collect();
    let mut tx = vec![0u8; rmcast_proto::MAX_DATAGRAM];
    let mut rx = vec![0u8; rmcast_proto::MAX_DATAGRAM];
    let mut g = c.benchmark_group("window");
    g.throughput(Throughput::Bytes(SIZE as u64));
    g.sample_size(20);
    for (name, protocol) in [("ack", ProtocolId::Ack), ("nak_poll", ProtocolId::NakPoll)] {
        g.bench_function(format!("transfer_2MiB_8_receivers_{name}"), |b| {
            b.iter(|| transfer(protocol, &object, &mut tx, &mut rx));
        });
    }
    g.finish();
}

fn pacer(c: &mut Criterion) {
    let mut g = c.benchmark_group("pacer");
    g.throughput(Throughput::Elements(1));
    // 1 Gbit/s with a 16-packet bucket; the clock advances one packet time
    // per call, so every call refills and takes.
    let mut p = Pacer::new(1_000_000_000, 16 * 1472, Instant::ZERO);
    let mut now = Instant::ZERO;
    let step = Duration::from_nanos(11_776);
    g.bench_function("try_take_1472_at_1gbit", |b| {
        b.iter(|| {
            now = now + step;
            black_box(p.try_take(black_box(now), 1472))
        });
    });
    let p = Pacer::new(1_000_000_000, 16 * 1472, Instant::ZERO);
    g.bench_function("ready_at", |b| {
        b.iter(|| black_box(&p).ready_at(black_box(1472)));
    });
    g.finish();
}

criterion_group!(benches, window, pacer);
criterion_main!(benches);
