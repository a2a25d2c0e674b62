//! The regions of a context that the target of a large shared-memory put may help copy from, or
//! of a large get help copy into (see `endpoint::put_help`): entered at `mem_map` when they
//! qualify, removed at unmap.

use std::sync::{Arc, OnceLock, RwLock};

use zcx_control::RkeyWire;

use crate::mem::Prot;

/// A region a helped put may copy from (`REMOTE_READ`) or a helped get copy into
/// (`REMOTE_WRITE`): memfd-backed, with its key, packed by the first helped operation on it (not
/// at `mem_map`, where packing would double the cost of a registration-cache hit).
struct HelpSource {
    region: u64,
    prot: Prot,
    base: usize,
    end: usize,
    wire: RkeyWire,
    packed: OnceLock<Option<Arc<[u8]>>>,
}

/// This context's regions that helped puts may copy from and helped gets copy into, entered at
/// `mem_map` and removed at unmap. A handful in practice; a large put or get looks them up once.
#[derive(Default)]
pub(crate) struct HelpSources {
    regions: RwLock<Vec<HelpSource>>,
}

impl HelpSources {
    /// Enters `[base, base + len)`, the region `region` with protection `prot` and key `wire`.
    pub fn insert(&self, region: u64, prot: Prot, base: usize, len: usize, wire: RkeyWire) {
        let source = HelpSource { region, prot, base, end: base + len, wire, packed: OnceLock::new() };
        self.regions.write().unwrap_or_else(|p| p.into_inner()).push(source);
    }

    /// Removes the region `region` (unmapped).
    pub fn remove(&self, region: u64) {
        self.regions.write().unwrap_or_else(|p| p.into_inner()).retain(|s| s.region != region);
    }

    /// The packed key of a region with protection `needed` holding all of `[ptr, ptr + len)`,
    /// packed on first use.
    pub fn find(&self, ptr: usize, len: usize, needed: Prot) -> Option<Arc<[u8]>> {
        let end = ptr.checked_add(len)?;
        let regions = self.regions.read().unwrap_or_else(|p| p.into_inner());
        let source = regions.iter().find(|s| s.base <= ptr && end <= s.end && s.prot.contains(needed))?;
        source.packed.get_or_init(|| source.wire.try_encode().ok().map(Arc::from)).clone()
    }
}
