//! Loopback goodput of every TCP overlay shape against one plain TCP flow.
//!
//! Run: `cargo run --release -p rmcast --example overlay_bench -- [receivers] [size] [runs] [dir]`
//! (defaults: 8 receivers, 64MiB, 3 runs, the system's temporary
//! directory; the median run is shown). Then a segment-size sweep for the
//! pipelined shapes. Every receiver fsyncs its copy before it confirms, so
//! on a real disk the figures include the disk; pass a tmpfs directory
//! (`/dev/shm`) to measure the relaying alone.
//!
//! Time is from the start signal to the last receiver's confirmation
//! (verified, renamed into place, done forwarding); goodput is the object
//! size over that time. The single flow is one loopback TCP connection
//! moving the same number of bytes from memory to memory: the ceiling.

use rmcast::overlay::{self, OverlayDemoConfig, OverlayShape};
use rmcast::parse_size;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn single_flow_seconds(size: u64) -> std::io::Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 256 << 10];
        let mut got = 0u64;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Ok(got);
            }
            got += n as u64;
        }
    });
    let data = vec![0x3cu8; 256 << 10];
    let mut s = TcpStream::connect(addr)?;
    let started = Instant::now();
    let mut left = size;
    while left > 0 {
        let n = left.min(data.len() as u64) as usize;
        s.write_all(&data[..n])?;
        left -= n as u64;
    }
    drop(s);
    let got = reader.join().expect("reader thread")?;
    assert_eq!(got, size);
    Ok(started.elapsed().as_secs_f64())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median seconds (start to last confirmation) of `runs` demos.
fn overlay_seconds(
    shape: OverlayShape,
    receivers: u16,
    size: u64,
    segment_size: Option<u32>,
    runs: usize,
    dir: &Path,
) -> Result<f64, Box<dyn std::error::Error>> {
    let mut times = Vec::new();
    for run in 0..runs {
        let work = tempfile::Builder::new()
            .prefix("overlay-bench-")
            .tempdir_in(dir)?;
        let mut cfg = OverlayDemoConfig {
            receivers,
            size,
            seed: 11 + run as u64,
            keep_dir: Some(work.path().to_path_buf()),
            ..OverlayDemoConfig::default()
        };
        cfg.send.shape = shape;
        cfg.send.segment_size = segment_size;
        let r = overlay::demo(&cfg, None)?;
        if !r.send.ok || !r.all_files_match {
            return Err(format!("{shape} failed: {:?}", r.send.error).into());
        }
        times.push(r.send.data_seconds);
    }
    Ok(median(times))
}

fn mbps(size: u64, seconds: f64) -> f64 {
    size as f64 * 8.0 / seconds / 1e6
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let receivers: u16 = args.first().map_or(Ok(8), |s| s.parse())?;
    let size = args.get(1).map_or(Ok(64 << 20), |s| parse_size(s))?;
    let runs: usize = args.get(2).map_or(Ok(3), |s| s.parse())?;
    let dir = args.get(3).map_or_else(std::env::temp_dir, PathBuf::from);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "{receivers} receivers x {size} bytes over loopback, {cores} cores, median of {runs}, files in {}",
        dir.display()
    );

    let single = median(
        (0..runs)
            .map(|_| single_flow_seconds(size))
            .collect::<Result<Vec<_>, _>>()?,
    );
    let ceiling = mbps(size, single);
    println!(
        "\n{:<22} {:>9} {:>10} {:>9}",
        "protocol", "seconds", "Mbit/s", "x single"
    );
    println!(
        "{:<22} {:>9.3} {:>10.0} {:>9.2}",
        "single TCP flow", single, ceiling, 1.0
    );
    // The shapes side by side at the segment size each would choose.
    let seg = None;
    for shape in [
        OverlayShape::Direct,
        OverlayShape::Tree { fanout: 2 },
        OverlayShape::Binomial,
        OverlayShape::Chain,
        OverlayShape::Bintree,
        OverlayShape::Pipeline,
    ] {
        let t = overlay_seconds(shape, receivers, size, seg, runs, &dir)?;
        let g = mbps(size, t);
        println!(
            "{:<22} {:>9.3} {:>10.0} {:>9.2}",
            shape.to_string(),
            t,
            g,
            g / ceiling
        );
    }

    println!("\nsegment size sweep");
    println!(
        "{:<14} {:>9} {:>9} {:>10} {:>9}",
        "protocol", "segment", "seconds", "Mbit/s", "x single"
    );
    for shape in [OverlayShape::Chain, OverlayShape::Bintree] {
        for seg in [8u32 << 10, 64 << 10, 256 << 10] {
            let t = overlay_seconds(shape, receivers, size, Some(seg), runs, &dir)?;
            let g = mbps(size, t);
            println!(
                "{:<14} {:>8}K {:>9.3} {:>10.0} {:>9.2}",
                shape.name(),
                seg >> 10,
                t,
                g,
                g / ceiling
            );
        }
    }
    Ok(())
}
