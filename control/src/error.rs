//! The one error type every decoder in this crate returns.

use thiserror::Error;

/// Why a wire buffer was rejected (or, for the fallible encoders, why a value cannot be encoded).
///
/// Decoders stop at the first problem they find; the variant names that problem precisely enough to
/// log, but callers should treat every variant the same way: the bytes are not a usable message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    /// The input ended before a read of `needed` bytes could be satisfied; only `have` were left.
    #[error("truncated: needed {needed} bytes, have {have}")]
    Truncated {
        /// Bytes the read (or the whole frame) needed.
        needed: usize,
        /// Bytes that were actually available.
        have: usize,
    },
    /// A length or count is above the cap this format allows.
    #[error("too long: {len} exceeds the limit of {max}")]
    TooLong {
        /// The length or count found.
        len: usize,
        /// The largest value allowed.
        max: usize,
    },
    /// The buffer does not start with the zcx frame magic.
    #[error("not a zcx frame (bad magic)")]
    BadMagic,
    /// The frame uses a format version this decoder does not speak.
    #[error("unsupported frame version {0}")]
    UnsupportedVersion(u8),
    /// The frame is a zcx frame, but of another kind than the caller asked for (or of an unknown
    /// kind).
    #[error("wrong frame kind: expected {expected}, found {found}")]
    WrongKind {
        /// The kind the caller expected.
        expected: u8,
        /// The kind byte found in the frame.
        found: u8,
    },
    /// The CRC-32 trailer does not match the frame contents.
    #[error("checksum mismatch")]
    Checksum,
    /// The same field tag appears more than once in a frame.
    #[error("duplicate field tag {0:#04x}")]
    DuplicateField(u8),
    /// A field the message requires is absent.
    #[error("missing field `{0}`")]
    MissingField(&'static str),
    /// The frame carries a critical field this decoder does not know, so it cannot be understood
    /// safely.
    #[error("unknown critical field tag {0:#04x}")]
    UnknownCriticalField(u8),
    /// A field's value does not have the length its tag requires.
    #[error("field {field:#04x} has bad length {len}")]
    BadFieldLength {
        /// The field's tag.
        field: u8,
        /// The length found.
        len: usize,
    },
    /// The bytes are well formed but their meaning is not allowed (the text says which rule).
    #[error("invalid: {0}")]
    Invalid(&'static str),
    /// Bytes remain after the end of a complete message.
    #[error("{0} trailing bytes after the message")]
    TrailingBytes(usize),
}
