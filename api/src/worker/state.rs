//! What a worker keeps between progress calls: the protocol engine, and the API's own records
//! beside it (endpoint handles and handlers, request cells, listeners, AM handlers, loans).
//!
//! Everything here lives behind the worker's lock and is touched only by the thread holding it.
//! No user code runs while the lock is held: the callbacks and wakers of completed requests,
//! error handlers, connection handlers, AM handlers and put-help copies are queued as
//! [`Deferred`] and run by `progress` after it releases the lock, so a callback may call any zcx
//! function.
//!
//! The protocols themselves (eager and rendezvous, stream, AM, RMA emulation, flush, fence,
//! close, keepalive) are the engine's ([`zcx_engine::Engine`]): the API turns its calls into
//! engine commands, feeds the engine every transport event but handshakes, and drains the
//! engine's outbox into the transports ([`Core::drain`]). Operations are named by the engine's
//! [`OpId`]s; the request cell of each waits in [`Sinks`] under the operation's cookie, or by id
//! for the few commands that carry no buffer.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use zcx_dataplane::proto::wire::MAX_HEADER_LEN;
use zcx_dataplane::{
    FastMap, LinkId, ListenerId, Payload as TlPayload, SendOutcome, TlError, Transport, TransportSet,
    ZcopyPayload,
};
use zcx_engine::{
    BulkMode, Cookie, EndpointId, Engine, EngineConfig, Event, LinkCaps, OpId, Payload, Phase, Start,
    Transmit,
};

use crate::context::ContextInner;
use crate::request::{Callback, OpInfo, OpSink, WorkerLocked};
use crate::status::Status;
use crate::worker::accept::{ConnRequestData, ListenerHandlers};
use crate::worker::am::AmHandlers;
use crate::worker::am_lent::LentAm;
use crate::worker::ep_handle::{EpHandle, ErrHandler};
use crate::worker::pending::PendingConnections;

/// Largest payload of one fragment: the transport's frame minus our header.
pub(crate) fn max_payload(max_frame: usize) -> usize {
    max_frame - MAX_HEADER_LEN
}

/// A transport error as the `ucs_status_t` the user sees.
pub(crate) fn status_of(error: TlError) -> Status {
    match error {
        TlError::NotConnected => Status::NotConnected,
        TlError::Unreachable => Status::Unreachable,
        TlError::ConnectionReset => Status::ConnectionReset,
        TlError::Timeout => Status::EndpointTimeout,
        TlError::Busy => Status::Busy,
        TlError::NoResource => Status::NoResource,
        TlError::InvalidParam => Status::InvalidParam,
        TlError::Unsupported => Status::Unsupported,
        TlError::Canceled => Status::Canceled,
        TlError::Os(_) => Status::IoError,
    }
}

/// [`status_of`] out of line, for the send paths' rare failures.
#[cold]
#[inline(never)]
pub(crate) fn status_of_cold(error: TlError) -> Status {
    status_of(error)
}

/// [`EpState::direct_rma`]: cleared for good when the endpoint fails or starts closing.
pub(crate) const DIRECT_LIVE: u8 = 1;
/// [`EpState::direct_rma`]: cleared by a fence while one-sided operations the endpoint sent
/// through its peer may still be on their way, which direct accesses would overtake (they go
/// through the peer too until those settled); set again then.
pub(crate) const DIRECT_ORDERED: u8 = 2;

/// The API's own record of one endpoint; its protocol state is the engine's.
pub(crate) struct EpState {
    pub name: String,
    pub err_handler: Option<ErrHandler>,
    /// The error handler ran or will run, or must not (a close): it runs at most once.
    pub err_reported: bool,
    pub user_data: usize,
    pub created: Instant,
    pub local_addr: Option<SocketAddr>,
    pub remote_addr: Option<SocketAddr>,
    /// The canonical handle given to the application, if it still holds one.
    pub handle: Weak<EpHandle>,
    /// Whether remote keys unpacked on the endpoint may access the peer's memory directly
    /// (lock-free CPU copies into its mapping, see `EpRkey`): [`DIRECT_LIVE`] and
    /// [`DIRECT_ORDERED`], read in one load per access.
    pub direct_rma: Arc<std::sync::atomic::AtomicU8>,
    /// The shared-memory link's send lane, once an application handle took it for direct eager
    /// sends (see `DirectLane`); closed on the endpoint's side with `direct_rma`'s live flag.
    pub lane: Option<Arc<zcx_dataplane::shm::ShmSendLane>>,
    /// Stream sends still in fragments: while there are any, the lane holds small stream sends
    /// back (the byte stream keeps its order).
    pub stream_jobs: u32,
    /// The flush that tells when the one-sided operations sent through the peer settled, while
    /// one is out after a fence (see [`DIRECT_ORDERED`]).
    pub settling: Option<zcx_engine::OpId>,
    /// Client side while connecting: the random token the connection request carries (as its
    /// `client_ep_id`) and the answer must echo, so no other process can answer for the server.
    pub conn_token: u64,
    /// Client side while connecting: the verbs link opened for the endpoint, whose address the
    /// connection request carries, joined when the server's answer brings the server's end.
    pub verbs_link: Option<LinkId>,
    /// The engine reported the endpoint down.
    pub down: bool,
    /// The worker at the other end, by the name its address or request gives, for an endpoint
    /// made from a worker address (either side); a claim until a pairing proves it (see
    /// `worker::pairing`).
    pub peer_worker: Option<String>,
    /// Accepted from a peer's worker address with no application handle yet: the application's
    /// next endpoint to that worker may take it over, if the peer proves it made it.
    pub implicit: bool,
    /// An implicit endpoint's: the token (`client_ep_id`) of the request it was accepted from.
    pub peer_token: u64,
    /// Client side: the implicit endpoint's token this endpoint's request proposed to pair with
    /// (0 for none).
    pub proposed_pair: u64,
}

impl EpState {
    /// The endpoint stops being usable (it closes or failed): direct remote-key accesses and
    /// direct sends on its lane stop, so only the worker's checks decide from now on.
    pub fn stop_direct(&self) {
        self.direct_rma.fetch_and(!DIRECT_LIVE, std::sync::atomic::Ordering::Release);
        if let Some(lane) = &self.lane {
            lane.close_for_endpoint();
        }
    }

    /// A stream send went into fragments: later stream sends wait behind it.
    pub fn hold_streams(&mut self) {
        self.stream_jobs += 1;
        if self.stream_jobs == 1 {
            if let Some(lane) = &self.lane {
                lane.hold_streams(true);
            }
        }
    }

    /// A stream send in fragments ended.
    pub fn release_streams(&mut self) {
        self.stream_jobs = self.stream_jobs.saturating_sub(1);
        if self.stream_jobs == 0 {
            if let Some(lane) = &self.lane {
                lane.hold_streams(false);
            }
        }
    }
}

/// The request cells of operations in flight: by cookie (a slot index carried in the
/// operation's buffer, handed back in its completion), or by id for commands without a buffer.
#[derive(Default)]
pub(crate) struct Sinks {
    slots: Vec<Option<Arc<dyn OpSink>>>,
    free: Vec<u32>,
    by_id: FastMap<OpId, Arc<dyn OpSink>>,
}

impl Sinks {
    /// A slot for a cell to come: its cookie goes into the operation's buffer before the
    /// engine sees it. Give it back with [`Sinks::unreserve`] when the command completes at once.
    #[inline]
    pub fn reserve(&mut self) -> Cookie {
        let index = match self.free.pop() {
            Some(index) => {
                debug_assert!(self.slots[index as usize].is_none(), "reserved a busy slot");
                index as usize
            }
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        Cookie::new(NonZeroUsize::MIN.saturating_add(index))
    }

    /// Puts the cell of a reserved slot.
    #[inline]
    pub fn fill(&mut self, cookie: Cookie, sink: Arc<dyn OpSink>) {
        let index = cookie.get().get() - 1;
        debug_assert!(index < self.slots.len(), "a cookie this table did not give");
        // SAFETY: the cookie came from `reserve`, which gave an index below the table's length
        // (it never shrinks).
        let slot = unsafe { self.slots.get_unchecked_mut(index) };
        debug_assert!(slot.is_none(), "cookie slot filled twice");
        *slot = Some(sink);
    }

    /// Gives back a reserved slot nobody filled.
    #[inline]
    pub fn unreserve(&mut self, cookie: Cookie) {
        self.free.push((cookie.get().get() - 1) as u32);
    }

    /// Takes the cell of a completed operation.
    #[inline]
    pub fn take(&mut self, cookie: Cookie) -> Option<Arc<dyn OpSink>> {
        let index = cookie.get().get() - 1;
        let sink = self.slots.get_mut(index)?.take();
        if sink.is_some() {
            self.free.push(index as u32);
        }
        sink
    }

    /// Records the cell of an operation started without a cookie.
    pub fn insert(&mut self, op: OpId, sink: Arc<dyn OpSink>) {
        self.by_id.insert(op, sink);
    }

    /// Takes the cell of an operation started without a cookie.
    pub fn take_id(&mut self, op: OpId) -> Option<Arc<dyn OpSink>> {
        if self.by_id.is_empty() {
            return None;
        }
        self.by_id.remove(&op)
    }
}

/// A listener: its handlers and the parameters of endpoints it accepts itself.
pub(crate) struct ListenerEntry {
    pub handlers: ListenerHandlers,
}

/// User code to run once the worker's lock is released.
///
/// One is pushed and moved out again per active message received, so the rare large item (a
/// connection request) is boxed to keep every item small enough to move without a `memcpy` call.
pub(crate) enum Deferred {
    Callback(Callback, Status, OpInfo),
    /// The waker of a request polled as a future.
    Wake(std::task::Waker),
    ErrHandler {
        ep: EndpointId,
        handler: ErrHandler,
        status: Status,
    },
    ConnRequest {
        listener: ListenerId,
        request: Box<ConnRequestData>,
    },
    Accepted {
        listener: ListenerId,
        ep: EndpointId,
    },
    Am(crate::worker::am::AmDelivery),
    /// Chunks of a peer's large put to copy (see [`crate::worker::put_help`]).
    Help(crate::worker::put_help::HelpCopy),
}

/// A server endpoint whose accept goes out on a faster transport than the one the request came
/// by (shared memory on the same host, else DPDK): the worker dials the client's address there
/// and sends the accept as the first frame of the new link, which then carries all of the
/// endpoint's traffic.
pub(crate) struct LaneDial {
    pub ep: EndpointId,
    /// The link the request came on.
    pub request_link: LinkId,
    /// Where to dial.
    pub lane: Lane,
    /// The accept; a verbs lane adds the server's end of the link to its address.
    pub accept: zcx_control::HandshakeWire,
}

/// A client endpoint whose server answered: its verbs link is joined to the server's end (the
/// answer's address carries it), or, without one, closed and the endpoint stays on its link.
pub(crate) struct VerbsJoin {
    pub ep: EndpointId,
    /// The link the answer came on.
    pub link: LinkId,
    /// The verbs link the client opened.
    pub verbs_link: LinkId,
    /// The server's end, if it has one.
    pub server: Option<zcx_control::TransportAddress>,
}

/// A faster transport to a client than the link its connection request came on.
#[derive(Clone, Debug)]
pub(crate) struct Lane {
    /// The member of the transport set to dial with.
    pub member: usize,
    /// The client's address on it.
    pub target: zcx_control::TransportAddress,
    /// The session id of the client's end, for a datagram transport (dpdk): derived from the
    /// request's token by both sides ([`lane_session`]).
    pub session: Option<u32>,
}

/// The session id the client's end of a DPDK lane has: the low 31 bits of the connection
/// request's token (never 0), which both sides know from the handshake; DPDK acceptor ids are
/// below 2^31. Two connecting endpoints of one client collide with odds of about one in 2^31;
/// the colliding lane's HELLO is then refused and that endpoint times out.
pub(crate) fn lane_session(token: u64) -> u32 {
    ((token as u32) & 0x7fff_ffff).max(1)
}

impl State {
    /// Records the verbs member `member` of the transport set, whose caps are `caps`: its links
    /// carry frames of its own size, and puts, gets (and, in device atomic mode, 64-bit
    /// atomics) are the NIC's.
    pub(crate) fn set_verbs(&mut self, member: usize, caps: &zcx_dataplane::Caps, config: &crate::Config) {
        let rndv_threshold = self.rndv_thresh.min(max_payload(caps.max_frame));
        let link_caps = LinkCaps {
            max_frame: caps.max_frame,
            rndv_threshold,
            native_put: caps.rma.put,
            native_get: caps.rma.get,
            native_atomics: config.device_atomics() && !caps.rma.atomic64.is_empty(),
            bulk: match caps.large_payload {
                zcx_dataplane::LargePayload::ReceiverPull => BulkMode::ReceiverPull,
                zcx_dataplane::LargePayload::SenderPush => BulkMode::SenderPush,
            },
            placed: caps.max_placed > 0,
            max_placed: caps.max_placed,
            place_streams: caps.max_placed > 0,
            // A queue pair's unanswered keepalive fails the link in seconds.
            peer_watched: true,
        };
        self.verbs = Some((member, link_caps));
    }

    /// What the endpoint on `link` is told of it.
    #[inline]
    pub(crate) fn caps_for(&self, link: LinkId) -> LinkCaps {
        let member = zcx_dataplane::transport_set::member_of(link);
        match self.verbs {
            Some((verbs, caps)) if member == verbs => caps,
            // Stream fragments are placed over TCP and DPDK, not over shared memory, where a
            // placement is a read of the sender's memory (`LinkCaps::place_streams`).
            _ => LinkCaps {
                place_streams: self.link_caps.placed && Some(member) != self.shm_member,
                ..self.link_caps
            },
        }
    }
}

/// A handshake frame built while the transport is being polled, sent right after.
pub(crate) struct OutFrame {
    pub link: LinkId,
    pub payload: Vec<u8>,
}

/// Everything but the transport.
pub(crate) struct State {
    pub ctx: Arc<ContextInner>,
    /// The protocols: endpoints' traffic, operations, receive queues.
    pub engine: Engine,
    /// The API's side of each endpoint.
    pub eps: FastMap<EndpointId, EpState>,
    /// Request cells of operations in flight.
    pub sinks: Sinks,
    /// Stream sends in fragments, by operation, with their endpoint (see `EpState::stream_jobs`).
    pub stream_sends: FastMap<OpId, EndpointId>,
    /// Transmits the transport pushed back, sent first next time.
    pub stalled: VecDeque<Transmit>,
    /// What every link's endpoint is told of its link.
    pub link_caps: LinkCaps,
    /// Connections accepted by a listener, waiting for their connection request.
    pub incoming: PendingConnections,
    /// Links whose handshake completed during the poll: the transport is told after it (see
    /// `Transport::link_established`), before anything is sent on them.
    pub established: Vec<LinkId>,
    pub listeners: FastMap<ListenerId, ListenerEntry>,
    /// Replaced whole, never changed in place (see [`AmHandlers`]).
    pub am_handlers: Arc<AmHandlers>,
    /// An active message was queued in `deferred`: the progress call that takes the queue takes
    /// the handler table with it.
    pub am_queued: bool,
    /// The active message a transport lent to a handler (see [`crate::worker::am_lent`]), until
    /// the loan ends.
    pub lent: Option<LentAm>,
    /// Handler tables replaced while a loan was out: its handler may be reading one (the loan
    /// holds no reference; see [`crate::worker::am_lent`]). Buried when the loan ends.
    pub lent_tables: Vec<Arc<AmHandlers>>,
    /// Put-help announcements of the last poll, checked after it (see
    /// [`crate::worker::put_help`]).
    pub help_announced: Vec<crate::worker::put_help::Announcement>,
    /// Peers' source regions mapped for put help, by endpoint, with their packed keys.
    pub help_mappings: FastMap<EndpointId, crate::worker::put_help::KeptRegions>,
    pub deferred: Vec<Deferred>,
    /// Handshake frames to send after the poll.
    pub out: Vec<OutFrame>,
    /// Accepts to send on a new shared-memory link (see [`LaneDial`]), before `out`.
    pub lane_dials: Vec<LaneDial>,
    /// Client endpoints whose verbs link is to be joined (or given up) now the server answered.
    pub verbs_joins: Vec<VerbsJoin>,
    /// Client endpoints that moved to a shared-memory lane during the poll, with the link they
    /// left: its socket addresses are kept for `query`, then it is closed.
    pub lanes_taken: Vec<(EndpointId, LinkId)>,
    /// Messages the rung path took (see `worker::rung`), for its tests.
    #[cfg(test)]
    pub rung_takes: u64,
    /// The coarse clock at the last run of the timers (see `WorkerShared::full_progress`).
    pub last_tick_coarse: i64,
    /// The transports' doorbell generation the worker's quiet watch was last given.
    pub doorbell_generation: u64,
    /// Client endpoints still connecting, by the token their request carries.
    pub connecting: FastMap<u64, EndpointId>,
    /// Peers' requests held while they cross one of ours (see `worker::pairing`).
    pub held_requests: Vec<crate::worker::pairing::HeldRequest>,
    /// The member of the transport set that is shared memory, if this worker has it.
    pub shm_member: Option<usize>,
    /// The member of the transport set that is DPDK, if this worker has it.
    pub dpdk_member: Option<usize>,
    /// The member of the transport set that is verbs, if this worker has it, and what its links'
    /// endpoints are told of them (native RMA, its own frame size).
    pub verbs: Option<(usize, LinkCaps)>,
    /// Regions of large sends a verbs receiver pulls (see `pull`), until each send completes.
    pub pulls: crate::worker::pull::PullRegions,
    /// Native one-sided operations the transport pushed back, issued first next time.
    pub rma_stalled: VecDeque<zcx_engine::RmaRequest>,
    pub events: usize,
    pub rndv_thresh: usize,
    pub max_payload: usize,
    pub keepalive: Duration,
    pub next_tick: Instant,
    /// Reused byte buffers (AM copies), so the steady state does not allocate.
    pub pool: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Where an active message sent at once joins its user header and data into one payload:
    /// kept, so that sending one allocates nothing.
    pub am_scratch: Vec<u8>,
    /// Endpoints that went down in the events being absorbed.
    pub gone: Vec<EndpointId>,
    /// Links to close after the poll.
    pub to_close: Vec<(LinkId, bool)>,
    /// This worker's address, sent in handshakes.
    pub address: zcx_control::WorkerAddressWire,
    /// Values to drop once the lock is released (see `CoreGuard`).
    pub graveyard: Vec<Box<dyn Send>>,
    /// The proof of the worker's lock that completing a request asks for: reachable only
    /// through this state, which lives behind the lock.
    held: WorkerLocked,
}

/// The worker's locked core: the transport and the state beside it, borrowed separately so frames
/// can be handled while the transport is being polled.
pub(crate) struct Core {
    pub tl: TransportSet,
    pub st: State,
}

impl State {
    /// The after-poll work (engine output, replies, lane switches, closes) is done.
    #[inline]
    pub fn nothing_after_poll(&self) -> bool {
        // Every poll asks, and the answer is almost always yes: the lengths are OR-ed for one
        // branch rather than tested one branch each.
        let queued = self.stalled.len()
            | self.out.len()
            | self.lane_dials.len()
            | self.verbs_joins.len()
            | self.rma_stalled.len()
            | self.lanes_taken.len()
            | self.to_close.len()
            | self.help_announced.len()
            | self.established.len();
        queued == 0 && self.engine.is_idle()
    }

    pub fn new(
        ctx: Arc<ContextInner>,
        address: zcx_control::WorkerAddressWire,
        caps: &zcx_dataplane::Caps,
    ) -> State {
        let config = &ctx.config;
        let max_payload = max_payload(caps.max_frame);
        let incoming = PendingConnections::new(config.max_pending_connections(), config.handshake_timeout());
        let rndv_thresh = config.rndv_thresh().min(max_payload);
        let keepalive = config.keepalive_interval();
        let link_caps = LinkCaps {
            max_frame: caps.max_frame,
            rndv_threshold: rndv_thresh,
            // The same-host RMA maps the peer's memory itself (`endpoint::rma`); everything
            // else the target's engine executes.
            native_put: false,
            native_get: false,
            native_atomics: false,
            bulk: BulkMode::SenderPush,
            placed: caps.max_placed > 0,
            max_placed: caps.max_placed,
            // Per link (`caps_for`).
            place_streams: false,
            peer_watched: false,
        };
        let engine_config = EngineConfig {
            keepalive_interval: Some(keepalive),
            keepalive_timeout: keepalive * 3,
            ..EngineConfig::default()
        };
        let engine = Engine::new(engine_config, Arc::clone(&ctx.remote_access));
        State {
            rndv_thresh,
            keepalive,
            ctx,
            engine,
            eps: FastMap::default(),
            sinks: Sinks::default(),
            stream_sends: FastMap::default(),
            stalled: VecDeque::new(),
            link_caps,
            incoming,
            established: Vec::new(),
            listeners: FastMap::default(),
            am_handlers: Arc::default(),
            am_queued: false,
            lent: None,
            lent_tables: Vec::new(),
            help_announced: Vec::new(),
            help_mappings: FastMap::default(),
            deferred: Vec::new(),
            out: Vec::new(),
            lane_dials: Vec::new(),
            verbs_joins: Vec::new(),
            lanes_taken: Vec::new(),
            doorbell_generation: u64::MAX,
            last_tick_coarse: 0,
            #[cfg(test)]
            rung_takes: 0,
            connecting: FastMap::default(),
            held_requests: Vec::new(),
            shm_member: None,
            dpdk_member: None,
            verbs: None,
            pulls: Default::default(),
            rma_stalled: VecDeque::new(),
            events: 0,
            max_payload,
            next_tick: Instant::now(),
            pool: Arc::new(Mutex::new(Vec::new())),
            to_close: Vec::new(),
            gone: Vec::new(),
            address,
            graveyard: Vec::new(),
            am_scratch: Vec::new(),
            // SAFETY: a `State` is made only by `create_worker`, which moves it into the worker's
            // `Mutex<Core>` before any request of the worker exists; the token is a private field
            // that never moves out of it and is lent (`held`) only for as long as the state is
            // borrowed, that is, while the lock is held.
            held: unsafe { WorkerLocked::new() },
        }
    }

    /// The proof that the worker's lock is held, for completing and arming request cells.
    #[inline(always)]
    pub fn held(&self) -> &WorkerLocked {
        &self.held
    }

    /// Drops `value` after the worker's lock is released: it may own application objects (an
    /// `Endpoint` captured by a handler) whose drop takes the lock.
    pub fn bury(&mut self, value: impl Send + 'static) {
        self.graveyard.push(Box::new(value));
    }

    /// Removes an endpoint's API state, dropping it after the lock is released; the engine
    /// forgets its side once nothing of it is in flight.
    pub fn remove_ep(&mut self, ep: EndpointId) {
        if let Some(mut state) = self.eps.remove(&ep) {
            if let Some(link) = state.verbs_link.take() {
                self.to_close.push((link, true));
            }
            state.stop_direct();
            self.bury(state);
        }
        if let Some(sources) = self.help_mappings.remove(&ep) {
            self.bury(sources);
        }
        self.engine.release_endpoint(ep);
    }

    /// A byte buffer from the pool holding a copy of `bytes`.
    pub fn pooled_copy_from(pool: &Mutex<Vec<Vec<u8>>>, bytes: &[u8]) -> Vec<u8> {
        let mut buf = pool.lock().unwrap_or_else(|p| p.into_inner()).pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(bytes);
        buf
    }

    /// Gives a buffer back to the pool (large ones are freed so the pool stays small).
    pub fn recycle(pool: &Mutex<Vec<Vec<u8>>>, buf: Vec<u8>) {
        if buf.capacity() <= 256 << 10 {
            let mut pool = pool.lock().unwrap_or_else(|p| p.into_inner());
            if pool.len() < 256 {
                pool.push(buf);
            }
        }
    }

    /// Queues a handshake frame built while polling.
    pub fn send_hello(&mut self, link: LinkId, payload: Vec<u8>) {
        self.out.push(OutFrame { link, payload });
    }

    /// Completes a request and queues its callback.
    #[inline(always)]
    pub fn complete_sink(&mut self, sink: &Arc<dyn OpSink>, status: Status, info: OpInfo) {
        self.events += 1;
        let after = sink.complete(&self.held, status, info);
        if let Some((callback, status, info)) = after.callback {
            self.deferred.push(Deferred::Callback(callback, status, info));
        }
        if let Some(waker) = after.waker {
            self.deferred.push(Deferred::Wake(waker));
        }
    }

    /// The request of a command the engine started with `cookie` in its buffer: done at once
    /// (the cookie's slot goes back), failed, or a cell in the slot that the operation's
    /// completion finds; `cancellable`: a receive that `Request::cancel` withdraws.
    #[inline(always)]
    pub fn cookie_request<B: Send + 'static>(
        &mut self,
        worker: &Arc<crate::worker::WorkerShared>,
        cookie: Cookie,
        started: std::result::Result<Start, Status>,
        buf: B,
        callback: Option<Callback>,
        cancellable: bool,
    ) -> crate::status::Result<crate::request::Request<B>> {
        match started {
            Err(status) => {
                self.sinks.unreserve(cookie);
                Err(status)
            }
            Ok(Start::Done(status, info)) => {
                self.sinks.unreserve(cookie);
                match status {
                    Status::Ok => Ok(crate::request::Request::ready(buf, op_info(info))),
                    failure => Err(failure),
                }
            }
            Ok(Start::Pending(op)) => {
                let cell = crate::request::ReqCell::new(worker, buf, callback);
                self.sinks.fill(cookie, cell.clone());
                if cancellable {
                    cell.set_cancel(&self.held, crate::request::CancelTarget::Receive(op.raw()));
                }
                Ok(crate::request::Request::pending(cell))
            }
        }
    }

    /// The worker expects a message: a posted tag receive, an operation waiting for its answer,
    /// or an active-message handler to run (see `SpinWaits`).
    pub fn expects_message(&self) -> bool {
        self.engine.awaits_frames() || !self.am_handlers.is_empty()
    }

    /// The request of a send the engine started: with a `cookie`, as [`State::cookie_request`]
    /// (not cancellable), otherwise as [`State::request_for`].
    #[inline(always)]
    pub fn send_request<B: Send + 'static>(
        &mut self,
        worker: &Arc<crate::worker::WorkerShared>,
        cookie: Option<Cookie>,
        started: Start,
        buf: B,
        callback: Option<Callback>,
    ) -> crate::status::Result<crate::request::Request<B>> {
        match cookie {
            Some(cookie) => self.cookie_request(worker, cookie, Ok(started), buf, callback, false),
            None => self.request_for(worker, started, buf, callback),
        }
    }

    /// The request of a command the engine started without a cookie: done at once, or a cell
    /// that the operation's completion finds by its id.
    pub fn request_for<B: Send + 'static>(
        &mut self,
        worker: &Arc<crate::worker::WorkerShared>,
        started: Start,
        buf: B,
        callback: Option<Callback>,
    ) -> crate::status::Result<crate::request::Request<B>> {
        match started {
            Start::Done(Status::Ok, info) => Ok(crate::request::Request::ready(buf, op_info(info))),
            Start::Done(failure, _) => Err(failure),
            Start::Pending(op) => {
                let cell = crate::request::ReqCell::new(worker, buf, callback);
                self.sinks.insert(op, cell.clone());
                Ok(crate::request::Request::pending(cell))
            }
        }
    }

    /// The endpoint's engine phase, if it can carry a new operation; otherwise the status that
    /// operation fails with.
    pub fn usable_ep(&self, ep: EndpointId) -> Result<Phase, Status> {
        match self.engine.phase(ep) {
            None => Err(Status::NotConnected),
            Some(Phase::Dead(status)) => Err(status),
            Some(Phase::Closing) => Err(Status::Canceled),
            Some(phase) => Ok(phase),
        }
    }

    /// Acts on everything the engine reported: completions go to their request cells, endpoint
    /// failures to the API's records and error handlers, active messages to their handlers
    /// (deferred), links to close after the poll. Runs during a poll too: it sends nothing.
    #[inline(always)]
    pub fn absorb_events(&mut self) {
        if self.engine.has_events() {
            self.absorb_queued_events();
        }
    }

    /// [`State::absorb_events`] with events queued: completions inline (the one event of most
    /// messages), the rest out of line.
    fn absorb_queued_events(&mut self) {
        while let Some(event) = self.engine.poll_event() {
            match event {
                Event::Completion(done) => self.on_completion(done),
                other => self.on_engine_event(other),
            }
        }
        if !self.gone.is_empty() {
            self.forget_gone();
        }
    }

    /// An operation finished: its request cell completes.
    #[inline(always)]
    pub fn on_completion(&mut self, done: zcx_engine::Completion) {
        let sink = match done.cookie {
            Some(cookie) => self.sinks.take(cookie),
            None => self.sinks.take_id(done.op),
        };
        if !self.stream_sends.is_empty() {
            self.stream_send_done(done.op);
        }
        if !self.pulls.is_empty() {
            // Before the request hands the buffer back.
            self.pulls.release(done.op);
        }
        match sink {
            Some(sink) => self.complete_sink(&sink, done.status, op_info(done.info)),
            None => tracing::debug!(op = %done.op, "completion of an operation without a request"),
        }
    }

    /// A stream send that went in fragments may have ended: the endpoint's lane takes small
    /// stream sends again once none is left.
    #[cold]
    fn stream_send_done(&mut self, op: OpId) {
        if let Some(ep) = self.stream_sends.remove(&op) {
            if let Some(state) = self.eps.get_mut(&ep) {
                state.release_streams();
            }
        }
    }

    /// Forgets the endpoints that went down in the events just absorbed, once their error
    /// handler, reported in the same events, is queued (it keeps them until it ran).
    #[cold]
    fn forget_gone(&mut self) {
        for ep in std::mem::take(&mut self.gone) {
            crate::worker::lifecycle::forget_if_unowned(self, ep);
        }
    }

    #[inline(never)]
    fn on_engine_event(&mut self, event: Event) {
        match event {
            Event::Completion(done) => self.on_completion(done),
            Event::EndpointDown { ep, status } => self.on_endpoint_down(ep, status),
            Event::EndpointError { ep, status } => {
                let Some(state) = self.eps.get_mut(&ep) else { return };
                if state.err_reported {
                    return;
                }
                state.err_reported = true;
                if let Some(handler) = state.err_handler.clone() {
                    self.deferred.push(Deferred::ErrHandler { ep, handler, status });
                }
            }
            Event::Am(delivery) => {
                let delivery = crate::worker::am::AmDelivery::from_engine(self, *delivery);
                self.deferred.push(Deferred::Am(delivery));
                self.am_queued = true;
            }
            Event::Handshake { link, payload } => crate::worker::dispatch::on_hello(self, link, &payload),
            Event::CloseLink { link, force } => self.to_close.push((link, force)),
            Event::Extension(extension) => {
                let zcx_engine::Extension { ep, link, op, payload } = *extension;
                crate::worker::put_help::on_announce(self, link, ep, op, &payload);
                self.engine.reuse(payload);
            }
        }
    }

    /// The engine reported the endpoint down: direct paths stop, a connecting endpoint's token
    /// goes, and an endpoint nobody holds is forgotten.
    fn on_endpoint_down(&mut self, ep: EndpointId, status: Status) {
        let Some(state) = self.eps.get_mut(&ep) else { return };
        tracing::debug!(%ep, ?status, "endpoint down");
        state.down = true;
        state.stop_direct();
        let token = state.conn_token;
        if self.connecting.get(&token) == Some(&ep) {
            self.connecting.remove(&token);
        }
        self.gone.push(ep);
    }
}

/// The engine's completion details as the API reports them.
#[inline]
pub(crate) fn op_info(info: zcx_engine::OpInfo) -> OpInfo {
    OpInfo { length: info.length, sender_tag: info.sender_tag, value: info.value }
}

impl Core {
    /// Sends everything the engine has for the transports and acts on its events: stalled
    /// transmits first, then the outbox (making bulk fragments as the transports take them).
    pub(crate) fn drain(&mut self) {
        let Core { tl, st } = self;
        while let Some(transmit) = st.stalled.pop_front() {
            if let Err(transmit) = send_transmit(tl, &mut st.engine, transmit) {
                st.stalled.push_front(transmit);
                break;
            }
        }
        if st.stalled.is_empty() {
            while let Some(transmit) = st.engine.poll_transmit() {
                if let Err(transmit) = send_transmit(tl, &mut st.engine, transmit) {
                    st.stalled.push_back(keep_stalled(transmit));
                    break;
                }
            }
        }
        if !st.stalled.is_empty() {
            // What the engine queued behind them waits too, in order; an inline payload is the
            // caller's, valid only until its command returns, so it is copied.
            while let Some(transmit) = st.engine.poll_queued_transmit() {
                st.stalled.push_back(keep_stalled(transmit));
            }
        }
        if !st.rma_stalled.is_empty() || st.engine.has_rma() {
            issue_rmas(tl, st);
        }
        st.absorb_events();
    }
}

/// Whether everything sent on `link` has left this worker for where it reaches the peer even
/// if the process exits (`Transport::link_delivered`), none of it waiting in `stalled` for room
/// in the transport: a flush then completes on the engine's records.
pub(crate) fn link_delivered(tl: &TransportSet, stalled: &VecDeque<Transmit>, link: LinkId) -> bool {
    tl.link_delivered(link) && !stalled.iter().any(|transmit| transmit.link == link)
}

/// Issues the engine's native one-sided operations (a verbs link's), those the transport pushed
/// back before first, in order; one it pushes back again waits with those behind it.
#[inline(never)]
fn issue_rmas(tl: &mut TransportSet, st: &mut State) {
    while let Some(request) = st.rma_stalled.pop_front().or_else(|| st.engine.poll_rma()) {
        let Some(key) = crate::rkey::NativeKey::decode(&request.remote_key) else {
            st.engine.rma_done(request.token, Status::InvalidParam, 0);
            continue;
        };
        let (op, len) = match request.kind {
            zcx_engine::RmaKind::Put => (zcx_dataplane::RmaOp::Put, request.len),
            zcx_engine::RmaKind::Get => (zcx_dataplane::RmaOp::Get, request.len),
            zcx_engine::RmaKind::Atomic { op, size, value, compare } => {
                (zcx_dataplane::RmaOp::Atomic { op, fetch: true, value, compare }, usize::from(size))
            }
        };
        let local = if matches!(op, zcx_dataplane::RmaOp::Atomic { .. }) {
            zcx_dataplane::LocalMem::NONE
        } else {
            // SAFETY: the engine keeps the operation's buffer valid, and nobody else's, until
            // `rma_done` (`RmaRequest::local`).
            unsafe { zcx_dataplane::LocalMem::new(request.local, request.len) }
        };
        let remote = zcx_dataplane::RemoteMem {
            region_base: key.base,
            region_len: key.len,
            addr: request.remote_addr,
            len,
            key: key.entry,
        };
        match tl.rma(request.link, op, local, remote, request.token.raw()) {
            Ok(zcx_dataplane::RmaOutcome::Pending) => {}
            Ok(zcx_dataplane::RmaOutcome::Done { fetched }) => {
                st.engine.rma_done(request.token, Status::Ok, fetched)
            }
            Err(TlError::NoResource) => {
                st.rma_stalled.push_front(request);
                break;
            }
            Err(e) => st.engine.rma_done(request.token, status_of(e), 0),
        }
    }
}

/// A transmit the transport pushed back, kept to send first next time: an inline payload (the
/// caller's bytes, valid only until its command returns) becomes a copy.
fn keep_stalled(transmit: Transmit) -> Transmit {
    match transmit.payload {
        Payload::Inline { .. } => {
            // SAFETY: the command that queued the payload is still running (the outbox is
            // drained before commands return).
            let copy = unsafe { transmit.payload.bytes() }.to_vec();
            Transmit { payload: Payload::Owned(copy), ..transmit }
        }
        _ => transmit,
    }
}

/// Sends one transmit; gives it back when the transport pushes back (`NoResource`). A borrowed
/// payload goes zero-copy from the link's threshold on (its token comes back with `SendDone`)
/// and is answered at once otherwise; a send that fails otherwise fails its operation.
fn send_transmit(tl: &mut TransportSet, engine: &mut Engine, transmit: Transmit) -> Result<(), Transmit> {
    let link = transmit.link;
    let header = transmit.header.as_bytes();
    let send = |tl: &mut TransportSet, payload: TlPayload<'_>| {
        if transmit.placed {
            tl.send_placed(link, header, payload)
        } else {
            tl.send(link, header, payload)
        }
    };
    let result = match &transmit.payload {
        Payload::None => send(tl, TlPayload::None),
        Payload::Owned(bytes) => send(tl, TlPayload::Copy(bytes)),
        // SAFETY: the command that queued it is still running (see `keep_stalled`).
        Payload::Inline { .. } => send(tl, TlPayload::Copy(unsafe { transmit.payload.bytes() })),
        &Payload::Borrowed { op, ptr, len } => {
            let zcopy = len >= tl.link_caps(link).zcopy_threshold;
            let result = if zcopy {
                // SAFETY: the bytes are the operation's buffer, which stays valid and unchanged
                // until the engine hears `send_done` for this payload (its contract).
                let payload = unsafe { ZcopyPayload::new(ptr, len, op.raw()) };
                send(tl, TlPayload::Zcopy(payload))
            } else {
                // SAFETY: as above; copied before `send` returns.
                send(tl, TlPayload::Copy(unsafe { std::slice::from_raw_parts(ptr, len) }))
            };
            match result {
                Ok(SendOutcome::InFlight) => {}
                Ok(SendOutcome::Done) => engine.send_done(op, Ok(())),
                Err(TlError::NoResource) => {}
                Err(error) => engine.send_done(op, Err(status_of(error))),
            }
            result
        }
    };
    match result {
        Err(TlError::NoResource) => Err(transmit),
        other => {
            if let Err(error) = other {
                tracing::debug!(?link, %error, "frame not sent");
            }
            if let Payload::Owned(bytes) = transmit.payload {
                engine.reuse(bytes);
            }
            Ok(())
        }
    }
}
