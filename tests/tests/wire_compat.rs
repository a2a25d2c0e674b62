//! What the API packs is what the control plane's decoders read: the fields of a packed rkey and of
//! an exported handle describe the region and this process exactly.

use zcx::{Context, Features, MemMapFlags, MemMapParams, MemhPackFlags, Prot};
use zcx_control::{ExportedMemhWire, RkeyWire};

#[test]
fn packed_rkey_describes_the_region_and_this_process() {
    let ctx = Context::with_features(Features::RMA | Features::EXPORTED_MEMH).unwrap();
    let prot = Prot::LOCAL_READ | Prot::LOCAL_WRITE | Prot::REMOTE_READ;
    let memh = ctx
        .mem_map(
            &MemMapParams::alloc(100_000)
                .prot(prot)
                .flags(MemMapFlags::ALLOCATE | MemMapFlags::SYMMETRIC_RKEY),
        )
        .unwrap();
    let wire = RkeyWire::decode(&memh.pack(MemhPackFlags::empty()).unwrap()).unwrap();
    assert_eq!(wire.base, memh.address() as u64);
    assert_eq!(wire.length, 100_000);
    assert_eq!(wire.prot, prot.bits());
    assert_eq!(wire.mem_type, 0);
    assert!(wire.symmetric);
    assert!(wire.domain_keys.is_empty());
    let shm = wire.shm.expect("allocated memory is shareable");
    assert_eq!(shm.pid, std::process::id());
    assert_eq!(Some(shm.boot_id), zcx_control::local_boot_id());
    assert_eq!(Some(shm.pid_start_time), zcx_control::process_start_time(std::process::id()));
    assert_eq!(shm.map_offset, 0);
    assert_eq!(shm.map_len % shm.page_size, 0);
    assert!(shm.map_len >= 100_000);

    let exported = ExportedMemhWire::decode(&memh.pack(MemhPackFlags::EXPORT).unwrap()).unwrap();
    assert_eq!(exported.base, wire.base);
    assert_eq!(exported.length, wire.length);
    assert_eq!(exported.region_id, wire.region_id);
    assert_eq!(exported.access_key, wire.access_key, "one handle, one capability");
    assert_eq!(exported.shm, shm);
}

#[test]
fn sub_range_keys_locate_their_offset_in_the_memfd() {
    let ctx = Context::with_features(Features::RMA).unwrap();
    let parent = ctx.mem_map(&MemMapParams::alloc(1 << 20)).unwrap();
    // SAFETY: a sub-range of `parent`, which outlives the handle.
    let sub = ctx
        .mem_map(&unsafe { MemMapParams::new().address(parent.address().add(12_345)) }.length(999))
        .unwrap();
    let parent_wire = RkeyWire::decode(&parent.rkey_pack().unwrap()).unwrap();
    let sub_wire = RkeyWire::decode(&sub.rkey_pack().unwrap()).unwrap();
    let shm = sub_wire.shm.expect("sub-range of allocated memory is shareable");
    assert_eq!(shm.map_offset, 12_345);
    assert_eq!(shm.inode, parent_wire.shm.unwrap().inode);
    assert_ne!(sub_wire.access_key, parent_wire.access_key, "each handle has its own capability");
    assert_ne!(sub_wire.region_id, parent_wire.region_id);
}
