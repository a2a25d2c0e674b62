//! `--validate`: the bytes of message `n` of a test are a pattern derived from `n`, written by the
//! sender and checked byte by byte by the receiver, so a lost, duplicated, reordered or corrupted
//! message fails the run with the message number and the first wrong byte.
//!
//! Messages are numbered from 0 per test, warm-up included, in the order the sender issues them.
//!
//! The hidden switch `--corrupt-iter <n>` (for tests of the harness) makes the client flip one
//! byte of its message `n` after writing the pattern, to prove that validation catches it. (A
//! switch rather than a `ZCX_*` variable: zcx warns about `ZCX_*` variables it does not know.)

use std::sync::OnceLock;

/// The pattern's byte at `offset` of message `n`: it differs between consecutive messages at
/// every offset, and within one message it does not repeat with a short period.
#[inline]
pub fn byte(n: u64, offset: usize) -> u8 {
    let seed = (n as u8).wrapping_mul(37).wrapping_add((n >> 8) as u8).wrapping_add(11);
    seed.wrapping_add(offset as u8).wrapping_add((offset >> 8) as u8 ^ (offset >> 16) as u8)
}

/// Writes message `n`'s pattern into `buf`, then corrupts it if `--corrupt-iter` names `n` and
/// `corruptible` (the client's own messages).
pub fn fill(buf: &mut [u8], n: u64, corruptible: bool) {
    for (offset, b) in buf.iter_mut().enumerate() {
        *b = byte(n, offset);
    }
    if corruptible && corrupt_target() == Some(n) && !buf.is_empty() {
        let mid = buf.len() / 2;
        buf[mid] ^= 0xFF;
    }
}

/// Checks that `buf` holds message `n`'s pattern, except for the bytes in `skip` (a field the
/// test itself writes, like put_lat's counter).
pub fn check(test: &str, buf: &[u8], n: u64, skip: std::ops::Range<usize>) -> Result<(), String> {
    for (offset, &got) in buf.iter().enumerate() {
        if skip.contains(&offset) {
            continue;
        }
        let expected = byte(n, offset);
        if got != expected {
            return Err(format!(
                "validation failed: {test} iteration {n} (message {n} counting warm-up from 0), byte {offset} of {}: expected {expected:#04x}, got {got:#04x}",
                buf.len()
            ));
        }
    }
    Ok(())
}

static CORRUPT: OnceLock<u64> = OnceLock::new();

/// Makes the client corrupt its message `n` (set once, before the tests start).
pub fn set_corrupt_target(n: u64) {
    let _ = CORRUPT.set(n);
}

/// The message number `--corrupt-iter` names, if any.
fn corrupt_target() -> Option<u64> {
    CORRUPT.get().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filled_buffer_checks_and_a_flipped_byte_is_named() {
        let mut buf = vec![0u8; 4096];
        fill(&mut buf, 7, false);
        assert!(check("t", &buf, 7, 0..0).is_ok());
        assert!(check("t", &buf, 8, 0..0).is_err(), "another message's pattern differs");
        buf[1000] ^= 1;
        let err = check("t", &buf, 7, 0..0).unwrap_err();
        assert!(err.contains("iteration 7") && err.contains("byte 1000 of 4096"), "{err}");
        assert!(check("t", &buf, 7, 1000..1001).is_ok(), "skipped bytes are not checked");
    }

    #[test]
    fn consecutive_messages_differ_at_every_offset() {
        for n in 0..600u64 {
            for offset in [0usize, 1, 255, 256, 65_535, 65_536, 1 << 20] {
                assert_ne!(byte(n, offset), byte(n + 1, offset), "n={n} offset={offset}");
            }
        }
    }
}
