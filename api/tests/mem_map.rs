//! `ucp_mem_map` against real memory: every row of the behaviour matrix, UCP's parameter rules,
//! query, advise, zero length, and the registration cache.

mod common;

use zcx::{
    Config, Context, ContextParams, Features, MemAdvice, MemAdviseParams, MemMapFlags, MemMapParams,
    MemhPackFlags, MemoryType, Prot, Status,
};

fn context_with(vars: &[(&str, &str)]) -> Context {
    let config = Config::from_vars(vars.iter().copied()).expect("config");
    Context::new(&ContextParams::new(Features::RMA | Features::EXPORTED_MEMH), &config).expect("context")
}

fn context() -> Context {
    context_with(&[])
}

/// Caller-owned memory for the `register` row: an anonymous mapping freed on drop.
struct CallerMemory {
    ptr: *mut u8,
    len: usize,
}

impl CallerMemory {
    fn new(len: usize) -> Self {
        // SAFETY: a fresh anonymous private mapping; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        CallerMemory { ptr: ptr.cast(), len }
    }
}

impl Drop for CallerMemory {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` created.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn flags(nonblock: bool, allocate: bool, fixed: bool) -> MemMapFlags {
    let mut f = MemMapFlags::empty();
    f.set(MemMapFlags::NONBLOCK, nonblock);
    f.set(MemMapFlags::ALLOCATE, allocate);
    f.set(MemMapFlags::FIXED, fixed);
    f
}

fn write_read_back(memh: &zcx::MemHandle) {
    let len = memh.length();
    // SAFETY: the handle maps `len` writable bytes at `address` while it lives.
    let bytes = unsafe { std::slice::from_raw_parts_mut(memh.address(), len) };
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = common::pattern_byte(len as u64, i);
    }
    assert!(bytes.iter().enumerate().all(|(i, b)| *b == common::pattern_byte(len as u64, i)));
}

#[test]
fn matrix_every_row_with_and_without_nonblock() {
    let ctx = context();
    let len = 3 * 4096 + 17;
    for nonblock in [false, true] {
        // ALLOCATE=0 FIXED=0 address=0: error when length > 0.
        let p = MemMapParams::new().length(len).flags(flags(nonblock, false, false));
        assert_eq!(ctx.mem_map(&p).unwrap_err(), Status::InvalidParam);

        // ALLOCATE=1 FIXED=0 address=0: alloc+register.
        let p = MemMapParams::new().length(len).flags(flags(nonblock, true, false));
        let memh = ctx.mem_map(&p).expect("alloc+register");
        assert!(!memh.address().is_null());
        assert_eq!(memh.length(), len);
        write_read_back(&memh);

        // ALLOCATE=0 FIXED=1 address=0: error.
        let p = MemMapParams::new().length(len).flags(flags(nonblock, false, true));
        assert_eq!(ctx.mem_map(&p).unwrap_err(), Status::InvalidParam);

        // ALLOCATE=0 FIXED=0 address defined: register.
        let caller = CallerMemory::new(len);
        // SAFETY: `caller` outlives `memh` (dropped at the end of the iteration, after it).
        let p = unsafe { MemMapParams::new().address(caller.ptr) }
            .length(len)
            .flags(flags(nonblock, false, false));
        let memh = ctx.mem_map(&p).expect("register");
        assert_eq!(memh.address(), caller.ptr);
        write_read_back(&memh);
        drop(memh);

        // ALLOCATE=1 FIXED=1 address=0: error.
        let p = MemMapParams::new().length(len).flags(flags(nonblock, true, true));
        assert_eq!(ctx.mem_map(&p).unwrap_err(), Status::InvalidParam);

        // ALLOCATE=1 FIXED=0 address defined: alloc+register at a hint.
        let hint = common::free_address(len, 4096);
        let memh = ctx.mem_map(
            &MemMapParams::new().length(len).flags(flags(nonblock, false, false)).alloc_at_hint(hint),
        );
        let memh = memh.expect("alloc+register,hint");
        write_read_back(&memh);

        // ALLOCATE=0 FIXED=1 address defined: error (FIXED needs ALLOCATE).
        let caller = CallerMemory::new(len);
        // SAFETY: the call fails; nothing is registered.
        let p = unsafe { MemMapParams::new().address(caller.ptr) }
            .length(len)
            .flags(flags(nonblock, false, true));
        assert_eq!(ctx.mem_map(&p).unwrap_err(), Status::InvalidParam);

        // ALLOCATE=1 FIXED=1 address defined: alloc+register exactly there.
        let fixed = common::free_address(len, 4096);
        let p = MemMapParams::new().length(len).flags(flags(nonblock, false, false)).alloc_fixed(fixed);
        let memh = ctx.mem_map(&p).expect("alloc+register,fixed");
        assert_eq!(memh.address() as usize, fixed);
        write_read_back(&memh);
    }
}

#[test]
fn fixed_on_a_live_mapping_fails_and_leaves_it_untouched() {
    let ctx = context();
    let caller = CallerMemory::new(8192);
    // SAFETY: `caller` is a live 8 KiB mapping.
    unsafe { std::ptr::write_bytes(caller.ptr, 0xAB, 8192) };
    let p = MemMapParams::new().length(8192).alloc_fixed(caller.ptr as usize);
    assert_eq!(ctx.mem_map(&p).unwrap_err(), Status::AlreadyExists);
    // SAFETY: still the same live mapping.
    let bytes = unsafe { std::slice::from_raw_parts(caller.ptr, 8192) };
    assert!(bytes.iter().all(|&b| b == 0xAB));
}

#[test]
fn ucp_parameter_rules() {
    let ctx = context();
    // No length, no exported buffer.
    assert_eq!(
        ctx.mem_map(&MemMapParams::new().flags(MemMapFlags::ALLOCATE)).unwrap_err(),
        Status::InvalidParam
    );
    // FIXED with an unaligned address.
    let p = MemMapParams::alloc(4096).alloc_fixed(common::free_address(4096, 4096) + 8);
    assert_eq!(ctx.mem_map(&p).unwrap_err(), Status::InvalidParam);
    // Exported buffer with ALLOCATE.
    let exporter = ctx.mem_map(&MemMapParams::alloc(4096)).unwrap();
    let exported = exporter.pack(MemhPackFlags::EXPORT).unwrap();
    let p = MemMapParams::alloc(4096).exported_memh_buffer(&exported);
    assert_eq!(ctx.mem_map(&p).unwrap_err(), Status::InvalidParam);
    // NONBLOCK | LOCK.
    let p =
        MemMapParams::alloc(4096).flags(MemMapFlags::ALLOCATE | MemMapFlags::NONBLOCK | MemMapFlags::LOCK);
    assert_eq!(ctx.mem_map(&p).unwrap_err(), Status::InvalidParam);
    // A non-host memory type is unsupported, not silently host memory.
    for t in [MemoryType::Cuda, MemoryType::Rocm, MemoryType::ZeDevice, MemoryType::Rdma] {
        assert_eq!(ctx.mem_map(&MemMapParams::alloc(4096).memory_type(t)).unwrap_err(), Status::Unsupported);
    }
    assert!(ctx.mem_map(&MemMapParams::alloc(4096).memory_type(MemoryType::Host)).is_ok());
    // Registering memory that is not mapped.
    let hole = common::free_address(1 << 20, 4096);
    // SAFETY: the call fails before anything is registered (the range is not mapped).
    let p = unsafe { MemMapParams::new().address(hole as *mut u8) }.length(1 << 20);
    assert_eq!(ctx.mem_map(&p).unwrap_err(), Status::InvalidAddr);
}

#[test]
fn prot_defaults_to_all_four_bits_and_is_kept() {
    let ctx = context();
    let memh = ctx.mem_map(&MemMapParams::alloc(4096)).unwrap();
    assert_eq!(memh.prot().bits(), 0x303);
    let memh = ctx.mem_map(&MemMapParams::alloc(4096).prot(Prot::LOCAL_READ | Prot::REMOTE_READ)).unwrap();
    let rkey = ctx.rkey_unpack(&memh.rkey_pack().unwrap()).unwrap();
    assert_eq!(rkey.prot(), Prot::LOCAL_READ | Prot::REMOTE_READ);
}

#[test]
fn zero_length_gives_a_dummy_handle_that_unmaps_packs_and_unpacks() {
    let ctx = context();
    for p in [MemMapParams::new().length(0), MemMapParams::alloc(0)] {
        let memh = ctx.mem_map(&p).expect("length 0 is OK");
        let attr = memh.query();
        assert_eq!(attr.length, 0);
        assert!(attr.address.is_null());
        let packed = memh.pack(MemhPackFlags::empty()).expect("dummy rkey packs");
        let rkey = ctx.rkey_unpack(&packed).expect("dummy rkey unpacks");
        assert_eq!(rkey.length(), 0);
        assert_eq!(rkey.ptr(0).unwrap_err(), Status::Unreachable);
        assert_eq!(memh.pack(MemhPackFlags::EXPORT).unwrap_err(), Status::Unsupported);
        assert_eq!(memh.unmap(), Ok(()));
    }
}

#[test]
fn query_reports_address_length_type_and_page_size() {
    let ctx = context_with(&[("ZCX_HUGEPAGES", "no")]);
    let memh = ctx.mem_map(&MemMapParams::alloc(10_000)).unwrap();
    let attr = memh.query();
    assert_eq!(attr.address, memh.address());
    assert_eq!(attr.length, 10_000);
    assert_eq!(attr.mem_type, MemoryType::Host);
    assert_eq!(attr.page_size, Some(4096));
    let smaps = zcx_hugepages::smaps_for(memh.address() as usize).expect("VMA");
    assert_eq!(smaps.kernel_page_size, 4096);
}

#[test]
fn advise_checks_its_range_and_advice() {
    let ctx = context();
    let memh = ctx
        .mem_map(&MemMapParams::alloc(1 << 20).flags(MemMapFlags::ALLOCATE | MemMapFlags::NONBLOCK))
        .unwrap();
    let base = memh.address() as usize;
    let ok = |address, length, advice| memh.advise(&MemAdviseParams { address, length, advice });
    assert_eq!(ok(base, 1 << 20, MemAdvice::WillNeed), Ok(()));
    assert_eq!(ok(base + 4096, 8192, MemAdvice::Normal), Ok(()));
    assert_eq!(ok(base - 1, 16, MemAdvice::WillNeed), Err(Status::InvalidParam));
    assert_eq!(ok(base + (1 << 20) - 8, 16, MemAdvice::WillNeed), Err(Status::InvalidParam));
    assert_eq!(ok(usize::MAX - 4, 16, MemAdvice::WillNeed), Err(Status::InvalidParam));
    assert_eq!(MemAdvice::try_from(7), Err(Status::InvalidParam));
    assert_eq!(MemAdvice::try_from(1), Ok(MemAdvice::WillNeed));
}

#[test]
fn willneed_populates_a_128_mib_nonblock_mapping() {
    // Base pages, so smaps' Rss shows population (hugetlb pages are not counted in Rss).
    let ctx = context_with(&[("ZCX_HUGEPAGES", "no")]);
    let len = 128 << 20;
    let memh =
        ctx.mem_map(&MemMapParams::alloc(len).flags(MemMapFlags::ALLOCATE | MemMapFlags::NONBLOCK)).unwrap();
    let addr = memh.address() as usize;
    let before = zcx_hugepages::smaps_for(addr).expect("VMA").rss;
    assert!(before < len / 16, "NONBLOCK mapping already has {before} bytes resident");
    memh.advise(&MemAdviseParams { address: addr, length: len, advice: MemAdvice::WillNeed }).unwrap();
    let after = zcx_hugepages::smaps_for(addr).expect("VMA").rss;
    assert_eq!(after, len, "WILLNEED left the mapping partly unpopulated");
}

#[test]
fn eager_allocation_is_populated() {
    let ctx = context_with(&[("ZCX_HUGEPAGES", "no")]);
    let len = 8 << 20;
    let memh = ctx.mem_map(&MemMapParams::alloc(len)).unwrap();
    assert_eq!(zcx_hugepages::smaps_for(memh.address() as usize).expect("VMA").rss, len);
}

#[test]
fn registration_cache_reuses_same_and_sub_ranges() {
    let ctx = context();
    let parent = ctx.mem_map(&MemMapParams::alloc(1 << 20)).unwrap();
    let before = ctx.rcache_stats();
    // SAFETY: sub-ranges of `parent`, which outlives the handles.
    let sub = ctx
        .mem_map(&unsafe { MemMapParams::new().address(parent.address().add(4096)) }.length(8192))
        .unwrap();
    // SAFETY: as above.
    let same =
        ctx.mem_map(&unsafe { MemMapParams::new().address(parent.address()) }.length(1 << 20)).unwrap();
    let after = ctx.rcache_stats();
    assert_eq!(after.hits - before.hits, 2);
    assert_eq!(sub.registration_id(), parent.registration_id());
    assert_eq!(same.registration_id(), parent.registration_id());
    // Each handle still has its own bounds and key.
    assert_eq!(sub.length(), 8192);
    assert_ne!(sub.rkey_pack().unwrap(), parent.rkey_pack().unwrap());
    // A sub-range handle keeps the memory mapped after the parent's unmap.
    let sub_addr = sub.address();
    parent.unmap().unwrap();
    // SAFETY: `sub` keeps the allocation alive.
    unsafe { std::ptr::write_bytes(sub_addr, 0x5A, 8192) };
    assert!(zcx_hugepages::smaps_for(sub_addr as usize).is_some());
}

#[test]
fn registration_cache_is_off_with_rcache_enable_n() {
    let ctx = context_with(&[("ZCX_RCACHE_ENABLE", "n")]);
    let parent = ctx.mem_map(&MemMapParams::alloc(1 << 20)).unwrap();
    // SAFETY: a sub-range of `parent`, which outlives the handle.
    let sub = ctx
        .mem_map(&unsafe { MemMapParams::new().address(parent.address().add(4096)) }.length(8192))
        .unwrap();
    assert_ne!(sub.registration_id(), parent.registration_id());
    assert_eq!(ctx.rcache_stats().hits, 0);
    // Still shareable: the new registration found the memfd behind the range.
    assert!(sub.is_shareable());
}

#[test]
fn unmapping_invalidates_the_cached_registration() {
    let ctx = context();
    let caller = CallerMemory::new(1 << 20);
    // SAFETY: `caller` outlives both handles.
    let p = unsafe { MemMapParams::new().address(caller.ptr) }.length(1 << 20);
    let first = ctx.mem_map(&p).unwrap();
    let first_id = first.registration_id();
    first.unmap().unwrap();
    let second = ctx.mem_map(&p).unwrap();
    assert_ne!(second.registration_id(), first_id, "a dead registration was reused");
}

#[test]
fn symmetric_rkey_is_accepted_as_a_hint() {
    let ctx = context();
    let memh = ctx
        .mem_map(&MemMapParams::alloc(4096).flags(MemMapFlags::ALLOCATE | MemMapFlags::SYMMETRIC_RKEY))
        .unwrap();
    assert!(ctx.rkey_unpack(&memh.rkey_pack().unwrap()).unwrap().wire().symmetric);
}

#[test]
fn lock_never_reuses_an_unpinned_cached_registration() {
    let ctx = context();
    let parent = ctx.mem_map(&MemMapParams::alloc(1 << 20)).unwrap();
    // SAFETY: a sub-range of `parent`, which outlives the handle.
    let p =
        unsafe { MemMapParams::new().address(parent.address()) }.length(64 << 10).flags(MemMapFlags::LOCK);
    if !zcx_hugepages::has_cap_ipc_lock() {
        eprintln!("skipped: pinning needs CAP_IPC_LOCK or a larger RLIMIT_MEMLOCK");
        return;
    }
    let locked = ctx.mem_map(&p).unwrap();
    assert_ne!(locked.registration_id(), parent.registration_id());
}

#[test]
fn allocated_memory_joins_the_same_host_domain_and_caller_memory_does_not() {
    let ctx = context();
    let memh = ctx.mem_map(&MemMapParams::alloc(8192)).unwrap();
    assert!(memh.registered_domains().contains(&zcx::DomainId::SAME_HOST));
    assert!(memh.is_shareable());
    let caller = CallerMemory::new(8192);
    // SAFETY: `caller` stays mapped until after the handle is dropped.
    let registered = ctx.mem_map(&unsafe { MemMapParams::new().length(8192).address(caller.ptr) }).unwrap();
    assert!(!registered.registered_domains().contains(&zcx::DomainId::SAME_HOST));
    assert!(!registered.is_shareable());
    drop(registered);
    let zero = ctx.mem_map(&MemMapParams::alloc(0)).unwrap();
    assert!(zero.registered_domains().is_empty());
    assert!(ctx.mem_print_info("8192").unwrap().contains("memory domains: same-host"));
}
