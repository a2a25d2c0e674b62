//! Rendezvous: how a payload above the threshold crosses, for tag messages and AM data alike.
//!
//! Sender push (today's protocol, every transport): the sender announces the message
//! (`TagRts`/`AmRts`), the receiver answers `Rtr` with the bytes it takes once it has a buffer,
//! and the sender pushes them as `RndvData` fragments (placed where the transport can), at most a
//! window per operation in the caller's hands. The receive completes when every accepted byte
//! arrived, the send when every fragment is sent.
//!
//! Receiver pull (links whose caps say so, and send buffers with a packed key): the announcement
//! (`TagRtsPull`/`AmRtsPull`) carries the sender's address and key, the receiver reads the bytes
//! with a native RMA get into its buffer and then sends `PullDone`, which completes the sender.
//! A receiver that takes nothing answers `Rtr` with 0 bytes (push) or `PullDone` (pull) at once.

use std::sync::Arc;

use zcx_dataplane::proto::wire::Op;

use crate::buffer::{RecvBuffer, SendBuffer};
use crate::caps::{BulkMode, LinkCaps};
use crate::engine::{Engine, Frag, OpKind};
use crate::ids::{EndpointId, OpId};
use crate::output::{OpInfo, Payload, RmaKind, RmaRequest};
use crate::Status;

/// How one message crosses a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Proto {
    Eager,
    Push,
    Pull,
}

/// The protocol for a message of `whole` bytes (AM header and data) on a link with `caps`.
pub(crate) fn choose(caps: &LinkCaps, whole: usize, buf: &SendBuffer) -> Proto {
    if whole < caps.rndv_threshold && whole <= caps.max_payload() {
        Proto::Eager
    } else if caps.bulk == BulkMode::ReceiverPull && caps.native_get && buf.key().is_some() {
        Proto::Pull
    } else {
        Proto::Push
    }
}

impl Engine {
    /// The receiver has a buffer for a rendezvous message (tag, or AM data the API took): asks
    /// for as many bytes as fit, or reads them itself when the sender offered a pull. `op` is the
    /// receive's id (new, or the AM descriptor's); returns how it started.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_rndv_recv(
        &mut self,
        ep_id: EndpointId,
        op: OpId,
        sender_req: u64,
        total_len: u64,
        pull: Option<(u64, Arc<[u8]>)>,
        buf: RecvBuffer,
        sender_tag: u64,
    ) -> crate::Start {
        let Some(ep) = self.eps.get(&ep_id) else {
            self.ops.remove(&op);
            return crate::Start::Done(Status::NotConnected, OpInfo::default());
        };
        let link = ep.link;
        let total = usize::try_from(total_len).unwrap_or(usize::MAX);
        let accept = total.min(buf.len());
        let truncated = if accept < total { Status::MessageTruncated } else { Status::Ok };
        if accept == 0 {
            match pull {
                Some(_) => self.send(ep_id, &Op::PullDone { sender_req, status: 0 }, Payload::None, false),
                None => self.send(
                    ep_id,
                    &Op::Rtr { sender_req, recv_req: 0, accept_len: 0 },
                    Payload::None,
                    false,
                ),
            }
            self.ops.remove(&op);
            return crate::Start::Done(truncated, OpInfo { length: 0, sender_tag, value: 0 });
        }
        match pull {
            Some((addr, key)) => {
                let kind = OpKind::PullRecv { accept, total, sender_req, sender_tag };
                self.set_op(op, ep_id, kind, 1, buf.cookie());
                self.rmas.push_back(RmaRequest {
                    link,
                    token: op,
                    kind: RmaKind::Get,
                    local: buf.ptr(),
                    len: accept,
                    remote_addr: addr,
                    remote_key: key,
                });
            }
            None => {
                let cookie = buf.cookie();
                let kind = OpKind::PushRecv { buf, accept, total, received: 0, sender_tag };
                self.set_op(op, ep_id, kind, 0, cookie);
                let rtr = Op::Rtr { sender_req, recv_req: op.raw(), accept_len: accept as u64 };
                self.send(ep_id, &rtr, Payload::None, false);
            }
        }
        crate::Start::Pending(op)
    }

    /// Enters (or re-enters) operation `op` with `kind`; `cookie` is the API's name for it.
    pub(crate) fn set_op(
        &mut self,
        op: OpId,
        ep: EndpointId,
        kind: OpKind,
        tokens: u32,
        cookie: Option<crate::Cookie>,
    ) {
        let record = crate::engine::Operation {
            ep: Some(self.eps.canonical(ep)),
            kind,
            tokens,
            rma_issued: false,
            implicit: false,
            flush_reports: false,
            result: None,
            cookie,
        };
        self.ops.insert(op, record);
    }

    /// The get of a receiver-pull receive finished: tell the sender, complete the receive.
    pub(crate) fn pull_recv_done(&mut self, op_id: OpId, status: Status) {
        let Some(op) = self.ops.get_mut(&op_id) else { return };
        op.tokens = op.tokens.saturating_sub(1);
        let OpKind::PullRecv { accept, total, sender_req, sender_tag } = op.kind else { return };
        let ep_id = op.ep.expect("pull receives have an endpoint");
        let code = status.code().clamp(-100, 0) as i8;
        self.send(ep_id, &Op::PullDone { sender_req, status: code }, Payload::None, false);
        let status = match status {
            Status::Ok if accept < total => Status::MessageTruncated,
            other => other,
        };
        let length = if status == Status::Ok || status == Status::MessageTruncated { accept } else { 0 };
        self.finish_op(op_id, status, OpInfo { length, sender_tag, value: 0 });
    }

    /// The receiver answered `Rtr`: push the accepted bytes.
    pub(crate) fn on_rtr(&mut self, ep_id: EndpointId, sender_req: u64, recv_req: u64, accept_len: u64) {
        let id = OpId::from_raw(sender_req);
        let Some(op) = self.ops.get_mut(&id).filter(|op| op.ep == Some(ep_id)) else {
            tracing::debug!(%ep_id, sender_req, "Rtr for no waiting send");
            return;
        };
        let OpKind::AwaitRtr { buf } = &op.kind else { return };
        let buf = buf.clone();
        let accept = usize::try_from(accept_len).unwrap_or(usize::MAX).min(buf.len());
        if accept == 0 {
            self.finish_op(id, Status::Ok, OpInfo::default());
            return;
        }
        op.kind = OpKind::Push { buf, len: accept, sent: 0, frag: Frag::Rndv { recv_req } };
        if let Some(ep) = self.eps.get_mut(&ep_id) {
            ep.bulk.push_back(id);
        }
        self.bulk_active.insert(ep_id);
    }

    /// The receiver of a pull is done with our buffer.
    pub(crate) fn on_pull_done(&mut self, ep_id: EndpointId, sender_req: u64, status: i8) {
        let id = OpId::from_raw(sender_req);
        let Some(op) = self.ops.get(&id).filter(|op| op.ep == Some(ep_id)) else {
            tracing::debug!(%ep_id, sender_req, "PullDone for no waiting send");
            return;
        };
        let OpKind::AwaitPullDone { len } = op.kind else { return };
        let status = crate::status::from_wire(status);
        let length = if status == Status::Ok { len } else { 0 };
        self.finish_op(id, status, OpInfo { length, ..OpInfo::default() });
    }

    /// A data fragment of operation `id` (a push receive or an emulated get) from `ep_id`: checks
    /// it lies inside the operation's buffer and counts it. Returns where its bytes go, or `None`
    /// when the fragment was refused (the link is then closed: the peer broke the protocol).
    pub(crate) fn claim_fragment(
        &mut self,
        ep_id: EndpointId,
        id: u64,
        offset: u64,
        len: usize,
    ) -> Option<(OpId, *mut u8, RecvBuffer, usize)> {
        let op_id = OpId::from_raw(id);
        let link = self.eps.get(&ep_id)?.link;
        let Some(op) = self.ops.get_mut(&op_id).filter(|op| op.ep == Some(ep_id) && op.result.is_none())
        else {
            tracing::warn!(%ep_id, id, "data for no receiving operation; closing the link");
            self.protocol_violation(link);
            return None;
        };
        let (buf, cap, received) = match &mut op.kind {
            OpKind::PushRecv { buf, accept, received, .. } => (*buf, *accept, received),
            OpKind::Get { buf, received, .. } => (*buf, buf.len(), received),
            _ => {
                tracing::warn!(%ep_id, id, "data for an operation that takes none; closing the link");
                self.protocol_violation(link);
                return None;
            }
        };
        let fits =
            usize::try_from(offset).ok().filter(|off| off.checked_add(len).is_some_and(|end| end <= cap));
        match fits {
            Some(off) => {
                *received += len;
                Some((op_id, buf.ptr().wrapping_add(off), buf, off))
            }
            None => {
                tracing::warn!(%ep_id, id, offset, len, "data fragment outside its message; closing the link");
                self.finish_op(op_id, Status::IoError, OpInfo::default());
                self.protocol_violation(link);
                None
            }
        }
    }

    /// Completes a push receive once every accepted byte arrived (placed bytes still being
    /// written hold the completion until their tokens return).
    pub(crate) fn finish_if_received(&mut self, op_id: OpId) {
        let Some(op) = self.ops.get(&op_id) else { return };
        if let OpKind::PushRecv { accept, total, received, sender_tag, .. } = op.kind {
            if received >= accept {
                let status = if accept < total { Status::MessageTruncated } else { Status::Ok };
                self.finish_op(op_id, status, OpInfo { length: accept, sender_tag, value: 0 });
            }
        }
    }
}
