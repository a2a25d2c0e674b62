//! The errno of the last failed system call, for code that calls libc directly.

/// The errno of the last failed libc call (`EIO` if the OS reported none).
pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}
