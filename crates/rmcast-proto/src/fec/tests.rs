use super::*;
use proptest::prelude::*;

/// K data packets of `symbol` bytes, the last `last` bytes long.
fn packets(k: u16, symbol: usize, last: usize, seed: u8) -> Vec<Vec<u8>> {
    (0..k)
        .map(|i| {
            let len = if i + 1 == k { last } else { symbol };
            (0..len)
                .map(|j| (j as u8).wrapping_mul(31) ^ (i as u8) ^ seed)
                .collect()
        })
        .collect()
}

fn parity_of(enc: &mut BlockEncoder, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    for p in data {
        enc.push(p).unwrap();
    }
    let count = enc.parity;
    (0..count)
        .map(|i| enc.parity(i).unwrap().to_vec())
        .collect()
}

/// A block of `k` data packets, its `p` parity packets, and up to `p` of
/// the `k + p` erased.
#[derive(Debug)]
struct Erased {
    k: u16,
    p: u16,
    symbol: usize,
    /// The code's shard size for `symbol`.
    bytes: usize,
    data: Vec<Vec<u8>>,
    parity: Vec<Vec<u8>>,
    /// Indices into data ++ parity, ascending.
    lost: Vec<usize>,
}

/// Blocks of `k` data packets and `p` parity packets, packets of 1 to 64
/// bytes (odd and even) with a short last one, and up to `p` erasures
/// anywhere among the `k + p`.
fn erased(
    k: std::ops::RangeInclusive<u16>,
    p: std::ops::RangeInclusive<u16>,
) -> impl Strategy<Value = Erased> {
    (
        k,
        p,
        1usize..=64,
        0.0..=1.0f64,
        any::<u8>(),
        proptest::collection::vec(any::<prop::sample::Index>(), 0..=64),
    )
        .prop_map(|(k, p, symbol, last_frac, seed, picks)| {
            let last = ((symbol as f64 * last_frac) as usize).max(1);
            let data = packets(k, symbol, last, seed);
            let mut enc = BlockEncoder::new(k, p, symbol).unwrap();
            let parity = parity_of(&mut enc, &data);
            let total = usize::from(k + p);
            let mut lost: Vec<usize> = picks.iter().map(|ix| ix.index(total)).collect();
            lost.sort_unstable();
            lost.dedup();
            lost.truncate(usize::from(p));
            Erased {
                k,
                p,
                symbol,
                bytes: enc.shard_len(),
                data,
                parity,
                lost,
            }
        })
}

/// Delivers the packets `lost` does not name (indices into data ++ parity),
/// rebuilds, and returns the data packets as the receiver then holds them,
/// each cut to its true length.
fn receive(
    dec: &mut BlockDecoder,
    data: &[Vec<u8>],
    parity: &[Vec<u8>],
    lost: &[usize],
) -> Result<Vec<Vec<u8>>, FecError> {
    let mut held: Vec<Option<Vec<u8>>> = vec![None; data.len()];
    for (i, p) in data.iter().enumerate() {
        if !lost.contains(&i) {
            assert!(dec.add_data(i as u16, p)?);
            held[i] = Some(p.clone());
        }
    }
    for (j, p) in parity.iter().enumerate() {
        if !lost.contains(&(data.len() + j)) {
            assert!(dec.add_parity(j as u16, p)?);
        }
    }
    for (i, bytes) in dec.decode()? {
        let i = usize::from(i);
        assert!(held[i].is_none(), "packet {i} rebuilt although it came");
        held[i] = Some(bytes[..data[i].len()].to_vec());
    }
    Ok(held
        .into_iter()
        .map(|p| p.expect("every packet held"))
        .collect())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x6665_6331),
        ..ProptestConfig::default()
    })]

    /// Any erasure pattern of up to P of the K + P packets, blocks of 1 to
    /// 255 data packets, odd and even symbols, a short last packet: the
    /// receiver rebuilds every data packet byte for byte.
    #[test]
    fn any_p_erasures_are_repaired(b in erased(1..=255, 1..=32)) {
        let Erased { k, p, symbol, data, parity, lost, .. } = b;
        prop_assert_eq!(parity.len(), usize::from(p));
        let mut dec = BlockDecoder::new(k, p, symbol).unwrap();
        let got = receive(&mut dec, &data, &parity, &lost).unwrap();
        prop_assert_eq!(got, data);
    }

    /// The same in the caller's buffer: any erasure pattern of up to P of
    /// the K + P packets (GF(2⁸) shapes, K + P ≤ 256), the parity used in
    /// any order, a short last packet: every data packet's slot then holds
    /// it zero-padded, byte for byte, and the lost slots' old bytes (a
    /// reused buffer) do not matter.
    #[test]
    fn any_p_erasures_are_repaired_in_place(
        b in erased(1..=200, 1..=56),
        reversed in any::<bool>(),
    ) {
        let Erased { k, p, symbol, bytes, data, parity, lost } = b;
        // The block buffer: held packets zero-padded, lost slots garbage.
        let mut block = vec![0xa5u8; usize::from(k) * bytes];
        for (i, d) in data.iter().enumerate() {
            if !lost.contains(&i) {
                let slot = &mut block[i * bytes..(i + 1) * bytes];
                slot[..d.len()].copy_from_slice(d);
                slot[d.len()..].fill(0);
            }
        }
        let lost_data: Vec<u16> = lost
            .iter()
            .filter(|&&i| i < usize::from(k))
            .map(|&i| i as u16)
            .collect();
        let mut rows: Vec<u16> = (0..p).filter(|j| !lost.contains(&(usize::from(k + j)))).collect();
        if reversed {
            rows.reverse();
        }
        let held: Vec<u8> = rows.iter().flat_map(|&j| parity[usize::from(j)].clone()).collect();
        let mut dec = BlockDecoder::new(k, p, symbol).unwrap();
        prop_assert_eq!(dec.decodes_in_place(k), k + p <= 256);
        prop_assume!(k + p <= 256);
        dec.decode_in_place(&mut block, k, &lost_data, &rows, &held).unwrap();
        for (i, d) in data.iter().enumerate() {
            let slot = &block[i * bytes..(i + 1) * bytes];
            prop_assert_eq!(&slot[..d.len()], &d[..], "packet {}", i);
            prop_assert!(slot[d.len()..].iter().all(|&b| b == 0), "packet {} padding", i);
        }
    }

    /// More than P erasures: the decoder says how many packets it lacks
    /// and rebuilds nothing (never wrong bytes).
    #[test]
    fn more_than_p_erasures_are_reported_not_guessed(
        k in 2u16..=64,
        p in 1u16..=8,
        extra in 1u16..=8,
    ) {
        let data = packets(k, 40, 40, 7);
        let mut enc = BlockEncoder::new(k, p, 40).unwrap();
        let parity = parity_of(&mut enc, &data);
        let lose = (p + extra).min(k);
        prop_assume!(lose > p);
        let mut dec = BlockDecoder::new(k, p, 40).unwrap();
        for (i, d) in data.iter().enumerate().skip(usize::from(lose)) {
            dec.add_data(i as u16, d).unwrap();
        }
        for (j, s) in parity.iter().enumerate() {
            dec.add_parity(j as u16, s).unwrap();
        }
        prop_assert_eq!(dec.lacks(), lose - p);
        prop_assert_eq!(dec.missing().count(), usize::from(lose));
        prop_assert_eq!(
            dec.decode().unwrap_err(),
            FecError::TooFew { have: k - lose + p, data: k }
        );
    }
}

#[test]
fn the_largest_blocks_round_trip() {
    let (k, p, symbol) = (MAX_DATA, 64, 1400);
    let data = packets(k, symbol, 700, 3);
    let mut enc = BlockEncoder::new(k, p, symbol).unwrap();
    let parity = parity_of(&mut enc, &data);
    let lost: Vec<usize> = (0..usize::from(k))
        .step_by(17)
        .take(usize::from(p))
        .collect();
    let mut dec = BlockDecoder::new(k, p, symbol).unwrap();
    assert_eq!(receive(&mut dec, &data, &parity, &lost).unwrap(), data);
}

#[test]
fn a_short_last_block_reuses_the_coder() {
    let mut enc = BlockEncoder::new(32, 4, 100).unwrap();
    let mut dec = BlockDecoder::new(32, 4, 100).unwrap();
    let full = packets(32, 100, 100, 1);
    let parity = parity_of(&mut enc, &full);
    assert_eq!(
        receive(&mut dec, &full, &parity, &[0, 5, 33]).unwrap(),
        full
    );
    // The object's last block: 5 packets, the last 17 bytes long.
    enc.reset(5, 2).unwrap();
    dec.reset(5, 2).unwrap();
    let tail = packets(5, 100, 17, 2);
    let parity = parity_of(&mut enc, &tail);
    assert_eq!(receive(&mut dec, &tail, &parity, &[4, 1]).unwrap(), tail);
}

#[test]
fn duplicates_are_ignored_and_a_whole_block_needs_no_parity() {
    let data = packets(8, 50, 50, 9);
    let mut dec = BlockDecoder::new(8, 2, 50).unwrap();
    assert!(dec.add_data(3, &data[3]).unwrap());
    assert!(!dec.add_data(3, &data[3]).unwrap());
    assert_eq!(dec.lacks(), 7);
    for (i, d) in data.iter().enumerate() {
        dec.add_data(i as u16, d).unwrap();
    }
    assert_eq!(dec.lacks(), 0);
    assert_eq!(dec.decode().unwrap(), Vec::new());
    // And the decoder is ready for the next block.
    assert_eq!(dec.lacks(), 8);
}

#[test]
fn bad_shapes_and_packets_are_refused() {
    assert!(matches!(
        BlockEncoder::new(0, 1, 10),
        Err(FecError::Shape { .. })
    ));
    assert!(matches!(
        BlockEncoder::new(1, 0, 10),
        Err(FecError::Shape { .. })
    ));
    assert!(matches!(
        BlockDecoder::new(MAX_DATA + 1, 1, 10),
        Err(FecError::Shape { .. })
    ));
    assert!(matches!(
        BlockDecoder::new(4, 2, 0),
        Err(FecError::Shape { .. })
    ));
    let mut enc = BlockEncoder::new(2, 1, 10).unwrap();
    assert_eq!(
        enc.push(&[0; 11]),
        Err(FecError::TooLong {
            len: 11,
            symbol: 10
        })
    );
    enc.push(&[1; 10]).unwrap();
    assert!(matches!(
        enc.parity(0),
        Err(FecError::Incomplete { have: 1, data: 2 })
    ));
    enc.push(&[2; 3]).unwrap();
    assert!(matches!(
        enc.push(&[3; 3]),
        Err(FecError::Incomplete { .. })
    ));
    assert_eq!(enc.parity(1), Err(FecError::Index { index: 1, count: 1 }));
    assert_eq!(enc.parity(0).unwrap().len(), 10);
    let mut dec = BlockDecoder::new(2, 1, 10).unwrap();
    assert_eq!(
        dec.add_data(2, &[0; 4]),
        Err(FecError::Index { index: 2, count: 2 })
    );
    assert_eq!(
        dec.add_parity(1, &[0; 10]),
        Err(FecError::Index { index: 1, count: 1 })
    );
    assert!(matches!(
        dec.add_parity(0, &[0; 9]),
        Err(FecError::TooLong { .. })
    ));
}

#[test]
fn decoding_in_place_refuses_what_it_cannot_do() {
    let (k, p, symbol) = (4u16, 2u16, 10usize);
    let data = packets(k, symbol, symbol, 3);
    let mut enc = BlockEncoder::new(k, p, symbol).unwrap();
    let parity = parity_of(&mut enc, &data);
    let bytes = enc.shard_len();
    let held: Vec<u8> = parity.concat();
    let mut block = vec![0u8; usize::from(k) * bytes];
    let mut dec = BlockDecoder::new(k, p, symbol).unwrap();
    // Fewer parity packets than lost packets.
    assert_eq!(
        dec.decode_in_place(&mut block, k, &[0, 1, 2], &[0, 1], &held),
        Err(FecError::TooFew { have: 3, data: k })
    );
    // A buffer short of K slots, parity bytes short of what is named.
    assert_eq!(
        dec.decode_in_place(&mut block[..bytes], k, &[0], &[0], &held),
        Err(FecError::Buffer {
            len: bytes,
            need: 4 * bytes
        })
    );
    assert_eq!(
        dec.decode_in_place(&mut block, k, &[0, 1], &[0, 1], &held[..bytes]),
        Err(FecError::Buffer {
            len: bytes,
            need: 2 * bytes
        })
    );
    // Positions outside the block, twice, parity outside the code.
    assert_eq!(
        dec.decode_in_place(&mut block, k, &[4], &[0], &held),
        Err(FecError::Index { index: 4, count: k })
    );
    assert_eq!(
        dec.decode_in_place(&mut block, k, &[1, 1], &[0, 1], &held),
        Err(FecError::Index { index: 1, count: k })
    );
    assert_eq!(
        dec.decode_in_place(&mut block, k, &[1], &[2], &held),
        Err(FecError::Index { index: 2, count: p })
    );
    // The GF(2¹⁶) code's shapes are not rebuilt in place.
    let mut big = BlockDecoder::new(200, 100, symbol).unwrap();
    assert!(!big.decodes_in_place(200));
    assert!(big.decodes_in_place(100));
    let mut wide = vec![0u8; 200 * bytes];
    assert!(matches!(
        big.decode_in_place(&mut wide, 200, &[0], &[0], &held),
        Err(FecError::Shape { data: 200, .. })
    ));
    // Nothing lost: nothing to do, nothing touched.
    let before = block.clone();
    dec.decode_in_place(&mut block, k, &[], &[], &[]).unwrap();
    assert_eq!(block, before);
}
