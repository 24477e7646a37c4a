//! Opens arbitrary bytes with a sender's and two receivers' keyrings
//! (`Keyring::open`), as they are and read as a mutation program of an
//! authentic sealed packet (bit flips, cuts, insertions, splices). Opening
//! must never panic; only the exact bytes of an authentic packet open, once,
//! to a packet the plain decoders read; a refusal is counted under its
//! reason and changes no other state (the contracts in
//! `crates/rmcast-proto/tests/seal_oracle/mod.rs`).
//!
//! Seeds: `fuzz/seeds/open/` (replayed by `cargo test -p rmcast-proto
//! --test corpus_security`).

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/rmcast-proto/tests/seal_oracle/mod.rs"]
mod seal_oracle;

fuzz_target!(|data: &[u8]| {
    seal_oracle::open_input(data);
});
