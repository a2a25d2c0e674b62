//! The target side of emulated RMA on real memory: put/get round-trip, UCX's results for every
//! atomic at both sizes, refused accesses leave every byte as it was, and removing a region while
//! another thread keeps writing into it never lets a write reach freed memory.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use zcx_dataplane::access::{PROT_REMOTE_READ, PROT_REMOTE_WRITE};
use zcx_dataplane::proto::rma_exec::{self, UCS_ERR_INVALID_ADDR, UCS_ERR_INVALID_PARAM};
use zcx_dataplane::proto::AtomicOp;
use zcx_dataplane::{AccessError, RegionEntry, RemoteAccess, RemoteAccessTable};

const KEY: [u8; 16] = *b"sixteen byte key";
const RW: u32 = PROT_REMOTE_READ | PROT_REMOTE_WRITE;
const ID: u64 = 42;
const PAGE: usize = 4096;

/// An anonymous mapping (one page unless said otherwise), unmapped on drop.
struct Page {
    ptr: *mut u8,
    len: usize,
}

impl Page {
    fn new() -> Page {
        Page::with_len(PAGE)
    }

    fn with_len(len: usize) -> Page {
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
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
        assert_ne!(ptr, libc::MAP_FAILED);
        Page { ptr: ptr.cast(), len }
    }

    fn base(&self) -> u64 {
        self.ptr as u64
    }

    fn entry(&self, prot: u32) -> RegionEntry {
        RegionEntry { base: self.base(), length: self.len as u64, prot, access_key: KEY, shm: None }
    }

    fn snapshot(&self) -> Vec<u8> {
        // SAFETY: the page is mapped and readable while `self` lives, and no other thread
        // writes it during the single-threaded tests that take snapshots.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }.to_vec()
    }

    fn fill(&self, byte: u8) {
        // SAFETY: as in `snapshot`; the write stays inside the page.
        unsafe { self.ptr.write_bytes(byte, self.len) }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: `ptr` is the start of our own `len`-byte mapping, unmapped only here.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn table_with(page: &Page, prot: u32) -> RemoteAccessTable {
    let table = RemoteAccessTable::new();
    // SAFETY: the page stays mapped until after the table drops.
    unsafe { table.insert(ID, page.entry(prot)) };
    table
}

#[test]
fn put_then_get_round_trips() {
    let page = Page::new();
    let table = table_with(&page, RW);
    let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    let addr = page.base() + 100;
    rma_exec::put(&table, ID, &KEY, addr, &data).unwrap();
    let mut out = vec![0u8; 1000];
    rma_exec::get(&table, ID, &KEY, addr, &mut out).unwrap();
    assert_eq!(out, data);
    let bytes = page.snapshot();
    assert_eq!(&bytes[100..1100], &data[..]);
    assert!(bytes[..100].iter().chain(&bytes[1100..]).all(|&b| b == 0));

    // The last bytes of the page, and empty accesses at its very end.
    rma_exec::put(&table, ID, &KEY, page.base() + PAGE as u64 - 3, b"end").unwrap();
    let mut tail = [0u8; 3];
    rma_exec::get(&table, ID, &KEY, page.base() + PAGE as u64 - 3, &mut tail).unwrap();
    assert_eq!(&tail, b"end");
    rma_exec::put(&table, ID, &KEY, page.base() + PAGE as u64, &[]).unwrap();
    rma_exec::get(&table, ID, &KEY, page.base() + PAGE as u64, &mut []).unwrap();
}

/// (op, initial, value, compare, expected memory afterwards); the old value is always `initial`.
fn cases64() -> Vec<(AtomicOp, u64, u64, u64, u64)> {
    vec![
        (AtomicOp::Add, 5, 7, 0, 12),
        (AtomicOp::Add, u64::MAX, 2, 0, 1),
        (AtomicOp::Swap, 5, 0xdead_beef_0000_0001, 0, 0xdead_beef_0000_0001),
        (AtomicOp::Cswap, 5, 9, 5, 9),
        (AtomicOp::Cswap, 5, 9, 6, 5),
        (AtomicOp::And, 0xff00_ff00_ff00_ff00, 0x0ff0_0ff0_0ff0_0ff0, 0, 0x0f00_0f00_0f00_0f00),
        (AtomicOp::Or, 0xff00, 0x00ff_0000_0000_0000, 0, 0x00ff_0000_0000_ff00),
        (AtomicOp::Xor, 0xffff, 0x0ff0, 0, 0xf00f),
    ]
}

#[test]
fn atomics_64_give_ucx_results() {
    let page = Page::new();
    let table = table_with(&page, RW);
    let addr = page.base() + 64;
    let word = page.ptr.wrapping_add(64).cast::<u64>();
    for (op, initial, value, compare, after) in cases64() {
        // SAFETY: `word` is an aligned u64 inside our page; no other thread touches it.
        unsafe { word.write(initial) };
        let old = rma_exec::atomic(&table, ID, &KEY, addr, op, 8, value, compare).unwrap();
        assert_eq!(old, initial, "{op:?}");
        // SAFETY: as above.
        assert_eq!(unsafe { word.read() }, after, "{op:?}");
    }
}

#[test]
fn atomics_32_truncate_operands_and_zero_extend_the_old_value() {
    let page = Page::new();
    let table = table_with(&page, RW);
    let cases: [(AtomicOp, u32, u64, u64, u32); 8] = [
        (AtomicOp::Add, 5, 0xffff_ffff_0000_0007, 0, 12),
        (AtomicOp::Add, u32::MAX, 2, 0, 1),
        (AtomicOp::Swap, 0x8000_0000, 0x1_2345_6789, 0, 0x2345_6789),
        (AtomicOp::Cswap, 5, 9, 0xabcd_0000_0000_0005, 9),
        (AtomicOp::Cswap, 5, 9, 6, 5),
        (AtomicOp::And, 0xff00_ff00, 0x0ff0_0ff0, 0, 0x0f00_0f00),
        (AtomicOp::Or, 0xff00, 0x00ff_0000, 0, 0x00ff_ff00),
        (AtomicOp::Xor, 0xffff, 0x1_0000_0ff0, 0, 0xf00f),
    ];
    // The 4-byte word at offset 68 is the upper half of the u64 at 64 (little-endian); its lower
    // half must never change.
    let lower = page.ptr.wrapping_add(64).cast::<u32>();
    let word = page.ptr.wrapping_add(68).cast::<u32>();
    for (op, initial, value, compare, after) in cases {
        // SAFETY: aligned u32s inside our page; no other thread touches them.
        unsafe {
            lower.write(0x1111_1111);
            word.write(initial);
        }
        let old = rma_exec::atomic(&table, ID, &KEY, page.base() + 68, op, 4, value, compare).unwrap();
        assert_eq!(old, u64::from(initial), "{op:?}");
        // SAFETY: as above.
        unsafe {
            assert_eq!(word.read(), after, "{op:?}");
            assert_eq!(lower.read(), 0x1111_1111, "{op:?}");
        }
    }
}

#[test]
fn refused_accesses_touch_nothing() {
    let page = Page::new();
    page.fill(0x5a);
    let before = page.snapshot();
    let base = page.base();
    let end = base + PAGE as u64;
    let mut forged = KEY;
    forged[0] ^= 0x80;

    let rw = table_with(&page, RW);
    let read_only = table_with(&page, PROT_REMOTE_READ);
    let write_only = table_with(&page, PROT_REMOTE_WRITE);
    let data = [0xa5u8; 16];
    let mut out = [0u8; 16];

    let put =
        |table: &RemoteAccessTable, key: &[u8; 16], addr: u64| rma_exec::put(table, ID, key, addr, &data);
    let atomic = |table: &RemoteAccessTable, key: &[u8; 16], addr: u64, size: u8| {
        rma_exec::atomic(table, ID, key, addr, AtomicOp::Swap, size, u64::MAX, 0)
    };

    // Forged key and unknown region.
    assert_eq!(put(&rw, &forged, base), Err(AccessError::BadKey));
    assert_eq!(rma_exec::put(&rw, ID + 1, &KEY, base, &data), Err(AccessError::BadKey));
    assert_eq!(rma_exec::get(&rw, ID, &forged, base, &mut out), Err(AccessError::BadKey));
    assert_eq!(atomic(&rw, &forged, base, 8), Err(AccessError::BadKey));
    // Out of bounds: before, across the end, past the end, and wrapping around.
    assert_eq!(put(&rw, &KEY, base - 1), Err(AccessError::OutOfBounds));
    assert_eq!(put(&rw, &KEY, end - 15), Err(AccessError::OutOfBounds));
    assert_eq!(put(&rw, &KEY, end), Err(AccessError::OutOfBounds));
    assert_eq!(put(&rw, &KEY, u64::MAX - 7), Err(AccessError::OutOfBounds));
    assert_eq!(rma_exec::get(&rw, ID, &KEY, end - 15, &mut out), Err(AccessError::OutOfBounds));
    assert_eq!(atomic(&rw, &KEY, end, 8), Err(AccessError::OutOfBounds));
    let called = rw.with_access(ID, &KEY, base + 8, u64::MAX, RemoteAccess::Write, |_| ());
    assert_eq!(called, Err(AccessError::OutOfBounds));
    let called = rw.with_access(ID, &KEY, base, u64::MAX - base + 1, RemoteAccess::Read, |_| ());
    assert_eq!(called, Err(AccessError::OutOfBounds));
    // Missing protection.
    assert_eq!(put(&read_only, &KEY, base), Err(AccessError::Protection));
    assert_eq!(atomic(&read_only, &KEY, base, 8), Err(AccessError::Protection));
    assert_eq!(atomic(&write_only, &KEY, base, 4), Err(AccessError::Protection));
    assert_eq!(rma_exec::get(&write_only, ID, &KEY, base, &mut out), Err(AccessError::Protection));
    // Misaligned atomics and a size UCX does not have.
    assert_eq!(atomic(&rw, &KEY, base + 4, 8), Err(AccessError::BadAtomic));
    assert_eq!(atomic(&rw, &KEY, base + 2, 4), Err(AccessError::BadAtomic));
    assert_eq!(atomic(&rw, &KEY, base + 2, 2), Err(AccessError::BadAtomic));
    assert_eq!(atomic(&rw, &KEY, base, 2), Err(AccessError::BadAtomic));

    assert_eq!(out, [0u8; 16], "a refused get wrote its output");
    assert!(page.snapshot() == before, "a refused access changed the region");

    assert_eq!(rma_exec::status_of(AccessError::BadKey), UCS_ERR_INVALID_PARAM);
    assert_eq!(rma_exec::status_of(AccessError::OutOfBounds), UCS_ERR_INVALID_ADDR);
    assert_eq!(rma_exec::status_of(AccessError::Protection), UCS_ERR_INVALID_PARAM);
    assert_eq!(rma_exec::status_of(AccessError::BadAtomic), UCS_ERR_INVALID_PARAM);
}

/// `unmap` removes the region from the table and only then unmaps it. A put racing with that must
/// either finish before `remove` returns or be refused: a write into the unmapped pages would
/// crash the test. The region is large so that most of the writer's time is spent copying, where
/// a `remove` that did not wait would hit it (a version of `with_access` that released the lock
/// before the copy crashed in most runs).
#[test]
fn remove_waits_for_in_flight_puts() {
    let table = Arc::new(RemoteAccessTable::new());
    const LEN: usize = 64 * PAGE;
    for round in 0..300 {
        let page = Page::with_len(LEN);
        // SAFETY: the mapping is removed from the table before it is unmapped.
        unsafe { table.insert(ID, page.entry(RW)) };
        let base = page.base();
        let started = Arc::new(AtomicBool::new(false));
        let writer = {
            let table = Arc::clone(&table);
            let started = Arc::clone(&started);
            thread::spawn(move || {
                let data = vec![round as u8; LEN];
                let mut puts = 0u64;
                loop {
                    match rma_exec::put(&table, ID, &KEY, base, &data) {
                        Ok(()) => puts += 1,
                        Err(err) => {
                            assert_eq!(err, AccessError::BadKey);
                            return puts;
                        }
                    }
                    started.store(true, Ordering::Release);
                }
            })
        };
        while !started.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        table.remove(ID);
        drop(page); // munmap
        let puts = writer.join().expect("the writer thread panicked");
        assert!(puts >= 1);
    }
    assert!(table.is_empty());
}
