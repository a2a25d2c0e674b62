//! Tag messages (`ucp_tag_send_nbx`, `ucp_tag_send_sync_nbx`, `ucp_tag_recv_nbx`): eager or
//! rendezvous by size and link, matched by `(tag, mask)` in the worker's tag matcher.

use zcx_dataplane::proto::wire::Op;
use zcx_dataplane::proto::{Message, Posted};
use zcx_dataplane::LinkId;

use crate::buffer::{RecvBuffer, SendBuffer};
use crate::engine::{Engine, OpKind, Phase, Sent, Start, Unexpected};
use crate::ids::{EndpointId, OpId};
use crate::output::{Completion, Event, Header, OpInfo, Payload, Transmit};
use crate::rndv::{choose, Proto};
use crate::Status;

impl Engine {
    /// `ucp_tag_send_nbx` (`sync`: `ucp_tag_send_sync_nbx`): sends `buf` with `tag`. An eager
    /// send is done at once (its bytes are a [`Payload::Inline`] the caller sends before
    /// returning); a synchronous one once the receiver matched it; a rendezvous once the
    /// receiver has the bytes.
    pub fn tag_send(
        &mut self,
        ep_id: EndpointId,
        buf: SendBuffer,
        tag: u64,
        sync: bool,
    ) -> Result<Start, Status> {
        let caps = self.usable(ep_id)?.caps;
        let len = buf.len();
        match choose(&caps, len, &buf) {
            Proto::Eager if !sync => {
                self.send_eager(ep_id, Header::tag_eager(tag, false, 0), buf.at(0), len)?;
                Ok(self.eager_start(ep_id, len, buf.cookie()))
            }
            Proto::Eager => {
                let op = self.new_op(Some(ep_id), OpKind::SyncEager { len }, buf.cookie());
                let payload = Payload::Inline { ptr: buf.at(0), len };
                self.send(ep_id, &Op::TagEager { tag, sync, sender_req: op.raw() }, payload, false);
                Ok(Start::Pending(op))
            }
            Proto::Push => {
                let cookie = buf.cookie();
                let op = self.new_op(Some(ep_id), OpKind::AwaitRtr { buf }, cookie);
                let rts = Op::TagRts { tag, sync, sender_req: op.raw(), total_len: len as u64 };
                self.send(ep_id, &rts, Payload::None, false);
                Ok(Start::Pending(op))
            }
            Proto::Pull => {
                let key = buf.key().expect("pull needs a key").to_vec();
                let addr = buf.addr();
                let op = self.new_op(Some(ep_id), OpKind::AwaitPullDone { len }, buf.cookie());
                let rts = Op::TagRtsPull { tag, sync, sender_req: op.raw(), total_len: len as u64, addr };
                self.send(ep_id, &rts, Payload::Owned(key), false);
                Ok(Start::Pending(op))
            }
        }
    }

    /// `ucp_tag_send_nbx` for a caller that sends at once: a message that goes eagerly on a
    /// ready endpoint while the outbox is empty comes back as its frame ([`Sent::Now`]), with no
    /// trip through the outbox and one endpoint lookup; anything else goes as
    /// [`Engine::tag_send`] sends it ([`Sent::Queued`]). The outbox must be empty for the frame
    /// to skip it, so it never overtakes a frame queued before.
    ///
    /// A synchronous send (`sync`) that goes at once comes back as [`Sent::NowAwaiting`]: its
    /// frame, and the operation that completes when the receiver's acknowledgement arrives.
    #[inline]
    pub fn tag_send_now(
        &mut self,
        ep_id: EndpointId,
        buf: SendBuffer,
        tag: u64,
        sync: bool,
    ) -> Result<Sent, Status> {
        if self.transmits.is_empty() {
            if let Some(ep) = self.eps.get_mut(&ep_id) {
                let len = buf.len();
                if ep.phase == Phase::Ready
                    && ep.answered
                    && matches!(choose(&ep.caps, len, &buf), Proto::Eager)
                {
                    ep.tx_seen = true;
                    let (link, payload) = (ep.link, Payload::Inline { ptr: buf.at(0), len });
                    if !sync {
                        let header = Header::tag_eager(tag, false, 0);
                        return Ok(Sent::Now(Transmit { link, header, payload, placed: false }));
                    }
                    let op = self.new_op(Some(ep_id), OpKind::SyncEager { len }, buf.cookie());
                    let header = Header::tag_eager(tag, true, op.raw());
                    return Ok(Sent::NowAwaiting(Transmit { link, header, payload, placed: false }, op));
                }
            }
        }
        self.tag_send(ep_id, buf, tag, sync).map(Sent::Queued)
    }

    /// `ucp_tag_recv_nbx`: receives the oldest message whose tag matches `(tag, mask)` into `buf`.
    pub fn tag_recv(&mut self, buf: RecvBuffer, tag: u64, mask: u64) -> Start {
        // A waiting receive has no record besides its place in the matcher (found there again
        // only to cancel it), so a receive matched by an eager message leaves nothing to remove.
        let op = OpId::from_raw(self.op_ids.next());
        match self.tags.post_recv(tag, mask, (op, buf)) {
            Posted::Queued(_) => Start::Pending(op),
            Posted::Matched { recv: (op, buf), message } => self.take_unexpected(op, buf, message),
        }
    }

    /// `ucp_tag_probe_nb` without remove: the oldest matching unexpected message's sender, tag
    /// and length.
    pub fn tag_probe(&self, tag: u64, mask: u64) -> Option<(EndpointId, u64, usize)> {
        let info = self.tags.probe(tag, mask)?;
        Some((EndpointId::from_raw(info.sender), info.tag, info.length))
    }

    /// `ucp_tag_probe_nb` with remove: takes the oldest matching unexpected message out of the
    /// matcher and returns an id to receive it under ([`Engine::tag_msg_recv`]) or drop it
    /// ([`Engine::tag_msg_drop`]), with its sender, tag and length.
    pub fn tag_probe_remove(&mut self, tag: u64, mask: u64) -> Option<(OpId, EndpointId, u64, usize)> {
        let message = self.tags.probe_remove(tag, mask)?;
        let op = OpId::from_raw(self.op_ids.next());
        let answer = (op, EndpointId::from_raw(message.sender), message.tag, message.length);
        self.probed.insert(op, message);
        Some(answer)
    }

    /// `ucp_tag_msg_recv_nbx`: receives a message taken with [`Engine::tag_probe_remove`] into
    /// `buf`, under the same id.
    pub fn tag_msg_recv(&mut self, op: OpId, buf: RecvBuffer) -> Result<Start, Status> {
        let message = self.probed.remove(&op).ok_or(Status::NoElem)?;
        Ok(self.take_unexpected(op, buf, message))
    }

    /// Drops a message taken with [`Engine::tag_probe_remove`] that nobody will receive: a
    /// rendezvous sender is told to complete without sending.
    pub fn tag_msg_drop(&mut self, op: OpId) -> Result<(), Status> {
        let message = self.probed.remove(&op).ok_or(Status::NoElem)?;
        let sender = EndpointId::from_raw(message.sender);
        match message.data {
            Unexpected::Eager { data, .. } => self.recycle(data),
            Unexpected::Rts { sender_req, pull, .. } => {
                if self.usable(sender).is_ok() {
                    let decline = match pull {
                        Some(_) => Op::PullDone { sender_req, status: 0 },
                        None => Op::Rtr { sender_req, recv_req: 0, accept_len: 0 },
                    };
                    self.send(sender, &decline, Payload::None, false);
                }
            }
        }
        Ok(())
    }

    /// Withdraws a waiting tag or stream receive (`ucp_request_cancel`); true if it was waiting,
    /// and it then completes with CANCELED.
    pub fn cancel(&mut self, op_id: OpId) -> bool {
        if self.ops.contains_key(&op_id) {
            return false;
        }
        // A waiting receive, found by a walk of the matcher or of the endpoints' stream queues:
        // cancelling is rare, and the message path keeps no index of receives by id for it.
        let stream_ep = |(id, ep): (EndpointId, &crate::engine::Endpoint)| {
            ep.stream.posted.iter().any(|recv| recv.op == op_id).then_some(id)
        };
        let stream_owner = self.eps.iter().find_map(stream_ep);
        if let Some(ep) = stream_owner {
            return self.cancel_stream_recv(ep, op_id);
        }
        let Some(recv_id) = self.tags.find_expected(|(op, _)| *op == op_id) else { return false };
        let Some((_, buf)) = self.tags.cancel(recv_id) else { return false };
        let completion =
            Completion { op: op_id, status: Status::Canceled, info: OpInfo::default(), cookie: buf.cookie() };
        self.events.push_back(Event::Completion(completion));
        true
    }

    /// A receive took an unexpected message. Out of line: a receive posted before its
    /// message (the path of a latency benchmark) keeps a small frame.
    #[inline(never)]
    fn take_unexpected(&mut self, op: OpId, buf: RecvBuffer, message: Message<Unexpected>) -> Start {
        let Message { sender, tag, length, data } = message;
        let sender = EndpointId::from_raw(sender);
        match data {
            Unexpected::Eager { data, sync_req } => {
                let n = data.len().min(buf.len());
                buf.write(0, &data[..n]);
                self.recycle(data);
                if let Some(sender_req) = sync_req {
                    if self.usable(sender).is_ok() {
                        self.send(sender, &Op::SyncAck { sender_req }, Payload::None, false);
                    }
                }
                let status = if length > n { Status::MessageTruncated } else { Status::Ok };
                Start::Done(status, OpInfo { length: n, sender_tag: tag, value: 0 })
            }
            Unexpected::Rts { sender_req, total_len, pull } => match self.usable(sender) {
                Ok(_) => self.start_rndv_recv(sender, op, sender_req, total_len, pull, buf, tag),
                Err(status) => Start::Done(status, OpInfo { sender_tag: tag, ..OpInfo::default() }),
            },
        }
    }

    /// A `TagEager` frame arrived.
    pub(crate) fn on_tag_eager(
        &mut self,
        link: LinkId,
        ep_id: EndpointId,
        tag: u64,
        sync_req: Option<u64>,
        payload: &[u8],
    ) {
        match self.tags.take_expected(tag) {
            Some((_, (op, buf))) => {
                let completion = delivered(op, buf, tag, payload);
                self.events.complete(completion);
                if let Some(sender_req) = sync_req {
                    self.reply(link, &Op::SyncAck { sender_req });
                }
            }
            None => self.queue_unexpected_eager(ep_id, tag, sync_req, payload),
        }
    }

    /// An eager, not synchronous, tag message for the caller that takes its completion
    /// straight ([`Engine::handle_frame_direct`]) while no event waits: the completion of the
    /// receive it matched, or `None` when it waits for one.
    #[inline(always)]
    pub(crate) fn tag_eager_direct(
        &mut self,
        ep_id: EndpointId,
        tag: u64,
        payload: &[u8],
    ) -> Option<Completion> {
        match self.tags.take_expected(tag) {
            Some((_, (op, buf))) => Some(delivered(op, buf, tag, payload)),
            None => {
                self.queue_unexpected_eager(ep_id, tag, None, payload);
                None
            }
        }
    }

    /// An eager tag message no receive waits for: copied, to wait for one.
    #[inline(never)]
    fn queue_unexpected_eager(&mut self, ep_id: EndpointId, tag: u64, sync_req: Option<u64>, payload: &[u8]) {
        let data = self.pooled_copy(payload);
        let length = data.len();
        let message =
            Message { sender: ep_id.raw(), tag, length, data: Unexpected::Eager { data, sync_req } };
        self.tags.queue_unexpected(message);
    }

    /// A tag rendezvous request (`TagRts`, or `TagRtsPull` with the sender's address and key).
    pub(crate) fn on_tag_rts(
        &mut self,
        ep_id: EndpointId,
        tag: u64,
        sender_req: u64,
        total_len: u64,
        pull: Option<(u64, &[u8])>,
    ) {
        let pull = pull.map(|(addr, key)| (addr, std::sync::Arc::<[u8]>::from(key)));
        match self.tags.take_expected(tag) {
            Some((_, (op, buf))) => {
                let cookie = buf.cookie();
                if let crate::Start::Done(status, info) =
                    self.start_rndv_recv(ep_id, op, sender_req, total_len, pull, buf, tag)
                {
                    let completion = crate::Completion { op, status, info, cookie };
                    self.events.push_back(crate::Event::Completion(completion));
                }
            }
            None => {
                let length = usize::try_from(total_len).unwrap_or(usize::MAX);
                let data = Unexpected::Rts { sender_req, total_len, pull };
                self.tags.queue_unexpected(Message { sender: ep_id.raw(), tag, length, data });
            }
        }
    }

    /// The receiver matched our synchronous eager send.
    pub(crate) fn on_sync_ack(&mut self, ep_id: EndpointId, sender_req: u64) {
        let id = OpId::from_raw(sender_req);
        let Some(op) = self.ops.get_mut(&id).filter(|op| op.ep == Some(ep_id)) else { return };
        if let OpKind::SyncEager { len } = op.kind {
            self.finish_op(id, Status::Ok, OpInfo { length: len, ..OpInfo::default() });
        }
    }
}

/// Writes an eager message's `payload` into the receive `buf` of operation `op` it matched:
/// the receive's completion (truncated when the buffer is shorter).
#[inline(always)]
fn delivered(op: OpId, buf: RecvBuffer, tag: u64, payload: &[u8]) -> Completion {
    let n = payload.len().min(buf.len());
    buf.write(0, &payload[..n]);
    let status = if payload.len() > n { Status::MessageTruncated } else { Status::Ok };
    let info = OpInfo { length: n, sender_tag: tag, value: 0 };
    Completion { op, status, info, cookie: buf.cookie() }
}
