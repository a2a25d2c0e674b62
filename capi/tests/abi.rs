//! UCP's C ABI as an application meets it, called directly on this crate's `extern "C"` functions
//! in one process: one context, two workers (A and B), an endpoint each way made from the other
//! worker's `ucp_worker_get_address`, both workers progressed by the test until what it waits for
//! happens.
//!
//! Each test states one semantic that UCX 1.13's `ucp.h` documents (request memory and its
//! initialiser, callback arguments, immediate completion, free versus release, requests the caller
//! allocates, IOV and generic datatypes, probes, the configuration from the environment, queries),
//! or that hostile input gets a clear status instead of a crash. Calls that would crash the whole
//! process when the library gets them wrong (null handles) run in a child process each: the test
//! binary itself, re-run on `null_case_child` with the case named in `ABI_NULL_CASE`.
//!
//! Where UCX's text leaves a choice open, the test asserts what UCX 1.13.1's own library does
//! (checked with a throwaway C program against `/usr/lib/x86_64-linux-gnu/libucp.so.0`).

use std::collections::HashSet;
use std::ffi::{c_int, c_void, CStr, OsString};
use std::process::{Command, Stdio};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use ucp::bindings::ucp_op_attr_t::{
    UCP_OP_ATTR_FIELD_CALLBACK, UCP_OP_ATTR_FIELD_DATATYPE, UCP_OP_ATTR_FIELD_FLAGS,
    UCP_OP_ATTR_FIELD_RECV_INFO, UCP_OP_ATTR_FIELD_REPLY_BUFFER, UCP_OP_ATTR_FIELD_REQUEST,
    UCP_OP_ATTR_FIELD_USER_DATA, UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
};
use ucp::bindings::ucs_status_t::{
    UCS_ERR_CANCELED, UCS_ERR_INVALID_PARAM, UCS_ERR_MESSAGE_TRUNCATED, UCS_ERR_UNSUPPORTED, UCS_INPROGRESS,
    UCS_OK,
};
use ucp::bindings::*;
use ucp::config::{ucp_config_modify, ucp_config_print, ucp_config_read, ucp_config_release};
use ucp::context::{ucp_cleanup, ucp_context_query, ucp_init_version};
use ucp::dt::{ucp_dt_create_generic, ucp_dt_destroy};
use ucp::endpoint::{ucp_ep_close_nbx, ucp_ep_create, ucp_ep_flush_nbx, ucp_ep_query};
use ucp::mem::{
    ucp_ep_rkey_unpack, ucp_mem_map, ucp_mem_query, ucp_mem_unmap, ucp_rkey_buffer_release, ucp_rkey_destroy,
    ucp_rkey_pack, ucp_rkey_ptr,
};
use ucp::request_api::{
    ucp_request_cancel, ucp_request_check_status, ucp_request_free, ucp_request_query, ucp_request_release,
    ucp_request_test,
};
use ucp::rma::{ucp_atomic_op_nbx, ucp_get_nbx, ucp_put_nbx};
use ucp::stream::{
    ucp_stream_recv_nbx, ucp_stream_recv_request_test, ucp_stream_send_nbx, ucp_stream_worker_poll,
};
use ucp::tag::{
    ucp_tag_msg_recv_nbx, ucp_tag_probe_nb, ucp_tag_recv_nbr, ucp_tag_recv_nbx, ucp_tag_recv_request_test,
    ucp_tag_send_nbx, ucp_tag_send_sync_nbx,
};
use ucp::worker::{
    ucp_worker_address_query, ucp_worker_arm, ucp_worker_create, ucp_worker_destroy, ucp_worker_fence,
    ucp_worker_flush_nbx, ucp_worker_get_address, ucp_worker_get_efd, ucp_worker_progress, ucp_worker_query,
    ucp_worker_release_address, ucp_worker_signal, ucp_worker_wait,
};

type Status = ucs_status_t::Type;

/// How long any one wait may take before it fails the test (the machine may be busy).
const TIMEOUT: Duration = Duration::from_secs(30);
/// Every bit of a tag matters.
const FULL: u64 = u64::MAX;
/// `ucp_dt_make_contig(1)`.
const BYTES: ucp_datatype_t = 1 << ucp_dt_type::UCP_DATATYPE_SHIFT;
/// `ucp_dt_make_iov()`.
const IOV: ucp_datatype_t = ucp_dt_type::UCP_DATATYPE_IOV as ucp_datatype_t;

/// `ucp_dt_make_contig(size)`.
fn contig(size: u64) -> ucp_datatype_t {
    size << ucp_dt_type::UCP_DATATYPE_SHIFT
}

/// A status by name, for failure messages.
fn name(status: Status) -> String {
    let known = match status {
        UCS_OK => "UCS_OK",
        UCS_INPROGRESS => "UCS_INPROGRESS",
        UCS_ERR_INVALID_PARAM => "UCS_ERR_INVALID_PARAM",
        UCS_ERR_UNSUPPORTED => "UCS_ERR_UNSUPPORTED",
        UCS_ERR_CANCELED => "UCS_ERR_CANCELED",
        UCS_ERR_MESSAGE_TRUNCATED => "UCS_ERR_MESSAGE_TRUNCATED",
        ucs_status_t::UCS_ERR_INVALID_ADDR => "UCS_ERR_INVALID_ADDR",
        ucs_status_t::UCS_ERR_NO_ELEM => "UCS_ERR_NO_ELEM",
        ucs_status_t::UCS_ERR_UNREACHABLE => "UCS_ERR_UNREACHABLE",
        ucs_status_t::UCS_ERR_NO_MESSAGE => "UCS_ERR_NO_MESSAGE",
        ucs_status_t::UCS_ERR_NOT_CONNECTED => "UCS_ERR_NOT_CONNECTED",
        _ => "",
    };
    format!("{known}({status})")
}

/// What a `ucs_status_ptr_t` is, read as `UCS_PTR_IS_ERR` and friends read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ret {
    /// NULL: completed at once.
    Null,
    /// An error status.
    Err(Status),
    /// A request to follow.
    Req(*mut c_void),
}

fn ret(ptr: ucs_status_ptr_t) -> Ret {
    if ptr.is_null() {
        Ret::Null
    } else if ptr as usize >= ucs_status_t::UCS_ERR_LAST as isize as usize {
        Ret::Err(ptr as isize as Status)
    } else {
        Ret::Req(ptr)
    }
}

/// An all-zero C parameter struct, the way C code initialises one before setting its fields.
fn zeroed<T: Copy>() -> T {
    // SAFETY: used only for `ucp.h`'s plain structs (integers, pointers, nullable function
    // pointers and unions of them), for which all-zero bytes are a valid value.
    unsafe { std::mem::zeroed() }
}

/// The environment is read whenever a context is made without a configuration; the one test that
/// changes it holds this for writing, every other holder of a context for reading.
static ENV: RwLock<()> = RwLock::new(());

fn env_read() -> RwLockReadGuard<'static, ()> {
    ENV.read().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------------
// Callbacks: each reports to the `Seen` its `user_data` names.

/// One call of a completion callback.
#[derive(Debug, Clone, Copy)]
struct Call {
    request: usize,
    status: Status,
    /// The tag receive info (tag receive callbacks).
    info: Option<(u64, usize)>,
    user_data: usize,
}

/// What the completion callbacks of one operation reported. Callbacks find it through their
/// `user_data`, and only when it is registered here, so a wrong `user_data` is recorded as a
/// stray call instead of being dereferenced.
#[derive(Default)]
struct Seen {
    calls: AtomicUsize,
    last: Mutex<Option<Call>>,
}

static LIVE_SEEN: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static STRAY_CALLS: Mutex<Vec<Call>> = Mutex::new(Vec::new());

impl Seen {
    fn new() -> Box<Seen> {
        let seen = Box::<Seen>::default();
        LIVE_SEEN.lock().unwrap_or_else(PoisonError::into_inner).push(&*seen as *const Seen as usize);
        seen
    }

    fn user_data(&self) -> *mut c_void {
        self as *const Seen as *mut c_void
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// The last call, which must have happened.
    fn last(&self, what: &str) -> Call {
        let last = *self.last.lock().unwrap_or_else(PoisonError::into_inner);
        last.unwrap_or_else(|| panic!("{what}: its callback never ran (stray calls: {:?})", strays()))
    }
}

impl Drop for Seen {
    fn drop(&mut self) {
        let me = self as *const Seen as usize;
        LIVE_SEEN.lock().unwrap_or_else(PoisonError::into_inner).retain(|&p| p != me);
    }
}

fn strays() -> Vec<Call> {
    STRAY_CALLS.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

fn record(call: Call) {
    let live = LIVE_SEEN.lock().unwrap_or_else(PoisonError::into_inner);
    if live.contains(&call.user_data) {
        // SAFETY: a registered `Seen` is alive: its `Drop` unregisters it under this same lock.
        let seen = unsafe { &*(call.user_data as *const Seen) };
        *seen.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(call);
        seen.calls.fetch_add(1, Ordering::SeqCst);
    } else {
        STRAY_CALLS.lock().unwrap_or_else(PoisonError::into_inner).push(call);
    }
}

unsafe extern "C" fn send_cb(request: *mut c_void, status: Status, user_data: *mut c_void) {
    record(Call { request: request as usize, status, info: None, user_data: user_data as usize });
}

unsafe extern "C" fn recv_cb(
    request: *mut c_void,
    status: Status,
    info: *const ucp_tag_recv_info_t,
    user_data: *mut c_void,
) {
    // SAFETY: UCP passes a valid info for the duration of the callback (a null one is recorded
    // as missing).
    let info = unsafe { info.as_ref() }.map(|i| (i.sender_tag, i.length));
    record(Call { request: request as usize, status, info, user_data: user_data as usize });
}

/// A parameter block with `mask` set and, with `seen`, a send callback reporting to it.
fn send_param(seen: Option<&Seen>, mask: u32) -> ucp_request_param_t {
    let mut p: ucp_request_param_t = zeroed();
    p.op_attr_mask = mask;
    if let Some(seen) = seen {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        p.cb.send = Some(send_cb);
        p.user_data = seen.user_data();
    }
    p
}

/// A parameter block with `mask` set and, with `seen`, a tag receive callback reporting to it.
fn recv_param(seen: Option<&Seen>, mask: u32) -> ucp_request_param_t {
    let mut p: ucp_request_param_t = zeroed();
    p.op_attr_mask = mask;
    if let Some(seen) = seen {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        p.cb.recv = Some(recv_cb);
        p.user_data = seen.user_data();
    }
    p
}

fn with_datatype(mut p: ucp_request_param_t, datatype: ucp_datatype_t) -> ucp_request_param_t {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype = datatype;
    p
}

fn with_flags(mut p: ucp_request_param_t, flags: u32) -> ucp_request_param_t {
    p.op_attr_mask |= ucp_op_attr_t::UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = flags;
    p
}

// ---------------------------------------------------------------------------------------------
// Two workers of one context, connected both ways.

fn base_params() -> ucp_params_t {
    let mut p: ucp_params_t = zeroed();
    p.field_mask = u64::from(ucp_params_field::UCP_PARAM_FIELD_FEATURES);
    p.features = u64::from(
        ucp_feature::UCP_FEATURE_TAG
            | ucp_feature::UCP_FEATURE_RMA
            | ucp_feature::UCP_FEATURE_AMO32
            | ucp_feature::UCP_FEATURE_AMO64
            | ucp_feature::UCP_FEATURE_STREAM,
    );
    p
}

fn init(params: &ucp_params_t) -> ucp_context_h {
    let mut ctx = null_mut();
    // SAFETY: valid parameters and out-pointer; a null configuration reads the environment.
    let status = unsafe { ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, params, null(), &mut ctx) };
    assert_eq!(status, UCS_OK, "ucp_init_version failed: {}", name(status));
    assert!(!ctx.is_null(), "ucp_init_version returned UCS_OK and no context");
    ctx
}

fn new_worker(ctx: ucp_context_h, mode: ucs_thread_mode_t::Type) -> ucp_worker_h {
    let mut params: ucp_worker_params_t = zeroed();
    params.field_mask = u64::from(ucp_worker_params_field::UCP_WORKER_PARAM_FIELD_THREAD_MODE);
    params.thread_mode = mode;
    let mut worker = null_mut();
    // SAFETY: a live context, valid parameters and out-pointer.
    let status = unsafe { ucp_worker_create(ctx, &params, &mut worker) };
    assert_eq!(status, UCS_OK, "ucp_worker_create failed: {}", name(status));
    worker
}

/// The bytes of `worker`'s address.
fn address_of(worker: ucp_worker_h) -> Vec<u8> {
    let (mut address, mut length) = (null_mut(), 0usize);
    // SAFETY: a live worker and valid out-pointers.
    let status = unsafe { ucp_worker_get_address(worker, &mut address, &mut length) };
    assert_eq!(status, UCS_OK, "ucp_worker_get_address failed: {}", name(status));
    // SAFETY: the library's address of `length` bytes, copied before it is released.
    let bytes = unsafe { std::slice::from_raw_parts(address.cast::<u8>(), length) }.to_vec();
    // SAFETY: the address just returned, released once.
    unsafe { ucp_worker_release_address(worker, address) };
    bytes
}

/// `ucp_ep_create` on `worker` with the address at `address` (which the library reads without
/// being told its length).
fn ep_create(worker: ucp_worker_h, address: *const u8) -> (Status, ucp_ep_h) {
    let mut params: ucp_ep_params_t = zeroed();
    params.field_mask = u64::from(ucp_ep_params_field::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS);
    params.address = address.cast();
    let mut ep = null_mut();
    // SAFETY: a live worker, valid parameters and out-pointer; the address bytes outlive the call.
    let status = unsafe { ucp_ep_create(worker, &params, &mut ep) };
    (status, ep)
}

fn connect(from: ucp_worker_h, to: ucp_worker_h) -> ucp_ep_h {
    let address = address_of(to);
    let (status, ep) = ep_create(from, address.as_ptr());
    assert_eq!(status, UCS_OK, "ucp_ep_create with a peer's address failed: {}", name(status));
    ep
}

struct Pair {
    ctx: ucp_context_h,
    a: ucp_worker_h,
    b: ucp_worker_h,
    /// A → B.
    ab: ucp_ep_h,
    /// B → A.
    ba: ucp_ep_h,
    _env: RwLockReadGuard<'static, ()>,
}

/// Tags of the warm-up exchange, which no test uses otherwise.
const WARM: u64 = 0xfeed_0000_0000_0000;

impl Pair {
    fn new() -> Pair {
        Pair::with(&base_params(), ucs_thread_mode_t::UCS_THREAD_MODE_SINGLE)
    }

    /// Both workers in `mode`, connected both ways, and a message exchanged each way so that the
    /// endpoints are wired up before the test starts.
    fn with(params: &ucp_params_t, mode: ucs_thread_mode_t::Type) -> Pair {
        let env = env_read();
        let ctx = init(params);
        let (a, b) = (new_worker(ctx, mode), new_worker(ctx, mode));
        let (ab, ba) = (connect(a, b), connect(b, a));
        let pair = Pair { ctx, a, b, ab, ba, _env: env };
        for (ep, to) in [(ab, b), (ba, a)] {
            let mut got = [0u8; 8];
            let recv = pair.recv_on(to, &mut got, WARM, &recv_param(None, 0));
            let sent = pair.send_on(ep, b"warm-up!", WARM, &send_param(None, 0));
            assert_eq!(pair.wait("the warm-up receive", recv), UCS_OK, "the warm-up receive failed");
            assert_eq!(pair.wait("the warm-up send", sent), UCS_OK, "the warm-up send failed");
            assert_eq!(&got, b"warm-up!", "the warm-up message arrived wrong");
        }
        pair
    }

    fn progress(&self) {
        // SAFETY: live workers.
        unsafe {
            ucp_worker_progress(self.a);
            ucp_worker_progress(self.b);
        }
    }

    /// Progresses both workers until `done`; a timeout fails the test, naming `what`.
    fn until(&self, what: &str, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < TIMEOUT, "timed out after {TIMEOUT:?} waiting for {what}");
            self.progress();
        }
    }

    /// Progresses both workers `rounds` times.
    fn spin(&self, rounds: usize) {
        for _ in 0..rounds {
            self.progress();
        }
    }

    /// The final status of what an operation returned, waiting for (and freeing) a request.
    fn wait(&self, what: &str, ptr: ucs_status_ptr_t) -> Status {
        match ret(ptr) {
            Ret::Null => UCS_OK,
            Ret::Err(status) => status,
            Ret::Req(req) => {
                // SAFETY: a live request, freed only below.
                self.until(what, || unsafe { ucp_request_check_status(req) } != UCS_INPROGRESS);
                // SAFETY: as above.
                let status = unsafe { ucp_request_check_status(req) };
                // SAFETY: completed, freed once.
                unsafe { ucp_request_free(req) };
                status
            }
        }
    }

    fn send_on(&self, ep: ucp_ep_h, data: &[u8], tag: u64, param: &ucp_request_param_t) -> ucs_status_ptr_t {
        // SAFETY: a live endpoint; every caller waits for the send before `data` goes away.
        unsafe { ucp_tag_send_nbx(ep, data.as_ptr().cast(), data.len(), tag, param) }
    }

    /// A → B.
    fn send(&self, data: &[u8], tag: u64, param: &ucp_request_param_t) -> ucs_status_ptr_t {
        self.send_on(self.ab, data, tag, param)
    }

    fn recv_on(
        &self,
        worker: ucp_worker_h,
        buf: &mut [u8],
        tag: u64,
        param: &ucp_request_param_t,
    ) -> ucs_status_ptr_t {
        // SAFETY: a live worker; every caller waits for the receive before `buf` goes away.
        unsafe { ucp_tag_recv_nbx(worker, buf.as_mut_ptr().cast(), buf.len(), tag, FULL, param) }
    }

    /// On B.
    fn recv(&self, buf: &mut [u8], tag: u64, param: &ucp_request_param_t) -> ucs_status_ptr_t {
        self.recv_on(self.b, buf, tag, param)
    }

    /// Sends `data` from A to B with `tag` and waits for the send to complete: for messages small
    /// enough to go eagerly, as a rendezvous send completes only once received.
    fn send_and_wait(&self, data: &[u8], tag: u64) {
        let status = self.wait("a send", self.send(data, tag, &send_param(None, 0)));
        assert_eq!(status, UCS_OK, "a plain tag send failed: {}", name(status));
    }

    /// Waits until the message `sent` with `tag` sits unexpected on B, receives it with
    /// `receive`, and waits for both (a rendezvous send completes only once received).
    fn receive_arrived(
        &self,
        what: &str,
        tag: u64,
        sent: ucs_status_ptr_t,
        receive: impl FnOnce() -> ucs_status_ptr_t,
    ) {
        self.arrived(tag);
        let received = receive();
        assert_eq!(self.wait(what, received), UCS_OK, "{what}: the receive");
        assert_eq!(self.wait(what, sent), UCS_OK, "{what}: the send");
    }

    /// Waits until a message with `tag` sits unexpected on B.
    fn arrived(&self, tag: u64) {
        self.until(&format!("tag {tag:#x} to arrive"), || !probe(self.b, tag, 0).0.is_null());
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Callbacks of a failed test may still point at its unwound stack: leak everything
            // rather than progress them.
            return;
        }
        for ep in [self.ab, self.ba] {
            let param = send_param(None, UCP_OP_ATTR_FIELD_FLAGS);
            let param = ucp_request_param_t { flags: ucp_ep_close_flags_t::UCP_EP_CLOSE_FLAG_FORCE, ..param };
            // SAFETY: a live endpoint, closed once.
            let closing = unsafe { ucp_ep_close_nbx(ep, &param) };
            let status = self.wait("an endpoint to close", closing);
            assert!(status == UCS_OK || status < 0, "ucp_ep_close_nbx ended with {}", name(status));
        }
        // SAFETY: live workers with no endpoints left, then their context, each destroyed once.
        unsafe {
            ucp_worker_destroy(self.a);
            ucp_worker_destroy(self.b);
            ucp_cleanup(self.ctx);
        }
    }
}

/// `ucp_tag_probe_nb` on `worker`.
fn probe(worker: ucp_worker_h, tag: u64, remove: c_int) -> (ucp_tag_message_h, ucp_tag_recv_info_t) {
    let mut info: ucp_tag_recv_info_t = zeroed();
    // SAFETY: a live worker and a valid info.
    let message = unsafe { ucp_tag_probe_nb(worker, tag, FULL, remove, &mut info) };
    (message, info)
}

fn check(req: *mut c_void) -> Status {
    // SAFETY: every caller passes a request it still holds.
    unsafe { ucp_request_check_status(req) }
}

fn free(req: *mut c_void) {
    // SAFETY: every caller passes a request it holds, and drops it here.
    unsafe { ucp_request_free(req) }
}

/// The request an operation must have returned.
fn expect_req(what: &str, ptr: ucs_status_ptr_t) -> *mut c_void {
    match ret(ptr) {
        Ret::Req(req) => req,
        other => panic!("{what}: expected a request, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// 1. request_size, request_init, request_cleanup.

/// What `request_init` writes at the start of the application's part of every request.
const MARKER: [u8; 8] = *b"initdone";
const REQUEST_SIZE: usize = 32;

static INITIALISED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static CLEANED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

unsafe extern "C" fn request_init(request: *mut c_void) {
    // SAFETY: UCP gives `request_init` the `request_size` (32) application bytes of a request.
    let bytes = unsafe { std::slice::from_raw_parts_mut(request.cast::<u8>(), REQUEST_SIZE) };
    bytes.fill(0);
    bytes[..8].copy_from_slice(&MARKER);
    INITIALISED.lock().unwrap_or_else(PoisonError::into_inner).push(request as usize);
}

unsafe extern "C" fn request_cleanup(request: *mut c_void) {
    CLEANED.lock().unwrap_or_else(PoisonError::into_inner).push(request as usize);
}

fn initialised() -> Vec<usize> {
    INITIALISED.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// The application's bytes of a request.
fn app_bytes<'a>(req: *mut c_void) -> &'a mut [u8] {
    // SAFETY: a live request of a context made with `request_size` = REQUEST_SIZE.
    unsafe { std::slice::from_raw_parts_mut(req.cast::<u8>(), REQUEST_SIZE) }
}

#[test]
fn request_init_runs_once_per_request_memory_which_is_reused_and_cleaned_up_once() {
    const N: usize = 16;
    let mut params = base_params();
    params.field_mask |= u64::from(
        ucp_params_field::UCP_PARAM_FIELD_REQUEST_SIZE
            | ucp_params_field::UCP_PARAM_FIELD_REQUEST_INIT
            | ucp_params_field::UCP_PARAM_FIELD_REQUEST_CLEANUP,
    );
    params.request_size = REQUEST_SIZE;
    params.request_init = Some(request_init);
    params.request_cleanup = Some(request_cleanup);
    let pair = Pair::with(&params, ucs_thread_mode_t::UCS_THREAD_MODE_SINGLE);

    // Receives posted before their sends stay pending; the application writes its own bytes into
    // each, then frees it while it is still pending.
    let mut first_bufs = [[0u8; 8]; N];
    let mut written = std::collections::HashMap::new();
    let mut first = Vec::new();
    for (i, buf) in first_bufs.iter_mut().enumerate() {
        let req = expect_req(
            "a receive posted before its send",
            pair.recv(buf, 0x100 + i as u64, &recv_param(None, 0)),
        );
        let bytes = app_bytes(req);
        assert_eq!(
            bytes[..8],
            MARKER,
            "request {req:?} was handed out without request_init having run on it"
        );
        bytes[16..].fill(0xa0 + i as u8);
        written.insert(req as usize, 0xa0 + i as u8);
        first.push(req as usize);
    }
    let distinct: HashSet<usize> = first.iter().copied().collect();
    assert_eq!(distinct.len(), N, "pending requests share memory: {first:x?}");
    for &req in &first {
        free(req as *mut c_void);
    }
    // The sends match them: the freed receives complete and their memory goes back to the pool.
    for i in 0..N {
        pair.send_and_wait(&(i as u64 + 1).to_le_bytes(), 0x100 + i as u64);
    }
    pair.until("the freed receives to complete", || {
        first_bufs.iter().enumerate().all(|(i, b)| *b == (i as u64 + 1).to_le_bytes())
    });
    pair.spin(20);

    let made = initialised();
    let made_set: HashSet<usize> = made.iter().copied().collect();
    assert_eq!(made.len(), made_set.len(), "request_init ran more than once on the same memory: {made:x?}");
    assert!(distinct.is_subset(&made_set), "requests handed out that request_init never saw");

    // More receives: their requests are memory made before, not initialised again, and the
    // application's bytes are as it left them.
    let mut second_bufs = [[0u8; 8]; N];
    let mut second = Vec::new();
    for (i, buf) in second_bufs.iter_mut().enumerate() {
        second.push(expect_req(
            "a second pending receive",
            pair.recv(buf, 0x200 + i as u64, &recv_param(None, 0)),
        ));
    }
    assert_eq!(initialised().len(), made.len(), "request_init ran again for requests that reuse memory");
    let mut reused_first = 0;
    for &req in &second {
        assert!(
            made_set.contains(&(req as usize)),
            "request {req:?} is new memory although freed requests were available"
        );
        let bytes = app_bytes(req);
        assert_eq!(bytes[..8], MARKER, "the marker request_init wrote was lost on reuse");
        if let Some(&value) = written.get(&(req as usize)) {
            reused_first += 1;
            assert!(
                bytes[16..].iter().all(|&b| b == value),
                "the application's bytes of request {req:?} changed across reuse: {bytes:x?}"
            );
        }
    }
    assert!(reused_first > 0, "none of the first requests came back: first {first:x?}, second {second:x?}");

    for &req in &second {
        // SAFETY: a live worker and a pending receive it owns.
        unsafe { ucp_request_cancel(pair.b, req) };
    }
    for &req in &second {
        pair.until("a cancelled receive to complete", || check(req) != UCS_INPROGRESS);
        assert_eq!(check(req), UCS_ERR_CANCELED, "a cancelled receive ended with {}", name(check(req)));
        free(req);
    }
    drop(pair);

    let mut made = initialised();
    let mut cleaned = CLEANED.lock().unwrap_or_else(PoisonError::into_inner).clone();
    made.sort_unstable();
    cleaned.sort_unstable();
    assert_eq!(
        cleaned, made,
        "by the end of ucp_cleanup, request_cleanup must have run once per request made"
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Callback arguments.

#[test]
fn callbacks_get_their_user_data_status_length_and_sender_tag() {
    let pair = Pair::new();
    let (recv_seen, send_seen) = (Seen::new(), Seen::new());
    let mut got = vec![0u8; 64];
    let payload: Vec<u8> = (0..40).collect();
    // A masked receive: the sender's whole tag must come back, not the receive's.
    // SAFETY: a live worker; `got` outlives the receive, waited for below.
    let recv = unsafe {
        ucp_tag_recv_nbx(
            pair.b,
            got.as_mut_ptr().cast(),
            got.len(),
            0x1200,
            0xff00,
            &recv_param(Some(&recv_seen), 0),
        )
    };
    let recv = expect_req("a receive posted before its send", recv);
    // A synchronous send cannot complete before the receiver matched it: its callback comes later.
    // SAFETY: a live endpoint; `payload` outlives the send, waited for below.
    let send = unsafe {
        ucp_tag_send_sync_nbx(
            pair.ab,
            payload.as_ptr().cast(),
            payload.len(),
            0x12ab,
            &send_param(Some(&send_seen), 0),
        )
    };
    let send = expect_req("a synchronous send", send);
    pair.until("both callbacks", || recv_seen.calls() > 0 && send_seen.calls() > 0);
    pair.spin(10);

    let r = recv_seen.last("the receive");
    assert_eq!(recv_seen.calls(), 1, "the receive callback ran {} times", recv_seen.calls());
    assert_eq!(r.user_data, recv_seen.user_data() as usize, "the receive callback got another user_data");
    assert_eq!(r.request, recv as usize, "the receive callback got another request");
    assert_eq!(r.status, UCS_OK, "the receive callback got {}", name(r.status));
    assert_eq!(r.info, Some((0x12ab, 40)), "the receive callback's (sender_tag, length)");
    assert_eq!(got[..40], payload[..], "the received bytes");

    let s = send_seen.last("the send");
    assert_eq!(send_seen.calls(), 1, "the send callback ran {} times", send_seen.calls());
    assert_eq!(s.user_data, send_seen.user_data() as usize, "the send callback got another user_data");
    assert_eq!(s.request, send as usize, "the send callback got another request");
    assert_eq!(s.status, UCS_OK, "the send callback got {}", name(s.status));
    free(recv);
    free(send);
    assert!(strays().is_empty(), "callbacks ran with unknown user_data: {:?}", strays());
}

#[test]
fn a_receive_too_small_for_its_message_reports_message_truncated() {
    let pair = Pair::new();
    let seen = Seen::new();
    let mut small = [0u8; 16];
    let recv = expect_req("a pending receive", pair.recv(&mut small, 0x77, &recv_param(Some(&seen), 0)));
    pair.send_and_wait(&[5u8; 40], 0x77);
    pair.until("the receive callback", || seen.calls() > 0);
    let call = seen.last("the truncated receive");
    assert_eq!(
        call.status,
        UCS_ERR_MESSAGE_TRUNCATED,
        "a 40-byte message into 16 bytes: {}",
        name(call.status)
    );
    assert_eq!(check(recv), UCS_ERR_MESSAGE_TRUNCATED, "ucp_request_check_status after truncation");
    free(recv);
}

// ---------------------------------------------------------------------------------------------
// 3. Immediate completion.

#[test]
fn an_immediate_send_returns_null_and_skips_its_callback_unless_no_imm_cmpl() {
    let pair = Pair::new();
    let plain = Seen::new();
    let data = [3u8; 8];
    let sent = pair.send(&data, 0x31, &send_param(Some(&plain), 0));
    assert_eq!(ret(sent), Ret::Null, "a small send on a wired-up endpoint should complete at once");
    pair.spin(100);
    assert_eq!(plain.calls(), 0, "the callback of a send that returned NULL ran");

    let forced = Seen::new();
    let sent = pair.send(&data, 0x32, &send_param(Some(&forced), UCP_OP_ATTR_FLAG_NO_IMM_CMPL));
    let req = expect_req("a send with UCP_OP_ATTR_FLAG_NO_IMM_CMPL", sent);
    assert_eq!(check(req), UCS_OK, "the same send with NO_IMM_CMPL must be a request already completed");
    pair.spin(10);
    let call = forced.last("the NO_IMM_CMPL send");
    assert_eq!(forced.calls(), 1, "the NO_IMM_CMPL send's callback ran {} times", forced.calls());
    assert_eq!((call.status, call.request), (UCS_OK, req as usize), "the NO_IMM_CMPL send's callback");
    free(req);
}

#[test]
fn a_receive_of_an_arrived_message_returns_null_with_recv_info_filled() {
    let pair = Pair::new();
    let payload = [0x5au8; 24];
    pair.send_and_wait(&payload, 0x33);
    pair.arrived(0x33);
    let seen = Seen::new();
    let mut info: ucp_tag_recv_info_t = zeroed();
    let mut param = recv_param(Some(&seen), UCP_OP_ATTR_FIELD_RECV_INFO);
    param.recv_info.tag_info = &mut info;
    let mut got = [0u8; 64];
    let recv = pair.recv(&mut got, 0x33, &param);
    assert_eq!(ret(recv), Ret::Null, "a receive of an arrived message with RECV_INFO");
    assert_eq!((info.sender_tag, info.length), (0x33, 24), "recv_info after an immediate receive");
    assert_eq!(got[..24], payload, "the received bytes");
    pair.spin(50);
    assert_eq!(seen.calls(), 0, "the callback of a receive that returned NULL ran");
}

/// A receive of a message already there, with `mask` added to NO_IMM_CMPL and a callback: it must
/// return a request, completed, whose callback reported the message (`ucp.h`: with
/// UCP_OP_ATTR_FLAG_NO_IMM_CMPL "NULL cannot be returned").
fn arrived_receive_with_no_imm_cmpl(mask: u32) {
    let pair = Pair::new();
    pair.send_and_wait(&[1u8; 8], 0x34);
    pair.arrived(0x34);
    let seen = Seen::new();
    let mut info: ucp_tag_recv_info_t = zeroed();
    let mut param = recv_param(Some(&seen), UCP_OP_ATTR_FLAG_NO_IMM_CMPL | mask);
    param.recv_info.tag_info = &mut info;
    let mut got = [0u8; 8];
    let what = format!("an arrived receive with NO_IMM_CMPL (op_attr_mask {:#x})", param.op_attr_mask);
    let req = expect_req(&what, pair.recv(&mut got, 0x34, &param));
    pair.until(&what, || check(req) != UCS_INPROGRESS);
    assert_eq!(check(req), UCS_OK, "{what}: status");
    let call = seen.last(&what);
    assert_eq!((call.status, call.info), (UCS_OK, Some((0x34, 8))), "{what}: callback");
    assert_eq!(got, [1u8; 8], "{what}: the received bytes");
    free(req);
}

#[test]
fn no_imm_cmpl_makes_a_receive_of_an_arrived_message_return_a_completed_request() {
    arrived_receive_with_no_imm_cmpl(0);
}

#[test]

fn no_imm_cmpl_wins_over_recv_info_for_a_receive_of_an_arrived_message() {
    arrived_receive_with_no_imm_cmpl(UCP_OP_ATTR_FIELD_RECV_INFO);
}

// ---------------------------------------------------------------------------------------------
// 4. ucp_request_free and ucp_request_release.

#[test]
fn request_free_of_a_pending_receive_turns_its_callback_off() {
    let pair = Pair::new();
    let seen = Seen::new();
    let mut got = [0u8; 8];
    let req = expect_req("a pending receive", pair.recv(&mut got, 0x41, &recv_param(Some(&seen), 0)));
    free(req);
    pair.send_and_wait(b"freedrcv", 0x41);
    pair.until("the freed receive's data", || &got == b"freedrcv");
    pair.spin(50);
    assert_eq!(
        seen.calls(),
        0,
        "ucp_request_free must stop the callback, but it ran: {:?}",
        seen.last("free")
    );
}

#[test]
fn request_release_of_a_pending_receive_keeps_its_callback() {
    let pair = Pair::new();
    let seen = Seen::new();
    let mut got = [0u8; 8];
    let req = expect_req("a pending receive", pair.recv(&mut got, 0x42, &recv_param(Some(&seen), 0)));
    // SAFETY: a pending request, released once and not touched after.
    unsafe { ucp_request_release(req) };
    pair.send_and_wait(b"released", 0x42);
    pair.until("the released receive's callback", || seen.calls() > 0);
    let call = seen.last("release");
    assert_eq!((call.status, call.info), (UCS_OK, Some((0x42, 8))), "the released receive's callback");
    assert_eq!(&got, b"released");
}

// ---------------------------------------------------------------------------------------------
// 5. Requests the caller allocates (UCP_OP_ATTR_FIELD_REQUEST).

/// Memory for a caller's request: the context's request size, then room of the caller's own;
/// the request is the address just past the library's part. Filled with garbage, as fresh
/// memory would be.
struct CallerRequest {
    base: *mut u8,
    layout: std::alloc::Layout,
    header: usize,
}

impl CallerRequest {
    fn new(ctx: ucp_context_h) -> CallerRequest {
        let header = request_size(ctx);
        let layout = std::alloc::Layout::from_size_align(header + 64, 64).expect("a layout");
        // SAFETY: a nonzero size.
        let base = unsafe { std::alloc::alloc(layout) };
        assert!(!base.is_null(), "out of memory");
        // SAFETY: the allocation just made.
        unsafe { base.write_bytes(0xa5, layout.size()) };
        CallerRequest { base, layout, header }
    }

    fn ptr(&self) -> *mut c_void {
        // SAFETY: within the allocation.
        unsafe { self.base.add(self.header) }.cast()
    }

    fn param(&self, mask: u32) -> ucp_request_param_t {
        let mut p = recv_param(None, mask | UCP_OP_ATTR_FIELD_REQUEST);
        p.request = self.ptr();
        p
    }
}

impl Drop for CallerRequest {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            // SAFETY: allocated in `new` with this layout; the tests drop it once its operations
            // completed.
            unsafe { std::alloc::dealloc(self.base, self.layout) };
        }
    }
}

fn request_size(ctx: ucp_context_h) -> usize {
    let mut attr: ucp_context_attr_t = zeroed();
    attr.field_mask = u64::from(ucp_context_attr_field::UCP_ATTR_FIELD_REQUEST_SIZE);
    // SAFETY: a live context and a valid attr.
    let status = unsafe { ucp_context_query(ctx, &mut attr) };
    assert_eq!(status, UCS_OK, "ucp_context_query(REQUEST_SIZE) failed: {}", name(status));
    attr.request_size
}

/// `ucp_request_test` of a completed tag receive: its status and (sender_tag, length).
fn request_test(req: *mut c_void) -> (Status, (u64, usize)) {
    let mut info: ucp_tag_recv_info_t = zeroed();
    // SAFETY: a request the caller holds, and a valid info.
    let status = unsafe { ucp_request_test(req, &mut info) };
    (status, (info.sender_tag, info.length))
}

#[test]
fn a_caller_request_completes_and_reports_through_check_status_and_request_test() {
    let pair = Pair::new();
    let mine = CallerRequest::new(pair.ctx);

    // Posted before its message: the call returns the caller's own request.
    let mut got = [0u8; 16];
    let recv = pair.recv(&mut got, 0x51, &mine.param(0));
    assert_eq!(ret(recv), Ret::Req(mine.ptr()), "a pending receive into the caller's request");
    assert_eq!(check(mine.ptr()), UCS_INPROGRESS, "a caller's receive before any send");
    pair.send_and_wait(&[0x51; 16], 0x51);
    pair.until("the caller's receive", || check(mine.ptr()) != UCS_INPROGRESS);
    assert_eq!(check(mine.ptr()), UCS_OK, "the caller's receive");
    assert_eq!(request_test(mine.ptr()), (UCS_OK, (0x51, 16)), "ucp_request_test of the caller's receive");
    let mut info: ucp_tag_recv_info_t = zeroed();
    // SAFETY: the caller's completed request and a valid info.
    let status = unsafe { ucp_tag_recv_request_test(mine.ptr(), &mut info) };
    assert_eq!((status, info.sender_tag, info.length), (UCS_OK, 0x51, 16), "ucp_tag_recv_request_test");
    assert_eq!(got, [0x51; 16]);

    // The same memory again, for a message that already arrived: NULL or the request may come
    // back (UCX 1.13 returns NULL), and either way the request's status is final.
    pair.send_and_wait(&[0x52; 16], 0x52);
    pair.arrived(0x52);
    let recv = pair.recv(&mut got, 0x52, &mine.param(0));
    assert!(
        matches!(ret(recv), Ret::Null | Ret::Req(_)),
        "an arrived receive into the caller's request: {:?}",
        ret(recv)
    );
    if let Ret::Req(req) = ret(recv) {
        assert_eq!(req, mine.ptr(), "the returned request is not the caller's");
    }
    assert_eq!(check(mine.ptr()), UCS_OK, "the caller's request after an immediate receive");
    assert_eq!(request_test(mine.ptr()), (UCS_OK, (0x52, 16)), "ucp_request_test after an immediate receive");
    assert_eq!(got, [0x52; 16]);

    // The deprecated form that always takes the caller's request.
    pair.send_and_wait(&[0x53; 16], 0x53);
    pair.arrived(0x53);
    // SAFETY: a live worker; the caller's request has the context's request size before it.
    let status = unsafe {
        ucp_tag_recv_nbr(pair.b, got.as_mut_ptr().cast(), got.len(), BYTES, 0x53, FULL, mine.ptr())
    };
    assert!(status == UCS_OK || status == UCS_INPROGRESS, "ucp_tag_recv_nbr: {}", name(status));
    pair.until("the ucp_tag_recv_nbr receive", || check(mine.ptr()) != UCS_INPROGRESS);
    assert_eq!(request_test(mine.ptr()), (UCS_OK, (0x53, 16)), "ucp_request_test after ucp_tag_recv_nbr");
    assert_eq!(got, [0x53; 16]);
}

#[test]
fn a_caller_request_is_completed_even_when_recv_info_made_the_call_return_null() {
    let pair = Pair::new();
    let mine = CallerRequest::new(pair.ctx);
    pair.send_and_wait(&[0x54; 16], 0x54);
    pair.arrived(0x54);
    let mut info: ucp_tag_recv_info_t = zeroed();
    let mut param = mine.param(UCP_OP_ATTR_FIELD_RECV_INFO);
    param.recv_info.tag_info = &mut info;
    let mut got = [0u8; 16];
    let recv = pair.recv(&mut got, 0x54, &param);
    match ret(recv) {
        Ret::Null => assert_eq!((info.sender_tag, info.length), (0x54, 16), "recv_info of the NULL return"),
        Ret::Req(req) => {
            assert_eq!(req, mine.ptr(), "the returned request is not the caller's");
            pair.until("the caller's receive", || check(req) != UCS_INPROGRESS);
        }
        Ret::Err(status) => panic!("an arrived receive into the caller's request failed: {}", name(status)),
    }
    // UCX writes the final status into the caller's memory whatever the call returned, and
    // programs that own their requests poll them.
    assert_eq!(check(mine.ptr()), UCS_OK, "ucp_request_check_status of the caller's request");
    assert_eq!(request_test(mine.ptr()), (UCS_OK, (0x54, 16)), "ucp_request_test of the caller's request");
    assert_eq!(got, [0x54; 16]);
}

// ---------------------------------------------------------------------------------------------
// 6. Datatypes.

/// `bytes` cut into separately allocated pieces of `lengths`.
fn pieces(bytes: &[u8], lengths: &[usize]) -> Vec<Vec<u8>> {
    assert_eq!(lengths.iter().sum::<usize>(), bytes.len());
    let mut rest = bytes;
    lengths
        .iter()
        .map(|&n| {
            let (head, tail) = rest.split_at(n);
            rest = tail;
            head.to_vec()
        })
        .collect()
}

fn iov_of(pieces: &mut [Vec<u8>]) -> Vec<ucp_dt_iov_t> {
    pieces.iter_mut().map(|p| ucp_dt_iov_t { buffer: p.as_mut_ptr().cast(), length: p.len() }).collect()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn iov_sends_and_receives_with_uneven_entries_arrive_byte_for_byte() {
    let pair = Pair::new();
    for (total, send_cut, recv_cut) in [
        (1033usize, vec![3, 0, 1000, 13, 17], vec![500, 1, 532]),
        (200_000, vec![1, 99_999, 0, 100_000], vec![150_000, 7, 49_993]),
    ] {
        let data = pattern(total, total as u8);
        let mut sending = pieces(&data, &send_cut);
        let send_iov = iov_of(&mut sending);
        let mut landing: Vec<Vec<u8>> = recv_cut.iter().map(|&n| vec![0u8; n]).collect();
        let mut recv_iov = iov_of(&mut landing);
        let tag = 0x60 + total as u64;
        let iov_param = with_datatype(recv_param(None, 0), IOV);
        // Posted first, so the message lands in a pending IOV receive.
        // SAFETY: a live worker; the IOV and its buffers outlive the receive, waited for below.
        let recv = unsafe {
            ucp_tag_recv_nbx(pair.b, recv_iov.as_mut_ptr().cast(), recv_iov.len(), tag, FULL, &iov_param)
        };
        // SAFETY: a live endpoint; the IOV and its buffers outlive the send, waited for below.
        let send =
            unsafe { ucp_tag_send_nbx(pair.ab, send_iov.as_ptr().cast(), send_iov.len(), tag, &iov_param) };
        assert_eq!(pair.wait("an IOV receive", recv), UCS_OK, "the IOV receive of {total} bytes");
        assert_eq!(pair.wait("an IOV send", send), UCS_OK, "the IOV send of {total} bytes");
        assert!(
            landing.concat() == data,
            "{total} bytes through IOV {send_cut:?} into IOV {recv_cut:?} differ"
        );

        // An IOV message received contiguously after it arrived, and a contiguous one into IOV.
        // SAFETY: as above.
        let send = unsafe {
            ucp_tag_send_nbx(pair.ab, send_iov.as_ptr().cast(), send_iov.len(), tag + 1, &iov_param)
        };
        let mut flat = vec![0u8; total];
        pair.receive_arrived("an IOV message received contiguously", tag + 1, send, || {
            pair.recv(&mut flat, tag + 1, &recv_param(None, 0))
        });
        assert!(flat == data, "an IOV send of {total} bytes received contiguously differs");

        let send = pair.send(&data, tag + 2, &send_param(None, 0));
        landing.iter_mut().for_each(|p| p.fill(0));
        pair.receive_arrived("a contiguous message received into IOV", tag + 2, send, || {
            // SAFETY: as above.
            unsafe {
                ucp_tag_recv_nbx(
                    pair.b,
                    recv_iov.as_mut_ptr().cast(),
                    recv_iov.len(),
                    tag + 2,
                    FULL,
                    &iov_param,
                )
            }
        });
        assert!(landing.concat() == data, "a contiguous message of {total} bytes received into IOV differs");
    }
}

#[test]

fn an_iov_receive_with_an_empty_entry_fills_the_entries_after_it() {
    let pair = Pair::new();
    let data = pattern(100, 7);
    let mut landing: Vec<Vec<u8>> = [40, 0, 60].iter().map(|&n| vec![0u8; n]).collect();
    let mut recv_iov = iov_of(&mut landing);
    let param = with_datatype(recv_param(None, 0), IOV);
    // SAFETY: a live worker; the IOV and its buffers outlive the receive, waited for below.
    let recv = unsafe { ucp_tag_recv_nbx(pair.b, recv_iov.as_mut_ptr().cast(), 3, 0x6f, FULL, &param) };
    pair.send_and_wait(&data, 0x6f);
    assert_eq!(pair.wait("an IOV receive", recv), UCS_OK, "the IOV receive");
    assert_eq!(landing[0], data[..40], "the entry before the empty one");
    assert_eq!(landing[2], data[40..], "the entry after the empty one (an empty entry is no end of the IOV)");
}

/// The strided layout of the generic datatype: `u32` elements `stride` slots apart.
struct Strided {
    stride: usize,
}

/// One pack or unpack in progress.
struct GenState {
    base: *mut u8,
    count: usize,
    stride: usize,
}

static GEN_STARTED: AtomicUsize = AtomicUsize::new(0);
static GEN_FINISHED: AtomicUsize = AtomicUsize::new(0);

impl GenState {
    fn total(&self) -> usize {
        self.count * 4
    }

    /// The address of byte `k` of the packed stream.
    fn byte(&self, k: usize) -> *mut u8 {
        // SAFETY: within the strided buffer the application described (`k` < total).
        unsafe { self.base.add((k / 4) * self.stride * 4 + k % 4) }
    }
}

unsafe extern "C" fn gen_start(context: *mut c_void, buffer: *const c_void, count: usize) -> *mut c_void {
    // SAFETY: the `Strided` the datatype was created with, alive until `ucp_dt_destroy`.
    let stride = unsafe { &*context.cast::<Strided>() }.stride;
    GEN_STARTED.fetch_add(1, Ordering::SeqCst);
    Box::into_raw(Box::new(GenState { base: buffer as *mut u8, count, stride })).cast()
}

unsafe extern "C" fn gen_start_unpack(
    context: *mut c_void,
    buffer: *mut c_void,
    count: usize,
) -> *mut c_void {
    // SAFETY: as `gen_start`.
    unsafe { gen_start(context, buffer, count) }
}

unsafe extern "C" fn gen_packed_size(state: *mut c_void) -> usize {
    // SAFETY: a state from `gen_start`, not finished.
    unsafe { &*state.cast::<GenState>() }.total()
}

unsafe extern "C" fn gen_pack(state: *mut c_void, offset: usize, dest: *mut c_void, max: usize) -> usize {
    // SAFETY: as `gen_packed_size`.
    let s = unsafe { &*state.cast::<GenState>() };
    let n = max.min(s.total().saturating_sub(offset));
    for k in 0..n {
        // SAFETY: `dest` holds `max` bytes; the source byte is in the application's buffer.
        unsafe { dest.cast::<u8>().add(k).write(s.byte(offset + k).read()) };
    }
    n
}

unsafe extern "C" fn gen_unpack(
    state: *mut c_void,
    offset: usize,
    src: *const c_void,
    length: usize,
) -> Status {
    // SAFETY: as `gen_packed_size`.
    let s = unsafe { &*state.cast::<GenState>() };
    if offset + length > s.total() {
        return UCS_ERR_MESSAGE_TRUNCATED;
    }
    for k in 0..length {
        // SAFETY: `src` holds `length` bytes; the target byte is in the application's buffer.
        unsafe { s.byte(offset + k).write(src.cast::<u8>().add(k).read()) };
    }
    UCS_OK
}

unsafe extern "C" fn gen_finish(state: *mut c_void) {
    // SAFETY: a state from `gen_start`, finished once.
    drop(unsafe { Box::from_raw(state.cast::<GenState>()) });
    GEN_FINISHED.fetch_add(1, Ordering::SeqCst);
}

fn generic(layout: &Strided) -> ucp_datatype_t {
    let ops = ucp_generic_dt_ops_t {
        start_pack: Some(gen_start),
        start_unpack: Some(gen_start_unpack),
        packed_size: Some(gen_packed_size),
        pack: Some(gen_pack),
        unpack: Some(gen_unpack),
        finish: Some(gen_finish),
    };
    let mut datatype = 0;
    // SAFETY: valid ops and out-pointer; `layout` outlives the datatype.
    let status =
        unsafe { ucp_dt_create_generic(&ops, layout as *const Strided as *mut c_void, &mut datatype) };
    assert_eq!(status, UCS_OK, "ucp_dt_create_generic failed: {}", name(status));
    datatype
}

/// `count` elements at stride `stride`, element `i` being `f(i)` and every other slot `hole`.
fn strided(count: usize, stride: usize, hole: u32, f: impl Fn(usize) -> u32) -> Vec<u32> {
    (0..count * stride).map(|slot| if slot % stride == 0 { f(slot / stride) } else { hole }).collect()
}

#[test]
fn a_generic_datatype_packs_and_unpacks_a_strided_layout() {
    let pair = Pair::new();
    let (two, three) = (Strided { stride: 2 }, Strided { stride: 3 });
    let (dt2, dt3) = (generic(&two), generic(&three));
    let value = |i: usize| 0xa000_0000 + i as u32;
    for (count, tag) in [(300usize, 0x70u64), (50_000, 0x80)] {
        let source = strided(count, 2, 0xdead_beef, value);
        let expect = strided(count, 3, 0x5555_5555, value);
        let param2 = with_datatype(recv_param(None, 0), dt2);
        let param3 = with_datatype(recv_param(None, 0), dt3);

        // Generic to generic, the receive pending.
        let mut target = vec![0x5555_5555u32; count * 3];
        // SAFETY: a live worker; `target` outlives the receive, waited for below.
        let recv = unsafe { ucp_tag_recv_nbx(pair.b, target.as_mut_ptr().cast(), count, tag, FULL, &param3) };
        // SAFETY: a live endpoint; `source` outlives the send, waited for below.
        let send = unsafe { ucp_tag_send_nbx(pair.ab, source.as_ptr().cast(), count, tag, &param2) };
        assert_eq!(pair.wait("a generic receive", recv), UCS_OK, "generic receive of {count} elements");
        assert_eq!(pair.wait("a generic send", send), UCS_OK, "generic send of {count} elements");
        assert!(target == expect, "{count} strided elements sent and received generically differ");

        // Generic sent, received contiguously after arrival: the packed stream itself.
        // SAFETY: as above.
        let send = unsafe { ucp_tag_send_nbx(pair.ab, source.as_ptr().cast(), count, tag + 1, &param2) };
        let mut packed = vec![0u32; count];
        pair.receive_arrived("a generic message received contiguously", tag + 1, send, || {
            let into = packed.as_mut_ptr().cast();
            // SAFETY: a live worker; `packed` outlives the receive, waited for.
            unsafe { ucp_tag_recv_nbx(pair.b, into, count * 4, tag + 1, FULL, &recv_param(None, 0)) }
        });
        assert!(
            packed.iter().enumerate().all(|(i, &v)| v == value(i)),
            "the packed stream of {count} elements"
        );

        // Contiguous sent, unpacked generically after arrival.
        // SAFETY: a live endpoint; `packed` outlives the send, waited for.
        let send = unsafe {
            ucp_tag_send_nbx(pair.ab, packed.as_ptr().cast(), count * 4, tag + 2, &recv_param(None, 0))
        };
        target.fill(0x5555_5555);
        pair.receive_arrived("a contiguous message unpacked generically", tag + 2, send, || {
            // SAFETY: as the first receive.
            unsafe { ucp_tag_recv_nbx(pair.b, target.as_mut_ptr().cast(), count, tag + 2, FULL, &param3) }
        });
        assert!(target == expect, "{count} elements unpacked generically after arrival differ");
    }
    assert_eq!(
        GEN_STARTED.load(Ordering::SeqCst),
        GEN_FINISHED.load(Ordering::SeqCst),
        "every start_pack/start_unpack must be followed by one finish"
    );
    // SAFETY: datatypes made above, no operation using them outstanding, destroyed once.
    unsafe {
        ucp_dt_destroy(dt2);
        ucp_dt_destroy(dt3);
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Probes run no callbacks.

#[test]
fn tag_probe_and_msg_recv_run_no_callbacks_only_progress_does() {
    const PROBED: u64 = 0x71;
    const SYNC: u64 = 0x72;
    let pair = Pair::new();
    // In B's unexpected queue before anything is outstanding.
    let probed = [7u8; 24];
    pair.send_and_wait(&probed, PROBED);
    pair.arrived(PROBED);

    // A send on B whose completion needs only B's progress from the moment A matched it.
    let seen = Seen::new();
    let payload = [9u8; 16];
    // SAFETY: a live endpoint; `payload` outlives the send, waited for below.
    let sync = unsafe {
        ucp_tag_send_sync_nbx(pair.ba, payload.as_ptr().cast(), 16, SYNC, &send_param(Some(&seen), 0))
    };
    let sync = expect_req("a synchronous send before its receive", sync);
    let mut got = [0u8; 16];
    let recv = pair.recv_on(pair.a, &mut got, SYNC, &recv_param(None, 0));
    // A's progress is checked right after it runs: once A matched, B is not progressed again.
    let start = Instant::now();
    loop {
        // SAFETY: live workers; a request still held.
        unsafe { ucp_worker_progress(pair.a) };
        if got == payload && matches!(ret(recv), Ret::Null)
            || matches!(ret(recv), Ret::Req(r) if check(r) != UCS_INPROGRESS)
        {
            break;
        }
        assert!(start.elapsed() < TIMEOUT, "timed out waiting for A to receive the synchronous send");
        // SAFETY: a live worker.
        unsafe { ucp_worker_progress(pair.b) };
    }
    for _ in 0..100 {
        // SAFETY: a live worker.
        unsafe { ucp_worker_progress(pair.a) };
    }
    assert_eq!(seen.calls(), 0, "the synchronous send's callback ran before B progressed after the match");

    let (message, info) = probe(pair.b, PROBED, 0);
    assert!(!message.is_null(), "ucp_tag_probe_nb(remove=0) lost the arrived message");
    assert_eq!((info.sender_tag, info.length), (PROBED, 24), "ucp_tag_probe_nb(remove=0) info");
    assert_eq!(seen.calls(), 0, "ucp_tag_probe_nb(remove=0) ran a send callback");
    assert!(probe(pair.b, 0x7f, 0).0.is_null(), "ucp_tag_probe_nb found a message never sent");
    assert_eq!(seen.calls(), 0, "ucp_tag_probe_nb of a missing message ran a send callback");

    let (message, info) = probe(pair.b, PROBED, 1);
    assert!(!message.is_null(), "ucp_tag_probe_nb(remove=1) lost the arrived message");
    assert_eq!((info.sender_tag, info.length), (PROBED, 24), "ucp_tag_probe_nb(remove=1) info");
    assert_eq!(seen.calls(), 0, "ucp_tag_probe_nb(remove=1) ran a send callback");
    assert!(probe(pair.b, PROBED, 0).0.is_null(), "a removed message is still in the queue");

    let mut probed_got = [0u8; 24];
    let mut rinfo: ucp_tag_recv_info_t = zeroed();
    let mut param = recv_param(None, UCP_OP_ATTR_FIELD_RECV_INFO);
    param.recv_info.tag_info = &mut rinfo;
    // SAFETY: a live worker, a message removed by the probe, received once; the buffer outlives it.
    let msg_recv =
        unsafe { ucp_tag_msg_recv_nbx(pair.b, probed_got.as_mut_ptr().cast(), 24, message, &param) };
    assert_eq!(seen.calls(), 0, "ucp_tag_msg_recv_nbx ran a send callback");

    pair.until("the synchronous send's callback", || seen.calls() > 0);
    let call = seen.last("the synchronous send");
    assert_eq!((call.status, call.request), (UCS_OK, sync as usize), "the synchronous send's callback");
    free(sync);
    if let Ret::Req(r) = ret(recv) {
        free(r);
    }
    assert_eq!(pair.wait("ucp_tag_msg_recv_nbx", msg_recv), UCS_OK, "ucp_tag_msg_recv_nbx");
    if ret(msg_recv) == Ret::Null {
        assert_eq!((rinfo.sender_tag, rinfo.length), (PROBED, 24), "recv_info of ucp_tag_msg_recv_nbx");
    }
    assert_eq!(probed_got, probed, "the probed message's bytes");
}

// ---------------------------------------------------------------------------------------------
// 8. Hostile input.

/// The CRC-32 (IEEE) zcx frames end with.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// zcx's packed addresses and keys are frames: `b"ZCX\0"`, version, kind, body length (u16 LE),
/// a body of `tag u8 | len u16 LE | value` fields, then the CRC-32 of everything before it. The
/// forging helpers below edit real frames and reseal them, so that the checks behind the
/// checksum are what gets tested.
const FRAME_HEADER: usize = 8;

fn reseal(frame: &mut [u8]) {
    let end = frame.len() - 4;
    let crc = crc32(&frame[..end]);
    frame[end..].copy_from_slice(&crc.to_le_bytes());
}

/// The value range of field `tag` in `frame`.
fn field(frame: &[u8], tag: u8) -> std::ops::Range<usize> {
    let body_len = usize::from(u16::from_le_bytes([frame[6], frame[7]]));
    let mut at = FRAME_HEADER;
    while at < FRAME_HEADER + body_len {
        let len = usize::from(u16::from_le_bytes([frame[at + 1], frame[at + 2]]));
        if frame[at] == tag {
            return at + 3..at + 3 + len;
        }
        at += 3 + len;
    }
    panic!("no field {tag:#x} in the frame");
}

fn sealed(frame: &[u8]) -> bool {
    let end = frame.len() - 4;
    frame[end..] == crc32(&frame[..end]).to_le_bytes()
}

/// A frame of `kind` with `body`, correctly sealed.
fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut f = b"ZCX\0".to_vec();
    f.push(1);
    f.push(kind);
    f.extend_from_slice(&(body.len() as u16).to_le_bytes());
    f.extend_from_slice(body);
    f.extend_from_slice(&[0; 4]);
    reseal(&mut f);
    f
}

/// Garbage that is no frame: 256 bytes of a fixed pseudo-random sequence.
fn garbage() -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..256)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A header that states a body longer than any frame, followed by enough bytes for it.
fn overlong_header() -> Vec<u8> {
    let mut f = b"ZCX\0".to_vec();
    f.extend_from_slice(&[1, 3, 0xff, 0xff]);
    f.resize(FRAME_HEADER + 0xffff + 4, 0);
    f
}

/// Registered memory and its key, unpacked on `pair.ab`.
struct Mapped {
    ctx: ucp_context_h,
    memh: ucp_mem_h,
    packed: Vec<u8>,
    rkey: ucp_rkey_h,
    address: u64,
}

impl Mapped {
    /// `length` bytes at `address` registered, or, without an address, allocated by the library.
    fn new(pair: &Pair, address: Option<*mut u8>, length: usize) -> Mapped {
        Mapped::with_prot(pair, address, length, None)
    }

    /// [`Mapped::new`] with `prot` (`UCP_MEM_MAP_PROT_*`) when given.
    fn with_prot(pair: &Pair, address: Option<*mut u8>, length: usize, prot: Option<u32>) -> Mapped {
        let mut params: ucp_mem_map_params_t = zeroed();
        params.field_mask = u64::from(ucp_mem_map_params_field::UCP_MEM_MAP_PARAM_FIELD_LENGTH);
        params.length = length;
        if let Some(prot) = prot {
            params.field_mask |= u64::from(ucp_mem_map_params_field::UCP_MEM_MAP_PARAM_FIELD_PROT);
            params.prot = prot;
        }
        match address {
            Some(address) => {
                params.field_mask |= u64::from(ucp_mem_map_params_field::UCP_MEM_MAP_PARAM_FIELD_ADDRESS);
                params.address = address.cast();
            }
            None => {
                params.field_mask |= u64::from(ucp_mem_map_params_field::UCP_MEM_MAP_PARAM_FIELD_FLAGS);
                params.flags = _bindgen_ty_4::UCP_MEM_MAP_ALLOCATE;
            }
        }
        let mut memh = null_mut();
        // SAFETY: a live context, valid parameters; registered memory outlives the mapping.
        let status = unsafe { ucp_mem_map(pair.ctx, &params, &mut memh) };
        assert_eq!(status, UCS_OK, "ucp_mem_map failed: {}", name(status));
        let mut attr: ucp_mem_attr_t = zeroed();
        attr.field_mask = u64::from(ucp_mem_attr_field::UCP_MEM_ATTR_FIELD_ADDRESS);
        // SAFETY: a live handle and a valid attr.
        assert_eq!(unsafe { ucp_mem_query(memh, &mut attr) }, UCS_OK, "ucp_mem_query");
        let (mut buffer, mut size) = (null_mut(), 0usize);
        // SAFETY: a live context and handle, valid out-pointers.
        let status = unsafe { ucp_rkey_pack(pair.ctx, memh, &mut buffer, &mut size) };
        assert_eq!(status, UCS_OK, "ucp_rkey_pack failed: {}", name(status));
        // SAFETY: the library's buffer of `size` bytes, copied, then released once.
        let packed = unsafe { std::slice::from_raw_parts(buffer.cast::<u8>(), size) }.to_vec();
        // SAFETY: as above.
        unsafe { ucp_rkey_buffer_release(buffer) };
        let (status, rkey) = unpack(pair.ab, &packed);
        assert_eq!(status, UCS_OK, "ucp_ep_rkey_unpack of a real key failed: {}", name(status));
        Mapped { ctx: pair.ctx, memh, packed, rkey, address: attr.address as u64 }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            // SAFETY: a live key and mapping, each released once.
            unsafe {
                ucp_rkey_destroy(self.rkey);
                ucp_mem_unmap(self.ctx, self.memh);
            }
        }
    }
}

fn unpack(ep: ucp_ep_h, bytes: &[u8]) -> (Status, ucp_rkey_h) {
    let mut rkey = null_mut();
    // SAFETY: a live endpoint; the buffer holds `bytes.len()` bytes, at least what its header
    // states when it is a frame (the hostile cases state no more than they hold).
    let status = unsafe { ucp_ep_rkey_unpack(ep, bytes.as_ptr().cast(), &mut rkey) };
    (status, rkey)
}

fn put(pair: &Pair, data: &[u8], address: u64, rkey: ucp_rkey_h) -> Status {
    // SAFETY: a live endpoint and key; `data` outlives the put, waited for.
    let ptr = unsafe {
        ucp_put_nbx(pair.ab, data.as_ptr().cast(), data.len(), address, rkey, &send_param(None, 0))
    };
    pair.wait("a put", ptr)
}

#[test]
fn ep_create_rejects_garbage_and_forged_addresses_with_invalid_param() {
    let pair = Pair::new();
    let real = address_of(pair.b);
    assert!(
        sealed(&real),
        "the worker address is not a sealed zcx frame: this test's forging is out of date"
    );
    let mut flipped = real.clone();
    let last_body = flipped.len() - 5;
    flipped[last_body] ^= 0x40;
    let mapped = Mapped::new(&pair, None, 4096);
    let cases: [(&str, Vec<u8>); 5] = [
        ("garbage bytes", garbage()),
        ("a header stating a body longer than a frame", overlong_header()),
        ("a sealed address frame without fields", frame(3, &[])),
        ("a packed remote key", mapped.packed.clone()),
        ("a real address with a body byte flipped", flipped),
    ];
    for (what, bytes) in cases {
        let (status, ep) = ep_create(pair.a, bytes.as_ptr());
        assert_eq!(status, UCS_ERR_INVALID_PARAM, "ucp_ep_create with {what}: {}", name(status));
        assert!(ep.is_null() || status == UCS_OK, "ucp_ep_create with {what} wrote an endpoint");
    }
}

#[test]
fn rkey_unpack_rejects_garbage_forged_and_edited_keys() {
    let pair = Pair::new();
    let mapped = Mapped::new(&pair, None, 4096);
    assert!(
        sealed(&mapped.packed),
        "the packed key is not a sealed zcx frame: this test's forging is out of date"
    );
    let mut flipped = mapped.packed.clone();
    let base = field(&flipped, 0x83);
    flipped[base.start] ^= 0x10;
    let mut longer = mapped.packed.clone();
    let length = field(&longer, 0x84);
    longer[length.clone()].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    reseal(&mut longer);
    let cases: [(&str, Vec<u8>); 6] = [
        ("garbage bytes", garbage()),
        ("a header stating a body longer than a frame", overlong_header()),
        ("a sealed key frame without fields", frame(1, &[])),
        ("a worker address", address_of(pair.b)),
        ("a real key with its base edited (checksum left stale)", flipped),
        ("a real key claiming a region past the end of the address space", longer),
    ];
    for (what, bytes) in cases {
        let (status, rkey) = unpack(pair.ab, &bytes);
        assert!(status < 0, "ucp_ep_rkey_unpack of {what}: {} (an error status expected)", name(status));
        if status == UCS_OK {
            // SAFETY: a key just unpacked, destroyed once.
            unsafe { ucp_rkey_destroy(rkey) };
        }
    }
}

#[test]
fn a_key_with_edited_bounds_reaches_nothing_outside_the_registered_region() {
    const PAGE: usize = 4096;
    let pair = Pair::new();
    // Three pages, the middle one registered; the others must never change.
    let layout = std::alloc::Layout::from_size_align(3 * PAGE, PAGE).expect("a layout");
    // SAFETY: a nonzero size.
    let memory = unsafe { std::alloc::alloc(layout) };
    assert!(!memory.is_null(), "out of memory");
    // SAFETY: the allocation just made.
    unsafe { memory.write_bytes(0xee, 3 * PAGE) };
    // SAFETY: within the allocation.
    let middle = unsafe { memory.add(PAGE) };
    let mapped = Mapped::new(&pair, Some(middle), PAGE);
    let real_base =
        u64::from_le_bytes(mapped.packed[field(&mapped.packed, 0x83)].try_into().expect("8 bytes"));
    assert_eq!(real_base, middle as u64, "the key's base field is not the registered address");

    // The real key works, so that refusals below are about the edits.
    assert_eq!(put(&pair, b"realkey!", real_base, mapped.rkey), UCS_OK, "a put with the real key");
    // SAFETY: within the allocation, no operation outstanding.
    assert_eq!(unsafe { std::slice::from_raw_parts(middle, 8) }, b"realkey!");

    let edited = |tag: u8, value: u64| {
        let mut key = mapped.packed.clone();
        let at = field(&key, tag);
        key[at].copy_from_slice(&value.to_le_bytes());
        reseal(&mut key);
        key
    };
    let cases = [
        ("its length doubled", edited(0x84, 2 * PAGE as u64), real_base + PAGE as u64),
        ("its base one page lower", edited(0x83, real_base - PAGE as u64), real_base - PAGE as u64),
        ("its base one page higher", edited(0x83, real_base + PAGE as u64), real_base + PAGE as u64),
    ];
    for (what, key, target) in cases {
        let (status, rkey) = unpack(pair.ab, &key);
        if status != UCS_OK {
            assert!(status < 0, "ucp_ep_rkey_unpack of a key with {what}: {}", name(status));
            continue;
        }
        let status = put(&pair, b"outside!", target, rkey);
        assert!(status < 0, "a put outside the region through a key with {what}: {}", name(status));
        // SAFETY: a key just unpacked, destroyed once.
        unsafe { ucp_rkey_destroy(rkey) };
    }
    let mut access = mapped.packed.clone();
    let key_at = field(&access, 0x87);
    access[key_at.start] ^= 1;
    reseal(&mut access);
    let (status, rkey) = unpack(pair.ab, &access);
    if status == UCS_OK {
        let status = put(&pair, b"wrongkey", real_base, rkey);
        assert!(status < 0, "a put through a key with a forged access key: {}", name(status));
        // SAFETY: a key just unpacked, destroyed once.
        unsafe { ucp_rkey_destroy(rkey) };
    }
    pair.spin(20);
    // SAFETY: the allocation, no operation outstanding.
    let all = unsafe { std::slice::from_raw_parts(memory, 3 * PAGE) };
    assert!(all[..PAGE].iter().all(|&b| b == 0xee), "the page below the region was written");
    assert!(all[2 * PAGE..].iter().all(|&b| b == 0xee), "the page above the region was written");
    assert_eq!(&all[PAGE..PAGE + 8], b"realkey!", "a forged key wrote into the region");
    drop(mapped);
    // SAFETY: allocated above with this layout; unmapped and no operation outstanding.
    unsafe { std::alloc::dealloc(memory, layout) };
}

#[test]
fn a_key_to_library_allocated_memory_with_a_longer_length_reaches_nothing_beyond_it() {
    let pair = Pair::new();
    // Memory the library allocates may be shared through a memfd and then written directly by
    // the initiator: the key's claims must still be checked against what the owner registered.
    let mapped = Mapped::new(&pair, None, 4096);
    assert_eq!(put(&pair, b"realkey!", mapped.address, mapped.rkey), UCS_OK, "a put with the real key");
    let mut key = mapped.packed.clone();
    let at = field(&key, 0x84);
    key[at].copy_from_slice(&8192u64.to_le_bytes());
    reseal(&mut key);
    let (status, rkey) = unpack(pair.ab, &key);
    if status != UCS_OK {
        assert!(status < 0, "ucp_ep_rkey_unpack of a key with its length doubled: {}", name(status));
        return;
    }
    // Twice, so that a direct path opened after the first operation is tried too.
    for round in 0..2 {
        let status = put(&pair, b"outside!", mapped.address + 4096, rkey);
        assert!(
            status < 0,
            "put {round} past the region through a key with its length doubled: {}",
            name(status)
        );
    }
    // SAFETY: a key just unpacked, destroyed once.
    unsafe { ucp_rkey_destroy(rkey) };
}

/// An atomic add of `operand` with `datatype` (`None`: no datatype field) and `count`.
fn atomic_add(pair: &Pair, mapped: &Mapped, operand: &u64, datatype: Option<u64>, count: usize) -> Status {
    let mut param = send_param(None, 0);
    if let Some(datatype) = datatype {
        param = with_datatype(param, datatype);
    }
    // SAFETY: a live endpoint and key; the operand outlives the operation, waited for.
    let ptr = unsafe {
        ucp_atomic_op_nbx(
            pair.ab,
            ucp_atomic_op_t::UCP_ATOMIC_OP_ADD,
            (operand as *const u64).cast(),
            count,
            mapped.address,
            mapped.rkey,
            &param,
        )
    };
    pair.wait("an atomic", ptr)
}

fn remote_u64(mapped: &Mapped) -> u64 {
    // SAFETY: the library's allocation of at least 8 bytes, no operation outstanding.
    unsafe { (mapped.address as *const u64).read() }
}

// ---------------------------------------------------------------------------------------------
// One-sided operations over shared memory, issued as `ucx_perftest` issues them.

/// Two workers of one context on shared memory whatever the environment says, an endpoint each
/// way, and nothing progressed yet: a key unpacked now is unpacked before the endpoints are wired
/// up, as `ucx_perftest` unpacks its peer's key right after `ucp_ep_create`.
fn unwired_shm_pair() -> Pair {
    let env = env_read();
    let mut config = null_mut();
    // SAFETY: a valid out-pointer; no prefix, no file.
    assert_eq!(unsafe { ucp_config_read(null(), null(), &mut config) }, UCS_OK, "ucp_config_read");
    // SAFETY: a live configuration and NUL-terminated strings.
    let status = unsafe { ucp_config_modify(config, c"TLS".as_ptr(), c"shm,tcp".as_ptr()) };
    assert_eq!(status, UCS_OK, "ucp_config_modify(TLS=shm,tcp): {}", name(status));
    let mut ctx = null_mut();
    // SAFETY: valid parameters, a live configuration and a valid out-pointer.
    let status = unsafe { ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &base_params(), config, &mut ctx) };
    // SAFETY: read above, released once; the context keeps what it needs.
    unsafe { ucp_config_release(config) };
    assert_eq!(status, UCS_OK, "ucp_init_version failed: {}", name(status));
    let mode = ucs_thread_mode_t::UCS_THREAD_MODE_SINGLE;
    let (a, b) = (new_worker(ctx, mode), new_worker(ctx, mode));
    let (ab, ba) = (connect(a, b), connect(b, a));
    Pair { ctx, a, b, ab, ba, _env: env }
}

/// Wires up an unwired pair with a message each way.
fn wire_up(pair: &Pair) {
    for (ep, to) in [(pair.ab, pair.b), (pair.ba, pair.a)] {
        let mut got = [0u8; 8];
        let recv = pair.recv_on(to, &mut got, WARM, &recv_param(None, 0));
        let sent = pair.send_on(ep, b"warm-up!", WARM, &send_param(None, 0));
        assert_eq!(pair.wait("the wire-up receive", recv), UCS_OK, "the wire-up receive failed");
        assert_eq!(pair.wait("the wire-up send", sent), UCS_OK, "the wire-up send failed");
    }
}

/// A put of `data` at `address` on A → B with `param`, as returned.
fn put_with(pair: &Pair, data: &[u8], address: u64, rkey: ucp_rkey_h, param: &ucp_request_param_t) -> Ret {
    // SAFETY: a live endpoint and key; every caller waits for a returned request before `data`
    // goes away.
    ret(unsafe { ucp_put_nbx(pair.ab, data.as_ptr().cast(), data.len(), address, rkey, param) })
}

/// A get into `buf` from `address` on A → B with `param`, as returned.
fn get_with(pair: &Pair, buf: &mut [u8], address: u64, rkey: ucp_rkey_h, param: &ucp_request_param_t) -> Ret {
    // SAFETY: as in `put_with`.
    ret(unsafe { ucp_get_nbx(pair.ab, buf.as_mut_ptr().cast(), buf.len(), address, rkey, param) })
}

/// A fetching atomic `op` of `operand` (`size` bytes) at `address`, the previous value landing
/// in `reply`, as returned.
fn fetch_with(
    pair: &Pair,
    op: ucp_atomic_op_t::Type,
    (operand, size): (&u64, u64),
    address: u64,
    rkey: ucp_rkey_h,
    reply: &mut u64,
    seen: Option<&Seen>,
) -> Ret {
    let mut param = with_datatype(send_param(seen, UCP_OP_ATTR_FIELD_REPLY_BUFFER), contig(size));
    param.reply_buffer = (reply as *mut u64).cast();
    // SAFETY: a live endpoint and key; the operand and reply outlive the operation (every caller
    // waits for a returned request).
    ret(unsafe { ucp_atomic_op_nbx(pair.ab, op, (operand as *const u64).cast(), 1, address, rkey, &param) })
}

/// The final status of what an operation returned, waiting for a request.
fn settle(pair: &Pair, what: &str, r: Ret) -> Status {
    match r {
        Ret::Null => UCS_OK,
        Ret::Err(status) => status,
        Ret::Req(req) => pair.wait(what, req),
    }
}

// `ucx_perftest`'s one-sided tests unpack the key right after `ucp_ep_create`, flush the worker
// "to force wireup completion", and then, with `-o`, never progress the target's worker again.
// Over shared memory a key to memory the library allocated is used directly once its owner
// vouched for it, which the flush's round trip brings: the operation is then done when the call
// returns, which returns NULL (`UCS_OK`) and runs no callback, unless the caller asked for a
// request (`UCP_OP_ATTR_FLAG_NO_IMM_CMPL`), which comes back completed.
#[test]
fn one_sided_operations_complete_at_once_over_shared_memory_with_the_target_idle() {
    const LEN: u64 = 4096;
    let pair = unwired_shm_pair();
    let mapped = Mapped::new(&pair, None, LEN as usize);
    let base = mapped.address;
    // SAFETY: a live worker; no parameters.
    let flush = unsafe { ucp_worker_flush_nbx(pair.a, null()) };
    assert_eq!(pair.wait("the worker flush", flush), UCS_OK, "the worker flush failed");
    let word = |offset: u64| {
        // SAFETY: 8 bytes inside the library's allocation, no operation outstanding.
        unsafe { ((base + offset) as *const u64).read() }
    };
    let first = put_with(&pair, b"vouched?", base, mapped.rkey, &send_param(None, 0));
    assert_eq!(first, Ret::Null, "the first put after the flush did not complete at once");

    // From here on neither worker is progressed.
    let seen = Seen::new();
    let put = put_with(&pair, &7u64.to_le_bytes(), base + 8, mapped.rkey, &send_param(Some(&seen), 0));
    assert_eq!(put, Ret::Null, "a put through a vouched key did not complete at once");
    assert_eq!(word(8), 7, "the put's bytes are not in the target's memory");
    let mut got = [0u8; 16];
    let get = get_with(&pair, &mut got, base, mapped.rkey, &send_param(Some(&seen), 0));
    assert_eq!(get, Ret::Null, "a get through a vouched key did not complete at once");
    assert_eq!(&got[..8], b"vouched?");
    assert_eq!(got[8..], 7u64.to_le_bytes());
    let mut reply = 0u64;
    let add = ucp_atomic_op_t::UCP_ATOMIC_OP_ADD;
    let fadd = fetch_with(&pair, add, (&5, 8), base + 8, mapped.rkey, &mut reply, Some(&seen));
    assert_eq!(fadd, Ret::Null, "a fetch-and-add through a vouched key did not complete at once");
    assert_eq!((reply, word(8)), (7, 12), "the fetch-and-add's reply and result");
    // CSWAP: stores the reply buffer's value if the word equals the operand.
    let mut swap_in = 40u64;
    let cswap = ucp_atomic_op_t::UCP_ATOMIC_OP_CSWAP;
    let r = fetch_with(&pair, cswap, (&12, 4), base + 8, mapped.rkey, &mut swap_in, Some(&seen));
    assert_eq!(r, Ret::Null, "a 32-bit compare-and-swap did not complete at once");
    assert_eq!((swap_in as u32, word(8)), (12, 40), "the compare-and-swap's reply and result");
    assert_eq!(seen.calls(), 0, "an operation that completed at once ran its callback");

    // Asked for a request, the caller gets one, completed, its callback run.
    let param = send_param(Some(&seen), UCP_OP_ATTR_FLAG_NO_IMM_CMPL);
    let Ret::Req(req) = put_with(&pair, &9u64.to_le_bytes(), base + 8, mapped.rkey, &param) else {
        panic!("a put with UCP_OP_ATTR_FLAG_NO_IMM_CMPL returned no request");
    };
    assert_eq!(check(req), UCS_OK, "the put's request is not complete");
    assert_eq!(seen.calls(), 1, "the put's callback did not run once");
    assert_eq!(seen.last("the put").status, UCS_OK);
    free(req);
    assert_eq!(word(8), 9);

    // Past the end: refused at once, whole.
    let past = put_with(&pair, &[0xee; 16], base + LEN - 8, mapped.rkey, &send_param(Some(&seen), 0));
    assert_eq!(past, Ret::Err(ucs_status_t::UCS_ERR_INVALID_ADDR), "a put past the end");
    let past = get_with(&pair, &mut got, base + LEN - 8, mapped.rkey, &send_param(Some(&seen), 0));
    assert_eq!(past, Ret::Err(ucs_status_t::UCS_ERR_INVALID_ADDR), "a get past the end");
    let r = fetch_with(&pair, add, (&1, 8), base + LEN, mapped.rkey, &mut reply, Some(&seen));
    assert_eq!(r, Ret::Err(ucs_status_t::UCS_ERR_INVALID_ADDR), "an atomic past the end");
    assert_eq!(word(LEN - 8), 0, "a refused put wrote");
    assert_eq!(seen.calls(), 1, "a refused operation ran its callback");
}

// Keys a hostile peer edited (bounds, base, protection; resealed) and unpacked before the
// endpoints were wired up, as the key above: no put, get or atomic through them reaches a byte
// outside what the owner registered, or writes read-only memory, whether the owner or the
// initiator decides. The honest key completes at once, so the direct path was open.
#[test]
fn edited_keys_unpacked_before_wire_up_reach_nothing_outside_their_region() {
    const PAGE: u64 = 4096;
    let pair = unwired_shm_pair();
    // Four pages the library allocated: the second registered read-write, the third read-only.
    let all = Mapped::new(&pair, None, 4 * PAGE as usize);
    let (rw_at, ro_at) = (all.address + PAGE, all.address + 2 * PAGE);
    // SAFETY: the library's allocation of four pages.
    unsafe { (all.address as *mut u8).write_bytes(0xee, 4 * PAGE as usize) };
    let local = _bindgen_ty_5::UCP_MEM_MAP_PROT_LOCAL_READ | _bindgen_ty_5::UCP_MEM_MAP_PROT_LOCAL_WRITE;
    let remote_read = _bindgen_ty_5::UCP_MEM_MAP_PROT_REMOTE_READ;
    let rw = Mapped::new(&pair, Some(rw_at as *mut u8), PAGE as usize);
    let ro = Mapped::with_prot(&pair, Some(ro_at as *mut u8), PAGE as usize, Some(local | remote_read));
    let edited = |packed: &[u8], tag: u8, value: &[u8]| {
        let mut key = packed.to_vec();
        let at = field(&key, tag);
        key[at].copy_from_slice(value);
        reseal(&mut key);
        key
    };
    let all_prot = local | remote_read | _bindgen_ty_5::UCP_MEM_MAP_PROT_REMOTE_WRITE;
    let cases: [(&str, Vec<u8>, u64); 5] = [
        ("honest", rw.packed.clone(), rw_at),
        ("its length doubled", edited(&rw.packed, 0x84, &(2 * PAGE).to_le_bytes()), rw_at),
        ("its base one page lower", edited(&rw.packed, 0x83, &(rw_at - PAGE).to_le_bytes()), rw_at),
        ("its base one page higher", edited(&rw.packed, 0x83, &(rw_at + PAGE).to_le_bytes()), rw_at),
        ("write protection added", edited(&ro.packed, 0x85, &all_prot.to_le_bytes()), ro_at),
    ];
    let keys: Vec<(&str, ucp_rkey_h, u64)> = cases
        .iter()
        .filter_map(|(what, key, at)| {
            let (status, rkey) = unpack(pair.ab, key);
            assert!(status <= UCS_OK, "ucp_ep_rkey_unpack of a key with {what}: {}", name(status));
            (status == UCS_OK).then_some((*what, rkey, *at))
        })
        .collect();
    wire_up(&pair);
    let snapshot = || {
        // SAFETY: the library's allocation of four pages, no operation outstanding.
        unsafe { std::slice::from_raw_parts(all.address as *const u8, 4 * PAGE as usize) }.to_vec()
    };
    let before = snapshot();
    let mut honest_at_once = false;
    let add = ucp_atomic_op_t::UCP_ATOMIC_OP_ADD;
    for round in 0..3 {
        for &(edit, rkey, at) in &keys {
            let what = format!("a key with {edit}, round {round}");
            // Inside, what the owner allowed: it rewrites the bytes already there.
            let inside = put_with(&pair, &[0xee; 8], at, rkey, &send_param(None, 0));
            honest_at_once |= edit == "honest" && inside == Ret::Null;
            let status = settle(&pair, &what, inside);
            assert!(status <= UCS_OK, "a put inside through {what}: {}", name(status));
            for outside in [at - PAGE, at - 8, at + PAGE, at + PAGE + 8] {
                let at = format!("{what}, at {:+}", outside as i64 - at as i64);
                let put = put_with(&pair, &[0x11; 8], outside, rkey, &send_param(None, 0));
                let status = settle(&pair, &at, put);
                assert!(status < 0, "a put outside through {at}: {}", name(status));
                let mut got = [0u8; 8];
                let get = get_with(&pair, &mut got, outside, rkey, &send_param(None, 0));
                let status = settle(&pair, &at, get);
                assert!(status < 0, "a get outside through {at}: {}", name(status));
                let mut reply = 0u64;
                let fadd = fetch_with(&pair, add, (&1, 8), outside, rkey, &mut reply, None);
                let status = settle(&pair, &at, fadd);
                assert!(status < 0, "an atomic outside through {at}: {}", name(status));
            }
            if at == ro_at {
                let put = put_with(&pair, &[0x11; 8], at, rkey, &send_param(None, 0));
                let status = settle(&pair, &what, put);
                assert!(status < 0, "a put into read-only memory through {what}: {}", name(status));
                let mut reply = 0u64;
                let fadd = fetch_with(&pair, add, (&1, 8), at, rkey, &mut reply, None);
                let status = settle(&pair, &what, fadd);
                assert!(status < 0, "an atomic on read-only memory through {what}: {}", name(status));
            }
            assert!(snapshot() == before, "bytes changed after the accesses through {what}");
        }
    }
    assert!(honest_at_once, "the honest key's puts never completed at once: no direct path to test");
    for (_, rkey, _) in keys {
        // SAFETY: keys unpacked above, destroyed once.
        unsafe { ucp_rkey_destroy(rkey) };
    }
}

#[test]
fn an_atomic_of_three_bytes_is_invalid_param() {
    let pair = Pair::new();
    let mapped = Mapped::new(&pair, None, 4096);
    let one = 1u64;
    assert_eq!(atomic_add(&pair, &mapped, &one, Some(contig(8)), 1), UCS_OK, "a 64-bit atomic add");
    let before = remote_u64(&mapped);
    let status = atomic_add(&pair, &mapped, &one, Some(contig(3)), 1);
    assert_eq!(status, UCS_ERR_INVALID_PARAM, "an atomic with ucp_dt_make_contig(3): {}", name(status));
    assert_eq!(remote_u64(&mapped), before, "a refused atomic changed the target");
}

// `ucp.h` for ucp_atomic_op_nbx: "Only ucp_dt_make_contig(4) and ucp_dt_make_contig(8) are
// supported in param->datatype ... count argument must be set to 1". UCX 1.13 refuses a missing
// datatype ("missing atomic operation datatype") and a count of 2 ("unsupported number of
// elements") with UCS_ERR_INVALID_PARAM, touching nothing.

#[test]

fn an_atomic_without_a_datatype_is_invalid_param() {
    let pair = Pair::new();
    let mapped = Mapped::new(&pair, None, 4096);
    let before = remote_u64(&mapped);
    let status = atomic_add(&pair, &mapped, &1, None, 8);
    assert_eq!(
        status,
        UCS_ERR_INVALID_PARAM,
        "an atomic without UCP_OP_ATTR_FIELD_DATATYPE: {}",
        name(status)
    );
    assert_eq!(remote_u64(&mapped), before, "a refused atomic changed the target");
}

#[test]

fn an_atomic_of_more_than_one_element_is_invalid_param() {
    let pair = Pair::new();
    let mapped = Mapped::new(&pair, None, 4096);
    let before = remote_u64(&mapped);
    let status = atomic_add(&pair, &mapped, &1, Some(contig(4)), 2);
    assert_eq!(status, UCS_ERR_INVALID_PARAM, "an atomic of two 4-byte elements: {}", name(status));
    assert_eq!(remote_u64(&mapped), before, "a refused atomic changed the target");
}

#[test]
fn unknown_datatype_classes_are_unsupported_and_send_nothing() {
    let pair = Pair::new();
    let mut buf = [0u8; 64];
    for class in [ucp_dt_type::UCP_DATATYPE_STRIDED, 3, 4, 5, 6] {
        let datatype = (4 << ucp_dt_type::UCP_DATATYPE_SHIFT) | u64::from(class);
        let param = with_datatype(send_param(None, 0), datatype);
        let tag = 0x90 + u64::from(class);
        let sent = ret(pair.send(&buf, tag, &param));
        assert_eq!(sent, Ret::Err(UCS_ERR_UNSUPPORTED), "a tag send of datatype class {class}");
        let received = ret(pair.recv(&mut buf, tag, &param));
        assert_eq!(received, Ret::Err(UCS_ERR_UNSUPPORTED), "a tag receive of datatype class {class}");
        // SAFETY: a live endpoint; `buf` outlives the call.
        let streamed = ret(unsafe { ucp_stream_send_nbx(pair.ab, buf.as_ptr().cast(), 1, &param) });
        assert_eq!(streamed, Ret::Err(UCS_ERR_UNSUPPORTED), "a stream send of datatype class {class}");
        let mut length = 0usize;
        // SAFETY: a live endpoint; `buf` and `length` outlive the call.
        let stream_recv =
            ret(unsafe { ucp_stream_recv_nbx(pair.ba, buf.as_mut_ptr().cast(), 1, &mut length, &param) });
        assert_eq!(stream_recv, Ret::Err(UCS_ERR_UNSUPPORTED), "a stream receive of datatype class {class}");
        pair.spin(50);
        assert!(
            probe(pair.b, tag, 0).0.is_null(),
            "a refused send of datatype class {class} still sent a message"
        );
    }
}

#[test]
fn init_with_another_major_version_is_unsupported() {
    let params = base_params();
    for major in [UCP_API_MAJOR + 1, 0] {
        let mut ctx = null_mut();
        // SAFETY: valid parameters and out-pointer.
        let status = unsafe { ucp_init_version(major, 0, &params, null(), &mut ctx) };
        assert_eq!(status, UCS_ERR_UNSUPPORTED, "ucp_init_version with API major {major}: {}", name(status));
        assert!(ctx.is_null(), "ucp_init_version with API major {major} made a context");
    }
}

// Null pointers, each call in a child process of its own.

/// The child runs the case this names.
const NULL_CASE: &str = "ABI_NULL_CASE";

/// A status pointer as a status; a request (which a refused call must not return) as `UCS_INPROGRESS`.
fn ptr_code(ptr: ucs_status_ptr_t) -> Status {
    match ret(ptr) {
        Ret::Null => UCS_OK,
        Ret::Err(status) => status,
        Ret::Req(_) => UCS_INPROGRESS,
    }
}

/// A context with two connected workers for the cases that need live handles besides the null
/// one; the child exits without tearing it down.
fn live() -> &'static Pair {
    Box::leak(Box::new(Pair::new()))
}

type NullCase = (&'static str, unsafe fn() -> Status);

/// A case: its name and an `unsafe fn` running `body`, where each unsafe call is the deliberate
/// contract break the case is about.
macro_rules! null_case {
    ($name:literal, $body:block) => {{
        unsafe fn case() -> Status $body
        ($name, case as unsafe fn() -> Status)
    }};
}

/// Calls that UCP documents as taking a valid pointer, given a null one. Each must return
/// `UCS_ERR_INVALID_PARAM` (or the error status pointer of it), here and in [`NULL_HANDLES`].
const NULL_ARGUMENTS: &[NullCase] = &[
    null_case!("ucp_init_version(params = NULL)", {
        ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, null(), null(), &mut null_mut())
    }),
    null_case!("ucp_init_version(context_p = NULL)", {
        ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &base_params(), null(), null_mut())
    }),
    null_case!("ucp_config_read(config_p = NULL)", { ucp_config_read(null(), null(), null_mut()) }),
    null_case!("ucp_worker_create(context = NULL)", {
        ucp_worker_create(null_mut(), &zeroed(), &mut null_mut())
    }),
    null_case!("ucp_worker_create(params = NULL)", {
        ucp_worker_create(live().ctx, null(), &mut null_mut())
    }),
    null_case!("ucp_worker_create(worker_p = NULL)", {
        ucp_worker_create(live().ctx, &zeroed(), null_mut())
    }),
    null_case!("ucp_context_query(attr = NULL)", { ucp_context_query(live().ctx, null_mut()) }),
    null_case!("ucp_worker_query(attr = NULL)", { ucp_worker_query(live().a, null_mut()) }),
    null_case!("ucp_worker_get_address(address_p = NULL)", {
        ucp_worker_get_address(live().a, null_mut(), &mut 0)
    }),
    null_case!("ucp_worker_get_efd(fd = NULL)", { ucp_worker_get_efd(live().a, null_mut()) }),
    null_case!("ucp_ep_create(params = NULL)", { ucp_ep_create(live().a, null(), &mut null_mut()) }),
    null_case!("ucp_ep_create(ep_p = NULL)", {
        let pair = live();
        let address = address_of(pair.b);
        let mut params: ucp_ep_params_t = zeroed();
        params.field_mask = u64::from(ucp_ep_params_field::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS);
        params.address = address.as_ptr().cast();
        ucp_ep_create(pair.a, &params, null_mut())
    }),
    null_case!("ucp_ep_create(address = NULL)", { ep_create(live().a, null()).0 }),
    null_case!("ucp_ep_query(attr = NULL)", { ucp_ep_query(live().ab, null_mut()) }),
    null_case!("ucp_tag_send_nbx(ep = NULL)", {
        ptr_code(ucp_tag_send_nbx(null_mut(), null(), 0, 1, null()))
    }),
    null_case!("ucp_tag_recv_nbx(worker = NULL)", {
        ptr_code(ucp_tag_recv_nbx(null_mut(), null_mut(), 0, 1, FULL, null()))
    }),
    null_case!("ucp_tag_msg_recv_nbx(message = NULL)", {
        ptr_code(ucp_tag_msg_recv_nbx(live().b, null_mut(), 0, null_mut(), null()))
    }),
    null_case!("ucp_stream_send_nbx(ep = NULL)", {
        ptr_code(ucp_stream_send_nbx(null_mut(), null(), 0, null()))
    }),
    null_case!("ucp_stream_recv_nbx(ep = NULL)", {
        ptr_code(ucp_stream_recv_nbx(null_mut(), null_mut(), 0, &mut 0, null()))
    }),
    null_case!("ucp_mem_map(params = NULL)", { ucp_mem_map(live().ctx, null(), &mut null_mut()) }),
    null_case!("ucp_mem_unmap(memh = NULL)", { ucp_mem_unmap(live().ctx, null_mut()) }),
    null_case!("ucp_mem_query(attr = NULL)", {
        let mapped = Mapped::new(live(), None, 4096);
        ucp_mem_query(mapped.memh, null_mut())
    }),
    null_case!("ucp_rkey_pack(memh = NULL)", {
        ucp_rkey_pack(live().ctx, null_mut(), &mut null_mut(), &mut 0)
    }),
    null_case!("ucp_ep_rkey_unpack(rkey_buffer = NULL)", {
        ucp_ep_rkey_unpack(live().ab, null(), &mut null_mut())
    }),
    null_case!("ucp_ep_rkey_unpack(ep = NULL)", {
        let mapped = Mapped::new(live(), None, 4096);
        unpack(null_mut(), &mapped.packed).0
    }),
    null_case!("ucp_rkey_ptr(rkey = NULL)", { ucp_rkey_ptr(null_mut(), 0, &mut null_mut()) }),
    null_case!("ucp_put_nbx(rkey = NULL)", {
        ptr_code(ucp_put_nbx(live().ab, [0u8; 8].as_ptr().cast(), 8, 0, null_mut(), null()))
    }),
    null_case!("ucp_atomic_op_nbx(param = NULL)", {
        let pair = live();
        let mapped = Mapped::new(pair, None, 4096);
        let operand = 1u64;
        let add = ucp_atomic_op_t::UCP_ATOMIC_OP_ADD;
        let operand = (&operand as *const u64).cast();
        ptr_code(ucp_atomic_op_nbx(pair.ab, add, operand, 1, mapped.address, mapped.rkey, null()))
    }),
    null_case!("ucp_dt_create_generic(ops = NULL)", { ucp_dt_create_generic(null(), null_mut(), &mut 0) }),
    null_case!("ucp_request_query(attr = NULL)", {
        let pair = live();
        let mut buf = [0u8; 8];
        let req = expect_req("a pending receive", pair.recv(&mut buf, 1, &recv_param(None, 0)));
        ucp_request_query(req, null_mut())
    }),
];

/// Null worker, endpoint and request handles given to calls that return a status.
const NULL_HANDLES: &[NullCase] = &[
    null_case!("ucp_worker_fence(worker = NULL)", { ucp_worker_fence(null_mut()) }),
    null_case!("ucp_worker_arm(worker = NULL)", { ucp_worker_arm(null_mut()) }),
    null_case!("ucp_worker_signal(worker = NULL)", { ucp_worker_signal(null_mut()) }),
    null_case!("ucp_worker_wait(worker = NULL)", { ucp_worker_wait(null_mut()) }),
    null_case!("ucp_worker_flush_nbx(worker = NULL)", { ptr_code(ucp_worker_flush_nbx(null_mut(), null())) }),
    null_case!("ucp_ep_flush_nbx(ep = NULL)", { ptr_code(ucp_ep_flush_nbx(null_mut(), null())) }),
    null_case!("ucp_request_check_status(request = NULL)", { ucp_request_check_status(null_mut()) }),
    null_case!("ucp_request_test(request = NULL)", { ucp_request_test(null_mut(), &mut zeroed()) }),
    null_case!("ucp_tag_recv_request_test(request = NULL)", {
        ucp_tag_recv_request_test(null_mut(), &mut zeroed())
    }),
    null_case!("ucp_stream_recv_request_test(request = NULL)", {
        ucp_stream_recv_request_test(null_mut(), &mut 0)
    }),
];

/// Runs `case` in a child process: its status, or why there is none.
fn run_null_case(case: &str) -> Result<Status, String> {
    let exe = std::env::current_exe().map_err(|e| format!("no test binary: {e}"))?;
    let mut child = Command::new(exe)
        .args(["--exact", "null_case_child", "--nocapture", "--test-threads=1"])
        .env(NULL_CASE, case)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the child: {e}"))?;
    let start = Instant::now();
    let exit = loop {
        match child.try_wait() {
            Ok(Some(exit)) => break exit,
            Ok(None) if start.elapsed() > TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("hung for {TIMEOUT:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("cannot wait for the child: {e}")),
        }
    };
    let output = child.wait_with_output().map_err(|e| format!("cannot read the child: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let status = stdout
        .lines()
        .find_map(|l| l.split_once("null-case-status: ").map(|(_, s)| s))
        .and_then(|s| s.trim().parse().ok());
    match status {
        Some(status) if exit.success() => Ok(status),
        _ => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            // A Rust panic names its cause on the line after "panicked at"; a fault says nothing.
            let lines: Vec<&str> = stderr.lines().collect();
            let cause = lines.iter().position(|l| l.contains("panicked at")).and_then(|i| lines.get(i + 1));
            Err(format!("crashed ({exit}){}", cause.map_or_else(String::new, |c| format!(": {c}"))))
        }
    }
}

/// Runs every case in a child of its own; a message listing each that did not return
/// `UCS_ERR_INVALID_PARAM`.
fn null_failures(cases: &[NullCase]) -> Vec<String> {
    let _env = env_read();
    let mut wrong = Vec::new();
    for (case, _) in cases {
        match run_null_case(case) {
            Ok(UCS_ERR_INVALID_PARAM) => {}
            Ok(status) => wrong.push(format!("{case} → {}", name(status))),
            Err(why) => wrong.push(format!("{case} → {why}")),
        }
    }
    wrong
}

#[test]
fn null_pointers_where_ucp_forbids_them_get_invalid_param_not_a_crash() {
    let wrong = null_failures(NULL_ARGUMENTS);
    assert!(
        wrong.is_empty(),
        "calls with a null pointer that did not return UCS_ERR_INVALID_PARAM:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn null_worker_endpoint_and_request_handles_get_invalid_param_not_a_crash() {
    let wrong = null_failures(NULL_HANDLES);
    assert!(
        wrong.is_empty(),
        "calls with a null handle that did not return UCS_ERR_INVALID_PARAM:\n{}",
        wrong.join("\n")
    );
}

/// The child side of the null-pointer tests; without `ABI_NULL_CASE` it does nothing.
#[test]
fn null_case_child() {
    let Ok(case) = std::env::var(NULL_CASE) else { return };
    let (_, run) =
        NULL_ARGUMENTS.iter().chain(NULL_HANDLES).find(|(name, _)| *name == case).expect("a known case");
    // SAFETY: deliberately breaks UCP's contract with one null pointer; this process exists only
    // to survive it or not.
    let status = unsafe { run() };
    println!("null-case-status: {status}");
}

// ---------------------------------------------------------------------------------------------
// 9. The configuration from the environment.

/// Sets and removes environment variables, putting back what was there when dropped.
struct EnvEdit(Vec<(&'static str, Option<OsString>)>);

impl EnvEdit {
    fn set(&mut self, key: &'static str, value: Option<&str>) {
        if !self.0.iter().any(|(k, _)| *k == key) {
            self.0.push((key, std::env::var_os(key)));
        }
        match value {
            Some(value) => std::env::set_var(key, value),
            None => std::env::remove_var(key),
        }
    }
}

impl Drop for EnvEdit {
    fn drop(&mut self) {
        for (key, value) in self.0.drain(..).rev() {
            match value {
                Some(value) => std::env::set_var(key, value),
                None => std::env::remove_var(key),
            }
        }
    }
}

/// `ZCX_TLS` as `ucp_config_print` shows the configuration `ucp_config_read(prefix)` reads.
fn tls_read(prefix: Option<&CStr>) -> String {
    let mut config = null_mut();
    // SAFETY: a NUL-terminated prefix or null, and a valid out-pointer.
    let status = unsafe { ucp_config_read(prefix.map_or(null(), CStr::as_ptr), null(), &mut config) };
    assert_eq!(status, UCS_OK, "ucp_config_read({prefix:?}) failed: {}", name(status));
    let (mut buf, mut size) = (null_mut(), 0usize);
    // SAFETY: valid out-pointers; the stream is closed before its buffer is read and freed, and
    // the configuration released once.
    let text = unsafe {
        let stream = libc::open_memstream(&mut buf, &mut size);
        assert!(!stream.is_null(), "open_memstream failed");
        ucp_config_print(config, stream, null(), 0);
        libc::fclose(stream);
        let text = CStr::from_ptr(buf).to_string_lossy().into_owned();
        libc::free(buf.cast());
        ucp_config_release(config);
        text
    };
    text.lines()
        .find_map(|l| l.strip_prefix("ZCX_TLS="))
        .unwrap_or_else(|| panic!("no ZCX_TLS line in ucp_config_print's output:\n{text}"))
        .to_owned()
}

#[test]
fn config_read_takes_ucx_tls_then_the_prefixed_one_then_zcx_tls() {
    let _env = ENV.write().unwrap_or_else(PoisonError::into_inner);
    let mut env = EnvEdit(Vec::new());
    let prefix = c"ABITEST";
    for key in ["UCX_TLS", "ABITEST_UCX_TLS", "ZCX_TLS"] {
        env.set(key, None);
    }
    assert_eq!(tls_read(None), "all", "with no TLS variable set");

    env.set("UCX_TLS", Some("tcp"));
    assert_eq!(tls_read(None), "tcp", "UCX_TLS=tcp");
    assert_eq!(tls_read(Some(prefix)), "tcp", "UCX_TLS=tcp read with a prefix that has no TLS of its own");
    env.set("UCX_TLS", Some("sm,self,tcp"));
    assert_eq!(tls_read(None), "shm,tcp", "UCX_TLS=sm,self,tcp (self needs no zcx transport)");

    env.set("UCX_TLS", Some("tcp"));
    env.set("ABITEST_UCX_TLS", Some("shm"));
    assert_eq!(tls_read(Some(prefix)), "shm", "ABITEST_UCX_TLS overrides UCX_TLS under prefix ABITEST");
    assert_eq!(tls_read(None), "tcp", "ABITEST_UCX_TLS without the prefix");

    env.set("ZCX_TLS", Some("uring"));
    assert_eq!(tls_read(Some(prefix)), "uring", "ZCX_TLS overrides both UCX variables");
    assert_eq!(tls_read(None), "uring", "ZCX_TLS overrides UCX_TLS");
}

// ---------------------------------------------------------------------------------------------
// 10. Queries.

#[test]
fn worker_query_reports_the_thread_mode_asked_for() {
    let _env = env_read();
    let ctx = init(&base_params());
    for mode in [
        ucs_thread_mode_t::UCS_THREAD_MODE_SINGLE,
        ucs_thread_mode_t::UCS_THREAD_MODE_SERIALIZED,
        ucs_thread_mode_t::UCS_THREAD_MODE_MULTI,
    ] {
        let worker = new_worker(ctx, mode);
        let mut attr: ucp_worker_attr_t = zeroed();
        attr.field_mask = u64::from(ucp_worker_attr_field::UCP_WORKER_ATTR_FIELD_THREAD_MODE);
        // SAFETY: a live worker and a valid attr.
        let status = unsafe { ucp_worker_query(worker, &mut attr) };
        assert_eq!(status, UCS_OK, "ucp_worker_query(THREAD_MODE) failed: {}", name(status));
        assert_eq!(attr.thread_mode, mode, "the thread mode of a worker created with mode {mode}");
        // SAFETY: a live worker without endpoints, destroyed once.
        unsafe { ucp_worker_destroy(worker) };
    }
    // SAFETY: a live context without workers, cleaned up once.
    unsafe { ucp_cleanup(ctx) };
}

#[test]
fn context_query_request_size_is_the_library_header_before_each_request() {
    let _env = env_read();
    for app_size in [0usize, 32, 1000] {
        let mut params = base_params();
        params.field_mask |= u64::from(ucp_params_field::UCP_PARAM_FIELD_REQUEST_SIZE);
        params.request_size = app_size;
        let ctx = init(&params);
        assert_eq!(
            request_size(ctx),
            ucp::request::HEADER_SIZE,
            "REQUEST_SIZE of a context whose application part is {app_size} bytes"
        );
        // SAFETY: a live context without workers, cleaned up once.
        unsafe { ucp_cleanup(ctx) };
    }
}

/// `ucp_worker_address_query` names the worker an address belongs to: the same id for any copy
/// of one worker's address, another for another worker's; a corrupted address is refused.
#[test]
fn worker_address_query_tells_whose_address_it_is() {
    let _env = env_read();
    let ctx = init(&base_params());
    let (one, two) = (
        new_worker(ctx, ucs_thread_mode_t::UCS_THREAD_MODE_SINGLE),
        new_worker(ctx, ucs_thread_mode_t::UCS_THREAD_MODE_SINGLE),
    );
    let uid = |address: &mut Vec<u8>| {
        let mut attr: ucp_worker_address_attr_t = zeroed();
        attr.field_mask = u64::from(ucp_worker_address_attr_field::UCP_WORKER_ADDRESS_ATTR_FIELD_UID);
        // SAFETY: a whole worker address (or its corruption, of the same length) and a valid attr.
        let status = unsafe { ucp_worker_address_query(address.as_mut_ptr().cast(), &mut attr) };
        (status, attr.worker_uid)
    };
    let (mut a, mut a_again, mut b) = (address_of(one), address_of(one), address_of(two));
    let (status, uid_a) = uid(&mut a);
    assert_eq!(status, UCS_OK, "ucp_worker_address_query failed: {}", name(status));
    assert_eq!(uid(&mut a_again), (UCS_OK, uid_a));
    let (status, uid_b) = uid(&mut b);
    assert_eq!(status, UCS_OK);
    assert_ne!(uid_a, uid_b, "two workers, one id");
    let last = a.len() - 1;
    a[last] ^= 0x40;
    assert_eq!(uid(&mut a).0, UCS_ERR_INVALID_PARAM, "a corrupted address");
    // SAFETY: null address and attr are refused before anything is read.
    let null = unsafe { ucp_worker_address_query(null_mut(), null_mut()) };
    assert_eq!(null, UCS_ERR_INVALID_PARAM);
    // SAFETY: live workers without endpoints and a context without others, each freed once.
    unsafe {
        ucp_worker_destroy(one);
        ucp_worker_destroy(two);
        ucp_cleanup(ctx);
    }
}

/// `ucp_stream_worker_poll` reports the endpoint stream bytes arrived on, once per arrival, and
/// nothing once they were read.
#[test]
fn stream_worker_poll_reports_an_endpoint_once_per_arrival() {
    let pair = Pair::new();
    let poll = |worker: ucp_worker_h| {
        let mut eps: [ucp_stream_poll_ep_t; 4] = zeroed();
        // SAFETY: a live worker and room for 4 entries.
        let n = unsafe { ucp_stream_worker_poll(worker, eps.as_mut_ptr(), eps.len(), 0) };
        assert!(n >= 0, "ucp_stream_worker_poll failed: {n}");
        eps[..n as usize].iter().map(|e| e.ep).collect::<Vec<_>>()
    };
    assert!(poll(pair.b).is_empty());
    let data = *b"polled";
    // SAFETY: a live endpoint; `data` outlives the send, waited for below.
    let sent =
        unsafe { ucp_stream_send_nbx(pair.ab, data.as_ptr().cast(), data.len(), &send_param(None, 0)) };
    assert_eq!(pair.wait("the stream send", sent), UCS_OK);
    let mut ready = Vec::new();
    pair.until("a ready endpoint", || {
        ready = poll(pair.b);
        !ready.is_empty()
    });
    assert_eq!(ready, vec![pair.ba], "the endpoint the bytes arrived on");
    assert!(poll(pair.b).is_empty(), "reported twice for one arrival");
    let mut got = [0u8; 6];
    let mut length = 0usize;
    let param = with_flags(recv_param(None, 0), ucp_stream_recv_flags_t::UCP_STREAM_RECV_FLAG_WAITALL);
    // SAFETY: a live endpoint; `got` and `length` outlive the receive, waited for below.
    let recv =
        unsafe { ucp_stream_recv_nbx(pair.ba, got.as_mut_ptr().cast(), got.len(), &mut length, &param) };
    assert_eq!(pair.wait("the stream receive", recv), UCS_OK);
    assert_eq!(&got, &data);
    // SAFETY: a null worker is refused.
    assert!(unsafe { ucp_stream_worker_poll(null_mut(), null_mut(), 0, 0) } < 0);
}
