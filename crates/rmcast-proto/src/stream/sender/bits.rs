//! Fixed-size bitsets, preallocated for the send buffer: one row per slot,
//! one bit per member.

/// Fixed-size bitsets, one row of `words` u64 per send-buffer slot.
#[derive(Debug)]
pub(super) struct Bits {
    pub(super) words: usize,
    pub(super) data: Vec<u64>,
}

impl Bits {
    pub(super) fn new(rows: usize, bits: usize) -> Self {
        let words = bits.div_ceil(64).max(1);
        Self {
            words,
            data: vec![0; rows * words],
        }
    }
    pub(super) fn grow(&mut self, rows: usize, bits: usize) {
        let words = bits.div_ceil(64).max(1);
        if words > self.words {
            let mut data = vec![0; rows * words];
            for r in 0..rows {
                data[r * words..r * words + self.words]
                    .copy_from_slice(&self.data[r * self.words..(r + 1) * self.words]);
            }
            self.words = words;
            self.data = data;
        }
    }
    pub(super) fn get(&self, row: usize, bit: usize) -> bool {
        self.data[row * self.words + bit / 64] & (1 << (bit % 64)) != 0
    }
    pub(super) fn set(&mut self, row: usize, bit: usize) {
        self.data[row * self.words + bit / 64] |= 1 << (bit % 64);
    }
    pub(super) fn clear(&mut self, row: usize, bit: usize) {
        self.data[row * self.words + bit / 64] &= !(1 << (bit % 64));
    }
    pub(super) fn clear_row(&mut self, row: usize) {
        self.data[row * self.words..(row + 1) * self.words].fill(0);
    }
    pub(super) fn first_set(&self, row: usize) -> Option<usize> {
        let r = &self.data[row * self.words..(row + 1) * self.words];
        r.iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::Bits;

    #[test]
    fn rows_are_independent_across_word_boundaries() {
        let mut b = Bits::new(3, 130);
        b.set(1, 0);
        b.set(1, 64);
        b.set(1, 129);
        assert!(b.get(1, 64) && b.get(1, 129) && !b.get(0, 64) && !b.get(2, 0));
        assert_eq!(b.first_set(1), Some(0));
        b.clear(1, 0);
        assert_eq!(b.first_set(1), Some(64));
        b.clear_row(1);
        assert_eq!(b.first_set(1), None);
    }

    #[test]
    fn growing_keeps_every_bit() {
        let mut b = Bits::new(2, 10);
        b.set(0, 9);
        b.set(1, 3);
        b.grow(2, 200);
        b.set(1, 150);
        assert!(b.get(0, 9) && b.get(1, 3) && b.get(1, 150) && !b.get(0, 150));
        assert_eq!(b.first_set(1), Some(3));
    }
}
