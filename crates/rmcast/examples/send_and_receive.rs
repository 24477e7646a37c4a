//! One receiver thread (into memory) and one sender on loopback, sealed
//! under a fresh group key (in practice: `rmcast::load_key` of the file
//! `rmcast keygen` made, the same on every member).
//!
//! Run: `cargo run -p rmcast --example send_and_receive`

use rmcast::{RecvConfig, SendConfig, random_group, recv_to_vec, send_bytes};
use std::time::Duration;

fn main() -> Result<(), rmcast::Error> {
    let group = random_group();
    let key = std::sync::Arc::new(rmcast::generate_key());
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();

    let rc = RecvConfig {
        group,
        name: "example-receiver".into(),
        listen_timeout: Some(Duration::from_secs(10)),
        group_key: Some(key.clone()),
        ..RecvConfig::default()
    };
    let receiver = std::thread::spawn(move || recv_to_vec(&rc, None));

    let mut sc = SendConfig {
        group,
        ..SendConfig::default()
    };
    sc.proto.group_key = Some(key);
    let mut last_phase = "";
    let mut progress = |p: rmcast::Progress| {
        if p.phase != last_phase {
            println!(
                "sender: {} ({} / {} bytes)",
                p.phase, p.done_bytes, p.total_bytes
            );
            last_phase = p.phase;
        }
    };
    let report = send_bytes("example.bin", &data, &sc, Some(&mut progress))?;
    println!("{report:#?}");

    let (recv_report, bytes) = receiver.join().expect("receiver thread")?;
    println!("{recv_report:#?}");
    assert_eq!(bytes, data, "received bytes differ");
    println!(
        "ok: {} bytes verified by {} receiver(s) at {:.1} Mbit/s",
        report.bytes, report.verified, report.goodput_mbps
    );
    Ok(())
}
