//! `ucp_ep_*`: endpoints, their parameters, query, flush and close.
//!
//! The [`Endpoint`] handle itself is the worker's (`worker::ep_handle`), which builds handles for
//! the handlers it runs; this module and its children add the operations on it. They depend on
//! the worker, never the other way (see `worker::layering`).

mod am;
mod put_help;
mod rma;
mod stream;
mod tag;

use std::net::SocketAddr;
use std::sync::Arc;

use bitflags::bitflags;
use zcx_control::WorkerAddressWire;
use zcx_dataplane::transport_set::member_of;
use zcx_dataplane::{ConnectTarget, LinkId, TransportSet};
use zcx_dataplane::{SameHostFastPath as _, Transport as _};
use zcx_engine::Phase;

use crate::listener::ConnRequest;
use crate::request::{OpInfo, ReqCell, Request, RequestParams};
use crate::status::{fail_with, Result, Status};
use crate::worker::ep_handle::DirectLane;
use crate::worker::lifecycle::{self, EpSetup};
use crate::worker::pairing;
use crate::worker::state::{self, Core, State};
use crate::worker::Worker;

pub use crate::worker::ep_handle::{Endpoint, ErrHandler};
pub use crate::worker::lifecycle::ServerEpParams;
pub use am::{AmProto, AmSendParams};
pub use rma::{AtomicOp, AtomicSize, EpRkey};
pub use tag::{TagInfo, TagMessage, TagSendParams};

/// `ucp_err_handling_mode_t`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ErrMode {
    /// `UCP_ERR_HANDLING_MODE_NONE`: no failure detection; a peer failure still fails the
    /// endpoint's operations, but no handler runs and no keepalive watches the peer.
    #[default]
    None,
    /// `UCP_ERR_HANDLING_MODE_PEER`: keepalive watches the peer, and the error handler runs once.
    Peer,
}

bitflags! {
    /// `ucp_ep_params_flags_field`.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct EpFlags: u32 {
        /// `UCP_EP_PARAMS_FLAGS_CLIENT_SERVER`: a client of a listener (implied by a sockaddr).
        const CLIENT_SERVER = 1 << 0;
        /// `UCP_EP_PARAMS_FLAGS_NO_LOOPBACK`: accepted; zcx has no loopback shortcut to avoid.
        const NO_LOOPBACK = 1 << 1;
        /// `UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID`: send the worker's client id with the request.
        const SEND_CLIENT_ID = 1 << 2;
    }
}

/// `ucp_ep_close_flags_t` as a mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseMode {
    /// Flush, then disconnect (`UCP_EP_CLOSE_MODE_FLUSH`).
    Flush,
    /// Drop at once; every outstanding request completes with CANCELED (`UCP_EP_CLOSE_FLAG_FORCE`).
    Force,
}

/// `ucp_ep_params_t`: exactly one of `remote_address`, `sockaddr` and `conn_request`.
#[derive(Default)]
pub struct EpParams {
    /// `UCP_EP_PARAM_FIELD_REMOTE_ADDRESS`: a peer's [`Worker::address`].
    pub remote_address: Option<Vec<u8>>,
    /// `UCP_EP_PARAM_FIELD_SOCK_ADDR`: a listener's address.
    pub sockaddr: Option<SocketAddr>,
    /// `UCP_EP_PARAM_FIELD_CONN_REQUEST`: accept this request (server side).
    pub conn_request: Option<ConnRequest>,
    /// `UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE`.
    pub err_mode: ErrMode,
    /// `UCP_EP_PARAM_FIELD_ERR_HANDLER`.
    pub err_handler: Option<ErrHandler>,
    /// `UCP_EP_PARAM_FIELD_USER_DATA`, returned by query.
    pub user_data: usize,
    /// `UCP_EP_PARAM_FIELD_FLAGS`.
    pub flags: EpFlags,
    /// `UCP_EP_PARAM_FIELD_NAME`; default: unique per worker.
    pub name: Option<String>,
    /// `UCP_EP_PARAM_FIELD_LOCAL_SOCK_ADDR`: bind the client's socket here (port 0 allowed).
    pub local_sockaddr: Option<SocketAddr>,
}

impl EpParams {
    /// Parameters to connect to a listener.
    pub fn sockaddr(addr: SocketAddr) -> EpParams {
        EpParams { sockaddr: Some(addr), flags: EpFlags::CLIENT_SERVER, ..EpParams::default() }
    }

    /// Parameters to connect to a worker by its address.
    pub fn remote_address(address: &[u8]) -> EpParams {
        EpParams { remote_address: Some(address.to_vec()), ..EpParams::default() }
    }

    /// Parameters to accept a connection request.
    pub fn conn_request(request: ConnRequest) -> EpParams {
        EpParams { conn_request: Some(request), ..EpParams::default() }
    }

    /// Sets peer error handling with `handler`.
    pub fn with_err_handler(
        mut self,
        handler: impl Fn(&Endpoint, Status) + Send + Sync + 'static,
    ) -> EpParams {
        self.err_mode = ErrMode::Peer;
        self.err_handler = Some(Arc::new(handler));
        self
    }
}

impl std::fmt::Debug for EpParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpParams")
            .field("remote_address", &self.remote_address.as_ref().map(Vec::len))
            .field("sockaddr", &self.sockaddr)
            .field("conn_request", &self.conn_request.is_some())
            .field("err_mode", &self.err_mode)
            .field("flags", &self.flags)
            .field("name", &self.name)
            .field("local_sockaddr", &self.local_sockaddr)
            .finish()
    }
}

/// `ucp_ep_attr_t`, from [`Endpoint::query`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpAttr {
    /// `UCP_EP_ATTR_FIELD_NAME`.
    pub name: String,
    /// `UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR`.
    pub local_sockaddr: Option<SocketAddr>,
    /// `UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR`.
    pub remote_sockaddr: Option<SocketAddr>,
    /// `UCP_EP_ATTR_FIELD_TRANSPORTS`: the transports the endpoint uses.
    pub transports: Vec<&'static str>,
    /// `UCP_EP_PARAM_FIELD_USER_DATA` as given.
    pub user_data: usize,
    /// `OK` while usable, `INPROGRESS` while connecting, else the status operations fail with.
    pub status: Status,
}

impl Endpoint {
    /// The endpoint's direct lane, once it has one (see [`DirectLane`]).
    #[inline]
    pub(crate) fn direct(&self) -> Option<&DirectLane> {
        crate::worker::quiet::note_issued();
        self.handle.direct.get()
    }

    /// Called after an eager send went through the worker on `link`: gives this handle the
    /// endpoint's direct lane when it can have one (ready, nothing queued, on a shared-memory
    /// link). Cheap when it cannot: nothing is looked up for a link of another transport.
    #[inline]
    pub(crate) fn offer_direct(&self, tl: &mut TransportSet, st: &mut State, link: LinkId) {
        if self.handle.direct.get().is_none() && st.shm_member == Some(member_of(link)) {
            self.open_direct(tl, st, link);
        }
    }

    /// Sends the frame an eager send got back from the engine (`Sent::Now`), whose payload is
    /// the caller's `bytes`, then offers the endpoint's lane for the sends after it.
    #[inline(always)]
    pub(crate) fn send_now(
        &self,
        tl: &mut TransportSet,
        st: &mut State,
        transmit: &zcx_engine::Transmit,
        bytes: &[u8],
    ) -> Result<()> {
        match tl.send(transmit.link, transmit.header.as_bytes(), zcx_dataplane::Payload::Copy(bytes)) {
            Ok(_) => {}
            Err(zcx_dataplane::TlError::NoResource) => {
                Self::stall_copy(st, transmit, bytes);
                return Ok(());
            }
            Err(error) => return Err(crate::worker::state::status_of_cold(error)),
        }
        self.offer_direct(tl, st, transmit.link);
        Ok(())
    }

    /// The transport pushed back a frame sent at once (out of credits, verbs): a copy of it
    /// waits with the worker's stalled transmits and goes first at the next drain, so the
    /// caller's buffer is free as if it had gone.
    #[cold]
    #[inline(never)]
    fn stall_copy(st: &mut State, transmit: &zcx_engine::Transmit, bytes: &[u8]) {
        st.stalled.push_back(zcx_engine::Transmit {
            link: transmit.link,
            header: transmit.header,
            payload: zcx_engine::Payload::Owned(bytes.to_vec()),
            placed: transmit.placed,
        });
    }

    #[cold]
    #[inline(never)]
    fn open_direct(&self, tl: &mut TransportSet, st: &mut State, link: LinkId) {
        let (rndv_thresh, max_payload) = (st.rndv_thresh, st.max_payload);
        if st.engine.phase(self.id()) != Some(Phase::Ready) || st.engine.link_of(self.id()) != Some(link) {
            return;
        }
        // The lane writes the ring directly: nothing the worker holds may be left behind it.
        if !st.engine.is_idle() || !st.stalled.is_empty() {
            return;
        }
        let Some(ep) = st.eps.get_mut(&self.id()) else { return };
        let lane = match &ep.lane {
            Some(lane) => Arc::clone(lane),
            None => {
                let Some(lane) = tl.open_send_lane(link) else { return };
                ep.lane = Some(Arc::clone(&lane));
                lane
            }
        };
        lane.hold_streams(ep.stream_jobs > 0);
        let _ = self.handle.direct.set(DirectLane { lane, rndv_thresh, max_payload });
    }

    /// The worker the endpoint belongs to.
    pub fn worker(&self) -> Worker {
        Worker { shared: Arc::clone(&self.handle.worker) }
    }

    /// `ucp_ep_query`.
    pub fn query(&self) -> Result<EpAttr> {
        let core = self.shared().lock();
        let ep = core.st.eps.get(&self.id()).ok_or(Status::NotConnected)?;
        let phase = core.st.engine.phase(self.id()).ok_or(Status::NotConnected)?;
        let link = core.st.engine.link_of(self.id()).ok_or(Status::NotConnected)?;
        // A shared-memory link has no socket addresses: the request's link had them.
        let (local, remote) = lifecycle::link_addrs(&core, link);
        let status = match phase {
            Phase::Connecting => Status::InProgress,
            Phase::Ready | Phase::Closing => Status::Ok,
            Phase::Dead(status) => status,
        };
        Ok(EpAttr {
            name: ep.name.clone(),
            local_sockaddr: local.or(ep.local_addr),
            remote_sockaddr: remote.or(ep.remote_addr),
            transports: vec![core.tl.link_caps(link).name],
            user_data: ep.user_data,
            status,
        })
    }

    /// `ucp_ep_flush_nbx`: completes when every one-sided operation (put, get, atomic) issued
    /// on the endpoint so far has completed at the target and every send at the origin.
    pub fn flush(&self) -> Result<Request<()>> {
        self.flush_with(RequestParams::default())
    }

    /// [`Endpoint::flush`] with a completion callback (`ucp_ep_flush_nbx`'s
    /// `UCP_OP_ATTR_FIELD_CALLBACK`), run from progress.
    pub fn flush_with(&self, params: RequestParams) -> Result<Request<()>> {
        let mut core = self.shared().lock();
        let Core { tl, st } = &mut *core;
        let delivered =
            st.engine.link_of(self.id()).is_some_and(|link| state::link_delivered(tl, &st.stalled, link));
        let op = st.engine.flush(self.id(), delivered)?;
        let cell = ReqCell::new(self.shared(), (), params.callback);
        core.st.sinks.insert(op, cell.clone());
        core.drain();
        Ok(Request::pending(cell))
    }

    /// `ucp_ep_close_nbx`. `Flush` drains the endpoint, then disconnects (the peer's error handler
    /// sees CONNECTION_RESET); `Force` ends every outstanding request with CANCELED at once.
    pub fn close(&self, mode: CloseMode) -> Result<Request<()>> {
        self.close_with(mode, RequestParams::default())
    }

    /// [`Endpoint::close`] with a completion callback (`ucp_ep_close_nbx`'s
    /// `UCP_OP_ATTR_FIELD_CALLBACK`), run from progress when the close does not complete at once.
    pub fn close_with(&self, mode: CloseMode, params: RequestParams) -> Result<Request<()>> {
        let mut core = self.shared().lock();
        match lifecycle::begin_close_with(&mut core, self.id(), mode == CloseMode::Force, || {
            ReqCell::new(self.shared(), (), params.callback)
        }) {
            Some(cell) => Ok(Request::pending(cell)),
            None => Ok(Request::ready((), OpInfo::default())),
        }
    }
}

impl Worker {
    /// `ucp_ep_create`.
    ///
    /// Exactly one of `remote_address`, `sockaddr` and `conn_request` must be set; a local
    /// sockaddr only goes with a sockaddr. Connecting is asynchronous: the call succeeds, and a
    /// failure to connect (no listener → NOT_CONNECTED, no route → UNREACHABLE, rejected →
    /// REJECTED) reaches the error handler and every operation issued meanwhile.
    pub fn create_endpoint(&self, params: EpParams) -> Result<Endpoint> {
        let EpParams {
            remote_address,
            sockaddr,
            conn_request,
            err_mode,
            err_handler,
            user_data,
            flags,
            name,
            local_sockaddr,
        } = params;
        let chosen = usize::from(remote_address.is_some())
            + usize::from(sockaddr.is_some())
            + usize::from(conn_request.is_some());
        if chosen != 1 {
            return Err(fail_with(
                Status::InvalidParam,
                "exactly one of remote_address, sockaddr and conn_request must be set".into(),
            ));
        }
        if local_sockaddr.is_some() && sockaddr.is_none() {
            return Err(fail_with(Status::InvalidParam, "local_sockaddr needs a sockaddr".into()));
        }
        if let Some(name) = &name {
            if name.len() > zcx_control::MAX_NAME_LEN || name.contains('\0') {
                return Err(fail_with(Status::InvalidParam, "endpoint name too long or has a NUL".into()));
            }
        }
        let setup = EpSetup { name, err_mode_peer: err_mode == ErrMode::Peer, err_handler, user_data };
        if let Some(mut request) = conn_request {
            let params = ServerEpParams {
                name: setup.name,
                err_mode_peer: setup.err_mode_peer,
                err_handler: setup.err_handler,
                user_data,
            };
            if request.belongs_to(&self.shared) {
                return request.accept_with(params);
            }
            return request.accept_on(&self.shared, params);
        }
        let client_id = if flags.contains(EpFlags::SEND_CLIENT_ID) { self.shared.client_id } else { 0 };
        let mut core = self.shared.lock();
        let id = match (sockaddr, remote_address) {
            (Some(remote), _) => lifecycle::create_client_ep(
                &mut core,
                ConnectTarget::Sockaddr { remote, local: local_sockaddr },
                setup,
                client_id,
                0,
            )?,
            (None, Some(bytes)) => {
                let peer = WorkerAddressWire::decode(&bytes)
                    .map_err(|e| fail_with(Status::InvalidParam, format!("worker address: {e}")))?;
                let target = lifecycle::address_target(&core.st, &peer)?;
                if peer.name == core.st.address.name {
                    lifecycle::create_client_ep(
                        &mut core,
                        ConnectTarget::Address(target),
                        setup,
                        client_id,
                        0,
                    )?
                } else {
                    // A connection the peer made to us first is shared if the peer proves it
                    // made it (`worker::pairing`).
                    let pair = pairing::implicit_token(&core.st, &peer.name);
                    let id = lifecycle::create_client_ep(
                        &mut core,
                        ConnectTarget::Address(target),
                        setup,
                        client_id,
                        pair,
                    )?;
                    if let Some(state) = core.st.eps.get_mut(&id) {
                        state.peer_worker = Some(peer.name.clone());
                        state.proposed_pair = pair;
                    }
                    id
                }
            }
            (None, None) => unreachable!("checked above"),
        };
        Ok(Endpoint::adopt(&self.shared, &mut core, id))
    }
}
