//! The cells of the two protocol matrices: ack and nak-poll
//! (tests/matrix.rs) and the ring and the tree (tests/protocols_matrix.rs),
//! shared with the golden files (tests/golden.rs).

use super::{PACKET, PAYLOAD, WINDOW, scenario};
use rmcast_proto::{ProtocolId, Repair, SenderConfig, TreeShape};
use rmcast_sim::{LossModel, Scenario};
use std::time::Duration;

pub const RECEIVERS: [u16; 4] = [1, 2, 8, 32];
pub const TEN_MB: u64 = 10_000_000;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Loss {
    None,
    OnePercent,
    TenPercent,
    Bursty,
}

pub const LOSSES: [Loss; 4] = [Loss::None, Loss::OnePercent, Loss::TenPercent, Loss::Bursty];

impl Loss {
    pub fn model(self) -> LossModel {
        match self {
            Loss::None => LossModel::None,
            Loss::OnePercent => LossModel::Bernoulli(0.01),
            Loss::TenPercent => LossModel::Bernoulli(0.10),
            // About 3 % of packets, in bursts of 4 on average.
            Loss::Bursty => LossModel::bursty(0.03, 4.0),
        }
    }
}

/// One cell of a matrix: receivers, object size, seed.
#[derive(Clone, Copy, Debug)]
pub struct Cell {
    pub n: u16,
    pub size: u64,
    pub seed: u64,
}

/// The edges around a packet and a window of `w` packets.
fn edge_sizes(w: u64) -> Vec<u64> {
    vec![
        0,
        1,
        PAYLOAD,
        PAYLOAD + 1,
        (w - 1) * PAYLOAD,
        w * PAYLOAD,
        (w + 1) * PAYLOAD,
    ]
}

// ---------------------------------------------------------------- ack, nak-poll

/// The object sizes of one ack / nak-poll cell: the edges around a packet
/// and a window, then a large object.
fn ack_nak_sizes(loss: Loss, receivers: u16) -> Vec<u64> {
    let mut v = edge_sizes(u64::from(WINDOW));
    match loss {
        // Go-back-N at 10 % loss is slow by design: a smaller large object.
        Loss::TenPercent => v.push(1_000_000),
        _ if receivers == 2 => v.push(1_000_000),
        _ => v.push(TEN_MB),
    }
    v
}

/// Every cell of the ack / nak-poll matrix at one loss.
pub fn ack_nak_cells(loss: Loss) -> Vec<Cell> {
    let mut cells = Vec::new();
    for (i, &n) in RECEIVERS.iter().enumerate() {
        for (j, size) in ack_nak_sizes(loss, n).into_iter().enumerate() {
            let seed = 1000 + 100 * i as u64 + j as u64;
            cells.push(Cell { n, size, seed });
        }
    }
    cells
}

/// The scenario of an ack / nak-poll cell.
pub fn ack_nak_scenario(protocol: ProtocolId, loss: Loss, c: Cell) -> Scenario {
    scenario(protocol, c.n, c.size, loss.model(), c.seed)
}

// ---------------------------------------------------------------- ring, tree

pub const SMALL_LARGE: u64 = 300_000;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Variant {
    Ring,
    /// Flat tree of height 1 (every receiver a root: the ack protocol's traffic).
    Flat1,
    /// Flat tree of height 3.
    Flat3,
    /// Flat tree of height N (one chain).
    FlatN,
    /// Binary tree.
    Binary,
}

pub const VARIANTS: [Variant; 5] = [
    Variant::Ring,
    Variant::Flat1,
    Variant::Flat3,
    Variant::FlatN,
    Variant::Binary,
];

impl Variant {
    /// The ring needs a window above N: max(32, N + 1).
    pub fn window(self, n: u16) -> u32 {
        match self {
            Variant::Ring => WINDOW.max(u32::from(n) + 1),
            _ => WINDOW,
        }
    }

    pub fn config(self, n: u16, repair: Repair) -> SenderConfig {
        let (protocol, height, shape) = match self {
            Variant::Ring => (ProtocolId::Ring, 6, TreeShape::Flat),
            Variant::Flat1 => (ProtocolId::Tree, 1, TreeShape::Flat),
            Variant::Flat3 => (ProtocolId::Tree, 3, TreeShape::Flat),
            Variant::FlatN => (ProtocolId::Tree, n, TreeShape::Flat),
            // The height is ignored by the binary shape (but must be ≥ 1).
            Variant::Binary => (ProtocolId::Tree, 1, TreeShape::Binary),
        };
        SenderConfig {
            protocol,
            packet_size: PACKET,
            window: self.window(n),
            repair,
            tree_height: height,
            tree_shape: shape,
            ..SenderConfig::default()
        }
    }
}

/// `RMCAST_SIM_FULL=1`: 10 MB in every ring / tree cell.
pub fn full() -> bool {
    std::env::var("RMCAST_SIM_FULL").is_ok_and(|v| v == "1")
}

/// The object sizes of one ring / tree cell: the edges around a packet and
/// a window, then the large object (see tests/protocols_matrix.rs for which
/// cells get 10 MB).
fn ring_tree_sizes(variant: Variant, repair: Repair, n: u16, loss: Loss, full: bool) -> Vec<u64> {
    let vi = VARIANTS.iter().position(|&v| v == variant).expect("listed");
    let ri = usize::from(repair == Repair::GoBackN);
    let ten_mb_loss = LOSSES[(2 * vi + ri) % LOSSES.len()];
    let large = if full || (loss == ten_mb_loss && n >= 8) {
        TEN_MB
    } else {
        SMALL_LARGE
    };
    let mut v = edge_sizes(u64::from(variant.window(n)));
    v.push(large);
    v
}

/// Every cell of the ring / tree matrix for one (variant, repair, loss);
/// `full`: 10 MB in every cell.
pub fn ring_tree_cells(variant: Variant, repair: Repair, loss: Loss, full: bool) -> Vec<Cell> {
    let vi = VARIANTS.iter().position(|&v| v == variant).expect("listed") as u64;
    let li = LOSSES.iter().position(|&l| l == loss).expect("listed") as u64;
    let mut cells = Vec::new();
    for (i, &n) in RECEIVERS.iter().enumerate() {
        for (j, size) in ring_tree_sizes(variant, repair, n, loss, full)
            .into_iter()
            .enumerate()
        {
            let seed = 3000
                + 1000 * vi
                + 200 * li
                + 100 * u64::from(repair == Repair::GoBackN)
                + 10 * i as u64
                + j as u64;
            cells.push(Cell { n, size, seed });
        }
    }
    cells
}

/// The scenario of a ring / tree cell.
pub fn ring_tree_scenario(
    variant: Variant,
    repair: Repair,
    n: u16,
    size: u64,
    loss: Loss,
    seed: u64,
) -> Scenario {
    Scenario {
        receivers: n,
        object_size: size,
        config: variant.config(n, repair),
        loss: loss.model(),
        seed,
        time_limit: Duration::from_secs(300),
        ..Scenario::default()
    }
}

/// One receiver of 8 crashes 60 ms into a 3 MB transfer (peer_timeout 1 s).
pub fn ring_tree_crash_scenario(variant: Variant, repair: Repair) -> Scenario {
    let mut s = ring_tree_scenario(variant, repair, 8, 3_000_000, Loss::None, 7);
    s.config.peer_timeout = Duration::from_secs(1);
    s.crashes = vec![rmcast_sim::Crash {
        receiver: 1,
        at: Duration::from_millis(60),
    }];
    s
}
