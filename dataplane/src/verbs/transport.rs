//! The RDMA verbs transport: one reliable-connected queue pair per link, frames as SENDs into a
//! shared receive queue under credit flow control, and puts, gets and 64-bit atomics as RDMA
//! operations the peer's NIC executes without its CPU.
//!
//! A link's two queue pairs are joined out of band: [`Transport::open_link`] creates this side's
//! and returns its address (GID, QPN, PSN, MTU and the credit word), the handshake carries it to
//! the peer, and [`Transport::join_link`] connects this side to the peer's. Nothing listens: a
//! verbs link always starts from a handshake on another transport.
//!
//! **Frames.** Each frame is copied into a registered send buffer (sent inline when the device
//! takes it inline) and posted as one SEND; the peer receives it into one of the buffers posted
//! to its shared receive queue, lends it to the poll's sink and posts the buffer again. A link
//! may have at most `window` frames unconsumed at the receiver ([`super::credits`]): the
//! receiver writes its consumed total into the sender's credit word by RDMA, so no receive is
//! ever posted for flow control and a receiver never runs out of posted receives while every
//! peer keeps to its credits. The shared receive queue holds `window` buffers for every link it
//! admits; a link beyond that is refused (`NoResource`), and the endpoint stays on the
//! transport its handshake came by.
//!
//! **Completions.** Only every few sends are signalled. A link's posted work requests wait in
//! order in its queue; a completion of one of them completes every earlier one (a queue pair
//! executes its send queue in order), which returns their send buffers.
//!
//! **One-sided operations.** A put is an RDMA WRITE and a get an RDMA READ, split at the
//! port's maximum message size; the local side is the `mem_map` registration holding it when
//! there is one ([`super::region_index`]), else a send buffer it is copied through when it fits
//! one, else a registration of the caller's buffer for the length of the operation (deregistered
//! at its completion, so no cache can go stale when the caller frees or remaps it). Fetch-add and
//! compare-and-swap on 8 bytes are RDMA atomics, when the context's atomic mode gives atomics to
//! the device; every other atomic is refused (`Unsupported`), never done by a CPU on a word the
//! NIC also updates. The remote range is checked against the region the key describes before
//! anything is posted, so a bad access fails here instead of killing both queue pairs; a key
//! forged past that check still reaches only what the owner registered, and the owner's NIC
//! refuses anything else by failing the link.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use zcx_control::TransportAddress;
use zcx_verbs_sys as sys;

use super::channel::CompletionChannel;
use super::cq::{CompletionQueue, WorkCompletion};
use super::credits::Credits;
use super::device::GidInfo;
use super::domain::decode_entry;
use super::mr::MemoryRegion;
use super::pd::ProtectionDomain;
use super::qp::{Local, QpAddress, QpCaps, RcQueuePair, Remote, RetryPolicy, SendOp};
use super::region_index::RegionIndex;
use super::slots::Slots;
use super::srq::{SharedReceiveQueue, MAX_BATCH};
use crate::link_table::LinkTable;
use crate::proto::wire::AtomicOp;
use crate::transport::{
    AtomicOps, Caps, ConnectTarget, LargePayload, LinkId, ListenerId, LocalMem, Payload, RemoteMem, RmaCaps,
    RmaOp, RmaOutcome, SendOutcome, TlError, TlEvent, Transport,
};

/// How the verbs transport sizes itself.
#[derive(Clone, Debug)]
pub struct VerbsConfig {
    /// The GID index (`ZCX_VERBS_GID_INDEX`); `None`: the first in transport order.
    pub gid_index: Option<u32>,
    /// Whether 64-bit fetch-add and compare-and-swap run on the NIC (`ZCX_ATOMIC_MODE=device`).
    pub device_atomics: bool,
    /// Bytes of one send or receive buffer: the largest frame.
    pub frame_size: usize,
    /// Receive buffers on the shared receive queue.
    pub recv_buffers: u32,
    /// Send buffers.
    pub send_buffers: u32,
    /// Frames a link may have unconsumed at its receiver.
    pub window: u32,
    /// Work requests one queue pair's send queue holds.
    pub send_queue: u32,
    /// The retry policy of every queue pair.
    pub retry: RetryPolicy,
}

impl Default for VerbsConfig {
    fn default() -> VerbsConfig {
        VerbsConfig {
            gid_index: None,
            device_atomics: false,
            frame_size: 8192,
            recv_buffers: 1024,
            send_buffers: 256,
            window: 32,
            send_queue: 256,
            retry: RetryPolicy::default(),
        }
    }
}

/// Sends between two signalled ones.
const SIGNAL_EVERY: u32 = 16;
/// Send-queue entries kept free for credit writes and close markers.
const SQ_RESERVE: usize = 4;
/// Completions taken per `poll`.
const POLL_BUDGET: usize = 64;
/// Bit of a receive's work-request id; the rest is its buffer's index. Send-queue work requests
/// carry a sequence number below it.
const RECV_BIT: u64 = 1 << 63;

/// Counters of what the transport posted, for `zcx perf` and the tests: they show which
/// operations ran as RDMA and which as messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerbsCounters {
    /// Every work request posted to a send queue.
    pub posted: u64,
    /// SENDs (frames).
    pub sends: u64,
    /// RDMA WRITEs of puts.
    pub writes: u64,
    /// RDMA READs of gets.
    pub reads: u64,
    /// RDMA atomics.
    pub atomics: u64,
    /// RDMA WRITEs of credits.
    pub credit_writes: u64,
    /// Receives posted to the shared receive queue.
    pub receives: u64,
}

/// What one posted send-queue work request holds until it completes.
#[derive(Debug)]
enum Wqe {
    /// A frame, from a send buffer (none when it went inline).
    Send(Option<u32>),
    /// A credit write or an empty signalled write that flushes the queue.
    Control,
    /// One piece of a one-sided operation.
    Rma(u32),
}

#[derive(Debug, PartialEq, Eq)]
enum LinkState {
    /// Opened, waiting for the peer's address.
    Open,
    /// Connected.
    Joined,
    /// Closing once what it posted completed.
    Closing,
    /// Failed; reported.
    Failed,
}

/// The credit word the peer writes and the value this side writes to the peer's, registered
/// together (the peer can only reach these 16 bytes).
#[repr(C, align(16))]
struct CreditWords {
    /// The peer's consumed total, written by the peer's NIC.
    peer_consumed: AtomicU64,
    /// This side's consumed total, the source of its credit writes when they cannot go inline.
    report: AtomicU64,
}

struct Link {
    // Declared first: destroyed before the region and words it may still use.
    qp: RcQueuePair,
    // Declared before `words`: deregistered before they are freed.
    words_mr: MemoryRegion,
    words: Box<CreditWords>,
    state: LinkState,
    credits: Credits,
    /// Where this side writes its consumed total: the peer's credit word.
    peer_word: Option<Remote>,
    /// Posted work requests, oldest first, by sequence number.
    posted: VecDeque<(u64, Wqe)>,
    /// Unsignalled sends since the last signalled one.
    unsignalled: u32,
}

/// A one-sided operation in flight.
struct Pending {
    link: LinkId,
    token: u64,
    /// Work requests not yet completed.
    pieces: u32,
    error: Option<TlError>,
    hold: Hold,
    /// A get bounced through a send buffer: copy its `len` bytes to `dest` at the end.
    copy_out: Option<(*mut u8, usize)>,
    /// An atomic: its old value is in the hold's send buffer.
    fetch: bool,
    /// Its failure was reported already (the link failed): its pieces may still complete, and
    /// only then is its local memory released.
    reported: bool,
}

/// What keeps a one-sided operation's local memory registered until it completes.
enum Hold {
    None,
    Slot(u32),
    Mapped { _region: Arc<MemoryRegion> },
    Own { _region: MemoryRegion },
}

/// The verbs transport of one worker, on one device port.
pub struct VerbsTransport {
    caps: Caps,
    pd: Arc<ProtectionDomain>,
    regions: Arc<RegionIndex>,
    config: VerbsConfig,
    gid: GidInfo,
    max_msg: usize,
    channel: Arc<CompletionChannel>,
    cq: Arc<CompletionQueue>,
    srq: Arc<SharedReceiveQueue>,
    recv: Slots,
    send: Slots,
    free_send: Vec<u32>,
    links: LinkTable<Link>,
    by_qpn: HashMap<u32, LinkId>,
    pending: Vec<Option<Pending>>,
    free_pending: Vec<u32>,
    /// Sequence number of the next send-queue work request (never reused).
    seq: u64,
    /// Receive buffers to post again.
    repost: Vec<u32>,
    /// Links whose credit report found their send queue full, to report at the next poll: the
    /// peer may be waiting for it, with nothing else on the way to trigger it.
    reports_owed: Vec<LinkId>,
    /// Events found outside `poll`, reported by the next one.
    events: VecDeque<OwnedEvent>,
    /// Completions taken while preparing to sleep.
    early: VecDeque<WorkCompletion>,
    /// The completion queue was armed: its channel may hold an event to take.
    armed: bool,
    counters: VerbsCounters,
}

// SAFETY: every raw pointer (send-buffer copies owed to callers, the verbs objects) is used only
// by the worker that owns the transport, under the contracts of `LocalMem` and the verbs calls.
unsafe impl Send for VerbsTransport {}

#[derive(Debug)]
enum OwnedEvent {
    RmaDone { link: LinkId, token: u64, result: Result<u64, TlError> },
    LinkFailed { link: LinkId, error: TlError },
}

impl VerbsTransport {
    /// A transport on `pd`'s port, whose puts and gets use `regions`' registrations directly.
    pub fn new(
        pd: Arc<ProtectionDomain>,
        regions: Arc<RegionIndex>,
        config: VerbsConfig,
    ) -> Result<VerbsTransport, String> {
        let devices = super::device::devices()?;
        let port = devices
            .iter()
            .find(|d| d.name == pd.name())
            .and_then(|d| d.ports.iter().find(|p| p.num == pd.port()))
            .ok_or_else(|| format!("{} port {} is gone", pd.name(), pd.port()))?
            .clone();
        let gid = super::device::choose_gid(&port, config.gid_index)?;
        let channel = CompletionChannel::new(&pd)?;
        let cq_entries = (config.recv_buffers + 4 * config.send_queue).max(256) as i32;
        let cq = CompletionQueue::with_channel(&pd, cq_entries, &channel)?;
        let srq = SharedReceiveQueue::new(&pd, config.recv_buffers)?;
        let recv = Slots::new(&pd, config.frame_size, config.recv_buffers.min(srq.capacity()))?;
        let send = Slots::new(&pd, config.frame_size, config.send_buffers)?;
        let free_send = (0..send.count()).rev().collect();
        let atomic64 = if config.device_atomics {
            AtomicOps::NONE
                .with(AtomicOp::Add, false)
                .with(AtomicOp::Add, true)
                .with(AtomicOp::Cswap, false)
                .with(AtomicOp::Cswap, true)
        } else {
            AtomicOps::NONE
        };
        let caps = Caps {
            name: "verbs",
            reliable: true,
            ordered: true,
            rma: RmaCaps { put: true, get: true, atomic32: AtomicOps::NONE, atomic64, max_rma: usize::MAX },
            large_payload: LargePayload::ReceiverPull,
            max_frame: config.frame_size,
            zcopy_threshold: usize::MAX,
            max_placed: 0,
            latency_ns: 2_000,
            bandwidth: 10_000_000_000,
        };
        let mut this = VerbsTransport {
            caps,
            max_msg: (port.max_msg_sz as usize).max(4096),
            regions,
            gid,
            channel,
            cq,
            srq,
            recv,
            send,
            free_send,
            links: LinkTable::new(),
            by_qpn: HashMap::new(),
            pending: Vec::new(),
            free_pending: Vec::new(),
            seq: 0,
            repost: Vec::new(),
            reports_owed: Vec::new(),
            events: VecDeque::new(),
            early: VecDeque::new(),
            armed: false,
            counters: VerbsCounters::default(),
            config,
            pd,
        };
        this.repost = (0..this.recv.count()).collect();
        this.post_receives().map_err(|e| format!("posting receives: {e}"))?;
        tracing::debug!(device = this.pd.name(), port = this.pd.port(), gid = %this.gid.as_ipv6(), "verbs transport up");
        Ok(this)
    }

    /// Links the shared receive queue can back with a full window each.
    fn link_capacity(&self) -> usize {
        (self.recv.count() / self.config.window.max(1)) as usize
    }

    fn post_receives(&mut self) -> Result<(), TlError> {
        let mut batch = [(0u64, Local { addr: 0, len: 0, lkey: 0 }); MAX_BATCH];
        while !self.repost.is_empty() {
            let take = self.repost.len().min(MAX_BATCH);
            let from = self.repost.len() - take;
            for (slot, &index) in batch.iter_mut().zip(&self.repost[from..]) {
                *slot = (RECV_BIT | u64::from(index), self.recv.local(index, self.recv.size()));
            }
            // SAFETY: each buffer is ours (not posted: its receive completed, or never posted)
            // and registered; the device owns it until its receive completes.
            let posted = unsafe { self.srq.post_batch(&batch[..take]) }?;
            self.counters.receives += posted as u64;
            // The first `posted` of the batch are the device's now.
            self.repost.drain(from..from + posted.min(take));
            if posted < take {
                return Err(TlError::NoResource);
            }
        }
        Ok(())
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Posts one send-queue work request on `link` and records what it holds.
    ///
    /// # Safety
    /// `local` must be registered (or the request inline) and stay valid until it completes.
    unsafe fn post(
        &mut self,
        link: LinkId,
        op: SendOp,
        local: Local,
        signalled: bool,
        wqe: Wqe,
    ) -> Result<(), TlError> {
        let seq = self.next_seq();
        let entry = self.links.get_mut(link).ok_or(TlError::InvalidParam)?;
        // SAFETY: the caller's contract.
        unsafe { entry.qp.post(seq, op, local, signalled) }?;
        entry.posted.push_back((seq, wqe));
        entry.unsignalled = if signalled { 0 } else { entry.unsignalled + 1 };
        self.counters.posted += 1;
        Ok(())
    }

    fn sq_room(&self, link: &Link) -> usize {
        (self.config.send_queue as usize).saturating_sub(SQ_RESERVE + link.posted.len())
    }

    /// Completes `link`'s work requests up to `seq` (the one a completion named), with `result`
    /// for that one (the earlier ones succeeded: a queue pair executes in order).
    fn complete_up_to(&mut self, link: LinkId, seq: u64, result: Result<(), TlError>) {
        loop {
            let Some(entry) = self.links.get_mut(link) else { return };
            if entry.posted.front().is_none_or(|(s, _)| *s > seq) {
                break;
            }
            let (s, wqe) = entry.posted.pop_front().expect("front exists");
            match wqe {
                Wqe::Send(Some(slot)) => self.free_send.push(slot),
                Wqe::Send(None) | Wqe::Control => {}
                Wqe::Rma(index) => self.rma_piece_done(index, if s == seq { result } else { Ok(()) }),
            }
        }
        if let Err(error) = result {
            // A flushed request says only that the queue pair is in the error state, which the
            // peer's NIC caused (a refused access, a dead responder): for the link, a reset.
            let error = if error == TlError::Canceled { TlError::ConnectionReset } else { error };
            self.fail(link, error);
        }
        if self.links.get(link).is_some_and(|l| l.state == LinkState::Closing && l.posted.is_empty()) {
            self.destroy(link);
        }
    }

    fn rma_piece_done(&mut self, index: u32, result: Result<(), TlError>) {
        let Some(op) = self.pending.get_mut(index as usize).and_then(Option::as_mut) else { return };
        if let Err(e) = result {
            op.error.get_or_insert(e);
        }
        op.pieces -= 1;
        if op.pieces > 0 {
            return;
        }
        let op = self.pending[index as usize].take().expect("checked above");
        self.free_pending.push(index);
        if let Hold::Slot(slot) = op.hold {
            self.free_send.push(slot);
        }
        if op.reported {
            return;
        }
        let result = match op.error {
            Some(e) => Err(e),
            None => {
                let mut value = 0;
                if let Hold::Slot(slot) = op.hold {
                    if let Some((dest, len)) = op.copy_out {
                        // SAFETY: the read completed into the slot; `dest` is the get's local
                        // memory, valid until `RmaDone` (the `LocalMem` contract).
                        unsafe { std::ptr::copy_nonoverlapping(self.send.ptr(slot), dest, len) };
                    }
                    if op.fetch {
                        // SAFETY: the atomic completed; its old value is the slot's first 8 bytes.
                        value = unsafe { std::ptr::read_unaligned(self.send.ptr(slot).cast::<u64>()) };
                    }
                }
                Ok(value)
            }
        };
        self.events.push_back(OwnedEvent::RmaDone { link: op.link, token: op.token, result });
    }

    /// The link failed: reported once, its one-sided operations first.
    fn fail(&mut self, link: LinkId, error: TlError) {
        let Some(entry) = self.links.get_mut(link) else { return };
        if matches!(entry.state, LinkState::Failed | LinkState::Closing) {
            return;
        }
        entry.state = LinkState::Failed;
        // Stops the device on this queue pair (every posted request completes, flushed), and
        // tells the peer by its next access.
        entry.qp.to_error();
        tracing::debug!(?link, %error, "verbs link failed");
        self.fail_pending(link, error);
        self.events.push_back(OwnedEvent::LinkFailed { link, error });
    }

    /// Reports every one-sided operation of `link` failed. Their local memory stays theirs
    /// until their pieces complete or the queue pair is destroyed: the device may still be
    /// reading or writing it.
    fn fail_pending(&mut self, link: LinkId, error: TlError) {
        for op in self.pending.iter_mut().flatten() {
            if op.link == link && !op.reported {
                op.reported = true;
                self.events.push_back(OwnedEvent::RmaDone { link, token: op.token, result: Err(error) });
            }
        }
    }

    /// Asks for a completion on every link with unsignalled sends, whose buffers come back
    /// only with a later signalled completion: when the send buffers ran out.
    fn flush_unsignalled(&mut self) {
        let ids: Vec<LinkId> = self
            .links
            .iter()
            .filter(|(_, l)| l.state == LinkState::Joined && l.unsignalled > 0 && !l.posted.is_empty())
            .map(|(id, _)| id)
            .collect();
        for link in ids {
            let Some(remote) = self.links.get(link).and_then(|l| l.peer_word) else { continue };
            let local = Local { addr: 0, len: 0, lkey: 0 };
            // SAFETY: an empty request names no memory.
            if let Err(error) = unsafe { self.post(link, SendOp::Write(remote), local, true, Wqe::Control) } {
                self.fail(link, error);
            }
        }
    }

    /// Destroys a link's queue pair and returns what it held.
    fn destroy(&mut self, link: LinkId) {
        let Some(entry) = self.links.remove(link) else { return };
        self.by_qpn.remove(&entry.qp.local_address().qpn);
        for (_, wqe) in &entry.posted {
            if let Wqe::Send(Some(slot)) = wqe {
                self.free_send.push(*slot);
            }
        }
        // The queue pair is gone: the device touches none of the link's memory any more.
        drop(entry);
        self.fail_pending(link, TlError::Canceled);
        for index in 0..self.pending.len() {
            if self.pending[index].as_ref().is_some_and(|op| op.link == link) {
                let op = self.pending[index].take().expect("checked");
                self.free_pending.push(index as u32);
                if let Hold::Slot(slot) = op.hold {
                    self.free_send.push(slot);
                }
            }
        }
    }

    /// Writes this side's consumed total into the peer's credit word when half a window gathered.
    fn report_credits(&mut self, link: LinkId) {
        let inline = self.links.get(link).map_or(0, |l| l.qp.max_inline());
        let Some(entry) = self.links.get_mut(link) else { return };
        let Some(remote) = entry.peer_word else { return };
        if entry.state != LinkState::Joined {
            return;
        }
        if entry.posted.len() + 1 >= self.config.send_queue as usize {
            if !self.reports_owed.contains(&link) {
                self.reports_owed.push(link);
            }
            return;
        }
        let Some(total) = entry.credits.report() else { return };
        entry.words.report.store(total, Ordering::Relaxed);
        let local = Local {
            addr: &entry.words.report as *const AtomicU64 as u64,
            len: 8,
            lkey: entry.words_mr.lkey(),
        };
        // Inline copies the value at the post; otherwise the device reads the word later (and
        // a later, larger total there is as good: totals only grow), signalled so the word is
        // not rewritten by many writes in flight.
        let signalled = inline < 8 || entry.unsignalled + 1 >= SIGNAL_EVERY;
        // SAFETY: `local` is the link's registered report word, alive as long as its queue pair.
        match unsafe { self.post(link, SendOp::Write(remote), local, signalled, Wqe::Control) } {
            Ok(()) => self.counters.credit_writes += 1,
            Err(error) => self.fail(link, error),
        }
    }

    fn handle(&mut self, wc: WorkCompletion, sink: &mut dyn FnMut(TlEvent<'_>)) -> usize {
        if wc.wr_id & RECV_BIT != 0 {
            let slot = (wc.wr_id & !RECV_BIT) as u32;
            let link = self.by_qpn.get(&wc.qp_num).copied();
            let mut reported = 0;
            match (link, wc.result) {
                (Some(link), Ok(())) => {
                    let ok = self
                        .links
                        .get_mut(link)
                        .is_some_and(|l| l.state == LinkState::Joined && l.credits.on_receive().is_ok());
                    if ok {
                        // SAFETY: the receive completed: the device no longer writes the slot.
                        let bytes = unsafe { self.recv.bytes(slot, wc.byte_len as usize) };
                        sink(TlEvent::Frame { link, bytes });
                        reported = 1;
                        self.report_credits(link);
                    } else if self.links.get(link).is_some_and(|l| l.state == LinkState::Joined) {
                        tracing::warn!(?link, "peer sent past its receive credits; failing the link");
                        self.fail(link, TlError::ConnectionReset);
                    }
                }
                (Some(link), Err(error)) => self.fail(link, error),
                (None, _) => tracing::debug!(qpn = wc.qp_num, "receive for no link; dropped"),
            }
            self.repost.push(slot);
            return reported;
        }
        let Some(link) = self.by_qpn.get(&wc.qp_num).copied() else { return 0 };
        if wc.result.is_err() {
            tracing::debug!(
                ?link,
                status = wc.status,
                opcode = wc.opcode,
                seq = wc.wr_id,
                "work request failed"
            );
        }
        self.complete_up_to(link, wc.wr_id, wc.result);
        0
    }

    fn local_for(
        &mut self,
        ptr: *mut u8,
        len: usize,
        get: bool,
        inline: u32,
    ) -> Result<(Hold, Local), TlError> {
        let addr = ptr as usize;
        if !get && len <= inline as usize {
            return Ok((Hold::None, Local { addr: addr as u64, len: len as u32, lkey: 0 }));
        }
        if let Some(mr) = self.regions.find(addr, len) {
            let lkey = mr.lkey();
            return Ok((Hold::Mapped { _region: mr }, Local { addr: addr as u64, len: len as u32, lkey }));
        }
        if len <= self.send.size() {
            let slot = self.free_send.pop().ok_or(TlError::NoResource)?;
            if !get {
                // SAFETY: `ptr..ptr + len` is readable (`LocalMem`); the slot is ours.
                unsafe { std::ptr::copy_nonoverlapping(ptr, self.send.ptr(slot), len) };
            }
            return Ok((Hold::Slot(slot), self.send.local(slot, len)));
        }
        let access = sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE;
        // SAFETY: the caller's memory stays valid until the operation completes (`LocalMem`),
        // and the registration is dropped at its completion.
        let mr = unsafe { MemoryRegion::register(&self.pd, addr, len, access) }.map_err(|e| {
            tracing::debug!(len, %e, "registering a buffer for one operation failed");
            TlError::NoResource
        })?;
        let lkey = mr.lkey();
        Ok((Hold::Own { _region: mr }, Local { addr: addr as u64, len: len as u32, lkey }))
    }

    /// The link, when it may carry a frame or an operation now: not before it is joined
    /// (`NoResource`: try again), not once it closes or failed.
    fn usable(&self, link: LinkId) -> Result<&Link, TlError> {
        let entry = self.links.get(link).ok_or(TlError::InvalidParam)?;
        match entry.state {
            LinkState::Joined => Ok(entry),
            LinkState::Open => Err(TlError::NoResource),
            LinkState::Closing | LinkState::Failed => Err(TlError::ConnectionReset),
        }
    }

    fn new_pending(&mut self, op: Pending) -> u32 {
        match self.free_pending.pop() {
            Some(index) => {
                self.pending[index as usize] = Some(op);
                index
            }
            None => {
                self.pending.push(Some(op));
                (self.pending.len() - 1) as u32
            }
        }
    }
}

impl Transport for VerbsTransport {
    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn address(&self) -> Option<TransportAddress> {
        // A verbs link is joined through a handshake on another transport, per endpoint.
        None
    }

    fn listen(&mut self, _addr: SocketAddr) -> Result<(ListenerId, SocketAddr), TlError> {
        Err(TlError::Unsupported)
    }

    fn close_listener(&mut self, _listener: ListenerId) {}

    fn connect(&mut self, _target: ConnectTarget<'_>) -> Result<LinkId, TlError> {
        Err(TlError::Unsupported)
    }

    fn open_link(&mut self) -> Result<(LinkId, TransportAddress), TlError> {
        if self.links.len() >= self.link_capacity() {
            tracing::debug!(links = self.links.len(), "every receive buffer is promised to a link");
            return Err(TlError::NoResource);
        }
        let caps = QpCaps { send_wr: self.config.send_queue, recv_wr: 1, inline: 256 };
        let qp = RcQueuePair::create(&self.pd, &self.cq, Some(&self.srq), caps, self.gid.index as u8)
            .map_err(|e| {
                tracing::debug!(%e, "creating a queue pair failed");
                TlError::NoResource
            })?;
        let words = Box::new(CreditWords { peer_consumed: AtomicU64::new(0), report: AtomicU64::new(0) });
        let access =
            sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE;
        let words_addr = &*words as *const CreditWords as usize;
        // SAFETY: the words are boxed, so they stay put; the link drops the region first.
        let words_mr = unsafe {
            MemoryRegion::register(&self.pd, words_addr, std::mem::size_of::<CreditWords>(), access)
        }
        .map_err(|e| {
            tracing::debug!(%e, "registering a credit word failed");
            TlError::NoResource
        })?;
        let local = qp.local_address();
        let address = TransportAddress::Verbs {
            gid: local.gid,
            qpn: local.qpn,
            psn: local.psn,
            lid: 0,
            mtu: u16::try_from(local.mtu.min(4096)).unwrap_or(4096),
            credit_addr: words_addr as u64,
            credit_rkey: words_mr.rkey(),
        };
        let link = Link {
            qp,
            words_mr,
            words,
            state: LinkState::Open,
            credits: Credits::new(self.config.window),
            peer_word: None,
            posted: VecDeque::new(),
            unsignalled: 0,
        };
        let id = self.links.insert(link)?;
        self.by_qpn.insert(local.qpn, id);
        Ok((id, address))
    }

    fn join_link(&mut self, link: LinkId, peer: &TransportAddress) -> Result<(), TlError> {
        let TransportAddress::Verbs { gid, qpn, psn, mtu, credit_addr, credit_rkey, .. } = *peer else {
            return Err(TlError::InvalidParam);
        };
        if peer.validate().is_err() || qpn == 0 {
            return Err(TlError::InvalidParam);
        }
        let retry = self.config.retry;
        let entry = self.links.get_mut(link).ok_or(TlError::InvalidParam)?;
        if entry.state != LinkState::Open {
            return Err(TlError::InvalidParam);
        }
        let remote = QpAddress { qpn, psn, gid, mtu: u32::from(mtu) };
        if let Err(e) = entry.qp.connect(&remote, retry) {
            tracing::debug!(?link, %e, "joining a queue pair failed");
            self.destroy(link);
            return Err(TlError::Unreachable);
        }
        entry.peer_word = Some(Remote { addr: credit_addr, rkey: credit_rkey });
        entry.state = LinkState::Joined;
        Ok(())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.counters;
        vec![
            ("verbs_posted", c.posted),
            ("verbs_sends", c.sends),
            ("verbs_rdma_writes", c.writes),
            ("verbs_rdma_reads", c.reads),
            ("verbs_rdma_atomics", c.atomics),
            ("verbs_credit_writes", c.credit_writes),
            ("verbs_receives", c.receives),
        ]
    }

    fn link_addrs(&self, _link: LinkId) -> (Option<SocketAddr>, Option<SocketAddr>) {
        (None, None)
    }

    fn send(&mut self, link: LinkId, header: &[u8], payload: Payload<'_>) -> Result<SendOutcome, TlError> {
        let len = header.len() + payload.len();
        if len > self.send.size() {
            return Err(TlError::InvalidParam);
        }
        let entry = self.usable(link)?;
        if !entry.credits.may_send(entry.words.peer_consumed.load(Ordering::Acquire))
            || self.sq_room(entry) == 0
        {
            return Err(TlError::NoResource);
        }
        let inline = len <= entry.qp.max_inline() as usize;
        let signalled = entry.unsignalled + 1 >= SIGNAL_EVERY
            || self.free_send.len() < (self.send.count() as usize / 4).max(2);
        let Some(slot) = self.free_send.pop() else {
            self.flush_unsignalled();
            return Err(TlError::NoResource);
        };
        let dst = self.send.ptr(slot);
        // SAFETY: the slot is ours and holds `len` bytes; the payload's bytes are the caller's
        // (a zero-copy payload is valid until `SendDone`, and is copied here, so none follows).
        unsafe {
            std::ptr::copy_nonoverlapping(header.as_ptr(), dst, header.len());
            let body: &[u8] = match &payload {
                Payload::None => &[],
                Payload::Copy(bytes) => bytes,
                Payload::Zcopy(z) => z.as_slice(),
            };
            std::ptr::copy_nonoverlapping(body.as_ptr(), dst.add(header.len()), body.len());
        }
        let local = self.send.local(slot, len);
        let wqe = if inline { Wqe::Send(None) } else { Wqe::Send(Some(slot)) };
        // SAFETY: the slot is registered and stays ours until the request completes (or, inline,
        // the device copied it during the post).
        let posted = unsafe { self.post(link, SendOp::Send, local, signalled, wqe) };
        if inline || posted.is_err() {
            self.free_send.push(slot);
        }
        posted?;
        self.counters.sends += 1;
        if let Some(entry) = self.links.get_mut(link) {
            entry.credits.on_send();
        }
        Ok(SendOutcome::Done)
    }

    fn close(&mut self, link: LinkId, force: bool) {
        let Some(entry) = self.links.get_mut(link) else { return };
        if force || entry.posted.is_empty() || entry.state != LinkState::Joined {
            self.destroy(link);
            return;
        }
        entry.state = LinkState::Closing;
        // An empty signalled write: its completion says everything before it completed.
        let remote = entry.peer_word.unwrap_or(Remote { addr: 0, rkey: 0 });
        let local = Local { addr: 0, len: 0, lkey: 0 };
        // SAFETY: an empty request names no memory.
        if unsafe { self.post(link, SendOp::Write(remote), local, true, Wqe::Control) }.is_err() {
            self.destroy(link);
        }
    }

    fn has_pending_sends(&self, link: LinkId) -> bool {
        self.links.get(link).is_some_and(|l| !l.posted.is_empty())
    }

    fn rma(
        &mut self,
        link: LinkId,
        op: RmaOp,
        local: LocalMem,
        remote: RemoteMem<'_>,
        token: u64,
    ) -> Result<RmaOutcome, TlError> {
        let rkey = decode_entry(remote.key).map_err(|_| TlError::InvalidParam)?;
        let region_end = remote.region_base.checked_add(remote.region_len).ok_or(TlError::InvalidParam)?;
        let end = remote.addr.checked_add(remote.len as u64).ok_or(TlError::InvalidParam)?;
        if remote.addr < remote.region_base || end > region_end {
            return Err(TlError::InvalidParam);
        }
        let entry = self.usable(link)?;
        let inline = entry.qp.max_inline();
        let room = self.sq_room(entry);
        let remote_at = |offset: usize| Remote { addr: remote.addr + offset as u64, rkey };
        match op {
            RmaOp::Put | RmaOp::Get => {
                let len = local.len();
                if len != remote.len {
                    return Err(TlError::InvalidParam);
                }
                if len == 0 {
                    return Ok(RmaOutcome::Done { fetched: 0 });
                }
                let pieces = len.div_ceil(self.max_msg);
                if pieces > room {
                    return Err(TlError::NoResource);
                }
                let get = matches!(op, RmaOp::Get);
                let (hold, base) = self.local_for(local.ptr(), len, get, inline)?;
                let copy_out = match (&hold, get) {
                    (Hold::Slot(_), true) => Some((local.ptr(), len)),
                    _ => None,
                };
                let lkey = base.lkey;
                let index = self.new_pending(Pending {
                    link,
                    token,
                    pieces: pieces as u32,
                    error: None,
                    hold,
                    copy_out,
                    fetch: false,
                    reported: false,
                });
                for piece in 0..pieces {
                    let offset = piece * self.max_msg;
                    let piece_len = (len - offset).min(self.max_msg);
                    let part = Local { addr: base.addr + offset as u64, len: piece_len as u32, lkey };
                    let what =
                        if get { SendOp::Read(remote_at(offset)) } else { SendOp::Write(remote_at(offset)) };
                    // SAFETY: `part` lies in memory the pending operation keeps registered (or it
                    // goes inline) until its last piece completes.
                    if let Err(error) = unsafe { self.post(link, what, part, true, Wqe::Rma(index)) } {
                        let op = self.pending[index as usize].as_mut().expect("just made");
                        // Pieces never posted never complete.
                        op.pieces -= (pieces - piece) as u32;
                        if op.pieces == 0 {
                            let op = self.pending[index as usize].take().expect("just made");
                            self.free_pending.push(index);
                            if let Hold::Slot(slot) = op.hold {
                                self.free_send.push(slot);
                            }
                            return Err(error);
                        }
                        // Some pieces are out: the operation ends with the link.
                        self.fail(link, error);
                        return Ok(RmaOutcome::Pending);
                    }
                    if get {
                        self.counters.reads += 1;
                    } else {
                        self.counters.writes += 1;
                    }
                }
                Ok(RmaOutcome::Pending)
            }
            RmaOp::Atomic { op, fetch, value, compare } => {
                if !self.caps.rma.atomic64.contains(op, fetch) || remote.len != 8 {
                    return Err(TlError::Unsupported);
                }
                if remote.addr % 8 != 0 {
                    return Err(TlError::InvalidParam);
                }
                if room == 0 {
                    return Err(TlError::NoResource);
                }
                let slot = self.free_send.pop().ok_or(TlError::NoResource)?;
                let what = match op {
                    AtomicOp::Cswap => SendOp::CompareSwap(remote_at(0), compare, value),
                    _ => SendOp::FetchAdd(remote_at(0), value),
                };
                let part = self.send.local(slot, 8);
                let index = self.new_pending(Pending {
                    link,
                    token,
                    pieces: 1,
                    error: None,
                    hold: Hold::Slot(slot),
                    copy_out: None,
                    fetch: true,
                    reported: false,
                });
                // SAFETY: the slot is registered and the operation's until it completes.
                if let Err(error) = unsafe { self.post(link, what, part, true, Wqe::Rma(index)) } {
                    self.pending[index as usize] = None;
                    self.free_pending.push(index);
                    self.free_send.push(slot);
                    return Err(error);
                }
                self.counters.atomics += 1;
                Ok(RmaOutcome::Pending)
            }
        }
    }

    fn poll(&mut self, sink: &mut dyn FnMut(TlEvent<'_>)) -> usize {
        let mut reported = 0;
        if self.armed {
            self.armed = false;
            if let Err(e) = self.channel.take_events() {
                tracing::warn!(%e, "taking completion events failed");
            }
        }
        let mut batch =
            [WorkCompletion { wr_id: 0, result: Ok(()), status: 0, opcode: 0, byte_len: 0, qp_num: 0 }; 16];
        let mut taken = 0;
        while let Some(wc) = self.early.pop_front() {
            reported += self.handle(wc, sink);
            taken += 1;
        }
        while taken < POLL_BUDGET {
            let n = match self.cq.poll(&mut batch) {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(%e, "polling the completion queue failed");
                    0
                }
            };
            for wc in &batch[..n] {
                reported += self.handle(*wc, sink);
            }
            taken += n;
            if n < batch.len() {
                break;
            }
        }
        if !self.reports_owed.is_empty() {
            for link in std::mem::take(&mut self.reports_owed) {
                self.report_credits(link);
            }
        }
        if !self.repost.is_empty() {
            if let Err(e) = self.post_receives() {
                tracing::warn!(%e, left = self.repost.len(), "reposting receives failed");
            }
        }
        while let Some(event) = self.events.pop_front() {
            reported += 1;
            match event {
                OwnedEvent::RmaDone { link, token, result } => sink(TlEvent::RmaDone { link, token, result }),
                OwnedEvent::LinkFailed { link, error } => sink(TlEvent::LinkFailed { link, error }),
            }
        }
        reported
    }

    fn event_fd(&self) -> Option<BorrowedFd<'_>> {
        // SAFETY: the channel's descriptor lives as long as the channel, which `self` holds.
        Some(unsafe { BorrowedFd::borrow_raw(self.channel.fd()) })
    }

    fn has_events(&self) -> bool {
        !self.early.is_empty() || !self.events.is_empty()
    }

    fn prepare_sleep(&mut self) {
        if let Err(e) = self.cq.arm() {
            tracing::warn!(%e, "arming the completion queue failed");
        }
        self.armed = true;
        // Completions that arrived before the arm raise no event: take them now, so `has_events`
        // says the worker must not sleep.
        let mut batch =
            [WorkCompletion { wr_id: 0, result: Ok(()), status: 0, opcode: 0, byte_len: 0, qp_num: 0 }; 16];
        if let Ok(n) = self.cq.poll(&mut batch) {
            self.early.extend(batch[..n].iter().copied());
        }
    }
}
