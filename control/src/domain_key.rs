//! Per-memory-domain keys carried inside a packed rkey.
//!
//! The list is one field: a count byte, then for each key its memory-domain id (`u8`), its length
//! (`u16`, little-endian) and its bytes. The caps keep a hostile rkey from making the decoder
//! allocate more than a few kilobytes.

use crate::cursor::{Reader, Writer};
use crate::error::WireError;
use crate::tag;

/// The most domain keys one rkey may carry.
pub const MAX_DOMAIN_KEYS: usize = 8;
/// The longest single domain key, in bytes.
pub const MAX_DOMAIN_KEY_LEN: usize = 256;

/// One memory domain's entry for the region (a verbs rkey, ...). What `key` means is up to the
/// domain identified by `domain` (the numbering is the dataplane's `DomainId`). The same-host
/// domain's entry is not here: it travels in the key's shared-memory locator field, which
/// older peers read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DomainKey {
    /// Which memory domain the key belongs to.
    pub domain: u8,
    /// The domain's key bytes, at most [`MAX_DOMAIN_KEY_LEN`].
    pub key: Vec<u8>,
}

/// Checks the count and size caps.
pub(crate) fn validate_keys(keys: &[DomainKey]) -> Result<(), WireError> {
    if keys.len() > MAX_DOMAIN_KEYS {
        return Err(WireError::TooLong { len: keys.len(), max: MAX_DOMAIN_KEYS });
    }
    for key in keys {
        if key.key.len() > MAX_DOMAIN_KEY_LEN {
            return Err(WireError::TooLong { len: key.key.len(), max: MAX_DOMAIN_KEY_LEN });
        }
    }
    Ok(())
}

/// The value of a [`tag::DOMAIN_KEYS`] field; only called on keys that passed
/// [`validate_keys`], so the count and lengths fit their wire widths.
pub(crate) fn encode_keys(keys: &[DomainKey]) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(u8::try_from(keys.len()).unwrap_or(u8::MAX));
    for key in keys {
        w.u8(key.domain);
        w.u16(u16::try_from(key.key.len()).unwrap_or(u16::MAX));
        w.bytes(&key.key);
    }
    w.into_inner()
}

/// Decodes a [`tag::DOMAIN_KEYS`] value. An empty list is rejected: it is encoded by leaving
/// the field out, and accepting both spellings would give one key two encodings.
pub(crate) fn decode_keys(value: &[u8]) -> Result<Vec<DomainKey>, WireError> {
    // Running out of bytes inside the list means the field's length disagrees with its contents.
    let bad_length = || WireError::BadFieldLength { field: tag::DOMAIN_KEYS, len: value.len() };
    let mut r = Reader::new(value);
    let count = usize::from(r.u8().map_err(|_| bad_length())?);
    if count == 0 {
        return Err(WireError::Invalid("empty domain key list must be omitted"));
    }
    if count > MAX_DOMAIN_KEYS {
        return Err(WireError::TooLong { len: count, max: MAX_DOMAIN_KEYS });
    }
    let mut keys = Vec::with_capacity(count);
    for _ in 0..count {
        let domain = r.u8().map_err(|_| bad_length())?;
        let len = usize::from(r.u16().map_err(|_| bad_length())?);
        if len > MAX_DOMAIN_KEY_LEN {
            return Err(WireError::TooLong { len, max: MAX_DOMAIN_KEY_LEN });
        }
        let key = r.bytes(len).map_err(|_| bad_length())?.to_vec();
        keys.push(DomainKey { domain, key });
    }
    if !r.is_empty() {
        return Err(bad_length());
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_a_list() {
        let keys = vec![
            DomainKey { domain: 1, key: vec![] },
            DomainKey { domain: 2, key: vec![7; MAX_DOMAIN_KEY_LEN] },
        ];
        let value = encode_keys(&keys);
        assert_eq!(value.len(), 1 + 3 + 3 + MAX_DOMAIN_KEY_LEN);
        assert_eq!(decode_keys(&value), Ok(keys));
    }

    #[test]
    fn rejects_empty_list() {
        assert!(matches!(decode_keys(&[0]), Err(WireError::Invalid(_))));
    }

    #[test]
    fn rejects_too_many_keys() {
        assert_eq!(decode_keys(&[9]), Err(WireError::TooLong { len: 9, max: MAX_DOMAIN_KEYS }));
        let keys = vec![DomainKey { domain: 0, key: vec![] }; MAX_DOMAIN_KEYS + 1];
        assert_eq!(validate_keys(&keys), Err(WireError::TooLong { len: 9, max: MAX_DOMAIN_KEYS }));
    }

    #[test]
    fn rejects_oversized_key() {
        assert_eq!(decode_keys(&[1, 5, 0x01, 0x01]), Err(WireError::TooLong { len: 257, max: 256 }));
        let keys = vec![DomainKey { domain: 0, key: vec![0; 257] }];
        assert_eq!(validate_keys(&keys), Err(WireError::TooLong { len: 257, max: 256 }));
    }

    #[test]
    fn rejects_list_disagreeing_with_field_length() {
        let short = [2, 1, 0, 0];
        assert_eq!(decode_keys(&short), Err(WireError::BadFieldLength { field: tag::DOMAIN_KEYS, len: 4 }));
        let long = [1, 1, 1, 0, 9, 0];
        assert_eq!(decode_keys(&long), Err(WireError::BadFieldLength { field: tag::DOMAIN_KEYS, len: 6 }));
        assert_eq!(decode_keys(&[]), Err(WireError::BadFieldLength { field: tag::DOMAIN_KEYS, len: 0 }));
    }
}
