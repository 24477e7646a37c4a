//! Sealing for the stream machines: the one gate every PRMP datagram
//! passes, in and out (issue 16, [`crate::security`]).
//!
//! A machine with a group key opens every datagram in place before anything
//! else reads it, and seals every datagram it wrote in the caller's buffer
//! before handing it out; a machine without one passes plain packets and
//! refuses sealed ones (it cannot read them). Either way a refused datagram
//! is counted in [`AuthStats`], noted by source in [`AuthFailures`] (the
//! text of the machine's failure messages) and dropped: it changes no other
//! state and causes no reply.

use crate::security::{
    AuthError, AuthFailures, AuthStats, GroupKey, Keyring, SESSION_NONCE_LEN, overhead,
};
use rmcast_wire::seal::{SEAL_OVERHEAD_DATA, is_sealed};
use rmcast_wire::{RANK_SENDER, SessionId};
use std::net::SocketAddr;
use std::sync::Arc;

/// The bytes sealing adds to a sender's data packet: what a keyed sender
/// takes off each packet's payload, so sealed data datagrams keep the size
/// the configured payload gives unsealed ones.
pub const SEAL_DATA_OVERHEAD: usize = SEAL_OVERHEAD_DATA;

/// The bytes sealing adds to a receiver's packet (party, counter, tag).
pub const SEAL_RECEIVER_OVERHEAD: usize = overhead(0, false);

/// A machine's keys (or their absence) and its refusal counters.
pub(crate) struct Seal {
    keyring: Option<Keyring>,
    /// Refusals of a keyless machine (sealed packets it cannot read).
    keyless: AuthStats,
    failures: AuthFailures,
}

impl Seal {
    /// The sender's: it seals for `session` under `nonce` from the start.
    pub(crate) fn sender(
        key: Option<&Arc<GroupKey>>,
        session: SessionId,
        nonce: [u8; SESSION_NONCE_LEN],
    ) -> Self {
        Self {
            keyring: key.map(|k| Keyring::for_sender(k.clone(), session, nonce)),
            keyless: AuthStats::default(),
            failures: AuthFailures::default(),
        }
    }

    /// A receiver's: it learns a session's keys from the sender's first
    /// authentic packet carrying the session nonce.
    pub(crate) fn receiver(key: Option<&Arc<GroupKey>>) -> Self {
        Self {
            keyring: key.map(|k| Keyring::new(k.clone())),
            keyless: AuthStats::default(),
            failures: AuthFailures::default(),
        }
    }

    /// The refusal (and, keyed, opening and sealing) counters.
    pub(crate) fn stats(&self) -> AuthStats {
        self.keyring.as_ref().map_or(self.keyless, |k| *k.stats())
    }

    /// Refusals by source, for failure messages.
    pub(crate) fn failures(&self) -> &AuthFailures {
        &self.failures
    }

    /// `what`, followed by what was refused, if anything was.
    pub(crate) fn explain(&self, what: String) -> String {
        match self.failures.describe() {
            Some(d) => format!("{what}; {d}"),
            None => what,
        }
    }

    /// Opens `datagram` in place and returns the plain packet, or refuses
    /// it (counted and noted; nothing else changed).
    pub(crate) fn open<'a>(
        &mut self,
        from: SocketAddr,
        datagram: &'a mut [u8],
    ) -> Result<&'a [u8], AuthError> {
        let r = match &mut self.keyring {
            Some(k) => k.open(datagram).map(|o| o.len),
            None if is_sealed(datagram) => {
                self.keyless.count(AuthError::NoKey);
                Err(AuthError::NoKey)
            }
            None => Ok(datagram.len()),
        };
        match r {
            Ok(len) => Ok(&datagram[..len]),
            Err(e) => {
                self.failures.note(from, e);
                Err(e)
            }
        }
    }

    /// Seals the plain packet `buf[..plain_len]` in place (with the session
    /// nonce when `with_nonce`) and returns the datagram's length; a
    /// keyless machine's packet stays plain. `None` when it cannot be
    /// sealed (no keys for its session, or `buf` too short): not sent.
    pub(crate) fn seal(
        &mut self,
        buf: &mut [u8],
        plain_len: usize,
        with_nonce: bool,
    ) -> Option<usize> {
        match &mut self.keyring {
            Some(k) => k.seal(buf, plain_len, with_nonce).ok(),
            None => Some(plain_len),
        }
    }

    /// A receiver bound to `session`: it seals its packets as `party`.
    pub(crate) fn take_session(&mut self, session: SessionId, party: u64) {
        if let Some(k) = &mut self.keyring {
            k.take_session(session, party);
        }
    }
}

/// The payload of a sender's data packet: `payload_size`, less the seal's
/// overhead when keyed (`None` when nothing is left).
#[must_use]
pub(crate) fn packet_payload(payload_size: u16, keyed: bool) -> Option<u16> {
    if keyed {
        payload_size
            .checked_sub(SEAL_DATA_OVERHEAD as u16)
            .filter(|&p| p > 0)
    } else {
        Some(payload_size).filter(|&p| p > 0)
    }
}

const _: () = assert!(overhead(RANK_SENDER, false) == SEAL_DATA_OVERHEAD);
