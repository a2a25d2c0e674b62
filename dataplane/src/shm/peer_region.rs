//! A same-host peer's registered region, mapped here, and the one-sided operations on it: how the
//! shm transport does [`crate::Transport::rma`] natively.
//!
//! The region is the peer's memfd, named by its [`ShmLocator`] (`/proc/<pid>/fd/<fd>` with the
//! identity that proves the name still means that file). It is mapped once per link and kept
//! until the link goes. An operation is bounds-checked as a whole against the region the caller's
//! (vouched) key records and against the mapping before any byte is touched, then done with CPU
//! copies or atomics on the shared pages.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use zcx_control::ShmLocator;

use crate::os_error::last_errno as errno;
use crate::proto::AtomicOp;
use crate::rma::{LocalMem, RemoteMem, RmaOp};
use crate::transport::TlError;

/// A peer's memfd region mapped read-write into this process; unmapped on drop.
pub(crate) struct PeerRegion {
    locator: ShmLocator,
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; every access through it goes
// through raw pointers or atomics, whichever thread does it.
unsafe impl Send for PeerRegion {}

impl Drop for PeerRegion {
    fn drop(&mut self) {
        // SAFETY: `base..base + len` is the mapping `map` made, unmapped only here.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

impl PeerRegion {
    /// Maps the region `locator` names, which must belong to process `peer_pid` (the link's peer).
    ///
    /// `Unreachable` when the region is on another host, its process is gone, or its name no
    /// longer means the exported memfd; `InvalidParam` when the locator names another process or
    /// claims more than the file holds.
    pub(crate) fn map(locator: &ShmLocator, peer_pid: u32) -> Result<PeerRegion, TlError> {
        if locator.pid != peer_pid {
            tracing::debug!(locator.pid, peer_pid, "shm rma: a key for another process's memory");
            return Err(TlError::InvalidParam);
        }
        if zcx_control::local_boot_id() != Some(locator.boot_id) {
            return Err(TlError::Unreachable);
        }
        let alive = || zcx_control::process_start_time(locator.pid) == Some(locator.pid_start_time);
        if !alive() {
            return Err(TlError::Unreachable);
        }
        let path = CString::new(format!("/proc/{}/fd/{}", locator.pid, locator.fd))
            .map_err(|_| TlError::InvalidParam)?;
        // SAFETY: a NUL-terminated path; open has no other memory effect.
        let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if raw < 0 {
            tracing::debug!(errno = errno(), ?path, "shm rma: cannot open the peer's region");
            return Err(TlError::Unreachable);
        }
        // SAFETY: a descriptor open() just returned, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: an all-zero `stat` is a valid value for fstat to overwrite.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is a valid out-parameter and `fd` is open.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0
            || (st.st_dev, st.st_ino) != (locator.dev, locator.inode)
            || !alive()
        {
            return Err(TlError::Unreachable);
        }
        // Only a memfd sealed against shrinking is mapped: any other file could be truncated
        // under the mapping and turn our accesses into SIGBUS.
        // SAFETY: F_GET_SEALS on an open descriptor only returns flags.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(TlError::Unreachable);
        }
        // Sealed, the file cannot shrink: checked once, its size bounds every access for good.
        let len = usize::try_from(locator.map_len).map_err(|_| TlError::InvalidParam)?;
        if u64::try_from(st.st_size).map_or(true, |size| size < locator.map_len) || len == 0 {
            return Err(TlError::InvalidParam);
        }
        // SAFETY: a fresh shared mapping of `len` bytes of an open file that holds at least as
        // many; the kernel picks the address.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(TlError::from_errno(errno()));
        }
        Ok(PeerRegion { locator: *locator, base: base.cast(), len })
    }

    /// The locator this region was mapped from.
    pub(crate) fn locator(&self) -> &ShmLocator {
        &self.locator
    }

    /// Does `op` on `remote`, a range of this region, with `local`: the old value of a fetching
    /// atomic, 0 otherwise. The whole range is checked against `remote`'s region and against the
    /// mapping before a byte is touched.
    pub(crate) fn execute(
        &self,
        op: RmaOp,
        local: &LocalMem,
        remote: &RemoteMem<'_>,
    ) -> Result<u64, TlError> {
        let offset = self.offset_of(remote)?;
        // SAFETY: `offset + remote.len <= self.len` (checked by `offset_of`), so the range lies
        // inside the live mapping.
        let target = unsafe { self.base.add(offset) };
        match op {
            RmaOp::Put | RmaOp::Get if local.len() != remote.len => Err(TlError::InvalidParam),
            RmaOp::Put | RmaOp::Get if remote.len == 0 => Ok(0),
            RmaOp::Put => {
                // SAFETY: the target range is inside the mapping (above); `LocalMem::new`'s
                // contract makes the local range readable. They cannot overlap: the local range
                // is the caller's memory, not this mapping made by the transport.
                unsafe { std::ptr::copy_nonoverlapping(local.ptr(), target, remote.len) };
                Ok(0)
            }
            RmaOp::Get => {
                // SAFETY: as for a put, with the local range writable.
                unsafe { std::ptr::copy_nonoverlapping(target, local.ptr(), remote.len) };
                Ok(0)
            }
            RmaOp::Atomic { op, fetch, value, compare } => {
                if remote.len != 4 && remote.len != 8 || offset % remote.len != 0 {
                    return Err(TlError::InvalidParam);
                }
                let old = if remote.len == 4 {
                    // SAFETY: 4 bytes inside the mapping, 4-aligned (the mapping is page aligned
                    // and the offset a multiple of 4); shared memory both sides access only
                    // atomically or with copies, never through references.
                    let word = unsafe { AtomicU32::from_ptr(target.cast()) };
                    u64::from(atomic32(word, op, value as u32, compare as u32))
                } else {
                    // SAFETY: as above, 8 bytes 8-aligned.
                    let word = unsafe { AtomicU64::from_ptr(target.cast()) };
                    atomic64(word, op, value, compare)
                };
                Ok(if fetch { old } else { 0 })
            }
        }
    }

    /// The offset in the mapping of `remote`'s first byte, once the whole range is known to lie in
    /// the region `remote` records and in the mapping.
    fn offset_of(&self, remote: &RemoteMem<'_>) -> Result<usize, TlError> {
        let len = remote.len as u64;
        let in_region = remote
            .addr
            .checked_sub(remote.region_base)
            .filter(|&start| start.checked_add(len).is_some_and(|end| end <= remote.region_len));
        let Some(start) = in_region else { return Err(TlError::InvalidParam) };
        let offset = self.locator.map_offset.checked_add(start).ok_or(TlError::InvalidParam)?;
        match offset.checked_add(len) {
            Some(end) if end <= self.len as u64 => Ok(offset as usize),
            _ => Err(TlError::InvalidParam),
        }
    }
}

fn atomic32(word: &AtomicU32, op: AtomicOp, value: u32, compare: u32) -> u32 {
    match op {
        AtomicOp::Add => word.fetch_add(value, Ordering::SeqCst),
        AtomicOp::Swap => word.swap(value, Ordering::SeqCst),
        AtomicOp::Cswap => match word.compare_exchange(compare, value, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(old) | Err(old) => old,
        },
        AtomicOp::And => word.fetch_and(value, Ordering::SeqCst),
        AtomicOp::Or => word.fetch_or(value, Ordering::SeqCst),
        AtomicOp::Xor => word.fetch_xor(value, Ordering::SeqCst),
    }
}

fn atomic64(word: &AtomicU64, op: AtomicOp, value: u64, compare: u64) -> u64 {
    match op {
        AtomicOp::Add => word.fetch_add(value, Ordering::SeqCst),
        AtomicOp::Swap => word.swap(value, Ordering::SeqCst),
        AtomicOp::Cswap => match word.compare_exchange(compare, value, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(old) | Err(old) => old,
        },
        AtomicOp::And => word.fetch_and(value, Ordering::SeqCst),
        AtomicOp::Or => word.fetch_or(value, Ordering::SeqCst),
        AtomicOp::Xor => word.fetch_xor(value, Ordering::SeqCst),
    }
}
