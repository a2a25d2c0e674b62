//! `ucp_worker_*`: a `ucp_worker_h` is a boxed [`CWorker`].

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::os::fd::AsRawFd;
use std::sync::Mutex;

use crate::bindings::*;
use crate::context::{copy_name, ctx_ref, write_stream, CContext};
use crate::request::{self, Immediate, Setup};
use crate::status;

/// The Rust side of a `ucp_worker_h`.
pub struct CWorker {
    /// The zcx worker.
    pub worker: zcx::Worker,
    /// Its context (outlives it, as in UCP).
    pub context: *const CContext,
    /// `UCP_WORKER_PARAM_FIELD_USER_DATA`.
    pub user_data: *mut c_void,
    /// The thread mode asked for, reported by `ucp_worker_query`.
    pub thread_mode: ucs_thread_mode_t::Type,
    /// Endpoints zcx made that the application never created (reply endpoints of AM senders),
    /// by name, each wrapped once.
    pub foreign_eps: Mutex<Vec<(String, usize)>>,
    /// The worker's name, NUL-terminated.
    pub name: std::ffi::CString,
    /// Eager AM data handlers kept.
    pub kept: crate::am::Kept,
}

// SAFETY: the raw pointers are the application's (`user_data`) or to the context, which is
// thread-safe and outlives the worker.
unsafe impl Send for CWorker {}
// SAFETY: as above; every other field is thread-safe.
unsafe impl Sync for CWorker {}

impl CWorker {
    /// The context's request pool.
    pub fn requests(&self) -> &request::RequestPool {
        // SAFETY: the context outlives its workers (UCP's contract).
        unsafe { &(*self.context).requests }
    }

    /// Progresses the worker.
    pub fn progress(&self) -> usize {
        self.worker.progress()
    }
}

/// The worker behind a handle.
///
/// # Safety
/// `worker` is a live handle from `ucp_worker_create` (not null).
pub unsafe fn worker_ref<'a>(worker: ucp_worker_h) -> &'a CWorker {
    // SAFETY: the caller's contract.
    unsafe { &*worker.cast::<CWorker>() }
}

/// `ucp_worker_create`.
///
/// # Safety
/// `context` is live; `params` valid; `worker_p` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_create(
    context: ucp_context_h,
    params: *const ucp_worker_params_t,
    worker_p: *mut ucp_worker_h,
) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    let (Some(p), false, false) = (unsafe { params.as_ref() }, context.is_null(), worker_p.is_null()) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    // SAFETY: the caller's contract.
    let c = unsafe { ctx_ref(context) };
    let has = |bit: u32| p.field_mask & u64::from(bit) != 0;
    let mut wp = zcx::WorkerParams::default();
    let mut thread_mode = ucs_thread_mode_t::UCS_THREAD_MODE_SINGLE;
    if has(ucp_worker_params_field::UCP_WORKER_PARAM_FIELD_THREAD_MODE) {
        thread_mode = p.thread_mode;
        wp.thread_mode = match p.thread_mode {
            ucs_thread_mode_t::UCS_THREAD_MODE_SERIALIZED => zcx::ThreadMode::Serialized,
            ucs_thread_mode_t::UCS_THREAD_MODE_MULTI => zcx::ThreadMode::Multi,
            _ => zcx::ThreadMode::Single,
        };
    }
    if has(ucp_worker_params_field::UCP_WORKER_PARAM_FIELD_NAME) && !p.name.is_null() {
        // SAFETY: NUL-terminated (UCP's contract).
        wp.name = Some(unsafe { CStr::from_ptr(p.name) }.to_string_lossy().into_owned());
    }
    if has(ucp_worker_params_field::UCP_WORKER_PARAM_FIELD_CLIENT_ID) {
        wp.client_id = p.client_id;
    }
    if has(ucp_worker_params_field::UCP_WORKER_PARAM_FIELD_EVENTS) {
        wp.events = zcx::WakeupEvents::from_bits_truncate(p.events);
    }
    if has(ucp_worker_params_field::UCP_WORKER_PARAM_FIELD_EVENT_FD) {
        tracing::warn!("UCP_WORKER_PARAM_FIELD_EVENT_FD is not supported; use ucp_worker_get_efd");
        return ucs_status_t::UCS_ERR_UNSUPPORTED;
    }
    let worker = match c.ctx.create_worker(&wp) {
        Ok(worker) => worker,
        Err(status) => return status::ucs(status),
    };
    let name = std::ffi::CString::new(worker.name().replace('\0', "")).unwrap_or_default();
    let user_data = if has(ucp_worker_params_field::UCP_WORKER_PARAM_FIELD_USER_DATA) {
        p.user_data
    } else {
        std::ptr::null_mut()
    };
    let cw = CWorker {
        worker,
        context: c,
        user_data,
        thread_mode,
        foreign_eps: Mutex::new(Vec::new()),
        name,
        kept: crate::am::Kept::default(),
    };
    // SAFETY: the caller's contract.
    unsafe { worker_p.write(Box::into_raw(Box::new(cw)).cast()) };
    ucs_status_t::UCS_OK
}

/// `ucp_worker_destroy`.
///
/// # Safety
/// `worker` is a live handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_destroy(worker: ucp_worker_h) {
    if worker.is_null() {
        return;
    }
    // SAFETY: made by `Box::into_raw` in `ucp_worker_create`, freed once.
    let cw = unsafe { Box::from_raw(worker.cast::<CWorker>()) };
    for (_, ep) in cw.foreign_eps.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
        // SAFETY: wrapped by `endpoint::wrap_foreign`, owned by this worker.
        drop(unsafe { Box::from_raw(ep as *mut crate::endpoint::CEp) });
    }
    drop(cw);
}

/// `ucp_worker_progress`: the number of events handled.
///
/// # Safety
/// `worker` is live.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_progress(worker: ucp_worker_h) -> c_uint {
    if worker.is_null() {
        return 0;
    }
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    cw.progress().min(c_uint::MAX as usize) as c_uint
}

/// A copy of the worker's address in memory from `malloc`, which `ucp_worker_release_address`
/// frees; returns it and its length. The address states its own length (see
/// `zcx::packed_len`), since `ucp_ep_create` gets it without one.
fn malloc_address(bytes: &[u8]) -> (*mut u8, usize) {
    // SAFETY: allocating at least one byte.
    let ptr = unsafe { libc::malloc(bytes.len().max(1)) }.cast::<u8>();
    if !ptr.is_null() {
        // SAFETY: a fresh allocation of at least `bytes.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len()) };
    }
    (ptr, bytes.len())
}

/// `ucp_worker_query`.
///
/// # Safety
/// `worker` is live; `attr` valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_query(
    worker: ucp_worker_h,
    attr: *mut ucp_worker_attr_t,
) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    let (Some(attr), false) = (unsafe { attr.as_mut() }, worker.is_null()) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    let has = |bit: u32| attr.field_mask & u64::from(bit) != 0;
    if has(ucp_worker_attr_field::UCP_WORKER_ATTR_FIELD_THREAD_MODE) {
        attr.thread_mode = cw.thread_mode;
    }
    if has(ucp_worker_attr_field::UCP_WORKER_ATTR_FIELD_ADDRESS) {
        let (ptr, len) = malloc_address(cw.worker.address());
        if ptr.is_null() {
            return ucs_status_t::UCS_ERR_NO_MEMORY;
        }
        attr.address = ptr.cast();
        attr.address_length = len;
    }
    if has(ucp_worker_attr_field::UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER) {
        attr.max_am_header = 4096;
    }
    if has(ucp_worker_attr_field::UCP_WORKER_ATTR_FIELD_NAME) {
        copy_name(&mut attr.name, cw.name.to_bytes());
    }
    if has(ucp_worker_attr_field::UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING) {
        attr.max_debug_string = 128;
    }
    ucs_status_t::UCS_OK
}

/// `ucp_worker_get_address`: a copy of the worker's address, freed by
/// `ucp_worker_release_address`.
///
/// # Safety
/// `worker` is live; the out-pointers valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_get_address(
    worker: ucp_worker_h,
    address_p: *mut *mut ucp_address_t,
    address_length_p: *mut usize,
) -> ucs_status_t::Type {
    if worker.is_null() || address_p.is_null() || address_length_p.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    let (ptr, len) = malloc_address(unsafe { worker_ref(worker) }.worker.address());
    if ptr.is_null() {
        return ucs_status_t::UCS_ERR_NO_MEMORY;
    }
    // SAFETY: the caller's contract.
    unsafe {
        address_p.write(ptr.cast());
        address_length_p.write(len);
    }
    ucs_status_t::UCS_OK
}

/// `ucp_worker_release_address`.
///
/// # Safety
/// `address` came from `ucp_worker_get_address` or `ucp_worker_query`, released once.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_release_address(_worker: ucp_worker_h, address: *mut ucp_address_t) {
    // SAFETY: from `malloc` in `malloc_address`.
    unsafe { libc::free(address.cast()) };
}

/// `ucp_worker_print_info`.
///
/// # Safety
/// `worker` is live; `stream` a valid `FILE *`.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_print_info(worker: ucp_worker_h, stream: *mut libc::FILE) {
    if worker.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    let text = format!(
        "#\n# UCP worker '{}' (zcx)\n#\n#   address: {} bytes\n#   thread mode: {:?}\n#\n",
        cw.worker.name(),
        cw.worker.address().len(),
        cw.worker.thread_mode()
    );
    // SAFETY: the caller's contract.
    unsafe { write_stream(stream.cast(), &text) };
}

/// `ucp_worker_fence`.
///
/// # Safety
/// `worker` is live.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_fence(worker: ucp_worker_h) -> ucs_status_t::Type {
    if worker.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    status::of(unsafe { worker_ref(worker) }.worker.fence())
}

/// `ucp_worker_flush_nbx`: completes when every operation issued on the worker has completed.
///
/// # Safety
/// `worker` is live; `param` null or valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_flush_nbx(
    worker: ucp_worker_h,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    if worker.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    // SAFETY: the caller's contract.
    unsafe {
        request::run(
            cw.requests(),
            param,
            Setup::send(param),
            Immediate::Null,
            |rp| cw.worker.flush_with(rp),
            |_| request::Outcome::default(),
        )
    }
}

/// `ucp_worker_flush_nb` (deprecated form).
///
/// # Safety
/// `worker` is live.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_flush_nb(
    worker: ucp_worker_h,
    _flags: c_uint,
    cb: ucp_send_callback_t,
) -> ucs_status_ptr_t {
    if worker.is_null() {
        return request::status_ptr(ucs_status_t::UCS_ERR_INVALID_PARAM);
    }
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    let setup = Setup::nb(cb);
    // SAFETY: no caller request.
    unsafe {
        request::run(
            cw.requests(),
            std::ptr::null(),
            setup,
            Immediate::Null,
            |rp| cw.worker.flush_with(rp),
            |_| request::Outcome::default(),
        )
    }
}

/// Waits for a request this library returned, progressing `cw`, and releases it.
///
/// # Safety
/// `ptr` is what an operation of this library just returned (a status or a live request).
pub unsafe fn wait_and_free(cw: &CWorker, ptr: ucs_status_ptr_t) -> ucs_status_t::Type {
    if let Some(status) = request::ptr_status(ptr) {
        return status;
    }
    // SAFETY: a live request this library just returned.
    let req = unsafe { request::Req::from_user(ptr) };
    loop {
        let status = req.check_status();
        if status != ucs_status_t::UCS_INPROGRESS {
            req.release(false);
            return status;
        }
        cw.progress();
    }
}

/// `ucp_worker_flush` (deprecated, blocking).
///
/// # Safety
/// `worker` is live.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_flush(worker: ucp_worker_h) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    let ptr = unsafe { ucp_worker_flush_nbx(worker, std::ptr::null()) };
    // SAFETY: the caller's contract; `ptr` was just returned.
    unsafe { wait_and_free(worker_ref(worker), ptr) }
}

/// `ucp_worker_get_efd`: the fd that becomes readable when `ucp_worker_arm` says there is work.
///
/// # Safety
/// `worker` is live; `fd` valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_get_efd(worker: ucp_worker_h, fd: *mut c_int) -> ucs_status_t::Type {
    if worker.is_null() || fd.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    let cw = unsafe { worker_ref(worker) };
    // SAFETY: the caller's contract.
    unsafe { fd.write(cw.worker.event_fd().as_raw_fd()) };
    ucs_status_t::UCS_OK
}

/// `ucp_worker_arm`: `UCS_OK` when the event fd will signal new work, `UCS_ERR_BUSY` when there
/// is work now.
///
/// # Safety
/// `worker` is live.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_arm(worker: ucp_worker_h) -> ucs_status_t::Type {
    if worker.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    status::of(unsafe { worker_ref(worker) }.worker.arm())
}

/// `ucp_worker_wait`: sleeps until the worker has work.
///
/// # Safety
/// `worker` is live.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_wait(worker: ucp_worker_h) -> ucs_status_t::Type {
    if worker.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    status::of(unsafe { worker_ref(worker) }.worker.wait())
}

/// `ucp_worker_signal`: wakes a thread in `ucp_worker_wait` or polling the event fd.
///
/// # Safety
/// `worker` is live.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_signal(worker: ucp_worker_h) -> ucs_status_t::Type {
    if worker.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    unsafe { worker_ref(worker) }.worker.signal();
    ucs_status_t::UCS_OK
}

/// `ucp_worker_wait_mem`: may return before `address` changes (UCP allows it; callers loop and
/// progress). A short pause keeps a spinning caller polite.
///
/// # Safety
/// Any arguments.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_wait_mem(_worker: ucp_worker_h, _address: *mut c_void) {
    std::hint::spin_loop();
}

/// `ucp_worker_address_query`: the unique id of the worker an address belongs to
/// (`UCP_WORKER_ADDRESS_ATTR_FIELD_UID`).
///
/// # Safety
/// `address` is null or a worker address from `ucp_worker_get_address` or `ucp_worker_query`;
/// `attr` null or valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_address_query(
    address: *mut ucp_address_t,
    attr: *mut ucp_worker_address_attr_t,
) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    let (Some(attr), false) = (unsafe { attr.as_mut() }, address.is_null()) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    if attr.field_mask & u64::from(ucp_worker_address_attr_field::UCP_WORKER_ADDRESS_ATTR_FIELD_UID) == 0 {
        return ucs_status_t::UCS_OK;
    }
    // SAFETY: the caller's contract.
    let Some(bytes) = (unsafe { crate::endpoint::address_bytes(address) }) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    match zcx::worker_address_uid(&bytes) {
        Ok(uid) => {
            attr.worker_uid = uid;
            ucs_status_t::UCS_OK
        }
        Err(status) => crate::status::ucs(status),
    }
}

/// A C string for logs.
///
/// # Safety
/// `s` is null or NUL-terminated.
pub unsafe fn c_str_lossy(s: *const c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}
