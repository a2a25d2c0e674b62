//! Anonymous shareable files from `memfd_create`, sized and sealed for mapping.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::error::{last_errno, Error};
use crate::page_size::PageSize;

/// Create a close-on-exec memfd named `name`, hugetlb-backed when `page` is huge.
///
/// The fd is created non-executable (`MFD_NOEXEC_SEAL`) where the kernel
/// knows that flag (6.3+): it avoids the kernel's warning about memfds of
/// unspecified executability and works under `vm.memfd_noexec = 2`.
pub(crate) fn create(name: &str, page: PageSize) -> Result<OwnedFd, Error> {
    let c_name = CString::new(name).map_err(|_| Error::Os { op: "memfd_create", errno: libc::EINVAL })?;
    let mut flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    flags |= match page {
        PageSize::Base => 0,
        PageSize::Huge2M => libc::MFD_HUGETLB | libc::MFD_HUGE_2MB,
        PageSize::Huge1G => libc::MFD_HUGETLB | libc::MFD_HUGE_1GB,
    };
    match memfd_create(&c_name, flags | libc::MFD_NOEXEC_SEAL) {
        // EINVAL here may just mean a pre-6.3 kernel that does not know
        // MFD_NOEXEC_SEAL; retrying without it tells the two apart.
        Err(Error::Os { errno: libc::EINVAL, .. }) => memfd_create(&c_name, flags),
        result => result,
    }
}

fn memfd_create(name: &CString, flags: libc::c_uint) -> Result<OwnedFd, Error> {
    // SAFETY: `name` is a valid NUL-terminated string that outlives the call.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
    if fd < 0 {
        return Err(Error::last_os("memfd_create"));
    }
    // SAFETY: memfd_create just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Size the memfd to `len` bytes (already rounded to its page size), then seal
/// it against shrinking so a peer holding the fd cannot truncate it under our
/// mapping (which would turn our accesses into SIGBUS).
pub(crate) fn set_len(fd: BorrowedFd<'_>, len: usize) -> Result<(), Error> {
    let len = libc::off_t::try_from(len).map_err(|_| Error::InvalidLength)?;
    // SAFETY: ftruncate on a descriptor we hold open has no memory-safety preconditions.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } != 0 {
        return Err(Error::last_os("ftruncate"));
    }
    // SAFETY: F_ADD_SEALS takes an integer argument and touches no memory of ours.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) } != 0 {
        // Sealing is hardening, not a requirement (old kernels lack it for hugetlb).
        tracing::debug!(errno = last_errno(), "could not seal memfd against shrinking");
    }
    Ok(())
}

/// What `fstat` says about an fd that is about to be mapped.
pub(crate) struct FileShape {
    /// Current file size in bytes.
    pub(crate) size: u64,
    /// `st_blksize`: hugetlb files report their huge page size here.
    pub(crate) block_size: u64,
}

/// `fstat` the fd and return its size and block size.
pub(crate) fn shape(fd: BorrowedFd<'_>) -> Result<FileShape, Error> {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `stat` points to writable memory of the right type for fstat to fill.
    if unsafe { libc::fstat(fd.as_raw_fd(), stat.as_mut_ptr()) } != 0 {
        return Err(Error::last_os("fstat"));
    }
    // SAFETY: fstat succeeded, so it initialised the whole struct.
    let stat = unsafe { stat.assume_init() };
    Ok(FileShape {
        size: u64::try_from(stat.st_size).unwrap_or(0),
        block_size: u64::try_from(stat.st_blksize).unwrap_or(0),
    })
}
