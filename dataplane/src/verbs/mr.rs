//! A memory region registered in a protection domain (`ibv_reg_mr`), deregistered on drop: the
//! one place zcx registers memory with a device, whether for a `mem_map` region, the transport's
//! own buffers, or a caller's buffer for the length of one operation.

use std::sync::Arc;

use zcx_verbs_sys as sys;

use super::pd::ProtectionDomain;
use crate::byte_range::ByteRange;

/// A registered memory region.
pub struct MemoryRegion {
    mr: *mut sys::ibv_mr,
    range: ByteRange,
    lkey: u32,
    rkey: u32,
    /// The protection domain outlives its memory regions.
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: the region is only handed to libibverbs calls, which may come from any thread; the
// keys and bounds are plain values.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above.
unsafe impl Sync for MemoryRegion {}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion").field("range", &self.range).finish()
    }
}

impl MemoryRegion {
    /// Registers `[start, start + len)` in `pd` with `access` (`ibv_access_flags`).
    ///
    /// # Safety
    /// The range must be mapped, and stay mapped until the region is dropped.
    pub unsafe fn register(
        pd: &Arc<ProtectionDomain>,
        start: usize,
        len: usize,
        access: u32,
    ) -> Result<MemoryRegion, std::io::Error> {
        // SAFETY: a live PD; the range is the caller's contract.
        let mr = unsafe { sys::zcx_ibv_reg_mr(pd.raw_pd(), start as *mut _, len, access) };
        if mr.is_null() {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a memory region just registered.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        Ok(MemoryRegion { mr, range: ByteRange { start, len }, lkey, rkey, _pd: Arc::clone(pd) })
    }

    /// The key local work requests name the region's bytes with.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The key peers' RDMA requests name the region with.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The registered bytes.
    pub fn range(&self) -> ByteRange {
        self.range
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: registered in `register`, deregistered once; the protection domain is alive
        // (held by this value).
        let rc = unsafe { sys::ibv_dereg_mr(self.mr) };
        if rc != 0 {
            tracing::warn!(rc, range = ?self.range, "ibv_dereg_mr failed");
        }
    }
}
