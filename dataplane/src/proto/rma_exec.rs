//! The target side of emulated RMA: executes a peer's put, get and atomic on local memory.
//!
//! Transports without native RMA (uring, dpdk) carry [`Op::Put`](super::wire::Op::Put),
//! [`Op::Get`](super::wire::Op::Get) and [`Op::Atomic`](super::wire::Op::Atomic) frames; the
//! target's progress loop hands their fields to the functions here. Each one runs inside
//! [`RemoteAccessTable::with_access`]: the whole range is checked (key, protection, bounds, atomic
//! shape) before any byte is read or written, and the region cannot be removed, hence unmapped,
//! while the access runs. A refused access touches nothing; [`status_of`] turns its error into the
//! `ucs_status_t` the [`Op::RmaAck`](super::wire::Op::RmaAck) carries back.
//!
//! The table is trusted: each entry must describe memory that stays mapped, readable and (with
//! REMOTE_WRITE) writable until its `remove` returns, which `mem_map`/`unmap` guarantee. As in UCX,
//! the application must not access remotely writable bytes concurrently with a peer's access to
//! them without synchronising through the protocol (flush, a reply), and must not mix atomic and
//! non-atomic accesses to one word.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::wire::AtomicOp;
use crate::access::{AccessError, RemoteAccess, RemoteAccessTable};

/// `UCS_OK`.
pub const UCS_OK: i8 = 0;
/// `UCS_ERR_INVALID_PARAM`.
pub const UCS_ERR_INVALID_PARAM: i8 = -5;
/// `UCS_ERR_INVALID_ADDR`.
pub const UCS_ERR_INVALID_ADDR: i8 = -7;

/// The `ucs_status_t` an [`Op::RmaAck`](super::wire::Op::RmaAck) reports for a refused access.
///
/// A bad key and a missing protection are both `UCS_ERR_INVALID_PARAM`, so the initiator cannot
/// tell a live region it may not touch from one that does not exist.
pub fn status_of(err: AccessError) -> i8 {
    match err {
        AccessError::BadKey | AccessError::Protection | AccessError::BadAtomic => UCS_ERR_INVALID_PARAM,
        AccessError::OutOfBounds => UCS_ERR_INVALID_ADDR,
    }
}

/// Emulated `ucp_put_nbx` at the target: writes `data` at `addr` of region `region`.
pub fn put(
    table: &RemoteAccessTable,
    region: u64,
    key: &[u8; 16],
    addr: u64,
    data: &[u8],
) -> Result<(), AccessError> {
    put_fragment(table, region, key, addr, data.len() as u64, 0, data)
}

/// One fragment of an emulated `ucp_put_nbx` of `len` bytes at `addr`: writes `data` at
/// `addr + offset`. The whole put, not just the fragment, must be a permitted access, so a put
/// that ends outside its region writes no fragment at all. A fragment outside the put it names
/// is refused as out of bounds.
pub fn put_fragment(
    table: &RemoteAccessTable,
    region: u64,
    key: &[u8; 16],
    addr: u64,
    len: u64,
    offset: u64,
    data: &[u8],
) -> Result<(), AccessError> {
    if offset.checked_add(data.len() as u64).is_none_or(|end| end > len) {
        return Err(AccessError::OutOfBounds);
    }
    table.with_access(region, key, addr, len, RemoteAccess::Write, |start| {
        if data.is_empty() {
            return;
        }
        // SAFETY: `with_access` accepted `[addr, addr + len)` for writing and holds the table's
        // read lock, so those bytes are mapped and writable until we return (the table's entries
        // describe live memory until removed); `[offset, offset + data.len())` lies inside
        // `[0, len)` (checked above, so the offset fits in `usize`). `copy` tolerates `data`
        // lying inside the region itself, and no reference to the region's bytes is created.
        unsafe { std::ptr::copy(data.as_ptr(), start.add(offset as usize), data.len()) }
    })
}

/// Emulated `ucp_get_nbx` at the target: reads `out.len()` bytes at `addr` of region `region`
/// into `out`. The whole range is checked before any byte is read.
pub fn get(
    table: &RemoteAccessTable,
    region: u64,
    key: &[u8; 16],
    addr: u64,
    out: &mut [u8],
) -> Result<(), AccessError> {
    table.with_access(region, key, addr, out.len() as u64, RemoteAccess::Read, |src| {
        if out.is_empty() {
            return;
        }
        // SAFETY: `with_access` accepted `[addr, addr + out.len())` for reading and holds the
        // table's read lock, so the bytes are mapped and readable until we return. `out` is an
        // exclusive borrow, so it cannot be read or written by anyone else meanwhile; `copy`
        // would still be correct if it overlapped the region.
        unsafe { std::ptr::copy(src.cast_const(), out.as_mut_ptr(), out.len()) }
    })
}

/// Emulated `ucp_atomic_op_nbx` at the target: applies `op` to the `size`-byte (4 or 8) word at
/// `addr` with a real CPU atomic and returns the previous value.
///
/// As in UCX, `Add`, `And`, `Or`, `Xor` and `Swap` always store; `Cswap` stores `value` only if
/// the current value equals `compare`. For 4-byte atomics `value` and `compare` are truncated to
/// their low 32 bits and the old value is zero-extended.
#[allow(clippy::too_many_arguments)] // The fields of the Atomic frame, as they arrive.
pub fn atomic(
    table: &RemoteAccessTable,
    region: u64,
    key: &[u8; 16],
    addr: u64,
    op: AtomicOp,
    size: u8,
    value: u64,
    compare: u64,
) -> Result<u64, AccessError> {
    table.with_access(region, key, addr, u64::from(size), RemoteAccess::Atomic { size }, |word| {
        // SAFETY: `with_access` accepted only a size of 4 or 8 with `addr` a multiple of it, and
        // `[addr, addr + size)` inside a region that stays mapped while its read lock is held,
        // i.e. for the whole call.
        unsafe { apply_atomic(word, op, size, value, compare) }
    })
}

/// Applies `op` with a real CPU atomic to the `size`-byte (4, else 8) word at `word` and returns
/// the previous value (4-byte operands truncated, the result zero-extended): the one place both
/// the emulating target and a shared-memory initiator do atomics.
///
/// # Safety
/// `word` must be aligned to `size` and point to `size` bytes that stay mapped, readable and
/// writable for the call, and that everyone else accesses atomically only.
pub unsafe fn apply_atomic(word: *mut u8, op: AtomicOp, size: u8, value: u64, compare: u64) -> u64 {
    if size == 4 {
        // SAFETY: the caller guarantees alignment (that of `AtomicU32`) and a live word.
        let word = unsafe { AtomicU32::from_ptr(word.cast::<u32>()) };
        u64::from(apply32(word, op, value as u32, compare as u32))
    } else {
        // SAFETY: as above, for 8 bytes and `AtomicU64`.
        let word = unsafe { AtomicU64::from_ptr(word.cast::<u64>()) };
        apply64(word, op, value, compare)
    }
}

fn apply32(word: &AtomicU32, op: AtomicOp, value: u32, compare: u32) -> u32 {
    const ORD: Ordering = Ordering::SeqCst;
    match op {
        AtomicOp::Add => word.fetch_add(value, ORD),
        AtomicOp::Swap => word.swap(value, ORD),
        AtomicOp::Cswap => word.compare_exchange(compare, value, ORD, ORD).unwrap_or_else(|old| old),
        AtomicOp::And => word.fetch_and(value, ORD),
        AtomicOp::Or => word.fetch_or(value, ORD),
        AtomicOp::Xor => word.fetch_xor(value, ORD),
    }
}

fn apply64(word: &AtomicU64, op: AtomicOp, value: u64, compare: u64) -> u64 {
    const ORD: Ordering = Ordering::SeqCst;
    match op {
        AtomicOp::Add => word.fetch_add(value, ORD),
        AtomicOp::Swap => word.swap(value, ORD),
        AtomicOp::Cswap => word.compare_exchange(compare, value, ORD, ORD).unwrap_or_else(|old| old),
        AtomicOp::And => word.fetch_and(value, ORD),
        AtomicOp::Or => word.fetch_or(value, ORD),
        AtomicOp::Xor => word.fetch_xor(value, ORD),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_ucs_codes() {
        assert_eq!(status_of(AccessError::BadKey), -5);
        assert_eq!(status_of(AccessError::Protection), -5);
        assert_eq!(status_of(AccessError::BadAtomic), -5);
        assert_eq!(status_of(AccessError::OutOfBounds), -7);
    }
}
