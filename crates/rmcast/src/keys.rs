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
