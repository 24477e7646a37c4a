//! What a [`Sink`] does with the bytes of an object: store, stage, hash,
//! read back, verify and commit.

use super::{HeldReport, Sink};
use rmcast_proto::HASH_LEN;
use std::fs::File;
use std::io;
use std::path::PathBuf;

/// A relay's stage: what it forwards waits for its write, so it gathers
/// less (2.6 ms at 100 Mbit/s, where 256 KiB held every relay of a
/// cascade back 21 ms).
const RELAY_STAGE_BYTES: usize = 32 << 10;

/// Out-of-order bytes are read back for hashing once this much of them has
/// become contiguous (after a repair filled the gap before them).
const CATCH_UP_BYTES: u64 = 4 << 20;

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
