//! Where a receiver puts the object: a temporary file renamed into place
//! once verified, or a vector in memory.

use crate::name::safe_relative_path;
use rmcast_proto::{HASH_LEN, OfferInfo, SessionId, Status};
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
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
const STAGE_BYTES: usize = 256 << 10;

/// A relay's stage: what it forwards waits for its write, so it gathers
/// less (2.6 ms at 100 Mbit/s, where 256 KiB held every relay of a
/// cascade back 21 ms).
const RELAY_STAGE_BYTES: usize = 32 << 10;

/// Out-of-order bytes are read back for hashing once this much of them has
/// become contiguous (after a repair filled the gap before them).
const CATCH_UP_BYTES: u64 = 4 << 20;

/// A partial file: removed on drop unless it was committed.
pub(crate) struct Part {
    file: File,
    /// The hidden part file's path (`None`: an anonymous memfd).
    temp: Option<PathBuf>,
    final_path: PathBuf,
    size: u64,
    committed: bool,
    /// A file of the offered name was there at the offer: the commit
    /// replaces it (the new version of the same path).
    replaces: bool,
    /// The object is a directory tree (an offered name ending in `/`):
    /// extracted while it arrives into a staging directory beside
    /// `final_path`.
    tree: Option<Box<crate::tree::Extractor>>,
    /// Bytes received in order but not yet written, starting at `stage_offset`.
    /// Packets mostly arrive in order, so this turns ~180 small writes into one.
    stage: Vec<u8>,
    stage_offset: u64,
    /// BLAKE3 over the prefix `[0, hashed)`. In-order bytes are hashed as
    /// their stage is written, and [`Part::catch_up`] reads back what
    /// arrived out of order once the gap before it is filled, so the
    /// verification at the end hashes only the tail, not the whole object.
    /// (Boxed: a hasher is 2 KB, and `Sink` is moved around by value.)
    hasher: Box<blake3::Hasher>,
    hashed: u64,
    /// A tree: looking for the chunks this disk holds already.
    held: HeldSearch,
    /// Every byte of the object arrives into the file and stays there (a
    /// relay reads it back): no chunk is taken from the disk instead, no
    /// copied range is released.
    whole: bool,
    /// In-order bytes gathered per write at most.
    stage_max: usize,
}

/// A tree's search for the chunks this disk holds (resume, delta): it
/// starts once the manifest is in and runs on its own threads, so the
/// receiver keeps answering the sender meanwhile.
#[derive(Default)]
enum HeldSearch {
    /// Waiting for the manifest (its length once read).
    #[default]
    Idle,
    Manifest(u64),
    Running(std::thread::JoinHandle<crate::tree::Held>, u64),
    Done,
}

/// What a tree's receiver found on its disk: the first packet after the
/// manifest, the packets it stored from the disk, and their bytes.
pub(crate) struct HeldReport {
    pub(crate) barrier: u32,
    pub(crate) packets: Vec<(u32, u32)>,
    pub(crate) bytes: u64,
}

impl Part {
    /// Resume and delta: once the manifest is in (`in_order` bytes of the
    /// object are), starts looking for the chunks this disk holds; once
    /// that is done, returns what to report. Cheap when there is nothing
    /// new (called per stored packet and per pass of the event loop).
    fn poll_held(&mut self, in_order: u64, payload: u64) -> io::Result<Option<HeldReport>> {
        if self.tree.is_none() || payload == 0 {
            return Ok(None);
        }
        let barrier_of = |len: u64| u32::try_from(len.div_ceil(payload)).unwrap_or(u32::MAX);
        loop {
            match std::mem::take(&mut self.held) {
                HeldSearch::Idle => {
                    if in_order < 16.min(self.size) {
                        return Ok(None);
                    }
                    self.flush()?;
                    // A header that does not read: wait for the whole
                    // object (the extractor names what is wrong).
                    let len =
                        crate::tree::manifest_extent(&self.file, self.size).unwrap_or(self.size);
                    self.held = HeldSearch::Manifest(len);
                }
                HeldSearch::Manifest(len) => {
                    if in_order < len {
                        self.held = HeldSearch::Manifest(len);
                        return Ok(None);
                    }
                    self.catch_up(in_order)?;
                    let tree = self.tree.as_ref().expect("checked above");
                    let Some(manifest) = tree.manifest().filter(|_| !tree.failed() && !self.whole)
                    else {
                        // Or a relay, which must receive every byte.
                        // A manifest that does not read: the tree fails at
                        // the end; nothing is held meanwhile.
                        self.held = HeldSearch::Done;
                        return Ok(Some(HeldReport {
                            barrier: barrier_of(len),
                            packets: Vec::new(),
                            bytes: 0,
                        }));
                    };
                    let manifest = manifest.clone();
                    let roots = tree.sources();
                    let (size, from) = (self.size, in_order);
                    let job = std::thread::Builder::new()
                        .name("rmcast-held".into())
                        .spawn(move || crate::tree::find_held(&manifest, &roots, size, from))?;
                    self.held = HeldSearch::Running(job, len);
                    return Ok(None);
                }
                HeldSearch::Running(job, len) => {
                    if !job.is_finished() {
                        self.held = HeldSearch::Running(job, len);
                        return Ok(None);
                    }
                    self.held = HeldSearch::Done;
                    let found = job
                        .join()
                        .map_err(|_| io::Error::other("looking for held chunks panicked"))?;
                    let (ranges, bytes) = (found.covered, found.bytes);
                    if let Some(t) = &mut self.tree {
                        t.mark_verified(found.sources);
                    }
                    let packets = self.size.div_ceil(payload);
                    let barrier = barrier_of(len);
                    let mut out = Vec::new();
                    for (start, n) in ranges {
                        let end = start + n;
                        let first = start.div_ceil(payload).max(u64::from(barrier));
                        let last = if end >= self.size {
                            packets
                        } else {
                            end / payload
                        };
                        if last > first {
                            out.push((first as u32, (last - first) as u32));
                        }
                    }
                    return Ok(Some(HeldReport {
                        barrier,
                        packets: out,
                        bytes,
                    }));
                }
                HeldSearch::Done => {
                    self.held = HeldSearch::Done;
                    return Ok(None);
                }
            }
        }
    }

    fn write(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        if offset < self.hashed {
            // The engine stores each byte once; if bytes already hashed were
            // rewritten anyway, start over so the verdict covers the file.
            self.hasher.reset();
            self.hashed = 0;
            if let Some(t) = &mut self.tree {
                t.reset();
            }
        }
        let stage_end = self.stage_offset + self.stage.len() as u64;
        if !self.stage.is_empty()
            && offset == stage_end
            && self.stage.len() + bytes.len() <= self.stage_max
        {
            self.stage.extend_from_slice(bytes);
            return Ok(());
        }
        self.flush()?;
        if bytes.len() >= self.stage_max {
            self.file.write_all_at(bytes, offset)?;
            if offset == self.hashed {
                self.absorb(bytes);
            }
            return Ok(());
        }
        self.stage_offset = offset;
        self.stage.extend_from_slice(bytes);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.stage.is_empty() {
            self.file.write_all_at(&self.stage, self.stage_offset)?;
            if self.stage_offset == self.hashed {
                let stage = std::mem::take(&mut self.stage);
                self.absorb(&stage);
                self.stage = stage;
            }
            self.stage.clear();
        }
        Ok(())
    }

    /// The in-order prefix grew by `bytes` (just written at `hashed`):
    /// hashed, for a file; for a tree only counted, since its hash is its
    /// manifest's ([`crate::tree::manifest_hash`]) and the extractor
    /// checks every chunk against the manifest.
    fn absorb(&mut self, bytes: &[u8]) {
        if self.tree.is_none() {
            self.hasher.update(bytes);
        }
        self.hashed += bytes.len() as u64;
        self.extract();
    }

    /// A tree: copy out what the hashed prefix now covers (cheap when it
    /// covers nothing new).
    fn extract(&mut self) {
        if let Some(t) = &mut self.tree {
            t.advance(&self.file, self.size, self.hashed);
        }
    }

    /// Extends the hashed prefix to `upto` (bytes the caller knows are all
    /// stored), reading back from the file what was written out of order.
    /// The reads come from the page cache, in `STAGE_BYTES` pieces through
    /// the stage buffer, which is empty once flushed.
    fn catch_up(&mut self, upto: u64) -> io::Result<()> {
        let upto = upto.min(self.size);
        if upto <= self.hashed {
            return Ok(());
        }
        self.flush()?;
        if self.tree.is_some() {
            // Nothing to hash: the bytes are in the file, in order.
            self.hashed = upto;
            self.extract();
            return Ok(());
        }
        let mut buf = std::mem::take(&mut self.stage);
        let result = (|| {
            while self.hashed < upto {
                let n = (upto - self.hashed).min(STAGE_BYTES as u64) as usize;
                buf.resize(n, 0);
                self.file.read_exact_at(&mut buf, self.hashed)?;
                self.hasher.update(&buf);
                self.hashed += n as u64;
            }
            Ok(())
        })();
        buf.clear();
        self.stage = buf;
        self.extract();
        result
    }
}

impl Drop for Part {
    fn drop(&mut self) {
        if let (false, Some(temp)) = (self.committed, &self.temp) {
            match std::fs::remove_file(temp) {
                Ok(()) => tracing::debug!("removed partial file {}", temp.display()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!("cannot remove partial file {}: {e}", temp.display()),
            }
        }
    }
}

/// Storage for one object.
pub(crate) enum Sink {
    /// Nothing accepted yet.
    None,
    /// A partial file in the output directory.
    File(Part),
    /// A buffer of the object's size.
    Memory(Mem),
}

/// An object received into memory, hashed as its in-order prefix grows
/// (like a partial file), so verifying it at the end does not stop to read
/// the whole buffer.
pub(crate) struct Mem {
    data: Vec<u8>,
    hasher: Box<blake3::Hasher>,
    /// Bytes from the start already fed to `hasher`.
    hashed: usize,
}

impl Mem {
    fn catch_up(&mut self, upto: u64) {
        let upto = usize::try_from(upto).map_or(self.data.len(), |u| u.min(self.data.len()));
        if upto > self.hashed {
            self.hasher.update(&self.data[self.hashed..upto]);
            self.hashed = upto;
        }
    }
}

/// A zero-filled buffer of `size` bytes, or `None` if it cannot be
/// allocated. `alloc_zeroed` takes fresh zero pages from the system for
/// large sizes, so nothing is written (or made resident) before the data
/// arrives. (Not as transparent huge pages: measured on a 1 GiB object,
/// faulting and clearing 2 MiB pages cost receivers more system time than
/// 4 KiB ones.)
fn zeroed_vec(size: usize) -> Option<Vec<u8>> {
    if size == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(size).ok()?;
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return None;
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout
    // of `size` u8s (capacity == length == size) and is zero-initialised.
    Some(unsafe { Vec::from_raw_parts(ptr, size, size) })
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
fn remove_stale_parts(root: &Path, rel: &Path, keep_staging: bool) -> Vec<PathBuf> {
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
fn tree_bytes(dir: &Path) -> u64 {
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
            let part = Part {
                file,
                temp: Some(temp.clone()),
                final_path,
                size: offer.size,
                committed: false,
                replaces,
                tree: extractor,
                stage: Vec::with_capacity(STAGE_BYTES),
                stage_offset: 0,
                hasher: Box::new(blake3::Hasher::new()),
                hashed: 0,
                held: HeldSearch::default(),
                whole: false,
                stage_max: STAGE_BYTES,
            };
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
            Ok(Sink::File(Part {
                file,
                temp: None,
                final_path: PathBuf::new(),
                size: offer.size,
                committed: false,
                replaces: false,
                tree: None,
                stage: Vec::with_capacity(STAGE_BYTES),
                stage_offset: 0,
                hasher: Box::new(blake3::Hasher::new()),
                hashed: 0,
                held: HeldSearch::default(),
                whole: false,
                stage_max: STAGE_BYTES,
            }))
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

impl Sink {
    /// Stores `bytes` at `offset` of the object.
    pub(crate) fn write(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        match self {
            Sink::None => Ok(()),
            Sink::File(p) => p.write(offset, bytes),
            Sink::Memory(m) => {
                let start = usize::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
                if start < m.hashed {
                    // As for a file: rewritten hashed bytes restart the hash.
                    m.hasher.reset();
                    m.hashed = 0;
                }
                let dst = start
                    .checked_add(bytes.len())
                    .and_then(|end| m.data.get_mut(start..end))
                    .ok_or(io::ErrorKind::InvalidInput)?;
                dst.copy_from_slice(bytes);
                Ok(())
            }
        }
    }

    /// Hashes ahead, off the end of the transfer: `upto` bytes from the
    /// start are all stored (the receiver's in-order point). Cheap to call
    /// often; it reads back only when out-of-order bytes became contiguous.
    pub(crate) fn hash_ahead(&mut self, upto: u64) -> io::Result<()> {
        match self {
            Sink::File(p) if upto >= p.hashed + CATCH_UP_BYTES || upto >= p.size => {
                p.catch_up(upto)
            }
            Sink::Memory(m) => {
                let due = (m.hashed as u64).saturating_add(CATCH_UP_BYTES);
                if upto >= due || upto >= m.data.len() as u64 {
                    m.catch_up(upto);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Resume and delta (a tree): what this disk holds of the object, once
    /// known (see [`Part::poll_held`]).
    pub(crate) fn poll_held(
        &mut self,
        in_order: u64,
        payload: u64,
    ) -> io::Result<Option<HeldReport>> {
        match self {
            Sink::File(p) => p.poll_held(in_order, payload),
            _ => Ok(None),
        }
    }

    /// A relay forwards what is stored: of the first `in_order` bytes
    /// (all received), how many are written to the file, where another
    /// reader finds them (bytes still staged are not, yet). Once every
    /// byte is in, the stage is written out so the tail need not wait for
    /// the verification.
    pub(crate) fn stored_prefix(&mut self, in_order: u64) -> io::Result<u64> {
        match self {
            Sink::File(p) => {
                if in_order >= p.size {
                    p.flush()?;
                }
                Ok(if p.stage.is_empty() {
                    in_order
                } else {
                    in_order.min(p.stage_offset)
                })
            }
            _ => Ok(0),
        }
    }

    /// A relay: every byte of the object arrives into the file and stays
    /// there to be read back (a tree's chunks already on this disk are not
    /// taken from it, its copied ranges are not released). Call before the
    /// first byte.
    pub(crate) fn keep_every_byte(&mut self) {
        if let Sink::File(p) = self {
            p.whole = true;
            p.stage_max = RELAY_STAGE_BYTES;
            if let Some(t) = &mut p.tree {
                t.keep_part();
            }
        }
    }

    /// A second handle on the file the object is stored into (a part file
    /// or an in-memory file), for a reader beside the receiver (a relay's
    /// downstream half); it stays readable after a commit renames or
    /// removes the part file.
    pub(crate) fn reader(&self) -> io::Result<File> {
        match self {
            Sink::File(p) => p.file.try_clone(),
            _ => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the object is not stored in a file",
            )),
        }
    }

    /// BLAKE3 of the stored object (writes out any staged bytes first).
    pub(crate) fn hash(&mut self) -> io::Result<[u8; HASH_LEN]> {
        if let Sink::File(p) = self {
            p.flush()?;
        }
        match self {
            Sink::None => Ok(*blake3::hash(&[]).as_bytes()),
            Sink::Memory(m) => {
                m.catch_up(u64::MAX);
                Ok(*m.hasher.finalize().as_bytes())
            }
            Sink::File(p) if p.size == 0 => Ok(*blake3::hash(&[]).as_bytes()),
            Sink::File(p) if p.tree.is_some() => crate::tree::manifest_hash(&p.file, p.size),
            Sink::File(p) => {
                if p.hashed < p.size {
                    // SAFETY: the partial file is private to this receiver (a
                    // hidden, session-specific name created with O_EXCL);
                    // nothing else truncates it while it is mapped.
                    let map = unsafe { memmap2::Mmap::map(&p.file)? };
                    let start =
                        usize::try_from(p.hashed).map_err(|_| io::ErrorKind::InvalidInput)?;
                    p.hasher.update(&map[start..]);
                    p.hashed = p.size;
                }
                Ok(*p.hasher.finalize().as_bytes())
            }
        }
    }

    /// Makes a verified object durable and visible: fsync, then an atomic
    /// rename to its final name. Returns the final path (`None` in memory).
    pub(crate) fn commit(&mut self) -> io::Result<Option<PathBuf>> {
        match self {
            Sink::File(p) if p.tree.is_some() => {
                let extractor = p.tree.as_mut().expect("a tree");
                extractor.finish(&p.file, p.size)?;
                // The tree is in place; its part file has served.
                if let Some(temp) = &p.temp {
                    let _ = std::fs::remove_file(temp);
                }
                p.committed = true;
                Ok(Some(p.final_path.clone()))
            }
            Sink::File(p) if p.temp.is_none() => {
                // In memory: nothing to make durable, nowhere to rename.
                p.committed = true;
                Ok(None)
            }
            Sink::File(p) => {
                p.file.sync_all()?;
                std::fs::rename(p.temp.as_ref().expect("a named part"), &p.final_path)?;
                p.committed = true;
                if let Some(dir) = p.final_path.parent() {
                    // Make the rename itself durable; best effort.
                    if let Ok(d) = File::open(dir) {
                        let _ = d.sync_all();
                    }
                }
                Ok(Some(p.final_path.clone()))
            }
            _ => Ok(None),
        }
    }

    /// Drops the storage; a partial file is removed.
    pub(crate) fn discard(&mut self) {
        *self = Sink::None;
    }

    /// What a committed tree stored (`None` for a single file).
    pub(crate) fn tree_counts(&self) -> Option<crate::tree::TreeCounts> {
        match self {
            Sink::File(p) => p.tree.as_ref().and_then(|t| t.stored()),
            _ => None,
        }
    }

    /// The in-memory file a [`Target::Memfd`] object was received into
    /// (its staged bytes written out); leaves the sink empty.
    pub(crate) fn take_memfd(&mut self) -> Option<File> {
        match std::mem::replace(self, Sink::None) {
            Sink::File(mut p) if p.temp.is_none() => {
                p.flush().ok()?;
                p.committed = true;
                // Part's Drop has nothing to remove; keep the descriptor.
                let file = p.file.try_clone().ok();
                drop(p);
                file
            }
            other => {
                *self = other;
                None
            }
        }
    }

    /// Whether committing replaces a file that was under the offered name
    /// at the offer.
    pub(crate) fn replaces(&self) -> bool {
        matches!(self, Sink::File(p) if p.replaces)
    }

    /// The received bytes (memory only); leaves the sink empty.
    pub(crate) fn take_vec(&mut self) -> Vec<u8> {
        match std::mem::replace(self, Sink::None) {
            Sink::Memory(m) => m.data,
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcast_proto::{ProtocolId, Seq};

    fn offer(name: &str, data: &[u8]) -> OfferInfo {
        OfferInfo {
            name: name.into(),
            size: data.len() as u64,
            protocol: ProtocolId::NakPoll,
            payload_size: 1000,
            window: 64,
            receivers: 1,
            packets: data.len().div_ceil(1000) as u32,
            isn: Seq(0),
            test_loss_ppm: 0,
            fec: None,
        }
    }

    #[test]
    fn out_of_order_writes_through_the_stage_reassemble_the_object() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..700_000u32).map(|i| (i * 31 % 253) as u8).collect();
        let o = offer("x.bin", &data);
        let mut sink = prepare(
            &Target::Dir(dir.path().into()),
            &o,
            SessionId(1),
            None,
            Placement::default(),
        )
        .unwrap();
        let chunks: Vec<usize> = (0..data.len().div_ceil(1000)).collect();
        // In order, then every third chunk again out of order, then the rest.
        for &i in chunks.iter().filter(|i| *i % 3 != 0) {
            let end = ((i + 1) * 1000).min(data.len());
            sink.write((i * 1000) as u64, &data[i * 1000..end]).unwrap();
        }
        for &i in chunks.iter().rev().filter(|i| *i % 3 == 0) {
            let end = ((i + 1) * 1000).min(data.len());
            sink.write((i * 1000) as u64, &data[i * 1000..end]).unwrap();
        }
        assert_eq!(sink.hash().unwrap(), *blake3::hash(&data).as_bytes());
        let path = sink.commit().unwrap().unwrap();
        assert_eq!(std::fs::read(path).unwrap(), data);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// Writes `data` in 1000-byte chunks in `order`, calling `hash_ahead`
    /// with the in-order point after every chunk, and checks the verdict and
    /// how much the final hash had left to read.
    fn write_in_order_of(order: &[usize], data: &[u8], ahead: bool) -> (bool, u64) {
        let dir = tempfile::tempdir().unwrap();
        let o = offer("p.bin", data);
        let mut sink = prepare(
            &Target::Dir(dir.path().into()),
            &o,
            SessionId(9),
            None,
            Placement::default(),
        )
        .unwrap();
        let n = data.len().div_ceil(1000);
        let mut have = vec![false; n];
        let mut prefix = 0usize;
        for &i in order {
            let end = ((i + 1) * 1000).min(data.len());
            sink.write((i * 1000) as u64, &data[i * 1000..end]).unwrap();
            have[i] = true;
            while prefix < n && have[prefix] {
                prefix += 1;
            }
            if ahead {
                let upto = (prefix * 1000).min(data.len()) as u64;
                sink.hash_ahead(upto).unwrap();
            }
        }
        let Sink::File(p) = &sink else { unreachable!() };
        let left = p.size - p.hashed;
        (sink.hash().unwrap() == *blake3::hash(data).as_bytes(), left)
    }

    #[test]
    fn in_order_bytes_are_hashed_as_they_are_written() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let order: Vec<usize> = (0..data.len().div_ceil(1000)).collect();
        let (ok, left) = write_in_order_of(&order, &data, false);
        assert!(ok);
        // Only the last, still staged piece is left for the end.
        assert!(left <= STAGE_BYTES as u64, "{left} bytes left to hash");
    }

    #[test]
    fn bytes_after_a_repaired_gap_are_read_back_and_hashed_ahead() {
        let data: Vec<u8> = (0..9_000_000u32).map(|i| (i * 13 % 249) as u8).collect();
        let n = data.len().div_ceil(1000);
        // Chunk 10 is lost and repaired only after 6000 more chunks.
        let mut order: Vec<usize> = (0..n).filter(|&i| i != 10 && i < 6010).collect();
        order.push(10);
        order.extend(6010..n);
        let (ok, left) = write_in_order_of(&order, &data, true);
        assert!(ok);
        assert!(left <= STAGE_BYTES as u64, "{left} bytes left to hash");
        // Without hashing ahead, everything after the gap waits for the end.
        let (ok, left) = write_in_order_of(&order, &data, false);
        assert!(ok);
        assert!(left > 8_000_000, "{left}");
    }

    #[test]
    fn rewriting_hashed_bytes_restarts_the_hash() {
        let dir = tempfile::tempdir().unwrap();
        let data = vec![7u8; 600_000];
        let o = offer("r.bin", &data);
        let mut sink = prepare(
            &Target::Dir(dir.path().into()),
            &o,
            SessionId(10),
            None,
            Placement::default(),
        )
        .unwrap();
        sink.write(0, &data[..300_000]).unwrap();
        sink.write(300_000, &data[300_000..]).unwrap();
        // Corrupt an already hashed byte: the verdict must see it.
        sink.write(5, &[8]).unwrap();
        assert_ne!(sink.hash().unwrap(), *blake3::hash(&data).as_bytes());
    }

    #[test]
    fn memory_is_hashed_ahead_in_any_order_and_rewrites_restart_the_hash() {
        let data: Vec<u8> = (0..9_500_000u32).map(|i| (i * 13 % 241) as u8).collect();
        let o = offer("m.bin", &data);
        let chunk = 100_000;
        let n = data.len().div_ceil(chunk);
        // Every other chunk first, then the rest backwards; hash ahead after each.
        let order: Vec<usize> = (0..n).step_by(2).chain((1..n).step_by(2).rev()).collect();
        let mut sink = prepare(
            &Target::Memory,
            &o,
            SessionId(11),
            None,
            Placement::default(),
        )
        .unwrap();
        let mut have = vec![false; n];
        let mut prefix = 0;
        for i in order {
            let end = ((i + 1) * chunk).min(data.len());
            sink.write((i * chunk) as u64, &data[i * chunk..end])
                .unwrap();
            have[i] = true;
            while prefix < n && have[prefix] {
                prefix += 1;
            }
            sink.hash_ahead((prefix * chunk).min(data.len()) as u64)
                .unwrap();
        }
        let Sink::Memory(m) = &sink else {
            panic!("not in memory")
        };
        assert_eq!(m.hashed, data.len(), "hashed ahead to the end");
        assert_eq!(sink.hash().unwrap(), *blake3::hash(&data).as_bytes());
        sink.write(5, &[data[5] ^ 1]).unwrap();
        assert_ne!(sink.hash().unwrap(), *blake3::hash(&data).as_bytes());
        let mut empty = prepare(
            &Target::Memory,
            &offer("e", &[]),
            SessionId(12),
            None,
            Placement::default(),
        )
        .unwrap();
        assert_eq!(empty.hash().unwrap(), *blake3::hash(&[]).as_bytes());
        assert!(empty.take_vec().is_empty());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// Any arrival order, with or without hashing ahead, gives the hash
        /// of the object.
        #[test]
        fn any_arrival_order_hashes_the_object(
            len in 1usize..1_200_000,
            seed in proptest::prelude::any::<u64>(),
            ahead in proptest::prelude::any::<bool>(),
        ) {
            use rand::{Rng, SeedableRng, seq::SliceRandom};
            let data: Vec<u8> = (0..len).map(|i| (i as u64 ^ seed).wrapping_mul(0x9E37_79B9) as u8).collect();
            let mut order: Vec<usize> = (0..len.div_ceil(1000)).collect();
            // Mostly in order: shuffle within windows of 64 chunks.
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            for w in order.chunks_mut(64) {
                if rng.random_bool(0.5) {
                    w.shuffle(&mut rng);
                }
            }
            let (ok, _) = write_in_order_of(&order, &data, ahead);
            proptest::prop_assert!(ok);
        }
    }

    #[test]
    fn discarded_partial_file_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let o = offer("y.bin", b"abc");
        let mut sink = prepare(
            &Target::Dir(dir.path().into()),
            &o,
            SessionId(2),
            None,
            Placement::default(),
        )
        .unwrap();
        sink.write(0, b"ab").unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        sink.discard();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

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

    #[test]
    fn a_tree_is_extracted_while_it_arrives_and_swapped_in_when_verified() {
        let src = tempfile::tempdir().unwrap();
        for i in 0..40u8 {
            std::fs::write(src.path().join(format!("f{i:02}")), vec![i; 300_000]).unwrap();
        }
        let tree = crate::tree::TreeObject::build(src.path()).unwrap();
        let data = tree.as_slice();
        let out = tempfile::tempdir().unwrap();
        let target = Target::Dir(out.path().into());
        let o = offer("t/", data);
        let mut sink = prepare(&target, &o, SessionId(21), None, Placement::default()).unwrap();
        // `.t.rmcast-tree-SESSION-ID`, once there.
        let prefix = format!(".t.rmcast-tree-{}-", SessionId(21));
        let staging = || {
            (std::fs::read_dir(out.path()).unwrap().flatten())
                .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
        };
        // The first half, in 1000-byte packets, the second packet last.
        let half = data.len() / 2;
        for (i, piece) in data[..half].chunks(1000).enumerate().skip(1) {
            sink.write((i * 1000) as u64, piece).unwrap();
        }
        assert!(staging().is_none(), "nothing before the manifest is in");
        sink.write(0, &data[..1000]).unwrap();
        for (i, piece) in data[half..].chunks(1000).enumerate() {
            sink.write((half + i * 1000) as u64, piece).unwrap();
            // As the driver does: the machine's in-order point.
            sink.hash_ahead((half + i * 1000 + piece.len()) as u64)
                .unwrap();
            if i == 0 {
                let early = std::fs::read_dir(staging().unwrap()).unwrap().count();
                assert!(
                    early >= 15,
                    "files covered by the prefix are out early: {early}"
                );
            }
        }
        // A tree's hash is its manifest's (each chunk is checked against it).
        let manifest = crate::tree::manifest_extent_of("t/", data).unwrap() as usize;
        assert_eq!(
            sink.hash().unwrap(),
            *blake3::hash(&data[..manifest]).as_bytes()
        );
        sink.commit().unwrap();
        assert_eq!(sink.tree_counts().unwrap().files, 40);
        assert!(staging().is_none());
        for i in 0..40u8 {
            assert_eq!(
                std::fs::read(out.path().join(format!("t/f{i:02}"))).unwrap(),
                vec![i; 300_000]
            );
        }
        assert_eq!(
            entries(out.path()),
            [".t.rmcast-index", "t"],
            "no part file left; the tree's index beside it"
        );
        // A tree that fails half-way leaves its part file nowhere and its
        // staging directory (what it extracted, each chunk checked) for the
        // next session of its name to resume from.
        let mut sink = prepare(
            &target,
            &offer("u/", data),
            SessionId(22),
            None,
            Placement::default(),
        )
        .unwrap();
        sink.write(0, &data[..half]).unwrap();
        sink.hash().ok();
        let prefix = format!(".u.rmcast-tree-{}-", SessionId(22));
        let kept = (entries(out.path()).into_iter())
            .find(|e| e.starts_with(&prefix))
            .expect("its staging directory");
        sink.discard();
        assert_eq!(entries(out.path()), [".t.rmcast-index", kept.as_str(), "t"]);
        assert!(std::fs::read_dir(out.path().join(&kept)).unwrap().count() > 5);
        // The next session of "u/" keeps it (to look through) while it runs.
        let next = prepare(
            &target,
            &offer("u/", data),
            SessionId(23),
            None,
            Placement::default(),
        )
        .unwrap();
        assert!(out.path().join(&kept).exists());
        drop(next);
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}
