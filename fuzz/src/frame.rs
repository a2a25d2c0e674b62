//! The zcx-control frame, read by this crate's own code from the documented layout:
//!
//! ```text
//! magic "ZCX\0" | version u8 = 1 | kind u8 | body_len u16 LE | body | crc32 u32 LE
//! body: (tag u8, len u16 LE, value)*, no tag twice; at most 4096 bytes in all
//! ```
//!
//! A frame's *canonical* form is what an encoder writes for the same message: the fields a
//! decoder keeps (every critical one; unknown non-critical ones are skipped) in ascending tag
//! order, with a fresh checksum. Every zcx message decoder must turn an accepted frame into a
//! value that encodes to exactly its canonical form.

use zcx_control::{encode_frame, FrameKind};

/// Bytes before the body.
pub const HEADER_LEN: usize = 8;
/// Bytes of the checksum trailer.
pub const CRC_LEN: usize = 4;
/// The largest frame.
pub const MAX_FRAME_LEN: usize = 4096;
/// Tags with this bit are critical.
pub const CRITICAL: u8 = 0x80;
/// The field that nests a whole worker-address frame inside a handshake.
pub const WORKER_ADDRESS_TAG: u8 = 0x93;

/// A frame whose envelope and TLV structure are well formed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFrame<'a> {
    /// The kind byte.
    pub kind: u8,
    /// The fields in wire order.
    pub fields: Vec<(u8, &'a [u8])>,
}

/// Reads `bytes` as one whole frame; `None` if the envelope, checksum or TLV structure is
/// broken (whatever the kind).
pub fn parse(bytes: &[u8]) -> Option<ModelFrame<'_>> {
    if bytes.len() > MAX_FRAME_LEN || bytes.len() < HEADER_LEN + CRC_LEN {
        return None;
    }
    if bytes[..4] != *b"ZCX\0" || bytes[4] != 1 {
        return None;
    }
    let body_len = usize::from(u16::from_le_bytes([bytes[6], bytes[7]]));
    if HEADER_LEN + body_len + CRC_LEN != bytes.len() {
        return None;
    }
    let (covered, crc) = bytes.split_at(bytes.len() - CRC_LEN);
    if crc32fast::hash(covered) != u32::from_le_bytes(crc.try_into().ok()?) {
        return None;
    }
    let mut body = &covered[HEADER_LEN..];
    let mut fields: Vec<(u8, &[u8])> = Vec::new();
    while !body.is_empty() {
        if body.len() < 3 {
            return None;
        }
        let tag = body[0];
        let len = usize::from(u16::from_le_bytes([body[1], body[2]]));
        let value = body.get(3..3 + len)?;
        if fields.iter().any(|&(t, _)| t == tag) {
            return None;
        }
        fields.push((tag, value));
        body = &body[3 + len..];
    }
    Some(ModelFrame { kind: bytes[5], fields })
}

/// The canonical form of a well-formed frame of `kind` (see the module doc); a nested worker
/// address (handshakes) is canonicalised too. `None` if `bytes` is not a well-formed frame of
/// that kind, or a nested address is not a well-formed worker-address frame.
pub fn canonical(bytes: &[u8], kind: FrameKind) -> Option<Vec<u8>> {
    let frame = parse(bytes)?;
    if frame.kind != kind.as_u8() {
        return None;
    }
    let mut fields: Vec<(u8, Vec<u8>)> = Vec::new();
    for (tag, value) in frame.fields {
        if tag & CRITICAL == 0 {
            continue;
        }
        let value = if kind == FrameKind::Handshake && tag == WORKER_ADDRESS_TAG {
            canonical(value, FrameKind::WorkerAddress)?
        } else {
            value.to_vec()
        };
        fields.push((tag, value));
    }
    fields.sort_by_key(|&(tag, _)| tag);
    let borrowed: Vec<(u8, &[u8])> = fields.iter().map(|(t, v)| (*t, v.as_slice())).collect();
    encode_frame(kind, &borrowed).ok()
}

/// The value of field `tag` of a well-formed frame.
pub fn field(bytes: &[u8], tag: u8) -> Option<Vec<u8>> {
    parse(bytes)?.fields.into_iter().find(|&(t, _)| t == tag).map(|(_, v)| v.to_vec())
}

/// What [`fix_up`] repairs, chosen by the fuzzer so that it can also explore broken frames.
#[derive(Debug, Clone, Copy, Default)]
pub struct FixUp {
    /// Set `body_len` from the frame's length.
    pub body_len: bool,
    /// Recompute the checksum.
    pub crc: bool,
    /// Also repair a nested worker-address frame (handshakes), before the outer checksum.
    pub nested: bool,
}

impl FixUp {
    /// Reads the fix-ups from the low bits of a control byte.
    pub fn from_bits(bits: u8) -> FixUp {
        // Mostly repaired: the interesting code runs after the checksum.
        FixUp { body_len: bits & 0x03 != 0, crc: bits & 0x0C != 0, nested: bits & 0x30 != 0 }
    }
}

/// Repairs the envelope of `bytes` in place as `how` says.
pub fn fix_up(bytes: &mut [u8], how: FixUp) {
    if bytes.len() < HEADER_LEN + CRC_LEN {
        return;
    }
    let body_len = bytes.len() - HEADER_LEN - CRC_LEN;
    if how.body_len {
        if let Ok(len) = u16::try_from(body_len) {
            bytes[6..8].copy_from_slice(&len.to_le_bytes());
        }
    }
    if how.nested {
        fix_nested(bytes);
    }
    if how.crc {
        let crc_at = bytes.len() - CRC_LEN;
        let crc = crc32fast::hash(&bytes[..crc_at]);
        bytes[crc_at..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Repairs the length and checksum of a worker-address frame nested in field 0x93 of the body.
fn fix_nested(bytes: &mut [u8]) {
    let end = bytes.len() - CRC_LEN;
    let mut at = HEADER_LEN;
    while at + 3 <= end {
        let tag = bytes[at];
        let len = usize::from(u16::from_le_bytes([bytes[at + 1], bytes[at + 2]]));
        let start = at + 3;
        let Some(stop) = start.checked_add(len).filter(|&s| s <= end) else { return };
        if tag == WORKER_ADDRESS_TAG {
            fix_up(&mut bytes[start..stop], FixUp { body_len: true, crc: true, nested: false });
        }
        at = stop;
    }
}
