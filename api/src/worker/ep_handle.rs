//! The application's handle of an endpoint, as the worker makes it.
//!
//! The worker builds handles itself when it runs user code that receives one (an error
//! handler, an accept handler, an AM handler's reply endpoint), and keeps a weak reference to
//! the canonical one in its records (`EpState::handle`). The operations on a handle (sends,
//! RMA, query, flush, close) belong to the endpoint module above the worker, which adds them to
//! [`Endpoint`] and re-exports it.

use std::sync::{Arc, OnceLock};

use zcx_dataplane::shm::ShmSendLane;
use zcx_engine::{EndpointId, Phase};

use crate::status::Status;
use crate::worker::lifecycle;
use crate::worker::state::Core;
use crate::worker::WorkerShared;

/// An error handler (`ucp_err_handler_cb_t`): runs once per endpoint, from progress, when the
/// endpoint fails in `ErrMode::Peer`.
pub type ErrHandler = Arc<dyn Fn(&Endpoint, Status) + Send + Sync>;

/// `ucp_ep_h`. Clones are the same endpoint. Dropping the last handle the application holds
/// closes the endpoint with flush in the background (UCP requires an explicit close; zcx does it
/// for you).
#[derive(Clone)]
pub struct Endpoint {
    pub(crate) handle: Arc<EpHandle>,
}

pub(crate) struct EpHandle {
    pub worker: Arc<WorkerShared>,
    pub id: EndpointId,
    owning: bool,
    /// Set once the endpoint is ready on a shared-memory link: its eager sends skip the worker.
    pub direct: OnceLock<DirectLane>,
}

/// An endpoint's direct way into its shared-memory link's ring (see `ShmSendLane`): an eager
/// message is written there without the worker's lock, endpoint table or transport set, which
/// is most of a small send's cost. It carries what decides that a message is eager, as the worker
/// had it when the lane was opened (neither changes after the worker is created). Whenever the
/// lane refuses (the endpoint closed or failed, a frame is queued behind a full ring), the send
/// takes the worker's path, which reports or queues exactly as before.
pub(crate) struct DirectLane {
    pub lane: Arc<ShmSendLane>,
    pub rndv_thresh: usize,
    pub max_payload: usize,
}

impl EpHandle {
    fn new(worker: &Arc<WorkerShared>, id: EndpointId, owning: bool) -> EpHandle {
        EpHandle { worker: Arc::clone(worker), id, owning, direct: OnceLock::new() }
    }
}

impl Drop for EpHandle {
    fn drop(&mut self) {
        if !self.owning {
            return;
        }
        let mut core = self.worker.lock();
        let dead = core.st.engine.phase(self.id).is_none_or(|phase| matches!(phase, Phase::Dead(_)));
        if dead {
            core.st.remove_ep(self.id);
        } else {
            // Closed with flush in the background; forgotten once down (nobody holds it).
            lifecycle::begin_close(&mut core, self.id, false);
        }
    }
}

impl Endpoint {
    /// The application's handle of endpoint `id`, or a non-owning one when it holds none (an
    /// endpoint created by a peer's connection to the worker address).
    pub(crate) fn attach(worker: &Arc<WorkerShared>, id: EndpointId) -> Endpoint {
        let existing = worker.lock().st.eps.get(&id).and_then(|ep| ep.handle.upgrade());
        let handle = existing.unwrap_or_else(|| Arc::new(EpHandle::new(worker, id, false)));
        Endpoint { handle }
    }

    /// A new owning handle for endpoint `id`.
    pub(crate) fn adopt(worker: &Arc<WorkerShared>, core: &mut Core, id: EndpointId) -> Endpoint {
        let handle = Arc::new(EpHandle::new(worker, id, true));
        if let Some(ep) = core.st.eps.get_mut(&id) {
            ep.handle = Arc::downgrade(&handle);
        }
        Endpoint { handle }
    }

    pub(crate) fn id(&self) -> EndpointId {
        self.handle.id
    }

    pub(crate) fn shared(&self) -> &Arc<WorkerShared> {
        &self.handle.worker
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("id", &self.handle.id).finish()
    }
}
