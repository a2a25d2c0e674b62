//! [`UringTransport`]: TCP links driven by one io_uring.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use io_uring::types::{CancelBuilder, Fd};
use io_uring::{cqueue, opcode, squeue, IoUring, Probe};
use zcx_control::TransportAddress;

use super::buf_ring::BufRing;
use super::framing::{self, FrameSink, PREFIX_LEN};
use super::link::{Link, LinkState};
use super::socket::{self, RawAddr};
use super::sq_full::{self, SubmissionRoom};
use crate::link_table::LinkTable;
use crate::log_limit::LogLimit;
use crate::placed_receive::PlaceDone;
use crate::transport::{
    Caps, ConnectTarget, LargePayload, LinkId, ListenerId, Payload, PlaceTarget, Placement, RmaCaps,
    SendOutcome, TlError, TlEvent, Transport, MAX_HANDSHAKE_FRAME,
};

/// Largest frame (header plus payload) one `send` accepts and one peer may announce.
pub const MAX_FRAME: usize = 256 * 1024 + 64;

/// Largest payload of one placed frame (`send_placed`).
pub const MAX_PLACED: usize = 1 << 20;

/// Largest protocol header `send_placed` takes (the wire allows more; nothing here needs it).
const MAX_SEND_PLACED_HEADER: usize = 256;

/// In placed mode, a receive into the link buffer reads at most this much beyond the frame in
/// progress: enough for the next frame's header, little of a placed payload behind it.
const PLACED_MODE_READ: usize = 4 << 10;

/// Short receives at frame boundaries after which a link in placed mode leaves bulk mode.
const PLACED_MODE_QUIET_READS: u32 = 16;

/// Copied bytes one link may hold queued before `send` says `NoResource`.
pub const MAX_QUEUED_BYTES: usize = 64 << 20;

/// `IORING_SEND_ZC_REPORT_USAGE`: the notification says whether the kernel copied after all.
const SEND_ZC_REPORT_USAGE: u16 = 1 << 3;
/// `IORING_NOTIF_USAGE_ZC_COPIED`, in the notification's result.
const NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;

/// Run completions cooperatively (`IORING_SETUP_COOP_TASKRUN | TASKRUN_FLAG`): the kernel flags
/// `IORING_SQ_TASKRUN` instead of interrupting the polling thread, and `poll` enters the kernel
/// only when the flag (or a submission) asks for it. Measured on the bench machine (Linux 6.18):
/// 8-byte round trip 15.6 µs against 18.7 µs with interrupts, same streaming throughput; a thread
/// asleep in poll(2) on the eventfd is still woken (`event_fd_wakes_a_sleeping_thread`). Kernels
/// refusing the flags get the default setup.
///
/// Not `IORING_SETUP_DEFER_TASKRUN`: it requires `SINGLE_ISSUER`, which makes every submission
/// from a thread other than the ring's creator (or enabler) fail with `EEXIST`, and a worker is
/// created on one thread and may be progressed by others over time (one at a time, behind its
/// lock). Instead [`UringTransport::migrate`] moves the receives to whichever thread keeps
/// polling. `SO_BUSY_POLL` does nothing on loopback (there is no NAPI queue to poll), and
/// entering the kernel with `GETEVENTS` on every spin costs a system call per spin for nothing:
/// the receive runs as soon as the spinning thread sees `IORING_SQ_TASKRUN` and enters once.
const COOP_TASKRUN: bool = true;

/// The buffer group of the provided-buffer ring.
const BGID: u16 = 0;

// What a request was for, in the top byte of its user data; the low 32 bits name the link or
// listener (index and generation), so completions of a reaped link are recognised.
const KIND_ACCEPT: u64 = 1;
const KIND_CONNECT: u64 = 2;
const KIND_RECV: u64 = 3;
const KIND_SEND: u64 = 4;
const KIND_CANCEL: u64 = 5;
const KIND_LISTENER_CANCEL: u64 = 6;
/// A cancel whose own completion needs no handling: the cancelled request's final completion
/// does the work (re-arming from the polling thread, or switching to bulk receives).
const KIND_QUIET_CANCEL: u64 = 7;

/// A link whose reassembly still misses this many bytes of a frame stops its multishot receive
/// and receives the rest (and what follows) single-shot into its own buffer: no copy.
const BULK_MISSING: usize = 32 << 10;
/// A bulk-mode receive at a frame boundary shorter than this goes back to multishot.
const BULK_EXIT: usize = 4 << 10;
/// Size a bulk-mode link buffer grows to while large frames keep arriving: room for several of
/// the largest frames per receive.
const BULK_BUFFER: usize = 1 << 20;
// A link that has not completed its handshake can never announce enough to switch to bulk mode.
const _: () = assert!(MAX_HANDSHAKE_FRAME < BULK_MISSING);

/// Frames at least this long go straight to the socket whenever its queue is empty; shorter ones
/// only for the first frame of a link per poll round, so bursts of small frames are still batched
/// into one `sendmsg` by the ring.
const DIRECT_ALWAYS: usize = 16 << 10;

/// Consecutive polls from one thread other than the owner before the long-lived requests move
/// to it (see [`UringTransport::migrate`]); alternating threads do not make them bounce.
const MIGRATE_AFTER_POLLS: u32 = 64;

/// Polls since the worker last prepared to sleep before a link that receives data moves to spin
/// mode: a worker that sleeps between messages keeps its receives in the ring.
const SPIN_AFTER_POLLS: u64 = 256;

/// Consecutive empty spin-mode receives after which a link goes back to the ring's receive: a
/// link that went quiet costs no system call per poll for long.
const SPIN_IDLE_RECVS: u32 = 4096;

/// Most links in spin mode at once. Each costs every poll a `recv(2)`, so a worker busy with many
/// links (a server whose clients take turns) would otherwise pay a system call per link per poll;
/// past this, links that receive keep the ring's receive, whose completions cost a poll nothing
/// per link.
const MAX_SPINNING: usize = 4;

/// A cheap identity of the calling thread (never 0).
fn thread_token() -> u64 {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static TOKEN: Cell<u64> = const { Cell::new(0) });
    TOKEN.with(|t| {
        if t.get() == 0 {
            t.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        t.get()
    })
}

fn user_data(kind: u64, id: u32) -> u64 {
    (kind << 56) | u64::from(id)
}

/// Settings of a [`UringTransport`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UringConfig {
    /// Submission queue entries (the completion queue gets twice as many).
    pub ring_entries: u32,
    /// Ask for a kernel submission thread (`IORING_SETUP_SQPOLL`); falls back when refused.
    pub sqpoll: bool,
    /// Zero-copy payloads at least this long go out with `SENDMSG_ZC`.
    pub zcopy_threshold: usize,
    /// The IP put in the worker address; `None` picks the first up, non-loopback IPv4
    /// interface address, else 127.0.0.1.
    pub advertise_ip: Option<IpAddr>,
    /// Size of each provided receive buffer.
    pub recv_buffer_size: usize,
    /// Number of provided receive buffers (rounded up to a power of two).
    pub recv_buffer_count: u16,
    /// Receive with a non-blocking `recv(2)` on every poll, instead of through the ring, on links
    /// that carry traffic while the worker busy-polls (spin mode; see [`UringTransport`]).
    pub spin_recv: bool,
}

impl Default for UringConfig {
    fn default() -> UringConfig {
        UringConfig {
            ring_entries: 256,
            sqpoll: false,
            zcopy_threshold: 64 << 10,
            advertise_ip: None,
            recv_buffer_size: 64 << 10,
            recv_buffer_count: 64,
            spin_recv: true,
        }
    }
}

struct Listener {
    fd: OwnedFd,
    multishot: bool,
    accept_armed: bool,
}

/// An event produced outside the hot receive path, reported in order by the next `poll`.
#[derive(Debug)]
enum Deferred {
    Connected(LinkId),
    Accepted {
        listener: ListenerId,
        link: LinkId,
        peer: SocketAddr,
    },
    SendDone {
        link: LinkId,
        token: u64,
        result: Result<(), TlError>,
    },
    PlaceDone {
        link: LinkId,
        token: u64,
        result: Result<(), TlError>,
    },
    LinkFailed {
        link: LinkId,
        error: TlError,
    },
    /// No event: completions wait in the backlog. It keeps the transport from looking idle
    /// (`is_idle`), so the next poll handles them, at no cost to the idle check.
    BacklogWaiting,
}

/// Turns what the frame parsers find on one link into transport events.
struct LinkEvents<'s> {
    link: LinkId,
    sink: &'s mut dyn FnMut(TlEvent<'_>),
    count: &'s mut usize,
    /// A placed header was seen.
    placed: bool,
}

impl FrameSink for LinkEvents<'_> {
    fn frame(&mut self, bytes: &[u8]) {
        *self.count += 1;
        (self.sink)(TlEvent::Frame { link: self.link, bytes });
    }

    fn placed(&mut self, header: &[u8], len: usize) -> Option<PlaceTarget> {
        *self.count += 1;
        self.placed = true;
        let mut dest = Placement::default();
        (self.sink)(TlEvent::Placed { link: self.link, header, len, dest: &mut dest });
        dest.take()
    }

    fn place_done(&mut self, done: PlaceDone) {
        *self.count += 1;
        (self.sink)(done.event(self.link));
    }
}

/// The ring as `sq_full` retries a request on it.
struct RingRoom<'r> {
    ring: &'r mut IoUring,
    backlog: &'r mut Vec<cqueue::Entry>,
    entry: &'r squeue::Entry,
    sqpoll: bool,
}

impl SubmissionRoom for RingRoom<'_> {
    fn try_push(&mut self) -> bool {
        // SAFETY: as in `UringTransport::push_sqe`, whose entry this is.
        unsafe { self.ring.submission().push(self.entry) }.is_ok()
    }

    fn submit(&mut self) -> std::io::Result<usize> {
        // Carries GETEVENTS while the completion queue overflowed, which moves the kernel's
        // held-back completions into the room `reap` made.
        self.ring.submit()
    }

    fn reap(&mut self) {
        self.backlog.extend(self.ring.completion());
    }

    fn wait_for_room(&mut self) {
        if self.sqpoll {
            // The kernel thread frees entries as it consumes them.
            let _ = self.ring.submitter().squeue_wait();
        }
    }
}

/// A transport of length-prefixed frames over TCP, with every socket operation going through
/// one io_uring: batched submission, multishot accept and receive into provided buffers, and
/// `SENDMSG_ZC` for large zero-copy payloads while the kernel really avoids the copy.
pub struct UringTransport {
    ring: IoUring,
    caps: Caps,
    cfg: UringConfig,
    address: SocketAddr,
    eventfd: OwnedFd,
    buf_ring: Option<BufRing>,
    zc_supported: bool,
    links: LinkTable<Link>,
    dirty: Vec<u32>,
    /// Links in spin mode (possibly stale: each is checked when polled).
    spinning: Vec<u32>,
    /// `polls` when the worker last prepared to sleep.
    last_sleep_poll: u64,
    listeners: Vec<Option<Listener>>,
    deferred: Vec<Deferred>,
    cqes: Vec<cqueue::Entry>,
    /// Completions moved out of the kernel's queue to make room (see `sq_full`), older than any
    /// still in it: the next poll handles them first.
    backlog: Vec<cqueue::Entry>,
    /// Entries of the completion queue (as the kernel sized it).
    cq_entries: usize,
    /// The thread that armed the multishot receives and accepts (its token).
    owner: u64,
    /// Consecutive polls by a thread other than `owner`.
    foreign_polls: u32,
    /// Poll rounds so far.
    polls: u64,
    /// Lines about links refused before their handshake: a flood of them logs a few.
    refused_log: LogLimit,
}

impl UringTransport {
    /// Creates the ring, the provided buffers and the worker-address listener (`ListenerId(0)`
    /// on `0.0.0.0`, any port).
    pub fn new(cfg: &UringConfig) -> Result<UringTransport, TlError> {
        let entries = cfg.ring_entries.clamp(8, 32768);
        let ring = build_ring(entries, cfg.sqpoll)?;
        let cq_entries = ring.params().cq_entries() as usize;
        let mut probe = Probe::new();
        let probed = ring.submitter().register_probe(&mut probe).is_ok();
        let zc_supported = probed && probe.is_supported(opcode::SendMsgZc::CODE);
        let multishot_ok = probed && probe.is_supported(opcode::RecvMulti::CODE);
        let recv_buffer_size = cfg.recv_buffer_size.clamp(4096, 1 << 30);
        let buf_ring = if multishot_ok {
            match BufRing::new(&ring, BGID, cfg.recv_buffer_count, recv_buffer_size) {
                Ok(b) => Some(b),
                Err(err) => {
                    tracing::info!(%err, "io_uring provided buffer rings unavailable");
                    None
                }
            }
        } else {
            None
        };
        if buf_ring.is_some() {
            tracing::info!("uring transport receives with multishot RECV into provided buffers");
        } else {
            tracing::info!("uring transport receives with single-shot RECV into per-link buffers");
        }
        // SAFETY: plain eventfd(2); the result is checked before use.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(TlError::from_errno(socket::last_errno()));
        }
        // SAFETY: `efd` was just created and nothing else owns it.
        let eventfd = unsafe { OwnedFd::from_raw_fd(efd) };
        ring.submitter().register_eventfd(eventfd.as_raw_fd()).map_err(io_err)?;
        let caps = Caps {
            name: "uring",
            reliable: true,
            ordered: true,
            rma: RmaCaps::NONE,
            large_payload: LargePayload::SenderPush,
            max_frame: MAX_FRAME,
            zcopy_threshold: cfg.zcopy_threshold,
            max_placed: MAX_PLACED,
            latency_ns: 5_000,
            bandwidth: 3_000_000_000,
        };
        let mut this = UringTransport {
            ring,
            caps,
            cfg: UringConfig { recv_buffer_size, ..cfg.clone() },
            address: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            eventfd,
            buf_ring,
            zc_supported,
            links: LinkTable::new(),
            dirty: Vec::new(),
            spinning: Vec::new(),
            last_sleep_poll: 0,
            listeners: Vec::new(),
            deferred: Vec::new(),
            cqes: Vec::with_capacity(entries as usize * 2),
            backlog: Vec::new(),
            cq_entries,
            owner: thread_token(),
            foreign_polls: 0,
            polls: 0,
            refused_log: LogLimit::new(Duration::from_secs(1)),
        };
        let (_, bound) = this.listen(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)))?;
        let ip = cfg.advertise_ip.unwrap_or_else(socket::default_advertise_ip);
        this.address = SocketAddr::new(ip, bound.port());
        Ok(this)
    }

    /// The address peers connect to (the worker-address listener).
    pub fn worker_addr(&self) -> SocketAddr {
        self.address
    }

    /// How many links receive in spin mode now (their socket read by `recv(2)` on every poll).
    pub fn spinning_links(&self) -> usize {
        self.spinning.iter().filter(|&&i| self.links.at(i as usize).is_some_and(|l| l.spin)).count()
    }

    fn link_id(&self, index: usize) -> LinkId {
        self.links.id_at(index)
    }

    /// The slot index of a live link id.
    fn index(&self, link: LinkId) -> Option<usize> {
        self.links.slot_of(link)
    }

    /// Adds a link: its id and its slot index.
    fn insert_link(&mut self, link: Link) -> Result<(LinkId, usize), TlError> {
        let id = self.links.insert(link)?;
        Ok((id, self.index(id).expect("just inserted")))
    }

    /// Queues a request. `Err` when it could not be (see `sq_full`): the request is not in the
    /// ring, and the caller fails what it was for.
    #[must_use = "a request that was not queued must fail what it was for"]
    fn push_sqe(&mut self, entry: squeue::Entry) -> Result<(), TlError> {
        // SAFETY: every entry built here points only at memory owned by a link, listener or the
        // buffer ring, which stays alive until the request's completion is reaped.
        if unsafe { self.ring.submission().push(&entry) }.is_ok() {
            return Ok(());
        }
        let sqpoll = self.ring.params().is_setup_sqpoll();
        let mut room = RingRoom { ring: &mut self.ring, backlog: &mut self.backlog, entry: &entry, sqpoll };
        let pushed = sq_full::push_when_full(&mut room);
        if !self.backlog.is_empty() {
            self.deferred.push(Deferred::BacklogWaiting);
        }
        if let Err(err) = pushed {
            tracing::warn!(%err, "io_uring submission queue full and not draining; request refused");
        }
        pushed
    }

    fn arm_recv(&mut self, index: usize) {
        let id = self.link_id(index).0;
        let Some(link) = self.links.at_mut(index) else { return };
        if link.recv_armed || link.state != LinkState::Open || link.spin {
            return;
        }
        if std::mem::take(&mut link.want_spin)
            && !link.want_bulk
            && !link.bulk
            && !link.placing.is_placing()
            && self.spinning.len() < MAX_SPINNING
        {
            // The multishot receive has ended: from now on `spin_recv` reads the socket, and
            // nothing else does, so the stream's order is kept.
            link.reader.drain_into(&mut link.rx);
            link.spin = true;
            link.spin_idle = 0;
            self.spinning.push(index as u32);
            return;
        }
        link.recv_armed = true;
        let fd = Fd(link.raw_fd());
        if link.want_bulk {
            link.want_bulk = false;
            link.bulk = true;
            link.reader.drain_into(&mut link.rx);
        }
        let direct = link.placing.current().and_then(|p| p.next_dest()).filter(|_| link.rx.held() == 0);
        link.recv_direct = false;
        let entry = match (&self.buf_ring, direct) {
            (_, Some((ptr, missing))) if link.bulk || self.buf_ring.is_none() => {
                // The rest of a placed payload, straight into its destination, in one request.
                link.recv_direct = true;
                let len = missing.min(u32::MAX as usize) as u32;
                opcode::Recv::new(fd, ptr, len).flags(libc::MSG_WAITALL).build()
            }
            (Some(ring), _) if !link.bulk => opcode::RecvMulti::new(fd, ring.bgid()).build(),
            _ => {
                let min_cap = if link.bulk {
                    BULK_BUFFER
                } else if pre_handshake(link) {
                    PREFIX_LEN + MAX_HANDSHAKE_FRAME
                } else {
                    self.cfg.recv_buffer_size
                };
                let (ptr, mut len) = link.rx.spare(min_cap);
                if link.placed_mode {
                    len = len.min(PLACED_MODE_READ.max(link.rx.missing()));
                }
                opcode::Recv::new(fd, ptr, len.min(u32::MAX as usize) as u32).build()
            }
        };
        if let Err(err) = self.push_sqe(entry.user_data(user_data(KIND_RECV, id))) {
            if let Some(link) = self.links.at_mut(index) {
                link.recv_armed = false;
                link.recv_direct = false;
            }
            self.kill(index, Some(err));
        }
    }

    fn mark_dirty(&mut self, index: usize) {
        if let Some(link) = self.links.at_mut(index) {
            if !link.dirty {
                link.dirty = true;
                self.dirty.push(index as u32);
            }
        }
    }

    /// Reports finished batches and puts the next send request of a link in the ring.
    fn kick(&mut self, index: usize) {
        let id = self.link_id(index);
        let threshold = self.cfg.zcopy_threshold;
        let zc_supported = self.zc_supported;
        let Some(link) = self.links.at_mut(index) else { return };
        if link.state != LinkState::Open {
            return;
        }
        loop {
            if link.tx.inflight_finished() {
                let deferred = &mut self.deferred;
                link.tx.finish_inflight(&mut |token| {
                    deferred.push(Deferred::SendDone { link: id, token, result: Ok(()) })
                });
            }
            match link.tx.next_msg() {
                Some((msg, max_zcopy)) => {
                    let fd = Fd(link.raw_fd());
                    let entry = if zc_supported && link.zc_enabled && max_zcopy >= threshold {
                        opcode::SendMsgZc::new(fd, msg)
                            .ioprio(SEND_ZC_REPORT_USAGE)
                            .flags(libc::MSG_NOSIGNAL as u32)
                            .build()
                    } else {
                        opcode::SendMsg::new(fd, msg).flags(libc::MSG_NOSIGNAL as u32).build()
                    };
                    if let Err(err) = self.push_sqe(entry.user_data(user_data(KIND_SEND, id.0))) {
                        // Not in flight: the batch is handed back, and failing the link reports
                        // every queued send with the error.
                        if let Some(link) = self.links.at_mut(index) {
                            link.tx.submitted = false;
                        }
                        self.kill(index, Some(err));
                    }
                    return;
                }
                None if link.tx.inflight_finished() => continue,
                None => break,
            }
        }
        if link.local_close == Some(false) && link.tx.is_idle() {
            self.kill(index, None);
        }
    }

    /// Shuts the link down; it is reaped once the kernel has finished its requests.
    fn kill(&mut self, index: usize, error: Option<TlError>) {
        let id = self.link_id(index).0;
        let Some(link) = self.links.at_mut(index) else { return };
        if link.error.is_none() {
            link.error = error;
        }
        if link.state == LinkState::Dead {
            // Already shut down: the caller's completion may have been its last request (a
            // cancelled send can complete after the cancel itself).
            self.try_reap(index);
            return;
        }
        link.state = LinkState::Dead;
        socket::shutdown(link.raw_fd(), libc::SHUT_RDWR);
        if !link.quiescent() {
            link.cancel_inflight = true;
            let fd = link.raw_fd();
            let cancel = opcode::AsyncCancel2::new(CancelBuilder::fd(Fd(fd)).all())
                .build()
                .user_data(user_data(KIND_CANCEL, id));
            if self.push_sqe(cancel).is_err() {
                // The shutdown above ends the link's receives and sends anyway; the reap waits
                // for their completions instead of the cancel's.
                if let Some(link) = self.links.at_mut(index) {
                    link.cancel_inflight = false;
                }
            }
        }
        self.try_reap(index);
    }

    /// Frees a dead link whose requests are all complete, reporting what it owes.
    fn try_reap(&mut self, index: usize) {
        let id = self.link_id(index);
        let reap = self.links.at(index).is_some_and(|l| l.state == LinkState::Dead && l.quiescent());
        if !reap {
            return;
        }
        let Some(mut link) = self.links.remove_at(index) else { return };
        let result = match (link.local_close, link.error) {
            (Some(true), _) => TlError::Canceled,
            (_, Some(err)) => err,
            (_, None) => TlError::Canceled,
        };
        let deferred = &mut self.deferred;
        link.tx.drain_tokens(&mut |token| {
            deferred.push(Deferred::SendDone { link: id, token, result: Err(result) })
        });
        // No request of the link is left, so the kernel no longer writes there.
        if let Some(done) = link.placing.abort(result) {
            self.deferred.push(Deferred::PlaceDone { link: id, token: done.token, result: done.result });
        }
        if link.local_close.is_none() {
            let error = link.error.unwrap_or(TlError::ConnectionReset);
            tracing::debug!(?id, ?error, "uring link failed");
            self.deferred.push(Deferred::LinkFailed { link: id, error });
        }
        drop(link);
    }

    /// Arms the accept of listener `lid`; `Err` when the request could not be queued (the
    /// listener then accepts nothing until armed again).
    fn arm_accept(&mut self, lid: usize) -> Result<(), TlError> {
        let Some(listener) = self.listeners[lid].as_mut() else { return Ok(()) };
        if listener.accept_armed {
            return Ok(());
        }
        listener.accept_armed = true;
        let fd = Fd(listener.fd.as_raw_fd());
        let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
        let entry = if listener.multishot {
            opcode::AcceptMulti::new(fd).flags(flags).build()
        } else {
            opcode::Accept::new(fd, std::ptr::null_mut(), std::ptr::null_mut()).flags(flags).build()
        };
        let armed = self.push_sqe(entry.user_data(user_data(KIND_ACCEPT, lid as u32)));
        if armed.is_err() {
            if let Some(listener) = self.listeners[lid].as_mut() {
                listener.accept_armed = false;
            }
        }
        armed
    }

    fn flush_dirty(&mut self) {
        let mut i = 0;
        while i < self.dirty.len() {
            let index = self.dirty[i] as usize;
            if let Some(link) = self.links.at_mut(index) {
                link.dirty = false;
            }
            self.kick(index);
            i += 1;
        }
        self.dirty.clear();
    }

    /// Reports the events held back for the next poll. Inline for the common case of none (it
    /// runs three times per poll): the draining itself stays out of line.
    #[inline]
    fn flush_deferred(&mut self, sink: &mut dyn FnMut(TlEvent<'_>)) -> usize {
        if self.deferred.is_empty() {
            return 0;
        }
        self.drain_deferred(sink)
    }

    #[inline(never)]
    fn drain_deferred(&mut self, sink: &mut dyn FnMut(TlEvent<'_>)) -> usize {
        let mut n = 0;
        for ev in self.deferred.drain(..) {
            sink(match ev {
                Deferred::Connected(link) => TlEvent::Connected { link },
                Deferred::Accepted { listener, link, peer } => TlEvent::Accepted { listener, link, peer },
                Deferred::SendDone { link, token, result } => TlEvent::SendDone { link, token, result },
                Deferred::PlaceDone { link, token, result } => TlEvent::PlaceDone { link, token, result },
                Deferred::LinkFailed { link, error } => TlEvent::LinkFailed { link, error },
                Deferred::BacklogWaiting => continue,
            });
            n += 1;
        }
        n
    }

    /// Nothing to submit, reap or report: no dirty link, no deferred event, empty queues and no
    /// task work waiting in the kernel.
    #[inline]
    fn is_idle(&self) -> bool {
        // A backlog of completions comes with a deferred marker (see `Deferred::BacklogWaiting`).
        if !self.dirty.is_empty() || !self.deferred.is_empty() || !self.spinning.is_empty() {
            return false;
        }
        // No look at the overflow flag: the kernel holds completions back only while the queue
        // is full, so it is not empty until a poll takes them, in a batch large enough for the
        // poll to flush the held-back ones too.
        // SAFETY: only the ring indices and flags are read; no entry is popped or pushed.
        let (cq, sq) = unsafe { (self.ring.completion_shared(), self.ring.submission_shared()) };
        cq.is_empty() && sq.is_empty() && !(COOP_TASKRUN && sq.taskrun())
    }

    /// The completion queue overflowed: the kernel holds completions back until an enter with
    /// GETEVENTS (which `IoUring::submit` makes while this holds) moves them in. Also true while
    /// the backlog holds completions moved out to make room.
    fn cq_held_back(&self) -> bool {
        // SAFETY: only the flags word is read; no entry is pushed through this shared view.
        !self.backlog.is_empty() || unsafe { self.ring.submission_shared() }.cq_overflow()
    }

    /// Completions held back from the poll's loop: those moved to the backlog to make room (older
    /// than any in the queue, so handled first), then those the kernel held back when the queue
    /// overflowed, which an enter moves into the queue for the loop to take.
    #[cold]
    #[inline(never)]
    fn handle_held_back(&mut self, sink: &mut dyn FnMut(TlEvent<'_>), count: &mut usize) {
        while !self.backlog.is_empty() {
            let batch = std::mem::take(&mut self.backlog);
            for cqe in &batch {
                self.handle(cqe, sink, count);
            }
        }
        // SAFETY: only the flags word is read; no entry is pushed through this shared view.
        if unsafe { self.ring.submission_shared() }.cq_overflow() {
            // It carries GETEVENTS while the overflow flag is set.
            if let Err(err) = self.ring.submit() {
                tracing::warn!(%err, "io_uring enter to flush overflowed completions failed");
            }
        }
    }

    /// One non-blocking receive on every link in spin mode; links that left it drop off the list.
    fn poll_spinning(&mut self, sink: &mut dyn FnMut(TlEvent<'_>), count: &mut usize) {
        let mut i = 0;
        while i < self.spinning.len() {
            let index = self.spinning[i] as usize;
            if self.spin_recv(index, sink, count) {
                i += 1;
            } else {
                self.spinning.swap_remove(i);
            }
        }
    }

    /// Spin mode's receive: a `recv(2)` that does not wait, into the link's own buffer, whose
    /// frames go to `sink` at once. On a busy-polling worker this is a shorter path for each
    /// message than the ring's: no poll wakeup queued by the sender's kernel path, no task work
    /// to run, no completion to post and reap. Returns whether the link stays in spin mode; it
    /// leaves it for the ring's receives when it is gone, failed, went quiet, or started a large
    /// frame or a placed payload (bulk mode receives those).
    fn spin_recv(&mut self, index: usize, sink: &mut dyn FnMut(TlEvent<'_>), count: &mut usize) -> bool {
        let id = self.link_id(index);
        let recv_size = self.cfg.recv_buffer_size;
        let Some(link) = self.links.at_mut(index).filter(|l| l.spin && l.state == LinkState::Open) else {
            return false;
        };
        let (ptr, len) = link.rx.spare(recv_size);
        // SAFETY: `ptr..ptr + len` is the spare room of the link's buffer, which nothing else
        // touches during the call; the call does not block.
        let got = unsafe { libc::recv(link.raw_fd(), ptr.cast(), len, libc::MSG_DONTWAIT) };
        if got > 0 {
            link.spin_idle = 0;
            let mut events = LinkEvents { link: id, sink, count, placed: false };
            let fed = link.rx.filled(got as usize, link.reader.max_frame(), &mut link.placing, &mut events);
            let placed = events.placed;
            if let Err(too_large) = fed {
                self.log_oversized(index, too_large.len);
                self.leave_spin(index);
                self.kill(index, Some(TlError::InvalidParam));
                return false;
            }
            if placed || link.placing.is_placing() || link.rx.missing() >= BULK_MISSING {
                // Large payloads: bulk mode receives them without a system call per poll.
                link.placed_mode |= placed;
                link.bulk = true;
                self.leave_spin(index);
                return false;
            }
            return true;
        }
        let error = match got {
            0 => TlError::ConnectionReset,
            _ => match socket::last_errno() {
                libc::EAGAIN | libc::EINTR => {
                    link.spin_idle += 1;
                    if link.spin_idle < SPIN_IDLE_RECVS {
                        return true;
                    }
                    self.leave_spin(index);
                    return false;
                }
                errno => TlError::from_errno(errno),
            },
        };
        self.leave_spin(index);
        self.kill(index, Some(error));
        false
    }

    /// Takes a link out of spin mode and gives its receives back to the ring (single-shot into
    /// its buffer while that holds part of a frame, as bulk mode does). The caller drops it from
    /// `spinning`.
    fn leave_spin(&mut self, index: usize) {
        let Some(link) = self.links.at_mut(index) else { return };
        if !link.spin {
            return;
        }
        link.spin = false;
        if link.rx.held() > 0 {
            link.bulk = true;
        }
        self.arm_recv(index);
    }

    /// The peer of the link at `index` announced a frame longer than the link allows (`len`;
    /// 0 when the reader had failed before): logged, the caller fails the link.
    #[cold]
    fn log_oversized(&mut self, index: usize, len: u64) {
        let Some(link) = self.links.at(index) else { return };
        let peer = link.peer_addr;
        if !pre_handshake(link) {
            tracing::debug!(?peer, len, "peer announced an oversized frame; closing the link");
            return;
        }
        if let Some(held_back) = self.refused_log.allow(Instant::now()) {
            tracing::warn!(
                ?peer,
                len,
                limit = MAX_HANDSHAKE_FRAME,
                held_back,
                "connection announced a frame larger than a handshake before completing one; closing it"
            );
        }
    }

    fn taskrun_pending(&self) -> bool {
        // SAFETY: only the flags word is read; no entry is pushed through this shared view.
        COOP_TASKRUN && unsafe { self.ring.submission_shared() }.taskrun()
    }

    fn submit(&mut self) {
        let pending = !self.ring.submission().is_empty();
        if pending || self.taskrun_pending() {
            if let Err(err) = self.ring.submit() {
                if err.raw_os_error() != Some(libc::EBUSY) && err.raw_os_error() != Some(libc::EINTR) {
                    tracing::warn!(%err, "io_uring submit failed");
                }
            }
        }
    }

    fn handle(&mut self, cqe: &cqueue::Entry, sink: &mut dyn FnMut(TlEvent<'_>), count: &mut usize) {
        let ud = cqe.user_data();
        let kind = ud >> 56;
        let id = ud as u32;
        let res = cqe.result();
        let flags = cqe.flags();
        match kind {
            KIND_ACCEPT => self.on_accept(id as usize, res, flags),
            KIND_LISTENER_CANCEL | KIND_QUIET_CANCEL => {}
            KIND_CONNECT | KIND_RECV | KIND_SEND | KIND_CANCEL => {
                let index = self.index(LinkId(id));
                if kind == KIND_RECV {
                    self.on_recv(index, LinkId(id), res, flags, sink, count);
                    return;
                }
                let Some(index) = index else { return };
                match kind {
                    KIND_CONNECT => self.on_connect(index, res),
                    KIND_SEND => self.on_send(index, res, flags),
                    _ => {
                        if let Some(link) = self.links.at_mut(index) {
                            link.cancel_inflight = false;
                        }
                        self.try_reap(index);
                    }
                }
            }
            _ => tracing::debug!(ud, "unexpected io_uring completion"),
        }
    }

    fn on_accept(&mut self, lid: usize, res: i32, flags: u32) {
        let more = cqueue::more(flags);
        let alive = matches!(self.listeners.get(lid), Some(Some(_)));
        if res >= 0 {
            // SAFETY: a successful accept completion hands us a new descriptor nobody owns.
            let fd = unsafe { OwnedFd::from_raw_fd(res) };
            if alive {
                self.on_accepted(lid, fd);
            }
        } else if alive {
            tracing::debug!(errno = -res, "io_uring accept failed");
        }
        if !more {
            if let Some(Some(listener)) = self.listeners.get_mut(lid) {
                listener.accept_armed = false;
                if res == -libc::EINVAL && listener.multishot {
                    tracing::info!("multishot accept refused; re-arming single accepts");
                    listener.multishot = false;
                }
                if !matches!(-res, libc::EBADF | libc::ENOTSOCK) {
                    if let Err(err) = self.arm_accept(lid) {
                        tracing::error!(%err, lid, "could not re-arm a listener's accept; it accepts no more");
                    }
                }
            }
        }
    }

    fn on_accepted(&mut self, lid: usize, fd: OwnedFd) {
        if let Err(err) = socket::set_nodelay(fd.as_raw_fd()) {
            tracing::debug!(%err, "TCP_NODELAY on an accepted socket failed");
        }
        let peer = socket::peer_addr(fd.as_raw_fd());
        // Anyone's until the protocol layer says otherwise (`link_established`).
        let mut link = Link::new(fd, LinkState::Open, MAX_HANDSHAKE_FRAME, RawAddr::zeroed());
        link.peer_addr = peer;
        let Ok((id, index)) = self.insert_link(link) else { return };
        let peer = peer.unwrap_or(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
        self.deferred.push(Deferred::Accepted { listener: ListenerId(lid as u32), link: id, peer });
        self.arm_recv(index);
    }

    fn on_connect(&mut self, index: usize, res: i32) {
        let Some(link) = self.links.at_mut(index) else { return };
        link.connect_inflight = false;
        if link.state == LinkState::Dead {
            self.try_reap(index);
            return;
        }
        if res < 0 {
            self.kill(index, Some(TlError::from_errno(-res)));
            return;
        }
        link.state = LinkState::Open;
        let report = link.local_close.is_none();
        let id = self.link_id(index);
        if report {
            self.deferred.push(Deferred::Connected(id));
        }
        self.arm_recv(index);
        self.kick(index);
    }

    fn on_send(&mut self, index: usize, res: i32, flags: u32) {
        let Some(link) = self.links.at_mut(index) else { return };
        if cqueue::notif(flags) {
            link.tx.zc_notifs = link.tx.zc_notifs.saturating_sub(1);
            if (res as u32) & NOTIF_USAGE_ZC_COPIED != 0 && link.zc_enabled {
                tracing::debug!("kernel copied a zero-copy send; plain sends on this link from now on");
                link.zc_enabled = false;
            }
        } else {
            if cqueue::more(flags) {
                link.tx.zc_notifs += 1;
            }
            if res == -libc::ECANCELED && link.state == LinkState::Open {
                // Not cancelled by us (a live link's sends never are): the thread that submitted
                // it exited, and io_uring cancels an exiting thread's requests. Nothing was sent;
                // `kick` below submits it again from this thread.
                link.tx.complete(0);
            } else if res < 0 {
                link.tx.submitted = false;
                self.kill(index, Some(TlError::from_errno(-res)));
                return;
            } else {
                link.tx.complete(res as usize);
            }
        }
        if link.state == LinkState::Dead {
            self.try_reap(index);
        } else {
            self.kick(index);
        }
    }

    fn on_recv(
        &mut self,
        index: Option<usize>,
        id: LinkId,
        res: i32,
        flags: u32,
        sink: &mut dyn FnMut(TlEvent<'_>),
        count: &mut usize,
    ) {
        let bid = cqueue::buffer_select(flags);
        let more = cqueue::more(flags);
        let Some(index) = index else {
            // A completion of a reaped link: only give its buffer back.
            if let (Some(bid), Some(ring)) = (bid, self.buf_ring.as_mut()) {
                ring.recycle(bid);
            }
            return;
        };
        let mut error = None;
        if res > 0 {
            // Frames must follow the Connected/Accepted event of their link.
            *count += self.flush_deferred(sink);
            let link = self.links.at_mut(index).expect("index is live");
            let mut events = LinkEvents { link: id, sink, count, placed: false };
            let fed = if link.recv_direct && bid.is_none() {
                link.recv_direct = false;
                // The kernel wrote no more than was asked: what is missing of the payload.
                let advanced = link.placing.current_mut().map_or(Ok(()), |p| p.advance(res as usize));
                framing::finish_placing(&mut link.placing, &mut events);
                advanced.map_err(|_| framing::FrameTooLarge { len: res as u64 })
            } else {
                match (bid, self.buf_ring.as_ref()) {
                    (Some(bid), Some(ring)) => {
                        let fed =
                            link.reader.feed(ring.data(bid, res as usize), &mut link.placing, &mut events);
                        let placing_much = link
                            .placing
                            .current()
                            .is_some_and(|p| p.next_dest().is_some() && p.remaining() >= BULK_MISSING);
                        // Not before the handshake: a connection that is anyone's gets no system
                        // call per poll and no buffer of its own.
                        let spin = self.cfg.spin_recv
                            && self.spinning.len() < MAX_SPINNING
                            && self.polls.wrapping_sub(self.last_sleep_poll) >= SPIN_AFTER_POLLS
                            && !link.placing.is_placing()
                            && !link.placed_mode
                            && !pre_handshake(link);
                        let cancel =
                            if (link.reader.missing() >= BULK_MISSING || placing_much) && !link.want_bulk {
                                link.want_bulk = true;
                                link.want_spin = false;
                                true
                            } else if spin && !link.want_bulk && !link.want_spin {
                                // Traffic while the worker busy-polls: stop the multishot receive and
                                // read the socket directly from then on.
                                link.want_spin = true;
                                true
                            } else {
                                false
                            };
                        if cancel && more {
                            let ud = user_data(KIND_RECV, id.0);
                            let quiet = user_data(KIND_QUIET_CANCEL, 0);
                            if self.push_sqe(opcode::AsyncCancel::new(ud).build().user_data(quiet)).is_err() {
                                // The multishot receive goes on; the switch is tried again on
                                // its next completion.
                                let link = self.links.at_mut(index).expect("index is live");
                                link.want_bulk = false;
                                link.want_spin = false;
                            }
                        }
                        fed
                    }
                    _ => {
                        let max_frame = link.reader.max_frame();
                        let fed = link.rx.filled(res as usize, max_frame, &mut link.placing, &mut events);
                        let quiet =
                            link.rx.is_empty() && !link.placing.is_placing() && (res as usize) < BULK_EXIT;
                        link.quiet_reads = if quiet { link.quiet_reads + 1 } else { 0 };
                        if link.bulk
                            && quiet
                            && (!link.placed_mode || link.quiet_reads >= PLACED_MODE_QUIET_READS)
                        {
                            link.bulk = false;
                            link.placed_mode = false;
                        }
                        fed
                    }
                }
            };
            if events.placed {
                self.links.at_mut(index).expect("index is live").placed_mode = true;
            }
            if let Err(too_large) = fed {
                self.log_oversized(index, too_large.len);
                error = Some(TlError::InvalidParam);
            }
        } else if res == 0 {
            error = Some(TlError::ConnectionReset);
        } else if res == -libc::EINVAL && self.buf_ring.is_some() {
            tracing::info!(
                "multishot receive refused; falling back to single-shot RECV into per-link buffers"
            );
            if let Some(ring) = self.buf_ring.take() {
                ring.unregister(&self.ring);
                // Dropped with the transport: other links may still hold buffers of it.
                std::mem::forget(ring);
            }
        } else if res != -libc::ENOBUFS && res != -libc::ECANCELED {
            error = Some(TlError::from_errno(-res));
        }
        if let (Some(bid), Some(ring)) = (bid, self.buf_ring.as_mut()) {
            ring.recycle(bid);
        }
        let link = self.links.at_mut(index).expect("index is live");
        let multishot_on = self.buf_ring.is_some() && bid.is_some();
        if !more || !multishot_on {
            link.recv_armed = false;
        }
        if let Some(err) = error {
            self.kill(index, Some(err));
            return;
        }
        if link.state == LinkState::Dead {
            self.try_reap(index);
        } else if !link.recv_armed {
            self.arm_recv(index);
        }
    }

    fn connect_addr(&mut self, remote: SocketAddr, local: Option<SocketAddr>) -> Result<LinkId, TlError> {
        let fd = socket::tcp_socket(&remote)?;
        socket::set_nodelay(fd.as_raw_fd())?;
        if let Some(local) = local {
            socket::bind(fd.as_raw_fd(), &local)?;
        }
        let mut link = Link::new(fd, LinkState::Connecting, MAX_FRAME, RawAddr::from_socket_addr(&remote));
        link.connect_inflight = true;
        link.peer_addr = Some(remote);
        let raw_fd = link.raw_fd();
        let addr_ptr = link.remote.as_ptr();
        let addr_len = link.remote.len;
        let (id, _) = self.insert_link(link)?;
        let connect = opcode::Connect::new(Fd(raw_fd), addr_ptr, addr_len)
            .build()
            .user_data(user_data(KIND_CONNECT, id.0));
        if let Err(err) = self.push_sqe(connect) {
            // Never reported: the caller gets the error instead of a link id.
            self.links.remove(id);
            return Err(err);
        }
        Ok(id)
    }

    /// Moves the long-lived requests (multishot receives and accepts) to the calling thread.
    ///
    /// io_uring runs the deferred part of a request (the receive once the socket is readable)
    /// as task work of the thread that *submitted* it, and with `COOP_TASKRUN` that thread only
    /// runs it when it next enters the kernel. A transport created on one thread and progressed
    /// on another would have every receive copied by the first thread, whenever it happens to
    /// make a system call. Cancelling them makes their final completion re-arm them from here.
    fn migrate(&mut self, me: u64) {
        self.owner = me;
        self.foreign_polls = 0;
        for index in 0..self.links.slot_count() {
            let Some(link) = self.links.at(index) else { continue };
            if link.recv_armed && link.state == LinkState::Open {
                let ud = user_data(KIND_RECV, self.link_id(index).0);
                let cancel = opcode::AsyncCancel::new(ud).build().user_data(user_data(KIND_QUIET_CANCEL, 0));
                if self.push_sqe(cancel).is_err() {
                    // The receive stays with the thread that armed it: slower, still correct.
                    return;
                }
            }
        }
        for lid in 0..self.listeners.len() {
            if matches!(&self.listeners[lid], Some(l) if l.accept_armed) {
                let ud = user_data(KIND_ACCEPT, lid as u32);
                let cancel = opcode::AsyncCancel::new(ud).build().user_data(user_data(KIND_QUIET_CANCEL, 0));
                if self.push_sqe(cancel).is_err() {
                    return;
                }
            }
        }
    }

    /// Queues or sends one frame behind `prefix` (an ordinary or a placed one), refusing frames
    /// longer than `limit`.
    fn send_frame(
        &mut self,
        link: LinkId,
        prefix: [u8; PREFIX_LEN],
        header: &[u8],
        payload: Payload<'_>,
        limit: usize,
    ) -> Result<SendOutcome, TlError> {
        let index = self.index(link).ok_or(TlError::InvalidParam)?;
        let l = self.links.at_mut(index).expect("index is live");
        if !l.accepts_sends() {
            return Err(l.error.unwrap_or(TlError::InvalidParam));
        }
        if header.len() + payload.len() > limit {
            return Err(TlError::InvalidParam);
        }
        let frame_len = header.len() + payload.len();
        if l.state == LinkState::Open
            && l.tx.is_idle()
            && (frame_len >= DIRECT_ALWAYS || l.direct_round != self.polls)
        {
            // Nothing is queued or in flight: hand the frame to the kernel at once, with no copy
            // and no wait for the next poll; only what the socket does not take is queued.
            // A zero-copy payload the kernel would copy anyway (no SENDMSG_ZC, or it reported
            // copying on this link, as on loopback) goes out directly too; only its rest, if the
            // socket is full, stays referenced in the queue.
            let zc_would_copy =
                !(self.zc_supported && l.zc_enabled) || payload.len() < self.cfg.zcopy_threshold;
            let (bytes, zcopy) = match &payload {
                Payload::None => (Some(&[][..]), None),
                Payload::Copy(bytes) => (Some(*bytes), None),
                Payload::Zcopy(z) if zc_would_copy => {
                    // SAFETY: `ZcopyPayload::new`'s contract keeps the bytes live until SendDone,
                    // which cannot come before this call returns.
                    (Some(unsafe { z.as_slice() }), Some((z.ptr(), z.len(), z.token())))
                }
                Payload::Zcopy(_) => (None, None),
            };
            if let Some(bytes) = bytes {
                l.direct_round = self.polls;
                let sent = socket::send_frame_now(l.raw_fd(), &prefix, header, bytes);
                if sent == prefix.len() + header.len() + bytes.len() {
                    // Everything is in the kernel: a zero-copy payload is done with at once.
                    return Ok(SendOutcome::Done);
                }
                // The queue was idle, so the rest fits under the cap.
                match zcopy {
                    None => l.tx.push_rest(&prefix, header, bytes, None, sent),
                    Some(z) => l.tx.push_rest(&prefix, header, &[], Some(z), sent),
                }
                self.mark_dirty(index);
                return Ok(if zcopy.is_some() { SendOutcome::InFlight } else { SendOutcome::Done });
            }
        }
        let outcome = match payload {
            Payload::None => {
                check_room(l, header.len())?;
                l.tx.push(&prefix, header, &[], None);
                SendOutcome::Done
            }
            Payload::Copy(bytes) => {
                check_room(l, header.len() + bytes.len())?;
                l.tx.push(&prefix, header, bytes, None);
                SendOutcome::Done
            }
            Payload::Zcopy(z) => {
                check_room(l, header.len())?;
                l.tx.push(&prefix, header, &[], Some((z.ptr(), z.len(), z.token())));
                SendOutcome::InFlight
            }
        };
        if l.state == LinkState::Open {
            self.mark_dirty(index);
        }
        Ok(outcome)
    }

    fn drain_on_drop(&mut self) {
        for index in 0..self.links.slot_count() {
            if let Some(link) = self.links.at_mut(index) {
                link.local_close = Some(true);
                self.kill(index, None);
            }
        }
        let lids: Vec<usize> = (0..self.listeners.len()).collect();
        for lid in lids {
            self.close_listener(ListenerId(lid as u32));
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        while !self.links.is_empty() && Instant::now() < deadline {
            let ts = io_uring::types::Timespec::new().nsec(10_000_000);
            let args = io_uring::types::SubmitArgs::new().timespec(&ts);
            let _ = self.ring.submitter().submit_with_args(1, &args);
            self.poll(&mut |_| {});
        }
    }
}

fn io_err(err: std::io::Error) -> TlError {
    TlError::from_errno(err.raw_os_error().unwrap_or(libc::EIO))
}

fn build_ring(entries: u32, sqpoll: bool) -> Result<IoUring, TlError> {
    let mut builder = IoUring::builder();
    builder.setup_cqsize(entries * 2);
    if COOP_TASKRUN {
        builder.setup_coop_taskrun().setup_taskrun_flag();
    }
    if sqpoll {
        let mut sq = builder.clone();
        sq.setup_sqpoll(1000);
        match sq.build(entries) {
            Ok(ring) => {
                tracing::info!("uring transport uses a kernel submission thread (SQPOLL)");
                return Ok(ring);
            }
            Err(err) => {
                tracing::warn!(%err, "IORING_SETUP_SQPOLL refused; submitting from the polling thread")
            }
        }
    }
    match builder.build(entries) {
        Ok(ring) => Ok(ring),
        Err(err) if COOP_TASKRUN => {
            tracing::info!(%err, "cooperative task running refused; using default io_uring setup");
            let mut plain = IoUring::builder();
            plain.setup_cqsize(entries * 2);
            plain.build(entries).map_err(io_err)
        }
        Err(err) => Err(io_err(err)),
    }
}

impl Drop for UringTransport {
    fn drop(&mut self) {
        self.drain_on_drop();
        if let Some(ring) = &self.buf_ring {
            ring.unregister(&self.ring);
        }
    }
}

impl Transport for UringTransport {
    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn address(&self) -> Option<TransportAddress> {
        Some(TransportAddress::Uring { addr: self.address })
    }

    fn listen(&mut self, addr: SocketAddr) -> Result<(ListenerId, SocketAddr), TlError> {
        let fd = socket::listener(&addr)?;
        let bound = socket::local_addr(fd.as_raw_fd()).ok_or(TlError::InvalidParam)?;
        let lid = self.listeners.len();
        self.listeners.push(Some(Listener { fd, multishot: true, accept_armed: false }));
        if let Err(err) = self.arm_accept(lid) {
            self.listeners[lid] = None;
            return Err(err);
        }
        Ok((ListenerId(lid as u32), bound))
    }

    fn close_listener(&mut self, listener: ListenerId) {
        let lid = listener.0 as usize;
        let Some(Some(l)) = self.listeners.get(lid) else { return };
        // Stop listening now (the ring keeps the file until the accept request ends).
        socket::shutdown(l.fd.as_raw_fd(), libc::SHUT_RDWR);
        if l.accept_armed {
            let ud = user_data(KIND_ACCEPT, lid as u32);
            let cancel =
                opcode::AsyncCancel::new(ud).build().user_data(user_data(KIND_LISTENER_CANCEL, lid as u32));
            // Without the cancel the shut-down socket ends the accept by itself.
            let _ = self.push_sqe(cancel);
        }
        self.listeners[lid] = None;
    }

    fn connect(&mut self, target: ConnectTarget<'_>) -> Result<LinkId, TlError> {
        match target {
            ConnectTarget::Sockaddr { remote, local } => self.connect_addr(remote, local),
            ConnectTarget::Address(TransportAddress::Uring { addr }) => self.connect_addr(*addr, None),
            ConnectTarget::Address(_) | ConnectTarget::Session { .. } => Err(TlError::Unsupported),
        }
    }

    fn link_addrs(&self, link: LinkId) -> (Option<SocketAddr>, Option<SocketAddr>) {
        let Some(index) = self.index(link) else { return (None, None) };
        let l = self.links.at(index).expect("index is live");
        let local = l.local_addr.or_else(|| socket::local_addr(l.raw_fd()));
        let peer = socket::peer_addr(l.raw_fd()).or(l.peer_addr);
        (local, peer)
    }

    fn send(&mut self, link: LinkId, header: &[u8], payload: Payload<'_>) -> Result<SendOutcome, TlError> {
        let prefix = framing::prefix(header.len() + payload.len());
        self.send_frame(link, prefix, header, payload, MAX_FRAME)
    }

    fn send_placed(
        &mut self,
        link: LinkId,
        header: &[u8],
        payload: Payload<'_>,
    ) -> Result<SendOutcome, TlError> {
        if header.len() > MAX_SEND_PLACED_HEADER || payload.len() > MAX_PLACED {
            return Err(TlError::InvalidParam);
        }
        // The placed header starts with the payload length (see `framing`).
        let mut head = [0u8; PREFIX_LEN + MAX_SEND_PLACED_HEADER];
        head[..PREFIX_LEN].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        head[PREFIX_LEN..PREFIX_LEN + header.len()].copy_from_slice(header);
        let head = &head[..PREFIX_LEN + header.len()];
        let prefix = framing::placed_prefix(head.len());
        self.send_frame(link, prefix, head, payload, usize::MAX)
    }

    fn link_established(&mut self, link: LinkId) {
        let Some(index) = self.index(link) else { return };
        let l = self.links.at_mut(index).expect("index is live");
        l.reader.set_max_frame(MAX_FRAME);
    }

    fn close(&mut self, link: LinkId, force: bool) {
        let Some(index) = self.index(link) else { return };
        let l = self.links.at_mut(index).expect("index is live");
        if l.local_close.is_some() {
            if force && l.local_close == Some(false) {
                l.local_close = Some(true);
                self.kill(index, None);
            }
            return;
        }
        l.local_close = Some(force);
        if force || l.state == LinkState::Dead || (l.state == LinkState::Open && l.tx.is_idle()) {
            self.kill(index, None);
        } else if l.state == LinkState::Open {
            self.mark_dirty(index);
        }
    }

    fn has_pending_sends(&self, link: LinkId) -> bool {
        match self.index(link) {
            Some(index) => !self.links.at(index).expect("index is live").tx.is_idle(),
            None => false,
        }
    }

    fn poll(&mut self, sink: &mut dyn FnMut(TlEvent<'_>)) -> usize {
        let mut count = 0;
        self.polls += 1;
        let me = thread_token();
        if me != self.owner {
            self.foreign_polls += 1;
            if self.foreign_polls >= MIGRATE_AFTER_POLLS {
                self.migrate(me);
            }
        } else {
            self.foreign_polls = 0;
        }
        if self.is_idle() {
            // The common case of a busy-polling worker whose traffic is on another transport:
            // a few loads, no ring synchronisation.
            return 0;
        }
        self.flush_dirty();
        self.submit();
        count += self.flush_deferred(sink);
        let mut cqes = std::mem::take(&mut self.cqes);
        if !self.backlog.is_empty() {
            self.handle_held_back(sink, &mut count);
        }
        loop {
            cqes.clear();
            cqes.extend(self.ring.completion().take(cqes.capacity().max(self.cq_entries)));
            if cqes.is_empty() {
                break;
            }
            for cqe in &cqes {
                self.handle(cqe, sink, &mut count);
            }
            // A batch of half the queue or more: the kernel may have found it full, and held
            // completions back. (Overflowing a queue found less than half full would take half a
            // queue of completions posted while one batch was being taken.)
            if cqes.len() >= self.cq_entries / 2 || !self.backlog.is_empty() {
                self.handle_held_back(sink, &mut count);
            }
        }
        self.cqes = cqes;
        // After the completions: a link's last multishot completion comes before what its
        // spin-mode receives read.
        if !self.spinning.is_empty() {
            count += self.flush_deferred(sink);
            self.poll_spinning(sink, &mut count);
        }
        self.flush_dirty();
        self.submit();
        count += self.flush_deferred(sink);
        count
    }

    fn event_fd(&self) -> Option<BorrowedFd<'_>> {
        // SAFETY: the eventfd lives as long as `self`, which the borrow is tied to.
        Some(unsafe { BorrowedFd::borrow_raw(self.eventfd.as_raw_fd()) })
    }

    /// Quiet with no connection at all (listeners may wait for the worker's periodic full poll:
    /// an accept is not latency-critical) and nothing submitted, completed or deferred. A
    /// socket's data has no doorbell, so any open link keeps the transport polled every time.
    fn is_quiet(&self) -> bool {
        self.links.is_empty() && self.is_idle()
    }

    /// Quiet is dormant here: without a link, only a listener's connection can come.
    fn is_dormant(&self) -> bool {
        self.is_quiet()
    }

    /// Every byte is in the kernel once the link's send queue is empty: nothing pending, no send
    /// request out, no zero-copy page the kernel still holds.
    fn link_delivered(&self, link: LinkId) -> bool {
        self.index(link)
            .and_then(|index| self.links.at(index))
            .is_some_and(|l| l.state == LinkState::Open && l.error.is_none() && l.tx.is_idle())
    }

    fn prepare_sleep(&mut self) {
        self.last_sleep_poll = self.polls;
        if self.spinning.is_empty() {
            return;
        }
        // Spin-mode links have no receive in the ring, so their data would not wake a sleeper:
        // hand them back and submit now, so that data already waiting completes at once and
        // `has_events` sees it.
        for index in std::mem::take(&mut self.spinning) {
            self.leave_spin(index as usize);
        }
        self.submit();
    }

    fn has_events(&self) -> bool {
        // Drain the eventfd first: any completion posted after this read signals it again.
        let mut counter = 0u64;
        // SAFETY: a non-blocking read of 8 bytes into a live u64.
        unsafe { libc::read(self.eventfd.as_raw_fd(), std::ptr::addr_of_mut!(counter).cast(), 8) };
        // SAFETY: only the ring indices and flags are read; no entry is popped or pushed.
        let (cq_ready, sq_pending) =
            unsafe { (!self.ring.completion_shared().is_empty(), !self.ring.submission_shared().is_empty()) };
        cq_ready
            || sq_pending
            || self.taskrun_pending()
            || self.cq_held_back()
            || !self.deferred.is_empty()
            || !self.dirty.is_empty()
    }
}

/// True for a link a listener accepted whose handshake the protocol layer has not reported
/// complete (`link_established`): it takes no frame larger than a handshake.
fn pre_handshake(link: &Link) -> bool {
    link.reader.max_frame() < MAX_FRAME
}

fn check_room(link: &Link, extra: usize) -> Result<(), TlError> {
    if link.tx.copied_bytes() + extra > MAX_QUEUED_BYTES {
        return Err(TlError::NoResource);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll_until(t: &mut UringTransport, what: &str, mut done: impl FnMut(&UringTransport) -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !done(t) {
            assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
            t.poll(&mut |_| {});
        }
    }

    /// The kernel may post a cancelled send's completion after the cancel's own: the link, dead
    /// by then, must still be reaped on that last completion, or its payload tokens never come
    /// back and the operations holding them never end.
    #[test]
    fn a_send_completing_after_the_cancel_lets_the_dead_link_be_reaped() {
        let mut t = UringTransport::new(&UringConfig::default()).expect("io_uring transport");
        let (_listener, addr) = t.listen("127.0.0.1:0".parse().unwrap()).expect("listen");
        let link = t.connect(ConnectTarget::Sockaddr { remote: addr, local: None }).expect("connect");
        poll_until(&mut t, "the connection", |t| {
            t.index(link).and_then(|i| t.links.at(i)).is_some_and(|l| l.state == LinkState::Open)
        });
        let index = t.index(link).expect("live link");
        // A send request is out when the link is killed.
        t.links.at_mut(index).expect("live link").tx.submitted = true;
        t.kill(index, None);
        poll_until(&mut t, "the cancel and the receive to end", |t| {
            t.links.at(index).is_some_and(|l| !l.cancel_inflight && !l.recv_armed)
        });
        assert!(t.index(link).is_some(), "reaped with a send request out");
        // The send's completion comes last.
        t.on_send(index, -libc::ECANCELED, 0);
        assert!(t.index(link).is_none(), "the dead link was not reaped on its last completion");
    }
}
