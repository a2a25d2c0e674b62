//! A second view of a memfd mapping, attached the way a same-host peer would:
//! through /proc/<pid>/fd/<fd>.

mod common;

use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, OwnedFd};

use common::{reserve_2m_pages, skip, MIB};
use zcx_hugepages::{base_page_size, Backing, Error, MapOptions, Mapping, PagePolicy, PageSize, Placement};

/// Open the mapping's memfd again by path, as a peer process would.
fn reopen_memfd(mapping: &Mapping) -> OwnedFd {
    let fd = mapping.memfd().expect("memfd-backed mapping").as_raw_fd();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{fd}"))
        .expect("open /proc/self/fd/<memfd>");
    OwnedFd::from(file)
}

fn memfd_mapping(len: usize, page_policy: PagePolicy) -> Mapping {
    Mapping::new(&MapOptions {
        len,
        page_policy,
        backing: Backing::Memfd,
        name: "zcx-peer",
        ..MapOptions::default()
    })
    .unwrap()
}

fn assert_views_share_memory(first: &Mapping, second: &Mapping, offset_in_first: usize) {
    let offsets = [0, 4097, second.len() - 1];
    for (index, offset) in offsets.iter().enumerate() {
        // SAFETY: each offset is inside both read-write views; only this test uses them.
        unsafe { second.as_ptr().add(*offset).write(0x40 + index as u8) };
    }
    for (index, offset) in offsets.iter().enumerate() {
        // SAFETY: `offset_in_first + offset` is inside the first view, which maps the same file range.
        let seen = unsafe { first.as_ptr().add(offset_in_first + offset).read() };
        assert_eq!(seen, 0x40 + index as u8, "byte at {offset} not shared");
    }
}

#[test]
fn writes_through_a_peer_view_are_seen_by_the_owner() {
    let owner = memfd_mapping(4 * MIB, PagePolicy::Never);
    let peer = Mapping::from_memfd(reopen_memfd(&owner), 0, owner.len(), PageSize::Base, Placement::Anywhere)
        .unwrap();
    assert_ne!(peer.addr(), owner.addr());
    assert_eq!(peer.backing(), Backing::Memfd);
    assert_eq!(peer.page_size(), PageSize::Base);
    assert_eq!(peer.mapped_len(), 4 * MIB);
    assert_views_share_memory(&owner, &peer, 0);
}

#[test]
fn a_peer_view_at_an_offset_sees_the_matching_bytes() {
    let page = base_page_size();
    let owner = memfd_mapping(4 * MIB, PagePolicy::Never);
    let peer = Mapping::from_memfd(
        reopen_memfd(&owner),
        MIB as u64,
        2 * MIB + 1,
        PageSize::Base,
        Placement::Anywhere,
    )
    .unwrap();
    assert_eq!(peer.len(), 2 * MIB + 1);
    assert_eq!(peer.mapped_len(), 2 * MIB + page);
    assert_views_share_memory(&owner, &peer, MIB);
}

#[test]
fn hugetlb_memfd_peer_view_shares_huge_pages() {
    if let Err(reason) = reserve_2m_pages(4) {
        return skip(&reason);
    }
    let owner = memfd_mapping(4 * MIB, PagePolicy::Require(PageSize::Huge2M));
    let peer =
        Mapping::from_memfd(reopen_memfd(&owner), 0, 3 * MIB, PageSize::Huge2M, Placement::Anywhere).unwrap();
    assert_eq!(peer.mapped_len(), 4 * MIB);
    assert_eq!(zcx_hugepages::smaps_for(peer.addr()).unwrap().kernel_page_size, 2 * MIB);
    assert_views_share_memory(&owner, &peer, 0);

    // A peer that misreports the page size still gets a mapping with the file's real one.
    let misreported =
        Mapping::from_memfd(reopen_memfd(&owner), 0, MIB, PageSize::Base, Placement::Anywhere).unwrap();
    assert_eq!(misreported.page_size(), PageSize::Huge2M);
    assert_eq!(misreported.mapped_len(), 2 * MIB);
}

#[test]
fn ranges_beyond_the_file_are_out_of_range() {
    let owner = memfd_mapping(MIB, PagePolicy::Never);
    let error = Mapping::from_memfd(reopen_memfd(&owner), 0, MIB + 1, PageSize::Base, Placement::Anywhere)
        .unwrap_err();
    assert_eq!(error, Error::OutOfRange { offset: 0, len: MIB + 1, mapped: MIB });
    let page = base_page_size();
    let error = Mapping::from_memfd(
        reopen_memfd(&owner),
        (MIB - page) as u64,
        2 * page,
        PageSize::Base,
        Placement::Anywhere,
    )
    .unwrap_err();
    assert_eq!(error, Error::OutOfRange { offset: MIB - page, len: 2 * page, mapped: MIB });
    let error = Mapping::from_memfd(reopen_memfd(&owner), u64::MAX, 1, PageSize::Base, Placement::Anywhere)
        .unwrap_err();
    assert!(matches!(error, Error::OutOfRange { len: 1, mapped: MIB, .. }), "{error:?}");
}

#[test]
fn unaligned_offsets_and_empty_lengths_are_rejected() {
    let owner = memfd_mapping(MIB, PagePolicy::Never);
    let error = Mapping::from_memfd(reopen_memfd(&owner), 100, 4096, PageSize::Base, Placement::Anywhere)
        .unwrap_err();
    assert_eq!(error, Error::Misaligned { addr: 100, align: base_page_size() });
    let error =
        Mapping::from_memfd(reopen_memfd(&owner), 0, 0, PageSize::Base, Placement::Anywhere).unwrap_err();
    assert_eq!(error, Error::InvalidLength);
}

#[test]
fn a_peer_cannot_shrink_the_memfd_under_the_owner() {
    let owner = memfd_mapping(MIB, PagePolicy::Never);
    let peer_fd = reopen_memfd(&owner);
    // SAFETY: ftruncate on an fd we own has no memory-safety preconditions.
    let rc = unsafe { libc::ftruncate(peer_fd.as_raw_fd(), 0) };
    assert_eq!(rc, -1, "shrinking must be refused: it would SIGBUS the owner's accesses");
    assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EPERM));
    // SAFETY: the last byte of the owner's mapping is still backed by the file.
    unsafe { owner.as_ptr().add(MIB - 1).write(1) };
}
