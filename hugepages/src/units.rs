//! Byte-count arithmetic shared by the mapping code and error messages.

use std::fmt;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// Round `len` up to a multiple of `page` (a power of two), or `None` on overflow.
pub(crate) fn round_up(len: usize, page: usize) -> Option<usize> {
    debug_assert!(page.is_power_of_two());
    len.checked_add(page - 1).map(|padded| padded & !(page - 1))
}

/// Whether `value` is a multiple of `align` (a power of two).
pub(crate) fn is_aligned(value: usize, align: usize) -> bool {
    debug_assert!(align.is_power_of_two());
    value & (align - 1) == 0
}

/// A byte count rendered for people: the largest unit that divides it exactly
/// (so limits read as "8 MiB" rather than "8388608"), falling back to a
/// one-decimal approximation, and "unlimited" for `u64::MAX` (RLIM_INFINITY).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HumanBytes(pub(crate) u64);

impl fmt::Display for HumanBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.0;
        if bytes == u64::MAX {
            return f.write_str("unlimited");
        }
        for (unit, name) in [(GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")] {
            if bytes >= unit && bytes % unit == 0 {
                return write!(f, "{} {name}", bytes / unit);
            }
        }
        for (unit, name) in [(GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")] {
            if bytes >= unit {
                // Precision loss is irrelevant: this only feeds messages.
                let scaled = bytes as f64 / unit as f64;
                return write!(f, "{scaled:.1} {name}");
            }
        }
        write!(f, "{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_up_rounds_to_the_next_multiple_and_detects_overflow() {
        assert_eq!(round_up(1, 4096), Some(4096));
        assert_eq!(round_up(4096, 4096), Some(4096));
        assert_eq!(round_up(3 << 20, 2 << 20), Some(4 << 20));
        assert_eq!(round_up(usize::MAX, 4096), None);
        assert_eq!(round_up(usize::MAX - 4094, 4096), None);
    }

    #[test]
    fn alignment_check_matches_modulo() {
        assert!(is_aligned(0, 2 << 20));
        assert!(is_aligned(4 << 20, 2 << 20));
        assert!(!is_aligned((2 << 20) + 4096, 2 << 20));
    }

    #[test]
    fn human_bytes_picks_exact_units() {
        assert_eq!(HumanBytes(8 << 20).to_string(), "8 MiB");
        assert_eq!(HumanBytes(64 << 10).to_string(), "64 KiB");
        assert_eq!(HumanBytes(1 << 30).to_string(), "1 GiB");
        assert_eq!(HumanBytes(1536 << 10).to_string(), "1536 KiB");
        assert_eq!(HumanBytes(1000).to_string(), "1000 bytes");
        assert_eq!(HumanBytes(0).to_string(), "0 bytes");
        assert_eq!(HumanBytes(u64::MAX).to_string(), "unlimited");
        assert_eq!(HumanBytes((1 << 20) + 1).to_string(), "1.0 MiB");
    }
}
