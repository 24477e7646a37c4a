//! Codec micro-benchmarks: the per-packet work on the data path (a data
//! header written in place, a data packet decoded, a header peeked) and
//! the feedback a sender decodes from every receiver.

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use rmcast_wire::{
    Body, DATA_HEADER_LEN, Data, Feedback, Header, POLL_ALL, Packet, Seq, SessionId,
    encode_data_header, peek_header,
};
use std::hint::black_box;

const PACKET: usize = 1472;

fn data_packet() -> Vec<u8> {
    let payload = vec![0xA5u8; PACKET - DATA_HEADER_LEN];
    let packet = Packet {
        header: Header::new(SessionId(0x0123_4567_89AB_CDEF), 0xFFFF),
        body: Body::Data(Data {
            seq: Seq(123_456),
            poll: POLL_ALL,
            copy: 0,
            payload: &payload,
        }),
    };
    let mut buf = vec![0u8; PACKET];
    let n = packet.encode(&mut buf).expect("fits");
    buf.truncate(n);
    buf
}

fn feedback_packet(bitmap_bytes: usize) -> Vec<u8> {
    let bitmap = vec![0b1011_0110u8; bitmap_bytes];
    let packet = Packet {
        header: Header::new(SessionId(7), 3),
        body: Body::Nak(Feedback {
            cumulative: Seq(1000),
            echo: Seq(1100),
            echo_copy: 0,
            aggregate: false,
            bitmap: &bitmap,
        }),
    };
    let mut buf = vec![0u8; 64 + bitmap_bytes];
    let n = packet.encode(&mut buf).expect("fits");
    buf.truncate(n);
    buf
}

fn codec(c: &mut Criterion) {
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Elements(1));

    let header = Header::new(SessionId(0x0123_4567_89AB_CDEF), 0xFFFF);
    let mut buf = vec![0u8; PACKET];
    let mut seq = 0u32;
    g.bench_function("encode_data_header", |b| {
        b.iter(|| {
            seq = seq.wrapping_add(1);
            encode_data_header(black_box(&mut buf), &header, Seq(seq), POLL_ALL, 0)
        });
    });

    let data = data_packet();
    g.bench_function("decode_data_1472", |b| {
        b.iter(|| Packet::decode(black_box(&data)).expect("valid"));
    });
    g.bench_function("peek_header", |b| {
        b.iter(|| peek_header(black_box(&data)).expect("valid"));
    });

    for bitmap_bytes in [0usize, 16, 128] {
        let fb = feedback_packet(bitmap_bytes);
        g.bench_function(format!("decode_nak_bitmap_{bitmap_bytes}B"), |b| {
            b.iter(|| Packet::decode(black_box(&fb)).expect("valid"));
        });
    }

    let bitmap = vec![0xFFu8; 16];
    let mut out = vec![0u8; 256];
    g.bench_function("encode_ack_bitmap_16B", |b| {
        b.iter_batched_ref(
            || Packet {
                header: Header::new(SessionId(7), 3),
                body: Body::Ack(Feedback {
                    cumulative: Seq(1000),
                    echo: Seq(1100),
                    echo_copy: 0,
                    aggregate: false,
                    bitmap: &bitmap,
                }),
            },
            |p| p.encode(black_box(&mut out)).expect("fits"),
            BatchSize::SmallInput,
        );
    });
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
