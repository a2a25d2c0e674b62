//! A set of field tags, used to detect duplicates and to track which fields a decoder consumed.

use crate::tag;

/// One bit per possible tag, with no allocation and no indexing.
///
/// Splitting the 256 tags into two 128-bit words along the critical bit means the critical half
/// is exactly `critical`, which makes "any critical tag left over?" a single mask test.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TagSet {
    non_critical: u128,
    critical: u128,
}

impl TagSet {
    /// The word holding `tag`'s bit and the bit itself.
    fn slot(&mut self, tag: u8) -> (&mut u128, u128) {
        let bit = 1u128 << (tag & !tag::CRITICAL);
        if tag::is_critical(tag) {
            (&mut self.critical, bit)
        } else {
            (&mut self.non_critical, bit)
        }
    }

    /// Adds `tag`; returns false if it was already present.
    pub(crate) fn insert(&mut self, tag: u8) -> bool {
        let (word, bit) = self.slot(tag);
        let fresh = *word & bit == 0;
        *word |= bit;
        fresh
    }

    /// Whether `tag` is present.
    pub(crate) fn contains(&self, tag: u8) -> bool {
        let bit = 1u128 << (tag & !tag::CRITICAL);
        let word = if tag::is_critical(tag) { self.critical } else { self.non_critical };
        word & bit != 0
    }

    /// The smallest critical tag in `self` but not in `other`.
    pub(crate) fn first_critical_not_in(&self, other: &TagSet) -> Option<u8> {
        let left = self.critical & !other.critical;
        // trailing_zeros of a non-zero u128 is below 128, so it fits the low seven bits.
        (left != 0).then(|| tag::CRITICAL | (left.trailing_zeros() as u8))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_reports_duplicates_for_every_tag() {
        let mut set = TagSet::default();
        for tag in 0..=u8::MAX {
            assert!(!set.contains(tag));
            assert!(set.insert(tag));
            assert!(set.contains(tag));
            assert!(!set.insert(tag));
        }
    }

    #[test]
    fn finds_the_smallest_leftover_critical_tag() {
        let mut present = TagSet::default();
        let mut taken = TagSet::default();
        for tag in [0x05, 0x7F, 0x81, 0x90, 0xFF] {
            present.insert(tag);
        }
        taken.insert(0x81);
        assert_eq!(present.first_critical_not_in(&taken), Some(0x90));
        taken.insert(0x90);
        assert_eq!(present.first_critical_not_in(&taken), Some(0xFF));
        taken.insert(0xFF);
        assert_eq!(present.first_critical_not_in(&taken), None);
    }
}
