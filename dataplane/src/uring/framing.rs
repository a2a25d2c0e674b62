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

    proptest! {
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
