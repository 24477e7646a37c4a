//! Measures loopback goodput of both protocols with and without test loss.
//!
//! Run: `cargo run --release -p rmcast --example demo_goodput -- [receivers] [size] [rto_ms]`
//! (defaults: 8 receivers, 64MiB, the protocol's default initial RTO).

use rmcast::{DemoConfig, ProtocolId, demo, parse_size};
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let receivers: u16 = args.first().map_or(Ok(8), |s| s.parse())?;
    let size = args.get(1).map_or(Ok(64 << 20), |s| parse_size(s))?;
    let rto_ms: Option<u64> = args.get(2).map(|s| s.parse()).transpose()?;
    println!("{receivers} receivers x {size} bytes over loopback");
    println!(
        "{:<9} {:>5} {:>8} {:>10} {:>9} {:>9} {:>9} {:>8} {:>7} {:>6}",
        "protocol",
        "loss",
        "seconds",
        "Mbit/s",
        "data",
        "retx",
        "control",
        "timeouts",
        "rewinds",
        "match"
    );
    for protocol in [ProtocolId::Ack, ProtocolId::NakPoll] {
        for loss in [0.0, 0.05] {
            let mut cfg = DemoConfig {
                receivers,
                size,
                seed: 7,
                loss,
                ..DemoConfig::default()
            };
            cfg.send.proto.protocol = protocol;
            cfg.send.proto.join_wait = Duration::from_secs(20);
            if let Some(ms) = rto_ms {
                cfg.send.proto.rto = Duration::from_millis(ms);
            }
            let r = demo(&cfg, None)?;
            println!(
                "{:<9} {:>4.0}% {:>8.3} {:>10.1} {:>9} {:>9} {:>9} {:>8} {:>7} {:>6}",
                r.send.protocol,
                loss * 100.0,
                r.send.seconds,
                r.send.goodput_mbps,
                r.send.data_packets,
                r.send.retransmitted_packets,
                r.send.control_packets,
                r.send.stats.timeouts,
                r.send.stats.rewinds,
                r.all_files_match && r.send.ok
            );
        }
    }
    Ok(())
}
