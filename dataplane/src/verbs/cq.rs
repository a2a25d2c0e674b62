//! A completion queue and what its work completions say: which work request finished, and how
//! its status maps to the transport's errors.

use std::sync::Arc;

use zcx_verbs_sys as sys;

use super::channel::CompletionChannel;
use super::pd::ProtectionDomain;
use crate::transport::TlError;

/// A completion queue of a device (`ibv_cq`), destroyed on drop after its queue pairs (each holds
/// an `Arc` of it).
pub struct CompletionQueue {
    cq: *mut sys::ibv_cq,
    _pd: Arc<ProtectionDomain>,
    /// The channel its events go to, kept alive as long as the CQ.
    _channel: Option<Arc<CompletionChannel>>,
}

// SAFETY: the CQ is only handed to libibverbs calls, which may come from any thread; polling is
// serialised by the owner (one worker's lock).
unsafe impl Send for CompletionQueue {}
// SAFETY: as above.
unsafe impl Sync for CompletionQueue {}

/// One work completion, as the transport acts on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The id the work request was posted with.
    pub wr_id: u64,
    /// `Ok`, or what its status means for the link.
    pub result: Result<(), TlError>,
    /// The raw `ibv_wc_status`, for logs.
    pub status: u32,
    /// The raw `ibv_wc_opcode` (valid for successful completions).
    pub opcode: u32,
    /// Bytes received (receives) or the atomic's width (atomics).
    pub byte_len: u32,
    /// The queue pair the work request was posted on (for a shared receive queue's
    /// completions, the one the send arrived on).
    pub qp_num: u32,
}

impl CompletionQueue {
    /// A completion queue of at least `entries` entries on `pd`'s device.
    pub fn new(pd: &Arc<ProtectionDomain>, entries: i32) -> Result<Arc<CompletionQueue>, String> {
        CompletionQueue::create(pd, entries, None)
    }

    /// A completion queue whose events, once armed ([`CompletionQueue::arm`]), go to `channel`.
    pub fn with_channel(
        pd: &Arc<ProtectionDomain>,
        entries: i32,
        channel: &Arc<CompletionChannel>,
    ) -> Result<Arc<CompletionQueue>, String> {
        CompletionQueue::create(pd, entries, Some(Arc::clone(channel)))
    }

    fn create(
        pd: &Arc<ProtectionDomain>,
        entries: i32,
        channel: Option<Arc<CompletionChannel>>,
    ) -> Result<Arc<CompletionQueue>, String> {
        let raw_channel = channel.as_ref().map_or(std::ptr::null_mut(), |c| c.raw());
        // SAFETY: an open context and, if any, a live channel of the same device.
        let cq =
            unsafe { sys::ibv_create_cq(pd.raw_context(), entries, std::ptr::null_mut(), raw_channel, 0) };
        if cq.is_null() {
            return Err(format!(
                "ibv_create_cq({entries}) on {}: {}",
                pd.name(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(Arc::new(CompletionQueue { cq, _pd: Arc::clone(pd), _channel: channel }))
    }

    /// The raw CQ, for creating queue pairs on it.
    pub fn raw(&self) -> *mut sys::ibv_cq {
        self.cq
    }

    /// Takes up to `out.len()` completions; how many it wrote.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize, TlError> {
        const BATCH: usize = 16;
        // SAFETY: plain C structs, all-zero valid; the provider overwrites what it reports.
        let mut raw: [sys::ibv_wc; BATCH] = unsafe { std::mem::zeroed() };
        let want = out.len().min(BATCH) as i32;
        // SAFETY: a live CQ and room for `want` completions.
        let n = unsafe { sys::zcx_ibv_poll_cq(self.cq, want, raw.as_mut_ptr()) };
        if n < 0 {
            return Err(TlError::Os(libc::EIO));
        }
        for (wc, slot) in raw.iter().take(n as usize).zip(out.iter_mut()) {
            *slot = WorkCompletion {
                wr_id: wc.wr_id,
                result: wc_result(wc.status),
                status: wc.status,
                opcode: wc.opcode,
                byte_len: wc.byte_len,
                qp_num: wc.qp_num,
            };
        }
        Ok(n as usize)
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, after every QP on it (they hold this `Arc`).
        let rc = unsafe { sys::ibv_destroy_cq(self.cq) };
        if rc != 0 {
            tracing::warn!(rc, "ibv_destroy_cq failed");
        }
    }
}

/// What a work completion's status means for the link, as UCX maps it: the peer refused the
/// access or the operation (`CONNECTION_RESET`), the peer stopped answering (`ENDPOINT_TIMEOUT`),
/// the queue pair went to error before the request ran (`CANCELED`), anything else `IO_ERROR`.
pub fn wc_result(status: sys::ibv_wc_status::Type) -> Result<(), TlError> {
    use sys::ibv_wc_status::*;
    match status {
        IBV_WC_SUCCESS => Ok(()),
        IBV_WC_REM_ACCESS_ERR
        | IBV_WC_REM_OP_ERR
        | IBV_WC_REM_INV_REQ_ERR
        | IBV_WC_REM_INV_RD_REQ_ERR
        | IBV_WC_REM_ABORT_ERR
        | IBV_WC_BAD_RESP_ERR => Err(TlError::ConnectionReset),
        IBV_WC_RETRY_EXC_ERR | IBV_WC_RNR_RETRY_EXC_ERR | IBV_WC_RESP_TIMEOUT_ERR => Err(TlError::Timeout),
        IBV_WC_WR_FLUSH_ERR => Err(TlError::Canceled),
        _ => Err(TlError::Os(libc::EIO)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sys::ibv_wc_status::*;

    #[test]
    fn completion_statuses_map_as_ucx_maps_them() {
        assert_eq!(wc_result(IBV_WC_SUCCESS), Ok(()));
        for remote in [IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_OP_ERR, IBV_WC_REM_INV_REQ_ERR] {
            assert_eq!(wc_result(remote), Err(TlError::ConnectionReset), "{remote}");
        }
        for gone in [IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR] {
            assert_eq!(wc_result(gone), Err(TlError::Timeout), "{gone}");
        }
        assert_eq!(wc_result(IBV_WC_WR_FLUSH_ERR), Err(TlError::Canceled));
        for other in [IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_PROT_ERR, IBV_WC_GENERAL_ERR, 999] {
            assert_eq!(wc_result(other), Err(TlError::Os(libc::EIO)), "{other}");
        }
    }
}
