//! An object received into memory.

/// An object received into memory, hashed as its in-order prefix grows
/// (like a partial file), so verifying it at the end does not stop to read
/// the whole buffer.
pub(crate) struct Mem {
    pub(super) data: Vec<u8>,
    pub(super) hasher: Box<blake3::Hasher>,
    /// Bytes from the start already fed to `hasher`.
    pub(super) hashed: usize,
}

impl Mem {
    pub(super) fn catch_up(&mut self, upto: u64) {
        let upto = usize::try_from(upto).map_or(self.data.len(), |u| u.min(self.data.len()));
        if upto > self.hashed {
            self.hasher.update(&self.data[self.hashed..upto]);
            self.hashed = upto;
        }
    }
}

/// A zero-filled buffer of `size` bytes, or `None` if it cannot be
/// allocated. `alloc_zeroed` takes fresh zero pages from the system for
/// large sizes, so nothing is written (or made resident) before the data
/// arrives. (Not as transparent huge pages: measured on a 1 GiB object,
/// faulting and clearing 2 MiB pages cost receivers more system time than
/// 4 KiB ones.)
pub(super) fn zeroed_vec(size: usize) -> Option<Vec<u8>> {
    if size == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(size).ok()?;
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return None;
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout
    // of `size` u8s (capacity == length == size) and is zero-initialised.
    Some(unsafe { Vec::from_raw_parts(ptr, size, size) })
}

#[cfg(test)]
mod tests {
    use crate::storage::test_support::offer;
    use crate::storage::{Placement, Sink, Target, prepare};
    use rmcast_proto::SessionId;

    #[test]
    fn memory_is_hashed_ahead_in_any_order_and_rewrites_restart_the_hash() {
        let data: Vec<u8> = (0..9_500_000u32).map(|i| (i * 13 % 241) as u8).collect();
        let o = offer("m.bin", &data);
        let chunk = 100_000;
        let n = data.len().div_ceil(chunk);
        // Every other chunk first, then the rest backwards; hash ahead after each.
        let order: Vec<usize> = (0..n).step_by(2).chain((1..n).step_by(2).rev()).collect();
        let mut sink = prepare(
            &Target::Memory,
            &o,
            SessionId(11),
            None,
            Placement::default(),
        )
        .unwrap();
        let mut have = vec![false; n];
        let mut prefix = 0;
        for i in order {
            let end = ((i + 1) * chunk).min(data.len());
            sink.write((i * chunk) as u64, &data[i * chunk..end])
                .unwrap();
            have[i] = true;
            while prefix < n && have[prefix] {
                prefix += 1;
            }
            sink.hash_ahead((prefix * chunk).min(data.len()) as u64)
                .unwrap();
        }
        let Sink::Memory(m) = &sink else {
            panic!("not in memory")
        };
        assert_eq!(m.hashed, data.len(), "hashed ahead to the end");
        assert_eq!(sink.hash().unwrap(), *blake3::hash(&data).as_bytes());
        sink.write(5, &[data[5] ^ 1]).unwrap();
        assert_ne!(sink.hash().unwrap(), *blake3::hash(&data).as_bytes());
        let mut empty = prepare(
            &Target::Memory,
            &offer("e", &[]),
            SessionId(12),
            None,
            Placement::default(),
        )
        .unwrap();
        assert_eq!(empty.hash().unwrap(), *blake3::hash(&[]).as_bytes());
        assert!(empty.take_vec().is_empty());
    }
}
