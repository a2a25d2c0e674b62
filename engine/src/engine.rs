//! The engine's tables and the rules every operation follows: how an operation ends (exactly
//! once, after its lent bytes came back), how an endpoint fails, how the outbox is filled.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use zcx_dataplane::proto::wire::Op;
use zcx_dataplane::proto::TagMatcher;
use zcx_dataplane::{FastMap, FastSet, LinkId, RemoteAccessTable};

use crate::buffer::{RecvBuffer, SendBuffer};
use crate::caps::LinkCaps;
use crate::endpoints::EndpointTable;
use crate::ids::{Cookie, EndpointId, IdSource, OpId};
use crate::op_table::OpTable;
use crate::output::{Completion, Event, Header, OpInfo, Payload, RmaRequest, Transmit};
use crate::stream::StreamRx;
use crate::Status;

/// Tunables of an engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Borrowed fragments one operation may have in the caller's hands at once: a small message
    /// sent meanwhile waits behind this many fragments at most.
    pub fragment_window: u32,
    /// Send a keepalive on an endpoint idle this long (every endpoint: its peer may watch it);
    /// `None`: never, and nothing times out.
    pub keepalive_interval: Option<Duration>,
    /// Fail an endpoint (error mode peer) that received nothing for this long.
    pub keepalive_timeout: Duration,
    /// Largest receiver-pull stream send accepted: its bytes are read into an engine buffer
    /// before the stream's receives take them, so a peer may not make it allocate more.
    pub max_stream_pull: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            fragment_window: 4,
            keepalive_interval: None,
            keepalive_timeout: Duration::from_secs(30),
            max_stream_pull: 64 << 20,
        }
    }
}

/// Where an endpoint is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the server's answer: transmits are held.
    Connecting,
    /// Carrying traffic.
    Ready,
    /// Closing with flush: no new operations; closes once the in-flight ones are done.
    Closing,
    /// Failed or closed, with the status later operations fail with.
    Dead(Status),
}

/// How [`crate::Engine::close`] closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseMode {
    /// `UCP_EP_CLOSE_MODE_FLUSH`: finish in-flight operations, then tell the peer.
    Flush,
    /// `UCP_EP_CLOSE_MODE_FORCE`: cancel everything and drop the link.
    Force,
}

/// How a command started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// It completed at once (an unexpected eager message taken, buffered stream bytes).
    Done(Status, OpInfo),
    /// It completes later, with a [`Completion`] for this id.
    Pending(OpId),
}

/// What [`crate::Engine::tag_send_now`] or [`crate::Engine::am_send_now`] did with a message.
#[derive(Debug)]
pub enum Sent {
    /// The message goes eagerly and nothing the engine holds must leave before it: this is its
    /// frame, whose payload is the caller's bytes ([`crate::Payload::Inline`]; an active
    /// message's user header goes before them), to send (or copy) before the command returns to
    /// its user. The send is done; no completion follows.
    Now(Transmit),
    /// As [`Sent::Now`], for a send that completes later (a synchronous one, once its receiver
    /// acknowledged it): the frame to send before the command returns, and the operation whose
    /// completion follows.
    NowAwaiting(Transmit, OpId),
    /// What the queued form of the send returns: its frames go through the outbox.
    Queued(Start),
}

/// The sizes of the engine's tables, for leak checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableCounts {
    /// Endpoints, dead ones included until released.
    pub endpoints: usize,
    /// Links with an endpoint.
    pub links: usize,
    /// Operations in flight (waiting tag receives, incoming rendezvous and AM data descriptors
    /// included).
    pub ops: usize,
    /// Tag receives waiting for a message.
    pub tag_expected: usize,
    /// Tag messages waiting for a receive (also those a probe took out).
    pub tag_unexpected: usize,
    /// Stream receives waiting, over all endpoints.
    pub stream_recvs: usize,
    /// Unread stream bytes, over all endpoints.
    pub stream_unread: usize,
    /// Transmits, RMA requests and events not drained yet.
    pub outbox: usize,
    /// RMA operations held behind fences.
    pub fenced: usize,
    /// Copies of implicit puts' bytes.
    pub copies: usize,
}

impl TableCounts {
    /// True when nothing at all is held: no endpoint, operation, queue entry or output.
    pub fn is_empty(&self) -> bool {
        *self == TableCounts::default()
    }
}

/// An endpoint's state.
pub(crate) struct Endpoint {
    pub link: LinkId,
    pub caps: LinkCaps,
    pub phase: Phase,
    /// `UCP_ERR_HANDLING_MODE_PEER`: failures are reported and keepalive runs.
    pub err_mode_peer: bool,
    /// The server answered (always true for a server's endpoint): until then transmits are held,
    /// also when the endpoint started closing meanwhile.
    pub answered: bool,
    /// The API dropped its handle: remove the endpoint once dead.
    pub released: bool,
    /// Transmits made while connecting, sent once ready.
    pub held: VecDeque<Transmit>,
    /// Operations sending fragments, in order; the front one sends.
    pub bulk: VecDeque<OpId>,
    /// RMA operations held behind a fence, with `None` for the fences themselves.
    pub fenced: VecDeque<Option<OpId>>,
    /// RMA operations issued and not completed.
    pub rma_in_flight: u32,
    /// Flushes waiting (so completions look for ready flushes only when there are some).
    pub flushes: u32,
    /// The first refusal of an implicit put since the last flush: that flush's status.
    pub implicit_failure: Option<Status>,
    /// Implicit puts sent untracked (the target answers only a refusal), counted.
    pub untracked_puts: u64,
    /// How many of `untracked_puts` a completed flush covers (the count when it started).
    pub flushed_puts: u64,
    pub stream: StreamRx,
    pub rx_seen: bool,
    pub tx_seen: bool,
    pub last_rx: Option<Instant>,
    pub last_tx: Option<Instant>,
}

/// What an operation is waiting for.
pub(crate) enum OpKind {
    /// An eager send made while its endpoint connects: done once the server answered and the
    /// held frame went into the outbox (or with the endpoint's failure).
    Held { len: usize },
    /// A synchronous eager send: done when the receiver matched it.
    SyncEager { len: usize },
    /// A sender-push rendezvous sender waiting for the receiver's `Rtr`.
    AwaitRtr { buf: SendBuffer },
    /// A buffer going out in fragments: rendezvous data, a large stream, an emulated put.
    Push { buf: SendBuffer, len: usize, sent: usize, frag: Frag },
    /// A receiver-pull rendezvous sender waiting for the receiver's `PullDone`.
    AwaitPullDone { len: usize },
    /// A sender-push rendezvous receive (tag, or AM data taken).
    PushRecv { buf: RecvBuffer, accept: usize, total: usize, received: usize, sender_tag: u64 },
    /// A receiver-pull receive whose RMA get is out.
    PullRecv { accept: usize, total: usize, sender_req: u64, sender_tag: u64 },
    /// A rendezvous active message the API has not taken or declined yet.
    AmRndv { sender_req: u64, total: u64, pull: Option<(u64, Arc<[u8]>)> },
    /// The target's answer to a peer's emulated get, going out in fragments.
    GetReply { req: u64, region: u64, key: [u8; 16], addr: u64, len: u64, offset: u64 },
    /// Stream bytes being written into an engine buffer that holds their place in the stream:
    /// a receiver-pull stream send's (`sender_req` names it, to answer `PullDone`) or a placed
    /// `Stream` fragment's (`None`).
    StreamPull { bytes: Vec<u8>, sender_req: Option<u64> },
    /// A placed `Stream` fragment being written straight into the stream receive that was first
    /// in the queue (out of it meanwhile; the operation has the receive's id): `len` bytes at
    /// its `filled`.
    StreamPlaceInto { recv: crate::stream::StreamRecv, len: usize },
    /// A receiver-pull stream send being read straight into the stream receive it completes
    /// (the operation has the receive's id); `length`: the receive's bytes once it is done.
    StreamPullInto { sender_req: u64, length: usize },
    /// An emulated get: data fragments, then the ack.
    Get { buf: RecvBuffer, received: usize },
    /// An emulated atomic (or empty put) waiting for its ack.
    Emulated,
    /// A native RMA waiting for `rma_done`.
    Native,
    /// An endpoint flush: done when acked and no older operation of the endpoint is left.
    /// `unreported`: reported to nobody (the flush a flush close starts with, an ordering
    /// flush); `covers`: the endpoint's untracked puts when it started, which it covers once
    /// done with OK.
    Flush { acked: bool, parent: Option<OpId>, unreported: bool, covers: u64 },
    /// A worker flush over several endpoints.
    FlushAll { remaining: usize },
    /// A close with flush.
    Close,
}

/// What the fragments of an [`OpKind::Push`] are.
#[derive(Clone, Copy)]
pub(crate) enum Frag {
    Rndv { recv_req: u64 },
    Stream,
    Put { region: u64, key: [u8; 16], addr: u64 },
}

impl OpKind {
    /// Operations a peer drives into us: an endpoint flush or close does not wait for them.
    pub(crate) fn is_incoming(&self) -> bool {
        matches!(
            self,
            OpKind::PushRecv { .. }
                | OpKind::PullRecv { .. }
                | OpKind::AmRndv { .. }
                | OpKind::StreamPull { .. }
                | OpKind::StreamPullInto { .. }
                | OpKind::StreamPlaceInto { .. }
                | OpKind::GetReply { .. }
        )
    }

    /// A placed `Stream` fragment's operation (answered by [`Engine::stream_place_done`]).
    pub(crate) fn is_stream_placement(&self) -> bool {
        matches!(self, OpKind::StreamPlaceInto { .. } | OpKind::StreamPull { sender_req: None, .. })
    }

    /// Operations nobody outside the engine waits for: they end without a completion.
    fn is_internal(&self) -> bool {
        matches!(
            self,
            OpKind::AmRndv { .. }
                | OpKind::StreamPull { .. }
                | OpKind::GetReply { .. }
                | OpKind::Flush { unreported: true, .. }
        )
    }
}

/// One operation in flight.
pub(crate) struct Operation {
    pub ep: Option<EndpointId>,
    pub kind: OpKind,
    /// Payloads, placements and RMA requests the caller still holds; the buffer must outlive them.
    pub tokens: u32,
    /// An RMA operation: counted in its endpoint's `rma_in_flight` once issued.
    pub rma_issued: bool,
    /// An implicit put (`put_nbi`): it ends without a completion, its failure going to the
    /// endpoint's next flush, and its bytes are the engine's copy in `implicit_copies`.
    pub implicit: bool,
    /// An implicit get (`get_nbi`): it completes as any get, and a failure also goes to the
    /// endpoint's next flush, which is how its caller learns of it.
    pub flush_reports: bool,
    /// The final status, once known, while tokens are out.
    pub result: Option<(Status, OpInfo)>,
    /// The API's name for the operation, handed back in its completion.
    pub cookie: Option<Cookie>,
}

/// A tag message that arrived before its receive.
pub(crate) enum Unexpected {
    Eager { data: Vec<u8>, sync_req: Option<u64> },
    Rts { sender_req: u64, total_len: u64, pull: Option<(u64, Arc<[u8]>)> },
}

/// Byte vectors of at most [`POOL_SMALL_CAPACITY`] bytes the engine keeps for reuse.
const POOL_SMALL: usize = 4096;
const POOL_SMALL_CAPACITY: usize = 1024;
/// Larger byte vectors (up to [`POOL_LARGE_CAPACITY`]) it keeps while its pool is shorter than this.
const POOL_LARGE: usize = 64;
const POOL_LARGE_CAPACITY: usize = 256 << 10;
/// Buffers above [`POOL_LARGE_CAPACITY`], up to [`LARGE_SPARE_CAPACITY`], for stream bytes read
/// ahead of their receives and for the answers to gets: kept up to [`LARGE_SPARE_BYTES`] in all,
/// since a sender running ahead of its receiver fills one per message, the answers to a window
/// of large gets take one each, and a fresh one faults in every page it is written to (and
/// gives them back to the kernel when freed).
const LARGE_SPARE_BYTES: usize = 16 << 20;
const LARGE_SPARE_CAPACITY: usize = 4 << 20;

/// The sans-IO protocol engine of one worker. See the crate documentation.
pub struct Engine {
    pub(crate) config: EngineConfig,
    pub(crate) access: Arc<RemoteAccessTable>,
    pub(crate) op_ids: IdSource,
    pub(crate) eps: EndpointTable<Endpoint>,
    pub(crate) link_eps: FastMap<LinkId, EndpointId>,
    pub(crate) ops: OpTable,
    pub(crate) tags: TagMatcher<(OpId, RecvBuffer), Unexpected>,
    pub(crate) transmits: VecDeque<Transmit>,
    pub(crate) rmas: VecDeque<RmaRequest>,
    pub(crate) events: crate::output::Events,
    /// Endpoints with fragments to send once the outbox drains.
    pub(crate) bulk_active: FastSet<EndpointId>,
    /// Byte vectors for unexpected messages and stream bytes, reused.
    pub(crate) pool: Vec<Vec<u8>>,
    /// Large buffers kept for reuse ([`Engine::large_spare`]).
    large_spares: Vec<Vec<u8>>,
    /// The capacity of `large_spares`, in bytes.
    large_spare_bytes: usize,
    /// The endpoint the last frame came for, on which link: most frames come on the link the
    /// previous one came on.
    pub(crate) rx_hint: Option<(LinkId, EndpointId)>,
    /// Tag messages taken out of the matcher by a probe, waiting to be received or dropped.
    pub(crate) probed: FastMap<OpId, zcx_dataplane::proto::Message<Unexpected>>,
    /// The engine's copies of the bytes of large implicit puts, until they are acknowledged.
    pub(crate) implicit_copies: FastMap<OpId, Vec<u8>>,
    /// How each RMA operation a fence holds will leave once released.
    pub(crate) fenced_issues: FastMap<OpId, crate::rma::Issue>,
}

impl Engine {
    /// An engine with no endpoint. `access` is the context's remote-access table: the regions
    /// peers' emulated puts, gets and atomics may touch.
    pub fn new(config: EngineConfig, access: Arc<RemoteAccessTable>) -> Engine {
        Engine {
            config,
            access,
            op_ids: IdSource::new(),
            eps: EndpointTable::default(),
            link_eps: FastMap::default(),
            ops: OpTable::default(),
            tags: TagMatcher::new(),
            transmits: VecDeque::new(),
            rmas: VecDeque::new(),
            events: crate::output::Events::default(),
            bulk_active: FastSet::default(),
            pool: Vec::new(),
            large_spares: Vec::new(),
            large_spare_bytes: 0,
            fenced_issues: FastMap::default(),
            implicit_copies: FastMap::default(),
            probed: FastMap::default(),
            rx_hint: None,
        }
    }

    /// Adds an endpoint on `link`: `Connecting` (a client waiting for the server's answer; its
    /// transmits are held until [`Engine::endpoint_ready`]) or `Ready` (a server's endpoint).
    pub fn add_endpoint(
        &mut self,
        link: LinkId,
        caps: LinkCaps,
        connecting: bool,
        err_mode_peer: bool,
    ) -> EndpointId {
        let ep = Endpoint {
            link,
            caps,
            phase: if connecting { Phase::Connecting } else { Phase::Ready },
            err_mode_peer,
            answered: !connecting,
            released: false,
            held: VecDeque::new(),
            bulk: VecDeque::new(),
            fenced: VecDeque::new(),
            rma_in_flight: 0,
            flushes: 0,
            implicit_failure: None,
            untracked_puts: 0,
            flushed_puts: 0,
            stream: StreamRx::default(),
            rx_seen: false,
            tx_seen: false,
            last_rx: None,
            last_tx: None,
        };
        let id = self.eps.insert(ep);
        self.link_eps.insert(link, id);
        id
    }

    /// The server answered a connecting endpoint, on `link` with `caps` (the same link, or a
    /// faster lane): held transmits go out and fragments start.
    pub fn endpoint_ready(&mut self, ep_id: EndpointId, link: LinkId, caps: LinkCaps) {
        let Some(ep) = self.eps.get_mut(&ep_id) else { return };
        if ep.answered || matches!(ep.phase, Phase::Dead(_)) {
            return;
        }
        ep.answered = true;
        if ep.link != link {
            self.link_eps.remove(&ep.link);
            self.link_eps.insert(link, ep_id);
            ep.link = link;
        }
        ep.caps = caps;
        if ep.phase == Phase::Connecting {
            ep.phase = Phase::Ready;
        }
        ep.rx_seen = true;
        for mut transmit in ep.held.drain(..) {
            transmit.link = link;
            transmit.placed &= caps.placed;
            self.transmits.push_back(transmit);
        }
        let held: Vec<(OpId, usize)> = self
            .ops
            .iter()
            .filter_map(|(&id, op)| match op.kind {
                OpKind::Held { len } if op.ep == Some(ep_id) => Some((id, len)),
                _ => None,
            })
            .collect();
        for (id, length) in held {
            self.finish_op(id, Status::Ok, OpInfo { length, ..OpInfo::default() });
        }
        self.bulk_active.insert(ep_id);
        self.pump(ep_id);
        self.try_finish_close(ep_id);
    }

    /// Merges endpoint `from` into the connecting endpoint `into`: both connect this worker to
    /// the same peer worker (`from` was accepted from the peer's request, `into` is the
    /// application's own, which the peer answered by pairing it with that request). `into` takes
    /// `from`'s link, the stream bytes that arrived on it and its operations, and is ready on it;
    /// `from`'s id finds `into` from then on, and `into`'s own link is left for the caller to
    /// close. Nothing is reported about `from`. Returns false, changing nothing, when `from` is
    /// not ready or `into` is not waiting for its answer.
    pub fn absorb_endpoint(&mut self, into: EndpointId, from: EndpointId) -> bool {
        if into == from {
            return false;
        }
        let from_ready = matches!(self.eps.get(&from), Some(ep) if ep.phase == Phase::Ready && ep.answered);
        let into_waiting =
            matches!(self.eps.get(&into), Some(ep) if !ep.answered && !matches!(ep.phase, Phase::Dead(_)));
        if !(from_ready && into_waiting) {
            return false;
        }
        let Some(old) = self.eps.merge(from, into) else { return false };
        for op in self.ops.values_mut() {
            if op.ep == Some(from) {
                op.ep = Some(into);
            }
        }
        if self.bulk_active.remove(&from) {
            self.bulk_active.insert(into);
        }
        self.rx_hint = None;
        let Some(ep) = self.eps.get_mut(&into) else { return false };
        ep.stream.absorb(old.stream);
        let mut bulk = old.bulk;
        bulk.append(&mut ep.bulk);
        ep.bulk = bulk;
        let mut fenced = old.fenced;
        fenced.append(&mut ep.fenced);
        ep.fenced = fenced;
        ep.rma_in_flight += old.rma_in_flight;
        ep.flushes += old.flushes;
        ep.implicit_failure = ep.implicit_failure.or(old.implicit_failure);
        // A merged endpoint's untracked puts are covered once a flush of the survivor covers
        // all of them.
        ep.untracked_puts += old.untracked_puts;
        ep.flushed_puts = ep.flushed_puts.min(old.flushed_puts);
        ep.tx_seen |= old.tx_seen;
        ep.last_rx = old.last_rx;
        ep.last_tx = old.last_tx.or(ep.last_tx);
        self.endpoint_ready(into, old.link, old.caps);
        self.serve_stream(into);
        true
    }

    /// Delivers what arrives on `link` to endpoint `ep_id` as well as what arrives on its own
    /// link: a worker's endpoint to its own address also receives on the link its connection was
    /// accepted on, so what it sends, it receives (UCP's self endpoint).
    pub fn alias_link(&mut self, link: LinkId, ep_id: EndpointId) {
        self.link_eps.insert(link, ep_id);
    }

    /// Turns peer error handling on for an endpoint made without it (an endpoint accepted from
    /// a worker address that the application then takes with `UCP_ERR_HANDLING_MODE_PEER`).
    pub fn watch_peer(&mut self, ep_id: EndpointId) {
        if let Some(ep) = self.eps.get_mut(&ep_id) {
            ep.err_mode_peer = true;
        }
    }

    /// The endpoint's phase, or `None` when it is gone.
    pub fn phase(&self, ep: EndpointId) -> Option<Phase> {
        self.eps.get(&ep).map(|ep| ep.phase)
    }

    /// The endpoint's link.
    pub fn link_of(&self, ep: EndpointId) -> Option<LinkId> {
        self.eps.get(&ep).map(|ep| ep.link)
    }

    /// The API dropped its endpoint handle: the endpoint's state goes once it is dead (at once
    /// if it is).
    pub fn release_endpoint(&mut self, ep_id: EndpointId) {
        let Some(ep) = self.eps.get_mut(&ep_id) else { return };
        ep.released = true;
        self.forget_if_done(ep_id);
    }

    /// The next transmit to send. When the outbox is empty, endpoints with fragments to send
    /// make more first, so a caller that stops polling while the transport pushes back (keeping
    /// the transmit it could not send, to send it first next time) paces bulk transfers.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        if self.transmits.is_empty() && !self.bulk_active.is_empty() {
            self.refill();
        }
        let transmit = self.transmits.pop_front()?;
        Some(transmit)
    }

    /// The next transmit already made, without making fragments: for a caller that cannot send
    /// now and keeps what is queued (copying inline payloads) to send later, in order.
    pub fn poll_queued_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next native RMA request.
    pub fn poll_rma(&mut self) -> Option<RmaRequest> {
        self.rmas.pop_front()
    }

    /// A native RMA request waits for [`Engine::poll_rma`].
    #[inline]
    pub fn has_rma(&self) -> bool {
        !self.rmas.is_empty()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Nothing to drain and no fragments waiting to be made: a poll of the outbox would find
    /// nothing.
    #[inline]
    pub fn is_idle(&self) -> bool {
        // Asked after every poll, and almost always true: one branch, not four.
        (self.transmits.len() | self.rmas.len() | self.events.len() | self.bulk_active.len()) == 0
    }

    /// Something here waits for a peer's frame: a posted tag receive, or an operation waiting
    /// for its answer. (Posted stream receives are not counted: finding them takes a look at
    /// every endpoint.)
    #[inline]
    pub fn awaits_frames(&self) -> bool {
        self.tags.expected_len() != 0 || self.ops.len() != 0
    }

    /// A transmit, RMA request or event is waiting to be drained (fragments still to be made
    /// aside).
    #[inline]
    pub fn has_output(&self) -> bool {
        // Asked after every command, and almost always false: one branch, not three.
        (self.transmits.len() | self.rmas.len() | self.events.len()) != 0
    }

    /// An event is waiting to be drained.
    #[inline]
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// The sizes of every table (for leak checks).
    pub fn table_counts(&self) -> TableCounts {
        TableCounts {
            endpoints: self.eps.len(),
            links: self.link_eps.len(),
            ops: self.ops.len()
                + self.tags.expected_len()
                + self.eps.values().map(|ep| ep.stream.posted.len()).sum::<usize>(),
            tag_expected: self.tags.expected_len(),
            tag_unexpected: self.tags.unexpected_len() + self.probed.len(),
            stream_recvs: self.eps.values().map(|ep| ep.stream.posted.len()).sum(),
            stream_unread: self.eps.values().map(|ep| ep.stream.unread()).sum(),
            outbox: self.transmits.len() + self.rmas.len() + self.events.len(),
            fenced: self.fenced_issues.len(),
            copies: self.implicit_copies.len(),
        }
    }

    // ---- shared machinery ----

    pub(crate) fn new_op(&mut self, ep: Option<EndpointId>, kind: OpKind, cookie: Option<Cookie>) -> OpId {
        let id = OpId::from_raw(self.op_ids.next());
        let record = Operation {
            ep: ep.map(|ep| self.eps.canonical(ep)),
            kind,
            tokens: 0,
            rma_issued: false,
            implicit: false,
            flush_reports: false,
            result: None,
            cookie,
        };
        self.ops.insert(id, record);
        id
    }

    /// The endpoint, if it can start a new operation; otherwise the status the operation fails with.
    pub(crate) fn usable(&self, ep: EndpointId) -> Result<&Endpoint, Status> {
        match self.eps.get(&ep) {
            None => Err(Status::NotConnected),
            Some(state) => match state.phase {
                Phase::Dead(status) => Err(status),
                Phase::Closing => Err(Status::Canceled),
                Phase::Connecting | Phase::Ready => Ok(state),
            },
        }
    }

    /// Queues a frame for endpoint `ep_id` (held while it connects). A borrowed payload takes a
    /// token of its operation.
    pub(crate) fn send(&mut self, ep_id: EndpointId, op: &Op, payload: Payload, placed: bool) {
        let Some(ep) = self.eps.get_mut(&ep_id) else { return };
        if matches!(ep.phase, Phase::Dead(_)) {
            return;
        }
        let payload = match payload {
            Payload::Borrowed { op, .. } => {
                if let Some(record) = self.ops.get_mut(&op) {
                    record.tokens += 1;
                }
                payload
            }
            // The command returns before the endpoint can send: keep a copy.
            // SAFETY: the command that queued the payload has not returned yet.
            Payload::Inline { .. } if !ep.answered => Payload::Owned(unsafe { payload.bytes() }.to_vec()),
            other => other,
        };
        let transmit =
            Transmit { link: ep.link, header: Header::of(op), payload, placed: placed && ep.caps.placed };
        ep.tx_seen = true;
        if !ep.answered {
            ep.held.push_back(transmit);
        } else {
            self.transmits.push_back(transmit);
        }
    }

    /// The eager path: queues one frame whose payload is the caller's bytes, looking the
    /// endpoint up once; the command is done when this returns.
    #[inline]
    pub(crate) fn send_eager(
        &mut self,
        ep_id: EndpointId,
        header: Header,
        ptr: *const u8,
        len: usize,
    ) -> Result<(), Status> {
        let ep = self.eps.get_mut(&ep_id).ok_or(Status::NotConnected)?;
        match ep.phase {
            Phase::Dead(status) => return Err(status),
            Phase::Closing => return Err(Status::Canceled),
            Phase::Connecting | Phase::Ready => {}
        }
        ep.tx_seen = true;
        let payload = Payload::Inline { ptr, len };
        let transmit = Transmit { link: ep.link, header, payload, placed: false };
        if ep.answered {
            self.transmits.push_back(transmit);
        } else {
            // The command returns before the endpoint can send: keep a copy.
            // SAFETY: the command that queued the payload has not returned yet.
            let copy = unsafe { transmit.payload.bytes() }.to_vec();
            ep.held.push_back(Transmit { payload: Payload::Owned(copy), ..transmit });
        }
        Ok(())
    }

    /// How an eager send queued with [`Engine::send_eager`] (or `send`) started: done, or,
    /// while the endpoint waits for the server's answer, an operation that completes when its
    /// held frame is released.
    pub(crate) fn eager_start(&mut self, ep_id: EndpointId, len: usize, cookie: Option<Cookie>) -> Start {
        let answered = self.eps.get(&ep_id).is_none_or(|ep| ep.answered);
        if answered {
            return Start::Done(Status::Ok, OpInfo { length: len, ..OpInfo::default() });
        }
        Start::Pending(self.new_op(Some(ep_id), OpKind::Held { len }, cookie))
    }

    /// Queues a header-only reply on a link (answers to a peer, whatever our endpoint's phase).
    pub(crate) fn reply(&mut self, link: LinkId, op: &Op) {
        self.transmits.push_back(Transmit {
            link,
            header: Header::of(op),
            payload: Payload::None,
            placed: false,
        });
    }

    /// Records an operation's final status (the first one wins); it completes now, or when its
    /// tokens are back.
    pub(crate) fn finish_op(&mut self, id: OpId, status: Status, info: OpInfo) {
        let Some(op) = self.ops.get_mut(&id) else { return };
        if op.result.is_none() {
            op.result = Some((status, info));
        }
        if op.tokens == 0 {
            self.complete_op(id);
        }
    }

    /// Operation `id` failed with `status` whatever it had concluded (a payload it counted as
    /// arrived never fully did); it completes once its other tokens are back.
    pub(crate) fn fail_op(&mut self, id: OpId, status: Status) {
        let Some(op) = self.ops.get_mut(&id) else { return };
        op.result = Some((status, OpInfo::default()));
        if op.tokens == 0 {
            self.complete_op(id);
        }
    }

    /// A token of operation `id` came back.
    pub(crate) fn return_token(&mut self, id: OpId) {
        let Some(op) = self.ops.get_mut(&id) else { return };
        op.tokens = op.tokens.saturating_sub(1);
        if op.tokens == 0 && op.result.is_none() {
            // A send whose every byte went out and came back is done.
            let sent = match op.kind {
                OpKind::Push { len, sent, frag: Frag::Rndv { .. } | Frag::Stream, .. } if sent >= len => {
                    Some(len)
                }
                _ => None,
            };
            if let Some(length) = sent {
                op.result = Some((Status::Ok, OpInfo { length, ..OpInfo::default() }));
            }
        }
        if op.tokens == 0 && op.result.is_some() {
            self.complete_op(id);
        }
        if let Some(ep) = self.ops.get(&id).and_then(|op| op.ep) {
            self.bulk_active.insert(ep);
        }
    }

    /// Removes a finished operation and reports it.
    fn complete_op(&mut self, id: OpId) {
        let Some(op) = self.ops.remove(&id) else { return };
        let (status, info) = op.result.unwrap_or((Status::Ok, OpInfo::default()));

        if (op.implicit || op.flush_reports) && status != Status::Ok {
            if let Some(ep) = op.ep.and_then(|ep| self.eps.get_mut(&ep)) {
                ep.implicit_failure.get_or_insert(status);
            }
        }
        if op.implicit {
            self.implicit_copies.remove(&id);
        } else if !op.kind.is_internal() {
            self.events.complete(Completion { op: id, status, info, cookie: op.cookie });
        }
        if let OpKind::Flush { parent: Some(parent), .. } = op.kind {
            self.child_flush_done(parent, status);
        }
        let Some(ep_id) = op.ep else { return };
        // One lookup for the common case, where the endpoint has nothing waiting on this.
        let Some(ep) = self.eps.get_mut(&ep_id) else { return };
        let mut release = false;
        if op.rma_issued {
            ep.rma_in_flight -= 1;
            release = ep.rma_in_flight == 0 && !ep.fenced.is_empty();
        }
        if let OpKind::Flush { covers, .. } = op.kind {
            ep.flushes -= 1;
            if status == Status::Ok {
                ep.flushed_puts = ep.flushed_puts.max(covers);
            }
        }
        let (flushes, closing) = (ep.flushes > 0, ep.phase == Phase::Closing);
        let forget = ep.released && matches!(ep.phase, Phase::Dead(_));
        if release {
            self.release_fenced(ep_id);
        }
        if flushes {
            self.recheck_flushes(ep_id);
        }
        if closing {
            self.try_finish_close(ep_id);
        }
        if forget {
            self.forget_if_done(ep_id);
        }
    }

    fn child_flush_done(&mut self, parent: OpId, status: Status) {
        let done = match self.ops.get_mut(&parent) {
            Some(Operation { kind: OpKind::FlushAll { remaining }, result, .. }) => {
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

    /// Completes the endpoint's acked flushes that no longer wait for older operations.
    pub(crate) fn recheck_flushes(&mut self, ep: EndpointId) {
        // A dead endpoint's flushes end with its failure: the operations it fails one by one
        // must not make a flush behind them look complete.
        if self.eps.get(&ep).is_none_or(|state| state.flushes == 0 || matches!(state.phase, Phase::Dead(_))) {
            return;
        }
        // One pass over the operations, not one per acked flush: the endpoint's oldest outgoing
        // operation (flushes and closes aside) and its acked flushes; a flush is ready when no
        // outgoing operation older than it is left.
        let mut oldest_outgoing: Option<OpId> = None;
        let mut ready: Vec<OpId> = Vec::new();
        for (&id, op) in self.ops.iter().filter(|(_, op)| op.ep == Some(ep)) {
            match op.kind {
                OpKind::Flush { acked: true, .. } => ready.push(id),
                OpKind::Flush { .. } | OpKind::Close => {}
                ref kind if !kind.is_incoming() => {
                    oldest_outgoing = Some(oldest_outgoing.map_or(id, |oldest| oldest.min(id)));
                }
                _ => {}
            }
        }
        if let Some(oldest) = oldest_outgoing {
            ready.retain(|&id| id < oldest);
        }
        if ready.is_empty() {
            return;
        }
        // Every implicit put before these flushes is done: the first refusal is their status,
        // reported once, by a flush someone waits for (one the engine made for itself only
        // looks, so the application's next flush still says it).
        let reported = ready.iter().any(|id| self.ops.get(id).is_some_and(|op| !op.kind.is_internal()));
        let state = self.eps.get_mut(&ep);
        let status = if reported {
            state.and_then(|state| state.implicit_failure.take())
        } else {
            state.and_then(|state| state.implicit_failure)
        }
        .unwrap_or(Status::Ok);
        for id in ready {
            self.finish_op(id, status, OpInfo::default());
        }
    }

    /// Gives back the bytes of a [`Payload::Owned`] or an [`crate::AmDelivery`] the caller is
    /// done with, so the next copy reuses them instead of allocating.
    pub fn reuse(&mut self, bytes: Vec<u8>) {
        self.recycle(bytes);
    }

    /// A byte vector holding a copy of `bytes`, from the pool when it has one.
    pub(crate) fn pooled_copy(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut data = self.pool.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(bytes);
        data
    }

    /// Returns a byte vector to the pool.
    pub(crate) fn recycle(&mut self, data: Vec<u8>) {
        // Many small ones are kept, since a burst of unexpected eager messages takes one each and
        // a receiver catching up returns them all; few large ones, and none huge, so the pool
        // stays bounded whatever sizes went by.
        let keep = if data.capacity() <= POOL_SMALL_CAPACITY {
            self.pool.len() < POOL_SMALL
        } else {
            data.capacity() <= POOL_LARGE_CAPACITY && self.pool.len() < POOL_LARGE
        };
        if keep {
            self.pool.push(data);
        } else if data.capacity() > POOL_LARGE_CAPACITY
            && data.capacity() <= LARGE_SPARE_CAPACITY
            && self.large_spare_bytes + data.capacity() <= LARGE_SPARE_BYTES
        {
            self.large_spare_bytes += data.capacity();
            self.large_spares.push(data);
        }
    }

    /// A zeroed buffer of `len` bytes: a kept spare when one is large enough.
    pub(crate) fn large_spare(&mut self, len: usize) -> Vec<u8> {
        let mut bytes = self.spare_of(len);
        bytes.clear();
        bytes.resize(len, 0);
        bytes
    }

    /// A buffer of `len` bytes that the caller overwrites in full before anything reads it, or
    /// else drops unread: a kept spare when one is large enough, its bytes left as they were
    /// (this worker's own earlier payloads) rather than zeroed first.
    pub(crate) fn large_spare_to_overwrite(&mut self, len: usize) -> Vec<u8> {
        let mut bytes = self.spare_of(len);
        bytes.truncate(len);
        bytes.resize(len, 0);
        bytes
    }

    /// A buffer for `len` bytes: from the pool up to its sizes, else a kept spare large enough.
    fn spare_of(&mut self, len: usize) -> Vec<u8> {
        if len <= POOL_LARGE_CAPACITY {
            return self.pool.pop().unwrap_or_default();
        }
        match self.large_spares.iter().position(|spare| spare.capacity() >= len) {
            Some(at) => {
                let spare = self.large_spares.swap_remove(at);
                self.large_spare_bytes -= spare.capacity();
                spare
            }
            None => Vec::new(),
        }
    }
}
