//! The decoders' contracts as executable checks, shared by the fuzz
//! targets (`fuzz/fuzz_targets/`) and the seed replay test
//! (`tests/corpus.rs`), so both hold every decoder to the same rules.
//!
//! Each check decodes arbitrary bytes and **panics** when a contract is
//! broken: decoding panicked, or it accepted bytes that do not re-encode to
//! themselves (decoding must be canonical), or two views of one input
//! disagree. It returns whether the input decoded. Not for production
//! paths: a hostile packet must be counted and dropped, never panic.

use crate::overlay::{HEADER_LEN as FRAME_HEADER_LEN, Msg};
use crate::stream::StreamPacket;
use crate::{MAX_DATAGRAM, Packet, peek_header};

/// Object-transfer datagrams: [`Packet::decode`] is canonical and
/// [`peek_header`] agrees with it; PRMP's decoder refuses what it accepts.
pub fn transfer(data: &[u8]) -> bool {
    let Ok(packet) = Packet::decode(data) else {
        // Whatever the error, peeking must not panic either.
        let _ = peek_header(data);
        return false;
    };
    let mut buf = vec![0u8; data.len().max(MAX_DATAGRAM)];
    let len = packet
        .encode(&mut buf)
        .expect("a decoded packet must re-encode");
    assert_eq!(&buf[..len], data, "decoding is not canonical: {packet:?}");
    assert_eq!(
        peek_header(data),
        Ok((packet.body.kind(), packet.header)),
        "peek_header disagrees with decode"
    );
    assert!(
        StreamPacket::decode(data).is_err(),
        "both decoders accept {data:02x?}"
    );
    true
}

/// PRMP datagrams: [`StreamPacket::decode`] is canonical, and the object
/// engine's decoder and [`peek_header`] refuse what it accepts.
pub fn stream(data: &[u8]) -> bool {
    let Ok(packet) = StreamPacket::decode(data) else {
        return false;
    };
    let mut buf = vec![0u8; data.len().max(MAX_DATAGRAM)];
    let len = packet
        .encode(&mut buf)
        .expect("a decoded PRMP packet must re-encode");
    assert_eq!(
        &buf[..len],
        data,
        "PRMP decoding is not canonical: {packet:?}"
    );
    assert!(
        Packet::decode(data).is_err(),
        "both decoders accept {data:02x?}"
    );
    assert!(peek_header(data).is_err(), "peek_header accepts PRMP");
    true
}

/// TCP overlay frames: [`Msg::decode`] is canonical for the frame it
/// reads, [`Msg::parse_header`] agrees with it, and emitting into a buffer
/// one byte short fails cleanly.
pub fn overlay(data: &[u8]) -> bool {
    let Ok((msg, used)) = Msg::decode(data) else {
        return false;
    };
    let frame = msg.to_frame();
    assert_eq!(
        frame,
        &data[..used],
        "overlay decoding is not canonical: {msg:?}"
    );
    assert_eq!(
        Msg::parse_header(data),
        Ok((msg.kind(), used - FRAME_HEADER_LEN)),
        "parse_header disagrees with decode"
    );
    let mut short = vec![0u8; used - 1];
    assert!(msg.emit(&mut short).is_err(), "emit into a short buffer");
    true
}

/// A tree's manifest, framed for fuzzing as the manifest's bytes followed
/// by the object's length (u64, big-endian): [`Manifest::decode`] is
/// canonical, and [`manifest_len`] measures what it accepts.
///
/// [`Manifest::decode`]: crate::manifest::Manifest::decode
/// [`manifest_len`]: crate::manifest::manifest_len
pub fn manifest(data: &[u8]) -> bool {
    use crate::manifest::{Manifest, manifest_len};
    let Some(split) = data.len().checked_sub(8) else {
        return false;
    };
    let (bytes, len) = data.split_at(split);
    let object_len = u64::from_be_bytes(len.try_into().expect("8 bytes"));
    let _ = manifest_len(bytes);
    let Ok(m) = Manifest::decode(bytes, object_len) else {
        return false;
    };
    assert_eq!(
        m.encode(),
        bytes,
        "manifest decoding is not canonical: {m:?}"
    );
    assert_eq!(
        manifest_len(bytes),
        Some(Ok(bytes.len() as u64)),
        "manifest_len disagrees with decode"
    );
    true
}
