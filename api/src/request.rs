//! `ucp_request_*`: the handle of an operation that did not complete at once.
//!
//! Every operation returns `Err(status)` when it failed at once, or a [`Request`] that is either
//! already complete (UCP's `NULL`/status return; no callback runs and nothing is allocated) or in
//! progress (UCP's request pointer). An in-progress request completes from `Worker::progress`,
//! which is also where its callback runs. Dropping a request is `ucp_request_free`: the operation
//! goes on, and the buffer it owns is dropped when it ends.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context as TaskContext, Poll, Waker};

use crate::status::{Result, Status};
use crate::worker::WorkerShared;

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
pub type Callback = Box<dyn FnOnce(Status, &OpInfo) + Send>;

/// Per-operation parameters (the `ucp_request_param_t` fields that make sense in Rust).
#[derive(Default)]
pub struct RequestParams {
    /// `UCP_OP_ATTR_FIELD_CALLBACK`.
    pub callback: Option<Callback>,
}

impl RequestParams {
    /// Parameters with a completion callback.
    pub fn with_callback(callback: impl FnOnce(Status, &OpInfo) + Send + 'static) -> Self {
        RequestParams { callback: Some(Box::new(callback)) }
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
    /// A posted tag receive.
    TagRecv(zcx_dataplane::proto::RecvId),
    /// A posted stream receive of an endpoint.
    StreamRecv { ep: u64, id: u64 },
}

/// The worker's view of an in-progress request, without its buffer type.
pub(crate) trait OpSink: Send + Sync {
    /// Records the final status; returns the callback to run from progress, if any.
    fn complete(&self, status: Status, info: OpInfo) -> Option<(Callback, Status, OpInfo)>;
}

struct CellState<B> {
    status: Status,
    info: OpInfo,
    buf: Option<B>,
    waker: Option<Waker>,
    callback: Option<Callback>,
    cancel: CancelTarget,
}

/// The shared state of an in-progress request: held by the [`Request`] and by the worker's record
/// of the operation.
pub(crate) struct ReqCell<B> {
    state: Mutex<CellState<B>>,
    /// Set (Release) once `state` holds the final status: a waiter spinning on the request reads
    /// this (Acquire) and takes the lock only when there is something to take.
    done: AtomicBool,
    worker: Weak<WorkerShared>,
}

impl<B: Send + 'static> ReqCell<B> {
    pub(crate) fn new(worker: &Arc<WorkerShared>, buf: B, callback: Option<Callback>) -> Arc<ReqCell<B>> {
        Arc::new(ReqCell {
            state: Mutex::new(CellState {
                status: Status::InProgress,
                info: OpInfo::default(),
                buf: Some(buf),
                waker: None,
                callback,
                cancel: CancelTarget::None,
            }),
            done: AtomicBool::new(false),
            worker: Arc::downgrade(worker),
        })
    }

    pub(crate) fn set_cancel(&self, target: CancelTarget) {
        self.lock().cancel = target;
    }

    fn lock(&self) -> MutexGuard<'_, CellState<B>> {
        // The state is a few plain fields updated whole: a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<B: Send + 'static> OpSink for ReqCell<B> {
    fn complete(&self, status: Status, info: OpInfo) -> Option<(Callback, Status, OpInfo)> {
        let (waker, callback) = {
            let mut state = self.lock();
            if state.status != Status::InProgress {
                return None;
            }
            state.status = status;
            state.info = info;
            self.done.store(true, Ordering::Release);
            (state.waker.take(), state.callback.take())
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        callback.map(|cb| (cb, status, info))
    }
}

enum Inner<B> {
    Ready(Option<Result<Completion<B>>>),
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
    pub(crate) fn ready(buf: B, info: OpInfo) -> Request<B> {
        Request { inner: Inner::Ready(Some(Ok(Completion { buf, info }))) }
    }

    pub(crate) fn pending(cell: Arc<ReqCell<B>>) -> Request<B> {
        Request { inner: Inner::Pending(cell) }
    }

    /// True when the operation completed when it was issued (UCP returned `UCS_OK`, not a
    /// request).
    pub fn completed_at_once(&self) -> bool {
        matches!(self.inner, Inner::Ready(_))
    }

    /// `ucp_request_check_status`: `InProgress`, or the final status.
    pub fn status(&self) -> Status {
        match &self.inner {
            Inner::Ready(Some(Ok(_))) => Status::Ok,
            Inner::Ready(Some(Err(status))) => *status,
            Inner::Ready(None) => Status::InvalidParam,
            Inner::Pending(cell) => cell.lock().status,
        }
    }

    /// True once the operation ended, successfully or not.
    pub fn is_done(&self) -> bool {
        self.status() != Status::InProgress
    }

    /// `ucp_request_cancel`: an unmatched tag or stream receive completes with `CANCELED` and its
    /// buffer untouched; other operations are not affected (as in UCP).
    pub fn cancel(&self) {
        let Inner::Pending(cell) = &self.inner else { return };
        let target = cell.lock().cancel;
        if target == CancelTarget::None {
            return;
        }
        if let Some(worker) = cell.worker.upgrade() {
            worker.cancel(target);
        }
    }

    /// The result of a completed operation, or the request back while it is in progress.
    pub fn try_take(self) -> std::result::Result<Result<Completion<B>>, Request<B>> {
        match self.inner {
            Inner::Ready(Some(result)) => Ok(result),
            Inner::Ready(None) => Ok(Err(Status::InvalidParam)),
            Inner::Pending(cell) if !cell.done.load(Ordering::Acquire) => {
                Err(Request { inner: Inner::Pending(cell) })
            }
            Inner::Pending(cell) => {
                let taken = {
                    let mut state = cell.lock();
                    if state.status == Status::InProgress {
                        None
                    } else {
                        Some(take_result(&mut state))
                    }
                };
                match taken {
                    Some(result) => Ok(result),
                    None => Err(Request { inner: Inner::Pending(cell) }),
                }
            }
        }
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
            match cell.worker.upgrade() {
                Some(worker) => {
                    if worker.progress() == 0 {
                        std::hint::spin_loop();
                    }
                }
                None => return Err(Status::Canceled),
            }
        }
    }
}

fn take_result<B>(state: &mut CellState<B>) -> Result<Completion<B>> {
    match (state.status, state.buf.take()) {
        (Status::Ok, Some(buf)) => Ok(Completion { buf, info: state.info }),
        (Status::Ok, None) => Err(Status::InvalidParam),
        (status, _) => Err(status),
    }
}

impl<B: Send + 'static> Unpin for Request<B> {}

impl<B: Send + 'static> Future for Request<B> {
    type Output = Result<Completion<B>>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.inner {
            Inner::Ready(result) => Poll::Ready(result.take().unwrap_or(Err(Status::InvalidParam))),
            Inner::Pending(cell) => {
                let mut state = cell.lock();
                if state.status == Status::InProgress {
                    state.waker = Some(cx.waker().clone());
                    Poll::Pending
                } else {
                    Poll::Ready(take_result(&mut state))
                }
            }
        }
    }
}

impl<B> std::fmt::Debug for Request<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = match &self.inner {
            Inner::Ready(Some(Ok(_))) => Status::Ok,
            Inner::Ready(Some(Err(s))) => *s,
            Inner::Ready(None) => Status::InvalidParam,
            Inner::Pending(cell) => cell.state.lock().map(|s| s.status).unwrap_or(Status::IoError),
        };
        f.debug_struct("Request").field("status", &status).finish()
    }
}
