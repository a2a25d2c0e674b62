//! Connection requests as the worker sees them: what a client's request carries, the handlers
//! a listener registered, who answers a request that arrived, and running that handler once the
//! worker's lock is released.
//!
//! The listener module above the worker owns the application's side (`Listener`,
//! `ConnRequest`): it registers a listener's connection handler as a [`ConnUpcall`], which the
//! worker calls with the request's data, and which makes the `ConnRequest` the application's
//! handler receives.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use zcx_dataplane::{LinkId, ListenerId, Transport as _};
use zcx_engine::EndpointId;

use crate::status::Status;
use crate::worker::ep_handle::Endpoint;
use crate::worker::lifecycle::{create_server_ep, reject_link, ServerEpParams};
use crate::worker::pairing;
use crate::worker::state::{Deferred, State};
use crate::worker::WorkerShared;

/// `ucp_listener_accept_handler_t`: receives endpoints the listener accepted itself.
pub type AcceptHandler = Box<dyn FnMut(Endpoint) + Send>;

/// A listener's connection handler as the worker runs it (from progress, without the lock): the
/// listener layer's wrapper of the application's handler, given the worker and the request.
pub(crate) type ConnUpcall = Box<dyn FnMut(&Arc<WorkerShared>, ConnRequestData) + Send>;

/// A listener's handlers, and the parameters of endpoints it accepts itself.
pub(crate) enum ListenerHandlers {
    Conn(Arc<Mutex<ConnUpcall>>),
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
    /// The request's pairing proposal (see `worker::pairing`), 0 for none.
    pub pair_token: u64,
    pub client_worker: String,
    /// The client's worker address, for a worker other than the listener's that accepts it.
    pub client_address: zcx_control::WorkerAddressWire,
    /// The client's shared-memory address when it runs on this host and the request came by
    /// another transport: the accept then opens a shared-memory link to it.
    pub client_lane: Option<crate::worker::state::Lane>,
}

/// A connection request arrived (during the poll): decide who handles it.
pub(crate) fn on_conn_request(st: &mut State, listener: ListenerId, data: ConnRequestData) {
    let Some(entry) = st.listeners.get(&listener) else {
        if listener == ListenerId(0) {
            // A peer connecting by our worker address: accepted without asking the application,
            // unless it is one of our own endpoints connecting to us, it proves it may share a
            // connection we made to it, or our own request to it crossed this one.
            if crate::worker::lifecycle::accept_self(st, &data) || pairing::answer_proposal(st, &data) {
                return;
            }
            if let Some(data) = pairing::hold_crossing(st, data) {
                pairing::accept_implicit(st, &data);
            }
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

/// Answers a connection request with a rejection carrying `status`, and drops its connection.
pub(crate) fn reject_request(shared: &WorkerShared, data: &ConnRequestData, status: Status) {
    let mut core = shared.lock();
    reject_link(&mut core.st, data, status);
    core.send_out();
    let links = std::mem::take(&mut core.st.to_close);
    for (link, force) in links {
        core.tl.close(link, force);
    }
}

/// Runs a listener's connection handler (from progress, without the lock); a request whose
/// listener is gone is rejected.
// Takes the box `Deferred::ConnRequest` holds (boxed there to keep deferred items small), and
// unboxes it here, off the worker's progress code.
#[allow(clippy::boxed_local)]
pub(crate) fn run_conn_handler(shared: &Arc<WorkerShared>, listener: ListenerId, data: Box<ConnRequestData>) {
    let handler = match shared.lock().st.listeners.get(&listener).map(|e| &e.handlers) {
        Some(ListenerHandlers::Conn(handler)) => Some(Arc::clone(handler)),
        _ => None,
    };
    match handler {
        Some(handler) => (handler.lock().unwrap_or_else(|p| p.into_inner()))(shared, *data),
        None => reject_request(shared, &data, Status::Rejected),
    }
}

/// Runs a listener's accept handler with the endpoint it accepted.
pub(crate) fn run_accept_handler(shared: &Arc<WorkerShared>, listener: ListenerId, ep: EndpointId) {
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
