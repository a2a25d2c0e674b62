//! Transport events: frames from peers, placed fragments, returned payloads, finished native
//! RMA, failed links. Every frame comes from a peer and is checked before it is acted on: a
//! frame that does not decode, data for no receiving operation or outside its message, or a
//! frame on a link without an endpoint closes the link (failing its endpoint), never panics.

use zcx_dataplane::proto::rma_exec;
use zcx_dataplane::proto::wire::Op;
use zcx_dataplane::{LinkId, RemoteAccess};

use crate::engine::{Engine, OpKind, Phase};
use crate::ids::{EndpointId, OpId};
use crate::output::{Event, Extension, LentAm, OpInfo, Placement};
use crate::Status;

/// What a frame handled by [`Engine::handle_frame_lending_direct`] left for its caller.
#[derive(Debug)]
pub enum Received<'a> {
    /// Nothing to act on now (events, if any, wait in [`Engine::poll_event`]).
    Nothing,
    /// The operation the frame completed.
    Completed(crate::Completion),
    /// An eager active message to give its handler in place.
    Lent(LentAm<'a>),
}

impl Engine {
    /// [`Engine::handle_frame`] for a frame the caller can lend out: an eager active message
    /// for a live endpoint comes back in place ([`LentAm`], borrowing `frame`, no copy and no
    /// event) for the caller to give its handler; every other frame is handled as
    /// `handle_frame` handles it, and `None` comes back.
    ///
    /// The header fields that decide what happens are read out of `frame` once, before
    /// anything acts on them; the lent header and data are the peer's bytes, which only the
    /// handler reads.
    #[inline]
    pub fn handle_frame_lending<'a>(&mut self, link: LinkId, frame: &'a [u8]) -> Option<LentAm<'a>> {
        // Small messages first, without the general decoder's checked reads.
        let Some((op, payload)) = Op::decode_eager(frame) else {
            self.handle_general_frame(link, frame);
            return None;
        };
        let ep = self.receiving_ep(link)?;
        if let Op::AmEager { am_id, reply, header_len } = op {
            // `decode_eager` checked that the header fits the payload.
            let (header, data) = payload.split_at(usize::from(header_len));
            return Some(LentAm { ep, am_id, reply, header, data });
        }
        self.on_eager(link, ep, op, payload);
        None
    }

    /// [`Engine::handle_frame`] whose caller takes the frame's completion straight, when the
    /// frame completed an operation and nothing was reported before it (the usual message:
    /// one receive done); everything else goes to [`Engine::poll_event`] as usual. The caller
    /// acts on the returned completion before it polls events.
    #[inline]
    pub fn handle_frame_direct(&mut self, link: LinkId, frame: &[u8]) -> Option<crate::Completion> {
        let Some((op, payload)) = Op::decode_eager(frame) else {
            self.handle_general_frame(link, frame);
            return None;
        };
        let ep = self.receiving_ep(link)?;
        self.eager_direct(link, ep, op, payload)
    }

    /// An eager frame from `ep` whose completion, if it makes one first, goes straight back.
    #[inline(always)]
    fn eager_direct(
        &mut self,
        link: LinkId,
        ep: EndpointId,
        op: Op,
        payload: &[u8],
    ) -> Option<crate::Completion> {
        if self.events.is_empty() {
            match op {
                Op::TagEager { tag, sync: false, .. } => return self.tag_eager_direct(ep, tag, payload),
                Op::Stream => {
                    if let Ok(done) = self.stream_direct(ep, payload) {
                        return done;
                    }
                }
                _ => {}
            }
        }
        self.events.open_direct();
        self.on_eager(link, ep, op, payload);
        self.events.close_direct()
    }

    /// [`Engine::handle_frame_lending`] whose caller takes the frame's completion straight, as
    /// with [`Engine::handle_frame_direct`].
    #[inline]
    pub fn handle_frame_lending_direct<'a>(&mut self, link: LinkId, frame: &'a [u8]) -> Received<'a> {
        let Some((op, payload)) = Op::decode_eager(frame) else {
            self.handle_general_frame(link, frame);
            return Received::Nothing;
        };
        let Some(ep) = self.receiving_ep(link) else { return Received::Nothing };
        if let Op::AmEager { am_id, reply, header_len } = op {
            // `decode_eager` checked that the header fits the payload.
            let (header, data) = payload.split_at(usize::from(header_len));
            return Received::Lent(LentAm { ep, am_id, reply, header, data });
        }
        match self.eager_direct(link, ep, op, payload) {
            Some(done) => Received::Completed(done),
            None => Received::Nothing,
        }
    }

    /// A whole frame arrived on `link`.
    #[inline]
    pub fn handle_frame(&mut self, link: LinkId, frame: &[u8]) {
        // Small messages first, without the general decoder's checked reads.
        if let Some((op, payload)) = Op::decode_eager(frame) {
            let Some(ep) = self.receiving_ep(link) else { return };
            self.on_eager(link, ep, op, payload);
            return;
        }
        self.handle_general_frame(link, frame);
    }

    /// A frame `decode_eager` decoded, from endpoint `ep`.
    #[inline]
    fn on_eager(&mut self, link: LinkId, ep: EndpointId, op: Op, payload: &[u8]) {
        match op {
            Op::TagEager { tag, sync, sender_req } => {
                self.on_tag_eager(link, ep, tag, sync.then_some(sender_req), payload)
            }
            Op::AmEager { am_id, reply, header_len } => {
                self.on_am_eager(ep, am_id, reply, header_len, payload)
            }
            Op::Stream => self.on_stream(ep, payload),
            other => self.on_op(link, ep, other, payload),
        }
    }

    /// A frame the eager decoder does not take: decoded in full.
    #[inline(never)]
    fn handle_general_frame(&mut self, link: LinkId, frame: &[u8]) {
        let (op, payload) = match Op::decode(frame) {
            Ok(decoded) => decoded,
            Err(err) => {
                tracing::warn!(?link, %err, "malformed frame from peer; closing the link");
                self.protocol_violation(link);
                return;
            }
        };
        if let Op::Hello = op {
            self.events.push_back(Event::Handshake { link, payload: payload.to_vec() });
            return;
        }
        if let Op::FlushReq { id } = op {
            if !self.link_eps.contains_key(&link) {
                // Our endpoint closed after taking everything the peer sent before this flush:
                // the peer's operations are complete here, which is all its flush asks.
                self.reply(link, &Op::FlushAck { id });
                return;
            }
        }
        let Some(ep) = self.receiving_ep(link) else { return };
        self.on_op(link, ep, op, payload);
    }

    /// The header of a placed fragment of `len` bytes arrived: where its payload goes, or `None`
    /// to have it dropped (a zero-length fragment, or a refused one: the link is then closed).
    /// A returned placement is answered with [`Engine::place_done`].
    pub fn handle_placed(&mut self, link: LinkId, header: &[u8], len: usize) -> Option<Placement> {
        let (id, offset) = match Op::decode(header) {
            Ok((Op::RndvData { recv_req, offset }, [])) => (recv_req, offset),
            Ok((Op::GetData { req, offset }, [])) => (req, offset),
            Ok((Op::Stream, [])) => return self.place_stream(link, len),
            _ => {
                tracing::warn!(?link, "placed frame that carries no data fragment; closing the link");
                self.protocol_violation(link);
                return None;
            }
        };
        let ep = self.receiving_ep(link)?;
        let (op, dest, _, _) = self.claim_fragment(ep, id, offset, len)?;
        if len == 0 {
            self.finish_if_received(op);
            return None;
        }
        if let Some(record) = self.ops.get_mut(&op) {
            record.tokens += 1;
        }
        self.finish_if_received(op);
        Some(Placement { dest, token: op })
    }

    /// A placed payload was written (or failed to be).
    pub fn place_done(&mut self, token: OpId, result: Result<(), Status>) {
        if self.ops.get(&token).is_some_and(|op| op.kind.is_stream_placement()) {
            self.stream_place_done(token, result.err().unwrap_or(Status::Ok));
            return;
        }
        if let Err(status) = result {
            // Its bytes were counted when the header came: the receive may already hold an OK.
            self.fail_op(token, status);
        }
        self.return_token(token);
    }

    /// The caller is done with a [`crate::Payload::Borrowed`] of operation `op` (sent, copied, or not
    /// sent with an error).
    pub fn send_done(&mut self, op: OpId, result: Result<(), Status>) {
        if let Err(status) = result {
            self.finish_op(op, status, OpInfo::default());
        }
        self.return_token(op);
    }

    /// A native RMA request finished: `value` is the old value of an atomic.
    pub fn rma_done(&mut self, token: OpId, status: Status, value: u64) {
        let Some(op) = self.ops.get_mut(&token) else {
            tracing::debug!(%token, "RMA completion for no operation");
            return;
        };
        match &mut op.kind {
            OpKind::PullRecv { .. } => self.pull_recv_done(token, status),
            OpKind::StreamPull { .. } => self.stream_pull_done(token, status),
            OpKind::StreamPullInto { .. } => self.stream_pull_into_done(token, status),
            OpKind::Native => {
                op.tokens = op.tokens.saturating_sub(1);
                self.finish_op(token, status, OpInfo { value, ..OpInfo::default() });
            }
            _ => tracing::debug!(%token, "RMA completion for an operation that issued none"),
        }
    }

    /// A link failed: its endpoint fails with `status`, and everything on it completes once.
    pub fn link_failed(&mut self, link: LinkId, status: Status) {
        if let Some(&ep) = self.link_eps.get(&link) {
            self.fail_ep(ep, status, true);
        }
    }

    /// The endpoint a frame on `link` is for, or `None` to ignore it (its endpoint is dead) or
    /// when there is none (the link is then closed).
    pub(crate) fn receiving_ep(&mut self, link: LinkId) -> Option<EndpointId> {
        if let Some((hint_link, hint_ep)) = self.rx_hint {
            if hint_link == link {
                if let Some(ep) = self.eps.get_mut(&hint_ep).filter(|ep| ep.link == link) {
                    ep.rx_seen = true;
                    return (!matches!(ep.phase, Phase::Dead(_))).then_some(hint_ep);
                }
            }
        }
        let Some(&ep_id) = self.link_eps.get(&link) else {
            tracing::warn!(?link, "frame on a link without an endpoint; closing the link");
            self.events.push_back(Event::CloseLink { link, force: true });
            return None;
        };
        let ep = self.eps.get_mut(&ep_id)?;
        ep.rx_seen = true;
        self.rx_hint = Some((link, ep_id));
        (!matches!(ep.phase, Phase::Dead(_))).then_some(ep_id)
    }

    /// A peer broke the protocol: fail whatever uses the link and drop it.
    pub(crate) fn protocol_violation(&mut self, link: LinkId) {
        if let Some(&ep) = self.link_eps.get(&link) {
            if self.eps.get(&ep).is_some_and(|state| matches!(state.phase, Phase::Dead(_))) {
                return;
            }
            self.fail_ep(ep, Status::ConnectionReset, true);
        }
        self.events.push_back(Event::CloseLink { link, force: true });
    }

    /// Acts on a decoded frame from endpoint `ep`.
    #[inline(never)]
    fn on_op(&mut self, link: LinkId, ep: EndpointId, op: Op, payload: &[u8]) {
        match op {
            Op::Hello => {}
            Op::TagEager { tag, sync, sender_req } => {
                self.on_tag_eager(link, ep, tag, sync.then_some(sender_req), payload)
            }
            Op::TagRts { tag, sync: _, sender_req, total_len } => {
                self.on_tag_rts(ep, tag, sender_req, total_len, None)
            }
            Op::TagRtsPull { tag, sync: _, sender_req, total_len, addr } => {
                if self.pull_allowed(ep, link) {
                    self.on_tag_rts(ep, tag, sender_req, total_len, Some((addr, payload)))
                }
            }
            Op::SyncAck { sender_req } => self.on_sync_ack(ep, sender_req),
            Op::Rtr { sender_req, recv_req, accept_len } => self.on_rtr(ep, sender_req, recv_req, accept_len),
            Op::RndvData { recv_req: id, offset } | Op::GetData { req: id, offset } => {
                if let Some((op, _, buf, at)) = self.claim_fragment(ep, id, offset, payload.len()) {
                    buf.write(at, payload);
                    self.finish_if_received(op);
                }
            }
            Op::Stream => self.on_stream(ep, payload),
            Op::AmEager { am_id, reply, header_len } => {
                self.on_am_eager(ep, am_id, reply, header_len, payload)
            }
            Op::AmRts { am_id, reply, header_len: _, sender_req, total_len } => {
                self.on_am_rts(ep, am_id, reply, payload, sender_req, total_len, None)
            }
            Op::AmRtsPull { am_id, reply, header_len, sender_req, total_len, addr } => {
                if self.pull_allowed(ep, link) {
                    let (header, key) = payload.split_at(usize::from(header_len));
                    self.on_am_rts(ep, am_id, reply, header, sender_req, total_len, Some((addr, key)))
                }
            }
            Op::StreamRtsPull { sender_req, total_len, addr } => {
                if self.pull_allowed(ep, link) {
                    self.on_stream_pull(ep, sender_req, total_len, addr, payload)
                }
            }
            Op::PullDone { sender_req, status } => self.on_pull_done(ep, sender_req, status),
            Op::Put { req, region, key, addr, len, offset, ack } => {
                let result = rma_exec::put_fragment(&self.access, region, &key, addr, len, offset, payload);
                match result {
                    Ok(()) if ack => self.reply(link, &Op::RmaAck { req, status: 0, value: 0 }),
                    Ok(()) => {}
                    Err(err) => {
                        self.reply(link, &Op::RmaAck { req, status: rma_exec::status_of(err), value: 0 })
                    }
                }
            }
            Op::Get { req, region, key, addr, len } => self.on_get(link, ep, req, region, key, addr, len),
            Op::Atomic { req, region, key, addr, op, size, fetch: _, value, compare } => {
                let reply = match rma_exec::atomic(&self.access, region, &key, addr, op, size, value, compare)
                {
                    Ok(old) => Op::RmaAck { req, status: 0, value: old },
                    Err(err) => Op::RmaAck { req, status: rma_exec::status_of(err), value: 0 },
                };
                self.reply(link, &reply);
            }
            Op::RmaAck { req, status, value } => self.on_rma_ack(ep, req, status, value),
            Op::FlushReq { id } => self.reply(link, &Op::FlushAck { id }),
            Op::FlushAck { id } => self.on_flush_ack(ep, id),
            Op::KeyCheck { req } => {
                // Undecodable bytes vouch for nothing: the same answer as a forged key.
                let verdict = zcx_control::RkeyWire::decode(payload)
                    .map_err(|_| zcx_dataplane::AccessError::BadKey)
                    .and_then(|claim| self.access.vouch(&claim));
                let status = verdict.map_or_else(rma_exec::status_of, |()| rma_exec::UCS_OK);
                self.reply(link, &Op::RmaAck { req, status, value: 0 });
            }
            op @ (Op::PutHelp { .. } | Op::GetHelp { .. }) => self
                .events
                .push_back(Event::Extension(Box::new(Extension { ep, link, op, payload: payload.to_vec() }))),
            Op::Keepalive => {}
            Op::Disconnect { force } => {
                if !force {
                    // The peer closed after taking everything that reached it: our flushes
                    // complete, once no operation of ours before them still waits for an answer
                    // (those fail below, and so do the flushes behind them).
                    self.ack_flushes(ep);
                }
                // The peer closed its endpoint: ours can carry nothing more.
                self.fail_ep(ep, Status::ConnectionReset, true);
                self.events.push_back(Event::CloseLink { link, force: true });
            }
        }
    }

    /// A pull request is only valid on a link whose caps offer receiver pull with native gets.
    fn pull_allowed(&mut self, ep: EndpointId, link: LinkId) -> bool {
        let allowed = self
            .eps
            .get(&ep)
            .is_some_and(|state| state.caps.bulk == crate::BulkMode::ReceiverPull && state.caps.native_get);
        if !allowed {
            tracing::warn!(%ep, "pull request on a link without native get; closing the link");
            self.protocol_violation(link);
        }
        allowed
    }

    /// An emulated get from a peer: check it whole, then answer with data fragments and an ack.
    #[allow(clippy::too_many_arguments)]
    fn on_get(
        &mut self,
        link: LinkId,
        ep: EndpointId,
        req: u64,
        region: u64,
        key: [u8; 16],
        addr: u64,
        len: u64,
    ) {
        // The whole range first, so a get that runs out of its region sends no byte.
        if let Err(err) = self.access.check(region, &key, addr, len, RemoteAccess::Read) {
            self.reply(link, &Op::RmaAck { req, status: rma_exec::status_of(err), value: 0 });
            return;
        }
        if len == 0 {
            self.reply(link, &Op::RmaAck { req, status: 0, value: 0 });
            return;
        }
        // The answer goes out in fragments as the caller drains the outbox, like any bulk
        // transfer: a large get does not copy the whole range at once.
        let reply = self.new_op(Some(ep), OpKind::GetReply { req, region, key, addr, len, offset: 0 }, None);
        if let Some(state) = self.eps.get_mut(&ep) {
            state.bulk.push_back(reply);
        }
        self.bulk_active.insert(ep);
    }
}
