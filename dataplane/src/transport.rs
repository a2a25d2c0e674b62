//! The core interface every transport implements: shm, uring (io_uring TCP) and dpdk (verbs is
//! planned).
//!
//! A transport moves opaque *frames* between links. A frame is whatever the protocol layer
//! ([`crate::proto`]) built: a header followed by an optional payload. The transport keeps frame
//! boundaries (a stream transport adds its own length prefix), preserves per-link order when
//! [`Caps::ordered`] says so, and reports everything that happened through [`Transport::poll`].
//! Placed frames ([`Transport::send_placed`]) let the receiver name where a payload lands.
//!
//! [`Caps`] say what a transport does, per link through [`Transport::link_caps`]: frame and
//! placement sizes, the one-sided operations it does natively ([`RmaCaps`]) and how large
//! payloads move ([`LargePayload`]). Those operations are [`Transport::rma`]: complete inside the
//! call ([`RmaOutcome::Done`], shm) or later with [`TlEvent::RmaDone`] (verbs); a transport
//! without them refuses with [`TlError::Unsupported`] and the protocol layer emulates them.
//!
//! What only same-host shared memory can do (lending frames in place, rung frames, doorbells,
//! endpoint send lanes, put help) is the optional extension [`SameHostFastPath`], reached through
//! [`Transport::same_host_fast_path`]: this module names no type of any particular transport.
//! Nothing here knows about tags or requests; a remote key is only bytes the transport's memory
//! domain gave it. `docs/transport.md` explains how each transport fits.

use std::fmt;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;

pub use crate::rma::{AtomicOps, LocalMem, RemoteMem, RmaCaps, RmaOp, RmaOutcome};
use crate::same_host::SameHostFastPath;

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
    /// The one-sided operations done natively, without the target's CPU
    /// ([`Transport::rma`]); what is not here the protocol layer emulates with messages.
    pub rma: RmaCaps,
    /// How a payload too large for one frame reaches its receiver.
    pub large_payload: LargePayload,
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

/// How a payload too large for one frame (a rendezvous) moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LargePayload {
    /// The sender pushes it in frames (placed into the receiver's buffer where the transport can
    /// place): every transport without native get.
    SenderPush,
    /// The receiver pulls it from the sender's registered memory with a native get: a transport
    /// whose get costs the sender nothing (RDMA READ).
    ReceiverPull,
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
    /// A one-sided operation [`Transport::rma`] left pending is complete, or failed.
    RmaDone {
        /// The link it was issued on.
        link: LinkId,
        /// The token passed to `rma`.
        token: u64,
        /// The old value of a fetching atomic (0 for anything else), or why it failed.
        result: Result<u64, TlError>,
    },
    /// The link is dead (connect failed, peer closed or reset, timeout). Reported once; its
    /// in-flight zero-copy sends are reported as `SendDone` with the error before this, and its
    /// pending one-sided operations as `RmaDone` with the error.
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

    /// Opens this side of a link whose two ends are joined out of band: a verbs queue pair, to
    /// be connected once a handshake on another transport brought the peer's end. Returns the
    /// link, which carries nothing until [`Transport::join_link`], and the address the peer joins
    /// its own end with. Default: `Unsupported` (the transport connects by itself).
    fn open_link(&mut self) -> Result<(LinkId, zcx_control::TransportAddress), TlError> {
        Err(TlError::Unsupported)
    }

    /// Joins `link`, from [`Transport::open_link`], to the peer's end at `peer` (the address the
    /// peer's `open_link` returned); frames and one-sided operations may go at once. On an error
    /// the link is closed. Default: `Unsupported`.
    fn join_link(&mut self, link: LinkId, peer: &zcx_control::TransportAddress) -> Result<(), TlError> {
        let _ = (link, peer);
        Err(TlError::Unsupported)
    }

    /// What the transport counted so far, by name (work requests posted, RDMA operations, ...),
    /// for benchmarks and tests that must tell how an operation ran. Default: nothing counted.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

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

    /// Does the one-sided operation `op` natively, without the target's CPU: a put from `local`
    /// to `remote`, a get from `remote` into `local`, or an atomic on `remote` (see
    /// [`crate::rma`]). [`Caps::rma`] says which operations, sizes and lengths a transport does;
    /// anything else is refused.
    ///
    /// The caller passes only a remote key the region's owner vouched for (`Op::KeyCheck`): a
    /// direct access to a same-host peer's memory must never follow a key the peer did not
    /// confirm. The caller also checks the key's protection (a put or an atomic needs remote
    /// write, a get or a fetching atomic remote read): the transport is not given it. The transport itself refuses, before touching a byte, any range outside the
    /// region or outside the memory its `remote.key` lets it reach.
    ///
    /// Returns [`RmaOutcome::Done`] when complete inside the call (shm), or
    /// [`RmaOutcome::Pending`] when [`TlEvent::RmaDone`] with `token` follows (verbs). Default:
    /// `Unsupported`, for a transport without native one-sided operations.
    fn rma(
        &mut self,
        link: LinkId,
        op: RmaOp,
        local: LocalMem,
        remote: RemoteMem<'_>,
        token: u64,
    ) -> Result<RmaOutcome, TlError> {
        let _ = (link, op, local, remote, token);
        Err(TlError::Unsupported)
    }

    /// Does all the work that is ready without blocking and reports it to `sink`; returns the
    /// number of events reported.
    fn poll(&mut self, sink: &mut dyn FnMut(TlEvent<'_>)) -> usize;

    /// A descriptor that becomes readable when `poll` has something to do, for the worker's
    /// `arm`/`wait`. Level or edge: the worker re-checks with `poll` after every wakeup.
    fn event_fd(&self) -> Option<BorrowedFd<'_>>;

    /// True when `poll` would report something now (completions waiting). Used by `arm`.
    fn has_events(&self) -> bool;

    /// The worker is about to sleep on the event fds (`arm`): whatever the transport watches by
    /// polling alone must be handed back to the kernel so that its events wake the worker.
    /// Default: nothing to do.
    fn prepare_sleep(&mut self) {}

    /// Whether everything sent on `link` so far has left this transport for a place where it
    /// reaches the peer even if this process exits now: the kernel's socket buffer, the peer's
    /// ring, memory the peer has already read. A transport that holds sends of its own (a queue
    /// the kernel or ring had no room for, a payload the peer has yet to read out of this
    /// process) says no until it no longer does; one whose sends are delivered only as long as
    /// this process resends them (a datagram session) always says no. The engine then completes
    /// a flush on its own records (`ucp_ep_flush_nbx` over a socket or shared memory in UCX)
    /// instead of asking the peer. Default: no.
    fn link_delivered(&self, link: LinkId) -> bool {
        let _ = link;
        false
    }

    /// True when `poll` can find nothing new until one of the transport's doorbells rings (see
    /// [`crate::doorbell`]): no frame queued or in flight, no link opening or closing, and every
    /// link one whose incoming data rings a doorbell ([`SameHostFastPath::doorbells`]); a
    /// transport without doorbells is quiet only with no link at all. A busy-polling worker may
    /// then skip polling it while no doorbell rings (and still polls it every few calls).
    /// Default: never.
    fn is_quiet(&self) -> bool {
        false
    }

    /// True when nothing can reach the transport but a listener's new connection: no link at
    /// all, none opening, and nothing submitted, completed or deferred. A
    /// [`crate::TransportSet`] then polls it only every few full polls, until a call gives it
    /// work again. Default: never.
    fn is_dormant(&self) -> bool {
        false
    }

    /// The same-host shared-memory fast paths of this transport (see [`crate::same_host`]);
    /// `None` for a transport without them (every transport but shm, and a set without shm).
    /// Resolve it once, not per message: a [`crate::TransportSet`] keeps such a member as a
    /// `dyn SameHostFastPath` and calls it directly.
    fn same_host_fast_path(&mut self) -> Option<&mut dyn SameHostFastPath> {
        None
    }
}

#[cfg(test)]
mod tests {
    /// The core interface names no type of a particular transport: what only shared memory
    /// offers is reached through [`crate::same_host`].
    #[test]
    fn the_core_interface_names_no_transport_type() {
        // The module's code, up to these tests (whose list is the one place the names appear).
        let source = include_str!("transport.rs").split("#[cfg(test)]").next().expect("some code");
        let code = source.lines().filter(|line| !line.trim_start().starts_with("//"));
        let names =
            ["shm::", "uring::", "dpdk::", "verbs::", "Shm", "Uring", "Dpdk", "HelpWords", "Doorbell"];
        for line in code {
            for name in names {
                assert!(!line.contains(name), "transport.rs names {name}: {line}");
            }
        }
    }
}
