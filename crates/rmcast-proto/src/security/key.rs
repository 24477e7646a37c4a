//! The group key and its file.
//!
//! A group key is a 256-bit secret every member of a group holds. Its id
//! (8 bytes, derived from the secret with HKDF, so it reveals nothing of
//! it) names the key in files, logs and error messages, and its low byte
//! travels in every sealed header (`key_hint`), so a peer holding another
//! key is told "another key" instead of a stream of bad tags.
//!
//! The file (`rmcast keygen > group.key`) is text, so an operator can see
//! what it is and which key it holds:
//!
//! ```text
//! # rmcast group key: every member of the group needs this file; keep it secret.
//! rmcast-group-key 1
//! id 3f9a12c4d5e6f708
//! secret 4b1d…(64 hex digits)
//! ```
//!
//! The version line comes first; `#` lines and blank lines are ignored;
//! the id is checked against the secret, so a damaged or hand-edited file
//! is refused instead of silently failing every packet.

use ring::hkdf;

/// Length of a group key's secret.
pub const KEY_LEN: usize = 32;
/// The key file's format version.
pub const KEY_FILE_VERSION: u32 = 1;
const FILE_TAG: &str = "rmcast-group-key";

/// A group key's public name: 8 bytes derived from its secret.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId(pub [u8; 8]);

impl KeyId {
    /// The byte every sealed header carries (`key_hint`): the id's last.
    #[must_use]
    pub const fn hint(self) -> u8 {
        self.0[7]
    }
}

impl core::fmt::Display for KeyId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl core::fmt::Debug for KeyId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "KeyId({self})")
    }
}

/// The secret every member of a group holds.
#[derive(Clone, PartialEq, Eq)]
pub struct GroupKey {
    secret: [u8; KEY_LEN],
    id: KeyId,
}

impl core::fmt::Debug for GroupKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never the secret: keys end up in logs through `{:?}`.
        write!(f, "GroupKey {{ id: {} }}", self.id)
    }
}

/// Why a key file was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyFileError {
    /// The first line is not `rmcast-group-key VERSION`.
    #[error(
        "not an rmcast group key file (it must start with `{FILE_TAG} {KEY_FILE_VERSION}`; make one with `rmcast keygen > group.key`)"
    )]
    NotAKeyFile,
    /// A version this build does not read.
    #[error(
        "group key file version {0} is not supported (this build reads version {KEY_FILE_VERSION})"
    )]
    Version(String),
    /// A field is missing.
    #[error("group key file has no `{0}` line")]
    Missing(&'static str),
    /// A line this format does not have, or a field given twice.
    #[error("group key file line {0}: {1}")]
    BadLine(usize, String),
    /// The id does not belong to the secret.
    #[error(
        "group key file's id {stated} does not match its secret (id {actual}): the file was damaged or edited"
    )]
    IdMismatch {
        /// The id the file states.
        stated: String,
        /// The id of the secret it holds.
        actual: KeyId,
    },
}

impl GroupKey {
    /// The key with this secret (from a key file or fresh randomness).
    #[must_use]
    pub fn from_secret(secret: [u8; KEY_LEN]) -> Self {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"rmcast key id").extract(&secret);
        let mut id = [0u8; 8];
        prk.expand(&[b"id"], Len(8))
            .and_then(|okm| okm.fill(&mut id))
            .expect("8 bytes is a valid HKDF-SHA256 output length");
        Self {
            secret,
            id: KeyId(id),
        }
    }

    /// The key's public id.
    #[must_use]
    pub fn id(&self) -> KeyId {
        self.id
    }

    pub(crate) fn secret(&self) -> &[u8; KEY_LEN] {
        &self.secret
    }

    /// The key file's text for this key.
    #[must_use]
    pub fn to_file(&self) -> String {
        format!(
            "# rmcast group key: every member of the group needs this file; keep it secret.\n\
             {FILE_TAG} {KEY_FILE_VERSION}\nid {}\nsecret {}\n",
            self.id,
            hex(&self.secret)
        )
    }

    /// Reads a key file's text. Any input is a key or an error.
    pub fn parse_file(text: &str) -> Result<Self, KeyFileError> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
        let (_, first) = lines.next().ok_or(KeyFileError::NotAKeyFile)?;
        match first.split_once(' ') {
            Some((FILE_TAG, v)) if v.trim() == KEY_FILE_VERSION.to_string() => {}
            Some((FILE_TAG, v)) => {
                return Err(KeyFileError::Version(v.trim().chars().take(32).collect()));
            }
            _ => return Err(KeyFileError::NotAKeyFile),
        }
        let (mut id, mut secret) = (None, None);
        for (n, line) in lines {
            let (field, value) = line.split_once(' ').unwrap_or((line, ""));
            let value = value.trim();
            let slot = match field {
                "id" => &mut id,
                "secret" => &mut secret,
                other => {
                    return Err(KeyFileError::BadLine(
                        n,
                        format!(
                            "unknown field `{}`",
                            other.chars().take(32).collect::<String>()
                        ),
                    ));
                }
            };
            if slot.is_some() {
                return Err(KeyFileError::BadLine(n, format!("`{field}` given twice")));
            }
            *slot = Some((n, value));
        }
        let (_, id) = id.ok_or(KeyFileError::Missing("id"))?;
        let (n, secret) = secret.ok_or(KeyFileError::Missing("secret"))?;
        let secret: [u8; KEY_LEN] =
            unhex(secret)
                .and_then(|v| v.try_into().ok())
                .ok_or_else(|| {
                    KeyFileError::BadLine(
                        n,
                        format!("the secret must be {} hex digits", 2 * KEY_LEN),
                    )
                })?;
        let key = Self::from_secret(secret);
        if !id.eq_ignore_ascii_case(&key.id.to_string()) {
            return Err(KeyFileError::IdMismatch {
                stated: id.chars().take(32).collect(),
                actual: key.id,
            });
        }
        Ok(key)
    }
}

/// An HKDF output length (ring's `KeyType` for raw bytes).
pub(crate) struct Len(pub usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_key_file_round_trips_and_states_its_id() {
        let key = GroupKey::from_secret([7; KEY_LEN]);
        let text = key.to_file();
        assert!(text.contains(&format!("id {}", key.id())));
        let back = GroupKey::parse_file(&text).unwrap();
        assert_eq!(back.id(), key.id());
        assert_eq!(back.secret(), key.secret());
        assert!(
            !format!("{key:?}").contains("0707"),
            "Debug must not show the secret"
        );
    }

    #[test]
    fn distinct_secrets_have_distinct_ids() {
        let a = GroupKey::from_secret([1; KEY_LEN]).id();
        let b = GroupKey::from_secret([2; KEY_LEN]).id();
        assert_ne!(a, b);
    }

    #[test]
    fn damaged_files_are_refused_with_the_reason() {
        let key = GroupKey::from_secret([9; KEY_LEN]);
        let good = key.to_file();
        assert_eq!(GroupKey::parse_file(""), Err(KeyFileError::NotAKeyFile));
        assert_eq!(
            GroupKey::parse_file("hello world\n"),
            Err(KeyFileError::NotAKeyFile)
        );
        assert!(matches!(
            GroupKey::parse_file(&good.replace("rmcast-group-key 1", "rmcast-group-key 2")),
            Err(KeyFileError::Version(v)) if v == "2"
        ));
        let no_id: String = good
            .lines()
            .filter(|l| !l.starts_with("id"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            GroupKey::parse_file(&no_id),
            Err(KeyFileError::Missing("id"))
        );
        // One secret digit changed: the id no longer matches.
        let pos = good.find("secret ").unwrap() + 7;
        let mut edited = good.clone().into_bytes();
        edited[pos] = if edited[pos] == b'0' { b'1' } else { b'0' };
        assert!(matches!(
            GroupKey::parse_file(core::str::from_utf8(&edited).unwrap()),
            Err(KeyFileError::IdMismatch { .. })
        ));
        let short = good.replace(&hex(&[9; KEY_LEN]), "abcd");
        assert!(matches!(
            GroupKey::parse_file(&short),
            Err(KeyFileError::BadLine(_, _))
        ));
        let twice = format!("{good}id {}\n", key.id());
        assert!(
            matches!(GroupKey::parse_file(&twice), Err(KeyFileError::BadLine(_, m)) if m.contains("twice"))
        );
    }

    proptest! {
        #[test]
        fn any_text_is_a_key_or_an_error(text in ".{0,300}") {
            let _ = GroupKey::parse_file(&text);
        }

        #[test]
        fn any_secret_round_trips(secret in any::<[u8; KEY_LEN]>()) {
            let k = GroupKey::from_secret(secret);
            let back = GroupKey::parse_file(&k.to_file()).unwrap();
            prop_assert_eq!(back.secret(), &secret);
        }
    }
}
