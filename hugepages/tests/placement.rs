//! Anywhere, hinted and fixed placement, and that fixed placement never
//! replaces a live mapping.

mod common;

use common::{reserve_2m_pages, skip, MIB};
use zcx_hugepages::{
    base_page_size, Backing, Error, MapOptions, Mapping, PagePolicy, PageSize, Placement, Populate,
};

/// An address where `len` bytes aligned to `align` were free a moment ago:
/// map a slightly larger region, pick the aligned start inside it, unmap it.
fn recently_freed_address(len: usize, align: usize) -> usize {
    let probe = Mapping::new(&MapOptions {
        len: len + align,
        page_policy: PagePolicy::Never,
        populate: Populate::Lazy,
        ..MapOptions::default()
    })
    .unwrap();
    probe.addr().next_multiple_of(align)
}

/// Map at a freed address, retrying a few times because a parallel test
/// thread may grab the hole between the probe and our mmap.
fn map_fixed_at_freed_address(opts: MapOptions<'_>, align: usize, offset_in_slot: usize) -> (usize, Mapping) {
    for _ in 0..5 {
        let addr = recently_freed_address(opts.len + offset_in_slot, align) + offset_in_slot;
        match Mapping::new(&MapOptions { placement: Placement::Fixed(addr), ..opts }) {
            Ok(mapping) => return (addr, mapping),
            Err(Error::AddressInUse { .. }) => continue,
            Err(other) => panic!("fixed mapping at {addr:#x} failed: {other}"),
        }
    }
    panic!("could not map at a freed address in 5 tries");
}

fn fill(mapping: &Mapping, byte: u8) {
    // SAFETY: the whole requested length is mapped read-write and owned by this test.
    unsafe { mapping.as_ptr().write_bytes(byte, mapping.len()) };
}

fn all_bytes_are(mapping: &Mapping, byte: u8) -> bool {
    // SAFETY: the whole requested length is mapped and readable; no one writes to it concurrently.
    let contents = unsafe { std::slice::from_raw_parts(mapping.as_ptr(), mapping.len()) };
    contents.iter().all(|&b| b == byte)
}

#[test]
fn fixed_lands_exactly_at_a_free_address() {
    for backing in [Backing::Anonymous, Backing::Memfd] {
        let opts =
            MapOptions { len: 4 * MIB, page_policy: PagePolicy::Never, backing, ..MapOptions::default() };
        let (addr, mapping) = map_fixed_at_freed_address(opts, base_page_size(), 0);
        assert_eq!(mapping.addr(), addr, "{backing:?}");
        fill(&mapping, 0x5A);
        assert!(all_bytes_are(&mapping, 0x5A));
    }
}

#[test]
fn fixed_huge_lands_exactly_at_a_free_aligned_address() {
    if let Err(reason) = reserve_2m_pages(2) {
        return skip(&reason);
    }
    let opts = MapOptions {
        len: 4 * MIB,
        page_policy: PagePolicy::Require(PageSize::Huge2M),
        ..MapOptions::default()
    };
    let (addr, mapping) = map_fixed_at_freed_address(opts, 2 * MIB, 0);
    assert_eq!(mapping.addr(), addr);
    assert_eq!(mapping.page_size(), PageSize::Huge2M);
}

#[test]
fn fixed_over_a_live_mapping_is_address_in_use_and_leaves_it_intact() {
    let live =
        Mapping::new(&MapOptions { len: 4 * MIB, page_policy: PagePolicy::Never, ..MapOptions::default() })
            .unwrap();
    fill(&live, 0xC3);
    let mut policies = vec![PagePolicy::Never, PagePolicy::Prefer(PageSize::Huge2M)];
    if reserve_2m_pages(2).is_ok() && live.addr() % (2 * MIB) == 0 {
        policies.push(PagePolicy::Require(PageSize::Huge2M));
    }
    for page_policy in policies {
        for backing in [Backing::Anonymous, Backing::Memfd] {
            // Overlap the live mapping's middle as well as its start.
            for addr in [live.addr(), live.addr() + 2 * MIB] {
                let opts = MapOptions {
                    len: 2 * MIB,
                    page_policy,
                    backing,
                    placement: Placement::Fixed(addr),
                    ..MapOptions::default()
                };
                assert_eq!(
                    Mapping::new(&opts).unwrap_err(),
                    Error::AddressInUse { addr },
                    "{page_policy:?} {backing:?} at {addr:#x}"
                );
            }
        }
    }
    assert!(all_bytes_are(&live, 0xC3), "the live mapping was clobbered");
}

#[test]
fn fixed_address_misaligned_for_base_pages_is_rejected() {
    let addr = recently_freed_address(MIB, base_page_size()) + 1;
    let opts = MapOptions {
        len: MIB,
        page_policy: PagePolicy::Never,
        placement: Placement::Fixed(addr),
        ..MapOptions::default()
    };
    assert_eq!(Mapping::new(&opts).unwrap_err(), Error::Misaligned { addr, align: base_page_size() });
    // Prefer falls back to base pages for a misaligned address, which are still misaligned.
    let prefer = MapOptions { page_policy: PagePolicy::Prefer(PageSize::Huge2M), ..opts };
    assert_eq!(Mapping::new(&prefer).unwrap_err(), Error::Misaligned { addr, align: base_page_size() });
}

#[test]
fn prefer_huge_at_an_address_not_huge_aligned_uses_base_pages_there() {
    let opts = MapOptions {
        len: 4 * MIB,
        page_policy: PagePolicy::Prefer(PageSize::Huge2M),
        ..MapOptions::default()
    };
    // One base page past a 2 MiB boundary: fine for base pages, wrong for huge ones.
    let (addr, mapping) = map_fixed_at_freed_address(opts, 2 * MIB, base_page_size());
    assert_eq!(mapping.addr(), addr);
    assert_ne!(addr % (2 * MIB), 0);
    assert_eq!(mapping.page_size(), PageSize::Base);
    assert!(mapping.thp_advised());
}

#[test]
fn hint_never_fails_and_never_clobbers() {
    let live =
        Mapping::new(&MapOptions { len: 2 * MIB, page_policy: PagePolicy::Never, ..MapOptions::default() })
            .unwrap();
    fill(&live, 0x3C);
    let freed = recently_freed_address(2 * MIB, 2 * MIB);
    for hint in [freed, live.addr(), live.addr() + 1, 1, usize::MAX - 4 * MIB] {
        for page_policy in [PagePolicy::Never, PagePolicy::Prefer(PageSize::Huge2M)] {
            let opts = MapOptions {
                len: 2 * MIB,
                page_policy,
                placement: Placement::Hint(hint),
                ..MapOptions::default()
            };
            let mapping =
                Mapping::new(&opts).unwrap_or_else(|error| panic!("hint {hint:#x} failed: {error}"));
            assert_ne!(mapping.addr(), live.addr(), "a hint must not replace a live mapping");
            fill(&mapping, 0x11);
        }
    }
    assert!(all_bytes_are(&live, 0x3C), "the live mapping was clobbered");
}

#[test]
fn anywhere_maps_somewhere_new() {
    let first =
        Mapping::new(&MapOptions { len: MIB, page_policy: PagePolicy::Never, ..MapOptions::default() })
            .unwrap();
    let second =
        Mapping::new(&MapOptions { len: MIB, page_policy: PagePolicy::Never, ..MapOptions::default() })
            .unwrap();
    assert_ne!(first.addr(), second.addr());
    assert_eq!(Placement::Anywhere.requested_addr(), 0);
}
