//! Sealing: every datagram authenticated and encrypted under the group key.
//!
//! The threat model, the key schedule's reasons and the limits are in
//! `docs/security.md`; the envelope's bytes in `docs/wire-format.md` and
//! [`rmcast_wire::seal`]. In short:
//!
//! - **Group key** ([`GroupKey`]): 256 bits every member holds.
//! - **Session secret**: HKDF-SHA256-Extract over the group key, salted with
//!   the session id and the sender's fresh 16-byte nonce. A new session
//!   never reuses a key, even if a session id repeats.
//! - **Traffic keys**: HKDF-Expand of the session secret, one per direction
//!   and sealing party: `down` for the sender, `up ‖ receiver id` for each
//!   receiver, and per epoch of [`EPOCH_PACKETS`] packets (the rekey).
//! - **AEAD**: AES-256-GCM (ring). Nonce = 4 zero bytes ‖ the sealer's
//!   64-bit packet counter; the counter never repeats under one key, because
//!   each key has exactly one sealer that counts up.
//! - **Replay**: a [`ReplayWindow`] per sealing party.
//!
//! [`Keyring::open`] checks everything *before* any machine sees the bytes:
//! a packet that fails is counted in [`AuthStats`] and dropped, changes no
//! state (no session, party or window is stored until a tag verifies) and
//! causes no reply. Like the machines, this module is sans-IO: randomness
//! (the sender's nonce, the key's secret) comes from the caller.

mod frames;
mod key;
mod replay;
mod seal;

pub use frames::{
    Channel, EPOCH_FRAMES, FRAME_HEADER_LEN, FRAME_OVERHEAD, FRAME_TAG_LEN, FRAME_VERSION,
    FrameError, FrameHeader, FrameKind, HELLO_LEN, HELLO_NONCE_LEN, Initiator, MAX_BODY, Opener,
    Sealer, parse_header as parse_frame_header, respond,
};
pub use key::{GroupKey, KEY_FILE_VERSION, KEY_LEN, KeyFileError, KeyId};
pub use replay::{Replay, ReplayWindow, WINDOW as REPLAY_WINDOW};
pub(crate) use seal::Seal;

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, Tag, UnboundKey};
use ring::hkdf;
use rmcast_wire::seal::{
    COUNTER_LEN, Envelope, PARTY_LEN, SENDER_NONCE_LEN, TAG_LEN, write_trailer,
};
use rmcast_wire::{HEADER_LEN, SessionId};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

/// Packets one traffic key seals before the next epoch's key takes over:
/// 2²², half of the 2²³ packets QUIC (RFC 9001 §6.6) allows one AES-GCM key
/// for its confidentiality margin. At 1,424-byte payloads that is a rekey
/// every 5.6 GiB.
pub const EPOCH_PACKETS: u64 = 1 << 22;
/// Sessions a keyring remembers keys of (the one it seals for is never
/// forgotten): group-scoped rate packets of other sessions need theirs.
pub const SESSIONS_MAX: usize = 16;
/// The sender's per-session nonce length.
pub const SESSION_NONCE_LEN: usize = SENDER_NONCE_LEN;

/// Why a datagram was refused before any machine saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// A plain (unsealed) packet where sealing is required.
    #[error("unsealed packet (its sender runs --insecure)")]
    Unsealed,
    /// A sealed packet that reached a peer running without a key.
    #[error("sealed packet, but this side has no group key")]
    NoKey,
    /// Not a well-formed envelope.
    #[error("malformed sealed packet")]
    Malformed,
    /// Sealed under another group key (its header's key hint differs).
    #[error("sealed under another group key (key hint {hint:02x}, ours {ours:02x})")]
    WrongKey {
        /// The packet's key hint.
        hint: u8,
        /// Ours.
        ours: u8,
    },
    /// A session whose keys are unknown and whose nonce the packet lacks.
    #[error("no keys for its session yet")]
    UnknownSession,
    /// Its counter was accepted before.
    #[error("replayed")]
    Replayed,
    /// Its counter is older than the replay window.
    #[error("older than the replay window")]
    TooOld,
    /// The tag does not verify: forged, modified, or another key with the
    /// same hint.
    #[error("failed authentication (forged, modified or another key)")]
    Forged,
}

/// Why a packet could not be sealed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// No keys for the packet's session (a receiver before the sender's
    /// first authentic packet).
    #[error("no keys for the session")]
    NoKeys,
    /// The buffer cannot hold the trailer and tag.
    #[error("buffer too small for the seal")]
    BufferTooSmall,
}

/// Datagrams refused by [`Keyring::open`], by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuthStats {
    /// Packets opened and passed on.
    pub opened: u64,
    /// Packets sealed.
    pub sealed: u64,
    /// Plain packets refused.
    pub unsealed: u64,
    /// Sealed packets that reached a keyless peer.
    pub no_key: u64,
    /// Malformed envelopes.
    pub malformed: u64,
    /// Packets under another group key.
    pub wrong_key: u64,
    /// Packets of sessions without known keys.
    pub unknown_session: u64,
    /// Replays.
    pub replayed: u64,
    /// Counters older than the window.
    pub too_old: u64,
    /// Tags that failed.
    pub forged: u64,
}

impl AuthStats {
    /// All refused packets.
    #[must_use]
    pub fn refused(&self) -> u64 {
        self.unsealed
            + self.no_key
            + self.malformed
            + self.wrong_key
            + self.unknown_session
            + self.replayed
            + self.too_old
            + self.forged
    }

    /// Adds `o`'s counters to these (several machines of one host).
    pub fn add(&mut self, o: &AuthStats) {
        self.opened += o.opened;
        self.sealed += o.sealed;
        self.unsealed += o.unsealed;
        self.no_key += o.no_key;
        self.malformed += o.malformed;
        self.wrong_key += o.wrong_key;
        self.unknown_session += o.unknown_session;
        self.replayed += o.replayed;
        self.too_old += o.too_old;
        self.forged += o.forged;
    }

    /// Counts one refusal.
    pub fn count(&mut self, e: AuthError) {
        *match e {
            AuthError::Unsealed => &mut self.unsealed,
            AuthError::NoKey => &mut self.no_key,
            AuthError::Malformed => &mut self.malformed,
            AuthError::WrongKey { .. } => &mut self.wrong_key,
            AuthError::UnknownSession => &mut self.unknown_session,
            AuthError::Replayed => &mut self.replayed,
            AuthError::TooOld => &mut self.too_old,
            AuthError::Forged => &mut self.forged,
        } += 1;
    }
}

/// What an opened datagram was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opened {
    /// Length of the plain packet now at the buffer's start.
    pub len: usize,
    /// The sealing receiver's id; `None` for the sender.
    pub party: Option<u64>,
}

/// The keys of one session: its secret, and per sealing party the current
/// traffic keys and replay window.
struct SessionKeys {
    session: SessionId,
    nonce: [u8; SESSION_NONCE_LEN],
    prk: hkdf::Prk,
    peers: HashMap<Option<u64>, Peer>,
    tx: Option<Tx>,
}

struct Peer {
    keys: EpochKeys,
    window: ReplayWindow,
}

impl Peer {
    /// A party whose first packet (of `counter`, under `epoch`'s `key`)
    /// just verified.
    fn first(epoch: u64, key: LessSafeKey, counter: u64) -> Self {
        let mut window = ReplayWindow::default();
        window.mark(counter);
        Self {
            keys: EpochKeys {
                cur: Some((epoch, key)),
                prev: None,
            },
            window,
        }
    }
}

/// Our own sealing state in a session.
struct Tx {
    party: Option<u64>,
    counter: u64,
    keys: EpochKeys,
}

/// The traffic keys of the current and the previous epoch (packets of the
/// old epoch may still be in flight when the first of the new arrives).
#[derive(Default)]
struct EpochKeys {
    cur: Option<(u64, LessSafeKey)>,
    prev: Option<(u64, LessSafeKey)>,
}

impl EpochKeys {
    /// The key of `epoch` if it is one of the two kept.
    fn cached(&self, epoch: u64) -> Option<&LessSafeKey> {
        [&self.cur, &self.prev]
            .into_iter()
            .flatten()
            .find(|(e, _)| *e == epoch)
            .map(|(_, k)| k)
    }

    /// Keeps `key` as `epoch`'s (after a tag verified under it).
    fn insert(&mut self, epoch: u64, key: LessSafeKey) {
        self.prev = self.cur.take();
        self.cur = Some((epoch, key));
    }

    /// The sealer's key of `epoch`, derived and kept when it changes.
    fn get(&mut self, prk: &hkdf::Prk, party: Option<u64>, epoch: u64) -> &LessSafeKey {
        if self.cur.as_ref().is_some_and(|(e, _)| *e == epoch) {
            return &self.cur.as_ref().expect("checked").1;
        }
        if self.prev.as_ref().is_some_and(|(e, _)| *e == epoch) {
            return &self.prev.as_ref().expect("checked").1;
        }
        let key = traffic_key(prk, party, epoch);
        self.prev = self.cur.take();
        &self.cur.insert((epoch, key)).1
    }
}

fn session_prk(group: &GroupKey, session: SessionId, nonce: &[u8; SESSION_NONCE_LEN]) -> hkdf::Prk {
    let mut salt = [0u8; 17 + 8 + SESSION_NONCE_LEN];
    salt[..17].copy_from_slice(b"rmcast v3 session");
    salt[17..25].copy_from_slice(&session.0.to_be_bytes());
    salt[25..].copy_from_slice(nonce);
    hkdf::Salt::new(hkdf::HKDF_SHA256, &salt).extract(group.secret())
}

fn traffic_key(prk: &hkdf::Prk, party: Option<u64>, epoch: u64) -> LessSafeKey {
    let (dir, id): (&[u8], u64) = match party {
        None => (b"down", 0),
        Some(id) => (b"up", id),
    };
    let (id, epoch) = (id.to_be_bytes(), epoch.to_be_bytes());
    expand_key(prk, &[dir, &id, &epoch])
}

/// An AES-256-GCM key expanded from `prk` with `info` (HKDF-SHA256).
pub(crate) fn expand_key(prk: &hkdf::Prk, info: &[&[u8]]) -> LessSafeKey {
    let okm = prk
        .expand(info, &AES_256_GCM)
        .expect("32 bytes is a valid HKDF-SHA256 output length");
    LessSafeKey::new(UnboundKey::from(okm))
}

/// The AEAD nonce of a sealer's packet or frame `counter`: 4 zero bytes ‖
/// the counter (each key has one sealer, counting up from 0).
pub(crate) fn nonce(counter: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

/// The associated data: the clear header and the trailer before the tag.
fn aad(datagram: &[u8], body_end: usize, tag_at: usize) -> ([u8; 64], usize) {
    let mut a = [0u8; 64];
    let trailer = &datagram[body_end..tag_at];
    a[..HEADER_LEN].copy_from_slice(&datagram[..HEADER_LEN]);
    a[HEADER_LEN..HEADER_LEN + trailer.len()].copy_from_slice(trailer);
    (a, HEADER_LEN + trailer.len())
}

/// One member's keys: the group key, and what it derived from it for the
/// sessions it has seen authentic packets of.
pub struct Keyring {
    group: Arc<GroupKey>,
    sessions: Vec<SessionKeys>,
    /// The session this member seals for (kept when the table is full).
    own: Option<SessionId>,
    stats: AuthStats,
}

impl core::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Keyring")
            .field("key", &self.group.id())
            .field("sessions", &self.sessions.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Keyring {
    /// A keyring that knows no session yet.
    #[must_use]
    pub fn new(group: Arc<GroupKey>) -> Self {
        Self {
            group,
            sessions: Vec::new(),
            own: None,
            stats: AuthStats::default(),
        }
    }

    /// The sender's keyring: it seals for `session` under `nonce` (fresh
    /// randomness from the driver) from the start.
    #[must_use]
    pub fn for_sender(
        group: Arc<GroupKey>,
        session: SessionId,
        nonce: [u8; SESSION_NONCE_LEN],
    ) -> Self {
        let mut k = Self::new(group);
        let prk = session_prk(&k.group, session, &nonce);
        k.sessions.push(SessionKeys {
            session,
            nonce,
            prk,
            peers: HashMap::new(),
            tx: Some(Tx {
                party: None,
                counter: 0,
                keys: EpochKeys::default(),
            }),
        });
        k.own = Some(session);
        k
    }

    /// The group key's id.
    #[must_use]
    pub fn key_id(&self) -> KeyId {
        self.group.id()
    }

    /// The refusal counters.
    #[must_use]
    pub fn stats(&self) -> &AuthStats {
        &self.stats
    }

    /// Whether the keys of `session` are known (an authentic packet of it
    /// arrived, or it is the sender's own).
    #[must_use]
    pub fn knows(&self, session: SessionId) -> bool {
        self.sessions.iter().any(|s| s.session == session)
    }

    /// The session nonce of `session`, if known.
    #[must_use]
    pub fn session_nonce(&self, session: SessionId) -> Option<[u8; SESSION_NONCE_LEN]> {
        self.sessions
            .iter()
            .find(|s| s.session == session)
            .map(|s| s.nonce)
    }

    /// A receiver took `session`: it seals its own packets as `party` (its
    /// receiver id) from now on, and the session's keys are never evicted.
    pub fn take_session(&mut self, session: SessionId, party: u64) {
        self.own = Some(session);
        if let Some(s) = self.sessions.iter_mut().find(|s| s.session == session) {
            s.tx.get_or_insert(Tx {
                party: Some(party),
                counter: 0,
                keys: EpochKeys::default(),
            });
        }
    }

    /// Opens the sealed datagram in place. On success the plain packet
    /// (header flags cleared) is `datagram[..len]`; on failure the datagram
    /// is refused, counted, and nothing else changed.
    pub fn open(&mut self, datagram: &mut [u8]) -> Result<Opened, AuthError> {
        let r = self.try_open(datagram);
        match r {
            Ok(_) => self.stats.opened += 1,
            Err(e) => self.stats.count(e),
        }
        r
    }

    fn try_open(&mut self, datagram: &mut [u8]) -> Result<Opened, AuthError> {
        let env = match Envelope::parse(datagram) {
            Ok(e) => e,
            Err(rmcast_wire::DecodeError::UnsupportedFlags(0)) => return Err(AuthError::Unsealed),
            Err(_) => return Err(AuthError::Malformed),
        };
        let ours = self.group.id().hint();
        if env.header.key_hint != ours {
            return Err(AuthError::WrongKey {
                hint: env.header.key_hint,
                ours,
            });
        }
        let epoch = env.counter / EPOCH_PACKETS;
        let (a, alen) = aad(datagram, env.body_end, env.tag_at);
        let tag = Tag::from(<[u8; TAG_LEN]>::try_from(&datagram[env.tag_at..]).expect("16 bytes"));
        let known = self
            .sessions
            .iter()
            .position(|s| s.session == env.header.session);
        match known {
            Some(i) => {
                let s = &mut self.sessions[i];
                if env.sender_nonce.is_some_and(|n| n != s.nonce) {
                    // The same session id under another nonce: not this
                    // session's sender (only a key holder could make it verify).
                    return Err(AuthError::Forged);
                }
                if let Some(peer) = s.peers.get_mut(&env.party) {
                    peer.window.check(env.counter).map_err(replay_error)?;
                    match peer.keys.cached(epoch) {
                        Some(key) => {
                            open_body(key, env.counter, &a[..alen], tag, datagram, env.body_end)?;
                        }
                        None => {
                            // Another epoch's key is kept only once a tag
                            // verified under it: a forged counter stores nothing.
                            let key = traffic_key(&s.prk, env.party, epoch);
                            open_body(&key, env.counter, &a[..alen], tag, datagram, env.body_end)?;
                            peer.keys.insert(epoch, key);
                        }
                    }
                    peer.window.mark(env.counter);
                } else {
                    let key = traffic_key(&s.prk, env.party, epoch);
                    open_body(&key, env.counter, &a[..alen], tag, datagram, env.body_end)?;
                    let peer = Peer::first(epoch, key, env.counter);
                    s.peers.insert(env.party, peer);
                }
            }
            None => {
                let n = env.sender_nonce.ok_or(AuthError::UnknownSession)?;
                let prk = session_prk(&self.group, env.header.session, &n);
                let key = traffic_key(&prk, env.party, epoch);
                open_body(&key, env.counter, &a[..alen], tag, datagram, env.body_end)?;
                let peer = Peer::first(epoch, key, env.counter);
                self.remember(SessionKeys {
                    session: env.header.session,
                    nonce: n,
                    prk,
                    peers: HashMap::from([(env.party, peer)]),
                    tx: None,
                });
            }
        }
        // The plain packet's own flag stays (authenticated as part of the
        // header); the sealing flags go with the key hint.
        datagram[4] &= rmcast_wire::FLAG_ALONE;
        datagram[5] = 0;
        Ok(Opened {
            len: env.body_end,
            party: env.party,
        })
    }

    /// Stores a newly authenticated session, forgetting the oldest other
    /// than our own when the table is full.
    fn remember(&mut self, s: SessionKeys) {
        if self.sessions.len() >= SESSIONS_MAX
            && let Some(i) = self
                .sessions
                .iter()
                .position(|s| Some(s.session) != self.own)
        {
            self.sessions.remove(i);
        }
        self.sessions.push(s);
    }

    /// Seals the plain packet `buf[..plain_len]` in place for its header's
    /// session, as that session's sealer (the sender, or the receiver that
    /// took it), carrying the session nonce when `with_nonce`. Returns the
    /// sealed length.
    pub fn seal(
        &mut self,
        buf: &mut [u8],
        plain_len: usize,
        with_nonce: bool,
    ) -> Result<usize, SealError> {
        if plain_len < HEADER_LEN || buf.len() < plain_len {
            return Err(SealError::BufferTooSmall);
        }
        let session = SessionId(u64::from_be_bytes(buf[8..16].try_into().expect("8 bytes")));
        let hint = self.group.id().hint();
        let s = self
            .sessions
            .iter_mut()
            .find(|s| s.session == session)
            .ok_or(SealError::NoKeys)?;
        let tx = s.tx.as_mut().ok_or(SealError::NoKeys)?;
        let nonce_field = with_nonce.then_some(&s.nonce);
        let tag_at = write_trailer(buf, plain_len, hint, nonce_field, tx.party, tx.counter)
            .map_err(|_| SealError::BufferTooSmall)?;
        if buf.len() < tag_at + TAG_LEN {
            return Err(SealError::BufferTooSmall);
        }
        let counter = tx.counter;
        tx.counter += 1;
        let (a, alen) = aad(buf, plain_len, tag_at);
        let key = tx.keys.get(&s.prk, tx.party, counter / EPOCH_PACKETS);
        let tag = key
            .seal_in_place_separate_tag(
                nonce(counter),
                Aad::from(&a[..alen]),
                &mut buf[HEADER_LEN..plain_len],
            )
            .expect("AES-GCM seals any length a datagram can have");
        buf[tag_at..tag_at + TAG_LEN].copy_from_slice(tag.as_ref());
        self.stats.sealed += 1;
        Ok(tag_at + TAG_LEN)
    }
}

fn replay_error(r: Replay) -> AuthError {
    match r {
        Replay::Seen => AuthError::Replayed,
        Replay::TooOld => AuthError::TooOld,
    }
}

fn open_body(
    key: &LessSafeKey,
    counter: u64,
    aad: &[u8],
    tag: Tag,
    datagram: &mut [u8],
    body_end: usize,
) -> Result<(), AuthError> {
    key.open_in_place_separate_tag(
        nonce(counter),
        Aad::from(aad),
        tag,
        &mut datagram[HEADER_LEN..body_end],
        0..,
    )
    .map(|_| ())
    .map_err(|_| AuthError::Forged)
}

/// The bytes sealing adds to a packet of `rank` (with the session nonce or
/// not): what a sender subtracts from its payload so sealed data packets
/// keep the configured packet size.
#[must_use]
pub const fn overhead(rank: u16, with_nonce: bool) -> usize {
    let nonce = if with_nonce { SENDER_NONCE_LEN } else { 0 };
    let party = if rank == rmcast_wire::RANK_SENDER {
        0
    } else {
        PARTY_LEN
    };
    nonce + party + COUNTER_LEN + TAG_LEN
}

/// The most authentication failures a member remembers by source address
/// (a hostile group cannot grow the list).
pub const FAILURE_SOURCES_MAX: usize = 8;

/// Authentication failures by source address, for the messages a user
/// reads: "packets from X were sealed under another key".
#[derive(Clone, Debug, Default)]
pub struct AuthFailures {
    entries: Vec<(SocketAddr, AuthError, u64)>,
}

impl AuthFailures {
    /// Notes a refusal of a packet from `from`.
    pub fn note(&mut self, from: SocketAddr, e: AuthError) {
        if let Some(entry) = self.entries.iter_mut().find(|(a, _, _)| *a == from) {
            entry.1 = e;
            entry.2 += 1;
        } else if self.entries.len() < FAILURE_SOURCES_MAX {
            self.entries.push((from, e, 1));
        }
    }

    /// The sources and what was last wrong with their packets.
    pub fn iter(&self) -> impl Iterator<Item = (SocketAddr, AuthError, u64)> + '_ {
        self.entries.iter().copied()
    }

    /// One line for a failure message, or `None` if nothing was refused.
    #[must_use]
    pub fn describe(&self) -> Option<String> {
        if self.entries.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .entries
            .iter()
            .map(|(a, e, n)| format!("{a}: {n} packet(s) refused, {e}{}", advice(*e)))
            .collect();
        Some(parts.join("; "))
    }
}

fn advice(e: AuthError) -> &'static str {
    match e {
        AuthError::Unsealed => " — give both sides --key, or both --insecure",
        AuthError::NoKey => " — this side runs --insecure; pass --key FILE",
        AuthError::WrongKey { .. } | AuthError::Forged => {
            " — wrong group key? every member needs the same --key file"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests;
