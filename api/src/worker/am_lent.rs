//! Active messages whose handlers read them in place, in the transport's receive ring.
//!
//! A handler runs after the worker's lock is released (it may send, which takes the lock), so a
//! message it reads must outlive the poll it arrived in. Rather than copy it out, the worker
//! borrows the frame from a transport that can lend it (see [`zcx_dataplane::lend`]; shared
//! memory does): the poll stops reading that link, the handler runs on the bytes where they
//! are, and the worker's next poll (or `arm`) ends the loan, once the handler has returned.
//!
//! One loan at a time per worker: while one is out, frames are copied as before. A message is
//! only borrowed when nothing from the same poll waits to run before it, so handlers and
//! callbacks still run in arrival order. A handler that keeps the message (`AmMessage::keep`)
//! gets a copy, as the loan ends with its call.
//!
//! The loan also borrows the handler table of its arrival, without a reference count: a table
//! replaced while a loan is out is kept by the worker until the loan ends (`State::lent_tables`).
//! That spares each lent message two locked read-modify-writes (taking and dropping a reference),
//! which stall a message's path more than their instruction count says.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use zcx_dataplane::{LendSlot, LinkId};
use zcx_engine::EndpointId;

use crate::worker::am::{run_am, AmBytes, AmDelivery, AmHandlers};
use crate::worker::state::State;
use crate::worker::WorkerShared;

/// An eager active message lent by its transport: where its bytes are, and what its handler
/// needs to know.
#[derive(Clone, Copy)]
pub(crate) struct LentAm {
    /// The link the transport lent it on, for `end_lend`.
    pub link: LinkId,
    ep: EndpointId,
    am_id: u16,
    reply: bool,
    header_len: usize,
    bytes: NonNull<u8>,
    len: usize,
    /// The worker's handler table when the message arrived, kept alive by the worker until the
    /// loan ends (see the module docs).
    handlers: NonNull<AmHandlers>,
}

// SAFETY: the pointer is to plain bytes any thread may read; the loan (not the thread) decides
// how long they stay valid, and `deliver`'s contract ties reading them to the loan.
unsafe impl Send for LentAm {}

impl LentAm {
    /// The message whose `header` and `data` (contiguous, header first: the frame's payload)
    /// the transport has just lent on `link`, to be handled by `st`'s current handler table.
    pub fn new(
        st: &State,
        link: LinkId,
        ep: EndpointId,
        am_id: u16,
        reply: bool,
        header: &[u8],
        data: &[u8],
    ) -> LentAm {
        debug_assert_eq!(header.as_ptr().wrapping_add(header.len()), data.as_ptr());
        LentAm {
            handlers: NonNull::from(&*st.am_handlers),
            link,
            ep,
            am_id,
            reply,
            header_len: header.len(),
            bytes: NonNull::from(header).cast(),
            len: header.len() + data.len(),
        }
    }

    /// Runs the message's handler on the lent bytes, then clears `in_use` (also when the
    /// handler panics), which lets the worker end the loan.
    ///
    /// # Safety
    /// The loan must be out, and stay out until this returns: `in_use` is set ([`LoanGate::take`]),
    /// and the worker ends a loan only while it is clear ([`LoanGate::take_back`]).
    pub unsafe fn deliver(self, shared: &Arc<WorkerShared>, in_use: &LoanGate) {
        let _returned = in_use.returned();
        let bytes = AmBytes::Lent { ptr: self.bytes, len: self.len };
        let mut delivery = AmDelivery::eager(self.ep, self.am_id, self.reply, self.header_len, bytes);
        // SAFETY: the table was the worker's when the loan began, and a table the worker
        // replaces while its loan is out stays in `State::lent_tables` until the loan ends,
        // which the caller's contract puts after this call.
        let handlers = unsafe { self.handlers.as_ref() };
        run_am(shared, handlers, &mut delivery);
    }
}

/// Whether the handler of the worker's lent message may still be reading it: the one flag the
/// two sides of a loan share. Set with the worker's lock held when a poll's loan is taken
/// ([`LoanGate::take`]), cleared without the lock when the handler returns
/// ([`LentAm::deliver`]), and looked at under the lock before the loan may end
/// ([`LoanGate::take_back`]). Kept apart from the worker, which needs the OS, so that the
/// protocol can be tested on its own, under Miri (see `tests`).
pub(crate) struct LoanGate(AtomicBool);

/// [`LoanGate::take_back`]: the handler may still be reading the lent message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct LoanInUse;

impl LoanGate {
    pub(crate) const fn new() -> LoanGate {
        LoanGate(AtomicBool::new(false))
    }

    /// The message `lent` this poll's `slot` took, marked in use: until its handler returns, no
    /// call may end the loan. Call with the worker's lock held (`lent` lives under it).
    #[inline(always)]
    pub(crate) fn take<T: Copy>(&self, slot: &LendSlot, lent: &Option<T>) -> Option<T> {
        if !slot.is_taken() {
            return None;
        }
        // Relaxed: the set and every look at the flag happen under the worker's lock, which
        // orders them; only the handler's clear comes without it, and that one is Release.
        self.0.store(true, Ordering::Relaxed);
        *lent
    }

    /// The loan out in `lent`, taken back for the caller to end (give its bytes back to the
    /// transport), or `Ok(None)` when there is none; `Err` while its handler may still be
    /// reading it, and `lent` then keeps it. Call with the worker's lock held.
    #[inline(always)]
    pub(crate) fn take_back<T>(&self, lent: &mut Option<T>) -> Result<Option<T>, LoanInUse> {
        // Acquire: pairs with the handler's Release, so its reads are done before the transport
        // may reuse the bytes.
        if self.0.load(Ordering::Acquire) {
            return Err(LoanInUse);
        }
        Ok(lent.take())
    }

    /// Held by the handler's call: clears the flag when the call is over, however it ends.
    fn returned(&self) -> LoanReturned<'_> {
        LoanReturned(&self.0)
    }
}

/// Clears the loan's in-use flag when the handler call is over, however it ends.
struct LoanReturned<'a>(&'a AtomicBool);

impl Drop for LoanReturned<'_> {
    fn drop(&mut self) {
        // Release: the handler's reads of the lent bytes happen before the worker, which loads
        // this with Acquire, gives the bytes back to the transport.
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    //! The loan protocol without a worker: a `Mutex` stands in for the worker's lock, a buffer
    //! for the transport's ring record, and a plain struct for [`LentAm`]; the gate and the lend
    //! slot are the real ones. No OS resources, so these run under Miri (`scripts/sanitizers.sh`),
    //! whose race detector sees a transport reusing bytes a handler still reads.

    use super::*;
    use std::cell::UnsafeCell;
    use std::sync::Mutex;

    /// Rounds of the race: a few under Miri (slow, but it varies the interleaving itself), more
    /// natively.
    const ROUNDS: usize = if cfg!(miri) { 40 } else { 2000 };
    const RECORD: usize = 64;

    /// The transport's receive record: written by the transport when the link is read, read in
    /// place by a handler while lent. Shared by raw pointer, as the ring is; the loan protocol
    /// under test is what keeps the two apart.
    struct Record(UnsafeCell<[u8; RECORD]>);

    // SAFETY: accessed only as the loan protocol allows (see the type); the tests check it does.
    unsafe impl Sync for Record {}

    /// What `LentAm` holds of its message: where the lent bytes are.
    #[derive(Clone, Copy)]
    struct Lent {
        bytes: *const u8,
        seq: u8,
    }

    // SAFETY: as `LentAm`: plain bytes, valid while the loan is out.
    unsafe impl Send for Lent {}

    /// What the worker keeps under its lock: the loan (`State::lent`) and the transport's state.
    #[derive(Default)]
    struct Worker {
        lent: Option<Lent>,
        /// The link is lent: the transport reads nothing further on it until `end_lend`.
        link_lent: bool,
        /// Frames written into the record so far.
        written: u8,
        /// Loans the transport got back.
        ended: usize,
    }

    /// `end_loan`: gives the loan back to the transport, unless its handler may still read it.
    /// True when no loan is out any more.
    fn end_loan(gate: &LoanGate, w: &mut Worker) -> bool {
        let Ok(lent) = gate.take_back(&mut w.lent) else { return false };
        if let Some(lent) = lent {
            assert!(w.link_lent, "a loan given back twice");
            assert_eq!(lent.seq, w.written);
            w.link_lent = false;
            w.ended += 1;
        }
        true
    }

    /// One progress call: ends an earlier loan if it may, reads a frame into the record if the
    /// link is not lent, offers it through the lend slot and lends it; then, after the lock,
    /// runs the handler on the lent bytes. True when a handler ran.
    fn progress(lock: &Mutex<Worker>, gate: &LoanGate, record: &Record) -> bool {
        let slot = LendSlot::new();
        let lent = {
            let mut guard = lock.lock().unwrap();
            let w = &mut *guard;
            if (w.lent.is_none() || end_loan(gate, w)) && !w.link_lent {
                w.written = w.written.wrapping_add(1);
                // The transport reads the next frame into its record: its bytes may be reused
                // only when no handler reads them (the loan ended, above).
                // SAFETY: the link is not lent, so no handler reads the record.
                unsafe { *record.0.get() = [w.written; RECORD] };
                if slot.offer() {
                    // The sink keeps the frame past its event (as `on_frame` does).
                    assert!(slot.take());
                    w.lent = Some(Lent { bytes: record.0.get().cast(), seq: w.written });
                }
                w.link_lent = slot.settle();
                assert!(w.link_lent);
            }
            gate.take(&slot, &w.lent)
        };
        let Some(lent) = lent else { return false };
        // The handler, after the lock, as `LentAm::deliver` runs it.
        let _returned = gate.returned();
        // SAFETY: the loan is out and `gate` says so until `_returned` drops, so the transport
        // does not write the record meanwhile.
        let bytes = unsafe { std::slice::from_raw_parts(lent.bytes, RECORD) };
        assert!(bytes.iter().all(|&b| b == lent.seq), "lent bytes changed under the handler");
        true
    }

    /// A loan is given back only after its handler returned, and only once; without a loan
    /// there is nothing to give back.
    #[test]
    fn a_loan_ends_once_and_only_after_its_handler_returned() {
        let gate = LoanGate::new();
        let mut lent = None;
        assert_eq!(gate.take_back(&mut lent), Ok(None::<u8>));
        let slot = LendSlot::new();
        lent = Some(7u8);
        assert_eq!(gate.take(&slot, &lent), None, "nothing was taken in this poll");
        assert!(slot.offer() && slot.take() && slot.settle());
        assert_eq!(gate.take(&slot, &lent), Some(7));
        {
            let _returned = gate.returned();
            assert_eq!(gate.take_back(&mut lent), Err(LoanInUse));
            assert_eq!(lent, Some(7), "kept while in use");
        }
        assert_eq!(gate.take_back(&mut lent), Ok(Some(7)));
        assert_eq!(gate.take_back(&mut lent), Ok(None), "given back twice");
    }

    /// A handler that panics still returns the loan.
    #[test]
    fn a_panicking_handler_returns_the_loan() {
        let gate = LoanGate::new();
        let slot = LendSlot::new();
        let mut lent = Some(1u8);
        assert!(slot.offer() && slot.take());
        assert_eq!(gate.take(&slot, &lent), Some(1));
        let handler = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _returned = gate.returned();
            panic!("the handler fails");
        }));
        assert!(handler.is_err());
        assert_eq!(gate.take_back(&mut lent), Ok(Some(1)));
    }

    /// Two threads calling progress on one worker, as an application with a progress thread
    /// does: each loan's handler runs on one of them after the lock, while the other may try to
    /// end the loan and read the next frame into the same record. Every loan is given back once,
    /// never while its handler reads (the handler would see other bytes, and Miri a data race).
    #[test]
    fn a_loan_is_never_ended_under_a_running_handler() {
        let lock = Mutex::new(Worker::default());
        let gate = LoanGate::new();
        let record = Record(UnsafeCell::new([0; RECORD]));
        let handled: Vec<usize> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..2)
                .map(|_| scope.spawn(|| (0..ROUNDS).filter(|_| progress(&lock, &gate, &record)).count()))
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let mut w = lock.into_inner().unwrap();
        assert!(end_loan(&gate, &mut w), "the last loan's handler returned");
        let handled: usize = handled.iter().sum();
        assert!(handled > 0);
        assert_eq!(w.ended, handled, "every loan given back exactly once");
        assert_eq!(usize::from(w.written), handled % 256);
    }
}
