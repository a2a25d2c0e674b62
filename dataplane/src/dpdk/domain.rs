//! DPDK external memory as a memory domain: a region registered here can be pointed at by mbufs,
//! so the DPDK transport sends from it without copying (see [`super::extmem`]).
//!
//! Local only: a peer needs nothing from this domain to reach the region, so a registration
//! has no entry in a packed key. A region zcx allocated is registered whole (its mapping), so
//! every handle into the allocation shares one external-memory entry; caller memory is
//! registered when it is page aligned. Registering walks every page (one IOVA each), so a
//! region mapped with NONBLOCK waits for its first use.

use std::any::Any;
use std::sync::Arc;

use super::extmem::{ExtMemError, ExtRegion};
use crate::domain::{DomainError, DomainId, DomainRegistration, MemoryDomain, RegionToRegister};

/// The DPDK external-memory domain (process-wide, like DPDK's own table).
#[derive(Debug, Default)]
pub struct DpdkDomain;

impl MemoryDomain for DpdkDomain {
    fn id(&self) -> DomainId {
        DomainId::DPDK
    }

    fn register(&self, region: &RegionToRegister) -> Result<Arc<dyn DomainRegistration>, DomainError> {
        let result = match &region.backing {
            // SAFETY: the mapping stays mapped while `keep`, which the external region holds, lives.
            Some(backing) => unsafe {
                ExtRegion::register(
                    backing.start,
                    backing.len,
                    backing.page_size,
                    Some(Arc::clone(&backing.keep)),
                )
            },
            // SAFETY: caller memory stays mapped while its handles live (the contract of
            // `MemMapParams::address`); the region lives as long as the registration holding it, or,
            // after it, as long as a send from the memory is in flight, which the caller's operation
            // outlives.
            None => unsafe { ExtRegion::register(region.start, region.len, page_size(), None) },
        };
        match result {
            Ok(ext) => Ok(Arc::new(DpdkRegistration(ext))),
            Err(ExtMemError::Unavailable) => Err(DomainError::NotApplicable("EAL is not running".into())),
            Err(why) => Err(DomainError::NotApplicable(why.to_string())),
        }
    }

    fn defers_nonblocking(&self) -> bool {
        true
    }
}

/// A region listed with DPDK; the external-memory entry goes when the last holder (this, or a
/// frame in flight from the region) lets go.
pub struct DpdkRegistration(Arc<ExtRegion>);

impl DpdkRegistration {
    /// The external-memory region.
    pub fn region(&self) -> &Arc<ExtRegion> {
        &self.0
    }
}

impl DomainRegistration for DpdkRegistration {
    fn remote_entry(&self, _addr: usize, _len: usize) -> Option<Vec<u8>> {
        None
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The base page size, for caller memory (whose page size zcx does not know).
fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}
