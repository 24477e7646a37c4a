//! Sealing micro-benchmarks: `Keyring::seal` and `Keyring::open` of one
//! sender data packet per iteration, for sealed datagrams of 64 bytes to
//! the largest UDP payload, and what refusing a forgery costs.
//!
//! Sizes are of the sealed datagram (plain packet + 24 bytes of counter and
//! tag), so 1,472 and 8,972 are full datagrams at a 1,500 and a 9,000-byte
//! MTU. Throughput is in datagram bytes; docs/security.md turns it into
//! CPU-seconds per GB.
//!
//! ```text
//! cargo bench -p rmcast-proto --bench seal
//! ```

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rmcast_proto::security::{GroupKey, Keyring};
use rmcast_wire::{
    Body, Data, Header, Hello, MAX_DATAGRAM, Packet, ProtocolId, RANK_SENDER, SEAL_OVERHEAD_DATA,
    SEAL_OVERHEAD_MAX, Seq, SessionId,
};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIZES: [usize; 5] = [64, 512, 1472, 8972, MAX_DATAGRAM];
const SESSION: SessionId = SessionId(0x0102_0304_0506_0708);
const NONCE: [u8; 16] = [0x55; 16];
/// Packets sealed (untimed) before each timed run of opens.
const BATCH: u64 = 256;

fn key() -> Arc<GroupKey> {
    Arc::new(GroupKey::from_secret([0x42; 32]))
}

fn encode(header: Header, body: Body<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let n = Packet { header, body }.encode(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// A plain sender data packet that seals to `sealed_len` bytes.
fn data(sealed_len: usize) -> Vec<u8> {
    let fixed = 16 + 8 + SEAL_OVERHEAD_DATA;
    let payload: Vec<u8> = (0..sealed_len - fixed).map(|i| i as u8).collect();
    let p = encode(
        Header::new(SESSION, RANK_SENDER),
        Body::Data(Data {
            seq: Seq(1),
            poll: 0,
            copy: 0,
            payload: &payload,
        }),
    );
    assert_eq!(p.len() + SEAL_OVERHEAD_DATA, sealed_len);
    p
}

fn seal_into(k: &mut Keyring, plain: &[u8], nonce: bool) -> Vec<u8> {
    let mut buf = plain.to_vec();
    buf.resize(plain.len() + SEAL_OVERHEAD_MAX, 0);
    let n = k.seal(&mut buf, plain.len(), nonce).unwrap();
    buf.truncate(n);
    buf
}

/// A sender's keyring and a receiver's that has opened its `Hello`.
fn pair() -> (Keyring, Keyring) {
    let mut tx = Keyring::for_sender(key(), SESSION, NONCE);
    let mut rx = Keyring::new(key());
    let hello = encode(
        Header::new(SESSION, RANK_SENDER),
        Body::Hello(Hello {
            receivers_wanted: 1,
            protocol: ProtocolId::NakPoll,
        }),
    );
    rx.open(&mut seal_into(&mut tx, &hello, true)).unwrap();
    (tx, rx)
}

fn seal(c: &mut Criterion) {
    let mut g = c.benchmark_group("seal");
    for size in SIZES {
        let plain = data(size);
        let (mut tx, _) = pair();
        // Sealing works in place: re-sealing the same buffer encrypts the
        // previous ciphertext under the next counter, as costly as plain.
        let mut buf = plain.clone();
        buf.resize(size, 0);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(BenchmarkId::from_parameter(size), |b| {
            b.iter(|| black_box(tx.seal(black_box(&mut buf), plain.len(), false).unwrap()));
        });
    }
    g.finish();
}

fn open(c: &mut Criterion) {
    let mut g = c.benchmark_group("open");
    for size in SIZES {
        let plain = data(size);
        let (mut tx, mut rx) = pair();
        let mut bufs: Vec<Vec<u8>> = (0..BATCH).map(|_| vec![0u8; size]).collect();
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(BenchmarkId::from_parameter(size), |b| {
            // Every packet opens once (the replay window), so seal a batch
            // of fresh ones untimed, then time opening them in order.
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let n = left.min(BATCH) as usize;
                    for buf in &mut bufs[..n] {
                        buf[..plain.len()].copy_from_slice(&plain);
                        tx.seal(buf, plain.len(), false).unwrap();
                    }
                    let start = Instant::now();
                    for buf in &mut bufs[..n] {
                        black_box(rx.open(black_box(buf)).unwrap());
                    }
                    timed += start.elapsed();
                    left -= n as u64;
                }
                timed
            });
        });
    }
    g.finish();
}

/// What a forgery costs the receiver that refuses it: a bad tag on a known
/// session (one GCM pass), a forged packet of an unknown session carrying
/// a nonce (key derivation first: the most work an outsider can force per
/// packet), and another key's hint (a header check).
fn refuse(c: &mut Criterion) {
    let mut g = c.benchmark_group("refuse");
    let (mut tx, mut rx) = pair();
    let mut bad_tag = seal_into(&mut tx, &data(1472), false);
    let last = bad_tag.len() - 1;
    bad_tag[last] ^= 1;
    g.bench_function("bad-tag-1472", |b| {
        b.iter(|| black_box(rx.open(black_box(&mut bad_tag)).unwrap_err()));
    });
    let mut other = Keyring::for_sender(key(), SessionId(9), NONCE);
    let mut plain = data(64);
    plain[8..16].copy_from_slice(&9u64.to_be_bytes());
    let mut unknown = seal_into(&mut other, &plain, true);
    let last = unknown.len() - 1;
    unknown[last] ^= 1;
    g.bench_function("unknown-session-with-nonce-80", |b| {
        b.iter(|| black_box(rx.open(black_box(&mut unknown)).unwrap_err()));
    });
    let mut wrong_hint = seal_into(&mut tx, &data(64), false);
    wrong_hint[5] ^= 0xFF;
    g.bench_function("wrong-key-hint-64", |b| {
        b.iter(|| black_box(rx.open(black_box(&mut wrong_hint)).unwrap_err()));
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = seal, open, refuse
}
criterion_main!(benches);
