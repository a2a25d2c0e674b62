//! The shm link's hello (`shm::conn::Hello`), the first thing an accepting process reads from a
//! connecting peer: accepted exactly when it is 32 bytes with the segment magic and version, a
//! ring capacity that is a power of two in range, and a segment long enough for two such rings;
//! an accepted hello re-encodes to the same bytes. Structured hellos round-trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcx_dataplane::shm::conn::{Hello, HelloError, HELLO_LEN};
use zcx_dataplane::shm::ring::{MAX_CAPACITY, MIN_CAPACITY};
use zcx_dataplane::shm::segment::{segment_len, SEGMENT_MAGIC, SEGMENT_VERSION};

fn sizes_ok(capacity: u64, len: u64) -> bool {
    capacity.is_power_of_two()
        && (MIN_CAPACITY as u64..=MAX_CAPACITY as u64).contains(&capacity)
        && len >= segment_len(capacity as usize) as u64
}

fn model(b: &[u8]) -> Result<Hello, HelloError> {
    if b.len() != HELLO_LEN {
        return Err(HelloError::Length);
    }
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    if u64_at(0) != SEGMENT_MAGIC || u32_at(8) != SEGMENT_VERSION {
        return Err(HelloError::Magic);
    }
    let hello = Hello { max_frame: u32_at(12), capacity: u64_at(16), segment_len: u64_at(24) };
    if !sizes_ok(hello.capacity, hello.segment_len) {
        return Err(HelloError::Sizes);
    }
    Ok(hello)
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else { return };
    if control & 0x80 != 0 {
        zcx_fuzz::with_unstructured(rest, |u| {
            let capacity = if u.arbitrary()? { 1u64 << u.int_in_range(12..=30)? } else { u.arbitrary()? };
            let hello = Hello { capacity, segment_len: u.arbitrary()?, max_frame: u.arbitrary()? };
            let bytes = hello.encode();
            let decoded = Hello::decode(&bytes);
            assert_eq!(decoded, model(&bytes));
            if sizes_ok(hello.capacity, hello.segment_len) {
                assert_eq!(decoded, Ok(hello));
            }
            Ok(())
        });
        return;
    }
    let mut bytes = rest.to_vec();
    // Mostly past the magic and version, where the sizes are checked.
    if control & 0x03 != 0 && bytes.len() >= 12 {
        bytes[..8].copy_from_slice(&SEGMENT_MAGIC.to_le_bytes());
        bytes[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
    }
    let decoded = Hello::decode(&bytes);
    assert_eq!(decoded, model(&bytes));
    if let Ok(hello) = decoded {
        assert_eq!(hello.encode()[..], bytes[..], "an accepted hello does not re-encode to its bytes");
    }
});
