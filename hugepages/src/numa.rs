//! NUMA memory policy for a mapped range (`mbind`).

use std::ptr::NonNull;

use crate::error::{last_errno, Error};
use crate::page_size::base_page_size;

const BITS_PER_WORD: usize = libc::c_ulong::BITS as usize;

/// `MPOL_MF_MOVE` from `<linux/mempolicy.h>` (the libc crate does not export it).
const MPOL_MF_MOVE: libc::c_uint = 1 << 1;

/// Bind `[start, start + len)` to `node` with `MPOL_BIND`.
///
/// With `move_existing`, pages already faulted in elsewhere are migrated
/// (`MPOL_MF_MOVE`, best effort); otherwise only future faults are affected.
/// glibc has no `mbind` wrapper (it lives in libnuma), hence the raw syscall.
pub(crate) fn bind(start: NonNull<u8>, len: usize, node: u32, move_existing: bool) -> Result<(), Error> {
    let node_index = node as usize;
    // The kernel refuses node masks longer than one page of bits; reject such
    // nodes before allocating a mask for them.
    if node_index >= base_page_size() * 8 - 1 {
        return Err(Error::NumaNode { node, errno: libc::EINVAL });
    }
    let mut mask: Vec<libc::c_ulong> = vec![0; node_index / BITS_PER_WORD + 1];
    mask[node_index / BITS_PER_WORD] |= 1 << (node_index % BITS_PER_WORD);
    // The kernel reads `maxnode - 1` bits (a historical off-by-one every libnuma
    // caller compensates for), so pass one more than the mask holds.
    let max_node = (mask.len() * BITS_PER_WORD + 1) as libc::c_ulong;
    let flags: libc::c_uint = if move_existing { MPOL_MF_MOVE } else { 0 };
    // SAFETY: the range belongs to a mapping the caller owns, and `mask` is a
    // live buffer of exactly the `max_node - 1` bits we tell the kernel to read.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            start.as_ptr(),
            len,
            libc::MPOL_BIND as libc::c_ulong,
            mask.as_ptr(),
            max_node,
            flags,
        )
    };
    if rc != 0 {
        return Err(Error::NumaNode { node, errno: last_errno() });
    }
    Ok(())
}
