//! Mapping a same-host peer's memfd-backed memory (for `rkey_ptr` and imports); the locator
//! naming it is the same-host memory domain's entry (`zcx_dataplane::shm::domain`).
//!
//! The peer's memfd is opened through `/proc/<pid>/fd/<fd>` by the same-host domain's
//! `open_peer_memfd`, which the shm transport's native RMA uses too: the kernel only allows that
//! to the same user (or root), there is no world-readable name in /dev/shm, and the region dies
//! with its owner. Boot id, process start time and the file's device and inode are all checked,
//! so a recycled pid or fd number is refused instead of mapping somebody else's memory.

use zcx_control::ShmLocator;
use zcx_dataplane::shm::domain::open_peer_memfd;
use zcx_hugepages::{Mapping, PageSize, Placement};

use crate::status::{fail_with, Result, Status};

/// Maps the whole memfd a locator names. `UNREACHABLE` when it is on another host, its owner is gone,
/// or the kernel refuses access; `INVALID_PARAM` when the locator contradicts itself.
pub(crate) fn map_peer_memfd(locator: &ShmLocator) -> Result<Mapping> {
    let fd = open_peer_memfd(locator).map_err(|why| {
        fail_with(Status::Unreachable, format!("/proc/{}/fd/{}: {why}", locator.pid, locator.fd))
    })?;
    let page_size = PageSize::from_bytes(locator.page_size as usize).ok_or(Status::InvalidParam)?;
    let len = usize::try_from(locator.map_len).map_err(|_| Status::InvalidParam)?;
    Mapping::from_memfd(fd, 0, len, page_size, Placement::Anywhere).map_err(|e| {
        fail_with(Status::Unreachable, format!("cannot map /proc/{}/fd/{}: {e}", locator.pid, locator.fd))
    })
}
