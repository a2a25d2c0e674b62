//! The interface every transport implements: shm, uring (io_uring TCP), dpdk and verbs.
//!
//! A transport moves opaque *frames* between links. A frame is whatever the protocol layer
//! ([`crate::proto`]) built: a header followed by an optional payload. The transport keeps frame
//! boundaries (a stream transport adds its own length prefix), preserves per-link order when
//! [`Caps::ordered`] says so, and reports everything that happened through [`Transport::poll`].
//! Nothing here knows about tags, requests or remote keys. `docs/transport.md` explains how each
//! of the four transports fits.

use std::fmt;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;

/// One connection of a transport: to a peer worker, for one endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub u32);

/// Largest frame a link a listener accepted may carry before [`Transport::link_established`]:
/// the largest handshake frame the protocol layer sends (an op header and a handshake message).
/// Until its peer has made a valid connection request, a link is anyone's, and nothing it
/// announces may make the transport set memory aside for it.
pub const MAX_HANDSHAKE_FRAME: usize = crate::proto::wire::MAX_HEADER_LEN + zcx_control::MAX_FRAME_LEN;

/// One listening socket of a transport that accepts by sockaddr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListenerId(pub u32);

/// What a transport can do; the protocol layer picks protocols and thresholds from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Short name, as `ZCX_TLS` spells it: `"shm"`, `"uring"`, `"dpdk"`, `"verbs"`.
    pub name: &'static str,
    /// Every frame is delivered, or the link is reported failed.
    pub reliable: bool,
    /// Frames on one link arrive in the order they were sent.
    pub ordered: bool,
    /// Put/get into registered memory without the target's CPU.
    pub rma: bool,
    /// 32/64-bit atomics without the target's CPU.
    pub amo: bool,
    /// Largest frame (header plus payload) one `send` accepts.
    pub max_frame: usize,
    /// Payloads at least this long are sent zero-copy when the caller offers a stable buffer.
    pub zcopy_threshold: usize,
    /// Largest payload one [`Transport::send_placed`] frame carries, received straight into the
    /// receiver's buffer; 0 when the transport cannot place (then `send_placed` is `send`).
    pub max_placed: usize,
    /// One-way latency estimate, nanoseconds.
    pub latency_ns: u64,
    /// Bandwidth estimate, bytes per second.
    pub bandwidth: u64,
}

/// Why a transport operation or a link failed. The api maps each to a `ucs_status_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlError {
    /// Nothing listens at the address (ECONNREFUSED): `UCS_ERR_NOT_CONNECTED`.
    NotConnected,
    /// No route to the address (ENETUNREACH, EHOSTUNREACH): `UCS_ERR_UNREACHABLE`.
    Unreachable,
    /// The peer closed or reset the connection: `UCS_ERR_CONNECTION_RESET`.
    ConnectionReset,
    /// The peer stopped answering: `UCS_ERR_ENDPOINT_TIMEOUT`.
    Timeout,
    /// The address is in use (EADDRINUSE): `UCS_ERR_BUSY`.
    Busy,
    /// Out of queue space or memory for now; retry after the next poll: `UCS_ERR_NO_RESOURCE`.
    NoResource,
    /// A bad argument (unknown link, frame too large, bad address): `UCS_ERR_INVALID_PARAM`.
    InvalidParam,
    /// The transport cannot do this (listen on a transport without sockaddr): `UCS_ERR_UNSUPPORTED`.
    Unsupported,
    /// The operation was cancelled by a local close: `UCS_ERR_CANCELED`.
    Canceled,
    /// Any other OS error, by errno: `UCS_ERR_IO_ERROR`.
    Os(i32),
}

impl fmt::Display for TlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlError::Os(errno) => write!(f, "{}", std::io::Error::from_raw_os_error(*errno)),
            other => write!(f, "{other:?}"),
        }
    }
}

impl std::error::Error for TlError {}

impl TlError {
    /// The error for an errno returned by a socket call.
    pub fn from_errno(errno: i32) -> TlError {
        match errno {
            libc::ECONNREFUSED => TlError::NotConnected,
            libc::ENETUNREACH | libc::EHOSTUNREACH | libc::EADDRNOTAVAIL => TlError::Unreachable,
            libc::ECONNRESET | libc::EPIPE | libc::ECONNABORTED | libc::ENOTCONN => TlError::ConnectionReset,
            libc::ETIMEDOUT => TlError::Timeout,
            libc::EADDRINUSE => TlError::Busy,
            libc::ENOMEM | libc::ENOBUFS | libc::EAGAIN => TlError::NoResource,
            libc::EINVAL => TlError::InvalidParam,
            libc::ECANCELED => TlError::Canceled,
            other => TlError::Os(other),
        }
    }
}

/// A payload the transport may send without copying.
///
/// The memory must stay valid and unchanged until the transport reports
/// [`TlEvent::SendDone`] with this token: the api guarantees it by keeping the owning buffer
/// inside the request until then.
#[derive(Debug)]
pub struct ZcopyPayload {
    ptr: *const u8,
    len: usize,
    token: u64,
}

// SAFETY: the pointer is only read, and `new`'s contract makes the bytes live and immutable
// until the send completes, whichever thread progresses the transport.
unsafe impl Send for ZcopyPayload {}

impl ZcopyPayload {
    /// A zero-copy payload of `len` bytes at `ptr`, completed by `SendDone { token }`.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be readable and must not be written or freed until the transport
    /// reports `SendDone` for `token` (or the link fails, which reports it too).
    pub unsafe fn new(ptr: *const u8, len: usize, token: u64) -> ZcopyPayload {
        ZcopyPayload { ptr, len, token }
    }

    /// The payload start.
    pub fn ptr(&self) -> *const u8 {
        self.ptr
    }

    /// The payload length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty payload.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The token `SendDone` will carry.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The payload bytes.
    ///
    /// # Safety
    /// Only while the contract of [`ZcopyPayload::new`] holds (until `SendDone`).
    pub unsafe fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the caller upholds `new`'s contract: the range is live and unchanged.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// Where the receiver wants the payload of a placed frame written, and the token that
/// [`TlEvent::PlaceDone`] gives back when the transport no longer touches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlaceTarget {
    ptr: *mut u8,
    token: u64,
}

// SAFETY: the pointer is only written through under `PlaceTarget::new`'s contract, which holds
// whichever thread progresses the transport.
unsafe impl Send for PlaceTarget {}

impl PlaceTarget {
    /// Payload bytes go to `ptr` onwards; `PlaceDone { token }` follows.
    ///
    /// # Safety
    /// `ptr..ptr + len` (the `len` of the [`TlEvent::Placed`] answered) must be writable and must
    /// not be read, written or freed by anyone else until the transport reports `PlaceDone` for
    /// `token` (it does so once, also when the link fails).
    pub unsafe fn new(ptr: *mut u8, token: u64) -> PlaceTarget {
        PlaceTarget { ptr, token }
    }

    /// The start of the destination.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The token `PlaceDone` carries.
    pub fn token(&self) -> u64 {
        self.token
    }
}

/// The answer slot of a [`TlEvent::Placed`]: left empty, the payload is read and dropped.
#[derive(Debug, Default)]
pub struct Placement(Option<PlaceTarget>);

impl Placement {
    /// Asks for the payload at `target`.
    pub fn set(&mut self, target: PlaceTarget) {
        self.0 = Some(target);
    }

    /// The answer, emptying the slot.
    pub fn take(&mut self) -> Option<PlaceTarget> {
        self.0.take()
    }
}

/// The payload part of a frame.
#[derive(Debug)]
pub enum Payload<'a> {
    /// Header only.
    None,
    /// Copied before `send` returns; the caller may reuse it at once.
    Copy(&'a [u8]),
    /// Sent from the caller's memory; see [`ZcopyPayload`].
    Zcopy(ZcopyPayload),
}

impl Payload<'_> {
    /// Payload length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Payload::None => 0,
            Payload::Copy(bytes) => bytes.len(),
            Payload::Zcopy(z) => z.len(),
        }
    }

    /// True when there is no payload byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What `send` did with the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOutcome {
    /// The frame is queued or sent and every byte the caller passed was copied (always the case
    /// for `Payload::None` and `Payload::Copy`). No `SendDone` follows.
    Done,
    /// A zero-copy payload is in flight; `SendDone { token }` follows exactly once.
    InFlight,
}

/// Where to connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectTarget<'a> {
    /// A socket address (`UCP_EP_PARAM_FIELD_SOCK_ADDR`), optionally binding the local side
    /// first (`UCP_EP_PARAM_FIELD_LOCAL_SOCK_ADDR`; port 0 lets the kernel choose).
    Sockaddr {
        /// The peer.
        remote: SocketAddr,
        /// The local address to bind before connecting.
        local: Option<SocketAddr>,
    },
    /// A transport address taken from a peer's worker address.
    Address(&'a zcx_control::TransportAddress),
    /// A transport address plus the session id the peer's end of the link will have, agreed
    /// out of band (in the sockaddr handshake): how a datagram transport without an in-band
    /// id negotiation (dpdk) is dialled. Transports that need no session id refuse it.
    Session {
        /// The peer's address on the transport.
        address: &'a zcx_control::TransportAddress,
        /// The id of the peer's end of the link.
        session: u32,
    },
}

/// Something that happened on a transport, reported by [`Transport::poll`].
#[derive(Debug)]
pub enum TlEvent<'a> {
    /// An outgoing connection is established; frames sent before this were queued and now flow.
    Connected {
        /// The link `connect` returned.
        link: LinkId,
    },
    /// A listener accepted a connection, which is now a link of its own.
    Accepted {
        /// The listener.
        listener: ListenerId,
        /// The new link.
        link: LinkId,
        /// The peer's address.
        peer: SocketAddr,
    },
    /// One whole frame arrived. The bytes are lent for this call only.
    ///
    /// They may lie in memory the peer can still write (a shared-memory ring): their length is
    /// the transport's, read once and checked, but their content can change while it is read.
    /// So a reader copies every value that decides what it does (an op code, a length, an id,
    /// an offset) out of them once, and checks and uses only that copy
    /// ([`crate::proto::peer_bytes`]); the rest it may only copy to where it belongs.
    Frame {
        /// The link it arrived on.
        link: LinkId,
        /// Header and payload exactly as the peer passed them to `send`.
        bytes: &'a [u8],
    },
    /// A zero-copy payload is no longer used by the transport.
    SendDone {
        /// The link it was sent on.
        link: LinkId,
        /// The token of its [`ZcopyPayload`].
        token: u64,
        /// `Ok` when sent; the link's error when it failed first.
        result: Result<(), TlError>,
    },
    /// The header of a frame sent with [`Transport::send_placed`] arrived; its `len` payload bytes
    /// follow. Answer through `dest` to have them written straight into a buffer of yours, with
    /// no copy through the transport's own buffers; leave it empty to drop them.
    Placed {
        /// The link it arrived on.
        link: LinkId,
        /// The header exactly as the peer passed it to `send_placed`, lent for this call only.
        header: &'a [u8],
        /// Payload bytes that follow.
        len: usize,
        /// Where they go.
        dest: &'a mut Placement,
    },
    /// The payload of a placed frame is all in its destination (`Ok`), or the link failed first
    /// (`Err`, some bytes missing). Either way the transport no longer touches the memory.
    PlaceDone {
        /// The link.
        link: LinkId,
        /// The token of the [`PlaceTarget`].
        token: u64,
        /// `Ok` when every byte arrived.
        result: Result<(), TlError>,
    },
    /// The link is dead (connect failed, peer closed or reset, timeout). Reported once; its
    /// in-flight zero-copy sends are reported as `SendDone` with the error before this.
    LinkFailed {
        /// The link.
        link: LinkId,
        /// Why.
        error: TlError,
    },
}

/// The interface of one transport instance, owned and progressed by one worker.
pub trait Transport: Send {
    /// What this transport can do.
    fn caps(&self) -> &Caps;

    /// What this transport can do on `link`; a set of transports answers for the member that
    /// carries the link.
    fn link_caps(&self, _link: LinkId) -> &Caps {
        self.caps()
    }

    /// The address peers use to reach this instance, for the worker address; `None` when it
    /// cannot be reached by address (only by sockaddr).
    fn address(&self) -> Option<zcx_control::TransportAddress>;

    /// Listens on `addr` (port 0 picks one) and returns the listener and its bound address.
    fn listen(&mut self, addr: SocketAddr) -> Result<(ListenerId, SocketAddr), TlError>;

    /// Stops listening; connections it accepted live on.
    fn close_listener(&mut self, listener: ListenerId);

    /// Starts connecting; `Connected` or `LinkFailed` follows from `poll`. Frames may be sent
    /// at once and are queued until the connection is up.
    fn connect(&mut self, target: ConnectTarget<'_>) -> Result<LinkId, TlError>;

    /// The local and remote socket addresses of a link, when it has them.
    fn link_addrs(&self, link: LinkId) -> (Option<SocketAddr>, Option<SocketAddr>);

    /// Sends `header` followed by `payload` as one frame. The frame (header plus payload) must not
    /// exceed [`Caps::max_frame`]. Frames are sent in call order.
    fn send(&mut self, link: LinkId, header: &[u8], payload: Payload<'_>) -> Result<SendOutcome, TlError>;

    /// Sends `header` and `payload` as one frame whose payload the receiver may place straight
    /// into its own buffer ([`TlEvent::Placed`]), in order with the frames of `send`. The payload
    /// may be up to [`Caps::max_placed`] bytes. A transport that cannot place sends an ordinary
    /// frame, so the receiver must accept both forms.
    fn send_placed(
        &mut self,
        link: LinkId,
        header: &[u8],
        payload: Payload<'_>,
    ) -> Result<SendOutcome, TlError> {
        self.send(link, header, payload)
    }

    /// The peer of `link`, a link a listener accepted, made a valid connection request and was
    /// accepted: from now on its frames may be as large as [`Caps::max_frame`] allows. Until
    /// then a transport that sizes its receive buffers from what a peer announces refuses (fails
    /// the link on) any frame over [`MAX_HANDSHAKE_FRAME`]. Links this side connected are
    /// established from the start. Harmless for an unknown or established link. Default:
    /// nothing to do (the transport never sizes a buffer from an announcement).
    fn link_established(&mut self, _link: LinkId) {}

    /// Closes a link. Queued frames are sent first unless `force`; with `force`, in-flight
    /// zero-copy sends report `SendDone` with `Canceled`. No `LinkFailed` follows a local close.
    fn close(&mut self, link: LinkId, force: bool);

    /// True while the link still has queued or in-flight outgoing bytes.
    fn has_pending_sends(&self, link: LinkId) -> bool;

    /// Does all the work that is ready without blocking and reports it to `sink`; returns the
    /// number of events reported.
    fn poll(&mut self, sink: &mut dyn FnMut(TlEvent<'_>)) -> usize;

    /// [`Transport::poll`], offering frames through `lend` so that the sink may keep one past
    /// its event (see [`crate::lend`]). Default: lends nothing.
    fn poll_lending(&mut self, sink: &mut dyn FnMut(TlEvent<'_>), lend: &crate::LendSlot) -> usize {
        let _ = lend;
        self.poll(sink)
    }

    /// Hands the frame waiting on link `rung` to `take`, without the general poll: for a worker
    /// whose doorbell for that link rang while the transport was quiet (see
    /// [`crate::doorbell`]), so a message on its own costs a read of its ring and its handling.
    /// The frame is offered through `lend` as [`Transport::poll_lending`] offers it; untaken, it
    /// is gone from its link (and its space given back) when `take` returns. True when a frame
    /// was handed over. False when none waits, when the link is gone or needs more than a read
    /// (a loan, a placement, a queue, a failure or close to report), or when the transport has
    /// events of its own: the caller then polls as usual. Only the frame at the head of the link
    /// is handed over, so order holds. Default: never hands one over.
    fn take_rung_frame(
        &mut self,
        rung: LinkId,
        take: &mut dyn FnMut(LinkId, &[u8]),
        lend: &crate::LendSlot,
    ) -> bool {
        let _ = (rung, take, lend);
        false
    }

    /// Ends the loan of the frame taken on `link` (see [`crate::lend`]): its bytes may be reused
    /// and the link is read again. Harmless for a link with no loan, or one that has since
    /// closed or failed (its mapping is let go now).
    fn end_lend(&mut self, _link: LinkId) {}

    /// A descriptor that becomes readable when `poll` has something to do, for the worker's
    /// `arm`/`wait`. Level or edge: the worker re-checks with `poll` after every wakeup.
    fn event_fd(&self) -> Option<BorrowedFd<'_>>;

    /// True when `poll` would report something now (completions waiting). Used by `arm`.
    fn has_events(&self) -> bool;

    /// The worker is about to sleep on the event fds (`arm`): whatever the transport watches by
    /// polling alone must be handed back to the kernel so that its events wake the worker.
    /// Default: nothing to do.
    fn prepare_sleep(&mut self) {}

    /// True when nothing but what [`Transport::doorbells`] shows can give `poll` work: no frame
    /// queued or in flight, no link opening or closing. A busy-polling worker may then skip
    /// polling it while no doorbell rings (and still polls it every few calls). Default: never.
    fn is_quiet(&self) -> bool {
        false
    }

    /// The doorbells of this transport's links (see [`crate::doorbell`]), for a quiet transport.
    fn doorbells(&self, _out: &mut Vec<crate::doorbell::Doorbell>) {}

    /// Changes whenever the set of doorbells does (links added or removed).
    fn doorbell_generation(&self) -> u64 {
        0
    }

    /// The link's sending end for an endpoint to write eager frames through without the worker
    /// (see [`crate::shm::ShmSendLane`]), opened on the endpoint's side. `None` when the
    /// transport has no such lane (only shared memory has one) or the link is not live.
    fn open_send_lane(&mut self, _link: LinkId) -> Option<std::sync::Arc<crate::shm::ShmSendLane>> {
        None
    }

    /// The put-help words of the direction the peer sends on over `link`, with the peer's
    /// process id (see [`crate::shm::put_help`]): what a target needs to help with the peer's
    /// large put. `None` when the transport has none (only shared memory has them).
    fn peer_help_words(&self, _link: LinkId) -> Option<(crate::shm::put_help::HelpWords, u32)> {
        None
    }
}
