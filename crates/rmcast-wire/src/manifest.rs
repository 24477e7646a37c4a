//! The manifest of a directory tree sent as one object.
//!
//! A tree travels as one logical object so that the protocols need not
//! change: the manifest first, then every regular file's bytes at the
//! offset the manifest gives. The object's BLAKE3 hash (in `Close`, and
//! the signature, if any) covers the manifest with the data.
//!
//! ```text
//! header   magic "RMTREE\0\x01" (8) | manifest length u64 | chunk size u32 | entries u32
//! entry    kind u8 | mode u32 | mtime s i64 | mtime ns u32 | path length u16 | path (UTF-8)
//!   file     offset u64 | size u64 | ceil(size / chunk size) BLAKE3 chunk hashes (32 each)
//!   symlink  target length u16 | target (UTF-8)
//!   dir      nothing more
//! ```
//!
//! All integers big-endian. The decoder takes network input: every length
//! is checked before it is read, and a manifest is accepted only when it
//! can be stored safely and exactly: paths are relative, `/`-separated,
//! without empty, `.` or `..` components or NUL, strictly sorted (so no
//! two entries share a path) and none passes through a file or a symbolic
//! link; symbolic links point inside the tree; files lie after the
//! manifest, inside the object, in entry order, without overlapping; and
//! each file has exactly as many chunk hashes as its size needs.

use crate::DecodeError;
use crate::cursor::Reader;

/// The first eight bytes of every manifest (version 1).
pub const MANIFEST_MAGIC: [u8; 8] = *b"RMTREE\x00\x01";
/// Bytes of the fixed header.
pub const MANIFEST_HEADER_LEN: usize = 24;
/// The smallest and largest chunk sizes a manifest may declare.
pub const CHUNK_SIZE_RANGE: core::ops::RangeInclusive<u32> = 4096..=(1 << 30);
/// Longest path, and longest symbolic link target, in bytes.
pub const MAX_PATH: usize = 4096;
/// Longest path component in bytes (as Linux file systems allow).
pub const MAX_COMPONENT: usize = 255;
/// Bytes of one chunk hash.
pub const CHUNK_HASH_LEN: usize = 32;

/// What an entry is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file: `size` bytes at `offset` of the object, and the
    /// BLAKE3 hash of each `chunk_size` piece (the last may be shorter).
    File {
        /// Where its bytes start in the object.
        offset: u64,
        /// Its length in bytes.
        size: u64,
        /// One hash per chunk, in order.
        chunks: Vec<[u8; CHUNK_HASH_LEN]>,
    },
    /// A directory (listed so that empty ones arrive, and with its mode).
    Dir,
    /// A symbolic link to a path inside the tree, relative to the link's
    /// own directory.
    Symlink {
        /// The link's target as stored.
        target: String,
    },
}

impl EntryKind {
    fn code(&self) -> u8 {
        match self {
            EntryKind::File { .. } => 0,
            EntryKind::Dir => 1,
            EntryKind::Symlink { .. } => 2,
        }
    }
}

/// One path of the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Relative path, `/`-separated.
    pub path: String,
    /// Permission bits (`st_mode & 0o7777`); receivers apply `& 0o777`.
    pub mode: u32,
    /// Modification time: seconds since the epoch (may be negative).
    pub mtime_s: i64,
    /// Modification time: nanoseconds (below 10⁹).
    pub mtime_ns: u32,
    /// File, directory or symbolic link.
    pub kind: EntryKind,
}

/// A tree's manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// Bytes per chunk hash.
    pub chunk_size: u32,
    /// Every entry, sorted by path (byte order).
    pub entries: Vec<Entry>,
}

/// Why bytes are not a manifest that can be stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The bytes are not (a complete) manifest.
    #[error("malformed manifest: {0}")]
    Malformed(DecodeError),
    /// An entry's path cannot be stored safely.
    #[error("unsafe path {path:?} in the manifest: {why}")]
    UnsafePath {
        /// The path as sent.
        path: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The entries do not describe the object consistently.
    #[error("inconsistent manifest at {path:?}: {why}")]
    Inconsistent {
        /// The entry concerned.
        path: String,
        /// What does not fit.
        why: &'static str,
    },
}

impl From<DecodeError> for ManifestError {
    fn from(e: DecodeError) -> Self {
        ManifestError::Malformed(e)
    }
}

/// Number of chunks of a file of `size` bytes.
#[must_use]
pub fn chunk_count(size: u64, chunk_size: u32) -> u64 {
    size.div_ceil(u64::from(chunk_size.max(1)))
}

/// The manifest's total length from the first 16 bytes of the object, or
/// `None` while fewer have arrived.
///
/// # Errors
/// Not a manifest (bad magic) or a length shorter than its header.
pub fn manifest_len(prefix: &[u8]) -> Option<Result<u64, ManifestError>> {
    let head = prefix.get(..16)?;
    if head[..8] != MANIFEST_MAGIC {
        return Some(Err(ManifestError::Malformed(DecodeError::BadMagic)));
    }
    let len = u64::from_be_bytes(head[8..16].try_into().expect("8 bytes"));
    if len < MANIFEST_HEADER_LEN as u64 {
        return Some(Err(ManifestError::Malformed(DecodeError::BadField(
            "manifest length",
        ))));
    }
    Some(Ok(len))
}

impl Manifest {
    /// Bytes [`Manifest::encode`] writes.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        MANIFEST_HEADER_LEN
            + self
                .entries
                .iter()
                .map(|e| {
                    19 + e.path.len()
                        + match &e.kind {
                            EntryKind::File { chunks, .. } => 16 + CHUNK_HASH_LEN * chunks.len(),
                            EntryKind::Dir => 0,
                            EntryKind::Symlink { target } => 2 + target.len(),
                        }
                })
                .sum::<usize>()
    }

    /// The manifest's bytes. It does not check what [`Manifest::decode`]
    /// checks: a sender builds a valid one, and a test may build one that lies.
    ///
    /// # Panics
    /// If a path or link target is longer than 65,535 bytes or there are
    /// more than 2³² entries (the sender refuses such trees first).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&MANIFEST_MAGIC);
        out.extend_from_slice(&(self.encoded_len() as u64).to_be_bytes());
        out.extend_from_slice(&self.chunk_size.to_be_bytes());
        let count = u32::try_from(self.entries.len()).expect("at most 2^32 entries");
        out.extend_from_slice(&count.to_be_bytes());
        for e in &self.entries {
            out.push(e.kind.code());
            out.extend_from_slice(&e.mode.to_be_bytes());
            out.extend_from_slice(&e.mtime_s.to_be_bytes());
            out.extend_from_slice(&e.mtime_ns.to_be_bytes());
            let len = u16::try_from(e.path.len()).expect("path of at most 65535 bytes");
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(e.path.as_bytes());
            match &e.kind {
                EntryKind::File {
                    offset,
                    size,
                    chunks,
                } => {
                    out.extend_from_slice(&offset.to_be_bytes());
                    out.extend_from_slice(&size.to_be_bytes());
                    for c in chunks {
                        out.extend_from_slice(c);
                    }
                }
                EntryKind::Dir => {}
                EntryKind::Symlink { target } => {
                    let len = u16::try_from(target.len()).expect("target of at most 65535 bytes");
                    out.extend_from_slice(&len.to_be_bytes());
                    out.extend_from_slice(target.as_bytes());
                }
            }
        }
        debug_assert_eq!(out.len(), self.encoded_len());
        out
    }

    /// Decodes and checks a manifest for an object of `object_len` bytes
    /// (`bytes` is exactly the manifest, as [`manifest_len`] measured it).
    ///
    /// # Errors
    /// Malformed bytes, an unsafe path or link, or entries that do not
    /// describe the object consistently (see the module's rules).
    pub fn decode(bytes: &[u8], object_len: u64) -> Result<Manifest, ManifestError> {
        let mut r = Reader::new(bytes);
        if r.array::<8>()? != MANIFEST_MAGIC {
            return Err(DecodeError::BadMagic.into());
        }
        if r.u64()? != bytes.len() as u64 {
            return Err(DecodeError::BadField("manifest length").into());
        }
        let chunk_size = r.u32()?;
        if !CHUNK_SIZE_RANGE.contains(&chunk_size) {
            return Err(DecodeError::BadField("chunk size").into());
        }
        let count = r.u32()? as usize;
        // Every entry takes at least 20 bytes: refuse a count the bytes
        // cannot hold before allocating for it.
        if count > r.remaining() / 20 {
            return Err(DecodeError::Truncated.into());
        }
        let mut entries: Vec<Entry> = Vec::with_capacity(count);
        // Where the next file may start: after the manifest, then after
        // the previous file.
        let mut next_offset = bytes.len() as u64;
        for _ in 0..count {
            let kind = r.u8()?;
            let mode = r.u32()?;
            let mtime_s = r.u64()? as i64;
            let mtime_ns = r.u32()?;
            let path_len = usize::from(r.u16()?);
            let path = core::str::from_utf8(r.bytes(path_len)?)
                .map_err(|_| DecodeError::BadText)?
                .to_owned();
            let bad = |why| ManifestError::Inconsistent {
                path: path.clone(),
                why,
            };
            check_path(&path)?;
            if mode > 0o7777 {
                return Err(bad("mode has bits beyond 0o7777"));
            }
            if mtime_ns >= 1_000_000_000 {
                return Err(bad("mtime nanoseconds of 10^9 or more"));
            }
            if let Some(prev) = entries.last()
                && prev.path.as_bytes() >= path.as_bytes()
            {
                return Err(bad("entries not strictly sorted by path (or a path twice)"));
            }
            check_ancestors(&entries, &path)?;
            let kind = match kind {
                0 => {
                    let offset = r.u64()?;
                    let size = r.u64()?;
                    let end = offset
                        .checked_add(size)
                        .ok_or_else(|| bad("offset plus size overflows"))?;
                    if offset < next_offset {
                        return Err(bad("file overlaps the manifest or the previous file"));
                    }
                    if end > object_len {
                        return Err(bad("file extends beyond the object"));
                    }
                    next_offset = end;
                    let n = chunk_count(size, chunk_size);
                    if n > (r.remaining() / CHUNK_HASH_LEN) as u64 {
                        return Err(DecodeError::Truncated.into());
                    }
                    let chunks = (0..n)
                        .map(|_| r.array::<CHUNK_HASH_LEN>())
                        .collect::<Result<Vec<_>, _>>()?;
                    EntryKind::File {
                        offset,
                        size,
                        chunks,
                    }
                }
                1 => EntryKind::Dir,
                2 => {
                    let len = usize::from(r.u16()?);
                    let target = core::str::from_utf8(r.bytes(len)?)
                        .map_err(|_| DecodeError::BadText)?
                        .to_owned();
                    check_link(&path, &target)?;
                    EntryKind::Symlink { target }
                }
                _ => return Err(DecodeError::BadField("entry kind").into()),
            };
            entries.push(Entry {
                path,
                mode,
                mtime_s,
                mtime_ns,
                kind,
            });
        }
        r.finish()?;
        Ok(Manifest {
            chunk_size,
            entries,
        })
    }
}

/// A path a receiver may create under its output directory.
///
/// # Errors
/// Empty, too long, absolute, NUL, an empty, `.` or `..` component, or a
/// component longer than 255 bytes.
pub fn check_path(path: &str) -> Result<(), ManifestError> {
    let unsafe_path = |why| ManifestError::UnsafePath {
        path: path.to_owned(),
        why,
    };
    if path.is_empty() {
        return Err(unsafe_path("empty"));
    }
    if path.len() > MAX_PATH {
        return Err(unsafe_path("longer than 4096 bytes"));
    }
    if path.contains('\0') {
        return Err(unsafe_path("contains NUL"));
    }
    if path.starts_with('/') {
        return Err(unsafe_path("absolute"));
    }
    for part in path.split('/') {
        match part {
            "" => return Err(unsafe_path("an empty component")),
            "." | ".." => return Err(unsafe_path("a `.` or `..` component")),
            p if p.len() > MAX_COMPONENT => {
                return Err(unsafe_path("a component longer than 255 bytes"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// No entry passes through a file or a symbolic link: every listed
/// ancestor of `path` must be a directory. (Entries are sorted, and an
/// ancestor sorts before its descendants, so it is already in `entries`.)
fn check_ancestors(entries: &[Entry], path: &str) -> Result<(), ManifestError> {
    for (i, _) in path.match_indices('/') {
        let ancestor = &path[..i];
        if let Ok(at) = entries.binary_search_by(|e| e.path.as_bytes().cmp(ancestor.as_bytes()))
            && entries[at].kind != EntryKind::Dir
        {
            return Err(ManifestError::UnsafePath {
                path: path.to_owned(),
                why: "it passes through a file or a symbolic link",
            });
        }
    }
    Ok(())
}

/// A symbolic link at `path` whose `target` stays inside the tree.
///
/// # Errors
/// An empty, absolute or too long target, NUL, or one that climbs out of
/// the tree's root.
pub fn check_link(path: &str, target: &str) -> Result<(), ManifestError> {
    let escape = |why| ManifestError::UnsafePath {
        path: path.to_owned(),
        why,
    };
    if target.is_empty() || target.len() > MAX_PATH || target.contains('\0') {
        return Err(escape("symbolic link target empty, too long or with NUL"));
    }
    if target.starts_with('/') {
        return Err(escape("symbolic link to an absolute path"));
    }
    // Depth of the link's directory below the root, then walk the target.
    let mut depth = path.matches('/').count();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| escape("symbolic link that leads out of the tree"))?;
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn file(path: &str, offset: u64, size: u64) -> Entry {
        Entry {
            path: path.into(),
            mode: 0o644,
            mtime_s: 1_700_000_000,
            mtime_ns: 5,
            kind: EntryKind::File {
                offset,
                size,
                chunks: vec![[7; 32]; chunk_count(size, 4096) as usize],
            },
        }
    }

    fn entry(path: &str, kind: EntryKind) -> Entry {
        Entry {
            path: path.into(),
            mode: 0o755,
            mtime_s: -3,
            mtime_ns: 999_999_999,
            kind,
        }
    }

    fn sample() -> Manifest {
        let mut m = Manifest {
            chunk_size: 4096,
            entries: vec![
                entry("a", EntryKind::Dir),
                file("a/b.bin", 0, 10_000),
                entry("a/empty", EntryKind::Dir),
                entry(
                    "a/link",
                    EntryKind::Symlink {
                        target: "../c/ü".into(),
                    },
                ),
                file("c/ü", 0, 0),
            ],
        };
        let start = m.encoded_len() as u64;
        if let EntryKind::File { offset, .. } = &mut m.entries[1].kind {
            *offset = start;
        }
        if let EntryKind::File { offset, .. } = &mut m.entries[4].kind {
            *offset = start + 10_000;
        }
        m
    }

    #[test]
    fn a_manifest_round_trips_and_measures_itself() {
        let m = sample();
        let bytes = m.encode();
        assert_eq!(bytes.len(), m.encoded_len());
        assert_eq!(
            manifest_len(&bytes[..16]).unwrap().unwrap(),
            bytes.len() as u64
        );
        assert!(manifest_len(&bytes[..15]).is_none());
        let object_len = bytes.len() as u64 + 10_000;
        assert_eq!(Manifest::decode(&bytes, object_len).unwrap(), m);
    }

    #[test]
    fn lies_about_the_object_are_refused_naming_the_entry() {
        let m = sample();
        let bytes = m.encode();
        let short = bytes.len() as u64 + 9_999;
        let e = Manifest::decode(&bytes, short).unwrap_err();
        assert!(
            e.to_string().contains("a/b.bin") && e.to_string().contains("beyond"),
            "{e}"
        );
        let mut overlap = m.clone();
        if let EntryKind::File { offset, .. } = &mut overlap.entries[4].kind {
            *offset -= 1;
        }
        let e = Manifest::decode(&overlap.encode(), u64::MAX).unwrap_err();
        assert!(e.to_string().contains("overlaps"), "{e}");
        let mut inside = m.clone();
        if let EntryKind::File { offset, .. } = &mut inside.entries[1].kind {
            *offset = 3;
        }
        assert!(Manifest::decode(&inside.encode(), u64::MAX).is_err());
        let mut hashes = m.clone();
        if let EntryKind::File { chunks, .. } = &mut hashes.entries[1].kind {
            chunks.pop();
        }
        assert!(Manifest::decode(&hashes.encode(), u64::MAX).is_err());
    }

    #[test]
    fn unsafe_paths_and_escaping_links_are_refused() {
        for bad in [
            "",
            "/etc/x",
            "a/../b",
            "./a",
            "a//b",
            "a/",
            "a\0b",
            "..",
            &"x".repeat(256),
        ] {
            assert!(check_path(bad).is_err(), "{bad:?}");
        }
        check_path("a/ü/long name with spaces.txt").unwrap();
        for (path, target) in [
            ("l", "/etc"),
            ("l", ".."),
            ("a/l", "../../x"),
            ("l", "a/../../x"),
        ] {
            assert!(check_link(path, target).is_err(), "{path} -> {target}");
        }
        for (path, target) in [
            ("l", "a"),
            ("a/l", "../b"),
            ("a/b/l", "../../c/./d"),
            ("l", "."),
        ] {
            check_link(path, target).unwrap();
        }
        // Through a file or a link, unsorted, or twice.
        for entries in [
            vec![file("a", 100, 0), file("a/b", 100, 0)],
            vec![
                entry("a", EntryKind::Symlink { target: "b".into() }),
                entry("a/c", EntryKind::Dir),
            ],
            vec![entry("b", EntryKind::Dir), entry("a", EntryKind::Dir)],
            vec![entry("a", EntryKind::Dir), entry("a", EntryKind::Dir)],
        ] {
            let m = Manifest {
                chunk_size: 4096,
                entries,
            };
            assert!(Manifest::decode(&m.encode(), 1 << 20).is_err(), "{m:?}");
        }
    }

    #[test]
    fn case_differences_are_distinct_paths() {
        let mut m = Manifest {
            chunk_size: 4096,
            entries: vec![file("A.txt", 0, 1), file("a.txt", 0, 1)],
        };
        let start = m.encoded_len() as u64;
        for (i, e) in m.entries.iter_mut().enumerate() {
            if let EntryKind::File { offset, .. } = &mut e.kind {
                *offset = start + i as u64;
            }
        }
        assert_eq!(Manifest::decode(&m.encode(), start + 2).unwrap(), m);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), len in any::<u64>()) {
            let _ = manifest_len(&bytes);
            let _ = Manifest::decode(&bytes, len);
        }

        #[test]
        fn a_damaged_manifest_never_panics(flip in 0usize..400, bit in 0u8..8, cut in 0usize..400) {
            let bytes = sample().encode();
            let mut damaged = bytes.clone();
            let i = flip % damaged.len();
            damaged[i] ^= 1 << bit;
            let _ = Manifest::decode(&damaged, u64::MAX);
            let _ = Manifest::decode(&bytes[..cut.min(bytes.len())], u64::MAX);
        }

        #[test]
        fn generated_trees_round_trip(names in proptest::collection::btree_set("[a-zA-Z0-9é_. -]{1,12}", 0..20), sizes in proptest::collection::vec(0u64..20_000, 20)) {
            let names: Vec<String> = names.into_iter().filter(|n| n != "." && n != "..").collect();
            let mut m = Manifest {
                chunk_size: 4096,
                entries: names.iter().zip(&sizes).map(|(n, &s)| file(n, 0, s)).collect(),
            };
            let mut at = m.encoded_len() as u64;
            for e in &mut m.entries {
                if let EntryKind::File { offset, size, .. } = &mut e.kind {
                    *offset = at;
                    at += *size;
                }
            }
            let bytes = m.encode();
            prop_assert_eq!(Manifest::decode(&bytes, at).unwrap(), m);
        }
    }
}
