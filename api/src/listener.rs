//! `ucp_listener_*` and `ucp_conn_request_*`: accepting connections by socket address.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use zcx_dataplane::Transport as _;

use zcx_dataplane::{LinkId, ListenerId};

use crate::endpoint::{Endpoint, ServerEpParams};
use crate::status::{fail_with, Result, Status};
use crate::worker::lifecycle::{create_server_ep, reject_link};
use crate::worker::state::{status_of, Deferred, ListenerEntry, State};
use crate::worker::{Worker, WorkerShared};

/// `ucp_listener_conn_handler_t`: decides on each request, by creating an endpoint from it
/// ([`crate::EpParams::conn_request`]) or rejecting it ([`Listener::reject`], or dropping it).
pub type ConnHandler = Box<dyn FnMut(ConnRequest) + Send>;

/// `ucp_listener_accept_handler_t`: receives endpoints the listener accepted itself.
pub type AcceptHandler = Box<dyn FnMut(Endpoint) + Send>;

/// `ucp_listener_params_t`: a sockaddr and exactly one of the two handlers.
#[derive(Default)]
pub struct ListenerParams {
    /// `UCP_LISTENER_PARAM_FIELD_SOCK_ADDR` (port 0 picks a free port; see [`Listener::sockaddr`]).
    pub sockaddr: Option<SocketAddr>,
    /// `UCP_LISTENER_PARAM_FIELD_CONN_HANDLER`.
    pub conn_handler: Option<ConnHandler>,
    /// `UCP_LISTENER_PARAM_FIELD_ACCEPT_HANDLER`.
    pub accept_handler: Option<AcceptHandler>,
    /// Parameters of the endpoints an accept handler receives.
    pub accept_params: ServerEpParams,
}

pub(crate) enum ListenerHandlers {
    Conn(Arc<Mutex<ConnHandler>>),
    Accept(Arc<Mutex<AcceptHandler>>, ServerEpParams),
}

/// What the server learned from a client's connection request.
pub(crate) struct ConnRequestData {
    pub link: LinkId,
    pub peer: SocketAddr,
    pub client_id: u64,
    pub ep_name: String,
    pub err_mode_peer: bool,
    pub client_ep_id: u64,
    pub client_worker: String,
    /// The client's shared-memory address when it runs on this host and the request came by
    /// another transport: the accept then opens a shared-memory link to it.
    pub client_lane: Option<crate::worker::state::Lane>,
}

/// `ucp_conn_request_h`: a client waiting to be accepted or rejected. Dropping it unanswered
/// rejects it.
pub struct ConnRequest {
    worker: Arc<WorkerShared>,
    data: Option<ConnRequestData>,
}

impl ConnRequest {
    /// `UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR`.
    pub fn client_addr(&self) -> Option<SocketAddr> {
        self.data.as_ref().map(|d| d.peer)
    }

    /// `UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ID`: the client worker's id when it sent one
    /// (`SEND_CLIENT_ID`), else 0.
    pub fn client_id(&self) -> u64 {
        self.data.as_ref().map_or(0, |d| d.client_id)
    }

    /// The name of the client's endpoint.
    pub fn client_ep_name(&self) -> &str {
        self.data.as_ref().map_or("", |d| d.ep_name.as_str())
    }

    /// The name of the client's worker.
    pub fn client_worker_name(&self) -> &str {
        self.data.as_ref().map_or("", |d| d.client_worker.as_str())
    }

    pub(crate) fn accept_with(&mut self, params: ServerEpParams) -> Result<Endpoint> {
        let data = self
            .data
            .take()
            .ok_or_else(|| fail_with(Status::InvalidParam, "request already answered".into()))?;
        let mut core = self.worker.lock();
        let id = create_server_ep(&mut core.st, &data, params);
        core.send_out();
        Ok(Endpoint::adopt(&self.worker, &mut core, id))
    }

    fn reject_with(&mut self, status: Status) {
        if let Some(data) = self.data.take() {
            let mut core = self.worker.lock();
            reject_link(&mut core.st, &data, status);
            core.send_out();
            let links = std::mem::take(&mut core.st.to_close);
            for (link, force) in links {
                core.tl.close(link, force);
            }
        }
    }
}

impl Drop for ConnRequest {
    fn drop(&mut self) {
        self.reject_with(Status::Rejected);
    }
}

impl std::fmt::Debug for ConnRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnRequest")
            .field("client_addr", &self.client_addr())
            .field("client_id", &self.client_id())
            .finish()
    }
}

/// `ucp_listener_h`. Dropping it is `ucp_listener_destroy`: no new connections; accepted ones
/// live on.
pub struct Listener {
    worker: Arc<WorkerShared>,
    id: ListenerId,
    addr: SocketAddr,
}

impl Listener {
    /// `ucp_listener_query(UCP_LISTENER_ATTR_FIELD_SOCKADDR)`: the bound address, with the real
    /// port when 0 was asked for.
    pub fn sockaddr(&self) -> SocketAddr {
        self.addr
    }

    /// `ucp_listener_reject`.
    pub fn reject(&self, mut request: ConnRequest) {
        request.reject_with(Status::Rejected);
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let mut core = self.worker.lock();
        if let Some(entry) = core.st.listeners.remove(&self.id) {
            // Its handlers may own endpoints, whose drop takes the lock.
            core.st.bury(entry);
        }
        core.tl.close_listener(self.id);
    }
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").field("addr", &self.addr).finish()
    }
}

impl Worker {
    /// `ucp_listener_create`. INVALID_PARAM without a sockaddr, or without exactly one handler;
    /// BUSY when the address is in use.
    pub fn listen(&self, params: ListenerParams) -> Result<Listener> {
        let ListenerParams { sockaddr, conn_handler, accept_handler, accept_params } = params;
        let sockaddr =
            sockaddr.ok_or_else(|| fail_with(Status::InvalidParam, "a listener needs a sockaddr".into()))?;
        let handlers = match (conn_handler, accept_handler) {
            (Some(conn), None) => ListenerHandlers::Conn(Arc::new(Mutex::new(conn))),
            (None, Some(accept)) => ListenerHandlers::Accept(Arc::new(Mutex::new(accept)), accept_params),
            _ => {
                return Err(fail_with(
                    Status::InvalidParam,
                    "a listener needs exactly one of conn_handler and accept_handler".into(),
                ))
            }
        };
        let mut core = self.shared.lock();
        let (id, addr) = core
            .tl
            .listen(sockaddr)
            .map_err(|e| fail_with(status_of(e), format!("listen on {sockaddr}: {e}")))?;
        core.st.listeners.insert(id, ListenerEntry { handlers });
        tracing::debug!(%addr, "listening");
        Ok(Listener { worker: Arc::clone(&self.shared), id, addr })
    }
}

/// A connection request arrived (during the poll): decide who handles it.
pub(crate) fn on_conn_request(st: &mut State, listener: ListenerId, data: ConnRequestData) {
    let Some(entry) = st.listeners.get(&listener) else {
        if listener == ListenerId(0) {
            // A peer connecting by our worker address: accepted without asking the application.
            create_server_ep(
                st,
                &data,
                ServerEpParams { err_mode_peer: data.err_mode_peer, ..Default::default() },
            );
        } else {
            reject_link(st, &data, Status::Rejected);
        }
        return;
    };
    match &entry.handlers {
        ListenerHandlers::Conn(_) => {
            st.deferred.push(Deferred::ConnRequest { listener, request: Box::new(data) })
        }
        ListenerHandlers::Accept(_, params) => {
            let params = params.clone();
            let ep = create_server_ep(st, &data, params);
            st.deferred.push(Deferred::Accepted { listener, ep });
        }
    }
}

/// Runs a listener's connection handler (from progress, without the lock).
// Takes the box `Deferred::ConnRequest` holds (boxed there to keep deferred items small), and
// unboxes it here, off the worker's progress code.
#[allow(clippy::boxed_local)]
pub(crate) fn run_conn_handler(shared: &Arc<WorkerShared>, listener: ListenerId, data: Box<ConnRequestData>) {
    let handler = match shared.lock().st.listeners.get(&listener).map(|e| &e.handlers) {
        Some(ListenerHandlers::Conn(handler)) => Some(Arc::clone(handler)),
        _ => None,
    };
    let request = ConnRequest { worker: Arc::clone(shared), data: Some(*data) };
    match handler {
        Some(handler) => (handler.lock().unwrap_or_else(|p| p.into_inner()))(request),
        None => drop(request),
    }
}

/// Runs a listener's accept handler with the endpoint it accepted.
pub(crate) fn run_accept_handler(
    shared: &Arc<WorkerShared>,
    listener: ListenerId,
    ep: zcx_engine::EndpointId,
) {
    let handler = match shared.lock().st.listeners.get(&listener).map(|e| &e.handlers) {
        Some(ListenerHandlers::Accept(handler, _)) => Some(Arc::clone(handler)),
        _ => None,
    };
    let endpoint = {
        let mut core = shared.lock();
        Endpoint::adopt(shared, &mut core, ep)
    };
    if let Some(handler) = handler {
        (handler.lock().unwrap_or_else(|p| p.into_inner()))(endpoint);
    }
}
