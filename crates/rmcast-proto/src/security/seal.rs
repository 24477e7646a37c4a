//! A machine's sealing, whichever family it speaks: the keyring when it has
//! a group key, the refusal of sealed packets when it has none, and the
//! failures by source for its messages. The transfer and stream machines
//! both hold one.

use super::{AuthError, AuthFailures, AuthStats, GroupKey, Keyring, SESSION_NONCE_LEN};
use rmcast_wire::SessionId;
use rmcast_wire::seal::is_sealed;
use std::net::SocketAddr;
use std::sync::Arc;

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
        self.open_party(from, datagram).map(|(plain, _)| plain)
    }

    /// [`Seal::open`], also saying which receiver sealed it (`None`: the
    /// sender, or a plain packet).
    pub(crate) fn open_party<'a>(
        &mut self,
        from: SocketAddr,
        datagram: &'a mut [u8],
    ) -> Result<(&'a [u8], Option<u64>), AuthError> {
        let r = match &mut self.keyring {
            Some(k) => k.open(datagram).map(|o| (o.len, o.party)),
            None if is_sealed(datagram) => {
                self.keyless.count(AuthError::NoKey);
                Err(AuthError::NoKey)
            }
            None => Ok((datagram.len(), None)),
        };
        match r {
            Ok((len, party)) => Ok((&datagram[..len], party)),
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
