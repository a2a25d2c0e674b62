//! The engine's names for endpoints and operations.
//!
//! Both are handed out by the engine, never reused while it lives, and never zero: zero is what
//! the wire says for "no request" (an unsynchronised eager send, a declined rendezvous), so no
//! id the engine issues can be confused with it. Links are the transports' [`LinkId`]s.
//!
//! [`LinkId`]: zcx_dataplane::LinkId

use std::fmt;
use std::num::NonZeroUsize;

/// One endpoint of the engine: a connection to one peer worker over one link at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointId(u64);

impl EndpointId {
    /// The number as the tag matcher and logs carry it.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// The id whose [`EndpointId::raw`] is `raw` (an id that went through a `u64` and back).
    pub fn from_raw(raw: u64) -> EndpointId {
        EndpointId(raw)
    }
}

/// One operation of the engine: a send, a receive, an RMA, a flush, a close, or an incoming
/// active message's rendezvous data waiting for the API to take or decline it.
///
/// Ids grow with time, so comparing two ids compares the order the operations started in: a
/// flush waits for the operations with smaller ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(u64);

impl OpId {
    /// The number the wire carries (`sender_req`, `recv_req`, `req`).
    pub fn raw(self) -> u64 {
        self.0
    }

    /// The id whose [`OpId::raw`] is `raw` (a transport token, or an id that went through a
    /// `u64` and back).
    pub fn from_raw(raw: u64) -> OpId {
        OpId(raw)
    }
}

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op#{}", self.0)
    }
}

impl fmt::Display for EndpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ep#{}", self.0)
    }
}

/// The API's own name for an operation, given with the operation's buffer
/// ([`crate::SendBuffer::with_cookie`], [`crate::RecvBuffer::with_cookie`]) and handed back in its
/// [`crate::Completion`]: something that leads straight to the API's record of the request (the
/// zcx worker uses a slot index), so that a completion finds it without a lookup by [`OpId`].
/// The engine stores it and never reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cookie(NonZeroUsize);

impl Cookie {
    /// A cookie of `value`.
    pub fn new(value: NonZeroUsize) -> Cookie {
        Cookie(value)
    }

    /// The value it was made of.
    pub fn get(self) -> NonZeroUsize {
        self.0
    }
}

/// Hands out increasing, non-zero ids.
#[derive(Debug)]
pub(crate) struct IdSource(u64);

impl IdSource {
    pub(crate) fn new() -> IdSource {
        IdSource(0)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }
}
