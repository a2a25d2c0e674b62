//! Registrations and the allocations behind them.
//!
//! An [`Allocation`] is memory zcx mapped itself (memfd-backed, so same-host peers can map it) or a
//! peer's memory it imported. A [`Registration`] is a range registered with the transports; the
//! registration cache shares one among every handle of the same range or a sub-range. Both are
//! reference counted: the memory stays mapped while any handle, registration or key uses it.

use std::os::fd::AsRawFd;
use std::sync::Arc;

use zcx_hugepages::Mapping;

use crate::context::ContextInner;
use crate::mem::Prot;

/// Memory mapped by zcx: allocated here or imported from a peer's exported handle.
pub(crate) struct Allocation {
    ctx: Arc<ContextInner>,
    mapping: Mapping,
    /// `(st_dev, st_ino)` of the memfd, so a peer opening it through /proc can check it got this one.
    memfd_identity: Option<(u64, u64)>,
}

impl Allocation {
    pub fn new(ctx: &Arc<ContextInner>, mapping: Mapping) -> Arc<Allocation> {
        let memfd_identity = mapping.memfd().and_then(|fd| fstat_identity(fd.as_raw_fd()));
        let allocation = Arc::new(Allocation { ctx: Arc::clone(ctx), mapping, memfd_identity });
        ctx.track_allocation(&allocation);
        allocation
    }

    pub fn start(&self) -> usize {
        self.mapping.addr()
    }

    pub fn mapping(&self) -> &Mapping {
        &self.mapping
    }

    pub fn memfd_identity(&self) -> Option<(u64, u64)> {
        self.memfd_identity
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        self.ctx.untrack_allocation(self.mapping.addr());
    }
}

/// A range registered with the transports: with the shared-memory locator, and with DPDK as
/// external memory when this process runs EAL (feature `dpdk`); the io_uring and verbs keys join
/// here.
pub(crate) struct Registration {
    ctx: Arc<ContextInner>,
    pub id: u64,
    pub start: usize,
    pub end: usize,
    /// The zcx allocation that contains the range, when there is one.
    pub backing: Option<Arc<Allocation>>,
    /// Pages pinned with `mlock` for this registration (caller memory with `LOCK`).
    locked: bool,
    /// The DPDK external-memory registration covering the range, so DPDK transports send from
    /// it without copying; `None` when EAL is not running, or the range is not page aligned.
    #[cfg(feature = "dpdk")]
    #[allow(dead_code)] // held, never read: its Drop unregisters once no frame uses it
    dpdk: Option<Arc<zcx_dataplane::dpdk::extmem::ExtRegion>>,
}

impl Registration {
    pub fn new(
        ctx: &Arc<ContextInner>,
        start: usize,
        end: usize,
        prot: Prot,
        backing: Option<Arc<Allocation>>,
        locked: bool,
    ) -> Arc<Registration> {
        #[cfg(feature = "dpdk")]
        let dpdk = register_with_dpdk(start, end, backing.as_ref());
        let registration = Arc::new(Registration {
            ctx: Arc::clone(ctx),
            id: ctx.next_id(),
            start,
            end,
            backing,
            locked,
            #[cfg(feature = "dpdk")]
            dpdk,
        });
        ctx.rcache.insert(start, end, prot.bits(), &registration);
        tracing::trace!(id = registration.id, start, end, "registered");
        registration
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if self.locked {
            // SAFETY: the range was locked by this registration and is still mapped: the registration
            // keeps its backing allocation alive, and caller memory must outlive its handles (the
            // contract of `MemMapParams::address`).
            let rc = unsafe { libc::munlock(self.start as *const libc::c_void, self.end - self.start) };
            if rc != 0 {
                tracing::warn!(err = %std::io::Error::last_os_error(), "munlock failed");
            }
        }
        self.ctx.rcache.remove_dead(self.start);
        tracing::trace!(id = self.id, "deregistered");
    }
}

/// Registers the memory of `[start, end)` with DPDK as external memory, when this process runs
/// EAL: the whole allocation behind it (so every handle into it shares one DPDK entry, which
/// keeps the allocation mapped while DPDK knows it), or caller memory that is page aligned.
/// Failures only mean sends from it are copied, so they are logged, not returned.
#[cfg(feature = "dpdk")]
fn register_with_dpdk(
    start: usize,
    end: usize,
    backing: Option<&Arc<Allocation>>,
) -> Option<Arc<zcx_dataplane::dpdk::extmem::ExtRegion>> {
    use zcx_dataplane::dpdk::extmem::{ExtMemError, ExtRegion};
    if start == end {
        return None;
    }
    let result = match backing {
        Some(allocation) => {
            let mapping = allocation.mapping();
            let keep = Arc::clone(allocation) as Arc<dyn Send + Sync>;
            // SAFETY: the allocation's mapping is mapped while `keep` (held by the region) lives.
            unsafe {
                ExtRegion::register(
                    mapping.addr(),
                    mapping.mapped_len(),
                    mapping.page_size().bytes(),
                    Some(keep),
                )
            }
        }
        // SAFETY: caller memory stays mapped while its handles live (the contract of
        // `MemMapParams::address`); the region lives as long as this registration, or, after
        // it, as long as a send from the memory is in flight, which the caller's operation
        // outlives.
        None => unsafe { ExtRegion::register(start, end - start, zcx_hugepages::base_page_size(), None) },
    };
    match result {
        Ok(region) => Some(region),
        Err(ExtMemError::Unavailable) => None,
        Err(why) => {
            tracing::debug!(start, end, %why, "not registered with DPDK; sends from it are copied");
            None
        }
    }
}

/// `(st_dev, st_ino)` of an open file.
pub(crate) fn fstat_identity(fd: i32) -> Option<(u64, u64)> {
    fstat(fd).map(|st| (st.st_dev, st.st_ino))
}

/// The size in bytes of the file behind `fd`.
pub(crate) fn fstat_size(fd: i32) -> Option<u64> {
    fstat(fd).and_then(|st| u64::try_from(st.st_size).ok())
}

fn fstat(fd: i32) -> Option<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a valid out-pointer for one `stat`; fstat only writes it.
    let rc = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: fstat returned 0, so it initialised `st`.
    Some(unsafe { st.assume_init() })
}
