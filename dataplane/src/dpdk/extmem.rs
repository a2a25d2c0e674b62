//! zcx memory registered with DPDK as external memory, so mbufs can point into it (external
//! buffers) and large payloads leave without a copy.
//!
//! A mem_map'd region (page aligned) is registered once, process-wide, with
//! `rte_extmem_register` (its page size and one IOVA per page) when the process's EAL is running:
//! [`ExtRegion::register`], which the api calls from its registration (the DPDK part of a
//! registration; the registration cache shares it with every handle of the same range). DPDK's
//! external memory table is per process, so one registration serves every port. The first time a
//! port sends from a region, the region is offered to that port's device for DMA
//! (`rte_dev_dma_map`); a device that needs none (virtual devices such as `net_memif`, which copy
//! in software) answers `ENOTSUP`, recorded as [`DmaState::NotNeeded`].
//!
//! **IOVAs.** In IOVA-as-VA mode (`rte_eal_iova_mode()`; what `--no-huge`, vdevs and VFIO give)
//! each page's IOVA is its virtual address. In physical-address mode zcx would have to resolve
//! every page through `/proc/self/pagemap` and pin it; it does not, and such regions stay on the
//! copy path ([`ExtMemError::IovaMode`]).
//!
//! **Lifetime.** An [`ExtRegion`] is reference counted. The api's registration holds one
//! reference, and every frame in flight that points into the region holds another (see the
//! transport), so unmapping a handle while a zero-copy send is in flight only drops the
//! registration's reference: the DMA mapping and the external-memory entry go
//! (`rte_dev_dma_unmap`, then `rte_extmem_unregister`) when the last frame's mbufs were freed
//! by the driver. The region also holds what keeps the memory mapped (`keep`), so DPDK never
//! lists memory that is no longer mapped.
//!
//! Non-aligned caller memory, a region overlapping another one registered differently, or a
//! failure of DPDK, leave the region unregistered: sends from it are copied, as before.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Whether a device needed a DMA mapping of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaState {
    /// `rte_dev_dma_map` succeeded; `rte_dev_dma_unmap` follows when the region goes.
    Mapped,
    /// The device does no DMA of its own (`ENOTSUP`: virtual devices): nothing to map.
    NotNeeded,
    /// `rte_dev_dma_map` failed with this error: the port copies sends from this region.
    Failed(i32),
}

/// Why a region was not registered with DPDK (its sends are then copied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExtMemError {
    /// DPDK is not in this build, or its EAL is not running in this process.
    Unavailable,
    /// The range is empty or not aligned to its page size at both ends.
    NotAligned,
    /// EAL runs with physical IOVAs, which zcx does not resolve.
    IovaMode,
    /// `rte_extmem_register` failed with this `rte_errno` (`EEXIST`: overlaps another entry).
    Dpdk(i32),
}

impl fmt::Display for ExtMemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExtMemError::Unavailable => f.write_str("DPDK's EAL is not running in this process"),
            ExtMemError::NotAligned => f.write_str("the range is not page aligned"),
            ExtMemError::IovaMode => f.write_str("EAL uses physical IO addresses"),
            ExtMemError::Dpdk(errno) => write!(f, "rte_extmem_register failed (rte_errno {errno})"),
        }
    }
}

impl std::error::Error for ExtMemError {}

/// Process-wide counters of external-memory registrations; a snapshot from [`counters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtMemCounters {
    /// Regions registered with `rte_extmem_register` so far.
    pub registered: u64,
    /// Regions unregistered again (`rte_extmem_unregister`).
    pub unregistered: u64,
    /// Device DMA mappings made.
    pub dma_mapped: u64,
    /// Devices that answered `ENOTSUP` (no DMA needed).
    pub dma_not_needed: u64,
    /// Frames any DPDK transport of the process sent zero-copy (from registered memory).
    pub zcopy_frames: u64,
    /// Payload bytes of those frames.
    pub zcopy_bytes: u64,
}

static REGISTERED: AtomicU64 = AtomicU64::new(0);
static UNREGISTERED: AtomicU64 = AtomicU64::new(0);
static DMA_MAPPED: AtomicU64 = AtomicU64::new(0);
static DMA_NOT_NEEDED: AtomicU64 = AtomicU64::new(0);
static ZCOPY_FRAMES: AtomicU64 = AtomicU64::new(0);
static ZCOPY_BYTES: AtomicU64 = AtomicU64::new(0);

/// Counts one frame of `len` payload bytes sent zero-copy.
pub(crate) fn count_zcopy_frame(len: usize) {
    ZCOPY_FRAMES.fetch_add(1, Ordering::Relaxed);
    ZCOPY_BYTES.fetch_add(len as u64, Ordering::Relaxed);
}

/// The counters of this process's registrations.
pub fn counters() -> ExtMemCounters {
    ExtMemCounters {
        registered: REGISTERED.load(Ordering::Relaxed),
        unregistered: UNREGISTERED.load(Ordering::Relaxed),
        dma_mapped: DMA_MAPPED.load(Ordering::Relaxed),
        dma_not_needed: DMA_NOT_NEEDED.load(Ordering::Relaxed),
        zcopy_frames: ZCOPY_FRAMES.load(Ordering::Relaxed),
        zcopy_bytes: ZCOPY_BYTES.load(Ordering::Relaxed),
    }
}

/// Live regions by start address. DPDK refuses overlapping entries, so at most one region can
/// contain an address: the one with the greatest start at or below it.
static REGIONS: Mutex<BTreeMap<usize, Weak<ExtRegion>>> = Mutex::new(BTreeMap::new());

fn regions() -> std::sync::MutexGuard<'static, BTreeMap<usize, Weak<ExtRegion>>> {
    REGIONS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A page-aligned range registered with DPDK as external memory; unregistered when the last
/// reference goes. See the [module documentation](self).
pub struct ExtRegion {
    start: usize,
    len: usize,
    page_size: usize,
    /// Devices offered the region, by port id, with the outcome and the device pointer.
    devices: Mutex<Vec<(u16, DmaState, usize)>>,
    /// Keeps the memory mapped while DPDK knows it.
    _keep: Option<Arc<dyn Send + Sync>>,
}

impl fmt::Debug for ExtRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtRegion")
            .field("start", &format_args!("{:#x}", self.start))
            .field("len", &self.len)
            .field("page_size", &self.page_size)
            .finish()
    }
}

impl ExtRegion {
    /// Registers `[start, start + len)` with DPDK (pages of `page_size` bytes), or returns the
    /// live region that already contains it. `keep` is whatever keeps the memory mapped; it is
    /// held until DPDK forgot the region.
    ///
    /// # Safety
    /// The range must be mapped and stay mapped for as long as the returned region lives (`keep`
    /// may guarantee it; otherwise the caller does).
    pub unsafe fn register(
        start: usize,
        len: usize,
        page_size: usize,
        keep: Option<Arc<dyn Send + Sync>>,
    ) -> Result<Arc<ExtRegion>, ExtMemError> {
        if let Some(found) = lookup(start, len) {
            return Ok(found);
        }
        if len == 0 || !page_size.is_power_of_two() || start % page_size != 0 || len % page_size != 0 {
            return Err(ExtMemError::NotAligned);
        }
        let mut table = regions();
        // Checked again under the lock: another thread may have registered it meanwhile. A
        // region upgraded here is only dropped after the lock is released (its Drop locks).
        let nearest = nearest(&table, start);
        if let Some(found) = nearest.as_ref().filter(|r| r.contains(start, len)) {
            let found = Arc::clone(found);
            drop(table);
            return Ok(found);
        }
        // SAFETY: the range is mapped (this function's contract) and page aligned.
        let registered = unsafe { sys_register(start, len, page_size) }.map(|()| {
            REGISTERED.fetch_add(1, Ordering::Relaxed);
            let region =
                Arc::new(ExtRegion { start, len, page_size, devices: Mutex::new(Vec::new()), _keep: keep });
            table.retain(|_, weak| weak.strong_count() > 0);
            table.insert(start, Arc::downgrade(&region));
            tracing::debug!(start, len, page_size, "registered with DPDK as external memory");
            region
        });
        drop(table);
        drop(nearest);
        registered
    }

    /// The region's first byte.
    pub fn start(&self) -> usize {
        self.start
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty region (never registered).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `[addr, addr + len)` lies inside the region.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        crate::byte_range::ByteRange { start: self.start, len: self.len }.contains(addr, len)
    }

    /// The IO address of `addr` inside the region (IOVA-as-VA: the address itself).
    pub fn iova(&self, addr: usize) -> u64 {
        addr as u64
    }

    /// What the device of `port` answered when offered the region, if it was.
    pub fn dma_state(&self, port: u16) -> Option<DmaState> {
        let devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        devices.iter().find(|(p, _, _)| *p == port).map(|&(_, state, _)| state)
    }

    /// Offers the region to `device` (the device of ethdev `port`) for DMA the first time a
    /// port asks; true when the port may send from the region.
    ///
    /// # Safety
    /// `device` is the live `rte_device` of `port`, which is never removed from the process.
    #[cfg(not(zcx_dpdk_missing))]
    pub(crate) unsafe fn ensure_device(&self, port: u16, device: *mut zcx_dpdk_sys::rte_device) -> bool {
        let mut devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&(_, state, _)) = devices.iter().find(|(p, _, _)| *p == port) {
            return !matches!(state, DmaState::Failed(_));
        }
        // SAFETY: the range is registered as external memory and mapped (it lives), `device` is
        // live (this function's contract), and the IOVA is the address (VA mode, checked at
        // registration).
        let rc = unsafe {
            zcx_dpdk_sys::rte_dev_dma_map(device, self.start as *mut _, self.iova(self.start), self.len)
        };
        let state = if rc == 0 {
            DMA_MAPPED.fetch_add(1, Ordering::Relaxed);
            DmaState::Mapped
        } else {
            match zcx_dpdk_sys::errno() {
                libc::ENOTSUP => {
                    DMA_NOT_NEEDED.fetch_add(1, Ordering::Relaxed);
                    DmaState::NotNeeded
                }
                errno => {
                    tracing::debug!(port, errno, "rte_dev_dma_map failed; sends from the region are copied");
                    DmaState::Failed(errno)
                }
            }
        };
        devices.push((port, state, device as usize));
        !matches!(state, DmaState::Failed(_))
    }
}

#[cfg(zcx_dpdk_missing)]
impl ExtRegion {
    /// No device exists in a build without DPDK.
    ///
    /// # Safety
    /// None needed; kept `unsafe` to match the DPDK build.
    pub(crate) unsafe fn ensure_device(&self, _port: u16, _device: *mut zcx_dpdk_sys::rte_device) -> bool {
        false
    }
}

impl Drop for ExtRegion {
    /// Undoes the DMA mappings, then the external-memory entry. Runs when the last reference
    /// went: no mbuf points into the region any more.
    fn drop(&mut self) {
        {
            let mut table = regions();
            if table.get(&self.start).is_some_and(|w| w.strong_count() == 0) {
                table.remove(&self.start);
            }
        }
        // SAFETY: registered by `register` and still mapped (`_keep` or the caller's contract);
        // nothing refers to it any more.
        unsafe { sys_unregister(self) };
        UNREGISTERED.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(start = self.start, len = self.len, "unregistered from DPDK");
    }
}

/// The live region that contains `[addr, addr + len)`, if any: how a port finds out whether a
/// payload can leave without a copy.
pub fn lookup(addr: usize, len: usize) -> Option<Arc<ExtRegion>> {
    // Upgraded under the lock, dropped (when it does not fit) after it: a region's Drop locks.
    let nearest = nearest(&regions(), addr);
    nearest.filter(|r| r.contains(addr, len))
}

/// The live region with the greatest start at or below `addr`.
fn nearest(table: &BTreeMap<usize, Weak<ExtRegion>>, addr: usize) -> Option<Arc<ExtRegion>> {
    table.range(..=addr).next_back().and_then(|(_, weak)| weak.upgrade())
}

/// `rte_extmem_register` with one IOVA per page, equal to its address.
///
/// # Safety
/// The range is mapped and page aligned.
#[cfg(not(zcx_dpdk_missing))]
unsafe fn sys_register(start: usize, len: usize, page_size: usize) -> Result<(), ExtMemError> {
    use zcx_dpdk_sys as sys;
    if !sys::eal_is_live() {
        return Err(ExtMemError::Unavailable);
    }
    // SAFETY: EAL is running; the call only reads its configuration.
    if unsafe { sys::rte_eal_iova_mode() } != sys::rte_iova_mode::RTE_IOVA_VA {
        return Err(ExtMemError::IovaMode);
    }
    let pages = len / page_size;
    let Ok(n_pages) = u32::try_from(pages) else { return Err(ExtMemError::NotAligned) };
    let mut iovas: Vec<sys::rte_iova_t> = (0..pages).map(|i| (start + i * page_size) as u64).collect();
    // SAFETY: the range is mapped and aligned (contract); `iovas` holds one IOVA per page and
    // DPDK copies it.
    let rc =
        unsafe { sys::rte_extmem_register(start as *mut _, len, iovas.as_mut_ptr(), n_pages, page_size) };
    if rc != 0 {
        return Err(ExtMemError::Dpdk(sys::errno()));
    }
    Ok(())
}

#[cfg(zcx_dpdk_missing)]
unsafe fn sys_register(_start: usize, _len: usize, _page_size: usize) -> Result<(), ExtMemError> {
    Err(ExtMemError::Unavailable)
}

/// `rte_dev_dma_unmap` for every device that mapped the region, then `rte_extmem_unregister`.
///
/// # Safety
/// `region` was registered and nothing refers to it any more.
#[cfg(not(zcx_dpdk_missing))]
unsafe fn sys_unregister(region: &ExtRegion) {
    use zcx_dpdk_sys as sys;
    let devices = region.devices.lock().unwrap_or_else(|p| p.into_inner());
    for &(port, state, device) in devices.iter() {
        if state == DmaState::Mapped {
            // SAFETY: mapped for this device by `ensure_device`; devices are never removed.
            let rc = unsafe {
                sys::rte_dev_dma_unmap(
                    device as *mut _,
                    region.start as *mut _,
                    region.iova(region.start),
                    region.len,
                )
            };
            if rc != 0 {
                tracing::warn!(port, errno = sys::errno(), "rte_dev_dma_unmap failed");
            }
        }
    }
    // SAFETY: registered by `sys_register`, with no DMA mapping left.
    let rc = unsafe { sys::rte_extmem_unregister(region.start as *mut _, region.len) };
    if rc != 0 {
        tracing::warn!(start = region.start, errno = sys::errno(), "rte_extmem_unregister failed");
    }
}

#[cfg(zcx_dpdk_missing)]
unsafe fn sys_unregister(_region: &ExtRegion) {}
