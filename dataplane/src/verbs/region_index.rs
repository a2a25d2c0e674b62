//! The `mem_map` regions a verbs memory domain registered, found by address: a put from, or a
//! get into, memory the application mapped goes straight from its registration, with no copy
//! and no registration of its own.
//!
//! The index holds the regions weakly, so unmapping deregisters as soon as no operation holds
//! the region: an operation that found one keeps it (`Arc`) until its completion.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

use super::mr::MemoryRegion;

/// Registered regions by start address.
#[derive(Debug, Default)]
pub struct RegionIndex {
    regions: Mutex<BTreeMap<usize, Weak<MemoryRegion>>>,
}

impl RegionIndex {
    /// Records a registration; entries of regions already gone are dropped on the way.
    pub fn insert(&self, region: &Arc<MemoryRegion>) {
        let mut regions = self.regions.lock().unwrap_or_else(|e| e.into_inner());
        regions.retain(|_, weak| weak.strong_count() > 0);
        regions.insert(region.range().start, Arc::downgrade(region));
    }

    /// The live registration holding all of `[addr, addr + len)`, if any.
    pub fn find(&self, addr: usize, len: usize) -> Option<Arc<MemoryRegion>> {
        let regions = self.regions.lock().unwrap_or_else(|e| e.into_inner());
        // Regions may nest (a handle inside an allocation registers on its own), so a few of
        // those starting at or below `addr` are tried; a miss only costs the caller a copy or a
        // registration of its own.
        regions
            .range(..=addr)
            .rev()
            .take(8)
            .find_map(|(_, weak)| weak.upgrade().filter(|region| region.range().contains(addr, len)))
    }
}
