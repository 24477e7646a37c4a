//! The partial file an object is written into: staged writes, the hash
//! of its in-order prefix, a tree's extraction and its search for held chunks.

use super::STAGE_BYTES;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// A partial file: removed on drop unless it was committed.
pub(crate) struct Part {
    pub(super) file: File,
    /// The hidden part file's path (`None`: an anonymous memfd).
    pub(super) temp: Option<PathBuf>,
    pub(super) final_path: PathBuf,
    pub(super) size: u64,
    pub(super) committed: bool,
    /// A file of the offered name was there at the offer: the commit
    /// replaces it (the new version of the same path).
    pub(super) replaces: bool,
    /// The object is a directory tree (an offered name ending in `/`):
    /// extracted while it arrives into a staging directory beside
    /// `final_path`.
    pub(super) tree: Option<Box<crate::tree::Extractor>>,
    /// Bytes received in order but not yet written, starting at `stage_offset`.
    /// Packets mostly arrive in order, so this turns ~180 small writes into one.
    pub(super) stage: Vec<u8>,
    pub(super) stage_offset: u64,
    /// BLAKE3 over the prefix `[0, hashed)`. In-order bytes are hashed as
    /// their stage is written, and [`Part::catch_up`] reads back what
    /// arrived out of order once the gap before it is filled, so the
    /// verification at the end hashes only the tail, not the whole object.
    /// (Boxed: a hasher is 2 KB, and `Sink` is moved around by value.)
    pub(super) hasher: Box<blake3::Hasher>,
    pub(super) hashed: u64,
    /// A tree: looking for the chunks this disk holds already.
    pub(super) held: HeldSearch,
    /// Every byte of the object arrives into the file and stays there (a
    /// relay reads it back): no chunk is taken from the disk instead, no
    /// copied range is released.
    pub(super) whole: bool,
    /// In-order bytes gathered per write at most.
    pub(super) stage_max: usize,
}

/// A tree's search for the chunks this disk holds (resume, delta): it
/// starts once the manifest is in and runs on its own threads, so the
/// receiver keeps answering the sender meanwhile.
#[derive(Default)]
pub(super) enum HeldSearch {
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
    /// A part of `size` bytes written into `file`, nothing received yet:
    /// a file on disk at `temp` to be renamed to `final_path` (a tree:
    /// extracted by `tree` beside it instead), or an anonymous in-memory
    /// file (`temp` `None`).
    pub(super) fn new(
        file: File,
        temp: Option<PathBuf>,
        final_path: PathBuf,
        size: u64,
        replaces: bool,
        tree: Option<Box<crate::tree::Extractor>>,
    ) -> Self {
        Self {
            file,
            temp,
            final_path,
            size,
            committed: false,
            replaces,
            tree,
            stage: Vec::with_capacity(STAGE_BYTES),
            stage_offset: 0,
            hasher: Box::new(blake3::Hasher::new()),
            hashed: 0,
            held: HeldSearch::default(),
            whole: false,
            stage_max: STAGE_BYTES,
        }
    }

    /// Resume and delta: once the manifest is in (`in_order` bytes of the
    /// object are), starts looking for the chunks this disk holds; once
    /// that is done, returns what to report. Cheap when there is nothing
    /// new (called per stored packet and per pass of the event loop).
    pub(super) fn poll_held(
        &mut self,
        in_order: u64,
        payload: u64,
    ) -> io::Result<Option<HeldReport>> {
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

    pub(super) fn write(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
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

    pub(super) fn flush(&mut self) -> io::Result<()> {
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
    pub(super) fn catch_up(&mut self, upto: u64) -> io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::test_support::offer;
    use crate::storage::{Placement, Sink, Target, prepare};
    use rmcast_proto::SessionId;
    use std::path::Path;

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
