//! A set of small indices (link table slots) with O(1) insert, remove and membership, and
//! iteration over the members alone: what a transport keeps of the links that need a poll's
//! attention, so a poll costs what those links need rather than a visit to every link.

/// Indices in `0..` some table's slot count; each present at most once.
#[derive(Debug, Default)]
pub struct ActiveSet {
    /// The members, in no particular order.
    members: Vec<u32>,
    /// For each index, its position in `members`, or [`ABSENT`].
    position: Vec<u32>,
}

const ABSENT: u32 = u32::MAX;

impl ActiveSet {
    /// An empty set.
    pub fn new() -> ActiveSet {
        ActiveSet::default()
    }

    /// Adds `index` (nothing when present).
    #[inline]
    pub fn insert(&mut self, index: usize) {
        if index >= self.position.len() {
            self.grow(index);
        }
        if self.position[index] == ABSENT {
            self.position[index] = self.members.len() as u32;
            self.members.push(index as u32);
        }
    }

    #[cold]
    fn grow(&mut self, index: usize) {
        self.position.resize(index + 1, ABSENT);
    }

    /// Removes `index` (nothing when absent).
    #[inline]
    pub fn remove(&mut self, index: usize) {
        let Some(&at) = self.position.get(index) else { return };
        if at == ABSENT {
            return;
        }
        self.position[index] = ABSENT;
        let last = self.members.pop().expect("a member");
        if last as usize != index {
            self.members[at as usize] = last;
            self.position[last as usize] = at;
        }
    }

    /// Whether `index` is a member.
    #[inline]
    pub fn contains(&self, index: usize) -> bool {
        self.position.get(index).is_some_and(|&at| at != ABSENT)
    }

    /// Whether the set has no member.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// How many members.
    #[inline]
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// The members, in no particular order.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.members.iter().map(|&index| index as usize)
    }

    /// Copies the members into `out` (cleared first), so the caller can change the set while it
    /// goes through them; `out`'s capacity is kept for the next call.
    #[inline]
    pub fn snapshot(&self, out: &mut Vec<u32>) {
        out.clear();
        out.extend_from_slice(&self.members);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn inserts_and_removes_keep_members_exact() {
        let mut set = ActiveSet::new();
        assert!(set.is_empty() && !set.contains(0) && !set.contains(1000));
        set.insert(5);
        set.insert(5);
        set.insert(0);
        set.insert(9);
        assert_eq!(set.len(), 3);
        assert!(set.contains(5) && set.contains(0) && set.contains(9) && !set.contains(4));
        set.remove(0);
        set.remove(0);
        set.remove(77);
        assert_eq!(set.len(), 2);
        assert!(!set.contains(0) && set.contains(5) && set.contains(9));
        let mut seen: Vec<usize> = set.iter().collect();
        seen.sort_unstable();
        assert_eq!(seen, [5, 9]);
        let mut out = vec![123];
        set.snapshot(&mut out);
        out.sort_unstable();
        assert_eq!(out, [5, 9]);
    }

    /// Against a `BTreeSet` over a pseudo-random sequence of operations.
    #[test]
    fn matches_a_reference_set() {
        let mut set = ActiveSet::new();
        let mut reference = BTreeSet::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let index = (x % 300) as usize;
            if x & (1 << 40) != 0 {
                set.insert(index);
                reference.insert(index as u32);
            } else {
                set.remove(index);
                reference.remove(&(index as u32));
            }
            assert_eq!(set.len(), reference.len());
            assert_eq!(set.contains(index), reference.contains(&(index as u32)));
        }
        let mut members = Vec::new();
        set.snapshot(&mut members);
        members.sort_unstable();
        assert_eq!(members, reference.into_iter().collect::<Vec<_>>());
    }
}
