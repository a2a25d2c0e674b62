//! What a worker keeps between progress calls: endpoints, operations in flight, receive queues.
//!
//! Everything here lives behind the worker's lock and is touched only by the thread holding it.
//! No user code runs while the lock is held: completions that have a callback, error handlers,
//! connection handlers and AM handlers are queued as [`Deferred`] and run by `progress` after it
//! releases the lock, so a callback may call any zcx function.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use zcx_dataplane::proto::wire::{Op, MAX_HEADER_LEN};
use zcx_dataplane::proto::TagMatcher;
use zcx_dataplane::{
    FastMap, FastSet, LinkId, ListenerId, Payload, SendOutcome, TlError, Transport, TransportSet,
    ZcopyPayload,
};

use crate::context::ContextInner;
use crate::endpoint::{EpHandle, ErrHandler};
use crate::listener::ListenerHandlers;
use crate::request::{AfterUnlock, Callback, OpInfo, OpSink, WorkerLocked};
use crate::status::Status;
use crate::worker::am::AmHandlers;
use crate::worker::am_lent::LentAm;
use crate::worker::pending::PendingConnections;

/// Largest payload of one fragment: the transport's frame minus our header.
pub(crate) fn max_payload(max_frame: usize) -> usize {
    max_frame - MAX_HEADER_LEN
}

/// How many zero-copy fragments of one operation may sit in the transport at once: enough to
/// keep the link busy, few enough that a small message queued behind them waits little.
pub(crate) const FRAGMENT_WINDOW: u32 = 4;

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

/// Where an endpoint is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The client sent its connection request and waits for the server's answer; frames queue.
    Connecting,
    /// Traffic flows.
    Ready,
    /// Closing with flush: waiting for the endpoint's operations to end before disconnecting.
    Closing,
    /// Failed or closed; every operation fails with this status.
    Dead(Status),
}

/// A frame queued on an endpoint that is not connected yet.
pub(crate) struct QueuedFrame {
    pub header: [u8; MAX_HEADER_LEN],
    pub header_len: u8,
    pub payload: QueuedPayload,
    /// The operation that completes when the frame leaves (an eager send issued early).
    pub completes: Option<u64>,
}

pub(crate) enum QueuedPayload {
    None,
    Owned(Vec<u8>),
    /// Borrowed from an operation's buffer, which its record keeps alive.
    Zcopy {
        ptr: *const u8,
        len: usize,
        token: u64,
    },
}

// SAFETY: a Zcopy payload points into an operation's buffer, which the operation's record keeps
// alive and unmodified until the fragment's token returns; the pointer carries no thread affinity.
unsafe impl Send for QueuedPayload {}

/// A stream receive waiting for bytes.
pub(crate) struct StreamRecv {
    pub id: u64,
    pub sink: Arc<dyn OpSink>,
    pub ptr: *mut u8,
    pub cap: usize,
    pub filled: usize,
    pub waitall: bool,
}

// SAFETY: `ptr` is into the buffer owned by `sink`'s request, alive until the sink completes.
unsafe impl Send for StreamRecv {}

/// Received stream bytes no receive has taken yet, and receives waiting for bytes.
#[derive(Default)]
pub(crate) struct StreamRx {
    pub chunks: VecDeque<Vec<u8>>,
    /// Bytes of `chunks[0]` already consumed.
    pub head_offset: usize,
    pub posted: VecDeque<StreamRecv>,
}

/// Work that sends many fragments, paced so it never floods the transport.
pub(crate) enum BulkJob {
    /// Fragments of an operation's own buffer (`OutOp::Send`); `stream` for a stream send, which
    /// later stream sends of the endpoint must not overtake.
    Send { op: u64, stream: bool },
    /// The target side of a get: fragments of our registered memory, each checked again.
    GetReply { req: u64, region: u64, key: [u8; 16], addr: u64, len: u64, offset: u64 },
}

/// One endpoint as the worker keeps it.
pub(crate) struct EpState {
    pub name: String,
    pub link: LinkId,
    pub phase: Phase,
    pub err_mode_peer: bool,
    pub err_handler: Option<ErrHandler>,
    pub err_reported: bool,
    pub user_data: usize,
    pub queued: VecDeque<QueuedFrame>,
    pub bulk: VecDeque<BulkJob>,
    pub stream: StreamRx,
    pub created: Instant,
    pub last_rx: Instant,
    pub last_tx: Instant,
    pub rx_seen: bool,
    pub tx_seen: bool,
    pub local_addr: Option<SocketAddr>,
    pub remote_addr: Option<SocketAddr>,
    /// The canonical handle given to the application, if it still holds one.
    pub handle: Weak<EpHandle>,
    /// The close request waiting for the endpoint to drain.
    pub close_op: Option<u64>,
    /// Cleared when the endpoint fails or starts closing: remote keys unpacked on it stop their
    /// direct (lock-free) shared-memory accesses then (see `EpRkey`).
    pub direct_ok: Arc<std::sync::atomic::AtomicBool>,
    /// The shared-memory link's send lane, once an application handle took it for direct eager
    /// sends (see `DirectLane`); closed on the endpoint's side with `direct_ok`.
    pub lane: Option<Arc<zcx_dataplane::shm::ShmSendLane>>,
    /// Stream sends waiting in `bulk`: while there are any, a small stream send queues behind
    /// them instead of going out at once (the byte stream keeps its order).
    pub stream_jobs: u32,
    /// Where the target's refusal of an implicit put (`put_nbi`) waits for the endpoint's next
    /// flush, which reports it.
    pub nbi: Arc<NbiFailure>,
    /// Client side while connecting: the random token the connection request carries (as its
    /// `client_ep_id`) and the answer must echo, so no other process can answer for the server.
    pub conn_token: u64,
}

/// The first failure of an endpoint's implicit puts since its last flush (0: none). Also the
/// completion sink of its small implicit puts, which have no request of their own: the status is
/// recorded when the acknowledgement arrives, under the worker's lock, so a flush completed later
/// in the same poll already sees it.
#[derive(Default)]
pub(crate) struct NbiFailure(std::sync::atomic::AtomicI32);

/// The request id of an implicit put sent without acknowledgement. Operation ids start at 1, so
/// the target's refusal answered with it is recorded as the endpoint's implicit-put failure.
pub(crate) const UNTRACKED_PUT: u64 = 0;

impl EpState {
    /// The endpoint stops being usable (it closes or failed): direct remote-key accesses and
    /// direct sends on its lane stop, so only the worker's checks decide from now on.
    pub fn stop_direct(&self) {
        self.direct_ok.store(false, std::sync::atomic::Ordering::Release);
        if let Some(lane) = &self.lane {
            lane.close_for_endpoint();
        }
    }

    /// A stream send joined the bulk queue: later stream sends wait behind it.
    pub fn hold_streams(&mut self) {
        self.stream_jobs += 1;
        if self.stream_jobs == 1 {
            if let Some(lane) = &self.lane {
                lane.hold_streams(true);
            }
        }
    }

    /// A stream send left the bulk queue (all its fragments are out, or it ended).
    pub fn release_streams(&mut self) {
        self.stream_jobs = self.stream_jobs.saturating_sub(1);
        if self.stream_jobs == 0 {
            if let Some(lane) = &self.lane {
                lane.hold_streams(false);
            }
        }
    }

    /// Whether the endpoint sent anything since the last call: through the worker, or directly
    /// on its lane.
    pub fn take_tx_seen(&mut self) -> bool {
        let direct = self.lane.as_ref().is_some_and(|lane| lane.take_sent());
        std::mem::take(&mut self.tx_seen) || direct
    }
}

impl NbiFailure {
    /// Records `status` unless it is `Ok` or a failure is recorded already.
    pub fn record(&self, status: Status) {
        if status != Status::Ok {
            let _ = self.0.compare_exchange(
                0,
                status.code(),
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    }

    /// Takes the recorded failure, if any.
    pub fn take(&self) -> Option<Status> {
        match self.0.swap(0, std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            code => Some(Status::from_code(code).unwrap_or(Status::IoError)),
        }
    }
}

impl OpSink for NbiFailure {
    fn complete(&self, _held: &WorkerLocked, status: Status, _info: OpInfo) -> AfterUnlock {
        self.record(status);
        AfterUnlock::NOTHING
    }
}

/// The sink of a large implicit put: owns the copy of the caller's bytes that its fragments are
/// sent from, until the target acknowledged them.
pub(crate) struct NbiCopy {
    pub failure: Arc<NbiFailure>,
    pub bytes: Box<[u8]>,
}

impl OpSink for NbiCopy {
    fn complete(&self, held: &WorkerLocked, status: Status, info: OpInfo) -> AfterUnlock {
        self.failure.complete(held, status, info)
    }
}

/// An operation waiting for something from the peer or the transport.
pub(crate) struct OutOp {
    pub ep: u64,
    pub sink: Arc<dyn OpSink>,
    pub kind: OutKind,
    /// Zero-copy fragments the transport still holds; the buffer must outlive them.
    pub tokens: u32,
    /// Set when the operation has its final status but waits for `tokens` to return.
    pub result: Option<(Status, OpInfo)>,
}

pub(crate) enum OutKind {
    /// An eager frame queued before the endpoint connected.
    Queued,
    /// A synchronous eager tag send, waiting for the receiver's match.
    SyncAck,
    /// A buffer sent in fragments: a rendezvous payload (after `Rtr`), a stream or a put.
    Send { ptr: *const u8, len: usize, sent: usize, frag: FragKind, acked: bool },
    /// A rendezvous sender waiting for the receiver's `Rtr`.
    AwaitRtr { ptr: *const u8, len: usize },
    /// A get waiting for its data and its ack.
    Get { ptr: *mut u8, len: usize, received: usize },
    /// The receiving side of a rendezvous: the peer sends `accept` bytes into `ptr`; `received`
    /// counts the bytes announced so far (placed ones land when their token returns).
    RndvRecv { ptr: *mut u8, accept: usize, total: usize, received: usize, sender_tag: u64 },
    /// A put or atomic waiting for its ack.
    RmaAck,
    /// An endpoint flush: done when acked and no older operation of the endpoint remains.
    Flush { acked: bool, parent: Option<u64> },
    /// A worker flush over several endpoints.
    FlushAll { remaining: usize },
    /// An endpoint close with flush.
    Close,
}

// SAFETY: the raw pointers are into the buffer owned by the operation's request cell (`sink`),
// which lives at least as long as this record; they carry no thread affinity.
unsafe impl Send for OutKind {}

impl OutKind {
    /// Receives a peer may still be sending into: not something the endpoint's flush or close
    /// waits for (UCP flushes outgoing operations only).
    pub fn is_incoming(&self) -> bool {
        matches!(self, OutKind::RndvRecv { .. })
    }
}

/// What the fragments of an `OutKind::Send` are.
#[derive(Clone, Copy)]
pub(crate) enum FragKind {
    Rndv { recv_req: u64 },
    Stream,
    Put { region: u64, key: [u8; 16], addr: u64 },
}

/// A receive posted to the tag matcher.
pub(crate) struct PostedTagRecv {
    pub sink: Arc<dyn OpSink>,
    pub ptr: *mut u8,
    pub cap: usize,
}

// SAFETY: as for `StreamRecv`.
unsafe impl Send for PostedTagRecv {}

/// A tag message that arrived before its receive.
pub(crate) enum Unexpected {
    Eager { data: Vec<u8>, sync_req: Option<u64> },
    Rts { sender_req: u64, total_len: u64 },
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
        ep: u64,
        handler: ErrHandler,
        status: Status,
    },
    ConnRequest {
        listener: ListenerId,
        request: Box<crate::listener::ConnRequestData>,
    },
    Accepted {
        listener: ListenerId,
        ep: u64,
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
    pub ep: u64,
    /// Where to dial.
    pub lane: Lane,
    /// The accept frame's payload.
    pub accept: Vec<u8>,
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

/// A reply built while the transport is being polled, sent right after.
pub(crate) struct OutFrame {
    pub link: LinkId,
    pub header: [u8; MAX_HEADER_LEN],
    pub header_len: u8,
    pub payload: Option<Vec<u8>>,
}

/// Everything but the transport.
pub(crate) struct State {
    pub ctx: Arc<ContextInner>,
    pub eps: FastMap<u64, EpState>,
    pub link_eps: FastMap<LinkId, u64>,
    /// Connections accepted by a listener, waiting for their connection request.
    pub incoming: PendingConnections,
    /// Links whose handshake completed during the poll: the transport is told after it (see
    /// `Transport::link_established`), before anything is sent on them.
    pub established: Vec<LinkId>,
    pub listeners: FastMap<ListenerId, ListenerEntry>,
    pub tags: TagMatcher<PostedTagRecv, Unexpected>,
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
    pub help_mappings: FastMap<u64, crate::worker::put_help::KeptSources>,
    pub ops: FastMap<u64, OutOp>,
    pub deferred: Vec<Deferred>,
    pub out: Vec<OutFrame>,
    /// Accepts to send on a new shared-memory link (see [`LaneDial`]), before `out`.
    pub lane_dials: Vec<LaneDial>,
    /// Client endpoints that moved to a shared-memory lane during the poll, with the link they
    /// left: its socket addresses are kept for `query`, then it is closed.
    pub lanes_taken: Vec<(u64, LinkId)>,
    /// The link and endpoint of the last frame received: most frames come on the link of the one
    /// before. Only a hint: a hit is checked against the endpoint's current link.
    pub rx_hint: (LinkId, u64),
    /// Messages the rung path took (see `worker::rung`), for its tests.
    #[cfg(test)]
    pub rung_takes: u64,
    /// The coarse clock at the last run of the timers (see `WorkerShared::full_progress`).
    pub last_tick_coarse: i64,
    /// Set when an endpoint starts a flush close; cleared once none is closing.
    pub closes_pending: bool,
    /// The transports' doorbell generation the worker's quiet watch was last given.
    pub doorbell_generation: u64,
    /// Client endpoints still connecting, by the token their request carries.
    pub connecting: FastMap<u64, u64>,
    /// The member of the transport set that is shared memory, if this worker has it.
    pub shm_member: Option<usize>,
    /// The member of the transport set that is DPDK, if this worker has it.
    pub dpdk_member: Option<usize>,
    pub events: usize,
    pub rndv_thresh: usize,
    pub max_payload: usize,
    /// Largest payload of a placed fragment; 0 when the transport cannot place.
    pub max_placed: usize,
    pub keepalive: Duration,
    pub next_tick: Instant,
    /// Reused byte buffers (AM and unexpected eager copies), so the steady state does not allocate.
    pub pool: Arc<Mutex<Vec<Vec<u8>>>>,
    pub scratch: Vec<u8>,
    /// Endpoints with bulk jobs to pace.
    pub bulk_active: FastSet<u64>,
    /// Endpoints whose connection was accepted during the poll: send what they queued.
    pub to_flush: Vec<u64>,
    /// Links to close after the poll.
    pub to_close: Vec<(LinkId, bool)>,
    /// This worker's address, sent in handshakes.
    pub address: zcx_control::WorkerAddressWire,
    /// Values to drop once the lock is released (see `CoreGuard`).
    pub graveyard: Vec<Box<dyn Send>>,
    next_id: u64,
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
    /// The after-poll work (replies, flushes, lane switches, closes, bulk transfers) is done.
    pub fn nothing_after_poll(&self) -> bool {
        self.out.is_empty()
            && self.lane_dials.is_empty()
            && self.to_flush.is_empty()
            && self.lanes_taken.is_empty()
            && self.to_close.is_empty()
            && self.bulk_active.is_empty()
            && !self.closes_pending
            && self.help_announced.is_empty()
            && self.established.is_empty()
    }

    pub fn new(
        ctx: Arc<ContextInner>,
        address: zcx_control::WorkerAddressWire,
        caps: &zcx_dataplane::Caps,
    ) -> State {
        let max_frame = caps.max_frame;
        let config = &ctx.config;
        let max_payload = max_payload(max_frame);
        let incoming = PendingConnections::new(config.max_pending_connections(), config.handshake_timeout());
        State {
            rndv_thresh: config.rndv_thresh().min(max_payload),
            keepalive: config.keepalive_interval(),
            ctx,
            eps: FastMap::default(),
            link_eps: FastMap::default(),
            incoming,
            established: Vec::new(),
            listeners: FastMap::default(),
            tags: TagMatcher::new(),
            am_handlers: Arc::default(),
            am_queued: false,
            lent: None,
            lent_tables: Vec::new(),
            help_announced: Vec::new(),
            help_mappings: FastMap::default(),
            ops: FastMap::default(),
            deferred: Vec::new(),
            out: Vec::new(),
            lane_dials: Vec::new(),
            lanes_taken: Vec::new(),
            closes_pending: false,
            doorbell_generation: u64::MAX,
            last_tick_coarse: 0,
            rx_hint: (LinkId(u32::MAX), 0),
            #[cfg(test)]
            rung_takes: 0,
            connecting: FastMap::default(),
            shm_member: None,
            dpdk_member: None,
            events: 0,
            max_payload,
            max_placed: caps.max_placed,
            next_tick: Instant::now(),
            pool: Arc::new(Mutex::new(Vec::new())),
            scratch: Vec::new(),
            bulk_active: FastSet::default(),
            to_flush: Vec::new(),
            to_close: Vec::new(),
            address,
            graveyard: Vec::new(),
            next_id: 1,
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

    /// Removes an endpoint's state, dropping it after the lock is released.
    pub fn remove_ep(&mut self, ep: u64) {
        if let Some(state) = self.eps.remove(&ep) {
            state.stop_direct();
            self.bury(state);
        }
        if let Some(sources) = self.help_mappings.remove(&ep) {
            self.bury(sources);
        }
    }

    /// A fresh id for an endpoint, an operation or a receive (never 0, never reused).
    pub fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// A byte buffer from the pool holding a copy of `bytes`.
    pub fn pooled_copy(&self, bytes: &[u8]) -> Vec<u8> {
        State::pooled_copy_from(&self.pool, bytes)
    }

    /// A copy of `bytes` in a buffer from `pool`.
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

    /// Queues a header-only (or small) reply built while polling.
    pub fn reply(&mut self, link: LinkId, op: &Op, payload: Option<Vec<u8>>) {
        let mut header = [0u8; MAX_HEADER_LEN];
        let header_len = op.encode(&mut header) as u8;
        self.out.push(OutFrame { link, header, header_len, payload });
    }

    /// Records an operation's final status; it completes now, or when its fragments return.
    pub fn finish_op(&mut self, id: u64, status: Status, info: OpInfo) {
        let Some(op) = self.ops.get_mut(&id) else { return };
        if op.result.is_none() {
            op.result = Some((status, info));
        }
        if op.tokens == 0 {
            self.complete_op(id);
        }
    }

    /// Removes a finished operation and completes its request.
    fn complete_op(&mut self, id: u64) {
        let Some(op) = self.ops.remove(&id) else { return };
        let (status, info) = op.result.unwrap_or((Status::Ok, OpInfo::default()));
        self.complete_sink(&op.sink, status, info);
        let ep = op.ep;
        if let OutKind::Flush { parent: Some(parent), .. } = op.kind {
            self.child_flush_done(parent, status);
        }
        self.recheck_flushes(ep);
    }

    /// Completes a request and queues its callback.
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

    /// One endpoint's part of a worker flush ended with `status`: the first failure is the
    /// worker flush's status.
    fn child_flush_done(&mut self, parent: u64, status: Status) {
        let done = match self.ops.get_mut(&parent) {
            Some(OutOp { kind: OutKind::FlushAll { remaining }, result, .. }) => {
                if status != Status::Ok && result.is_none() {
                    *result = Some((status, OpInfo::default()));
                }
                *remaining -= 1;
                *remaining == 0
            }
            _ => false,
        };
        if done {
            self.finish_op(parent, Status::Ok, OpInfo::default());
        }
    }

    /// True while an operation of endpoint `ep` older than `id` (other than flushes and closes)
    /// is in flight.
    fn has_older_ops(&self, ep: u64, id: u64) -> bool {
        self.ops.iter().any(|(&other, op)| {
            other < id
                && op.ep == ep
                && !op.kind.is_incoming()
                && !matches!(op.kind, OutKind::Flush { .. } | OutKind::Close)
        })
    }

    /// Completes the endpoint's acked flushes that no longer wait for older operations, and a
    /// pending close once nothing is in flight.
    pub fn recheck_flushes(&mut self, ep: u64) {
        let ready: Vec<u64> = self
            .ops
            .iter()
            .filter(|(_, op)| op.ep == ep && matches!(op.kind, OutKind::Flush { acked: true, .. }))
            .map(|(&id, _)| id)
            .filter(|&id| !self.has_older_ops(ep, id))
            .collect();
        if ready.is_empty() {
            return;
        }
        // Implicit puts older than the flush are all done: their failure, if any, is its status.
        let status = self.eps.get(&ep).and_then(|e| e.nbi.take()).unwrap_or(Status::Ok);
        for id in ready {
            self.finish_op(id, status, OpInfo::default());
        }
    }

    /// Registers an operation and returns its id.
    pub fn add_op(&mut self, ep: u64, sink: Arc<dyn OpSink>, kind: OutKind) -> u64 {
        let id = self.new_id();
        self.insert_op(id, ep, sink, kind);
        id
    }

    /// Registers an operation under an id from [`State::new_id`].
    pub fn insert_op(&mut self, id: u64, ep: u64, sink: Arc<dyn OpSink>, kind: OutKind) {
        self.ops.insert(id, OutOp { ep, sink, kind, tokens: 0, result: None });
    }

    /// The endpoint's state, if it can carry a new operation; otherwise the status that operation
    /// fails with.
    pub fn usable_ep(&self, ep: u64) -> Result<&EpState, Status> {
        match self.eps.get(&ep) {
            None => Err(Status::NotConnected),
            Some(state) => match state.phase {
                Phase::Dead(status) => Err(status),
                Phase::Closing => Err(Status::Canceled),
                _ => Ok(state),
            },
        }
    }
}

/// [`State::usable_ep`], mutable and borrowing only the endpoint table, so the caller may use the state's
/// other fields (its scratch buffer) while it holds the endpoint; with whether it still connects
/// (a usable endpoint is `Ready` or `Connecting`), from the same match of its phase.
#[inline]
pub(crate) fn usable_in(eps: &mut FastMap<u64, EpState>, ep: u64) -> Result<(&mut EpState, bool), Status> {
    match eps.get_mut(&ep) {
        None => Err(Status::NotConnected),
        Some(state) => match state.phase {
            Phase::Ready => Ok((state, false)),
            Phase::Connecting => Ok((state, true)),
            Phase::Dead(status) => Err(status),
            Phase::Closing => Err(Status::Canceled),
        },
    }
}

/// Sends one frame on an endpoint: at once when it is connected, queued (copying borrowed bytes)
/// while it still connects. Returns whether the frame left now.
pub(crate) fn send_on_ep(
    tl: &mut TransportSet,
    st: &mut State,
    ep_id: u64,
    op: &Op,
    payload: Payload<'_>,
    completes: Option<u64>,
) -> Result<SendOutcome, Status> {
    let ep = st.eps.get_mut(&ep_id).ok_or(Status::NotConnected)?;
    send_on_state(tl, ep, op, payload, completes)
}

/// [`send_on_ep`] for an endpoint already looked up.
pub(crate) fn send_on_state(
    tl: &mut TransportSet,
    ep: &mut EpState,
    op: &Op,
    payload: Payload<'_>,
    completes: Option<u64>,
) -> Result<SendOutcome, Status> {
    let mut header = [0u8; MAX_HEADER_LEN];
    let header_len = op.encode(&mut header);
    send_encoded_on_state(tl, ep, &header[..header_len], payload, completes)
}

/// [`send_on_state`] with the header already encoded (at most [`MAX_HEADER_LEN`] bytes).
pub(crate) fn send_encoded_on_state(
    tl: &mut TransportSet,
    ep: &mut EpState,
    header: &[u8],
    payload: Payload<'_>,
    completes: Option<u64>,
) -> Result<SendOutcome, Status> {
    match ep.phase {
        Phase::Ready | Phase::Closing => send_ready(tl, ep, header, payload),
        Phase::Connecting => Ok(queue_frame(ep, header, payload, completes)),
        Phase::Dead(status) => Err(status),
    }
}

/// Sends one frame on an endpoint the caller found `Ready` (or `Closing`): straight to the
/// transport. The eager send paths call this directly, skipping the phase match and the generic
/// header encoding they do not need.
#[inline]
pub(crate) fn send_ready(
    tl: &mut TransportSet,
    ep: &mut EpState,
    header: &[u8],
    payload: Payload<'_>,
) -> Result<SendOutcome, Status> {
    debug_assert!(matches!(ep.phase, Phase::Ready | Phase::Closing));
    ep.tx_seen = true;
    match tl.send(ep.link, header, payload) {
        Ok(outcome) => Ok(outcome),
        Err(error) => Err(status_of_cold(error)),
    }
}

/// [`status_of`] out of line, for the send paths' rare failures.
#[cold]
#[inline(never)]
fn status_of_cold(error: TlError) -> Status {
    status_of(error)
}

/// Queues a frame on an endpoint that still connects, copying borrowed bytes.
#[cold]
#[inline(never)]
fn queue_frame(ep: &mut EpState, header: &[u8], payload: Payload<'_>, completes: Option<u64>) -> SendOutcome {
    let mut buf = [0u8; MAX_HEADER_LEN];
    buf[..header.len()].copy_from_slice(header);
    let (payload, outcome) = match payload {
        Payload::None => (QueuedPayload::None, SendOutcome::Done),
        Payload::Copy(bytes) => (QueuedPayload::Owned(bytes.to_vec()), SendOutcome::Done),
        Payload::Zcopy(z) => {
            (QueuedPayload::Zcopy { ptr: z.ptr(), len: z.len(), token: z.token() }, SendOutcome::InFlight)
        }
    };
    ep.queued.push_back(QueuedFrame { header: buf, header_len: header.len() as u8, payload, completes });
    outcome
}

/// Sends the frames an endpoint queued while connecting, in order.
pub(crate) fn flush_queued(tl: &mut TransportSet, st: &mut State, ep_id: u64) {
    let Some(ep) = st.eps.get_mut(&ep_id) else { return };
    let link = ep.link;
    if !ep.bulk.is_empty() {
        st.bulk_active.insert(ep_id);
    }
    let frames = std::mem::take(&mut ep.queued);
    for frame in frames {
        let header = &frame.header[..frame.header_len as usize];
        let sent = match &frame.payload {
            QueuedPayload::None => tl.send(link, header, Payload::None),
            QueuedPayload::Owned(bytes) => tl.send(link, header, Payload::Copy(bytes)),
            QueuedPayload::Zcopy { ptr, len, token } => {
                // SAFETY: the payload is the buffer of operation `token`, whose record keeps it alive
                // and unchanged until the transport returns the token.
                let z = unsafe { ZcopyPayload::new(*ptr, *len, *token) };
                tl.send(link, header, Payload::Zcopy(z))
            }
        };
        if let QueuedPayload::Zcopy { token, .. } = frame.payload {
            if !matches!(sent, Ok(SendOutcome::InFlight)) {
                // The token was counted when the frame was queued; it will not come back.
                return_token(st, token);
            }
        }
        if let Some(op) = frame.completes {
            let status = match sent {
                Ok(_) => Status::Ok,
                Err(e) => status_of(e),
            };
            st.finish_op(op, status, OpInfo::default());
        }
    }
}

/// A placed fragment of operation `token` never fully arrived (its link failed): the operation
/// fails with `status` whatever it had concluded, once its other fragments are back.
pub(crate) fn fail_token(st: &mut State, token: u64, status: Status) {
    if let Some(op) = st.ops.get_mut(&token) {
        op.result = Some((status, OpInfo::default()));
    }
    return_token(st, token);
}

/// A zero-copy fragment of operation `token` is no longer used by the transport.
pub(crate) fn return_token(st: &mut State, token: u64) {
    let Some(op) = st.ops.get_mut(&token) else { return };
    op.tokens = op.tokens.saturating_sub(1);
    if op.tokens == 0 && op.result.is_some() {
        st.complete_op(token);
    }
}
