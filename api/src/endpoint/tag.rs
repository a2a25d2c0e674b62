//! Tag matching: `ucp_tag_send_nbx` (+ sync), `ucp_tag_recv_nbx`, `ucp_tag_probe_nb`,
//! `ucp_tag_msg_recv_nbx`.
//!
//! The protocols are the engine's ([`zcx_engine::Engine::tag_send`] and friends). Messages
//! below the rendezvous threshold that fit a frame travel eagerly (copied into the frame, or,
//! over shared memory, written into the ring through the endpoint's direct lane); larger ones are
//! announced, and once the receiver matched them and answered, the sender pushes them in
//! fragments from its own buffer (sender-push rendezvous, what every link's caps say today).
//! Where the link places fragments, the transport writes their payload straight into the
//! receive buffer; over shared memory it copies a fragment from the zero-copy threshold on
//! straight out of the sender's buffer, one copy in all.

use std::sync::Arc;

use zcx_dataplane::proto::wire::Op;
use zcx_engine::{EndpointId, OpId, RecvBuffer, SendBuffer, Sent, Start};

use crate::buffer::{RecvBuf, SendBuf};
use crate::endpoint::Endpoint;
use crate::request::{Callback, OpInfo, Request, RequestParams};
use crate::status::{Result, Status};
use crate::worker::state::Core;
use crate::worker::{Worker, WorkerShared};

/// Parameters of a tag send.
#[derive(Debug, Default)]
pub struct TagSendParams {
    /// `ucp_tag_send_sync_nbx`: complete only once the receiver matched the message.
    pub sync: bool,
    /// Completion callback and the like.
    pub request: RequestParams,
}

impl Endpoint {
    /// `ucp_tag_send_nbx`: sends `buf` with `tag`. The buffer comes back in the completion.
    pub fn tag_send<B: SendBuf>(&self, buf: B, tag: u64, params: TagSendParams) -> Result<Request<B>> {
        let bytes = buf.as_bytes();
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        if !params.sync && self.tag_send_direct(bytes, tag) {
            return Ok(Request::ready(buf, OpInfo { length: len, ..OpInfo::default() }));
        }
        let shared = self.shared();
        let mut guard = shared.lock();
        let Core { tl, st } = &mut *guard;
        // A send that will wait (synchronous, or large enough for a rendezvous) is found again
        // by a slot, not by its operation's id; an eager one is done before this returns.
        let cookie = (params.sync || len >= st.rndv_thresh).then(|| st.sinks.reserve());
        // SAFETY: `SendBuf` keeps the bytes in place while the buffer moves into the request
        // cell, which owns it until the operation completes.
        let send_buf = unsafe { SendBuffer::new(ptr, len) };
        let send_buf = match cookie {
            Some(cookie) => send_buf.with_cookie(cookie),
            None => send_buf,
        };
        let (send_buf, offered) = st.offer_pull(self.id(), send_buf, ptr);
        let started = if st.stalled.is_empty() {
            st.engine.tag_send_now(self.id(), send_buf, tag, params.sync)
        } else {
            st.engine.tag_send(self.id(), send_buf, tag, params.sync).map(Sent::Queued)
        };
        let callback = params.request.callback;
        match started {
            Ok(Sent::Now(transmit)) => {
                if let Some(cookie) = cookie {
                    st.sinks.unreserve(cookie);
                }
                self.send_now(tl, st, &transmit, bytes)?;
                Ok(Request::ready(buf, OpInfo { length: len, ..OpInfo::default() }))
            }
            Ok(Sent::NowAwaiting(transmit, op)) => {
                // A frame the link refused is the link's failure, which fails the operation
                // with its endpoint, as for a queued frame.
                if let Err(status) = self.send_now(tl, st, &transmit, bytes) {
                    tracing::debug!(%status, "synchronous tag message not sent");
                }
                let request = st.send_request(shared, cookie, Start::Pending(op), buf, callback);
                // The frame went out whole (nothing queued or stalled on its link): what waits
                // now is the peer's acknowledgement, which a doorbell shows.
                if zcx_dataplane::Transport::link_delivered(&*tl, transmit.link)
                    && st.nothing_after_poll()
                    && st.deferred.is_empty()
                {
                    guard.unlock_unchanged();
                }
                request
            }
            Ok(Sent::Queued(started)) => {
                st.hold_pull(offered, &started);
                let request = st.send_request(shared, cookie, started, buf, callback);
                guard.drain();
                request
            }
            Err(status) => {
                if let Some(cookie) = cookie {
                    st.sinks.unreserve(cookie);
                }
                Err(status)
            }
        }
    }

    /// An eager tag message written straight into the endpoint's shared-memory ring (see
    /// `DirectLane`); false when it has to go the worker's way.
    #[inline]
    fn tag_send_direct(&self, bytes: &[u8], tag: u64) -> bool {
        self.direct().is_some_and(|direct| {
            bytes.len() < direct.rndv_thresh && direct.lane.send(&Op::tag_eager_header(tag, false, 0), bytes)
        })
    }

    /// `ucp_tag_send_nbx` from borrowed bytes: copied when eager (no allocation; the completion's
    /// buffer is an empty `Vec`), copied into an owned `Vec` first when the message needs a
    /// rendezvous.
    pub fn tag_send_bytes(&self, data: &[u8], tag: u64) -> Result<Request<Vec<u8>>> {
        if self.tag_send_direct(data, tag) {
            return Ok(Request::ready(Vec::new(), OpInfo { length: data.len(), ..OpInfo::default() }));
        }
        {
            let shared = self.shared();
            let mut guard = shared.lock();
            let Core { tl, st } = &mut *guard;
            if st.stalled.is_empty() && data.len() < st.rndv_thresh {
                // SAFETY: `data` is borrowed for this call, and an eager send is done with its
                // bytes before the call returns.
                let send_buf = unsafe { SendBuffer::new(data.as_ptr(), data.len()) };
                match st.engine.tag_send_now(self.id(), send_buf, tag, false)? {
                    Sent::Now(transmit) => {
                        self.send_now(tl, st, &transmit, data)?;
                        let info = OpInfo { length: data.len(), ..OpInfo::default() };
                        return Ok(Request::ready(Vec::new(), info));
                    }
                    // Held while the endpoint connects (the engine copied the bytes): the
                    // request completes when the frame is released, or fails with the endpoint.
                    Sent::Queued(started) => {
                        let request = st.request_for(shared, started, Vec::new(), None);
                        guard.drain();
                        return request;
                    }
                    Sent::NowAwaiting(..) => unreachable!("only a synchronous send awaits an answer"),
                }
            }
        }
        self.tag_send(data.to_vec(), tag, TagSendParams::default())
    }
}

/// A message taken out of the unexpected queue by [`Worker::tag_probe_remove`]
/// (`ucp_tag_message_h`); receive it with [`TagMessage::recv`]. Dropping it discards the message
/// (a rendezvous sender is told, so its request completes).
pub struct TagMessage {
    worker: Arc<WorkerShared>,
    /// The engine's id of the message, until received or dropped.
    op: Option<OpId>,
    tag: u64,
    length: usize,
}

impl TagMessage {
    /// The message's tag.
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// The message's length in bytes.
    pub fn length(&self) -> usize {
        self.length
    }

    /// `ucp_tag_msg_recv_nbx`: receives this message into `buf`.
    pub fn recv<B: RecvBuf>(mut self, buf: B, params: RequestParams) -> Result<Request<B>> {
        let op = self.op.take().ok_or(Status::NoElem)?;
        recv_into(&self.worker, buf, params.callback, |engine, recv_buf| engine.tag_msg_recv(op, recv_buf))
    }
}

impl Drop for TagMessage {
    fn drop(&mut self) {
        if let Some(op) = self.op.take() {
            let mut guard = self.worker.lock();
            let _ = guard.st.engine.tag_msg_drop(op);
            guard.drain();
        }
    }
}

impl std::fmt::Debug for TagMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TagMessage").field("tag", &self.tag()).field("length", &self.length()).finish()
    }
}

/// What `ucp_tag_probe_nb` reports (`ucp_tag_recv_info_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TagInfo {
    /// The sender's tag.
    pub sender_tag: u64,
    /// The message length.
    pub length: usize,
}

impl Worker {
    /// `ucp_tag_recv_nbx`: receives the oldest message whose tag matches `tag` under `tag_mask`
    /// into `buf`. A longer message completes with MESSAGE_TRUNCATED.
    pub fn tag_recv<B: RecvBuf>(
        &self,
        buf: B,
        tag: u64,
        tag_mask: u64,
        params: RequestParams,
    ) -> Result<Request<B>> {
        recv_into(&self.shared, buf, params.callback, |engine, recv_buf| {
            Ok(engine.tag_recv(recv_buf, tag, tag_mask))
        })
    }

    /// `ucp_tag_probe_nb` without remove: the oldest matching unexpected message, left queued.
    pub fn tag_probe(&self, tag: u64, tag_mask: u64) -> Option<TagInfo> {
        self.progress();
        let guard = self.shared.lock();
        let (_, sender_tag, length) = guard.st.engine.tag_probe(tag, tag_mask)?;
        Some(TagInfo { sender_tag, length })
    }

    /// `ucp_tag_probe_nb` exactly, without remove: looks only at what earlier progress received
    /// and makes no progress itself, so no callback runs (unlike [`Worker::tag_probe`]).
    pub fn tag_peek(&self, tag: u64, tag_mask: u64) -> Option<TagInfo> {
        let guard = self.shared.lock();
        let (_, sender_tag, length) = guard.st.engine.tag_probe(tag, tag_mask)?;
        Some(TagInfo { sender_tag, length })
    }

    /// `ucp_tag_probe_nb` exactly, with remove: as [`Worker::tag_probe_remove`] without the
    /// progress, so no callback runs.
    pub fn tag_peek_remove(&self, tag: u64, tag_mask: u64) -> Option<TagMessage> {
        let (op, _, tag, length): (OpId, EndpointId, u64, usize) =
            self.shared.lock().st.engine.tag_probe_remove(tag, tag_mask)?;
        Some(TagMessage { worker: Arc::clone(&self.shared), op: Some(op), tag, length })
    }

    /// `ucp_tag_probe_nb` with remove: takes the oldest matching unexpected message out of the
    /// queue, for [`TagMessage::recv`].
    pub fn tag_probe_remove(&self, tag: u64, tag_mask: u64) -> Option<TagMessage> {
        self.progress();
        let (op, _, tag, length): (OpId, EndpointId, u64, usize) =
            self.shared.lock().st.engine.tag_probe_remove(tag, tag_mask)?;
        Some(TagMessage { worker: Arc::clone(&self.shared), op: Some(op), tag, length })
    }
}

/// Starts a receive into `buf` with `start` (a tag receive, a probed message's receive, an
/// active message's data): done at once when the data was there, else a request that completes
/// with the operation. A receive that waits can be cancelled.
#[inline(always)]
pub(crate) fn recv_into<B: RecvBuf>(
    shared: &Arc<WorkerShared>,
    mut buf: B,
    callback: Option<Callback>,
    start: impl FnOnce(&mut zcx_engine::Engine, RecvBuffer) -> std::result::Result<Start, Status>,
) -> Result<Request<B>> {
    let dst = buf.as_mut_bytes();
    let (ptr, cap) = (dst.as_mut_ptr(), dst.len());
    let mut guard = shared.lock();
    let st = &mut guard.st;
    let cookie = st.sinks.reserve();
    // SAFETY: `RecvBuf` keeps the bytes in place while the buffer moves into the request cell,
    // which owns it until the operation completes; nothing else touches them meanwhile.
    let recv_buf = unsafe { RecvBuffer::new(ptr, cap) }.with_cookie(cookie);
    let started = start(&mut st.engine, recv_buf);
    let result = st.cookie_request(shared, cookie, started, buf, callback, true);
    // A receive sends nothing but a synchronous send's acknowledgement or a rendezvous answer.
    if guard.st.engine.has_output() {
        guard.drain();
    } else {
        // Posted, or matched with nothing to answer: no transport was touched.
        guard.unlock_unchanged();
    }
    result
}
