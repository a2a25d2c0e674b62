//! `ucp_mem_map_params` and the behaviour matrix of `ucp_mem_map`, as a pure classification.

use bitflags::bitflags;

use crate::status::{Result, Status};

bitflags! {
    /// `UCP_MEM_MAP_*` flags, same bit values.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct MemMapFlags: u32 {
        /// `UCP_MEM_MAP_NONBLOCK`: do not populate pages up front; map them on first touch or on
        /// [`crate::MemHandle::advise`] with WILLNEED.
        const NONBLOCK = 1 << 0;
        /// `UCP_MEM_MAP_ALLOCATE`: allocate the memory (hugepage- and memfd-backed).
        const ALLOCATE = 1 << 1;
        /// `UCP_MEM_MAP_FIXED`: place the allocation exactly at `address` (page aligned), never
        /// replacing an existing mapping.
        const FIXED = 1 << 2;
        /// `UCP_MEM_MAP_SYMMETRIC_RKEY`: a hint; accepted. zcx keys carry a per-region capability,
        /// so keys of different regions never compare equal.
        const SYMMETRIC_RKEY = 1 << 3;
        /// `UCP_MEM_MAP_LOCK`: pin the pages (`mlock`); incompatible with NONBLOCK.
        const LOCK = 1 << 4;
    }
}

bitflags! {
    /// `UCP_MEM_MAP_PROT_*` protection bits, same values.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Prot: u32 {
        /// `UCP_MEM_MAP_PROT_LOCAL_READ`
        const LOCAL_READ = 1 << 0;
        /// `UCP_MEM_MAP_PROT_LOCAL_WRITE`
        const LOCAL_WRITE = 1 << 1;
        /// `UCP_MEM_MAP_PROT_REMOTE_READ`
        const REMOTE_READ = 1 << 8;
        /// `UCP_MEM_MAP_PROT_REMOTE_WRITE`
        const REMOTE_WRITE = 1 << 9;
    }
}

impl Default for Prot {
    /// UCP's default when `prot` is not set: all four bits.
    fn default() -> Self {
        Prot::all()
    }
}

/// `ucs_memory_type_t`, same numeric values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(u8)]
pub enum MemoryType {
    /// `UCS_MEMORY_TYPE_HOST`: system memory — the only type zcx maps.
    #[default]
    Host = 0,
    /// `UCS_MEMORY_TYPE_CUDA`
    Cuda = 1,
    /// `UCS_MEMORY_TYPE_CUDA_MANAGED`
    CudaManaged = 2,
    /// `UCS_MEMORY_TYPE_ROCM`
    Rocm = 3,
    /// `UCS_MEMORY_TYPE_ROCM_MANAGED`
    RocmManaged = 4,
    /// `UCS_MEMORY_TYPE_RDMA`
    Rdma = 5,
    /// `UCS_MEMORY_TYPE_ZE_HOST`
    ZeHost = 6,
    /// `UCS_MEMORY_TYPE_ZE_DEVICE`
    ZeDevice = 7,
    /// `UCS_MEMORY_TYPE_ZE_MANAGED`
    ZeManaged = 8,
    /// `UCS_MEMORY_TYPE_UNKNOWN`: detect; zcx detects host memory.
    Unknown = 9,
}

impl MemoryType {
    /// The memory type with this `ucs_memory_type_t` value; out of range → `INVALID_PARAM`.
    pub fn from_raw(raw: u8) -> Result<MemoryType> {
        use MemoryType::*;
        [Host, Cuda, CudaManaged, Rocm, RocmManaged, Rdma, ZeHost, ZeDevice, ZeManaged, Unknown]
            .get(usize::from(raw))
            .copied()
            .ok_or(Status::InvalidParam)
    }
}

/// `ucp_mem_map_params_t`. A field left `None` is a field absent from UCP's `field_mask`.
///
/// Build it with the setters; `address` is only settable through an `unsafe` setter because, without
/// `ALLOCATE`, it registers memory the caller owns (see [`MemMapParams::address`]). The safe
/// [`MemMapParams::alloc_at_hint`] and [`MemMapParams::alloc_fixed`] cover allocation at an address.
#[derive(Clone, Debug, Default)]
pub struct MemMapParams<'a> {
    pub(crate) address: Option<usize>,
    pub(crate) length: Option<usize>,
    pub(crate) flags: Option<MemMapFlags>,
    pub(crate) prot: Option<Prot>,
    pub(crate) memory_type: Option<MemoryType>,
    pub(crate) exported_memh_buffer: Option<&'a [u8]>,
}

impl<'a> MemMapParams<'a> {
    /// Empty parameters (UCP's `field_mask = 0`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Allocate `length` bytes anywhere (`ALLOCATE`, no address).
    pub fn alloc(length: usize) -> Self {
        Self::new().length(length).flags(MemMapFlags::ALLOCATE)
    }

    /// `ucp_mem_map_params.address` (`UCP_MEM_MAP_PARAM_FIELD_ADDRESS`), raw.
    ///
    /// # Safety
    /// Unless the flags include `ALLOCATE` (then the address is only a placement), this registers the
    /// caller's memory `[address, address + length)`: it must be mapped, readable and writable by
    /// this process, and must stay mapped until the returned handle (and every handle or key
    /// derived from it) is dropped, because local and remote operations may access it until then.
    /// Registering a sub-range of memory zcx allocated is always fine while its handle lives.
    pub unsafe fn address(mut self, address: *mut u8) -> Self {
        self.address = Some(address as usize);
        self
    }

    /// Allocate at `address` used as a hint (`ALLOCATE` with an address).
    pub fn alloc_at_hint(self, address: usize) -> Self {
        let flags = self.flags.unwrap_or_default() | MemMapFlags::ALLOCATE;
        Self { address: Some(address), ..self }.flags(flags)
    }

    /// Allocate exactly at `address` (`ALLOCATE | FIXED`); fails rather than replace a mapping.
    pub fn alloc_fixed(self, address: usize) -> Self {
        let flags = self.flags.unwrap_or_default() | MemMapFlags::ALLOCATE | MemMapFlags::FIXED;
        Self { address: Some(address), ..self }.flags(flags)
    }

    /// `length` (`UCP_MEM_MAP_PARAM_FIELD_LENGTH`).
    pub fn length(mut self, length: usize) -> Self {
        self.length = Some(length);
        self
    }

    /// `flags` (`UCP_MEM_MAP_PARAM_FIELD_FLAGS`); replaces any flags set before.
    pub fn flags(mut self, flags: MemMapFlags) -> Self {
        self.flags = Some(flags);
        self
    }

    /// `prot` (`UCP_MEM_MAP_PARAM_FIELD_PROT`); default all four bits.
    pub fn prot(mut self, prot: Prot) -> Self {
        self.prot = Some(prot);
        self
    }

    /// `memory_type` (`UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE`); anything but host → `UNSUPPORTED`.
    pub fn memory_type(mut self, memory_type: MemoryType) -> Self {
        self.memory_type = Some(memory_type);
        self
    }

    /// `exported_memh_buffer` (`UCP_MEM_MAP_PARAM_FIELD_EXPORTED_MEMH_BUFFER`): import a peer's
    /// exported handle (from [`crate::MemHandle::pack`] with `EXPORT`) as a mapping of its memory.
    pub fn exported_memh_buffer(mut self, buffer: &'a [u8]) -> Self {
        self.exported_memh_buffer = Some(buffer);
        self
    }
}

/// What a valid `mem_map` call asks for: one row of the behaviour matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapRequest<'a> {
    /// Length 0: UCP's dummy handle.
    ZeroLength,
    /// Register caller memory (`register`).
    Register { address: usize, length: usize },
    /// Allocate and register (`alloc+register`, `,hint`, `,fixed`).
    Allocate { placement: AllocPlacement, length: usize },
    /// Map a peer's exported handle.
    Import { buffer: &'a [u8] },
}

/// Where an allocation goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AllocPlacement {
    Anywhere,
    Hint(usize),
    Fixed(usize),
}

/// The validated parameters: the matrix row plus the flags, protection and memory type in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ValidParams<'a> {
    pub request: MapRequest<'a>,
    pub flags: MemMapFlags,
    pub prot: Prot,
}

/// Applies UCP's parameter rules and the behaviour matrix of `ucp_mem_map`.
pub(crate) fn classify<'a>(params: &MemMapParams<'a>, base_page: usize) -> Result<ValidParams<'a>> {
    let flags = params.flags.unwrap_or_default();
    let prot = params.prot.unwrap_or_default();
    let address = params.address.filter(|&a| a != 0);
    let invalid = |why: &str| {
        tracing::debug!(why, ?params, "mem_map: invalid parameters");
        Err(Status::InvalidParam)
    };

    if params.length.is_none() && params.exported_memh_buffer.is_none() {
        return invalid("the length is not set");
    }
    if flags.contains(MemMapFlags::NONBLOCK | MemMapFlags::LOCK) {
        return invalid("NONBLOCK and LOCK contradict each other");
    }
    if flags.contains(MemMapFlags::FIXED) && address.is_some_and(|a| a % base_page != 0) {
        return invalid("FIXED needs a page-aligned address");
    }
    match params.memory_type {
        None | Some(MemoryType::Host) | Some(MemoryType::Unknown) => {}
        Some(other) => {
            tracing::debug!(?other, "mem_map: only host memory is supported");
            return Err(Status::Unsupported);
        }
    }
    if let Some(buffer) = params.exported_memh_buffer {
        if flags.contains(MemMapFlags::ALLOCATE) {
            return invalid("an exported handle cannot be combined with ALLOCATE");
        }
        if flags.contains(MemMapFlags::FIXED) {
            return invalid("an exported handle cannot be combined with FIXED");
        }
        return Ok(ValidParams { request: MapRequest::Import { buffer }, flags, prot });
    }

    let length = params.length.unwrap_or(0);
    let allocate = flags.contains(MemMapFlags::ALLOCATE);
    let fixed = flags.contains(MemMapFlags::FIXED);
    // The matrix, row by row (NONBLOCK only affects how pages are populated).
    let request = match (allocate, fixed, address) {
        (false, false, None) if length > 0 => return invalid("no address and no ALLOCATE"),
        (false, false, None) => MapRequest::ZeroLength,
        (true, false, None) => MapRequest::Allocate { placement: AllocPlacement::Anywhere, length },
        (false, true, None) => return invalid("FIXED without ALLOCATE and address"),
        (false, false, Some(address)) => MapRequest::Register { address, length },
        (true, true, None) => return invalid("FIXED without an address"),
        (true, false, Some(a)) => MapRequest::Allocate { placement: AllocPlacement::Hint(a), length },
        (false, true, Some(_)) => return invalid("FIXED without ALLOCATE"),
        (true, true, Some(a)) => MapRequest::Allocate { placement: AllocPlacement::Fixed(a), length },
    };
    let request = match request {
        MapRequest::Allocate { length: 0, .. } | MapRequest::Register { length: 0, .. } => {
            MapRequest::ZeroLength
        }
        MapRequest::Register { address, length } if address.checked_add(length).is_none() => {
            return invalid("address + length overflows");
        }
        other => other,
    };
    Ok(ValidParams { request, flags, prot })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    fn row(
        allocate: bool,
        fixed: bool,
        address: Option<usize>,
        length: usize,
    ) -> Result<MapRequest<'static>> {
        let mut flags = MemMapFlags::empty();
        flags.set(MemMapFlags::ALLOCATE, allocate);
        flags.set(MemMapFlags::FIXED, fixed);
        let mut p = MemMapParams::new().length(length).flags(flags);
        p.address = address;
        classify(&p, PAGE).map(|v| v.request)
    }

    #[test]
    fn behaviour_matrix_rows() {
        let a = 0x7000_0000_0000;
        for nonblock in [false, true] {
            let _ = nonblock; // NONBLOCK does not change the row; exercised in the integration tests.
            assert_eq!(row(false, false, None, 4096), Err(Status::InvalidParam));
            assert_eq!(
                row(true, false, None, 4096),
                Ok(MapRequest::Allocate { placement: AllocPlacement::Anywhere, length: 4096 })
            );
            assert_eq!(row(false, true, None, 4096), Err(Status::InvalidParam));
            assert_eq!(
                row(false, false, Some(a), 4096),
                Ok(MapRequest::Register { address: a, length: 4096 })
            );
            assert_eq!(row(true, true, None, 4096), Err(Status::InvalidParam));
            assert_eq!(
                row(true, false, Some(a), 4096),
                Ok(MapRequest::Allocate { placement: AllocPlacement::Hint(a), length: 4096 })
            );
            assert_eq!(row(false, true, Some(a), 4096), Err(Status::InvalidParam));
            assert_eq!(
                row(true, true, Some(a), 4096),
                Ok(MapRequest::Allocate { placement: AllocPlacement::Fixed(a), length: 4096 })
            );
        }
    }

    #[test]
    fn zero_length_is_the_dummy_handle_in_every_valid_row() {
        assert_eq!(row(false, false, None, 0), Ok(MapRequest::ZeroLength));
        assert_eq!(row(true, false, None, 0), Ok(MapRequest::ZeroLength));
        assert_eq!(row(false, false, Some(0x1000), 0), Ok(MapRequest::ZeroLength));
        // The erroneous rows stay erroneous with length 0.
        assert_eq!(row(false, true, None, 0), Err(Status::InvalidParam));
    }

    #[test]
    fn ucp_rules() {
        // No length and no exported buffer.
        assert_eq!(
            classify(&MemMapParams::new().flags(MemMapFlags::ALLOCATE), PAGE),
            Err(Status::InvalidParam)
        );
        // FIXED with an unaligned address.
        let p = MemMapParams::alloc(PAGE).alloc_fixed(0x7000_0000_0001);
        assert_eq!(classify(&p, PAGE), Err(Status::InvalidParam));
        // NONBLOCK | LOCK.
        let p = MemMapParams::alloc(PAGE)
            .flags(MemMapFlags::ALLOCATE | MemMapFlags::NONBLOCK | MemMapFlags::LOCK);
        assert_eq!(classify(&p, PAGE), Err(Status::InvalidParam));
        // Exported buffer with ALLOCATE.
        let p = MemMapParams::alloc(PAGE).exported_memh_buffer(b"x");
        assert_eq!(classify(&p, PAGE), Err(Status::InvalidParam));
        // Exported buffer alone needs no length.
        let p = MemMapParams::new().exported_memh_buffer(b"x");
        assert!(matches!(classify(&p, PAGE).unwrap().request, MapRequest::Import { .. }));
        // A non-host memory type.
        let p = MemMapParams::alloc(PAGE).memory_type(MemoryType::Cuda);
        assert_eq!(classify(&p, PAGE), Err(Status::Unsupported));
        let p = MemMapParams::alloc(PAGE).memory_type(MemoryType::Unknown);
        assert!(classify(&p, PAGE).is_ok());
        // Register range that wraps the address space.
        let mut p = MemMapParams::new().length(2 * PAGE);
        p.address = Some(usize::MAX - PAGE);
        assert_eq!(classify(&p, PAGE), Err(Status::InvalidParam));
    }

    #[test]
    fn prot_defaults_to_all_four_bits() {
        let v = classify(&MemMapParams::alloc(PAGE), PAGE).unwrap();
        assert_eq!(v.prot.bits(), 0x303);
        let v = classify(&MemMapParams::alloc(PAGE).prot(Prot::LOCAL_READ), PAGE).unwrap();
        assert_eq!(v.prot, Prot::LOCAL_READ);
    }

    #[test]
    fn memory_type_from_raw() {
        assert_eq!(MemoryType::from_raw(0), Ok(MemoryType::Host));
        assert_eq!(MemoryType::from_raw(9), Ok(MemoryType::Unknown));
        assert_eq!(MemoryType::from_raw(10), Err(Status::InvalidParam));
    }
}
