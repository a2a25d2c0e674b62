//! `ucp_stream_*`: the byte stream of an endpoint.

use std::ffi::{c_uint, c_void};

use crate::bindings::*;
use crate::dt;
use crate::endpoint::ep_ref;
use crate::request::{self, Cb, Immediate, Outcome, Setup};
use crate::tag::dt_param;

/// A stream send of `count` items of the datatype at `buffer`.
///
/// # Safety
/// UCP's contract for `ucp_stream_send_nbx`.
unsafe fn send(
    ep: ucp_ep_h,
    buffer: *const c_void,
    count: usize,
    param: *const ucp_request_param_t,
    setup: Setup,
) -> ucs_status_ptr_t {
    if ep.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // SAFETY: the caller's contract.
    let cep = unsafe { ep_ref(ep) };
    // SAFETY: the caller's contract.
    let data = match unsafe { dt::gather(buffer, count, dt::of_param(param)) } {
        Ok(data) => data,
        Err(status) => return request::status_ptr(crate::status::ucs(status)),
    };
    // SAFETY: the caller's contract.
    unsafe {
        request::run(
            cep.worker().requests(),
            param,
            setup,
            Immediate::Null,
            |rp| cep.ep.stream_send(data, rp),
            |c| Outcome { length: c.info.length, ..Outcome::default() },
        )
    }
}

/// `ucp_stream_send_nbx`.
///
/// # Safety
/// `ep` is live; the buffer valid until completion; `param` null or valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_send_nbx(
    ep: ucp_ep_h,
    buffer: *const c_void,
    count: usize,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    // SAFETY: the caller's contract.
    unsafe { send(ep, buffer, count, param, Setup::send(param)) }
}

/// `ucp_stream_send_nb` (deprecated form).
///
/// # Safety
/// As `ucp_stream_send_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_send_nb(
    ep: ucp_ep_h,
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    cb: ucp_send_callback_t,
    _flags: c_uint,
) -> ucs_status_ptr_t {
    let param = dt_param(datatype);
    let setup = Setup::nb(cb);
    // SAFETY: the caller's contract; `param` lives across the call.
    unsafe { send(ep, buffer, count, &param, setup) }
}

/// A stream receive. An immediate completion writes `*length` and returns NULL (unless
/// `NO_IMM_CMPL`); without `UCP_STREAM_RECV_FLAG_WAITALL` it completes with whatever bytes are
/// there, at least one element's worth.
///
/// # Safety
/// UCP's contract for `ucp_stream_recv_nbx`.
unsafe fn recv(
    ep: ucp_ep_h,
    buffer: *mut c_void,
    count: usize,
    length: *mut usize,
    param: *const ucp_request_param_t,
    mut setup: Setup,
    waitall: bool,
) -> ucs_status_ptr_t {
    if ep.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // SAFETY: the caller's contract.
    let cep = unsafe { ep_ref(ep) };
    // SAFETY: the caller's contract.
    let target = match unsafe { dt::scatter(buffer, count, dt::of_param(param)) } {
        Ok(target) => target,
        Err(status) => return request::status_ptr(crate::status::ucs(status)),
    };
    setup.finish = target.finish;
    let mut report = |outcome: &Outcome| {
        if !length.is_null() {
            // SAFETY: the caller's contract.
            unsafe { length.write(outcome.length) };
        }
    };
    // SAFETY: the caller's contract.
    let no_imm = unsafe { request::attr_mask(param) } & ucp_op_attr_t::UCP_OP_ATTR_FLAG_NO_IMM_CMPL != 0;
    let immediate = Immediate::Report(if no_imm { None } else { Some(&mut report) });
    let buf = target.buf;
    // SAFETY: the caller's contract.
    unsafe {
        request::run(
            cep.worker().requests(),
            param,
            setup,
            immediate,
            |rp| cep.ep.stream_recv(buf, waitall, rp),
            |c| Outcome { length: c.info.length, ..Outcome::default() },
        )
    }
}

/// `ucp_stream_recv_nbx`.
///
/// # Safety
/// `ep` is live; the buffer valid until completion; `length` valid; `param` null or valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_nbx(
    ep: ucp_ep_h,
    buffer: *mut c_void,
    count: usize,
    length: *mut usize,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    // SAFETY: the caller's contract.
    let p = unsafe { param.as_ref() };
    let waitall = p.is_some_and(|p| {
        p.op_attr_mask & ucp_op_attr_t::UCP_OP_ATTR_FIELD_FLAGS != 0
            && p.flags & ucp_stream_recv_flags_t::UCP_STREAM_RECV_FLAG_WAITALL != 0
    });
    let setup = match p {
        Some(p) => {
            // SAFETY: the union member for stream receives is `recv_stream`, read only when its
            // bit is set.
            let cb = match (p.op_attr_mask & ucp_op_attr_t::UCP_OP_ATTR_FIELD_CALLBACK != 0, unsafe {
                p.cb.recv_stream
            }) {
                (true, Some(f)) => Cb::LengthNbx(f),
                _ => Cb::None,
            };
            Setup { cb, user_data: request::user_data(p), finish: None }
        }
        None => Setup::none(),
    };
    // SAFETY: the caller's contract.
    unsafe { recv(ep, buffer, count, length, param, setup, waitall) }
}

/// `ucp_stream_recv_nb` (deprecated form).
///
/// # Safety
/// As `ucp_stream_recv_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_nb(
    ep: ucp_ep_h,
    buffer: *mut c_void,
    count: usize,
    datatype: ucp_datatype_t,
    cb: ucp_stream_recv_callback_t,
    length: *mut usize,
    flags: c_uint,
) -> ucs_status_ptr_t {
    let param = dt_param(datatype);
    let setup =
        Setup { cb: cb.map_or(Cb::None, Cb::LengthNb), user_data: std::ptr::null_mut(), finish: None };
    let waitall = flags & ucp_stream_recv_flags_t::UCP_STREAM_RECV_FLAG_WAITALL != 0;
    // SAFETY: the caller's contract; `param` lives across the call.
    unsafe { recv(ep, buffer, count, length, &param, setup, waitall) }
}

/// `ucp_stream_recv_request_test`: the request's status, and its length once complete.
///
/// # Safety
/// `request` is a live stream-receive request; `length_p` valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_request_test(
    request: *mut c_void,
    length_p: *mut usize,
) -> ucs_status_t::Type {
    if request.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    let req = unsafe { request::Req::from_user(request) };
    let status = req.check_status();
    if status == ucs_status_t::UCS_OK && !length_p.is_null() {
        // SAFETY: the caller's contract.
        unsafe { length_p.write(req.outcome().length) };
    }
    status
}

/// `ucp_stream_recv_data_nb`: the next piece of the stream as it arrived, in memory the library
/// owns until `ucp_stream_data_release`; NULL when there is none.
///
/// # Safety
/// `ep` is live; `length` valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_data_nb(ep: ucp_ep_h, length: *mut usize) -> ucs_status_ptr_t {
    if ep.is_null() || length.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // SAFETY: the caller's contract.
    let cep = unsafe { ep_ref(ep) };
    match cep.ep.stream_recv_data() {
        Ok(Some(bytes)) => {
            // SAFETY: allocating at least one byte.
            let data = unsafe { libc::malloc(bytes.len().max(1)) };
            if data.is_null() {
                return request::status_ptr(ucs_status_t::UCS_ERR_NO_MEMORY);
            }
            // SAFETY: a fresh allocation of at least `bytes.len()` bytes; the caller's contract.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), data.cast::<u8>(), bytes.len());
                length.write(bytes.len());
            }
            data
        }
        Ok(None) => std::ptr::null_mut(),
        Err(status) => request::status_ptr(crate::status::ucs(status)),
    }
}

/// `ucp_stream_data_release`: frees what `ucp_stream_recv_data_nb` returned.
///
/// # Safety
/// `data` came from `ucp_stream_recv_data_nb`, released once.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_data_release(_ep: ucp_ep_h, data: *mut c_void) {
    // SAFETY: from `malloc` in `ucp_stream_recv_data_nb`.
    unsafe { libc::free(data) };
}

/// `ucp_stream_worker_poll`: up to `max_eps` endpoints with stream data to read, each with its
/// `user_data`; an endpoint is reported once per arrival of data. Makes no progress.
///
/// # Safety
/// `worker` is live; `poll_eps` valid for `max_eps` writes.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_worker_poll(
    worker: ucp_worker_h,
    poll_eps: *mut ucp_stream_poll_ep_t,
    max_eps: usize,
    _flags: c_uint,
) -> isize {
    if worker.is_null() || (poll_eps.is_null() && max_eps > 0) {
        return ucs_status_t::UCS_ERR_INVALID_PARAM as isize;
    }
    // SAFETY: the caller's contract.
    let cw = unsafe { crate::worker::worker_ref(worker) };
    let ready = cw.worker.stream_poll(max_eps);
    for (i, ep) in ready.iter().enumerate() {
        let handle = crate::endpoint::handle_of(cw, ep);
        let user_data = if handle.is_null() {
            std::ptr::null_mut()
        } else {
            // SAFETY: a handle of this worker's endpoint, live while the application holds it.
            unsafe { crate::endpoint::ep_ref(handle) }.user_data
        };
        // SAFETY: `i < max_eps` (the poll returns at most that many); the caller's contract.
        unsafe {
            poll_eps.add(i).write(ucp_stream_poll_ep_t { ep: handle, user_data, flags: 0, reserved: [0; 16] })
        };
    }
    ready.len() as isize
}
