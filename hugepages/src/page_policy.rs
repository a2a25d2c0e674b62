//! How strictly a mapping asks for huge pages.

use crate::page_size::PageSize;

/// Which pages should back a new mapping, and what to do if they cannot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PagePolicy {
    /// Use exactly this page size; fail with
    /// [`Error::HugepagesUnavailable`](crate::Error::HugepagesUnavailable) if it cannot back the region.
    Require(PageSize),
    /// Try this page size; if the pool cannot supply it (or the placement is
    /// not aligned to it) fall back to base pages advised with
    /// `MADV_HUGEPAGE`, which the mapping then reports through
    /// [`Mapping::page_size`](crate::Mapping::page_size) and
    /// [`Mapping::thp_advised`](crate::Mapping::thp_advised).
    Prefer(PageSize),
    /// Base pages only, without transparent-hugepage advice.
    Never,
}
