//! Mappings close their memfds on drop and on every error path. This file
//! holds a single test so no other test opens or closes fds while it counts.

use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, OwnedFd};

use zcx_hugepages::{Backing, Error, MapOptions, Mapping, PagePolicy, PageSize, Placement};

fn open_fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("list /proc/self/fd").count()
}

#[test]
fn memfd_mappings_do_not_leak_fds() {
    let opts = MapOptions {
        len: 64 << 10,
        page_policy: PagePolicy::Never,
        backing: Backing::Memfd,
        ..MapOptions::default()
    };
    // Warm up anything lazily initialised (e.g. the page-size cache) before counting.
    drop(Mapping::new(&opts).unwrap());
    let before = open_fd_count();

    for _ in 0..100 {
        let owner = Mapping::new(&opts).unwrap();
        let path = format!("/proc/self/fd/{}", owner.memfd().unwrap().as_raw_fd());
        let reopen = || OwnedFd::from(OpenOptions::new().read(true).write(true).open(&path).unwrap());

        let peer = Mapping::from_memfd(reopen(), 0, opts.len, PageSize::Base, Placement::Anywhere).unwrap();
        drop(peer);
        // Error paths: the fd handed over must be closed as well.
        let too_long = Mapping::from_memfd(reopen(), 0, opts.len + 1, PageSize::Base, Placement::Anywhere);
        assert!(matches!(too_long, Err(Error::OutOfRange { .. })));
        let occupied = Mapping::new(&MapOptions { placement: Placement::Fixed(owner.addr()), ..opts });
        assert_eq!(occupied.unwrap_err(), Error::AddressInUse { addr: owner.addr() });
        let bad_node = Mapping::new(&MapOptions { numa_node: Some(4000), ..opts });
        assert!(matches!(bad_node, Err(Error::NumaNode { .. })));
        // With the 1 GiB pool empty this fails after memfd_create; otherwise it maps and drops.
        let huge = MapOptions { page_policy: PagePolicy::Require(PageSize::Huge1G), ..opts };
        drop(Mapping::new(&huge));
    }

    assert_eq!(open_fd_count(), before, "fds leaked");
}
