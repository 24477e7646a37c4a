//! Decodes arbitrary bytes as PRMP (message-stream) datagrams. Decoding
//! must never panic, and it is canonical: whatever decodes re-encodes to
//! exactly the same bytes, and the object engine's decoder and
//! `peek_header` refuse it (`rmcast_wire::oracle::stream`).
//!
//! Seeds: `fuzz/seeds/decode_stream/` (replayed by `cargo test -p rmcast-wire`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcast_wire::oracle;

fuzz_target!(|data: &[u8]| {
    oracle::stream(data);
});
