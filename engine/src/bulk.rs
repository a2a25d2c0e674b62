//! Bulk transfers: rendezvous data, large streams, emulated puts and the answers to a peer's
//! gets go out in fragments, at most a window of lent fragments per operation in the caller's
//! hands, and made only when the caller drained the outbox, so a small message sent meanwhile
//! waits behind a few fragments, never behind a whole transfer, and a transport that pushes back
//! paces them.

use zcx_dataplane::proto::wire::Op;

use crate::caps::LinkCaps;
use crate::engine::{Engine, Frag, OpKind, Operation, Phase};
use crate::ids::{EndpointId, OpId};
use crate::output::{Header, OpInfo, Payload, Transmit};
use crate::Status;

impl Engine {
    /// Makes fragments for endpoints with bulk work, at most a window per operation.
    pub(crate) fn refill(&mut self) {
        let active: Vec<EndpointId> = self.bulk_active.drain().collect();
        for ep in active {
            self.pump(ep);
        }
    }

    /// Sends the fragments of the endpoint's front bulk operations as far as their windows allow.
    pub(crate) fn pump(&mut self, ep_id: EndpointId) {
        loop {
            let Some(ep) = self.eps.get(&ep_id) else { return };
            if !ep.answered || matches!(ep.phase, Phase::Dead(_)) {
                return;
            }
            let caps = ep.caps;
            let Some(&op_id) = ep.bulk.front() else { return };
            if self.push_fragments(ep_id, op_id, caps) {
                if let Some(ep) = self.eps.get_mut(&ep_id) {
                    ep.bulk.pop_front();
                }
            } else {
                return;
            }
        }
    }

    /// Sends fragments of `op_id`; true when it needs no more (done or gone).
    fn push_fragments(&mut self, ep_id: EndpointId, op_id: OpId, caps: LinkCaps) -> bool {
        let window = self.config.fragment_window;
        loop {
            let Some(op) = self.ops.get_mut(&op_id) else { return true };
            if op.result.is_some() {
                return true;
            }
            if let OpKind::GetReply { .. } = op.kind {
                return self.get_reply_fragments(ep_id, op_id, caps);
            }
            let OpKind::Push { buf, len, sent, frag } = &mut op.kind else { return true };
            if *sent >= *len {
                // Done once its fragments are back (`return_token`); a put once acknowledged.
                if op.tokens == 0 && !matches!(frag, Frag::Put { .. }) {
                    let length = *len;
                    self.finish_op(op_id, Status::Ok, OpInfo { length, ..OpInfo::default() });
                }
                return true;
            }
            if op.tokens >= window {
                return false;
            }
            let placed = caps.placed
                && match frag {
                    Frag::Rndv { .. } => true,
                    Frag::Stream => caps.place_streams,
                    Frag::Put { .. } => false,
                };
            let n = (*len - *sent).min(caps.fragment_payload(placed));
            let header = match *frag {
                Frag::Rndv { recv_req } => Op::RndvData { recv_req, offset: *sent as u64 },
                Frag::Stream => Op::Stream,
                Frag::Put { region, key, addr } => Op::Put {
                    req: op_id.raw(),
                    region,
                    key,
                    addr,
                    len: *len as u64,
                    offset: *sent as u64,
                    ack: *sent + n == *len,
                },
            };
            let payload = Payload::Borrowed { op: op_id, ptr: buf.at(*sent), len: n };
            *sent += n;
            self.send(ep_id, &header, payload, placed);
        }
    }

    /// Sends up to a window of fragments of a get's answer, each checked and copied while the
    /// remote-access table keeps the region mapped; true when the answer is complete.
    fn get_reply_fragments(&mut self, ep_id: EndpointId, op_id: OpId, caps: LinkCaps) -> bool {
        let Some(link) = self.eps.get(&ep_id).map(|ep| ep.link) else { return true };
        for _ in 0..self.config.fragment_window {
            let Some(Operation { kind: OpKind::GetReply { req, region, key, addr, len, offset }, .. }) =
                self.ops.get(&op_id)
            else {
                return true;
            };
            let (req, region, key, addr, len, offset) = (*req, *region, *key, *addr, *len, *offset);
            if offset >= len {
                self.reply(link, &Op::RmaAck { req, status: 0, value: 0 });
                self.finish_op(op_id, Status::Ok, OpInfo::default());
                return true;
            }
            let n = (len - offset).min(caps.fragment_payload(caps.placed) as u64);
            // Every byte of it is the region's copy below, or it is recycled unsent.
            let mut data = self.large_spare_to_overwrite(n as usize);
            // Checked again: the region may have been unmapped since the request.
            if let Err(err) =
                zcx_dataplane::proto::rma_exec::get(&self.access, region, &key, addr + offset, &mut data)
            {
                self.recycle(data);
                let status = zcx_dataplane::proto::rma_exec::status_of(err);
                self.reply(link, &Op::RmaAck { req, status, value: 0 });
                self.finish_op(op_id, Status::Ok, OpInfo::default());
                return true;
            }
            let header = Header::of(&Op::GetData { req, offset });
            self.transmits.push_back(Transmit {
                link,
                header,
                payload: Payload::Owned(data),
                placed: caps.placed,
            });
            if let Some(Operation { kind: OpKind::GetReply { offset: at, .. }, .. }) =
                self.ops.get_mut(&op_id)
            {
                *at += n;
            }
        }
        // More when the caller drained these.
        self.bulk_active.insert(ep_id);
        false
    }
}
