//! The two erasure codes issue 20 names for block FEC, on this machine:
//! `reed-solomon-simd` (Leopard-style Reed–Solomon over GF(2¹⁶), SIMD) and
//! `raptorq` (RFC 6330 fountain code). A block is K data packets of 1,400
//! bytes with P = K/8 parity packets (12.5 %, the issue's "1 % loss at
//! 1,000 receivers" regime needs a few per cent per block); encoding makes
//! the P parity packets, decoding rebuilds P lost data packets from the
//! K − P that arrived and the P parity packets. Throughput is in the
//! block's data bytes (K × 1,400) per second. docs/performance.md records
//! a run and the choice it led to.
//!
//! ```text
//! cargo bench -p rmcast-proto --bench fec_codecs
//! ```

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use raptorq::{
    EncodingPacket, ObjectTransmissionInformation, PayloadId, SourceBlockDecoder,
    SourceBlockEncoder,
};
use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};
use std::hint::black_box;
use std::time::Duration;

/// Bytes of one data packet's payload (a 1,500-byte MTU's datagram less
/// headers).
const SYMBOL: usize = 1400;
/// Data packets per block.
const BLOCKS: [usize; 3] = [32, 128, 1024];

fn parity(k: usize) -> usize {
    (k / 8).max(2)
}

fn block(k: usize) -> Vec<u8> {
    (0..k * SYMBOL).map(|i| (i * 31 + i / 7) as u8).collect()
}

fn oti(k: usize) -> ObjectTransmissionInformation {
    ObjectTransmissionInformation::new((k * SYMBOL) as u64, SYMBOL as u16, 1, 1, 8)
}

fn encode(c: &mut Criterion) {
    let mut g = c.benchmark_group("fec_encode");
    for k in BLOCKS {
        let p = parity(k);
        let data = block(k);
        g.throughput(Throughput::Bytes(data.len() as u64));
        let mut rs = ReedSolomonEncoder::new(k, p, SYMBOL).unwrap();
        g.bench_function(
            BenchmarkId::new("reed-solomon-simd", format!("{k}+{p}")),
            |b| {
                b.iter(|| {
                    for shard in data.chunks(SYMBOL) {
                        rs.add_original_shard(shard).unwrap();
                    }
                    let out = rs.encode().unwrap();
                    black_box(out.recovery(p - 1).unwrap()[0])
                });
            },
        );
        let config = oti(k);
        g.bench_function(BenchmarkId::new("raptorq", format!("{k}+{p}")), |b| {
            b.iter(|| {
                let enc = SourceBlockEncoder::new(0, &config, &data);
                black_box(enc.repair_packets(0, p as u32))
            });
        });
    }
    g.finish();
}

fn decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("fec_decode");
    for k in BLOCKS {
        let p = parity(k);
        let data = block(k);
        g.throughput(Throughput::Bytes(data.len() as u64));
        // The first P data packets are lost; the parity packets came.
        let mut rs = ReedSolomonEncoder::new(k, p, SYMBOL).unwrap();
        for shard in data.chunks(SYMBOL) {
            rs.add_original_shard(shard).unwrap();
        }
        let recovery: Vec<Vec<u8>> = rs
            .encode()
            .unwrap()
            .recovery_iter()
            .map(<[u8]>::to_vec)
            .collect();
        let mut dec = ReedSolomonDecoder::new(k, p, SYMBOL).unwrap();
        // Once, untimed: the lost packets come back byte for byte.
        for (i, shard) in data.chunks(SYMBOL).enumerate().skip(p) {
            dec.add_original_shard(i, shard).unwrap();
        }
        for (j, shard) in recovery.iter().enumerate() {
            dec.add_recovery_shard(j, shard).unwrap();
        }
        let out = dec.decode().unwrap();
        for i in 0..p {
            let want = &data[i * SYMBOL..(i + 1) * SYMBOL];
            assert_eq!(out.restored_original(i), Some(want));
        }
        drop(out);
        g.bench_function(
            BenchmarkId::new("reed-solomon-simd", format!("{k}+{p}")),
            |b| {
                b.iter(|| {
                    for (i, shard) in data.chunks(SYMBOL).enumerate().skip(p) {
                        dec.add_original_shard(i, shard).unwrap();
                    }
                    for (j, shard) in recovery.iter().enumerate() {
                        dec.add_recovery_shard(j, shard).unwrap();
                    }
                    let out = dec.decode().unwrap();
                    black_box(out.restored_original(0).unwrap()[0])
                });
            },
        );
        let config = oti(k);
        let enc = SourceBlockEncoder::new(0, &config, &data);
        // Two spare repair packets: a fountain code may need a little more
        // than K symbols (RFC 6330: fails with K in under 1 % of blocks).
        let repairs = enc.repair_packets(0, p as u32 + 2);
        let arrived: Vec<EncodingPacket> = (p..k)
            .map(|i| {
                let bytes = data[i * SYMBOL..(i + 1) * SYMBOL].to_vec();
                EncodingPacket::new(PayloadId::new(0, i as u32), bytes)
            })
            .chain(repairs)
            .collect();
        let mut once = SourceBlockDecoder::new(0, &config, data.len() as u64);
        assert_eq!(once.decode(arrived.iter().cloned()).as_ref(), Some(&data));
        g.bench_function(BenchmarkId::new("raptorq", format!("{k}+{p}")), |b| {
            b.iter(|| {
                let mut dec = SourceBlockDecoder::new(0, &config, data.len() as u64);
                let out = dec.decode(arrived.iter().cloned()).expect("decodes");
                black_box(out[0])
            });
        });
    }
    g.finish();
}

/// rmcast's own block coder (`rmcast_proto::fec`), as the protocols run
/// it: blocks of K = 64 with the parity space of `--fec 64:P` (64, so the
/// GF(2⁸) Cauchy code) and of K = 512 (the GF(2¹⁶) code), encoding the 2
/// proactive parity packets of `64:2` and rebuilding 1, 2 or 8 lost data
/// packets, what a receiver at 1-10 % loss meets. Throughput in the block's
/// data bytes.
fn block_coder(c: &mut Criterion) {
    use rmcast_proto::fec::{BlockDecoder, BlockEncoder};
    let mut g = c.benchmark_group("fec_block");
    for k in [64u16, 512] {
        let data = block(usize::from(k));
        g.throughput(Throughput::Bytes(data.len() as u64));
        let mut enc = BlockEncoder::new(k, k, SYMBOL).unwrap();
        let code = if rmcast_proto::fec::uses_gf8(k, k) {
            "gf8"
        } else {
            "gf16"
        };
        g.bench_function(BenchmarkId::new(format!("encode 2, {code}"), k), |b| {
            b.iter(|| {
                enc.reset(k, k).unwrap();
                for shard in data.chunks(SYMBOL) {
                    enc.push(shard).unwrap();
                }
                black_box(enc.parity(0).unwrap()[0] ^ enc.parity(1).unwrap()[0])
            });
        });
        enc.reset(k, k).unwrap();
        for shard in data.chunks(SYMBOL) {
            enc.push(shard).unwrap();
        }
        let parity: Vec<Vec<u8>> = (0..8).map(|i| enc.parity(i).unwrap().to_vec()).collect();
        let mut dec = BlockDecoder::new(k, k, SYMBOL).unwrap();
        for lost in [1usize, 2, 8] {
            let run = |dec: &mut BlockDecoder| {
                for (i, shard) in data.chunks(SYMBOL).enumerate().skip(lost) {
                    dec.add_data(i as u16, shard).unwrap();
                }
                for (j, shard) in parity.iter().take(lost).enumerate() {
                    dec.add_parity(j as u16, shard).unwrap();
                }
                dec.decode().unwrap()
            };
            // Once, untimed: the lost packets come back byte for byte.
            for (i, bytes) in run(&mut dec) {
                let i = usize::from(i);
                assert_eq!(&bytes[..SYMBOL], &data[i * SYMBOL..(i + 1) * SYMBOL]);
            }
            g.bench_function(
                BenchmarkId::new(format!("decode {lost} lost, {code}"), k),
                |b| b.iter(|| black_box(run(&mut dec).len())),
            );
            if !dec.decodes_in_place(k) {
                continue;
            }
            // What a receiver runs: the block rebuilt in its own buffer.
            let lost_at: Vec<u16> = (0..lost as u16).collect();
            let rows: Vec<u16> = (0..lost as u16).collect();
            let held: Vec<u8> = parity[..lost].concat();
            let mut buf = data.clone();
            dec.decode_in_place(&mut buf, k, &lost_at, &rows, &held)
                .unwrap();
            assert_eq!(buf, data, "rebuilt in place byte for byte");
            g.bench_function(
                BenchmarkId::new(format!("decode {lost} lost in place, {code}"), k),
                |b| {
                    b.iter(|| {
                        dec.decode_in_place(&mut buf, k, &lost_at, &rows, &held)
                            .unwrap();
                        black_box(buf[0])
                    })
                },
            );
        }
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! { name = benches; config = config(); targets = encode, decode, block_coder }
criterion_main!(benches);
