//! Where a mapping goes in the address space, and the `mmap` call that honours it.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use crate::error::{last_errno, Error};
use crate::units::is_aligned;

/// Where in the virtual address space a mapping is placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Wherever the kernel chooses.
    Anywhere,
    /// Preferably at this address; the kernel may choose another one, and
    /// that is never an error.
    Hint(usize),
    /// Exactly at this address, which must be aligned to the page size used.
    /// An existing mapping there is never replaced: the request fails with
    /// [`Error::AddressInUse`] instead (`MAP_FIXED_NOREPLACE`).
    Fixed(usize),
}

impl Placement {
    /// The address handed to `mmap` (0 for [`Placement::Anywhere`]).
    pub fn requested_addr(self) -> usize {
        match self {
            Placement::Anywhere => 0,
            Placement::Hint(addr) | Placement::Fixed(addr) => addr,
        }
    }

    /// Whether the requested address (if any) is a multiple of `align`.
    pub(crate) fn is_aligned_to(self, align: usize) -> bool {
        is_aligned(self.requested_addr(), align)
    }

    /// `Err(Misaligned)` when a fixed address cannot be used with pages of `align` bytes.
    /// Hints are exempt: the kernel simply moves a hint it cannot use.
    pub(crate) fn check_fixed_alignment(self, align: usize) -> Result<(), Error> {
        match self {
            Placement::Fixed(addr) if !is_aligned(addr, align) => Err(Error::Misaligned { addr, align }),
            _ => Ok(()),
        }
    }
}

/// `mmap` a read-write region of `len` bytes at `placement`.
///
/// `flags` carries the sharing and page-size flags; placement flags are added
/// here. Failures are `Error::AddressInUse` for an occupied fixed address and
/// `Error::Os { op: "mmap", .. }` otherwise, so callers can inspect the errno.
pub(crate) fn map_placed(
    placement: Placement,
    len: usize,
    flags: libc::c_int,
    fd: Option<BorrowedFd<'_>>,
    offset: libc::off_t,
) -> Result<NonNull<u8>, Error> {
    let requested = placement.requested_addr();
    let placement_flags = match placement {
        Placement::Anywhere | Placement::Hint(_) => 0,
        Placement::Fixed(_) => libc::MAP_FIXED_NOREPLACE,
    };
    let raw_fd = fd.map_or(-1, |fd| fd.as_raw_fd());
    // SAFETY: neither a hint nor MAP_FIXED_NOREPLACE lets the kernel replace an
    // existing mapping, so this cannot invalidate memory anyone else uses; the
    // fd (if any) is borrowed and thus open for the duration of the call.
    let addr = unsafe {
        libc::mmap(
            requested as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags | placement_flags,
            raw_fd,
            offset,
        )
    };
    if addr == libc::MAP_FAILED {
        let errno = last_errno();
        return match (placement, errno) {
            (Placement::Fixed(addr), libc::EEXIST) => Err(Error::AddressInUse { addr }),
            _ => Err(Error::Os { op: "mmap", errno }),
        };
    }
    let misplaced = matches!(placement, Placement::Fixed(wanted) if addr as usize != wanted);
    // A region at address 0 (possible only with vm.mmap_min_addr = 0) cannot be
    // represented as a non-null pointer, so it is given back like a misplaced one.
    if misplaced || addr.is_null() {
        // Kernels before 4.17 ignore MAP_FIXED_NOREPLACE and treat the address
        // as a hint; a different address means the wanted one was taken.
        tracing::debug!(
            wanted = requested,
            got = addr as usize,
            "mmap did not place the region as asked; unmapping"
        );
        // SAFETY: `addr` is the region this call just created, of `len` bytes, and nothing else refers to it.
        if unsafe { libc::munmap(addr, len) } != 0 {
            tracing::error!(
                addr = addr as usize,
                len,
                errno = last_errno(),
                "munmap of misplaced region failed"
            );
        }
        return Err(if misplaced {
            Error::AddressInUse { addr: requested }
        } else {
            Error::Os { op: "mmap", errno: libc::EFAULT }
        });
    }
    NonNull::new(addr.cast::<u8>()).ok_or(Error::Os { op: "mmap", errno: libc::EFAULT })
}
