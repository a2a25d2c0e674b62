//! Eager population faults everything in up front; lazy population faults
//! nothing until `advise_willneed`.
//!
//! Residency is checked two ways: the VMA's smaps `Rss` (exact for memfd
//! VMAs, which never merge with neighbours) and the pagemap present bits of
//! the mapping's own range (exact even when an anonymous VMA was merged with
//! an adjacent one).

mod common;

use common::{present_bytes, MIB};
use zcx_hugepages::{base_page_size, smaps_for, Backing, Error, MapOptions, Mapping, PagePolicy, Populate};

fn base_pages(len: usize, backing: Backing, populate: Populate) -> Mapping {
    Mapping::new(&MapOptions {
        len,
        page_policy: PagePolicy::Never,
        backing,
        populate,
        ..MapOptions::default()
    })
    .unwrap()
}

/// smaps `Rss` of the mapping's VMA, or `None` if the VMA also covers a neighbour.
fn own_vma_rss(mapping: &Mapping) -> Option<usize> {
    let vma = smaps_for(mapping.addr()).expect("mapping must have a VMA");
    let own = vma.start == mapping.addr() && vma.end == mapping.addr() + mapping.mapped_len();
    own.then_some(vma.rss)
}

#[test]
fn eager_mappings_are_fully_resident_right_away() {
    for backing in [Backing::Anonymous, Backing::Memfd] {
        let mapping = base_pages(16 * MIB, backing, Populate::Eager);
        assert_eq!(present_bytes(mapping.addr(), mapping.mapped_len()), mapping.mapped_len(), "{backing:?}");
        if let Some(rss) = own_vma_rss(&mapping) {
            assert_eq!(rss, mapping.mapped_len(), "{backing:?}");
        }
    }
    let memfd = base_pages(16 * MIB, Backing::Memfd, Populate::Eager);
    assert_eq!(own_vma_rss(&memfd), Some(16 * MIB), "memfd VMAs stand alone, so smaps Rss is exact");
}

#[test]
fn lazy_mappings_are_not_resident_until_advise_willneed() {
    for backing in [Backing::Anonymous, Backing::Memfd] {
        let mapping = base_pages(32 * MIB, backing, Populate::Lazy);
        assert_eq!(present_bytes(mapping.addr(), mapping.mapped_len()), 0, "{backing:?}");
        if let Some(rss) = own_vma_rss(&mapping) {
            assert_eq!(rss, 0, "{backing:?}");
        }
        mapping.advise_willneed(0, mapping.len()).unwrap();
        assert_eq!(present_bytes(mapping.addr(), mapping.mapped_len()), mapping.mapped_len(), "{backing:?}");
        if let Some(rss) = own_vma_rss(&mapping) {
            assert_eq!(rss, mapping.mapped_len(), "{backing:?}");
        }
    }
}

#[test]
fn advise_willneed_populates_exactly_the_pages_a_sub_range_touches() {
    let page = base_page_size();
    let mapping = base_pages(8 * MIB, Backing::Memfd, Populate::Lazy);
    assert_eq!(own_vma_rss(&mapping), Some(0));
    // [1 MiB + 5, 2 MiB + 5) touches the pages from 1 MiB up to 2 MiB + one page.
    mapping.advise_willneed(MIB + 5, MIB).unwrap();
    assert_eq!(own_vma_rss(&mapping), Some(MIB + page));
    assert_eq!(present_bytes(mapping.addr() + MIB, MIB + page), MIB + page);
    assert_eq!(present_bytes(mapping.addr(), MIB), 0);
}

#[test]
fn advise_willneed_keeps_existing_contents() {
    let page = base_page_size();
    let mapping = base_pages(8 * MIB, Backing::Anonymous, Populate::Lazy);
    let written = [0, 3 * page + 17, 8 * MIB - 1];
    for (index, offset) in written.iter().enumerate() {
        // SAFETY: every offset is inside the read-write mapping, used only by this test.
        unsafe { mapping.as_ptr().add(*offset).write(index as u8 + 0xA0) };
    }
    mapping.advise_willneed(0, mapping.len()).unwrap();
    assert_eq!(present_bytes(mapping.addr(), mapping.mapped_len()), mapping.mapped_len());
    for (index, offset) in written.iter().enumerate() {
        // SAFETY: as above.
        assert_eq!(unsafe { mapping.as_ptr().add(*offset).read() }, index as u8 + 0xA0);
    }
    // SAFETY: as above; a byte never written reads as zero.
    assert_eq!(unsafe { mapping.as_ptr().add(page).read() }, 0);
}

#[test]
fn advise_willneed_outside_the_mapping_is_out_of_range() {
    let mapping = base_pages(MIB, Backing::Anonymous, Populate::Lazy);
    assert_eq!(
        mapping.advise_willneed(MIB - 1, 2),
        Err(Error::OutOfRange { offset: MIB - 1, len: 2, mapped: MIB })
    );
    assert_eq!(present_bytes(mapping.addr(), MIB), 0, "a rejected range must not populate anything");
}
