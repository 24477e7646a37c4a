//! `RateControl::Find` (issue 18 item 5): the sender finds the path's rate
//! itself. On links of 10 Mbit/s to 10 Gbit/s, 8 receivers: its goodput
//! against a sender paced by hand at the link rate (`--rate`), and an
//! unpaced one (the window alone), each run printed.

use rmcast_proto::{RateControl, SenderConfig};
use rmcast_sim::{RunReport, Scenario};
use std::time::Duration;

fn run(link: u64, size: u64, rate: RateControl, seed: u64) -> RunReport {
    let (rate_control, rate_bits_per_s) = match rate {
        RateControl::Fixed { bytes_per_s } => (None, Some(bytes_per_s * 8)),
        other => (Some(other), None),
    };
    let s = Scenario {
        receivers: 8,
        object_size: size,
        link_rate_bits_per_s: link,
        config: SenderConfig {
            rate_control,
            rate_bits_per_s,
            // A window that holds a few milliseconds of the fastest link.
            window: 2048,
            ..SenderConfig::default()
        },
        seed,
        time_limit: Duration::from_secs(120),
        ..Scenario::default()
    };
    rmcast_sim::run_or_panic(&s)
}

/// The finder against `--rate` and unpaced on each `(link, size)`: at
/// least 0.9 of `--rate`'s goodput.
fn compare(points: &[(u64, u64)]) {
    for &(link, size) in points {
        let fixed = RateControl::Fixed {
            bytes_per_s: link / 8,
        };
        let hand = run(link, size, fixed, 1);
        let off = run(link, size, RateControl::Off, 1);
        let found = run(link, size, RateControl::Find, 1);
        for r in [&hand, &off, &found] {
            assert!(r.outcome.ok, "{link}: {:#?}", r.outcome);
        }
        let of_link = |r: &RunReport| r.goodput_mbit_s * 1e6 / link as f64;
        eprintln!(
            "link {:>6} Mbit/s, {:>4} MiB: --rate {:.3} R, unpaced {:.3} R, found {:.3} R \
             ({:.3} of --rate)",
            link / 1_000_000,
            size >> 20,
            of_link(&hand),
            of_link(&off),
            of_link(&found),
            found.goodput_mbit_s / hand.goodput_mbit_s
        );
        assert!(
            found.goodput_mbit_s >= 0.9 * hand.goodput_mbit_s,
            "link {link}: found {:.1} Mbit/s, --rate {:.1}",
            found.goodput_mbit_s,
            hand.goodput_mbit_s
        );
    }
}

#[test]
fn the_rate_found_reaches_the_hand_set_rate_from_10_mbit_to_1_gbit() {
    compare(&[
        (10_000_000, 1 << 20),
        (100_000_000, 12 << 20),
        (1_000_000_000, 64 << 20),
    ]);
}

/// 10 Gbit/s, 512 MiB (long in a debug build):
/// `cargo test --release -p rmcast-sim --test rate_finder -- --ignored`.
#[test]
#[ignore = "long: by command"]
fn the_rate_found_reaches_the_hand_set_rate_at_10_gbit() {
    compare(&[(10_000_000_000, 512 << 20)]);
}
