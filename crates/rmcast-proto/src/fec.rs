//! Block FEC over data packets (issue 20), sans-IO: the erasure code
//! behind proactive and on-demand parity (`--fec K:P`; the protocols' use
//! of it is `transfer/sender/fec.rs` and `transfer/receiver/fec.rs`).
//!
//! A block is `data` packets (K) of at most `symbol` bytes each; the
//! encoder makes up to `parity` (P) parity packets from them, and a
//! receiver that holds any K of the block's K + P packets rebuilds the data
//! packets it lacks, whichever they are: one parity packet repairs a
//! different loss at every receiver. The code is systematic Reed–Solomon,
//! so any K packets suffice: over GF(2⁸) with a Cauchy matrix (`cauchy.rs`,
//! this crate's own) for blocks whose K + P is at most 256, where rebuilding
//! costs what the block lacks, one pass over the block per lost packet;
//! over GF(2¹⁶) (`reed-solomon-simd`) for larger ones, where a fixed 0.2 ms
//! a block buys the room. Both ends pick the code from the block's shape,
//! so it needs no field on the wire. Why these and not RaptorQ, and what
//! each costs: docs/performance.md, "FEC codecs".
//!
//! Packets shorter than the symbol (an object's last) are coded as if
//! padded with zeros; the caller knows their true length from the object's
//! size and cuts the rebuilt packet to it. Both ends keep their working
//! space between blocks ([`BlockEncoder::reset`], [`BlockDecoder::reset`]):
//! no allocation per packet.

mod cauchy;
mod gf8;

use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};

/// Whether a block of `data` data and `parity` parity packets uses the
/// GF(2⁸) Cauchy code (else the GF(2¹⁶) one): K + P ≤ 256.
#[must_use]
pub fn uses_gf8(data: u16, parity: u16) -> bool {
    u32::from(data) + u32::from(parity) <= cauchy::MAX_SYMBOLS
}

/// Most data packets in one block.
pub const MAX_DATA: u16 = 1024;

/// Largest ring of block data a FEC receiver keeps (every block a packet
/// inside the window can belong to); a sender refuses a configuration, and
/// a receiver an offer, that would need more. A window of 65,536 packets
/// of 1,444 bytes needs 91 MiB.
pub const MAX_RING_BYTES: u64 = 256 << 20;

/// Blocks a ring holds for `window` (a receiver's of block data, a
/// sender's of repair state): every block a packet inside the window can
/// belong to, the window counted from the start of the interleaving group
/// of its first packet, so whole groups of D blocks, two more than the
/// window spans. Slot `b mod n` holds block `b` (and, at a receiver, the
/// buffer of its packets while it is unfinished).
#[must_use]
pub fn ring_blocks(shape: rmcast_wire::FecShape, window: u32) -> u64 {
    let groups = u64::from(window.div_ceil(shape.group_len())) + 2;
    groups * u64::from(shape.depth.max(1))
}

/// The most bytes of block data a receiver holds for `shape` over
/// `window` packets of `payload_size` bytes (each kept in a slot of
/// [`BlockEncoder::shard_len`] bytes, `payload_size` rounded up to even): a
/// buffer for every slot of the ring. It holds one only per unfinished
/// block: about the interleaving depth D, one more while a block waits
/// for parity.
#[must_use]
pub fn ring_bytes(shape: rmcast_wire::FecShape, payload_size: usize, window: u32) -> u64 {
    ring_blocks(shape, window) * u64::from(shape.data) * shard_bytes(payload_size) as u64
}
/// Most parity packets for one block.
pub const MAX_PARITY: u16 = 1024;

/// What a block's shape or a packet got wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FecError {
    /// K or P outside 1..=[`MAX_DATA`] / 1..=[`MAX_PARITY`], or a symbol of 0 bytes.
    #[error(
        "a block of {data} data and {parity} parity packets of {symbol} bytes is not supported"
    )]
    Shape {
        /// K.
        data: u16,
        /// P.
        parity: u16,
        /// Bytes per packet.
        symbol: usize,
    },
    /// A packet longer than the block's symbol.
    #[error("a packet of {len} bytes does not fit a {symbol}-byte symbol")]
    TooLong {
        /// Its length.
        len: usize,
        /// The symbol.
        symbol: usize,
    },
    /// A packet index outside the block.
    #[error("packet {index} is outside a block of {count}")]
    Index {
        /// The index given.
        index: u16,
        /// Data or parity packets in the block.
        count: u16,
    },
    /// The encoder was asked for parity before it had all K data packets,
    /// or given more than K.
    #[error("the block has {have} of its {data} data packets")]
    Incomplete {
        /// Data packets added.
        have: u16,
        /// K.
        data: u16,
    },
    /// The decoder was asked to rebuild with fewer than K packets.
    #[error("{have} of the block's packets arrived; rebuilding needs {data}")]
    TooFew {
        /// Distinct packets held.
        have: u16,
        /// K.
        data: u16,
    },
    /// A buffer given to [`BlockDecoder::decode_in_place`] is too short.
    #[error("a buffer of {len} bytes is shorter than the {need} bytes it must hold")]
    Buffer {
        /// Its length.
        len: usize,
        /// What it must hold.
        need: usize,
    },
}

/// The code's shard size for `symbol`-byte packets (even, as GF(2¹⁶) wants).
fn shard_bytes(symbol: usize) -> usize {
    symbol + symbol % 2
}

fn check_shape(data: u16, parity: u16, symbol: usize) -> Result<(), FecError> {
    if (1..=MAX_DATA).contains(&data) && (1..=MAX_PARITY).contains(&parity) && symbol > 0 {
        Ok(())
    } else {
        Err(FecError::Shape {
            data,
            parity,
            symbol,
        })
    }
}

/// Shard `i` of `bytes` bytes in `buf`, shards laid end to end.
fn shard(buf: &[u8], i: impl Into<usize>, bytes: usize) -> &[u8] {
    let at = i.into() * bytes;
    &buf[at..at + bytes]
}

/// [`shard`], writable.
fn shard_mut(buf: &mut [u8], i: impl Into<usize>, bytes: usize) -> &mut [u8] {
    let at = i.into() * bytes;
    &mut buf[at..at + bytes]
}

/// `packet` as a whole shard: itself when it fills one, else copied into
/// `pad` and zero-filled to the end.
fn padded<'a>(pad: &'a mut [u8], packet: &'a [u8]) -> &'a [u8] {
    if packet.len() == pad.len() {
        return packet;
    }
    pad[..packet.len()].copy_from_slice(packet);
    pad[packet.len()..].fill(0);
    pad
}

/// The GF(2¹⁶) coder in `slot` set to a block's shape: made the first
/// time a block needs it, reset (keeping its working space) after.
fn made_or_reset<T>(
    slot: &mut Option<T>,
    make: impl FnOnce() -> Result<T, reed_solomon_simd::Error>,
    reset: impl FnOnce(&mut T) -> Result<(), reed_solomon_simd::Error>,
) {
    match slot {
        Some(rs) => checked(reset(rs)),
        None => *slot = Some(checked(make())),
    }
}

/// The error the code library cannot return for a checked shape.
fn checked<T>(r: Result<T, reed_solomon_simd::Error>) -> T {
    r.unwrap_or_else(|e| unreachable!("a checked block shape: {e}"))
}

/// Makes the parity packets of one block at a time.
pub struct BlockEncoder {
    /// The GF(2¹⁶) coder, made when a block first needs it.
    leopard: Option<ReedSolomonEncoder>,
    /// This block uses the GF(2⁸) Cauchy code.
    gf8: bool,
    data: u16,
    parity: u16,
    symbol: usize,
    added: u16,
    /// The block's data shards, end to end (the GF(2⁸) code encodes from
    /// them when a parity packet is asked for).
    shards: Vec<u8>,
    /// The parity shards made so far, and which.
    out: Vec<u8>,
    made: Vec<bool>,
    finished: bool,
    /// One zero-padded shard, for packets shorter than the symbol.
    pad: Vec<u8>,
}

impl std::fmt::Debug for BlockEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockEncoder")
            .field("data", &self.data)
            .field("parity", &self.parity)
            .field("symbol", &self.symbol)
            .field("gf8", &self.gf8)
            .field("added", &self.added)
            .finish_non_exhaustive()
    }
}

impl BlockEncoder {
    /// An encoder for blocks of `data` packets of at most `symbol` bytes
    /// with `parity` parity packets.
    pub fn new(data: u16, parity: u16, symbol: usize) -> Result<Self, FecError> {
        check_shape(data, parity, symbol)?;
        let mut e = Self {
            leopard: None,
            gf8: true,
            data,
            parity,
            symbol,
            added: 0,
            shards: Vec::new(),
            out: Vec::new(),
            made: Vec::new(),
            finished: false,
            pad: vec![0; shard_bytes(symbol)],
        };
        e.reset(data, parity)?;
        Ok(e)
    }

    /// Starts a new block, of this shape or another (an object's short
    /// last block), forgetting the packets added.
    pub fn reset(&mut self, data: u16, parity: u16) -> Result<(), FecError> {
        check_shape(data, parity, self.symbol)?;
        let bytes = shard_bytes(self.symbol);
        (self.data, self.parity, self.added) = (data, parity, 0);
        self.gf8 = uses_gf8(data, parity);
        self.finished = false;
        self.made.clear();
        self.made.resize(parity.into(), false);
        self.out.resize(usize::from(parity) * bytes, 0);
        if self.gf8 {
            self.shards.resize(usize::from(data) * bytes, 0);
        } else {
            let (d, p) = (data.into(), parity.into());
            made_or_reset(
                &mut self.leopard,
                || ReedSolomonEncoder::new(d, p, bytes),
                |rs| rs.reset(d, p, bytes),
            );
        }
        Ok(())
    }

    /// Adds the block's next data packet (in index order).
    pub fn push(&mut self, packet: &[u8]) -> Result<(), FecError> {
        if packet.len() > self.symbol {
            return Err(FecError::TooLong {
                len: packet.len(),
                symbol: self.symbol,
            });
        }
        if self.added == self.data || self.finished {
            return Err(FecError::Incomplete {
                have: self.added + 1,
                data: self.data,
            });
        }
        let shard = padded(&mut self.pad, packet);
        if self.gf8 {
            shard_mut(&mut self.shards, self.added, shard.len()).copy_from_slice(shard);
        } else if let Some(rs) = &mut self.leopard {
            checked(rs.add_original_shard(shard));
        }
        self.added += 1;
        Ok(())
    }

    /// Parity packet `index` of the block, [`shard_len`](Self::shard_len)
    /// bytes, once all its data packets were pushed (made on the first
    /// ask: the GF(2⁸) code makes only the parity packets asked for, the
    /// GF(2¹⁶) code all of them at once). The block stays until
    /// [`reset`](Self::reset).
    pub fn parity(&mut self, index: u16) -> Result<&[u8], FecError> {
        if self.added != self.data {
            return Err(FecError::Incomplete {
                have: self.added,
                data: self.data,
            });
        }
        if index >= self.parity {
            return Err(FecError::Index {
                index,
                count: self.parity,
            });
        }
        let bytes = shard_bytes(self.symbol);
        if !self.finished {
            self.finished = true;
            if let (false, Some(rs)) = (self.gf8, &mut self.leopard) {
                let result = checked(rs.encode());
                for (i, shard) in result.recovery_iter().enumerate() {
                    shard_mut(&mut self.out, i, bytes).copy_from_slice(shard);
                }
                self.made.fill(true);
            }
        }
        let out = shard_mut(&mut self.out, index, bytes);
        if !self.made[usize::from(index)] {
            cauchy::encode(&self.shards, self.data, bytes, index, out);
            self.made[usize::from(index)] = true;
        }
        Ok(out)
    }

    /// Bytes of one parity packet: the symbol, rounded up to even.
    #[must_use]
    pub fn shard_len(&self) -> usize {
        shard_bytes(self.symbol)
    }
}

/// Collects one block's packets at a receiver and rebuilds the data
/// packets it lacks once it holds any K.
pub struct BlockDecoder {
    /// The GF(2¹⁶) decoder, made when a block first needs it.
    leopard: Option<ReedSolomonDecoder>,
    /// This block uses the GF(2⁸) Cauchy code.
    gf8: bool,
    data: u16,
    parity: u16,
    symbol: usize,
    have_data: Vec<bool>,
    have_parity: Vec<bool>,
    held: u16,
    /// GF(2⁸): the data shards held (the lost ones' slots are rebuilt in
    /// place), the parity shards held (both sized by the first packet
    /// added: a caller that decodes in place never needs them), and the
    /// decoder's working space.
    shards: Vec<u8>,
    parity_shards: Vec<u8>,
    scratch: Vec<u8>,
    pad: Vec<u8>,
}

impl std::fmt::Debug for BlockDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockDecoder")
            .field("data", &self.data)
            .field("parity", &self.parity)
            .field("symbol", &self.symbol)
            .field("gf8", &self.gf8)
            .field("held", &self.held)
            .finish_non_exhaustive()
    }
}

impl BlockDecoder {
    /// A decoder for blocks of `data` packets of at most `symbol` bytes
    /// with up to `parity` parity packets.
    pub fn new(data: u16, parity: u16, symbol: usize) -> Result<Self, FecError> {
        check_shape(data, parity, symbol)?;
        let mut d = Self {
            leopard: None,
            gf8: true,
            data,
            parity,
            symbol,
            have_data: Vec::new(),
            have_parity: Vec::new(),
            held: 0,
            shards: Vec::new(),
            parity_shards: Vec::new(),
            scratch: Vec::new(),
            pad: vec![0; shard_bytes(symbol)],
        };
        d.reset(data, parity)?;
        Ok(d)
    }

    /// Starts a new block of this shape or another, forgetting what was
    /// held.
    pub fn reset(&mut self, data: u16, parity: u16) -> Result<(), FecError> {
        check_shape(data, parity, self.symbol)?;
        let bytes = shard_bytes(self.symbol);
        (self.data, self.parity, self.held) = (data, parity, 0);
        self.gf8 = uses_gf8(data, parity);
        self.have_data.clear();
        self.have_data.resize(data.into(), false);
        self.have_parity.clear();
        self.have_parity.resize(parity.into(), false);
        if self.gf8 {
            if !self.shards.is_empty() {
                self.size_copies();
            }
        } else {
            let (d, p) = (data.into(), parity.into());
            made_or_reset(
                &mut self.leopard,
                || ReedSolomonDecoder::new(d, p, bytes),
                |rs| rs.reset(d, p, bytes),
            );
        }
        Ok(())
    }

    /// GF(2⁸): the copies of the block's shards, sized at the first
    /// packet added (a caller that decodes in place never has them).
    fn make_copies(&mut self) {
        if self.gf8 && self.shards.is_empty() {
            self.size_copies();
        }
    }

    /// GF(2⁸): the copies of the block's shards, sized for its shape.
    fn size_copies(&mut self) {
        let bytes = shard_bytes(self.symbol);
        self.shards.resize(usize::from(self.data) * bytes, 0);
        self.parity_shards
            .resize(usize::from(self.parity) * bytes, 0);
    }

    /// Data packet `index` of the block arrived (`false`: a duplicate,
    /// ignored).
    pub fn add_data(&mut self, index: u16, packet: &[u8]) -> Result<bool, FecError> {
        self.check(index, self.data, packet.len())?;
        if std::mem::replace(&mut self.have_data[usize::from(index)], true) {
            return Ok(false);
        }
        self.make_copies();
        let shard = padded(&mut self.pad, packet);
        if self.gf8 {
            shard_mut(&mut self.shards, index, shard.len()).copy_from_slice(shard);
        } else if let Some(rs) = &mut self.leopard {
            checked(rs.add_original_shard(index.into(), shard));
        }
        self.held += 1;
        Ok(true)
    }

    /// Parity packet `index` of the block arrived (`false`: a duplicate,
    /// ignored).
    pub fn add_parity(&mut self, index: u16, shard: &[u8]) -> Result<bool, FecError> {
        if shard.len() != self.pad.len() {
            return Err(FecError::TooLong {
                len: shard.len(),
                symbol: self.pad.len(),
            });
        }
        self.check(index, self.parity, 0)?;
        if std::mem::replace(&mut self.have_parity[usize::from(index)], true) {
            return Ok(false);
        }
        self.make_copies();
        if self.gf8 {
            shard_mut(&mut self.parity_shards, index, shard.len()).copy_from_slice(shard);
        } else if let Some(rs) = &mut self.leopard {
            checked(rs.add_recovery_shard(index.into(), shard));
        }
        self.held += 1;
        Ok(true)
    }

    fn check(&self, index: u16, count: u16, len: usize) -> Result<(), FecError> {
        if index >= count {
            return Err(FecError::Index { index, count });
        }
        if len > self.symbol {
            return Err(FecError::TooLong {
                len,
                symbol: self.symbol,
            });
        }
        Ok(())
    }

    /// How many more packets of the block (data or parity, any) this
    /// receiver needs: what its feedback reports, so that the sender can
    /// answer every receiver with the largest such count of new parity.
    #[must_use]
    pub fn lacks(&self) -> u16 {
        if self.have_data.iter().all(|&h| h) {
            0
        } else {
            self.data.saturating_sub(self.held)
        }
    }

    /// The data packets not received, in index order.
    pub fn missing(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.data).filter(|&i| !self.have_data[usize::from(i)])
    }

    /// Rebuilds the data packets the block lacks, as `(index, packet)`
    /// (each [`shard_len`](BlockEncoder::shard_len) bytes: cut the last
    /// packet of an object to its length). The decoder is then ready for
    /// the next block of the same shape.
    pub fn decode(&mut self) -> Result<Vec<(u16, Vec<u8>)>, FecError> {
        if self.lacks() > 0 {
            return Err(FecError::TooFew {
                have: self.held,
                data: self.data,
            });
        }
        let missing: Vec<u16> = self.missing().collect();
        let shape = (self.data, self.parity);
        if missing.is_empty() {
            // Nothing to rebuild; forget the block.
            self.reset(shape.0, shape.1)?;
            return Ok(Vec::new());
        }
        let bytes = shard_bytes(self.symbol);
        let restored = if self.gf8 {
            let parity: Vec<(u16, &[u8])> = (0..self.parity)
                .filter(|&i| self.have_parity[usize::from(i)])
                .take(missing.len())
                .map(|i| (i, shard(&self.parity_shards, i, bytes)))
                .collect();
            cauchy::decode(
                &mut self.shards,
                self.data,
                bytes,
                &missing,
                |a| parity[a],
                &mut self.scratch,
            );
            (missing.iter())
                .map(|&i| (i, shard(&self.shards, i, bytes).to_vec()))
                .collect()
        } else {
            let rs = self
                .leopard
                .as_mut()
                .expect("the GF(2¹⁶) decoder of this block");
            let result = checked(rs.decode());
            (missing.iter())
                .map(|&i| {
                    let bytes = result.restored_original(i.into());
                    (i, bytes.expect("a missing packet is restored").to_vec())
                })
                .collect()
        };
        self.reset(shape.0, shape.1)?;
        Ok(restored)
    }

    /// Whether a block of `data` packets of this decoder's parity space
    /// can be rebuilt in the caller's buffer
    /// ([`BlockDecoder::decode_in_place`]): a block of the GF(2⁸) code.
    #[must_use]
    pub fn decodes_in_place(&self, data: u16) -> bool {
        (1..=MAX_DATA).contains(&data) && uses_gf8(data, self.parity)
    }

    /// Rebuilds the data packets `lost` of a block of `data` packets in
    /// `block`, which holds its data packets end to end, each in a slot of
    /// [`shard_len`](BlockEncoder::shard_len) bytes, zero-padded (the lost
    /// ones' slots are overwritten): no copy of the block is made. `rows`
    /// names parity packets held and `parity` holds their bytes end to
    /// end, in that order; the first `lost.len()` are used. What
    /// [`BlockDecoder::add_data`] and [`BlockDecoder::add_parity`] held is
    /// left as it was. Only for blocks that
    /// [`BlockDecoder::decodes_in_place`].
    pub fn decode_in_place(
        &mut self,
        block: &mut [u8],
        data: u16,
        lost: &[u16],
        rows: &[u16],
        parity: &[u8],
    ) -> Result<(), FecError> {
        let bytes = shard_bytes(self.symbol);
        if !self.decodes_in_place(data) {
            return Err(FecError::Shape {
                data,
                parity: self.parity,
                symbol: self.symbol,
            });
        }
        if rows.len() < lost.len() {
            let have = usize::from(data).saturating_sub(lost.len()) + rows.len();
            return Err(FecError::TooFew {
                have: u16::try_from(have).unwrap_or(u16::MAX),
                data,
            });
        }
        for (len, need) in [
            (block.len(), usize::from(data) * bytes),
            (parity.len(), lost.len() * bytes),
        ] {
            if len < need {
                return Err(FecError::Buffer { len, need });
            }
        }
        for (k, &i) in lost.iter().enumerate() {
            if i >= data || lost[..k].contains(&i) {
                return Err(FecError::Index {
                    index: i,
                    count: data,
                });
            }
        }
        for &r in &rows[..lost.len()] {
            if r >= self.parity {
                return Err(FecError::Index {
                    index: r,
                    count: self.parity,
                });
            }
        }
        cauchy::decode(
            &mut block[..usize::from(data) * bytes],
            data,
            bytes,
            lost,
            |a| (rows[a], shard(parity, a, bytes)),
            &mut self.scratch,
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests;
