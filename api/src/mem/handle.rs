//! `ucp_mem_h`: a mapped (registered) memory region, and what can be done with it.

use std::sync::Arc;

use bitflags::bitflags;
use zcx_control::{DomainKey, ExportedMemhWire, RkeyWire};
use zcx_dataplane::shm::domain::SameHostRegistration;
use zcx_dataplane::DomainId;
use zcx_hugepages::PageSize;

use crate::context::{ContextInner, Features};
use crate::mem::registration::Registration;
use crate::mem::{MemMapFlags, MemoryType, Prot};
use crate::status::{fail_with, Result, Status};

/// `ucp_mem_h`. Dropping it is `ucp_mem_unmap`; [`MemHandle::unmap`] does the same and reports the
/// status. Taking `self` makes a double unmap impossible.
///
/// The memory stays mapped while any handle, registration-cache sharer or same-process remote key
/// still uses it.
pub struct MemHandle {
    pub(crate) ctx: Arc<ContextInner>,
    pub(crate) region_id: u64,
    pub(crate) address: usize,
    pub(crate) length: usize,
    pub(crate) prot: Prot,
    pub(crate) flags: MemMapFlags,
    pub(crate) access_key: [u8; 16],
    /// `None` only for the zero-length dummy handle.
    pub(crate) registration: Option<Arc<Registration>>,
}

/// `ucp_mem_attr_t`, filled by [`MemHandle::query`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemAttr {
    /// `address` (`UCP_MEM_ATTR_FIELD_ADDRESS`); null for the zero-length handle.
    pub address: *mut u8,
    /// `length` (`UCP_MEM_ATTR_FIELD_LENGTH`).
    pub length: usize,
    /// `mem_type` (`UCP_MEM_ATTR_FIELD_MEM_TYPE`).
    pub mem_type: MemoryType,
    /// Extension: the page size backing the region (from the mapping, or `/proc/self/smaps` for
    /// caller memory); `None` for the zero-length handle or when it cannot be determined.
    pub page_size: Option<usize>,
}

/// `ucp_mem_advice_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum MemAdvice {
    /// `UCP_MADV_NORMAL`: no special treatment.
    Normal = 0,
    /// `UCP_MADV_WILLNEED`: populate now what `NONBLOCK` left unpopulated.
    WillNeed = 1,
}

impl TryFrom<u32> for MemAdvice {
    type Error = Status;

    /// An advice value outside `ucp_mem_advice_t` → `INVALID_PARAM`.
    fn try_from(raw: u32) -> Result<MemAdvice> {
        match raw {
            0 => Ok(MemAdvice::Normal),
            1 => Ok(MemAdvice::WillNeed),
            _ => Err(Status::InvalidParam),
        }
    }
}

/// `ucp_mem_advise_params_t`: every field is mandatory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemAdviseParams {
    /// `address`: start of the range; must lie in the handle.
    pub address: usize,
    /// `length` of the range; the range must end inside the handle.
    pub length: usize,
    /// `advice`.
    pub advice: MemAdvice,
}

bitflags! {
    /// `ucp_memh_pack_flags`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct MemhPackFlags: u64 {
        /// `UCP_MEMH_PACK_FLAG_EXPORT`: pack for a same-host process to import with
        /// [`crate::MemMapParams::exported_memh_buffer`]; needs [`Features::EXPORTED_MEMH`].
        const EXPORT = 1 << 0;
    }
}

/// A packed memory handle or remote key (`ucp_memh_pack` / `ucp_rkey_pack` output).
/// Dropping it is `ucp_memh_buffer_release` / `ucp_rkey_buffer_release`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedBuffer(Vec<u8>);

impl PackedBuffer {
    /// The packed bytes, to send to a peer.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The packed bytes, owned.
    pub fn into_vec(self) -> Vec<u8> {
        self.0
    }
}

impl std::ops::Deref for PackedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for PackedBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl MemHandle {
    /// Start of the region (null for the zero-length handle).
    pub fn address(&self) -> *mut u8 {
        self.address as *mut u8
    }

    /// Length of the region in bytes.
    pub fn length(&self) -> usize {
        self.length
    }

    /// The protection the region was mapped with.
    pub fn prot(&self) -> Prot {
        self.prot
    }

    /// The `mem_map` flags the handle was created with.
    pub fn flags(&self) -> MemMapFlags {
        self.flags
    }

    /// Extension: the id of the transport registration this handle uses. Handles that share one
    /// through the registration cache report the same id.
    pub fn registration_id(&self) -> Option<u64> {
        self.registration.as_ref().map(|r| r.id)
    }

    /// Extension: the memory domains that have registered this handle's range so far (a domain
    /// that defers `NONBLOCK` regions joins on first use; one that does not apply to the range is
    /// absent).
    pub fn registered_domains(&self) -> Vec<DomainId> {
        let Some(registration) = self.registration.as_ref() else { return Vec::new() };
        self.ctx.domains.iter().map(|d| d.id()).filter(|&id| registration.is_registered_with(id)).collect()
    }

    /// Extension: true when the region is memfd-backed, so a same-host peer can map it (`rkey_ptr`,
    /// export).
    pub fn is_shareable(&self) -> bool {
        self.backing_allocation().is_some_and(|a| a.memfd_identity().is_some())
    }

    /// `ucp_mem_query`: address, length and memory type (plus the backing page size).
    pub fn query(&self) -> MemAttr {
        let page_size = match (self.length, self.backing_allocation()) {
            (0, _) => None,
            (_, Some(allocation)) => Some(allocation.mapping().page_size().bytes()),
            (_, None) => zcx_hugepages::smaps_for(self.address).map(|e| e.kernel_page_size),
        };
        MemAttr { address: self.address(), length: self.length, mem_type: MemoryType::Host, page_size }
    }

    /// Extension: the page size of a zcx allocation, `None` for caller memory and the dummy handle.
    pub fn page_size(&self) -> Option<PageSize> {
        self.backing_allocation().map(|a| a.mapping().page_size())
    }

    /// `ucp_mem_advise`. The range must lie inside the handle, else `INVALID_PARAM`.
    pub fn advise(&self, params: &MemAdviseParams) -> Result<()> {
        let end = params.address.checked_add(params.length).ok_or(Status::InvalidParam)?;
        if params.address < self.address || end > self.address + self.length {
            return Err(fail_with(
                Status::InvalidParam,
                format!("advise range {:#x}+{} is outside the handle", params.address, params.length),
            ));
        }
        if params.advice == MemAdvice::Normal || params.length == 0 {
            return Ok(());
        }
        match self.backing_allocation() {
            Some(allocation) => allocation
                .mapping()
                .advise_willneed(params.address - allocation.start(), params.length)
                .map_err(|e| fail_with(Status::IoError, format!("advise WILLNEED failed: {e}"))),
            None => advise_willneed_caller_memory(params.address, params.length),
        }
    }

    /// `ucp_memh_pack`: the remote key, or with `EXPORT` a buffer a same-host process imports.
    pub fn pack(&self, flags: MemhPackFlags) -> Result<PackedBuffer> {
        if flags.contains(MemhPackFlags::EXPORT) {
            return self.pack_exported();
        }
        encode_packed(self.rkey_wire().try_encode())
    }

    /// The remote key of this handle, before encoding (what `pack` encodes).
    pub(crate) fn rkey_wire(&self) -> RkeyWire {
        self.rkey_wire_with(self.domain_keys())
    }

    /// The remote key without the other domains' entries, for a same-host peer, which reaches
    /// the memory through the locator alone; building it registers no deferred domain.
    pub(crate) fn same_host_rkey_wire(&self) -> RkeyWire {
        self.rkey_wire_with(Vec::new())
    }

    fn rkey_wire_with(&self, domain_keys: Vec<DomainKey>) -> RkeyWire {
        RkeyWire {
            context_id: self.ctx.id,
            region_id: self.region_id,
            base: self.address as u64,
            length: self.length as u64,
            prot: self.prot.bits(),
            mem_type: MemoryType::Host as u8,
            access_key: self.access_key,
            symmetric: self.flags.contains(MemMapFlags::SYMMETRIC_RKEY),
            shm: if self.length == 0 { None } else { self.shm_locator() },
            domain_keys,
        }
    }

    /// `ucp_rkey_pack` (deprecated in UCP, kept as an alias): same as `pack` without flags.
    pub fn rkey_pack(&self) -> Result<PackedBuffer> {
        self.pack(MemhPackFlags::empty())
    }

    /// What keeps this handle's memory mapped, for an owned operation buffer; `None` when zcx
    /// does not own the memory (caller memory) or the handle is empty.
    pub(crate) fn keep_alive(&self) -> Option<std::sync::Arc<dyn Send + Sync>> {
        let registration = self.registration.as_ref()?;
        registration.backing.as_ref()?;
        Some(Arc::clone(registration) as std::sync::Arc<dyn Send + Sync>)
    }

    /// `ucp_mem_unmap`: revokes remote access, deregisters, and frees memory zcx allocated once
    /// nothing else uses it.
    pub fn unmap(self) -> Result<()> {
        drop(self);
        Ok(())
    }

    fn pack_exported(&self) -> Result<PackedBuffer> {
        if !self.ctx.features.contains(Features::EXPORTED_MEMH) {
            return Err(fail_with(Status::InvalidParam, "EXPORT needs the EXPORTED_MEMH feature".into()));
        }
        let Some(shm) = self.shm_locator() else {
            return Err(fail_with(
                Status::Unsupported,
                "only memory zcx allocated (memfd-backed) can be exported".into(),
            ));
        };
        let wire = ExportedMemhWire {
            context_id: self.ctx.id,
            region_id: self.region_id,
            base: self.address as u64,
            length: self.length as u64,
            prot: self.prot.bits(),
            mem_type: MemoryType::Host as u8,
            access_key: self.access_key,
            shm,
        };
        encode_packed(wire.try_encode())
    }

    /// How a same-host peer maps this region, when it is memfd-backed: the same-host domain's
    /// entry.
    pub(crate) fn shm_locator(&self) -> Option<zcx_control::ShmLocator> {
        let registered = self.registration.as_ref()?.domain(DomainId::SAME_HOST)?;
        registered.as_any().downcast_ref::<SameHostRegistration>()?.locator(self.address)
    }

    /// The entries of every memory domain but the same-host one (which travels as the key's
    /// locator) for this handle's packed key.
    fn domain_keys(&self) -> Vec<DomainKey> {
        let Some(registration) = self.registration.as_ref().filter(|_| self.length > 0) else {
            return Vec::new();
        };
        registration
            .domains()
            .filter(|(id, _)| *id != DomainId::SAME_HOST)
            .filter_map(|(id, registered)| {
                let key = registered.remote_entry(self.address, self.length)?;
                Some(DomainKey { domain: id.0, key })
            })
            .collect()
    }

    fn backing_allocation(&self) -> Option<&crate::mem::Allocation> {
        self.registration.as_ref()?.backing.as_deref()
    }
}

impl Drop for MemHandle {
    /// `ucp_mem_unmap`: peers lose access first, then the registration (and, with the last user,
    /// the memory) goes.
    fn drop(&mut self) {
        self.ctx.remote_access.remove(self.region_id);
        self.ctx.help_sources.remove(self.region_id);
    }
}

impl std::fmt::Debug for MemHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemHandle")
            .field("region_id", &self.region_id)
            .field("address", &format_args!("{:#x}", self.address))
            .field("length", &self.length)
            .field("prot", &self.prot)
            .field("registration", &self.registration_id())
            .finish()
    }
}

/// WILLNEED on memory the caller owns: populate it writable where the kernel can, else read-ahead advice.
fn advise_willneed_caller_memory(address: usize, length: usize) -> Result<()> {
    let page = zcx_hugepages::base_page_size();
    let start = address & !(page - 1);
    let len = address + length - start;
    // SAFETY: the range lies inside a registered handle, which the caller keeps mapped (the contract
    // of `MemMapParams::address`); populating or advising does not change its contents.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) };
    if rc == 0 {
        return Ok(());
    }
    // SAFETY: as above; MADV_WILLNEED only schedules read-ahead.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_WILLNEED) };
    if rc == 0 {
        Ok(())
    } else {
        Err(fail_with(
            Status::IoError,
            format!("madvise WILLNEED failed: {}", std::io::Error::last_os_error()),
        ))
    }
}

/// Wraps encoded bytes; an encoder refusal is an internal inconsistency, reported, never a panic.
fn encode_packed(encoded: std::result::Result<Vec<u8>, zcx_control::WireError>) -> Result<PackedBuffer> {
    encoded
        .map(PackedBuffer)
        .map_err(|e| fail_with(Status::InvalidParam, format!("cannot pack the memory handle: {e}")))
}

#[cfg(test)]
mod tests {
    use zcx_dataplane::{AccessError, RemoteAccess};

    use crate::{Context, Features, MemMapParams, Prot};

    #[test]
    fn handles_with_remote_prot_are_in_the_access_table_until_unmapped() {
        let ctx = Context::with_features(Features::RMA).unwrap();
        let table = &ctx.inner.remote_access;
        let memh = ctx.mem_map(&MemMapParams::alloc(4096)).unwrap();
        let base = memh.address() as u64;
        let key = memh.access_key;
        assert_eq!(table.check(memh.region_id, &key, base + 8, 8, RemoteAccess::Atomic { size: 8 }), Ok(8));
        let mut forged = key;
        forged[0] ^= 0x80;
        assert_eq!(
            table.check(memh.region_id, &forged, base, 1, RemoteAccess::Read),
            Err(AccessError::BadKey)
        );
        assert_eq!(
            table.check(memh.region_id, &key, base + 4090, 8, RemoteAccess::Write),
            Err(AccessError::OutOfBounds)
        );
        let id = memh.region_id;
        memh.unmap().unwrap();
        assert_eq!(table.check(id, &key, base, 1, RemoteAccess::Read), Err(AccessError::BadKey));

        let read_only =
            ctx.mem_map(&MemMapParams::alloc(4096).prot(Prot::LOCAL_READ | Prot::REMOTE_READ)).unwrap();
        let (id, key, base) = (read_only.region_id, read_only.access_key, read_only.address() as u64);
        assert_eq!(table.check(id, &key, base, 4, RemoteAccess::Read), Ok(0));
        assert_eq!(table.check(id, &key, base, 4, RemoteAccess::Write), Err(AccessError::Protection));
        let local =
            ctx.mem_map(&MemMapParams::alloc(4096).prot(Prot::LOCAL_READ | Prot::LOCAL_WRITE)).unwrap();
        assert_eq!(
            table.check(local.region_id, &local.access_key, local.address() as u64, 1, RemoteAccess::Read),
            Err(AccessError::BadKey),
            "a region without remote prot is not remotely accessible at all"
        );
        assert_eq!(table.len(), 1);
    }
}
