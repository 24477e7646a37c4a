//! A full disk: h2's output directory is a tmpfs too small for the
//! 4 MB object (refused at the offer), or filled by another writer during
//! the transfer.

use super::process::{
    SENDER_TIMEOUT, SLACK, failure_of, removal, sender_failed_naming, short, start, transfer_time,
    wait_named,
};
use super::{Ctx, Lan, setup};
use crate::procs::Exit;
use anyhow::{Result, ensure};
use std::time::{Duration, Instant};

/// Expected: h2 refuses the offer (or fails) naming "no space" or "does
/// not fit" and exits nonzero; the sender names h2 and exits 1 with h2
/// (only) in its failures; h1 and h3 complete byte-exact. The time is from
/// the sender's start to its naming h2.
pub(super) fn full_disk(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    let mut lan = Lan::new(ctx.work, ctx.rmcast, setup())?;
    lan.small_disk(2, 1_000_000)?;
    let (r, s) = start(&mut lan, &["--sender-timeout", SENDER_TIMEOUT], &[])?;
    let t = Instant::now();
    lan.watch(s, &removal("h2"));
    let detect = wait_named(&mut lan, s, "h2", t, Duration::from_secs(3))?;
    let (e2, _) = lan.wait_exit(r[1], Duration::from_secs(10))?;
    let h2 = failure_of(&lan.text(r[1]));
    ensure!(matches!(e2, Exit::Code(c) if c != 0), "h2: {e2:?}\n{h2}");
    let said = |x: &str| {
        let x = x.to_lowercase();
        x.contains("no space") || x.contains("does not fit")
    };
    ensure!(said(&h2), "h2 does not say why: {h2}");
    let (why, _) = sender_failed_naming(&mut lan, s, &["h2"], 2 * SLACK)?;
    ensure!(
        said(&why),
        "the sender's reason for h2 does not say why: {why}"
    );
    for (i, p) in [(1, r[0]), (3, r[2])] {
        let (e, _) = lan.wait_exit(p, Duration::from_secs(5))?;
        ensure!(e == Exit::Code(0), "h{i}: {e:?}\n{}", lan.text(p));
        ensure!(lan.verified(i, 0)?, "h{i} not byte-exact");
    }
    lan.finish()?;
    Ok((
        format!(
            "h2 refused ({}); sender exit 1 naming h2 ({}); h1, h3 byte-exact",
            short(&h2),
            short(&why)
        ),
        Some(detect),
    ))
}

/// h2's output directory is a 5 MB tmpfs, so the 4 MB offer fits; a
/// quarter into the transfer another writer fills all but 0.5 MB of it.
/// Expected: h2 fails naming "no space" (ENOSPC), exits nonzero and
/// removes its part file; the sender names h2 for that reason and exits 1;
/// h1 and h3 complete byte-exact. The time is from the filling to the
/// sender's naming h2.
pub(super) fn disk_fills(ctx: &Ctx) -> Result<(String, Option<Duration>)> {
    let mut lan = Lan::new(ctx.work, ctx.rmcast, setup())?;
    lan.small_disk(2, 5_000_000)?;
    let (r, s) = start(&mut lan, &["--sender-timeout", SENDER_TIMEOUT], &[])?;
    lan.watch(s, &removal("h2"));
    lan.wait_written(r[1], lan.setup.size / 4, Duration::from_secs(15))?;
    let filler = lan.out_dir(2).join("filler");
    let t = Instant::now();
    let filled = fill(&filler, 3_500_000);
    let bound = transfer_time(&lan) + SLACK;
    let detect = wait_named(&mut lan, s, "h2", t, bound)?;
    std::fs::remove_file(&filler)?;
    let (e2, _) = lan.wait_exit(r[1], Duration::from_secs(10))?;
    let h2 = failure_of(&lan.text(r[1]));
    ensure!(matches!(e2, Exit::Code(c) if c != 0), "h2: {e2:?}\n{h2}");
    ensure!(
        h2.to_lowercase().contains("no space"),
        "h2 does not say why: {h2}"
    );
    let parts = lan.part_files(2);
    ensure!(parts.is_empty(), "h2 left {parts:?}");
    let (why, _) = sender_failed_naming(&mut lan, s, &["h2"], SLACK)?;
    ensure!(
        why.to_lowercase().contains("no space"),
        "the sender's reason for h2 does not say why: {why}"
    );
    for (i, p) in [(1, r[0]), (3, r[2])] {
        let (e, _) = lan.wait_exit(p, Duration::from_secs(5))?;
        ensure!(e == Exit::Code(0), "h{i}: {e:?}\n{}", lan.text(p));
        ensure!(lan.verified(i, 0)?, "h{i} not byte-exact");
    }
    lan.finish()?;
    Ok((
        format!(
            "filled {filled} B; h2 failed ({}); sender exit 1 naming h2 ({}); h1, h3 byte-exact",
            short(&h2),
            short(&why)
        ),
        Some(detect),
    ))
}

/// Writes up to `bytes` into `path` until the disk is full; bytes written.
fn fill(path: &std::path::Path, bytes: u64) -> u64 {
    use std::io::Write as _;
    let Ok(mut f) = std::fs::File::create(path) else {
        return 0;
    };
    let block = vec![0x5au8; 64 * 1024];
    let mut done = 0;
    while done < bytes {
        let n = block.len().min((bytes - done) as usize);
        match f.write(&block[..n]) {
            Ok(0) | Err(_) => break,
            Ok(k) => done += k as u64,
        }
    }
    let _ = f.sync_all();
    done
}
