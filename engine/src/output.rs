//! What the engine asks of its caller: transmits, RMA requests and events, drained by
//! [`crate::Engine::poll_transmit`], [`crate::Engine::poll_rma`] and [`crate::Engine::poll_event`].

use std::sync::Arc;

use zcx_dataplane::proto::wire::{AtomicOp, Op, MAX_HEADER_LEN};
use zcx_dataplane::LinkId;

use crate::ids::{EndpointId, OpId};
use crate::Status;

/// An encoded frame header.
#[derive(Clone, Copy)]
pub struct Header {
    bytes: [u8; MAX_HEADER_LEN],
    len: u8,
}

impl Header {
    pub(crate) fn of(op: &Op) -> Header {
        let mut bytes = [0u8; MAX_HEADER_LEN];
        let len = op.encode(&mut bytes) as u8;
        Header { bytes, len }
    }

    /// The header of an eager tag message, without the general encoder.
    #[inline]
    pub(crate) fn tag_eager(tag: u64, sync: bool, sender_req: u64) -> Header {
        Header::encoded(&Op::tag_eager_header(tag, sync, sender_req))
    }

    /// The header of an eager active message, without the general encoder.
    #[inline]
    pub(crate) fn am_eager(am_id: u16, reply: bool, header_len: u16) -> Header {
        Header::encoded(&Op::am_eager_header(am_id, reply, header_len))
    }

    /// A header of the bytes an op's own fast encoder wrote.
    #[inline(always)]
    fn encoded(head: &[u8]) -> Header {
        let mut bytes = [0u8; MAX_HEADER_LEN];
        bytes[..head.len()].copy_from_slice(head);
        Header { bytes, len: head.len() as u8 }
    }

    /// The header's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The header decoded again (for logs and tests).
    pub fn op(&self) -> Option<Op> {
        Op::decode(self.as_bytes()).ok().map(|(op, _)| op)
    }
}

impl std::fmt::Debug for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.op() {
            Some(op) => write!(f, "{op:?}"),
            None => write!(f, "{:02x?}", self.as_bytes()),
        }
    }
}

/// What follows a transmit's header in the frame.
#[derive(Debug)]
pub enum Payload {
    /// Nothing.
    None,
    /// Bytes the engine copied (replies, AM headers, get answers); hand the vector back with
    /// [`crate::Engine::reuse`] when done.
    Owned(Vec<u8>),
    /// `len` bytes at `ptr`: an eager message in the caller's buffer, which the command that
    /// queued this transmit reported done ([`crate::Start::Done`]).
    ///
    /// Contract: the caller drains and sends (or copies) it before the command returns to its
    /// user, who may then reuse the buffer; no answer is due. (A transmit the engine holds, on
    /// an endpoint still connecting, it copies itself.)
    Inline {
        /// The first byte.
        ptr: *const u8,
        /// The number of bytes.
        len: usize,
    },
    /// `len` bytes at `ptr`: part of operation `op`'s buffer, sent without a copy.
    ///
    /// Contract: the bytes stay valid until the caller reports this payload done with
    /// [`crate::Engine::send_done`] for `op`, exactly once per such payload (right after the
    /// transport copied it, or when a zero-copy send returns the buffer, or with an error when
    /// the transmit was never sent). The operation does not complete before that.
    Borrowed {
        /// The operation whose buffer this is.
        op: OpId,
        /// The first byte.
        ptr: *const u8,
        /// The number of bytes.
        len: usize,
    },
}

// SAFETY: `Borrowed` points into an operation's buffer, which its contract keeps valid until
// `send_done`; the pointer carries no thread affinity.
unsafe impl Send for Payload {}

impl Payload {
    /// The payload's bytes.
    ///
    /// # Safety
    /// For [`Payload::Borrowed`]: only before the payload was reported with `send_done`; for
    /// [`Payload::Inline`]: only before the command that queued it returned to its user.
    pub unsafe fn bytes(&self) -> &[u8] {
        match self {
            Payload::None => &[],
            Payload::Owned(bytes) => bytes,
            Payload::Borrowed { len: 0, .. } | Payload::Inline { len: 0, .. } => &[],
            // SAFETY: the variants' contracts: valid until `send_done`, which has not happened,
            // or until the command returns to its user, which it has not.
            Payload::Borrowed { ptr, len, .. } | Payload::Inline { ptr, len } => unsafe {
                std::slice::from_raw_parts(*ptr, *len)
            },
        }
    }
}

/// One frame to send on a link.
#[derive(Debug)]
pub struct Transmit {
    /// The link to send it on.
    pub link: LinkId,
    /// The frame header.
    pub header: Header,
    /// The payload after the header.
    pub payload: Payload,
    /// A data fragment the receiving transport may place straight into the receive buffer
    /// (`send_placed`); only set on links whose caps say `placed`.
    pub placed: bool,
}

/// What a native one-sided operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmaKind {
    /// Write `len` bytes from `local` to the remote address.
    Put,
    /// Read `len` bytes at the remote address into `local`.
    Get,
    /// An atomic on the remote word; `local` is unused and the old value comes back in
    /// [`crate::Engine::rma_done`].
    Atomic {
        /// What to do.
        op: AtomicOp,
        /// 4 or 8 bytes.
        size: u8,
        /// The operand.
        value: u64,
        /// The compare value of a compare-and-swap.
        compare: u64,
    },
}

/// A native RMA operation for a link whose transport executes it (`rma(link, op, local, remote,
/// token)`); answered with [`crate::Engine::rma_done`]`(token, ..)` exactly once, also when the
/// link failed.
#[derive(Debug)]
pub struct RmaRequest {
    /// The link to the memory's owner.
    pub link: LinkId,
    /// Answer with this token.
    pub token: OpId,
    /// What to do.
    pub kind: RmaKind,
    /// Local memory: the source of a put, the destination of a get. Valid until `rma_done`.
    pub local: *mut u8,
    /// Bytes to move (the atomic's size for atomics).
    pub len: usize,
    /// Remote address.
    pub remote_addr: u64,
    /// The packed remote key of the remote memory, as the API (or the peer's pull request) gave it.
    pub remote_key: Arc<[u8]>,
}

// SAFETY: `local` is an operation's buffer, valid until `rma_done`; no thread affinity.
unsafe impl Send for RmaRequest {}

/// What a completed operation reports besides its status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpInfo {
    /// Bytes received (receives, gets) or sent (sends).
    pub length: usize,
    /// The tag the sender gave a tag message.
    pub sender_tag: u64,
    /// The old value of a fetching atomic.
    pub value: u64,
}

/// An operation finished; it is gone from the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The operation.
    pub op: OpId,
    /// How it ended.
    pub status: Status,
    /// Lengths, tag, fetched value.
    pub info: OpInfo,
    /// The API's name for the operation, from the buffer it was started with.
    pub cookie: Option<crate::Cookie>,
}

/// An eager active message read in place ([`crate::Engine::handle_frame_lending`]): header and
/// data are the frame's bytes, lent for as long as the frame is.
#[derive(Debug)]
pub struct LentAm<'a> {
    /// The endpoint it came from (the reply endpoint when `reply`).
    pub ep: EndpointId,
    /// The handler id.
    pub am_id: u16,
    /// The sender asked for a reply endpoint.
    pub reply: bool,
    /// The AM header.
    pub header: &'a [u8],
    /// The data.
    pub data: &'a [u8],
}

/// An active message for its handler.
#[derive(Debug)]
pub struct AmDelivery {
    /// The endpoint it came from (the reply endpoint when `reply`).
    pub ep: EndpointId,
    /// The handler id.
    pub am_id: u16,
    /// The sender asked for a reply endpoint.
    pub reply: bool,
    /// Length of the AM header at the start of `bytes`.
    pub header_len: usize,
    /// The AM header, then (eager) the data.
    pub bytes: Vec<u8>,
    /// Rendezvous: the data is still at the sender; take it with
    /// [`crate::Engine::am_recv_data`] under this id, or decline it with
    /// [`crate::Engine::am_decline`]. The `u64` is its length.
    pub rndv: Option<(OpId, u64)>,
}

impl AmDelivery {
    /// The AM header.
    pub fn header(&self) -> &[u8] {
        &self.bytes[..self.header_len]
    }

    /// The eager data; empty for a rendezvous.
    pub fn data(&self) -> &[u8] {
        &self.bytes[self.header_len..]
    }
}

/// Everything else the caller acts on.
#[derive(Debug)]
pub enum Event {
    /// An operation finished.
    Completion(Completion),
    /// An endpoint stopped carrying traffic (failed, closed or refused): later operations fail
    /// with `status`. Comes for every endpoint once, before any [`Event::EndpointError`].
    EndpointDown {
        /// The endpoint.
        ep: EndpointId,
        /// What its operations fail with.
        status: Status,
    },
    /// An endpoint failed (error handling mode peer): run its error handler.
    EndpointError {
        /// The endpoint.
        ep: EndpointId,
        /// Why.
        status: Status,
    },
    /// An active message arrived (boxed: the common events stay small to queue).
    Am(Box<AmDelivery>),
    /// A handshake frame (`Hello`) arrived; the API's connection logic owns its payload.
    Handshake {
        /// Where it came from.
        link: LinkId,
        /// The handshake message.
        payload: Vec<u8>,
    },
    /// Close this link (the endpoint on it is gone, or the peer broke the protocol).
    CloseLink {
        /// The link.
        link: LinkId,
        /// Drop it at once rather than after pending sends.
        force: bool,
    },
    /// A frame of a transport extension the engine does not run (shared memory's `PutHelp` and `GetHelp`).
    Extension(Box<Extension>),
}

/// A frame of a transport extension the engine does not run ([`Event::Extension`]).
#[derive(Debug)]
pub struct Extension {
    /// The endpoint it came on.
    pub ep: EndpointId,
    /// Its link.
    pub link: LinkId,
    /// The decoded header.
    pub op: Op,
    /// The payload.
    pub payload: Vec<u8>,
}

/// Where a placed fragment's payload goes ([`crate::Engine::handle_placed`]).
#[derive(Clone, Copy, Debug)]
pub struct Placement {
    /// First byte of the destination, inside the receiving operation's buffer.
    pub dest: *mut u8,
    /// Answer with [`crate::Engine::place_done`]`(token, ..)` once the payload is written.
    pub token: OpId,
}

/// The engine's queue of events, with room for one completion its caller takes straight from
/// the call that made it ([`crate::Engine::handle_frame_direct`]), skipping the queue: the usual
/// message completes one receive, and queuing that one completion would be most of its cost.
#[derive(Debug, Default)]
pub(crate) struct Events {
    queue: std::collections::VecDeque<Event>,
    /// The completion taken straight by the caller, when it was the first thing reported.
    direct: Option<Completion>,
    /// A `*_direct` call is running: its first completion may go to `direct`.
    open: bool,
}

impl Events {
    #[inline]
    pub(crate) fn push_back(&mut self, event: Event) {
        self.queue.push_back(event);
    }

    /// Reports a completion: straight to the running call's caller when nothing came before it
    /// in this call or earlier, else queued behind what did.
    #[inline]
    pub(crate) fn complete(&mut self, completion: Completion) {
        if self.open && self.direct.is_none() && self.queue.is_empty() {
            self.direct = Some(completion);
        } else {
            self.queue.push_back(Event::Completion(completion));
        }
    }

    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<Event> {
        self.queue.pop_front()
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    /// Starts a call whose first completion its caller may take straight.
    #[inline]
    pub(crate) fn open_direct(&mut self) {
        self.open = true;
    }

    /// Ends it: the completion its caller takes, if one went straight.
    #[inline]
    pub(crate) fn close_direct(&mut self) -> Option<Completion> {
        self.open = false;
        self.direct.take()
    }
}
