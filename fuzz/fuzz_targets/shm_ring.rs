//! The shm ring (`shm::ring`), whose shared memory the peer can write at any time: a producer
//! and a consumer over one ring, with the fuzzer pushing records (`push`, `push2`), reading them
//! (`next_record`, `peek_frame` + `consume_peeked`), releasing, and scribbling over the ring as a
//! hostile peer would (record headers, payloads, the shared head, tail and sleep words).
//!
//! Asserts: while nobody scribbled, the consumer reads exactly the records pushed, in order and
//! byte-equal, and neither end reports an error; always, every record lent lies inside the data
//! area and within the frame limit, `peek_frame` offers exactly what `next_record` then reads,
//! and nothing reads or writes outside the ring (an exact-size heap area under the address
//! sanitizer).
#![no_main]

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::VecDeque;

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use zcx_dataplane::shm::ring::{
    max_record_payload, ring_bytes, Consumer, Producer, RingError, KIND_FRAME, KIND_PLACED, KIND_PLACE_DONE,
    KIND_SKIP, RING_HEADER,
};

const KINDS: [u32; 3] = [KIND_FRAME, KIND_PLACED, KIND_PLACE_DONE];

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let capacity = 1usize << u.int_in_range(12..=14)?;
    // 64-byte aligned and exactly the ring's size, so any access past it is a sanitizer report.
    let words = ring_bytes(capacity) / 8;
    let layout = Layout::from_size_align(ring_bytes(capacity), 64).expect("a valid layout");
    // SAFETY: the layout has a non-zero size; the memory is freed at the end of this function.
    let base = unsafe { alloc_zeroed(layout) };
    assert!(!base.is_null());
    let result = exercise(u, capacity, base, words);
    // SAFETY: allocated above with this layout; both ends were dropped inside `exercise`.
    unsafe { dealloc(base, layout) };
    result
}

fn exercise(u: &mut Unstructured<'_>, capacity: usize, base: *mut u8, words: usize) -> arbitrary::Result<()> {
    let frame_limit = u.int_in_range(0..=max_record_payload(capacity) + 64)?;
    let data = base as usize + RING_HEADER..base as usize + ring_bytes(capacity);
    // SAFETY: `base..base + ring_bytes(capacity)` is a 64-aligned allocation that outlives both
    // ends (dropped when this function returns); one producer, one consumer.
    let mut producer = unsafe { Producer::new(base, capacity) };
    // SAFETY: as above.
    let mut consumer = unsafe { Consumer::new(base, capacity, frame_limit) };
    let limit = frame_limit.min(max_record_payload(capacity));

    let mut pending: VecDeque<(u32, Vec<u8>)> = VecDeque::new();
    let mut hostile = false;
    for _ in 0..500 {
        if u.is_empty() {
            break;
        }
        match u.int_in_range(0u8..=15)? {
            0..=4 => {
                let kind = *u.choose(&KINDS)?;
                let len =
                    if u.ratio(1, 8)? { u.int_in_range(0..=capacity)? } else { u.int_in_range(0..=200)? };
                let payload: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ kind as u8).collect();
                let cut = u.int_in_range(0..=len)?;
                let pushed = if u.arbitrary()? {
                    producer.push2(kind, &payload[..cut], &payload[cut..])
                } else {
                    producer.push(kind, &[&payload[..cut], &payload[cut..]])
                };
                match pushed {
                    Ok(true) => {
                        // A record over the consumer's frame limit is a protocol error it must
                        // report: from then on the ring is as good as a hostile one.
                        hostile |= len > limit;
                        pending.push_back((kind, payload));
                    }
                    Ok(false) => assert!(len <= producer.max_payload()),
                    Err(RingError::BadLength) if len > producer.max_payload() => {}
                    Err(err) => assert!(hostile, "push failed with an honest consumer: {err:?}"),
                }
            }
            5..=9 => {
                let peeked = consumer.peek_frame().map(|(bytes, room)| (bytes.as_ptr(), bytes.len(), room));
                let use_peek = u.arbitrary::<bool>()?;
                let record = if let (Some((ptr, len, room)), true) = (peeked, use_peek) {
                    // SAFETY: `peek_frame` just lent these bytes; nothing changed the ring since.
                    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec();
                    consumer.consume_peeked(room);
                    Ok(Some((KIND_FRAME, bytes, ptr as usize)))
                } else {
                    let next =
                        consumer.next_record().map(|r| r.map(|(k, b)| (k, b.to_vec(), b.as_ptr() as usize)));
                    if let (Ok(Some((kind, bytes, ptr))), Some((p_ptr, p_len, _))) = (&next, peeked) {
                        assert_eq!((*kind, *ptr, bytes.len()), (KIND_FRAME, p_ptr as usize, p_len));
                    }
                    if next.as_ref().map_or(true, Option::is_none) {
                        assert!(peeked.is_none(), "peek_frame offered what next_record refused");
                    }
                    next
                };
                match record {
                    Ok(Some((kind, bytes, ptr))) => {
                        assert!(KINDS.contains(&kind) && kind != KIND_SKIP);
                        assert!(bytes.len() <= limit, "a record over the frame limit");
                        assert!(
                            data.start <= ptr && ptr + bytes.len() <= data.end,
                            "a record outside the data area"
                        );
                        if !hostile {
                            let (want_kind, want) = pending.pop_front().expect("read a record never pushed");
                            assert_eq!((kind, &bytes), (want_kind, &want), "records out of order or damaged");
                        }
                    }
                    Ok(None) => assert!(hostile || pending.is_empty(), "a pushed record went missing"),
                    Err(err) => assert!(hostile, "consumer error with an honest producer: {err:?}"),
                }
            }
            10..=11 => consumer.release(),
            12 => {
                let _ = consumer.announce_sleep();
                let _ = producer.take_wake();
                consumer.awake();
            }
            13 => {
                let drained = producer.is_drained();
                if !hostile && drained {
                    assert!(pending.is_empty(), "drained with records unread");
                }
            }
            _ => {
                // A hostile peer writes a word anywhere in the ring.
                hostile = true;
                let word = u.choose_index(words)?;
                let value: u64 = if u.arbitrary()? {
                    // A plausible record header: length, kind, lap.
                    let kind = u64::from(*u.choose(&[KIND_SKIP, KIND_FRAME, KIND_PLACED, 0x5305])?);
                    u64::from(u.arbitrary::<u16>()?) | kind << 32 | u64::from(u.int_in_range(0u16..=3)?) << 48
                } else {
                    u.arbitrary()?
                };
                // SAFETY: `word < words`: an aligned u64 inside the ring's memory. Both ends reach
                // that memory only through raw pointers, as they would a peer process's mapping.
                unsafe { base.cast::<u64>().add(word).write_volatile(value) };
            }
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| zcx_fuzz::with_unstructured(data, run));
