//! `ucp_tag_*`: tagged sends and receives, probes and matched-message receives.

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use crate::bindings::*;
use crate::dt::{self, RawBuf};
use crate::endpoint::ep_ref;
use crate::request::{self, Cb, Immediate, Outcome, Setup};
use crate::worker::{worker_ref, CWorker};

/// A send of `count` items of `datatype` at `buffer` with `tag`.
///
/// # Safety
/// UCP's contract for `ucp_tag_send_nbx`.
unsafe fn send(
    ep: ucp_ep_h,
    buffer: *const c_void,
    count: usize,
    tag: ucp_tag_t,
    param: *const ucp_request_param_t,
    setup: Setup,
    sync: bool,
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
            |rp| cep.ep.tag_send(data, tag, zcx::TagSendParams { sync, request: rp }),
            |c| Outcome { length: c.info.length, ..Outcome::default() },
        )
    }
}

/// `ucp_tag_send_nbx`.
///
/// # Safety
/// `ep` is live; the buffer stays valid until completion; `param` null or valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_nbx(
    ep: ucp_ep_h,
    buffer: *const c_void,
    count: usize,
    tag: ucp_tag_t,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    // SAFETY: the caller's contract.
    unsafe { send(ep, buffer, count, tag, param, Setup::send(param), false) }
}

/// `ucp_tag_send_sync_nbx`: completes once the receiver matched the message.
///
/// # Safety
/// As `ucp_tag_send_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_sync_nbx(
    ep: ucp_ep_h,
    buffer: *const c_void,
    count: usize,
    tag: ucp_tag_t,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    // SAFETY: the caller's contract.
    unsafe { send(ep, buffer, count, tag, param, Setup::send(param), true) }
}

/// A request parameter block with only a datatype.
pub fn dt_param(datatype: ucp_datatype_t) -> ucp_request_param_t {
    ucp_request_param_t {
        op_attr_mask: ucp_op_attr_t::UCP_OP_ATTR_FIELD_DATATYPE,
        datatype,
        // SAFETY: all-zero is a valid value of every other field.
        ..unsafe { std::mem::zeroed() }
    }
}

/// `ucp_tag_send_nb` (deprecated form).
///
/// # Safety
/// As `ucp_tag_send_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_nb(
    ep: ucp_ep_h,
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    cb: ucp_send_callback_t,
) -> ucs_status_ptr_t {
    let param = dt_param(datatype);
    let setup = Setup::nb(cb);
    // SAFETY: the caller's contract; `param` lives across the call.
    unsafe { send(ep, buffer, count, tag, &param, setup, false) }
}

/// `ucp_tag_send_sync_nb` (deprecated form).
///
/// # Safety
/// As `ucp_tag_send_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_sync_nb(
    ep: ucp_ep_h,
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    cb: ucp_send_callback_t,
) -> ucs_status_ptr_t {
    let param = dt_param(datatype);
    let setup = Setup::nb(cb);
    // SAFETY: the caller's contract; `param` lives across the call.
    unsafe { send(ep, buffer, count, tag, &param, setup, true) }
}

/// `ucp_tag_send_nbr` (deprecated): a send into the caller's request.
///
/// # Safety
/// As `ucp_tag_send_nbx`; `req` has the context's request size before it.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_nbr(
    ep: ucp_ep_h,
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    req: *mut c_void,
) -> ucs_status_t::Type {
    let mut param = dt_param(datatype);
    param.op_attr_mask |= ucp_op_attr_t::UCP_OP_ATTR_FIELD_REQUEST;
    param.request = req;
    // SAFETY: the caller's contract; `param` lives across the call.
    let ptr = unsafe { send(ep, buffer, count, tag, &param, Setup::none(), false) };
    request::ptr_status(ptr).unwrap_or(ucs_status_t::UCS_INPROGRESS)
}

/// The tag-receive callback of `param`.
fn recv_setup(param: Option<&ucp_request_param_t>) -> Setup {
    let Some(p) = param else { return Setup::none() };
    // SAFETY: the union member for tag receives is `recv`, read only when its bit is set.
    let cb = match (p.op_attr_mask & ucp_op_attr_t::UCP_OP_ATTR_FIELD_CALLBACK != 0, unsafe { p.cb.recv }) {
        (true, Some(f)) => Cb::TagRecvNbx(f),
        _ => Cb::None,
    };
    Setup { cb, user_data: request::user_data(p), finish: None }
}

/// A tag receive into `count` items of the datatype at `buffer`, issued by `issue`.
///
/// # Safety
/// UCP's contract for `ucp_tag_recv_nbx`.
unsafe fn recv(
    cw: &CWorker,
    buffer: *mut c_void,
    count: usize,
    param: *const ucp_request_param_t,
    mut setup: Setup,
    issue: impl FnOnce(RawBuf, zcx::RequestParams) -> zcx::Result<zcx::Request<RawBuf>>,
) -> ucs_status_ptr_t {
    // SAFETY: the caller's contract.
    let target = match unsafe { dt::scatter(buffer, count, dt::of_param(param)) } {
        Ok(target) => target,
        Err(status) => return request::status_ptr(crate::status::ucs(status)),
    };
    setup.finish = target.finish;
    // SAFETY: the caller's contract.
    let info = unsafe { param.as_ref() }
        .filter(|p| p.op_attr_mask & ucp_op_attr_t::UCP_OP_ATTR_FIELD_RECV_INFO != 0)
        // SAFETY: the union member for tag receives is `tag_info`.
        .map(|p| unsafe { p.recv_info.tag_info })
        .filter(|info| !info.is_null());
    let mut report = |outcome: &Outcome| {
        if let Some(info) = info {
            // SAFETY: the caller's contract: valid for a write.
            unsafe {
                info.write(ucp_tag_recv_info_t { sender_tag: outcome.sender_tag, length: outcome.length })
            };
        }
    };
    // SAFETY: the caller's contract.
    let no_imm = unsafe { request::attr_mask(param) } & ucp_op_attr_t::UCP_OP_ATTR_FLAG_NO_IMM_CMPL != 0;
    let immediate = Immediate::Report(if info.is_some() && !no_imm { Some(&mut report) } else { None });
    let buf = target.buf;
    // SAFETY: the caller's contract.
    unsafe {
        request::run(
            cw.requests(),
            param,
            setup,
            immediate,
            |rp| issue(buf, rp),
            |c| Outcome { length: c.info.length, sender_tag: c.info.sender_tag, value: 0 },
        )
    }
}

/// `ucp_tag_recv_nbx`: an immediate match returns NULL with `recv_info` filled when the caller
/// asked for it, otherwise the completed request after its callback ran.
///
/// # Safety
/// `worker` is live; the buffer stays valid until completion; `param` null or valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_nbx(
    worker: ucp_worker_h,
    buffer: *mut c_void,
    count: usize,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    if worker.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    // SAFETY: the caller's contract.
    let setup = recv_setup(unsafe { param.as_ref() });
    // SAFETY: the caller's contract.
    unsafe { recv(cw, buffer, count, param, setup, |buf, rp| cw.worker.tag_recv(buf, tag, tag_mask, rp)) }
}

/// `ucp_tag_recv_nb` (deprecated form).
///
/// # Safety
/// As `ucp_tag_recv_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_nb(
    worker: ucp_worker_h,
    buffer: *mut c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
    cb: ucp_tag_recv_callback_t,
) -> ucs_status_ptr_t {
    if worker.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    let param = dt_param(datatype);
    let setup =
        Setup { cb: cb.map_or(Cb::None, Cb::TagRecvNb), user_data: std::ptr::null_mut(), finish: None };
    // SAFETY: the caller's contract; `param` lives across the call.
    unsafe { recv(cw, buffer, count, &param, setup, |buf, rp| cw.worker.tag_recv(buf, tag, tag_mask, rp)) }
}

/// `ucp_tag_recv_nbr` (deprecated): a receive into the caller's request.
///
/// # Safety
/// As `ucp_tag_recv_nbx`; `req` has the context's request size before it.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_nbr(
    worker: ucp_worker_h,
    buffer: *mut c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
    req: *mut c_void,
) -> ucs_status_t::Type {
    if worker.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    let mut param = dt_param(datatype);
    param.op_attr_mask |=
        ucp_op_attr_t::UCP_OP_ATTR_FIELD_REQUEST | ucp_op_attr_t::UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.request = req;
    // SAFETY: the caller's contract; `param` lives across the call.
    let ptr = unsafe {
        recv(cw, buffer, count, &param, Setup::none(), |buf, rp| cw.worker.tag_recv(buf, tag, tag_mask, rp))
    };
    request::ptr_status(ptr).unwrap_or(ucs_status_t::UCS_OK)
}

/// A message taken out of the unexpected queue by `ucp_tag_probe_nb(remove = 1)`, waiting for
/// `ucp_tag_msg_recv_nbx`.
struct Probed(Mutex<Option<zcx::TagMessage>>);

/// `ucp_tag_probe_nb`: the oldest matching unexpected message, or NULL. With `remove`, the
/// message leaves the queue and must be received with `ucp_tag_msg_recv_nbx`. Runs no callbacks
/// beyond what the progress it makes runs.
///
/// # Safety
/// `worker` is live; `info` null or valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_probe_nb(
    worker: ucp_worker_h,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
    remove: c_int,
    info: *mut ucp_tag_recv_info_t,
) -> ucp_tag_message_h {
    if worker.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    let write_info = |sender_tag: u64, length: usize| {
        if !info.is_null() {
            // SAFETY: the caller's contract.
            unsafe { info.write(ucp_tag_recv_info_t { sender_tag, length }) };
        }
    };
    if remove != 0 {
        let Some(message) = cw.worker.tag_peek_remove(tag, tag_mask) else { return std::ptr::null_mut() };
        write_info(message.tag(), message.length());
        Box::into_raw(Box::new(Probed(Mutex::new(Some(message))))).cast()
    } else {
        match cw.worker.tag_peek(tag, tag_mask) {
            Some(found) => {
                write_info(found.sender_tag, found.length);
                // A non-null handle that is never dereferenced: without `remove` the message
                // stays queued, and UCP gives no use for the handle.
                std::ptr::NonNull::<ucp_recv_desc>::dangling().as_ptr()
            }
            None => std::ptr::null_mut(),
        }
    }
}

/// `ucp_tag_msg_recv_nbx`: receives a message `ucp_tag_probe_nb` removed.
///
/// # Safety
/// `worker` is live; `message` a removed message, received once; the buffer valid until
/// completion; `param` null or valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_msg_recv_nbx(
    worker: ucp_worker_h,
    buffer: *mut c_void,
    count: usize,
    message: ucp_tag_message_h,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    if worker.is_null() || message.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    // SAFETY: made by `ucp_tag_probe_nb(remove)`, received once.
    let probed = unsafe { Box::from_raw(message.cast::<Probed>()) };
    let Some(msg) = probed.0.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    };
    // SAFETY: the caller's contract.
    let setup = recv_setup(unsafe { param.as_ref() });
    // SAFETY: the caller's contract.
    unsafe { recv(cw, buffer, count, param, setup, |buf, rp| msg.recv(buf, rp)) }
}

/// `ucp_tag_msg_recv_nb` (deprecated form).
///
/// # Safety
/// As `ucp_tag_msg_recv_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_msg_recv_nb(
    worker: ucp_worker_h,
    buffer: *mut c_void,
    count: usize,
    datatype: ucp_datatype_t,
    message: ucp_tag_message_h,
    cb: ucp_tag_recv_callback_t,
) -> ucs_status_ptr_t {
    if worker.is_null() || message.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    // SAFETY: made by `ucp_tag_probe_nb(remove)`, received once.
    let probed = unsafe { Box::from_raw(message.cast::<Probed>()) };
    let Some(msg) = probed.0.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    };
    let param = dt_param(datatype);
    let setup =
        Setup { cb: cb.map_or(Cb::None, Cb::TagRecvNb), user_data: std::ptr::null_mut(), finish: None };
    // SAFETY: the caller's contract; `param` lives across the call.
    unsafe { recv(cw, buffer, count, &param, setup, |buf, rp| msg.recv(buf, rp)) }
}

/// `ucp_tag_recv_request_test`: the request's status, and its receive info once complete.
///
/// # Safety
/// `request` is a live tag-receive request; `info` valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_request_test(
    request: *mut c_void,
    info: *mut ucp_tag_recv_info_t,
) -> ucs_status_t::Type {
    if request.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    let req = unsafe { request::Req::from_user(request) };
    let status = req.check_status();
    if status != ucs_status_t::UCS_INPROGRESS && !info.is_null() {
        let outcome = req.outcome();
        // SAFETY: the caller's contract.
        unsafe { info.write(ucp_tag_recv_info_t { sender_tag: outcome.sender_tag, length: outcome.length }) };
    }
    status
}
