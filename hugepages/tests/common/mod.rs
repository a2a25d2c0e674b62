//! Helpers shared by the integration tests: privilege checks, hugepage pool
//! reservation, skip reporting and page residency measurement.

// Every test binary compiles this module but uses only some of the helpers.
#![allow(dead_code)]

use std::sync::Mutex;

use zcx_hugepages::{pool, PageSize};

/// One mebibyte.
pub const MIB: usize = 1 << 20;

/// Report why a test did not run its assertions; the caller returns right after.
pub fn skip(reason: &str) {
    eprintln!("skipped: {reason}");
}

/// Whether the test runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Free (unreserved) 2 MiB pages the pool keeps for the tests of one binary;
/// generous so that tests running in parallel threads do not starve each other.
const TEST_POOL_HEADROOM: u64 = 64;

/// Serialises pool resizing between the test threads of one binary.
static POOL_RESIZE: Mutex<()> = Mutex::new(());

/// Make sure the 2 MiB pool has at least `pages` available pages (plus
/// headroom), raising `nr_hugepages` as root if needed. `Err` says why not.
pub fn reserve_2m_pages(pages: u64) -> Result<(), String> {
    let _serialised = POOL_RESIZE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let wanted = pages + TEST_POOL_HEADROOM;
    let current = pool(PageSize::Huge2M).ok_or("the kernel has no 2 MiB hugepage pool")?;
    if current.available() >= pages {
        return Ok(());
    }
    if !is_root() {
        return Err(format!(
            "not root and the 2 MiB pool has only {} available pages (need {pages})",
            current.available()
        ));
    }
    let target = current.total + (wanted - current.available());
    std::fs::write("/proc/sys/vm/nr_hugepages", target.to_string())
        .map_err(|error| format!("cannot raise /proc/sys/vm/nr_hugepages to {target}: {error}"))?;
    let raised = pool(PageSize::Huge2M).ok_or("the 2 MiB pool vanished")?;
    if raised.available() < pages {
        return Err(format!(
            "raised nr_hugepages to {target} but only {} pages are available (memory fragmented?)",
            raised.available()
        ));
    }
    Ok(())
}

/// Bytes of `[addr, addr + len)` that are resident, from the present bit of
/// `/proc/self/pagemap`. Unlike smaps `Rss` this is exact for a sub-range even
/// when the kernel merged the mapping's VMA with an adjacent one.
pub fn present_bytes(addr: usize, len: usize) -> usize {
    use std::io::{Read, Seek, SeekFrom};

    let page = zcx_hugepages::base_page_size();
    let pages = len.div_ceil(page);
    let mut pagemap = std::fs::File::open("/proc/self/pagemap").expect("open /proc/self/pagemap");
    pagemap.seek(SeekFrom::Start((addr / page * 8) as u64)).expect("seek pagemap");
    let mut entries = vec![0u8; pages * 8];
    pagemap.read_exact(&mut entries).expect("read pagemap");
    let present = entries
        .chunks_exact(8)
        .filter(|entry| u64::from_ne_bytes((*entry).try_into().unwrap()) & (1 << 63) != 0)
        .count();
    present * page
}

/// A copy of this test binary that any user may execute, for children run as another user: the
/// checkout may sit under a directory only root can enter (e.g. /root). Removed on drop.
pub struct PortableExe(pub std::path::PathBuf);

impl PortableExe {
    pub fn new() -> PortableExe {
        use std::os::unix::fs::PermissionsExt;
        let exe = std::env::current_exe().expect("test binary path");
        let name = exe.file_name().expect("binary name").to_string_lossy().into_owned();
        let copy = std::env::temp_dir().join(format!("zcx-{}-{name}", std::process::id()));
        std::fs::copy(&exe, &copy).expect("copy the test binary");
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        PortableExe(copy)
    }
}

impl Drop for PortableExe {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
