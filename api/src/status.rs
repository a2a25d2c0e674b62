//! `ucs_status_t`, mirrored: the same names, numeric codes and strings, so logs and C users read the same.
//!
//! The enum itself lives in the protocol engine, which completes operations with it; this module
//! re-exports it and adds what only the API has: [`Result`] and the per-thread error detail.

pub use zcx_engine::status::{status_string, Status, ALL_STATUSES};

/// Result of a zcx call: the value, or the `ucs_status_t`-mirroring error.
pub type Result<T> = std::result::Result<T, Status>;

thread_local! {
    static LAST_ERROR_DETAIL: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// The explanation behind the last error status a zcx call returned on this thread, if it had one
/// (like `dlerror`): a `Status` is a bare `ucs_status_t` code, while e.g. a failed `LOCK` mapping
/// has more to say ("RLIMIT_MEMLOCK is 8 MiB ..."). The same text is logged with `tracing`.
pub fn last_error_detail() -> Option<String> {
    LAST_ERROR_DETAIL.with(|d| d.borrow().clone())
}

/// Records `detail` as the explanation of `status`, logs it, and returns `status` for `?` chains.
pub(crate) fn fail_with(status: Status, detail: String) -> Status {
    tracing::warn!(status = status.name(), "{detail}");
    LAST_ERROR_DETAIL.with(|d| *d.borrow_mut() = Some(detail));
    status
}
