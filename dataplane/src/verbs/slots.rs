//! Fixed-size buffers in one registered mapping: the verbs transport's receive buffers (posted
//! to the shared receive queue) and send buffers (a frame is copied into one and sent from it;
//! small puts and gets bounce through one).

use std::sync::Arc;

use zcx_verbs_sys as sys;

use super::mr::MemoryRegion;
use super::pd::ProtectionDomain;
use super::qp::Local;

/// `count` buffers of `size` bytes each, registered for local write.
pub struct Slots {
    // Declared before the mapping: deregistered before it is unmapped.
    mr: MemoryRegion,
    _mapping: Mapping,
    base: *mut u8,
    size: usize,
    count: u32,
}

// SAFETY: the mapping is owned; the transport hands out slot bytes under its own discipline
// (a slot is the device's or the transport's, never both at once).
unsafe impl Send for Slots {}

impl Slots {
    /// Maps and registers `count` slots of `size` bytes.
    pub fn new(pd: &Arc<ProtectionDomain>, size: usize, count: u32) -> Result<Slots, String> {
        let map_len = size.checked_mul(count as usize).filter(|&n| n > 0).ok_or("no slots")?;
        // SAFETY: a fresh private anonymous mapping; checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(format!("mapping {map_len} bytes of buffers: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: the mapping just made stays mapped until `drop`, after the region.
        let mr = unsafe {
            MemoryRegion::register(pd, base as usize, map_len, sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE)
        };
        match mr {
            Ok(mr) => Ok(Slots { mr, _mapping: Mapping(base, map_len), base: base.cast(), size, count }),
            Err(err) => {
                // SAFETY: mapped above, never registered.
                unsafe { libc::munmap(base, map_len) };
                Err(format!("registering {map_len} bytes of buffers on {}: {err}", pd.name()))
            }
        }
    }

    /// Bytes per slot.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Number of slots.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The first byte of slot `index`.
    pub fn ptr(&self, index: u32) -> *mut u8 {
        assert!(index < self.count, "slot {index} of {}", self.count);
        // SAFETY: within the mapping (checked above).
        unsafe { self.base.add(index as usize * self.size) }
    }

    /// The first `len` bytes of slot `index` as a scatter-gather entry.
    pub fn local(&self, index: u32, len: usize) -> Local {
        debug_assert!(len <= self.size);
        Local { addr: self.ptr(index) as u64, len: len as u32, lkey: self.mr.lkey() }
    }

    /// The first `len` bytes of slot `index`.
    ///
    /// # Safety
    /// The device must not be writing the slot (its receive completed, or it is not posted).
    pub unsafe fn bytes(&self, index: u32, len: usize) -> &[u8] {
        // SAFETY: within the slot; the caller rules out a concurrent device write.
        unsafe { std::slice::from_raw_parts(self.ptr(index), len.min(self.size)) }
    }
}

/// An anonymous mapping, unmapped on drop.
struct Mapping(*mut libc::c_void, usize);

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `Slots::new`, unmapped once, after its region (fields drop
        // in declaration order).
        unsafe { libc::munmap(self.0, self.1) };
    }
}
