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

use zcx_dataplane::LinkId;

use crate::worker::am::{run_am, AmBytes, AmDelivery, AmHandlers};
use crate::worker::state::State;
use crate::worker::WorkerShared;

/// An eager active message lent by its transport: where its bytes are, and what its handler
/// needs to know.
#[derive(Clone, Copy)]
pub(crate) struct LentAm {
    /// The link the transport lent it on, for `end_lend`.
    pub link: LinkId,
    ep: u64,
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
    /// The message in `payload` (header then data, `header_len <= payload.len()`), which the
    /// transport has just lent on `link`, to be handled by `st`'s current handler table.
    pub fn new(
        st: &State,
        link: LinkId,
        ep: u64,
        am_id: u16,
        reply: bool,
        header_len: u16,
        payload: &[u8],
    ) -> LentAm {
        LentAm {
            handlers: NonNull::from(&*st.am_handlers),
            link,
            ep,
            am_id,
            reply,
            header_len: usize::from(header_len),
            bytes: NonNull::from(payload).cast(),
            len: payload.len(),
        }
    }

    /// Runs the message's handler on the lent bytes, then clears `in_use` (also when the
    /// handler panics), which lets the worker end the loan.
    ///
    /// # Safety
    /// The loan must be out, and stay out until this returns: `in_use` is set, and the worker
    /// ends a loan only while it is clear.
    pub unsafe fn deliver(self, shared: &Arc<WorkerShared>, in_use: &AtomicBool) {
        let _returned = LoanReturned(in_use);
        let bytes = AmBytes::Lent { ptr: self.bytes, len: self.len };
        let mut delivery = AmDelivery::eager(self.ep, self.am_id, self.reply, self.header_len, bytes);
        // SAFETY: the table was the worker's when the loan began, and a table the worker
        // replaces while its loan is out stays in `State::lent_tables` until the loan ends,
        // which the caller's contract puts after this call.
        let handlers = unsafe { self.handlers.as_ref() };
        run_am(shared, handlers, &mut delivery);
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
