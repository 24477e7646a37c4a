//! Directory trees as one object: the sender's layout, the receiver's
//! extraction.
//!
//! The protocols move one object; a tree becomes one by a manifest
//! ([`rmcast_wire::manifest`]) followed by every regular file's bytes. An
//! offer whose name ends in `/` carries a tree.
//!
//! **Sender** ([`TreeObject::build`]): the object lives in one reserved
//! range of virtual memory, so the engine sends it as the byte slice it
//! sends a file from, without copying large files: each file of at least
//! [`MAP_MIN`] bytes is memory-mapped in place (`MAP_FIXED`) over whole
//! pages of its own, the zero-filled rest of its last page padding it;
//! smaller files, and any beyond the kernel's mapping limit, are copied in
//! back to back. A mapped file costs at most two partial pages of padding
//! on the wire (none between files whose sizes are multiples of 4 KiB); a
//! small file costs its size in memory. The manifest's chunk hashes are computed from
//! that range on every core before the session starts.
//!
//! **Receiver** ([`Extractor`]): the object arrives into one hidden part
//! file, as a file does, and is verified by its BLAKE3 hash. While it
//! arrives, as the in-order prefix the hash has covered grows, the
//! manifest is read and checked (paths, links, offsets) and each chunk the
//! prefix covers is copied into its file in a staging directory beside the
//! target (so a huge file costs each step only what the hash just
//! covered), every chunk checked against its hash (a manifest that lies is named by
//! file and chunk), its mode (`& 0o777`: no set-id bits from the network)
//! and mtime applied, and its range of the part file released (hole
//! punched), so the disk holds about the object once. Once the object's
//! hash (and signature, under `--trust`) verified, what is left is
//! created, directories get their modes and mtimes, one `syncfs` makes it
//! durable, and the staging directory replaces the target in one atomic
//! exchange (`renameat2(RENAME_EXCHANGE)`) or rename. On any failure the
//! staging directory is removed: nothing unverified is ever in place.

use crate::Error;
use rmcast_wire::manifest::{
    CHUNK_HASH_LEN, Entry, EntryKind, Manifest, check_link, check_path, chunk_count, manifest_len,
};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod held;
#[cfg(test)]
use held::read_index;
use held::write_index;
pub(crate) use held::{Held, Source, find_held};

/// Bytes per chunk hash: 1 MiB. BLAKE3 runs at full SIMD width from 16 KiB
/// on, so the chunk size only trades the manifest's size (32 bytes per
/// chunk: 32 KiB per GiB) against how finely a changed file is told apart
/// from the copy a receiver holds.
pub const CHUNK_SIZE: u32 = 1 << 20;

/// Files at least this large are mapped in place, page-aligned; smaller
/// ones are copied into the object, packed.
pub const MAP_MIN: u64 = 64 << 10;

/// How much of one file's range is copied (and hashed) per read.
const COPY_BYTES: usize = 1 << 20;

/// Suffix of an offered name that carries a tree.
pub const TREE_SUFFIX: char = '/';

/// A tree laid out as one object in memory (see the module's docs).
pub(crate) struct TreeObject {
    base: *mut u8,
    mapped_len: usize,
    len: usize,
    /// Regular files, directories, symbolic links.
    pub(crate) counts: (u64, u64, u64),
}

// SAFETY: the region is owned by this value, read-only after `build`, and
// unmapped only on drop; sharing `&[u8]` views across threads is sound.
unsafe impl Send for TreeObject {}
// SAFETY: as above: after `build`, nothing writes the region.
unsafe impl Sync for TreeObject {}

impl Drop for TreeObject {
    fn drop(&mut self) {
        // SAFETY: base/mapped_len are exactly what mmap returned; unmapping
        // the range also removes the file mappings placed inside it.
        unsafe { libc::munmap(self.base.cast(), self.mapped_len) };
    }
}

/// One entry found by the walk, before the layout.
struct Found {
    entry: Entry,
    source: PathBuf,
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// How many files may be mapped: half of what the kernel allows a process
/// (`vm.max_map_count`), leaving the rest to everything else.
fn map_limit() -> usize {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(65_530)
        / 2
}

fn invalid(text: String) -> Error {
    Error::Invalid(text)
}

fn io_err(context: String) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Io { context, source }
}

fn mtime_of(meta: &std::fs::Metadata) -> (i64, u32) {
    (meta.mtime(), meta.mtime_nsec().clamp(0, 999_999_999) as u32)
}

/// Walks `root`: every directory, regular file and symbolic link below it,
/// sorted by path. Refuses, naming them, what cannot travel: special files,
/// names that are not UTF-8 or not storable, links that leave the tree.
fn walk(root: &Path) -> Result<Vec<Found>, Error> {
    let mut found = Vec::new();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let entries =
            std::fs::read_dir(&dir).map_err(io_err(format!("cannot list {}", dir.display())))?;
        for e in entries {
            let e = e.map_err(io_err(format!("cannot list {}", dir.display())))?;
            let source = e.path();
            let name = e.file_name();
            let name = name.to_str().ok_or_else(|| {
                invalid(format!(
                    "{} has a name that is not UTF-8; rename it to send the tree",
                    source.display()
                ))
            })?;
            let path = if rel.is_empty() {
                name.to_owned()
            } else {
                format!("{rel}/{name}")
            };
            check_path(&path).map_err(|e| invalid(format!("{}: {e}", source.display())))?;
            let meta = std::fs::symlink_metadata(&source)
                .map_err(io_err(format!("cannot inspect {}", source.display())))?;
            let (mtime_s, mtime_ns) = mtime_of(&meta);
            let kind = if meta.is_dir() {
                stack.push((source.clone(), path.clone()));
                EntryKind::Dir
            } else if meta.is_file() {
                EntryKind::File {
                    offset: 0,
                    size: meta.len(),
                    chunks: vec![[0; CHUNK_HASH_LEN]; chunk_count(meta.len(), CHUNK_SIZE) as usize],
                }
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&source)
                    .map_err(io_err(format!("cannot read the link {}", source.display())))?;
                let target = target.to_str().ok_or_else(|| {
                    invalid(format!("{}: link target is not UTF-8", source.display()))
                })?;
                check_link(&path, target).map_err(|_| {
                    invalid(format!(
                        "{} -> {target}: the symbolic link leads out of the tree; \
                         replace it by what it points to, or remove it",
                        source.display()
                    ))
                })?;
                EntryKind::Symlink {
                    target: target.to_owned(),
                }
            } else {
                return Err(invalid(format!(
                    "{} is not a regular file, directory or symbolic link (a device, \
                     socket or FIFO cannot be sent); remove it from the tree",
                    source.display()
                )));
            };
            found.push(Found {
                entry: Entry {
                    path,
                    mode: meta.mode() & 0o7777,
                    mtime_s,
                    mtime_ns,
                    kind,
                },
                source,
            });
        }
    }
    found.sort_by(|a, b| a.entry.path.as_bytes().cmp(b.entry.path.as_bytes()));
    Ok(found)
}

impl TreeObject {
    /// Lays the tree under `root` out as one object (see the module's docs).
    pub(crate) fn build(root: &Path) -> Result<TreeObject, Error> {
        let found = walk(root)?;
        let mut manifest = Manifest {
            chunk_size: CHUNK_SIZE,
            entries: found.iter().map(|f| f.entry.clone()).collect(),
        };
        if manifest.entries.len() > u32::MAX as usize {
            return Err(invalid(format!(
                "{} holds more than 2^32 entries",
                root.display()
            )));
        }
        let page = page_size();
        let limit = map_limit();
        let mut cursor = manifest.encoded_len() as u64;
        let mut mapped = Vec::new();
        let mut copied = Vec::new();
        let mut counts = (0, 0, 0);
        for (i, e) in manifest.entries.iter_mut().enumerate() {
            match &mut e.kind {
                EntryKind::File { offset, size, .. } => {
                    counts.0 += 1;
                    if *size >= MAP_MIN && mapped.len() < limit {
                        // Its mapping covers whole pages: nothing else may
                        // share its first or its last.
                        *offset = cursor.next_multiple_of(page);
                        cursor = (*offset + *size).next_multiple_of(page);
                        mapped.push(i);
                    } else {
                        *offset = cursor;
                        cursor = *offset + *size;
                        copied.push(i);
                    }
                }
                EntryKind::Dir => counts.1 += 1,
                EntryKind::Symlink { .. } => counts.2 += 1,
            }
        }
        let len = usize::try_from(cursor).map_err(|_| {
            invalid(format!(
                "{} is too large for this machine's address space",
                root.display()
            ))
        })?;
        let mapped_len = len.next_multiple_of(page as usize);
        // SAFETY: a fresh private anonymous mapping; no address hint.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::Io {
                context: format!("cannot reserve {len} bytes of address space for the tree"),
                source: io::Error::last_os_error(),
            });
        }
        let tree = TreeObject {
            base: base.cast(),
            mapped_len,
            len,
            counts,
        };
        let file_range = |i: usize| match manifest.entries[i].kind {
            EntryKind::File { offset, size, .. } => (offset as usize, size as usize),
            _ => unreachable!("only files are laid out"),
        };
        for &i in &copied {
            let (offset, size) = file_range(i);
            let source = &found[i].source;
            let file =
                File::open(source).map_err(io_err(format!("cannot open {}", source.display())))?;
            // SAFETY: [offset, offset+size) lies inside the writable region
            // (the layout put it there) and nothing else refers to it yet.
            let dst = unsafe { std::slice::from_raw_parts_mut(tree.base.add(offset), size) };
            file.read_exact_at(dst, 0).map_err(io_err(format!(
                "cannot read {} (did it shrink?)",
                source.display()
            )))?;
        }
        for &i in &mapped {
            let (offset, size) = file_range(i);
            let source = &found[i].source;
            let file =
                File::open(source).map_err(io_err(format!("cannot open {}", source.display())))?;
            // SAFETY: the target range is page-aligned and inside our own
            // reservation, so MAP_FIXED replaces only pages we own. The
            // mapping is read-only; like `send_file`, the file must not be
            // truncated while it is sent.
            let at = unsafe {
                libc::mmap(
                    tree.base.add(offset).cast(),
                    size,
                    libc::PROT_READ,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    file.as_raw_fd(),
                    0,
                )
            };
            if at == libc::MAP_FAILED {
                return Err(Error::Io {
                    context: format!("cannot map {} into memory", source.display()),
                    source: io::Error::last_os_error(),
                });
            }
        }
        hash_chunks(&tree, &mut manifest);
        let bytes = manifest.encode();
        // SAFETY: [0, manifest length) is anonymous, writable, and no file
        // was placed there (files start at or after the manifest's end).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), tree.base, bytes.len()) };
        Ok(tree)
    }

    /// The object's bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: the region is mapped for `mapped_len >= len` bytes and
        // lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }
}

/// Fills in every file's chunk hashes, reading the laid-out object, on as
/// many threads as the machine has cores.
fn hash_chunks(tree: &TreeObject, manifest: &mut Manifest) {
    let object = tree.as_slice();
    let chunk = CHUNK_SIZE as usize;
    let mut jobs: Vec<(&[u8], &mut [u8; CHUNK_HASH_LEN])> = Vec::new();
    for e in &mut manifest.entries {
        if let EntryKind::File {
            offset,
            size,
            chunks,
        } = &mut e.kind
        {
            let data = &object[*offset as usize..(*offset + *size) as usize];
            jobs.extend(data.chunks(chunk).zip(chunks.iter_mut()));
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = jobs.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for part in jobs.chunks_mut(per) {
            s.spawn(move || {
                for (data, out) in part.iter_mut() {
                    **out = *blake3::hash(data).as_bytes();
                }
            });
        }
    });
}

/// What `extract` stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeCounts {
    /// Regular files.
    pub files: u64,
    /// Directories (below the tree's root).
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
}

fn data_err(text: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, text)
}

/// Extracts a tree from its part file while the object arrives: each
/// file is copied out (every chunk checked against its hash) as soon as
/// the in-order prefix of the object covers it, so that little is left to
/// do once the object's hash matches. Nothing is in place before
/// [`Extractor::finish`]; dropped unfinished, it removes its staging
/// directory.
pub(crate) struct Extractor {
    staging: PathBuf,
    target: PathBuf,
    /// Merge into the target file by file instead of replacing it whole.
    merge: bool,
    /// Held (flocked) while building: an unlocked staging directory
    /// belongs to a receiver that died (see storage::remove_stale_parts).
    lock: Option<File>,
    manifest: Option<Manifest>,
    /// The next entry to create.
    next: usize,
    /// That entry's file, while its chunks come in.
    open: Option<OpenFile>,
    /// Bytes of the object that must be in before anything more can be
    /// done: the manifest's header, the manifest, or the next file's end.
    boundary: u64,
    buf: Vec<u8>,
    counts: TreeCounts,
    /// The first failure; reported by `finish`.
    failed: Option<io::Error>,
    done: bool,
    /// Staging directories of earlier sessions of this name that ended
    /// before their tree was in place (a receiver killed, a sender gone):
    /// looked through for chunks (resume), removed once this tree is in.
    leftovers: Vec<PathBuf>,
    /// Chunks found on this disk and checked against their hashes
    /// already ([`find_held`]), by object offset: copied from where they
    /// lie, without a second hash.
    verified: std::collections::HashMap<u64, Source>,
    /// The last source file opened (chunks of one file come in a row).
    source: Option<(std::sync::Arc<PathBuf>, File)>,
    /// Release each copied range of the part file (off for a relay, which
    /// reads the whole object back from it).
    punch: bool,
}

impl Extractor {
    /// An extractor that builds in `staging` and puts the tree at `target`.
    pub(crate) fn new(staging: PathBuf, target: PathBuf, merge: bool) -> Self {
        Extractor {
            staging,
            target,
            merge,
            lock: None,
            manifest: None,
            next: 0,
            open: None,
            boundary: 16,
            buf: Vec::new(),
            counts: TreeCounts::default(),
            failed: None,
            done: false,
            leftovers: Vec::new(),
            verified: std::collections::HashMap::new(),
            source: None,
            punch: true,
        }
    }

    /// Leaves the part file whole (a relay sends it on from there).
    pub(crate) fn keep_part(&mut self) {
        self.punch = false;
    }

    /// Chunks found on this disk, checked already, by object offset.
    pub(crate) fn mark_verified(&mut self, chunks: impl IntoIterator<Item = (u64, Source)>) {
        self.verified.extend(chunks);
    }

    /// Staging directories left by earlier sessions of this name.
    pub(crate) fn set_leftovers(&mut self, leftovers: Vec<PathBuf>) {
        self.leftovers = leftovers;
    }

    /// The manifest, once the in-order prefix covered it.
    pub(crate) fn manifest(&self) -> Option<&Manifest> {
        self.manifest.as_ref()
    }

    /// Where earlier copies of the tree's files may lie, most likely
    /// first: the tree in place (the version before), then leftovers.
    pub(crate) fn sources(&self) -> Vec<PathBuf> {
        let mut roots = vec![self.target.clone()];
        roots.extend(self.leftovers.iter().cloned());
        roots
    }

    /// Whether the tree failed already (its report then holds nothing).
    pub(crate) fn failed(&self) -> bool {
        self.failed.is_some()
    }

    /// The object's bytes `[0, ready)` are final in `part`: do what they
    /// allow. Cheap when they allow nothing new (called per write).
    pub(crate) fn advance(&mut self, part: &File, size: u64, ready: u64) {
        if ready < self.boundary || self.failed.is_some() || self.done {
            return;
        }
        if let Err(e) = self.step(part, size, ready) {
            self.failed = Some(e);
        }
    }

    /// Bytes already final were written again (the engine stores each
    /// byte once, so this does not happen): what was extracted, and the
    /// ranges released, cannot be trusted; the tree fails.
    pub(crate) fn reset(&mut self) {
        self.failed.get_or_insert_with(|| {
            data_err("bytes of the tree were rewritten after they were extracted".into())
        });
    }

    fn step(&mut self, part: &File, size: u64, ready: u64) -> io::Result<()> {
        if self.manifest.is_none() {
            let len = manifest_extent(part, size)?;
            self.boundary = len;
            if ready < len {
                return Ok(());
            }
            let manifest = read_manifest(part, size)?;
            self.buf = vec![0u8; COPY_BYTES.min(manifest.chunk_size as usize)];
            self.manifest = Some(manifest);
            self.open_staging()?;
        }
        let manifest = self.manifest.as_ref().expect("decoded above");
        while let Some(e) = manifest.entries.get(self.next) {
            if let EntryKind::File {
                offset,
                size,
                chunks,
            } = &e.kind
            {
                // Chunk by chunk as the prefix covers them, so that a huge
                // file costs each step only what the hash just covered.
                let named =
                    |err: io::Error| io::Error::new(err.kind(), format!("{}: {err}", e.path));
                if self.open.is_none()
                    && offset + size <= ready
                    && link_unchanged(
                        &mut self.verified,
                        &self.staging,
                        e,
                        *offset,
                        chunks.len(),
                        u64::from(manifest.chunk_size),
                    )
                {
                    self.counts.files += 1;
                    self.next += 1;
                    continue;
                }
                let open = match &mut self.open {
                    Some(f) => f,
                    none => none.insert(OpenFile {
                        file: create_file(&self.staging, &e.path).map_err(named)?,
                        done: 0,
                    }),
                };
                let cs = u64::from(manifest.chunk_size);
                while let Some(want) = chunks.get(open.done) {
                    let start = open.done as u64 * cs;
                    let end = (start + cs).min(*size);
                    if offset + end > ready {
                        self.boundary = offset + end;
                        return Ok(());
                    }
                    if let Some(src) = self.verified.remove(&(offset + start)) {
                        let from = match &mut self.source {
                            Some((path, file)) if *path == src.path => &*file,
                            slot => {
                                let file = File::open(&*src.path).map_err(named)?;
                                &slot.insert((src.path.clone(), file)).1
                            }
                        };
                        copy_range(from, &open.file, src.at, start, end - start, &mut self.buf)
                            .map_err(named)?;
                    } else {
                        copy_chunk(
                            part,
                            &open.file,
                            *offset,
                            start,
                            end,
                            open.done,
                            want,
                            &mut self.buf,
                        )
                        .map_err(named)?;
                    }
                    if self.punch {
                        punch_hole(part, offset + start, end - start);
                    }
                    open.done += 1;
                }
                let file = self.open.take().expect("opened above").file;
                file.set_permissions(std::fs::Permissions::from_mode(e.mode & 0o777))
                    .map_err(named)?;
                file.set_times(
                    std::fs::FileTimes::new().set_modified(system_time(e.mtime_s, e.mtime_ns)),
                )
                .map_err(named)?;
                self.counts.files += 1;
            } else {
                create(e, &self.staging, &mut self.counts)?;
            }
            self.next += 1;
        }
        self.boundary = u64::MAX;
        Ok(())
    }

    fn open_staging(&mut self) -> io::Result<()> {
        match std::fs::remove_dir_all(&self.staging) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        std::fs::create_dir(&self.staging)?;
        let dir = File::open(&self.staging)?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(io::Error::last_os_error());
        }
        self.lock = Some(dir);
        Ok(())
    }

    /// The object verified: create what is left, give directories their
    /// modes and mtimes, make it durable and swap it in.
    pub(crate) fn finish(&mut self, part: &File, size: u64) -> io::Result<TreeCounts> {
        self.advance(part, size, size);
        let result = (|| {
            if let Some(e) = self.failed.take() {
                return Err(e);
            }
            let manifest = self
                .manifest
                .as_ref()
                .ok_or_else(|| data_err("no manifest".into()))?;
            // Deepest first: a directory's mtime set before its children
            // are in would be undone by their creation.
            for e in manifest.entries.iter().rev() {
                if e.kind == EntryKind::Dir {
                    let path = self.staging.join(&e.path);
                    std::fs::set_permissions(
                        &path,
                        std::fs::Permissions::from_mode(e.mode & 0o777),
                    )?;
                    File::open(&path)?.set_times(
                        std::fs::FileTimes::new().set_modified(system_time(e.mtime_s, e.mtime_ns)),
                    )?;
                }
            }
            let lock = self.lock.as_ref().expect("opened with the manifest");
            // SAFETY: syncfs on a descriptor we own.
            if unsafe { libc::syncfs(lock.as_raw_fd()) } != 0 {
                return Err(io::Error::last_os_error());
            }
            if self.merge {
                merge_in(manifest, &self.staging, &self.target)?;
            } else {
                swap_in(&self.staging, &self.target)?;
            }
            Ok(self.counts)
        })();
        match result {
            Ok(counts) => {
                self.done = true;
                if let Some(manifest) = &self.manifest
                    && let Err(e) = write_index(manifest, &self.target)
                {
                    tracing::warn!(
                        "cannot write the index of {} (the next version is checked by reading it): {e}",
                        self.target.display()
                    );
                }
                for dir in &self.leftovers {
                    if std::fs::remove_dir_all(dir).is_ok() {
                        tracing::info!("removed {}, served for resume", dir.display());
                    }
                }
                Ok(counts)
            }
            Err(e) => {
                self.remove_staging();
                Err(e)
            }
        }
    }

    /// What the tree stored, once [`Extractor::finish`] put it in place.
    pub(crate) fn stored(&self) -> Option<TreeCounts> {
        self.done.then_some(self.counts)
    }

    fn remove_staging(&mut self) {
        if self.lock.take().is_some() || self.staging.exists() {
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}

impl Drop for Extractor {
    fn drop(&mut self) {
        // An unfinished tree's staging directory is kept when it holds
        // files (each verified chunk by chunk): the next session of this
        // name resumes from it. A tree that failed (a manifest that lies,
        // a disk full) leaves nothing.
        let worth_keeping = self.failed.is_none() && (self.counts.files > 0 || self.open.is_some());
        if !self.done && !worth_keeping {
            self.remove_staging();
        }
    }
}

/// The length of the manifest a tree's object (`name` ending in `/`)
/// starts with, as its header says; `None` for anything else (the object's
/// hash then covers all of it).
pub(crate) fn manifest_extent_of(name: &str, object: &[u8]) -> Option<u64> {
    if !name.ends_with(TREE_SUFFIX) {
        return None;
    }
    let len = manifest_len(object)?.ok()?;
    (len <= object.len() as u64).then_some(len)
}

/// The BLAKE3 hash a tree's receiver checks the `Close`'s against: its
/// manifest's, read from the part file (`size` bytes; the manifest is never
/// released from it). The manifest holds every file's chunk hashes and
/// each chunk is checked against its own, so this vouches for every byte
/// stored.
pub(crate) fn manifest_hash(part: &File, size: u64) -> io::Result<[u8; 32]> {
    let len = manifest_extent(part, size)?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; COPY_BYTES];
    let mut at = 0u64;
    while at < len {
        let n = ((len - at) as usize).min(buf.len());
        part.read_exact_at(&mut buf[..n], at)?;
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    Ok(*hasher.finalize().as_bytes())
}

/// Turns a verified part file holding a tree into the directory `target`
/// in one go (see [`Extractor`]); `staging` is the hidden directory beside
/// it to build in. The part file is left for the caller to remove.
#[cfg(test)]
pub(crate) fn extract(
    part: &File,
    size: u64,
    staging: &Path,
    target: &Path,
) -> io::Result<TreeCounts> {
    Extractor::new(staging.to_path_buf(), target.to_path_buf(), false).finish(part, size)
}

/// The manifest's length, from the first bytes of the part file (which
/// must be in), checked against the object's size.
pub(crate) fn manifest_extent(part: &File, size: u64) -> io::Result<u64> {
    let mut head = [0u8; 16];
    if size < head.len() as u64 {
        return Err(data_err(
            "the tree's object is shorter than a manifest".into(),
        ));
    }
    part.read_exact_at(&mut head, 0)?;
    let len = manifest_len(&head)
        .expect("16 bytes")
        .map_err(|e| data_err(e.to_string()))?;
    if len > size {
        return Err(data_err(format!(
            "the manifest claims {len} bytes of an object of {size}"
        )));
    }
    Ok(len)
}

fn read_manifest(part: &File, size: u64) -> io::Result<Manifest> {
    let len = manifest_extent(part, size)?;
    let len = usize::try_from(len).map_err(|_| data_err("manifest too large".into()))?;
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(len)
        .map_err(|_| data_err(format!("cannot allocate {len} bytes for the manifest")))?;
    bytes.resize(len, 0);
    part.read_exact_at(&mut bytes, 0)?;
    Manifest::decode(&bytes, size).map_err(|e| data_err(e.to_string()))
}

fn system_time(s: i64, ns: u32) -> SystemTime {
    let ns = Duration::from_nanos(u64::from(ns));
    if s >= 0 {
        UNIX_EPOCH + Duration::from_secs(s as u64) + ns
    } else {
        UNIX_EPOCH - Duration::from_secs(s.unsigned_abs()) + ns
    }
}

/// A file being extracted, and how many of its chunks are in.
struct OpenFile {
    file: File,
    done: usize,
}

/// Creates a directory or a symbolic link under `staging`.
fn create(e: &Entry, staging: &Path, counts: &mut TreeCounts) -> io::Result<()> {
    let path = staging.join(&e.path);
    let named = |err: io::Error| io::Error::new(err.kind(), format!("{}: {err}", e.path));
    match &e.kind {
        EntryKind::Dir => {
            std::fs::create_dir_all(&path).map_err(named)?;
            counts.dirs += 1;
        }
        EntryKind::Symlink { target } => {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(named)?;
            }
            std::os::unix::fs::symlink(target, &path).map_err(named)?;
            counts.symlinks += 1;
        }
        EntryKind::File { .. } => unreachable!("files are extracted chunk by chunk"),
    }
    Ok(())
}

/// Creates the (new) file `rel` under `staging`, with its parents.
/// A file every chunk of which was found, in order, in one file on this
/// disk that has exactly its size, mode and mtime and no other name
/// (an unchanged file of the version in place): that file is linked into
/// the staging directory instead of copied, and becomes the new version's
/// once the old tree is gone. Its chunks are taken off `verified`. Anything
/// else (a changed file, one shared with another name, an unsupported
/// file system) is copied as usual: false.
fn link_unchanged(
    verified: &mut std::collections::HashMap<u64, Source>,
    staging: &Path,
    e: &Entry,
    offset: u64,
    chunks: usize,
    cs: u64,
) -> bool {
    let Some(first) = verified.get(&offset) else {
        return false;
    };
    let path = first.path.clone();
    let whole = (0..chunks as u64).all(|c| {
        verified
            .get(&(offset + c * cs))
            .is_some_and(|s| s.path == path && s.at == c * cs)
    });
    let EntryKind::File { size, .. } = e.kind else {
        return false;
    };
    let same = std::fs::symlink_metadata(&*path).is_ok_and(|m| {
        m.is_file()
            && m.len() == size
            && m.nlink() == 1
            && m.mode() & 0o7777 == e.mode & 0o777
            && (m.mtime(), m.mtime_nsec()) == (e.mtime_s, i64::from(e.mtime_ns))
    });
    if !whole || !same {
        return false;
    }
    let dest = staging.join(&e.path);
    if let Some(parent) = dest.parent()
        && std::fs::create_dir_all(parent).is_err()
    {
        return false;
    }
    if std::fs::hard_link(&*path, &dest).is_err() {
        return false;
    }
    for c in 0..chunks as u64 {
        verified.remove(&(offset + c * cs));
    }
    true
}

fn create_file(staging: &Path, rel: &str) -> io::Result<File> {
    let path = staging.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    OpenOptions::new().write(true).create_new(true).open(&path)
}

/// Copies chunk `index` (`start..end` of a file at `offset` of the part
/// file) into `out`, checking it against its hash.
#[allow(clippy::too_many_arguments)]
fn copy_chunk(
    part: &File,
    out: &File,
    offset: u64,
    start: u64,
    end: u64,
    index: usize,
    want: &[u8; CHUNK_HASH_LEN],
    buf: &mut [u8],
) -> io::Result<()> {
    let mut hasher = blake3::Hasher::new();
    let mut at = start;
    while at < end {
        let n = ((end - at) as usize).min(buf.len());
        part.read_exact_at(&mut buf[..n], offset + at)?;
        hasher.update(&buf[..n]);
        out.write_all_at(&buf[..n], at)?;
        at += n as u64;
    }
    if hasher.finalize().as_bytes() != want {
        return Err(data_err(format!(
            "chunk {index} (bytes {start}..{end}) does not match its hash in the manifest"
        )));
    }
    Ok(())
}

/// Copies `len` bytes at `from` of `part` to `at` of `out`, in the kernel
/// where it can (`copy_file_range`: no copy through user space, a reflink
/// on file systems that share extents), else through `buf`.
fn copy_range(
    part: &File,
    out: &File,
    from: u64,
    at: u64,
    len: u64,
    buf: &mut [u8],
) -> io::Result<()> {
    let (mut off_in, mut off_out) = (from as i64, at as i64);
    let mut left = len as usize;
    while left > 0 {
        // SAFETY: both descriptors are ours; the offsets are local
        // variables the call updates.
        let n = unsafe {
            libc::copy_file_range(
                part.as_raw_fd(),
                &mut off_in,
                out.as_raw_fd(),
                &mut off_out,
                left,
                0,
            )
        };
        if n <= 0 {
            break; // unsupported here, or nothing copied: the slow way
        }
        left -= n as usize;
    }
    let mut done = len - left as u64;
    while done < len {
        let n = ((len - done) as usize).min(buf.len());
        part.read_exact_at(&mut buf[..n], from + done)?;
        out.write_all_at(&buf[..n], at + done)?;
        done += n as u64;
    }
    Ok(())
}

/// Releases a copied range of the part file, so the disk holds the object
/// once plus the file being copied; best effort (not every file system can).
fn punch_hole(part: &File, offset: u64, size: u64) {
    let (Ok(off), Ok(len)) = (i64::try_from(offset), i64::try_from(size)) else {
        return;
    };
    if len > 0 {
        // SAFETY: fallocate on a descriptor we own; no memory involved.
        unsafe {
            libc::fallocate(
                part.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off,
                len,
            )
        };
    }
}

/// Moves every entry of the staging directory into the target, file by
/// file (each rename atomic; files the tree does not name are kept), then
/// removes the staging directory. A directory of the tree where the target
/// has something else, or the reverse, is an error naming the path.
fn merge_in(manifest: &Manifest, staging: &Path, target: &Path) -> io::Result<()> {
    std::fs::create_dir_all(target)?;
    for e in &manifest.entries {
        let (from, to) = (staging.join(&e.path), target.join(&e.path));
        let there = std::fs::symlink_metadata(&to);
        match (&e.kind, there) {
            (EntryKind::Dir, Ok(m)) if m.is_dir() => {
                let mode = std::fs::Permissions::from_mode(e.mode & 0o777);
                std::fs::set_permissions(&to, mode)?;
            }
            (EntryKind::Dir, Err(err)) if err.kind() == io::ErrorKind::NotFound => {
                std::fs::rename(&from, &to)?;
            }
            (_, Ok(m)) if m.is_dir() => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{}: a directory is there; the tree has a file", e.path),
                ));
            }
            (EntryKind::Dir, _) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{}: a file is there; the tree has a directory", e.path),
                ));
            }
            // A file or link whose directory was moved in whole already
            // went with it.
            _ if from.symlink_metadata().is_err() => {}
            _ => {
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::rename(&from, &to)?;
            }
        }
    }
    std::fs::remove_dir_all(staging)
}

/// Puts the staging directory in the target's place: an atomic exchange
/// when a previous version is there (then removed), else a rename.
fn swap_in(staging: &Path, target: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(target) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::rename(staging, target),
        Err(e) => Err(e),
        Ok(m) if !m.is_dir() => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a directory", target.display()),
        )),
        Ok(_) => {
            let c = |p: &Path| {
                std::ffi::CString::new(p.as_os_str().as_bytes())
                    .map_err(|_| data_err("NUL in path".into()))
            };
            let (a, b) = (c(staging)?, c(target)?);
            // SAFETY: two valid NUL-terminated paths; AT_FDCWD-relative.
            let rc = unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            // The previous version now sits at the staging path.
            std::fs::remove_dir_all(staging)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, bytes: &[u8]) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }

    fn tree_into_part(object: &[u8], dir: &Path) -> File {
        let path = dir.join("part");
        std::fs::write(&path, object).unwrap();
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap()
    }

    #[test]
    fn the_index_vouches_for_untouched_files_only_and_held_chunks_are_found() {
        let src = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 13 % 251) as u8).collect();
        write(src.path(), "big.bin", &big);
        write(src.path(), "small.txt", b"hello");
        let t = TreeObject::build(src.path()).unwrap();
        let work = tempfile::tempdir().unwrap();
        let part = tree_into_part(t.as_slice(), work.path());
        let target = work.path().join("out");
        let size = t.as_slice().len() as u64;
        Extractor::new(work.path().join(".stage"), target.clone(), false)
            .finish(&part, size)
            .unwrap();
        let index = read_index(&target).expect("written once the tree is in");
        let manifest = read_manifest(&part, size).unwrap();
        let cs = u64::from(manifest.chunk_size);
        let meta = |rel: &str| std::fs::metadata(target.join(rel)).unwrap();
        let hashes = index.unchanged("big.bin", &meta("big.bin"), cs).unwrap();
        assert_eq!(hashes.len(), 3, "three chunks of 1 MiB");
        // Everything is held: the whole object but nothing is reported
        // past what the manifest lays out.
        let held = find_held(&manifest, std::slice::from_ref(&target), size, 0);
        assert_eq!(held.bytes, big.len() as u64 + 5);
        assert_eq!(held.covered, [(0, size)]);
        // A file written again (same bytes even) is no longer vouched for,
        // and its chunks are read: one changed chunk is not held.
        let mut changed = big.clone();
        changed[1_500_000] ^= 1;
        std::fs::write(target.join("big.bin"), &changed).unwrap();
        assert!(index.unchanged("big.bin", &meta("big.bin"), cs).is_none());
        let held = find_held(&manifest, std::slice::from_ref(&target), size, 0);
        assert_eq!(held.bytes, big.len() as u64 + 5 - (1 << 20));
        assert_eq!(held.sources.len(), 3, "two chunks of big.bin, small.txt");
    }

    #[test]
    fn a_tree_is_laid_out_and_extracted_byte_exact() {
        let src = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..3_000_123u32).map(|i| (i % 251) as u8).collect();
        write(src.path(), "big.bin", &big);
        write(src.path(), "d/small.txt", b"hello");
        write(src.path(), "d/empty", b"");
        write(src.path(), "Ü ñ/long name.txt", &[9; 70_000]);
        std::fs::create_dir_all(src.path().join("e/f")).unwrap();
        std::os::unix::fs::symlink("../big.bin", src.path().join("d/link")).unwrap();
        std::fs::set_permissions(
            src.path().join("d/small.txt"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let t = TreeObject::build(src.path()).unwrap();
        assert_eq!(t.counts, (4, 4, 1));
        let work = tempfile::tempdir().unwrap();
        let part = tree_into_part(t.as_slice(), work.path());
        let target = work.path().join("out");
        let counts = extract(
            &part,
            t.as_slice().len() as u64,
            &work.path().join(".stage"),
            &target,
        )
        .unwrap();
        assert_eq!(
            counts,
            TreeCounts {
                files: 4,
                dirs: 4,
                symlinks: 1
            }
        );
        assert_eq!(std::fs::read(target.join("big.bin")).unwrap(), big);
        assert_eq!(std::fs::read(target.join("d/small.txt")).unwrap(), b"hello");
        assert_eq!(std::fs::read(target.join("d/empty")).unwrap(), b"");
        assert_eq!(
            std::fs::read(target.join("Ü ñ/long name.txt")).unwrap(),
            vec![9; 70_000]
        );
        assert!(target.join("e/f").is_dir());
        assert_eq!(
            std::fs::read_link(target.join("d/link")).unwrap(),
            Path::new("../big.bin")
        );
        let mode = std::fs::metadata(target.join("d/small.txt"))
            .unwrap()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let (want, have) = (
            std::fs::metadata(src.path().join("big.bin"))
                .unwrap()
                .modified()
                .unwrap(),
            std::fs::metadata(target.join("big.bin"))
                .unwrap()
                .modified()
                .unwrap(),
        );
        assert_eq!(want, have);
        assert!(!work.path().join(".stage").exists());
        // A second version replaces the first in one exchange.
        write(src.path(), "d/small.txt", b"version 2");
        let t2 = TreeObject::build(src.path()).unwrap();
        let part2 = tree_into_part(t2.as_slice(), work.path());
        extract(
            &part2,
            t2.as_slice().len() as u64,
            &work.path().join(".stage"),
            &target,
        )
        .unwrap();
        assert_eq!(
            std::fs::read(target.join("d/small.txt")).unwrap(),
            b"version 2"
        );
        assert!(!work.path().join(".stage").exists());
    }

    #[test]
    fn large_files_sit_page_aligned_and_small_ones_packed() {
        let src = tempfile::tempdir().unwrap();
        write(src.path(), "a", &[1; 100]);
        write(src.path(), "b", &[2; MAP_MIN as usize + 1]);
        write(src.path(), "c", &[3; 10]);
        let t = TreeObject::build(src.path()).unwrap();
        let object = t.as_slice();
        let m = Manifest::decode(
            &object[..manifest_len(object).unwrap().unwrap() as usize],
            object.len() as u64,
        )
        .unwrap();
        let offsets: Vec<u64> = m
            .entries
            .iter()
            .map(|e| match e.kind {
                EntryKind::File { offset, .. } => offset,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(offsets[0], m.encoded_len() as u64);
        assert_eq!(offsets[1] % page_size(), 0);
        // The mapped file's last page is its own: the next file starts after it.
        assert_eq!(
            offsets[2],
            (offsets[1] + MAP_MIN + 1).next_multiple_of(page_size())
        );
        assert_eq!(&object[offsets[1] as usize..][..3], &[2, 2, 2]);
        assert_eq!(&object[offsets[2] as usize..], &[3; 10]);
        assert_eq!(object.len() as u64, offsets[2] + 10);
    }

    #[test]
    fn what_cannot_travel_is_refused_by_name() {
        let src = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.path().join("abs")).unwrap();
        let e = TreeObject::build(src.path()).err().unwrap().to_string();
        assert!(e.contains("abs") && e.contains("out of the tree"), "{e}");
        std::fs::remove_file(src.path().join("abs")).unwrap();
        std::os::unix::fs::symlink("../../x", src.path().join("up")).unwrap();
        assert!(TreeObject::build(src.path()).is_err());
        std::fs::remove_file(src.path().join("up")).unwrap();
        let fifo = std::ffi::CString::new(src.path().join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let e = TreeObject::build(src.path()).err().unwrap().to_string();
        assert!(e.contains("fifo") && e.contains("FIFO"), "{e}");
    }

    #[test]
    fn a_manifest_that_lies_about_a_chunk_is_named_and_nothing_is_put_in_place() {
        let src = tempfile::tempdir().unwrap();
        write(src.path(), "ok.bin", b"fine");
        write(src.path(), "z/liar.bin", &[5; 5000]);
        let t = TreeObject::build(src.path()).unwrap();
        let mut object = t.as_slice().to_vec();
        let last = object.len() - 1;
        object[last] ^= 1; // the data no longer matches the manifest's hash
        let work = tempfile::tempdir().unwrap();
        let part = tree_into_part(&object, work.path());
        let target = work.path().join("out");
        let e = extract(
            &part,
            object.len() as u64,
            &work.path().join(".stage"),
            &target,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("z/liar.bin") && e.to_string().contains("chunk 0"),
            "{e}"
        );
        assert!(!target.exists());
        assert!(!work.path().join(".stage").exists());
    }
}
