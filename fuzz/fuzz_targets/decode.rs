//! Decodes arbitrary bytes with both decoders (object engine and PRMP).
//! Decoding must never panic, and it is canonical: whatever decodes
//! re-encodes to exactly the same bytes, and `peek_header` agrees with it.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcast_wire::stream::StreamPacket;
use rmcast_wire::{peek_header, Packet, MAX_DATAGRAM};

fuzz_target!(|data: &[u8]| {
    let mut buf = vec![0u8; data.len().max(MAX_DATAGRAM)];
    if let Ok(packet) = StreamPacket::decode(data) {
        let len = packet
            .encode(&mut buf)
            .expect("a decoded PRMP packet must re-encode");
        assert_eq!(&buf[..len], data, "PRMP decoding is not canonical: {packet:?}");
        assert!(Packet::decode(data).is_err(), "both decoders accept {data:02x?}");
    }
    let Ok(packet) = Packet::decode(data) else {
        // Whatever the error, peeking must not panic either.
        let _ = peek_header(data);
        return;
    };
    let len = packet
        .encode(&mut buf)
        .expect("a decoded packet must re-encode");
    assert_eq!(&buf[..len], data, "decoding is not canonical: {packet:?}");
    assert_eq!(
        peek_header(data),
        Ok((packet.body.kind(), packet.header)),
        "peek_header disagrees with decode"
    );
});
