//! Reading bytes the peer may still write: every value that decides what the reader does is
//! copied once into memory of the reader's own, and validated and used from there.
//!
//! A frame received over shared memory is lent in place (see [`crate::TlEvent::Frame`]): its
//! bytes lie in the peer's ring, which a hostile peer can rewrite while the frame is read. A
//! decoder that read a length twice, once to check it and once to use it, could be made to act
//! on a value it never checked. So the decoders read each header field once ([`u8_at`],
//! [`u16_at`], [`u64_at`]: a value of their own from then on), or take the whole header (at most
//! [`MAX_HEADER_LEN`] bytes) as one copy ([`head`], [`HeaderCopy`]) and decode from that; the
//! frame's own length is the transport's, read once from its ring, not the peer's to change.
//! Payload bytes stay lent: they are only copied to their destination, and what the peer writes
//! into them meanwhile is its own data.
//!
//! Source order alone does not pin a copy: the compiler, taking a `&[u8]` as unchanging, may turn
//! a read of the copy back into a read of the ring. `settle` (for a copy in memory) and `pin` (for
//! a value in a register) forbid that, at no cost in instructions for `pin`.

use super::wire::MAX_HEADER_LEN;

/// The byte at `at`, read once (`None` past the end).
#[inline(always)]
pub fn u8_at(bytes: &[u8], at: usize) -> Option<u8> {
    bytes.get(at).map(|&byte| pin(u64::from(byte)) as u8)
}

/// The little-endian `u16` at `at`, read once (`None` past the end).
#[inline(always)]
pub fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    let raw = bytes.get(at..)?.first_chunk::<2>()?;
    Some(pin(u64::from(u16::from_le_bytes(*raw))) as u16)
}

/// The little-endian `u64` at `at`, read once (`None` past the end).
#[inline(always)]
pub fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    let raw = bytes.get(at..)?.first_chunk::<8>()?;
    Some(pin(u64::from_le_bytes(*raw)))
}

/// The first `N` bytes of `bytes`, copied once (`None` when there are fewer).
#[inline(always)]
pub fn head<const N: usize>(bytes: &[u8]) -> Option<[u8; N]> {
    let mut copy = *bytes.first_chunk::<N>()?;
    settle(&mut copy);
    Some(copy)
}

/// The header part of a frame: its first [`MAX_HEADER_LEN`] bytes (all of a shorter frame),
/// copied once.
pub struct HeaderCopy {
    bytes: [u8; MAX_HEADER_LEN],
    len: usize,
}

impl HeaderCopy {
    /// Copies the header part of `frame`.
    #[inline]
    pub fn of(frame: &[u8]) -> HeaderCopy {
        let len = frame.len().min(MAX_HEADER_LEN);
        let mut bytes = [0u8; MAX_HEADER_LEN];
        bytes[..len].copy_from_slice(&frame[..len]);
        settle(&mut bytes);
        HeaderCopy { bytes, len }
    }

    /// The copied bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// `value`, made opaque to the compiler: it no longer knows where the value came from, so it
/// cannot load it again from there; every use takes this register (or a spill of it to the
/// stack, which is ours).
#[inline(always)]
fn pin(mut value: u64) -> u64 {
    #[cfg(all(not(miri), target_pointer_width = "64"))]
    // SAFETY: the assembly is empty: it executes nothing; it only claims to read and rewrite
    // the register holding `value`, which it leaves as it was.
    unsafe {
        std::arch::asm!("/* {0} */", inout(reg) value, options(nomem, nostack, preserves_flags));
    }
    #[cfg(not(all(not(miri), target_pointer_width = "64")))]
    {
        value = std::hint::black_box(value);
    }
    value
}

/// Makes the compiler take `value` as rewritten here: every later read of it reads this copy,
/// none is turned back into a read of the memory it was copied from.
#[inline(always)]
fn settle<T>(value: &mut T) {
    #[cfg(not(miri))]
    // SAFETY: the assembly is empty: it executes nothing and changes no register or memory. It
    // only receives the copy's address, so the compiler must assume it may have read or written
    // the copy.
    unsafe {
        std::arch::asm!("/* {0} */", in(reg) value as *mut T, options(nostack, preserves_flags));
    }
    // Miri runs no assembly, and it does not optimise: a copy is a copy there.
    #[cfg(miri)]
    let _ = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_little_endian_within_the_bytes() {
        let bytes = [9u8, 0x34, 0x12, 1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(u8_at(&bytes, 0), Some(9));
        assert_eq!(u8_at(&bytes, 11), None);
        assert_eq!(u16_at(&bytes, 1), Some(0x1234));
        assert_eq!(u16_at(&bytes, 10), None);
        assert_eq!(u64_at(&bytes, 3), Some(0x0807_0605_0403_0201));
        assert_eq!(u64_at(&bytes, 4), None);
        assert_eq!(u64_at(&bytes, usize::MAX), None);
    }

    #[test]
    fn head_copies_the_first_bytes_or_none() {
        let frame = [1u8, 2, 3, 4, 5];
        assert_eq!(head::<3>(&frame), Some([1, 2, 3]));
        assert_eq!(head::<5>(&frame), Some(frame));
        assert_eq!(head::<6>(&frame), None);
        assert_eq!(head::<0>(&[]), Some([]));
    }

    #[test]
    fn a_header_copy_holds_at_most_the_longest_header() {
        let short = [7u8; 10];
        assert_eq!(HeaderCopy::of(&short).bytes(), &short[..]);
        let long: Vec<u8> = (0..200u8).collect();
        let copy = HeaderCopy::of(&long);
        assert_eq!(copy.bytes(), &long[..MAX_HEADER_LEN]);
        assert_ne!(copy.bytes().as_ptr(), long.as_ptr(), "a copy, not a view");
        assert!(HeaderCopy::of(&[]).bytes().is_empty());
    }
}
