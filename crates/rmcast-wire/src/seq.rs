//! 32-bit sequence numbers compared with serial-number arithmetic (RFC 1982).

use core::cmp::Ordering;
use core::fmt;

/// A data packet's sequence number on the wire.
///
/// Sequence numbers start at a random initial value and wrap at 2^32; two
/// numbers compare by the sign of their wrapping difference, which is correct
/// as long as they are less than 2^31 apart (an object has at most 2^32 - 1
/// packets, and a window is far smaller than 2^31).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Seq(pub u32);

impl Seq {
    /// The sequence number `n` packets after this one.
    #[must_use]
    pub const fn add(self, n: u32) -> Seq {
        Seq(self.0.wrapping_add(n))
    }

    /// How many packets `self` lies after `earlier` (wrapping).
    #[must_use]
    pub const fn since(self, earlier: Seq) -> u32 {
        self.0.wrapping_sub(earlier.0)
    }

    /// Signed distance from `other` to `self`.
    #[must_use]
    pub const fn diff(self, other: Seq) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }
}

impl PartialOrd for Seq {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Seq {
    /// Wraparound-safe order. Not transitive across more than 2^31 apart,
    /// which the protocol never lets happen.
    fn cmp(&self, other: &Self) -> Ordering {
        self.diff(*other).cmp(&0)
    }
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn order_holds_across_wraparound() {
        let near_end = Seq(u32::MAX - 2);
        let wrapped = near_end.add(5);
        assert_eq!(wrapped, Seq(2));
        assert!(near_end < wrapped);
        assert!(wrapped > near_end);
        assert_eq!(wrapped.since(near_end), 5);
        assert_eq!(near_end.diff(wrapped), -5);
    }

    #[test]
    fn equal_numbers_compare_equal() {
        assert_eq!(Seq(7).cmp(&Seq(7)), Ordering::Equal);
    }

    proptest! {
        #[test]
        fn add_then_since_is_identity(start in any::<u32>(), n in 0u32..(1 << 31)) {
            let s = Seq(start);
            prop_assert_eq!(s.add(n).since(s), n);
            if n > 0 {
                prop_assert!(s < s.add(n));
            }
        }
    }
}
