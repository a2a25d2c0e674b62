//! Dropping a mapping unmaps its whole rounded length. This file holds a
//! single test so that no parallel test thread can map something into the
//! freed range between the drop and the check.

mod common;

use common::{reserve_2m_pages, skip, MIB};
use zcx_hugepages::{base_page_size, smaps_for, Backing, MapOptions, Mapping, PagePolicy, PageSize};

/// Map, check the VMA spans exactly `mapped_len`, drop, check nothing is left.
fn assert_drop_unmaps_everything(opts: &MapOptions<'_>, expected_mapped_len: usize) {
    let mapping = Mapping::new(opts).unwrap();
    assert_eq!(mapping.mapped_len(), expected_mapped_len);
    let (addr, end) = (mapping.addr(), mapping.addr() + mapping.mapped_len());
    let vma = smaps_for(addr).expect("mapped");
    assert_eq!((vma.start, vma.end), (addr, end), "{vma:?}");
    assert_eq!(vma.kernel_page_size, mapping.page_size().bytes());
    drop(mapping);
    assert_eq!(smaps_for(addr), None, "start of the mapping still mapped");
    // The tail past the requested length must go too, which needs the rounded length.
    assert_eq!(smaps_for(addr + opts.len), None, "rounded tail still mapped");
    assert_eq!(smaps_for(end - 1), None, "last byte still mapped");
}

#[test]
fn drop_unmaps_the_rounded_length() {
    let page = base_page_size();
    let base = MapOptions {
        len: 3 * MIB + 1,
        page_policy: PagePolicy::Never,
        backing: Backing::Memfd,
        ..MapOptions::default()
    };
    assert_drop_unmaps_everything(&base, 3 * MIB + page);

    match reserve_2m_pages(2) {
        Err(reason) => skip(&format!("hugetlb part: {reason}")),
        Ok(()) => {
            for backing in [Backing::Anonymous, Backing::Memfd] {
                let huge = MapOptions {
                    len: 3 * MIB,
                    page_policy: PagePolicy::Require(PageSize::Huge2M),
                    backing,
                    ..MapOptions::default()
                };
                assert_drop_unmaps_everything(&huge, 4 * MIB);
            }
        }
    }
}
