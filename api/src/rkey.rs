//! `ucp_rkey_h`: remote keys — unpack, `rkey_ptr`, compare, destroy.

use std::cmp::Ordering;
use std::sync::{Arc, OnceLock};

use zcx_control::RkeyWire;
use zcx_dataplane::DomainId;
use zcx_hugepages::Mapping;

use crate::context::{Context, ContextInner};
use crate::mem::map_peer_memfd;
use crate::mem::{MemoryType, Prot};
use crate::status::{fail_with, Result, Status};

/// `ucp_rkey_h`: what a peer's packed key says about its region. Dropping it is `ucp_rkey_destroy`
/// (and unmaps the local view `ptr` created, if any).
pub struct RemoteKey {
    ctx: Arc<ContextInner>,
    wire: RkeyWire,
    /// The peer's memfd mapped here, made on the first `ptr` call.
    local_view: OnceLock<std::result::Result<Mapping, Status>>,
}

/// `ucp_rkey_compare_params_t`: `field_mask` must be zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RkeyCompareParams {
    /// Must currently be 0, as in UCP; anything else → `INVALID_PARAM`.
    pub field_mask: u64,
}

impl Context {
    /// `ucp_ep_rkey_unpack`, against the context until endpoints exist: checks and decodes a packed
    /// key. Truncated, oversized, corrupted or foreign bytes → `INVALID_PARAM`.
    pub fn rkey_unpack(&self, packed: &[u8]) -> Result<RemoteKey> {
        RemoteKey::unpack_in(&self.inner, packed)
    }

    /// `ucp_rkey_compare`: a total order over keys of this context, equal for keys of the same
    /// region. Keys unpacked by another context, or a non-zero `field_mask` → `INVALID_PARAM`.
    pub fn rkey_compare(&self, a: &RemoteKey, b: &RemoteKey, params: &RkeyCompareParams) -> Result<Ordering> {
        if params.field_mask != 0 {
            return Err(fail_with(Status::InvalidParam, "rkey_compare: field_mask must be 0".into()));
        }
        if !Arc::ptr_eq(&a.ctx, &self.inner) || !Arc::ptr_eq(&b.ctx, &self.inner) {
            return Err(fail_with(Status::InvalidParam, "rkey_compare: keys of another context".into()));
        }
        Ok(a.identity().cmp(&b.identity()))
    }
}

impl RemoteKey {
    /// [`Context::rkey_unpack`] for a context's internals: a key from a peer's frame.
    pub(crate) fn unpack_in(ctx: &Arc<ContextInner>, packed: &[u8]) -> Result<RemoteKey> {
        let wire = RkeyWire::decode(packed)
            .map_err(|e| fail_with(Status::InvalidParam, format!("bad packed remote key: {e}")))?;
        if let Some(shm) = &wire.shm {
            if shm.map_offset.checked_add(wire.length).is_none_or(|end| end > shm.map_len) {
                return Err(fail_with(
                    Status::InvalidParam,
                    "packed remote key lies outside its memfd".into(),
                ));
            }
        }
        for entry in &wire.domain_keys {
            // An entry of a domain this context lacks is for a transport it cannot use: kept, unread.
            let Some(domain) = ctx.domains.iter().find(|d| d.id() == DomainId(entry.domain)) else {
                continue;
            };
            domain.check_remote_entry(&entry.key).map_err(|e| {
                fail_with(Status::InvalidParam, format!("bad packed remote key: {} entry: {e}", domain.id()))
            })?;
        }
        Ok(RemoteKey { ctx: Arc::clone(ctx), wire, local_view: OnceLock::new() })
    }

    /// Extension: the key's entry for memory domain `id`, as the owner's domain packed it (the
    /// same-host domain's entry is the locator, see [`RemoteKey::is_shareable`]).
    pub fn domain_entry(&self, id: DomainId) -> Option<&[u8]> {
        self.wire.domain_keys.iter().find(|k| k.domain == id.0).map(|k| k.key.as_slice())
    }

    /// The process whose memfd backs the region, when it is memfd-backed.
    pub(crate) fn shm_pid(&self) -> Option<u32> {
        self.wire.shm.as_ref().map(|shm| shm.pid)
    }
}

impl RemoteKey {
    /// `ucp_rkey_ptr`: a local pointer to the peer's byte at `raddr`.
    ///
    /// `UNREACHABLE` when the region cannot be mapped here (not memfd-backed, another host, owner
    /// gone); `INVALID_ADDR` when `raddr` is outside the region. The pointer stays valid while this
    /// key lives; accesses through it race with the owner's, as with any shared memory.
    #[inline]
    pub fn ptr(&self, raddr: u64) -> Result<*mut u8> {
        let Some(locator) = &self.wire.shm else {
            return Err(Status::Unreachable);
        };
        let offset = raddr.wrapping_sub(self.wire.base);
        if raddr < self.wire.base || offset >= self.wire.length {
            return Err(Status::InvalidAddr);
        }
        let view = self.local_view.get_or_init(|| map_peer_memfd(locator));
        let mapping = view.as_ref().map_err(|status| *status)?;
        // The decoder refuses a region that does not fit in its memfd (map_offset + length <= map_len), so this stays inside the view.
        let index = usize::try_from(locator.map_offset + offset).map_err(|_| Status::InvalidAddr)?;
        debug_assert!(index < mapping.mapped_len());
        // SAFETY: `index` < map_offset + length <= map_len == mapping.mapped_len(), so the result
        // points inside the live mapping.
        Ok(unsafe { mapping.as_ptr().add(index) })
    }

    /// The remote address of the region's first byte.
    pub fn base(&self) -> u64 {
        self.wire.base
    }

    /// The region's length.
    pub fn length(&self) -> u64 {
        self.wire.length
    }

    /// The protection the owner mapped the region with.
    pub fn prot(&self) -> Prot {
        Prot::from_bits_truncate(self.wire.prot)
    }

    /// The region's memory type.
    pub fn memory_type(&self) -> MemoryType {
        MemoryType::from_raw(self.wire.mem_type).unwrap_or(MemoryType::Unknown)
    }

    /// True when the region can be mapped by a same-host process (the key carries a shm locator).
    pub fn is_shareable(&self) -> bool {
        self.wire.shm.is_some()
    }

    /// The decoded wire form (for transports that check keys on the target side).
    pub fn wire(&self) -> &RkeyWire {
        &self.wire
    }

    fn identity(&self) -> (&[u8; 16], u64, u64, u64, u32, &[u8; 16]) {
        let w = &self.wire;
        (&w.context_id, w.region_id, w.base, w.length, w.prot, &w.access_key)
    }
}

impl std::fmt::Debug for RemoteKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteKey")
            .field("region_id", &self.wire.region_id)
            .field("base", &format_args!("{:#x}", self.wire.base))
            .field("length", &self.wire.length)
            .field("shareable", &self.wire.shm.is_some())
            .finish()
    }
}

/// What a native one-sided operation (a verbs link's) needs of a remote key: the region the key
/// describes, which the transport checks the access against before posting, and the
/// transport's own entry (the rkey). The engine carries it as opaque bytes
/// (`zcx_engine::RemoteKey::packed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NativeKey<'a> {
    /// The region's first byte, as the key describes it.
    pub base: u64,
    /// The region's length.
    pub len: u64,
    /// The transport's entry.
    pub entry: &'a [u8],
}

impl<'a> NativeKey<'a> {
    /// The bytes the engine carries.
    pub fn encode(&self) -> std::sync::Arc<[u8]> {
        let mut bytes = Vec::with_capacity(16 + self.entry.len());
        bytes.extend_from_slice(&self.base.to_le_bytes());
        bytes.extend_from_slice(&self.len.to_le_bytes());
        bytes.extend_from_slice(self.entry);
        bytes.into()
    }

    /// The key of bytes [`NativeKey::encode`] made; `None` for anything shorter.
    pub fn decode(bytes: &'a [u8]) -> Option<NativeKey<'a>> {
        let base = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
        let len = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?);
        Some(NativeKey { base, len, entry: &bytes[16..] })
    }
}

#[cfg(test)]
mod native_key_tests {
    use super::NativeKey;

    #[test]
    fn a_native_key_round_trips_and_short_bytes_are_none() {
        let key = NativeKey { base: 0x7f00_1000, len: 4096, entry: &[1, 2, 3, 4] };
        assert_eq!(NativeKey::decode(&key.encode()), Some(key));
        assert_eq!(NativeKey::decode(&[0; 15]), None);
    }
}
