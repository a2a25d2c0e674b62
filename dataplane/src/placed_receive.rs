//! The payload of a placed frame on its way into the receiver's buffer, and the rules every
//! transport keeps about it.
//!
//! A frame sent with [`Transport::send_placed`](crate::Transport::send_placed) arrives as a
//! header, reported as [`TlEvent::Placed`], then `len` payload bytes; the receiver names a
//! destination ([`PlaceTarget`]) or none, and then the payload is dropped. Each transport moves
//! the bytes its own way (the kernel receives into the destination, fragments are copied out of
//! mbufs, the peer's memory is read across processes), and each keeps one [`PlaceTracker`] per
//! link, which holds the rules:
//!
//! - one placed payload at a time per link: one that starts before the last ended is the peer
//!   breaking the protocol ([`PlaceViolation::Nested`]);
//! - nothing is written outside the `len` bytes announced, whatever the peer sends next: a
//!   fragment that does not fit is refused before any of it is written;
//! - a placement with a destination ends exactly once, with a [`PlaceDone`] to report as
//!   [`TlEvent::PlaceDone`]: `Ok` when every byte arrived, `Err` when the link failed or was
//!   closed first; a dropped payload ends without one;
//! - once ended, the destination is forgotten: nothing can write to it any more.
//!
//! Ending consumes the [`PlacedReceive`], which is how the last two are kept: there is no second
//! report to make and no pointer left to write through.

use std::fmt;

use crate::transport::{LinkId, PlaceTarget, TlError, TlEvent};

/// How a peer broke what it announced for a placed payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlaceViolation {
    /// More payload bytes than are left of the announced length.
    TooLong,
    /// The frame ended before the payload was complete.
    EndsEarly,
    /// The payload is complete but the peer says more of the frame follows.
    NoEnd,
    /// A placed frame started while the link's last one was still arriving.
    Nested,
}

impl fmt::Display for PlaceViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PlaceViolation::TooLong => "placed payload longer than announced",
            PlaceViolation::EndsEarly => "placed payload shorter than announced",
            PlaceViolation::NoEnd => "placed payload complete but not ended",
            PlaceViolation::Nested => "a placed frame inside another one",
        })
    }
}

impl std::error::Error for PlaceViolation {}

/// The end of a placement that had a destination: report it as [`TlEvent::PlaceDone`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a placement's end must be reported as TlEvent::PlaceDone"]
pub struct PlaceDone {
    /// The token of the [`PlaceTarget`].
    pub token: u64,
    /// `Ok` when every byte is in the destination.
    pub result: Result<(), TlError>,
}

impl PlaceDone {
    /// The event that reports it on `link`.
    pub fn event<'a>(self, link: LinkId) -> TlEvent<'a> {
        TlEvent::PlaceDone { link, token: self.token, result: self.result }
    }
}

/// The payload of one placed frame being received: where it goes (or nowhere), how long it
/// was announced, how much of it has arrived.
#[derive(Debug)]
pub struct PlacedReceive {
    target: Option<PlaceTarget>,
    len: usize,
    done: usize,
}

impl PlacedReceive {
    /// The destination, unless the payload is being dropped.
    pub fn target(&self) -> Option<PlaceTarget> {
        self.target
    }

    /// The payload's announced length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty payload.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Payload bytes arrived so far.
    pub fn received(&self) -> usize {
        self.done
    }

    /// Payload bytes still to come.
    pub fn remaining(&self) -> usize {
        self.len - self.done
    }

    /// True when every announced byte has arrived.
    pub fn is_complete(&self) -> bool {
        self.done == self.len
    }

    /// Where the next payload bytes go and how many may go there, when they have a destination:
    /// for a transport whose kernel (or a copy across processes) writes them in place, which
    /// then reports what it wrote with [`PlacedReceive::advance`].
    pub fn next_dest(&self) -> Option<(*mut u8, usize)> {
        let target = self.target?;
        // SAFETY: `done <= len`, and the destination spans `len` bytes (`PlaceTracker::start`).
        Some((unsafe { target.ptr().add(self.done) }, self.remaining()))
    }

    /// `n` more payload bytes arrived where [`PlacedReceive::next_dest`] said (or, dropped, were
    /// read and discarded). More than are left is refused and counts nothing.
    pub fn advance(&mut self, n: usize) -> Result<(), PlaceViolation> {
        if n > self.remaining() {
            return Err(PlaceViolation::TooLong);
        }
        self.done += n;
        Ok(())
    }

    /// Takes as many payload bytes from the front of `data` as are still missing (a byte stream
    /// carries what follows the payload right behind it): copied to the destination, or dropped.
    /// Returns how many were taken.
    pub fn absorb(&mut self, data: &[u8]) -> usize {
        let take = self.remaining().min(data.len());
        self.write(&data[..take]);
        take
    }

    /// Takes one fragment of the payload; `last` when the peer says the frame ends with it.
    /// Returns whether the payload is now complete. A fragment that does not fit what was
    /// announced is refused before anything is written.
    pub fn absorb_fragment(&mut self, data: &[u8], last: bool) -> Result<bool, PlaceViolation> {
        let remaining = self.remaining();
        if data.len() > remaining {
            return Err(PlaceViolation::TooLong);
        }
        let complete = data.len() == remaining;
        match (last, complete) {
            (true, false) => return Err(PlaceViolation::EndsEarly),
            (false, true) => return Err(PlaceViolation::NoEnd),
            _ => {}
        }
        self.write(data);
        Ok(complete)
    }

    /// Copies `data` (at most `remaining()` bytes) to the destination at the running offset,
    /// or drops it, and counts it.
    fn write(&mut self, data: &[u8]) {
        debug_assert!(data.len() <= self.remaining());
        if let Some((dest, room)) = self.next_dest().filter(|_| !data.is_empty()) {
            let n = data.len().min(room);
            // SAFETY: `n <= remaining`, so the bytes land inside the destination's `len` bytes,
            // which `PlaceTracker::start`'s contract makes ours to write; `data` is a receive
            // buffer of the transport, never the destination.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dest, n) };
        }
        self.done += data.len().min(self.remaining());
    }

    /// Ends the placement: `Ok` when every byte arrived (else the peer fell short:
    /// `ConnectionReset`). `None` for a dropped payload, which has nothing to report.
    pub fn complete(self) -> Option<PlaceDone> {
        let result = if self.is_complete() { Ok(()) } else { Err(TlError::ConnectionReset) };
        Some(PlaceDone { token: self.target?.token(), result })
    }

    /// Ends the placement with `error`, whatever has arrived. `None` for a dropped payload.
    pub fn fail(self, error: TlError) -> Option<PlaceDone> {
        Some(PlaceDone { token: self.target?.token(), result: Err(error) })
    }
}

/// The placed payload a link is receiving, if any (see the [module documentation](self)).
#[derive(Debug, Default)]
pub struct PlaceTracker {
    current: Option<PlacedReceive>,
}

impl PlaceTracker {
    /// Starts receiving a placed payload of `len` bytes into `target` (`None`: dropped), as the
    /// receiver answered a [`TlEvent::Placed`]; the payload to feed. Refused while another one
    /// is in progress.
    ///
    /// # Safety
    /// With a target, `target.ptr()..target.ptr() + len` must be writable, and not used by
    /// anyone else, until the placement ends ([`PlaceTarget::new`]'s contract for a `Placed`
    /// event announcing `len`).
    pub unsafe fn start(
        &mut self,
        target: Option<PlaceTarget>,
        len: usize,
    ) -> Result<&mut PlacedReceive, PlaceViolation> {
        if self.current.is_some() {
            return Err(PlaceViolation::Nested);
        }
        Ok(self.current.insert(PlacedReceive { target, len, done: 0 }))
    }

    /// True while a placed payload is arriving (with a destination or dropped).
    pub fn is_placing(&self) -> bool {
        self.current.is_some()
    }

    /// The payload arriving, if any.
    pub fn current(&self) -> Option<&PlacedReceive> {
        self.current.as_ref()
    }

    /// [`PlaceTracker::current`], mutably.
    pub fn current_mut(&mut self) -> Option<&mut PlacedReceive> {
        self.current.as_mut()
    }

    /// Takes the payload arriving, complete or not, to end it ([`PlacedReceive::complete`] or
    /// [`PlacedReceive::fail`]).
    pub fn take(&mut self) -> Option<PlacedReceive> {
        self.current.take()
    }

    /// Takes the payload arriving if every byte of it has arrived.
    pub fn take_complete(&mut self) -> Option<PlacedReceive> {
        self.current.take_if(|p| p.is_complete())
    }

    /// Ends the payload arriving, if any, because the link failed or was closed: the
    /// [`PlaceDone`] to report, `None` when there is none in progress or it was being dropped.
    pub fn abort(&mut self, error: TlError) -> Option<PlaceDone> {
        self.current.take()?.fail(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUARD: usize = 16;
    const UNTOUCHED: u8 = 0xEE;

    /// A destination of `len` bytes with guard bytes either side.
    struct Dest {
        buf: Vec<u8>,
        len: usize,
    }

    impl Dest {
        fn new(len: usize) -> Dest {
            Dest { buf: vec![UNTOUCHED; GUARD + len + GUARD], len }
        }

        fn target(&mut self, token: u64) -> PlaceTarget {
            // SAFETY: `len` bytes from `GUARD` on lie inside `buf`, which each test keeps alive
            // and untouched while the tracker may write there.
            unsafe { PlaceTarget::new(self.buf.as_mut_ptr().add(GUARD), token) }
        }

        fn payload(&self) -> &[u8] {
            &self.buf[GUARD..GUARD + self.len]
        }

        fn guards_untouched(&self) -> bool {
            self.buf[..GUARD].iter().chain(&self.buf[GUARD + self.len..]).all(|&b| b == UNTOUCHED)
        }
    }

    fn tracker(target: Option<PlaceTarget>, len: usize) -> PlaceTracker {
        let mut tracker = PlaceTracker::default();
        // SAFETY: every target comes from a `Dest` of `len` bytes that outlives the tracker.
        unsafe { tracker.start(target, len) }.unwrap();
        tracker
    }

    #[test]
    fn a_payload_arriving_in_pieces_completes_once_with_ok() {
        let mut dest = Dest::new(10);
        let mut t = tracker(Some(dest.target(7)), 10);
        let p = t.current_mut().unwrap();
        assert_eq!(p.absorb(b"0123"), 4);
        assert_eq!(p.absorb_fragment(b"45", false), Ok(false));
        let (at, room) = p.next_dest().unwrap();
        assert_eq!(room, 4);
        // SAFETY: `at` points at the 4 bytes left of the destination (as a kernel would write).
        unsafe { std::ptr::copy_nonoverlapping(b"6789".as_ptr(), at, 4) };
        p.advance(4).unwrap();
        assert!(p.is_complete());
        let done = t.take_complete().unwrap().complete();
        assert_eq!(done, Some(PlaceDone { token: 7, result: Ok(()) }));
        assert!(!t.is_placing());
        assert_eq!(t.take_complete().map(|_| ()), None, "ended twice");
        assert_eq!(t.abort(TlError::ConnectionReset), None, "a failure after the end reported again");
        assert_eq!(dest.payload(), b"0123456789");
        assert!(dest.guards_untouched());
    }

    #[test]
    fn an_incomplete_payload_is_not_taken_as_complete() {
        let mut dest = Dest::new(4);
        let mut t = tracker(Some(dest.target(1)), 4);
        assert_eq!(t.current_mut().unwrap().absorb(b"ab"), 2);
        assert!(t.take_complete().is_none());
        assert!(t.is_placing());
        // Ended anyway (a transport's mistake): the report says bytes are missing.
        assert_eq!(
            t.take().unwrap().complete(),
            Some(PlaceDone { token: 1, result: Err(TlError::ConnectionReset) })
        );
    }

    #[test]
    fn a_link_failing_mid_payload_ends_it_once_with_the_error_and_writes_no_more() {
        let mut dest = Dest::new(8);
        let mut t = tracker(Some(dest.target(3)), 8);
        assert_eq!(t.current_mut().unwrap().absorb(b"abc"), 3);
        assert_eq!(t.abort(TlError::Timeout), Some(PlaceDone { token: 3, result: Err(TlError::Timeout) }));
        assert_eq!(t.abort(TlError::Timeout), None, "reported twice");
        assert!(t.current_mut().is_none(), "the destination is still reachable");
        assert_eq!(&dest.payload()[..3], b"abc");
        assert!(dest.payload()[3..].iter().all(|&b| b == UNTOUCHED));
        assert!(dest.guards_untouched());
    }

    #[test]
    fn a_forced_close_mid_payload_ends_it_canceled() {
        let mut dest = Dest::new(100);
        let mut t = tracker(Some(dest.target(9)), 100);
        assert_eq!(t.current_mut().unwrap().absorb_fragment(&[1; 40], false), Ok(false));
        let done = t.abort(TlError::Canceled).expect("a report");
        assert_eq!(done, PlaceDone { token: 9, result: Err(TlError::Canceled) });
        let link = LinkId(5);
        assert!(matches!(
            done.event(link),
            TlEvent::PlaceDone { link: LinkId(5), token: 9, result: Err(TlError::Canceled) }
        ));
        // A new placed frame may start on the link afterwards (a graceful close drains).
        // SAFETY: no target.
        unsafe { t.start(None, 1) }.unwrap();
        assert!(dest.payload()[40..].iter().all(|&b| b == UNTOUCHED));
    }

    #[test]
    fn a_declined_payload_is_read_and_dropped_without_a_report() {
        let mut t = tracker(None, 6);
        let p = t.current_mut().unwrap();
        assert_eq!(p.next_dest(), None);
        assert_eq!(p.absorb(b"abcdefgh"), 6, "takes only the payload's bytes from a stream");
        assert!(p.is_complete());
        assert_eq!(t.take_complete().unwrap().complete(), None);
        assert!(!t.is_placing());

        let mut t = tracker(None, 6);
        assert_eq!(t.current_mut().unwrap().absorb_fragment(b"abc", false), Ok(false));
        assert_eq!(t.abort(TlError::ConnectionReset), None, "a dropped payload is not reported");
    }

    #[test]
    fn hostile_lengths_are_refused_before_anything_is_written() {
        let mut dest = Dest::new(4);
        let mut t = tracker(Some(dest.target(2)), 4);
        let p = t.current_mut().unwrap();
        // More than announced, in one fragment or by a claimed write.
        assert_eq!(p.absorb_fragment(&[1, 2, 3, 4, 5], true), Err(PlaceViolation::TooLong));
        assert_eq!(p.advance(5), Err(PlaceViolation::TooLong));
        // The frame ends before the payload does; the payload is done but the frame goes on.
        assert_eq!(p.absorb_fragment(&[1, 2], true), Err(PlaceViolation::EndsEarly));
        assert_eq!(p.absorb_fragment(&[1, 2, 3, 4], false), Err(PlaceViolation::NoEnd));
        assert_eq!(p.received(), 0);
        assert!(dest.buf.iter().all(|&b| b == UNTOUCHED), "a refused fragment wrote");
        // A stream carries what follows right behind: only the announced bytes are taken.
        assert_eq!(p.absorb_fragment(&[1, 2], false), Ok(false));
        assert_eq!(p.absorb(&[3, 4, 5, 6, 7]), 2);
        assert_eq!(p.absorb(&[8]), 0);
        assert_eq!(p.advance(1), Err(PlaceViolation::TooLong));
        // A second placed frame inside this one.
        // SAFETY: refused, so the target is never used.
        let nested = unsafe { t.start(Some(dest.target(4)), 1) };
        assert!(matches!(nested, Err(PlaceViolation::Nested)));
        assert_eq!(t.take_complete().unwrap().complete(), Some(PlaceDone { token: 2, result: Ok(()) }));
        assert_eq!(dest.payload(), [1, 2, 3, 4]);
        assert!(dest.guards_untouched());
    }

    #[test]
    fn an_empty_payload_is_complete_at_once() {
        let mut dest = Dest::new(0);
        let mut t = tracker(Some(dest.target(6)), 0);
        assert_eq!(t.current_mut().unwrap().absorb_fragment(&[], true), Ok(true));
        assert_eq!(t.take_complete().unwrap().complete(), Some(PlaceDone { token: 6, result: Ok(()) }));
        assert!(dest.guards_untouched());
    }
}
