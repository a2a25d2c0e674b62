//! `ucp_request_*`: the handle of an operation that did not complete at once.
//!
//! Every operation returns `Err(status)` when it failed at once, or a [`Request`] that is either
//! already complete (UCP's `NULL`/status return; no callback runs and nothing is allocated) or in
//! progress (UCP's request pointer). An in-progress request completes from `Worker::progress`,
//! which is also where its callback runs. Dropping a request is `ucp_request_free`: the operation
//! goes on, and the buffer it owns is dropped when it ends.

use std::cell::{RefCell, UnsafeCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context as TaskContext, Poll, Waker};

use crate::status::{Result, Status};

/// What an operation reports besides its status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpInfo {
    /// Bytes received (receives), or sent.
    pub length: usize,
    /// The sender's tag (`ucp_tag_recv_info_t::sender_tag`), for tag receives.
    pub sender_tag: u64,
    /// The previous value at the target, for fetching atomics.
    pub value: u64,
}

/// A completed operation: the buffer it owned, handed back, and what it reported.
#[derive(Debug)]
pub struct Completion<B> {
    /// The operation's buffer (`()` for operations without one).
    pub buf: B,
    /// Length, sender tag, fetched value.
    pub info: OpInfo,
}

/// A completion callback (`ucp_send_nbx_callback_t` & co). Runs from `Worker::progress`, once,
/// only for a request that did not complete at once.
pub enum Callback {
    /// Any closure.
    Boxed(BoxedCallback),
    /// A function and the word it gets (a callback and its `user_data`, as UCP takes them):
    /// nothing is allocated, which matters to callers issuing millions of operations a second.
    Plain(fn(usize, Status, &OpInfo), usize),
}

/// A completion callback that is any closure.
pub type BoxedCallback = Box<dyn FnOnce(Status, &OpInfo) + Send>;

impl Callback {
    /// Runs the callback.
    pub fn call(self, status: Status, info: &OpInfo) {
        match self {
            Callback::Boxed(f) => f(status, info),
            Callback::Plain(f, arg) => f(arg, status, info),
        }
    }
}

/// Per-operation parameters (the `ucp_request_param_t` fields that make sense in Rust).
#[derive(Default)]
pub struct RequestParams {
    /// `UCP_OP_ATTR_FIELD_CALLBACK`.
    pub callback: Option<Callback>,
}

impl RequestParams {
    /// Parameters with a completion callback.
    pub fn with_callback(callback: impl FnOnce(Status, &OpInfo) + Send + 'static) -> Self {
        RequestParams { callback: Some(Callback::Boxed(Box::new(callback))) }
    }

    /// Parameters with a completion callback that is a plain function, called with `arg`
    /// (UCP's callback and `user_data`); unlike [`RequestParams::with_callback`] this allocates
    /// nothing.
    pub fn with_fn(callback: fn(usize, Status, &OpInfo), arg: usize) -> Self {
        RequestParams { callback: Some(Callback::Plain(callback, arg)) }
    }
}

impl std::fmt::Debug for RequestParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestParams").field("callback", &self.callback.is_some()).finish()
    }
}

/// What `Request::cancel` must undo in the worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CancelTarget {
    /// Nothing: sends and RMA are not cancellable once issued (as in UCP).
    None,
    /// A posted tag or stream receive, by the raw id of its operation.
    Receive(u64),
}

/// What completing a request leaves to do once the worker's lock is released: user code (a
/// callback) and a waker, whose `wake` may run anything an executor does (including a call back
/// into this worker), so neither runs under the lock.
pub(crate) struct AfterUnlock {
    /// The callback to run from progress, with the status and info it reports.
    pub callback: Option<(Callback, Status, OpInfo)>,
    /// The waker a `Future::poll` registered.
    pub waker: Option<Waker>,
}

impl AfterUnlock {
    /// Nothing to do.
    pub const NOTHING: AfterUnlock = AfterUnlock { callback: None, waker: None };
}

/// Proof that the caller holds the lock of the worker that completes a request: the worker side
/// of a [`ReqCell`] is touched only by a caller that shows one.
///
/// Zero-sized, neither `Clone` nor `Copy`, and lent only by reference: a worker makes one, keeps
/// it inside the state its lock protects and never moves it out, so a `&WorkerLocked` lives no
/// longer than the lock guard it was reached through.
pub(crate) struct WorkerLocked {
    _private: (),
}

impl WorkerLocked {
    /// The token of one worker's lock.
    ///
    /// # Safety
    /// The caller keeps the token inside the state that worker's lock protects and never lets it
    /// out (no move out of the lock, no reference that outlives a guard), and completes the
    /// worker's request cells only under that lock.
    pub(crate) const unsafe fn new() -> WorkerLocked {
        WorkerLocked { _private: () }
    }
}

/// What a request needs of the worker that completes it. The worker implements it, so this
/// module names no worker type.
pub(crate) trait Completer: Send + Sync {
    /// `Worker::progress`, for [`Request::wait`].
    fn progress_once(self: Arc<Self>) -> usize;

    /// Runs `f` with the worker's lock held, for `Future::poll`'s look-then-register.
    fn with_lock(&self, f: &mut dyn FnMut(&WorkerLocked));

    /// `Request::cancel`: with the lock held, reads what to undo with `target` and undoes it.
    fn cancel_request(&self, target: &dyn Fn(&WorkerLocked) -> CancelTarget);

    /// Runs `callback` with `status` and `info` from the next progress, as a completion's.
    fn defer_callback(&self, callback: Callback, status: Status, info: OpInfo);
}

/// The worker's view of an in-progress request, without its buffer type.
pub(crate) trait OpSink: Send + Sync {
    /// Records the final status; returns what to run once the lock is released. The worker's
    /// lock is held (`held` proves it), which is what serialises completions of a request.
    fn complete(&self, held: &WorkerLocked, status: Status, info: OpInfo) -> AfterUnlock;
}

/// The shared state of an in-progress request: held by the [`Request`] and by the worker's record
/// of the operation.
///
/// No lock of its own. Two parties touch it, under two rules:
/// - the worker side (completion, cancel target, waker) only with the worker's lock held, so its
///   fields need no further synchronisation;
/// - the request's owner reads `done` (Acquire), and only once it is set reads the outcome and
///   takes the buffer, which the completer wrote (or never touches) before setting it (Release).
///
/// So a spinning waiter costs one load per check, and completing or taking a request costs no
/// atomic read-modify-write at all.
///
/// A cell its owner took the result of, and that nobody else holds any more, goes back to a small
/// per-thread pool for the next operation with the same buffer type (see [`pool`]): a
/// ping-pong's receive then costs no allocation, no free and none of the four reference-count
/// updates (the owner's drop, the cell's implicit weak reference, the worker's weak reference
/// dropped and taken again) that would otherwise sit between a message's arrival and the answer.
pub(crate) struct ReqCell<B> {
    /// Set (Release) once `outcome` holds the final status.
    done: AtomicBool,
    /// Final status and info: written by the completer before `done`, read after it.
    outcome: UnsafeCell<(Status, OpInfo)>,
    /// The operation's buffer: taken by the request's owner after `done`; the worker only ever
    /// uses the raw bytes it pointed at when the operation was issued.
    buf: UnsafeCell<Option<B>>,
    /// Worker side, under its lock.
    callback: UnsafeCell<Option<Callback>>,
    /// Worker side, under its lock: registered by `Future::poll`, taken by the completer.
    waker: UnsafeCell<Option<Waker>>,
    /// Worker side, under its lock: what `Request::cancel` must undo.
    cancel: UnsafeCell<CancelTarget>,
    /// Written only while the cell is unique (created, or taken from the pool); read by the owner.
    worker: UnsafeCell<Weak<dyn Completer>>,
    /// The address of `worker`'s worker, beside it: what a pooled cell is compared with to keep
    /// its weak reference, a thin pointer (the fat one's address needs its vtable to compute).
    worker_at: UnsafeCell<*const ()>,
}

// SAFETY: the cell moves a `B` (Send) and a callback and waker (Send) between threads; every
// field is accessed under the rules above, so no two threads race on one.
unsafe impl<B: Send> Send for ReqCell<B> {}
// SAFETY: shared access follows the rules above: worker-side fields only under the worker's lock
// (one thread at a time), `outcome`/`buf` handed over through `done` (Release/Acquire), and `buf`
// taken only by the single owner of the `Request` (the `Request` is not `Clone`).
unsafe impl<B: Send> Sync for ReqCell<B> {}

impl<B> ReqCell<B> {
    #[inline]
    fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// The worker that completes the operation.
    fn worker(&self) -> &Weak<dyn Completer> {
        // SAFETY: written only while the cell is unique (no other reference exists to read it).
        unsafe { &*self.worker.get() }
    }

    /// The final status once done.
    fn outcome(&self) -> Option<(Status, OpInfo)> {
        if !self.is_done() {
            return None;
        }
        // SAFETY: `done` is set (Acquire), so the completer wrote `outcome` and never writes it again.
        Some(unsafe { *self.outcome.get() })
    }
}

impl<B: Send + 'static> ReqCell<B> {
    pub(crate) fn new<W: Completer + 'static>(
        worker: &Arc<W>,
        buf: B,
        callback: Option<Callback>,
    ) -> Arc<ReqCell<B>> {
        ReqCell::for_worker(
            Arc::as_ptr(worker).cast(),
            || -> Weak<dyn Completer> { Arc::downgrade(worker) as Weak<W> },
            buf,
            callback,
        )
    }

    /// [`ReqCell::new`] for the worker at `worker`, whose weak reference `downgrade` makes (only
    /// when a pooled cell does not hold one to it already). Apart so that tests can make cells of
    /// no worker (`Weak::new`), which need no OS resources and so run under Miri (see
    /// `tests::cell`).
    #[inline(always)]
    fn for_worker(
        worker: *const (),
        downgrade: impl FnOnce() -> Weak<dyn Completer>,
        buf: B,
        callback: Option<Callback>,
    ) -> Arc<ReqCell<B>> {
        if let Some(cell) = pool::take::<B>() {
            // SAFETY: a pooled cell is unique (`pool::put` checked that no other reference was
            // left, and nothing can clone one while it is pooled), and it is not shared yet:
            // nobody else reads or writes any of its fields.
            unsafe {
                *cell.outcome.get() = (Status::InProgress, OpInfo::default());
                *cell.buf.get() = Some(buf);
                *cell.callback.get() = callback;
                *cell.waker.get() = None;
                *cell.cancel.get() = CancelTarget::None;
                if *cell.worker_at.get() != worker {
                    *cell.worker.get() = downgrade();
                    *cell.worker_at.get() = worker;
                }
            }
            cell.done.store(false, Ordering::Relaxed);
            return cell;
        }
        Arc::new(ReqCell {
            done: AtomicBool::new(false),
            outcome: UnsafeCell::new((Status::InProgress, OpInfo::default())),
            buf: UnsafeCell::new(Some(buf)),
            callback: UnsafeCell::new(callback),
            waker: UnsafeCell::new(None),
            cancel: UnsafeCell::new(CancelTarget::None),
            worker: UnsafeCell::new(downgrade()),
            worker_at: UnsafeCell::new(worker),
        })
    }

    /// Records what cancelling the request must undo. `held`: the worker's lock.
    pub(crate) fn set_cancel(&self, _held: &WorkerLocked, target: CancelTarget) {
        // SAFETY: the worker's lock is held (`_held`).
        unsafe { self.set_cancel_locked(target) };
    }

    /// [`ReqCell::set_cancel`] with the lock proven by the caller.
    ///
    /// # Safety
    /// The caller holds the lock of the worker that completes the cell.
    #[inline(always)]
    unsafe fn set_cancel_locked(&self, target: CancelTarget) {
        // SAFETY: worker-side field, and the caller holds the worker's lock.
        unsafe { *self.cancel.get() = target };
    }

    /// What cancelling the request must undo. `held`: the worker's lock.
    fn cancel_target(&self, _held: &WorkerLocked) -> CancelTarget {
        // SAFETY: the worker's lock is held (`_held`).
        unsafe { self.cancel_target_locked() }
    }

    /// [`ReqCell::cancel_target`] with the lock proven by the caller.
    ///
    /// # Safety
    /// The caller holds the lock of the worker that completes the cell.
    #[inline(always)]
    unsafe fn cancel_target_locked(&self) -> CancelTarget {
        // SAFETY: worker-side field, read with the worker's lock held (the caller's contract).
        unsafe { *self.cancel.get() }
    }

    /// The owner's look at a pending cell under the worker's lock, for `Future::poll`: the result
    /// when done, else `waker` is registered for the completion to wake. Under the lock there is
    /// no window between the two: a completion either came before this call or comes after it
    /// and finds the waker.
    ///
    /// # Safety
    /// The caller is the request's single owner and holds the lock of the worker that completes
    /// the cell.
    #[inline(always)]
    unsafe fn take_or_register(&self, waker: &Waker) -> Option<Result<Completion<B>>> {
        if let Some(result) = self.take() {
            return Some(result);
        }
        // SAFETY: worker-side field, written with the worker's lock held (the caller's contract).
        unsafe { *self.waker.get() = Some(waker.clone()) };
        None
    }

    /// Takes the result once done. Called by the request's single owner only.
    #[inline]
    fn take(&self) -> Option<Result<Completion<B>>> {
        let (status, info) = self.outcome()?;
        // SAFETY: done, so the worker no longer has any claim on `buf`, and only the request's
        // owner (the caller, holding the `Request` by value or by `&mut`) touches it.
        let buf = unsafe { (*self.buf.get()).take() };
        Some(match (status, buf) {
            (Status::Ok, Some(buf)) => Ok(Completion { buf, info }),
            (Status::Ok, None) => Err(Status::InvalidParam),
            (status, _) => Err(status),
        })
    }
}

impl<B: Send + 'static> OpSink for ReqCell<B> {
    fn complete(&self, _held: &WorkerLocked, status: Status, info: OpInfo) -> AfterUnlock {
        // SAFETY: the worker's lock is held (`_held`).
        unsafe { self.complete_locked(status, info) }
    }
}

impl<B> ReqCell<B> {
    /// [`OpSink::complete`] with the lock proven by the caller: records the final status (the
    /// first one only) and returns the registered waker and the callback, for the caller to run
    /// once the lock is released.
    ///
    /// # Safety
    /// The caller holds the lock of the worker that completes the cell.
    #[inline(always)]
    unsafe fn complete_locked(&self, status: Status, info: OpInfo) -> AfterUnlock {
        // Completions run under the worker's lock only, so this check and the writes below are
        // not raced by another completer.
        if self.done.load(Ordering::Relaxed) {
            return AfterUnlock::NOTHING;
        }
        // SAFETY: not done yet, so the owner does not read `outcome`; worker-side fields are ours
        // under the lock (the caller's contract).
        let (waker, callback) = unsafe {
            *self.outcome.get() = (status, info);
            ((*self.waker.get()).take(), (*self.callback.get()).take())
        };
        self.done.store(true, Ordering::Release);
        AfterUnlock { callback: callback.map(|cb| (cb, status, info)), waker }
    }
}

enum Inner<B> {
    /// Completed when issued; not yet taken.
    Ready(Completion<B>),
    /// The completion was taken (by a `Future` poll that returned it).
    Taken,
    Pending(Arc<ReqCell<B>>),
}

/// An operation's handle (`ucs_status_ptr_t` that is a request, or an immediate completion).
///
/// Also a [`Future`] resolving to the completion; something must progress the worker meanwhile (a
/// progress thread, or the caller).
pub struct Request<B> {
    inner: Inner<B>,
}

impl<B: Send + 'static> Request<B> {
    #[inline]
    pub(crate) fn ready(buf: B, info: OpInfo) -> Request<B> {
        Request { inner: Inner::Ready(Completion { buf, info }) }
    }

    pub(crate) fn pending(cell: Arc<ReqCell<B>>) -> Request<B> {
        Request { inner: Inner::Pending(cell) }
    }

    /// True when the operation completed when it was issued (UCP returned `UCS_OK`, not a
    /// request).
    pub fn completed_at_once(&self) -> bool {
        matches!(self.inner, Inner::Ready(_) | Inner::Taken)
    }

    /// Sets the completion callback of a request that did not complete at once and was issued
    /// without one: it runs from progress, once, as one given at issue does (also when the
    /// operation completed meanwhile). For a caller (the C library) that sets up what a
    /// completion needs only for operations that did not complete at once. Gives the callback
    /// back for a request that completed at once, or whose worker is gone.
    pub fn set_callback(&self, callback: Callback) -> std::result::Result<(), Callback> {
        let Inner::Pending(cell) = &self.inner else { return Err(callback) };
        let Some(worker) = cell.worker().upgrade() else { return Err(callback) };
        let mut callback = Some(callback);
        worker.with_lock(&mut |_held| {
            // Under the worker's lock, which every completion holds: the cell is either done or
            // its completion will find the callback.
            if !cell.is_done() {
                // SAFETY: worker-side field, written with the worker's lock held.
                unsafe { *cell.callback.get() = callback.take() };
            }
        });
        if let (Some(callback), Some((status, info))) = (callback, cell.outcome()) {
            worker.defer_callback(callback, status, info);
        }
        Ok(())
    }

    /// `ucp_request_check_status`: `InProgress`, or the final status.
    pub fn status(&self) -> Status {
        match &self.inner {
            Inner::Ready(_) => Status::Ok,
            Inner::Taken => Status::InvalidParam,
            Inner::Pending(cell) => cell.outcome().map_or(Status::InProgress, |(status, _)| status),
        }
    }

    /// True once the operation ended, successfully or not.
    pub fn is_done(&self) -> bool {
        self.status() != Status::InProgress
    }

    /// `ucp_request_cancel`: an unmatched tag or stream receive completes with `CANCELED` and its
    /// buffer untouched; other operations are not affected (as in UCP).
    pub fn cancel(&self) {
        if let Inner::Pending(cell) = &self.inner {
            cell.cancel_pending();
        }
    }

    /// The request of an operation still in progress, with its buffer type erased (see
    /// [`ErasedRequest`]); a request that completed at once comes back.
    pub fn into_erased(self) -> std::result::Result<ErasedRequest, Request<B>> {
        match self.inner {
            Inner::Pending(cell) => Ok(ErasedRequest { cell: Some(cell) }),
            inner => Err(Request { inner }),
        }
    }

    /// The result of a completed operation, or the request back while it is in progress.
    // Inline with only the look at `done` for a pending request: an immediate completion is then
    // taken apart where it was made (no pass through memory), and a caller spinning on a pending
    // one makes no call per look; taking a completed cell is out of line.
    #[inline(always)]
    pub fn try_take(self) -> std::result::Result<Result<Completion<B>>, Request<B>> {
        match self.inner {
            Inner::Ready(completion) => Ok(Ok(completion)),
            Inner::Taken => Ok(Err(Status::InvalidParam)),
            Inner::Pending(cell) if cell.is_done() => Ok(Request::take_done(cell)),
            Inner::Pending(cell) => Err(Request { inner: Inner::Pending(cell) }),
        }
    }

    /// The result of a completed cell, which then goes back to the pool.
    #[inline(never)]
    fn take_done(cell: Arc<ReqCell<B>>) -> Result<Completion<B>> {
        let result = cell.take().expect("a done cell has its outcome");
        pool::put(cell);
        result
    }

    /// Progresses the worker until the operation completes, and returns its result.
    ///
    /// Returns `Err(CANCELED)` if the worker is gone before it completes.
    pub fn wait(self) -> Result<Completion<B>> {
        let mut request = self;
        loop {
            request = match request.try_take() {
                Ok(result) => return result,
                Err(request) => request,
            };
            let Inner::Pending(cell) = &request.inner else { unreachable!("ready requests return above") };
            match cell.worker().upgrade() {
                // No `pause` of its own between calls: a waiting caller's skipped call runs the
                // worker's spin-wait barrier (see `worker::spin_wait`).
                Some(worker) => {
                    worker.progress_once();
                }
                None => return Err(Status::Canceled),
            }
        }
    }
}

impl<B: Send + 'static> Unpin for Request<B> {}

impl<B: Send + 'static> Future for Request<B> {
    type Output = Result<Completion<B>>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.inner {
            Inner::Ready(_) | Inner::Taken => match std::mem::replace(&mut this.inner, Inner::Taken) {
                Inner::Ready(completion) => Poll::Ready(Ok(completion)),
                _ => Poll::Ready(Err(Status::InvalidParam)),
            },
            Inner::Pending(cell) => {
                if let Some(result) = cell.take() {
                    return Poll::Ready(result);
                }
                let Some(worker) = cell.worker().upgrade() else {
                    // No worker left to complete it; it may have completed just before.
                    return Poll::Ready(cell.take().unwrap_or(Err(Status::Canceled)));
                };
                // Completion happens under the worker's lock: either it already did, or it will
                // find the waker.
                let mut result = None;
                worker.with_lock(&mut |_held| {
                    // SAFETY: we own the request, and the worker's lock is held (`_held`).
                    result = unsafe { cell.take_or_register(cx.waker()) };
                });
                match result {
                    Some(result) => Poll::Ready(result),
                    None => Poll::Pending,
                }
            }
        }
    }
}

impl<B> std::fmt::Debug for Request<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = match &self.inner {
            Inner::Ready(_) => Status::Ok,
            Inner::Taken => Status::InvalidParam,
            Inner::Pending(cell) => cell.outcome().map_or(Status::InProgress, |(status, _)| status),
        };
        f.debug_struct("Request").field("status", &status).finish()
    }
}

/// Per-thread reuse of request cells whose operation ended and was taken by its owner.
/// A pending operation's [`Request`] with its buffer type erased, for a caller that keeps one
/// beside a handle of its own (the C library, one per C request) and never takes its completion
/// through it: it can cancel the operation, and when it is dropped after the operation
/// completed, the buffer goes and the cell returns to this thread's pool as
/// [`Request::try_take`] returns it. Made without allocating: it is the request's own
/// reference to its cell.
pub struct ErasedRequest {
    cell: Option<Arc<dyn ErasedCell>>,
}

impl ErasedRequest {
    /// `ucp_request_cancel`, as [`Request::cancel`].
    pub fn cancel(&self) {
        if let Some(cell) = &self.cell {
            cell.cancel_pending();
        }
    }
}

impl Drop for ErasedRequest {
    fn drop(&mut self) {
        if let Some(cell) = self.cell.take() {
            cell.release();
        }
    }
}

/// What an [`ErasedRequest`] does with its cell, whatever the buffer type.
trait ErasedCell: Send + Sync {
    fn cancel_pending(&self);
    fn release(self: Arc<Self>);
}

impl<B: Send + 'static> ErasedCell for ReqCell<B> {
    fn cancel_pending(&self) {
        if self.is_done() {
            return;
        }
        if let Some(worker) = self.worker().upgrade() {
            worker.cancel_request(&|held| self.cancel_target(held));
        }
    }

    fn release(self: Arc<Self>) {
        // A cell still in progress stays with its worker, which frees it once it completes.
        if self.is_done() {
            drop(self.take());
            pool::put(self);
        }
    }
}

mod pool {
    use super::*;
    use std::any::TypeId;

    /// Cells kept per thread, of any buffer types together. A ping-pong needs one or two; a
    /// window of operations taken in a burst beyond this frees the rest as before.
    const MAX: usize = 8;

    /// A pooled `Arc<ReqCell<B>>` as a raw pointer, with the `B` it was made for and how to free it.
    struct Pooled {
        ty: TypeId,
        cell: *const (),
        free: unsafe fn(*const ()),
    }

    impl Drop for Pooled {
        fn drop(&mut self) {
            // SAFETY: `cell` came from `Arc::into_raw` of the cell type `free` was made for, and
            // this entry owns that reference.
            unsafe { (self.free)(self.cell) }
        }
    }

    /// Drops the pooled reference `cell` to an `Arc<ReqCell<B>>`.
    ///
    /// # Safety
    /// `cell` came from `Arc::<ReqCell<B>>::into_raw` and the caller owns that reference.
    unsafe fn free<B: Send + 'static>(cell: *const ()) {
        // SAFETY: the function's contract.
        drop(unsafe { Arc::from_raw(cell.cast::<ReqCell<B>>()) });
    }

    thread_local! {
        static CELLS: RefCell<Vec<Pooled>> = const { RefCell::new(Vec::new()) };
    }

    /// A pooled cell for buffers of type `B`, most recently pooled first.
    #[inline]
    pub(super) fn take<B: Send + 'static>() -> Option<Arc<ReqCell<B>>> {
        let ty = TypeId::of::<B>();
        let entry = CELLS
            .try_with(|cells| {
                let mut cells = cells.borrow_mut();
                let at = cells.iter().rposition(|entry| entry.ty == ty)?;
                Some(cells.swap_remove(at))
            })
            .ok()
            .flatten()?;
        let cell = entry.cell.cast::<ReqCell<B>>();
        std::mem::forget(entry);
        // SAFETY: an entry of type id `B` holds the reference `Arc::<ReqCell<B>>::into_raw`
        // gave, which the forgotten entry no longer owns.
        Some(unsafe { Arc::from_raw(cell) })
    }

    /// Keeps `cell`, whose result its owner just took, for reuse if nothing else holds it: the
    /// worker dropped its reference when it completed the operation (when the completion ran on
    /// another thread, it may not have yet; then the cell is simply freed).
    #[inline(never)]
    pub(super) fn put<B: Send + 'static>(cell: Arc<ReqCell<B>>) {
        // Plain loads: with the only strong reference ours and no weak one (none is ever made),
        // no other thread can make a new one.
        if Arc::strong_count(&cell) != 1 || Arc::weak_count(&cell) != 0 {
            return;
        }
        // Pairs with the Release decrement of the worker's reference: its last accesses to the
        // cell happen before our next writes to it.
        fence(Ordering::Acquire);
        let entry = Pooled { ty: TypeId::of::<B>(), cell: Arc::into_raw(cell).cast(), free: free::<B> };
        let _ = CELLS.try_with(|cells| {
            let mut cells = cells.borrow_mut();
            if cells.len() < MAX {
                cells.push(entry);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::WorkerShared;
    use crate::{Context, Features, WorkerParams};

    fn completed<B: Send + 'static>(worker: &crate::Worker, cell: &Arc<ReqCell<B>>) {
        let core = worker.shared.lock();
        let after = cell.complete(core.st.held(), Status::Ok, OpInfo { length: 3, ..OpInfo::default() });
        assert!(after.callback.is_none() && after.waker.is_none());
    }

    /// A waker may do anything an executor does, including call back into the worker, so the
    /// completion leaves it for after the lock, as it does callbacks.
    #[test]
    #[cfg_attr(miri, ignore = "a real worker needs io_uring, memfd and eventfd, which Miri cannot run")]
    fn a_completion_wakes_its_future_only_after_the_lock_is_released() {
        struct LockProbe {
            worker: Arc<WorkerShared>,
            woken_under_lock: std::sync::Mutex<Vec<bool>>,
        }
        impl std::task::Wake for LockProbe {
            fn wake(self: Arc<Self>) {
                self.woken_under_lock.lock().unwrap().push(self.worker.is_locked());
            }
        }
        let ctx = Context::with_features(Features::TAG).unwrap();
        let worker = ctx.create_worker(&WorkerParams::default()).unwrap();
        let probe =
            Arc::new(LockProbe { worker: Arc::clone(&worker.shared), woken_under_lock: Default::default() });
        let waker = Waker::from(Arc::clone(&probe));
        let cell = ReqCell::new(&worker.shared, 7u8, None);
        let mut request = Request::pending(Arc::clone(&cell));
        let mut cx = TaskContext::from_waker(&waker);
        assert!(Pin::new(&mut request).poll(&mut cx).is_pending());
        {
            let mut core = worker.shared.lock();
            let sink: Arc<dyn OpSink> = cell;
            core.st.complete_sink(&sink, Status::Ok, OpInfo::default());
        }
        worker.progress();
        assert_eq!(*probe.woken_under_lock.lock().unwrap(), vec![false], "woken once, outside the lock");
        assert!(matches!(Pin::new(&mut request).poll(&mut cx), Poll::Ready(Ok(_))));
    }

    /// A taken cell nobody else holds is reused, fresh, for the next operation of its buffer
    /// type; another buffer type gets its own; a cell still held elsewhere is not pooled.
    #[test]
    #[cfg_attr(miri, ignore = "a real worker needs io_uring, memfd and eventfd, which Miri cannot run")]
    fn taken_cells_are_reused_only_when_unique() {
        let ctx = Context::with_features(Features::TAG).unwrap();
        let worker = ctx.create_worker(&WorkerParams::default()).unwrap();
        let cell = ReqCell::new(&worker.shared, vec![1u8, 2, 3], None);
        let first = Arc::as_ptr(&cell);
        completed(&worker, &cell);
        let done = Request::pending(cell).try_take().map_err(|_| ()).unwrap().unwrap();
        assert_eq!((done.buf, done.info.length), (vec![1, 2, 3], 3));

        let other_type = ReqCell::new(&worker.shared, [0u8; 4], None);
        assert_ne!(Arc::as_ptr(&other_type).cast::<()>(), first.cast::<()>());

        let again = ReqCell::new(&worker.shared, vec![9u8], None);
        assert_eq!(Arc::as_ptr(&again), first, "the taken cell is reused");
        let request = Request::pending(again.clone());
        assert_eq!(request.status(), Status::InProgress, "a reused cell starts afresh");
        completed(&worker, &again);
        // Still held (as the worker would while finishing a completion on another thread).
        let done = request.try_take().map_err(|_| ()).unwrap().unwrap();
        assert_eq!(done.buf, vec![9]);
        let next = ReqCell::new(&worker.shared, vec![7u8], None);
        assert_ne!(Arc::as_ptr(&next), first, "a cell still referenced is not reused");
        drop(again);
    }

    /// Waits on other threads end with CANCELED once the application drops its worker, and
    /// nothing ends them before.
    /// An erased request drops its buffer and returns its cell to the pool once the operation
    /// completed; one dropped while in progress leaves the cell to the worker. A request done at
    /// once is not erased.
    #[test]
    #[cfg_attr(miri, ignore = "a real worker needs io_uring, memfd and eventfd, which Miri cannot run")]
    fn an_erased_request_returns_its_completed_cell_to_the_pool() {
        let ctx = Context::with_features(Features::TAG).unwrap();
        let worker = ctx.create_worker(&WorkerParams::default()).unwrap();
        let buf = Arc::new(5u8);
        let cell = ReqCell::new(&worker.shared, Arc::clone(&buf), None);
        let first = Arc::as_ptr(&cell);
        let erased = Request::pending(Arc::clone(&cell)).into_erased().map_err(|_| ()).expect("pending");
        completed(&worker, &cell);
        drop(cell);
        drop(erased);
        assert_eq!(Arc::strong_count(&buf), 1, "the buffer went with the erased request");
        let again = ReqCell::new(&worker.shared, Arc::new(6u8), None);
        assert_eq!(Arc::as_ptr(&again), first, "the cell was pooled");

        let in_progress =
            Request::pending(Arc::clone(&again)).into_erased().map_err(|_| ()).expect("pending");
        drop(in_progress);
        assert_eq!(Arc::strong_count(&again), 1, "the worker's reference stays, the request's went");
        let next = ReqCell::new(&worker.shared, Arc::new(7u8), None);
        assert_ne!(Arc::as_ptr(&next), first, "a cell in progress is not pooled");
        drop(again);

        assert!(Request::ready(1u8, OpInfo::default()).into_erased().is_err());
    }

    /// An erased tag receive can still be cancelled, and completes CANCELED.
    #[test]
    #[cfg_attr(miri, ignore = "a real worker needs io_uring, memfd and eventfd, which Miri cannot run")]
    fn an_erased_receive_can_be_cancelled() {
        let ctx = Context::with_features(Features::TAG).unwrap();
        let worker = ctx.create_worker(&WorkerParams::default()).unwrap();
        let ended = Arc::new(std::sync::Mutex::new(None));
        let seen = Arc::clone(&ended);
        let params = RequestParams::with_callback(move |status, _| *seen.lock().unwrap() = Some(status));
        let recv = worker.tag_recv(vec![0u8; 8], 3, u64::MAX, params).unwrap();
        let erased = recv.into_erased().map_err(|_| ()).expect("a receive with nothing sent waits");
        erased.cancel();
        for _ in 0..100 {
            worker.progress();
            if ended.lock().unwrap().is_some() {
                break;
            }
        }
        assert_eq!(*ended.lock().unwrap(), Some(Status::Canceled));
        drop(erased);
    }

    #[test]
    #[cfg_attr(miri, ignore = "a real worker needs io_uring, memfd and eventfd, which Miri cannot run")]
    fn waits_end_canceled_when_the_application_drops_the_worker() {
        let ctx = Context::with_features(Features::TAG).unwrap();
        let worker = ctx.create_worker(&WorkerParams::default()).unwrap();
        let (ended, endings) = std::sync::mpsc::channel();
        let waiters: Vec<_> = (0..2u64)
            .map(|tag| {
                let recv = worker.tag_recv(vec![0u8; 8], tag, u64::MAX, RequestParams::default()).unwrap();
                let ended = ended.clone();
                std::thread::spawn(move || ended.send(recv.wait().err()).unwrap())
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(100));
        if let Ok(early) = endings.try_recv() {
            panic!("a wait ended while the worker was held: {early:?}");
        }
        drop(worker);
        for _ in 0..waiters.len() {
            let status = endings.recv_timeout(std::time::Duration::from_secs(10)).expect("the wait ended");
            assert_eq!(status, Some(Status::Canceled));
        }
        for waiter in waiters {
            waiter.join().unwrap();
        }
    }

    /// The cell's own protocol, with no worker: a `Mutex` stands in for the worker's lock (all
    /// the cell's worker side relies on) and holds the callbacks completions return, which run
    /// after it is released as `progress` runs them. Needing no OS resources, these run under
    /// Miri (`scripts/sanitizers.sh`), whose race detector and aliasing checks watch the
    /// `UnsafeCell` fields and the orderings that hand them between threads.
    mod cell {
        use super::*;
        use std::sync::atomic::AtomicUsize;
        use std::sync::Mutex;
        use std::task::Wake;

        /// Rounds of each race: a few under Miri (slow, but it varies the interleaving itself),
        /// more natively.
        const ROUNDS: usize = if cfg!(miri) { 20 } else { 500 };

        type Deferred = Mutex<Vec<(Callback, Status, OpInfo)>>;

        /// The type of a detached cell's worker, of which there is none: its weak reference
        /// never upgrades, so nothing calls it.
        struct NoWorker;

        impl Completer for NoWorker {
            fn progress_once(self: Arc<Self>) -> usize {
                unreachable!("a detached cell's worker never upgrades")
            }

            fn with_lock(&self, _: &mut dyn FnMut(&WorkerLocked)) {
                unreachable!("a detached cell's worker never upgrades")
            }

            fn cancel_request(&self, _: &dyn Fn(&WorkerLocked) -> CancelTarget) {
                unreachable!("a detached cell's worker never upgrades")
            }

            fn defer_callback(&self, _: Callback, _: Status, _: OpInfo) {
                unreachable!("a detached cell's worker never upgrades")
            }
        }

        /// A cell of no worker: `Request::cancel` and `wait` see the worker gone.
        fn detached<B: Send + 'static>(buf: B, callback: Option<Callback>) -> Arc<ReqCell<B>> {
            ReqCell::for_worker(
                std::ptr::null(),
                || -> Weak<dyn Completer> { Weak::<NoWorker>::new() },
                buf,
                callback,
            )
        }

        /// The worker completing `cell` under its lock; true when this was the completion (the
        /// first one).
        fn complete<B: Send + 'static>(
            lock: &Deferred,
            cell: &ReqCell<B>,
            status: Status,
            info: OpInfo,
        ) -> bool {
            let mut deferred = lock.lock().unwrap();
            let first = !cell.is_done();
            // SAFETY: the stand-in worker lock is held.
            let after = unsafe { cell.complete_locked(status, info) };
            deferred.extend(after.callback);
            drop(deferred);
            // As the worker does: the waker runs once the lock is released.
            if let Some(waker) = after.waker {
                waker.wake();
            }
            first
        }

        /// Runs the queued callbacks (after the lock, as `progress` does); how many ran.
        fn run_callbacks(lock: &Deferred) -> usize {
            let callbacks = std::mem::take(&mut *lock.lock().unwrap());
            let n = callbacks.len();
            for (callback, status, info) in callbacks {
                callback.call(status, &info);
            }
            n
        }

        /// A callback recording every status it is called with.
        fn recorder() -> (Arc<Mutex<Vec<Status>>>, Callback) {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let record = Arc::clone(&seen);
            (seen, Callback::Boxed(Box::new(move |status, _: &OpInfo| record.lock().unwrap().push(status))))
        }

        /// A buffer counting its drops: an operation's buffer must be dropped exactly once.
        struct Counted(Arc<AtomicUsize>);

        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }

        /// A waker counting its wakes.
        #[derive(Default)]
        struct CountWakes(AtomicUsize);

        impl Wake for CountWakes {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }

        fn length(n: usize) -> OpInfo {
            OpInfo { length: n, ..OpInfo::default() }
        }

        /// The owner spinning on `try_take`, as a caller of a progress thread's worker does.
        fn spin_take<B: Send + 'static>(mut request: Request<B>) -> Result<Completion<B>> {
            loop {
                request = match request.try_take() {
                    Ok(result) => return result,
                    Err(request) => request,
                };
                std::thread::yield_now();
            }
        }

        /// Only the first completion counts: its status and info are what the owner takes, its
        /// callback is the only one, and the buffer comes back whole.
        #[test]
        fn a_cell_completes_once_and_hands_back_its_buffer() {
            let lock = Deferred::default();
            let (seen, callback) = recorder();
            let cell = detached(vec![1u8, 2, 3], Some(callback));
            let request = Request::pending(Arc::clone(&cell));
            assert_eq!(request.status(), Status::InProgress);
            let request = request.try_take().expect_err("not done yet");
            assert!(complete(&lock, &cell, Status::Ok, length(3)));
            assert!(!complete(&lock, &cell, Status::Canceled, length(9)), "completed twice");
            assert_eq!(request.status(), Status::Ok);
            assert_eq!(run_callbacks(&lock), 1);
            assert_eq!(*seen.lock().unwrap(), [Status::Ok]);
            drop(cell);
            let done = request.try_take().map_err(|_| ()).unwrap().unwrap();
            assert_eq!((done.buf, done.info), (vec![1, 2, 3], length(3)));
        }

        /// A completion on the worker's thread while the owner spins on another: the outcome
        /// and the buffer, written before `done`, are what the owner reads after it. A cell the
        /// worker let go of by then goes to the owner's pool, and the next operation reuses it
        /// (every other round waits for that; otherwise the owner may take the result first,
        /// and the cell still held is freed instead).
        #[test]
        fn a_completion_on_another_thread_hands_the_buffer_over() {
            let lock = Deferred::default();
            let mut last: Option<*const ReqCell<Vec<u8>>> = None;
            for round in 0..ROUNDS {
                let cell = detached(vec![round as u8; 40], None);
                if let Some(last) = last {
                    assert_eq!(Arc::as_ptr(&cell), last, "round {round}: a unique taken cell was not reused");
                }
                let wait_for_worker = round % 2 == 1;
                last = wait_for_worker.then_some(Arc::as_ptr(&cell));
                let request = Request::pending(Arc::clone(&cell));
                let gone = AtomicBool::new(false);
                let done = std::thread::scope(|scope| {
                    scope.spawn(|| {
                        assert!(complete(&lock, &cell, Status::Ok, length(round)));
                        // The worker's reference goes when it is done with the operation.
                        drop(cell);
                        gone.store(true, Ordering::Release);
                    });
                    while wait_for_worker && !gone.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    spin_take(request)
                })
                .unwrap();
                assert_eq!((done.buf, done.info), (vec![round as u8; 40], length(round)));
            }
        }

        /// A request dropped (`ucp_request_free`) while the worker completes it on another
        /// thread: the operation ends normally, its callback runs once, and its buffer is
        /// dropped exactly once, by whichever side lets go last.
        #[test]
        fn a_request_dropped_while_it_completes_drops_its_buffer_once() {
            let lock = Deferred::default();
            for _ in 0..ROUNDS {
                let drops = Arc::new(AtomicUsize::new(0));
                let (seen, callback) = recorder();
                let cell = detached(Counted(Arc::clone(&drops)), Some(callback));
                let request = Request::pending(Arc::clone(&cell));
                std::thread::scope(|scope| {
                    scope.spawn(|| {
                        assert!(complete(&lock, &cell, Status::Ok, length(1)));
                        drop(cell);
                    });
                    drop(request);
                });
                assert_eq!(drops.load(Ordering::SeqCst), 1);
                assert_eq!(run_callbacks(&lock), 1);
                assert_eq!(*seen.lock().unwrap(), [Status::Ok]);
            }
            // Dropped and never completed: the buffer goes with the worker's reference.
            let drops = Arc::new(AtomicUsize::new(0));
            let cell = detached(Counted(Arc::clone(&drops)), None);
            drop(Request::pending(Arc::clone(&cell)));
            assert_eq!(drops.load(Ordering::SeqCst), 0, "dropped while the worker holds the operation");
            drop(cell);
            assert_eq!(drops.load(Ordering::SeqCst), 1);
        }

        /// `Request::cancel` against a match on the worker's thread, each under the worker's
        /// lock as in the worker, where a posted receive is completed by whichever of the two
        /// takes it out of the matcher: exactly one of them completes the request, the owner gets
        /// that status, the callback runs once with it, and the buffer is handed back (matched)
        /// or dropped (cancelled), once.
        #[test]
        fn cancel_against_completion_ends_the_request_once() {
            /// The worker's state under its lock: the matcher's posted receive, and the
            /// callbacks completions queued.
            struct Matcher {
                posted: bool,
                deferred: Vec<(Callback, Status, OpInfo)>,
            }

            /// Completes `cell` with `status` if its receive is still posted; call under the lock.
            fn take_posted<B: Send + 'static>(
                m: &mut Matcher,
                cell: &ReqCell<B>,
                status: Status,
                info: OpInfo,
            ) {
                if std::mem::take(&mut m.posted) {
                    // SAFETY: the caller holds the stand-in worker lock (`m` is under it).
                    let after = unsafe { cell.complete_locked(status, info) };
                    assert!(after.waker.is_none(), "nothing polled the request as a future");
                    m.deferred.extend(after.callback);
                }
            }

            for round in 0..ROUNDS {
                let target = CancelTarget::Receive(round as u64);
                let worker = Mutex::new(Matcher { posted: true, deferred: Vec::new() });
                let drops = Arc::new(AtomicUsize::new(0));
                let (seen, callback) = recorder();
                let cell = detached(Counted(Arc::clone(&drops)), Some(callback));
                {
                    let _held = worker.lock().unwrap();
                    // SAFETY: the stand-in worker lock is held.
                    unsafe { cell.set_cancel_locked(target) };
                }
                let request = Request::pending(Arc::clone(&cell));
                let result = std::thread::scope(|scope| {
                    scope.spawn(|| {
                        // A message matches the receive.
                        take_posted(&mut worker.lock().unwrap(), &cell, Status::Ok, length(round));
                        drop(cell);
                    });
                    // `Request::cancel`, with the stand-in worker.
                    let Inner::Pending(owned) = &request.inner else { unreachable!() };
                    if !owned.is_done() {
                        let mut held = worker.lock().unwrap();
                        // SAFETY: the stand-in worker lock is held.
                        assert_eq!(unsafe { owned.cancel_target_locked() }, target);
                        take_posted(&mut held, owned, Status::Canceled, OpInfo::default());
                    }
                    spin_take(request)
                });
                let status = match result {
                    Ok(done) => {
                        assert_eq!(done.info, length(round));
                        Status::Ok
                    }
                    Err(status) => status,
                };
                let deferred = std::mem::take(&mut worker.lock().unwrap().deferred);
                assert_eq!(deferred.len(), 1, "one callback per request");
                for (callback, status, info) in deferred {
                    callback.call(status, &info);
                }
                assert_eq!(*seen.lock().unwrap(), [status]);
                assert!(matches!(status, Status::Ok | Status::Canceled));
                assert_eq!(drops.load(Ordering::SeqCst), 1);
            }
        }

        /// `Future::poll`'s step under the lock against a completion on the worker's thread:
        /// either the owner finds the result, or the completion finds the waker and wakes it,
        /// once; never neither (a lost wakeup: the future would sleep forever).
        #[test]
        fn a_registered_waker_is_woken_once_by_a_completion_on_another_thread() {
            let lock = Deferred::default();
            for round in 0..ROUNDS {
                let wakes = Arc::new(CountWakes::default());
                let waker = Waker::from(Arc::clone(&wakes));
                let cell = detached(round, None);
                let owned = Arc::clone(&cell);
                let result = std::thread::scope(|scope| {
                    scope.spawn(|| {
                        assert!(complete(&lock, &cell, Status::Ok, length(round)));
                        drop(cell);
                    });
                    let first = {
                        let _held = lock.lock().unwrap();
                        // SAFETY: we own the request, and the stand-in worker lock is held.
                        unsafe { owned.take_or_register(&waker) }
                    };
                    match first {
                        Some(result) => result,
                        None => {
                            // Registered: the completion must wake us.
                            while wakes.0.load(Ordering::SeqCst) == 0 {
                                std::thread::yield_now();
                            }
                            owned.take().expect("woken, so done")
                        }
                    }
                });
                let done = result.unwrap();
                assert_eq!((done.buf, done.info), (round, length(round)));
                assert!(wakes.0.load(Ordering::SeqCst) <= 1, "woken more than once");
                // Whoever held the waker let it go: only ours is left.
                drop(waker);
                assert_eq!(Arc::strong_count(&wakes), 1, "a waker clone leaked");
            }
        }

        /// A later poll's waker replaces the earlier one, which is dropped unwoken; the
        /// completion wakes only the latest.
        #[test]
        fn a_new_waker_replaces_the_old_one() {
            let lock = Deferred::default();
            let (old, new) = (Arc::new(CountWakes::default()), Arc::new(CountWakes::default()));
            let cell = detached((), None);
            for wakes in [&old, &new] {
                let _held = lock.lock().unwrap();
                // SAFETY: the test owns the request, and the stand-in worker lock is held.
                assert!(unsafe { cell.take_or_register(&Waker::from(Arc::clone(wakes))) }.is_none());
            }
            assert_eq!(Arc::strong_count(&old), 1, "the replaced waker was kept");
            assert!(complete(&lock, &cell, Status::Ok, OpInfo::default()));
            assert_eq!((old.0.load(Ordering::SeqCst), new.0.load(Ordering::SeqCst)), (0, 1));
            assert_eq!(Arc::strong_count(&new), 1, "the woken waker was kept");
        }

        /// The real `Future::poll` of a request whose worker is gone: the result if it
        /// completed before, `CANCELED` otherwise; and `wait` likewise.
        #[test]
        fn polling_a_request_whose_worker_is_gone() {
            let lock = Deferred::default();
            let wakes = Arc::new(CountWakes::default());
            let waker = Waker::from(Arc::clone(&wakes));
            let mut cx = TaskContext::from_waker(&waker);
            let cell = detached(5u32, None);
            let mut request = Request::pending(Arc::clone(&cell));
            assert!(complete(&lock, &cell, Status::Ok, length(5)));
            match Pin::new(&mut request).poll(&mut cx) {
                Poll::Ready(Ok(done)) => assert_eq!((done.buf, done.info), (5, length(5))),
                other => panic!("{other:?}"),
            }
            let mut request = Request::pending(detached(6u32, None));
            assert!(matches!(Pin::new(&mut request).poll(&mut cx), Poll::Ready(Err(Status::Canceled))));
            assert_eq!(Request::pending(detached(7u32, None)).wait().err(), Some(Status::Canceled));
            assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
        }

        /// A cell whose result was taken is pooled only when nothing else holds it, and a
        /// pooled cell starts afresh: no outcome, buffer, waker, callback or cancel target of
        /// its last operation.
        #[test]
        fn pooled_cells_are_reused_afresh_and_only_when_unique() {
            let lock = Deferred::default();
            let wakes = Arc::new(CountWakes::default());
            let (seen, callback) = recorder();
            let cell = detached(vec![1u8], Some(callback));
            let first = Arc::as_ptr(&cell);
            {
                let _held = lock.lock().unwrap();
                // SAFETY: the stand-in worker lock is held; the test owns the request.
                unsafe {
                    cell.set_cancel_locked(CancelTarget::Receive(3));
                    assert!(cell.take_or_register(&Waker::from(Arc::clone(&wakes))).is_none());
                }
            }
            let request = Request::pending(Arc::clone(&cell));
            assert!(complete(&lock, &cell, Status::Ok, length(1)));
            assert_eq!(run_callbacks(&lock), 1);
            drop(cell);
            assert_eq!(spin_take(request).unwrap().buf, vec![1]);

            let again = detached(vec![2u8], None);
            assert_eq!(Arc::as_ptr(&again), first, "the taken cell is reused");
            let request = Request::pending(Arc::clone(&again));
            assert_eq!(request.status(), Status::InProgress, "a reused cell starts afresh");
            {
                let _held = lock.lock().unwrap();
                // SAFETY: the stand-in worker lock is held.
                assert_eq!(unsafe { again.cancel_target_locked() }, CancelTarget::None);
            }
            assert!(complete(&lock, &again, Status::Ok, length(2)));
            assert_eq!(run_callbacks(&lock), 0, "the last operation's callback ran again");
            assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "the last operation's waker was woken again");
            assert_eq!(*seen.lock().unwrap(), [Status::Ok]);
            // Taken while the worker still holds it (as when it completes on another thread
            // and has not dropped its reference yet): not pooled.
            assert_eq!(spin_take(request).unwrap().buf, vec![2]);
            let next = detached(vec![3u8], None);
            assert_ne!(Arc::as_ptr(&next), first, "a cell still referenced is reused");
            drop(again);
        }
    }
}
