//! `ucp_get_version` and `ucp_get_version_string`: the UCP API version this library implements,
//! which programs check against the one they were compiled with.

use std::ffi::{c_char, c_uint};

use crate::bindings::{UCP_API_MAJOR, UCP_API_MINOR};

/// The release within the API version; zcx implements UCX 1.13's API.
const RELEASE: c_uint = 0;

/// The version as `ucp_get_version_string` returns it: static and NUL-terminated.
static VERSION_STRING: &[u8] = b"1.13.0\0";

/// `ucp_get_version`: the API's major and minor version and the release, each written when its
/// pointer is not null.
///
/// # Safety
/// Each pointer is null or valid for a write of a `c_uint`.
#[no_mangle]
pub unsafe extern "C" fn ucp_get_version(major: *mut c_uint, minor: *mut c_uint, release: *mut c_uint) {
    for (out, value) in [(major, UCP_API_MAJOR), (minor, UCP_API_MINOR), (release, RELEASE)] {
        if !out.is_null() {
            // SAFETY: non-null, and valid for a write by the caller's contract.
            unsafe { out.write(value) };
        }
    }
}

/// `ucp_get_version_string`: the version as a static string.
#[no_mangle]
pub extern "C" fn ucp_get_version_string() -> *const c_char {
    VERSION_STRING.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_ucx_1_13s_and_null_pointers_are_skipped() {
        let (mut major, mut minor, mut release) = (9, 9, 9);
        // SAFETY: three valid pointers.
        unsafe { ucp_get_version(&mut major, &mut minor, &mut release) };
        assert_eq!((major, minor, release), (1, 13, 0));
        // SAFETY: null pointers are skipped.
        unsafe { ucp_get_version(std::ptr::null_mut(), &mut minor, std::ptr::null_mut()) };
        // SAFETY: a static NUL-terminated string.
        let text = unsafe { std::ffi::CStr::from_ptr(ucp_get_version_string()) };
        assert_eq!(text.to_str().unwrap(), "1.13.0");
    }
}
