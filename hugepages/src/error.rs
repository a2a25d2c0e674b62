//! The crate's error type.

use crate::page_size::PageSize;
use crate::units::HumanBytes;

/// Everything that can go wrong while creating or manipulating a [`Mapping`](crate::Mapping).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The requested length was zero, or rounding it up to the page size overflows.
    #[error("invalid mapping length: it must be non-zero and round up to the page size without overflowing")]
    InvalidLength,

    /// A fixed address (or a file offset) is not a multiple of the page size that must back it.
    #[error("address or offset {addr:#x} is not aligned to the {} page size", HumanBytes(*.align as u64))]
    Misaligned {
        /// The offending address or offset.
        addr: usize,
        /// The alignment it needed, in bytes.
        align: usize,
    },

    /// A fixed placement overlaps a mapping that already exists; nothing was replaced.
    #[error("address {addr:#x} is already occupied by another mapping")]
    AddressInUse {
        /// The address that was requested.
        addr: usize,
    },

    /// [`PagePolicy::Require`](crate::PagePolicy::Require) asked for a huge page size that cannot back the region.
    #[error("{page_size} hugepages unavailable: {reason}")]
    HugepagesUnavailable {
        /// The huge page size that was required.
        page_size: PageSize,
        /// What the kernel and the pool state say, and how to fix it.
        reason: String,
    },

    /// `mlock` was refused because the region exceeds `RLIMIT_MEMLOCK` and the
    /// process lacks `CAP_IPC_LOCK`.
    #[error(
        "mlock of {} failed: RLIMIT_MEMLOCK is {} (soft) / {} (hard) and the process lacks CAP_IPC_LOCK; \
         raise the limit (ulimit -l) or run with CAP_IPC_LOCK",
        HumanBytes(*.requested as u64),
        HumanBytes(*.soft_limit),
        HumanBytes(*.hard_limit)
    )]
    MemlockLimit {
        /// Bytes the failed `mlock` covered.
        requested: usize,
        /// Soft `RLIMIT_MEMLOCK` in bytes (`u64::MAX` when unlimited).
        soft_limit: u64,
        /// Hard `RLIMIT_MEMLOCK` in bytes (`u64::MAX` when unlimited).
        hard_limit: u64,
    },

    /// `mbind` rejected the NUMA node (it does not exist, is offline, or is outside the allowed set).
    #[error("binding memory to NUMA node {node} failed: {}", std::io::Error::from_raw_os_error(*.errno))]
    NumaNode {
        /// The node that was requested.
        node: u32,
        /// The errno `mbind` returned.
        errno: i32,
    },

    /// A sub-range or a file extent does not fit.
    #[error("range at offset {offset} of {len} bytes does not fit in {mapped} bytes")]
    OutOfRange {
        /// Start of the requested range.
        offset: usize,
        /// Length of the requested range.
        len: usize,
        /// Size of what it had to fit in (the mapping, or the memfd).
        mapped: usize,
    },

    /// Any other failing system call.
    #[error("{op} failed: {}", std::io::Error::from_raw_os_error(*.errno))]
    Os {
        /// The operation that failed, e.g. `"mmap"`.
        op: &'static str,
        /// The errno it returned.
        errno: i32,
    },
}

impl Error {
    /// The raw OS error number behind this error, when a failing system call
    /// reported one directly (`Os` and `NumaNode`); `None` for errors this
    /// crate diagnosed itself.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Os { errno, .. } | Error::NumaNode { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// An `Os` error for `op` carrying the calling thread's current `errno`.
    pub(crate) fn last_os(op: &'static str) -> Error {
        Error::Os { op, errno: last_errno() }
    }
}

/// The calling thread's `errno` after a failed libc call.
pub(crate) fn last_errno() -> i32 {
    // `raw_os_error` is always `Some` for `last_os_error`; EIO is a defensive stand-in.
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memlock_message_names_the_limit_in_readable_units() {
        let err = Error::MemlockLimit { requested: 16 << 20, soft_limit: 8 << 20, hard_limit: 8 << 20 };
        assert_eq!(
            err.to_string(),
            "mlock of 16 MiB failed: RLIMIT_MEMLOCK is 8 MiB (soft) / 8 MiB (hard) and the process lacks \
             CAP_IPC_LOCK; raise the limit (ulimit -l) or run with CAP_IPC_LOCK"
        );
        let unlimited = Error::MemlockLimit { requested: 4096, soft_limit: 64 << 10, hard_limit: u64::MAX };
        assert!(unlimited.to_string().contains("64 KiB (soft) / unlimited (hard)"));
    }

    #[test]
    fn os_message_includes_operation_and_strerror() {
        let err = Error::Os { op: "mmap", errno: libc::ENOMEM };
        let text = err.to_string();
        assert!(text.starts_with("mmap failed: "), "{text}");
        assert!(text.contains(&std::io::Error::from_raw_os_error(libc::ENOMEM).to_string()), "{text}");
        assert_eq!(err.errno(), Some(libc::ENOMEM));
    }

    #[test]
    fn errno_is_reported_only_for_syscall_errors() {
        assert_eq!(Error::NumaNode { node: 4, errno: libc::EINVAL }.errno(), Some(libc::EINVAL));
        assert_eq!(Error::InvalidLength.errno(), None);
        assert_eq!(Error::AddressInUse { addr: 0x1000 }.errno(), None);
    }

    #[test]
    fn misaligned_message_shows_hex_address_and_alignment() {
        let err = Error::Misaligned { addr: 0x7f00_0000_1000, align: 2 << 20 };
        assert_eq!(err.to_string(), "address or offset 0x7f0000001000 is not aligned to the 2 MiB page size");
    }
}
