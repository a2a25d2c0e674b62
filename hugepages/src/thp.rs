//! Transparent-hugepage advice for base-page mappings.

use std::ptr::NonNull;

use crate::error::last_errno;

/// Mark `[start, start + len)` as wanting transparent hugepages
/// (`MADV_HUGEPAGE`), which matters when THP runs in `madvise` mode.
///
/// Returns whether the advice took. It fails with `EINVAL` on kernels built
/// without THP; that only costs performance, so it is logged, not raised.
pub(crate) fn advise_hugepage(start: NonNull<u8>, len: usize) -> bool {
    // SAFETY: MADV_HUGEPAGE only changes how future faults in a range of a
    // mapping the caller owns are served; contents are unaffected.
    if unsafe { libc::madvise(start.as_ptr().cast(), len, libc::MADV_HUGEPAGE) } == 0 {
        return true;
    }
    tracing::debug!(errno = last_errno(), "madvise(MADV_HUGEPAGE) refused; staying on base pages");
    false
}
