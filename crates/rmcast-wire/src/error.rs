//! The datagram families' errors: why bytes are not a packet, why a packet
//! could not be written. The TCP overlay has its own
//! ([`crate::overlay::DecodeError`]): a frame fails in other ways.

/// Why a byte string is not an rmcast packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than its header or body says it must be.
    #[error("truncated packet")]
    Truncated,
    /// Does not start with the rmcast magic: some other program's traffic.
    #[error("foreign packet (bad magic)")]
    BadMagic,
    /// An rmcast packet of a version this build does not speak.
    #[error("unsupported wire version {0}")]
    BadVersion(u8),
    /// Packet type byte not known.
    #[error("unknown packet type {0:#04x}")]
    UnknownKind(u8),
    /// Flags this version does not implement (authentication, reserved bits).
    #[error("unsupported header flags {0:#04x}")]
    UnsupportedFlags(u8),
    /// A field holds a value outside its range.
    #[error("invalid value in field `{0}`")]
    BadField(&'static str),
    /// A text field is not UTF-8.
    #[error("text field is not UTF-8")]
    BadText,
    /// Bytes left over after the body.
    #[error("trailing bytes after the packet body")]
    TrailingBytes,
}

/// Why a packet could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The destination buffer cannot hold the packet.
    #[error("buffer too small for packet")]
    BufferTooSmall,
    /// A text field is longer than 255 bytes.
    #[error("text field longer than 255 bytes")]
    TextTooLong,
    /// A bitmap is longer than 65,535 bytes.
    #[error("bitmap longer than 65535 bytes")]
    BitmapTooLong,
    /// A `Welcome` upstream address with an unspecified IP or a zero port.
    #[error("upstream address must have both an IP and a port")]
    BadUpstream,
    /// A sealed packet's party field does not match its rank (a sender's
    /// packet names no party, a receiver's must).
    #[error("sealing party does not match the packet's rank")]
    BadParty,
    /// A `Have` whose part is not below its parts, or whose ranges are not
    /// ascending, disjoint and non-empty.
    #[error("malformed Have report")]
    BadHave,
    /// A `Welcomes` with no entry, more than `WELCOMES_MAX`, a partial
    /// one, or an entry whose upstream has only one of IP and port.
    #[error("malformed Welcomes list")]
    BadWelcomes,
    /// A `Move` whose port is zero.
    #[error("a Move must name a TCP port")]
    BadMovePort,
    /// An `Offer` whose FEC shape is outside the code's limits.
    #[error("FEC shape outside the code's limits")]
    BadFec,
}
