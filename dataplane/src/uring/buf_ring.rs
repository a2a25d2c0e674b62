//! A provided-buffer ring (`IORING_REGISTER_PBUF_RING`): buffers the kernel picks from for
//! multishot receives, shared by every link of a transport.

use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

/// An anonymous private mapping, unmapped on drop.
struct Mmap {
    ptr: *mut u8,
    len: usize,
}

impl Mmap {
    fn new(len: usize) -> io::Result<Mmap> {
        // SAFETY: an anonymous private mapping touches no existing memory; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap { ptr: ptr.cast(), len })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr+len` is the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// The ring of provided buffers and the buffers themselves.
pub struct BufRing {
    ring: Mmap,
    bufs: Mmap,
    entries: u16,
    buf_size: usize,
    bgid: u16,
    tail: u16,
}

// SAFETY: the mappings are owned exclusively by this value; the kernel side is synchronised
// through the tail's release store.
unsafe impl Send for BufRing {}

impl BufRing {
    /// Maps `count` (rounded up to a power of two) buffers of `buf_size` bytes, registers them as
    /// group `bgid` with `ring` and hands them all to the kernel.
    pub fn new(ring: &IoUring, bgid: u16, count: u16, buf_size: usize) -> io::Result<BufRing> {
        let entries = count.max(1).checked_next_power_of_two().unwrap_or(1 << 15).min(1 << 15);
        let ring_bytes = usize::from(entries) * std::mem::size_of::<BufRingEntry>();
        let ring_map = Mmap::new(ring_bytes.max(4096))?;
        let bufs = Mmap::new(usize::from(entries) * buf_size)?;
        let mut this = BufRing { ring: ring_map, bufs, entries, buf_size, bgid, tail: 0 };
        // SAFETY: the ring mapping is page aligned, holds `entries` entries and lives as long as
        // `this`, which unregisters it in `unregister` before being dropped by the transport.
        unsafe { ring.submitter().register_buf_ring_with_flags(this.ring.ptr as u64, entries, bgid, 0)? };
        for bid in 0..entries {
            this.push(bid);
        }
        this.publish();
        Ok(this)
    }

    /// The buffer group id for `RecvMulti`.
    pub fn bgid(&self) -> u16 {
        self.bgid
    }

    /// The bytes the kernel wrote into buffer `bid`.
    pub fn data(&self, bid: u16, len: usize) -> &[u8] {
        // `entries` is a power of two: a mask, not a division, per received completion.
        let bid = usize::from(bid & (self.entries - 1));
        let len = len.min(self.buf_size);
        // SAFETY: `bid < entries`, so the range lies inside the buffer mapping; the kernel
        // finished writing it before posting the completion that named it.
        unsafe { std::slice::from_raw_parts(self.bufs.ptr.add(bid * self.buf_size), len) }
    }

    fn push(&mut self, bid: u16) {
        let mask = self.entries - 1;
        let slot = usize::from(self.tail & mask);
        // SAFETY: `slot < entries`; the entry at the tail is not owned by the kernel until the
        // tail is published.
        let entry = unsafe { &mut *self.ring.ptr.cast::<BufRingEntry>().add(slot) };
        // SAFETY: `bid < entries`, so the address lies in the buffer mapping.
        let addr = unsafe { self.bufs.ptr.add(usize::from(bid) * self.buf_size) };
        entry.set_addr(addr as u64);
        entry.set_len(self.buf_size as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail field sits inside entry 0 of the live ring mapping; the kernel reads it
        // with acquire semantics, so a release store publishes the entries written before.
        let tail = unsafe { &*(BufRingEntry::tail(self.ring.ptr.cast()) as *const AtomicU16) };
        tail.store(self.tail, Ordering::Release);
    }

    /// Gives buffer `bid` back to the kernel.
    pub fn recycle(&mut self, bid: u16) {
        self.push(bid & (self.entries - 1));
        self.publish();
    }

    /// Unregisters the group; call before dropping while the ring is alive.
    pub fn unregister(&self, ring: &IoUring) {
        if let Err(err) = ring.submitter().unregister_buf_ring(self.bgid) {
            tracing::debug!(%err, "unregistering the provided buffer ring failed");
        }
    }
}
