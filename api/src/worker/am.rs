//! Active messages (`ucp_worker_set_am_recv_handler`, `ucp_am_send_nbx`, `ucp_am_recv_data_nbx`).
//!
//! A handler runs from `Worker::progress`, after the worker's lock is released, with the message's
//! header and (eager) data. Small messages arrive whole; large ones arrive as a rendezvous request
//! whose data the handler fetches with [`AmMessage::recv_data`] (or later, after
//! [`AmMessage::keep`], with [`crate::Worker::am_recv_data`]). A handler that wants to keep eager
//! data past its return calls `keep` and returns `INPROGRESS`, as UCP's
//! `UCP_AM_RECV_ATTR_FLAG_DATA` handlers do; the data is released when the [`AmDesc`] drops.
//!
//! Over shared memory, an eager message's handler usually reads it where it arrived, in the
//! receive ring (see [`crate::worker::am_lent`]); `keep` then copies it.
//!
//! The protocol is the engine's: a message arrives as an [`zcx_engine::Event::Am`] (or lent,
//! straight from the frame), a rendezvous one naming the engine operation whose data
//! [`zcx_engine::Engine::am_recv_data`] takes; an [`AmDesc`] dropped without taking it declines
//! the data ([`zcx_engine::Engine::am_decline`]), so the sender completes.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use zcx_engine::{EndpointId, OpId};

use crate::status::Status;
use crate::worker::ep_handle::Endpoint;
use crate::worker::state::State;
use crate::worker::{Worker, WorkerShared};

/// An AM handler (`ucp_am_recv_callback_t`). Returns `OK` when done with the message, or
/// `INPROGRESS` after [`AmMessage::keep`] to hold on to the data.
///
/// `Fn + Sync`, like UCP's callbacks: a handler runs on whichever thread progresses the worker,
/// and on several at once when several do. A handler that keeps mutable state keeps it in
/// atomics or behind its own lock; the worker takes none per message.
pub type AmHandler = Box<dyn Fn(&mut AmMessage<'_>) -> Status + Send + Sync>;

/// A registered handler, shared between the worker's table and the deliveries running it.
type SharedAmHandler = Arc<dyn Fn(&mut AmMessage<'_>) -> Status + Send + Sync>;

/// The worker's AM handlers by id. Never changed in place: `set_am_handler` installs a changed
/// copy, so a progress call that took the table (one reference count per batch of deliveries,
/// not one per message) runs its handlers without the worker's lock while another thread
/// replaces them. A replaced handler is dropped with the last table that holds it, never under
/// the worker's lock (see [`crate::worker::state::State::bury`]).
#[derive(Clone, Default)]
pub(crate) struct AmHandlers {
    /// Handlers of ids below [`DIRECT_IDS`], indexed by id: a message finds its handler without a
    /// hash (UCX's AM ids are small, a few per protocol).
    direct: Vec<Option<SharedAmHandler>>,
    /// Handlers of larger ids.
    by_id: zcx_dataplane::FastMap<u16, SharedAmHandler>,
}

/// Ids whose handlers [`AmHandlers`] keeps in its direct table.
const DIRECT_IDS: usize = 256;

impl AmHandlers {
    /// No handler is set (the direct table keeps no trailing empty slot).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.direct.is_empty() && self.by_id.is_empty()
    }

    #[inline]
    fn get(&self, id: u16) -> Option<&SharedAmHandler> {
        match self.direct.get(usize::from(id)) {
            Some(slot) => slot.as_ref(),
            None if usize::from(id) < DIRECT_IDS => None,
            None => self.by_id.get(&id),
        }
    }

    fn set(&mut self, id: u16, handler: Option<SharedAmHandler>) {
        let index = usize::from(id);
        if index >= DIRECT_IDS {
            match handler {
                Some(handler) => self.by_id.insert(id, handler),
                None => self.by_id.remove(&id),
            };
            return;
        }
        if self.direct.len() <= index {
            if handler.is_none() {
                return;
            }
            self.direct.resize(index + 1, None);
        }
        self.direct[index] = handler;
        while self.direct.last().is_some_and(Option::is_none) {
            self.direct.pop();
        }
    }
}

/// A message waiting for its handler to run.
pub(crate) struct AmDelivery {
    ep: EndpointId,
    am_id: u16,
    reply: bool,
    payload: AmPayload,
}

/// What an active message carries, wherever it is held (waiting for its handler, lent to it,
/// kept in an [`AmDesc`]): the user header, and the eager data or the right to fetch rendezvous
/// data.
struct AmPayload {
    header_len: usize,
    /// Eager: header then data. Rendezvous: the header only.
    bytes: AmBytes,
    /// Rendezvous: the engine's id of the waiting data and the data's length.
    rndv: Option<(OpId, u64)>,
}

impl AmPayload {
    fn header(&self) -> &[u8] {
        &self.bytes.as_slice()[..self.header_len]
    }

    fn data(&self) -> Option<&[u8]> {
        match self.rndv {
            None => Some(&self.bytes.as_slice()[self.header_len..]),
            Some(_) => None,
        }
    }

    fn data_len(&self) -> usize {
        match self.rndv {
            None => self.bytes.as_slice().len() - self.header_len,
            Some((_, total)) => usize::try_from(total).unwrap_or(usize::MAX),
        }
    }

    fn is_rndv(&self) -> bool {
        self.rndv.is_some()
    }

    /// Whether releasing it needs the worker (a pooled buffer, a rendezvous to decline).
    fn needs_worker(&self) -> bool {
        self.rndv.is_some() || matches!(self.bytes, AmBytes::Pooled(_))
    }

    /// Moves the payload out, leaving an empty one that needs nothing released.
    fn take(&mut self) -> AmPayload {
        AmPayload {
            header_len: self.header_len,
            bytes: std::mem::replace(&mut self.bytes, AmBytes::Pooled(Vec::new())),
            rndv: self.rndv.take(),
        }
    }
}

/// The bytes of an arrived active message: inline when small, so the common small message
/// neither takes the worker's buffer pool (a lock on arrival and another on release) nor
/// allocates; a pooled buffer otherwise; or, for a message its handler reads in place, the
/// transport's own bytes (see [`LentAm`](crate::worker::am_lent::LentAm)).
pub(crate) enum AmBytes {
    Inline {
        len: u8,
        buf: [u8; AM_INLINE],
    },
    Pooled(Vec<u8>),
    /// Bytes a transport lent past its poll, valid while the handler runs. Only ever inside the
    /// delivery [`LentAm::deliver`](crate::worker::am_lent::LentAm::deliver) builds on its own
    /// stack: [`AmDelivery::take_desc`] copies them before anything can take them elsewhere.
    Lent {
        ptr: NonNull<u8>,
        len: usize,
    },
}

// SAFETY: the `Lent` variant is the only one not `Send` and `Sync` by itself. It points at plain
// bytes, which any thread may read, and it never leaves the stack frame of the handler call it
// was made for (see the variant), so no other thread ever holds it.
unsafe impl Send for AmBytes {}
// SAFETY: as for `Send`: shared, it is only ever read.
unsafe impl Sync for AmBytes {}

/// Bytes of header and data kept inline in an [`AmBytes`].
const AM_INLINE: usize = 64;

impl AmBytes {
    /// A copy of `header` then `data`, inline when they fit, else in a buffer from `pool`.
    pub fn copy_parts(pool: &Mutex<Vec<Vec<u8>>>, header: &[u8], data: &[u8]) -> AmBytes {
        let len = header.len() + data.len();
        if len <= AM_INLINE {
            let mut buf = [0u8; AM_INLINE];
            buf[..header.len()].copy_from_slice(header);
            buf[header.len()..len].copy_from_slice(data);
            AmBytes::Inline { len: len as u8, buf }
        } else {
            let mut bytes = State::pooled_copy_from(pool, header);
            bytes.extend_from_slice(data);
            AmBytes::Pooled(bytes)
        }
    }

    /// A copy of `bytes`, inline when they fit, else in a buffer from `pool`.
    fn copy_from_pool(pool: &Mutex<Vec<Vec<u8>>>, bytes: &[u8]) -> AmBytes {
        if bytes.len() <= AM_INLINE {
            let mut buf = [0u8; AM_INLINE];
            buf[..bytes.len()].copy_from_slice(bytes);
            AmBytes::Inline { len: bytes.len() as u8, buf }
        } else {
            AmBytes::Pooled(State::pooled_copy_from(pool, bytes))
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            AmBytes::Inline { len, buf } => &buf[..usize::from(*len)],
            AmBytes::Pooled(bytes) => bytes,
            // SAFETY: a `Lent` value exists only while its loan is out (see the variant), and the
            // transport keeps the `len` bytes at `ptr` mapped and unreused until then.
            AmBytes::Lent { ptr, len } => unsafe { std::slice::from_raw_parts(ptr.as_ptr(), *len) },
        }
    }
}

impl AmDelivery {
    pub fn eager(ep: EndpointId, am_id: u16, reply: bool, header_len: usize, bytes: AmBytes) -> AmDelivery {
        AmDelivery { ep, am_id, reply, payload: AmPayload { header_len, bytes, rndv: None } }
    }

    /// The engine's delivery as the handler gets it: small bytes inline (the engine's vector
    /// goes back to it at once), larger ones in the engine's vector itself.
    pub fn from_engine(st: &mut State, delivery: zcx_engine::AmDelivery) -> AmDelivery {
        let zcx_engine::AmDelivery { ep, am_id, reply, header_len, bytes, rndv } = delivery;
        let bytes = if bytes.len() <= AM_INLINE {
            let copy = AmBytes::copy_parts(&st.pool, &bytes, &[]);
            st.engine.reuse(bytes);
            copy
        } else {
            AmBytes::Pooled(bytes)
        };
        AmDelivery { ep, am_id, reply, payload: AmPayload { header_len, bytes, rndv } }
    }

    /// Moves what the delivery holds into a descriptor, leaving it empty; lent bytes are copied
    /// (into `shared`'s pool when large), as the loan ends with the handler call. `worker`:
    /// `None` while the descriptor stays inside the handler call (see [`AmDesc::worker`]).
    fn take_desc(&mut self, shared: &WorkerShared, worker: Option<Arc<WorkerShared>>) -> AmDesc {
        let mut payload = self.payload.take();
        if let AmBytes::Lent { .. } = payload.bytes {
            payload.bytes = AmBytes::copy_from_pool(&shared.pool, payload.bytes.as_slice());
        }
        AmDesc { worker, ep: self.ep, payload }
    }
}

/// The data of an active message, owned: eager bytes, or the right to fetch rendezvous bytes
/// (`void *data` with `UCP_AM_RECV_ATTR_FLAG_DATA` / `_RNDV`). Dropping it is
/// `ucp_am_data_release`; an unfetched rendezvous is then declined so the sender completes.
pub struct AmDesc {
    /// Set once the descriptor leaves its handler call ([`AmMessage::keep`]) or needs the worker
    /// to be released (a pooled buffer, an unfetched rendezvous); while the handler runs, the
    /// message lends it, so a message that is only read costs no reference count traffic.
    worker: Option<Arc<WorkerShared>>,
    ep: EndpointId,
    payload: AmPayload,
}

impl AmDesc {
    /// The user header the sender passed.
    pub fn header(&self) -> &[u8] {
        self.payload.header()
    }

    /// The eager data; `None` for a rendezvous message (fetch it with `am_recv_data`).
    pub fn data(&self) -> Option<&[u8]> {
        self.payload.data()
    }

    /// Length of the data, whichever way it travels.
    pub fn data_len(&self) -> usize {
        self.payload.data_len()
    }

    /// True for a rendezvous message (`UCP_AM_RECV_ATTR_FLAG_RNDV`).
    pub fn is_rndv(&self) -> bool {
        self.payload.is_rndv()
    }

    /// Readies the descriptor for a receive of its data through `shared`, which releases it when
    /// it was taken inside its handler (lent, without a worker). Eager data stays in it, to be
    /// copied; for a rendezvous, the endpoint and the engine's id of the waiting data are taken
    /// out (the descriptor no longer declines it when dropped).
    pub(crate) fn take_rndv(&mut self, shared: &Arc<WorkerShared>) -> Option<(EndpointId, OpId)> {
        if self.worker.is_none() && self.payload.needs_worker() {
            self.worker = Some(Arc::clone(shared));
        }
        self.payload.rndv.take().map(|(op, _)| (self.ep, op))
    }
}

impl Drop for AmDesc {
    fn drop(&mut self) {
        let Some(worker) = self.worker.take() else {
            debug_assert!(!self.payload.needs_worker(), "an AM descriptor that needs its worker has none");
            return;
        };
        if let Some((op, _)) = self.payload.rndv.take() {
            // Declined: the sender is told no bytes are wanted, so its request completes.
            let mut core = worker.lock();
            let _ = core.st.engine.am_decline(op);
            core.drain();
        }
        if let AmBytes::Pooled(bytes) = &mut self.payload.bytes {
            State::recycle(&worker.pool, std::mem::take(bytes));
        }
    }
}

impl std::fmt::Debug for AmDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmDesc")
            .field("header_len", &self.payload.header_len)
            .field("data_len", &self.data_len())
            .finish()
    }
}

/// What an AM handler receives (`ucp_am_recv_param_t` plus header and data), for the length of
/// the handler call.
///
/// It borrows the worker's record of the message, so a handler that only reads the message (the
/// usual one) costs no copy and no reference count; `keep` and `recv_data` move the data out.
pub struct AmMessage<'a> {
    delivery: &'a mut AmDelivery,
    /// The data went to an [`AmDesc`] (`keep`, `recv_data`): the delivery is empty.
    taken: bool,
    reply_ep: Option<Endpoint>,
    worker: &'a Arc<WorkerShared>,
}

impl Drop for AmMessage<'_> {
    fn drop(&mut self) {
        // Whatever the handler left (or a panic did) is released through the worker: a pooled
        // buffer recycled, a rendezvous declined.
        if !self.taken && self.delivery.payload.needs_worker() {
            drop(self.delivery.take_desc(self.worker, Some(Arc::clone(self.worker))));
        }
    }
}

impl AmMessage<'_> {
    /// The AM id the handler was registered for.
    pub fn id(&self) -> u16 {
        self.delivery.am_id
    }

    /// The message's payload while the handler has not taken it.
    fn payload(&self) -> Option<&AmPayload> {
        (!self.taken).then_some(&self.delivery.payload)
    }

    /// The user header; empty after `keep`.
    pub fn header(&self) -> &[u8] {
        self.payload().map_or(&[], AmPayload::header)
    }

    /// The eager data (`None` for rendezvous, or after `keep`).
    pub fn data(&self) -> Option<&[u8]> {
        self.payload().and_then(AmPayload::data)
    }

    /// Length of the data, eager or rendezvous (0 after `keep`).
    pub fn data_len(&self) -> usize {
        self.payload().map_or(0, AmPayload::data_len)
    }

    /// True for a rendezvous message (`UCP_AM_RECV_ATTR_FLAG_RNDV`).
    pub fn is_rndv(&self) -> bool {
        self.payload().is_some_and(AmPayload::is_rndv)
    }

    /// The endpoint to reply on, when the sender asked for one (`UCP_AM_SEND_FLAG_REPLY`).
    pub fn reply_ep(&self) -> Option<&Endpoint> {
        self.reply_ep.as_ref()
    }

    /// Takes the message's data out of the handler (return `INPROGRESS`): the data stays valid
    /// until the returned descriptor drops. `None` when already kept.
    pub fn keep(&mut self) -> Option<AmDesc> {
        if std::mem::replace(&mut self.taken, true) {
            return None;
        }
        Some(self.delivery.take_desc(self.worker, Some(Arc::clone(self.worker))))
    }

    /// Takes the message's data out for a receive started inside the handler (see the endpoint
    /// module's `recv_data`): lent, the descriptor gets the worker only if it outlives the call.
    /// `None` when already taken.
    pub(crate) fn take_for_recv(&mut self) -> Option<(&Arc<WorkerShared>, AmDesc)> {
        if std::mem::replace(&mut self.taken, true) {
            return None;
        }
        Some((self.worker, self.delivery.take_desc(self.worker, None)))
    }
}

impl Worker {
    /// `ucp_worker_set_am_recv_handler`: runs `handler` for every message with `id`; `None`
    /// removes the handler (later messages with `id` are dropped with a warning).
    pub fn set_am_handler(&self, id: u16, handler: Option<AmHandler>) {
        let mut core = self.shared.lock();
        // A changed copy: deliveries running now keep the table they took (see `AmHandlers`).
        let mut table = AmHandlers::clone(&core.st.am_handlers);
        table.set(id, handler.map(Arc::from));
        let old = std::mem::replace(&mut core.st.am_handlers, Arc::new(table));
        if core.st.lent.is_some() {
            // A lent message's handler may be reading the old table now (see `am_lent`).
            core.st.lent_tables.push(old);
        } else {
            // The old table may hold the last reference to a replaced handler, which may own
            // endpoints, whose drop takes the lock.
            core.st.bury(old);
        }
    }
}

/// Runs one message's handler (from progress, without the worker's lock). `handlers`: the table
/// as it was when the message's batch was taken, under the lock the message arrived under, so
/// the handler is the one registered at its arrival. The message is borrowed from the batch, not
/// moved: what the handler does not take is released when its [`AmMessage`] drops.
pub(crate) fn run_am(shared: &Arc<WorkerShared>, handlers: &AmHandlers, delivery: &mut AmDelivery) {
    let handler = handlers.get(delivery.am_id);
    let reply_ep = (delivery.reply && handler.is_some()).then(|| Endpoint::attach(shared, delivery.ep));
    // Dropped without a handler run, the message still releases what it holds (declines a
    // rendezvous) through the worker.
    let mut message = AmMessage { delivery, taken: false, reply_ep, worker: shared };
    let Some(handler) = handler else {
        tracing::warn!(am_id = message.id(), "active message without a handler dropped");
        return;
    };
    let status = handler(&mut message);
    if status == Status::InProgress && !message.taken {
        tracing::warn!(am_id = message.id(), "AM handler returned INPROGRESS without keeping the data");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handler() -> SharedAmHandler {
        Arc::new(|_: &mut AmMessage<'_>| Status::Ok)
    }

    /// Which handler `table` has for `id`, by identity.
    fn found(table: &AmHandlers, id: u16) -> Option<*const ()> {
        table.get(id).map(|h| Arc::as_ptr(h) as *const ())
    }

    fn ptr(h: &SharedAmHandler) -> Option<*const ()> {
        Some(Arc::as_ptr(h) as *const ())
    }

    /// Small ids live in the direct table and large ones in the map; both are found, replaced
    /// and removed, and the direct table shrinks back when its last handlers go.
    #[test]
    fn handlers_of_small_and_large_ids_are_found_replaced_and_removed() {
        let mut table = AmHandlers::default();
        for id in [0u16, 7, 255, 256, 4000, u16::MAX] {
            assert!(table.get(id).is_none());
        }
        let (a, b, c, d, e) = (handler(), handler(), handler(), handler(), handler());
        table.set(7, Some(a.clone()));
        table.set(255, Some(b.clone()));
        table.set(256, Some(c.clone()));
        table.set(u16::MAX, Some(d.clone()));
        assert_eq!(found(&table, 7), ptr(&a));
        assert_eq!(found(&table, 255), ptr(&b));
        assert_eq!(found(&table, 256), ptr(&c));
        assert_eq!(found(&table, u16::MAX), ptr(&d));
        assert_eq!(found(&table, 8), None);
        assert_eq!(found(&table, 300), None);
        table.set(7, Some(e.clone()));
        assert_eq!(found(&table, 7), ptr(&e));
        table.set(255, None);
        assert_eq!(found(&table, 255), None);
        assert_eq!(table.direct.len(), 8, "trailing empty slots are dropped");
        table.set(7, None);
        assert!(table.direct.is_empty());
        table.set(256, None);
        assert_eq!(found(&table, 256), None);
        assert_eq!(found(&table, u16::MAX), ptr(&d));
        // Removing what was never set changes nothing.
        table.set(100, None);
        assert!(table.direct.is_empty());
    }
}
