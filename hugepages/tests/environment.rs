//! The environment queries agree with the kernel's own interfaces.

use zcx_hugepages::{base_page_size, free_pages, has_cap_ipc_lock, memlock_limit, pool, pools, PageSize};

#[test]
fn pools_list_the_2m_pool_sorted_by_page_size() {
    let pools = pools();
    assert!(!pools.is_empty(), "this kernel exposes /sys/kernel/mm/hugepages");
    assert!(pools.windows(2).all(|pair| pair[0].page_size_bytes < pair[1].page_size_bytes), "{pools:?}");
    let two_mib = pools.iter().find(|pool| pool.page_size_bytes == 2 << 20).expect("2048 kB pool listed");
    assert_eq!(two_mib.page_size(), Some(PageSize::Huge2M));
    assert!(two_mib.free <= two_mib.total + two_mib.surplus, "{two_mib:?}");
    // No test in this binary maps hugepages, so the counters are stable between reads.
    assert_eq!(pool(PageSize::Huge2M).map(|pool| pool.total), Some(two_mib.total));
    assert_eq!(free_pages(PageSize::Huge2M), two_mib.free);
    assert_eq!(free_pages(PageSize::Base), 0, "base pages have no pool");
    assert_eq!(pool(PageSize::Base), None);
}

#[test]
fn memlock_limit_matches_getrlimit() {
    let mut raw = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `raw` is a valid rlimit for getrlimit to fill.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut raw) }, 0);
    let bytes = |value: libc::rlim_t| if value == libc::RLIM_INFINITY { u64::MAX } else { value };
    assert_eq!(memlock_limit(), (bytes(raw.rlim_cur), bytes(raw.rlim_max)));
    eprintln!("RLIMIT_MEMLOCK: {:?}", memlock_limit());
}

/// `struct __user_cap_header_struct` from `<linux/capability.h>`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct` from `<linux/capability.h>`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

#[test]
fn cap_ipc_lock_matches_capget() {
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let mut header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and data are the structures capget expects for version 3 (two data words).
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    assert_eq!(rc, 0, "capget failed: {}", std::io::Error::last_os_error());
    let effective_has_ipc_lock = data[0].effective & (1 << 14) != 0;
    assert_eq!(has_cap_ipc_lock(), effective_has_ipc_lock);
}

#[test]
fn base_page_size_matches_sysconf() {
    // SAFETY: sysconf has no memory-safety preconditions.
    let sysconf = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    assert_eq!(base_page_size() as libc::c_long, sysconf);
    assert_eq!(PageSize::Base.bytes(), base_page_size());
}
