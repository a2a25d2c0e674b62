//! Endpoint life: connect (client), accept (server), fail, close.

use std::net::SocketAddr;
use std::sync::Weak;
use std::time::Instant;
use zcx_dataplane::Transport as _;

use zcx_control::HandshakeWire;
use zcx_dataplane::proto::wire::{Op, MAX_HEADER_LEN};
use zcx_dataplane::{ConnectTarget, LinkId, Payload};

use crate::endpoint::{ErrHandler, ServerEpParams};
use crate::listener::ConnRequestData;
use crate::request::OpInfo;
use crate::status::{fail_with, Status};
use crate::worker::state::{
    status_of, Core, Deferred, EpState, LaneDial, OutKind, Phase, QueuedPayload, State, StreamRx,
};

/// What a new endpoint is created with, whichever side it is on.
pub(crate) struct EpSetup {
    pub name: Option<String>,
    pub err_mode_peer: bool,
    pub err_handler: Option<ErrHandler>,
    pub user_data: usize,
}

fn new_state(st: &mut State, id: u64, link: LinkId, phase: Phase, setup: EpSetup) -> EpState {
    let now = Instant::now();
    EpState {
        name: setup.name.unwrap_or_else(|| format!("{}:{id}", st.address.name)),
        link,
        phase,
        err_mode_peer: setup.err_mode_peer,
        err_handler: setup.err_handler,
        err_reported: false,
        user_data: setup.user_data,
        queued: Default::default(),
        bulk: Default::default(),
        stream: StreamRx::default(),
        created: now,
        last_rx: now,
        last_tx: now,
        rx_seen: false,
        tx_seen: false,
        local_addr: None,
        remote_addr: None,
        handle: Weak::new(),
        close_op: None,
        direct_ok: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true)),
        lane: None,
        stream_jobs: 0,
        nbi: Default::default(),
        conn_token: 0,
    }
}

/// The client side: connects, sends the connection request, and returns the endpoint id. Frames
/// sent before the server answers are queued on the endpoint.
pub(crate) fn create_client_ep(
    core: &mut Core,
    target: ConnectTarget<'_>,
    setup: EpSetup,
    client_id: u64,
) -> Result<u64, Status> {
    let Core { tl, st } = core;
    let sockaddr = match &target {
        ConnectTarget::Sockaddr { remote, .. } => Some(*remote),
        ConnectTarget::Address(_) | ConnectTarget::Session { .. } => None,
    };
    let link = tl.connect(target).map_err(|e| {
        let status = status_of(e);
        fail_with(status, format!("connect failed: {e}"))
    })?;
    let id = st.new_id();
    let mut state = new_state(st, id, link, Phase::Connecting, setup);
    state.conn_token = conn_token()?;
    let (local, remote) = tl.link_addrs(link);
    state.local_addr = local;
    state.remote_addr = remote.or(sockaddr);
    let hello = HandshakeWire::ConnRequest {
        client_id,
        ep_name: state.name.clone(),
        err_mode_peer: state.err_mode_peer,
        client_address: st.address.clone(),
        client_ep_id: state.conn_token,
    };
    let bytes = hello.try_encode().map_err(|e| fail_with(Status::InvalidParam, format!("handshake: {e}")))?;
    let mut header = [0u8; MAX_HEADER_LEN];
    let n = Op::Hello.encode(&mut header);
    if let Err(e) = tl.send(link, &header[..n], Payload::Copy(&bytes)) {
        tl.close(link, true);
        return Err(status_of(e));
    }
    st.connecting.insert(state.conn_token, id);
    st.eps.insert(id, state);
    st.link_eps.insert(link, id);
    tracing::debug!(ep = id, ?link, "connecting");
    Ok(id)
}

/// A fresh, unguessable, non-zero connection token.
fn conn_token() -> Result<u64, Status> {
    let bytes = crate::context::random_bytes()?;
    let token = u64::from_le_bytes(bytes[..8].try_into().expect("8 of 16 bytes"));
    Ok(token.max(1))
}

/// The server side of an accepted connection request: ready at once; the answer goes out first
/// on the link, so the client sees it before any of our traffic.
pub(crate) fn create_server_ep(st: &mut State, request: &ConnRequestData, params: ServerEpParams) -> u64 {
    let id = st.new_id();
    let setup = EpSetup {
        name: params.name,
        err_mode_peer: params.err_mode_peer || request.err_mode_peer,
        err_handler: params.err_handler,
        user_data: params.user_data,
    };
    let mut state = new_state(st, id, request.link, Phase::Ready, setup);
    state.remote_addr = Some(request.peer);
    let accept = HandshakeWire::Accept {
        server_address: st.address.clone(),
        server_ep_id: id,
        client_ep_id: request.client_ep_id,
    };
    match &request.client_lane {
        Some(lane) => st.lane_dials.push(LaneDial { ep: id, lane: lane.clone(), accept: accept.encode() }),
        None => st.reply(request.link, &Op::Hello, Some(accept.encode())),
    }
    st.eps.insert(id, state);
    st.link_eps.insert(request.link, id);
    st.established.push(request.link);
    tracing::debug!(ep = id, link = ?request.link, client = request.client_id, "accepted");
    id
}

/// Sends a rejection and drops the connection.
pub(crate) fn reject_link(st: &mut State, request: &ConnRequestData, status: Status) {
    let reject =
        HandshakeWire::Reject { reason_status: status.code() as i8, client_ep_id: request.client_ep_id };
    st.reply(request.link, &Op::Hello, Some(reject.encode()));
    st.to_close.push((request.link, false));
}

/// The endpoint failed (or the peer closed it): everything in flight on it ends with `status`,
/// later operations fail with it, and the error handler runs once (from progress).
pub(crate) fn fail_ep(st: &mut State, ep_id: u64, status: Status, close_link: bool) {
    let Some(ep) = st.eps.get_mut(&ep_id) else { return };
    if matches!(ep.phase, Phase::Dead(_)) {
        return;
    }
    tracing::debug!(ep = ep_id, ?status, "endpoint failed");
    let was_closing = ep.phase == Phase::Closing;
    ep.phase = Phase::Dead(status);
    ep.stop_direct();
    let link = ep.link;
    let queued = std::mem::take(&mut ep.queued);
    ep.bulk.clear();
    ep.stream_jobs = 0;
    let posted: Vec<_> = ep.stream.posted.drain(..).collect();
    let handler =
        if ep.err_mode_peer && !ep.err_reported && !was_closing { ep.err_handler.clone() } else { None };
    if handler.is_some() {
        ep.err_reported = true;
    }
    let token = ep.conn_token;
    st.connecting.remove(&token);
    st.link_eps.remove(&link);
    if close_link {
        st.to_close.push((link, true));
    }
    for frame in queued {
        if let QueuedPayload::Zcopy { token, .. } = frame.payload {
            crate::worker::state::return_token(st, token);
        }
        if let Some(op) = frame.completes {
            st.finish_op(op, status, OpInfo::default());
        }
    }
    for recv in posted {
        st.complete_sink(&recv.sink, status, OpInfo { length: recv.filled, ..OpInfo::default() });
    }
    let ops: Vec<u64> = st.ops.iter().filter(|(_, op)| op.ep == ep_id).map(|(&id, _)| id).collect();
    for id in ops {
        let op_status = match st.ops.get(&id).map(|op| &op.kind) {
            Some(OutKind::Close) => Status::Ok,
            _ => status,
        };
        st.finish_op(id, op_status, OpInfo::default());
    }
    if let Some(handler) = handler {
        st.deferred.push(Deferred::ErrHandler { ep: ep_id, handler, status });
    }
    forget_if_unowned(st, ep_id);
}

/// Drops the state of a dead endpoint nobody holds a handle to.
pub(crate) fn forget_if_unowned(st: &mut State, ep_id: u64) {
    let Some(ep) = st.eps.get(&ep_id) else { return };
    let has_deferred =
        st.deferred.iter().any(|d| matches!(d, Deferred::ErrHandler { ep, .. } if *ep == ep_id));
    if matches!(ep.phase, Phase::Dead(_)) && ep.handle.strong_count() == 0 && !has_deferred {
        st.remove_ep(ep_id);
    }
}

/// Finishes flush-mode closes whose endpoint has drained: sends the disconnect and closes the link.
pub(crate) fn finish_closes(core: &mut Core) {
    let Core { tl, st } = core;
    let closing: Vec<u64> =
        st.eps.iter().filter(|(_, ep)| ep.phase == Phase::Closing).map(|(&id, _)| id).collect();
    // Progress looks again only once another close begins.
    st.closes_pending = !closing.is_empty();
    for ep_id in closing {
        let busy = st
            .ops
            .values()
            .any(|op| op.ep == ep_id && !op.kind.is_incoming() && !matches!(op.kind, OutKind::Close))
            || st.eps.get(&ep_id).is_some_and(|ep| !ep.bulk.is_empty() || !ep.queued.is_empty());
        if busy {
            continue;
        }
        let Some(ep) = st.eps.get_mut(&ep_id) else { continue };
        let link = ep.link;
        ep.close_op = None;
        // The endpoint is gone for good: receives still posted on it (stream receives, incoming
        // rendezvous) end with CANCELED as in UCP, and the close operation with OK. Not a failure
        // of the peer: no error handler.
        ep.err_reported = true;
        fail_ep(st, ep_id, Status::Canceled, false);
        let mut header = [0u8; MAX_HEADER_LEN];
        let n = Op::Disconnect { force: false }.encode(&mut header);
        let _ = tl.send(link, &header[..n], Payload::None);
        tl.close(link, false);
    }
}

/// Starts closing an endpoint (`ucp_ep_close_nbx`). With `force`, everything in flight ends with
/// CANCELED and the connection drops at once; otherwise the endpoint drains first. Returns the id
/// of the close operation to wait for, or `None` when the close is already complete.
pub(crate) fn begin_close(
    core: &mut Core,
    ep_id: u64,
    force: bool,
    sink: Option<std::sync::Arc<dyn crate::request::OpSink>>,
) -> Option<u64> {
    let Core { tl, st } = core;
    let ep = st.eps.get_mut(&ep_id)?;
    match ep.phase {
        Phase::Dead(_) | Phase::Closing => return None,
        Phase::Connecting | Phase::Ready => {}
    }
    if force || ep.phase == Phase::Connecting && ep.queued.is_empty() {
        let link = ep.link;
        // A force close is not the peer's failure: no error handler.
        ep.err_reported = true;
        fail_ep(st, ep_id, Status::Canceled, false);
        tl.close(link, true);
        return None;
    }
    ep.phase = Phase::Closing;
    ep.stop_direct();
    st.closes_pending = true;
    let sink = sink?;
    let op = st.add_op(ep_id, sink, OutKind::Close);
    if let Some(ep) = st.eps.get_mut(&ep_id) {
        ep.close_op = Some(op);
    }
    Some(op)
}

/// The socket addresses of a link, for `ep.query()`.
pub(crate) fn link_addrs(core: &Core, link: LinkId) -> (Option<SocketAddr>, Option<SocketAddr>) {
    core.tl.link_addrs(link)
}

/// Remembers the socket addresses of the link an endpoint leaves for a shared-memory lane, which
/// has none, so `query` still reports the connection's addresses.
pub(crate) fn keep_sockaddrs(ep: &mut EpState, (local, remote): (Option<SocketAddr>, Option<SocketAddr>)) {
    ep.local_addr = local.or(ep.local_addr);
    ep.remote_addr = remote.or(ep.remote_addr);
}

/// Closes the links client endpoints left for a shared-memory lane, keeping their addresses.
pub(crate) fn close_lanes_taken(core: &mut Core) {
    let Core { tl, st } = core;
    for (ep, old) in std::mem::take(&mut st.lanes_taken) {
        if let Some(state) = st.eps.get_mut(&ep) {
            keep_sockaddrs(state, tl.link_addrs(old));
        }
        tl.close(old, false);
    }
}

/// Sends the accepts of [`LaneDial`]s: each on a new link to the client's shared-memory or DPDK
/// address, which becomes the endpoint's link; when that link cannot be opened, on the request's
/// link, as if no faster lane existed.
pub(crate) fn open_lanes(core: &mut Core) {
    let Core { tl, st } = core;
    for dial in std::mem::take(&mut st.lane_dials) {
        let Some(ep) = st.eps.get_mut(&dial.ep) else { continue };
        let old = ep.link;
        let target = match dial.lane.session {
            Some(session) => ConnectTarget::Session { address: &dial.lane.target, session },
            None => ConnectTarget::Address(&dial.lane.target),
        };
        let lane = tl.connect_with(dial.lane.member, target);
        let mut header = [0u8; MAX_HEADER_LEN];
        let n = Op::Hello.encode(&mut header);
        let link = match lane {
            Ok(lane) if tl.send(lane, &header[..n], Payload::Copy(&dial.accept)).is_ok() => {
                // The request's link stays open until the client closes it, so the client never
                // sees it fail before the accept arrives on the new one.
                keep_sockaddrs(ep, tl.link_addrs(old));
                ep.link = lane;
                st.link_eps.remove(&old);
                st.link_eps.insert(lane, dial.ep);
                tracing::debug!(ep = dial.ep, ?old, ?lane, "accepted over a faster lane");
                lane
            }
            other => {
                if let Ok(lane) = other {
                    tl.close(lane, true);
                }
                tracing::debug!(ep = dial.ep, "no faster lane to the client; staying on the request's link");
                old
            }
        };
        if link == old {
            let _ = tl.send(old, &header[..n], Payload::Copy(&dial.accept));
        }
    }
}
