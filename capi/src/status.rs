//! `ucs_status_t` from zcx's `Status`, whose codes are UCS's (checked against libucs by the api's
//! tests).

use crate::bindings::ucs_status_t;

/// The `ucs_status_t` of `status`.
pub fn ucs(status: zcx::Status) -> ucs_status_t::Type {
    status.code() as ucs_status_t::Type
}

/// `UCS_OK` or the error's status.
pub fn of<T>(result: zcx::Result<T>) -> ucs_status_t::Type {
    match result {
        Ok(_) => ucs_status_t::UCS_OK,
        Err(status) => ucs(status),
    }
}

/// zcx's `Status` of a `ucs_status_t` (`UCS_OK` for codes zcx does not know, which a handler
/// may return only as "done").
pub fn from_ucs(status: ucs_status_t::Type) -> zcx::Status {
    zcx::Status::from_code(i32::from(status)).unwrap_or(zcx::Status::Ok)
}
