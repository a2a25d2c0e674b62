//! UCP requests as C sees them: `request_size` bytes that belong to the application, with this
//! library's [`Header`] just before them, as UCX lays its requests out.
//!
//! A request comes from its context's [`RequestPool`] (or is the caller's memory, with
//! `UCP_OP_ATTR_FIELD_REQUEST`). `request_init` runs once, when the pool first makes the memory;
//! a freed request goes back to the pool and is handed out again without `request_init`, and
//! `request_cleanup` runs when the context is cleaned up, as UCX does.
//!
//! Completion and release follow UCX's order: the callback runs first (while
//! `ucp_request_check_status` still says INPROGRESS), then the request is marked completed, and
//! whichever of completion and `ucp_request_free` comes second returns it to the pool. So a
//! callback may free its own request.

use std::alloc::Layout;
use std::ffi::c_void;
use std::sync::atomic::{AtomicI8, AtomicU32, Ordering};
use std::sync::Mutex;

use crate::bindings::*;
use crate::status;

/// Bytes this library keeps before the application's part of a request
/// (`ucp_context_attr_t::request_size` for requests the caller allocates).
pub const HEADER_SIZE: usize = 128;

/// Alignment of a request's memory.
const ALIGN: usize = 16;

/// The operation ended; the status is final.
const COMPLETED: u32 = 1 << 0;
/// The application gave the request back (`ucp_request_free` / `_release`).
const RELEASED: u32 = 1 << 1;
/// The completion callback is to run.
const CALLBACK: u32 = 1 << 2;
/// The caller's memory (`UCP_OP_ATTR_FIELD_REQUEST`): never returned to a pool.
const EXTERNAL: u32 = 1 << 3;

/// The callback a request runs at completion, by the form its operation was issued with.
#[derive(Clone, Copy)]
pub enum Cb {
    /// No callback.
    None,
    /// `ucp_send_nbx_callback_t`.
    SendNbx(unsafe extern "C" fn(*mut c_void, ucs_status_t::Type, *mut c_void)),
    /// `ucp_send_callback_t`.
    SendNb(unsafe extern "C" fn(*mut c_void, ucs_status_t::Type)),
    /// `ucp_tag_recv_nbx_callback_t`.
    TagRecvNbx(
        unsafe extern "C" fn(*mut c_void, ucs_status_t::Type, *const ucp_tag_recv_info_t, *mut c_void),
    ),
    /// `ucp_tag_recv_callback_t`.
    TagRecvNb(unsafe extern "C" fn(*mut c_void, ucs_status_t::Type, *mut ucp_tag_recv_info_t)),
    /// `ucp_stream_recv_nbx_callback_t` and `ucp_am_recv_data_nbx_callback_t` (same shape).
    LengthNbx(unsafe extern "C" fn(*mut c_void, ucs_status_t::Type, usize, *mut c_void)),
    /// `ucp_stream_recv_callback_t`.
    LengthNb(unsafe extern "C" fn(*mut c_void, ucs_status_t::Type, usize)),
}

/// What a completion reports.
#[derive(Clone, Copy, Default)]
pub struct Outcome {
    /// Bytes sent or received.
    pub length: usize,
    /// The sender's tag (tag receives).
    pub sender_tag: u64,
    /// The previous value at the target (fetching atomics).
    pub value: u64,
}

/// Work left to the completion of a receive into memory the transport could not write directly
/// (an IOV or generic datatype): copies the staged bytes out and may change the status.
pub type Finish = Box<dyn FnOnce(ucs_status_t::Type, &Outcome) -> ucs_status_t::Type + Send>;

/// This library's part of a request, [`HEADER_SIZE`] bytes before the application's.
#[repr(C)]
pub struct Header {
    flags: AtomicU32,
    status: AtomicI8,
    cb: Cb,
    user_data: *mut c_void,
    outcome: Outcome,
    finish: Option<Finish>,
    /// The operation's Rust request, kept for cancel until the request is recycled (its cell
    /// then goes back to the pool).
    op: Mutex<Option<zcx::ErasedRequest>>,
    pool: *const RequestPool,
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_SIZE);

/// A request handed to C: the address just past its header.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Req(*mut u8);

// SAFETY: a request is shared between the thread that issued it and the one that completes it;
// every field touched after issue is atomic or behind the `op` lock, and the rest is written
// before the operation is issued.
unsafe impl Send for Req {}

impl Req {
    /// The request C holds at `ptr`.
    ///
    /// # Safety
    /// `ptr` is a request this library returned and has not recycled.
    pub unsafe fn from_user(ptr: *mut c_void) -> Req {
        Req(ptr.cast())
    }

    /// The pointer C gets.
    pub fn user(self) -> *mut c_void {
        self.0.cast()
    }

    fn header(&self) -> &Header {
        // SAFETY: a `Req` is made only for memory with a written header just before it.
        unsafe { &*self.0.sub(HEADER_SIZE).cast::<Header>() }
    }

    #[allow(clippy::mut_from_ref)]
    fn header_mut(&self) -> &mut Header {
        // SAFETY: as `header`; called only by the one party that owns the non-atomic fields at
        // that moment (the issuer before issuing, the completer during completion).
        unsafe { &mut *self.0.sub(HEADER_SIZE).cast::<Header>() }
    }

    /// Keeps the Rust request of the operation, for `ucp_request_cancel`.
    pub fn keep_op(self, op: zcx::ErasedRequest) {
        *self.header().op.lock().unwrap_or_else(|e| e.into_inner()) = Some(op);
    }

    /// Completes the request: runs the finishing step and the callback, then marks it completed
    /// and recycles it if the application already released it.
    pub fn complete(self, status: ucs_status_t::Type, outcome: Outcome) {
        let header = self.header_mut();
        header.outcome = outcome;
        let status = match header.finish.take() {
            Some(finish) => finish(status, &outcome),
            None => status,
        };
        header.status.store(status, Ordering::Relaxed);
        if header.flags.load(Ordering::Acquire) & CALLBACK != 0 {
            let user = self.user();
            let data = header.user_data;
            let mut info = ucp_tag_recv_info_t { sender_tag: outcome.sender_tag, length: outcome.length };
            // SAFETY: the application gave these callbacks for this request; each gets the
            // arguments its C type takes.
            unsafe {
                match header.cb {
                    Cb::None => {}
                    Cb::SendNbx(f) => f(user, status, data),
                    Cb::SendNb(f) => f(user, status),
                    Cb::TagRecvNbx(f) => f(user, status, &info, data),
                    Cb::TagRecvNb(f) => f(user, status, &mut info),
                    Cb::LengthNbx(f) => f(user, status, outcome.length, data),
                    Cb::LengthNb(f) => f(user, status, outcome.length),
                }
            }
        }
        let before = self.header().flags.fetch_or(COMPLETED, Ordering::AcqRel);
        if before & RELEASED != 0 {
            self.recycle();
        }
    }

    /// A completion callback for the Rust operation, completing this request.
    pub fn rust_callback(self) -> zcx::RequestParams {
        zcx::RequestParams { callback: Some(self.callback()) }
    }

    /// The Rust operation's completion callback that completes this request.
    pub fn callback(self) -> zcx::Callback {
        // `user` is the request this callback was made for, which stays out of the pool until
        // its completion (this call) and its release have both happened.
        fn complete(user: usize, status: zcx::Status, info: &zcx::OpInfo) {
            Req(user as *mut u8).complete(
                status::ucs(status),
                Outcome { length: info.length, sender_tag: info.sender_tag, value: info.value },
            )
        }
        zcx::Callback::Plain(complete, self.0 as usize)
    }

    /// `ucp_request_check_status`.
    pub fn check_status(self) -> ucs_status_t::Type {
        let header = self.header();
        if header.flags.load(Ordering::Acquire) & COMPLETED != 0 {
            header.status.load(Ordering::Relaxed)
        } else {
            ucs_status_t::UCS_INPROGRESS
        }
    }

    /// What the completion reported (valid once completed).
    pub fn outcome(self) -> Outcome {
        self.header().outcome
    }

    /// `ucp_request_free` (`keep_callback` false) and `ucp_request_release` (true).
    pub fn release(self, keep_callback: bool) {
        let header = self.header();
        if !keep_callback {
            header.flags.fetch_and(!CALLBACK, Ordering::AcqRel);
        }
        let before = header.flags.fetch_or(RELEASED, Ordering::AcqRel);
        if before & COMPLETED != 0 {
            self.recycle();
        }
    }

    /// `ucp_request_cancel`.
    pub fn cancel(self) {
        let op = self.header().op.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(op) = op.as_ref() {
            op.cancel();
        }
    }

    /// Drops what the request held and returns it to its pool (a caller's request is left as is).
    pub fn recycle(self) {
        let header = self.header_mut();
        let op = header.op.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        drop(op);
        header.finish = None;
        if header.flags.load(Ordering::Relaxed) & EXTERNAL != 0 {
            return;
        }
        // SAFETY: a pooled request's pool outlives it (the context leaks its pool while requests
        // are out, see `RequestPool::destroy`).
        let pool = unsafe { &*header.pool };
        pool.put(self);
    }
}

/// How a new request is to complete.
pub struct Setup {
    /// The callback.
    pub cb: Cb,
    /// Its `user_data`.
    pub user_data: *mut c_void,
    /// Post-processing of a staged receive.
    pub finish: Option<Finish>,
}

impl Setup {
    /// A request with the send callback of `param`, if it has one.
    ///
    /// # Safety
    /// `param` is null or a valid `ucp_request_param_t`.
    pub unsafe fn send(param: *const ucp_request_param_t) -> Setup {
        // SAFETY: the caller's contract.
        let Some(p) = (unsafe { param.as_ref() }) else { return Setup::none() };
        // SAFETY: the union member for sends is `send`, read only when its bit is set.
        let cb = match (p.op_attr_mask & ucp_op_attr_t::UCP_OP_ATTR_FIELD_CALLBACK != 0, unsafe { p.cb.send })
        {
            (true, Some(f)) => Cb::SendNbx(f),
            _ => Cb::None,
        };
        Setup { cb, user_data: user_data(p), finish: None }
    }

    /// A request with a deprecated-form send callback (`ucp_send_callback_t`), if any.
    pub fn nb(cb: ucp_send_callback_t) -> Setup {
        Setup { cb: cb.map_or(Cb::None, Cb::SendNb), user_data: std::ptr::null_mut(), finish: None }
    }

    /// No callback.
    pub fn none() -> Setup {
        Setup { cb: Cb::None, user_data: std::ptr::null_mut(), finish: None }
    }
}

/// `param->user_data` when its bit is set.
pub fn user_data(p: &ucp_request_param_t) -> *mut c_void {
    if p.op_attr_mask & ucp_op_attr_t::UCP_OP_ATTR_FIELD_USER_DATA != 0 {
        p.user_data
    } else {
        std::ptr::null_mut()
    }
}

/// The op_attr_mask of `param` (0 for a null one).
///
/// # Safety
/// `param` is null or valid.
pub unsafe fn attr_mask(param: *const ucp_request_param_t) -> u32 {
    // SAFETY: the caller's contract.
    unsafe { param.as_ref() }.map_or(0, |p| p.op_attr_mask)
}

/// A context's requests: memory of [`HEADER_SIZE`] + `request_size` bytes, made once each and
/// reused.
pub struct RequestPool {
    user_size: usize,
    init: ucp_request_init_callback_t,
    cleanup: ucp_request_cleanup_callback_t,
    free: Mutex<Vec<usize>>,
    made: Mutex<Vec<usize>>,
}

impl RequestPool {
    /// A pool of requests with `user_size` application bytes each.
    pub fn new(
        user_size: usize,
        init: ucp_request_init_callback_t,
        cleanup: ucp_request_cleanup_callback_t,
    ) -> RequestPool {
        RequestPool { user_size, init, cleanup, free: Mutex::new(Vec::new()), made: Mutex::new(Vec::new()) }
    }

    fn layout(&self) -> Layout {
        Layout::from_size_align(HEADER_SIZE + self.user_size.max(1), ALIGN).expect("a request layout")
    }

    /// A request set up with `setup`, from the pool or, with `UCP_OP_ATTR_FIELD_REQUEST`, the
    /// caller's memory.
    ///
    /// # Safety
    /// `param` is null or valid; a caller's request has [`HEADER_SIZE`] writable bytes before it.
    pub unsafe fn take(&self, param: *const ucp_request_param_t, setup: Setup) -> Req {
        // SAFETY: the caller's contract.
        let external = unsafe { param.as_ref() }
            .filter(|p| {
                p.op_attr_mask & ucp_op_attr_t::UCP_OP_ATTR_FIELD_REQUEST != 0 && !p.request.is_null()
            })
            .map(|p| p.request.cast::<u8>());
        let (user, pool_flag) = match external {
            Some(user) => (user, EXTERNAL),
            None => (self.pop(), 0),
        };
        let callback = if matches!(setup.cb, Cb::None) { 0 } else { CALLBACK };
        let header = Header {
            flags: AtomicU32::new(pool_flag | callback),
            status: AtomicI8::new(ucs_status_t::UCS_INPROGRESS),
            cb: setup.cb,
            user_data: setup.user_data,
            outcome: Outcome::default(),
            finish: setup.finish,
            op: Mutex::new(None),
            pool: self,
        };
        // SAFETY: `user` has HEADER_SIZE bytes before it that hold no live header (a pooled
        // request's was dropped at recycling; a caller's request is the caller's to reuse).
        unsafe { user.sub(HEADER_SIZE).cast::<Header>().write(header) };
        Req(user)
    }

    fn pop(&self) -> *mut u8 {
        if let Some(user) = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return user as *mut u8;
        }
        let layout = self.layout();
        // SAFETY: the layout has a nonzero size.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        if base.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: within the allocation.
        let user = unsafe { base.add(HEADER_SIZE) };
        if let Some(init) = self.init {
            // SAFETY: the application's initialiser, on its `request_size` bytes.
            unsafe { init(user.cast()) };
        }
        self.made.lock().unwrap_or_else(|e| e.into_inner()).push(user as usize);
        user
    }

    fn put(&self, req: Req) {
        // SAFETY: the header was written by `take` and its owned fields emptied by `recycle`.
        unsafe { std::ptr::drop_in_place(req.0.sub(HEADER_SIZE).cast::<Header>()) };
        self.free.lock().unwrap_or_else(|e| e.into_inner()).push(req.0 as usize);
    }

    /// `ucp_cleanup`'s part: runs `request_cleanup` on every request and frees them, or, when
    /// some are still out, leaks the pool, since their completions will come back to it.
    pub fn destroy(pool: Box<RequestPool>) {
        let made = std::mem::take(&mut *pool.made.lock().unwrap_or_else(|e| e.into_inner()));
        let free_count = pool.free.lock().unwrap_or_else(|e| e.into_inner()).len();
        if free_count != made.len() {
            tracing::warn!(outstanding = made.len() - free_count, "ucp_cleanup with requests not released");
            *pool.made.lock().unwrap_or_else(|e| e.into_inner()) = made;
            Box::leak(pool);
            return;
        }
        let layout = pool.layout();
        for user in made {
            if let Some(cleanup) = pool.cleanup {
                // SAFETY: the application's cleanup, once per request it initialised.
                unsafe { cleanup(user as *mut c_void) };
            }
            // SAFETY: allocated in `pop` with this layout, HEADER_SIZE before `user`.
            unsafe { std::alloc::dealloc((user as *mut u8).sub(HEADER_SIZE), layout) };
        }
    }
}

/// A status as UCP returns it in place of a request pointer.
pub fn status_ptr(status: ucs_status_t::Type) -> ucs_status_ptr_t {
    status as isize as ucs_status_ptr_t
}

/// The status of a returned pointer when it is one (`UCS_PTR_IS_ERR`).
pub fn ptr_status(ptr: ucs_status_ptr_t) -> Option<ucs_status_t::Type> {
    let value = ptr as isize;
    (-100..=0).contains(&value).then_some(value as ucs_status_t::Type)
}

impl Req {
    /// Completes a request that is not handed to the application (the operation completed at
    /// once and UCP returns NULL): runs the finishing step only, then recycles it.
    pub fn finish_quietly(self, status: ucs_status_t::Type, outcome: Outcome) -> ucs_status_t::Type {
        let header = self.header_mut();
        header.outcome = outcome;
        let status = match header.finish.take() {
            Some(finish) => finish(status, &outcome),
            None => status,
        };
        if header.flags.load(Ordering::Relaxed) & EXTERNAL != 0 {
            // The caller's memory: it may still ask it (`ucp_request_test`), as Open MPI's
            // blocking receive does whatever the call returned.
            header.status.store(status, Ordering::Relaxed);
            header.flags.fetch_or(COMPLETED, Ordering::AcqRel);
        }
        self.recycle();
        status
    }
}

/// What an operation that completed at once returns, as UCP decides by operation kind.
pub enum Immediate<'a> {
    /// NULL (`UCS_OK`) unless `UCP_OP_ATTR_FLAG_NO_IMM_CMPL`, which gets the completed request
    /// with its callback run (sends, RMA, AM data).
    Null,
    /// NULL after `report` wrote what completed (the receive info or length), when `report` is
    /// given; otherwise the completed request, callback run (tag and stream receives).
    Report(Option<&'a mut dyn FnMut(&Outcome)>),
}

/// Issues an operation and returns what UCP returns: an error status, NULL, or a request from
/// `pool` set up by `setup`. A request is taken only when one is handed back (the operation did
/// not complete at once, or UCP's rules return a completed one) or given by the caller
/// (`UCP_OP_ATTR_FIELD_REQUEST`), so an operation that completes at once and returns NULL
/// touches no request at all.
///
/// # Safety
/// `param` is null or valid, with the layout `RequestPool::take` requires of a caller's request.
pub unsafe fn run<B: Send + 'static>(
    pool: &RequestPool,
    param: *const ucp_request_param_t,
    setup: Setup,
    immediate: Immediate<'_>,
    issue: impl FnOnce(zcx::RequestParams) -> zcx::Result<zcx::Request<B>>,
    outcome_of: impl FnOnce(&zcx::Completion<B>) -> Outcome,
) -> ucs_status_ptr_t {
    // SAFETY: the caller's contract.
    let mask = unsafe { attr_mask(param) };
    // A receive without `recv_info` returns its request even when it completed at once: taking
    // the request first costs nothing then, and gives the operation its callback when issued,
    // rather than through a second trip under the worker's lock once it is pending.
    if mask & ucp_op_attr_t::UCP_OP_ATTR_FIELD_REQUEST != 0 || matches!(immediate, Immediate::Report(None)) {
        // SAFETY: the caller's contract.
        return unsafe { run_in_request(pool, param, setup, immediate, issue, outcome_of) };
    }
    let request = match issue(zcx::RequestParams::default()) {
        Ok(request) => request,
        Err(status) => return status_ptr(status::ucs(status)),
    };
    if !request.completed_at_once() {
        // Pending when issued: UCP returns the request, whose callback runs from progress.
        // SAFETY: the caller's contract.
        let req = unsafe { pool.take(param, setup) };
        if request.set_callback(req.callback()).is_err() {
            // Its worker is gone, which the caller's own handle on it rules out.
            req.complete(ucs_status_t::UCS_ERR_CANCELED, Outcome::default());
            return req.user();
        }
        keep(req, request);
        return req.user();
    }
    let (status, outcome) = match request.try_take() {
        Ok(result) => result_parts(&result, outcome_of),
        Err(_) => unreachable!("a request completed at once is taken at once"),
    };
    if quiet(mask, immediate, &outcome) {
        return status_ptr(match setup.finish {
            Some(finish) => finish(status, &outcome),
            None => status,
        });
    }
    // SAFETY: the caller's contract.
    let req = unsafe { pool.take(param, setup) };
    req.complete(status, outcome);
    req.user()
}

/// Keeps the Rust request of an operation in progress with its C request, for cancel.
fn keep<B: Send + 'static>(req: Req, request: zcx::Request<B>) {
    if let Ok(erased) = request.into_erased() {
        req.keep_op(erased);
    }
}

/// A completed operation's status and what it reports.
fn result_parts<B>(
    result: &zcx::Result<zcx::Completion<B>>,
    outcome_of: impl FnOnce(&zcx::Completion<B>) -> Outcome,
) -> (ucs_status_t::Type, Outcome) {
    match result {
        Ok(completion) => (ucs_status_t::UCS_OK, outcome_of(completion)),
        Err(status) => (status::ucs(*status), Outcome::default()),
    }
}

/// Whether an operation that completed at once returns NULL (reporting what `immediate` says),
/// rather than the completed request.
fn quiet(mask: u32, immediate: Immediate<'_>, outcome: &Outcome) -> bool {
    match immediate {
        Immediate::Null => mask & ucp_op_attr_t::UCP_OP_ATTR_FLAG_NO_IMM_CMPL == 0,
        Immediate::Report(Some(report)) => {
            report(outcome);
            true
        }
        Immediate::Report(None) => false,
    }
}

/// [`run`] with the request set up before the operation is issued: the caller's
/// (`UCP_OP_ATTR_FIELD_REQUEST`), or a pooled one for an operation that returns its request even
/// when it completed at once. Completed even when UCP returns NULL: the caller may still ask its
/// own request (`ucp_request_test`), as Open MPI's blocking receive does whatever the call
/// returned.
///
/// # Safety
/// As [`run`].
unsafe fn run_in_request<B: Send + 'static>(
    pool: &RequestPool,
    param: *const ucp_request_param_t,
    setup: Setup,
    immediate: Immediate<'_>,
    issue: impl FnOnce(zcx::RequestParams) -> zcx::Result<zcx::Request<B>>,
    outcome_of: impl FnOnce(&zcx::Completion<B>) -> Outcome,
) -> ucs_status_ptr_t {
    // SAFETY: the caller's contract.
    let mask = unsafe { attr_mask(param) };
    // SAFETY: the caller's contract.
    let req = unsafe { pool.take(param, setup) };
    let request = match issue(req.rust_callback()) {
        Ok(request) => request,
        Err(status) => {
            req.recycle();
            return status_ptr(status::ucs(status));
        }
    };
    if !request.completed_at_once() {
        // Pending when issued: its callback completes the C request, now or from a later
        // progress (a cell may be done before its callback ran), so UCP returns the request.
        keep(req, request);
        return req.user();
    }
    match request.try_take() {
        Err(pending) => {
            keep(req, pending);
            req.user()
        }
        Ok(result) => {
            let (status, outcome) = result_parts(&result, outcome_of);
            if quiet(mask, immediate, &outcome) {
                return status_ptr(req.finish_quietly(status, outcome));
            }
            req.complete(status, outcome);
            req.user()
        }
    }
}
