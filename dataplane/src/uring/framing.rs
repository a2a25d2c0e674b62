//! Length-prefix framing for stream sockets, sans-IO.
//!
//! On the wire every frame is a `u32` little-endian length followed by that many bytes.
//! [`FrameReader`] turns received chunks back into frames: a frame lying wholly inside one chunk
//! is handed out as a slice of that chunk (no copy); a frame split across chunks is assembled in
//! a reused `Vec` whose size is bounded by the largest frame allowed.

/// Bytes of the length prefix in front of every frame.
pub const PREFIX_LEN: usize = 4;

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
            assembling: false,
            partial: Vec::new(),
            failed: false,
        }
    }

    /// True when no partial frame is buffered (the stream is at a frame boundary).
    pub fn is_idle(&self) -> bool {
        self.prefix_have == 0 && !self.assembling
    }

    /// Feeds one received chunk, calling `deliver` for every frame it completes, in order.
    ///
    /// After an error the reader stays failed and ignores further input.
    pub fn feed(&mut self, mut data: &[u8], deliver: &mut dyn FnMut(&[u8])) -> Result<(), FrameTooLarge> {
        if self.failed {
            return Err(FrameTooLarge { len: 0 });
        }
        while !data.is_empty() {
            if self.assembling {
                let take = (self.want - self.partial.len()).min(data.len());
                self.partial.extend_from_slice(&data[..take]);
                data = &data[take..];
                if self.partial.len() == self.want {
                    self.assembling = false;
                    deliver(&self.partial);
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
            let len = len as usize;
            if len > self.max_frame {
                self.failed = true;
                return Err(FrameTooLarge { len: len as u64 });
            }
            if data.len() >= len {
                // The whole frame is inside this chunk: lend it straight from there.
                deliver(&data[..len]);
                data = &data[len..];
            } else {
                // Bounded by `max_frame`, so peer input never makes this grow without limit.
                self.partial.reserve(len);
                self.partial.extend_from_slice(data);
                data = &[];
                self.want = len;
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
            rx.append(&prefix(self.want));
            rx.append(&self.partial);
            self.partial.clear();
            self.assembling = false;
        } else if self.prefix_have > 0 {
            rx.append(&self.prefix[..self.prefix_have]);
            self.prefix_have = 0;
        }
    }
}

/// A receive buffer the kernel writes into directly, parsed in place: whole frames are lent
/// straight from it, and a frame in progress is received where it will be delivered from, so
/// large frames are never copied in user space. Only the incomplete tail is moved to the front
/// when the buffer end is near (growing the buffer when the frame is larger than all of it).
#[derive(Debug, Default)]
pub struct RxBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
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

    /// Makes room for at least the rest of the frame in progress, with at least `min_cap` bytes
    /// allocated, and returns where to receive and how much.
    pub fn spare(&mut self, min_cap: usize) -> (*mut u8, usize) {
        self.make_room(0, min_cap);
        let len = self.buf.len() - self.end;
        // SAFETY: `end <= buf.len()`, so the pointer is inside the allocation or one past it.
        (unsafe { self.buf.as_mut_ptr().add(self.end) }, len)
    }

    fn make_room(&mut self, extra: usize, min_cap: usize) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        let held = self.end - self.start;
        // Bytes the frame in progress needs in all (prefix included), or the prefix alone.
        let frame = if held >= PREFIX_LEN {
            let b = &self.buf[self.start..];
            PREFIX_LEN + u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
        } else {
            PREFIX_LEN
        };
        let need = frame.max(held + extra).max(held + 1);
        if self.buf.len() < min_cap.max(need) {
            self.buf.resize(min_cap.max(need).max(self.buf.len() * 2), 0);
        }
        if self.start + need > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end = held;
            self.start = 0;
        }
    }

    /// The kernel wrote `n` bytes at the spot [`RxBuf::spare`] returned: delivers every frame
    /// now complete, in order.
    pub fn filled(
        &mut self,
        n: usize,
        max_frame: usize,
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<(), FrameTooLarge> {
        self.end = (self.end + n).min(self.buf.len());
        while self.end - self.start >= PREFIX_LEN {
            let b = &self.buf[self.start..self.end];
            let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
            if len > max_frame {
                return Err(FrameTooLarge { len: len as u64 });
            }
            if b.len() < PREFIX_LEN + len {
                break;
            }
            deliver(&b[PREFIX_LEN..PREFIX_LEN + len]);
            self.start += PREFIX_LEN + len;
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode(frames: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for f in frames {
            out.extend_from_slice(&prefix(f.len()));
            out.extend_from_slice(f);
        }
        out
    }

    fn collect(reader: &mut FrameReader, chunks: &[&[u8]]) -> Result<Vec<Vec<u8>>, FrameTooLarge> {
        let mut got = Vec::new();
        for c in chunks {
            reader.feed(c, &mut |f| got.push(f.to_vec()))?;
        }
        Ok(got)
    }

    #[test]
    fn whole_chunk_and_empty_frames() {
        let frames = vec![vec![], vec![1], vec![2; 300], vec![]];
        let wire = encode(&frames);
        let mut r = FrameReader::new(1024);
        assert_eq!(collect(&mut r, &[&wire]).unwrap(), frames);
        assert!(r.is_idle());
    }

    #[test]
    fn oversized_length_fails_without_allocating() {
        let mut r = FrameReader::new(1024);
        let err = r.feed(&[0xFF, 0xFF, 0xFF, 0xFF, 1, 2], &mut |_| panic!("no frame")).unwrap_err();
        assert_eq!(err.len, 0xFFFF_FFFF);
        assert!(r.partial.capacity() == 0);
        assert!(r.feed(&[0, 0, 0, 0], &mut |_| panic!("no frame")).is_err());
    }

    fn collect_rx(rx: &mut RxBuf, wire: &[u8], cuts: &[usize], max: usize) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let mut at = 0;
        for &c in cuts.iter().chain(std::iter::once(&wire.len())) {
            while at < c {
                let (ptr, room) = rx.spare(16);
                let n = room.min(c - at);
                // SAFETY: `spare` returned `room` writable bytes at `ptr`.
                unsafe { std::ptr::copy_nonoverlapping(wire[at..].as_ptr(), ptr, n) };
                at += n;
                rx.filled(n, max, &mut |f| got.push(f.to_vec())).unwrap();
            }
        }
        got
    }

    #[test]
    fn rx_buf_takes_over_a_partial_frame_from_the_reader() {
        let frames = vec![vec![3u8; 100], vec![4u8; 7]];
        let wire = encode(&frames);
        let mut r = FrameReader::new(1024);
        let got = collect(&mut r, &[&wire[..30]]).unwrap();
        assert!(got.is_empty());
        assert_eq!(r.missing(), 74);
        let mut rx = RxBuf::default();
        r.drain_into(&mut rx);
        assert!(r.is_idle());
        assert_eq!(collect_rx(&mut rx, &wire[30..], &[], 1024), frames);
        assert!(rx.is_empty());
    }

    proptest! {
        #[test]
        fn rx_buf_any_split_gives_the_same_frames(
            frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 0..20),
            cuts in proptest::collection::vec(0usize..5000, 0..30),
        ) {
            let wire = encode(&frames);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (wire.len() + 1)).collect();
            cuts.sort_unstable();
            let mut rx = RxBuf::default();
            prop_assert_eq!(collect_rx(&mut rx, &wire, &cuts, 200), frames);
            prop_assert!(rx.is_empty());
            prop_assert!(rx.capacity() <= 512);
        }


        #[test]
        fn any_split_gives_the_same_frames(
            frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 0..20),
            cuts in proptest::collection::vec(0usize..5000, 0..30),
        ) {
            let wire = encode(&frames);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (wire.len() + 1)).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut at = 0;
            for c in cuts {
                chunks.push(&wire[at..c]);
                at = c;
            }
            chunks.push(&wire[at..]);
            let mut r = FrameReader::new(200);
            prop_assert_eq!(collect(&mut r, &chunks).unwrap(), frames);
            prop_assert!(r.is_idle());
        }
    }
}
