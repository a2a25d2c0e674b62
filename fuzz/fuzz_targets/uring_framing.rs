//! The uring transport's stream framing (`uring::framing`), stateful: one byte stream from a peer
//! is received the way the transport may receive it, in arbitrary chunks, switching at will
//! between the multishot path (`FrameReader::feed`), the in-place buffer (`RxBuf::spare` /
//! `filled`, after `FrameReader::drain_into`) and direct receives into a placed payload's
//! destination (`PlacedReceive::next_dest` / `advance`), wherever the transport allows each.
//!
//! The frame limit may be raised at one point of the stream (`FrameReader::set_max_frame`, as the
//! transport does once a link's handshake completes), which every run does at the same byte.
//!
//! Asserts: the frames, placed headers, placed payloads and the final error (an oversized length
//! word) are exactly those of the same bytes fed to a `FrameReader` in one piece (two, split where
//! the limit is raised), which in turn match this crate's own reading of the documented framing;
//! what is left buffered at the end is the same; the in-place buffer grows by bytes that arrived,
//! never by what a length word announces (at most `RX_FIRST` or four times the bytes received);
//! nothing panics and nothing is written outside a destination (exact-size heap buffers, under
//! the address sanitizer).
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcx_dataplane::placed_receive::{PlaceDone, PlaceTracker, PlacedReceive};
use zcx_dataplane::uring::framing::{finish_placing, FrameReader, FrameSink, RxBuf, PLACED, RX_FIRST};
use zcx_dataplane::PlaceTarget;

const PREFIX_LEN: usize = 4;
const MAX_PLACED_HEADER: usize = 4096;
/// Largest placed payload the harness gives a destination; longer ones are dropped.
const MAX_DEST: usize = 1 << 16;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Frame(Vec<u8>),
    Placed { header: Vec<u8>, len: usize, token: Option<usize> },
    Done { token: usize, bytes: Vec<u8> },
}

/// The receiver's side: records every event and owns the placement destinations.
struct Recorder {
    events: Vec<Event>,
    /// One exact-size heap buffer per accepted placement; boxes never move their bytes.
    dests: Vec<Box<[u8]>>,
    placed_seen: u32,
    /// Bit `n % 64` says whether the `n`th placed frame gets a destination.
    accept: u64,
}

impl Recorder {
    fn new(accept: u64) -> Recorder {
        Recorder { events: Vec::new(), dests: Vec::new(), placed_seen: 0, accept }
    }

    /// Whether the next placed frame of `len` bytes gets a destination (same rule in every run).
    fn decide(&mut self, len: usize) -> bool {
        let n = self.placed_seen;
        self.placed_seen += 1;
        len <= MAX_DEST && self.accept >> (n % 64) & 1 == 1
    }
}

impl FrameSink for Recorder {
    fn frame(&mut self, bytes: &[u8]) {
        self.events.push(Event::Frame(bytes.to_vec()));
    }

    fn placed(&mut self, header: &[u8], len: usize) -> Option<PlaceTarget> {
        let token = self.decide(len).then_some(self.dests.len());
        self.events.push(Event::Placed { header: header.to_vec(), len, token });
        let token = token?;
        self.dests.push(vec![0xEEu8; len].into_boxed_slice());
        let dest = self.dests.last_mut().expect("just pushed");
        // SAFETY: the box holds exactly `len` bytes, is kept (unmoved, untouched) in `dests` for
        // the whole run, and only the reader writes it until `place_done`.
        Some(unsafe { PlaceTarget::new(dest.as_mut_ptr(), token as u64) })
    }

    fn place_done(&mut self, done: PlaceDone) {
        assert_eq!(done.result, Ok(()), "a placement the stream completed ended with an error");
        let token = done.token as usize;
        let bytes = self.dests[token].to_vec();
        self.events.push(Event::Done { token, bytes });
    }
}

/// The frame limit: `first`, raised to `then` from stream byte `at` on.
#[derive(Debug, Clone, Copy)]
struct Limits {
    first: usize,
    at: usize,
    then: usize,
}

impl Limits {
    /// The limit for a length word whose last byte is stream byte `end - 1`.
    fn for_prefix_ending_at(&self, end: usize) -> usize {
        if end <= self.at {
            self.first
        } else {
            self.then
        }
    }
}

/// What receiving a stream gave.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    events: Vec<Event>,
    dests: Vec<Box<[u8]>>,
    error: Option<u64>,
    /// Stream bytes held for an incomplete frame or prefix, and placed bytes still missing.
    held: usize,
    placing_remaining: Option<usize>,
}

/// The framing as documented, read by this crate: `u32` LE length words; bit 31 marks a placed
/// frame whose counted bytes are a `u32` payload length and a header of at most 4096 bytes, and
/// whose payload follows uncounted.
fn model(stream: &[u8], limits: Limits, accept: u64) -> Outcome {
    let mut rec = Recorder::new(accept);
    let mut pos = 0;
    let mut error = None;
    let mut held = 0;
    let mut placing_remaining = None;
    while pos < stream.len() {
        let Some(word) = stream.get(pos..pos + PREFIX_LEN) else {
            held = stream.len() - pos;
            break;
        };
        let word = u32::from_le_bytes(word.try_into().unwrap());
        let placed = word & PLACED != 0;
        let len = (word & !PLACED) as usize;
        let max_frame = limits.for_prefix_ending_at(pos + PREFIX_LEN);
        let too_large = if placed {
            !(PREFIX_LEN..=PREFIX_LEN + MAX_PLACED_HEADER).contains(&len)
        } else {
            len > max_frame
        };
        if too_large {
            error = Some(u64::from(word));
            break;
        }
        let Some(body) = stream.get(pos + PREFIX_LEN..pos + PREFIX_LEN + len) else {
            held = stream.len() - pos;
            break;
        };
        pos += PREFIX_LEN + len;
        if !placed {
            rec.events.push(Event::Frame(body.to_vec()));
            continue;
        }
        let payload_len = u32::from_le_bytes(body[..4].try_into().unwrap()) as usize;
        let token = rec.decide(payload_len).then_some(rec.dests.len());
        rec.events.push(Event::Placed { header: body[4..].to_vec(), len: payload_len, token });
        let take = payload_len.min(stream.len() - pos);
        let payload = &stream[pos..pos + take];
        pos += take;
        if let Some(token) = token {
            let mut dest = vec![0xEEu8; payload_len];
            dest[..take].copy_from_slice(payload);
            rec.dests.push(dest.into_boxed_slice());
            if take == payload_len {
                rec.events.push(Event::Done { token, bytes: rec.dests[token].to_vec() });
            }
        }
        if take < payload_len {
            placing_remaining = Some(payload_len - take);
        }
    }
    Outcome { events: rec.events, dests: rec.dests, error, held, placing_remaining }
}

/// The whole stream in one `feed` (two, when the limit is raised inside it).
fn one_piece(stream: &[u8], limits: Limits, accept: u64) -> Outcome {
    let mut rec = Recorder::new(accept);
    let mut reader = FrameReader::new(limits.first);
    let mut placing = PlaceTracker::default();
    let (before, after) = stream.split_at(limits.at.min(stream.len()));
    let mut error = reader.feed(before, &mut placing, &mut rec).err().map(|e| e.len);
    if error.is_none() && limits.at <= stream.len() {
        reader.set_max_frame(limits.then);
        assert_eq!(reader.max_frame(), limits.then);
        error = reader.feed(after, &mut placing, &mut rec).err().map(|e| e.len);
    }
    finish(rec, reader, RxBuf::default(), placing, error)
}

fn finish(
    rec: Recorder,
    mut reader: FrameReader,
    mut rx: RxBuf,
    placing: PlaceTracker,
    error: Option<u64>,
) -> Outcome {
    let (held, placing_remaining) = if error.is_some() {
        (0, None)
    } else {
        reader.drain_into(&mut rx);
        assert!(reader.is_idle() && reader.missing() == 0);
        (rx.held(), placing.current().map(PlacedReceive::remaining))
    };
    Outcome { events: rec.events, dests: rec.dests, error, held, placing_remaining }
}

/// The stream in chunks, each taken by whichever receive path `plan` picks (when allowed).
fn chunked(stream: &[u8], limits: Limits, accept: u64, plan: &[u8]) -> Outcome {
    let mut rec = Recorder::new(accept);
    let mut reader = FrameReader::new(limits.first);
    let mut rx = RxBuf::default();
    let mut placing = PlaceTracker::default();
    let mut plan = plan.iter().copied().cycle();
    let mut pos = 0;
    let mut error = None;
    while pos < stream.len() {
        if pos == limits.at {
            reader.set_max_frame(limits.then);
        }
        let (step, size) = (plan.next().unwrap_or(0xFF), plan.next().unwrap_or(0xFF));
        // No chunk crosses the byte where the limit is raised.
        let left = if pos < limits.at { limits.at.min(stream.len()) - pos } else { stream.len() - pos };
        let size = match step >> 6 {
            0 => 1 + usize::from(size % 8),
            1 => 1 + usize::from(size),
            2 => 1 + usize::from(size) * 64,
            _ => left,
        }
        .min(left);
        let direct_ok =
            rx.is_empty() && reader.is_idle() && placing.current().is_some_and(|p| p.next_dest().is_some());
        let fed = match step % 3 {
            0 if direct_ok => {
                let (dest, missing) = placing.current().and_then(PlacedReceive::next_dest).expect("checked");
                assert_eq!(Some(missing), placing.current().map(PlacedReceive::remaining));
                let n = size.min(missing);
                // SAFETY: `dest` has `missing >= n` writable bytes (the placement's destination,
                // see `Recorder::placed`), and the stream is a separate buffer.
                unsafe { std::ptr::copy_nonoverlapping(stream[pos..].as_ptr(), dest, n) };
                placing.current_mut().expect("checked").advance(n).expect("at most what is missing");
                finish_placing(&mut placing, &mut rec);
                pos += n;
                Ok(())
            }
            1 if rx.is_empty() => {
                let fed = reader.feed(&stream[pos..pos + size], &mut placing, &mut rec);
                pos += size;
                fed
            }
            _ => {
                reader.drain_into(&mut rx);
                assert!(reader.is_idle());
                let min_cap = usize::from(size as u8) * 16;
                let (spare, room) = rx.spare(min_cap);
                assert!(room >= 1, "spare gave no room");
                let n = size.min(room);
                // SAFETY: `spare` returned `room >= n` writable bytes inside the buffer's
                // allocation, which nothing else touches until `filled`; the stream is separate.
                unsafe { std::ptr::copy_nonoverlapping(stream[pos..].as_ptr(), spare, n) };
                pos += n;
                // As the transport does: the reader's limit is the link's.
                let fed = rx.filled(n, reader.max_frame(), &mut placing, &mut rec);
                assert!(
                    rx.capacity() <= RX_FIRST.max(4 * pos),
                    "the receive buffer grew to {} bytes after {pos} bytes arrived",
                    rx.capacity()
                );
                fed
            }
        };
        if let Err(e) = fed {
            error = Some(e.len);
            break;
        }
    }
    finish(rec, reader, rx, placing, error)
}

/// A stream that is mostly well framed: ordinary and placed frames, now and then a large one
/// (filled with a pattern, so that the receive buffers must grow), and some junk.
fn framed_stream(u: &mut arbitrary::Unstructured<'_>, max_frame: usize) -> arbitrary::Result<Vec<u8>> {
    let mut stream = Vec::new();
    for _ in 0..u.int_in_range(0..=8)? {
        if u.ratio(1u8, 16)? {
            let len = u.int_in_range(0..=max_frame.min(100_000))?;
            let seed: u8 = u.arbitrary()?;
            stream.extend_from_slice(&(len as u32).to_le_bytes());
            stream.extend((0..len).map(|i| (i as u8) ^ seed));
            continue;
        }
        match u.int_in_range(0u8..=7)? {
            0..=3 => {
                let body = zcx_fuzz::gen::bytes_up_to(u, max_frame.min(600))?;
                stream.extend_from_slice(&(body.len() as u32).to_le_bytes());
                stream.extend_from_slice(&body);
            }
            4..=6 => {
                let header = zcx_fuzz::gen::bytes_up_to(u, 64)?;
                let payload = zcx_fuzz::gen::bytes_up_to(u, 2000)?;
                stream.extend_from_slice(&((PREFIX_LEN + header.len()) as u32 | PLACED).to_le_bytes());
                stream.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                stream.extend_from_slice(&header);
                stream.extend_from_slice(&payload);
            }
            _ => stream.extend_from_slice(&zcx_fuzz::gen::bytes_up_to(u, 16)?),
        }
    }
    Ok(stream)
}

fuzz_target!(|data: &[u8]| {
    zcx_fuzz::with_unstructured(data, |u| {
        let framed: bool = u.arbitrary()?;
        let first: usize =
            if u.arbitrary()? { u.int_in_range(0..=1 << 20)? } else { u.int_in_range(0..=64)? };
        let then = first.saturating_add(if u.arbitrary()? { u.int_in_range(0..=1 << 20)? } else { 0 });
        let accept: u64 = u.arbitrary()?;
        let stream = if framed { framed_stream(u, first)? } else { zcx_fuzz::gen::bytes_up_to(u, 4096)? };
        // Past the end of the stream: never raised.
        let at = u.int_in_range(0..=stream.len() + 1)?;
        let limits = Limits { first, at, then };
        let plan = u.bytes(u.len())?;

        let reference = one_piece(&stream, limits, accept);
        assert_eq!(reference, model(&stream, limits, accept), "one-piece feed differs from the framing");
        let split = chunked(&stream, limits, accept, plan);
        assert_eq!(split, reference, "chunked receive differs from the one-piece feed");
        Ok(())
    });
});
