//! Decodes arbitrary bytes as a directory tree's manifest: the input is the
//! manifest followed by the object's length (u64, big-endian). Decoding
//! must never panic, must be canonical, and `manifest_len` must measure
//! what it accepts (`rmcast_wire::oracle::manifest`).
//!
//! Seeds: `fuzz/seeds/decode_manifest/` (replayed by `cargo test -p
//! rmcast-wire --test corpus`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rmcast_wire::oracle::manifest(data);
});
