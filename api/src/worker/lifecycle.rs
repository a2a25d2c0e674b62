//! Endpoint life as the API sees it: connect (client), accept (server), the lane switch, close
//! and forgetting; failure and the protocol side of closing are the engine's.
//!
//! The handshake is the API's: its frames (`Hello`) never reach the engine. The engine is told
//! what the handshake decided: an endpoint exists ([`zcx_engine::Engine::add_endpoint`]: a
//! client's connects, its frames held, until the server's answer; a server's is ready at once,
//! unless its accept goes out on a faster lane), it may send on its link or on the lane that
//! replaced it ([`zcx_engine::Engine::endpoint_ready`], here and in `dispatch`), or it never
//! connected ([`zcx_engine::Engine::fail_endpoint`]: refused in `dispatch`, unanswered in the
//! worker's timer); a close is [`zcx_engine::Engine::close`].
//! The API's record of an endpoint goes once the engine reported it down and no handle or
//! pending error handler refers to it.

use std::net::SocketAddr;
use std::sync::Weak;
use std::time::Instant;
use zcx_dataplane::Transport as _;

use zcx_control::HandshakeWire;
use zcx_dataplane::proto::wire::{Op, MAX_HEADER_LEN};
use zcx_dataplane::{ConnectTarget, LinkId, Payload};
use zcx_engine::{CloseMode, EndpointId, OpId, Phase};

use crate::status::{fail_with, Status};
use crate::worker::accept::ConnRequestData;
use crate::worker::ep_handle::ErrHandler;
use crate::worker::state::{status_of, Core, Deferred, EpState, LaneDial, State};

/// The parameters of a server-side endpoint (from `EpParams` with a conn request, or a
/// listener's accept template).
#[derive(Clone, Default)]
pub struct ServerEpParams {
    /// Endpoint name.
    pub name: Option<String>,
    /// Peer error handling.
    pub err_mode_peer: bool,
    /// Error handler.
    pub err_handler: Option<ErrHandler>,
    /// User data.
    pub user_data: usize,
}

/// What a new endpoint is created with, whichever side it is on.
#[derive(Clone)]
pub(crate) struct EpSetup {
    pub name: Option<String>,
    pub err_mode_peer: bool,
    pub err_handler: Option<ErrHandler>,
    pub user_data: usize,
}

fn new_state(st: &State, id: EndpointId, setup: EpSetup) -> EpState {
    EpState {
        name: setup.name.unwrap_or_else(|| format!("{}:{}", st.address.name, id.raw())),
        err_handler: setup.err_handler,
        err_reported: !setup.err_mode_peer,
        user_data: setup.user_data,
        created: Instant::now(),
        local_addr: None,
        remote_addr: None,
        handle: Weak::new(),
        direct_rma: std::sync::Arc::new(std::sync::atomic::AtomicU8::new(
            super::state::DIRECT_LIVE | super::state::DIRECT_ORDERED,
        )),
        lane: None,
        stream_jobs: 0,
        settling: None,
        conn_token: 0,
        verbs_link: None,
        down: false,
        peer_worker: None,
        implicit: false,
        peer_token: 0,
        proposed_pair: 0,
    }
}

/// A connection request from one of this worker's own endpoints (an endpoint to its own
/// address, as MPI makes for a rank's messages to itself): the endpoint answers itself and
/// receives on the request's link too, so what it sends it receives, as UCP's self endpoint
/// does. Returns false for any other request.
pub(crate) fn accept_self(st: &mut State, request: &ConnRequestData) -> bool {
    if request.client_worker != st.address.name {
        return false;
    }
    let Some(&id) = st.connecting.get(&request.client_ep_id) else { return false };
    answer_on(st, request.link, id, request.client_ep_id, 0);
    st.engine.alias_link(request.link, id);
    tracing::debug!(ep = %id, link = ?request.link, "endpoint to this worker answered itself");
    true
}

/// The client side: connects, sends the connection request, and returns the endpoint id. Frames
/// sent before the server answers are held by the engine.
pub(crate) fn create_client_ep(
    core: &mut Core,
    target: ConnectTarget<'_>,
    setup: EpSetup,
    client_id: u64,
    pair_token: u64,
) -> Result<EndpointId, Status> {
    let Core { tl, st } = core;
    let sockaddr = match &target {
        ConnectTarget::Sockaddr { remote, .. } => Some(*remote),
        ConnectTarget::Address(_) | ConnectTarget::Session { .. } => None,
    };
    let link = tl.connect(target).map_err(|e| {
        let status = status_of(e);
        fail_with(status, format!("connect failed: {e}"))
    })?;
    let token = conn_token()?;
    let err_mode_peer = setup.err_mode_peer;
    let id = st.engine.add_endpoint(link, st.caps_for(link), true, err_mode_peer);
    let mut state = new_state(st, id, setup);
    state.conn_token = token;
    let mut client_address = st.address.clone();
    if let Some((member, _)) = st.verbs {
        // This side's end of a verbs link, offered to the server in the request: the server
        // joins it, and answers with its own end.
        match tl.open_link_with(member) {
            Ok((verbs_link, end))
                if client_address.transports.len() < zcx_control::MAX_TRANSPORT_ADDRESSES =>
            {
                client_address.transports.push(end);
                state.verbs_link = Some(verbs_link);
            }
            Ok((verbs_link, _)) => tl.close(verbs_link, true),
            Err(e) => tracing::debug!(%e, "no verbs link for this endpoint"),
        }
    }
    let hello = HandshakeWire::ConnRequest {
        client_id,
        ep_name: state.name.clone(),
        err_mode_peer,
        client_address,
        client_ep_id: token,
        pair_token,
    };
    let (local, remote) = tl.link_addrs(link);
    state.local_addr = local;
    state.remote_addr = remote.or(sockaddr);
    let sent = hello
        .try_encode()
        .map_err(|e| fail_with(Status::InvalidParam, format!("handshake: {e}")))
        .and_then(|bytes| {
            let mut header = [0u8; MAX_HEADER_LEN];
            let n = Op::Hello.encode(&mut header);
            tl.send(link, &header[..n], Payload::Copy(&bytes)).map_err(status_of)
        });
    if let Err(status) = sent {
        if let Some(verbs_link) = state.verbs_link {
            tl.close(verbs_link, true);
        }
        // Nothing of the endpoint was handed out: the engine forgets it at once.
        st.engine.fail_endpoint(id, status);
        st.engine.release_endpoint(id);
        st.absorb_events();
        return Err(status);
    }
    st.connecting.insert(token, id);
    st.eps.insert(id, state);
    tracing::debug!(ep = %id, ?link, "connecting");
    Ok(id)
}

/// A fresh, unguessable, non-zero connection token.
fn conn_token() -> Result<u64, Status> {
    let bytes = crate::context::random_bytes()?;
    let token = u64::from_le_bytes(bytes[..8].try_into().expect("8 of 16 bytes"));
    Ok(token.max(1))
}

/// The server side of an accepted connection request. Ready at once on the request's link, the
/// answer going out first on it so the client sees it before any of our traffic; or, when a
/// faster lane to the client exists, held until the lane is dialled and the answer sent on it.
pub(crate) fn create_server_ep(
    st: &mut State,
    request: &ConnRequestData,
    params: ServerEpParams,
) -> EndpointId {
    let err_mode_peer = params.err_mode_peer || request.err_mode_peer;
    let setup = EpSetup {
        name: params.name,
        err_mode_peer,
        err_handler: params.err_handler,
        user_data: params.user_data,
    };
    let lane = request.client_lane.is_some();
    let id = st.engine.add_endpoint(request.link, st.caps_for(request.link), lane, err_mode_peer);
    let mut state = new_state(st, id, setup);
    state.remote_addr = Some(request.peer);
    let accept = HandshakeWire::Accept {
        server_address: st.address.clone(),
        server_ep_id: id.raw(),
        client_ep_id: request.client_ep_id,
        pair_token: 0,
    };
    match &request.client_lane {
        Some(lane) => {
            st.lane_dials.push(LaneDial { ep: id, request_link: request.link, lane: lane.clone(), accept })
        }
        None => st.send_hello(request.link, accept.encode()),
    }
    st.eps.insert(id, state);
    st.established.push(request.link);
    tracing::debug!(ep = %id, link = ?request.link, client = request.client_id, "accepted");
    id
}

/// The server side of a connection request accepted on a worker other than its listener's:
/// connects to the client's worker address (shared memory on the same host, else TCP) and
/// answers there; the client moves its endpoint to this connection and closes the request's
/// link, which the listener's worker then forgets.
pub(crate) fn accept_elsewhere(
    core: &mut Core,
    request: &ConnRequestData,
    params: ServerEpParams,
) -> Result<EndpointId, Status> {
    let Core { tl, st } = core;
    let target = address_target(st, &request.client_address)?;
    let link = tl
        .connect(ConnectTarget::Address(target))
        .map_err(|e| fail_with(status_of(e), format!("connect to the client failed: {e}")))?;
    let err_mode_peer = params.err_mode_peer || request.err_mode_peer;
    let setup = EpSetup {
        name: params.name,
        err_mode_peer,
        err_handler: params.err_handler,
        user_data: params.user_data,
    };
    let id = st.engine.add_endpoint(link, st.caps_for(link), false, err_mode_peer);
    let mut state = new_state(st, id, setup);
    state.remote_addr = Some(request.peer);
    st.eps.insert(id, state);
    answer_on(st, link, id, request.client_ep_id, 0);
    tracing::debug!(ep = %id, ?link, client = request.client_id, "accepted on another worker");
    Ok(id)
}

/// Answers a connection request (its client's endpoint `client_ep_id`) on `link` with endpoint
/// `id`, naming the request of ours it pairs with (`pair_token`, 0 for none): the link then
/// carries it.
pub(crate) fn answer_on(st: &mut State, link: LinkId, id: EndpointId, client_ep_id: u64, pair_token: u64) {
    let accept = HandshakeWire::Accept {
        server_address: st.address.clone(),
        server_ep_id: id.raw(),
        client_ep_id,
        pair_token,
    };
    st.send_hello(link, accept.encode());
    st.established.push(link);
}

/// Where to connect to reach the worker at `peer`: its shared memory on this host, else its
/// TCP address.
pub(crate) fn address_target<'a>(
    st: &State,
    peer: &'a zcx_control::WorkerAddressWire,
) -> Result<&'a zcx_control::TransportAddress, Status> {
    let same_host = peer.boot_id.is_some() && peer.boot_id == st.address.boot_id;
    let shm = peer
        .transports
        .iter()
        .find(|t| zcx_dataplane::ShmTransport::reaches(t))
        .filter(|_| same_host && st.shm_member.is_some());
    let uring = || peer.transports.iter().find(|t| matches!(t, zcx_control::TransportAddress::Uring { .. }));
    shm.or_else(uring)
        .ok_or_else(|| fail_with(Status::Unreachable, "no common transport with the peer".into()))
}

/// Sends a rejection and drops the connection.
pub(crate) fn reject_link(st: &mut State, request: &ConnRequestData, status: Status) {
    let reject =
        HandshakeWire::Reject { reason_status: status.code() as i8, client_ep_id: request.client_ep_id };
    st.send_hello(request.link, reject.encode());
    st.to_close.push((request.link, false));
}

/// Drops the API state of a dead endpoint nobody holds a handle to.
pub(crate) fn forget_if_unowned(st: &mut State, ep_id: EndpointId) {
    let Some(ep) = st.eps.get(&ep_id) else { return };
    let has_deferred =
        st.deferred.iter().any(|d| matches!(d, Deferred::ErrHandler { ep, .. } if *ep == ep_id));
    if ep.down && ep.handle.strong_count() == 0 && !has_deferred {
        st.remove_ep(ep_id);
    }
}

/// Starts closing an endpoint (`ucp_ep_close_nbx`). With `force`, everything in flight ends with
/// CANCELED and the connection drops at once; otherwise the endpoint drains first. Returns the
/// close's request (made by `cell`) to wait for, or `None` when the close is already complete.
pub(crate) fn begin_close_with(
    core: &mut Core,
    ep_id: EndpointId,
    force: bool,
    cell: impl FnOnce() -> std::sync::Arc<crate::request::ReqCell<()>>,
) -> Option<std::sync::Arc<crate::request::ReqCell<()>>> {
    let op = start_close(core, ep_id, force);
    let cell = op.map(|op| {
        let cell = cell();
        core.st.sinks.insert(op, cell.clone());
        cell
    });
    core.drain();
    cell
}

/// [`begin_close_with`] for a close nobody waits for (the last handle dropped).
pub(crate) fn begin_close(core: &mut Core, ep_id: EndpointId, force: bool) {
    start_close(core, ep_id, force);
    core.drain();
}

fn start_close(core: &mut Core, ep_id: EndpointId, force: bool) -> Option<OpId> {
    let st = &mut core.st;
    let ep = st.eps.get_mut(&ep_id)?;
    // Not the peer's failure: no error handler, whatever the close brings.
    ep.err_reported = true;
    ep.stop_direct();
    let mode = if force { CloseMode::Force } else { CloseMode::Flush };
    st.engine.close(ep_id, mode).ok().flatten()
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
/// link, as if no faster lane existed. Either way the endpoint is ready then.
pub(crate) fn open_lanes(core: &mut Core) {
    let Core { tl, st } = core;
    for dial in std::mem::take(&mut st.lane_dials) {
        let old = dial.request_link;
        let alive = st.engine.phase(dial.ep).is_some_and(|phase| !matches!(phase, Phase::Dead(_)));
        if !alive {
            continue;
        }
        if st.verbs.is_some_and(|(member, _)| member == dial.lane.member) {
            open_verbs_lane(tl, st, dial);
            continue;
        }
        let accept = dial.accept.encode();
        let target = match dial.lane.session {
            Some(session) => ConnectTarget::Session { address: &dial.lane.target, session },
            None => ConnectTarget::Address(&dial.lane.target),
        };
        let lane = tl.connect_with(dial.lane.member, target);
        let mut header = [0u8; MAX_HEADER_LEN];
        let n = Op::Hello.encode(&mut header);
        let link = match lane {
            Ok(lane) if tl.send(lane, &header[..n], Payload::Copy(&accept)).is_ok() => {
                // The request's link stays open until the client closes it, so the client never
                // sees it fail before the accept arrives on the new one.
                if let Some(ep) = st.eps.get_mut(&dial.ep) {
                    keep_sockaddrs(ep, tl.link_addrs(old));
                }
                tracing::debug!(ep = %dial.ep, ?old, ?lane, "accepted over a faster lane");
                lane
            }
            other => {
                if let Ok(lane) = other {
                    tl.close(lane, true);
                }
                tracing::debug!(ep = %dial.ep, "no faster lane to the client; staying on the request's link");
                let _ = tl.send(old, &header[..n], Payload::Copy(&accept));
                old
            }
        };
        st.engine.endpoint_ready(dial.ep, link, st.caps_for(link));
    }
}

/// The server's side of a verbs lane: opens this side's end, joins it to the client's end from
/// the request, and answers on the request's link with its own end in the server's address;
/// the endpoint then uses the verbs link. When the link cannot be opened or joined, the answer
/// carries no verbs end and the endpoint stays on the request's link.
fn open_verbs_lane(tl: &mut zcx_dataplane::TransportSet, st: &mut State, dial: LaneDial) {
    let old = dial.request_link;
    let mut accept = dial.accept;
    let opened = tl.open_link_with(dial.lane.member).and_then(|(link, end)| {
        match tl.join_link(link, &dial.lane.target) {
            Ok(()) => Ok((link, end)),
            Err(e) => {
                tl.close(link, true);
                Err(e)
            }
        }
    });
    let link = match (opened, &mut accept) {
        (Ok((link, end)), HandshakeWire::Accept { server_address, .. })
            if server_address.transports.len() < zcx_control::MAX_TRANSPORT_ADDRESSES =>
        {
            server_address.transports.push(end);
            tracing::debug!(ep = %dial.ep, ?old, verbs = ?link, "accepted over verbs");
            Some(link)
        }
        (Ok((link, _)), _) => {
            tl.close(link, true);
            None
        }
        (Err(e), _) => {
            tracing::debug!(ep = %dial.ep, %e, "no verbs link to the client; staying on the request's link");
            None
        }
    };
    let mut header = [0u8; MAX_HEADER_LEN];
    let n = Op::Hello.encode(&mut header);
    if let Err(e) = tl.send(old, &header[..n], Payload::Copy(&accept.encode())) {
        tracing::debug!(ep = %dial.ep, %e, "accept not sent");
    }
    if let (Some(ep), Some(_)) = (st.eps.get_mut(&dial.ep), link) {
        keep_sockaddrs(ep, tl.link_addrs(old));
    }
    let link = link.unwrap_or(old);
    st.engine.endpoint_ready(dial.ep, link, st.caps_for(link));
}

/// The client's side of a verbs lane, once the server answered: joins the endpoint's verbs
/// link to the server's end and moves the endpoint to it (the request's link closes), or, when
/// the server offered none or the join fails, closes the verbs link and stays.
pub(crate) fn join_verbs_lanes(core: &mut Core) {
    let Core { tl, st } = core;
    for join in std::mem::take(&mut st.verbs_joins) {
        let joined = join.server.as_ref().is_some_and(|server| match tl.join_link(join.verbs_link, server) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(ep = %join.ep, %e, "joining the server's verbs link failed");
                false
            }
        });
        if let Some(ep) = st.eps.get_mut(&join.ep) {
            ep.verbs_link = None;
        }
        let link = if joined {
            st.lanes_taken.push((join.ep, join.link));
            tracing::debug!(ep = %join.ep, old = ?join.link, verbs = ?join.verbs_link, "connected over verbs");
            join.verbs_link
        } else {
            tl.close(join.verbs_link, true);
            join.link
        };
        st.engine.endpoint_ready(join.ep, link, st.caps_for(link));
    }
}
