//! Resume and delta on the receiver: which of a tree's chunks this disk
//! holds already ([`find_held`]), and the index written beside a tree
//! once it is in place, so the next version need not read the files it
//! vouches for.

use super::{CHUNK_HASH_LEN, Entry, EntryKind, Manifest, chunk_count, data_err};
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Resume and delta: finds the chunks of `manifest`'s files that lie on
/// this disk already, under the same relative path in one of `roots` (the
/// tree in place, staging directories of interrupted sessions), each
/// checked against its hash (only chunks from object byte `from` on: the
/// bytes before it are in already). Returns the byte ranges of the object
/// that need no packet (those chunks, the manifest and the zero padding
/// between files), sorted and merged, and where each chunk found lies:
/// the extractor copies it from there (in the kernel, a reflink where the
/// file system shares extents), not from the part file, which never holds
/// it. Runs on every core. (The tree in place must not change while its
/// next version arrives: what was checked here is what is copied.)
pub(crate) fn find_held(manifest: &Manifest, roots: &[PathBuf], size: u64, from: u64) -> Held {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let roots: Vec<PathBuf> = roots
        .iter()
        .filter_map(|r| {
            std::fs::symlink_metadata(r)
                .ok()
                .filter(|m| m.is_dir())
                .and_then(|_| r.canonicalize().ok())
        })
        .collect();
    let files: Vec<&Entry> = manifest
        .entries
        .iter()
        .filter(|e| matches!(e.kind, EntryKind::File { size, .. } if size > 0))
        .collect();
    // The tree in place, as it was when it went in: files unchanged since
    // need not be read to know their chunks.
    let index = roots
        .first()
        .and_then(|target| read_index(target).map(|i| (target, i)));
    let next = AtomicUsize::new(0);
    let (by_index, hashed) = (AtomicUsize::new(0), std::sync::atomic::AtomicU64::new(0));
    let started = std::time::Instant::now();
    let found = Mutex::new((Vec::new(), Vec::new(), 0u64));
    let cs = u64::from(manifest.chunk_size);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers.min(files.len()) {
            scope.spawn(|| {
                let mut buf = vec![0u8; cs as usize];
                let mut ranges: Vec<(u64, u64)> = Vec::new();
                let mut sources: Vec<(u64, Source)> = Vec::new();
                let mut bytes = 0u64;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(e) = files.get(i) else { break };
                    let EntryKind::File {
                        offset,
                        size,
                        chunks,
                    } = &e.kind
                    else {
                        continue;
                    };
                    let candidates: Vec<(std::sync::Arc<PathBuf>, File)> = roots
                        .iter()
                        .filter_map(|root| open_inside(root, &e.path))
                        .collect();
                    // The version in place, unchanged since it went in: its
                    // chunk hashes are the index's.
                    let known = index.as_ref().and_then(|(target, index)| {
                        let (path, file) = candidates.first()?;
                        path.starts_with(target).then_some(())?;
                        index.unchanged(&e.path, &file.metadata().ok()?, cs)
                    });
                    if known.is_some() {
                        by_index.fetch_add(1, Ordering::Relaxed);
                    }
                    for (c, want) in chunks.iter().enumerate() {
                        let start = c as u64 * cs;
                        let end = (start + cs).min(*size);
                        if offset + end <= from {
                            continue;
                        }
                        let hit = if let Some(hashes) = known {
                            (hashes.get(c) == Some(want)).then(|| &candidates[0])
                        } else {
                            let piece = &mut buf[..(end - start) as usize];
                            hashed.fetch_add(piece.len() as u64, Ordering::Relaxed);
                            candidates.iter().find(|(_, f)| {
                                f.read_exact_at(piece, start).is_ok()
                                    && blake3::hash(piece).as_bytes() == want
                            })
                        };
                        if let Some((path, _)) = hit {
                            ranges.push((offset + start, end - start));
                            sources.push((
                                offset + start,
                                Source {
                                    path: path.clone(),
                                    at: start,
                                },
                            ));
                            bytes += end - start;
                        }
                    }
                }
                let mut all = found.lock().expect("no worker panics holding it");
                all.0.extend(ranges);
                all.1.extend(sources);
                all.2 += bytes;
            });
        }
    });
    let (mut ranges, sources, bytes) = found.into_inner().expect("workers are done");
    tracing::info!(
        "looked for the tree's {} files on this disk in {:.3} s: {} vouched for by the index, \
         {} bytes read and hashed, {bytes} bytes found",
        files.len(),
        started.elapsed().as_secs_f64(),
        by_index.into_inner(),
        hashed.into_inner()
    );
    // What no file covers: the manifest, and the padding between files.
    let mut laid: Vec<(u64, u64)> = manifest
        .entries
        .iter()
        .filter_map(|e| match e.kind {
            EntryKind::File { offset, size, .. } if size > 0 => Some((offset, size)),
            _ => None,
        })
        .collect();
    laid.sort_unstable();
    let mut at = 0u64;
    for (offset, len) in laid {
        if offset > at {
            ranges.push((at, offset - at));
        }
        at = at.max(offset + len);
    }
    if size > at {
        ranges.push((at, size - at));
    }
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, len) in ranges {
        match merged.last_mut() {
            Some((s, l)) if start <= *s + *l => *l = (*l).max(start + len - *s),
            _ => merged.push((start, len)),
        }
    }
    Held {
        covered: merged,
        sources,
        bytes,
    }
}

/// Where a chunk found on this disk lies: a file (by path: thousands of
/// them are not held open) and the chunk's offset in it.
#[derive(Clone, Debug)]
pub(crate) struct Source {
    pub(super) path: std::sync::Arc<PathBuf>,
    pub(super) at: u64,
}

/// What [`find_held`] found.
pub(crate) struct Held {
    /// Byte ranges of the object that need no packet, sorted, merged.
    pub(crate) covered: Vec<(u64, u64)>,
    /// Where each chunk found lies, by its offset in the object.
    pub(crate) sources: Vec<(u64, Source)>,
    /// Their bytes.
    pub(crate) bytes: u64,
}

/// Where the index of the tree at `target` lies: beside it, hidden.
fn index_path(target: &Path) -> Option<PathBuf> {
    let name = target.file_name()?.to_str()?;
    Some(target.with_file_name(format!(".{name}.rmcast-index")))
}

/// Resume and delta: what a receiver wrote where, once a tree is in place
/// (beside it, `.NAME.rmcast-index`): each file's identity and times when
/// it went in, with its chunk hashes. A file whose device, inode, size,
/// mtime and ctime are still those is the file the index describes, and
/// its chunks need not be read again (git's and rsync's quick check). Any
/// write changes the ctime; one in the same clock tick as the recorded
/// ctime could hide, so only files whose ctime lies [`RACY`] before the
/// index was written are recorded, after a second look that far apart
/// (git's "racy clean" rule).
pub(super) struct Index {
    written_ns: i128,
    files: std::collections::HashMap<String, (Vec<i64>, Vec<[u8; CHUNK_HASH_LEN]>)>,
}

impl Index {
    /// The chunk hashes of `rel` if the file `meta` describes is unchanged
    /// since the index was written, with chunks of `cs` bytes.
    pub(super) fn unchanged(
        &self,
        rel: &str,
        meta: &std::fs::Metadata,
        cs: u64,
    ) -> Option<&[[u8; CHUNK_HASH_LEN]]> {
        let (stat, hashes) = self.files.get(rel)?;
        let now = stat_of(meta);
        (*stat == now
            && ctime_ns(meta) + RACY.as_nanos() as i128 <= self.written_ns
            && hashes.len() as u64 == chunk_count(meta.len(), cs as u32))
        .then_some(hashes.as_slice())
    }
}

/// How long before the index's writing a recorded file's ctime must lie:
/// well past the kernel's timestamp granularity (a jiffy, 1–10 ms).
const RACY: Duration = Duration::from_millis(20);

fn ctime_ns(m: &std::fs::Metadata) -> i128 {
    i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec())
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// What identifies a file's content on this disk without reading it.
fn stat_of(m: &std::fs::Metadata) -> Vec<i64> {
    vec![
        m.dev() as i64,
        m.ino() as i64,
        m.len() as i64,
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    ]
}

pub(super) fn read_index(target: &Path) -> Option<Index> {
    let bytes = std::fs::read(index_path(target)?).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    if v["v"] != 1 {
        return None;
    }
    let written_ns = i128::from(v["written_ns"].as_i64()?);
    let mut files = std::collections::HashMap::new();
    for (rel, f) in v["files"].as_object()? {
        let stat: Vec<i64> = f["stat"]
            .as_array()?
            .iter()
            .map(serde_json::Value::as_i64)
            .collect::<Option<_>>()?;
        let hex = f["chunks"].as_str()?.as_bytes();
        let hashes = hex
            .chunks(2 * CHUNK_HASH_LEN)
            .map(|h| {
                let mut out = [0u8; CHUNK_HASH_LEN];
                for (i, pair) in h.chunks(2).enumerate() {
                    let s = std::str::from_utf8(pair).ok()?;
                    *out.get_mut(i)? = u8::from_str_radix(s, 16).ok()?;
                }
                (h.len() == 2 * CHUNK_HASH_LEN).then_some(out)
            })
            .collect::<Option<Vec<_>>>()?;
        files.insert(rel.clone(), (stat, hashes));
    }
    Some(Index { written_ns, files })
}

/// Writes the index of the tree just put in place at `target` (atomically:
/// a temporary file renamed over the last one).
pub(super) fn write_index(manifest: &Manifest, target: &Path) -> io::Result<()> {
    use std::fmt::Write as _;
    let path = index_path(target).ok_or_else(|| data_err("the tree has no name".into()))?;
    let stat = |rel: &str| {
        std::fs::symlink_metadata(target.join(rel))
            .ok()
            .filter(std::fs::Metadata::is_file)
    };
    let first: Vec<Option<std::fs::Metadata>> = manifest
        .entries
        .iter()
        .map(|e| match e.kind {
            EntryKind::File { .. } => stat(&e.path),
            _ => None,
        })
        .collect();
    // Files changed just now (linked, written) wait out the racy interval,
    // then are looked at again: one written meanwhile is not recorded.
    if first
        .iter()
        .flatten()
        .any(|m| ctime_ns(m) + RACY.as_nanos() as i128 > now_ns())
    {
        std::thread::sleep(RACY);
    }
    let written_ns = now_ns();
    let mut files = serde_json::Map::new();
    for (e, first) in manifest.entries.iter().zip(first) {
        let EntryKind::File { chunks, .. } = &e.kind else {
            continue;
        };
        let (Some(first), Some(meta)) = (first, stat(&e.path)) else {
            continue;
        };
        if stat_of(&first) != stat_of(&meta)
            || ctime_ns(&meta) + RACY.as_nanos() as i128 > written_ns
        {
            continue;
        }
        let mut hex = String::with_capacity(chunks.len() * 2 * CHUNK_HASH_LEN);
        for h in chunks {
            for b in h {
                let _ = write!(hex, "{b:02x}");
            }
        }
        files.insert(
            e.path.clone(),
            serde_json::json!({ "stat": stat_of(&meta), "chunks": hex }),
        );
    }
    let v = serde_json::json!({ "v": 1, "written_ns": written_ns as i64, "files": files });
    let tmp = path.with_extension("rmcast-index-new");
    std::fs::write(&tmp, serde_json::to_vec(&v).map_err(io::Error::other)?)?;
    std::fs::rename(&tmp, &path)
}

/// Opens `rel` under `root` for reading, if it is a regular file that
/// really lies inside `root` (no symbolic link leads out of it).
fn open_inside(root: &Path, rel: &str) -> Option<(std::sync::Arc<PathBuf>, File)> {
    let path = root.join(rel);
    let real = path.canonicalize().ok()?;
    if !real.starts_with(root) {
        return None;
    }
    let file = File::open(&real).ok()?;
    file.metadata().ok().filter(|m| m.is_file())?;
    Some((std::sync::Arc::new(real), file))
}
