//! Faulting pages in ahead of use.

use std::ptr::NonNull;

use crate::error::{last_errno, Error};

/// When a mapping's pages are faulted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Populate {
    /// Fault every page in while creating the mapping, so the data path never
    /// takes a page fault (and hugetlb shortages surface as errors, not SIGBUS).
    Eager,
    /// Fault nothing up front (UCP's `NONBLOCK`); pages appear on first touch
    /// or through [`Mapping::advise_willneed`](crate::Mapping::advise_willneed).
    Lazy,
}

/// How a populate request was carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Populated {
    /// `MADV_POPULATE_WRITE` faulted every page in writable.
    Faulted,
    /// The kernel predates `MADV_POPULATE_WRITE` (5.14).
    Unsupported,
}

/// Fault `[start, start + len)` in writable with `MADV_POPULATE_WRITE`.
///
/// Unlike touching the memory this never changes its contents, and unlike
/// `MAP_POPULATE` it reports failures (e.g. `EFAULT` when a hugetlb pool or a
/// NUMA node runs dry) instead of leaving holes.
pub(crate) fn populate_write(start: NonNull<u8>, len: usize) -> Result<Populated, Error> {
    // SAFETY: the caller passes a range inside a mapping it owns; populating
    // only faults pages in and never alters their contents.
    let rc = unsafe { libc::madvise(start.as_ptr().cast(), len, libc::MADV_POPULATE_WRITE) };
    if rc == 0 {
        return Ok(Populated::Faulted);
    }
    match last_errno() {
        libc::EINVAL => Ok(Populated::Unsupported),
        errno => Err(Error::Os { op: "madvise(MADV_POPULATE_WRITE)", errno }),
    }
}

/// Ask the kernel to read ahead `[start, start + len)` (`MADV_WILLNEED`); the
/// fallback for kernels without `MADV_POPULATE_WRITE`.
pub(crate) fn will_need(start: NonNull<u8>, len: usize) -> Result<(), Error> {
    // SAFETY: WILLNEED is only a hint about a range of a mapping the caller owns.
    if unsafe { libc::madvise(start.as_ptr().cast(), len, libc::MADV_WILLNEED) } != 0 {
        return Err(Error::last_os("madvise(MADV_WILLNEED)"));
    }
    Ok(())
}

/// Fault in every page of a mapping nobody else can see yet by writing back
/// the byte already there; for kernels without `MADV_POPULATE_WRITE`.
///
/// # Safety
///
/// `[start, start + len)` must be mapped read-write, and no other thread or
/// process may be writing to it (otherwise the write-back could undo theirs).
pub(crate) unsafe fn touch_exclusive(start: NonNull<u8>, len: usize, page: usize) {
    for offset in (0..len).step_by(page) {
        // SAFETY: the caller guarantees the range is mapped read-write, and
        // `offset < len` keeps the pointer inside it.
        let byte = unsafe { start.as_ptr().add(offset) };
        // SAFETY: as above; with no concurrent writer, writing back the value
        // just read leaves the contents unchanged.
        unsafe { byte.write_volatile(byte.read_volatile()) };
    }
}
