//! The envelope shared by every zcx control message.
//!
//! ```text
//! offset  size       field
//! 0       4          magic     b"ZCX\0"
//! 4       1          version   1
//! 5       1          kind      FrameKind
//! 6       2          body_len  little-endian, at most MAX_BODY_LEN
//! 8       body_len   body      TLV fields: tag u8, len u16 (little-endian), value
//! 8+len   4          crc32     little-endian CRC-32 (IEEE) of every byte before it
//! ```
//!
//! Decoding checks, in this order: overall length, magic, version, kind, that `body_len` accounts
//! for every byte, the checksum, and only then the fields. The version and kind come before the
//! checksum because a frame of another version may not even end in a CRC, and the checksum comes
//! before any field is looked at so that a corrupted frame is rejected as a whole.

use crate::cursor::{Reader, Writer};
use crate::error::WireError;
use crate::fields::Fields;
use crate::tag_set::TagSet;

/// The four bytes every zcx frame starts with.
pub const MAGIC: [u8; 4] = *b"ZCX\0";
/// The only frame format version this crate reads and writes.
pub const VERSION: u8 = 1;
/// Bytes before the body: magic, version, kind and body length.
pub const HEADER_LEN: usize = 8;
/// Bytes of the CRC-32 trailer.
pub const CRC_LEN: usize = 4;
/// Bytes of a field's tag and length, before its value.
pub const FIELD_HEADER_LEN: usize = 3;
/// The largest frame, header and trailer included, that is ever produced or accepted.
pub const MAX_FRAME_LEN: usize = 4096;
/// The largest body that fits in a [`MAX_FRAME_LEN`] frame.
pub const MAX_BODY_LEN: usize = MAX_FRAME_LEN - HEADER_LEN - CRC_LEN;

/// What a frame carries; decoding for one kind rejects every other one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameKind {
    /// A packed remote key (`ucp_rkey_pack`).
    Rkey = 1,
    /// An exported memory handle (`ucp_memh_pack` with `EXPORT`).
    ExportedMemh = 2,
    /// A worker address (`ucp_worker_query` with `UCP_WORKER_ATTR_FIELD_ADDRESS`, a
    /// `ucp_address_t`).
    WorkerAddress = 3,
    /// A step of the connection handshake over a sockaddr connection (the request a listener sees
    /// through `ucp_conn_request_query`, and its acceptance or `ucp_listener_reject`).
    Handshake = 4,
}

impl FrameKind {
    /// The kind with this wire value, if it is one this crate knows.
    pub fn from_u8(value: u8) -> Option<FrameKind> {
        match value {
            1 => Some(FrameKind::Rkey),
            2 => Some(FrameKind::ExportedMemh),
            3 => Some(FrameKind::WorkerAddress),
            4 => Some(FrameKind::Handshake),
            _ => None,
        }
    }

    /// The wire value of this kind.
    pub fn as_u8(self) -> u8 {
        self as u8
    }
}

/// Builds one frame field by field, then seals it with its length and checksum.
///
/// Problems (an oversized value, a repeated tag, a body over [`MAX_BODY_LEN`]) are remembered and
/// reported by [`FrameWriter::finish`], so a sequence of `field` calls needs no error handling.
#[derive(Debug, Clone)]
pub struct FrameWriter {
    kind: FrameKind,
    body: Writer,
    tags: TagSet,
    error: Option<WireError>,
}

impl FrameWriter {
    /// Starts an empty frame of `kind`.
    pub fn new(kind: FrameKind) -> Self {
        FrameWriter { kind, body: Writer::new(), tags: TagSet::default(), error: None }
    }

    /// Appends a field. Fields are written in call order; decoders accept any order.
    pub fn field(&mut self, tag: u8, value: &[u8]) -> &mut Self {
        if self.error.is_some() {
            return self;
        }
        let Ok(len) = u16::try_from(value.len()) else {
            self.error = Some(WireError::TooLong { len: value.len(), max: usize::from(u16::MAX) });
            return self;
        };
        if !self.tags.insert(tag) {
            self.error = Some(WireError::DuplicateField(tag));
            return self;
        }
        self.body.u8(tag);
        self.body.u16(len);
        self.body.bytes(value);
        if self.body.len() > MAX_BODY_LEN {
            let len = HEADER_LEN + self.body.len() + CRC_LEN;
            self.error = Some(WireError::TooLong { len, max: MAX_FRAME_LEN });
        }
        self
    }

    /// The finished frame, or the first problem met while adding fields.
    pub fn finish(self) -> Result<Vec<u8>, WireError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let body = self.body.into_inner();
        let body_len = u16::try_from(body.len())
            .map_err(|_| WireError::TooLong { len: body.len(), max: MAX_BODY_LEN })?;
        let mut frame = Writer::with_capacity(HEADER_LEN + body.len() + CRC_LEN);
        frame.bytes(&MAGIC);
        frame.u8(VERSION);
        frame.u8(self.kind.as_u8());
        frame.u16(body_len);
        frame.bytes(&body);
        let mut frame = frame.into_inner();
        let crc = crc32fast::hash(&frame);
        frame.extend_from_slice(&crc.to_le_bytes());
        Ok(frame)
    }
}

/// Encodes a whole frame from `(tag, value)` pairs, in the given order.
///
/// Fails with [`WireError::DuplicateField`] for a repeated tag and [`WireError::TooLong`] when a
/// value or the frame exceeds its limit.
pub fn encode_frame(kind: FrameKind, fields: &[(u8, &[u8])]) -> Result<Vec<u8>, WireError> {
    let mut writer = FrameWriter::new(kind);
    for &(tag, value) in fields {
        writer.field(tag, value);
    }
    writer.finish()
}

/// The length of the frame whose first [`HEADER_LEN`] bytes are `header`, from the header alone,
/// for a caller handed only a pointer (UCP's C calls take worker addresses and packed keys
/// without their length). `None` when `header` is short, is not a header of this version, or
/// states a body longer than a frame holds. The frame itself is checked when decoded.
pub fn frame_len(header: &[u8]) -> Option<usize> {
    let header = header.get(..HEADER_LEN)?;
    if header[..4] != MAGIC || header[4] != VERSION {
        return None;
    }
    let body_len = usize::from(u16::from_le_bytes([header[6], header[7]]));
    (body_len <= MAX_BODY_LEN).then_some(HEADER_LEN + body_len + CRC_LEN)
}

/// Checks the envelope of `bytes` and returns its fields for the caller to take.
///
/// `bytes` must be exactly one frame of kind `expected`: a frame of another (or unknown) kind is
/// [`WireError::WrongKind`], bytes after the checksum are [`WireError::TrailingBytes`]. The TLV
/// structure is checked here (every field fits the body, no tag repeats); which fields must be
/// present, and their values, are the caller's business, ending with [`Fields::finish`].
pub fn decode_frame(bytes: &[u8], expected: FrameKind) -> Result<Fields<'_>, WireError> {
    if bytes.len() > MAX_FRAME_LEN {
        return Err(WireError::TooLong { len: bytes.len(), max: MAX_FRAME_LEN });
    }
    if bytes.len() < HEADER_LEN + CRC_LEN {
        return Err(WireError::Truncated { needed: HEADER_LEN + CRC_LEN, have: bytes.len() });
    }
    let mut reader = Reader::new(bytes);
    let magic = reader.array::<4>()?;
    if magic != MAGIC {
        return Err(WireError::BadMagic);
    }
    let version = reader.u8()?;
    if version != VERSION {
        return Err(WireError::UnsupportedVersion(version));
    }
    let kind = reader.u8()?;
    if kind != expected.as_u8() {
        return Err(WireError::WrongKind { expected: expected.as_u8(), found: kind });
    }
    let body_len_bytes = reader.array::<2>()?;
    let body_len = usize::from(u16::from_le_bytes(body_len_bytes));
    if body_len > MAX_BODY_LEN {
        return Err(WireError::TooLong { len: body_len, max: MAX_BODY_LEN });
    }
    let frame_len = HEADER_LEN + body_len + CRC_LEN;
    if bytes.len() < frame_len {
        return Err(WireError::Truncated { needed: frame_len, have: bytes.len() });
    }
    if bytes.len() > frame_len {
        return Err(WireError::TrailingBytes(bytes.len() - frame_len));
    }
    let body = reader.bytes(body_len)?;
    let stored_crc = reader.u32()?;

    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&magic);
    hasher.update(&[version, kind]);
    hasher.update(&body_len_bytes);
    hasher.update(body);
    if hasher.finalize() != stored_crc {
        return Err(WireError::Checksum);
    }
    Fields::parse(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame assembled without `FrameWriter`, so the tests do not only check it against itself.
    fn hand_frame(version: u8, kind: u8, body: &[u8]) -> Vec<u8> {
        let mut frame = b"ZCX\0".to_vec();
        frame.push(version);
        frame.push(kind);
        frame.extend_from_slice(&(body.len() as u16).to_le_bytes());
        frame.extend_from_slice(body);
        let crc = crc32fast::hash(&frame);
        frame.extend_from_slice(&crc.to_le_bytes());
        frame
    }

    #[test]
    fn writer_produces_the_documented_layout() {
        let frame = encode_frame(FrameKind::Rkey, &[(0x81, b"ab"), (0x02, b"")]).unwrap();
        assert_eq!(frame, hand_frame(1, 1, &[0x81, 2, 0, b'a', b'b', 0x02, 0, 0]));
    }

    #[test]
    fn fields_round_trip() {
        let frame = encode_frame(FrameKind::ExportedMemh, &[(0x81, b"abc"), (0x82, b"")]).unwrap();
        let mut fields = decode_frame(&frame, FrameKind::ExportedMemh).unwrap();
        assert_eq!(fields.take(0x82), Some(&b""[..]));
        assert_eq!(fields.take(0x81), Some(&b"abc"[..]));
        assert_eq!(fields.take(0x81), None);
        assert_eq!(fields.finish(), Ok(()));
    }

    #[test]
    fn empty_body_is_a_valid_frame() {
        let frame = hand_frame(1, 2, &[]);
        assert_eq!(frame.len(), HEADER_LEN + CRC_LEN);
        assert!(decode_frame(&frame, FrameKind::ExportedMemh).unwrap().finish().is_ok());
    }

    #[test]
    fn rejects_short_input() {
        assert_eq!(
            decode_frame(&[], FrameKind::Rkey).err(),
            Some(WireError::Truncated { needed: 12, have: 0 })
        );
        let frame = hand_frame(1, 1, &[0x81, 1, 0, 7]);
        let short = frame.get(..frame.len() - 1).unwrap();
        assert_eq!(
            decode_frame(short, FrameKind::Rkey).err(),
            Some(WireError::Truncated { needed: frame.len(), have: frame.len() - 1 })
        );
    }

    #[test]
    fn rejects_oversized_input() {
        let bytes = vec![0; MAX_FRAME_LEN + 1];
        assert_eq!(
            decode_frame(&bytes, FrameKind::Rkey).err(),
            Some(WireError::TooLong { len: MAX_FRAME_LEN + 1, max: MAX_FRAME_LEN })
        );
    }

    #[test]
    fn rejects_body_length_over_the_cap() {
        let mut frame = hand_frame(1, 1, &[]);
        if let Some(len) = frame.get_mut(6..8) {
            len.copy_from_slice(&u16::MAX.to_le_bytes());
        }
        assert_eq!(
            decode_frame(&frame, FrameKind::Rkey).err(),
            Some(WireError::TooLong { len: usize::from(u16::MAX), max: MAX_BODY_LEN })
        );
    }

    #[test]
    fn rejects_bad_magic() {
        let mut frame = hand_frame(1, 1, &[]);
        if let Some(first) = frame.first_mut() {
            *first = b'U';
        }
        assert_eq!(decode_frame(&frame, FrameKind::Rkey).err(), Some(WireError::BadMagic));
    }

    #[test]
    fn rejects_other_versions() {
        for version in [0, 2, 0xFF] {
            let frame = hand_frame(version, 1, &[]);
            assert_eq!(
                decode_frame(&frame, FrameKind::Rkey).err(),
                Some(WireError::UnsupportedVersion(version))
            );
        }
    }

    #[test]
    fn frame_len_reads_the_length_from_the_header_alone() {
        let frame = hand_frame(1, 1, &[0x81, 1, 0, 7]);
        assert_eq!(frame_len(&frame[..HEADER_LEN]), Some(frame.len()));
        assert_eq!(frame_len(&frame[..HEADER_LEN - 1]), None);
        let mut bad_magic = frame.clone();
        bad_magic[0] ^= 1;
        assert_eq!(frame_len(&bad_magic), None);
        let mut other_version = frame.clone();
        other_version[4] = VERSION + 1;
        assert_eq!(frame_len(&other_version), None);
        let mut too_long = frame;
        too_long[6..8].copy_from_slice(&u16::try_from(MAX_BODY_LEN + 1).unwrap().to_le_bytes());
        assert_eq!(frame_len(&too_long), None);
    }

    #[test]
    fn rejects_other_kinds() {
        let frame = hand_frame(1, 1, &[]);
        assert_eq!(
            decode_frame(&frame, FrameKind::ExportedMemh).err(),
            Some(WireError::WrongKind { expected: 2, found: 1 })
        );
        let unknown = hand_frame(1, 9, &[]);
        assert_eq!(
            decode_frame(&unknown, FrameKind::Rkey).err(),
            Some(WireError::WrongKind { expected: 1, found: 9 })
        );
    }

    #[test]
    fn rejects_bad_checksum() {
        let mut frame = hand_frame(1, 1, &[0x81, 1, 0, 7]);
        if let Some(value) = frame.get_mut(11) {
            *value ^= 1;
        }
        assert_eq!(decode_frame(&frame, FrameKind::Rkey).err(), Some(WireError::Checksum));
    }

    #[test]
    fn rejects_trailing_bytes() {
        let mut frame = hand_frame(1, 1, &[]);
        frame.extend_from_slice(&[0, 0, 0]);
        assert_eq!(decode_frame(&frame, FrameKind::Rkey).err(), Some(WireError::TrailingBytes(3)));
    }

    #[test]
    fn rejects_field_running_past_the_body() {
        let frame = hand_frame(1, 1, &[0x81, 5, 0, 1, 2]);
        assert_eq!(
            decode_frame(&frame, FrameKind::Rkey).err(),
            Some(WireError::Truncated { needed: 5, have: 2 })
        );
        let frame = hand_frame(1, 1, &[0x81, 5]);
        assert_eq!(
            decode_frame(&frame, FrameKind::Rkey).err(),
            Some(WireError::Truncated { needed: 2, have: 1 })
        );
    }

    #[test]
    fn rejects_duplicate_tags() {
        let frame = hand_frame(1, 1, &[0x05, 0, 0, 0x05, 1, 0, 9]);
        assert_eq!(decode_frame(&frame, FrameKind::Rkey).err(), Some(WireError::DuplicateField(0x05)));
    }

    #[test]
    fn unknown_critical_tag_fails_finish() {
        let frame = hand_frame(1, 1, &[0x81, 0, 0, 0xC0, 1, 0, 1]);
        let mut fields = decode_frame(&frame, FrameKind::Rkey).unwrap();
        assert!(fields.take(0x81).is_some());
        assert_eq!(fields.finish(), Err(WireError::UnknownCriticalField(0xC0)));
    }

    #[test]
    fn unknown_non_critical_tag_is_skipped() {
        let frame = hand_frame(1, 1, &[0x40, 2, 0, 1, 2, 0x81, 0, 0]);
        let mut fields = decode_frame(&frame, FrameKind::Rkey).unwrap();
        assert!(fields.take(0x81).is_some());
        assert_eq!(fields.finish(), Ok(()));
    }

    #[test]
    fn writer_rejects_duplicates_and_oversize() {
        assert_eq!(encode_frame(FrameKind::Rkey, &[(1, b""), (1, b"")]), Err(WireError::DuplicateField(1)));
        let big = vec![0; MAX_BODY_LEN];
        assert_eq!(
            encode_frame(FrameKind::Rkey, &[(1, &big)]),
            Err(WireError::TooLong { len: MAX_FRAME_LEN + FIELD_HEADER_LEN, max: MAX_FRAME_LEN })
        );
        let fits = vec![0; MAX_BODY_LEN - FIELD_HEADER_LEN];
        let frame = encode_frame(FrameKind::Rkey, &[(1, &fits)]).unwrap();
        assert_eq!(frame.len(), MAX_FRAME_LEN);
        assert!(decode_frame(&frame, FrameKind::Rkey).is_ok());
        let huge = vec![0; usize::from(u16::MAX) + 1];
        assert_eq!(
            encode_frame(FrameKind::Rkey, &[(1, &huge)]),
            Err(WireError::TooLong { len: huge.len(), max: usize::from(u16::MAX) })
        );
    }

    #[test]
    fn frame_kind_values() {
        let kinds =
            [FrameKind::Rkey, FrameKind::ExportedMemh, FrameKind::WorkerAddress, FrameKind::Handshake];
        for (value, kind) in (1u8..).zip(kinds) {
            assert_eq!(kind.as_u8(), value);
            assert_eq!(FrameKind::from_u8(value), Some(kind));
        }
        assert_eq!(FrameKind::from_u8(0), None);
        assert_eq!(FrameKind::from_u8(5), None);
    }
}
