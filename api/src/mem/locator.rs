//! Mapping a same-host peer's memfd-backed memory (for `rkey_ptr` and imports); the locator
//! naming it is the same-host memory domain's entry (`zcx_dataplane::shm::domain`).
//!
//! The peer's memfd is opened through `/proc/<pid>/fd/<fd>`: the kernel only allows that to the same
//! user (or root), there is no world-readable name in /dev/shm, and the region dies with its owner.
//! Boot id, process start time and the file's device and inode are all checked, so a recycled pid
//! or fd number is refused instead of mapping somebody else's memory.

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};

use zcx_control::ShmLocator;
use zcx_hugepages::{Mapping, PageSize, Placement};

use crate::context::LocalIdentity;
use crate::mem::registration::{fstat_identity, fstat_size};
use crate::status::{fail_with, Result, Status};

/// Maps the whole memfd a locator names. `UNREACHABLE` when it is on another host, its owner is gone,
/// or the kernel refuses access; `INVALID_PARAM` when the locator contradicts itself.
pub(crate) fn map_peer_memfd(identity: &LocalIdentity, locator: &ShmLocator) -> Result<Mapping> {
    if identity.boot_id != Some(locator.boot_id) {
        return Err(fail_with(Status::Unreachable, "the region is on another host (boot id differs)".into()));
    }
    let start_time_matches = || zcx_control::process_start_time(locator.pid) == Some(locator.pid_start_time);
    if !start_time_matches() {
        return Err(fail_with(Status::Unreachable, format!("process {} is gone", locator.pid)));
    }
    let path = format!("/proc/{}/fd/{}", locator.pid, locator.fd);
    let c_path = CString::new(path.clone()).map_err(|_| Status::InvalidParam)?;
    // SAFETY: `c_path` is a valid NUL-terminated string; open has no other memory effects.
    let raw = unsafe { libc::open(c_path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if raw < 0 {
        let err = std::io::Error::last_os_error();
        return Err(fail_with(Status::Unreachable, format!("cannot open {path}: {err}")));
    }
    // SAFETY: `raw` is a file descriptor open() just returned, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    if fstat_identity(raw) != Some((locator.dev, locator.inode)) || !start_time_matches() {
        return Err(fail_with(Status::Unreachable, format!("{path} is no longer the exported region")));
    }
    // zcx seals its memfds against shrinking; anything else could be truncated under our mapping
    // and turn our accesses into SIGBUS, so a locator naming it is refused.
    // SAFETY: F_GET_SEALS on an open fd only returns flags.
    let seals = unsafe { libc::fcntl(raw, libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return Err(fail_with(Status::Unreachable, format!("{path} is not a sealed zcx memfd")));
    }
    // The seal keeps the file from shrinking, so it is enough to check its size once: a locator
    // claiming more than the file holds would map pages whose access raises SIGBUS.
    if fstat_size(raw).is_none_or(|size| size < locator.map_len) {
        return Err(fail_with(Status::Unreachable, format!("{path} is smaller than the exported region")));
    }
    let page_size = PageSize::from_bytes(locator.page_size as usize).ok_or(Status::InvalidParam)?;
    let len = usize::try_from(locator.map_len).map_err(|_| Status::InvalidParam)?;
    Mapping::from_memfd(fd, 0, len, page_size, Placement::Anywhere)
        .map_err(|e| fail_with(Status::Unreachable, format!("cannot map {path}: {e}")))
}
