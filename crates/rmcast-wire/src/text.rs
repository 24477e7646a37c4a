//! Text helpers shared by every family.

/// Cuts `s` to at most `max` bytes at a character boundary, so a long name
/// or message can always be sent (shortened) instead of refused.
#[must_use]
pub fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::truncate_utf8;
    use proptest::prelude::*;

    #[test]
    fn truncation_never_splits_a_character() {
        assert_eq!(truncate_utf8("héllo", 2), "h");
        assert_eq!(truncate_utf8("héllo", 3), "hé");
        assert_eq!(truncate_utf8("short", 255), "short");
        assert_eq!(truncate_utf8("abc", 0), "");
    }

    proptest! {
        #[test]
        fn truncation_is_a_prefix_within_the_limit(s in ".{0,40}", max in 0usize..64) {
            let t = truncate_utf8(&s, max);
            prop_assert!(t.len() <= max);
            prop_assert!(s.starts_with(t));
            // Nothing more fits: the next character would cross the limit.
            if let Some(c) = s[t.len()..].chars().next() {
                prop_assert!(t.len() + c.len_utf8() > max);
            }
        }
    }
}
