//! Checked sequential access to byte buffers.
//!
//! Every read from untrusted bytes goes through [`Reader`], which reports a short buffer as
//! [`WireError::Truncated`] instead of panicking, so no decoder ever indexes a slice directly.
//! [`Writer`] is its counterpart for building buffers; all integers are little-endian.

use crate::error::WireError;

/// A cursor over untrusted bytes whose reads fail with [`WireError::Truncated`] instead of
/// panicking.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Starts reading at the first byte of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    /// Takes the next `n` bytes, borrowed from the input.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        match self.rest.split_at_checked(n) {
            Some((taken, rest)) => {
                self.rest = rest;
                Ok(taken)
            }
            None => Err(WireError::Truncated { needed: n, have: self.rest.len() }),
        }
    }

    /// Takes the next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let taken = self.bytes(N)?;
        // `bytes` returned exactly N bytes, so the conversion cannot fail; mapping the error keeps
        // this path panic-free by construction rather than by argument.
        <[u8; N]>::try_from(taken).map_err(|_| WireError::Truncated { needed: N, have: taken.len() })
    }

    /// Reads one byte.
    pub fn u8(&mut self) -> Result<u8, WireError> {
        self.array::<1>().map(|[b]| b)
    }

    /// Reads a little-endian `u16`.
    pub fn u16(&mut self) -> Result<u16, WireError> {
        self.array().map(u16::from_le_bytes)
    }

    /// Reads a little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, WireError> {
        self.array().map(u32::from_le_bytes)
    }

    /// Reads a little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, WireError> {
        self.array().map(u64::from_le_bytes)
    }

    /// Number of bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
}

/// An append-only little-endian buffer builder, the encoding counterpart of [`Reader`].
#[derive(Debug, Clone, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Writer::default()
    }

    /// An empty writer that can hold `capacity` bytes before reallocating.
    pub fn with_capacity(capacity: usize) -> Self {
        Writer { buf: Vec::with_capacity(capacity) }
    }

    /// Appends one byte.
    pub fn u8(&mut self, value: u8) {
        self.buf.push(value);
    }

    /// Appends a little-endian `u16`.
    pub fn u16(&mut self, value: u16) {
        self.bytes(&value.to_le_bytes());
    }

    /// Appends a little-endian `u32`.
    pub fn u32(&mut self, value: u32) {
        self.bytes(&value.to_le_bytes());
    }

    /// Appends a little-endian `u64`.
    pub fn u64(&mut self, value: u64) {
        self.bytes(&value.to_le_bytes());
    }

    /// Appends raw bytes.
    pub fn bytes(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Number of bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing has been written yet.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes written.
    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_integers_in_order() {
        let mut w = Writer::new();
        w.u8(0xAB);
        w.u16(0x1234);
        w.u32(0xDEAD_BEEF);
        w.u64(0x0102_0304_0506_0708);
        w.bytes(b"xyz");
        let bytes = w.into_inner();
        assert_eq!(bytes.get(1..3), Some(&[0x34, 0x12][..]));

        let mut r = Reader::new(&bytes);
        assert_eq!(r.u8(), Ok(0xAB));
        assert_eq!(r.u16(), Ok(0x1234));
        assert_eq!(r.u32(), Ok(0xDEAD_BEEF));
        assert_eq!(r.u64(), Ok(0x0102_0304_0506_0708));
        assert_eq!(r.remaining(), 3);
        assert_eq!(r.array::<3>(), Ok(*b"xyz"));
        assert!(r.is_empty());
    }

    #[test]
    fn short_reads_report_truncation_and_consume_nothing() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u32(), Err(WireError::Truncated { needed: 4, have: 3 }));
        assert_eq!(r.bytes(usize::MAX), Err(WireError::Truncated { needed: usize::MAX, have: 3 }));
        assert_eq!(r.remaining(), 3);
        assert_eq!(r.u16(), Ok(0x0201));
        assert_eq!(r.u16(), Err(WireError::Truncated { needed: 2, have: 1 }));
        assert_eq!(r.u8(), Ok(3));
        assert_eq!(r.u8(), Err(WireError::Truncated { needed: 1, have: 0 }));
        assert_eq!(r.bytes(0), Ok(&[][..]));
    }
}
