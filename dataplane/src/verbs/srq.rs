//! A shared receive queue: one pool of posted receives that every queue pair of a worker takes
//! its incoming sends from, refilled in batches (one chained post per batch), so that receive
//! buffers scale with the worker, not with its endpoints.

use std::sync::Arc;

use zcx_verbs_sys as sys;

use super::pd::ProtectionDomain;
use super::qp::Local;
use crate::transport::TlError;

/// A shared receive queue (`ibv_srq`), destroyed on drop after its queue pairs (each holds an
/// `Arc` of it).
pub struct SharedReceiveQueue {
    srq: *mut sys::ibv_srq,
    capacity: u32,
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: the SRQ is only handed to libibverbs calls, which may come from any thread; posting is
// serialised by the owner.
unsafe impl Send for SharedReceiveQueue {}
// SAFETY: as above.
unsafe impl Sync for SharedReceiveQueue {}

/// Receives one chained post carries at most.
pub const MAX_BATCH: usize = 64;

impl SharedReceiveQueue {
    /// A shared receive queue of at least `max_wr` receives in `pd`.
    pub fn new(pd: &Arc<ProtectionDomain>, max_wr: u32) -> Result<Arc<SharedReceiveQueue>, String> {
        // SAFETY: plain C struct, all-zero valid.
        let mut init: sys::ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        init.attr = sys::ibv_srq_attr { max_wr, max_sge: 1, srq_limit: 0 };
        // SAFETY: a live PD; `init` may be updated with the granted sizes.
        let srq = unsafe { sys::ibv_create_srq(pd.raw_pd(), &mut init) };
        if srq.is_null() {
            return Err(format!(
                "ibv_create_srq({max_wr}) on {}: {}",
                pd.name(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(Arc::new(SharedReceiveQueue { srq, capacity: init.attr.max_wr, _pd: Arc::clone(pd) }))
    }

    /// Receives it holds at most, as the device granted.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The raw SRQ, for creating queue pairs on it.
    pub fn raw(&self) -> *mut sys::ibv_srq {
        self.srq
    }

    /// Posts up to [`MAX_BATCH`] receives in one chained call; how many were posted (all of
    /// them, or those before the one the device refused, with its error when none was).
    ///
    /// # Safety
    /// Every `Local` names registered memory that stays valid, and is touched by no one else,
    /// until its receive completes.
    pub unsafe fn post_batch(&self, receives: &[(u64, Local)]) -> Result<usize, TlError> {
        let receives = &receives[..receives.len().min(MAX_BATCH)];
        if receives.is_empty() {
            return Ok(0);
        }
        let mut sges = [sys::ibv_sge { addr: 0, length: 0, lkey: 0 }; MAX_BATCH];
        // SAFETY: plain C structs, all-zero valid.
        let mut wrs: [sys::ibv_recv_wr; MAX_BATCH] = unsafe { std::mem::zeroed() };
        for (sge, (_, local)) in sges.iter_mut().zip(receives) {
            *sge = sys::ibv_sge { addr: local.addr, length: local.len, lkey: local.lkey };
        }
        // From here on both arrays are reached only through these pointers, which the chain
        // holds.
        let sge_base = sges.as_mut_ptr();
        let base = wrs.as_mut_ptr();
        for (i, (wr_id, _)) in receives.iter().enumerate() {
            // SAFETY: `i < receives.len() <= MAX_BATCH`, inside both arrays.
            unsafe {
                let wr = &mut *base.add(i);
                wr.wr_id = *wr_id;
                wr.sg_list = sge_base.add(i);
                wr.num_sge = 1;
                wr.next = if i + 1 < receives.len() { base.add(i + 1) } else { std::ptr::null_mut() };
            }
        }
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: a live SRQ; the chain and its entries live through the call (copied by the
        // provider); the memory is the caller's contract.
        let rc = unsafe { sys::zcx_ibv_post_srq_recv(self.srq, base, &mut bad) };
        if rc == 0 {
            return Ok(receives.len());
        }
        // SAFETY: on failure `bad` points into the chain at the first request not posted.
        let posted = if bad.is_null() { 0 } else { (unsafe { bad.offset_from(base) }) as usize };
        if posted > 0 {
            return Ok(posted);
        }
        Err(match rc {
            libc::ENOMEM => TlError::NoResource,
            other => TlError::Os(other),
        })
    }
}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, after its queue pairs (they hold this `Arc`).
        let rc = unsafe { sys::ibv_destroy_srq(self.srq) };
        if rc != 0 {
            tracing::warn!(rc, "ibv_destroy_srq failed");
        }
    }
}
