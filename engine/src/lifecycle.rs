//! Endpoint life after connecting: failure, close (flush or force), removal, and keepalive.
//!
//! A flush close stops new operations, flushes (the peer's answer says it took everything sent
//! before), waits until the endpoint's outgoing operations are done, then sends `Disconnect` and asks the caller to close the link; the peer fails its endpoint
//! with CONNECTION_RESET (reported to its error handler unless it was closing too). A force close
//! cancels everything at once. Closing a dead endpoint (from inside its error handler, say)
//! completes at once and completes nothing twice.

use std::collections::VecDeque;
use std::time::Instant;

use zcx_dataplane::proto::wire::Op;

use crate::engine::{CloseMode, Engine, OpKind, Phase, Unexpected};
use crate::ids::{EndpointId, OpId};
use crate::output::{Event, OpInfo, Payload, Transmit};
use crate::Status;

impl Engine {
    /// `ucp_ep_close_nbx`: returns the close operation to wait for, or `None` when there is
    /// nothing to wait for: a force close, a dead endpoint, or one already closing (whose first
    /// close operation completes when it is closed), as the api's close does today.
    pub fn close(&mut self, ep_id: EndpointId, mode: CloseMode) -> Result<Option<OpId>, Status> {
        let Some(ep) = self.eps.get_mut(&ep_id) else { return Err(Status::NotConnected) };
        match ep.phase {
            Phase::Dead(_) | Phase::Closing => return Ok(None),
            Phase::Connecting | Phase::Ready => {}
        }
        let link = ep.link;
        if mode == CloseMode::Force || (ep.phase == Phase::Connecting && ep.held.is_empty()) {
            // Not the peer's failure: no error report.
            self.fail_ep(ep_id, Status::Canceled, false);
            self.events.push_back(Event::CloseLink { link, force: true });
            return Ok(None);
        }
        ep.phase = Phase::Closing;
        let op = self.new_op(Some(ep_id), OpKind::Close, None);
        // A flush first: its answer says the peer took every frame sent before it, including
        // those still queued in the transport, which the application may otherwise outrun
        // by exiting as soon as the close completes.
        self.start_flush_as(ep_id, None, true, false);
        self.try_finish_close(ep_id);
        Ok(Some(op))
    }

    /// Fails an endpoint from outside the protocol (a refused connection, a connection that
    /// never completed): everything on it ends with `status`, its error is reported, and its link
    /// is closed.
    pub fn fail_endpoint(&mut self, ep_id: EndpointId, status: Status) {
        let Some(ep) = self.eps.get(&ep_id) else { return };
        if matches!(ep.phase, Phase::Dead(_)) {
            return;
        }
        let link = ep.link;
        self.fail_ep(ep_id, status, true);
        self.events.push_back(Event::CloseLink { link, force: true });
    }

    /// Frames left for the endpoint's peer by another way than this engine's outbox (a
    /// same-host send lane): the endpoint is not idle, so no keepalive is due.
    pub fn note_sent(&mut self, ep_id: EndpointId) {
        if let Some(ep) = self.eps.get_mut(&ep_id) {
            ep.tx_seen = true;
        }
    }

    /// Finishes a flush close once nothing outgoing is left on the endpoint.
    pub(crate) fn try_finish_close(&mut self, ep_id: EndpointId) {
        let Some(ep) = self.eps.get(&ep_id) else { return };
        if ep.phase != Phase::Closing || !ep.answered || !ep.bulk.is_empty() {
            return;
        }
        let busy = self
            .ops
            .values()
            .any(|op| op.ep == Some(ep_id) && !op.kind.is_incoming() && !matches!(op.kind, OpKind::Close));
        if busy {
            return;
        }
        let link = ep.link;
        // Receives still waiting on it end CANCELED, the close with OK; no error report.
        self.fail_ep(ep_id, Status::Canceled, false);
        self.reply(link, &Op::Disconnect { force: false });
        self.events.push_back(Event::CloseLink { link, force: false });
    }

    /// Keepalive and liveness: call when [`Engine::poll_timeout`]'s instant has passed (or at
    /// any time). Sends a keepalive on endpoints idle for the interval, and fails (ENDPOINT_TIMEOUT)
    /// those that heard nothing for the timeout. Every endpoint sends keepalives (its peer may
    /// watch it even when it watches nothing); only error-mode-peer endpoints time out, and only
    /// on links whose transport does not watch the peer itself (`LinkCaps::peer_watched`).
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(interval) = self.config.keepalive_interval else { return };
        let timeout = self.config.keepalive_timeout;
        let mut expired = Vec::new();
        let mut probe = Vec::new();
        for (id, ep) in self.eps.iter_mut() {
            if !matches!(ep.phase, Phase::Ready | Phase::Closing) || !ep.answered {
                continue;
            }
            if std::mem::take(&mut ep.rx_seen) || ep.last_rx.is_none() {
                ep.last_rx = Some(now);
            }
            if std::mem::take(&mut ep.tx_seen) || ep.last_tx.is_none() {
                ep.last_tx = Some(now);
            }
            let watches = ep.err_mode_peer && !ep.caps.peer_watched;
            if watches && ep.last_rx.is_some_and(|at| now.saturating_duration_since(at) >= timeout) {
                expired.push((id, ep.link));
            } else if ep.last_tx.is_some_and(|at| now.saturating_duration_since(at) >= interval) {
                ep.last_tx = Some(now);
                probe.push(id);
            }
        }
        for id in probe {
            self.send(id, &Op::Keepalive, Payload::None, false);
            if let Some(ep) = self.eps.get_mut(&id) {
                // The probe is not traffic that resets the idle clock.
                ep.tx_seen = false;
            }
        }
        for (id, link) in expired {
            tracing::debug!(%id, "endpoint timed out");
            self.fail_ep(id, Status::EndpointTimeout, true);
            self.events.push_back(Event::CloseLink { link, force: true });
        }
    }

    /// The next instant [`Engine::handle_timeout`] has something to do, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let interval = self.config.keepalive_interval?;
        let timeout = self.config.keepalive_timeout;
        self.eps
            .values()
            .filter(|ep| matches!(ep.phase, Phase::Ready | Phase::Closing) && ep.answered)
            .flat_map(|ep| {
                let rx = ep.last_rx.filter(|_| ep.err_mode_peer && !ep.caps.peer_watched);
                [ep.last_tx.map(|at| at + interval), rx.map(|at| at + timeout)]
            })
            .flatten()
            .min()
    }

    /// The endpoint failed or closed: everything in flight on it ends with `status` (a close
    /// with OK), later operations fail with it, the API hears of it ([`Event::EndpointDown`]),
    /// and, with `report` on an error-mode-peer endpoint that was not closing, its error handler
    /// is asked for once ([`Event::EndpointError`]).
    pub(crate) fn fail_ep(&mut self, ep_id: EndpointId, status: Status, report: bool) {
        let Some(ep) = self.eps.get_mut(&ep_id) else { return };
        if matches!(ep.phase, Phase::Dead(_)) {
            return;
        }
        tracing::debug!(%ep_id, ?status, "endpoint failed");
        let was_closing = ep.phase == Phase::Closing;
        ep.phase = Phase::Dead(status);
        let link = ep.link;
        let held = std::mem::take(&mut ep.held);
        ep.bulk.clear();
        for op in ep.fenced.drain(..).flatten() {
            self.fenced_issues.remove(&op);
        }
        // Bytes already received stay readable (`Engine::stream_recv` on a dead endpoint); the
        // receives waiting for more fail.
        let posted: Vec<_> = ep.stream.posted.drain(..).collect();
        let report = report && ep.err_mode_peer && !was_closing;
        self.events.push_back(Event::EndpointDown { ep: ep_id, status });
        // Frames and RMA requests for the link not handed out yet are dropped, and their tokens
        // with them.
        let mut dropped: Vec<OpId> = Vec::new();
        let drained: Vec<Transmit> = held.into_iter().collect();
        let mut keep = VecDeque::with_capacity(self.transmits.len());
        for transmit in self.transmits.drain(..).chain(drained) {
            if transmit.link == link {
                if let Payload::Borrowed { op, .. } = transmit.payload {
                    dropped.push(op);
                }
            } else {
                keep.push_back(transmit);
            }
        }
        self.transmits = keep;
        let mut keep_rma = VecDeque::with_capacity(self.rmas.len());
        for request in self.rmas.drain(..) {
            if request.link == link {
                dropped.push(request.token);
            } else {
                keep_rma.push_back(request);
            }
        }
        self.rmas = keep_rma;
        for op in dropped {
            if let Some(record) = self.ops.get_mut(&op) {
                record.tokens = record.tokens.saturating_sub(1);
            }
        }
        for recv in posted {
            self.events.push_back(recv.completion(status));
        }
        self.drop_unexpected_rts_of(ep_id);
        let mut ops: Vec<OpId> =
            self.ops.iter().filter(|(_, op)| op.ep == Some(ep_id)).map(|(&id, _)| id).collect();
        ops.sort_unstable();
        for id in ops {
            let op_status = match self.ops.get(&id).map(|op| &op.kind) {
                Some(OpKind::Close) => Status::Ok,
                _ => status,
            };
            self.finish_op(id, op_status, OpInfo::default());
        }
        if report {
            self.events.push_back(Event::EndpointError { ep: ep_id, status });
        }
        self.forget_if_done(ep_id);
    }

    /// Drops rendezvous requests of a dead endpoint from the unexpected queue: nobody can fetch
    /// their data any more. Eager messages stay: their bytes are all here.
    pub(crate) fn drop_unexpected_rts_of(&mut self, ep_id: EndpointId) {
        if self.tags.unexpected_len() == 0 {
            return;
        }
        let all: Vec<_> = self.tags.drain_unexpected().collect();
        for message in all {
            let dead_rts = message.sender == ep_id.raw() && matches!(message.data, Unexpected::Rts { .. });
            if !dead_rts {
                self.tags.queue_unexpected(message);
            }
        }
    }

    /// Removes a dead, released endpoint once no operation of it is left.
    pub(crate) fn forget_if_done(&mut self, ep_id: EndpointId) {
        let Some(ep) = self.eps.get(&ep_id) else { return };
        if !(ep.released && matches!(ep.phase, Phase::Dead(_))) {
            return;
        }
        if self.ops.values().any(|op| op.ep == Some(ep_id)) {
            return;
        }
        self.eps.remove(&ep_id);
        // Its own link, and any link aliased to it (`Engine::alias_link`).
        self.link_eps.retain(|_, ep| *ep != ep_id);
        self.bulk_active.remove(&ep_id);
    }
}
