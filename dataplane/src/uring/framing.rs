//! Length-prefix framing for stream sockets, sans-IO.
//!
//! On the wire every frame is a `u32` little-endian length followed by that many bytes.
//! [`FrameReader`] turns received chunks back into frames: a frame lying wholly inside one chunk
//! is handed out as a slice of that chunk (no copy); a frame split across chunks is assembled in
//! a reused `Vec` whose size is bounded by the largest frame allowed.
//!
//! A *placed* frame has [`PLACED`] set in its length word. The length (without the bit) then
//! covers a `u32` little-endian payload length and the protocol header; the payload follows
//! outside the counted bytes. The receiver sees the header first ([`FrameSink::placed`]) and
//! names where the payload goes, so the payload can be received straight into its final buffer.

use crate::placed_receive::{PlaceDone, PlaceTracker, PlacedReceive};
use crate::transport::PlaceTarget;

/// Bytes of the length prefix in front of every frame.
pub const PREFIX_LEN: usize = 4;

/// The length-word bit marking a placed frame.
pub const PLACED: u32 = 1 << 31;

/// Largest protocol header a placed frame may carry.
pub const MAX_PLACED_HEADER: usize = 4096;

/// Where parsed frames go.
pub trait FrameSink {
    /// A whole ordinary frame, lent for this call.
    fn frame(&mut self, bytes: &[u8]);
    /// The header of a placed frame with `len` payload bytes to come: where they go, or `None`
    /// to drop them.
    fn placed(&mut self, header: &[u8], len: usize) -> Option<PlaceTarget>;
    /// Every payload byte of a placed frame with a destination has been written.
    fn place_done(&mut self, done: PlaceDone);
}

/// Ends the placement in `placing` if its payload is complete.
pub fn finish_placing(placing: &mut PlaceTracker, sink: &mut dyn FrameSink) {
    if let Some(done) = placing.take_complete().and_then(PlacedReceive::complete) {
        sink.place_done(done);
    }
}

/// The frame length a length word announces, and whether the frame is a placed header.
fn announced(word: u32, max_frame: usize) -> Result<(usize, bool), FrameTooLarge> {
    if word & PLACED != 0 {
        let len = (word & !PLACED) as usize;
        if !(PREFIX_LEN..=PREFIX_LEN + MAX_PLACED_HEADER).contains(&len) {
            return Err(FrameTooLarge { len: u64::from(word) });
        }
        Ok((len, true))
    } else if word as usize > max_frame {
        Err(FrameTooLarge { len: u64::from(word) })
    } else {
        Ok((word as usize, false))
    }
}

/// Hands a complete frame body to the sink: an ordinary frame, or a placed header that starts a
/// placement.
fn dispatch(body: &[u8], placed: bool, placing: &mut PlaceTracker, sink: &mut dyn FrameSink) {
    if !placed {
        sink.frame(body);
        return;
    }
    let len = u32::from_le_bytes([body[0], body[1], body[2], body[3]]) as usize;
    let target = sink.placed(&body[PREFIX_LEN..], len);
    // SAFETY: a target the sink returned is writable for `len` bytes until its PlaceDone
    // (`FrameSink::placed`, `PlaceTarget::new`). Never refused: a frame is parsed only once
    // the placement before it has ended.
    let started = unsafe { placing.start(target, len) };
    debug_assert!(started.is_ok(), "a placed frame parsed inside another one");
    finish_placing(placing, sink);
}

/// The peer announced a frame longer than the limit: the stream cannot be trusted any more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameTooLarge {
    /// The announced length.
    pub len: u64,
}

/// Reassembles length-prefixed frames from a byte stream delivered in arbitrary chunks.
#[derive(Debug)]
pub struct FrameReader {
    max_frame: usize,
    /// Bytes of a length prefix that straddled a chunk boundary.
    prefix: [u8; PREFIX_LEN],
    prefix_have: usize,
    /// Length of the frame being assembled in `partial` (valid while `assembling`).
    want: usize,
    /// The frame being assembled is a placed header.
    want_placed: bool,
    assembling: bool,
    partial: Vec<u8>,
    failed: bool,
}

impl FrameReader {
    /// A reader refusing frames longer than `max_frame` bytes.
    pub fn new(max_frame: usize) -> FrameReader {
        FrameReader {
            max_frame,
            prefix: [0; PREFIX_LEN],
            prefix_have: 0,
            want: 0,
            want_placed: false,
            assembling: false,
            partial: Vec::new(),
            failed: false,
        }
    }

    /// The largest frame the reader accepts now.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Changes the largest frame accepted from the next length prefix on (a link that completed
    /// its handshake is allowed more than one that has not).
    pub fn set_max_frame(&mut self, max_frame: usize) {
        self.max_frame = max_frame;
    }

    /// True when no partial frame is buffered (the stream is at a frame boundary).
    pub fn is_idle(&self) -> bool {
        self.prefix_have == 0 && !self.assembling
    }

    /// Feeds one received chunk, telling `sink` about every frame it completes, in order; the
    /// payload of a placed frame goes through `placing`.
    ///
    /// After an error the reader stays failed and ignores further input.
    pub fn feed(
        &mut self,
        mut data: &[u8],
        placing: &mut PlaceTracker,
        sink: &mut dyn FrameSink,
    ) -> Result<(), FrameTooLarge> {
        if self.failed {
            return Err(FrameTooLarge { len: 0 });
        }
        while !data.is_empty() {
            if let Some(p) = placing.current_mut() {
                let take = p.absorb(data);
                data = &data[take..];
                finish_placing(placing, sink);
                continue;
            }
            if self.assembling {
                let take = (self.want - self.partial.len()).min(data.len());
                self.partial.extend_from_slice(&data[..take]);
                data = &data[take..];
                if self.partial.len() == self.want {
                    self.assembling = false;
                    dispatch(&self.partial, self.want_placed, placing, sink);
                    self.partial.clear();
                }
                continue;
            }
            let len = if self.prefix_have > 0 {
                let take = (PREFIX_LEN - self.prefix_have).min(data.len());
                self.prefix[self.prefix_have..self.prefix_have + take].copy_from_slice(&data[..take]);
                self.prefix_have += take;
                data = &data[take..];
                if self.prefix_have < PREFIX_LEN {
                    return Ok(());
                }
                self.prefix_have = 0;
                u32::from_le_bytes(self.prefix)
            } else if data.len() >= PREFIX_LEN {
                let len = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
                data = &data[PREFIX_LEN..];
                len
            } else {
                self.prefix[..data.len()].copy_from_slice(data);
                self.prefix_have = data.len();
                return Ok(());
            };
            let (len, placed) = match announced(len, self.max_frame) {
                Ok(announced) => announced,
                Err(err) => {
                    self.failed = true;
                    return Err(err);
                }
            };
            if data.len() >= len {
                // The whole frame is inside this chunk: lend it straight from there.
                dispatch(&data[..len], placed, placing, sink);
                data = &data[len..];
            } else {
                // Grown by what arrives, not by the announced `len` (which is bounded by
                // `max_frame` all the same): a peer that announces much and sends little is
                // given little.
                self.partial.extend_from_slice(data);
                data = &[];
                self.want = len;
                self.want_placed = placed;
                self.assembling = true;
            }
        }
        Ok(())
    }
}

impl FrameReader {
    /// Bytes still missing from the frame being assembled (0 at a frame boundary or while only
    /// part of a length prefix is known).
    pub fn missing(&self) -> usize {
        if self.assembling {
            self.want - self.partial.len()
        } else {
            0
        }
    }

    /// Moves the buffered, not yet delivered stream bytes (a partial prefix, or a prefix and the
    /// start of its frame) to `rx`, leaving this reader idle.
    pub fn drain_into(&mut self, rx: &mut RxBuf) {
        if self.assembling {
            let word = if self.want_placed { self.want as u32 | PLACED } else { self.want as u32 };
            rx.append(&word.to_le_bytes());
            rx.append(&self.partial);
            self.partial.clear();
            self.assembling = false;
        } else if self.prefix_have > 0 {
            rx.append(&self.prefix[..self.prefix_have]);
            self.prefix_have = 0;
        }
    }
}

/// The first size of an empty receive buffer (when the frame or the caller asks for as much).
pub const RX_FIRST: usize = 64 << 10;

/// A receive buffer the kernel writes into directly, parsed in place: whole frames are lent
/// straight from it, and a frame in progress is received where it will be delivered from, so
/// large frames are never copied in user space. Only the incomplete tail is moved to the front
/// when the buffer end is near.
///
/// The buffer grows by what arrives, never by what a length prefix announces: see
/// [`rx_grown_len`]. A peer that announces a large frame and sends a byte costs [`RX_FIRST`]
/// at most; one that sends the frame gets a buffer that holds it whole after a few doublings.
#[derive(Debug, Default)]
pub struct RxBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The last receive brought at least half the buffer's size: traffic that earns a larger one.
    busy: bool,
}

/// The length to grow a receive buffer of `len` bytes to, when it holds `held` bytes of a frame
/// in progress, must fit `need` bytes now, and would at most hold `goal` (the whole frame in
/// progress, or the caller's preferred size). `busy`: the last receive filled half of it.
///
/// Growth is earned by bytes that arrived: the buffer at most doubles over what it holds, or
/// over its size after a receive that filled half of it, and starts at [`RX_FIRST`]. Never
/// below `need`, never above `goal` (unless `need` is); never shrinks.
pub fn rx_grown_len(len: usize, held: usize, need: usize, goal: usize, busy: bool) -> usize {
    let earned = RX_FIRST.max(held.saturating_mul(2)).max(if busy { len.saturating_mul(2) } else { 0 });
    earned.min(goal).max(need).max(len)
}

impl RxBuf {
    /// True when no undelivered byte is held.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Bytes allocated.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Appends stream bytes received elsewhere.
    pub fn append(&mut self, bytes: &[u8]) {
        self.make_room(bytes.len(), bytes.len());
        self.buf[self.end..self.end + bytes.len()].copy_from_slice(bytes);
        self.end += bytes.len();
    }

    /// Makes room to receive at least one byte, growing the buffer toward `min_cap` bytes (or
    /// the whole frame in progress, when larger) as far as the bytes that arrived earn (see
    /// [`rx_grown_len`]), and returns where to receive and how much.
    pub fn spare(&mut self, min_cap: usize) -> (*mut u8, usize) {
        self.make_room(0, min_cap);
        let len = self.buf.len() - self.end;
        // SAFETY: `end <= buf.len()`, so the pointer is inside the allocation or one past it.
        (unsafe { self.buf.as_mut_ptr().add(self.end) }, len)
    }

    /// Bytes the frame in progress needs in all (prefix included), or the prefix alone while
    /// fewer bytes than a prefix are held.
    fn frame_len(&self) -> usize {
        if self.end - self.start >= PREFIX_LEN {
            let b = &self.buf[self.start..];
            PREFIX_LEN + (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) & !PLACED) as usize
        } else {
            PREFIX_LEN
        }
    }

    fn make_room(&mut self, extra: usize, min_cap: usize) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        let held = self.end - self.start;
        let frame = self.frame_len();
        let need = (held + extra).max(held + 1);
        let goal = frame.max(min_cap);
        if self.buf.len() < goal.max(need) {
            let len = rx_grown_len(self.buf.len(), held, need, goal, self.busy);
            if len > self.buf.len() {
                self.buf.resize(len, 0);
            }
        }
        self.busy = false;
        // Keep the frame in progress where it can be completed in place: at the front when it
        // does not fit behind its start.
        if self.start > 0 && self.start + frame.max(need) > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end = held;
            self.start = 0;
        }
    }

    /// Bytes held that belong to a frame not yet complete.
    pub fn held(&self) -> usize {
        self.end - self.start
    }

    /// Bytes still missing from the frame (or length prefix) held, 0 when nothing is held.
    pub fn missing(&self) -> usize {
        let held = self.held();
        if held == 0 {
            0
        } else if held < PREFIX_LEN {
            PREFIX_LEN - held
        } else {
            let b = &self.buf[self.start..];
            let word = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) & !PLACED;
            (PREFIX_LEN + word as usize).saturating_sub(held)
        }
    }

    /// The kernel wrote `n` bytes at the spot [`RxBuf::spare`] returned: tells `sink` about
    /// every frame now complete, in order, and hands placed payload bytes to `placing`. A
    /// placement is never left waiting while bytes are held: they are all its own.
    pub fn filled(
        &mut self,
        n: usize,
        max_frame: usize,
        placing: &mut PlaceTracker,
        sink: &mut dyn FrameSink,
    ) -> Result<(), FrameTooLarge> {
        self.end = (self.end + n).min(self.buf.len());
        self.busy = n.saturating_mul(2) >= self.buf.len();
        loop {
            if let Some(p) = placing.current_mut() {
                self.start += p.absorb(&self.buf[self.start..self.end]);
                finish_placing(placing, sink);
                if placing.is_placing() {
                    break;
                }
                continue;
            }
            if self.end - self.start < PREFIX_LEN {
                break;
            }
            let b = &self.buf[self.start..self.end];
            let (len, placed) = announced(u32::from_le_bytes([b[0], b[1], b[2], b[3]]), max_frame)?;
            if b.len() < PREFIX_LEN + len {
                break;
            }
            self.start += PREFIX_LEN + len;
            dispatch(&b[PREFIX_LEN..PREFIX_LEN + len], placed, placing, sink);
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        Ok(())
    }
}

/// Encodes the length prefix of a frame of `len` bytes.
pub fn prefix(len: usize) -> [u8; PREFIX_LEN] {
    (len as u32).to_le_bytes()
}

/// Encodes the length prefix of a placed frame whose header (payload length word included) is
/// `header_len` bytes.
pub fn placed_prefix(header_len: usize) -> [u8; PREFIX_LEN] {
    (header_len as u32 | PLACED).to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What a stream carries, and what a receiver should see of it.
    #[derive(Clone, Debug, PartialEq)]
    enum Item {
        Frame(Vec<u8>),
        /// A placed frame; the receiver keeps the payload when the header's first byte is even
        /// (or the header is empty), and sees no payload otherwise.
        Placed {
            header: Vec<u8>,
            payload: Vec<u8>,
        },
    }

    fn keeps(header: &[u8]) -> bool {
        header.first().is_none_or(|b| b % 2 == 0)
    }

    fn encode(items: &[Item]) -> Vec<u8> {
        let mut out = Vec::new();
        for item in items {
            match item {
                Item::Frame(f) => {
                    out.extend_from_slice(&prefix(f.len()));
                    out.extend_from_slice(f);
                }
                Item::Placed { header, payload } => {
                    out.extend_from_slice(&placed_prefix(PREFIX_LEN + header.len()));
                    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                    out.extend_from_slice(header);
                    out.extend_from_slice(payload);
                }
            }
        }
        out
    }

    /// What the receiver should report for `items`.
    fn seen(items: &[Item]) -> Vec<Item> {
        items
            .iter()
            .map(|item| match item {
                Item::Placed { header, .. } if !keeps(header) => {
                    Item::Placed { header: header.clone(), payload: Vec::new() }
                }
                other => other.clone(),
            })
            .collect()
    }

    /// A receiver placing kept payloads into buffers of its own.
    #[derive(Default)]
    struct Collect {
        got: Vec<Item>,
        dests: Vec<Vec<u8>>,
        headers: Vec<Vec<u8>>,
        open: usize,
    }

    impl FrameSink for Collect {
        fn frame(&mut self, bytes: &[u8]) {
            self.got.push(Item::Frame(bytes.to_vec()));
        }

        fn placed(&mut self, header: &[u8], len: usize) -> Option<PlaceTarget> {
            if !keeps(header) {
                self.got.push(Item::Placed { header: header.to_vec(), payload: Vec::new() });
                return None;
            }
            // Filled with a marker so bytes not written show up in the comparison.
            self.dests.push(vec![0xA5; len]);
            self.headers.push(header.to_vec());
            self.open += 1;
            let token = (self.dests.len() - 1) as u64;
            // SAFETY: the Vec's heap buffer stays put (moving the Vec does not move it) and is
            // only looked at again in `place_done`.
            Some(unsafe { PlaceTarget::new(self.dests[token as usize].as_mut_ptr(), token) })
        }

        fn place_done(&mut self, done: PlaceDone) {
            assert_eq!(done.result, Ok(()));
            self.open -= 1;
            let i = done.token as usize;
            self.got.push(Item::Placed { header: self.headers[i].clone(), payload: self.dests[i].clone() });
        }
    }

    fn split<'a>(wire: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
        cuts.sort_unstable();
        let mut chunks = Vec::new();
        let mut at = 0;
        for c in cuts {
            chunks.push(&wire[at..c]);
            at = c;
        }
        chunks.push(&wire[at..]);
        chunks
    }

    /// Receives `chunks` the way the transport does in single-shot mode: into the `RxBuf`, or,
    /// while a placement with a destination is open and nothing is held, straight into it.
    fn drive_rx(
        rx: &mut RxBuf,
        placing: &mut PlaceTracker,
        sink: &mut Collect,
        chunks: &[&[u8]],
        max: usize,
    ) -> Result<(), FrameTooLarge> {
        for chunk in chunks {
            let mut data = *chunk;
            while !data.is_empty() {
                let direct = placing.current().and_then(PlacedReceive::next_dest).filter(|_| rx.held() == 0);
                if let Some((dest, missing)) = direct {
                    let n = missing.min(data.len());
                    // SAFETY: `next_dest` gave `missing` writable bytes at `dest`.
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dest, n) };
                    placing.current_mut().expect("open").advance(n).expect("no more than missing");
                    finish_placing(placing, sink);
                    data = &data[n..];
                    continue;
                }
                let (ptr, room) = rx.spare(16);
                let n = room.min(data.len());
                // SAFETY: `spare` returned `room` writable bytes at `ptr`.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, n) };
                data = &data[n..];
                rx.filled(n, max, placing, sink)?;
            }
        }
        Ok(())
    }

    fn feed_all(
        reader: &mut FrameReader,
        placing: &mut PlaceTracker,
        sink: &mut Collect,
        chunks: &[&[u8]],
    ) -> Result<(), FrameTooLarge> {
        for c in chunks {
            reader.feed(c, placing, sink)?;
        }
        Ok(())
    }

    fn item() -> impl Strategy<Value = Item> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..200).prop_map(Item::Frame),
            (proptest::collection::vec(any::<u8>(), 0..40), proptest::collection::vec(any::<u8>(), 0..700))
                .prop_map(|(header, payload)| Item::Placed { header, payload }),
        ]
    }

    #[test]
    fn whole_chunk_and_empty_frames() {
        let items =
            vec![Item::Frame(vec![]), Item::Frame(vec![1]), Item::Frame(vec![2; 300]), Item::Frame(vec![])];
        let wire = encode(&items);
        let (mut r, mut placing, mut sink) =
            (FrameReader::new(1024), PlaceTracker::default(), Collect::default());
        feed_all(&mut r, &mut placing, &mut sink, &[&wire]).unwrap();
        assert_eq!(sink.got, items);
        assert!(r.is_idle());
    }

    #[test]
    fn oversized_length_fails_without_allocating() {
        let (mut r, mut placing, mut sink) =
            (FrameReader::new(1024), PlaceTracker::default(), Collect::default());
        let err = r.feed(&[0xFF, 0xFF, 0xFF, 0x7F, 1, 2], &mut placing, &mut sink).unwrap_err();
        assert_eq!(err.len, 0x7FFF_FFFF);
        assert!(r.partial.capacity() == 0);
        assert!(r.feed(&[0, 0, 0, 0], &mut placing, &mut sink).is_err());
        assert!(sink.got.is_empty());
    }

    #[test]
    fn placed_header_lengths_out_of_bounds_fail() {
        for word in [PLACED, PLACED | 3, PLACED | (PREFIX_LEN + MAX_PLACED_HEADER + 1) as u32, u32::MAX] {
            let (mut r, mut placing, mut sink) =
                (FrameReader::new(1 << 20), PlaceTracker::default(), Collect::default());
            let mut wire = word.to_le_bytes().to_vec();
            wire.extend_from_slice(&[0; 64]);
            assert!(r.feed(&wire, &mut placing, &mut sink).is_err(), "{word:#x}");
            let mut rx = RxBuf::default();
            let (mut placing, mut sink) = (PlaceTracker::default(), Collect::default());
            assert!(drive_rx(&mut rx, &mut placing, &mut sink, &[&wire], 1 << 20).is_err(), "{word:#x}");
            assert!(sink.got.is_empty() && !placing.is_placing());
        }
    }

    #[test]
    fn placed_payload_lands_in_the_destination_and_frames_follow() {
        let items = vec![
            Item::Placed { header: vec![2, 9], payload: (0..=255).collect() },
            Item::Frame(vec![7; 10]),
            Item::Placed { header: vec![1], payload: vec![3; 50] },
            Item::Placed { header: vec![], payload: vec![] },
            Item::Frame(vec![]),
        ];
        let wire = encode(&items);
        let (mut r, mut placing, mut sink) =
            (FrameReader::new(1024), PlaceTracker::default(), Collect::default());
        feed_all(&mut r, &mut placing, &mut sink, &[&wire[..13], &wire[13..100], &wire[100..]]).unwrap();
        assert_eq!(sink.got, seen(&items));
        assert_eq!(sink.open, 0);
        assert!(!placing.is_placing() && r.is_idle());
    }

    #[test]
    fn rx_buf_takes_over_a_partial_frame_from_the_reader() {
        let items = vec![Item::Frame(vec![3u8; 100]), Item::Frame(vec![4u8; 7])];
        let wire = encode(&items);
        let (mut r, mut placing, mut sink) =
            (FrameReader::new(1024), PlaceTracker::default(), Collect::default());
        feed_all(&mut r, &mut placing, &mut sink, &[&wire[..30]]).unwrap();
        assert!(sink.got.is_empty());
        assert_eq!(r.missing(), 74);
        let mut rx = RxBuf::default();
        r.drain_into(&mut rx);
        assert!(r.is_idle());
        drive_rx(&mut rx, &mut placing, &mut sink, &[&wire[30..]], 1024).unwrap();
        assert_eq!(sink.got, items);
        assert!(rx.is_empty());
    }

    /// Receives `data` into `rx` the way the transport's single-shot receives do, at most
    /// `chunk` bytes per receive, asking `spare` for `min_cap`; returns the largest capacity seen.
    fn receive_in_chunks(
        rx: &mut RxBuf,
        sink: &mut Collect,
        data: &[u8],
        chunk: usize,
        min_cap: usize,
        max: usize,
    ) -> usize {
        let (mut placing, mut at, mut most) = (PlaceTracker::default(), 0, 0);
        while at < data.len() {
            let (ptr, room) = rx.spare(min_cap);
            most = most.max(rx.capacity());
            // Growth is paid for by bytes that arrived, the announcement aside.
            assert!(
                rx.capacity() <= RX_FIRST.max(2 * at.saturating_add(chunk)),
                "{} after {at}",
                rx.capacity()
            );
            let n = room.min(chunk).min(data.len() - at);
            // SAFETY: `spare` returned `room` writable bytes at `ptr`.
            unsafe { std::ptr::copy_nonoverlapping(data[at..].as_ptr(), ptr, n) };
            at += n;
            rx.filled(n, max, &mut placing, sink).unwrap();
        }
        most
    }

    #[test]
    fn an_announced_frame_is_not_allocated_before_its_bytes_arrive() {
        // What the transport does when a link switches to bulk receives: the bytes the reader
        // held move to the link's buffer, which is then offered to the kernel.
        let mut reader = FrameReader::new(1 << 20);
        let (mut placing, mut sink) = (PlaceTracker::default(), Collect::default());
        let mut wire = prefix(200 << 10).to_vec();
        wire.push(0xAB);
        reader.feed(&wire, &mut placing, &mut sink).unwrap();
        assert!(reader.partial.capacity() < 64, "the reader reserved {}", reader.partial.capacity());
        let mut rx = RxBuf::default();
        reader.drain_into(&mut rx);
        let (_, room) = rx.spare(1 << 20);
        assert!(rx.capacity() <= RX_FIRST, "{} bytes for 5 that arrived", rx.capacity());
        assert!(room > 0);
        assert_eq!(rx.missing(), (200 << 10) - 1);
    }

    #[test]
    fn a_frame_that_really_arrives_is_received_whole_into_a_buffer_grown_by_doubling() {
        let frame = pattern_frame(200 << 10);
        let wire = [&prefix(frame.len())[..], &frame].concat();
        for chunk in [1000, 16 << 10, 1 << 20] {
            let (mut rx, mut sink) = (RxBuf::default(), Collect::default());
            let most = receive_in_chunks(&mut rx, &mut sink, &wire, chunk, 1 << 20, 1 << 20);
            assert_eq!(sink.got, vec![Item::Frame(frame.clone())], "chunk {chunk}");
            assert!(most <= 2 * wire.len(), "chunk {chunk}: grew to {most}");
            assert!(rx.is_empty());
        }
    }

    #[test]
    fn a_busy_link_grows_its_buffer_toward_the_asked_size_and_no_further() {
        // Small frames in receives that fill the buffer: the buffer doubles up to `min_cap`.
        let items: Vec<Item> = (0..20_000).map(|i| Item::Frame(vec![i as u8; 100])).collect();
        let wire = encode(&items);
        let (mut rx, mut sink) = (RxBuf::default(), Collect::default());
        let most = receive_in_chunks(&mut rx, &mut sink, &wire, 1 << 30, 1 << 20, 1 << 20);
        assert_eq!(sink.got, items);
        assert_eq!(most, 1 << 20);
        // Receives of a few bytes earn nothing beyond the first size.
        let (mut rx, mut sink) = (RxBuf::default(), Collect::default());
        let most = receive_in_chunks(&mut rx, &mut sink, &wire[..200_000], 300, 1 << 20, 1 << 20);
        assert_eq!(most, RX_FIRST);
        assert_eq!(sink.got.len(), 200_000 / 104);
    }

    #[test]
    fn a_reader_limited_to_a_handshake_refuses_more_until_raised() {
        let limit = crate::transport::MAX_HANDSHAKE_FRAME;
        let (mut r, mut placing, mut sink) =
            (FrameReader::new(limit), PlaceTracker::default(), Collect::default());
        let fits = vec![7u8; limit];
        feed_all(&mut r, &mut placing, &mut sink, &[&prefix(limit), &fits]).unwrap();
        r.set_max_frame(1 << 20);
        let big = vec![8u8; limit + 1];
        feed_all(&mut r, &mut placing, &mut sink, &[&prefix(big.len()), &big]).unwrap();
        assert_eq!(sink.got, vec![Item::Frame(fits), Item::Frame(big)]);
        let (mut r, mut sink) = (FrameReader::new(limit), Collect::default());
        let err = r.feed(&prefix(limit + 1), &mut placing, &mut sink).unwrap_err();
        assert_eq!(err.len, limit as u64 + 1);
        let mut rx = RxBuf::default();
        let wire = [&prefix(limit + 1)[..], &[0]].concat();
        assert!(drive_rx(&mut rx, &mut placing, &mut sink, &[&wire], limit).is_err());
        assert!(sink.got.is_empty());
    }

    fn pattern_frame(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(7) ^ (i >> 8) as u8).collect()
    }

    proptest! {
        #[test]
        fn any_split_through_the_reader_gives_the_same_items(
            items in proptest::collection::vec(item(), 0..20),
            cuts in proptest::collection::vec(0usize..20_000, 0..30),
        ) {
            let wire = encode(&items);
            let (mut r, mut placing, mut sink) = (FrameReader::new(200), PlaceTracker::default(), Collect::default());
            feed_all(&mut r, &mut placing, &mut sink, &split(&wire, &cuts)).unwrap();
            prop_assert_eq!(sink.got, seen(&items));
            prop_assert!(r.is_idle() && !placing.is_placing() && sink.open == 0);
        }

        #[test]
        fn any_split_through_the_rx_buf_gives_the_same_items(
            items in proptest::collection::vec(item(), 0..20),
            cuts in proptest::collection::vec(0usize..20_000, 0..30),
        ) {
            let wire = encode(&items);
            let (mut rx, mut placing, mut sink) = (RxBuf::default(), PlaceTracker::default(), Collect::default());
            drive_rx(&mut rx, &mut placing, &mut sink, &split(&wire, &cuts), 200).unwrap();
            prop_assert_eq!(sink.got, seen(&items));
            prop_assert!(rx.is_empty() && !placing.is_placing() && sink.open == 0);
            prop_assert!(rx.capacity() <= 512);
        }

        /// The growth rule: never below what must fit or what is there, never above the goal
        /// unless that must fit, and at most double what arrived (or the first size).
        #[test]
        fn rx_growth_is_bounded_by_what_arrived(
            len in 0usize..1 << 22,
            held in 0usize..1 << 22,
            extra in 0usize..1 << 16,
            goal in 0usize..1 << 22,
            busy in any::<bool>(),
        ) {
            let held = held.min(len);
            let need = held + extra.max(1);
            let grown = rx_grown_len(len, held, need, goal, busy);
            prop_assert!(grown >= need && grown >= len);
            prop_assert!(grown <= goal.max(need).max(len));
            let earned = RX_FIRST.max(2 * held).max(if busy { 2 * len } else { 0 });
            prop_assert!(grown <= earned.max(need).max(len));
        }

        /// The transport's switch from multishot to single-shot receives, at any byte.
        #[test]
        fn switching_parsers_midway_loses_nothing(
            items in proptest::collection::vec(item(), 0..20),
            cuts in proptest::collection::vec(0usize..20_000, 0..30),
            switch in 0usize..20_000,
        ) {
            let wire = encode(&items);
            let switch = switch % (wire.len() + 1);
            let (mut r, mut placing, mut sink) = (FrameReader::new(200), PlaceTracker::default(), Collect::default());
            feed_all(&mut r, &mut placing, &mut sink, &split(&wire[..switch], &cuts)).unwrap();
            let mut rx = RxBuf::default();
            r.drain_into(&mut rx);
            drive_rx(&mut rx, &mut placing, &mut sink, &split(&wire[switch..], &cuts), 200).unwrap();
            prop_assert_eq!(sink.got, seen(&items));
            prop_assert!(rx.is_empty() && !placing.is_placing() && sink.open == 0);
        }

        /// Bytes from a hostile peer: random, or a valid stream with bytes flipped. Either parser
        /// reports an error or some frames, never panics, and only writes inside destinations
        /// (the destination buffers are exactly `len` long, so a stray write would be caught by
        /// the allocator checks of the test build or the marker comparison).
        #[test]
        fn hostile_bytes_never_panic(
            items in proptest::collection::vec(item(), 0..10),
            flips in proptest::collection::vec((0usize..10_000, any::<u8>()), 0..8),
            noise in proptest::collection::vec(any::<u8>(), 0..600),
            cuts in proptest::collection::vec(0usize..20_000, 0..10),
        ) {
            let mut wire = encode(&items);
            for (at, byte) in flips {
                if !wire.is_empty() {
                    let at = at % wire.len();
                    wire[at] ^= byte;
                }
            }
            wire.extend_from_slice(&noise);
            let chunks = split(&wire, &cuts);
            let (mut r, mut placing, mut sink) = (FrameReader::new(200), PlaceTracker::default(), Collect::default());
            let _ = feed_all(&mut r, &mut placing, &mut sink, &chunks);
            let (mut rx, mut placing, mut sink) = (RxBuf::default(), PlaceTracker::default(), Collect::default());
            let _ = drive_rx(&mut rx, &mut placing, &mut sink, &chunks, 200);
            prop_assert!(rx.capacity() <= 4096 + 2 * (PREFIX_LEN + MAX_PLACED_HEADER));
        }
    }
}
