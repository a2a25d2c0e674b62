//! Endpoint life after connecting: close (flush or force), and keepalive.
//!
//! A flush close stops new operations, waits until the endpoint's outgoing operations are done,
//! then sends `Disconnect` and asks the caller to close the link; the peer fails its endpoint
//! with CONNECTION_RESET (reported to its error handler unless it was closing too). A force close
//! cancels everything at once. Closing a dead endpoint (from inside its error handler, say)
//! completes at once and completes nothing twice.

use std::time::Instant;

use zcx_dataplane::proto::wire::Op;

use crate::engine::{CloseMode, Engine, OpKind, Phase};
use crate::ids::{EndpointId, OpId};
use crate::output::{Event, Payload};
use crate::Status;

impl Engine {
    /// `ucp_ep_close_nbx`: returns the close operation to wait for, or `None` when the close is
    /// already complete (a force close, a dead endpoint). Closing an endpoint that is closing
    /// already is `Busy`.
    pub fn close(&mut self, ep_id: EndpointId, mode: CloseMode) -> Result<Option<OpId>, Status> {
        let Some(ep) = self.eps.get_mut(&ep_id) else { return Err(Status::NotConnected) };
        match ep.phase {
            Phase::Dead(_) => return Ok(None),
            Phase::Closing => return Err(Status::Busy),
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
        let op = self.new_op(Some(ep_id), OpKind::Close);
        self.try_finish_close(ep_id);
        Ok(Some(op))
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
    /// those that heard nothing for the timeout. Only error-mode-peer endpoints take part.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(interval) = self.config.keepalive_interval else { return };
        let timeout = self.config.keepalive_timeout;
        let mut expired = Vec::new();
        let mut probe = Vec::new();
        for (&id, ep) in self.eps.iter_mut() {
            if ep.phase != Phase::Ready || !ep.err_mode_peer {
                continue;
            }
            if std::mem::take(&mut ep.rx_seen) || ep.last_rx.is_none() {
                ep.last_rx = Some(now);
            }
            if std::mem::take(&mut ep.tx_seen) || ep.last_tx.is_none() {
                ep.last_tx = Some(now);
            }
            if ep.last_rx.is_some_and(|at| now.saturating_duration_since(at) >= timeout) {
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
            .filter(|ep| ep.phase == Phase::Ready && ep.err_mode_peer)
            .flat_map(|ep| [ep.last_tx.map(|at| at + interval), ep.last_rx.map(|at| at + timeout)])
            .flatten()
            .min()
    }
}
