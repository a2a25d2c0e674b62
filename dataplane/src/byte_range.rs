//! A range of this process's memory, and the one question every registered range answers:
//! whether it holds all of another.

/// `len` bytes from `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRange {
    /// The first byte's address.
    pub start: usize,
    /// The length in bytes.
    pub len: usize,
}

impl ByteRange {
    /// True when `[addr, addr + len)` lies inside this range (an address past the end of the
    /// address space never does).
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.start && addr.checked_add(len).is_some_and(|end| end <= self.start + self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::ByteRange;

    #[test]
    fn a_range_holds_only_what_starts_and_ends_inside_it() {
        let range = ByteRange { start: 0x1000, len: 0x100 };
        assert!(range.contains(0x1000, 0x100));
        assert!(range.contains(0x10ff, 1));
        assert!(range.contains(0x1080, 0), "an empty range inside");
        assert!(!range.contains(0xfff, 2), "starts before");
        assert!(!range.contains(0x10ff, 2), "starts inside, ends outside");
        assert!(!range.contains(0x1100, 1), "starts at the end");
        assert!(!range.contains(usize::MAX, 2), "wraps around");
    }
}
