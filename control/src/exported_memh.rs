//! The exported memory handle: what `ucp_memh_pack(..., EXPORT)` produces and a same-host peer
//! imports with `ucp_mem_map` (`exported_memh_buffer`).

use std::fmt;

use crate::error::WireError;
use crate::frame::{decode_frame, FrameKind, FrameWriter};
use crate::region::Region;
use crate::shm_locator::ShmLocator;
use crate::tag;

/// An exported memory handle, as handed to a process on the same host.
///
/// Unlike a packed rkey, importing means mapping the exporter's memfd, so the shm locator is
/// required and the region cannot be empty. Encoded as a [`FrameKind::ExportedMemh`] frame whose
/// fields are all critical; `Debug` leaves `access_key` out.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExportedMemhWire {
    /// Identifies the exporting context (random per context).
    pub context_id: [u8; 16],
    /// The exporting context's id of the memory handle.
    pub region_id: u64,
    /// Address of the region's first byte in the exporting process.
    pub base: u64,
    /// Region length in bytes; never 0.
    pub length: u64,
    /// `UCP_MEM_MAP_PROT_*` bits; only those in [`PROT_ALL`](crate::PROT_ALL) are allowed.
    pub prot: u32,
    /// `ucs_memory_type_t`, at most [`MEM_TYPE_MAX`](crate::MEM_TYPE_MAX).
    pub mem_type: u8,
    /// Capability the exporter checks on every remote access.
    pub access_key: [u8; 16],
    /// Where to find the memfd; the region must lie inside its mapping.
    pub shm: ShmLocator,
}

impl ExportedMemhWire {
    /// The frame for this handle.
    ///
    /// # Panics
    ///
    /// If the handle breaks a rule of [`ExportedMemhWire::validate`]; use
    /// [`ExportedMemhWire::try_encode`] to get the error instead.
    pub fn encode(&self) -> Vec<u8> {
        match self.try_encode() {
            Ok(bytes) => bytes,
            Err(error) => panic!("ExportedMemhWire::encode: invalid exported handle: {error}"),
        }
    }

    /// The frame for this handle, or why it cannot be sent.
    pub fn try_encode(&self) -> Result<Vec<u8>, WireError> {
        self.validate()?;
        let mut frame = FrameWriter::new(FrameKind::ExportedMemh);
        self.write_fields(&mut frame);
        frame.finish()
    }

    /// Appends every field, in tag order, without validating anything.
    fn write_fields(&self, frame: &mut FrameWriter) {
        self.region().write(frame);
        frame.field(tag::SHM_LOCATOR, &self.shm.to_bytes());
    }

    /// Checks and decodes an exported handle received from a peer.
    pub fn decode(bytes: &[u8]) -> Result<ExportedMemhWire, WireError> {
        let mut fields = decode_frame(bytes, FrameKind::ExportedMemh)?;
        let region = Region::read(&mut fields)?;
        let shm = ShmLocator::from_bytes(fields.require(tag::SHM_LOCATOR, "shm")?)?;
        fields.finish()?;
        let wire = ExportedMemhWire {
            context_id: region.context_id,
            region_id: region.region_id,
            base: region.base,
            length: region.length,
            prot: region.prot,
            mem_type: region.mem_type,
            access_key: region.access_key,
            shm,
        };
        wire.validate()?;
        Ok(wire)
    }

    /// Checks every rule a decoded handle must satisfy: protection bits, memory type, a non-empty
    /// address range that does not wrap, and a valid locator whose mapping contains the region.
    pub fn validate(&self) -> Result<(), WireError> {
        let region = self.region();
        region.validate()?;
        if self.length == 0 {
            return Err(WireError::Invalid("exported region is empty"));
        }
        region.validate_within(&self.shm)
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

impl fmt::Debug for ExportedMemhWire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExportedMemhWire")
            .field("context_id", &self.context_id)
            .field("region_id", &self.region_id)
            .field("base", &format_args!("{:#x}", self.base))
            .field("length", &self.length)
            .field("prot", &format_args!("{:#x}", self.prot))
            .field("mem_type", &self.mem_type)
            .field("access_key", &format_args!("<redacted>"))
            .field("shm", &self.shm)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::samples::{sample_exported_memh, sample_locator, sample_rkey};

    /// The frame of `memh`, unvalidated.
    fn encode_unchecked(memh: &ExportedMemhWire) -> Vec<u8> {
        let mut frame = FrameWriter::new(FrameKind::ExportedMemh);
        memh.write_fields(&mut frame);
        frame.finish().unwrap()
    }

    fn rejects_as_invalid(memh: &ExportedMemhWire) {
        assert!(matches!(memh.validate(), Err(WireError::Invalid(_))), "{memh:?}");
        assert!(matches!(memh.try_encode(), Err(WireError::Invalid(_))), "{memh:?}");
        assert!(matches!(ExportedMemhWire::decode(&encode_unchecked(memh)), Err(WireError::Invalid(_))));
    }

    #[test]
    fn round_trips() {
        let memh = sample_exported_memh();
        assert_eq!(ExportedMemhWire::decode(&memh.encode()), Ok(memh));
    }

    #[test]
    fn rejects_zero_length() {
        rejects_as_invalid(&ExportedMemhWire { length: 0, ..sample_exported_memh() });
    }

    #[test]
    fn rejects_address_overflow() {
        rejects_as_invalid(&ExportedMemhWire { base: u64::MAX, length: 1, ..sample_exported_memh() });
    }

    #[test]
    fn rejects_unknown_prot_bits() {
        rejects_as_invalid(&ExportedMemhWire { prot: 0x800, ..sample_exported_memh() });
    }

    #[test]
    fn rejects_mem_type_out_of_range() {
        rejects_as_invalid(&ExportedMemhWire { mem_type: 0xFF, ..sample_exported_memh() });
    }

    #[test]
    fn rejects_region_past_the_mapping() {
        let shm = sample_locator();
        rejects_as_invalid(&ExportedMemhWire { length: shm.map_len, ..sample_exported_memh() });
    }

    #[test]
    fn rejects_invalid_locator() {
        let shm = ShmLocator { page_size: 12_288, ..sample_locator() };
        rejects_as_invalid(&ExportedMemhWire { shm, ..sample_exported_memh() });
    }

    #[test]
    fn requires_shm_locator() {
        let memh = sample_exported_memh();
        let mut frame = FrameWriter::new(FrameKind::ExportedMemh);
        memh.region().write(&mut frame);
        assert_eq!(ExportedMemhWire::decode(&frame.finish().unwrap()), Err(WireError::MissingField("shm")));
    }

    #[test]
    fn rejects_rkey_frame() {
        let rkey = sample_rkey().encode();
        assert_eq!(ExportedMemhWire::decode(&rkey), Err(WireError::WrongKind { expected: 2, found: 1 }));
    }

    #[test]
    fn rejects_rkey_only_fields() {
        let memh = sample_exported_memh();
        let mut frame = FrameWriter::new(FrameKind::ExportedMemh);
        memh.write_fields(&mut frame);
        frame.field(tag::SYMMETRIC, &[1]);
        assert_eq!(
            ExportedMemhWire::decode(&frame.finish().unwrap()),
            Err(WireError::UnknownCriticalField(tag::SYMMETRIC))
        );
    }

    #[test]
    fn rejects_version_2() {
        let mut bytes = sample_exported_memh().encode();
        if let Some(version) = bytes.get_mut(4) {
            *version = 2;
        }
        assert_eq!(ExportedMemhWire::decode(&bytes), Err(WireError::UnsupportedVersion(2)));
    }

    #[test]
    fn skips_unknown_non_critical_field() {
        let memh = sample_exported_memh();
        let mut frame = FrameWriter::new(FrameKind::ExportedMemh);
        frame.field(0x33, b"from the future");
        memh.write_fields(&mut frame);
        assert_eq!(ExportedMemhWire::decode(&frame.finish().unwrap()), Ok(memh));
    }

    #[test]
    fn rejects_trailing_bytes() {
        let mut bytes = sample_exported_memh().encode();
        bytes.extend_from_slice(b"xx");
        assert_eq!(ExportedMemhWire::decode(&bytes), Err(WireError::TrailingBytes(2)));
    }
}
