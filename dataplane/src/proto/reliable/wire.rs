//! The reliability header every datagram on an unreliable link starts with, as a checked view
//! ([`Packet`]) and an emitter ([`Header::emit`]).
//!
//! Layout (40 bytes, integers little-endian like every other zcx frame):
//!
//! ```text
//!  0  magic        u16  0x5A 0x58 ("ZX"): not a zcx datagram otherwise
//!  2  version      u8   1
//!  3  kind         u8   1 = DATA, 2 = ACK
//!  4  src session  u32  the sender's session id
//!  8  dst session  u32  the receiver's session id
//! 12  seq          u64  DATA: the packet's sequence number; ACK: 0
//! 20  ack          u64  cumulative ack: every DATA with a smaller seq has been received
//! 28  credit       u32  packets, counted from `ack`, the peer may have in flight (at least 1)
//! 32  payload len  u16  DATA: message length; ACK: 0
//! 34  reserved     u16  0
//! 36  checksum     u32  CRC-32 (IEEE) of the payload followed by bytes 0..36
//! 40  payload
//! ```
//!
//! Sequence numbers are 64 bits and start at 0, so they never wrap in a session's life (2^64
//! packets at 100 Mpps is millennia): comparisons are plain integer comparisons, and a
//! duplicate delayed arbitrarily long in the network can never be mistaken for a new packet, as
//! it could be once a 32-bit space wrapped. The 8 bytes this costs per header are cheap next to
//! the Ethernet, IP and UDP headers around it.
//!
//! The checksum covers header and payload, so a flipped bit anywhere is detected and the datagram
//! dropped rather than delivered: CRC-32 catches any burst of up to 32 bits, and every error of up
//! to three bits in datagrams up to about 11 KiB (jumbo frames included). Bytes after the payload
//! are ignored: a link may pad short frames (Ethernet pads to 60 bytes), and the payload length
//! says where the datagram ends.
//!
//! Parsing reads untrusted bytes: it never panics or allocates, and accepts only what
//! [`Header::emit`] produces (reserved bits zero, an ACK without seq or payload, a credit of at
//! least one), so an accepted header re-emits to the very same bytes.

use std::fmt;

/// The first two bytes of every datagram.
pub const MAGIC: [u8; 2] = *b"ZX";

/// The header version this code speaks; any other is refused. Version 2 checksums the payload
/// before the header (version 1 the other way round), so a message's payload CRC, computed once
/// when it is queued, serves every (re)transmission whatever the header then holds.
pub const VERSION: u8 = 2;

/// Length of the header; the payload follows it.
pub const HEADER_LEN: usize = 40;

/// The longest payload the 16-bit length field can describe.
pub const MAX_PAYLOAD_LEN: usize = u16::MAX as usize;

/// Offsets of the header fields.
mod field {
    pub const VERSION: usize = 2;
    pub const KIND: usize = 3;
    pub const SRC: usize = 4;
    pub const DST: usize = 8;
    pub const SEQ: usize = 12;
    pub const ACK: usize = 20;
    pub const CREDIT: usize = 28;
    pub const LEN: usize = 32;
    pub const RESERVED: usize = 34;
    pub const CHECKSUM: usize = 36;
}

/// What a datagram carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// One message of the session's ordered stream, plus a piggybacked ack and credit.
    Data = 1,
    /// Only an ack and a credit grant: sent when there is no data to piggyback them on.
    Ack = 2,
}

impl Kind {
    /// The kind with wire number `value`, or `None` if there is none.
    pub fn from_u8(value: u8) -> Option<Kind> {
        match value {
            1 => Some(Kind::Data),
            2 => Some(Kind::Ack),
            _ => None,
        }
    }
}

/// Why a datagram was refused by [`Packet::new_checked`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// Shorter than the header, or than the header plus the payload length it announces.
    Truncated,
    /// The first two bytes are not [`MAGIC`]: not a zcx datagram.
    BadMagic,
    /// A header version other than [`VERSION`].
    UnsupportedVersion(u8),
    /// The checksum does not match header and payload: the datagram was corrupted on the way.
    BadChecksum,
    /// The kind byte is neither DATA nor ACK.
    UnknownKind(u8),
    /// A field holds a value its kind does not allow; the string names the field.
    BadField(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated => f.write_str("truncated datagram"),
            Error::BadMagic => f.write_str("not a zcx datagram (bad magic)"),
            Error::UnsupportedVersion(v) => write!(f, "unsupported datagram version {v}"),
            Error::BadChecksum => f.write_str("datagram checksum mismatch"),
            Error::UnknownKind(k) => write!(f, "unknown datagram kind {k:#04x}"),
            Error::BadField(name) => write!(f, "bad value of datagram field `{name}`"),
        }
    }
}

impl std::error::Error for Error {}

/// Why [`Header::emit`] could not write a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EmitError {
    /// The output buffer is shorter than header plus payload (`needed` bytes).
    BufferTooSmall {
        /// Bytes the datagram needs.
        needed: usize,
    },
    /// The payload is longer than [`MAX_PAYLOAD_LEN`].
    PayloadTooLong,
    /// The header breaks a rule the parser enforces (the string names the field), so the peer
    /// would drop it.
    BadField(&'static str),
}

impl fmt::Display for EmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmitError::BufferTooSmall { needed } => write!(f, "datagram needs a {needed}-byte buffer"),
            EmitError::PayloadTooLong => write!(f, "payload longer than {MAX_PAYLOAD_LEN} bytes"),
            EmitError::BadField(name) => write!(f, "bad value of datagram field `{name}`"),
        }
    }
}

impl std::error::Error for EmitError {}

/// The header fields, decoded: what [`Packet`] exposes and what [`Header::emit`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// DATA or ACK.
    pub kind: Kind,
    /// The sending session's id.
    pub src_session: u32,
    /// The receiving session's id.
    pub dst_session: u32,
    /// DATA: this packet's sequence number; ACK: 0.
    pub seq: u64,
    /// Cumulative ack: the sender has received every DATA packet with a smaller seq.
    pub ack: u64,
    /// How many packets from `ack` on the sender of this header lets its peer have in flight;
    /// at least 1.
    pub credit: u32,
}

impl Header {
    /// Writes this header, `payload` and the checksum into the front of `buf`, returning the
    /// datagram's length (`HEADER_LEN + payload.len()`).
    ///
    /// Refuses (and writes nothing) what the parser would refuse: an ACK with a payload or a
    /// non-zero seq, a zero credit, a payload longer than [`MAX_PAYLOAD_LEN`].
    pub fn emit(&self, payload: &[u8], buf: &mut [u8]) -> Result<usize, EmitError> {
        self.emit_split(payload, 0, crc32fast::hash(payload), buf)
    }

    /// Writes this header and `inline` into the front of `buf` for a datagram whose payload is
    /// `inline` followed by `external_len` more bytes that the caller sends from elsewhere
    /// (chained after these bytes, not copied here), `payload_crc` being the CRC-32 (IEEE) of the
    /// whole payload (`inline` followed by the external bytes), which the caller computed once:
    /// only the header is hashed here. Returns the bytes written, `HEADER_LEN + inline.len()`;
    /// the datagram on the wire is `external_len` longer. With `external_len` 0 and the CRC of
    /// `inline` this is [`Header::emit`].
    ///
    /// Refuses what [`Header::emit`] refuses, counting the whole payload.
    pub fn emit_split(
        &self,
        inline: &[u8],
        external_len: usize,
        payload_crc: u32,
        buf: &mut [u8],
    ) -> Result<usize, EmitError> {
        let payload_len = inline.len().saturating_add(external_len);
        if payload_len > MAX_PAYLOAD_LEN {
            return Err(EmitError::PayloadTooLong);
        }
        if self.kind == Kind::Ack && self.seq != 0 {
            return Err(EmitError::BadField("seq"));
        }
        if self.kind == Kind::Ack && payload_len != 0 {
            return Err(EmitError::BadField("payload len"));
        }
        if self.credit == 0 {
            return Err(EmitError::BadField("credit"));
        }
        let needed = HEADER_LEN + inline.len();
        let Some(out) = buf.get_mut(..needed) else {
            return Err(EmitError::BufferTooSmall { needed });
        };
        let (head, body) = out.split_at_mut(HEADER_LEN);
        head[..2].copy_from_slice(&MAGIC);
        head[field::VERSION] = VERSION;
        head[field::KIND] = self.kind as u8;
        head[field::SRC..field::SRC + 4].copy_from_slice(&self.src_session.to_le_bytes());
        head[field::DST..field::DST + 4].copy_from_slice(&self.dst_session.to_le_bytes());
        head[field::SEQ..field::SEQ + 8].copy_from_slice(&self.seq.to_le_bytes());
        head[field::ACK..field::ACK + 8].copy_from_slice(&self.ack.to_le_bytes());
        head[field::CREDIT..field::CREDIT + 4].copy_from_slice(&self.credit.to_le_bytes());
        // Fits: checked against MAX_PAYLOAD_LEN above.
        head[field::LEN..field::LEN + 2].copy_from_slice(&(payload_len as u16).to_le_bytes());
        head[field::RESERVED..field::RESERVED + 2].fill(0);
        body.copy_from_slice(inline);
        // Resumes the payload's CRC over the header: the CRC of the payload then the header.
        let mut hasher = crc32fast::Hasher::new_with_initial(payload_crc);
        hasher.update(&head[..field::CHECKSUM]);
        let sum = hasher.finalize();
        head[field::CHECKSUM..].copy_from_slice(&sum.to_le_bytes());
        Ok(needed)
    }
}

/// A datagram whose header was validated and whose checksum matched: only
/// [`Packet::new_checked`] makes one, so every accessor is infallible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    header: Header,
    payload: &'a [u8],
}

impl<'a> Packet<'a> {
    /// Validates `datagram` (length, magic, version, checksum, then every field) and returns a
    /// view of it. Bytes after the announced payload are link padding and ignored.
    pub fn new_checked(datagram: &'a [u8]) -> Result<Packet<'a>, Error> {
        let Some((head, rest)) = datagram.split_first_chunk::<HEADER_LEN>() else {
            return Err(Error::Truncated);
        };
        if head[..2] != MAGIC {
            return Err(Error::BadMagic);
        }
        if head[field::VERSION] != VERSION {
            return Err(Error::UnsupportedVersion(head[field::VERSION]));
        }
        let payload_len = usize::from(u16::from_le_bytes([head[field::LEN], head[field::LEN + 1]]));
        let Some(payload) = rest.get(..payload_len) else {
            return Err(Error::Truncated);
        };
        // The checksum is checked before the remaining fields so that corruption is reported as
        // such, whichever field it hit.
        if checksum(&head[..field::CHECKSUM], payload) != le_u32(head, field::CHECKSUM) {
            return Err(Error::BadChecksum);
        }
        let kind = Kind::from_u8(head[field::KIND]).ok_or(Error::UnknownKind(head[field::KIND]))?;
        if head[field::RESERVED] != 0 || head[field::RESERVED + 1] != 0 {
            return Err(Error::BadField("reserved"));
        }
        let header = Header {
            kind,
            src_session: le_u32(head, field::SRC),
            dst_session: le_u32(head, field::DST),
            seq: le_u64(head, field::SEQ),
            ack: le_u64(head, field::ACK),
            credit: le_u32(head, field::CREDIT),
        };
        if kind == Kind::Ack && header.seq != 0 {
            return Err(Error::BadField("seq"));
        }
        if kind == Kind::Ack && payload_len != 0 {
            return Err(Error::BadField("payload len"));
        }
        if header.credit == 0 {
            return Err(Error::BadField("credit"));
        }
        Ok(Packet { header, payload })
    }

    /// All header fields.
    pub fn header(&self) -> Header {
        self.header
    }

    /// DATA or ACK.
    pub fn kind(&self) -> Kind {
        self.header.kind
    }

    /// The sending session's id.
    pub fn src_session(&self) -> u32 {
        self.header.src_session
    }

    /// The receiving session's id.
    pub fn dst_session(&self) -> u32 {
        self.header.dst_session
    }

    /// The DATA packet's sequence number (0 for an ACK).
    pub fn seq(&self) -> u64 {
        self.header.seq
    }

    /// The cumulative ack.
    pub fn ack(&self) -> u64 {
        self.header.ack
    }

    /// The credit grant.
    pub fn credit(&self) -> u32 {
        self.header.credit
    }

    /// The message (empty for an ACK), borrowed from the datagram.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// Length of header plus payload, without any link padding.
    pub fn wire_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }
}

fn checksum(head: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(payload);
    hasher.update(head);
    hasher.finalize()
}

fn le_u32(head: &[u8; HEADER_LEN], at: usize) -> u32 {
    u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]])
}

fn le_u64(head: &[u8; HEADER_LEN], at: usize) -> u64 {
    let mut bytes = [0; 8];
    bytes.copy_from_slice(&head[at..at + 8]);
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(seq: u64) -> Header {
        Header { kind: Kind::Data, src_session: 7, dst_session: 9, seq, ack: 3, credit: 16 }
    }

    fn ack() -> Header {
        Header { kind: Kind::Ack, src_session: 7, dst_session: 9, seq: 0, ack: 3, credit: 16 }
    }

    #[test]
    fn round_trips_data_and_ack() {
        let mut buf = [0u8; 128];
        let len = data(0x0102_0304_0506_0708).emit(b"hello", &mut buf).unwrap();
        assert_eq!(len, HEADER_LEN + 5);
        let packet = Packet::new_checked(&buf[..len]).unwrap();
        assert_eq!(packet.header(), data(0x0102_0304_0506_0708));
        assert_eq!(packet.payload(), b"hello");
        assert_eq!(packet.wire_len(), len);

        let len = ack().emit(&[], &mut buf).unwrap();
        assert_eq!(len, HEADER_LEN);
        let packet = Packet::new_checked(&buf[..len]).unwrap();
        assert_eq!(packet.header(), ack());
        assert!(packet.payload().is_empty());
    }

    #[test]
    fn layout_is_little_endian_in_documented_order() {
        let mut buf = [0u8; HEADER_LEN + 1];
        data(0x11).emit(&[0xAB], &mut buf).unwrap();
        assert_eq!(&buf[..4], &[b'Z', b'X', 2, 1]);
        assert_eq!(&buf[4..12], &[7, 0, 0, 0, 9, 0, 0, 0]);
        assert_eq!(&buf[12..20], &[0x11, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&buf[20..28], &[3, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&buf[28..36], &[16, 0, 0, 0, 1, 0, 0, 0]);
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&[0xAB]);
        hasher.update(&buf[..36]);
        assert_eq!(buf[36..40], hasher.finalize().to_le_bytes());
        assert_eq!(buf[40], 0xAB);
    }

    #[test]
    fn padding_after_the_payload_is_ignored() {
        let mut buf = [0xEEu8; 60];
        let len = data(1).emit(b"hi", &mut buf).unwrap();
        let packet = Packet::new_checked(&buf).unwrap();
        assert_eq!(packet.payload(), b"hi");
        assert_eq!(packet.wire_len(), len);
    }

    #[test]
    fn refuses_short_foreign_corrupt_and_non_canonical_datagrams() {
        let mut buf = [0u8; 64];
        let len = data(5).emit(b"abcd", &mut buf).unwrap();
        assert_eq!(Packet::new_checked(&buf[..HEADER_LEN - 1]), Err(Error::Truncated));
        assert_eq!(Packet::new_checked(&buf[..len - 1]), Err(Error::Truncated));

        let mut bad = buf;
        bad[0] = b'Y';
        assert_eq!(Packet::new_checked(&bad[..len]), Err(Error::BadMagic));
        let mut bad = buf;
        bad[2] = 1;
        assert_eq!(Packet::new_checked(&bad[..len]), Err(Error::UnsupportedVersion(1)));
        for at in [3, 4, 13, 25, 30, 35, 38, 41] {
            let mut bad = buf;
            bad[at] ^= 0x10;
            assert_eq!(Packet::new_checked(&bad[..len]), Err(Error::BadChecksum), "byte {at}");
        }

        // Fields that only a broken (or hostile) emitter writes, with a valid checksum.
        let reseal = |bytes: &mut [u8]| {
            let payload_len = usize::from(u16::from_le_bytes([bytes[32], bytes[33]]));
            let sum = checksum(&bytes[..36], &bytes[HEADER_LEN..HEADER_LEN + payload_len]);
            bytes[36..40].copy_from_slice(&sum.to_le_bytes());
        };
        let mut bad = buf;
        bad[3] = 3;
        reseal(&mut bad);
        assert_eq!(Packet::new_checked(&bad[..len]), Err(Error::UnknownKind(3)));
        let mut bad = buf;
        bad[35] = 1;
        reseal(&mut bad);
        assert_eq!(Packet::new_checked(&bad[..len]), Err(Error::BadField("reserved")));
        let mut bad = buf;
        bad[28..32].fill(0);
        reseal(&mut bad);
        assert_eq!(Packet::new_checked(&bad[..len]), Err(Error::BadField("credit")));
        let mut bad = buf;
        bad[3] = Kind::Ack as u8;
        reseal(&mut bad);
        assert_eq!(Packet::new_checked(&bad[..len]), Err(Error::BadField("seq")));
        let mut bad = buf;
        bad[3] = Kind::Ack as u8;
        bad[12..20].fill(0);
        reseal(&mut bad);
        assert_eq!(Packet::new_checked(&bad[..len]), Err(Error::BadField("payload len")));
    }

    #[test]
    fn emit_refuses_what_the_parser_would_refuse() {
        let mut buf = [0u8; 64];
        let mut bad = ack();
        bad.seq = 1;
        assert_eq!(bad.emit(&[], &mut buf), Err(EmitError::BadField("seq")));
        assert_eq!(ack().emit(b"x", &mut buf), Err(EmitError::BadField("payload len")));
        let mut bad = data(0);
        bad.credit = 0;
        assert_eq!(bad.emit(&[], &mut buf), Err(EmitError::BadField("credit")));
        assert_eq!(
            data(0).emit(&[0; 30], &mut buf),
            Err(EmitError::BufferTooSmall { needed: HEADER_LEN + 30 })
        );
        let big = vec![0u8; MAX_PAYLOAD_LEN + 1];
        let mut out = vec![0u8; HEADER_LEN + big.len()];
        assert_eq!(data(0).emit(&big, &mut out), Err(EmitError::PayloadTooLong));
        assert_eq!(buf, [0u8; 64], "a refused emit writes nothing");
    }

    #[test]
    fn errors_display() {
        assert_eq!(Error::UnknownKind(9).to_string(), "unknown datagram kind 0x09");
        assert_eq!(Error::BadField("credit").to_string(), "bad value of datagram field `credit`");
        assert_eq!(EmitError::BufferTooSmall { needed: 41 }.to_string(), "datagram needs a 41-byte buffer");
    }
    #[test]
    fn split_emit_matches_a_contiguous_emit() {
        let header = Header { kind: Kind::Data, src_session: 7, dst_session: 9, seq: 3, ack: 2, credit: 4 };
        let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let mut whole = [0u8; 1100];
        let n = header.emit(&payload, &mut whole).unwrap();
        for cut in [0, 1, 17, 999, 1000] {
            let (inline, external) = payload.split_at(cut);
            let mut split = [0u8; 1100];
            let m = header.emit_split(inline, external.len(), crc32fast::hash(&payload), &mut split).unwrap();
            assert_eq!(m, HEADER_LEN + cut);
            split[m..m + external.len()].copy_from_slice(external);
            assert_eq!(&split[..n], &whole[..n], "cut at {cut}");
            assert!(Packet::new_checked(&split[..n]).is_ok());
        }
        let ack = Header { kind: Kind::Ack, seq: 0, ..header };
        assert_eq!(ack.emit_split(&[], 1, 0, &mut whole), Err(EmitError::BadField("payload len")));
        assert_eq!(header.emit_split(&[1], MAX_PAYLOAD_LEN, 0, &mut whole), Err(EmitError::PayloadTooLong));
    }
}
