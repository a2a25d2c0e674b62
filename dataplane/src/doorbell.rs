//! Doorbells: words in shared memory a worker may read without its lock to learn that a
//! transport has something to read.
//!
//! A busy-polling worker spends most of its polls finding nothing, and a full poll (the worker's
//! lock, every transport, the worker's own queues) costs far more than looking at the one cache
//! line where the next record would appear. While a transport is quiet (nothing queued, nothing
//! in flight, no link being set up or torn down) its doorbells say everything that can change
//! without the worker's own calls: the worker then skips full polls until one rings, and still
//! makes a full poll every few calls (timers, listeners, peer death).
//!
//! A doorbell keeps the memory it watches mapped (it holds the mapping's owner), so it can be
//! read after its link is gone; it then just never rings, or rings falsely, and a false ring only
//! costs one full poll. The peer writes the memory, so what it reads is a hint, never trusted.

use std::sync::Arc;

use crate::shm::ring;
use crate::transport::LinkId;

/// One watched ring: rings when a record is waiting at its consumer's position. It names the
/// link whose ring it watches, so that a rung doorbell leads to that link alone
/// ([`crate::Transport::take_rung_frame`]).
pub struct Doorbell {
    base: *const u8,
    capacity: usize,
    link: LinkId,
    _keep: Arc<dyn Send + Sync>,
}

// SAFETY: `base` points into memory that `_keep` keeps mapped for the doorbell's whole life, and
// it is only ever read with atomic loads, which any thread may do.
unsafe impl Send for Doorbell {}
// SAFETY: as for `Send`; reading through a shared reference changes nothing.
unsafe impl Sync for Doorbell {}

impl Doorbell {
    /// A doorbell on the ring at `base` of `capacity` data bytes, the receive ring of `link`.
    ///
    /// # Safety
    /// `base..base + ring::ring_bytes(capacity)` must be a mapped, 64-byte aligned ring that
    /// stays mapped as long as `keep` lives, and `capacity` must be a valid ring capacity.
    pub unsafe fn new(
        base: *const u8,
        capacity: usize,
        link: LinkId,
        keep: Arc<dyn Send + Sync>,
    ) -> Doorbell {
        Doorbell { base, capacity, link, _keep: keep }
    }

    /// The link whose ring this doorbell watches, as the transport that gave it names it.
    #[inline]
    pub fn link(&self) -> LinkId {
        self.link
    }

    /// Names the link as a transport that contains the giving one does (see
    /// [`crate::TransportSet`]).
    pub(crate) fn rename_link(&mut self, link: LinkId) {
        self.link = link;
    }

    /// True when a record may be waiting (a false positive is possible, never a fault).
    #[inline]
    pub fn rang(&self) -> bool {
        // SAFETY: `new`'s contract: the ring is mapped while `self` lives.
        unsafe { ring::record_waiting(self.base, self.capacity) }
    }
}

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Doorbell").field("capacity", &self.capacity).field("link", &self.link).finish()
    }
}
