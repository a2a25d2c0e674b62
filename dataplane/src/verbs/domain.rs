//! A verbs protection domain as a memory domain: `mem_map` registers the region with
//! `ibv_reg_mr`, with remote access only as far as the region's `UCP_MEM_MAP_PROT_*` bits allow,
//! and the packed remote key carries the memory region's rkey for the peer's RDMA requests.
//!
//! Each region is a memory region of its own, exactly its bytes with exactly its protection, so
//! the NIC enforces the owner's record on every remote access. The initiator checks an access
//! against the packed key before it posts (the transport's job), which turns an honest mistake
//! into a local error instead of a dead link; a key a peer forged past that check still reaches
//! only what the owner registered for that region, and the owner's NIC fails the link on
//! anything else.
//!
//! Registering pins every page, so a region mapped with NONBLOCK registers at its first use; a
//! registration the memory-lock limit refuses is [`DomainError::ExceedsLimit`], naming
//! `RLIMIT_MEMLOCK`.

use std::any::Any;
use std::sync::Arc;

use zcx_control::{PROT_REMOTE_READ, PROT_REMOTE_WRITE};
use zcx_verbs_sys as sys;

use super::mr::MemoryRegion;
use super::pd::ProtectionDomain;
use super::region_index::RegionIndex;
use crate::domain::{DomainError, DomainId, DomainRegistration, MemoryDomain, RegionToRegister};

/// Bytes of this domain's entry in a packed key: the rkey, little-endian.
pub const ENTRY_LEN: usize = 4;

/// The verbs memory domain of one device.
#[derive(Debug)]
pub struct VerbsDomain {
    pd: Arc<ProtectionDomain>,
    /// Every region registered here, for the transport's puts and gets from them.
    index: Arc<RegionIndex>,
    /// Whether registrations allow remote atomics (the context asked for AMO features).
    atomics: bool,
}

impl VerbsDomain {
    /// The domain of `pd`; `atomics`: regions writable by peers also take their RDMA atomics.
    pub fn new(pd: Arc<ProtectionDomain>, atomics: bool) -> VerbsDomain {
        VerbsDomain { pd, atomics, index: Arc::new(RegionIndex::default()) }
    }

    /// The protection domain regions are registered in.
    pub fn protection_domain(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    /// Registers `[start, start + len)` for peers to read, and nothing else (a large send's
    /// buffer, pulled by its receiver): the region is the caller's to drop once the peer is done.
    ///
    /// # Safety
    /// The range must stay mapped until the region is dropped.
    pub unsafe fn register_for_pull(&self, start: usize, len: usize) -> Result<MemoryRegion, std::io::Error> {
        // SAFETY: the caller's contract.
        unsafe { MemoryRegion::register(&self.pd, start, len, sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ) }
    }

    /// The regions registered here, by address.
    pub fn regions(&self) -> &Arc<RegionIndex> {
        &self.index
    }
}

/// The `ibv_access_flags` for a region mapped with `prot`: local write always (receives and
/// gets land in it), remote read and write as `prot` allows, remote atomics with remote write
/// when the context wants atomics.
pub fn access_flags(prot: u32, atomics: bool) -> u32 {
    let mut access = sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE;
    if prot & PROT_REMOTE_READ != 0 {
        access |= sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ;
    }
    if prot & PROT_REMOTE_WRITE != 0 {
        access |= sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE;
        if atomics {
            access |= sys::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC;
        }
    }
    access
}

/// The rkey in a peer's entry for this domain, after checking its length.
pub fn decode_entry(entry: &[u8]) -> Result<u32, DomainError> {
    let bytes: [u8; ENTRY_LEN] = entry.try_into().map_err(|_| {
        DomainError::BadEntry(format!("a verbs entry is {ENTRY_LEN} bytes, not {}", entry.len()))
    })?;
    Ok(u32::from_le_bytes(bytes))
}

impl MemoryDomain for VerbsDomain {
    fn id(&self) -> DomainId {
        DomainId::VERBS
    }

    fn register(&self, region: &RegionToRegister) -> Result<Arc<dyn DomainRegistration>, DomainError> {
        // Exactly the region, with exactly its protection: the NIC then enforces the owner's
        // record on every access, so a key a peer edited (a longer length, another base) reaches
        // no byte the region's own handle does not allow, even inside the same allocation.
        let (start, len) = (region.start, region.len);
        let keep = region.backing.as_ref().map(|backing| Arc::clone(&backing.keep));
        let access = access_flags(region.prot, self.atomics);
        // SAFETY: `[start, start + len)` is mapped memory that stays mapped while the region is
        // registered: a zcx mapping is kept alive by `keep`, which the registration holds, and
        // caller memory by the contract of `MemMapParams::address` (its handles outlive it).
        let mr = unsafe { MemoryRegion::register(&self.pd, start, len, access) }.map_err(|err| {
            let what = format!("ibv_reg_mr of {len} bytes on {}: {err}", self.pd.name());
            match err.raw_os_error() {
                Some(libc::ENOMEM) | Some(libc::EPERM) => DomainError::ExceedsLimit(format!(
                    "{what}; registered memory is pinned and counts against RLIMIT_MEMLOCK \
                     (raise it with `ulimit -l`, or run with CAP_IPC_LOCK)"
                )),
                _ => DomainError::Failed(what),
            }
        })?;
        let mr = Arc::new(mr);
        self.index.insert(&mr);
        Ok(Arc::new(VerbsRegistration { mr, _keep: keep }))
    }

    fn check_remote_entry(&self, entry: &[u8]) -> Result<(), DomainError> {
        decode_entry(entry).map(|_| ())
    }

    fn defers_nonblocking(&self) -> bool {
        true
    }
}

/// A `mem_map` region registered in a protection domain; deregistered when the last holder (the
/// handle's registration, or an operation in flight from it) lets go.
pub struct VerbsRegistration {
    mr: Arc<MemoryRegion>,
    /// The zcx mapping stays mapped while it is registered.
    _keep: Option<Arc<dyn Send + Sync>>,
}

impl VerbsRegistration {
    /// The key local work requests name the region's bytes with.
    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    /// The key peers' RDMA requests name the region with.
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }

    /// The registered range `(start, len)`: the region's own.
    pub fn range(&self) -> (usize, usize) {
        let range = self.mr.range();
        (range.start, range.len)
    }
}

impl DomainRegistration for VerbsRegistration {
    fn remote_entry(&self, _addr: usize, _len: usize) -> Option<Vec<u8>> {
        Some(self.mr.rkey().to_le_bytes().to_vec())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcx_control::{PROT_LOCAL_READ, PROT_LOCAL_WRITE};

    use sys::ibv_access_flags::{
        IBV_ACCESS_LOCAL_WRITE as LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC as ATOMIC,
        IBV_ACCESS_REMOTE_READ as READ, IBV_ACCESS_REMOTE_WRITE as WRITE,
    };

    #[test]
    fn remote_access_is_granted_only_as_prot_allows() {
        let local = PROT_LOCAL_READ | PROT_LOCAL_WRITE;
        assert_eq!(access_flags(local, true), LOCAL_WRITE, "a local-only region takes no remote access");
        assert_eq!(access_flags(local | PROT_REMOTE_READ, true), LOCAL_WRITE | READ);
        assert_eq!(access_flags(local | PROT_REMOTE_WRITE, false), LOCAL_WRITE | WRITE);
        assert_eq!(access_flags(local | PROT_REMOTE_WRITE, true), LOCAL_WRITE | WRITE | ATOMIC);
        assert_eq!(
            access_flags(local | PROT_REMOTE_READ | PROT_REMOTE_WRITE, true),
            LOCAL_WRITE | READ | WRITE | ATOMIC
        );
        assert_eq!(access_flags(PROT_REMOTE_READ, true) & (WRITE | ATOMIC), 0, "read-only stays read-only");
    }

    #[test]
    fn an_entry_is_exactly_an_rkey() {
        assert_eq!(decode_entry(&0x1234_5678u32.to_le_bytes()), Ok(0x1234_5678));
        for bad in [&[][..], &[1, 2, 3], &[1, 2, 3, 4, 5], &[0; 64]] {
            assert!(matches!(decode_entry(bad), Err(DomainError::BadEntry(_))), "{bad:?}");
        }
    }
}
