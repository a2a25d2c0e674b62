//! The DPDK transport's message layer (`dpdk::message`): the one-byte header in front of every
//! reliable message, fragmentation, and the placement of a placed frame's payload.
//!
//! - Peer bytes: `Message::parse` agrees with the documented layout and an accepted message
//!   re-encodes (`HELLO_MSG`, `BYE_MSG`, `fragment_kind`, `placed_prefix`) to its bytes.
//! - A stream of peer messages through a receiver that does what the transport does (reassemble
//!   fragments; place a PLACED frame's payload with a `PlaceTracker`):
//!   `PlacedReceive::absorb_fragment` refuses exactly
//!   the fragments that break the announced length, writes each accepted byte at its offset and
//!   never outside the destination (an exact-size heap buffer, so the sanitizer sees any overrun).
//! - Structured frames cut by `write_fragment` (and `mark_placed`) reassemble to the frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcx_dataplane::dpdk::message::{
    fragment_kind, mark_placed, placed_prefix, write_fragment, Message, MessageError, BYE_MSG, HELLO_MSG,
    PLACED_PREFIX_LEN,
};
use zcx_dataplane::placed_receive::{PlaceTracker, PlaceViolation, PlacedReceive};
use zcx_dataplane::PlaceTarget;
use zcx_fuzz::gen::bytes_up_to;

const PLACED: u8 = 5;
/// Largest placed payload the harness gives a destination; longer ones are dropped.
const MAX_DEST: usize = 1 << 16;

fn model(b: &[u8]) -> Result<Message<'_>, MessageError> {
    let (&kind, body) = b.split_first().ok_or(MessageError::Empty)?;
    match kind {
        1 if body == [1] => Ok(Message::Hello),
        1 => Err(MessageError::Hello),
        2 | 3 => Ok(Message::Fragment { last: kind == 3, data: body }),
        4 if body.is_empty() => Ok(Message::Bye),
        4 => Err(MessageError::Bye),
        PLACED => {
            if body.len() < PLACED_PREFIX_LEN {
                return Err(MessageError::Placed);
            }
            let header_len = usize::from(u16::from_le_bytes([body[0], body[1]]));
            let len = u32::from_le_bytes(body[2..6].try_into().unwrap()) as usize;
            let rest = &body[PLACED_PREFIX_LEN..];
            if rest.len() < header_len || rest.len() - header_len > len {
                return Err(MessageError::Placed);
            }
            Ok(Message::Placed { header: &rest[..header_len], len, data: &rest[header_len..] })
        }
        other => Err(MessageError::Kind(other)),
    }
}

fn check_message(b: &[u8]) {
    let parsed = Message::parse(b);
    assert_eq!(parsed, model(b));
    let Ok(message) = parsed else { return };
    let encoded = match message {
        Message::Hello => HELLO_MSG.to_vec(),
        Message::Bye => BYE_MSG.to_vec(),
        Message::Fragment { last, data } => [&[fragment_kind(last)][..], data].concat(),
        Message::Placed { header, len, data } => {
            let mut out = vec![0u8];
            out.extend_from_slice(&placed_prefix(header.len(), len).expect("decoded lengths fit"));
            out.extend_from_slice(header);
            out.extend_from_slice(data);
            mark_placed(&mut out);
            assert_eq!(out[0], PLACED);
            out
        }
    };
    assert_eq!(encoded, b, "{message:?} does not re-encode to its bytes");
}

/// What the receiver got out of a stream of messages.
#[derive(Debug, Default, PartialEq, Eq)]
struct Received {
    frames: Vec<Vec<u8>>,
    placed: Vec<(Vec<u8>, Vec<u8>)>,
    violation: bool,
}

/// A placement in progress and the destination it writes.
struct Dest {
    placing: PlaceTracker,
    header: Vec<u8>,
    buf: Option<Vec<u8>>,
    /// What the payload should read so far, built independently of the tracker.
    expected: Vec<u8>,
}

/// Takes one fragment's bytes into a placement, checking `absorb` against the announced length.
fn absorb(dest: &mut Dest, data: &[u8], last: bool) -> Result<bool, PlaceViolation> {
    let remaining = dest.placing.current().map_or(0, PlacedReceive::remaining);
    let got = dest.placing.current_mut().expect("placing").absorb_fragment(data, last);
    let want = if data.len() > remaining {
        Err(PlaceViolation::TooLong)
    } else if last && data.len() < remaining {
        Err(PlaceViolation::EndsEarly)
    } else if !last && data.len() == remaining {
        Err(PlaceViolation::NoEnd)
    } else {
        Ok(data.len() == remaining)
    };
    assert_eq!(got, want, "absorb of {} bytes with {remaining} left, last {last}", data.len());
    if got.is_ok() {
        dest.expected.extend_from_slice(data);
        assert_eq!(dest.placing.current().map(PlacedReceive::remaining), Some(remaining - data.len()));
    } else {
        let left = dest.placing.current().map(PlacedReceive::remaining);
        assert_eq!(left, Some(remaining), "a refused fragment was taken");
    }
    if let Some(buf) = &dest.buf {
        let done = dest.expected.len();
        assert_eq!(&buf[..done], &dest.expected[..], "placed bytes differ");
        assert!(buf[done..].iter().all(|&b| b == 0xEE), "bytes written past the running offset");
    }
    got
}

/// Feeds messages to a receiver that does what the DPDK transport does with them.
fn receive<'a>(messages: impl IntoIterator<Item = &'a [u8]>) -> Received {
    let mut out = Received::default();
    let mut reassembly = Vec::new();
    let mut dest: Option<Dest> = None;
    for bytes in messages {
        check_message(bytes);
        match Message::parse(bytes) {
            Ok(Message::Fragment { last, data }) => {
                if let Some(d) = dest.as_mut() {
                    match absorb(d, data, last) {
                        Ok(false) => {}
                        Ok(true) => {
                            let d = dest.take().expect("placing");
                            out.placed.push((d.header, d.expected));
                        }
                        Err(_) => {
                            out.violation = true;
                            return out;
                        }
                    }
                } else {
                    reassembly.extend_from_slice(data);
                    if last {
                        out.frames.push(std::mem::take(&mut reassembly));
                    }
                }
            }
            Ok(Message::Placed { header, len, data }) => {
                if dest.is_some() || !reassembly.is_empty() {
                    out.violation = true;
                    return out;
                }
                let mut buf = (len <= MAX_DEST).then(|| vec![0xEEu8; len]);
                let target = buf.as_mut().map(|b| {
                    // SAFETY: the buffer holds `len` bytes and lives in `Dest` with the placement,
                    // never resized or touched by anyone else until the placement ends.
                    unsafe { PlaceTarget::new(b.as_mut_ptr(), 7) }
                });
                let mut placing = PlaceTracker::default();
                // SAFETY: as above, the target covers the `len` bytes the placement may write.
                let started = unsafe { placing.start(target, len) }.expect("nothing in progress");
                assert_eq!((started.len(), started.remaining(), started.is_empty()), (len, len, len == 0));
                let mut d = Dest { placing, header: header.to_vec(), buf, expected: Vec::new() };
                match absorb(&mut d, data, data.len() == len) {
                    Ok(true) => out.placed.push((d.header, d.expected)),
                    Ok(false) => dest = Some(d),
                    Err(_) => {
                        out.violation = true;
                        return out;
                    }
                }
            }
            Ok(Message::Hello | Message::Bye) | Err(_) => {}
        }
    }
    out
}

/// Cuts frames (ordinary or placed) into messages of at most `room` bytes as the transport does,
/// and checks the receiver gets them back.
fn structured(u: &mut arbitrary::Unstructured<'_>) -> arbitrary::Result<()> {
    let mut messages: Vec<Vec<u8>> = Vec::new();
    let mut want = Received::default();
    for _ in 0..u.int_in_range(1..=4)? {
        let room = u.int_in_range(2..=96usize)?;
        let mut out = vec![0u8; room];
        let placed = u.arbitrary::<bool>()?;
        let (a, b) = if placed {
            let header = bytes_up_to(u, room.saturating_sub(1 + PLACED_PREFIX_LEN))?;
            let payload = bytes_up_to(u, 300)?;
            want.placed.push((header.clone(), payload.clone()));
            let mut head = placed_prefix(header.len(), payload.len()).expect("small").to_vec();
            head.extend_from_slice(&header);
            if room < 1 + head.len() {
                return Ok(());
            }
            (head, payload)
        } else {
            let a = bytes_up_to(u, 100)?;
            let b = bytes_up_to(u, 200)?;
            want.frames.push([&a[..], &b[..]].concat());
            (a, b)
        };
        let (mut offset, mut left) = (0, a.len() + b.len());
        loop {
            let (len, n) = write_fragment(&mut out, &a, &b, offset, left);
            assert!(len <= room && n + 1 == len);
            if placed && offset == 0 {
                mark_placed(&mut out);
            }
            messages.push(out[..len].to_vec());
            (offset, left) = (offset + n, left - n);
            if left == 0 {
                break;
            }
        }
    }
    assert_eq!(receive(messages.iter().map(Vec::as_slice)), want);
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else { return };
    match control >> 6 {
        0 => check_message(rest),
        1 => zcx_fuzz::with_unstructured(rest, structured),
        _ => {
            // A stream of peer messages, each prefixed by its length byte.
            let mut messages = Vec::new();
            let mut rest = rest;
            while let Some((&len, tail)) = rest.split_first() {
                let len = usize::from(len).min(tail.len());
                messages.push(&tail[..len]);
                rest = &tail[len..];
            }
            receive(messages);
        }
    }
});
