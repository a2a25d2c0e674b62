//! A region of memory owned by this process: created with [`Mapping::new`] or
//! attached to a peer's memfd with [`Mapping::from_memfd`], unmapped on drop.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

use crate::backing::Backing;
use crate::error::{last_errno, Error};
use crate::options::MapOptions;
use crate::page_policy::PagePolicy;
use crate::page_size::PageSize;
use crate::placement::{map_placed, Placement};
use crate::populate::{self, Populate, Populated};
use crate::units::round_up;
use crate::{memfd, memlock, numa, pools, thp};

/// A read-write memory mapping, unmapped (and its memfd closed) on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    requested_len: usize,
    mapped_len: usize,
    page_size: PageSize,
    backing: Backing,
    memfd: Option<OwnedFd>,
    thp_advised: bool,
    locked: bool,
}

// SAFETY: a Mapping is an owned range of address space plus an fd, not a
// reference into data owned by some thread: it is valid for any thread to
// unmap it, and the raw pointer is only handed out, never dereferenced, by
// this type. Synchronising accesses through that pointer is the caller's job,
// as for any raw pointer.
unsafe impl Send for Mapping {}
// SAFETY: the `&self` methods only read immutable fields or issue madvise and
// mbind calls, which the kernel serialises per address space.
unsafe impl Sync for Mapping {}

/// Why one attempt at creating a mapping with a given page size failed.
enum AttemptError {
    /// The huge page size cannot back the region (pool short, size unsupported);
    /// `PagePolicy::Prefer` falls back to base pages on this.
    HugeUnavailable(String),
    /// Anything else; returned to the caller as is.
    Fatal(Error),
}

impl AttemptError {
    /// The caller-facing error for an attempt with pages of `page`.
    fn into_error(self, page: PageSize) -> Error {
        match self {
            AttemptError::HugeUnavailable(reason) => Error::HugepagesUnavailable { page_size: page, reason },
            AttemptError::Fatal(error) => error,
        }
    }
}

impl From<Error> for AttemptError {
    fn from(error: Error) -> Self {
        AttemptError::Fatal(error)
    }
}

impl Mapping {
    /// Create a mapping as described by `opts`.
    ///
    /// The steps are: map (huge pages per `opts.page_policy`), advise THP on
    /// the base-page fallback, bind to `opts.numa_node`, populate, then lock,
    /// so every page is faulted on the right node and locked once. Any failure
    /// unmaps whatever was mapped and closes the memfd.
    pub fn new(opts: &MapOptions<'_>) -> Result<Mapping, Error> {
        if opts.len == 0 {
            return Err(Error::InvalidLength);
        }
        let (page, fall_back_to_thp) = choose_page_size(opts)?;
        if page.is_huge() {
            match attempt(opts, page, false) {
                Err(AttemptError::HugeUnavailable(reason)) if fall_back_to_thp => {
                    tracing::debug!(%page, %reason, "huge pages unavailable; falling back to base pages with THP advice");
                }
                result => return result.map_err(|error| error.into_error(page)),
            }
        }
        opts.placement.check_fixed_alignment(PageSize::Base.bytes())?;
        attempt(opts, PageSize::Base, fall_back_to_thp).map_err(|error| error.into_error(PageSize::Base))
    }

    /// Map (`MAP_SHARED`, read-write) an existing memfd, e.g. one opened from
    /// `/proc/<pid>/fd/<n>` of a peer.
    ///
    /// `offset` must be a multiple of `page_size`; `len` is rounded up to
    /// `page_size`. `page_size` is what the peer reported: hugetlb memfds must
    /// be mapped with their page size alignment. If the fd's own page size
    /// (`st_blksize`, which hugetlb files set to their huge page size) says
    /// otherwise, the fd wins and a warning is logged, rather than producing a
    /// mapping the kernel would refuse to map or unmap. The file must hold
    /// `offset + len` bytes, or [`Error::OutOfRange`] is returned.
    pub fn from_memfd(
        fd: OwnedFd,
        offset: u64,
        len: usize,
        page_size: PageSize,
        placement: Placement,
    ) -> Result<Mapping, Error> {
        if len == 0 {
            return Err(Error::InvalidLength);
        }
        let shape = memfd::shape(fd.as_fd())?;
        let page_size = match PageSize::from_bytes(usize::try_from(shape.block_size).unwrap_or(0)) {
            Some(actual) if actual != page_size => {
                tracing::warn!(reported = %page_size, %actual, "memfd page size differs from the reported one; using the fd's");
                actual
            }
            _ => page_size,
        };
        let out_of_range = || Error::OutOfRange {
            offset: usize::try_from(offset).unwrap_or(usize::MAX),
            len,
            mapped: usize::try_from(shape.size).unwrap_or(usize::MAX),
        };
        let end = offset.checked_add(len as u64).ok_or_else(out_of_range)?;
        if end > shape.size {
            return Err(out_of_range());
        }
        let align = page_size.bytes();
        let offset_addr = usize::try_from(offset).map_err(|_| out_of_range())?;
        if offset % align as u64 != 0 {
            return Err(Error::Misaligned { addr: offset_addr, align });
        }
        placement.check_fixed_alignment(align)?;
        let mapped_len = round_up(len, align).ok_or(Error::InvalidLength)?;
        let file_offset = libc::off_t::try_from(offset).map_err(|_| out_of_range())?;
        let ptr = map_placed(placement, mapped_len, libc::MAP_SHARED, Some(fd.as_fd()), file_offset)?;
        tracing::trace!(addr = ptr.as_ptr() as usize, mapped_len, %page_size, "mapped peer memfd");
        Ok(Mapping {
            ptr,
            requested_len: len,
            mapped_len,
            page_size,
            backing: Backing::Memfd,
            memfd: Some(fd),
            thp_advised: false,
            locked: false,
        })
    }

    /// Start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Start of the mapping as an integer address.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// The length that was requested.
    pub fn len(&self) -> usize {
        self.requested_len
    }

    /// Always `false`: zero-length mappings cannot be created.
    pub fn is_empty(&self) -> bool {
        self.requested_len == 0
    }

    /// The length actually mapped: the requested length rounded up to [`Mapping::page_size`].
    pub fn mapped_len(&self) -> usize {
        self.mapped_len
    }

    /// The page size actually backing the mapping ([`PageSize::Base`] for the THP fallback).
    pub fn page_size(&self) -> PageSize {
        self.page_size
    }

    /// Whether `MADV_HUGEPAGE` was applied (the `Prefer` fallback path).
    pub fn thp_advised(&self) -> bool {
        self.thp_advised
    }

    /// Whether the mapping is currently `mlock`ed.
    pub fn is_locked(&self) -> bool {
        self.locked
    }

    /// The memfd behind the mapping, for passing to peers; `None` for anonymous memory.
    pub fn memfd(&self) -> Option<BorrowedFd<'_>> {
        self.memfd.as_ref().map(AsFd::as_fd)
    }

    /// What backs the mapping.
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// `mlock` the whole mapping (faulting it in).
    ///
    /// Fails with [`Error::MemlockLimit`] when `RLIMIT_MEMLOCK` forbids it.
    /// Note that the kernel applies that limit to hugetlb mappings too, even
    /// though hugetlb pages are never swapped and `mlock` does not mark them.
    pub fn lock(&mut self) -> Result<(), Error> {
        if !self.locked {
            memlock::lock(self.ptr, self.mapped_len)?;
            self.locked = true;
        }
        Ok(())
    }

    /// `munlock` the whole mapping.
    pub fn unlock(&mut self) -> Result<(), Error> {
        if self.locked {
            memlock::unlock(self.ptr, self.mapped_len)?;
            self.locked = false;
        }
        Ok(())
    }

    /// Fault in `[offset, offset + len)` now, without changing its contents.
    ///
    /// Uses `MADV_POPULATE_WRITE` (Linux 5.14+); on older kernels falls back to
    /// `MADV_WILLNEED`, which only reads ahead file-backed pages. The range is
    /// widened to whole pages of the mapping's page size.
    pub fn advise_willneed(&self, offset: usize, len: usize) -> Result<(), Error> {
        let out_of_range = Error::OutOfRange { offset, len, mapped: self.mapped_len };
        let end = offset.checked_add(len).ok_or(out_of_range.clone())?;
        if end > self.mapped_len {
            return Err(out_of_range);
        }
        if len == 0 {
            return Ok(());
        }
        let page = self.page_size.bytes();
        let start = offset - offset % page;
        // `end <= mapped_len`, a multiple of `page`, so rounding up stays in range.
        let end = round_up(end, page).unwrap_or(self.mapped_len);
        // SAFETY: `start < end <= mapped_len`, so the pointer stays inside the mapping.
        let start_ptr = unsafe { self.ptr.add(start) };
        match populate::populate_write(start_ptr, end - start)? {
            Populated::Faulted => Ok(()),
            Populated::Unsupported => populate::will_need(start_ptr, end - start),
        }
    }

    /// Bind the mapping to NUMA node `node` (`MPOL_BIND`), migrating pages
    /// already faulted in where the kernel can.
    pub fn bind_numa(&self, node: u32) -> Result<(), Error> {
        numa::bind(self.ptr, self.mapped_len, node, true)
    }
}

/// The page size to try first for `opts`, and whether to fall back to base
/// pages with THP advice (`PagePolicy::Prefer`) if it is unavailable.
fn choose_page_size(opts: &MapOptions<'_>) -> Result<(PageSize, bool), Error> {
    Ok(match opts.page_policy {
        PagePolicy::Never => (PageSize::Base, false),
        PagePolicy::Require(page) => {
            opts.placement.check_fixed_alignment(page.bytes())?;
            (page, false)
        }
        // Asking for base pages is asking for no hugepages at all, THP included.
        PagePolicy::Prefer(PageSize::Base) => (PageSize::Base, false),
        PagePolicy::Prefer(page) if !opts.placement.is_aligned_to(page.bytes()) => {
            tracing::debug!(placement = ?opts.placement, %page, "placement address is not huge-page aligned; using base pages");
            (PageSize::Base, true)
        }
        PagePolicy::Prefer(page) => (page, true),
    })
}

/// One try at building the mapping `opts` describes with pages of `page`.
fn attempt(opts: &MapOptions<'_>, page: PageSize, advise_thp: bool) -> Result<Mapping, AttemptError> {
    let mapped_len = round_up(opts.len, page.bytes()).ok_or(Error::InvalidLength)?;
    let pages_needed = mapped_len / page.bytes();
    let unavailable =
        |failure: &str| AttemptError::HugeUnavailable(pools::shortage_reason(page, pages_needed, failure));

    let memfd = match opts.backing {
        Backing::Anonymous => None,
        Backing::Memfd => {
            let fd = memfd::create(opts.name, page).map_err(|error| match error {
                // The kernel has no pool of this size (or no hugetlb at all).
                Error::Os { errno: libc::EINVAL, .. } if page.is_huge() => unavailable(&error.to_string()),
                error => AttemptError::Fatal(error),
            })?;
            memfd::set_len(fd.as_fd(), mapped_len)?;
            Some(fd)
        }
    };
    let mut flags = match memfd {
        Some(_) => libc::MAP_SHARED,
        None => libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    };
    if let (None, Some(shift)) = (&memfd, page.huge_shift()) {
        // A hugetlb memfd already carries its page size; anonymous memory needs it spelled out.
        // No MAP_NORESERVE: a short pool must fail here, not SIGBUS on first touch.
        flags |= libc::MAP_HUGETLB | ((shift as libc::c_int) << libc::MAP_HUGE_SHIFT);
    }
    let ptr = map_placed(opts.placement, mapped_len, flags, memfd.as_ref().map(AsFd::as_fd), 0).map_err(
        |error| match error.errno() {
            Some(libc::ENOMEM | libc::EINVAL) if page.is_huge() => unavailable(&error.to_string()),
            _ => AttemptError::Fatal(error),
        },
    )?;
    // From here on, dropping `mapping` on an error path unmaps the region and closes the memfd.
    let mut mapping = Mapping {
        ptr,
        requested_len: opts.len,
        mapped_len,
        page_size: page,
        backing: opts.backing,
        memfd,
        thp_advised: false,
        locked: false,
    };
    if advise_thp {
        mapping.thp_advised = thp::advise_hugepage(ptr, mapped_len);
    }
    if let Some(node) = opts.numa_node {
        numa::bind(ptr, mapped_len, node, false)?;
    }
    if opts.populate == Populate::Eager {
        match populate::populate_write(ptr, mapped_len) {
            Ok(Populated::Faulted) => {}
            Ok(Populated::Unsupported) => {
                // SAFETY: the region was just mapped read-write by us and its
                // address has not been handed out, so nothing else writes to it.
                unsafe { populate::touch_exclusive(ptr, mapped_len, page.bytes()) }
            }
            // A hugetlb fault that finds no page (e.g. none left on the bound
            // NUMA node) surfaces as EFAULT/ENOMEM here instead of SIGBUS later.
            Err(error) if page.is_huge() && matches!(error.errno(), Some(libc::EFAULT | libc::ENOMEM)) => {
                return Err(unavailable(&error.to_string()));
            }
            Err(error) => return Err(error.into()),
        }
    }
    if opts.lock {
        mapping.lock()?;
    }
    tracing::debug!(
        addr = mapping.addr(),
        mapped_len,
        %page,
        backing = ?opts.backing,
        thp_advised = mapping.thp_advised,
        "created mapping"
    );
    Ok(mapping)
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`mapped_len` describe exactly the region this Mapping
        // created (or attached) and owns; no references into it outlive `self`.
        if unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.mapped_len) } != 0 {
            tracing::error!(addr = self.addr(), len = self.mapped_len, errno = last_errno(), "munmap failed");
        }
        // The memfd, if any, is closed when `self.memfd` drops right after this.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_can_move_between_and_be_shared_by_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Mapping>();
    }

    #[test]
    fn zero_length_is_rejected() {
        let opts = MapOptions { len: 0, ..MapOptions::default() };
        assert_eq!(Mapping::new(&opts).unwrap_err(), Error::InvalidLength);
    }

    #[test]
    fn length_rounding_overflow_is_rejected_not_wrapped() {
        for page_policy in
            [PagePolicy::Never, PagePolicy::Require(PageSize::Huge2M), PagePolicy::Prefer(PageSize::Huge1G)]
        {
            let opts = MapOptions { len: usize::MAX - 10, page_policy, ..MapOptions::default() };
            assert_eq!(Mapping::new(&opts).unwrap_err(), Error::InvalidLength, "{page_policy:?}");
        }
    }

    #[test]
    fn base_mapping_is_rounded_and_writable() {
        let page = PageSize::Base.bytes();
        let opts = MapOptions { len: page + 1, page_policy: PagePolicy::Never, ..MapOptions::default() };
        let mapping = Mapping::new(&opts).unwrap();
        assert_eq!(mapping.len(), page + 1);
        assert!(!mapping.is_empty());
        assert_eq!(mapping.mapped_len(), 2 * page);
        assert_eq!(mapping.page_size(), PageSize::Base);
        assert!(!mapping.thp_advised());
        assert_eq!(mapping.backing(), Backing::Anonymous);
        assert!(mapping.memfd().is_none());
        // SAFETY: the mapping is 2 pages long and read-write; only this thread uses it.
        unsafe {
            mapping.as_ptr().add(page).write(0xA5);
            assert_eq!(mapping.as_ptr().add(page).read(), 0xA5);
        }
    }

    #[test]
    fn advise_willneed_rejects_ranges_past_the_mapping() {
        let opts = MapOptions {
            len: 3,
            page_policy: PagePolicy::Never,
            populate: Populate::Lazy,
            ..MapOptions::default()
        };
        let mapping = Mapping::new(&opts).unwrap();
        let mapped = mapping.mapped_len();
        assert_eq!(
            mapping.advise_willneed(1, mapped),
            Err(Error::OutOfRange { offset: 1, len: mapped, mapped })
        );
        assert_eq!(
            mapping.advise_willneed(usize::MAX, 2),
            Err(Error::OutOfRange { offset: usize::MAX, len: 2, mapped })
        );
        assert_eq!(mapping.advise_willneed(mapped, 0), Ok(()));
        assert_eq!(mapping.advise_willneed(1, mapped - 1), Ok(()));
    }
}
