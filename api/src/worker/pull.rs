//! Receiver-pull rendezvous over verbs: a large message on a verbs endpoint is offered to the
//! receiver with a key to the sender's buffer, and the receiver reads it with one RDMA READ (or a
//! few, split at the port's message size) instead of the sender pushing it in frames.
//!
//! The key is a memory region of exactly the message's bytes, read-only to peers, registered for
//! this one send and deregistered when the send completes (the receiver's acknowledgement, or the
//! endpoint's failure). Nothing is cached, so no key outlives its message, and no later reuse or
//! unmapping of the buffer by the application can be reached through one. Small messages, and
//! endpoints on any other transport, are untouched: one branch on a worker without verbs.

use zcx_engine::{EndpointId, OpId, SendBuffer, Start};

use crate::worker::state::State;

/// The regions of sends a verbs receiver may still be reading, by operation.
#[derive(Default)]
pub(crate) struct PullRegions {
    #[cfg(feature = "verbs")]
    regions: zcx_dataplane::FastMap<OpId, zcx_dataplane::verbs::MemoryRegion>,
}

/// The region a send offered, until the send started (and then its operation holds it).
pub(crate) struct Offered {
    #[cfg(feature = "verbs")]
    region: Option<zcx_dataplane::verbs::MemoryRegion>,
}

impl PullRegions {
    /// True when no send holds a region.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        #[cfg(feature = "verbs")]
        return self.regions.is_empty();
        #[cfg(not(feature = "verbs"))]
        true
    }

    /// The operation ended: its region, if any, is deregistered.
    pub fn release(&mut self, op: OpId) {
        #[cfg(feature = "verbs")]
        self.regions.remove(&op);
        #[cfg(not(feature = "verbs"))]
        let _ = op;
    }
}

impl State {
    /// `buf` (whose bytes start at `ptr`) with a key the receiver pulls it by, when `ep` is on
    /// verbs and a message this long goes by rendezvous; the region stays with what this returns
    /// until [`State::hold_pull`].
    #[inline]
    pub(crate) fn offer_pull(
        &self,
        ep: EndpointId,
        buf: SendBuffer,
        ptr: *const u8,
    ) -> (SendBuffer, Offered) {
        #[cfg(feature = "verbs")]
        if let Some((member, caps)) = self.verbs {
            let on_verbs = self
                .engine
                .link_of(ep)
                .is_some_and(|link| zcx_dataplane::transport_set::member_of(link) == member);
            if on_verbs && buf.len() >= caps.rndv_threshold {
                return self.register_for_pull(buf, ptr);
            }
        }
        #[cfg(not(feature = "verbs"))]
        let _ = (ep, ptr);
        (
            buf,
            Offered {
                #[cfg(feature = "verbs")]
                region: None,
            },
        )
    }

    #[cfg(feature = "verbs")]
    #[cold]
    fn register_for_pull(&self, buf: SendBuffer, ptr: *const u8) -> (SendBuffer, Offered) {
        let none = |buf| (buf, Offered { region: None });
        let Some(domain) = &self.ctx.verbs else { return none(buf) };
        let (start, len) = (ptr as usize, buf.len());
        // SAFETY: the bytes are the send's buffer, which its request keeps in place until the
        // send completes; the region is dropped then (`PullRegions::release`), before the request
        // hands the buffer back.
        match unsafe { domain.register_for_pull(start, len) } {
            Ok(region) => {
                let key = crate::rkey::NativeKey {
                    base: start as u64,
                    len: len as u64,
                    entry: &region.rkey().to_le_bytes(),
                }
                .encode();
                (buf.with_key(key), Offered { region: Some(region) })
            }
            Err(e) => {
                tracing::debug!(len, %e, "no region for a pull; the sender pushes the message");
                none(buf)
            }
        }
    }

    /// The send offered with [`State::offer_pull`] started: a pending one keeps its region until
    /// it completes; one that ended at once lets it go.
    #[inline]
    pub(crate) fn hold_pull(&mut self, offered: Offered, started: &Start) {
        #[cfg(feature = "verbs")]
        if let (Some(region), Start::Pending(op)) = (offered.region, started) {
            self.pulls.regions.insert(*op, region);
        }
        #[cfg(not(feature = "verbs"))]
        let _ = (offered, started);
    }
}
