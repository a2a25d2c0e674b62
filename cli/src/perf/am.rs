//! The receiving side of the active-message tests: a handler that records each message's
//! arrival, fetching rendezvous data into registered slots first.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use zcx::{AmMessage, MemHandle, MemSlice, Request, Status, Worker};

use crate::perf::session::{detailed, Session};

/// Counts the messages of one AM id as they arrive. Dropping it removes the handler.
pub struct AmSink {
    worker: Worker,
    id: u16,
    shared: Arc<Shared>,
    _slots: MemHandle,
}

/// What the handler and the polling loop share.
struct Shared {
    arrived: AtomicU64,
    /// Number of entries in `pending` (read without the lock on every poll).
    in_flight: AtomicUsize,
    /// Rendezvous receives under way, each into a slot.
    pending: Mutex<Vec<Request<MemSlice>>>,
    /// Free slots.
    pool: Mutex<Vec<MemSlice>>,
    error: Mutex<Option<String>>,
}

impl Shared {
    /// Counts the finished rendezvous receives and returns their slots to the pool.
    fn reclaim(&self) {
        let mut pending = lock(&self.pending);
        let mut i = 0;
        while i < pending.len() {
            if !pending[i].is_done() {
                i += 1;
                continue;
            }
            match pending.swap_remove(i).try_take() {
                Ok(Ok(done)) => {
                    lock(&self.pool).push(done.buf);
                    self.arrived.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Err(status)) => {
                    *lock(&self.error) = Some(format!("an AM's data failed: {}", detailed(status)))
                }
                Err(_) => unreachable!("a done request is taken at once"),
            }
        }
        self.in_flight.store(pending.len(), Ordering::Relaxed);
    }

    fn on_message(&self, msg: &mut AmMessage) {
        if !msg.is_rndv() {
            self.arrived.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut slot = lock(&self.pool).pop();
        if slot.is_none() {
            self.reclaim();
            slot = lock(&self.pool).pop();
        }
        let Some(slot) = slot else {
            *lock(&self.error) = Some("more rendezvous messages in flight than receive slots".into());
            return;
        };
        match msg.recv_data(slot) {
            Ok(request) => {
                let mut pending = lock(&self.pending);
                pending.push(request);
                self.in_flight.store(pending.len(), Ordering::Relaxed);
            }
            Err(status) => *lock(&self.error) = Some(format!("am_recv_data failed: {}", detailed(status))),
        }
    }
}

impl AmSink {
    /// Installs the handler of `id`, able to receive `window` rendezvous messages of `size` bytes
    /// at a time.
    pub fn install(session: &Session, id: u16, window: usize, size: usize) -> Result<AmSink, String> {
        // Twice the window: a slot returns to the pool only when its receive is reclaimed.
        let slots = 2 * window.max(1);
        let region = session.remote_region(slots * size.max(1))?;
        let mut free = Vec::with_capacity(slots);
        for slot in 0..slots {
            free.push(region.slice(slot * size, size).map_err(|s| format!("cannot slice a slot: {s}"))?);
        }
        let shared = Arc::new(Shared {
            arrived: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            pending: Mutex::new(Vec::with_capacity(slots)),
            pool: Mutex::new(free),
            error: Mutex::new(None),
        });
        let handler_state = shared.clone();
        session.worker.set_am_handler(
            id,
            Some(Box::new(move |msg: &mut AmMessage| {
                handler_state.on_message(msg);
                Status::Ok
            })),
        );
        Ok(AmSink { worker: session.worker.clone(), id, shared, _slots: region })
    }

    /// Messages arrived whole so far.
    pub fn arrived(&self) -> Result<u64, String> {
        if self.shared.in_flight.load(Ordering::Relaxed) > 0 {
            self.shared.reclaim();
            if let Some(error) = lock(&self.shared.error).take() {
                return Err(error);
            }
        }
        Ok(self.shared.arrived.load(Ordering::Relaxed))
    }

    /// Progresses until `count` messages arrived in all.
    pub fn wait_for(&self, session: &Session, count: u64) -> Result<(), String> {
        let mut result = Ok(());
        session.poll_until("active messages", || match self.arrived() {
            Ok(n) => n >= count,
            Err(e) => {
                result = Err(e);
                true
            }
        })?;
        if result.is_ok() {
            if let Some(error) = lock(&self.shared.error).take() {
                return Err(error);
            }
        }
        result
    }
}

impl Drop for AmSink {
    fn drop(&mut self) {
        self.worker.set_am_handler(self.id, None);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
