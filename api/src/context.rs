//! `ucp_init` / `ucp_cleanup`: the application context that owns memory registrations.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bitflags::bitflags;
use zcx_dataplane::{MemoryDomain, RcacheStats, RegistrationCache, RemoteAccessTable};

use crate::config::Config;
use crate::mem::{Allocation, Registration};
use crate::status::{Result, Status};

bitflags! {
    /// `UCP_FEATURE_*`, same bit values: what the application will use.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct Features: u64 {
        /// `UCP_FEATURE_TAG`
        const TAG = 1 << 0;
        /// `UCP_FEATURE_RMA`
        const RMA = 1 << 1;
        /// `UCP_FEATURE_AMO32`
        const AMO32 = 1 << 2;
        /// `UCP_FEATURE_AMO64`
        const AMO64 = 1 << 3;
        /// `UCP_FEATURE_WAKEUP`
        const WAKEUP = 1 << 4;
        /// `UCP_FEATURE_STREAM`
        const STREAM = 1 << 5;
        /// `UCP_FEATURE_AM`
        const AM = 1 << 6;
        /// `UCP_FEATURE_EXPORTED_MEMH`: needed to pack handles with `EXPORT` and to import them.
        const EXPORTED_MEMH = 1 << 7;
    }
}

/// `ucp_params_t`.
#[derive(Clone, Debug, Default)]
pub struct ContextParams {
    /// `features` (`UCP_PARAM_FIELD_FEATURES`).
    pub features: Features,
    /// `name` (`UCP_PARAM_FIELD_NAME`); shows in logs and `zcx info`.
    pub name: Option<String>,
}

impl ContextParams {
    /// Parameters requesting `features`.
    pub fn new(features: Features) -> Self {
        ContextParams { features, name: None }
    }
}

pub(crate) struct ContextInner {
    pub id: [u8; 16],
    pub name: String,
    pub features: Features,
    pub config: Config,
    pub rcache: RegistrationCache<Registration>,
    /// The memory domains every `mem_map` region registers with (see
    /// [`zcx_dataplane::domain`]).
    pub domains: Vec<Arc<dyn MemoryDomain>>,
    /// The verbs memory domain among `domains`, whose protection domain each worker's verbs
    /// transport shares (a region's rkey and lkey are only valid there).
    #[cfg(feature = "verbs")]
    pub verbs: Option<Arc<zcx_dataplane::verbs::VerbsDomain>>,
    /// Regions with remote protection, checked before any emulated put/get/atomic touches memory.
    pub remote_access: Arc<RemoteAccessTable>,
    /// Live allocations (and imports) by start address, to find the memfd behind a registered range.
    pub allocations: Mutex<BTreeMap<usize, Weak<Allocation>>>,
    /// Regions a large shared-memory put may have the target copy from (see
    /// `endpoint::put_help`).
    pub help_sources: crate::mem::HelpSources,
    /// `ZCX_SHM_HELP`, read once: the smallest put or get helped, `usize::MAX` when off.
    pub help_min: usize,
    next_id: AtomicU64,
    access_keys: Mutex<KeyPool>,
}

/// Kernel randomness fetched in batches: a `getrandom` per memory handle was most of the cost of
/// a registration-cache hit. A context is not shared across `fork` (as in UCP), so a batch is never
/// handed out twice.
struct KeyPool {
    bytes: [u8; KeyPool::BATCH],
    used: usize,
}

impl KeyPool {
    const BATCH: usize = 1024;

    fn next(&mut self) -> Result<[u8; 16]> {
        if self.used + 16 > Self::BATCH {
            fill_random(&mut self.bytes)?;
            self.used = 0;
        }
        let mut key = [0u8; 16];
        key.copy_from_slice(&self.bytes[self.used..self.used + 16]);
        // Wipe what was handed out so the pool never holds a live key.
        self.bytes[self.used..self.used + 16].fill(0);
        self.used += 16;
        Ok(key)
    }
}

/// `ucp_context_h`: the application context (`ucp_init`); dropping the last clone is `ucp_cleanup`.
///
/// Memory handles and remote keys keep the context's internals alive, so the context may be dropped
/// before them.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl Context {
    /// `ucp_init`: a context with `params` and `config` (see [`Config::from_env`]).
    pub fn new(params: &ContextParams, config: &Config) -> Result<Context> {
        if params.features.is_empty() {
            tracing::warn!("context created with no features requested");
        }
        let pid = std::process::id();
        #[cfg(feature = "verbs")]
        let verbs = verbs_domain(config, params.features);
        #[cfg(not(feature = "verbs"))]
        let verbs: Option<Arc<dyn MemoryDomain>> = None;
        let inner = ContextInner {
            id: random_bytes()?,
            name: params.name.clone().unwrap_or_else(|| format!("zcx-{pid}")),
            features: params.features,
            config: config.clone(),
            rcache: RegistrationCache::new(config.rcache_enabled()),
            domains: memory_domains(pid, verbs.clone().map(|v| v as Arc<dyn MemoryDomain>)),
            #[cfg(feature = "verbs")]
            verbs,
            remote_access: Arc::new(RemoteAccessTable::new()),
            allocations: Mutex::new(BTreeMap::new()),
            help_sources: Default::default(),
            help_min: config.shm_help().unwrap_or(usize::MAX),
            next_id: AtomicU64::new(1),
            access_keys: Mutex::new(KeyPool { bytes: [0; KeyPool::BATCH], used: KeyPool::BATCH }),
        };
        tracing::debug!(name = inner.name, features = ?inner.features, "context created");
        Ok(Context { inner: Arc::new(inner) })
    }

    /// `ucp_init` with the features and the environment's configuration.
    pub fn with_features(features: Features) -> Result<Context> {
        Context::new(&ContextParams::new(features), &Config::from_env()?)
    }

    /// The features requested at creation.
    pub fn features(&self) -> Features {
        self.inner.features
    }

    /// The context's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Registration cache counters (an extension; UCX shows them in its statistics).
    pub fn rcache_stats(&self) -> RcacheStats {
        self.inner.rcache.stats()
    }
}

impl ContextInner {
    /// A fresh id for a memory handle or registration, unique within this context.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A fresh unguessable access key for a memory handle.
    pub fn new_access_key(&self) -> Result<[u8; 16]> {
        // The pool is only ever left consistent (a copy and an index bump), so poison is harmless.
        self.access_keys.lock().unwrap_or_else(|p| p.into_inner()).next()
    }

    /// Records a live allocation so registrations of its sub-ranges find its memfd.
    pub fn track_allocation(&self, allocation: &Arc<Allocation>) {
        self.allocations_lock().insert(allocation.start(), Arc::downgrade(allocation));
    }

    /// Forgets the allocation starting at `start` once it is gone.
    pub fn untrack_allocation(&self, start: usize) {
        let mut map = self.allocations_lock();
        if map.get(&start).is_some_and(|w| w.strong_count() == 0) {
            map.remove(&start);
        }
    }

    /// The live allocation containing `[start, end)`, if any.
    pub fn allocation_containing(&self, start: usize, end: usize) -> Option<Arc<Allocation>> {
        let map = self.allocations_lock();
        let (_, weak) = map.range(..=start).next_back()?;
        let allocation = weak.upgrade()?;
        (end <= allocation.start() + allocation.mapping().mapped_len()).then_some(allocation)
    }

    fn allocations_lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, Weak<Allocation>>> {
        // Every mutation is a single insert/remove: a poisoned map is still consistent.
        self.allocations.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ContextInner {
    /// True when some memory domain's keys are enforced by a NIC over the whole registration
    /// (verbs): each handle's registration must then be exactly its own range.
    pub fn nic_enforced_keys(&self) -> bool {
        #[cfg(feature = "verbs")]
        return self.verbs.is_some();
        #[cfg(not(feature = "verbs"))]
        false
    }
}

/// The memory domains of a context: same-host sharing always, DPDK external memory in a build
/// with DPDK (a range registers with it only while this process runs EAL), and the protection
/// domain of the verbs device in a build with verbs, when `ZCX_TLS` allows verbs and a device is
/// there.
fn memory_domains(pid: u32, verbs: Option<Arc<dyn MemoryDomain>>) -> Vec<Arc<dyn MemoryDomain>> {
    // This process as a same-host peer sees it: what goes into shared-memory locators.
    let same_host = zcx_dataplane::shm::domain::SameHostDomain::new(
        zcx_control::local_boot_id(),
        pid,
        zcx_control::process_start_time(pid).unwrap_or(0),
    );
    #[allow(unused_mut)]
    let mut domains: Vec<Arc<dyn MemoryDomain>> = vec![
        Arc::new(same_host),
        #[cfg(feature = "dpdk")]
        Arc::new(zcx_dataplane::dpdk::domain::DpdkDomain),
    ];
    domains.extend(verbs);
    domains
}

/// The verbs memory domain of the chosen device, or `None` (no device, verbs not allowed, or the
/// device could not be opened: said in the log, as loudly as `ZCX_TLS` asked for verbs).
#[cfg(feature = "verbs")]
fn verbs_domain(config: &Config, features: Features) -> Option<Arc<zcx_dataplane::verbs::VerbsDomain>> {
    use zcx_dataplane::verbs;
    if !config.transport_enabled("verbs") || verbs::verbs_missing().is_some() {
        return None;
    }
    let opened = verbs::choose(config.verbs_device()).and_then(|chosen| match chosen {
        Some((name, port)) => verbs::ProtectionDomain::open(&name, port).map(Some),
        None => Ok(None),
    });
    match opened {
        Ok(Some(pd)) => {
            let atomics = features.intersects(Features::AMO32 | Features::AMO64);
            Some(Arc::new(verbs::VerbsDomain::new(Arc::new(pd), atomics)))
        }
        Ok(None) => {
            tracing::debug!("no verbs device; memory is not registered with verbs");
            None
        }
        Err(why) if config.transport_required("verbs") => {
            tracing::warn!(%why, "ZCX_TLS asks for verbs, but its device cannot be used");
            None
        }
        Err(why) => {
            tracing::debug!(%why, "verbs device not used");
            None
        }
    }
}

/// 16 bytes from the kernel's CSPRNG: context ids and access keys must be unguessable.
pub(crate) fn random_bytes() -> Result<[u8; 16]> {
    let mut buf = [0u8; 16];
    fill_random(&mut buf)?;
    Ok(buf)
}

/// Fills `buf` from `getrandom(2)`.
fn fill_random(buf: &mut [u8]) -> Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`, which is writable.
        let n = unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(crate::status::fail_with(Status::IoError, format!("getrandom failed: {err}")));
        }
        filled += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_keys_are_distinct_across_batches() {
        let mut pool = KeyPool { bytes: [0; KeyPool::BATCH], used: KeyPool::BATCH };
        let keys: Vec<_> = (0..3 * KeyPool::BATCH / 16 + 5).map(|_| pool.next().unwrap()).collect();
        let distinct: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len());
        assert!(keys.iter().all(|k| k != &[0u8; 16]));
        // Handed-out bytes do not stay in the pool.
        assert!(pool.bytes[..pool.used].iter().all(|&b| b == 0));
    }
}
