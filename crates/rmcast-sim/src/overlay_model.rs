//! The papers' completion-time models of the TCP overlays, to plot beside
//! what the overlay simulator ([`crate::overlay`]) and the lab measure.
//!
//! With `b = size / R` (one link's time for the object), `s = segment / R`
//! (one segment's), `d` a hop's propagation delay and `H` the overlay's
//! depth in hops ([`Topology::depth`] of the shape rmcast builds for N
//! receivers), the data phase takes about:
//!
//! | shape | model | source |
//! |---|---|---|
//! | direct | `N·b + d` | the sender's uplink carries the object N times |
//! | tree, fanout f | `H·(f·b + d)` | Happe & Vinter: each level feeds its f children one after another |
//! | binomial | `⌈log2(N+1)⌉·(b + d)` | store-and-forward: the holders double every step |
//! | chain, bintree, pipeline | `b + H·(s + d)` | pipelined: the object once, plus one segment and one delay per hop |
//!
//! For the two store-and-forward shapes the model walks rmcast's own tree
//! rather than a complete one: a node that holds the object at `t` has fed
//! its k-th child by `t + k·b + d`, and the model is the latest such time
//! over all receivers. On a complete tree that is exactly the papers'
//! formula above (give or take hop delays: a node's later children wait
//! for its earlier ones, not for a delay each); on a partly filled last
//! level (or one receiver) it charges only the children that exist.
//!
//! The pipelined row is the papers' lower bound: it charges a hop one
//! segment time. A store-and-forward hop of TCP streams costs more (the
//! parent's uplink and the child's downlink each take `s`, and a node that
//! feeds k streams at once gives each `R/k`), so measured times sit above
//! it by a few segment times per hop; the gap is what the plots show.

use rmcast_proto::overlay::{OverlayShape, SENDER, Topology};
use std::time::Duration;

/// What a model needs to know about a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelInput {
    /// The overlay.
    pub shape: OverlayShape,
    /// Receivers (N).
    pub nodes: u16,
    /// Object size in bytes.
    pub size: u64,
    /// Bytes per segment.
    pub segment_size: u32,
    /// Every link's rate, bit/s.
    pub rate_bits_per_s: u64,
    /// One hop's propagation delay.
    pub latency: Duration,
}

/// The model's data-phase time for `m` (see the module documentation).
///
/// # Panics
/// If the rate or the group is zero.
#[must_use]
pub fn model_time(m: &ModelInput) -> Duration {
    assert!(
        m.rate_bits_per_s > 0 && m.nodes > 0,
        "a model needs a rate and receivers"
    );
    let per_byte = 8.0 / m.rate_bits_per_s as f64;
    let b = m.size as f64 * per_byte;
    let s = (m.segment_size as f64).min(m.size as f64) * per_byte;
    let d = m.latency.as_secs_f64();
    let n = f64::from(m.nodes);
    let topology = || Topology::build(m.shape, m.nodes);
    let secs = match m.shape {
        OverlayShape::Direct => n * b + d,
        OverlayShape::Tree { .. } | OverlayShape::Binomial => store_and_forward(&topology(), b, d),
        OverlayShape::Chain | OverlayShape::Bintree | OverlayShape::Pipeline => {
            b + topology().depth() as f64 * (s + d)
        }
    };
    Duration::from_secs_f64(secs)
}

/// The latest time any receiver holds the object when every node feeds
/// its children one after another, each in `b`, and a hop adds `d`.
fn store_and_forward(t: &Topology, b: f64, d: f64) -> f64 {
    let mut latest = 0.0f64;
    let mut stack = vec![(SENDER, 0.0f64)];
    while let Some((rank, at)) = stack.pop() {
        latest = latest.max(at);
        for (k, child) in t.node(rank).children.iter().enumerate() {
            stack.push((child.peer, at + (k + 1) as f64 * b + d));
        }
    }
    latest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(shape: OverlayShape, nodes: u16) -> ModelInput {
        ModelInput {
            shape,
            nodes,
            size: 16 << 20,
            segment_size: 8 << 10,
            rate_bits_per_s: 1_000_000_000,
            latency: Duration::from_micros(50),
        }
    }

    const B: f64 = (16u64 << 20) as f64 * 8.0 / 1e9;
    const S: f64 = (8u64 << 10) as f64 * 8.0 / 1e9;
    const D: f64 = 50e-6;

    fn close(t: Duration, want: f64) -> bool {
        (t.as_secs_f64() - want).abs() < 1e-9
    }

    #[test]
    fn the_models_are_the_papers_formulas() {
        assert!(close(
            model_time(&input(OverlayShape::Direct, 10)),
            10.0 * B + D
        ));
        // 30 receivers in a binary tree: 2 + 4 + 8 + 16 = 30, four levels.
        let tree = input(OverlayShape::Tree { fanout: 2 }, 30);
        assert!(close(model_time(&tree), 4.0 * (2.0 * B + D)));
        // 31 receivers and the sender are 32 nodes: five doublings.
        assert!(close(
            model_time(&input(OverlayShape::Binomial, 31)),
            5.0 * (B + D)
        ));
        assert!(close(
            model_time(&input(OverlayShape::Chain, 30)),
            B + 30.0 * (S + D)
        ));
    }

    #[test]
    fn store_and_forward_charges_only_the_children_that_exist() {
        // One receiver: one copy, whatever the fanout.
        let one = input(OverlayShape::Tree { fanout: 4 }, 1);
        assert!(close(model_time(&one), B + D));
        // 1,000 receivers in a binary tree: nine levels (2 + … + 512 =
        // 1,022), the last partly filled: at most the complete tree's
        // 9·(2b + d), at least eight full levels' 8·(2b + d).
        let t = model_time(&input(OverlayShape::Tree { fanout: 2 }, 1000)).as_secs_f64();
        assert!(
            (8.0 * (2.0 * B + D)..=9.0 * (2.0 * B + D) + 1e-9).contains(&t),
            "{t}"
        );
        // Binomial for every N: ⌈log2(N+1)⌉ doublings of the object (a
        // node's later children wait for its earlier ones, not for a hop
        // delay each, so the delays add up to less than one per round).
        for n in [1u16, 2, 3, 4, 7, 8, 30, 100, 1000] {
            let rounds = (f64::from(n) + 1.0).log2().ceil();
            let t = model_time(&input(OverlayShape::Binomial, n)).as_secs_f64();
            assert!(
                (rounds * B + D - 1e-9..=rounds * (B + D) + 1e-9).contains(&t),
                "N = {n}: {t}, {rounds} rounds"
            );
        }
    }

    #[test]
    fn pipelined_shapes_cost_the_object_once_plus_their_depth() {
        for shape in [OverlayShape::Bintree, OverlayShape::Pipeline] {
            for n in [1u16, 7, 30, 100, 1000] {
                let h = Topology::build(shape, n).depth() as f64;
                let t = model_time(&input(shape, n));
                assert!(close(t, B + h * (S + D)), "{shape:?} at N = {n}: {t:?}");
                // Logarithmic depth: far below the chain's N hops (the
                // pipeline's pairs add up to five, see its topology).
                assert!(
                    h <= (f64::from(n) + 1.0).log2().floor() + 5.0,
                    "{shape:?} {n}: {h}"
                );
            }
        }
    }

    #[test]
    fn a_segment_larger_than_the_object_costs_the_object() {
        let mut m = input(OverlayShape::Chain, 4);
        m.size = 1000;
        m.segment_size = 1 << 20;
        let b = 1000.0 * 8.0 / 1e9;
        assert!(close(model_time(&m), b + 4.0 * (b + D)));
    }

    #[test]
    fn times_grow_with_the_group() {
        let shapes = [
            OverlayShape::Direct,
            OverlayShape::Tree { fanout: 3 },
            OverlayShape::Binomial,
            OverlayShape::Chain,
            OverlayShape::Bintree,
            OverlayShape::Pipeline,
        ];
        for shape in shapes {
            let mut last = Duration::ZERO;
            for n in [1u16, 2, 4, 16, 100, 1000] {
                let t = model_time(&input(shape, n));
                assert!(t >= last, "{shape:?}: N = {n} takes {t:?} < {last:?}");
                last = t;
            }
        }
    }
}
