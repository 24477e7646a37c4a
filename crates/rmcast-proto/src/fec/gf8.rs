//! GF(2⁸) arithmetic for the Cauchy block code: the field of bytes modulo
//! x⁸ + x⁴ + x³ + x² + 1 (0x11D), with a product table built at compile
//! time, and the one bulk operation the code needs, `dst ^= c · src` over
//! a packet, in AVX2 (two 16-entry tables and a byte shuffle per 32 bytes)
//! where the CPU has it and through the product table elsewhere.

const POLY: u16 = 0x11D;

/// `EXP[i]` = g^i for the generator g = 2, twice over so that a sum of two
/// logarithms indexes it directly.
const EXP: [u8; 512] = {
    let mut t = [0u8; 512];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        t[i] = x as u8;
        t[i + 255] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    t[510] = t[0];
    t[511] = t[1];
    t
};

/// `LOG[x]` for x ≠ 0 (`LOG[0]` is unused).
const LOG: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        t[EXP[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// `MUL[a][b]` = a · b: 64 KiB, the scalar path's table.
static MUL: [[u8; 256]; 256] = {
    let mut t = [[0u8; 256]; 256];
    let mut a = 1;
    while a < 256 {
        let mut b = 1;
        while b < 256 {
            t[a][b] = EXP[LOG[a] as usize + LOG[b] as usize];
            b += 1;
        }
        a += 1;
    }
    t
};

/// a · b.
#[must_use]
pub fn mul(a: u8, b: u8) -> u8 {
    MUL[usize::from(a)][usize::from(b)]
}

/// 1 / a; `a` must not be zero.
#[must_use]
pub fn inv(a: u8) -> u8 {
    debug_assert_ne!(a, 0, "zero has no inverse");
    EXP[255 - usize::from(LOG[usize::from(a)])]
}

/// `dst[i] ^= c · src[i]` for every i (the slices are equally long).
pub fn mul_add(c: u8, src: &[u8], dst: &mut [u8]) {
    assert_eq!(src.len(), dst.len(), "mul_add over unequal slices");
    match c {
        0 => {}
        1 => dst.iter_mut().zip(src).for_each(|(d, s)| *d ^= s),
        _ => {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                let (lo, hi) = nibble_tables(c);
                // SAFETY: the CPU has AVX2 (checked just above), which is
                // all `mul_add_avx2` assumes; it stays inside the slices.
                unsafe { mul_add_avx2(&lo, &hi, src, dst) };
                return;
            }
            mul_add_scalar(c, src, dst);
        }
    }
}

/// The scalar path: one table lookup per byte.
fn mul_add_scalar(c: u8, src: &[u8], dst: &mut [u8]) {
    let row = &MUL[usize::from(c)];
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= row[usize::from(*s)];
    }
}

/// c · x for the low nibbles x and for the high nibbles x << 4: a byte's
/// product is the XOR of its two nibbles' products.
fn nibble_tables(c: u8) -> ([u8; 16], [u8; 16]) {
    let row = &MUL[usize::from(c)];
    let mut lo = [0u8; 16];
    let mut hi = [0u8; 16];
    for x in 0..16 {
        lo[x] = row[x];
        hi[x] = row[x << 4];
    }
    (lo, hi)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn mul_add_avx2(lo: &[u8; 16], hi: &[u8; 16], src: &[u8], dst: &mut [u8]) {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm_loadu_si128, _mm256_and_si256, _mm256_broadcastsi128_si256,
        _mm256_loadu_si256, _mm256_set1_epi8, _mm256_shuffle_epi8, _mm256_srli_epi64,
        _mm256_storeu_si256, _mm256_xor_si256,
    };
    let n = src.len().min(dst.len());
    let whole = n / 32 * 32;
    // SAFETY: every load and store below is of 16 or 32 bytes at an offset
    // `i` with `i + 32 <= whole <= n`, inside both slices (unaligned
    // accesses); the tables are 16 bytes.
    unsafe {
        let lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(lo.as_ptr().cast::<__m128i>()));
        let hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(hi.as_ptr().cast::<__m128i>()));
        let mask = _mm256_set1_epi8(0x0F);
        let mut i = 0;
        while i < whole {
            let s = _mm256_loadu_si256(src.as_ptr().add(i).cast::<__m256i>());
            let l = _mm256_and_si256(s, mask);
            let h = _mm256_and_si256(_mm256_srli_epi64::<4>(s), mask);
            let p = _mm256_xor_si256(_mm256_shuffle_epi8(lo, l), _mm256_shuffle_epi8(hi, h));
            let d = dst.as_mut_ptr().add(i).cast::<__m256i>();
            _mm256_storeu_si256(d, _mm256_xor_si256(_mm256_loadu_si256(d), p));
            i += 32;
        }
    }
    for i in whole..n {
        dst[i] ^= lo[usize::from(src[i] & 0x0F)] ^ hi[usize::from(src[i] >> 4)];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Carry-less multiplication modulo the polynomial, bit by bit: the
    /// definition the tables must agree with.
    fn slow_mul(a: u8, b: u8) -> u8 {
        let (mut a, mut b, mut p) = (u16::from(a), b, 0u16);
        while b != 0 {
            if b & 1 != 0 {
                p ^= a;
            }
            a <<= 1;
            if a & 0x100 != 0 {
                a ^= POLY;
            }
            b >>= 1;
        }
        p as u8
    }

    #[test]
    fn the_tables_are_the_field() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), slow_mul(a, b), "{a} * {b}");
            }
            if a != 0 {
                assert_eq!(mul(a, inv(a)), 1, "{a} * 1/{a}");
            }
        }
    }

    #[test]
    fn the_bulk_paths_agree_with_the_definition() {
        // Lengths around the 32-byte stride, every factor.
        let src: Vec<u8> = (0..100u32).map(|i| (i * 37 + 11) as u8).collect();
        for len in [0, 1, 31, 32, 33, 64, 100] {
            for c in 0..=255u8 {
                let start: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
                let mut fast = start.clone();
                mul_add(c, &src[..len], &mut fast);
                let mut scalar = start.clone();
                mul_add_scalar(c, &src[..len], &mut scalar);
                let want: Vec<u8> = (0..len).map(|i| start[i] ^ slow_mul(c, src[i])).collect();
                assert_eq!(fast, want, "c = {c}, len = {len}");
                if c > 1 {
                    assert_eq!(scalar, want, "scalar, c = {c}, len = {len}");
                }
            }
        }
    }
}
