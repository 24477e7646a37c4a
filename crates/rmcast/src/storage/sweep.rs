//! The sweep of part files and staging directories left by receivers
//! that died mid-transfer.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A part file or staging directory unlocked and unchanged this long was
/// left by a receiver that died ([`remove_stale_parts`]).
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Removes the part files of `rel` (`.NAME.rmcast-part-SESSION-ID`, any
/// session) that no live receiver holds locked: a receiver killed mid-
/// transfer cannot remove its own, and each is as large as the object.
/// Only `rel`'s own directory is looked at, only if it is a real directory
/// (not a symlink), and a file some receiver still writes (locked, or
/// changed within [`STALE_AFTER`]) is left alone.
///
/// The staging directories of trees are kept and returned instead (for a
/// tree's offer: `keep_staging`): the new session resumes from the chunks
/// they hold, and removes them once its tree is in place.
pub(super) fn remove_stale_parts(root: &Path, rel: &Path, keep_staging: bool) -> Vec<PathBuf> {
    let mut kept = Vec::new();
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return kept;
    };
    let dir = root.join(parent);
    if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
        return kept;
    }
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(name);
    prefix.push(".rmcast-");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return kept;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(rest) = file_name.as_bytes().strip_prefix(prefix.as_bytes()) else {
            continue;
        };
        // Part files, and the staging directories of trees being extracted.
        let staging = rest.starts_with(b"tree-");
        if !staging && !rest.starts_with(b"part-") {
            continue;
        }
        let path = entry.path();
        if staging && !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        // A receiver that has just created its part file has not locked it
        // yet (create, then lock): one changed within STALE_AFTER is left
        // alone, and before any lock is tried, so a receiver of the same
        // name starting beside it neither takes it for a dead one's nor
        // holds its lock for the instant in which its owner takes it (the
        // owner's lock then failed with EWOULDBLOCK and it refused the
        // offer: nine mpirun ranks on one host, seen once in CI).
        let fresh = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().map_or(true, |age| age < STALE_AFTER));
        if fresh {
            continue;
        }
        let Ok(file) = OpenOptions::new().read(true).open(&path) else {
            continue;
        };
        // SAFETY: flock on a file descriptor we own; no memory involved.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            continue; // a live receiver writes it
        }
        if staging && keep_staging {
            tracing::info!(
                "{} was left by an interrupted session: resuming from it",
                path.display()
            );
            kept.push(path);
            continue;
        }
        let removed = if staging {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        if removed.is_ok() {
            tracing::info!(
                "removed {}, left by a receiver that died mid-transfer",
                path.display()
            );
        }
    }
    kept
}

/// Bytes of the regular files under `dir` (not following links; 0 when it
/// is not a directory).
pub(super) fn tree_bytes(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => total += e.metadata().map_or(0, |m| m.len()),
                _ => {}
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use crate::storage::test_support::offer;
    use crate::storage::{Placement, Target, prepare};
    use rmcast_proto::SessionId;

    #[test]
    fn a_dead_receivers_part_file_is_removed_and_a_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let target = Target::Dir(dir.path().into());
        // Left by a receiver killed mid-transfer: nobody holds it locked.
        let stale = dir.path().join(".w.bin.rmcast-part-00000000000000aa-1.0");
        std::fs::write(&stale, vec![0u8; 4096]).unwrap();
        let minute_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        (std::fs::File::options().write(true).open(&stale))
            .and_then(|f| f.set_modified(minute_ago))
            .unwrap();
        // One a receiver starting beside us has just created and not yet
        // locked: too fresh to be a dead one's.
        let starting = dir.path().join(".w.bin.rmcast-part-00000000000000ab-2.0");
        std::fs::write(&starting, b"").unwrap();
        // Another file of the same directory is not ours to touch.
        let other = dir.path().join(".v.bin.rmcast-part-00000000000000aa");
        std::fs::write(&other, b"x").unwrap();
        // A live receiver of another session writing the same name.
        let live = prepare(
            &target,
            &offer("w.bin", b"abc"),
            SessionId(5),
            None,
            Placement::default(),
        )
        .unwrap();
        assert!(!stale.exists(), "the dead receiver's part file is gone");
        assert!(starting.exists(), "the starting receiver's part file stays");
        std::fs::remove_file(&starting).unwrap();
        assert!(other.exists());
        let mine = prepare(
            &target,
            &offer("w.bin", b"abc"),
            SessionId(6),
            None,
            Placement::default(),
        )
        .unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            names.len(),
            3,
            "{names:?}: the live receiver's part file stays"
        );
        drop((live, mine));
    }
}
