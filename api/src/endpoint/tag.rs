//! Tag matching: `ucp_tag_send_nbx` (+ sync), `ucp_tag_recv_nbx`, `ucp_tag_probe_nb`,
//! `ucp_tag_msg_recv_nbx`.
//!
//! Messages below the rendezvous threshold travel eagerly (copied into the frame); larger ones are
//! announced and pulled by the receiver once matched, straight from the sender's buffer.

use std::sync::Arc;

use zcx_dataplane::proto::wire::Op;
use zcx_dataplane::proto::Message;
use zcx_dataplane::Payload;

use crate::buffer::{RecvBuf, SendBuf};
use crate::endpoint::Endpoint;
use crate::request::{Callback, CancelTarget, OpInfo, ReqCell, Request, RequestParams};
use crate::status::{Result, Status};
use crate::worker::state::{
    send_on_ep, send_ready, usable_in, Core, OutKind, PostedTagRecv, State, Unexpected,
};
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
        let rndv_thresh = st.rndv_thresh;
        let (ep, connecting) = usable_in(&mut st.eps, self.id())?;
        let callback = params.request.callback;
        if len < rndv_thresh {
            if !params.sync && !connecting {
                let header = Op::tag_eager_header(tag, false, 0);
                send_ready(tl, ep, &header, Payload::Copy(bytes))?;
                self.offer_direct(tl, st);
                return Ok(Request::ready(buf, OpInfo { length: len, ..OpInfo::default() }));
            }
            let cell = ReqCell::new(shared, buf, callback);
            let kind = if params.sync { OutKind::SyncAck } else { OutKind::Queued };
            let op = st.add_op(self.id(), cell.clone(), kind);
            let (sender_req, completes) = if params.sync { (op, None) } else { (0, Some(op)) };
            // SAFETY: `SendBuf` guarantees the bytes did not move when the buffer moved into the cell.
            let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
            let header = Op::TagEager { tag, sync: params.sync, sender_req };
            if let Err(status) = send_on_ep(tl, st, self.id(), &header, Payload::Copy(bytes), completes) {
                st.ops.remove(&op);
                return Err(status);
            }
            return Ok(Request::pending(cell));
        }
        let cell = ReqCell::new(shared, buf, callback);
        let op = st.add_op(self.id(), cell.clone(), OutKind::AwaitRtr { ptr, len });
        let header = Op::TagRts { tag, sync: params.sync, sender_req: op, total_len: len as u64 };
        if let Err(status) = send_on_ep(tl, st, self.id(), &header, Payload::None, None) {
            st.ops.remove(&op);
            return Err(status);
        }
        Ok(Request::pending(cell))
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
            let rndv_thresh = st.rndv_thresh;
            let (ep, connecting) = usable_in(&mut st.eps, self.id())?;
            if data.len() < rndv_thresh && !connecting {
                send_ready(tl, ep, &Op::tag_eager_header(tag, false, 0), Payload::Copy(data))?;
                self.offer_direct(tl, st);
                return Ok(Request::ready(Vec::new(), OpInfo { length: data.len(), ..OpInfo::default() }));
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
    message: Option<Message<Unexpected>>,
}

impl TagMessage {
    /// The message's tag.
    pub fn tag(&self) -> u64 {
        self.message.as_ref().map_or(0, |m| m.tag)
    }

    /// The message's length in bytes.
    pub fn length(&self) -> usize {
        self.message.as_ref().map_or(0, |m| m.length)
    }

    /// `ucp_tag_msg_recv_nbx`: receives this message into `buf`.
    pub fn recv<B: RecvBuf>(mut self, buf: B, params: RequestParams) -> Result<Request<B>> {
        let message = self.message.take().ok_or(Status::NoElem)?;
        let mut guard = self.worker.lock();
        deliver_message(&self.worker, &mut guard, message, buf, params.callback)
    }
}

impl Drop for TagMessage {
    fn drop(&mut self) {
        if let Some(message) = self.message.take() {
            let mut guard = self.worker.lock();
            discard_message(&mut guard.st, message);
            guard.send_out();
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
        let shared = &self.shared;
        let mut guard = shared.lock();
        if let Some(message) = guard.st.tags.probe_remove(tag, tag_mask) {
            return deliver_message(shared, &mut guard, message, buf, params.callback);
        }
        let mut buf = buf;
        let dst = buf.as_mut_bytes();
        let (ptr, cap) = (dst.as_mut_ptr(), dst.len());
        let cell = ReqCell::new(shared, buf, params.callback);
        let posted = PostedTagRecv { sink: cell.clone(), ptr, cap };
        let id = guard.st.tags.post_expected(tag, tag_mask, posted);
        cell.set_cancel(guard.st.held(), CancelTarget::TagRecv(id));
        Ok(Request::pending(cell))
    }

    /// `ucp_tag_probe_nb` without remove: the oldest matching unexpected message, left queued.
    pub fn tag_probe(&self, tag: u64, tag_mask: u64) -> Option<TagInfo> {
        self.progress();
        let guard = self.shared.lock();
        guard.st.tags.probe(tag, tag_mask).map(|info| TagInfo { sender_tag: info.tag, length: info.length })
    }

    /// `ucp_tag_probe_nb` with remove: takes the oldest matching unexpected message out of the
    /// queue, for [`TagMessage::recv`].
    pub fn tag_probe_remove(&self, tag: u64, tag_mask: u64) -> Option<TagMessage> {
        self.progress();
        let message = self.shared.lock().st.tags.probe_remove(tag, tag_mask)?;
        Some(TagMessage { worker: Arc::clone(&self.shared), message: Some(message) })
    }
}

/// Delivers an unexpected message into a receive buffer.
fn deliver_message<B: RecvBuf>(
    shared: &Arc<WorkerShared>,
    core: &mut Core,
    message: Message<Unexpected>,
    mut buf: B,
    callback: Option<Callback>,
) -> Result<Request<B>> {
    let Message { sender, tag, length, data } = message;
    match data {
        Unexpected::Eager { data, sync_req } => {
            let dst = buf.as_mut_bytes();
            let n = data.len().min(dst.len());
            dst[..n].copy_from_slice(&data[..n]);
            State::recycle(&core.st.pool, data);
            if let Some(sender_req) = sync_req {
                if let Some(ep) = core.st.eps.get(&sender) {
                    let link = ep.link;
                    core.st.reply(link, &Op::SyncAck { sender_req }, None);
                    core.send_out();
                }
            }
            if length > n {
                return Err(Status::MessageTruncated);
            }
            Ok(Request::ready(buf, OpInfo { length: n, sender_tag: tag, value: 0 }))
        }
        Unexpected::Rts { sender_req, total_len } => {
            let dst = buf.as_mut_bytes();
            let (ptr, cap) = (dst.as_mut_ptr(), dst.len());
            let link = core.st.usable_ep(sender)?.link;
            let cell = ReqCell::new(shared, buf, callback);
            let recv_req = core.st.new_id();
            crate::worker::rndv::start_recv(
                &mut core.st,
                link,
                sender,
                recv_req,
                sender_req,
                total_len,
                cell.clone(),
                ptr,
                cap,
                tag,
            );
            core.send_out();
            Ok(Request::pending(cell))
        }
    }
}

/// Drops an unexpected message nobody will receive.
fn discard_message(st: &mut State, message: Message<Unexpected>) {
    match message.data {
        Unexpected::Eager { data, .. } => State::recycle(&st.pool, data),
        Unexpected::Rts { sender_req, .. } => {
            if let Some(ep) = st.eps.get(&message.sender) {
                let link = ep.link;
                st.reply(link, &Op::Rtr { sender_req, recv_req: 0, accept_len: 0 }, None);
            }
        }
    }
}
