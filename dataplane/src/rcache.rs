//! Registration cache: reuse a live registration for the same range or a sub-range, as UCX's rcache does.
//!
//! Registering memory with a NIC (a verbs MR, a DPDK external-memory entry, an io_uring fixed buffer)
//! is expensive; re-registering a range that an existing registration already covers must cost a
//! lookup. The cache holds only weak references: a registration lives exactly as long as the memory
//! handles that use it, so when the last handle is unmapped the entry is dead and can never be hit
//! again — unmapping invalidates it without any memory-event hooks.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// One cached registration of `[start, end)` with protection bits `prot`.
struct Entry<R> {
    end: usize,
    prot: u32,
    registration: Weak<R>,
}

/// Counters of a [`RegistrationCache`]; a snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RcacheStats {
    /// Lookups answered by a live registration.
    pub hits: u64,
    /// Lookups that found none (the caller then registered anew).
    pub misses: u64,
    /// Registrations currently cached (dead ones included until pruned).
    pub entries: usize,
}

/// Interval cache of registrations keyed by address range, holding weak references.
pub struct RegistrationCache<R> {
    enabled: bool,
    inner: Mutex<Inner<R>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

struct Inner<R> {
    by_start: BTreeMap<usize, Vec<Entry<R>>>,
    /// Longest range ever inserted: a covering entry cannot start further below the lookup start.
    max_len: usize,
}

impl<R> RegistrationCache<R> {
    /// A cache; when `enabled` is false every lookup misses and nothing is stored
    /// (`ZCX_RCACHE_ENABLE=n`, like `UCX_RCACHE_ENABLE=n`).
    pub fn new(enabled: bool) -> Self {
        RegistrationCache {
            enabled,
            inner: Mutex::new(Inner { by_start: BTreeMap::new(), max_len: 0 }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Whether the cache stores and finds registrations.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// A live registration covering `[start, end)` whose protection includes every bit of `prot`.
    pub fn lookup(&self, start: usize, end: usize, prot: u32) -> Option<Arc<R>> {
        if !self.enabled {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let mut inner = self.lock();
        let lowest = start.saturating_sub(inner.max_len);
        let mut found = None;
        let mut dead_starts = Vec::new();
        'scan: for (&entry_start, entries) in inner.by_start.range(lowest..=start).rev() {
            for entry in entries {
                if entry.end < end || entry.prot & prot != prot {
                    continue;
                }
                match entry.registration.upgrade() {
                    Some(live) => {
                        found = Some(live);
                        break 'scan;
                    }
                    None => dead_starts.push(entry_start),
                }
            }
        }
        for entry_start in dead_starts {
            inner.prune(entry_start);
        }
        drop(inner);
        let counter = if found.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Caches `registration` for `[start, end)`; no-op when the cache is disabled.
    pub fn insert(&self, start: usize, end: usize, prot: u32, registration: &Arc<R>) {
        if !self.enabled || end <= start {
            return;
        }
        let mut inner = self.lock();
        inner.max_len = inner.max_len.max(end - start);
        inner.prune(start);
        inner.by_start.entry(start).or_default().push(Entry {
            end,
            prot,
            registration: Arc::downgrade(registration),
        });
    }

    /// Drops every entry starting at `start` whose registration is gone; call from the registration's
    /// Drop so the map does not grow with dead entries.
    pub fn remove_dead(&self, start: usize) {
        if self.enabled {
            self.lock().prune(start);
        }
    }

    /// Hit/miss counters and the number of cached entries.
    pub fn stats(&self) -> RcacheStats {
        let entries = self.lock().by_start.values().map(Vec::len).sum();
        RcacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<R>> {
        // A panic while holding the lock cannot leave the map inconsistent (every mutation is a
        // single push or retain), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<R> Inner<R> {
    fn prune(&mut self, start: usize) {
        if let Some(entries) = self.by_start.get_mut(&start) {
            entries.retain(|e| e.registration.strong_count() > 0);
            if entries.is_empty() {
                self.by_start.remove(&start);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_and_sub_range_hit_while_alive() {
        let cache = RegistrationCache::new(true);
        let reg = Arc::new(7u32);
        cache.insert(0x1000, 0x9000, 0x303, &reg);
        assert_eq!(cache.lookup(0x1000, 0x9000, 0x303).as_deref(), Some(&7));
        assert_eq!(cache.lookup(0x2000, 0x3000, 0x100).as_deref(), Some(&7));
        assert_eq!(cache.stats().hits, 2);
    }

    #[test]
    fn overlapping_but_not_contained_misses() {
        let cache = RegistrationCache::new(true);
        let reg = Arc::new(());
        cache.insert(0x1000, 0x2000, 0x303, &reg);
        assert!(cache.lookup(0x1800, 0x2800, 0x3).is_none());
        assert!(cache.lookup(0x0800, 0x1800, 0x3).is_none());
        assert_eq!(cache.stats().misses, 2);
    }

    #[test]
    fn missing_protection_misses() {
        let cache = RegistrationCache::new(true);
        let reg = Arc::new(());
        cache.insert(0x1000, 0x2000, 0x3, &reg);
        assert!(cache.lookup(0x1000, 0x2000, 0x200).is_none());
    }

    #[test]
    fn dropping_the_last_reference_invalidates() {
        let cache = RegistrationCache::new(true);
        let reg = Arc::new(());
        cache.insert(0x1000, 0x2000, 0x3, &reg);
        drop(reg);
        assert!(cache.lookup(0x1000, 0x2000, 0x3).is_none());
        assert_eq!(cache.stats().entries, 0);
    }

    #[test]
    fn disabled_cache_never_hits() {
        let cache = RegistrationCache::new(false);
        let reg = Arc::new(());
        cache.insert(0x1000, 0x2000, 0x3, &reg);
        assert!(cache.lookup(0x1000, 0x2000, 0x3).is_none());
        assert_eq!(cache.stats(), RcacheStats { hits: 0, misses: 1, entries: 0 });
    }

    #[test]
    fn long_region_far_below_is_found() {
        let cache = RegistrationCache::new(true);
        let big = Arc::new(1u8);
        let small = Arc::new(2u8);
        cache.insert(0, 1 << 30, 0x3, &big);
        cache.insert(0x10_0000, 0x10_1000, 0x3, &small);
        assert_eq!(cache.lookup(0x2000_0000, 0x2000_1000, 0x3).as_deref(), Some(&1));
    }
}
