//! The per-byte work no receiver can avoid, measured on this machine: what a
//! receiver's CPU-seconds per GB cannot go below while it keeps a verified
//! copy. Each step runs over `SIZE` bytes in 256 KiB pieces (the receiver's
//! stage size) and is timed with the thread's own CPU clock:
//!
//! - `memcpy`: one user-space copy from a 64 MiB buffer (beyond the caches)
//!   into the stage (the kernel's copy out of a socket costs about the same
//!   per byte);
//! - `blake3`: hashing every byte once (incremental, as the receiver does);
//! - `pwrite fresh`: writing into a new file in DIR (page allocation + copy;
//!   on a VM the first touch of guest memory can cost far more than a copy);
//! - `pwrite reused`: the same file written over again (pages already there).
//!
//! ```sh
//! cargo run --release -p rmcast --example receiver_floor -- 256MiB /dev/shm
//! ```

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::time::Duration;

const PIECE: usize = 256 * 1024;
/// Source of the copy test: larger than any cache here.
const BIG: usize = 64 << 20;

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn parse_size(s: &str) -> Option<usize> {
    let (num, mult) = if let Some(n) = s.strip_suffix("GiB") {
        (n, 1 << 30)
    } else if let Some(n) = s.strip_suffix("MiB") {
        (n, 1 << 20)
    } else if let Some(n) = s.strip_suffix("MB") {
        (n, 1_000_000)
    } else {
        (s, 1)
    };
    num.parse::<usize>().ok().map(|n| n * mult)
}

fn report(what: &str, size: usize, cpu: Duration) {
    let gb = size as f64 / 1e9;
    println!(
        "{what:<14} {:>8.3} CPU-s/GB  ({:.2} GB/s)",
        cpu.as_secs_f64() / gb,
        gb / cpu.as_secs_f64()
    );
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let size = args
        .next()
        .as_deref()
        .map(|s| parse_size(s).unwrap_or_else(|| panic!("size {s:?}: use e.g. 256MiB")))
        .unwrap_or(256 << 20);
    let dir = args.next().unwrap_or_else(|| "/dev/shm".into());
    let size = size.div_ceil(PIECE) * PIECE;

    // The "received" bytes: one piece's worth, pseudo-random.
    let mut src = vec![0u8; PIECE];
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    for b in &mut src {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let mut dst = vec![0u8; PIECE];
    println!("{size} bytes in {PIECE}-byte pieces; files in {dir}");

    // Copy out of a source larger than the caches, as a socket's queued
    // bytes are, into the one stage buffer.
    let big: Vec<u8> = src.iter().copied().cycle().take(BIG).collect();
    let t = thread_cpu();
    for i in 0..size / PIECE {
        let at = (i * PIECE) % BIG;
        dst.copy_from_slice(std::hint::black_box(&big[at..at + PIECE]));
        std::hint::black_box(&mut dst);
    }
    report("memcpy", size, thread_cpu() - t);
    drop(big);

    let t = thread_cpu();
    let mut h = blake3::Hasher::new();
    for _ in 0..size / PIECE {
        h.update(std::hint::black_box(&src));
    }
    std::hint::black_box(h.finalize());
    report("blake3", size, thread_cpu() - t);

    let path = std::path::Path::new(&dir).join(format!("receiver-floor-{}", std::process::id()));
    let f = OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(&path)?;
    let result = (|| {
        for what in ["pwrite fresh", "pwrite reused"] {
            let t = thread_cpu();
            for i in 0..size / PIECE {
                f.write_all_at(&src, (i * PIECE) as u64)?;
            }
            report(what, size, thread_cpu() - t);
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&path);
    result
}
