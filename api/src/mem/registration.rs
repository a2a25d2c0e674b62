//! Registrations and the allocations behind them.
//!
//! An [`Allocation`] is memory zcx mapped itself (memfd-backed, so same-host peers can map it) or a
//! peer's memory it imported. A [`Registration`] is a range registered with the memory domains; the
//! registration cache shares one among every handle of the same range or a sub-range. Both are
//! reference counted: the memory stays mapped while any handle, registration or key uses it.

use std::os::fd::AsRawFd;
use std::sync::{Arc, OnceLock};

use zcx_hugepages::Mapping;

use crate::context::ContextInner;
use zcx_dataplane::{
    Backing, DomainError, DomainId, DomainRegistration, Memfd, MemoryDomain, RegionToRegister,
};

use crate::mem::Prot;
use crate::status::{fail_with, Result, Status};

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

/// A range registered with every memory domain of the context (see
/// [`zcx_dataplane::domain`]): the same-host locator, DPDK external memory, and next a verbs
/// protection domain. The registration cache shares one among every handle of the range or a
/// sub-range; dropping the last reference deregisters from every domain.
pub(crate) struct Registration {
    ctx: Arc<ContextInner>,
    pub id: u64,
    pub start: usize,
    pub end: usize,
    /// The zcx allocation that contains the range, when there is one.
    pub backing: Option<Arc<Allocation>>,
    /// `UCP_MEM_MAP_PROT_*` bits, for a domain that registers on first use.
    prot: u32,
    /// Pages pinned with `mlock` for this registration (caller memory with `LOCK`).
    locked: bool,
    /// One slot per domain of the context, in the context's order.
    domains: Box<[DomainSlot]>,
}

/// A range's registration with one domain: made in `mem_map`, or on first use when the domain
/// defers `NONBLOCK` regions; `None` inside when the domain does not apply to the range.
struct DomainSlot {
    domain: Arc<dyn MemoryDomain>,
    registered: OnceLock<Option<Arc<dyn DomainRegistration>>>,
}

impl Registration {
    /// Registers `[start, end)` with every domain (those that defer `NONBLOCK` regions wait when
    /// `nonblock`). A domain that does not apply is skipped; one that fails fails the call.
    pub fn new(
        ctx: &Arc<ContextInner>,
        start: usize,
        end: usize,
        prot: Prot,
        backing: Option<Arc<Allocation>>,
        locked: bool,
        nonblock: bool,
    ) -> Result<Arc<Registration>> {
        let domains = ctx
            .domains
            .iter()
            .map(|domain| DomainSlot { domain: Arc::clone(domain), registered: OnceLock::new() })
            .collect();
        let registration = Arc::new(Registration {
            ctx: Arc::clone(ctx),
            id: ctx.next_id(),
            start,
            end,
            backing,
            prot: prot.bits(),
            locked,
            domains,
        });
        for slot in registration.domains.iter() {
            if !(nonblock && slot.domain.defers_nonblocking()) {
                let registered = registration.register_with(slot.domain.as_ref())?;
                let _ = slot.registered.set(registered);
            }
        }
        ctx.rcache.insert(start, end, prot.bits(), &registration);
        tracing::trace!(id = registration.id, start, end, "registered");
        Ok(registration)
    }

    /// The range's registration with domain `id`, registering now if the domain deferred it;
    /// `None` when the context has no such domain or it does not apply to the range.
    pub fn domain(&self, id: DomainId) -> Option<&Arc<dyn DomainRegistration>> {
        let slot = self.domains.iter().find(|slot| slot.domain.id() == id)?;
        slot.registered
            .get_or_init(|| {
                // A deferred registration that fails now has no caller to tell: the operation
                // that needed it goes the way it would without the domain.
                self.register_with(slot.domain.as_ref()).unwrap_or_else(|status| {
                    tracing::warn!(domain = %id, ?status, "deferred registration failed");
                    None
                })
            })
            .as_ref()
    }

    /// Every domain's registration of the range, registering deferred ones now.
    pub fn domains(&self) -> impl Iterator<Item = (DomainId, &Arc<dyn DomainRegistration>)> {
        self.domains.iter().filter_map(|slot| {
            let id = slot.domain.id();
            self.domain(id).map(|registered| (id, registered))
        })
    }

    /// Whether domain `id` has registered the range yet (deferred ones have not, until used).
    pub fn is_registered_with(&self, id: DomainId) -> bool {
        self.domains
            .iter()
            .any(|slot| slot.domain.id() == id && slot.registered.get().is_some_and(Option::is_some))
    }

    fn register_with(&self, domain: &dyn MemoryDomain) -> Result<Option<Arc<dyn DomainRegistration>>> {
        let region = RegionToRegister {
            start: self.start,
            len: self.end - self.start,
            prot: self.prot,
            backing: self.backing.as_ref().map(backing_of),
        };
        if region.len == 0 {
            return Ok(None);
        }
        match domain.register(&region) {
            Ok(registered) => Ok(Some(registered)),
            Err(DomainError::NotApplicable(why)) => {
                tracing::debug!(domain = %domain.id(), start = self.start, %why, "domain does not apply");
                Ok(None)
            }
            Err(DomainError::ExceedsLimit(why)) => Err(fail_with(
                Status::ExceedsLimit,
                format!(
                    "registering {:#x}+{} with the {} domain: {why}",
                    self.start,
                    region.len,
                    domain.id()
                ),
            )),
            Err(why) => Err(fail_with(
                Status::NoResource,
                format!(
                    "registering {:#x}+{} with the {} domain failed: {why}",
                    self.start,
                    region.len,
                    domain.id()
                ),
            )),
        }
    }
}

/// What a domain is told about the zcx mapping behind a range.
fn backing_of(allocation: &Arc<Allocation>) -> Backing {
    let mapping = allocation.mapping();
    let memfd = match (mapping.memfd(), allocation.memfd_identity()) {
        (Some(fd), Some((dev, inode))) => Some(Memfd { fd: fd.as_raw_fd(), dev, inode }),
        _ => None,
    };
    Backing {
        start: mapping.addr(),
        len: mapping.mapped_len(),
        page_size: mapping.page_size().bytes(),
        memfd,
        keep: Arc::clone(allocation) as Arc<dyn Send + Sync>,
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

/// `(st_dev, st_ino)` of an open file.
pub(crate) fn fstat_identity(fd: i32) -> Option<(u64, u64)> {
    fstat(fd).map(|st| (st.st_dev, st.st_ino))
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

#[cfg(test)]
mod tests {
    use std::any::Any;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use zcx_dataplane::{DomainError, DomainId, DomainRegistration, MemoryDomain, RegionToRegister};

    use super::*;
    use crate::{Context, Features, MemMapFlags, MemMapParams};

    /// A domain that counts what it registered and still holds, and can be told to fail.
    #[derive(Default)]
    struct CountingDomain {
        registered: AtomicUsize,
        live: Arc<AtomicUsize>,
        defers: bool,
        fails: bool,
    }

    struct CountedRegistration(Arc<AtomicUsize>);

    impl Drop for CountedRegistration {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::Relaxed);
        }
    }

    impl DomainRegistration for CountedRegistration {
        fn remote_entry(&self, _addr: usize, len: usize) -> Option<Vec<u8>> {
            Some((len as u32).to_le_bytes().to_vec())
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    const TEST_DOMAIN: DomainId = DomainId(200);

    impl MemoryDomain for CountingDomain {
        fn id(&self) -> DomainId {
            TEST_DOMAIN
        }
        fn register(
            &self,
            _region: &RegionToRegister,
        ) -> std::result::Result<Arc<dyn DomainRegistration>, DomainError> {
            if self.fails {
                return Err(DomainError::Failed("out of pinnable memory".into()));
            }
            self.registered.fetch_add(1, Ordering::Relaxed);
            self.live.fetch_add(1, Ordering::Relaxed);
            Ok(Arc::new(CountedRegistration(Arc::clone(&self.live))))
        }
        fn check_remote_entry(&self, entry: &[u8]) -> std::result::Result<(), DomainError> {
            if entry.len() == 4 {
                Ok(())
            } else {
                Err(DomainError::BadEntry("not four bytes".into()))
            }
        }
        fn defers_nonblocking(&self) -> bool {
            self.defers
        }
    }

    fn context_with(domain: Arc<CountingDomain>) -> Context {
        let mut ctx = Context::with_features(Features::RMA).unwrap();
        Arc::get_mut(&mut ctx.inner).expect("fresh context").domains.push(domain);
        ctx
    }

    #[test]
    fn mem_map_registers_once_with_every_domain_and_unmap_deregisters() {
        let domain = Arc::new(CountingDomain::default());
        let ctx = context_with(Arc::clone(&domain));
        let memh = ctx.mem_map(&MemMapParams::alloc(8192)).unwrap();
        assert_eq!(domain.registered.load(Ordering::Relaxed), 1);
        assert_eq!(memh.registered_domains(), vec![DomainId::SAME_HOST, TEST_DOMAIN]);
        // A sub-range of caller-registered memory shares the registration (the cache is in front).
        // SAFETY: the range is inside `memh`, which outlives `sub`.
        let sub = ctx.mem_map(&unsafe { MemMapParams::new().length(4096).address(memh.address()) }).unwrap();
        assert_eq!(sub.registration_id(), memh.registration_id());
        assert_eq!(domain.registered.load(Ordering::Relaxed), 1, "the cache hit registered again");
        let packed = memh.rkey_pack().unwrap();
        let rkey = ctx.rkey_unpack(&packed).unwrap();
        assert_eq!(rkey.domain_entry(TEST_DOMAIN), Some(&8192u32.to_le_bytes()[..]));
        assert_eq!(rkey.domain_entry(DomainId::VERBS), None);
        drop(sub);
        assert_eq!(domain.live.load(Ordering::Relaxed), 1);
        memh.unmap().unwrap();
        assert_eq!(domain.live.load(Ordering::Relaxed), 0, "unmap did not deregister");
    }

    #[test]
    fn a_domain_that_defers_nonblocking_regions_registers_on_first_use() {
        let domain = Arc::new(CountingDomain { defers: true, ..Default::default() });
        let ctx = context_with(Arc::clone(&domain));
        let memh = ctx
            .mem_map(&MemMapParams::alloc(4096).flags(MemMapFlags::ALLOCATE | MemMapFlags::NONBLOCK))
            .unwrap();
        assert_eq!(domain.registered.load(Ordering::Relaxed), 0);
        assert_eq!(memh.registered_domains(), vec![DomainId::SAME_HOST]);
        memh.rkey_pack().unwrap();
        assert_eq!(domain.registered.load(Ordering::Relaxed), 1, "packing is a use");
        memh.rkey_pack().unwrap();
        assert_eq!(domain.registered.load(Ordering::Relaxed), 1);
        assert_eq!(memh.registered_domains(), vec![DomainId::SAME_HOST, TEST_DOMAIN]);
        let blocking = ctx.mem_map(&MemMapParams::alloc(4096)).unwrap();
        assert_eq!(domain.registered.load(Ordering::Relaxed), 2, "without NONBLOCK it registers at once");
        drop((memh, blocking));
        assert_eq!(domain.live.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_domain_that_fails_fails_mem_map_with_no_resource() {
        let domain = Arc::new(CountingDomain { fails: true, ..Default::default() });
        let ctx = context_with(domain);
        assert_eq!(ctx.mem_map(&MemMapParams::alloc(4096)).unwrap_err(), Status::NoResource);
        let zero = ctx.mem_map(&MemMapParams::alloc(0)).unwrap();
        assert!(zero.registered_domains().is_empty(), "the zero-length handle registers nothing");
    }

    #[test]
    fn unpack_refuses_a_key_whose_domain_entry_its_domain_rejects() {
        let domain = Arc::new(CountingDomain::default());
        let ctx = context_with(domain);
        let memh = ctx.mem_map(&MemMapParams::alloc(4096)).unwrap();
        let mut wire = memh.rkey_wire();
        wire.domain_keys[0].key.push(0);
        assert_eq!(ctx.rkey_unpack(&wire.encode()).unwrap_err(), Status::InvalidParam);
        // An entry of a domain this context does not have is carried, not judged.
        wire.domain_keys[0] = zcx_control::DomainKey { domain: 250, key: vec![1, 2, 3] };
        let rkey = ctx.rkey_unpack(&wire.encode()).unwrap();
        assert_eq!(rkey.domain_entry(DomainId(250)), Some(&[1u8, 2, 3][..]));
    }
}
