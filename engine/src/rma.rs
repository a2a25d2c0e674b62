//! One-sided operations (`ucp_put_nbx`, `ucp_get_nbx`, `ucp_atomic_op_nbx`), fences and flushes.
//!
//! A link whose caps say native put/get/atomics gets an [`RmaRequest`] for the transport to
//! execute; any other link carries `Put`/`Get`/`Atomic` frames that the target's engine executes
//! on its remote-access table (which refuses bad keys, bounds and protection before touching a
//! byte) and acknowledges with `RmaAck`.
//!
//! A fence (`ucp_worker_fence`) holds the endpoint's later RMA operations until every earlier
//! one completed remotely. A flush (`ucp_ep_flush_nbx`) completes once every earlier outgoing
//! operation of the endpoint completed and, unless the engine's records already prove the rest
//! (nothing going out here or in the caller's transport, no untracked implicit put uncovered),
//! once the peer answered a `FlushReq` sent behind them; a worker flush once every endpoint's
//! did. A flush close always asks the peer.

use std::sync::Arc;

use zcx_dataplane::proto::wire::{AtomicOp, Op};
use zcx_dataplane::LinkId;

use crate::buffer::{RecvBuffer, SendBuffer};
use crate::engine::{Engine, Frag, OpKind, Phase, Start};
use crate::ids::{EndpointId, OpId};
use crate::output::{OpInfo, Payload, RmaKind, RmaRequest};
use crate::Status;

/// How an RMA operation leaves once issued.
pub(crate) enum Issue {
    /// A request for the transport.
    Native(RmaRequest),
    /// A frame for the target's engine.
    Frame(Op),
    /// Put fragments, paced like any bulk transfer.
    Bulk,
}

/// A remote key as the API unpacked it.
#[derive(Clone, Debug)]
pub struct RemoteKey {
    /// The owner's region id (for emulated RMA).
    pub region: u64,
    /// The region's access key (for emulated RMA).
    pub access_key: [u8; 16],
    /// The packed key the transport uses for native RMA; `None` when the key has nothing for
    /// this link's transport (RMA is then emulated).
    pub packed: Option<Arc<[u8]>>,
}

impl Engine {
    /// `ucp_put_nbx`: writes `buf` to `remote_addr` of the peer's memory under `key`.
    pub fn put(
        &mut self,
        ep_id: EndpointId,
        buf: SendBuffer,
        remote_addr: u64,
        key: &RemoteKey,
    ) -> Result<OpId, Status> {
        let ep = self.usable(ep_id)?;
        let cookie = buf.cookie();
        let (link, caps) = (ep.link, ep.caps);
        let (kind, issue) = match &key.packed {
            Some(packed) if caps.native_put => {
                native(link, RmaKind::Put, buf.at(0).cast_mut(), buf.len(), remote_addr, packed)
            }
            _ if buf.is_empty() => (
                OpKind::Emulated,
                Issue::Frame(Op::Put {
                    req: 0,
                    region: key.region,
                    key: key.access_key,
                    addr: remote_addr,
                    len: 0,
                    offset: 0,
                    ack: true,
                }),
            ),
            _ => {
                let len = buf.len();
                let frag = Frag::Put { region: key.region, key: key.access_key, addr: remote_addr };
                (OpKind::Push { buf, len, sent: 0, frag }, Issue::Bulk)
            }
        };
        Ok(self.submit_rma(ep_id, kind, issue, cookie))
    }

    /// `ucp_put_nbi`: writes `bytes` to `remote_addr` of the peer's memory and returns once it
    /// no longer needs them (small ones go inline, larger ones from an engine copy). There is no
    /// completion: the endpoint's next flush completes once the put did, with the status of the
    /// first implicit put the owner refused since the previous flush.
    pub fn put_nbi(
        &mut self,
        ep_id: EndpointId,
        bytes: &[u8],
        remote_addr: u64,
        key: &RemoteKey,
    ) -> Result<(), Status> {
        let ep = self.usable(ep_id)?;
        let caps = ep.caps;
        let len = bytes.len();
        let native = caps.native_put && key.packed.is_some();
        if !native && len <= caps.max_payload() && len < caps.rndv_threshold && ep.fenced.is_empty() {
            // Untracked, as UCX's are: the target answers only a refusal (to request 0), and
            // that answer precedes its answer to the next flush on the link.
            let frame = Op::Put {
                req: 0,
                region: key.region,
                key: key.access_key,
                addr: remote_addr,
                len: len as u64,
                offset: 0,
                ack: false,
            };
            let header = crate::output::Header::of(&frame);
            self.send_eager(ep_id, header, bytes.as_ptr(), len)?;
            if let Some(ep) = self.eps.get_mut(&ep_id) {
                ep.untracked_puts += 1;
            }
            return Ok(());
        }
        // A `Vec`, not a `Box`: moving a box into the table would assert it unique again and so
        // invalidate the pointer the send buffer holds; moving a vector leaves its heap alone.
        let copy: Vec<u8> = bytes.to_vec();
        // SAFETY: the copy is the engine's, kept in `implicit_copies` until the operation ends.
        let buf = unsafe { SendBuffer::new(copy.as_ptr(), len) };
        let op = self.put(ep_id, buf, remote_addr, key)?;
        if let Some(record) = self.ops.get_mut(&op) {
            record.implicit = true;
            self.implicit_copies.insert(op, copy);
        }
        Ok(())
    }

    /// `ucp_get_nbx`: reads `buf.len()` bytes at `remote_addr` of the peer's memory into `buf`.
    pub fn get(
        &mut self,
        ep_id: EndpointId,
        buf: RecvBuffer,
        remote_addr: u64,
        key: &RemoteKey,
    ) -> Result<OpId, Status> {
        let ep = self.usable(ep_id)?;
        let cookie = buf.cookie();
        let (link, caps) = (ep.link, ep.caps);
        let (kind, issue) = match &key.packed {
            Some(packed) if caps.native_get => {
                native(link, RmaKind::Get, buf.ptr(), buf.len(), remote_addr, packed)
            }
            _ => (
                OpKind::Get { buf, received: 0 },
                Issue::Frame(Op::Get {
                    req: 0,
                    region: key.region,
                    key: key.access_key,
                    addr: remote_addr,
                    len: buf.len() as u64,
                }),
            ),
        };
        Ok(self.submit_rma(ep_id, kind, issue, cookie))
    }

    /// `ucp_get_nbi`: [`Engine::get`] whose failure the endpoint's next flush also reports.
    pub fn get_nbi(
        &mut self,
        ep_id: EndpointId,
        buf: RecvBuffer,
        remote_addr: u64,
        key: &RemoteKey,
    ) -> Result<OpId, Status> {
        let op = self.get(ep_id, buf, remote_addr, key)?;
        if let Some(record) = self.ops.get_mut(&op) {
            record.flush_reports = true;
        }
        Ok(op)
    }

    /// `ucp_atomic_op_nbx` on the `size`-byte (4 or 8) word at `remote_addr`; the completion's
    /// `info.value` is the old value.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(
        &mut self,
        ep_id: EndpointId,
        op: AtomicOp,
        size: u8,
        value: u64,
        compare: u64,
        remote_addr: u64,
        key: &RemoteKey,
    ) -> Result<OpId, Status> {
        if !matches!(size, 4 | 8) || remote_addr % u64::from(size) != 0 {
            return Err(Status::InvalidParam);
        }
        let ep = self.usable(ep_id)?;
        let (link, caps) = (ep.link, ep.caps);
        let (kind, issue) = match &key.packed {
            Some(packed) if caps.native_atomics => native(
                link,
                RmaKind::Atomic { op, size, value, compare },
                std::ptr::null_mut(),
                usize::from(size),
                remote_addr,
                packed,
            ),
            _ => (
                OpKind::Emulated,
                Issue::Frame(Op::Atomic {
                    req: 0,
                    region: key.region,
                    key: key.access_key,
                    addr: remote_addr,
                    op,
                    size,
                    fetch: true,
                    value,
                    compare,
                }),
            ),
        };
        Ok(self.submit_rma(ep_id, kind, issue, None))
    }

    /// Asks the peer whether it vouches for the remote key whose wire form is `claim` (same-host
    /// RMA maps a peer's region only after its owner did): completes with the owner's verdict,
    /// OK or the status an access with the key would get.
    pub fn key_check(&mut self, ep_id: EndpointId, claim: &[u8]) -> Result<OpId, Status> {
        self.usable(ep_id)?;
        let op = self.new_op(Some(ep_id), OpKind::Emulated, None);
        let claim = self.pooled_copy(claim);
        self.send(ep_id, &Op::KeyCheck { req: op.raw() }, Payload::Owned(claim), false);
        Ok(op)
    }

    /// `ucp_ep_fence`: RMA operations started after this one are issued only once every RMA
    /// operation started before it completed.
    pub fn fence(&mut self, ep_id: EndpointId) -> Result<(), Status> {
        self.usable(ep_id)?;
        let ep = self.eps.get_mut(&ep_id).expect("usable");
        if ep.rma_in_flight > 0 || !ep.fenced.is_empty() {
            ep.fenced.push_back(None);
        }
        Ok(())
    }

    /// Whether every one-sided operation the endpoint sent to its peer has been performed there:
    /// none in flight or held behind a fence, and every untracked implicit put covered by a
    /// completed flush. Only then may the caller perform later ones itself (a CPU copy into the
    /// peer's mapped memory) without overtaking earlier ones still on their way.
    pub fn rma_settled(&self, ep_id: EndpointId) -> bool {
        self.eps.get(&ep_id).is_some_and(|ep| {
            ep.rma_in_flight == 0 && ep.fenced.is_empty() && ep.flushed_puts == ep.untracked_puts
        })
    }

    /// Starts a flush nobody is told about, for a caller waiting for [`Engine::rma_settled`]:
    /// its completion covers the untracked puts sent so far. Returns its id
    /// ([`Engine::is_pending`] says when it ended).
    pub fn settle_rma(&mut self, ep_id: EndpointId) -> Result<OpId, Status> {
        self.usable(ep_id)?;
        Ok(self.start_flush_as(ep_id, None, true, false))
    }

    /// Whether operation `op` has not ended yet.
    pub fn is_pending(&self, op: OpId) -> bool {
        self.ops.contains_key(&op)
    }

    /// `ucp_ep_flush_nbx`: completes once every earlier outgoing operation of the endpoint
    /// completed: a one-sided one at the target, a send at the origin (UCP's promise).
    /// `delivered`: the caller's transport holds nothing of the endpoint's link any more, every
    /// frame being where it reaches the peer even if this process exits (a socket's kernel
    /// buffer, the peer's ring). Then, with nothing of the endpoint's still going out here and
    /// no untracked implicit put uncovered, the flush completes on the engine's records, as
    /// UCX's does over a socket or shared memory, without the peer's progress; otherwise it asks
    /// the peer (`FlushReq`) and completes on its answer.
    pub fn flush(&mut self, ep_id: EndpointId, delivered: bool) -> Result<OpId, Status> {
        self.usable(ep_id)?;
        let local = delivered && self.nothing_outgoing(ep_id);
        Ok(self.start_flush_as(ep_id, None, false, local))
    }

    /// `ucp_worker_flush_nbx`: the flush of every live endpoint; completes with the first
    /// failure among them, or OK. `delivered` says it of a link as [`Engine::flush`]'s does.
    pub fn flush_worker(&mut self, delivered: impl Fn(LinkId) -> bool) -> Start {
        let mut eps: Vec<EndpointId> = self
            .eps
            .iter()
            .filter(|(_, ep)| matches!(ep.phase, Phase::Ready | Phase::Connecting))
            .map(|(id, _)| id)
            .collect();
        if eps.is_empty() {
            return Start::Done(Status::Ok, OpInfo::default());
        }
        eps.sort_unstable();
        let parent = self.new_op(None, OpKind::FlushAll { remaining: eps.len() }, None);
        for ep in eps {
            let link = self.eps.get(&ep).map(|state| state.link);
            let local = link.is_some_and(&delivered) && self.nothing_outgoing(ep);
            self.start_flush_as(ep, Some(parent), false, local);
        }
        Start::Pending(parent)
    }

    /// Whether nothing of the endpoint's is on its way out through this engine: no outgoing
    /// operation pending (sends, one-sided operations, fenced ones), no frame queued for its
    /// link or held until it connects. A scan of the operations: for a flush, not a message.
    fn nothing_outgoing(&self, ep_id: EndpointId) -> bool {
        let Some(ep) = self.eps.get(&ep_id) else { return false };
        let link = ep.link;
        ep.held.is_empty()
            && ep.bulk.is_empty()
            && ep.fenced.is_empty()
            && ep.rma_in_flight == 0
            && !self.transmits.iter().any(|t| t.link == link)
            && !self.ops.values().any(|op| {
                op.ep == Some(ep_id)
                    && !op.kind.is_incoming()
                    && !matches!(op.kind, OpKind::Flush { .. } | OpKind::Close)
            })
    }

    /// Starts an endpoint flush; `unreported` for one nobody outside waits for (the one a flush
    /// close waits for, an ordering flush).
    ///
    /// A `local` flush completes on the engine's records, without asking the peer, unless an
    /// untracked implicit put is not yet covered by a completed flush: the caller found nothing
    /// of the endpoint's still going out, here or in its transport, so every send is complete
    /// and delivered and every one-sided operation answered, as UCX's flush over a socket or
    /// shared memory completes. A peer that is not progressing (its thread waiting for ours)
    /// then cannot hold the flush up. Any other flush sends `FlushReq` behind everything sent so
    /// far and completes on the answer, once the operations before it completed too: the only
    /// proof that a frame still queued, or sent by a transport that resends until acknowledged,
    /// reached the peer (a flush close needs that proof).
    pub(crate) fn start_flush_as(
        &mut self,
        ep_id: EndpointId,
        parent: Option<OpId>,
        unreported: bool,
        local: bool,
    ) -> OpId {
        let (covers, uncovered) = self
            .eps
            .get(&ep_id)
            .map_or((0, false), |ep| (ep.untracked_puts, ep.untracked_puts != ep.flushed_puts));
        let ask = !local || uncovered;
        let op = self.new_op(Some(ep_id), OpKind::Flush { acked: !ask, parent, unreported, covers }, None);
        if let Some(ep) = self.eps.get_mut(&ep_id) {
            ep.flushes += 1;
        }
        if ask {
            self.send(ep_id, &Op::FlushReq { id: op.raw() }, Payload::None, false);
        } else {
            self.recheck_flushes(ep_id);
        }
        op
    }

    /// The peer answered a flush request.
    pub(crate) fn on_flush_ack(&mut self, ep_id: EndpointId, id: u64) {
        let id = OpId::from_raw(id);
        if let Some(op) = self.ops.get_mut(&id).filter(|op| op.ep == Some(ep_id)) {
            if let OpKind::Flush { acked, .. } = &mut op.kind {
                *acked = true;
            }
        }
        self.recheck_flushes(ep_id);
    }

    /// Marks every flush of the endpoint answered and completes those no older operation holds
    /// back (the peer closed in an orderly way: nothing more will answer them).
    pub(crate) fn ack_flushes(&mut self, ep_id: EndpointId) {
        for op in self.ops.values_mut().filter(|op| op.ep == Some(ep_id)) {
            if let OpKind::Flush { acked, .. } = &mut op.kind {
                *acked = true;
            }
        }
        self.recheck_flushes(ep_id);
    }

    /// Enters an RMA operation and issues it, or holds it behind a fence.
    fn submit_rma(
        &mut self,
        ep_id: EndpointId,
        kind: OpKind,
        mut issue: Issue,
        cookie: Option<crate::Cookie>,
    ) -> OpId {
        let op = self.new_op(Some(ep_id), kind, cookie);
        // The wire and the transport name the operation by its id.
        match &mut issue {
            Issue::Native(request) => request.token = op,
            Issue::Frame(Op::Put { req, .. } | Op::Atomic { req, .. } | Op::Get { req, .. }) => {
                *req = op.raw()
            }
            Issue::Frame(_) | Issue::Bulk => {}
        }
        let ep = self.eps.get_mut(&ep_id).expect("usable");
        if ep.fenced.is_empty() {
            self.issue_rma(ep_id, op, issue);
        } else {
            ep.fenced.push_back(Some(op));
            self.fenced_issues.insert(op, issue);
        }
        op
    }

    /// Sends an RMA operation on its way.
    fn issue_rma(&mut self, ep_id: EndpointId, op_id: OpId, issue: Issue) {
        let Some(op) = self.ops.get_mut(&op_id) else { return };
        op.rma_issued = true;
        if let Some(ep) = self.eps.get_mut(&ep_id) {
            ep.rma_in_flight += 1;
        }
        match issue {
            Issue::Native(request) => {
                op.tokens += 1;
                self.rmas.push_back(request);
            }
            Issue::Frame(frame) => self.send(ep_id, &frame, Payload::None, false),
            Issue::Bulk => {
                if let Some(ep) = self.eps.get_mut(&ep_id) {
                    ep.bulk.push_back(op_id);
                }
                self.bulk_active.insert(ep_id);
            }
        }
    }

    /// Issues the RMA operations a fence held, up to the next fence that still has operations
    /// before it in flight.
    pub(crate) fn release_fenced(&mut self, ep_id: EndpointId) {
        loop {
            let Some(ep) = self.eps.get_mut(&ep_id) else { return };
            match ep.fenced.front() {
                None => return,
                Some(None) => {
                    if ep.rma_in_flight > 0 {
                        return;
                    }
                    ep.fenced.pop_front();
                }
                Some(Some(op)) => {
                    let op = *op;
                    ep.fenced.pop_front();
                    if let Some(issue) = self.fenced_issues.remove(&op) {
                        self.issue_rma(ep_id, op, issue);
                    }
                }
            }
        }
    }

    /// The target answered an emulated RMA operation.
    pub(crate) fn on_rma_ack(&mut self, ep_id: EndpointId, req: u64, status: i8, value: u64) {
        if req == 0 {
            // The owner refused an untracked implicit put: the next flush reports it.
            if let Some(ep) = self.eps.get_mut(&ep_id) {
                ep.implicit_failure.get_or_insert(crate::status::from_wire(status));
            }
            return;
        }
        let id = OpId::from_raw(req);
        let Some(op) = self.ops.get_mut(&id).filter(|op| op.ep == Some(ep_id)) else {
            tracing::debug!(%ep_id, req, "RMA ack for no operation");
            return;
        };
        let status = crate::status::from_wire(status);
        match &mut op.kind {
            OpKind::Get { buf, received, .. } => {
                let (len, received) = (buf.len(), *received);
                let status = if status == Status::Ok && received != len { Status::IoError } else { status };
                self.finish_op(id, status, OpInfo { length: received, ..OpInfo::default() });
            }
            OpKind::Emulated => self.finish_op(id, status, OpInfo { value, ..OpInfo::default() }),
            OpKind::Push { frag: Frag::Put { .. }, sent, len, .. } => {
                if status != Status::Ok || *sent >= *len {
                    // A refusal stops the fragments: the put has its result.
                    self.finish_op(id, status, OpInfo::default());
                }
            }
            _ => tracing::debug!(%ep_id, req, "RMA ack for an operation that expects none"),
        }
    }
}

/// How a native one-sided operation is issued: one request to the transport, whose token the
/// engine sets when it issues it.
fn native(
    link: LinkId,
    kind: RmaKind,
    local: *mut u8,
    len: usize,
    remote_addr: u64,
    packed: &Arc<[u8]>,
) -> (OpKind, Issue) {
    let request = RmaRequest {
        link,
        token: OpId::from_raw(0),
        kind,
        local,
        len,
        remote_addr,
        remote_key: Arc::clone(packed),
    };
    (OpKind::Native, Issue::Native(request))
}
