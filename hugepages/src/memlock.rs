//! Pinning memory with `mlock`, and the limits that govern it.

use std::ptr::NonNull;

use crate::error::{last_errno, Error};

/// Capability number of `CAP_IPC_LOCK` in `<linux/capability.h>`.
const CAP_IPC_LOCK: u32 = 14;

/// `RLIMIT_MEMLOCK` as `(soft, hard)` in bytes; `u64::MAX` means unlimited.
///
/// Returns `(0, 0)` in the (never observed) case that `getrlimit` fails, since
/// that is the conservative reading of "unknown".
pub fn memlock_limit() -> (u64, u64) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a valid, writable rlimit for getrlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } != 0 {
        tracing::warn!(errno = last_errno(), "getrlimit(RLIMIT_MEMLOCK) failed");
        return (0, 0);
    }
    let to_bytes = |value: libc::rlim_t| if value == libc::RLIM_INFINITY { u64::MAX } else { value };
    (to_bytes(limit.rlim_cur), to_bytes(limit.rlim_max))
}

/// Whether the process's effective capabilities include `CAP_IPC_LOCK`
/// (bit 14 of `CapEff` in `/proc/self/status`), which exempts it from
/// `RLIMIT_MEMLOCK`.
pub fn has_cap_ipc_lock() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| effective_capabilities(&status))
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// The `CapEff:` bitmask from the text of a `/proc/<pid>/status` file.
fn effective_capabilities(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|line| line.strip_prefix("CapEff:"))?;
    u64::from_str_radix(line.trim(), 16).ok()
}

/// `mlock` `[start, start + len)`.
///
/// `ENOMEM`/`EPERM` without `CAP_IPC_LOCK` is the memlock limit and becomes
/// [`Error::MemlockLimit`]; with the capability the limit cannot be the cause,
/// so the errno is reported as it is rather than blaming the limit.
pub(crate) fn lock(start: NonNull<u8>, len: usize) -> Result<(), Error> {
    // SAFETY: mlock only changes residency of a range of a mapping the caller owns.
    if unsafe { libc::mlock(start.as_ptr().cast(), len) } == 0 {
        return Ok(());
    }
    let errno = last_errno();
    if matches!(errno, libc::ENOMEM | libc::EPERM) && !has_cap_ipc_lock() {
        let (soft_limit, hard_limit) = memlock_limit();
        return Err(Error::MemlockLimit { requested: len, soft_limit, hard_limit });
    }
    Err(Error::Os { op: "mlock", errno })
}

/// `munlock` `[start, start + len)`.
pub(crate) fn unlock(start: NonNull<u8>, len: usize) -> Result<(), Error> {
    // SAFETY: munlock only changes residency of a range of a mapping the caller owns.
    if unsafe { libc::munlock(start.as_ptr().cast(), len) } != 0 {
        return Err(Error::last_os("munlock"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_eff_is_parsed_from_status_text() {
        let status = "Name:\tcat\nCapInh:\t0000000000000000\nCapEff:\t000001fffeffffff\nCapBnd:\t0\n";
        let caps = effective_capabilities(status).unwrap();
        assert_eq!(caps, 0x1ff_feff_ffff);
        assert_ne!(caps & (1 << CAP_IPC_LOCK), 0);
        let unprivileged = "CapEff:\t0000000000000000\n";
        assert_eq!(effective_capabilities(unprivileged), Some(0));
        assert_eq!(effective_capabilities("Name:\tx\n"), None);
    }

    #[test]
    fn memlock_limit_matches_getrlimit() {
        let mut raw = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: `raw` is a valid rlimit for getrlimit to fill.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut raw) }, 0);
        let expect = |v: libc::rlim_t| if v == libc::RLIM_INFINITY { u64::MAX } else { v };
        assert_eq!(memlock_limit(), (expect(raw.rlim_cur), expect(raw.rlim_max)));
    }
}
