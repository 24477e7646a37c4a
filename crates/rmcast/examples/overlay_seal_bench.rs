//! Loopback goodput of a keyed (sealed) overlay against the same overlay
//! in plain TCP, runs alternating so both see the same machine.
//!
//! Run: `cargo run --release -p rmcast --example overlay_seal_bench -- [shape] [receivers] [size] [runs] [dir] [segment]`
//! (defaults: tcp-chain, 3 receivers, 256MiB, 3 runs, the system's
//! temporary directory, 8 KiB segments; the median run is shown). Pass a
//! tmpfs directory (`/dev/shm`) to leave the disk out. Time is from the
//! start signal to the last receiver's confirmation, as in `overlay_bench`.

use rmcast::overlay::{self, GroupKey, OverlayDemoConfig};
use rmcast::parse_size;
use std::path::PathBuf;
use std::sync::Arc;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let shape = overlay::parse_shape(args.first().map_or("tcp-chain", String::as_str), 2)
        .ok_or("unknown shape")?;
    let receivers: u16 = args.get(1).map_or(Ok(3), |s| s.parse())?;
    let size = args.get(2).map_or(Ok(256 << 20), |s| parse_size(s))?;
    let runs: usize = args.get(3).map_or(Ok(3), |s| s.parse())?;
    let dir = args.get(4).map_or_else(std::env::temp_dir, PathBuf::from);
    let segment: u32 = args.get(5).map_or(Ok(overlay::AUTO_SEGMENT_MIN), |s| {
        parse_size(s).map(|v| v as u32)
    })?;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "{shape}, {receivers} receivers x {size} bytes, {segment}-byte segments, loopback, \
         {cores} cores, median of {runs}, files in {}",
        dir.display()
    );
    let key = Arc::new(GroupKey::from_secret(rand::random()));
    let (mut plain, mut sealed) = (Vec::new(), Vec::new());
    for run in 0..runs {
        for keyed in [false, true] {
            let work = tempfile::Builder::new()
                .prefix("overlay-seal-bench-")
                .tempdir_in(&dir)?;
            let mut cfg = OverlayDemoConfig {
                receivers,
                size,
                seed: 7 + run as u64,
                keep_dir: Some(work.path().to_path_buf()),
                ..OverlayDemoConfig::default()
            };
            cfg.send.shape = shape;
            cfg.send.segment_size = Some(segment);
            cfg.send.key = keyed.then(|| key.clone());
            let r = overlay::demo(&cfg, None)?;
            if !r.send.ok || !r.all_files_match {
                return Err(format!("{shape} keyed={keyed} failed: {:?}", r.send.error).into());
            }
            let mbps = size as f64 * 8.0 / r.send.data_seconds / 1e6;
            println!(
                "  run {run} {:<6} {mbps:>8.0} Mbit/s",
                if keyed { "keyed" } else { "plain" }
            );
            if keyed { &mut sealed } else { &mut plain }.push(mbps);
        }
    }
    let (p, s) = (median(plain), median(sealed));
    println!(
        "\nplain {p:.0} Mbit/s, keyed {s:.0} Mbit/s, keyed/plain {:.2}",
        s / p
    );
    Ok(())
}
