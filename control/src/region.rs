//! The description of a memory region that packed rkeys and exported memory handles share:
//! who exported it, where it is, what a peer may do with it, and the capability that proves it.

use crate::error::WireError;
use crate::fields::Fields;
use crate::frame::FrameWriter;
use crate::shm_locator::ShmLocator;
use crate::tag;

/// `UCP_MEM_MAP_PROT_LOCAL_READ`.
pub const PROT_LOCAL_READ: u32 = 0x1;
/// `UCP_MEM_MAP_PROT_LOCAL_WRITE`.
pub const PROT_LOCAL_WRITE: u32 = 0x2;
/// `UCP_MEM_MAP_PROT_REMOTE_READ`.
pub const PROT_REMOTE_READ: u32 = 0x100;
/// `UCP_MEM_MAP_PROT_REMOTE_WRITE`.
pub const PROT_REMOTE_WRITE: u32 = 0x200;
/// Every protection bit a wire region may carry; any other bit makes it invalid.
pub const PROT_ALL: u32 = PROT_LOCAL_READ | PROT_LOCAL_WRITE | PROT_REMOTE_READ | PROT_REMOTE_WRITE;
/// The largest `ucs_memory_type_t` value accepted (`UCS_MEMORY_TYPE_UNKNOWN`).
pub const MEM_TYPE_MAX: u8 = 9;

/// The fields common to both region messages, with the rules that apply to all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Region {
    pub(crate) context_id: [u8; 16],
    pub(crate) region_id: u64,
    pub(crate) base: u64,
    pub(crate) length: u64,
    pub(crate) prot: u32,
    pub(crate) mem_type: u8,
    pub(crate) access_key: [u8; 16],
}

impl Region {
    /// Checks protection bits, memory type and that the region does not wrap the address space.
    pub(crate) fn validate(&self) -> Result<(), WireError> {
        if self.prot & !PROT_ALL != 0 {
            return Err(WireError::Invalid("protection has bits outside UCP_MEM_MAP_PROT_*"));
        }
        if self.mem_type > MEM_TYPE_MAX {
            return Err(WireError::Invalid("memory type is out of range"));
        }
        if self.base.checked_add(self.length).is_none() {
            return Err(WireError::Invalid("region end overflows the address space"));
        }
        Ok(())
    }

    /// Checks that a peer mapping `shm` finds the whole region inside the mapping, so that
    /// `rkey_ptr`-style access can never reach past the memfd.
    pub(crate) fn validate_within(&self, shm: &ShmLocator) -> Result<(), WireError> {
        shm.validate()?;
        match shm.map_offset.checked_add(self.length) {
            Some(end) if end <= shm.map_len => Ok(()),
            _ => Err(WireError::Invalid("region extends past the end of its shm mapping")),
        }
    }

    /// Appends the region's fields, in tag order.
    pub(crate) fn write(&self, frame: &mut FrameWriter) {
        frame
            .field(tag::CONTEXT_ID, &self.context_id)
            .field(tag::REGION_ID, &self.region_id.to_le_bytes())
            .field(tag::BASE, &self.base.to_le_bytes())
            .field(tag::LENGTH, &self.length.to_le_bytes())
            .field(tag::PROT, &self.prot.to_le_bytes())
            .field(tag::MEM_TYPE, &[self.mem_type])
            .field(tag::ACCESS_KEY, &self.access_key);
    }

    /// Takes the region's fields; all are required and fixed-size. Values are not validated here.
    pub(crate) fn read(fields: &mut Fields<'_>) -> Result<Region, WireError> {
        Ok(Region {
            context_id: fields.require_array(tag::CONTEXT_ID, "context_id")?,
            region_id: u64::from_le_bytes(fields.require_array(tag::REGION_ID, "region_id")?),
            base: u64::from_le_bytes(fields.require_array(tag::BASE, "base")?),
            length: u64::from_le_bytes(fields.require_array(tag::LENGTH, "length")?),
            prot: u32::from_le_bytes(fields.require_array(tag::PROT, "prot")?),
            mem_type: u8::from_le_bytes(fields.require_array(tag::MEM_TYPE, "mem_type")?),
            access_key: fields.require_array(tag::ACCESS_KEY, "access_key")?,
        })
    }
}
