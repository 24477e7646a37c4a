//! The objects a run sends and the copies its receivers write: creating,
//! finding, hashing and (for fault injection) corrupting them.

use super::Copies;
use anyhow::{Context, Result};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// A deterministic pseudo-random object of `size` bytes (BLAKE3 XOF), cached.
pub(crate) fn make_object(dir: &Path, size: u64) -> Result<PathBuf> {
    make_object_k(dir, size, 0)
}

/// Sender k's object (k = 0: [`make_object`]'s; others differ in name and content).
pub(crate) fn make_object_k(dir: &Path, size: u64, k: usize) -> Result<PathBuf> {
    let path = match k {
        0 => dir.join(format!("object-{size}.bin")),
        k => dir.join(format!("object-{size}-s{k}.bin")),
    };
    if path.metadata().map(|m| m.len() == size).unwrap_or(false) {
        return Ok(path);
    }
    let mut h = blake3::Hasher::new_derive_key("rmcast-lab object");
    h.update(&size.to_le_bytes());
    if k > 0 {
        h.update(&(k as u64).to_le_bytes());
    }
    let mut xof = h.finalize_xof();
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let k = left.min(buf.len() as u64) as usize;
        xof.fill(&mut buf[..k]);
        f.write_all(&buf[..k])?;
        left -= k as u64;
    }
    f.flush()?;
    Ok(path)
}

pub(crate) fn hash_file(path: &Path) -> Result<blake3::Hash> {
    let mut h = blake3::Hasher::new();
    h.update_reader(std::fs::File::open(path)?)?;
    Ok(h.finalize())
}

/// Bytes allocated under a directory (st_blocks, so sparse preallocation does not count).
pub(crate) fn allocated_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => allocated_bytes(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// The received file: the largest visible regular file under `dir`.
pub(crate) fn find_output(dir: &Path) -> Option<PathBuf> {
    let mut best: Option<(u64, PathBuf)> = None;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let hidden = e.file_name().to_string_lossy().starts_with('.');
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(p),
                Ok(m)
                    if m.is_file()
                        && !hidden
                        && best.as_ref().is_none_or(|(s, _)| m.len() > *s) =>
                {
                    best = Some((m.len(), p));
                }
                _ => {}
            }
        }
    }
    best.map(|(_, p)| p)
}

/// One file a receiver wrote, as the judges see it: its path under the
/// receiver's directory, its size and (visible files only) its BLAKE3.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CopyFile {
    /// Relative to the receiver's directory, `/`-separated.
    pub path: String,
    /// Bytes.
    pub size: u64,
    /// Hex BLAKE3 of the content; none for hidden files (a dot name:
    /// part files and state), which are never a copy.
    pub blake3: Option<String>,
}

impl CopyFile {
    /// Its file name (the last component).
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

/// Every regular file under `dir` (none when it does not exist), visible
/// ones hashed, sorted by path. On the ssh testbed the hosts compute this
/// (`rmcast-lab list-copies DIR`) and only the listing comes back.
pub fn list_copies(dir: &Path) -> Result<Vec<CopyFile>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(p);
            } else if m.is_file() {
                let rel = p.strip_prefix(dir).unwrap_or(&p);
                let path = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/");
                let hidden = e.file_name().to_string_lossy().starts_with('.');
                let blake3 = if hidden {
                    None
                } else {
                    Some(hash_file(&p)?.to_hex().to_string())
                };
                out.push(CopyFile {
                    path,
                    size: m.len(),
                    blake3,
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Flips the byte in the middle of `path` (fault injection).
pub(crate) fn corrupt(path: &Path) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let mut b = [0u8; 1];
    let at = f.metadata()?.len() / 2;
    f.read_at(&mut b, at)?;
    b[0] ^= 0xff;
    f.write_at(&b, at)?;
    Ok(())
}

/// This process's directory for copies on tmpfs.
pub(crate) fn tmpfs_root() -> PathBuf {
    PathBuf::from(format!("/dev/shm/rmcast-lab-{}", std::process::id()))
}

/// The receivers' copies on tmpfs (scenario `copies = "tmpfs"`): one
/// directory per run under `/dev/shm`, removed when the run ends however it
/// ends, so that 30 copies of a large object never outlive their run.
pub(crate) struct CopiesDir {
    tmpfs: Option<PathBuf>,
}

impl CopiesDir {
    pub(crate) fn new(copies: Copies, run_dir: &Path) -> Result<Self> {
        let tmpfs = match copies {
            Copies::Disk => None,
            Copies::Tmpfs => {
                let run = run_dir
                    .file_name()
                    .map_or_else(|| "run".into(), |n| n.to_string_lossy().into_owned());
                let d = tmpfs_root().join(run);
                std::fs::create_dir_all(&d)
                    .with_context(|| format!("cannot create {} for the copies", d.display()))?;
                Some(d)
            }
        };
        Ok(Self { tmpfs })
    }

    /// The output directories, index 0..=n (h0's unused), receivers' created:
    /// on tmpfs when asked for, else beside the run's logs.
    pub(crate) fn out_dirs(&self, run_dir: &Path, n: usize) -> Result<Vec<PathBuf>> {
        let out_dirs: Vec<PathBuf> = (0..=n)
            .map(|i| match (i, &self.tmpfs) {
                (1.., Some(t)) => t.join(format!("h{i}")),
                _ => run_dir.join(format!("h{i}")),
            })
            .collect();
        for d in &out_dirs[1..] {
            std::fs::create_dir_all(d)?;
        }
        Ok(out_dirs)
    }
}

impl Drop for CopiesDir {
    fn drop(&mut self) {
        if let Some(d) = &self.tmpfs {
            let _ = std::fs::remove_dir_all(d);
            // The per-process parent goes once it is empty (the last run's).
            if let Some(parent) = d.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
}
