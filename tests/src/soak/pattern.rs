//! What the soak's messages carry: a deterministic byte pattern every receiver regenerates and
//! compares byte for byte, and the small header in front of tag, stream and active messages that
//! names the pattern (sender, connection, sequence number, length).

/// A 64-bit mix (splitmix64's finaliser): neighbouring inputs give unrelated outputs.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The seed of one message's pattern, from everything that names the message: a message
/// delivered to the wrong receive, or cut short, regenerates a different pattern.
pub fn seed(kind: Kind, sender: u8, nonce: u32, seq: u64, len: u64) -> u64 {
    let mut s = mix(kind as u64 ^ (u64::from(sender) << 8) ^ (u64::from(nonce) << 32));
    s = mix(s ^ seq);
    mix(s ^ len.rotate_left(17))
}

/// The pattern word covering bytes `8 * word .. 8 * word + 8`.
fn word(seed: u64, word: usize) -> [u8; 8] {
    mix(seed ^ (word as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93)).to_le_bytes()
}

/// Fills `buf` with pattern `seed`, as if `buf` started at byte `start` of the pattern.
pub fn fill(seed: u64, buf: &mut [u8], start: usize) {
    let mut i = 0;
    while i < buf.len() {
        let at = start + i;
        let from = at % 8;
        let n = (8 - from).min(buf.len() - i);
        buf[i..i + n].copy_from_slice(&word(seed, at / 8)[from..from + n]);
        i += n;
    }
}

/// The first index of `buf` (seen as starting at byte `start` of pattern `seed`) whose byte
/// differs from the pattern, if any.
pub fn first_mismatch(seed: u64, buf: &[u8], start: usize) -> Option<usize> {
    let mut i = 0;
    while i < buf.len() {
        let at = start + i;
        let from = at % 8;
        let n = (8 - from).min(buf.len() - i);
        let expected = &word(seed, at / 8)[from..from + n];
        if buf[i..i + n] != *expected {
            return (0..n).find(|&k| buf[i + k] != expected[k]).map(|k| i + k);
        }
        i += n;
    }
    None
}

/// What a message is; part of its header and of its pattern's seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    Tag = 1,
    Stream = 2,
    Am = 3,
    Put = 4,
    Canary = 5,
}

impl Kind {
    pub fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Tag,
            2 => Kind::Stream,
            3 => Kind::Am,
            4 => Kind::Put,
            5 => Kind::Canary,
            _ => return None,
        })
    }
}

/// "SOAK", little-endian: the first word of every header.
pub const MAGIC: u32 = 0x4B41_4F53;
/// Bytes of [`Header`] on the wire.
pub const HEADER_LEN: usize = 32;

/// The header of a tag, stream or active message. For tag and stream messages it is the first
/// [`HEADER_LEN`] bytes of the message and `len` counts the whole message; for an active message
/// it is the AM user header and `len` counts the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    /// The sending peer.
    pub sender: u8,
    /// The receiver's slot for the connection (see the hello exchange).
    pub slot: u8,
    /// The sender's number for the connection, unique within the sending process.
    pub nonce: u32,
    /// Per connection and kind, from 0, without gaps.
    pub seq: u64,
    pub len: u64,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        out[4] = self.kind as u8;
        out[5] = self.sender;
        out[6] = self.slot;
        out[8..12].copy_from_slice(&self.nonce.to_le_bytes());
        out[16..24].copy_from_slice(&self.seq.to_le_bytes());
        out[24..32].copy_from_slice(&self.len.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Header, String> {
        let bytes: &[u8; HEADER_LEN] = bytes
            .get(..HEADER_LEN)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| format!("header of {} bytes", bytes.len()))?;
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        if u32_at(0) != MAGIC || bytes[7] != 0 || u32_at(12) != 0 {
            return Err(format!("bad header {bytes:02x?}"));
        }
        let kind = Kind::from_u8(bytes[4]).ok_or_else(|| format!("bad kind {}", bytes[4]))?;
        Ok(Header {
            kind,
            sender: bytes[5],
            slot: bytes[6],
            nonce: u32_at(8),
            seq: u64_at(16),
            len: u64_at(24),
        })
    }

    pub fn seed(&self) -> u64 {
        seed(self.kind, self.sender, self.nonce, self.seq, self.len)
    }

    /// A whole tag or stream message: the header, then the pattern up to `len` bytes.
    pub fn message(&self) -> Vec<u8> {
        let mut buf = vec![0u8; self.len as usize];
        fill(self.seed(), &mut buf[HEADER_LEN..], HEADER_LEN);
        buf[..HEADER_LEN].copy_from_slice(&self.encode());
        buf
    }

    /// Checks a received tag or stream message against the header it starts with, and returns
    /// that header.
    pub fn check_message(bytes: &[u8]) -> Result<Header, String> {
        let header = Header::decode(bytes)?;
        if header.len != bytes.len() as u64 {
            return Err(format!("{header:?}: received {} bytes", bytes.len()));
        }
        match first_mismatch(header.seed(), &bytes[HEADER_LEN..], HEADER_LEN) {
            None => Ok(header),
            Some(at) => Err(format!("{header:?}: byte {} differs from the pattern", at + HEADER_LEN)),
        }
    }

    /// Checks the data of an active message whose user header is `self`.
    pub fn check_am_data(&self, data: &[u8]) -> Result<(), String> {
        if self.len != data.len() as u64 {
            return Err(format!("{self:?}: received {} data bytes", data.len()));
        }
        match first_mismatch(self.seed(), data, 0) {
            None => Ok(()),
            Some(at) => Err(format!("{self:?}: data byte {at} differs from the pattern")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_checks_and_any_changed_byte_is_found() {
        let header = Header { kind: Kind::Tag, sender: 3, slot: 7, nonce: 99, seq: 12, len: 1000 };
        let mut msg = header.message();
        assert_eq!(Header::check_message(&msg), Ok(header));
        for at in [HEADER_LEN, 500, 999] {
            msg[at] ^= 1;
            assert!(Header::check_message(&msg).is_err(), "byte {at} changed unnoticed");
            msg[at] ^= 1;
        }
        assert!(Header::check_message(&msg[..999]).is_err(), "a cut message passed");
    }

    #[test]
    fn fill_and_check_agree_at_any_start() {
        let mut buf = vec![0u8; 77];
        fill(42, &mut buf, 13);
        assert_eq!(first_mismatch(42, &buf, 13), None);
        assert!(first_mismatch(43, &buf, 13).is_some());
        assert!(first_mismatch(42, &buf, 14).is_some());
    }
}
