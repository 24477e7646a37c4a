//! Where a receiver puts the object: a temporary file renamed into place
//! once verified, or a vector in memory.

mod mem;
mod part;
mod sink;
mod sweep;
#[cfg(test)]
mod test_support;

pub(crate) use mem::Mem;
use mem::zeroed_vec;
pub(crate) use part::{HeldReport, Part};
use sweep::{remove_stale_parts, tree_bytes};

use crate::name::safe_relative_path;
use rmcast_proto::{OfferInfo, SessionId, Status};
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where received objects go.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    /// Into this (existing) directory.
    Dir(PathBuf),
    /// Into memory.
    Memory,
    /// Into an anonymous in-memory file (`memfd_create`), written as a
    /// part file is (`pwrite`, so fresh pages are filled, not zeroed and
    /// then faulted in), and handed over whole to be mapped.
    Memfd,
}

/// Contiguous received bytes are gathered up to this much per `pwrite`.
pub(super) const STAGE_BYTES: usize = 256 << 10;

/// Storage for one object.
pub(crate) enum Sink {
    /// Nothing accepted yet.
    None,
    /// A partial file in the output directory.
    File(Part),
    /// A buffer of the object's size.
    Memory(Mem),
}

/// A refusal: the status for the sender and a text for humans.
pub(crate) type Refusal = (Status, String);

/// Free bytes for unprivileged users on the file system holding `dir`.
fn available_bytes(dir: &Path) -> io::Result<u64> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a valid C string and `st` points to writable storage
    // for one statvfs, which the call fills on success.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so it initialised the struct.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Creates `rel`'s parent directories under `root`, refusing to pass
/// through symbolic links (which could point outside `root`).
fn make_parents(root: &Path, rel: &Path) -> Result<PathBuf, Refusal> {
    let mut dir = root.to_path_buf();
    let parents: Vec<_> = rel
        .parent()
        .map(|p| p.components().collect())
        .unwrap_or_default();
    for part in parents {
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err((
                    Status::UnsafeName,
                    format!(
                        "{} is a symbolic link; refusing to follow it",
                        dir.display()
                    ),
                ));
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err((
                    Status::Io,
                    format!("{} exists and is not a directory", dir.display()),
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir(&dir).map_err(|e| {
                    (
                        Status::Io,
                        format!("cannot create directory {}: {e}", dir.display()),
                    )
                })?;
            }
            Err(e) => return Err((Status::Io, format!("cannot inspect {}: {e}", dir.display()))),
        }
    }
    Ok(dir)
}

/// How a verified object takes its place under the output directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Placement {
    /// Refuse an object whose name is already taken instead of replacing
    /// what is there once verified.
    pub(crate) no_clobber: bool,
    /// A tree is merged into the directory already there, file by file
    /// (files it does not name are kept), instead of replacing it whole.
    pub(crate) merge_tree: bool,
}

/// A suffix no other receiver on this host uses now: the process id and a
/// count within the process (several receivers may share one).
fn unique_suffix() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{:x}.{n}", std::process::id())
}

/// Prepares storage for `offer`, or says why the receiver must refuse it.
pub(crate) fn prepare(
    target: &Target,
    offer: &OfferInfo,
    session: SessionId,
    max_bytes: Option<u64>,
    placement: Placement,
) -> Result<Sink, Refusal> {
    let no_clobber = placement.no_clobber;
    if let Some(max) = max_bytes
        && offer.size > max
    {
        return Err((
            Status::TooLarge,
            format!(
                "object of {} bytes exceeds this receiver's limit of {max} bytes",
                offer.size
            ),
        ));
    }
    let (name, tree) = match offer.name.strip_suffix(crate::tree::TREE_SUFFIX) {
        Some(dir) => (dir, true),
        None => (offer.name.as_str(), false),
    };
    match target {
        Target::Memory | Target::Memfd if tree => Err((
            Status::Other,
            format!(
                "{:?} is a directory tree, which cannot be received into memory; \
                 receive it into a directory",
                offer.name
            ),
        )),
        Target::Memory => {
            let size = usize::try_from(offer.size).map_err(|_| {
                (
                    Status::NoSpace,
                    format!("object of {} bytes does not fit in memory", offer.size),
                )
            })?;
            let data = zeroed_vec(size).ok_or_else(|| {
                (
                    Status::NoSpace,
                    format!("cannot allocate {size} bytes of memory"),
                )
            })?;
            Ok(Sink::Memory(Mem {
                data,
                hasher: Box::new(blake3::Hasher::new()),
                hashed: 0,
            }))
        }
        Target::Dir(root) => {
            let rel = safe_relative_path(name).map_err(|e| (Status::UnsafeName, e))?;
            let leftovers = remove_stale_parts(root, &rel, tree);
            let free = available_bytes(root).map_err(|e| {
                (
                    Status::Io,
                    format!("cannot check free space in {}: {e}", root.display()),
                )
            })?;
            // A tree's next version links or copies what it holds of the
            // version in place (resume, delta) and needs room for the rest:
            // at most the object less what is in place already.
            let in_place = if tree {
                tree_bytes(&root.join(&rel))
            } else {
                0
            };
            let need = offer.size.saturating_sub(in_place);
            if need > free {
                let beyond = if in_place > 0 {
                    format!(" beyond the {in_place} bytes of the version in place")
                } else {
                    String::new()
                };
                return Err((
                    Status::NoSpace,
                    format!(
                        "object of {} bytes does not fit: it needs {need} bytes{beyond}, \
                         {free} bytes free in {}",
                        offer.size,
                        root.display()
                    ),
                ));
            }
            let dir = make_parents(root, &rel)?;
            let file_name = rel
                .file_name()
                .expect("a safe relative path ends in a name")
                .to_string_lossy();
            let final_path = dir.join(&*file_name);
            // Named apart per receiver: several may take one session into
            // one directory (the ranks of a job on one host).
            let unique = unique_suffix();
            let temp = dir.join(format!(".{file_name}.rmcast-part-{session}-{unique}"));
            if final_path.is_dir() && !tree {
                return Err((
                    Status::Io,
                    format!("{} exists and is a directory", final_path.display()),
                ));
            }
            if tree && std::fs::symlink_metadata(&final_path).is_ok_and(|m| !m.is_dir()) {
                return Err((
                    Status::Io,
                    format!(
                        "{} exists and is not a directory; the tree cannot replace it",
                        final_path.display()
                    ),
                ));
            }
            let replaces = std::fs::symlink_metadata(&final_path).is_ok();
            if replaces && no_clobber {
                return Err((
                    Status::Other,
                    format!("{} exists and --no-clobber keeps it", final_path.display()),
                ));
            }
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&temp)
                .map_err(|e| (Status::Io, format!("cannot create {}: {e}", temp.display())))?;
            // Held until the file is closed: a part file nobody holds
            // locked belongs to a receiver that died (remove_stale_parts).
            // SAFETY: flock on a file descriptor we own; no memory involved.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                let e = io::Error::last_os_error();
                let _ = std::fs::remove_file(&temp);
                return Err((Status::Io, format!("cannot lock {}: {e}", temp.display())));
            }
            let extractor = tree.then(|| {
                let mut x = crate::tree::Extractor::new(
                    dir.join(format!(".{file_name}.rmcast-tree-{session}-{unique}")),
                    final_path.clone(),
                    placement.merge_tree,
                );
                x.set_leftovers(leftovers);
                Box::new(x)
            });
            let part = Part::new(
                file,
                Some(temp.clone()),
                final_path,
                offer.size,
                replaces,
                extractor,
            );
            part.file.set_len(offer.size).map_err(|e| {
                let status = if e.raw_os_error() == Some(libc::ENOSPC) {
                    Status::NoSpace
                } else {
                    Status::Io
                };
                (status, format!("cannot size {}: {e}", temp.display()))
            })?;
            Ok(Sink::File(part))
        }
        Target::Memfd => {
            let file = memfd().map_err(|e| {
                (
                    Status::NoSpace,
                    format!("cannot create an in-memory file: {e}"),
                )
            })?;
            file.set_len(offer.size).map_err(|e| {
                (
                    Status::NoSpace,
                    format!("cannot hold {} bytes in memory: {e}", offer.size),
                )
            })?;
            Ok(Sink::File(Part::new(
                file,
                None,
                PathBuf::new(),
                offer.size,
                false,
                None,
            )))
        }
    }
}

/// An anonymous in-memory file, closed on exec.
fn memfd() -> io::Result<File> {
    // SAFETY: a NUL-terminated name and valid flags; on success the
    // returned descriptor is ours alone.
    let fd = unsafe { libc::memfd_create(c"rmcast-recv".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    Ok(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::test_support::offer;
    use super::*;

    #[test]
    fn unsafe_and_oversized_offers_are_refused_without_touching_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let target = Target::Dir(dir.path().into());
        let refused = |o: &OfferInfo, max| {
            prepare(&target, o, SessionId(3), max, Placement::default())
                .err()
                .unwrap()
                .0
        };
        assert_eq!(refused(&offer("../evil", b"x"), None), Status::UnsafeName);
        assert_eq!(refused(&offer("/abs", b"x"), None), Status::UnsafeName);
        assert_eq!(refused(&offer("big", b"xyz"), Some(2)), Status::TooLarge);
        let mut huge = offer("huge", b"");
        huge.size = u64::MAX / 2;
        assert_eq!(refused(&huge, None), Status::NoSpace);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn symlinked_parent_directories_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("link")).unwrap();
        let o = offer("link/z.bin", b"z");
        let e = prepare(
            &Target::Dir(dir.path().into()),
            &o,
            SessionId(4),
            None,
            Placement::default(),
        )
        .err();
        assert_eq!(e.unwrap().0, Status::UnsafeName);
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    }

    #[test]
    fn an_existing_file_is_replaced_and_said_so_or_kept_under_no_clobber() {
        let dir = tempfile::tempdir().unwrap();
        let target = Target::Dir(dir.path().into());
        let o = offer("v.bin", b"new");
        let fresh = prepare(&target, &o, SessionId(11), None, Placement::default()).unwrap();
        assert!(!fresh.replaces(), "nothing was there");
        drop(fresh);
        std::fs::write(dir.path().join("v.bin"), b"old").unwrap();
        let mut sink = prepare(&target, &o, SessionId(12), None, Placement::default()).unwrap();
        assert!(sink.replaces());
        sink.write(0, b"new").unwrap();
        assert_eq!(sink.hash().unwrap(), *blake3::hash(b"new").as_bytes());
        sink.commit().unwrap();
        assert_eq!(std::fs::read(dir.path().join("v.bin")).unwrap(), b"new");
        let (status, text) = prepare(
            &target,
            &o,
            SessionId(13),
            None,
            Placement {
                no_clobber: true,
                merge_tree: false,
            },
        )
        .err()
        .unwrap();
        assert_eq!(status, Status::Other);
        assert!(text.contains("--no-clobber"), "{text}");
        assert_eq!(std::fs::read(dir.path().join("v.bin")).unwrap(), b"new");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no part file left"
        );
    }
}
