//! Group key files: make one, read one, and say clearly what is wrong.
//!
//! The format and the key schedule are `rmcast_proto::security`'s; this
//! module adds the file system: fresh randomness from the OS, mode 0600,
//! and errors that name the path and the fix.

use crate::Error;
use rmcast_proto::security::{GroupKey, KEY_LEN};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

/// The environment variable naming a key file when `--key` is not given.
pub const KEY_FILE_ENV: &str = "RMCAST_KEY_FILE";

/// How to make and pass a key: the text every "no key" message ends with.
pub const KEY_HOWTO: &str = "make a group key with `rmcast keygen > group.key` (mode 0600), \
copy it to every member, and pass `--key group.key` (or set RMCAST_KEY_FILE); \
`--insecure` runs without one, unauthenticated and in the clear";

/// A fresh group key from the operating system's randomness.
#[must_use]
pub fn generate_key() -> GroupKey {
    let mut secret = [0u8; KEY_LEN];
    rand::fill(&mut secret);
    GroupKey::from_secret(secret)
}

/// Reads the group key file at `path`. A file that others can read is
/// accepted with a warning (the key is then no longer only the group's).
pub fn load_key(path: &Path) -> Result<Arc<GroupKey>, Error> {
    let text = std::fs::read(path).map_err(|e| {
        Error::Invalid(format!(
            "cannot read the group key file {}: {e} ({KEY_HOWTO})",
            path.display()
        ))
    })?;
    let text = String::from_utf8(text).map_err(|_| {
        Error::Invalid(format!(
            "{} is not a group key file (not text; {KEY_HOWTO})",
            path.display()
        ))
    })?;
    let key = GroupKey::parse_file(&text)
        .map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))?;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            "group key file {} can be read by other users (mode {:o}); `chmod 600` it",
            path.display(),
            meta.permissions().mode() & 0o777
        );
    }
    Ok(Arc::new(key))
}

/// Writes `key` to a new file at `path` with mode 0600; refuses to
/// overwrite an existing file (a lost key cannot be recovered).
pub fn write_key(path: &Path, key: &GroupKey) -> Result<(), Error> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::Io {
            context: format!("cannot create the key file {}", path.display()),
            source: e,
        })?;
    f.write_all(key.to_file().as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| Error::Io {
            context: format!("cannot write the key file {}", path.display()),
            source: e,
        })?;
    // create_new with a umask may have dropped bits; never added any.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|e| Error::Io {
        context: format!("cannot chmod the key file {}", path.display()),
        source: e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_key_reads_back_with_mode_0600_and_is_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("group.key");
        let key = generate_key();
        write_key(&path, &key).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load_key(&path).unwrap().id(), key.id());
        assert!(write_key(&path, &generate_key()).is_err());
        assert_ne!(generate_key().id(), key.id());
    }

    #[test]
    fn missing_and_foreign_files_say_how_to_make_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let e = load_key(&dir.path().join("nope")).unwrap_err().to_string();
        assert!(
            e.contains("cannot read") && e.contains("rmcast keygen"),
            "{e}"
        );
        let other = dir.path().join("other");
        std::fs::write(&other, "hello\n").unwrap();
        let e = load_key(&other).unwrap_err().to_string();
        assert!(e.contains("not an rmcast group key file"), "{e}");
    }
}

/// The signing key file's first line.
const SIGNING_TAG: &str = "rmcast-signing-key 1";
/// The public key file's first line.
const PUBLIC_TAG: &str = "rmcast-public-key 1";

/// A sender's Ed25519 signing key (`rmcast keygen --signing`).
pub type SigningKey = ed25519_dalek::SigningKey;
/// A receiver's trusted Ed25519 public key (`rmcast recv --trust`).
pub type PublicKey = ed25519_dalek::VerifyingKey;

/// A fresh Ed25519 signing key from the operating system's randomness.
#[must_use]
pub fn generate_signing_key() -> SigningKey {
    let mut secret = [0u8; 32];
    rand::fill(&mut secret);
    SigningKey::from_bytes(&secret)
}

/// The public key file's text for `key`.
#[must_use]
pub fn public_key_file(key: &PublicKey) -> String {
    format!(
        "# rmcast public key (Ed25519): receivers trust content signed by its owner\n\
         # with `rmcast recv --trust FILE`.\n{PUBLIC_TAG}\npublic {}\n",
        hex(key.as_bytes())
    )
}

/// Writes `key` to `path` (mode 0600, never overwritten) and its public
/// half to `path.pub`; returns the public file's path.
pub fn write_signing_key(path: &Path, key: &SigningKey) -> Result<std::path::PathBuf, Error> {
    let text = format!(
        "# rmcast signing key (Ed25519): keep it secret; give the .pub file to receivers.\n\
         {SIGNING_TAG}\npublic {}\nsecret {}\n",
        hex(key.verifying_key().as_bytes()),
        hex(&key.to_bytes())
    );
    write_new(path, &text, 0o600)?;
    let mut public = path.as_os_str().to_owned();
    public.push(".pub");
    let public = std::path::PathBuf::from(public);
    write_new(&public, &public_key_file(&key.verifying_key()), 0o644)?;
    Ok(public)
}

/// Reads a signing key file (`rmcast send --sign`).
pub fn load_signing_key(path: &Path) -> Result<Arc<SigningKey>, Error> {
    let fields = read_fields(path, SIGNING_TAG, &["public", "secret"], "a signing key")?;
    let secret: [u8; 32] =
        unhex32(&fields[1]).ok_or_else(|| bad(path, "the secret must be 64 hex digits"))?;
    let key = SigningKey::from_bytes(&secret);
    if unhex32(&fields[0]) != Some(key.verifying_key().to_bytes()) {
        return Err(bad(
            path,
            "its public key does not match its secret (damaged or edited)",
        ));
    }
    Ok(Arc::new(key))
}

/// Reads a public key file (`rmcast recv --trust`); a signing key file is
/// accepted too (its public half is used).
pub fn load_public_key(path: &Path) -> Result<PublicKey, Error> {
    if let Ok(k) = load_signing_key(path) {
        return Ok(k.verifying_key());
    }
    let fields = read_fields(path, PUBLIC_TAG, &["public"], "a public key")?;
    let bytes = unhex32(&fields[0]).ok_or_else(|| bad(path, "the key must be 64 hex digits"))?;
    PublicKey::from_bytes(&bytes).map_err(|_| bad(path, "not a valid Ed25519 public key"))
}

/// Whether `signature` is the signing of the object (`hash`, `size`,
/// `name`) by one of `trusted`.
#[must_use]
pub fn signature_trusted(
    trusted: &[PublicKey],
    signature: Option<&[u8; 64]>,
    hash: &[u8; 32],
    size: u64,
    name: &str,
) -> bool {
    let Some(sig) = signature else {
        return false;
    };
    let sig = ed25519_dalek::Signature::from_bytes(sig);
    let message = rmcast_wire::signed_object_message(hash, size, name);
    trusted
        .iter()
        .any(|k| k.verify_strict(&message, &sig).is_ok())
}

/// The object's signature under `key`.
#[must_use]
pub fn sign_object(key: &SigningKey, hash: &[u8; 32], size: u64, name: &str) -> [u8; 64] {
    use ed25519_dalek::Signer;
    key.sign(&rmcast_wire::signed_object_message(hash, size, name))
        .to_bytes()
}

fn bad(path: &Path, what: &str) -> Error {
    Error::Invalid(format!("{}: {what}", path.display()))
}

fn read_fields(path: &Path, tag: &str, names: &[&str], what: &str) -> Result<Vec<String>, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Invalid(format!("cannot read {what} file {}: {e}", path.display())))?;
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'));
    if lines.next() != Some(tag) {
        return Err(bad(
            path,
            &format!(
                "not {what} file (it must start with `{tag}`; make one with `rmcast keygen --signing -o FILE`)"
            ),
        ));
    }
    let mut out = vec![None; names.len()];
    for line in lines {
        let (field, value) = line.split_once(' ').unwrap_or((line, ""));
        match names.iter().position(|n| *n == field) {
            Some(i) if out[i].is_none() => out[i] = Some(value.trim().to_owned()),
            _ => {
                return Err(bad(
                    path,
                    &format!(
                        "unexpected line `{}`",
                        line.chars().take(40).collect::<String>()
                    ),
                ));
            }
        }
    }
    names
        .iter()
        .zip(out)
        .map(|(n, v)| v.ok_or_else(|| bad(path, &format!("no `{n}` line"))))
        .collect()
}

fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), Error> {
    let io = |e| Error::Io {
        context: format!("cannot write {}", path.display()),
        source: e,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io)?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod signing_tests {
    use super::*;

    #[test]
    fn a_signing_key_and_its_public_half_round_trip_and_verify() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.key");
        let key = generate_signing_key();
        let public = write_signing_key(&path, &key).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let back = load_signing_key(&path).unwrap();
        let trusted = [load_public_key(&public).unwrap()];
        let sig = sign_object(&back, &[1; 32], 10, "a.bin");
        assert!(signature_trusted(
            &trusted,
            Some(&sig),
            &[1; 32],
            10,
            "a.bin"
        ));
        // Another name, size or hash, no signature, or another key: refused.
        assert!(!signature_trusted(
            &trusted,
            Some(&sig),
            &[1; 32],
            10,
            "b.bin"
        ));
        assert!(!signature_trusted(
            &trusted,
            Some(&sig),
            &[1; 32],
            11,
            "a.bin"
        ));
        assert!(!signature_trusted(
            &trusted,
            Some(&sig),
            &[2; 32],
            10,
            "a.bin"
        ));
        assert!(!signature_trusted(&trusted, None, &[1; 32], 10, "a.bin"));
        let other = [generate_signing_key().verifying_key()];
        assert!(!signature_trusted(
            &other,
            Some(&sig),
            &[1; 32],
            10,
            "a.bin"
        ));
        // A group key file is not a public key file.
        let g = dir.path().join("g.key");
        write_key(&g, &generate_key()).unwrap();
        assert!(
            load_public_key(&g)
                .unwrap_err()
                .to_string()
                .contains("not a public key file")
        );
    }
}
