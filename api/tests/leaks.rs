//! No mapping or file descriptor outlives its handles. Alone in its binary, so the /proc counts
//! are not disturbed by other tests' threads.

mod common;

use zcx::{Context, Features, MemMapFlags, MemMapParams, MemhPackFlags};

#[test]
fn map_pack_unpack_ptr_import_and_unmap_leave_nothing_behind() {
    let ctx = Context::with_features(Features::RMA | Features::EXPORTED_MEMH).unwrap();
    // Warm up lazily-initialised runtime state (tracing, thread locals) before counting.
    drop(ctx.mem_map(&MemMapParams::alloc(4096)).unwrap());
    let fds = common::open_fds();
    let memfds = common::memfd_mappings();
    for i in 0..200usize {
        let len = 1 + i * 7919;
        let flags =
            if i % 2 == 0 { MemMapFlags::ALLOCATE } else { MemMapFlags::ALLOCATE | MemMapFlags::NONBLOCK };
        let memh = ctx.mem_map(&MemMapParams::alloc(len).flags(flags)).unwrap();
        let rkey = ctx.rkey_unpack(&memh.pack(MemhPackFlags::empty()).unwrap()).unwrap();
        rkey.ptr(rkey.base()).unwrap();
        let exported = memh.pack(MemhPackFlags::EXPORT).unwrap();
        let imported = ctx.mem_map(&MemMapParams::new().exported_memh_buffer(&exported)).unwrap();
        // SAFETY: a sub-range of `memh`, which outlives the handle.
        let sub =
            ctx.mem_map(&unsafe { MemMapParams::new().address(memh.address()) }.length(len / 2)).unwrap();
        drop(sub);
        drop(imported);
        drop(rkey);
        memh.unmap().unwrap();
    }
    assert_eq!(common::open_fds(), fds, "file descriptors leaked");
    assert_eq!(common::memfd_mappings(), memfds, "memfd mappings leaked");
}
