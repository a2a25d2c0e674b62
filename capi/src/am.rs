//! `ucp_am_*` and `ucp_worker_set_am_*handler`: active messages.
//!
//! A C handler gets a rendezvous message's data as a descriptor ([`Desc`]) for
//! `ucp_am_recv_data_nbx`, and an eager message's bytes where they arrived. With
//! `UCP_AM_FLAG_PERSISTENT_DATA` the eager bytes are kept first, so the handler may return
//! `UCS_INPROGRESS` and hold them until `ucp_am_data_release` (`UCP_AM_RECV_ATTR_FLAG_DATA`).

use std::collections::HashMap;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::bindings::*;
use crate::dt;
use crate::endpoint::{ep_ref, handle_of};
use crate::request::{self, Cb, Immediate, Outcome, Setup};
use crate::worker::{worker_ref, CWorker};

/// A message's data held for the application: a rendezvous descriptor or kept eager bytes.
pub struct Desc {
    desc: Mutex<Option<zcx::AmDesc>>,
    /// The handler returned; from then on whoever takes the data frees this.
    handler_done: AtomicBool,
}

impl Desc {
    fn take(&self) -> Option<zcx::AmDesc> {
        self.desc.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// Eager data kept for handlers, by the address the handler got, for `ucp_am_data_release`.
#[derive(Default)]
pub struct Kept(Mutex<HashMap<usize, usize>>);

/// Frees `desc` if its handler returned (called after the data was taken).
///
/// # Safety
/// `desc` is a live `Desc` from [`deliver`].
unsafe fn free_if_done(desc: *mut Desc) {
    // SAFETY: the caller's contract.
    if unsafe { &*desc }.handler_done.load(Ordering::Acquire) {
        // SAFETY: made by `Box::into_raw` in `deliver`; the handler is done and the data taken,
        // so nothing else refers to it.
        drop(unsafe { Box::from_raw(desc) });
    }
}

/// Hands a message to a C handler and returns its status.
fn deliver(
    cw: &CWorker,
    msg: &mut zcx::AmMessage<'_>,
    persistent: bool,
    call: &dyn Fn(*const c_void, usize, *mut c_void, usize, &ucp_am_recv_param_t) -> ucs_status_t::Type,
) -> ucs_status_t::Type {
    let reply_ep = msg.reply_ep().map_or(std::ptr::null_mut(), |ep| handle_of(cw, ep));
    let mut recv_attr =
        if reply_ep.is_null() { 0 } else { u64::from(ucp_am_recv_attr_t::UCP_AM_RECV_ATTR_FIELD_REPLY_EP) };
    let header = msg.header().to_vec();
    let length = msg.data_len();
    if msg.is_rndv() || persistent {
        let Some(kept) = msg.keep() else { return ucs_status_t::UCS_ERR_NO_ELEM };
        let data_ptr = kept.data().map(|d| d.as_ptr() as usize);
        let desc = Box::into_raw(Box::new(Desc {
            desc: Mutex::new(Some(kept)),
            handler_done: AtomicBool::new(false),
        }));
        let data = match data_ptr {
            None => {
                recv_attr |= u64::from(ucp_am_recv_attr_t::UCP_AM_RECV_ATTR_FLAG_RNDV);
                desc.cast::<c_void>()
            }
            Some(ptr) => {
                recv_attr |= u64::from(ucp_am_recv_attr_t::UCP_AM_RECV_ATTR_FLAG_DATA);
                cw.kept.0.lock().unwrap_or_else(|e| e.into_inner()).insert(ptr, desc as usize);
                ptr as *mut c_void
            }
        };
        let param = ucp_am_recv_param_t { recv_attr, reply_ep };
        let status = call(header.as_ptr().cast(), header.len(), data, length, &param);
        // SAFETY: made above; only this function and the data's taker free it.
        let d = unsafe { &*desc };
        d.handler_done.store(true, Ordering::Release);
        if status != ucs_status_t::UCS_INPROGRESS {
            // Not kept: dropping what is left declines rendezvous data, frees eager data.
            drop(d.take());
            if let Some(ptr) = data_ptr {
                cw.kept.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&ptr);
            }
            // SAFETY: the handler is done and the data taken.
            drop(unsafe { Box::from_raw(desc) });
        } else if d.desc.lock().unwrap_or_else(|e| e.into_inner()).is_none() {
            // Taken by `ucp_am_recv_data_nbx` from within the handler.
            // SAFETY: as above.
            drop(unsafe { Box::from_raw(desc) });
        }
        return ucs_status_t::UCS_OK;
    }
    let (data, len) = match msg.data() {
        Some(bytes) => (bytes.as_ptr() as *mut c_void, bytes.len()),
        None => (std::ptr::null_mut(), 0),
    };
    let param = ucp_am_recv_param_t { recv_attr, reply_ep };
    let status = call(header.as_ptr().cast(), header.len(), data, len, &param);
    if status == ucs_status_t::UCS_INPROGRESS {
        tracing::warn!("AM handler kept data without UCP_AM_FLAG_PERSISTENT_DATA; it is released");
    }
    ucs_status_t::UCS_OK
}

/// `ucp_worker_set_am_recv_handler`: installs (or, with a null callback, removes) the handler
/// of an AM id.
///
/// # Safety
/// `worker` is live; `param` valid; the handler callable with its argument while installed.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_set_am_recv_handler(
    worker: ucp_worker_h,
    param: *const ucp_am_handler_param_t,
) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    let (Some(p), false) = (unsafe { param.as_ref() }, worker.is_null()) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    let has = |bit: u32| p.field_mask & u64::from(bit) != 0;
    if !has(ucp_am_handler_param_field::UCP_AM_HANDLER_PARAM_FIELD_ID) {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    let Ok(id) = u16::try_from(p.id) else { return ucs_status_t::UCS_ERR_INVALID_PARAM };
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    let cb = if has(ucp_am_handler_param_field::UCP_AM_HANDLER_PARAM_FIELD_CB) { p.cb } else { None };
    let Some(cb) = cb else {
        cw.worker.set_am_handler(id, None);
        return ucs_status_t::UCS_OK;
    };
    let arg =
        if has(ucp_am_handler_param_field::UCP_AM_HANDLER_PARAM_FIELD_ARG) { p.arg as usize } else { 0 };
    let flags = if has(ucp_am_handler_param_field::UCP_AM_HANDLER_PARAM_FIELD_FLAGS) { p.flags } else { 0 };
    let persistent = flags & ucp_am_cb_flags::UCP_AM_FLAG_PERSISTENT_DATA != 0;
    let cw_addr = cw as *const CWorker as usize;
    cw.worker.set_am_handler(
        id,
        Some(Box::new(move |msg: &mut zcx::AmMessage<'_>| {
            // SAFETY: the worker outlives its handlers.
            let cw = unsafe { &*(cw_addr as *const CWorker) };
            let status = deliver(cw, msg, persistent, &|header, header_len, data, len, param| {
                // SAFETY: the application's handler, with its argument and the message.
                unsafe { cb(arg as *mut c_void, header, header_len, data, len, param) }
            });
            crate::status::from_ucs(status)
        })),
    );
    ucs_status_t::UCS_OK
}

/// `ucp_worker_set_am_handler` (deprecated form): a handler of data only.
///
/// # Safety
/// As `ucp_worker_set_am_recv_handler`.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_set_am_handler(
    worker: ucp_worker_h,
    id: u16,
    cb: ucp_am_callback_t,
    arg: *mut c_void,
    flags: u32,
) -> ucs_status_t::Type {
    if worker.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    let Some(cb) = cb else {
        cw.worker.set_am_handler(id, None);
        return ucs_status_t::UCS_OK;
    };
    let arg = arg as usize;
    let cw_addr = cw as *const CWorker as usize;
    let persistent = flags & ucp_am_cb_flags::UCP_AM_FLAG_PERSISTENT_DATA != 0;
    cw.worker.set_am_handler(
        id,
        Some(Box::new(move |msg: &mut zcx::AmMessage<'_>| {
            // SAFETY: the worker outlives its handlers.
            let cw = unsafe { &*(cw_addr as *const CWorker) };
            let status = deliver(cw, msg, persistent, &|_header, _header_len, data, len, param| {
                let flags =
                    if param.recv_attr & u64::from(ucp_am_recv_attr_t::UCP_AM_RECV_ATTR_FLAG_DATA) != 0 {
                        ucp_cb_param_flags::UCP_CB_PARAM_FLAG_DATA
                    } else {
                        0
                    };
                // SAFETY: the application's handler, with its argument and the message.
                unsafe { cb(arg as *mut c_void, data, len, param.reply_ep, flags as c_uint) }
            });
            crate::status::from_ucs(status)
        })),
    );
    ucs_status_t::UCS_OK
}

/// An AM send of `count` items of the datatype at `buffer`.
///
/// # Safety
/// UCP's contract for `ucp_am_send_nbx`.
#[allow(clippy::too_many_arguments)]
unsafe fn send(
    ep: ucp_ep_h,
    id: c_uint,
    header: *const c_void,
    header_length: usize,
    buffer: *const c_void,
    count: usize,
    flags: u32,
    param: *const ucp_request_param_t,
    setup: Setup,
) -> ucs_status_ptr_t {
    let Ok(id) = u16::try_from(id) else { return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM) };
    if ep.is_null() || (header.is_null() && header_length > 0) {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // SAFETY: the caller's contract.
    let cep = unsafe { ep_ref(ep) };
    // SAFETY: the caller's contract.
    let data = match unsafe { dt::gather(buffer, count, dt::of_param(param)) } {
        Ok(data) => data,
        Err(status) => return request::status_ptr(crate::status::ucs(status)),
    };
    let header = if header_length == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's contract; the header is copied before the call returns.
        unsafe { std::slice::from_raw_parts(header.cast::<u8>(), header_length) }
    };
    let proto = if flags & ucp_send_am_flags::UCP_AM_SEND_FLAG_EAGER != 0 {
        zcx::AmProto::Eager
    } else if flags & ucp_send_am_flags::UCP_AM_SEND_FLAG_RNDV != 0 {
        zcx::AmProto::Rndv
    } else {
        zcx::AmProto::Auto
    };
    let reply = flags & ucp_send_am_flags::UCP_AM_SEND_FLAG_REPLY != 0;
    // SAFETY: the caller's contract.
    unsafe {
        request::run(
            cep.worker().requests(),
            param,
            setup,
            Immediate::Null,
            |rp| cep.ep.am_send(id, header, data, zcx::AmSendParams { reply, proto, request: rp }),
            |c| Outcome { length: c.info.length, ..Outcome::default() },
        )
    }
}

/// `ucp_am_send_nbx`.
///
/// # Safety
/// `ep` is live; header and buffer valid (the buffer until completion); `param` null or valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_am_send_nbx(
    ep: ucp_ep_h,
    id: c_uint,
    header: *const c_void,
    header_length: usize,
    buffer: *const c_void,
    count: usize,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    // SAFETY: the caller's contract.
    let flags = unsafe { param.as_ref() }
        .filter(|p| p.op_attr_mask & ucp_op_attr_t::UCP_OP_ATTR_FIELD_FLAGS != 0)
        .map_or(0, |p| p.flags);
    // SAFETY: the caller's contract.
    unsafe { send(ep, id, header, header_length, buffer, count, flags, param, Setup::send(param)) }
}

/// `ucp_am_send_nb` (deprecated form).
///
/// # Safety
/// As `ucp_am_send_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucp_am_send_nb(
    ep: ucp_ep_h,
    id: u16,
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    cb: ucp_send_callback_t,
    flags: c_uint,
) -> ucs_status_ptr_t {
    let param = crate::tag::dt_param(datatype);
    let setup = Setup::nb(cb);
    // SAFETY: the caller's contract; `param` lives across the call.
    unsafe { send(ep, c_uint::from(id), std::ptr::null(), 0, buffer, count, flags, &param, setup) }
}

/// `ucp_am_recv_data_nbx`: receives the data of a message a handler kept (returning
/// `UCS_INPROGRESS`) or is handling.
///
/// # Safety
/// `worker` is live; `data_desc` a descriptor a handler got and not yet received or released;
/// the buffer valid until completion; `param` null or valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_am_recv_data_nbx(
    worker: ucp_worker_h,
    data_desc: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    if worker.is_null() || data_desc.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    let desc_ptr = data_desc.cast::<Desc>();
    // SAFETY: the caller's contract: a live descriptor.
    let Some(desc) = (unsafe { &*desc_ptr }).take() else {
        return request::status_ptr(ucs_status_t::UCS_ERR_NO_ELEM);
    };
    // SAFETY: taken above.
    unsafe { free_if_done(desc_ptr) };
    // SAFETY: the caller's contract.
    let target = match unsafe { dt::scatter(buffer, count, dt::of_param(param)) } {
        Ok(target) => target,
        Err(status) => return request::status_ptr(crate::status::ucs(status)),
    };
    // SAFETY: the caller's contract.
    let p = unsafe { param.as_ref() };
    let mut setup = match p {
        Some(p) => {
            // SAFETY: the union member for AM data is `recv_am`, read only when its bit is set.
            let cb = match (p.op_attr_mask & ucp_op_attr_t::UCP_OP_ATTR_FIELD_CALLBACK != 0, unsafe {
                p.cb.recv_am
            }) {
                (true, Some(f)) => Cb::LengthNbx(f),
                _ => Cb::None,
            };
            Setup { cb, user_data: request::user_data(p), finish: None }
        }
        None => Setup::none(),
    };
    setup.finish = target.finish;
    let length_out = p
        .filter(|p| p.op_attr_mask & ucp_op_attr_t::UCP_OP_ATTR_FIELD_RECV_INFO != 0)
        // SAFETY: the union member for AM data is `length`.
        .map(|p| unsafe { p.recv_info.length })
        .filter(|l| !l.is_null());
    let buf = target.buf;
    // SAFETY: the caller's contract.
    unsafe {
        request::run(
            cw.requests(),
            param,
            setup,
            Immediate::Null,
            |rp| cw.worker.am_recv_data_with(desc, buf, rp),
            |c| {
                if let Some(length) = length_out {
                    // SAFETY: the caller's contract.
                    length.write(c.info.length);
                }
                Outcome { length: c.info.length, ..Outcome::default() }
            },
        )
    }
}

/// `ucp_am_data_release`: releases data a handler kept (eager bytes or an unreceived
/// rendezvous descriptor, which the sender then sees completed).
///
/// # Safety
/// `worker` is live; `data` kept by a handler, released once.
#[no_mangle]
pub unsafe extern "C" fn ucp_am_data_release(worker: ucp_worker_h, data: *mut c_void) {
    if worker.is_null() || data.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    let desc_ptr = match cw.kept.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&(data as usize)) {
        Some(desc) => desc as *mut Desc,
        None => data.cast::<Desc>(),
    };
    // SAFETY: the caller's contract: a live descriptor or kept data.
    drop(unsafe { &*desc_ptr }.take());
    // SAFETY: taken above.
    unsafe { free_if_done(desc_ptr) };
}
