//! Systematic Reed–Solomon over GF(2⁸) with a Cauchy matrix, for blocks
//! of at most 256 packets, data and parity together.
//!
//! Parity packet i of a block is Σⱼ C[i][j] · dⱼ with C[i][j] = 1 / (xᵢ + yⱼ),
//! xᵢ = i and yⱼ = 255 − j: the points are distinct while K + P ≤ 256, and
//! every square submatrix of a Cauchy matrix is invertible, so any K of the
//! K + P packets determine the block (MDS). The matrix does not depend on
//! K, so a short last block's parity is the same formula over fewer packets.
//!
//! What it costs is what makes it worth having beside the GF(2¹⁶) code:
//! rebuilding e lost packets is e · (K − e) + e² passes of `dst ^= c · src`
//! over a packet, plus an e × e inversion, so a block that lacks one packet
//! costs one pass over the block (microseconds), where the GF(2¹⁶) code pays
//! its error locator (about 0.2 ms) whatever it lacks. Encoding is one pass
//! per parity packet, made only when asked for.

use super::{gf8, shard, shard_mut};

/// Most packets, data and parity, in one block of this code.
pub(super) const MAX_SYMBOLS: u32 = 256;

/// C[i][j]: the weight of data packet `j` in parity packet `i`.
fn coef(i: u16, j: u16) -> u8 {
    // i < P and j < K with K + P <= 256: xᵢ = i and yⱼ = 255 - j never meet.
    debug_assert!(u32::from(i) + u32::from(j) < MAX_SYMBOLS - 1);
    gf8::inv((i as u8) ^ (255 - j as u8))
}

/// Parity packet `i` of the `k` data shards of `bytes` each, laid end to
/// end in `data`, into `out` (`bytes` long).
pub(super) fn encode(data: &[u8], k: u16, bytes: usize, i: u16, out: &mut [u8]) {
    out.fill(0);
    for j in 0..k {
        gf8::mul_add(coef(i, j), shard(data, j, bytes), out);
    }
}

/// Rebuilds, in place in `data` (`k` shards of `bytes` end to end), the
/// data shards named in `lost` from the others and `lost.len()` parity
/// shards, the `a`-th being `parity(a)` = (its index, its bytes); `scratch`
/// is working space kept between calls.
pub(super) fn decode<'p>(
    data: &mut [u8],
    k: u16,
    bytes: usize,
    lost: &[u16],
    parity: impl Fn(usize) -> (u16, &'p [u8]),
    scratch: &mut Vec<u8>,
) {
    let e = lost.len();
    // Syndromes: each parity shard less the shards that came, leaving
    // s_a = Σ_b C[r_a][l_b] · d_{l_b}, the lost shards' part.
    scratch.clear();
    scratch.resize(e * bytes, 0);
    for a in 0..e {
        let (r, parity_shard) = parity(a);
        let s = shard_mut(scratch, a, bytes);
        s.copy_from_slice(parity_shard);
        for j in (0..k).filter(|j| !lost.contains(j)) {
            gf8::mul_add(coef(r, j), shard(data, j, bytes), s);
        }
    }
    // d_L = M⁻¹ s with M[a][b] = C[r_a][l_b].
    let mut m: Vec<u8> = (0..e)
        .flat_map(|a| {
            let r = parity(a).0;
            lost.iter().map(move |&l| coef(r, l))
        })
        .collect();
    let inv = invert(&mut m, e);
    for (b, &l) in lost.iter().enumerate() {
        let d = shard_mut(data, l, bytes);
        d.fill(0);
        for a in 0..e {
            gf8::mul_add(inv[b * e + a], shard(scratch, a, bytes), d);
        }
    }
}

/// The inverse of the `n` × `n` matrix `m` (row-major; consumed), by
/// Gauss–Jordan elimination. A Cauchy submatrix is always invertible.
fn invert(m: &mut [u8], n: usize) -> Vec<u8> {
    let mut inv = vec![0u8; n * n];
    for i in 0..n {
        inv[i * n + i] = 1;
    }
    for col in 0..n {
        let pivot = (col..n)
            .find(|&r| m[r * n + col] != 0)
            .expect("a Cauchy submatrix is invertible");
        if pivot != col {
            for c in 0..n {
                m.swap(pivot * n + c, col * n + c);
                inv.swap(pivot * n + c, col * n + c);
            }
        }
        let scale = gf8::inv(m[col * n + col]);
        for c in 0..n {
            m[col * n + c] = gf8::mul(m[col * n + c], scale);
            inv[col * n + c] = gf8::mul(inv[col * n + c], scale);
        }
        for r in (0..n).filter(|&r| r != col) {
            let f = m[r * n + col];
            if f == 0 {
                continue;
            }
            for c in 0..n {
                m[r * n + c] ^= gf8::mul(f, m[col * n + c]);
                inv[r * n + c] ^= gf8::mul(f, inv[col * n + c]);
            }
        }
    }
    inv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_square_submatrix_met_in_practice_inverts() {
        // The inverse times the matrix is the identity, for lost sets and
        // parity rows at both ends of the code's range.
        for (rows, cols) in [
            (vec![0u16], vec![0u16]),
            (vec![0, 1, 2], vec![5, 9, 63]),
            (vec![127, 3], vec![0, 127]),
            ((0..16).collect(), (100..116).collect()),
        ] {
            let n = rows.len();
            let m: Vec<u8> = rows
                .iter()
                .flat_map(|&r| cols.iter().map(move |&c| coef(r, c)))
                .collect();
            let inv = invert(&mut m.clone(), n);
            for i in 0..n {
                for j in 0..n {
                    let v = (0..n).fold(0, |acc, t| acc ^ gf8::mul(inv[i * n + t], m[t * n + j]));
                    assert_eq!(v, u8::from(i == j), "{rows:?} x {cols:?} at {i},{j}");
                }
            }
        }
    }
}
