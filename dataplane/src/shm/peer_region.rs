//! A same-host peer's registered region, mapped here, and the one-sided operations on it: how the
//! shm transport does [`crate::Transport::rma`] natively.
//!
//! The region is the peer's memfd, named by its [`ShmLocator`] (`/proc/<pid>/fd/<fd>` with the
//! identity that proves the name still means that file). It is mapped once per link and kept
//! until the link goes. An operation is bounds-checked as a whole against the region the caller's
//! (vouched) key records and against the mapping before any byte is touched, then done with CPU
//! copies or atomics on the shared pages.

use zcx_control::ShmLocator;

use super::domain::{open_peer_memfd, PeerMemfdError};
use super::segment::map_shared;
use crate::proto::rma_exec::apply_atomic;
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
        let fd = open_peer_memfd(locator).map_err(|why| {
            tracing::debug!(%why, "shm rma: cannot map the peer's region");
            match why {
                PeerMemfdError::TooSmall => TlError::InvalidParam,
                _ => TlError::Unreachable,
            }
        })?;
        let len = usize::try_from(locator.map_len).map_err(|_| TlError::InvalidParam)?;
        if len == 0 {
            return Err(TlError::InvalidParam);
        }
        // The file holds at least `len` bytes (`open_peer_memfd` checked), so every mapped page
        // is backed.
        let base = map_shared(&fd, len).map_err(TlError::from_errno)?;
        Ok(PeerRegion { locator: *locator, base, len })
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
                // SAFETY: `remote.len` bytes (4 or 8) inside the mapping, aligned to their size (the
                // mapping is page aligned and the offset a multiple of the size); both sides
                // access shared words only atomically or with copies, never through references.
                let old = unsafe { apply_atomic(target, op, remote.len as u8, value, compare) };
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
