//! The knobs for creating a [`Mapping`](crate::Mapping).

use crate::backing::Backing;
use crate::page_policy::PagePolicy;
use crate::page_size::PageSize;
use crate::placement::Placement;
use crate::populate::Populate;

/// Everything [`Mapping::new`](crate::Mapping::new) needs to know.
///
/// Start from [`MapOptions::default`] and override fields:
///
/// ```
/// use zcx_hugepages::{Backing, MapOptions};
/// let opts = MapOptions { len: 8 << 20, backing: Backing::Memfd, name: "rx-ring", ..MapOptions::default() };
/// assert_eq!(opts.len, 8 << 20);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapOptions<'a> {
    /// Requested bytes (must be non-zero); the mapping is rounded up to the page size actually used.
    pub len: usize,
    /// Which page size to use and whether falling back is acceptable.
    pub page_policy: PagePolicy,
    /// Anonymous memory or a shareable memfd.
    pub backing: Backing,
    /// Where in the address space the mapping goes.
    pub placement: Placement,
    /// Whether pages are faulted in now or on first touch.
    pub populate: Populate,
    /// `mlock` the region after populating it (locking faults pages in even with
    /// [`Populate::Lazy`]). Fails with [`Error::MemlockLimit`](crate::Error::MemlockLimit)
    /// beyond `RLIMIT_MEMLOCK` without `CAP_IPC_LOCK`, hugetlb mappings included.
    pub lock: bool,
    /// Bind the region to this NUMA node (`MPOL_BIND`) before it is populated.
    pub numa_node: Option<u32>,
    /// Name for the memfd; it shows in `/proc/<pid>/maps` as `/memfd:<name>`.
    pub name: &'a str,
}

impl Default for MapOptions<'_> {
    /// Zero length (set `len`!), prefer 2 MiB pages, anonymous, anywhere,
    /// eagerly populated, not locked, no NUMA binding, named `"zcx"`.
    fn default() -> Self {
        MapOptions {
            len: 0,
            page_policy: PagePolicy::Prefer(PageSize::Huge2M),
            backing: Backing::Anonymous,
            placement: Placement::Anywhere,
            populate: Populate::Eager,
            lock: false,
            numa_node: None,
            name: "zcx",
        }
    }
}
