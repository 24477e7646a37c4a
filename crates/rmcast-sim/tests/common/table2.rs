//! Table 2's scenarios and the ring's memory runs (tests/table2.rs), shared
//! with the golden files (tests/golden.rs).

use super::{PACKET, WINDOW};
use rmcast_proto::{ProtocolId, SenderConfig, TreeShape};
use rmcast_sim::{LossModel, Scenario};

pub const N: u16 = 30;
/// 3 MB: 2072 packets of 1448 bytes, so the last-packet and
/// partial-poll-interval edges weigh under 2 %.
pub const SIZE: u64 = 3_000_000;

#[derive(Clone, Copy, Debug)]
pub enum Row {
    Ack,
    NakPoll(u32),
    Ring,
    Tree(u16),
    Binary,
}

/// Every row the tests measure.
pub const ROWS: [Row; 7] = [
    Row::Ack,
    Row::NakPoll(16),
    Row::NakPoll(27),
    Row::Ring,
    Row::Tree(3),
    Row::Tree(6),
    Row::Binary,
];

pub fn table2_scenario(row: Row) -> Scenario {
    let mut config = SenderConfig {
        packet_size: PACKET,
        // Small enough that ack's 30 × window acks fit the sender's switch
        // port (no drops, so the counts are the protocol's alone), above N
        // for the ring.
        window: WINDOW,
        ..SenderConfig::default()
    };
    match row {
        Row::Ack => config.protocol = ProtocolId::Ack,
        Row::NakPoll(i) => {
            config.protocol = ProtocolId::NakPoll;
            config.poll_interval = Some(i);
        }
        Row::Ring => config.protocol = ProtocolId::Ring,
        Row::Tree(h) => {
            config.protocol = ProtocolId::Tree;
            config.tree_height = h;
        }
        Row::Binary => {
            config.protocol = ProtocolId::Tree;
            config.tree_shape = TreeShape::Binary;
        }
    }
    Scenario {
        receivers: N,
        object_size: SIZE,
        config,
        loss: LossModel::None,
        seed: 2,
        ..Scenario::default()
    }
}

/// One run of the ring's memory claim: N receivers, a 2 MB object, the
/// outstanding count traced.
pub fn ring_memory_scenario(
    n: u16,
    window: u32,
    rate: Option<u64>,
    loss: LossModel,
    seed: u64,
) -> Scenario {
    Scenario {
        receivers: n,
        object_size: 2_000_000,
        config: SenderConfig {
            protocol: ProtocolId::Ring,
            packet_size: PACKET,
            window,
            rate_bits_per_s: rate,
            ..SenderConfig::default()
        },
        loss,
        seed,
        trace_outstanding: true,
        ..Scenario::default()
    }
}

/// The loss-free memory runs: (N, window, rate, seed): paced at 20 Mbit/s
/// (each ack back before the next packet goes), and unpaced with the
/// paper's window of 50 and a tight one of N + 1.
pub fn ring_memory_lossless() -> Vec<(u16, u32, Option<u64>, u64)> {
    [8u16, 30]
        .into_iter()
        .flat_map(|n| {
            [
                (n, 50, Some(20_000_000), 11),
                (n, 50, None, 12),
                (n, u32::from(n) + 1, None, 12),
            ]
        })
        .collect()
}

/// The memory runs under loss: N = 30, window 50, seed 13.
pub fn ring_memory_losses() -> [LossModel; 2] {
    [LossModel::Bernoulli(0.01), LossModel::bursty(0.03, 4.0)]
}
