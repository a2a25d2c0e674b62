//! Lending a received frame past its event: zero-copy delivery to code that must run after the
//! transport's poll returns.
//!
//! A frame's bytes are normally lent for the length of its [`crate::TlEvent::Frame`] call. The
//! worker runs an active message's handler only after it has released its lock (a handler may
//! send, and sending takes that lock), so without a longer loan it has to copy the message out
//! first. A transport that keeps received bytes in place (shared memory: the record stays in the
//! ring until the consumer releases it) can offer a longer loan instead:
//!
//! 1. The caller passes a [`LendSlot`] to [`crate::SameHostFastPath::poll_lending`].
//! 2. Before reporting a frame it could lend, the transport offers it ([`LendSlot::offer`]).
//! 3. A sink that wants to keep the bytes takes the offer ([`LendSlot::take`]).
//! 4. The transport then keeps that frame's bytes where they are, mapped and not reused, and reads
//!    nothing further on its link, until the caller calls [`crate::SameHostFastPath::end_lend`] with the
//!    link. Everything else on the transport (other links, sends on this one) goes on.
//!
//! One slot lends at most one frame per poll; the worker has at most one loan out at a time.
//!
//! A lent frame is the peer's memory for all that time: the peer can still write it. Its length
//! stays what the transport checked, but its bytes are read under the rule of
//! [`crate::TlEvent::Frame`]: control values copied once, the rest only copied out.

use std::cell::Cell;

/// The offer and answer of one [`crate::SameHostFastPath::poll_lending`] call (see the module docs).
#[derive(Debug, Default)]
pub struct LendSlot {
    /// The frame being reported may be taken.
    offered: Cell<bool>,
    /// A frame was taken in this poll.
    taken: Cell<bool>,
    /// The frame being reported was taken (cleared by `settle`).
    just_taken: Cell<bool>,
}

impl LendSlot {
    /// An empty slot, for one poll.
    pub fn new() -> LendSlot {
        LendSlot::default()
    }

    /// Sink side: takes the frame being reported, whose bytes then stay valid until
    /// [`crate::SameHostFastPath::end_lend`] for its link. False when the transport did not offer it
    /// (it cannot lend it, or a frame was already taken in this poll): the bytes are lent for
    /// the event only, as usual.
    #[inline]
    pub fn take(&self) -> bool {
        if self.offered.replace(false) {
            self.taken.set(true);
            self.just_taken.set(true);
            true
        } else {
            false
        }
    }

    /// Transport side: offers the frame about to be reported, unless one was taken already.
    /// True when offered; answer with [`LendSlot::settle`] once the sink returned.
    #[inline]
    pub fn offer(&self) -> bool {
        let open = !self.taken.get();
        self.offered.set(open);
        open
    }

    /// Transport side, after reporting an offered frame: true when the sink took it.
    #[inline]
    pub fn settle(&self) -> bool {
        // An offer the sink left stands no longer: the next frame gets its own.
        self.offered.set(false);
        self.just_taken.replace(false)
    }

    /// Whether a frame was taken in this poll.
    #[inline]
    pub fn is_taken(&self) -> bool {
        self.taken.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_offered_frame_can_be_taken_and_only_once_per_poll() {
        let slot = LendSlot::new();
        assert!(!slot.take(), "nothing offered yet");
        assert!(slot.offer());
        assert!(!slot.settle(), "offered but left");
        assert!(!slot.take(), "the left offer was withdrawn");
        assert!(slot.offer());
        assert!(slot.take());
        assert!(slot.settle());
        assert!(slot.is_taken());
        assert!(!slot.offer(), "one frame per poll");
        assert!(!slot.take());
        assert!(!slot.settle());
    }
}
