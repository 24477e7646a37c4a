//! rmcast's wire formats: parse and emit every byte the protocols exchange.
//!
//! One module per protocol family, one set of rules for all of them:
//!
//! - [`transfer`]: the object-transfer datagrams (session setup, data,
//!   feedback, close, and the group rate control's kinds `0x40`–`0x42`).
//!   Its items are re-exported here: `rmcast_wire::Packet` is
//!   `rmcast_wire::transfer::Packet`.
//! - [`stream`]: PRMP, the message-stream datagrams (`0x50`–`0x62`).
//! - [`overlay`]: the TCP overlay's framed control messages (`RO` frames).
//! - [`manifest`]: the manifest at the start of a directory tree sent as
//!   one object (not a datagram: the first bytes of the object's data).
//!
//! The two datagram families share the 16-byte common [`Header`] and the
//! errors [`DecodeError`] and [`EncodeError`]; every family shares the
//! length-checked readers and writers, [`truncate_utf8`], and one
//! definition of "an enum carried as a byte" (kind bytes, status codes,
//! reasons, protocol ids: each defines `to_u8`, `from_u8`, `TryFrom<u8>`,
//! `From<_> for u8`, `ALL` and `Display` from a single table).
//!
//! The rules, after smoltcp's wire module: a decoder checks every length
//! before it reads a field, and any byte string is either a message or an
//! error value, never a panic; decoding is canonical (what decodes
//! re-encodes to the same bytes); an encoder writes into a caller's buffer
//! and reports a buffer that is too small. Datagram decoding copies and
//! allocates nothing (bodies borrow from the datagram); the overlay's
//! control messages own their strings and peer lists, because they are few,
//! small, and live longer than the read buffer. Unit and property tests sit
//! beside each module; [`oracle`] states the decoders' contracts once for
//! the fuzz targets in `fuzz/` and for `tests/corpus.rs`, which replays
//! their committed seeds (`fuzz/seeds/`) in every `cargo test`.
//!
//! The byte layouts are documented in `docs/wire-format.md`.
//!
//! This crate is not the protocol: which message is sent when lives in
//! `rmcast-proto` (and, for the overlay, `rmcast::overlay`). It does no I/O
//! and reads no clock.

mod cursor;
mod enums;
mod error;
mod header;
mod seq;
mod text;

pub mod manifest;
pub mod oracle;
pub mod overlay;
pub mod seal;
pub mod stream;
pub mod transfer;

pub use error::{DecodeError, EncodeError};
pub use header::{
    FLAG_ALONE, FLAG_AUTH, HEADER_LEN, Header, MAGIC, MAX_DATAGRAM, MAX_RECEIVERS, RANK_SENDER,
    RANK_UNASSIGNED, SessionId, VERSION, set_flag,
};
pub use seal::{Envelope, FLAG_NONCE, SEAL_OVERHEAD_DATA, SEAL_OVERHEAD_MAX};
pub use seq::Seq;
pub use text::truncate_utf8;
pub use transfer::*;
