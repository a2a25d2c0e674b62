//! Byte copies sized for messages: a small copy is a few register moves inline, a large one is
//! the C library's `memcpy`.
//!
//! `ptr::copy_nonoverlapping` with a length known only at run time becomes a call to `memcpy`,
//! which for the 8 to 32 bytes of a small message's header or payload spends more on the call and
//! its size dispatch than on the copy. A latency-bound message path makes several such copies
//! (header and payload into the ring, payload out into the receive buffer), so the small cases
//! are done here with at most two overlapping loads and stores of one width.

use std::ptr::{read_unaligned, write_unaligned};

/// Copies `len` bytes from `src` to `dst`.
///
/// # Safety
///
/// As for [`std::ptr::copy_nonoverlapping`]: `src` is valid for reads and `dst` for writes of
/// `len` bytes, and the two ranges do not overlap. No alignment is required.
#[inline(always)]
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: (every branch) each access lies inside `[0, len)` of its range, which the caller
    // vouches for; the unaligned forms need no alignment. Two accesses of one width may overlap
    // each other within a range, which is harmless because the ranges do not overlap each other.
    unsafe {
        if len >= 16 {
            if len > 32 {
                std::ptr::copy_nonoverlapping(src, dst, len);
                return;
            }
            let head = read_unaligned(src as *const u128);
            let tail = read_unaligned(src.add(len - 16) as *const u128);
            write_unaligned(dst as *mut u128, head);
            write_unaligned(dst.add(len - 16) as *mut u128, tail);
        } else if len >= 8 {
            let head = read_unaligned(src as *const u64);
            let tail = read_unaligned(src.add(len - 8) as *const u64);
            write_unaligned(dst as *mut u64, head);
            write_unaligned(dst.add(len - 8) as *mut u64, tail);
        } else if len >= 4 {
            let head = read_unaligned(src as *const u32);
            let tail = read_unaligned(src.add(len - 4) as *const u32);
            write_unaligned(dst as *mut u32, head);
            write_unaligned(dst.add(len - 4) as *mut u32, tail);
        } else {
            for i in 0..len {
                *dst.add(i) = *src.add(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_and_offset_copies_exactly_its_bytes() {
        let src: Vec<u8> = (0..200u8).collect();
        for len in 0..=100 {
            for offset in 0..8 {
                let mut dst = vec![0xEEu8; 120];
                // SAFETY: `src[offset..offset + len]` and `dst[offset..offset + len]` are in
                // bounds (offset + len <= 108) and belong to different vectors.
                unsafe { copy_bytes(src.as_ptr().add(offset), dst.as_mut_ptr().add(offset), len) };
                assert_eq!(
                    &dst[offset..offset + len],
                    &src[offset..offset + len],
                    "len {len} offset {offset}"
                );
                assert!(dst[..offset].iter().all(|&b| b == 0xEE), "wrote before, len {len}");
                assert!(dst[offset + len..].iter().all(|&b| b == 0xEE), "wrote after, len {len}");
            }
        }
    }
}
