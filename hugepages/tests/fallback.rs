//! What happens when the requested huge page size is unavailable. The 1 GiB
//! pool stands in for "no hugepages" so the 2 MiB pool other tests share is
//! never drained.

mod common;

use common::{skip, MIB};
use zcx_hugepages::{
    base_page_size, free_pages, smaps_for, Backing, Error, MapOptions, Mapping, PagePolicy, PageSize,
    Placement,
};

/// `Err` with a reason when 1 GiB pages could be had, which makes "unavailable" untestable.
fn require_empty_1g_pool() -> Result<(), String> {
    match free_pages(PageSize::Huge1G) {
        0 => Ok(()),
        free => Err(format!("the 1 GiB pool has {free} free pages, so it cannot stand in for an empty pool")),
    }
}

#[test]
fn require_1g_without_free_pages_is_hugepages_unavailable() {
    if let Err(reason) = require_empty_1g_pool() {
        return skip(&reason);
    }
    for backing in [Backing::Anonymous, Backing::Memfd] {
        let opts = MapOptions {
            len: 8 * MIB,
            page_policy: PagePolicy::Require(PageSize::Huge1G),
            backing,
            ..MapOptions::default()
        };
        match Mapping::new(&opts) {
            Err(Error::HugepagesUnavailable { page_size, reason }) => {
                assert_eq!(page_size, PageSize::Huge1G);
                // Either the pool exists and is empty, or the kernel has no 1 GiB pool at all.
                assert!(
                    reason.contains("pool has 0 free") || reason.contains("no 1 GiB hugepage pool"),
                    "{backing:?}: {reason}"
                );
                let message = Error::HugepagesUnavailable { page_size, reason }.to_string();
                assert!(message.starts_with("1 GiB hugepages unavailable: "), "{message}");
                eprintln!("{backing:?}: {message}");
            }
            other => panic!("{backing:?}: expected HugepagesUnavailable, got {other:?}"),
        }
    }
}

#[test]
fn prefer_1g_without_free_pages_falls_back_to_advised_base_pages() {
    if let Err(reason) = require_empty_1g_pool() {
        return skip(&reason);
    }
    for backing in [Backing::Anonymous, Backing::Memfd] {
        let opts = MapOptions {
            len: 8 * MIB + 1,
            page_policy: PagePolicy::Prefer(PageSize::Huge1G),
            backing,
            ..MapOptions::default()
        };
        let mapping = Mapping::new(&opts).unwrap();
        assert_eq!(mapping.page_size(), PageSize::Base, "{backing:?}");
        assert_eq!(mapping.mapped_len(), 8 * MIB + base_page_size(), "{backing:?}: rounded to base pages");
        assert!(mapping.thp_advised(), "{backing:?}: the fallback applies MADV_HUGEPAGE");
        let vma = smaps_for(mapping.addr()).unwrap();
        assert_eq!(vma.kernel_page_size, base_page_size(), "{backing:?}: {vma:?}");
        assert!(vma.thp_eligible || vma.has_vm_flag("hg"), "{backing:?}: THP advice not visible: {vma:?}");
        assert!(vma.has_vm_flag("hg"), "{backing:?}: MADV_HUGEPAGE sets VM_HUGEPAGE: {vma:?}");
        eprintln!(
            "{backing:?}: THPeligible={} thp_bytes={} rss={}",
            vma.thp_eligible, vma.thp_bytes, vma.rss
        );
    }
}

#[test]
fn require_huge_with_fixed_address_not_aligned_to_it_is_misaligned() {
    // Alignment is checked before any pool is consulted, so this needs no pages.
    let base_aligned = 0x7f00_0000_0000 + base_page_size();
    for page in [PageSize::Huge2M, PageSize::Huge1G] {
        let opts = MapOptions {
            len: 4 * MIB,
            page_policy: PagePolicy::Require(page),
            placement: Placement::Fixed(base_aligned),
            ..MapOptions::default()
        };
        assert_eq!(
            Mapping::new(&opts).unwrap_err(),
            Error::Misaligned { addr: base_aligned, align: page.bytes() }
        );
    }
}

#[test]
fn never_policy_maps_base_pages_without_thp_advice() {
    let opts = MapOptions { len: 8 * MIB, page_policy: PagePolicy::Never, ..MapOptions::default() };
    let mapping = Mapping::new(&opts).unwrap();
    assert_eq!(mapping.page_size(), PageSize::Base);
    assert!(!mapping.thp_advised());
    let vma = smaps_for(mapping.addr()).unwrap();
    assert_eq!(vma.kernel_page_size, base_page_size());
    assert!(!vma.has_vm_flag("hg"), "{vma:?}");
}
