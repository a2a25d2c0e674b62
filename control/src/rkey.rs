//! The packed remote key: what `ucp_rkey_pack` / `ucp_memh_pack` produce and
//! `ucp_ep_rkey_unpack` reads.

use std::fmt;

use crate::domain_key::{decode_keys, encode_keys, validate_keys, DomainKey};
use crate::error::WireError;
use crate::frame::{decode_frame, FrameKind, FrameWriter};
use crate::region::Region;
use crate::shm_locator::ShmLocator;
use crate::tag;

/// A packed remote key, as sent to peers that will access the region.
///
/// Encoded as a [`FrameKind::Rkey`] frame whose fields are all critical. `Debug` leaves
/// `access_key` out so that logging a key does not leak the capability.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RkeyWire {
    /// Identifies the exporting context (random per context); part of the key ordering.
    pub context_id: [u8; 16],
    /// The exporting context's id of the memory handle.
    pub region_id: u64,
    /// Remote address of the region's first byte.
    pub base: u64,
    /// Region length in bytes; 0 is UCP's dummy handle for a zero-length `mem_map`.
    pub length: u64,
    /// `UCP_MEM_MAP_PROT_*` bits; only those in [`PROT_ALL`](crate::PROT_ALL) are allowed.
    pub prot: u32,
    /// `ucs_memory_type_t`, at most [`MEM_TYPE_MAX`](crate::MEM_TYPE_MAX).
    pub mem_type: u8,
    /// Unguessable capability the target checks on every remote access.
    pub access_key: [u8; 16],
    /// The `SYMMETRIC_RKEY` hint.
    pub symmetric: bool,
    /// Present when the region is memfd-backed and same-host peers may map it (`rkey_ptr`).
    /// Requires a non-zero `length` that fits inside the mapping.
    pub shm: Option<ShmLocator>,
    /// Per-memory-domain keys, at most
    /// [`MAX_DOMAIN_KEYS`](crate::MAX_DOMAIN_KEYS) of at most
    /// [`MAX_DOMAIN_KEY_LEN`](crate::MAX_DOMAIN_KEY_LEN) bytes each.
    pub domain_keys: Vec<DomainKey>,
}

impl RkeyWire {
    /// The frame for this key.
    ///
    /// # Panics
    ///
    /// If the key breaks a rule of [`RkeyWire::validate`]: emitting bytes that every peer would
    /// reject hides the bug far from its cause. Use [`RkeyWire::try_encode`] to get the error
    /// instead.
    pub fn encode(&self) -> Vec<u8> {
        match self.try_encode() {
            Ok(bytes) => bytes,
            Err(error) => panic!("RkeyWire::encode: invalid remote key: {error}"),
        }
    }

    /// The frame for this key, or why the key cannot be sent.
    pub fn try_encode(&self) -> Result<Vec<u8>, WireError> {
        self.validate()?;
        let mut frame = FrameWriter::new(FrameKind::Rkey);
        self.write_fields(&mut frame);
        frame.finish()
    }

    /// Appends every field, in tag order, without validating anything.
    fn write_fields(&self, frame: &mut FrameWriter) {
        self.region().write(frame);
        if let Some(shm) = &self.shm {
            frame.field(tag::SHM_LOCATOR, &shm.to_bytes());
        }
        frame.field(tag::SYMMETRIC, &[u8::from(self.symmetric)]);
        if !self.domain_keys.is_empty() {
            frame.field(tag::DOMAIN_KEYS, &encode_keys(&self.domain_keys));
        }
    }

    /// Checks and decodes a packed key received from a peer.
    pub fn decode(bytes: &[u8]) -> Result<RkeyWire, WireError> {
        let mut fields = decode_frame(bytes, FrameKind::Rkey)?;
        let region = Region::read(&mut fields)?;
        let symmetric = match fields.require_array(tag::SYMMETRIC, "symmetric")? {
            [0] => false,
            [1] => true,
            _ => return Err(WireError::Invalid("symmetric flag is neither 0 nor 1")),
        };
        let shm = fields.take(tag::SHM_LOCATOR).map(ShmLocator::from_bytes).transpose()?;
        let domain_keys = fields.take(tag::DOMAIN_KEYS).map(decode_keys).transpose()?.unwrap_or_default();
        fields.finish()?;
        let wire = RkeyWire {
            context_id: region.context_id,
            region_id: region.region_id,
            base: region.base,
            length: region.length,
            prot: region.prot,
            mem_type: region.mem_type,
            access_key: region.access_key,
            symmetric,
            shm,
            domain_keys,
        };
        wire.validate()?;
        Ok(wire)
    }

    /// Checks every rule a decoded key must satisfy: protection bits, memory type, an address
    /// range that does not wrap, a shm locator only on a non-empty region lying inside the
    /// mapping, and the domain key caps.
    pub fn validate(&self) -> Result<(), WireError> {
        let region = self.region();
        region.validate()?;
        if let Some(shm) = &self.shm {
            if self.length == 0 {
                return Err(WireError::Invalid("zero-length region cannot carry a shm locator"));
            }
            region.validate_within(shm)?;
        }
        validate_keys(&self.domain_keys)
    }

    fn region(&self) -> Region {
        Region {
            context_id: self.context_id,
            region_id: self.region_id,
            base: self.base,
            length: self.length,
            prot: self.prot,
            mem_type: self.mem_type,
            access_key: self.access_key,
        }
    }
}

impl fmt::Debug for RkeyWire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RkeyWire")
            .field("context_id", &self.context_id)
            .field("region_id", &self.region_id)
            .field("base", &format_args!("{:#x}", self.base))
            .field("length", &self.length)
            .field("prot", &format_args!("{:#x}", self.prot))
            .field("mem_type", &self.mem_type)
            .field("access_key", &format_args!("<redacted>"))
            .field("symmetric", &self.symmetric)
            .field("shm", &self.shm)
            .field("domain_keys", &self.domain_keys)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain_key::{MAX_DOMAIN_KEYS, MAX_DOMAIN_KEY_LEN};
    use crate::frame::{decode_frame, MAX_FRAME_LEN};
    use crate::region::{PROT_ALL, PROT_REMOTE_READ};
    use crate::samples::{sample_locator, sample_rkey};

    /// The frame of `key`, unvalidated, with `extra` fields appended.
    fn frame_with(key: &RkeyWire, extra: &[(u8, &[u8])]) -> Vec<u8> {
        let mut frame = FrameWriter::new(FrameKind::Rkey);
        key.write_fields(&mut frame);
        for &(tag, value) in extra {
            frame.field(tag, value);
        }
        frame.finish().unwrap()
    }

    /// The frame of the sample key with field `field` replaced by `replacement`, or removed if
    /// that is `None`; bypasses validation.
    fn sample_frame_replacing(field: u8, replacement: Option<&[u8]>) -> Vec<u8> {
        let original = sample_rkey().encode();
        let mut fields = decode_frame(&original, FrameKind::Rkey).unwrap();
        let mut frame = FrameWriter::new(FrameKind::Rkey);
        for tag in 0..=u8::MAX {
            let value = if tag == field { fields.take(tag).and(replacement) } else { fields.take(tag) };
            if let Some(value) = value {
                frame.field(tag, value);
            }
        }
        frame.finish().unwrap()
    }

    fn rejects_as_invalid(key: &RkeyWire) {
        assert!(matches!(key.validate(), Err(WireError::Invalid(_))), "{key:?}");
        assert!(matches!(key.try_encode(), Err(WireError::Invalid(_))), "{key:?}");
        assert!(matches!(RkeyWire::decode(&frame_with(key, &[])), Err(WireError::Invalid(_))), "{key:?}");
    }

    #[test]
    fn round_trips_with_shm() {
        let key = sample_rkey();
        assert!(key.shm.is_some());
        assert_eq!(RkeyWire::decode(&key.encode()), Ok(key));
    }

    #[test]
    fn round_trips_without_shm() {
        let key = RkeyWire { shm: None, symmetric: true, ..sample_rkey() };
        assert_eq!(RkeyWire::decode(&key.encode()), Ok(key));
    }

    #[test]
    fn round_trips_zero_length() {
        let key = RkeyWire { length: 0, shm: None, base: u64::MAX, ..sample_rkey() };
        assert_eq!(RkeyWire::decode(&key.encode()), Ok(key));
    }

    #[test]
    fn round_trips_with_domain_keys() {
        let key = RkeyWire {
            domain_keys: vec![
                DomainKey { domain: 1, key: vec![0xAA; 4] },
                DomainKey { domain: 2, key: Vec::new() },
            ],
            ..sample_rkey()
        };
        assert_eq!(RkeyWire::decode(&key.encode()), Ok(key));
    }

    #[test]
    fn largest_key_fits_a_frame() {
        let key = RkeyWire {
            domain_keys: vec![DomainKey { domain: 7, key: vec![1; MAX_DOMAIN_KEY_LEN] }; MAX_DOMAIN_KEYS],
            ..sample_rkey()
        };
        let bytes = key.encode();
        assert!(bytes.len() <= MAX_FRAME_LEN);
        assert_eq!(RkeyWire::decode(&bytes), Ok(key));
    }

    #[test]
    fn rejects_address_overflow() {
        rejects_as_invalid(&RkeyWire { base: u64::MAX - 10, length: 11, shm: None, ..sample_rkey() });
    }

    #[test]
    fn rejects_zero_length_with_shm() {
        rejects_as_invalid(&RkeyWire { length: 0, ..sample_rkey() });
    }

    #[test]
    fn rejects_region_past_the_mapping() {
        let shm = sample_locator();
        rejects_as_invalid(&RkeyWire { length: shm.map_len - shm.map_offset + 1, ..sample_rkey() });
        let exact = RkeyWire { length: shm.map_len - shm.map_offset, ..sample_rkey() };
        assert_eq!(RkeyWire::decode(&exact.encode()), Ok(exact));
    }

    #[test]
    fn rejects_invalid_shm_locator() {
        rejects_as_invalid(&RkeyWire {
            shm: Some(ShmLocator { fd: -3, ..sample_locator() }),
            ..sample_rkey()
        });
    }

    #[test]
    fn rejects_unknown_prot_bits() {
        for prot in [0x4, 0x400, 0x8000_0000, PROT_ALL | 0x10] {
            rejects_as_invalid(&RkeyWire { prot, ..sample_rkey() });
        }
        let key = RkeyWire { prot: 0, ..sample_rkey() };
        assert_eq!(RkeyWire::decode(&key.encode()), Ok(key));
    }

    #[test]
    fn rejects_mem_type_out_of_range() {
        rejects_as_invalid(&RkeyWire { mem_type: 10, ..sample_rkey() });
        let key = RkeyWire { mem_type: 9, ..sample_rkey() };
        assert_eq!(RkeyWire::decode(&key.encode()), Ok(key));
    }

    #[test]
    fn rejects_too_many_domain_keys() {
        let key = RkeyWire {
            domain_keys: vec![DomainKey { domain: 1, key: vec![] }; MAX_DOMAIN_KEYS + 1],
            ..sample_rkey()
        };
        let expected = Some(WireError::TooLong { len: MAX_DOMAIN_KEYS + 1, max: MAX_DOMAIN_KEYS });
        assert_eq!(key.try_encode().err(), expected);
        assert_eq!(RkeyWire::decode(&frame_with(&key, &[])).err(), expected);
    }

    #[test]
    fn rejects_oversized_domain_key() {
        let key = RkeyWire {
            domain_keys: vec![DomainKey { domain: 1, key: vec![0; MAX_DOMAIN_KEY_LEN + 1] }],
            ..sample_rkey()
        };
        let expected = Some(WireError::TooLong { len: MAX_DOMAIN_KEY_LEN + 1, max: MAX_DOMAIN_KEY_LEN });
        assert_eq!(key.try_encode().err(), expected);
        assert_eq!(RkeyWire::decode(&frame_with(&key, &[])).err(), expected);
    }

    #[test]
    fn rejects_empty_domain_key_list() {
        let bytes = frame_with(&sample_rkey(), &[(tag::DOMAIN_KEYS, &[0])]);
        assert!(matches!(RkeyWire::decode(&bytes), Err(WireError::Invalid(_))));
    }

    #[test]
    fn rejects_bad_symmetric_flag() {
        let bytes = sample_frame_replacing(tag::SYMMETRIC, Some(&[2]));
        assert!(matches!(RkeyWire::decode(&bytes), Err(WireError::Invalid(_))));
    }

    #[test]
    fn rejects_wrong_fixed_field_lengths() {
        let fixed = [
            (tag::CONTEXT_ID, 16),
            (tag::REGION_ID, 8),
            (tag::BASE, 8),
            (tag::LENGTH, 8),
            (tag::PROT, 4),
            (tag::MEM_TYPE, 1),
            (tag::ACCESS_KEY, 16),
            (tag::SHM_LOCATOR, ShmLocator::WIRE_LEN),
            (tag::SYMMETRIC, 1),
        ];
        for (field, len) in fixed {
            for wrong in [0, len - 1, len + 1] {
                let bytes = sample_frame_replacing(field, Some(&vec![0; wrong]));
                assert_eq!(RkeyWire::decode(&bytes), Err(WireError::BadFieldLength { field, len: wrong }));
            }
        }
    }

    #[test]
    fn rejects_missing_required_fields() {
        let required = [
            (tag::CONTEXT_ID, "context_id"),
            (tag::REGION_ID, "region_id"),
            (tag::BASE, "base"),
            (tag::LENGTH, "length"),
            (tag::PROT, "prot"),
            (tag::MEM_TYPE, "mem_type"),
            (tag::ACCESS_KEY, "access_key"),
            (tag::SYMMETRIC, "symmetric"),
        ];
        for (field, name) in required {
            let bytes = sample_frame_replacing(field, None);
            assert_eq!(RkeyWire::decode(&bytes), Err(WireError::MissingField(name)));
        }
    }

    #[test]
    fn rejects_exported_memh_frame() {
        let memh = crate::samples::sample_exported_memh().encode();
        assert_eq!(RkeyWire::decode(&memh), Err(WireError::WrongKind { expected: 1, found: 2 }));
    }

    #[test]
    fn rejects_version_2() {
        let mut bytes = sample_rkey().encode();
        if let Some(version) = bytes.get_mut(4) {
            *version = 2;
        }
        assert_eq!(RkeyWire::decode(&bytes), Err(WireError::UnsupportedVersion(2)));
    }

    #[test]
    fn rejects_unknown_critical_field() {
        let bytes = frame_with(&sample_rkey(), &[(0xF0, b"future")]);
        assert_eq!(RkeyWire::decode(&bytes), Err(WireError::UnknownCriticalField(0xF0)));
    }

    #[test]
    fn skips_unknown_non_critical_field() {
        let key = sample_rkey();
        let bytes = frame_with(&key, &[(0x10, b"hint"), (0x7F, b"")]);
        assert_eq!(RkeyWire::decode(&bytes), Ok(key));
    }

    #[test]
    fn rejects_trailing_bytes() {
        let mut bytes = sample_rkey().encode();
        bytes.push(0);
        assert_eq!(RkeyWire::decode(&bytes), Err(WireError::TrailingBytes(1)));
    }

    #[test]
    fn rejects_corruption() {
        let mut bytes = sample_rkey().encode();
        if let Some(byte) = bytes.get_mut(20) {
            *byte ^= 0x40;
        }
        assert_eq!(RkeyWire::decode(&bytes), Err(WireError::Checksum));
    }

    #[test]
    #[should_panic(expected = "invalid remote key")]
    fn encode_panics_on_invalid_key() {
        let _ = RkeyWire { prot: PROT_REMOTE_READ | 0x4, ..sample_rkey() }.encode();
    }

    #[test]
    fn debug_hides_access_key() {
        let key = RkeyWire { access_key: [0xEE; 16], ..sample_rkey() };
        let text = format!("{key:?}");
        assert!(text.contains("<redacted>"));
        assert!(!text.contains("238, 238"), "{text}");
    }
}
