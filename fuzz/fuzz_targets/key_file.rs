//! Parses arbitrary bytes (as UTF-8, lossily) as a group key file
//! (`GroupKey::parse_file`). Parsing must never panic, and a parsed key
//! re-renders (`to_file`) to text that parses to the same key (the contract
//! in `crates/rmcast-proto/tests/seal_oracle/mod.rs`).
//!
//! Seeds: `fuzz/seeds/key_file/` (replayed by `cargo test -p rmcast-proto
//! --test corpus_security`).

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/rmcast-proto/tests/seal_oracle/mod.rs"]
mod seal_oracle;

fuzz_target!(|data: &[u8]| {
    seal_oracle::key_file(data);
});
