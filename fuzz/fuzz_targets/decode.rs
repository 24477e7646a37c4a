//! Decodes arbitrary bytes with both datagram decoders (object engine and
//! PRMP). Decoding must never panic, and it is canonical: whatever decodes
//! re-encodes to exactly the same bytes, `peek_header` agrees with it, and
//! the other decoder refuses it (`rmcast_wire::oracle`).
//!
//! Seeds: `fuzz/seeds/decode/` (replayed by `cargo test -p rmcast-wire`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcast_wire::oracle;

fuzz_target!(|data: &[u8]| {
    oracle::transfer(data);
    oracle::stream(data);
});
