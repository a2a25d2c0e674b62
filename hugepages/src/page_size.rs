//! Page sizes a mapping can be backed by.

use std::fmt;
use std::sync::OnceLock;

use crate::units::HumanBytes;

/// A page size the kernel can back a mapping with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageSize {
    /// The base page size (`sysconf(_SC_PAGESIZE)`, 4 KiB on x86_64).
    Base,
    /// 2 MiB hugetlb pages.
    Huge2M,
    /// 1 GiB hugetlb pages.
    Huge1G,
}

const HUGE_2M_SHIFT: u32 = 21;
const HUGE_1G_SHIFT: u32 = 30;

impl PageSize {
    /// Size of one page in bytes.
    pub fn bytes(self) -> usize {
        match self {
            PageSize::Base => base_page_size(),
            PageSize::Huge2M => 1 << HUGE_2M_SHIFT,
            PageSize::Huge1G => 1 << HUGE_1G_SHIFT,
        }
    }

    /// The page size that is exactly `n` bytes, if any.
    pub fn from_bytes(n: usize) -> Option<PageSize> {
        [PageSize::Base, PageSize::Huge2M, PageSize::Huge1G].into_iter().find(|size| size.bytes() == n)
    }

    /// Whether this is a hugetlb size (anything but [`PageSize::Base`]).
    pub fn is_huge(self) -> bool {
        self != PageSize::Base
    }

    /// log2 of the huge page size, which is how `mmap` and `memfd_create`
    /// encode the size in their flags; `None` for base pages.
    pub(crate) fn huge_shift(self) -> Option<u32> {
        match self {
            PageSize::Base => None,
            PageSize::Huge2M => Some(HUGE_2M_SHIFT),
            PageSize::Huge1G => Some(HUGE_1G_SHIFT),
        }
    }
}

impl fmt::Display for PageSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", HumanBytes(self.bytes() as u64))
    }
}

/// The base page size in bytes, from `sysconf(_SC_PAGESIZE)`.
pub fn base_page_size() -> usize {
    static BASE_PAGE_SIZE: OnceLock<usize> = OnceLock::new();
    *BASE_PAGE_SIZE.get_or_init(|| {
        // SAFETY: sysconf only reads a configuration value; it has no memory-safety preconditions.
        let reported = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        // _SC_PAGESIZE cannot fail on Linux; 4096 keeps arithmetic sane if it ever did.
        usize::try_from(reported).ok().filter(|size| size.is_power_of_two()).unwrap_or(4096)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_bytes() {
        // SAFETY: sysconf has no memory-safety preconditions.
        let sysconf = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        assert_eq!(PageSize::Base.bytes(), sysconf);
        assert_eq!(base_page_size(), sysconf);
        assert_eq!(PageSize::Huge2M.bytes(), 2 * 1024 * 1024);
        assert_eq!(PageSize::Huge1G.bytes(), 1024 * 1024 * 1024);
    }

    #[test]
    fn from_bytes_round_trips_and_rejects_other_sizes() {
        for size in [PageSize::Base, PageSize::Huge2M, PageSize::Huge1G] {
            assert_eq!(PageSize::from_bytes(size.bytes()), Some(size));
        }
        assert_eq!(PageSize::from_bytes(0), None);
        assert_eq!(PageSize::from_bytes(64 * 1024 + 1), None);
        assert_eq!(PageSize::from_bytes(16 << 30), None);
    }

    #[test]
    fn display_uses_binary_units() {
        assert_eq!(PageSize::Base.to_string(), format!("{} KiB", base_page_size() / 1024));
        assert_eq!(PageSize::Huge2M.to_string(), "2 MiB");
        assert_eq!(PageSize::Huge1G.to_string(), "1 GiB");
    }
}
