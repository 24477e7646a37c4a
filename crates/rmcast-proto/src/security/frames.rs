//! Sealed frames: the TCP overlay (`tcp-*`) authenticated and encrypted
//! under the group key.
//!
//! # Layout
//!
//! A keyed overlay connection carries nothing but sealed frames: an 8-byte
//! header, a body, a 16-byte tag. Integers are big-endian.
//!
//! ```text
//! 0      2       3      4             8            8+len       8+len+16
//! +------+-------+------+-------------+------------+-----------+
//! | "RS" | ver 1 | kind | body len    | body       | tag       |
//! +------+-------+------+-------------+------------+-----------+
//!
//! kind 1  hello    body in the clear (27 bytes, below); tag = the first 16
//!                  bytes of HMAC-SHA256(hello key, transcript)
//! kind 2  control  body = one plain `RO` frame (rmcast_wire::overlay), encrypted
//! kind 3  data     body = one segment's bytes, encrypted
//!
//! hello body:
//! 0      1          2             3             11               27
//! | role | key hint | has session | session id  | nonce (16)     |
//!   1 initiator, 2 responder; key hint = the group key id's last byte
//! ```
//!
//! A body is at most [`MAX_BODY`] bytes; [`parse_header`] refuses a longer
//! one before anyone allocates for it.
//!
//! # Connection
//!
//! The side that connects (the *initiator*: a receiver at the sender's
//! control port, a parent at its child's data port) writes its hello with
//! a fresh nonce; the *responder* checks it and answers with its own hello,
//! whose tag covers the initiator's whole hello too (the transcript), so it
//! cannot be replayed into another connection. Then both sides seal:
//!
//! - **connection secret** = HKDF-SHA256-Extract(salt = `"rmcast v3
//!   overlay"` ‖ session id ‖ initiator nonce ‖ responder nonce, ikm = the
//!   group secret): new for every connection, since both ends contribute
//!   fresh nonces.
//! - **traffic keys** = HKDF-Expand(connection secret, `"i2r"` or `"r2i"` ‖
//!   epoch (u64)), one per direction and epoch of [`EPOCH_FRAMES`] frames
//!   (the rekey).
//! - **AEAD** = AES-256-GCM; frame *n* of a direction (counted from 0 after
//!   the hellos) has the nonce `0u32 ‖ n` and the key of epoch
//!   `n / EPOCH_FRAMES`; the associated data is the frame's header. The
//!   counter is implicit (TCP is ordered), so a frame replayed, reordered,
//!   dropped, or taken from another connection or session fails its tag.
//! - **hello key** = HKDF-Expand(HKDF-Extract(salt = `"rmcast v3 overlay
//!   hello"`, ikm = the group secret), `"hello"`), an HMAC-SHA256 key.
//!
//! The session id in a hello is the overlay's (the `Assign`'s and
//! `DataHello`'s). The responder always states its own; an initiator that
//! knows the session (a parent) states it, and a responder in another
//! session refuses it; one that does not yet (a registering receiver)
//! leaves `has session` 0 and takes the responder's.
//!
//! Overhead: one round trip and 51 bytes each way per connection; 24 bytes
//! per control frame and per segment (0.3 % of an 8 KiB segment).
//!
//! An outsider cannot write a hello's tag, so it is refused before any
//! overlay message is read; an initiator's hello replayed by an outsider
//! gets an answer, but the answer's fresh nonce makes keys the outsider
//! cannot seal under. The framing does not authenticate the end of a
//! connection: the overlay does (a data connection carries a known number
//! of segments, a control connection ends with `Complete` or `Abort`).
//! Every member holds the group key, so members trust each other.
//!
//! Sans-IO like the rest of this module: the nonces come from the caller,
//! bytes from and to the caller's buffers; sealing and opening work in
//! place, without allocating.

use super::{AuthError, GroupKey, expand_key, nonce};
use ring::aead::{Aad, LessSafeKey, Tag};
use ring::{hkdf, hmac};
use rmcast_wire::overlay::{self as wire, Msg, SEALED_MAGIC};
use std::sync::Arc;

/// The sealed framing's version.
pub const FRAME_VERSION: u8 = 1;
/// Bytes of a sealed frame's header.
pub const FRAME_HEADER_LEN: usize = 8;
/// Bytes of a sealed frame's tag.
pub const FRAME_TAG_LEN: usize = 16;
/// Bytes sealing adds to a control frame or a segment.
pub const FRAME_OVERHEAD: usize = FRAME_HEADER_LEN + FRAME_TAG_LEN;
/// Largest body: a segment of the largest size the overlay allows (control
/// frames are smaller).
pub const MAX_BODY: usize = crate::overlay::MAX_SEGMENT_SIZE as usize;
/// Length of each end's fresh nonce.
pub const HELLO_NONCE_LEN: usize = 16;
/// Bytes of a hello's body.
pub const HELLO_BODY_LEN: usize = 1 + 1 + 1 + 8 + HELLO_NONCE_LEN;
/// Bytes of a whole hello frame.
pub const HELLO_LEN: usize = FRAME_HEADER_LEN + HELLO_BODY_LEN + FRAME_TAG_LEN;
/// Frames one traffic key seals before the next epoch's takes over: 2²²,
/// as for datagrams (half the 2²³ records RFC 9001 §6.6 allows an AES-GCM
/// key); a rekey every 32 GiB at 8 KiB segments.
pub const EPOCH_FRAMES: u64 = 1 << 22;

const ROLE_INITIATOR: u8 = 1;
const ROLE_RESPONDER: u8 = 2;

/// What a sealed frame holds (its header's `kind` byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// A hello: the handshake's first frame each way (in the clear).
    Hello = 1,
    /// One control message (a plain `RO` frame inside).
    Control = 2,
    /// One segment's bytes.
    Data = 3,
}

impl FrameKind {
    fn from_u8(b: u8) -> Option<Self> {
        match b {
            1 => Some(Self::Hello),
            2 => Some(Self::Control),
            3 => Some(Self::Data),
            _ => None,
        }
    }
}

/// Why bytes were refused (or could not be sealed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A plain `RO` frame where sealed ones are required: the peer runs
    /// without a group key.
    #[error("the peer sends plain frames (it has no group key) and this side requires one")]
    Unsealed,
    /// Not a sealed frame, or one that makes no sense here.
    #[error("malformed sealed frame: {0}")]
    Malformed(&'static str),
    /// A body longer than [`MAX_BODY`].
    #[error("sealed frame body of {0} bytes is too long")]
    TooLong(usize),
    /// The peer's hello names another group key (its key hint differs).
    #[error("the peer uses another group key (key hint {hint:02x}, ours {ours:02x})")]
    WrongKey {
        /// The peer's key hint.
        hint: u8,
        /// Ours.
        ours: u8,
    },
    /// A tag does not verify: forged, modified, replayed, reordered, from
    /// another connection, or another key with the same hint.
    #[error("failed authentication (forged, modified, replayed or another key)")]
    Forged,
    /// The peer's hello names another session.
    #[error("the peer is in session {got:016x}, this side in {want:016x}")]
    OtherSession {
        /// The peer's session.
        got: u64,
        /// Ours.
        want: u64,
    },
    /// Sealing: the direction's counter ran out (never in practice).
    #[error("the frame counter is exhausted")]
    Exhausted,
}

impl FrameError {
    /// The datagram family's word for this refusal, for [`super::AuthStats`]
    /// and [`super::AuthFailures`].
    #[must_use]
    pub fn auth_error(self) -> AuthError {
        match self {
            Self::Unsealed => AuthError::Unsealed,
            Self::Malformed(_) | Self::TooLong(_) | Self::Exhausted => AuthError::Malformed,
            Self::WrongKey { hint, ours } => AuthError::WrongKey { hint, ours },
            Self::Forged => AuthError::Forged,
            Self::OtherSession { .. } => AuthError::UnknownSession,
        }
    }

    /// Whether the peer most likely holds another group key (or none).
    #[must_use]
    pub fn is_key_mismatch(self) -> bool {
        matches!(self, Self::WrongKey { .. } | Self::Forged)
    }
}

/// A sealed frame's header: what it holds and its body's length (the whole
/// frame is `FRAME_HEADER_LEN + len + FRAME_TAG_LEN` bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the body is.
    pub kind: FrameKind,
    /// The body's length.
    pub len: usize,
}

impl FrameHeader {
    /// Bytes of the whole frame.
    #[must_use]
    pub fn frame_len(&self) -> usize {
        FRAME_HEADER_LEN + self.len + FRAME_TAG_LEN
    }
}

/// Reads a sealed frame's header from the first [`FRAME_HEADER_LEN`] bytes
/// of `h`. A plain `RO` header is [`FrameError::Unsealed`], so that a
/// driver can read the plain frame and show what the peer said.
pub fn parse_header(h: &[u8]) -> Result<FrameHeader, FrameError> {
    let h = h
        .get(..FRAME_HEADER_LEN)
        .ok_or(FrameError::Malformed("truncated header"))?;
    if h[..2] == wire::MAGIC {
        return Err(FrameError::Unsealed);
    }
    if h[..2] != SEALED_MAGIC {
        return Err(FrameError::Malformed("not a sealed overlay frame"));
    }
    if h[2] != FRAME_VERSION {
        return Err(FrameError::Malformed("unsupported sealed frame version"));
    }
    let kind = FrameKind::from_u8(h[3]).ok_or(FrameError::Malformed("unknown frame kind"))?;
    let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
    if len > MAX_BODY {
        return Err(FrameError::TooLong(len));
    }
    Ok(FrameHeader { kind, len })
}

fn write_header(h: &mut [u8], kind: FrameKind, len: usize) {
    h[..2].copy_from_slice(&SEALED_MAGIC);
    h[2] = FRAME_VERSION;
    h[3] = kind as u8;
    h[4..8].copy_from_slice(&(len as u32).to_be_bytes());
}

/// Which way a traffic key seals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    /// Initiator to responder.
    I2r,
    /// Responder to initiator.
    R2i,
}

fn hello_key(group: &GroupKey) -> hmac::Key {
    let prk =
        hkdf::Salt::new(hkdf::HKDF_SHA256, b"rmcast v3 overlay hello").extract(group.secret());
    let okm = prk
        .expand(&[b"hello"], hmac::HMAC_SHA256)
        .expect("32 bytes is a valid HKDF-SHA256 output length");
    hmac::Key::from(okm)
}

fn connection_prk(
    group: &GroupKey,
    session: u64,
    initiator: &[u8; HELLO_NONCE_LEN],
    responder: &[u8; HELLO_NONCE_LEN],
) -> hkdf::Prk {
    const LABEL: &[u8] = b"rmcast v3 overlay";
    let mut salt = [0u8; LABEL.len() + 8 + 2 * HELLO_NONCE_LEN];
    let (label, rest) = salt.split_at_mut(LABEL.len());
    label.copy_from_slice(LABEL);
    rest[..8].copy_from_slice(&session.to_be_bytes());
    rest[8..8 + HELLO_NONCE_LEN].copy_from_slice(initiator);
    rest[8 + HELLO_NONCE_LEN..].copy_from_slice(responder);
    hkdf::Salt::new(hkdf::HKDF_SHA256, &salt).extract(group.secret())
}

fn traffic_key(prk: &hkdf::Prk, dir: Dir, epoch: u64) -> LessSafeKey {
    let label: &[u8] = match dir {
        Dir::I2r => b"i2r",
        Dir::R2i => b"r2i",
    };
    expand_key(prk, &[label, &epoch.to_be_bytes()])
}

/// One direction's keys: the connection secret and the current epoch's key.
struct Keys {
    prk: hkdf::Prk,
    dir: Dir,
    /// Frames sealed or opened so far: the next frame's counter.
    counter: u64,
    epoch: u64,
    key: LessSafeKey,
}

impl Keys {
    fn new(prk: hkdf::Prk, dir: Dir) -> Self {
        let key = traffic_key(&prk, dir, 0);
        Self {
            prk,
            dir,
            counter: 0,
            epoch: 0,
            key,
        }
    }
}

impl core::fmt::Debug for Keys {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Keys")
            .field("dir", &self.dir)
            .field("counter", &self.counter)
            .finish_non_exhaustive()
    }
}

/// Seals one direction of a connection: frame after frame, in order.
#[derive(Debug)]
pub struct Sealer(Keys);

/// Opens the other direction: frame after frame, in order.
#[derive(Debug)]
pub struct Opener(Keys);

impl Sealer {
    /// Frames sealed so far.
    #[must_use]
    pub fn frames(&self) -> u64 {
        self.0.counter
    }

    /// Seals `frame` in place: its body is `frame[FRAME_HEADER_LEN..len -
    /// FRAME_TAG_LEN]` (plain on entry, encrypted on return); the header
    /// and the tag are written around it. `kind` is `Control` or `Data`.
    pub fn seal_in_place(&mut self, kind: FrameKind, frame: &mut [u8]) -> Result<(), FrameError> {
        if kind == FrameKind::Hello {
            return Err(FrameError::Malformed("a hello is not sealed"));
        }
        let len = frame
            .len()
            .checked_sub(FRAME_OVERHEAD)
            .ok_or(FrameError::Malformed("buffer shorter than the overhead"))?;
        if len > MAX_BODY {
            return Err(FrameError::TooLong(len));
        }
        let k = &mut self.0;
        let counter = k.counter;
        let next = counter.checked_add(1).ok_or(FrameError::Exhausted)?;
        let epoch = counter / EPOCH_FRAMES;
        if epoch != k.epoch {
            k.key = traffic_key(&k.prk, k.dir, epoch);
            k.epoch = epoch;
        }
        let (header, rest) = frame.split_at_mut(FRAME_HEADER_LEN);
        write_header(header, kind, len);
        let (body, tag_out) = rest.split_at_mut(len);
        let tag = k
            .key
            .seal_in_place_separate_tag(nonce(counter), Aad::from(&*header), body)
            .expect("AES-GCM seals any body of at most MAX_BODY bytes");
        tag_out.copy_from_slice(tag.as_ref());
        k.counter = next;
        Ok(())
    }

    /// A control message as a new sealed frame (control frames are few and
    /// small; segments go through [`Sealer::seal_in_place`]).
    pub fn seal_msg(&mut self, msg: &Msg) -> Result<Vec<u8>, FrameError> {
        let len = msg.buffer_len();
        let mut frame = vec![0u8; len + FRAME_OVERHEAD];
        msg.emit(&mut frame[FRAME_HEADER_LEN..FRAME_HEADER_LEN + len])
            .map_err(|_| FrameError::Malformed("control message does not encode"))?;
        self.seal_in_place(FrameKind::Control, &mut frame)?;
        Ok(frame)
    }
}

impl Opener {
    /// Frames opened so far.
    #[must_use]
    pub fn frames(&self) -> u64 {
        self.0.counter
    }

    /// Opens the whole sealed frame `frame` (header, body and tag, nothing
    /// more) in place: returns its kind and the plain body, which lies at
    /// `frame[FRAME_HEADER_LEN..][..body.len()]`. On failure nothing
    /// changed but the body's bytes, and the connection is to be dropped.
    pub fn open_in_place<'a>(
        &mut self,
        frame: &'a mut [u8],
    ) -> Result<(FrameKind, &'a mut [u8]), FrameError> {
        let h = parse_header(frame)?;
        if h.frame_len() != frame.len() {
            return Err(FrameError::Malformed(
                "frame length disagrees with its header",
            ));
        }
        if h.kind == FrameKind::Hello {
            return Err(FrameError::Malformed("a hello after the handshake"));
        }
        let k = &mut self.0;
        let counter = k.counter;
        let next = counter.checked_add(1).ok_or(FrameError::Exhausted)?;
        let epoch = counter / EPOCH_FRAMES;
        let fresh = (epoch != k.epoch).then(|| traffic_key(&k.prk, k.dir, epoch));
        let key = fresh.as_ref().unwrap_or(&k.key);
        let (header, rest) = frame.split_at_mut(FRAME_HEADER_LEN);
        let (body, tag) = rest.split_at_mut(h.len);
        let tag = Tag::from(<[u8; FRAME_TAG_LEN]>::try_from(&*tag).expect("16 bytes"));
        key.open_in_place_separate_tag(nonce(counter), Aad::from(&*header), tag, body, 0..)
            .map_err(|_| FrameError::Forged)?;
        if let Some(key) = fresh {
            k.key = key;
            k.epoch = epoch;
        }
        k.counter = next;
        Ok((h.kind, body))
    }

    /// Opens a sealed control frame and decodes the message in it.
    pub fn open_msg(&mut self, frame: &mut [u8]) -> Result<Msg, FrameError> {
        match self.open_in_place(frame)? {
            (FrameKind::Control, body) => match Msg::decode(body) {
                Ok((msg, n)) if n == body.len() => Ok(msg),
                Ok(_) => Err(FrameError::Malformed("bytes after the control message")),
                Err(_) => Err(FrameError::Malformed("undecodable control message")),
            },
            _ => Err(FrameError::Malformed(
                "a data frame where a control frame belongs",
            )),
        }
    }
}

/// Both directions of an authenticated connection.
#[derive(Debug)]
pub struct Channel {
    /// The overlay session both ends agreed on.
    pub session: u64,
    /// Seals what this side writes.
    pub sealer: Sealer,
    /// Opens what it reads.
    pub opener: Opener,
}

struct HelloBody {
    role: u8,
    hint: u8,
    session: Option<u64>,
    nonce: [u8; HELLO_NONCE_LEN],
}

fn write_hello(key: &hmac::Key, transcript: &[u8], body: &HelloBody) -> [u8; HELLO_LEN] {
    let mut f = [0u8; HELLO_LEN];
    write_header(&mut f, FrameKind::Hello, HELLO_BODY_LEN);
    let b = &mut f[FRAME_HEADER_LEN..];
    b[0] = body.role;
    b[1] = body.hint;
    b[2] = u8::from(body.session.is_some());
    b[3..11].copy_from_slice(&body.session.unwrap_or(0).to_be_bytes());
    b[11..11 + HELLO_NONCE_LEN].copy_from_slice(&body.nonce);
    let tag = hello_tag(key, transcript, &f[..HELLO_LEN - FRAME_TAG_LEN]);
    f[HELLO_LEN - FRAME_TAG_LEN..].copy_from_slice(&tag);
    f
}

fn hello_tag(key: &hmac::Key, transcript: &[u8], frame: &[u8]) -> [u8; FRAME_TAG_LEN] {
    let mut ctx = hmac::Context::with_key(key);
    ctx.update(transcript);
    ctx.update(frame);
    let full = ctx.sign();
    full.as_ref()[..FRAME_TAG_LEN]
        .try_into()
        .expect("HMAC-SHA256 is 32 bytes")
}

/// Reads a peer's hello of `role`: checks the key hint and the tag (over
/// `transcript` and the frame). Any bytes are a hello or an error.
fn read_hello(
    key: &hmac::Key,
    ours: u8,
    role: u8,
    transcript: &[u8],
    frame: &[u8],
) -> Result<HelloBody, FrameError> {
    let h = parse_header(frame)?;
    if h.kind != FrameKind::Hello {
        return Err(FrameError::Malformed("the first frame is not a hello"));
    }
    if h.len != HELLO_BODY_LEN || frame.len() != HELLO_LEN {
        return Err(FrameError::Malformed("a hello of the wrong length"));
    }
    let b = &frame[FRAME_HEADER_LEN..HELLO_LEN - FRAME_TAG_LEN];
    if b[0] != role {
        return Err(FrameError::Malformed("a hello from the wrong side"));
    }
    if b[1] != ours {
        return Err(FrameError::WrongKey { hint: b[1], ours });
    }
    let want = hello_tag(key, transcript, &frame[..HELLO_LEN - FRAME_TAG_LEN]);
    let got = &frame[HELLO_LEN - FRAME_TAG_LEN..];
    // Constant time: which byte differs tells an attacker nothing.
    let diff = want.iter().zip(got).fold(0u8, |d, (a, b)| d | (a ^ b));
    if diff != 0 {
        return Err(FrameError::Forged);
    }
    let session = match b[2] {
        0 => None,
        1 => Some(u64::from_be_bytes(b[3..11].try_into().expect("8 bytes"))),
        _ => return Err(FrameError::Malformed("bad session flag")),
    };
    Ok(HelloBody {
        role: b[0],
        hint: b[1],
        session,
        nonce: b[11..11 + HELLO_NONCE_LEN].try_into().expect("16 bytes"),
    })
}

/// The connecting side's handshake: write [`Initiator::hello`], read the
/// responder's hello, [`Initiator::finish`].
pub struct Initiator {
    group: Arc<GroupKey>,
    key: hmac::Key,
    session: Option<u64>,
    nonce: [u8; HELLO_NONCE_LEN],
    hello: [u8; HELLO_LEN],
}

impl core::fmt::Debug for Initiator {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Initiator")
            .field("key", &self.group.id())
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl Initiator {
    /// Starts a handshake under `group` for `session` (`None`: whichever
    /// the responder is in), with `nonce` fresh randomness from the caller.
    #[must_use]
    pub fn new(group: Arc<GroupKey>, session: Option<u64>, nonce: [u8; HELLO_NONCE_LEN]) -> Self {
        let key = hello_key(&group);
        let hello = write_hello(
            &key,
            &[],
            &HelloBody {
                role: ROLE_INITIATOR,
                hint: group.id().hint(),
                session,
                nonce,
            },
        );
        Self {
            group,
            key,
            session,
            nonce,
            hello,
        }
    }

    /// The hello to write first.
    #[must_use]
    pub fn hello(&self) -> &[u8; HELLO_LEN] {
        &self.hello
    }

    /// Reads the responder's hello (`reply`, the whole frame) and derives
    /// the connection's keys.
    pub fn finish(self, reply: &[u8]) -> Result<Channel, FrameError> {
        let ours = self.group.id().hint();
        let r = read_hello(&self.key, ours, ROLE_RESPONDER, &self.hello, reply)?;
        let session = r
            .session
            .ok_or(FrameError::Malformed("the responder states no session"))?;
        if let Some(want) = self.session
            && want != session
        {
            return Err(FrameError::OtherSession { got: session, want });
        }
        let prk = connection_prk(&self.group, session, &self.nonce, &r.nonce);
        Ok(Channel {
            session,
            sealer: Sealer(Keys::new(prk.clone(), Dir::I2r)),
            opener: Opener(Keys::new(prk, Dir::R2i)),
        })
    }
}

/// The accepting side's handshake: reads the initiator's `hello` (the whole
/// frame) for `session`, with `nonce` fresh randomness from the caller.
/// Returns the connection's keys and the hello to answer with; on failure
/// nothing was answered and the connection is to be dropped.
pub fn respond(
    group: &GroupKey,
    session: u64,
    hello: &[u8],
    nonce: [u8; HELLO_NONCE_LEN],
) -> Result<(Channel, [u8; HELLO_LEN]), FrameError> {
    let key = hello_key(group);
    let ours = group.id().hint();
    let i = read_hello(&key, ours, ROLE_INITIATOR, &[], hello)?;
    if let Some(got) = i.session
        && got != session
    {
        return Err(FrameError::OtherSession { got, want: session });
    }
    let reply = write_hello(
        &key,
        hello,
        &HelloBody {
            role: ROLE_RESPONDER,
            hint: ours,
            session: Some(session),
            nonce,
        },
    );
    debug_assert_eq!(i.role, ROLE_INITIATOR);
    debug_assert_eq!(i.hint, ours);
    let prk = connection_prk(group, session, &i.nonce, &nonce);
    Ok((
        Channel {
            session,
            sealer: Sealer(Keys::new(prk.clone(), Dir::R2i)),
            opener: Opener(Keys::new(prk, Dir::I2r)),
        },
        reply,
    ))
}

#[cfg(test)]
impl Keys {
    /// Jumps the counter (tests of the rekey).
    fn skip_to(&mut self, counter: u64) {
        self.counter = counter;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::KEY_LEN;
    use proptest::prelude::*;
    use rmcast_wire::overlay::sample_messages;

    fn key(b: u8) -> Arc<GroupKey> {
        Arc::new(GroupKey::from_secret([b; KEY_LEN]))
    }

    /// A key other than `k` whose id has the same hint byte.
    fn same_hint_as(k: &GroupKey) -> Arc<GroupKey> {
        (0u16..)
            .map(|i| {
                let mut s = [0x55; KEY_LEN];
                s[..2].copy_from_slice(&i.to_be_bytes());
                GroupKey::from_secret(s)
            })
            .find(|c| c.id().hint() == k.id().hint() && c.id() != k.id())
            .map(Arc::new)
            .unwrap()
    }

    /// A handshake between `ik` (initiator) and `rk` (responder).
    fn handshake(
        ik: &Arc<GroupKey>,
        rk: &Arc<GroupKey>,
        isession: Option<u64>,
        rsession: u64,
        seed: u8,
    ) -> Result<(Channel, Channel), FrameError> {
        let i = Initiator::new(ik.clone(), isession, [seed; 16]);
        let (r, reply) = respond(rk, rsession, i.hello(), [seed ^ 0xff; 16])?;
        Ok((i.finish(&reply)?, r))
    }

    fn pair(seed: u8) -> (Channel, Channel) {
        let k = key(1);
        handshake(&k, &k, Some(42), 42, seed).unwrap()
    }

    fn data_frame(s: &mut Sealer, body: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; body.len() + FRAME_OVERHEAD];
        f[FRAME_HEADER_LEN..FRAME_HEADER_LEN + body.len()].copy_from_slice(body);
        s.seal_in_place(FrameKind::Data, &mut f).unwrap();
        f
    }

    #[test]
    fn both_directions_round_trip_messages_and_segments() {
        let (mut i, mut r) = pair(1);
        assert_eq!((i.session, r.session), (42, 42));
        for m in sample_messages() {
            let mut f = i.sealer.seal_msg(&m).unwrap();
            assert_eq!(f.len(), m.buffer_len() + FRAME_OVERHEAD);
            assert_eq!(r.opener.open_msg(&mut f), Ok(m.clone()));
            let mut f = r.sealer.seal_msg(&m).unwrap();
            assert_eq!(i.opener.open_msg(&mut f), Ok(m));
        }
        for len in [0usize, 1, 100, 8192] {
            let body: Vec<u8> = (0..len).map(|x| x as u8).collect();
            let mut f = data_frame(&mut i.sealer, &body);
            if len > 0 {
                assert_ne!(&f[FRAME_HEADER_LEN..][..len], &body[..], "encrypted");
            }
            let (kind, plain) = r.opener.open_in_place(&mut f).unwrap();
            assert_eq!((kind, &plain[..]), (FrameKind::Data, &body[..]));
        }
        assert_eq!(i.sealer.frames(), r.opener.frames());
    }

    #[test]
    fn a_registering_initiator_takes_the_responders_session() {
        let k = key(2);
        let (i, r) = handshake(&k, &k, None, 7, 3).unwrap();
        assert_eq!((i.session, r.session), (7, 7));
    }

    #[test]
    fn replay_reorder_drop_and_other_connections_fail_their_tags() {
        let (mut i, mut r) = pair(4);
        let f0 = data_frame(&mut i.sealer, b"zero");
        let f1 = data_frame(&mut i.sealer, b"one!");
        // Reordered (or frame 0 dropped): frame 1 where 0 belongs.
        assert_eq!(
            r.opener.open_in_place(&mut f1.clone()),
            Err(FrameError::Forged)
        );
        r.opener.open_in_place(&mut f0.clone()).unwrap();
        // Replayed.
        assert_eq!(
            r.opener.open_in_place(&mut f0.clone()),
            Err(FrameError::Forged)
        );
        r.opener.open_in_place(&mut f1.clone()).unwrap();
        // Another connection of the same session and key: other nonces.
        let (mut i2, _) = pair(5);
        let other = data_frame(&mut i2.sealer, b"two!");
        assert_eq!(
            r.opener.open_in_place(&mut other.clone()),
            Err(FrameError::Forged)
        );
        // Reflected: our own frame sent back to us.
        let (mut i3, mut r3) = pair(6);
        let mine = data_frame(&mut i3.sealer, b"echo");
        assert_eq!(
            i3.opener.open_in_place(&mut mine.clone()),
            Err(FrameError::Forged)
        );
        r3.opener.open_in_place(&mut mine.clone()).unwrap();
    }

    #[test]
    fn a_refused_frame_changes_nothing() {
        let (mut i, mut r) = pair(7);
        let good = data_frame(&mut i.sealer, b"payload");
        let mut bad = good.clone();
        bad[FRAME_HEADER_LEN] ^= 1;
        assert_eq!(r.opener.open_in_place(&mut bad), Err(FrameError::Forged));
        assert_eq!(r.opener.frames(), 0);
        let mut good = good;
        let (_, plain) = r.opener.open_in_place(&mut good).unwrap();
        assert_eq!(plain, b"payload");
    }

    #[test]
    fn the_header_is_authenticated() {
        let (mut i, mut r) = pair(8);
        let mut f = i.sealer.seal_msg(&Msg::Start).unwrap();
        f[3] = FrameKind::Data as u8;
        assert_eq!(r.opener.open_in_place(&mut f), Err(FrameError::Forged));
    }

    #[test]
    fn hellos_of_another_key_session_or_side_are_refused() {
        let (k, other) = (key(9), key(10));
        assert_ne!(k.id().hint(), other.id().hint());
        assert!(matches!(
            handshake(&k, &other, None, 1, 1),
            Err(FrameError::WrongKey { .. })
        ));
        let twin = same_hint_as(&k);
        assert_eq!(
            handshake(&twin, &k, None, 1, 1).unwrap_err(),
            FrameError::Forged
        );
        assert_eq!(
            handshake(&k, &k, Some(5), 6, 1).unwrap_err(),
            FrameError::OtherSession { got: 5, want: 6 }
        );
        // A responder of another key (same hint) answering a right initiator.
        let i = Initiator::new(k.clone(), None, [1; 16]);
        let forged = Initiator::new(twin.clone(), None, [1; 16]);
        let (_, reply) = respond(&twin, 3, forged.hello(), [2; 16]).unwrap();
        assert_eq!(i.finish(&reply).unwrap_err(), FrameError::Forged);
        // An initiator's hello reflected back to it.
        let i = Initiator::new(k.clone(), None, [1; 16]);
        let echo = *i.hello();
        assert!(matches!(i.finish(&echo), Err(FrameError::Malformed(_))));
        // A responder's hello replayed into another connection.
        let a = Initiator::new(k.clone(), None, [3; 16]);
        let (_, reply) = respond(&k, 3, a.hello(), [4; 16]).unwrap();
        let b = Initiator::new(k.clone(), None, [5; 16]);
        assert_eq!(b.finish(&reply).unwrap_err(), FrameError::Forged);
    }

    #[test]
    fn connections_of_another_session_do_not_open() {
        let k = key(11);
        let (mut a, _) = handshake(&k, &k, Some(1), 1, 1).unwrap();
        let (_, mut b) = handshake(&k, &k, Some(2), 2, 1).unwrap();
        let f = data_frame(&mut a.sealer, b"x");
        assert_eq!(
            b.opener.open_in_place(&mut f.clone()),
            Err(FrameError::Forged)
        );
    }

    #[test]
    fn plain_frames_and_hellos_are_told_apart() {
        let plain = Msg::Register {
            name: "n".into(),
            data_addr: "127.0.0.1:1".parse().unwrap(),
        }
        .to_frame();
        assert_eq!(parse_header(&plain), Err(FrameError::Unsealed));
        let k = key(12);
        assert_eq!(
            respond(&k, 1, &plain, [0; 16]).unwrap_err(),
            FrameError::Unsealed
        );
        let (mut i, mut r) = pair(9);
        let mut plain2 = plain.clone();
        assert_eq!(
            r.opener.open_in_place(&mut plain2),
            Err(FrameError::Unsealed)
        );
        let hello = *Initiator::new(k, None, [0; 16]).hello();
        assert!(matches!(
            r.opener.open_in_place(&mut hello.clone()),
            Err(FrameError::Malformed(_))
        ));
        let mut seg = data_frame(&mut i.sealer, b"seg");
        assert!(matches!(
            r.opener.open_msg(&mut seg),
            Err(FrameError::Malformed(_))
        ));
        assert_eq!(
            i.sealer.seal_in_place(FrameKind::Hello, &mut [0; 40]),
            Err(FrameError::Malformed("a hello is not sealed"))
        );
    }

    #[test]
    fn the_key_changes_each_epoch_and_both_sides_follow() {
        let (mut i, mut r) = pair(10);
        i.sealer.0.skip_to(EPOCH_FRAMES - 2);
        r.opener.0.skip_to(EPOCH_FRAMES - 2);
        for n in 0..4u8 {
            let mut f = data_frame(&mut i.sealer, &[n; 32]);
            let (_, body) = r.opener.open_in_place(&mut f).unwrap();
            assert_eq!(body, &[n; 32]);
        }
        assert_eq!((i.sealer.0.epoch, r.opener.0.epoch), (1, 1));
        // The first frame of epoch 1 under epoch 0's key does not open.
        let (mut i, mut r) = pair(11);
        r.opener.0.skip_to(EPOCH_FRAMES);
        i.sealer.0.skip_to(EPOCH_FRAMES);
        i.sealer.0.epoch = 1;
        i.sealer.0.key = traffic_key(&i.sealer.0.prk, Dir::I2r, 0);
        let f = data_frame(&mut i.sealer, b"stale key");
        assert_eq!(
            r.opener.open_in_place(&mut f.clone()),
            Err(FrameError::Forged)
        );
        assert_eq!(r.opener.frames(), EPOCH_FRAMES);
    }

    #[test]
    fn an_exhausted_counter_refuses_to_seal() {
        let (mut i, _) = pair(12);
        i.sealer.0.skip_to(u64::MAX);
        assert_eq!(
            i.sealer.seal_in_place(FrameKind::Data, &mut [0; 30]),
            Err(FrameError::Exhausted)
        );
    }

    #[test]
    fn headers_refuse_huge_bodies_before_anything_is_read() {
        let mut h = [0u8; FRAME_HEADER_LEN];
        write_header(&mut h, FrameKind::Data, MAX_BODY + 1);
        assert_eq!(parse_header(&h), Err(FrameError::TooLong(MAX_BODY + 1)));
        write_header(&mut h, FrameKind::Data, MAX_BODY);
        assert_eq!(parse_header(&h).unwrap().len, MAX_BODY);
    }

    proptest! {
        #[test]
        fn any_bytes_are_a_frame_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = parse_header(&bytes);
            let (mut i, mut r) = pair(13);
            let _ = r.opener.open_in_place(&mut bytes.clone());
            let _ = r.opener.open_msg(&mut bytes.clone());
            let _ = i.opener.open_in_place(&mut bytes.clone());
            let _ = respond(&key(1), 42, &bytes, [0; 16]);
            let _ = Initiator::new(key(1), None, [0; 16]).finish(&bytes);
        }

        #[test]
        fn any_bytes_behind_a_valid_header_are_refused(
            kind in 0u8..5,
            body in proptest::collection::vec(any::<u8>(), 0..80),
        ) {
            let mut f = vec![0u8; body.len() + FRAME_OVERHEAD];
            write_header(&mut f, FrameKind::Data, body.len());
            f[3] = kind;
            f[FRAME_HEADER_LEN..][..body.len()].copy_from_slice(&body);
            let (_, mut r) = pair(14);
            prop_assert!(r.opener.open_in_place(&mut f).is_err());
        }

        #[test]
        fn any_bit_flip_or_truncation_is_refused(
            body in proptest::collection::vec(any::<u8>(), 0..300),
            flip in any::<prop::sample::Index>(),
            bit in 0u8..8,
            cut in any::<prop::sample::Index>(),
        ) {
            let (mut i, mut r) = pair(15);
            let f = data_frame(&mut i.sealer, &body);
            let mut flipped = f.clone();
            flipped[flip.index(f.len())] ^= 1 << bit;
            prop_assert!(r.opener.open_in_place(&mut flipped).is_err());
            let short = cut.index(f.len());
            prop_assert!(r.opener.open_in_place(&mut f[..short].to_vec()).is_err());
            // Neither refusal moved the counter: the genuine frame opens.
            let mut good = f.clone();
            let (_, plain) = r.opener.open_in_place(&mut good).unwrap();
            prop_assert_eq!(&plain[..], &body[..]);
        }

        #[test]
        fn any_bit_flip_in_a_hello_is_refused(
            flip in 0..HELLO_LEN,
            bit in 0u8..8,
            responder_side in any::<bool>(),
        ) {
            let k = key(16);
            let i = Initiator::new(k.clone(), Some(9), [1; 16]);
            if responder_side {
                let (_, mut reply) = respond(&k, 9, i.hello(), [2; 16]).unwrap();
                reply[flip] ^= 1 << bit;
                prop_assert!(i.finish(&reply).is_err());
            } else {
                let mut hello = *i.hello();
                hello[flip] ^= 1 << bit;
                prop_assert!(respond(&k, 9, &hello, [2; 16]).is_err());
            }
        }

        #[test]
        fn sequences_of_frames_round_trip(
            frames in proptest::collection::vec(
                (any::<bool>(), proptest::collection::vec(any::<u8>(), 0..64)), 1..20),
        ) {
            let (mut i, mut r) = pair(17);
            for (control, body) in &frames {
                let kind = if *control { FrameKind::Control } else { FrameKind::Data };
                let mut f = vec![0u8; body.len() + FRAME_OVERHEAD];
                f[FRAME_HEADER_LEN..][..body.len()].copy_from_slice(body);
                r.sealer.seal_in_place(kind, &mut f).unwrap();
                let (k, plain) = i.opener.open_in_place(&mut f).unwrap();
                prop_assert_eq!(k, kind);
                prop_assert_eq!(&plain[..], &body[..]);
            }
        }
    }
}
