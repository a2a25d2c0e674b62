//! `ucp_request_*`: what the application does with a request it holds.

use std::ffi::c_void;

use crate::bindings::*;
use crate::request::Req;

/// `ucp_request_check_status`: `UCS_INPROGRESS`, or the final status.
///
/// # Safety
/// `request` is a live request.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_check_status(request: *mut c_void) -> ucs_status_t::Type {
    if request.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    unsafe { Req::from_user(request) }.check_status()
}

/// `ucp_request_is_completed` (deprecated).
///
/// # Safety
/// `request` is a live request.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_is_completed(request: *mut c_void) -> std::ffi::c_int {
    if request.is_null() {
        return 0;
    }
    // SAFETY: the caller's contract.
    std::ffi::c_int::from(unsafe { Req::from_user(request) }.check_status() != ucs_status_t::UCS_INPROGRESS)
}

/// `ucp_request_test` (deprecated): the status, and the tag receive info once complete.
///
/// # Safety
/// `request` is a live request; `info` null or valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_test(
    request: *mut c_void,
    info: *mut ucp_tag_recv_info_t,
) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    unsafe { crate::tag::ucp_tag_recv_request_test(request, info) }
}

/// `ucp_request_free`: the application is done with the request; its callback will not run.
///
/// # Safety
/// `request` is a live request, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_free(request: *mut c_void) {
    if !request.is_null() {
        // SAFETY: the caller's contract.
        unsafe { Req::from_user(request) }.release(false);
    }
}

/// `ucp_request_release` (deprecated): as `ucp_request_free`, but the callback still runs.
///
/// # Safety
/// `request` is a live request, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_release(request: *mut c_void) {
    if !request.is_null() {
        // SAFETY: the caller's contract.
        unsafe { Req::from_user(request) }.release(true);
    }
}

/// `ucp_request_cancel`: an unmatched receive completes with `UCS_ERR_CANCELED`; other
/// operations go on.
///
/// # Safety
/// `request` is a live request.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_cancel(_worker: ucp_worker_h, request: *mut c_void) {
    if !request.is_null() {
        // SAFETY: the caller's contract.
        unsafe { Req::from_user(request) }.cancel();
    }
}

/// `ucp_request_alloc`: a request for `UCP_OP_ATTR_FIELD_REQUEST` callers; zcx's come from the
/// context's pool instead, so this returns NULL, as UCX does for workers without that support.
///
/// # Safety
/// Any worker.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_alloc(_worker: ucp_worker_h) -> *mut c_void {
    std::ptr::null_mut()
}

/// `ucp_request_query`: the status, memory type and a description.
///
/// # Safety
/// `request` is a live request; `attr` valid, with its string buffer when asked for.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_query(
    request: *mut c_void,
    attr: *mut ucp_request_attr_t,
) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    let (Some(attr), false) = (unsafe { attr.as_mut() }, request.is_null()) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    // SAFETY: the caller's contract.
    let req = unsafe { Req::from_user(request) };
    let has = |bit: u32| attr.field_mask & u64::from(bit) != 0;
    if has(ucp_req_attr_field::UCP_REQUEST_ATTR_FIELD_STATUS) {
        attr.status = req.check_status();
    }
    if has(ucp_req_attr_field::UCP_REQUEST_ATTR_FIELD_MEM_TYPE) {
        attr.mem_type = ucs_memory_type::UCS_MEMORY_TYPE_HOST;
    }
    if has(ucp_req_attr_field::UCP_REQUEST_ATTR_FIELD_INFO_STRING) && !attr.debug_string.is_null() {
        let size = if has(ucp_req_attr_field::UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE) {
            attr.debug_string_size
        } else {
            0
        };
        let text = b"zcx request";
        let n = text.len().min(size.saturating_sub(1));
        if size > 0 {
            // SAFETY: the caller's buffer of `size` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr(), attr.debug_string.cast::<u8>(), n);
                attr.debug_string.add(n).write(0);
            }
        }
    }
    ucs_status_t::UCS_OK
}
