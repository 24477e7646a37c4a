//! What the lab's integration tests share: this crate's binary, the rmcast
//! binary it drives, and whether the namespace tests may run.

#![allow(dead_code)] // each test file uses some of these

use std::path::{Path, PathBuf};

/// The lab binary under test.
pub const LAB: &str = env!("CARGO_BIN_EXE_rmcast-lab");

/// The rmcast binary: `$RMCAST_BIN`, else the one next to the lab's.
pub fn rmcast_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("RMCAST_BIN") {
        return Some(PathBuf::from(p));
    }
    let p = Path::new(LAB).with_file_name("rmcast");
    p.is_file().then_some(p)
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
