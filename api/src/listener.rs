//! `ucp_listener_*` and `ucp_conn_request_*`: accepting connections by socket address.
//!
//! The worker keeps what a request carries and runs the handlers (`worker::accept`); this module
//! gives the application its side, registering its connection handler with the worker as one
//! that makes the [`ConnRequest`] the handler decides on.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use zcx_dataplane::Transport as _;

use zcx_dataplane::ListenerId;

use crate::endpoint::{Endpoint, ServerEpParams};
use crate::status::{fail_with, Result, Status};
use crate::worker::accept::{reject_request, ConnRequestData, ConnUpcall, ListenerHandlers};
use crate::worker::lifecycle::create_server_ep;
use crate::worker::state::{status_of, ListenerEntry};
use crate::worker::{Worker, WorkerShared};

pub use crate::worker::accept::AcceptHandler;

/// `ucp_listener_conn_handler_t`: decides on each request, by creating an endpoint from it
/// ([`crate::EpParams::conn_request`]) or rejecting it ([`Listener::reject`], or dropping it).
pub type ConnHandler = Box<dyn FnMut(ConnRequest) + Send>;

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

    /// Whether the request came to `worker` (its listener's worker).
    pub(crate) fn belongs_to(&self, worker: &Arc<WorkerShared>) -> bool {
        Arc::ptr_eq(&self.worker, worker)
    }

    /// Accepts the request on `worker`, another worker than its listener's
    /// (`ucp_ep_create` with a `conn_request` on another worker, as `ucp_client_server` does):
    /// `worker` connects to the client's worker address and answers there, and the client moves
    /// its endpoint to that connection and closes the request's.
    pub(crate) fn accept_on(
        &mut self,
        worker: &Arc<WorkerShared>,
        params: ServerEpParams,
    ) -> Result<Endpoint> {
        let data = self
            .data
            .take()
            .ok_or_else(|| fail_with(Status::InvalidParam, "request already answered".into()))?;
        let mut core = worker.lock();
        let id = crate::worker::lifecycle::accept_elsewhere(&mut core, &data, params)?;
        core.send_out();
        Ok(Endpoint::adopt(worker, &mut core, id))
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
            reject_request(&self.worker, &data, status);
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
            (Some(conn), None) => ListenerHandlers::Conn(Arc::new(Mutex::new(conn_upcall(conn)))),
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

/// The application's connection handler as the worker runs it: each request it is given
/// becomes the [`ConnRequest`] the handler decides on.
fn conn_upcall(mut handler: ConnHandler) -> ConnUpcall {
    Box::new(move |worker: &Arc<WorkerShared>, data: ConnRequestData| {
        handler(ConnRequest { worker: Arc::clone(worker), data: Some(data) })
    })
}
