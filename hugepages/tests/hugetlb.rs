//! Mappings that get the 2 MiB hugetlb pages they ask for.

mod common;

use common::{reserve_2m_pages, skip, MIB};
use zcx_hugepages::{smaps_for, Backing, MapOptions, Mapping, PagePolicy, PageSize, Populate};

fn assert_backed_by_2m_hugetlb(mapping: &Mapping) {
    assert_eq!(mapping.page_size(), PageSize::Huge2M);
    assert!(!mapping.thp_advised(), "hugetlb mappings need no THP advice");
    let vma = smaps_for(mapping.addr()).expect("mapping must have a VMA");
    assert_eq!(vma.kernel_page_size, 2 * MIB, "{vma:?}");
    assert_eq!((vma.start, vma.end), (mapping.addr(), mapping.addr() + mapping.mapped_len()));
    assert!(vma.has_vm_flag("ht"), "hugetlb VMAs carry the ht flag: {vma:?}");
}

/// Write a pattern across every huge page and read it back.
fn assert_writable(mapping: &Mapping) {
    for offset in (0..mapping.mapped_len()).step_by(2 * MIB) {
        // SAFETY: `offset` is inside the read-write mapping, which only this test uses.
        unsafe {
            mapping.as_ptr().add(offset).write((offset / (2 * MIB)) as u8 + 1);
        }
    }
    for offset in (0..mapping.mapped_len()).step_by(2 * MIB) {
        // SAFETY: as above.
        let byte = unsafe { mapping.as_ptr().add(offset).read() };
        assert_eq!(byte, (offset / (2 * MIB)) as u8 + 1);
    }
}

#[test]
fn prefer_2m_anonymous_is_backed_by_2m_pages() {
    if let Err(reason) = reserve_2m_pages(4) {
        return skip(&reason);
    }
    let opts = MapOptions {
        len: 8 * MIB,
        page_policy: PagePolicy::Prefer(PageSize::Huge2M),
        ..MapOptions::default()
    };
    let mapping = Mapping::new(&opts).unwrap();
    assert_eq!(mapping.backing(), Backing::Anonymous);
    assert_eq!(mapping.mapped_len(), 8 * MIB);
    assert_backed_by_2m_hugetlb(&mapping);
    // Eager population faults every huge page in; smaps counts them as hugetlb, not Rss.
    let vma = smaps_for(mapping.addr()).unwrap();
    assert_eq!(vma.hugetlb_bytes, 8 * MIB, "{vma:?}");
    assert_writable(&mapping);
}

#[test]
fn prefer_2m_memfd_is_backed_by_2m_pages() {
    if let Err(reason) = reserve_2m_pages(4) {
        return skip(&reason);
    }
    let opts = MapOptions {
        len: 8 * MIB,
        page_policy: PagePolicy::Prefer(PageSize::Huge2M),
        backing: Backing::Memfd,
        name: "zcx-hugetlb-test",
        ..MapOptions::default()
    };
    let mapping = Mapping::new(&opts).unwrap();
    assert_eq!(mapping.backing(), Backing::Memfd);
    assert!(mapping.memfd().is_some());
    assert_backed_by_2m_hugetlb(&mapping);
    let vma = smaps_for(mapping.addr()).unwrap();
    assert!(vma.path.starts_with("/memfd:zcx-hugetlb-test"), "{vma:?}");
    assert_eq!(vma.hugetlb_bytes, 8 * MIB, "MADV_POPULATE_WRITE must fault hugetlb memfd pages: {vma:?}");
    assert_writable(&mapping);
}

#[test]
fn require_2m_rounds_up_to_whole_huge_pages() {
    if let Err(reason) = reserve_2m_pages(2) {
        return skip(&reason);
    }
    let opts = MapOptions {
        len: 2 * MIB + 1,
        page_policy: PagePolicy::Require(PageSize::Huge2M),
        ..MapOptions::default()
    };
    let mapping = Mapping::new(&opts).unwrap();
    assert_eq!(mapping.len(), 2 * MIB + 1);
    assert_eq!(mapping.mapped_len(), 4 * MIB);
    assert_backed_by_2m_hugetlb(&mapping);
}

#[test]
fn lazy_hugetlb_memfd_is_populated_by_advise_willneed() {
    if let Err(reason) = reserve_2m_pages(4) {
        return skip(&reason);
    }
    let opts = MapOptions {
        len: 8 * MIB,
        page_policy: PagePolicy::Require(PageSize::Huge2M),
        backing: Backing::Memfd,
        populate: Populate::Lazy,
        ..MapOptions::default()
    };
    let mapping = Mapping::new(&opts).unwrap();
    assert_eq!(smaps_for(mapping.addr()).unwrap().hugetlb_bytes, 0);
    // An unaligned sub-range widens to the huge pages it touches: the 2nd and 3rd.
    mapping.advise_willneed(2 * MIB + 5, 2 * MIB).unwrap();
    assert_eq!(smaps_for(mapping.addr()).unwrap().hugetlb_bytes, 4 * MIB);
    mapping.advise_willneed(0, mapping.len()).unwrap();
    assert_eq!(smaps_for(mapping.addr()).unwrap().hugetlb_bytes, 8 * MIB);
}
