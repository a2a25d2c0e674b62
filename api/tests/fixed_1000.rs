//! UCX's FIXED pattern: 1000 allocations of size (i+1) * (i odd ? 1000 : 1), each landing exactly at
//! the requested address. Alone in its binary so no other test thread maps into the probed holes.

mod common;

use zcx::{Context, Features, MemMapParams};

#[test]
fn thousand_fixed_allocations_land_exactly() {
    let ctx = Context::with_features(Features::RMA).unwrap();
    let page = zcx_hugepages::base_page_size();
    // One reservation provides the address range; each allocation goes at a different offset in it.
    let span = 2 << 30;
    let base = common::free_address(span, page);
    let mut huge = 0;
    for i in 0..1000usize {
        let size = (i + 1) * if i % 2 == 1 { 1000 } else { 1 };
        // Walk through the range so consecutive addresses differ and alignments vary.
        let address = base + (i * 257 * page) % (span - (2 << 20));
        let address = address & !(page - 1);
        let memh = ctx
            .mem_map(&MemMapParams::alloc(size).alloc_fixed(address))
            .unwrap_or_else(|s| panic!("allocation {i} of {size} bytes at {address:#x}: {s}"));
        assert_eq!(memh.address() as usize, address, "allocation {i} moved");
        assert_eq!(memh.length(), size);
        // SAFETY: the handle maps `size` writable bytes at `address`.
        unsafe {
            memh.address().add(size - 1).write(!(i as u8));
            memh.address().write(i as u8);
            assert_eq!(memh.address().read(), i as u8);
            if size > 1 {
                assert_eq!(memh.address().add(size - 1).read(), !(i as u8));
            }
        }
        if memh.page_size().is_some_and(|p| p.bytes() > page) {
            huge += 1;
        }
        memh.unmap().unwrap();
    }
    eprintln!("fixed allocations on hugepages (2 MiB-aligned addresses): {huge} of 1000");
}
