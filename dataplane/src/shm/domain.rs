//! Same-host memory as a memory domain: a region in a memfd-backed zcx mapping can be mapped by
//! another process on this host, which finds it by the region's shared-memory locator (boot id,
//! process, descriptor, inode, offset). The locator is this domain's entry in a packed key.
//!
//! Registering records where the memfd is; nothing is handed to the kernel. Caller memory and
//! anonymous mappings have no memfd, so the domain does not apply to them.

use std::any::Any;
use std::ffi::CString;
use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use zcx_control::ShmLocator;

use crate::domain::{DomainError, DomainId, DomainRegistration, Memfd, MemoryDomain, RegionToRegister};

/// The same-host domain of one process: who this process is, as a peer opening its memfds
/// through `/proc` checks it.
#[derive(Clone, Copy, Debug)]
pub struct SameHostDomain {
    boot_id: Option<[u8; 16]>,
    pid: u32,
    pid_start_time: u64,
}

impl SameHostDomain {
    /// The domain of process `pid` (started at `pid_start_time` clock ticks after boot) on the
    /// host with `boot_id`; without a boot id no peer can check the host, so nothing registers.
    pub fn new(boot_id: Option<[u8; 16]>, pid: u32, pid_start_time: u64) -> SameHostDomain {
        SameHostDomain { boot_id, pid, pid_start_time }
    }
}

impl MemoryDomain for SameHostDomain {
    fn id(&self) -> DomainId {
        DomainId::SAME_HOST
    }

    fn register(&self, region: &RegionToRegister) -> Result<Arc<dyn DomainRegistration>, DomainError> {
        let Some(boot_id) = self.boot_id else {
            return Err(DomainError::NotApplicable("this host has no boot id".into()));
        };
        let Some(backing) = &region.backing else {
            return Err(DomainError::NotApplicable("caller memory has no memfd".into()));
        };
        let Some(memfd) = backing.memfd else {
            return Err(DomainError::NotApplicable("the mapping has no memfd".into()));
        };
        Ok(Arc::new(SameHostRegistration {
            boot_id,
            pid: self.pid,
            pid_start_time: self.pid_start_time,
            memfd,
            mapping_start: backing.start,
            mapping_len: backing.len,
            page_size: backing.page_size,
            _keep: Arc::clone(&backing.keep),
        }))
    }

    fn check_remote_entry(&self, entry: &[u8]) -> Result<(), DomainError> {
        ShmLocator::from_bytes(entry).map(|_| ()).map_err(|e| DomainError::BadEntry(e.to_string()))
    }
}

/// A region of a memfd-backed mapping, findable by same-host peers.
pub struct SameHostRegistration {
    boot_id: [u8; 16],
    pid: u32,
    pid_start_time: u64,
    memfd: Memfd,
    mapping_start: usize,
    mapping_len: usize,
    page_size: usize,
    /// Keeps the memfd open, so the descriptor number in the locator stays this file's.
    _keep: Arc<dyn Send + Sync>,
}

impl SameHostRegistration {
    /// The locator of the region starting at `addr` (inside the mapping), or `None` for an
    /// address outside it.
    pub fn locator(&self, addr: usize) -> Option<ShmLocator> {
        let offset = addr.checked_sub(self.mapping_start).filter(|&o| o < self.mapping_len)?;
        Some(ShmLocator {
            boot_id: self.boot_id,
            pid: self.pid,
            pid_start_time: self.pid_start_time,
            fd: self.memfd.fd,
            inode: self.memfd.inode,
            dev: self.memfd.dev,
            map_offset: offset as u64,
            map_len: self.mapping_len as u64,
            page_size: self.page_size as u64,
        })
    }
}

impl DomainRegistration for SameHostRegistration {
    fn remote_entry(&self, addr: usize, len: usize) -> Option<Vec<u8>> {
        let locator = self.locator(addr)?;
        let fits = addr.checked_add(len).is_some_and(|end| end <= self.mapping_start + self.mapping_len);
        fits.then(|| locator.to_bytes())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Why a same-host peer's memfd was not opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerMemfdError {
    /// The locator is from another host (its boot id differs).
    OtherHost,
    /// The process that exported the region is gone (its start time differs).
    ProcessGone,
    /// The kernel refused to open `/proc/<pid>/fd/<fd>` (errno).
    CannotOpen(i32),
    /// The descriptor no longer names the exported file (device or inode differ).
    NotTheRegion,
    /// The file is not sealed against shrinking, so it could be truncated under a mapping.
    NotSealed,
    /// The file holds fewer bytes than the locator's mapping length.
    TooSmall,
}

impl fmt::Display for PeerMemfdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerMemfdError::OtherHost => f.write_str("the region is on another host (boot id differs)"),
            PeerMemfdError::ProcessGone => f.write_str("the exporting process is gone"),
            PeerMemfdError::CannotOpen(errno) => {
                write!(f, "cannot open it: {}", std::io::Error::from_raw_os_error(*errno))
            }
            PeerMemfdError::NotTheRegion => f.write_str("its descriptor is no longer the exported region"),
            PeerMemfdError::NotSealed => f.write_str("it is not a sealed zcx memfd"),
            PeerMemfdError::TooSmall => f.write_str("it is smaller than the exported region"),
        }
    }
}

impl std::error::Error for PeerMemfdError {}

/// Opens the memfd a same-host peer's locator names, read-write, through `/proc/<pid>/fd/<fd>`,
/// and proves it is the file the locator describes: same host (boot id), same process (start
/// time, checked again after the open, so a recycled pid is caught), same file (device and
/// inode), sealed against shrinking (so it cannot be truncated under a mapping) and at least
/// `map_len` bytes long. The kernel allows the open only to the same user or root.
pub fn open_peer_memfd(locator: &ShmLocator) -> Result<OwnedFd, PeerMemfdError> {
    if zcx_control::local_boot_id() != Some(locator.boot_id) {
        return Err(PeerMemfdError::OtherHost);
    }
    let alive = || zcx_control::process_start_time(locator.pid) == Some(locator.pid_start_time);
    if !alive() {
        return Err(PeerMemfdError::ProcessGone);
    }
    let path = CString::new(format!("/proc/{}/fd/{}", locator.pid, locator.fd))
        .map_err(|_| PeerMemfdError::CannotOpen(libc::EINVAL))?;
    // SAFETY: a NUL-terminated path; open has no other memory effect.
    let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(PeerMemfdError::CannotOpen(crate::os_error::last_errno()));
    }
    // SAFETY: a descriptor open() just returned, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a valid out-pointer for one `stat` and `fd` is open; fstat only writes it.
    if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(PeerMemfdError::NotTheRegion);
    }
    // SAFETY: fstat returned 0, so it initialised `st`.
    let st = unsafe { st.assume_init() };
    if (st.st_dev, st.st_ino) != (locator.dev, locator.inode) || !alive() {
        return Err(PeerMemfdError::NotTheRegion);
    }
    // SAFETY: F_GET_SEALS on an open descriptor only returns flags.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return Err(PeerMemfdError::NotSealed);
    }
    // Sealed, the file cannot shrink: its size, checked once, bounds every access for good.
    if u64::try_from(st.st_size).map_or(true, |size| size < locator.map_len) {
        return Err(PeerMemfdError::TooSmall);
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Backing;

    fn region(memfd: Option<Memfd>) -> RegionToRegister {
        RegionToRegister {
            start: 0x20_1000,
            len: 0x1000,
            prot: 0,
            backing: Some(Backing {
                start: 0x20_0000,
                len: 0x20_0000,
                page_size: 0x20_0000,
                memfd,
                keep: Arc::new(()),
            }),
        }
    }

    const MEMFD: Memfd = Memfd { fd: 7, dev: 3, inode: 99 };

    #[test]
    fn locates_a_region_of_a_memfd_mapping_by_its_offset() {
        let domain = SameHostDomain::new(Some([5; 16]), 42, 1234);
        let registration = domain.register(&region(Some(MEMFD))).unwrap();
        let same_host = registration.as_any().downcast_ref::<SameHostRegistration>().unwrap();
        let locator = same_host.locator(0x20_1000).unwrap();
        assert_eq!((locator.pid, locator.fd, locator.inode, locator.dev), (42, 7, 99, 3));
        assert_eq!((locator.map_offset, locator.map_len, locator.page_size), (0x1000, 0x20_0000, 0x20_0000));
        let entry = registration.remote_entry(0x20_1000, 0x1000).unwrap();
        assert_eq!(ShmLocator::from_bytes(&entry).unwrap(), locator);
        assert_eq!(domain.check_remote_entry(&entry), Ok(()));
    }

    #[test]
    fn gives_no_entry_for_a_range_outside_its_mapping() {
        let registration = SameHostDomain::new(Some([5; 16]), 42, 1).register(&region(Some(MEMFD))).unwrap();
        assert!(registration.remote_entry(0x1000, 16).is_none(), "before the mapping");
        assert!(registration.remote_entry(0x3f_fff0, 0x20).is_none(), "runs past its end");
        assert!(registration.remote_entry(0x3f_fff0, 0x10).is_some(), "ends at its last byte");
    }

    #[test]
    fn does_not_apply_without_a_memfd_or_a_boot_id() {
        let domain = SameHostDomain::new(Some([5; 16]), 42, 1);
        assert!(matches!(domain.register(&region(None)), Err(DomainError::NotApplicable(_))));
        let caller_memory = RegionToRegister { backing: None, ..region(None) };
        assert!(matches!(domain.register(&caller_memory), Err(DomainError::NotApplicable(_))));
        let no_boot_id = SameHostDomain::new(None, 42, 1);
        assert!(matches!(no_boot_id.register(&region(Some(MEMFD))), Err(DomainError::NotApplicable(_))));
    }

    #[test]
    fn refuses_a_malformed_peer_entry() {
        let domain = SameHostDomain::new(Some([5; 16]), 42, 1);
        assert!(matches!(domain.check_remote_entry(&[0; 10]), Err(DomainError::BadEntry(_))));
        let registration = domain.register(&region(Some(MEMFD))).unwrap();
        let mut entry = registration.remote_entry(0x20_1000, 16).unwrap();
        // Page size field (the last four bytes) set to 3 bytes: not a page size.
        let n = entry.len();
        entry[n - 4..].copy_from_slice(&3u32.to_le_bytes());
        assert!(matches!(domain.check_remote_entry(&entry), Err(DomainError::BadEntry(_))));
    }
}
