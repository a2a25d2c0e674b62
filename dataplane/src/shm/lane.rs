//! A shared-memory link's sending end, usable without the worker.
//!
//! The producer of a link's ring lives here, behind a small spin lock of its own, so that an
//! endpoint can write an eager frame straight into the ring (`ucp_am_send_nbx`,
//! `ucp_tag_send_nbx`, `ucp_stream_send_nbx` on a connected same-host endpoint) without the
//! worker's lock, its endpoint table or the transport set. The transport takes the same lock for
//! every write of its own (replies, queued frames, placed payloads), so the ring keeps one
//! producer at a time and records go out in the order their writers got the lock.
//!
//! Direct writes are allowed only while the lane is open: on the link's side (nothing queued
//! behind a full ring, not broken, not closed) and on the endpoint's (ready, not closing or
//! failed). Both flags change under the lock, in the same critical section as the event that
//! changes them, so a direct write can never overtake a queued frame or follow a close. Whenever
//! a direct write is refused, the caller takes the worker's path, which queues, fails or reports
//! as it always did.
//!
//! Lock order: the worker's lock, then a lane's. A direct writer holds only the lane's.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::conn;
use super::put_help::{HelpJob, HelpLane, HelpWords};
use super::ring::{Producer, RingError, KIND_FRAME};
use super::segment::Segment;

/// Spins on a held lock before yielding the CPU: holders keep it for one ring write.
const SPINS_BEFORE_YIELD: u32 = 64;

/// See the module docs. Shared by the link (in the transport) and the endpoints sending on it.
pub struct ShmSendLane {
    locked: AtomicBool,
    state: UnsafeCell<LaneState>,
    /// The initiator's side of put help on this link (see [`super::put_help`]).
    help: HelpLane,
    /// The ring this lane produces into: its help words are the ones our puts use.
    tx_ring: usize,
}

// SAFETY: `state` is only reached through `lock`, which gives one holder at a time (Acquire on
// taking, Release on giving back); everything in it is Send.
unsafe impl Sync for ShmSendLane {}
// SAFETY: as above; the raw pointers inside the producer stay valid while `segment` is held.
unsafe impl Send for ShmSendLane {}

/// What the lock guards.
pub(crate) struct LaneState {
    /// The ring's producer; `None` once the link is gone (the mapping may be unmapped then).
    pub tx: Option<Producer>,
    /// Keeps the producer's ring mapped while a lane outlives its link's other parts.
    segment: Option<Arc<Segment>>,
    /// A duplicate of the link's socket, to wake a sleeping peer after a direct write; made when
    /// the first endpoint takes the lane.
    wake_fd: Option<OwnedFd>,
    /// The link side allows direct writes: nothing queued, not broken, not closed.
    pub link_open: bool,
    /// The endpoint side allows them: ready, not closing, not failed.
    ep_open: bool,
    /// Largest frame (header and payload) the transport accepts.
    max_frame: usize,
    /// A direct write happened since [`ShmSendLane::take_sent`].
    sent: bool,
    /// The endpoint has a stream send still going out in fragments, which a direct stream frame
    /// would overtake.
    streams_held: bool,
}

/// The held lock.
pub(crate) struct LaneGuard<'a> {
    lane: &'a ShmSendLane,
}

impl Deref for LaneGuard<'_> {
    type Target = LaneState;

    fn deref(&self) -> &LaneState {
        // SAFETY: the guard exists only while this thread holds the lock.
        unsafe { &*self.lane.state.get() }
    }
}

impl DerefMut for LaneGuard<'_> {
    fn deref_mut(&mut self) -> &mut LaneState {
        // SAFETY: as for `deref`; `&mut self` makes this the only reference.
        unsafe { &mut *self.lane.state.get() }
    }
}

impl Drop for LaneGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.lane.locked.store(false, Ordering::Release);
    }
}

impl ShmSendLane {
    /// The lane of a new link: open on the link's side, closed on the endpoint's until one
    /// takes it ([`ShmSendLane::open_for_endpoint`]).
    /// `tx_ring` is the ring `tx` produces into.
    pub(crate) fn new(tx: Producer, segment: Arc<Segment>, tx_ring: usize, max_frame: usize) -> ShmSendLane {
        ShmSendLane {
            help: HelpLane::new(),
            tx_ring,
            locked: AtomicBool::new(false),
            state: UnsafeCell::new(LaneState {
                tx: Some(tx),
                segment: Some(segment),
                wake_fd: None,
                link_open: true,
                ep_open: false,
                max_frame,
                sent: false,
                streams_held: false,
            }),
        }
    }

    /// Takes the lock, spinning (then yielding) while another thread writes.
    #[inline]
    pub(crate) fn lock(&self) -> LaneGuard<'_> {
        if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.lock_contended();
        }
        LaneGuard { lane: self }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut spins = 0u32;
        loop {
            while self.locked.load(Ordering::Relaxed) {
                if spins < SPINS_BEFORE_YIELD {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return;
            }
        }
    }

    /// Writes one frame, `head` (the protocol header) then `body`, straight into the ring. False
    /// when the lane is closed on either side, the frame is too large or the ring is full:
    /// nothing was written, and the caller goes the worker's way.
    #[inline]
    pub fn send(&self, head: &[u8], body: &[u8]) -> bool {
        self.send_with(false, head.len() + body.len(), |tx| tx.push2(KIND_FRAME, head, body))
    }

    /// [`ShmSendLane::send`] of a frame in several pieces (an AM's protocol header, its user
    /// header and its data).
    #[inline]
    pub fn send_parts(&self, parts: &[&[u8]]) -> bool {
        let len = parts.iter().map(|p| p.len()).sum();
        self.send_with(false, len, |tx| tx.push(KIND_FRAME, parts))
    }

    /// [`ShmSendLane::send`] of a stream frame: also refused while an earlier stream send of the
    /// endpoint is still going out in fragments ([`ShmSendLane::hold_streams`]).
    #[inline]
    pub fn send_stream(&self, head: &[u8], body: &[u8]) -> bool {
        self.send_with(true, head.len() + body.len(), |tx| tx.push2(KIND_FRAME, head, body))
    }

    #[inline(always)]
    fn send_with(
        &self,
        stream: bool,
        len: usize,
        push: impl FnOnce(&mut Producer) -> Result<bool, RingError>,
    ) -> bool {
        let mut guard = self.lock();
        let state = &mut *guard;
        if !(state.link_open && state.ep_open) || (stream && state.streams_held) || len > state.max_frame {
            return false;
        }
        let Some(tx) = state.tx.as_mut() else { return false };
        // `Err` (the peer corrupted its index) also goes the worker's way, which fails the link.
        if !matches!(push(tx), Ok(true)) {
            return false;
        }
        if tx.take_wake() {
            if let Some(fd) = &state.wake_fd {
                conn::wake(fd.as_raw_fd());
            }
        }
        state.sent = true;
        true
    }

    /// The initiator's side of put help on this link, for diagnostics.
    pub fn help(&self) -> &HelpLane {
        &self.help
    }

    /// Starts a help job of `chunks` chunks on this link (see [`HelpLane::start`]); `None` also
    /// once the link is gone.
    pub fn start_help(&self, chunks: u32) -> Option<HelpJob<'_>> {
        let words = HelpWords::new(Arc::clone(self.lock().segment.as_ref()?), self.tx_ring);
        self.help.start(words, chunks)
    }

    /// False once the peer closed the link's socket (it exited or was killed) or the link is
    /// gone; a cheap non-blocking look, for a wait on the peer that must not outlive it.
    pub fn peer_alive(&self) -> bool {
        let state = self.lock();
        let Some(fd) = state.wake_fd.as_ref() else { return state.tx.is_some() };
        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLRDHUP, revents: 0 };
        // SAFETY: one valid pollfd, no wait.
        let ready = unsafe { libc::poll(&mut pfd, 1, 0) };
        ready == 0 || pfd.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) == 0
    }

    /// Opens the endpoint's side (the endpoint is ready), with `sock` the link's socket to
    /// duplicate for wakeups. False when the duplicate cannot be made or the link is gone: the
    /// endpoint then keeps sending through the worker.
    pub(crate) fn open_for_endpoint(&self, sock: &OwnedFd) -> bool {
        let mut state = self.lock();
        if state.tx.is_none() {
            return false;
        }
        if state.wake_fd.is_none() {
            match sock.try_clone() {
                Ok(fd) => state.wake_fd = Some(fd),
                Err(err) => {
                    tracing::debug!(%err, "shm lane: no socket duplicate; sends stay on the worker");
                    return false;
                }
            }
        }
        state.ep_open = true;
        true
    }

    /// Stream frames wait for the worker (`true`) while a stream send of the endpoint is in
    /// fragments, and may go direct again (`false`) once none is.
    pub fn hold_streams(&self, held: bool) {
        self.lock().streams_held = held;
    }

    /// Closes the endpoint's side for good (the endpoint closes or failed).
    pub fn close_for_endpoint(&self) {
        self.lock().ep_open = false;
    }

    /// True (once) when a direct write happened since the last call: the endpoint sent
    /// something, which its keepalive counts.
    pub fn take_sent(&self) -> bool {
        std::mem::take(&mut self.lock().sent)
    }

    /// The link is gone: closes the lane and lets go of the ring, its mapping and the socket
    /// duplicate, so an endpoint still holding the lane keeps none of them alive.
    pub(crate) fn shut(&self) {
        let mut state = self.lock();
        state.link_open = false;
        state.ep_open = false;
        state.tx = None;
        state.wake_fd = None;
        state.segment = None;
    }
}

impl std::fmt::Debug for ShmSendLane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmSendLane").finish_non_exhaustive()
    }
}
