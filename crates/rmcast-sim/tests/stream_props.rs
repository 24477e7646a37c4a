//! Property test: FIFO, exactly-once delivery of long random message
//! sequences under loss, duplication and reordering, for any seed.

use proptest::prelude::*;
use rmcast_proto::stream::CongestionControl;
use rmcast_sim::stream::{Link, Rng, StreamScenario, messages, run, secs};
use rmcast_wire::Seq;
use std::time::Duration;

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn fifo_exactly_once_under_loss_duplication_and_reordering(
        seed in any::<u64>(),
        receivers in 1usize..6,
        count in 50usize..600,
        max_len in 0usize..5000,
        loss in 0.0f64..0.15,
        duplicate in 0.0f64..0.1,
        jitter_us in 0u64..3000,
        buffer_packets in 8u32..128,
        payload_size in 64u16..1400,
        congestion in any::<bool>(),
        near_wrap in any::<bool>(),
    ) {
        let mut sc = StreamScenario::new(seed, receivers);
        let mut rng = Rng::new(seed ^ 0x5EED);
        let msgs = messages(&mut rng, count, max_len);
        sc.messages = msgs.clone();
        let link = Link {
            delay: Duration::from_micros(200),
            jitter: Duration::from_micros(jitter_us),
            loss,
            duplicate,
        };
        sc.down = link;
        sc.up = link;
        sc.receiver.buffer_packets = buffer_packets;
        sc.sender.payload_size = payload_size;
        sc.sender.message_bytes_max = u32::from(payload_size) * buffer_packets.min(8);
        let max_len = sc.sender.message_bytes_max as usize;
        for m in &mut sc.messages {
            m.truncate(max_len);
        }
        let msgs = sc.messages.clone();
        sc.sender.send_buffer_packets = 256;
        sc.sender.congestion = if congestion { CongestionControl::TcpLike } else { CongestionControl::Off };
        // Loss makes removals possible only through bad luck over many
        // polls; give a lossy run more patience than a LAN needs.
        sc.sender.remove_after = 12;
        sc.sender.suspect_after = 6;
        sc.sender.handshake_tries = 40;
        if near_wrap {
            sc.isn = Seq(u32::MAX - 40);
        }
        sc.deadline = secs(300.0);
        // `run` checks the stream's invariants; the assertions below spell
        // out the ones this property is about.
        let out = run(&sc).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(out.closed, "seed {seed}: not closed by {:?}: {:?}", out.end, out.sender_events);
        for i in 0..receivers {
            prop_assert_eq!(out.delivered[i].len(), msgs.len(), "seed {}: receiver {}", seed, i);
            for (k, (got, want)) in out.delivered[i].iter().zip(&msgs).enumerate() {
                prop_assert_eq!(got, want, "seed {}: receiver {} message {}", seed, i, k);
            }
            prop_assert_eq!(out.receiver_stats[i].beyond_window, 0, "seed {}", seed);
        }
        prop_assert_eq!(out.beyond_edge, 0, "seed {}", seed);
    }
}
