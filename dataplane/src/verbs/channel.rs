//! A completion channel: the file descriptor a worker sleeps on in `ucp_worker_wait` (or hands
//! out from `ucp_worker_get_efd`) until an armed completion queue gets a completion.
//!
//! The protocol: arm the CQ ([`CompletionQueue::arm`]), poll it once more (a completion that
//! came before the arm raises no event), then wait for the fd to become readable, take the events
//! ([`CompletionChannel::take_events`], which acknowledges them) and poll the CQ.

use std::os::fd::RawFd;
use std::sync::Arc;

use zcx_verbs_sys as sys;

use super::cq::CompletionQueue;
use super::pd::ProtectionDomain;
use crate::transport::TlError;

/// A completion event channel (`ibv_comp_channel`), its descriptor non-blocking; destroyed on
/// drop after its completion queues (each holds an `Arc` of it).
pub struct CompletionChannel {
    channel: *mut sys::ibv_comp_channel,
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: the channel is only handed to libibverbs calls and `read`s, which may come from any
// thread.
unsafe impl Send for CompletionChannel {}
// SAFETY: as above.
unsafe impl Sync for CompletionChannel {}

impl CompletionChannel {
    /// A channel on `pd`'s device.
    pub fn new(pd: &Arc<ProtectionDomain>) -> Result<Arc<CompletionChannel>, String> {
        // SAFETY: an open context.
        let channel = unsafe { sys::ibv_create_comp_channel(pd.raw_context()) };
        if channel.is_null() {
            return Err(format!(
                "ibv_create_comp_channel on {}: {}",
                pd.name(),
                std::io::Error::last_os_error()
            ));
        }
        let this = CompletionChannel { channel, _pd: Arc::clone(pd) };
        let fd = this.fd();
        // SAFETY: the channel's own descriptor; only its flags change.
        let ok = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
        };
        if !ok {
            return Err(format!(
                "making the completion channel non-blocking: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Arc::new(this))
    }

    /// The descriptor that becomes readable when an armed CQ of the channel gets a completion.
    pub fn fd(&self) -> RawFd {
        // SAFETY: a live channel; `fd` is set at creation and never changes.
        unsafe { (*self.channel).fd }
    }

    /// The raw channel, for creating completion queues on it.
    pub fn raw(&self) -> *mut sys::ibv_comp_channel {
        self.channel
    }

    /// Takes and acknowledges every pending event without blocking; how many there were. Each
    /// event disarms its CQ: arm it again before sleeping.
    pub fn take_events(&self) -> Result<u32, TlError> {
        let mut taken = 0;
        loop {
            let mut cq = std::ptr::null_mut();
            let mut context = std::ptr::null_mut();
            // SAFETY: a live channel and valid out-pointers; non-blocking, so it returns -1 with
            // EAGAIN when no event is pending.
            let rc = unsafe { sys::ibv_get_cq_event(self.channel, &mut cq, &mut context) };
            if rc != 0 {
                let err = std::io::Error::last_os_error();
                return match err.raw_os_error() {
                    Some(libc::EAGAIN) => Ok(taken),
                    Some(errno) => Err(TlError::Os(errno)),
                    None => Err(TlError::Os(libc::EIO)),
                };
            }
            // SAFETY: `cq` is a CQ of this channel that reported the event; acknowledged at once,
            // so none is left unacknowledged when the CQ is destroyed.
            unsafe { sys::ibv_ack_cq_events(cq, 1) };
            taken += 1;
        }
    }
}

impl Drop for CompletionChannel {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, after its CQs (they hold this `Arc`).
        let rc = unsafe { sys::ibv_destroy_comp_channel(self.channel) };
        if rc != 0 {
            tracing::warn!(rc, "ibv_destroy_comp_channel failed");
        }
    }
}

impl CompletionQueue {
    /// Asks for an event on the CQ's channel at its next completion (`ibv_req_notify_cq`).
    pub fn arm(&self) -> Result<(), TlError> {
        // SAFETY: a live CQ.
        match unsafe { sys::zcx_ibv_req_notify_cq(self.raw(), 0) } {
            0 => Ok(()),
            errno => Err(TlError::Os(errno)),
        }
    }
}
