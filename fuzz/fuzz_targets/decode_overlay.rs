//! Decodes arbitrary bytes as TCP overlay control frames. Decoding must
//! never panic, and it is canonical: the frame read re-encodes to exactly
//! its bytes, `Msg::parse_header` agrees, and emitting into a buffer one
//! byte short fails cleanly (`rmcast_wire::oracle::overlay`).
//!
//! Seeds: `fuzz/seeds/decode_overlay/` (replayed by `cargo test -p rmcast-wire`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcast_wire::oracle;

fuzz_target!(|data: &[u8]| {
    oracle::overlay(data);
});
