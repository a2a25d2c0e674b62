//! The receiving side of the active-message tests: a handler that records each message's
//! arrival, fetching rendezvous data into registered slots first, and with `--validate` checks
//! each message's bytes (messages are numbered in the order the handler sees them, which is the
//! order they were sent in).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use zcx::{AmMessage, MemHandle, MemSlice, Request, SendBuf as _, Status, Worker};

use crate::perf::pattern;
use crate::perf::session::{detailed, Session};

/// Counts the messages of one AM id as they arrive. Dropping it removes the handler.
pub struct AmSink {
    worker: Worker,
    id: u16,
    shared: Arc<Shared>,
    _slots: MemHandle,
}

/// What the handler and the polling loop share.
///
/// The handler's counters have one writer, the handler (the worker runs one handler call at a
/// time), so they are bumped with a load and a store, not a locked read-modify-write: this sits
/// on every message's path, and `ucx_perftest`'s handler counts with plain increments too.
struct Shared {
    /// Eager messages the handler took whole.
    arrived_eager: AtomicU64,
    /// Rendezvous messages whose data landed (written by `reclaim`, under `pending`'s lock).
    arrived_rndv: AtomicU64,
    /// Messages the handler saw (their numbers are given in this order).
    seen: AtomicU64,
    /// The expected size of every message.
    size: usize,
    /// The test name when validating.
    validate: Option<&'static str>,
    /// Something failed (cheap to poll; the reason is in `error`).
    failed: AtomicBool,
    /// Number of entries in `pending` (read without the lock on every poll).
    in_flight: AtomicUsize,
    /// Rendezvous receives under way, each into a slot.
    pending: Mutex<Vec<(u64, Request<MemSlice>)>>,
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
            if !pending[i].1.is_done() {
                i += 1;
                continue;
            }
            let (n, request) = pending.swap_remove(i);
            match request.try_take() {
                Ok(Ok(done)) => {
                    self.verify(n, done.buf.as_bytes());
                    lock(&self.pool).push(done.buf);
                    bump(&self.arrived_rndv);
                }
                Ok(Err(status)) => self.fail(format!("an AM's data failed: {}", detailed(status))),
                Err(_) => unreachable!("a done request is taken at once"),
            }
        }
        self.in_flight.store(pending.len(), Ordering::Relaxed);
    }

    /// Records a validation failure of message `n` (the first one wins).
    fn verify(&self, n: u64, bytes: &[u8]) {
        let result = if bytes.len() != self.size {
            Err(format!("message {n} has {} bytes, expected {}", bytes.len(), self.size))
        } else if let Some(test) = self.validate {
            pattern::check(test, bytes, n, 0..0)
        } else {
            Ok(())
        };
        if let Err(e) = result {
            self.fail(e);
        }
    }

    /// Records a failure (the first one wins) and raises the flag the polling loop reads.
    fn fail(&self, error: String) {
        lock(&self.error).get_or_insert(error);
        self.failed.store(true, Ordering::Release);
    }

    fn on_message(&self, msg: &mut AmMessage) {
        let n = bump(&self.seen);
        if !msg.is_rndv() {
            match msg.data() {
                Some(data) => self.verify(n, data),
                None => self.verify(n, &[]),
            }
            bump(&self.arrived_eager);
            return;
        }
        let mut slot = lock(&self.pool).pop();
        if slot.is_none() {
            self.reclaim();
            slot = lock(&self.pool).pop();
        }
        let Some(slot) = slot else {
            self.fail("more rendezvous messages in flight than receive slots".into());
            return;
        };
        match msg.recv_data(slot) {
            Ok(request) => {
                let mut pending = lock(&self.pending);
                pending.push((n, request));
                self.in_flight.store(pending.len(), Ordering::Relaxed);
            }
            Err(status) => self.fail(format!("am_recv_data failed: {}", detailed(status))),
        }
    }
}

impl AmSink {
    /// Installs the handler of `id`, able to receive `window` rendezvous messages of `size` bytes
    /// at a time; `validate` names the test when messages are to be checked.
    pub fn install(
        session: &Session,
        id: u16,
        window: usize,
        size: usize,
        validate: Option<&'static str>,
    ) -> Result<AmSink, String> {
        // Twice the window: a slot returns to the pool only when its receive is reclaimed.
        let slots = 2 * window.max(1);
        // Without validation, as `ucx_perftest`'s handler receives every message's data into its
        // one receive buffer, every slot is the same bytes (a `MemSlice` may overlap others): the
        // measurement is of the transfer, not of a working set larger than the caches, as for
        // tag_bw's receives. Validated messages each need their own.
        let distinct = validate.is_some();
        let region = session.remote_region(if distinct { slots * size.max(1) } else { size.max(1) })?;
        let mut free = Vec::with_capacity(slots);
        for slot in 0..slots {
            let offset = if distinct { slot * size } else { 0 };
            free.push(region.slice(offset, size).map_err(|s| format!("cannot slice a slot: {s}"))?);
        }
        let shared = Arc::new(Shared {
            arrived_eager: AtomicU64::new(0),
            arrived_rndv: AtomicU64::new(0),
            seen: AtomicU64::new(0),
            size,
            validate,
            failed: AtomicBool::new(false),
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
        }
        if self.shared.failed.load(Ordering::Acquire) {
            if let Some(error) = lock(&self.shared.error).take() {
                return Err(error);
            }
        }
        Ok(self.shared.arrived_eager.load(Ordering::Relaxed)
            + self.shared.arrived_rndv.load(Ordering::Relaxed))
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
        // Every failure raises `failed`, so the lock is taken only when there is one.
        if result.is_ok() && self.shared.failed.load(Ordering::Acquire) {
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

/// Adds one to a counter that has a single writer; returns the value before.
fn bump(counter: &AtomicU64) -> u64 {
    let n = counter.load(Ordering::Relaxed);
    counter.store(n + 1, Ordering::Relaxed);
    n
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
