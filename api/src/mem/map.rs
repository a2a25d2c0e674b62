//! `ucp_mem_map`: allocate, register or import, per the validated matrix row.

use std::sync::Arc;

use zcx_control::ExportedMemhWire;
use zcx_dataplane::RegionEntry;
use zcx_hugepages::{Backing, MapOptions, Mapping, PagePolicy, PageSize, Placement, Populate};

use crate::config::HugepageMode;
use crate::context::{Context, ContextInner, Features};
use crate::mem::locator::map_peer_memfd;
use crate::mem::params::{classify, AllocPlacement, MapRequest};
use crate::mem::registration::{Allocation, Registration};
use crate::mem::{MemHandle, MemMapFlags, MemMapParams, Prot};
use crate::status::{fail_with, Result, Status};

impl Context {
    /// `ucp_mem_map`: map (register) caller memory, allocate and register memory, or import a peer's
    /// exported handle — every row of UCP's behaviour matrix, with UCP's parameter rules.
    ///
    /// Allocated memory is memfd-backed (so a same-host peer can map it) and hugepage-backed per
    /// `ZCX_HUGEPAGES`. Length 0 gives UCP's dummy handle: it unmaps, packs and unpacks fine.
    /// Registering a range that a live registration covers reuses it (the registration cache).
    pub fn mem_map(&self, params: &MemMapParams<'_>) -> Result<MemHandle> {
        let valid = classify(params, zcx_hugepages::base_page_size())?;
        let ctx = &self.inner;
        match valid.request {
            MapRequest::ZeroLength => Ok(new_handle(ctx, 0, 0, valid.prot, valid.flags, None)?),
            MapRequest::Allocate { placement, length } => {
                let mapping = allocate(ctx, placement, length, valid.flags)?;
                let allocation = Allocation::new(ctx, mapping);
                let start = allocation.start();
                let nonblock = valid.flags.contains(MemMapFlags::NONBLOCK);
                let registration = Registration::new(
                    ctx,
                    start,
                    start + length,
                    valid.prot,
                    Some(allocation),
                    false,
                    nonblock,
                )?;
                new_handle(ctx, start, length, valid.prot, valid.flags, Some(registration))
            }
            MapRequest::Register { address, length } => {
                let registration = register(ctx, address, length, valid.prot, valid.flags)?;
                new_handle(ctx, address, length, valid.prot, valid.flags, Some(registration))
            }
            MapRequest::Import { buffer } => import(ctx, buffer, params.prot, valid.flags),
        }
    }
}

fn new_handle(
    ctx: &Arc<ContextInner>,
    address: usize,
    length: usize,
    prot: Prot,
    flags: MemMapFlags,
    registration: Option<Arc<Registration>>,
) -> Result<MemHandle> {
    let handle = MemHandle {
        ctx: Arc::clone(ctx),
        region_id: ctx.next_id(),
        address,
        length,
        prot,
        flags,
        access_key: ctx.new_access_key()?,
        registration,
    };
    if length > 0 && prot.intersects(Prot::REMOTE_READ | Prot::REMOTE_WRITE) {
        let entry = RegionEntry {
            base: address as u64,
            length: length as u64,
            prot: prot.bits(),
            access_key: handle.access_key,
            // What the handle's packed keys say, for the owner to vouch against (see `rkey_wire`).
            shm: handle.shm_locator(),
        };
        // SAFETY: the range is mapped read-write for as long as the handle lives: zcx allocated it,
        // or the caller promised so through the unsafe `MemMapParams::address`; the handle's Drop
        // removes the entry before the memory can be released.
        unsafe { ctx.remote_access.insert(handle.region_id, entry) };
    }
    if length > 0 && prot.intersects(Prot::REMOTE_READ | Prot::REMOTE_WRITE) {
        // A peer may map it and read (write) it anyway: so it may copy a large put's chunks from
        // it (a large get's into it).
        let wire = handle.same_host_rkey_wire();
        if wire.shm.is_some() {
            ctx.help_sources.insert(handle.region_id, prot, address, length, wire);
        }
    }
    Ok(handle)
}

fn allocate(
    ctx: &ContextInner,
    placement: AllocPlacement,
    length: usize,
    flags: MemMapFlags,
) -> Result<Mapping> {
    let huge = PageSize::from_bytes(ctx.config.hugepage_size()).unwrap_or(PageSize::Huge2M);
    let page_policy = match ctx.config.hugepages() {
        HugepageMode::Try => PagePolicy::Prefer(huge),
        HugepageMode::Yes => PagePolicy::Require(huge),
        HugepageMode::No => PagePolicy::Never,
    };
    let options = MapOptions {
        len: length,
        page_policy,
        backing: Backing::Memfd,
        placement: match placement {
            AllocPlacement::Anywhere => Placement::Anywhere,
            AllocPlacement::Hint(a) => Placement::Hint(a),
            AllocPlacement::Fixed(a) => Placement::Fixed(a),
        },
        populate: if flags.contains(MemMapFlags::NONBLOCK) { Populate::Lazy } else { Populate::Eager },
        lock: flags.contains(MemMapFlags::LOCK),
        numa_node: None,
        name: "zcx-mem_map",
    };
    Mapping::new(&options).map_err(|e| {
        use zcx_hugepages::Error as E;
        let status = match &e {
            E::InvalidLength | E::Misaligned { .. } | E::OutOfRange { .. } => Status::InvalidParam,
            E::AddressInUse { .. } => Status::AlreadyExists,
            E::HugepagesUnavailable { .. } => Status::NoMemory,
            E::MemlockLimit { .. } => Status::ExceedsLimit,
            E::NumaNode { .. } => Status::NoDevice,
            _ if e.errno() == Some(libc::ENOMEM) => Status::NoMemory,
            _ if e.errno() == Some(libc::EINVAL) => Status::InvalidParam,
            _ => Status::IoError,
        };
        fail_with(status, format!("mem_map of {length} bytes failed: {e}"))
    })
}

fn register(
    ctx: &Arc<ContextInner>,
    address: usize,
    length: usize,
    prot: Prot,
    flags: MemMapFlags,
) -> Result<Arc<Registration>> {
    let end = address + length;
    let lock = flags.contains(MemMapFlags::LOCK);
    // A cached registration may not have its pages pinned, so LOCK always registers anew.
    if !lock {
        if let Some(cached) = ctx.rcache.lookup(address, end, prot.bits()) {
            // A device key (verbs) is enforced by the NIC over its whole registration: a handle
            // reusing a larger one would hand peers a key to the larger range. Such a handle
            // registers its own range instead.
            if !ctx.nic_enforced_keys() || (cached.start, cached.end) == (address, end) {
                return Ok(cached);
            }
        }
    }
    check_mapped(address, length)?;
    let backing = ctx.allocation_containing(address, end);
    if lock {
        // SAFETY: check_mapped proved the range is mapped; mlock does not touch the contents.
        if unsafe { libc::mlock(address as *const libc::c_void, length) } != 0 {
            let err = std::io::Error::last_os_error();
            let (soft, hard) = zcx_hugepages::memlock_limit();
            return Err(fail_with(
                Status::ExceedsLimit,
                format!(
                    "mlock of {length} bytes failed ({err}): RLIMIT_MEMLOCK is {soft} bytes (soft) / {hard} \
                     bytes (hard); raise it or run with CAP_IPC_LOCK"
                ),
            ));
        }
    }
    Registration::new(ctx, address, end, prot, backing, lock, flags.contains(MemMapFlags::NONBLOCK))
}

/// `INVALID_ADDR` unless every page of `[address, address + length)` is mapped in this process.
fn check_mapped(address: usize, length: usize) -> Result<()> {
    const CHUNK_PAGES: usize = 4096;
    let page = zcx_hugepages::base_page_size();
    let mut start = address & !(page - 1);
    let end = address + length;
    let mut residency = [0u8; CHUNK_PAGES];
    while start < end {
        let len = (end - start).min(CHUNK_PAGES * page);
        // SAFETY: mincore only reads the page tables of [start, start + len) and writes one byte per
        // page into `residency`, which has room for CHUNK_PAGES pages; `start` is page aligned.
        let rc = unsafe { libc::mincore(start as *mut libc::c_void, len, residency.as_mut_ptr()) };
        if rc != 0 {
            return Err(fail_with(
                Status::InvalidAddr,
                format!("cannot register {address:#x}+{length}: not mapped in this process"),
            ));
        }
        start += len;
    }
    Ok(())
}

fn import(
    ctx: &Arc<ContextInner>,
    buffer: &[u8],
    prot: Option<Prot>,
    flags: MemMapFlags,
) -> Result<MemHandle> {
    if !ctx.features.contains(Features::EXPORTED_MEMH) {
        return Err(fail_with(Status::InvalidParam, "importing needs the EXPORTED_MEMH feature".into()));
    }
    let wire = ExportedMemhWire::decode(buffer)
        .map_err(|e| fail_with(Status::InvalidParam, format!("bad exported memory handle: {e}")))?;
    // The decoder guarantees map_offset + length <= map_len.
    let offset = usize::try_from(wire.shm.map_offset).map_err(|_| Status::InvalidParam)?;
    let length = usize::try_from(wire.length).map_err(|_| Status::InvalidParam)?;
    let mapping = map_peer_memfd(&wire.shm)?;
    let allocation = Allocation::new(ctx, mapping);
    let address = allocation.start() + offset;
    let exported_prot = Prot::from_bits_truncate(wire.prot);
    let prot = prot.map_or(exported_prot, |p| p & exported_prot);
    let nonblock = flags.contains(MemMapFlags::NONBLOCK);
    let registration =
        Registration::new(ctx, address, address + length, prot, Some(allocation), false, nonblock)?;
    new_handle(ctx, address, length, prot, flags, Some(registration))
}
