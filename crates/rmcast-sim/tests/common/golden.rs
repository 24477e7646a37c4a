//! Golden files: a fresh rendering of a test's output compared byte for
//! byte with the committed `tests/golden/NAME.txt` of the crate under test.
//! `RMCAST_GOLDEN_BLESS=1` rewrites the file instead (review the diff, and
//! name every change in the commit message: it is a bug or a fix).
//!
//! Shared by rmcast-sim and rmcast-lab tests (the latter and
//! `stream_golden.rs` include this file by `#[path]`), so it uses nothing
//! but std.
#![allow(dead_code)]

use std::fmt::Write as _;
use std::path::PathBuf;

/// Environment variable that makes [`compare`] rewrite the golden file.
pub const BLESS_ENV: &str = "RMCAST_GOLDEN_BLESS";

/// `CARGO_MANIFEST_DIR/tests/golden/NAME.txt` of the crate being tested.
pub fn path(manifest_dir: &str, name: &str) -> PathBuf {
    PathBuf::from(manifest_dir)
        .join("tests/golden")
        .join(format!("{name}.txt"))
}

/// Compares `fresh` with the golden file `NAME.txt` (or rewrites it when
/// `RMCAST_GOLDEN_BLESS=1`). On a mismatch it writes the fresh text next
/// to the temp dir and panics naming the file and the first differing line.
#[track_caller]
pub fn compare(manifest_dir: &str, name: &str, fresh: &str) {
    let file = path(manifest_dir, name);
    if std::env::var(BLESS_ENV).is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(file.parent().expect("a parent")).expect("create tests/golden");
        std::fs::write(&file, fresh).expect("write the golden file");
        eprintln!("golden: blessed {}", file.display());
        return;
    }
    let want = std::fs::read_to_string(&file).unwrap_or_else(|e| {
        panic!(
            "golden: cannot read {} ({e}); run with {BLESS_ENV}=1 to create it",
            file.display()
        )
    });
    if want == fresh {
        return;
    }
    let got_path = std::env::temp_dir().join(format!("rmcast-golden-{name}.txt"));
    let _ = std::fs::write(&got_path, fresh);
    panic!(
        "golden: {} differs from this run (fresh output in {}):\n{}\n\
         A difference is a behaviour change: a bug, or a fix to name in the commit. \
         To accept it: {BLESS_ENV}=1 (scripts/golden.sh bless).",
        file.display(),
        got_path.display(),
        first_difference(&want, fresh)
    );
}

/// The first differing line of two texts, with a few lines of context.
pub fn first_difference(want: &str, got: &str) -> String {
    let w: Vec<&str> = want.lines().collect();
    let g: Vec<&str> = got.lines().collect();
    let at = w
        .iter()
        .zip(&g)
        .position(|(a, b)| a != b)
        .unwrap_or(w.len().min(g.len()));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "first difference at line {} (golden {} lines, fresh {} lines)",
        at + 1,
        w.len(),
        g.len()
    );
    let from = at.saturating_sub(3);
    for (label, lines) in [("golden", &w), ("fresh", &g)] {
        let _ = writeln!(out, "--- {label}:");
        for (k, line) in lines.iter().enumerate().skip(from).take(at - from + 4) {
            let mark = if k == at { ">" } else { " " };
            let _ = writeln!(out, "{mark}{:6} {line}", k + 1);
        }
    }
    out
}

/// 64-bit FNV-1a of `bytes`, as 16 hex digits: a stable digest (it never
/// changes with the Rust version, unlike std's hashers) for long outputs
/// that a golden file records by length and digest.
pub fn fnv64(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}
