//! `ucs_status_t`, mirrored: the same names, numeric codes and strings, so logs and C users read the same.
//!
//! It lives in the engine because both the engine (completions, endpoint errors) and the API
//! (every call's result) speak it; the `zcx` crate re-exports it unchanged.

use std::borrow::Cow;
use std::fmt;

/// Completion status of every zcx call and engine operation; mirrors `ucs_status_t` code for code.
///
/// `Ok` and `InProgress` exist so a status read from a peer or from a request can be represented
/// exactly; zcx functions return `Result<T, Status>` whose error is always a negative code.
///
/// A whole word wide, though every code fits a byte (`code` gives the C value): in a
/// `Result<Completion<Vec<u8>>, Status>` the error sits in a niche inside the completion, and a
/// one-byte status made the compiler move such results as a byte and then bytes 9..48 in
/// unaligned 16-byte pieces. Those reloads of values just stored did not forward from the store
/// buffer, and each one waited for every earlier store to finish, a cross-core transfer when one
/// of them was a ring record. An 8-byte status keeps the pieces word-aligned: a direct 8-byte get
/// over shared memory went from 31 to 26 ns in a loop, and `zcx perf -t get_lat` to 0.74 of its
/// time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i64)]
#[non_exhaustive]
pub enum Status {
    /// `UCS_OK`
    Ok = 0,
    /// `UCS_INPROGRESS`
    InProgress = 1,
    /// `UCS_ERR_NO_MESSAGE`
    NoMessage = -1,
    /// `UCS_ERR_NO_RESOURCE`
    NoResource = -2,
    /// `UCS_ERR_IO_ERROR`
    IoError = -3,
    /// `UCS_ERR_NO_MEMORY`
    NoMemory = -4,
    /// `UCS_ERR_INVALID_PARAM`
    InvalidParam = -5,
    /// `UCS_ERR_UNREACHABLE`
    Unreachable = -6,
    /// `UCS_ERR_INVALID_ADDR`
    InvalidAddr = -7,
    /// `UCS_ERR_NOT_IMPLEMENTED`
    NotImplemented = -8,
    /// `UCS_ERR_MESSAGE_TRUNCATED`
    MessageTruncated = -9,
    /// `UCS_ERR_NO_PROGRESS`
    NoProgress = -10,
    /// `UCS_ERR_BUFFER_TOO_SMALL`
    BufferTooSmall = -11,
    /// `UCS_ERR_NO_ELEM`
    NoElem = -12,
    /// `UCS_ERR_SOME_CONNECTS_FAILED`
    SomeConnectsFailed = -13,
    /// `UCS_ERR_NO_DEVICE`
    NoDevice = -14,
    /// `UCS_ERR_BUSY`
    Busy = -15,
    /// `UCS_ERR_CANCELED`
    Canceled = -16,
    /// `UCS_ERR_SHMEM_SEGMENT`
    ShmemSegment = -17,
    /// `UCS_ERR_ALREADY_EXISTS`
    AlreadyExists = -18,
    /// `UCS_ERR_OUT_OF_RANGE`
    OutOfRange = -19,
    /// `UCS_ERR_TIMED_OUT`
    TimedOut = -20,
    /// `UCS_ERR_EXCEEDS_LIMIT`
    ExceedsLimit = -21,
    /// `UCS_ERR_UNSUPPORTED`
    Unsupported = -22,
    /// `UCS_ERR_REJECTED`
    Rejected = -23,
    /// `UCS_ERR_NOT_CONNECTED`
    NotConnected = -24,
    /// `UCS_ERR_CONNECTION_RESET`
    ConnectionReset = -25,
    /// `UCS_ERR_FIRST_LINK_FAILURE`
    FirstLinkFailure = -40,
    /// `UCS_ERR_LAST_LINK_FAILURE`
    LastLinkFailure = -59,
    /// `UCS_ERR_FIRST_ENDPOINT_FAILURE`
    FirstEndpointFailure = -60,
    /// `UCS_ERR_ENDPOINT_TIMEOUT`
    EndpointTimeout = -80,
    /// `UCS_ERR_LAST_ENDPOINT_FAILURE`
    LastEndpointFailure = -89,
    /// `UCS_ERR_LAST`
    Last = -100,
}

/// Every named status, in declaration order (used by tests and `zcx info`).
pub const ALL_STATUSES: [Status; 33] = [
    Status::Ok,
    Status::InProgress,
    Status::NoMessage,
    Status::NoResource,
    Status::IoError,
    Status::NoMemory,
    Status::InvalidParam,
    Status::Unreachable,
    Status::InvalidAddr,
    Status::NotImplemented,
    Status::MessageTruncated,
    Status::NoProgress,
    Status::BufferTooSmall,
    Status::NoElem,
    Status::SomeConnectsFailed,
    Status::NoDevice,
    Status::Busy,
    Status::Canceled,
    Status::ShmemSegment,
    Status::AlreadyExists,
    Status::OutOfRange,
    Status::TimedOut,
    Status::ExceedsLimit,
    Status::Unsupported,
    Status::Rejected,
    Status::NotConnected,
    Status::ConnectionReset,
    Status::FirstLinkFailure,
    Status::LastLinkFailure,
    Status::FirstEndpointFailure,
    Status::EndpointTimeout,
    Status::LastEndpointFailure,
    Status::Last,
];

impl Status {
    /// The numeric `ucs_status_t` value.
    pub const fn code(self) -> i32 {
        self as i64 as i32
    }

    /// The status with this `ucs_status_t` value, if it has a name.
    pub fn from_code(code: i32) -> Option<Status> {
        ALL_STATUSES.iter().copied().find(|s| s.code() == code)
    }

    /// The `UCS_...` name of the status, as in `ucs/type/status.h`.
    pub const fn name(self) -> &'static str {
        match self {
            Status::Ok => "UCS_OK",
            Status::InProgress => "UCS_INPROGRESS",
            Status::NoMessage => "UCS_ERR_NO_MESSAGE",
            Status::NoResource => "UCS_ERR_NO_RESOURCE",
            Status::IoError => "UCS_ERR_IO_ERROR",
            Status::NoMemory => "UCS_ERR_NO_MEMORY",
            Status::InvalidParam => "UCS_ERR_INVALID_PARAM",
            Status::Unreachable => "UCS_ERR_UNREACHABLE",
            Status::InvalidAddr => "UCS_ERR_INVALID_ADDR",
            Status::NotImplemented => "UCS_ERR_NOT_IMPLEMENTED",
            Status::MessageTruncated => "UCS_ERR_MESSAGE_TRUNCATED",
            Status::NoProgress => "UCS_ERR_NO_PROGRESS",
            Status::BufferTooSmall => "UCS_ERR_BUFFER_TOO_SMALL",
            Status::NoElem => "UCS_ERR_NO_ELEM",
            Status::SomeConnectsFailed => "UCS_ERR_SOME_CONNECTS_FAILED",
            Status::NoDevice => "UCS_ERR_NO_DEVICE",
            Status::Busy => "UCS_ERR_BUSY",
            Status::Canceled => "UCS_ERR_CANCELED",
            Status::ShmemSegment => "UCS_ERR_SHMEM_SEGMENT",
            Status::AlreadyExists => "UCS_ERR_ALREADY_EXISTS",
            Status::OutOfRange => "UCS_ERR_OUT_OF_RANGE",
            Status::TimedOut => "UCS_ERR_TIMED_OUT",
            Status::ExceedsLimit => "UCS_ERR_EXCEEDS_LIMIT",
            Status::Unsupported => "UCS_ERR_UNSUPPORTED",
            Status::Rejected => "UCS_ERR_REJECTED",
            Status::NotConnected => "UCS_ERR_NOT_CONNECTED",
            Status::ConnectionReset => "UCS_ERR_CONNECTION_RESET",
            Status::FirstLinkFailure => "UCS_ERR_FIRST_LINK_FAILURE",
            Status::LastLinkFailure => "UCS_ERR_LAST_LINK_FAILURE",
            Status::FirstEndpointFailure => "UCS_ERR_FIRST_ENDPOINT_FAILURE",
            Status::EndpointTimeout => "UCS_ERR_ENDPOINT_TIMEOUT",
            Status::LastEndpointFailure => "UCS_ERR_LAST_ENDPOINT_FAILURE",
            Status::Last => "UCS_ERR_LAST",
        }
    }

    /// True for the codes UCX reserves for link failures (`UCS_IS_LINK_ERROR`).
    pub fn is_link_error(self) -> bool {
        (-59..=-40).contains(&self.code())
    }

    /// True for the codes UCX reserves for endpoint failures (`UCS_IS_ENDPOINT_ERROR`).
    pub fn is_endpoint_error(self) -> bool {
        (-89..=-60).contains(&self.code())
    }
}

/// `ucs_status_string`: the text UCX prints for any status code, named or not.
pub fn status_string(code: i32) -> Cow<'static, str> {
    let known = match code {
        0 => "Success",
        1 => "Operation in progress",
        -1 => "No pending message",
        -2 => "No resources are available to initiate the operation",
        -3 => "Input/output error",
        -4 => "Out of memory",
        -5 => "Invalid parameter",
        -6 => "Destination is unreachable",
        -7 => "Address not valid",
        -8 => "Function not implemented",
        -9 => "Message truncated",
        -10 => "No progress",
        -11 => "Provided buffer is too small",
        -12 => "No such element",
        -13 => "Failed to connect some of the requested endpoints",
        -14 => "No such device",
        -15 => "Device is busy",
        -16 => "Request canceled",
        -17 => "Shared memory error",
        -18 => "Element already exists",
        -19 => "Index out of range",
        -20 => "Operation timed out",
        -21 => "User-defined limit was reached",
        -22 => "Unsupported operation",
        -23 => "Operation rejected by remote peer",
        -24 => "Endpoint is not connected",
        -25 => "Connection reset by remote peer",
        -80 => "Endpoint timeout",
        other => return Cow::Owned(format!("Unknown error {other}")),
    };
    Cow::Borrowed(known)
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&status_string(self.code()))
    }
}

impl std::error::Error for Status {}

/// The status a peer's frame carries (`RmaAck`, `PullDone`): its named status, or `IoError` for a
/// code without a name.
pub(crate) fn from_wire(code: i8) -> Status {
    Status::from_code(i32::from(code)).unwrap_or(Status::IoError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_ucs_status_h() {
        assert_eq!(Status::Ok.code(), 0);
        assert_eq!(Status::InProgress.code(), 1);
        assert_eq!(Status::NoMessage.code(), -1);
        assert_eq!(Status::InvalidParam.code(), -5);
        assert_eq!(Status::ConnectionReset.code(), -25);
        assert_eq!(Status::FirstLinkFailure.code(), -40);
        assert_eq!(Status::EndpointTimeout.code(), -80);
        assert_eq!(Status::Last.code(), -100);
    }

    #[test]
    fn from_code_round_trips_every_name_and_rejects_gaps() {
        for s in ALL_STATUSES {
            assert_eq!(Status::from_code(s.code()), Some(s));
        }
        assert_eq!(Status::from_code(-26), None);
        assert_eq!(Status::from_code(2), None);
    }

    #[test]
    fn strings_match_ucs_status_string() {
        assert_eq!(Status::Ok.to_string(), "Success");
        assert_eq!(Status::InvalidParam.to_string(), "Invalid parameter");
        assert_eq!(Status::EndpointTimeout.to_string(), "Endpoint timeout");
        assert_eq!(status_string(-26), "Unknown error -26");
        // UCX has no text for the range markers either.
        assert_eq!(Status::FirstLinkFailure.to_string(), "Unknown error -40");
    }

    #[test]
    fn error_ranges() {
        assert!(Status::FirstLinkFailure.is_link_error());
        assert!(Status::EndpointTimeout.is_endpoint_error());
        assert!(!Status::ConnectionReset.is_endpoint_error());
    }
}
