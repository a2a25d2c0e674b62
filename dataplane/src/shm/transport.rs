//! [`ShmTransport`]: links of two shared-memory rings between processes of one host.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use zcx_control::{ShmLocator, TransportAddress};

use super::board::{self, offer, Board, BoardBit, BoardMap, BOARD_MIN_LINKS, BOARD_SLOTS};
use super::conn::{self, Hello, Received, SocketState, HELLO_LEN};
use super::lane::ShmSendLane;
use super::peer_region::PeerRegion;
use super::put_help::HelpWords;
use super::ring::{
    max_record_payload, valid_capacity, Consumer, Producer, KIND_FRAME, KIND_PLACED, KIND_PLACE_DONE,
};
use super::segment::Segment;
use crate::active_set::ActiveSet;
use crate::doorbell::Doorbell;
use crate::lend::LendSlot;
use crate::link_table::LinkTable;
use crate::placed_receive::PlaceTracker;
use crate::proto::peer_bytes;
use crate::same_host::SameHostFastPath;
use crate::transport::{
    AtomicOps, Caps, ConnectTarget, LargePayload, LinkId, ListenerId, LocalMem, Payload, Placement,
    RemoteMem, RmaCaps, RmaOp, RmaOutcome, SendOutcome, TlError, TlEvent, Transport,
};

/// Largest protocol header `send_placed` takes.
const MAX_PLACED_HEADER: usize = 256;
/// Bytes of a placed descriptor before the header: remote address and length.
const PLACED_PREFIX: usize = 16;
/// Bytes of a place-done record: the cookie of the released payload and a status (0 or errno).
const DONE_LEN: usize = 12;
/// Bytes copied from a peer per link and poll, so one large placement does not stall the others.
const PLACE_CHUNK: usize = 8 << 20;
/// Records read per link and poll while records come in bursts (see [`Link::rx_streak`]), for
/// fairness between links.
const RECORDS_PER_POLL: usize = 256;
/// Epoll key of the listening socket.
const KEY_LISTENER: u64 = u64::MAX;
/// Epoll keys of accepted sockets still waiting for their hello have this bit set.
const KEY_PENDING: u64 = 1 << 62;
/// Accepted sockets waiting for their hello at once; the oldest is dropped beyond.
const MAX_PENDING_ACCEPTS: usize = 64;
/// Peer regions a link keeps mapped for one-sided operations; the oldest is unmapped beyond.
const MAX_PEER_REGIONS_PER_LINK: usize = 64;

/// Settings of a [`ShmTransport`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShmConfig {
    /// Data bytes of each ring (one per direction and link); a power of two, at least twice
    /// `max_frame` plus 64.
    pub ring_capacity: usize,
    /// Largest frame (header plus payload) of one `send`.
    pub max_frame: usize,
    /// Payloads at least this long should be offered zero-copy (`Caps::zcopy_threshold`).
    pub zcopy_threshold: usize,
    /// Largest payload of one placed frame (`Caps::max_placed`).
    pub max_placed: usize,
    /// Try 2 MiB huge pages for the segments first.
    pub try_hugepages: bool,
    /// Polls between two looks at the clock for [`ShmConfig::socket_check_period`]; 1 looks on
    /// every poll.
    pub socket_check_interval: u32,
    /// Least time between two checks of the sockets (accepts, hellos, peer death). A check is a
    /// system call; on a busy-polling worker that makes a few polls per message, checking every
    /// 64 polls cost more than the rest of a shared-memory message. Zero: every interval.
    pub socket_check_period: Duration,
    /// How long an accepted connection may take to send its hello.
    pub hello_timeout: Duration,
    /// Copied bytes one link may hold queued (ring full) before `send` says `NoResource`.
    pub max_queued_bytes: usize,
}

impl Default for ShmConfig {
    fn default() -> ShmConfig {
        ShmConfig {
            ring_capacity: 1 << 20,
            max_frame: 256 * 1024 + 64,
            zcopy_threshold: 64 << 10,
            max_placed: 64 << 20,
            try_hugepages: true,
            socket_check_interval: 64,
            socket_check_period: Duration::from_micros(100),
            hello_timeout: Duration::from_secs(5),
            max_queued_bytes: 64 << 20,
        }
    }
}

/// A frame that found the ring full, waiting in order for room.
struct Queued {
    kind: u32,
    bytes: Vec<u8>,
}

/// A placed payload of ours the peer has not released yet.
enum Inflight {
    /// The caller's buffer: `SendDone { token }` when released.
    Zcopy { token: u64, addr: u64, len: usize },
    /// A copy we made of a `Payload::Copy` too large for a frame; freed when released.
    Staged { bytes: Vec<u8> },
}

impl Inflight {
    /// The address and length the peer reads; the address doubles as the release cookie.
    fn range(&self) -> (u64, usize) {
        match self {
            Inflight::Zcopy { addr, len, .. } => (*addr, *len),
            Inflight::Staged { bytes } => (bytes.as_ptr() as u64, bytes.len()),
        }
    }
}

struct Link {
    sock: OwnedFd,
    /// Our ring's producer, which endpoints may also write through (see [`ShmSendLane`]). The
    /// rings point into `segment`, declared (and so dropped) after them.
    lane: Arc<ShmSendLane>,
    rx: Consumer,
    /// Held for its mapping; unmapped when the link and the last doorbell on it are dropped.
    segment: Arc<Segment>,
    /// Which ring we consume (the other one's producer is the peer).
    rx_ring: usize,
    peer_pid: libc::pid_t,
    /// Which ring we produce into (0 for the connector): our revoke word in the segment; the
    /// peer's is the other.
    tx_ring: usize,
    queue: VecDeque<Queued>,
    queued_bytes: usize,
    inflight: VecDeque<Inflight>,
    /// The peer's placed payload being copied into our destination (or dropped).
    placing: PlaceTracker,
    /// Where that payload lies in the peer's memory; also the cookie its release names.
    placing_from: u64,
    /// `Some(force)` once closed locally.
    local_close: Option<bool>,
    /// The peer closed its socket (or died): deliver what it published, then fail.
    peer_gone: bool,
    /// The link is broken (protocol error, failed send); fail it at the next poll.
    broken: Option<TlError>,
    /// The last poll of this link read a record. Only then does a poll read past its first
    /// record: looking for a second one reads the slot after it, a line the producer has just
    /// cleared, so in a ping-pong it is a load from the other core's cache that the answer's
    /// stores wait behind (they cannot retire before it). A poll that finds one record after an
    /// empty one (a ping-pong, a lone message) takes just that record; the next poll, which
    /// comes at once while the worker is busy, finds the rest of a burst and drains it.
    /// Measured against reading on, `scripts/ab-perf.sh` with 15 rounds: tag_lat 0.96,
    /// stream_lat 0.92, am_lat 0.88 (shorter series on the same noisy day: 0.87 to 1.0); 1 MiB
    /// tag and AM bandwidth and 8-byte tag bandwidth unchanged (0.99 to 1.0).
    rx_streak: bool,
    /// A received frame is lent past its poll (see [`crate::lend`]): its record is read but not
    /// released, and the link is not read again (nor closed or failed, which would end what the
    /// borrower reads) until `end_lend`.
    lent: bool,
    /// Our receive ring is watched through our board: its producer answered that it rings it.
    on_board: bool,
}

impl Link {
    fn idle(&self) -> bool {
        self.queue.is_empty() && self.inflight.is_empty()
    }

    /// Nothing for a poll to do on this link but read its ring: no queue, placement, loan,
    /// failure or close in progress.
    fn settled(&self) -> bool {
        self.idle()
            && !self.lent
            && !self.placing.is_placing()
            && self.broken.is_none()
            && !self.peer_gone
            && self.local_close.is_none()
    }
}

struct PendingAccept {
    sock: OwnedFd,
    key: u64,
    since: Instant,
}

/// An event produced outside a link's receive path, reported in order by the next `poll`.
#[derive(Debug)]
enum Deferred {
    Connected(LinkId),
    Accepted(LinkId),
    SendDone { link: LinkId, token: u64, result: Result<(), TlError> },
    PlaceDone { link: LinkId, token: u64, result: Result<(), TlError> },
    LinkFailed { link: LinkId, error: TlError },
}

/// The shared-memory transport: per link, a sealed memfd segment with one SPSC ring per
/// direction, set up over an abstract Unix socket that also tells each side when the other is
/// gone. Large placed payloads move with one copy straight from the sender's memory
/// (`process_vm_readv`).
///
/// **Wakeups:** the event fd is an epoll set of the transport's sockets: the listener (a
/// connection to accept) and every link socket (the peer closed or died, or woke us). Polling
/// costs no system call for data; [`Transport::has_events`] (the worker's `arm`) announces on
/// every receive ring that this side may sleep, and a peer that then writes a frame into one of
/// them sends one byte over the link socket, which makes the event fd readable. Announcements
/// are withdrawn by the next `poll`.
pub struct ShmTransport {
    cfg: ShmConfig,
    caps: Caps,
    name: Vec<u8>,
    listener: Option<OwnedFd>,
    epoll: OwnedFd,
    links: LinkTable<Box<Link>>,
    pending: Vec<PendingAccept>,
    next_pending_key: u64,
    deferred: Vec<Deferred>,
    /// Polls left before the next check of the sockets (accepts, peer death).
    polls: u64,
    /// Bumped whenever a link comes or goes (see `SameHostFastPath::doorbell_generation`).
    doorbell_generation: u64,
    /// When [`ShmTransport::check_sockets`] last ran.
    last_socket_check: Instant,
    epoll_events: Vec<libc::epoll_event>,
    /// The segments of links that went while one of their frames was lent (a handler closed its
    /// endpoint, say): mapped until the loan ends.
    lent_gone: Vec<(LinkId, Arc<Segment>)>,
    /// The peers' regions mapped for [`Transport::rma`], by link, oldest first; unmapped when
    /// their link goes.
    peer_regions: Vec<(LinkId, PeerRegion)>,
    /// The slots of the links that may have more to do than read their ring (see
    /// [`Link::settled`]): a poll visits these, and of the others only those whose ring holds a
    /// record, so its cost follows the links at work, not all of them. Every change that can
    /// unsettle a link adds it; a poll that finds it settled again takes it out.
    attention: ActiveSet,
    /// The poll's copy of `attention`, kept for its capacity.
    attention_scratch: Vec<u32>,
    /// Sleep was announced on the rings (`has_events`): the next poll visits every link, to
    /// take the announcement back from rings that stayed empty.
    slept: AtomicBool,
    /// The page peers mark the receive rings they wrote to (see [`super::board`]); `None` when
    /// it could not be made (every ring then has its own doorbell).
    board: Option<Board>,
    /// Links whose board offers are not settled yet (see [`BoardWatch`]).
    board_watch: Vec<BoardWatch>,
    /// The peers' boards mapped here, by peer process, device and inode: the links to one peer
    /// share one mapping of its board, which goes with the last of them.
    peer_boards: Vec<((u32, u64, u64), Weak<BoardMap>)>,
    /// The slots of the links whose receive ring is not watched through the board: a poll
    /// looks at each of these rings, and of the others only at those the board marks.
    own_bells: ActiveSet,
    /// The poll's copy of `own_bells`, kept for its capacity.
    own_bells_scratch: Vec<u32>,
    /// The next poll looks at every ring, marked or not (set by the socket check): a producer
    /// that does not set its bit is read this often.
    scan_all: bool,
}

/// A link's two board offers on their way: the peer's, for our send ring, which we map and
/// answer; ours, for our receive ring, whose answer moves the ring onto our board.
struct BoardWatch {
    link: LinkId,
    /// The peer's offer is still to be handled.
    theirs: bool,
    /// Our offer is still to be answered.
    ours: bool,
    /// A peer that never decides or answers is given up on after [`BOARD_WATCH_FOR`].
    since: Instant,
}

/// How long a link's board offers are watched before the link keeps its own doorbell for good.
const BOARD_WATCH_FOR: Duration = Duration::from_secs(10);

use crate::os_error::last_errno as errno;

fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into our u64.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, libc::GRND_NONBLOCK) };
    if n != 8 {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        v = t.as_nanos() as u64 ^ (&v as *const u64 as u64).rotate_left(32);
    }
    v
}

fn placeholder_peer() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

impl ShmTransport {
    /// Checks the configuration and the host (memfd and abstract Unix sockets), then listens on a
    /// fresh abstract socket `zcx-shm-<namespaces>-<pid>-<random hex>` (see [`namespace_tag`]).
    pub fn new(cfg: &ShmConfig) -> Result<ShmTransport, TlError> {
        if !valid_capacity(cfg.ring_capacity) || cfg.max_frame > max_record_payload(cfg.ring_capacity) {
            tracing::warn!(
                ring_capacity = cfg.ring_capacity,
                max_frame = cfg.max_frame,
                "shm transport: ring capacity must be a power of two of at least twice max_frame"
            );
            return Err(TlError::InvalidParam);
        }
        if PLACED_PREFIX + MAX_PLACED_HEADER > cfg.max_frame {
            return Err(TlError::InvalidParam);
        }
        // Feature check: a small memfd, sealed and mapped, as links will need.
        if let Err(err) = Segment::create(super::ring::MIN_CAPACITY, false) {
            tracing::warn!(%err, "shm transport unavailable: cannot create a sealed memfd segment");
            return Err(match err {
                super::segment::SegmentError::Os(_, e) => TlError::Os(e),
                _ => TlError::Unsupported,
            });
        }
        let name =
            format!("zcx-shm-{}-{}-{:016x}", namespace_tag(), std::process::id(), random_u64()).into_bytes();
        let listener = conn::listen(&name).map_err(|e| {
            tracing::warn!(
                err = %std::io::Error::from_raw_os_error(e),
                "shm transport unavailable: cannot listen on an abstract Unix socket"
            );
            TlError::from_errno(e)
        })?;
        // SAFETY: epoll_create1 has no memory effects; the result is checked.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            let e = errno();
            tracing::warn!(errno = e, "shm transport unavailable: epoll_create1 failed");
            return Err(TlError::from_errno(e));
        }
        // SAFETY: a fresh descriptor nobody else owns.
        let epoll = unsafe { OwnedFd::from_raw_fd(ep) };
        let caps = Caps {
            name: "shm",
            reliable: true,
            ordered: true,
            // Same host: a peer's registered memfd region is mapped here, so put, get and every
            // atomic are CPU copies and atomics on it, as large as the region.
            rma: RmaCaps {
                put: true,
                get: true,
                atomic32: AtomicOps::ALL,
                atomic64: AtomicOps::ALL,
                max_rma: isize::MAX as usize,
            },
            large_payload: LargePayload::SenderPush,
            max_frame: cfg.max_frame,
            zcopy_threshold: cfg.zcopy_threshold,
            max_placed: cfg.max_placed,
            latency_ns: 300,
            bandwidth: 10_000_000_000,
        };
        let this = ShmTransport {
            cfg: ShmConfig { socket_check_interval: cfg.socket_check_interval.max(1), ..cfg.clone() },
            caps,
            name,
            listener: Some(listener),
            epoll,
            links: LinkTable::new(),
            pending: Vec::new(),
            next_pending_key: 0,
            deferred: Vec::new(),
            polls: 0,
            doorbell_generation: 0,
            last_socket_check: Instant::now(),
            epoll_events: vec![libc::epoll_event { events: 0, u64: 0 }; 32],
            lent_gone: Vec::new(),
            peer_regions: Vec::new(),
            attention: ActiveSet::new(),
            attention_scratch: Vec::new(),
            slept: AtomicBool::new(false),
            board: match Board::create() {
                Ok(board) => Some(board),
                Err(errno) => {
                    tracing::debug!(errno, "shm board unavailable: every ring keeps its own doorbell");
                    None
                }
            },
            board_watch: Vec::new(),
            peer_boards: Vec::new(),
            own_bells: ActiveSet::new(),
            own_bells_scratch: Vec::new(),
            scan_all: false,
        };
        let listener_fd = this.listener.as_ref().map(|l| l.as_raw_fd()).unwrap_or(-1);
        this.epoll_add(listener_fd, KEY_LISTENER)?;
        tracing::debug!(name = %String::from_utf8_lossy(&this.name), "shm transport listening");
        Ok(this)
    }

    /// Whether a peer's shm address can be reached from this process: the peer must share our
    /// network namespace (abstract Unix sockets live in one) and our pid namespace (its memory is
    /// read through its pid). Network namespaces on one machine share a boot id, so the boot id
    /// alone would send two "hosts" of a test bed to each other's sockets.
    pub fn reaches(peer: &TransportAddress) -> bool {
        let TransportAddress::Shm { socket_name } = peer else { return false };
        let ours = namespace_tag();
        socket_name
            .strip_prefix(b"zcx-shm-")
            .is_some_and(|rest| rest.starts_with(ours.as_bytes()) && rest.get(ours.len()) == Some(&b'-'))
    }

    /// The abstract socket name peers connect to (without the leading NUL).
    pub fn socket_name(&self) -> &[u8] {
        &self.name
    }

    /// Links alive now (for tests and diagnostics).
    pub fn link_count(&self) -> usize {
        self.links.len()
    }

    /// Peers' boards mapped now, one per peer process whatever its links (for tests and
    /// diagnostics).
    pub fn peer_board_count(&self) -> usize {
        self.peer_boards.iter().filter(|(_, map)| map.strong_count() > 0).count()
    }

    fn epoll_add(&self, fd: RawFd, key: u64) -> Result<(), TlError> {
        let mut ev = libc::epoll_event { events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32, u64: key };
        // SAFETY: registers a live descriptor with our epoll set; `ev` lives across the call.
        if unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
            return Err(TlError::from_errno(errno()));
        }
        Ok(())
    }

    fn link_id(&self, index: usize) -> LinkId {
        self.links.id_at(index)
    }

    fn index(&self, link: LinkId) -> Option<usize> {
        self.links.slot_of(link)
    }

    /// Builds a link over a mapped segment; `connector` picks the ring directions.
    fn insert_link(
        &mut self,
        sock: OwnedFd,
        seg: Segment,
        connector: bool,
        peer_pid: libc::pid_t,
    ) -> Result<LinkId, TlError> {
        let cap = seg.capacity();
        let (tx_ring, rx_ring) = if connector { (0, 1) } else { (1, 0) };
        // SAFETY: both rings lie inside the segment's mapping, which the link owns and drops after
        // them; this side is the only producer of `tx_ring` and the only consumer of `rx_ring`.
        let (tx, rx) = unsafe {
            (
                Producer::new(seg.ring_base(tx_ring), cap),
                Consumer::new(seg.ring_base(rx_ring), cap, usize::MAX),
            )
        };
        let segment = Arc::new(seg);
        let raw_sock = sock.as_raw_fd();
        let id = self.links.insert(Box::new(Link {
            sock,
            lane: Arc::new(ShmSendLane::new(tx, Arc::clone(&segment), tx_ring, self.cfg.max_frame)),
            rx,
            segment,
            rx_ring,
            peer_pid,
            tx_ring,
            queue: VecDeque::new(),
            queued_bytes: 0,
            inflight: VecDeque::new(),
            placing: PlaceTracker::default(),
            placing_from: 0,
            local_close: None,
            peer_gone: false,
            broken: None,
            rx_streak: false,
            lent: false,
            on_board: false,
        }))?;
        if let Err(err) = self.epoll_add(raw_sock, u64::from(id.0)) {
            // Dropping the link closes its socket.
            self.links.remove(id);
            return Err(err);
        }
        self.doorbell_generation += 1;
        if let Some(index) = self.index(id) {
            self.own_bells.insert(index);
        }
        self.offer_board(id);
        if self.links.slot_count() == 2 {
            // Polls of one slot kept no attention set: the first link may be unsettled.
            self.attention.insert(0);
            self.attention.insert(1);
        }
        Ok(id)
    }

    /// Writes our offer for the receive ring of the new link `id` (see [`super::board`]): the
    /// board when this transport already has [`BOARD_MIN_LINKS`] other links and the link's slot
    /// has a bit, else none. Both offers are then watched until settled.
    fn offer_board(&mut self, id: LinkId) {
        let Some(index) = self.index(id) else { return };
        let others = self.links.len() - 1;
        let Some(link) = self.links.at(index) else { return };
        let words = link.segment.board_offer(link.rx_ring);
        // Decided here, not read back: the peer may answer in the shared word at once.
        let ours = match &self.board {
            Some(board) if others >= BOARD_MIN_LINKS && index < BOARD_SLOTS => {
                let (fd, dev, inode) = board.locator();
                words[0].store(u64::from(fd as u32) | (index as u64) << 32, Ordering::Relaxed);
                words[1].store(dev, Ordering::Relaxed);
                words[2].store(inode, Ordering::Relaxed);
                // Release: the fields are visible before the state says they are there.
                words[3].store(offer::OFFERED, Ordering::Release);
                true
            }
            _ => {
                words[3].store(offer::NONE, Ordering::Release);
                false
            }
        };
        self.board_watch.push(BoardWatch { link: id, theirs: true, ours, since: Instant::now() });
    }

    /// Moves the links' board offers on (from the socket check): maps the boards peers offered
    /// and answers them, and puts on our board the receive rings whose producers answered ours.
    fn watch_boards(&mut self) {
        if self.board_watch.is_empty() {
            return;
        }
        let mut watch = std::mem::take(&mut self.board_watch);
        watch.retain_mut(|w| {
            let Some(index) = self.index(w.link) else { return false };
            if w.theirs {
                w.theirs = !self.answer_their_offer(index);
            }
            if w.ours {
                w.ours = !self.take_our_answer(index);
            }
            let settled = !w.theirs && !w.ours;
            if !settled && w.since.elapsed() >= BOARD_WATCH_FOR {
                tracing::debug!(
                    link = w.link.0,
                    "shm board offers not settled in time; the ring keeps its doorbell"
                );
                return false;
            }
            !settled
        });
        self.board_watch = watch;
    }

    /// Handles the peer's board offer for the send ring of the link at `index`, if it decided:
    /// maps the board and rings it from now on, or answers that it could not. True when done.
    fn answer_their_offer(&mut self, index: usize) -> bool {
        let Some(link) = self.links.at(index) else { return true };
        let words = link.segment.board_offer(link.tx_ring);
        match words[3].load(Ordering::Acquire) {
            offer::UNDECIDED => false,
            offer::OFFERED => {
                let first = words[0].load(Ordering::Relaxed);
                let (fd, slot) = (first as u32 as i32, (first >> 32) as usize);
                let (dev, inode) = (words[1].load(Ordering::Relaxed), words[2].load(Ordering::Relaxed));
                let pid = link.peer_pid as u32;
                let known = self.peer_boards.iter().find(|(key, _)| *key == (pid, dev, inode));
                let mapped = match known.and_then(|(_, map)| map.upgrade()) {
                    Some(map) => Ok(map),
                    None => board::map_peer_board(pid, fd, dev, inode).inspect(|map| {
                        self.peer_boards.retain(|(_, map)| map.strong_count() > 0);
                        self.peer_boards.push(((pid, dev, inode), Arc::downgrade(map)));
                    }),
                };
                let mapped = mapped.and_then(|map| {
                    BoardBit::new(map, slot).ok_or_else(|| "slot past the board".to_string())
                });
                let answer = match mapped {
                    Ok(bit) => match link.lane.lock().tx.as_mut() {
                        Some(tx) => {
                            tx.ring_board(bit);
                            offer::RINGING
                        }
                        None => offer::REFUSED,
                    },
                    Err(why) => {
                        tracing::debug!(%why, "shm: the peer's board cannot be mapped; its ring keeps its doorbell");
                        offer::REFUSED
                    }
                };
                words[3].store(answer, Ordering::Release);
                true
            }
            // No board, or a state only a producer writes: nothing to ring.
            _ => true,
        }
    }

    /// Looks for the answer to our board offer for the receive ring of the link at `index`. On
    /// "ringing", the ring is watched through the board from now on, after one look (its bit,
    /// set here): records published before the answer carry no bit. True when answered.
    fn take_our_answer(&mut self, index: usize) -> bool {
        let Some(link) = self.links.at_mut(index) else { return true };
        match link.segment.board_offer(link.rx_ring)[3].load(Ordering::Acquire) {
            offer::OFFERED => false,
            offer::RINGING => {
                tracing::debug!(slot = index, "shm: a receive ring is watched through the board from now on");
                link.on_board = true;
                self.own_bells.remove(index);
                if let Some(board) = &self.board {
                    board.mark(index);
                }
                self.doorbell_generation += 1;
                true
            }
            _ => true,
        }
    }

    fn connect_shm(&mut self, name: &[u8]) -> Result<LinkId, TlError> {
        let sock = match conn::connect(name) {
            Ok(s) => s,
            Err(e) => {
                // Like a refused TCP connect: a link id now, the failure from `poll`.
                let id = self.links.dead_id()?;
                let error = match TlError::from_errno(e) {
                    TlError::NoResource => TlError::NoResource,
                    TlError::Os(libc::ENOENT) => TlError::NotConnected,
                    other => other,
                };
                self.deferred.push(Deferred::LinkFailed { link: id, error });
                return Ok(id);
            }
        };
        let (seg, memfd) =
            Segment::create(self.cfg.ring_capacity, self.cfg.try_hugepages).map_err(|err| {
                tracing::warn!(%err, "shm segment creation failed");
                match err {
                    super::segment::SegmentError::Os(_, e) => TlError::from_errno(e),
                    _ => TlError::InvalidParam,
                }
            })?;
        let hello = Hello {
            capacity: seg.capacity() as u64,
            segment_len: seg.len() as u64,
            max_frame: self.cfg.max_frame as u32,
        };
        conn::send_with_fd(sock.as_raw_fd(), &hello.encode(), memfd.as_raw_fd())
            .map_err(TlError::from_errno)?;
        drop(memfd);
        let pid = conn::peer_pid(sock.as_raw_fd()).unwrap_or(0);
        let id = self.insert_link(sock, seg, true, pid)?;
        self.deferred.push(Deferred::Connected(id));
        Ok(id)
    }

    /// Checks the sockets: new connections, hellos, peers gone.
    fn check_sockets(&mut self) {
        let mut events = std::mem::take(&mut self.epoll_events);
        // SAFETY: epoll_wait writes at most `events.len()` entries into our buffer; no wait.
        let n =
            unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), events.as_mut_ptr(), events.len() as i32, 0) };
        for ev in events.iter().take(n.max(0) as usize) {
            let key = ev.u64;
            if key == KEY_LISTENER {
                self.accept_all();
            } else if key & KEY_PENDING != 0 {
                self.try_hello(key);
            } else if let Some(index) = self.index(LinkId(key as u32)) {
                let link = self.links.at_mut(index).expect("index is live");
                if conn::drain(link.sock.as_raw_fd()) == SocketState::Closed {
                    link.peer_gone = true;
                    self.attention.insert(index);
                }
            }
        }
        self.epoll_events = events;
        self.watch_boards();
        self.scan_all = true;
        if !self.pending.is_empty() {
            let timeout = self.cfg.hello_timeout;
            self.pending.retain(|p| {
                let keep = p.since.elapsed() < timeout;
                if !keep {
                    tracing::debug!("shm: accepted connection sent no hello in time; dropped");
                }
                keep
            });
        }
    }

    fn accept_all(&mut self) {
        loop {
            let Some(listener) = self.listener.as_ref() else { return };
            match conn::accept(listener.as_raw_fd()) {
                Ok(Some(sock)) => {
                    if self.pending.len() >= MAX_PENDING_ACCEPTS {
                        self.pending.remove(0);
                    }
                    self.next_pending_key += 1;
                    let key = KEY_PENDING | self.next_pending_key;
                    if self.epoll_add(sock.as_raw_fd(), key).is_ok() {
                        self.pending.push(PendingAccept { sock, key, since: Instant::now() });
                        self.try_hello(key);
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!(errno = e, "shm accept failed");
                    return;
                }
            }
        }
    }

    /// Reads the hello and segment of an accepted connection; a malformed one is dropped.
    fn try_hello(&mut self, key: u64) {
        let Some(pos) = self.pending.iter().position(|p| p.key == key) else { return };
        let mut buf = [0u8; HELLO_LEN + 1];
        let received = conn::recv_with_fds(self.pending[pos].sock.as_raw_fd(), &mut buf);
        let (len, truncated, mut fds, fds_truncated) = match received {
            Ok(Received::Nothing) => return,
            Ok(Received::Packet { len, truncated, fds, fds_truncated }) => {
                (len, truncated, fds, fds_truncated)
            }
            Ok(Received::Eof) | Err(_) => {
                self.pending.remove(pos);
                return;
            }
        };
        let pending = self.pending.remove(pos);
        let accepted = (|| {
            if truncated || fds_truncated || fds.len() != 1 {
                return Err("hello must carry exactly one descriptor".to_string());
            }
            let hello = Hello::decode(&buf[..len]).map_err(|e| format!("bad hello: {e:?}"))?;
            let memfd = fds.pop().expect("one descriptor");
            let (cap, seg_len) = (hello.capacity as usize, hello.segment_len as usize);
            let seg = Segment::attach(&memfd, cap, seg_len).map_err(|e| e.to_string())?;
            Ok(seg)
        })();
        match accepted {
            Ok(seg) => {
                let pid = conn::peer_pid(pending.sock.as_raw_fd()).unwrap_or(0);
                // SAFETY: removes a descriptor we registered; it is closed right after anyway.
                unsafe {
                    libc::epoll_ctl(
                        self.epoll.as_raw_fd(),
                        libc::EPOLL_CTL_DEL,
                        pending.sock.as_raw_fd(),
                        std::ptr::null_mut(),
                    )
                };
                match self.insert_link(pending.sock, seg, false, pid) {
                    Ok(id) => self.deferred.push(Deferred::Accepted(id)),
                    Err(err) => tracing::debug!(%err, "shm: no room for an accepted link"),
                }
            }
            Err(why) => tracing::debug!(%why, "shm: refused a connection"),
        }
    }

    fn flush_deferred(&mut self, sink: &mut dyn FnMut(TlEvent<'_>)) -> usize {
        let n = self.deferred.len();
        for ev in self.deferred.drain(..) {
            sink(match ev {
                Deferred::Connected(link) => TlEvent::Connected { link },
                Deferred::Accepted(link) => {
                    TlEvent::Accepted { listener: ListenerId(0), link, peer: placeholder_peer() }
                }
                Deferred::SendDone { link, token, result } => TlEvent::SendDone { link, token, result },
                Deferred::PlaceDone { link, token, result } => TlEvent::PlaceDone { link, token, result },
                Deferred::LinkFailed { link, error } => TlEvent::LinkFailed { link, error },
            });
        }
        n
    }

    /// Removes a link, reporting what it owes: its zero-copy sends and its placement end with
    /// `result`, and `LinkFailed` follows unless it was closed locally.
    fn finish_link(&mut self, index: usize, error: TlError) {
        let id = self.link_id(index);
        let Some(mut link) = self.links.remove_at(index) else { return };
        self.attention.remove(index);
        self.own_bells.remove(index);
        let result = if link.local_close == Some(true) { TlError::Canceled } else { error };
        if !link.inflight.is_empty() {
            // The peer may be copying a placed payload of ours right now, and the owner may reuse
            // the memory as soon as the cancellation below reaches it: tell the peer first, so
            // it reports that copy failed instead of delivering bytes that may have changed.
            link.segment.revoked(link.tx_ring).store(1, Ordering::SeqCst);
        }
        for inflight in link.inflight.drain(..) {
            if let Inflight::Zcopy { token, .. } = inflight {
                self.deferred.push(Deferred::SendDone { link: id, token, result: Err(result) });
            }
        }
        if let Some(done) = link.placing.abort(result) {
            self.deferred.push(Deferred::PlaceDone { link: id, token: done.token, result: done.result });
        }
        if link.local_close.is_none() {
            tracing::debug!(?id, ?error, "shm link failed");
            self.deferred.push(Deferred::LinkFailed { link: id, error });
        }
        if link.lent {
            self.lent_gone.push((id, Arc::clone(&link.segment)));
        }
        self.peer_regions.retain(|(of, _)| *of != id);
        // Dropping the link closes its socket (the peer sees end-of-file) and unmaps the segment
        // (unless lent, above); an endpoint still holding the lane holds neither.
        link.lane.shut();
        drop(link);
        self.doorbell_generation += 1;
    }

    /// Moves queued frames into the ring while it has room. Under the lane's lock, which opens
    /// the lane to direct writes again once the queue is empty.
    fn flush_queue(link: &mut Link) {
        let mut state = link.lane.lock();
        let Some(tx) = state.tx.as_mut() else { return };
        while let Some(q) = link.queue.front() {
            match tx.push(q.kind, &[&q.bytes]) {
                Ok(true) => {
                    let q = link.queue.pop_front().expect("front exists");
                    link.queued_bytes -= q.bytes.len();
                }
                Ok(false) => break,
                Err(err) => {
                    tracing::debug!(%err, "shm peer corrupted its ring index");
                    link.broken = Some(TlError::ConnectionReset);
                    break;
                }
            }
        }
        if tx.take_wake() {
            conn::wake(link.sock.as_raw_fd());
        }
        state.link_open = link.queue.is_empty() && link.broken.is_none() && link.local_close.is_none();
    }

    /// Writes a record now, or queues it behind earlier ones.
    ///
    /// Under the lane's lock throughout: a frame that has to queue closes the lane to direct
    /// writes in the same critical section, so none can overtake it.
    fn push_or_queue(link: &mut Link, kind: u32, parts: &[&[u8]], limit: usize) -> Result<(), TlError> {
        let mut state = link.lane.lock();
        let Some(tx) = state.tx.as_mut() else { return Err(TlError::ConnectionReset) };
        if link.queue.is_empty() {
            match tx.push(kind, parts) {
                Ok(true) => {
                    if tx.take_wake() {
                        conn::wake(link.sock.as_raw_fd());
                    }
                    return Ok(());
                }
                Ok(false) => {}
                Err(_) => {
                    link.broken = Some(TlError::ConnectionReset);
                    state.link_open = false;
                    return Err(TlError::ConnectionReset);
                }
            }
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if link.queued_bytes + len > limit {
            return Err(TlError::NoResource);
        }
        let mut bytes = Vec::with_capacity(len);
        for p in parts {
            bytes.extend_from_slice(p);
        }
        link.queued_bytes += len;
        link.queue.push_back(Queued { kind, bytes });
        state.link_open = false;
        Ok(())
    }

    /// The link if a frame may go straight into its ring: live, not closed, not broken, and no
    /// frame queued before it.
    #[inline]
    fn sendable_link(&mut self, link: LinkId) -> Option<&mut Link> {
        let l = &mut **self.links.get_mut(link)?;
        let sendable = l.local_close.is_none() && l.broken.is_none() && l.queue.is_empty();
        sendable.then_some(l)
    }

    /// [`Transport::send`] when [`ShmTransport::sendable_link`] refused or the ring was full: the
    /// checks in their order, the queue flushed first, the frame written or queued behind it.
    #[cold]
    #[inline(never)]
    fn send_general(&mut self, link: LinkId, header: &[u8], bytes: &[u8]) -> Result<SendOutcome, TlError> {
        let (max_frame, max_queued) = (self.cfg.max_frame, self.cfg.max_queued_bytes);
        let l = self.live_link(link)?;
        if header.len() + bytes.len() > max_frame {
            return Err(TlError::InvalidParam);
        }
        if !l.queue.is_empty() {
            ShmTransport::flush_queue(l);
        }
        ShmTransport::push_or_queue(l, KIND_FRAME, &[header, bytes], max_queued)?;
        Ok(SendOutcome::Done)
    }

    /// The link to queue, place or fail through: marked for the next poll's attention, since
    /// what the caller does with it may leave it unsettled.
    fn live_link(&mut self, link: LinkId) -> Result<&mut Link, TlError> {
        let index = self.links.slot_of(link).ok_or(TlError::InvalidParam)?;
        self.attention.insert(index);
        let l = self.links.at_mut(index).ok_or(TlError::InvalidParam)?;
        if l.local_close.is_some() {
            return Err(TlError::InvalidParam);
        }
        if let Some(err) = l.broken {
            return Err(err);
        }
        Ok(l)
    }

    /// Polls the links that need attention, then those of the others whose ring holds a record
    /// (a load of its next record's header each).
    fn poll_active_links(&mut self, sink: &mut dyn FnMut(TlEvent<'_>), lend: Option<&LendSlot>) -> usize {
        let mut count = 0;
        if !self.attention.is_empty() {
            let mut visit = std::mem::take(&mut self.attention_scratch);
            self.attention.snapshot(&mut visit);
            for &index in &visit {
                count += self.poll_link(index as usize, sink, lend);
            }
            // Settled ones leave the set after the scan below, which so skips them all.
            self.attention_scratch = visit;
        }
        if self.own_bells.len() == self.links.len() || std::mem::take(&mut self.scan_all) {
            for index in 0..self.links.slot_count() {
                count += self.poll_if_waiting(index, sink, lend);
            }
        } else {
            let mut visit = std::mem::take(&mut self.own_bells_scratch);
            self.own_bells.snapshot(&mut visit);
            for &index in &visit {
                count += self.poll_if_waiting(index as usize, sink, lend);
            }
            self.own_bells_scratch = visit;
            count += self.poll_marked_links(sink, lend);
        }
        if !self.attention_scratch.is_empty() {
            let visit = std::mem::take(&mut self.attention_scratch);
            for &index in &visit {
                self.note_settled(index as usize);
            }
            self.attention_scratch = visit;
        }
        count
    }

    /// Polls the link at `index` when it is outside the attention set (which a poll visits
    /// anyway) and its ring holds a record.
    #[inline(always)]
    fn poll_if_waiting(
        &mut self,
        index: usize,
        sink: &mut dyn FnMut(TlEvent<'_>),
        lend: Option<&LendSlot>,
    ) -> usize {
        if self.attention.contains(index) || !self.links.at(index).is_some_and(|l| l.rx.peek()) {
            return 0;
        }
        let count = self.poll_link(index, sink, lend);
        self.note_settled(index);
        count
    }

    /// Polls the links the board marks, and clears the marks of rings found empty (see
    /// [`BoardMap::clear_unless_waiting`], which the doorbell uses too).
    fn poll_marked_links(&mut self, sink: &mut dyn FnMut(TlEvent<'_>), lend: Option<&LendSlot>) -> usize {
        let Some(words) = self.board.as_ref().map(|b| b.map().words(self.links.slot_count()).len()) else {
            return 0;
        };
        let mut count = 0;
        for w in 0..words {
            let mut bits = self.board_word(w).load(Ordering::Acquire);
            while bits != 0 {
                let bit = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let index = w * 64 + bit;
                if self.attention.contains(index) {
                    continue;
                }
                let waiting = |t: &ShmTransport| t.links.at(index).is_some_and(|l| l.on_board && l.rx.peek());
                if waiting(self) {
                    count += self.poll_link(index, sink, lend);
                    self.note_settled(index);
                    if waiting(self) {
                        continue;
                    }
                }
                if let Some(board) = &self.board {
                    board.map().clear_unless_waiting(index, || waiting(self));
                }
            }
        }
        count
    }

    /// Word `w` of our board's bits (the board exists: the caller found it).
    fn board_word(&self, w: usize) -> &std::sync::atomic::AtomicU64 {
        let board = self.board.as_ref().expect("the caller found the board");
        &board.map().words((w + 1) * 64)[w]
    }

    /// Keeps the link at `index` in the attention set while it is unsettled, and only then.
    #[inline(always)]
    fn note_settled(&mut self, index: usize) {
        if self.links.at(index).is_some_and(|link| !link.settled()) {
            self.attention.insert(index);
        } else if !self.attention.is_empty() {
            self.attention.remove(index);
        }
    }

    /// Progresses one link: its placement, its received records, its queue, its close.
    // Inlined into each loop of `poll_offering`, as it was into its one loop: a busy worker's
    // poll is mostly this.
    #[inline(always)]
    fn poll_link(
        &mut self,
        index: usize,
        sink: &mut dyn FnMut(TlEvent<'_>),
        lend: Option<&LendSlot>,
    ) -> usize {
        let id = self.link_id(index);
        let Some(link) = self.links.at_mut(index).map(|l| &mut **l) else { return 0 };
        let mut count = 0;
        if link.lent {
            // Sends go on; reading, closing and failing wait for the loan's end.
            if !link.queue.is_empty() {
                ShmTransport::flush_queue(link);
            }
            return 0;
        }
        link.rx.awake();
        let mut failure = link.broken;
        if failure.is_none() {
            if let Err(err) = poll_rx(link, id, sink, &mut count, lend) {
                failure = Some(err);
            }
        }
        if failure.is_none() {
            // Nothing queued is the common case, and then nothing is left to do here: every push
            // (ours or an endpoint's direct one) wakes a sleeping peer under the lane's lock.
            if !link.queue.is_empty() {
                ShmTransport::flush_queue(link);
                failure = link.broken;
            }
        }
        if failure.is_none() && link.peer_gone && !link.placing.is_placing() && !link.rx.has_data() {
            // Everything the peer published before it closed has been delivered.
            failure = Some(TlError::ConnectionReset);
        }
        let closed = link.local_close == Some(false) && link.idle() && !link.placing.is_placing();
        if let Some(err) = failure {
            self.finish_link(index, err);
        } else if closed {
            self.finish_link(index, TlError::Canceled);
        }
        count
    }
}

/// Copies the next chunk of a placement; `Ok(true)` when it is complete (or was dropped).
fn copy_placing(link: &mut Link) -> Result<bool, i32> {
    let Some(p) = link.placing.current_mut() else { return Ok(true) };
    let mut budget = PLACE_CHUNK;
    while budget > 0 {
        // Dropped (no destination), or complete.
        let Some((dest, missing)) = p.next_dest().filter(|&(_, missing)| missing > 0) else { break };
        let n = missing.min(budget);
        let local = libc::iovec { iov_base: dest.cast(), iov_len: n };
        let from = link.placing_from as usize + p.received();
        let remote = libc::iovec { iov_base: from as *mut libc::c_void, iov_len: n };
        // SAFETY: the kernel writes at most `n` bytes at `dest`, inside what is left of the
        // destination the api lent us until PlaceDone; the remote side is only read (in the
        // peer's address space).
        let got = unsafe { libc::process_vm_readv(link.peer_pid, &local, 1, &remote, 1, 0) };
        if got < 0 {
            return Err(errno());
        }
        if got == 0 || p.advance(got as usize).is_err() {
            return Err(libc::EFAULT);
        }
        budget = budget.saturating_sub(got as usize);
    }
    Ok(p.next_dest().is_none_or(|(_, missing)| missing == 0))
}

/// Receives on one link: finishes the placement in progress, then reads records until the ring is
/// empty, the budget is spent (one record after a poll that found none: see
/// [`Link::rx_streak`]), or a new placement starts.
fn poll_rx(
    link: &mut Link,
    id: LinkId,
    sink: &mut dyn FnMut(TlEvent<'_>),
    count: &mut usize,
    lend: Option<&LendSlot>,
) -> Result<(), TlError> {
    let limit = if link.rx_streak { RECORDS_PER_POLL } else { 1 };
    let mut records = 0;
    while records < limit {
        if link.placing.is_placing() && !continue_placing(link, id, sink, count)? {
            // More next poll; records read before the placement go back to the peer now.
            link.rx.release();
            link.rx_streak = true;
            return Ok(());
        }
        let Some((kind, bytes)) = link.rx.next_record().map_err(|err| {
            tracing::debug!(%err, "shm peer wrote a malformed ring");
            TlError::ConnectionReset
        })?
        else {
            break;
        };
        records += 1;
        if kind == KIND_FRAME {
            // The one kind every small message comes as: straight to the sink.
            *count += 1;
            let offered = lend.is_some_and(LendSlot::offer);
            sink(TlEvent::Frame { link: id, bytes });
            if offered && lend.is_some_and(LendSlot::settle) {
                // Taken: the record stays unreleased (with those read before it) until the
                // loan ends, and nothing more is read here.
                link.lent = true;
                link.rx_streak = true;
                return Ok(());
            }
        } else {
            let (placing, from, inflight) = (&mut link.placing, &mut link.placing_from, &mut link.inflight);
            other_record(placing, from, inflight, link.peer_gone, id, sink, count, kind, bytes)?;
        }
    }
    link.rx_streak = records > 0;
    link.rx.release();
    Ok(())
}

/// Copies more of the placement in progress: `Ok(false)` while it is not complete, `Ok(true)`
/// once it is complete (or dropped) and its release is on its way to the peer. Out of line:
/// only large messages take it.
#[cold]
#[inline(never)]
fn continue_placing(
    link: &mut Link,
    id: LinkId,
    sink: &mut dyn FnMut(TlEvent<'_>),
    count: &mut usize,
) -> Result<bool, TlError> {
    if link.peer_gone {
        // The peer may have released (even reused) the memory: do not read it any more.
        return Err(TlError::ConnectionReset);
    }
    let status = match copy_placing(link) {
        Ok(false) => return Ok(false),
        // The copy is complete; it is good only if the sender had not revoked its
        // buffers before we looked (our copy then finished before any reuse).
        Ok(true) if link.segment.revoked(1 - link.tx_ring).load(Ordering::SeqCst) != 0 => libc::ECANCELED,
        Ok(true) => 0i32,
        Err(errno) => {
            tracing::debug!(errno, pid = link.peer_pid, "shm: reading a placed payload failed");
            errno
        }
    };
    let p = link.placing.take().expect("placing");
    let ended = if status == 0 { p.complete() } else { p.fail(TlError::from_errno(status)) };
    if let Some(ended) = ended {
        *count += 1;
        sink(ended.event(id));
    }
    let mut done = [0u8; DONE_LEN];
    done[..8].copy_from_slice(&link.placing_from.to_le_bytes());
    done[8..].copy_from_slice(&status.to_le_bytes());
    // The release is tiny and must not be lost: no byte limit on it.
    ShmTransport::push_or_queue(link, KIND_PLACE_DONE, &[&done], usize::MAX)?;
    Ok(true)
}

/// Handles a record other than a frame: the start of a placement or a placement's release.
/// Out of line, to keep the frame loop short. Takes the link's fields it needs, as `bytes`
/// borrows the link's ring.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn other_record(
    placing: &mut PlaceTracker,
    placing_from: &mut u64,
    inflight: &mut VecDeque<Inflight>,
    peer_gone: bool,
    id: LinkId,
    sink: &mut dyn FnMut(TlEvent<'_>),
    count: &mut usize,
    kind: u32,
    bytes: &[u8],
) -> Result<(), TlError> {
    match kind {
        KIND_PLACED => {
            // The descriptor lies in the peer's ring: read once, checked and used from the copy.
            let prefix = peer_bytes::head::<PLACED_PREFIX>(bytes).filter(|_| !peer_gone);
            let Some(prefix) = prefix else { return Err(TlError::ConnectionReset) };
            let remote = u64::from_le_bytes(*prefix[0..].first_chunk::<8>().expect("16 bytes"));
            let len = u64::from_le_bytes(*prefix[8..].first_chunk::<8>().expect("16 bytes"));
            let len = usize::try_from(len).map_err(|_| TlError::ConnectionReset)?;
            if len > isize::MAX as usize || remote.checked_add(len as u64).is_none() {
                return Err(TlError::ConnectionReset);
            }
            let mut dest = Placement::default();
            *count += 1;
            sink(TlEvent::Placed { link: id, header: &bytes[PLACED_PREFIX..], len, dest: &mut dest });
            // SAFETY: a target the sink set is writable for `len` bytes until PlaceDone
            // (PlaceTarget::new's contract), which this link reports when the placement ends:
            // complete, failed or closed (`finish_link`).
            unsafe { placing.start(dest.take(), len) }.map_err(|_| TlError::ConnectionReset)?;
            *placing_from = remote;
        }
        KIND_PLACE_DONE => {
            let done = peer_bytes::head::<DONE_LEN>(bytes).filter(|_| bytes.len() == DONE_LEN);
            let Some(done) = done else { return Err(TlError::ConnectionReset) };
            let cookie = u64::from_le_bytes(*done[0..].first_chunk::<8>().expect("12 bytes"));
            let status = i32::from_le_bytes(*done[8..].first_chunk::<4>().expect("12 bytes"));
            // Placements complete in order: the release must name the oldest one.
            match inflight.front() {
                Some(front) if front.range().0 == cookie => {}
                _ => return Err(TlError::ConnectionReset),
            }
            if status != 0 {
                tracing::debug!(status, "shm peer could not read a placed payload");
            }
            if let Some(Inflight::Zcopy { token, .. }) = inflight.pop_front() {
                *count += 1;
                sink(TlEvent::SendDone { link: id, token, result: Ok(()) });
            }
        }
        _ => return Err(TlError::ConnectionReset),
    }
    Ok(())
}

impl ShmTransport {
    /// The region `locator` names, mapped for `link`: kept from an earlier operation, or mapped
    /// now (and the link's oldest unmapped when it keeps too many).
    fn peer_region(
        &mut self,
        link: LinkId,
        locator: &ShmLocator,
        peer_pid: u32,
    ) -> Result<&PeerRegion, TlError> {
        let found =
            self.peer_regions.iter().position(|(of, region)| *of == link && region.locator() == locator);
        let at = match found {
            Some(at) => at,
            None => {
                let region = PeerRegion::map(locator, peer_pid)?;
                if self.peer_regions.iter().filter(|(of, _)| *of == link).count() >= MAX_PEER_REGIONS_PER_LINK
                {
                    let oldest = self.peer_regions.iter().position(|(of, _)| *of == link).expect("counted");
                    self.peer_regions.remove(oldest);
                }
                self.peer_regions.push((link, region));
                self.peer_regions.len() - 1
            }
        };
        Ok(&self.peer_regions[at].1)
    }
}

impl Drop for ShmTransport {
    fn drop(&mut self) {
        // Links and their segments go with `self.links`; nothing is left to report.
        self.links.clear();
        self.attention = ActiveSet::new();
        self.pending.clear();
    }
}

impl ShmTransport {
    /// `poll`, offering frames through `lend` when given (see [`crate::lend`]).
    #[inline]
    fn poll_offering(&mut self, sink: &mut dyn FnMut(TlEvent<'_>), lend: Option<&LendSlot>) -> usize {
        // A countdown, not a modulo: a division on every poll of a busy-polling worker shows.
        if self.polls == 0 {
            self.polls = u64::from(self.cfg.socket_check_interval.max(1));
            let now = Instant::now();
            if now.saturating_duration_since(self.last_socket_check) >= self.cfg.socket_check_period {
                self.last_socket_check = now;
                self.check_sockets();
            }
        }
        self.polls -= 1;
        // Connected/Accepted before the first frame of their link.
        let mut count = 0;
        if !self.deferred.is_empty() {
            count += self.flush_deferred(sink);
        }
        if self.links.slot_count() <= 1 {
            // One slot: nothing to skip, and the visit costs less than the look that would skip
            // it. The attention set is not kept meanwhile (`is_quiet` looks at the link itself);
            // a second slot puts the link in it (`insert_link`).
            if self.links.slot_count() == 1 {
                count += self.poll_link(0, sink, lend);
            }
        } else if std::mem::take(self.slept.get_mut()) {
            match self.board.as_ref().filter(|_| self.own_bells.len() < self.links.len()) {
                Some(board) => {
                    // Sleep was announced on the board and on the rings outside it: those are
                    // taken back, and the poll goes on as any other.
                    board.awake();
                    for index in self.own_bells.iter() {
                        if let Some(link) = self.links.at(index) {
                            link.rx.awake();
                        }
                    }
                    count += self.poll_active_links(sink, lend);
                }
                None => {
                    for index in 0..self.links.slot_count() {
                        count += self.poll_link(index, sink, lend);
                        self.note_settled(index);
                    }
                }
            }
        } else {
            count += self.poll_active_links(sink, lend);
        }
        if !self.deferred.is_empty() {
            count += self.flush_deferred(sink);
        }
        count
    }
}

impl Transport for ShmTransport {
    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn address(&self) -> Option<TransportAddress> {
        Some(TransportAddress::Shm { socket_name: self.name.clone() })
    }

    fn listen(&mut self, _addr: SocketAddr) -> Result<(ListenerId, SocketAddr), TlError> {
        Err(TlError::Unsupported)
    }

    fn close_listener(&mut self, listener: ListenerId) {
        if listener == ListenerId(0) {
            self.listener = None;
        }
    }

    fn connect(&mut self, target: ConnectTarget<'_>) -> Result<LinkId, TlError> {
        match target {
            ConnectTarget::Address(TransportAddress::Shm { socket_name }) => self.connect_shm(socket_name),
            _ => Err(TlError::Unsupported),
        }
    }

    fn link_addrs(&self, _link: LinkId) -> (Option<SocketAddr>, Option<SocketAddr>) {
        (None, None)
    }

    #[inline]
    fn send(&mut self, link: LinkId, header: &[u8], payload: Payload<'_>) -> Result<SendOutcome, TlError> {
        let bytes = match &payload {
            Payload::None => &[][..],
            Payload::Copy(b) => b,
            // SAFETY: `ZcopyPayload::new`'s contract keeps the bytes live until SendDone, which
            // cannot come before this call returns; they are copied into the ring here.
            Payload::Zcopy(z) => unsafe { z.as_slice() },
        };
        // The small-message path, inline: a live link with nothing queued and a frame that fits.
        // Anything else (an error to report, a queue to keep in order, a full ring) goes the
        // general way, which checks everything again in its own order.
        let max_frame = self.cfg.max_frame;
        if let Some(l) = self.sendable_link(link) {
            if header.len() + bytes.len() <= max_frame {
                // `Ok(false)` or `Err`: nothing was written, and the general path queues the frame
                // (or fails the link).
                let mut state = l.lane.lock();
                if let Some(tx) = state.tx.as_mut() {
                    if let Ok(true) = tx.push2(KIND_FRAME, header, bytes) {
                        if tx.take_wake() {
                            conn::wake(l.sock.as_raw_fd());
                        }
                        return Ok(SendOutcome::Done);
                    }
                }
            }
        }
        self.send_general(link, header, bytes)
    }

    fn send_placed(
        &mut self,
        link: LinkId,
        header: &[u8],
        payload: Payload<'_>,
    ) -> Result<SendOutcome, TlError> {
        let (max_frame, max_placed, max_queued) =
            (self.cfg.max_frame, self.cfg.max_placed, self.cfg.max_queued_bytes);
        if header.len() > MAX_PLACED_HEADER || payload.len() > max_placed {
            return Err(TlError::InvalidParam);
        }
        let small_copy = !matches!(payload, Payload::Zcopy(_)) && header.len() + payload.len() <= max_frame;
        if small_copy || payload.is_empty() {
            // Fits a frame: one copy through the ring is as cheap as a placement.
            let bytes: &[u8] = match &payload {
                Payload::Copy(b) => b,
                _ => &[],
            };
            return self.send(link, header, Payload::Copy(bytes));
        }
        let l = self.live_link(link)?;
        if !l.queue.is_empty() {
            ShmTransport::flush_queue(l);
        }
        let (inflight, outcome) = match payload {
            Payload::Zcopy(z) => (
                Inflight::Zcopy { token: z.token(), addr: z.ptr() as u64, len: z.len() },
                SendOutcome::InFlight,
            ),
            Payload::Copy(b) => (Inflight::Staged { bytes: b.to_vec() }, SendOutcome::Done),
            Payload::None => return Err(TlError::InvalidParam),
        };
        let (addr, len) = inflight.range();
        let mut prefix = [0u8; PLACED_PREFIX];
        prefix[..8].copy_from_slice(&addr.to_le_bytes());
        prefix[8..].copy_from_slice(&(len as u64).to_le_bytes());
        ShmTransport::push_or_queue(l, KIND_PLACED, &[&prefix, header], max_queued)?;
        l.inflight.push_back(inflight);
        Ok(outcome)
    }

    fn close(&mut self, link: LinkId, force: bool) {
        let Some(index) = self.index(link) else { return };
        let l = self.links.at_mut(index).expect("index is live");
        match l.local_close {
            Some(true) => return,
            Some(false) if !force => return,
            _ => {}
        }
        l.local_close = Some(force);
        l.lane.lock().link_open = false;
        self.attention.insert(index);
        if force || (l.idle() && !l.placing.is_placing()) {
            self.finish_link(index, TlError::Canceled);
        }
    }

    fn has_pending_sends(&self, link: LinkId) -> bool {
        self.links.get(link).is_some_and(|l| !l.idle())
    }

    fn poll(&mut self, sink: &mut dyn FnMut(TlEvent<'_>)) -> usize {
        self.poll_offering(sink, None)
    }

    fn event_fd(&self) -> Option<BorrowedFd<'_>> {
        // SAFETY: the epoll descriptor lives as long as `self`, which the borrow is tied to.
        Some(unsafe { BorrowedFd::borrow_raw(self.epoll.as_raw_fd()) })
    }

    /// Every frame is in the peer's ring once the link's queue is empty, and every placed
    /// payload read once none is in flight (a staged one lives in this process until read).
    fn link_delivered(&self, link: LinkId) -> bool {
        self.links.get(link).is_some_and(|l| l.idle() && l.broken.is_none() && !l.peer_gone)
    }

    fn is_quiet(&self) -> bool {
        // A link outside the attention set is settled; one inside may be too, until a poll
        // takes it out. With one slot the set is not kept: its link is looked at.
        self.deferred.is_empty()
            && self.pending.is_empty()
            && if self.links.slot_count() <= 1 {
                self.links.values().all(|l| l.settled())
            } else {
                self.attention.iter().all(|index| self.links.at(index).is_none_or(|l| l.settled()))
            }
    }

    /// No link slot (a closing link keeps its slot), no accepted connection waiting for its
    /// hello, nothing deferred.
    fn is_dormant(&self) -> bool {
        self.links.slot_count() == 0 && self.pending.is_empty() && self.deferred.is_empty()
    }

    fn has_events(&self) -> bool {
        if !self.deferred.is_empty() {
            return true;
        }
        let busy =
            |l: &Link| l.placing.is_placing() || !l.queue.is_empty() || l.broken.is_some() || l.peer_gone;
        // A link with work is unsettled, so in the attention set (kept from two slots on).
        let any_busy = if self.links.slot_count() <= 1 {
            self.links.values().any(|l| busy(l))
        } else {
            self.attention.iter().any(|index| self.links.at(index).is_some_and(|l| busy(l)))
        };
        if any_busy {
            return true;
        }
        // Announce sleep on every ring before the last look, so a frame written after it wakes us
        // through the link socket (in the epoll set): on the board for the rings it watches, on
        // each other ring itself.
        self.slept.store(true, Ordering::Relaxed);
        match self.board.as_ref().filter(|_| self.own_bells.len() < self.links.len()) {
            Some(board) => {
                if board.announce_sleep(self.links.slot_count())
                    || self.own_bells.iter().any(|i| self.links.at(i).is_some_and(|l| l.rx.announce_sleep()))
                {
                    return true;
                }
            }
            None => {
                if self.links.values().any(|l| l.rx.announce_sleep()) {
                    return true;
                }
            }
        }
        let mut pfd = libc::pollfd { fd: self.epoll.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, no wait.
        unsafe { libc::poll(&mut pfd, 1, 0) > 0 }
    }

    /// Done inside the call on the peer's region, mapped here (and kept for the link's next
    /// operations): nothing is pending, so `token` is not used. `remote.key` is the region's
    /// encoded [`ShmLocator`], which must name a memfd of the link's peer. The caller passes only
    /// a key the peer vouched for; whatever the key claims, no byte outside the region it records
    /// and outside the memfd is touched.
    fn rma(
        &mut self,
        link: LinkId,
        op: RmaOp,
        local: LocalMem,
        remote: RemoteMem<'_>,
        token: u64,
    ) -> Result<RmaOutcome, TlError> {
        let _ = token;
        let l = self.links.get(link).ok_or(TlError::InvalidParam)?;
        if l.local_close.is_some() {
            return Err(TlError::Canceled);
        }
        if let Some(error) = l.broken {
            return Err(error);
        }
        if l.peer_gone {
            return Err(TlError::ConnectionReset);
        }
        let peer_pid = u32::try_from(l.peer_pid).ok().filter(|&pid| pid != 0).ok_or(TlError::Unreachable)?;
        let locator = ShmLocator::from_bytes(remote.key).map_err(|_| TlError::InvalidParam)?;
        // The region must lie in the memfd range the locator maps.
        if locator.map_offset.checked_add(remote.region_len).is_none_or(|end| end > locator.map_len) {
            return Err(TlError::InvalidParam);
        }
        let region = self.peer_region(link, &locator, peer_pid)?;
        let fetched = region.execute(op, &local, &remote)?;
        Ok(RmaOutcome::Done { fetched })
    }

    fn same_host_fast_path(&mut self) -> Option<&mut dyn SameHostFastPath> {
        Some(self)
    }
}

impl SameHostFastPath for ShmTransport {
    fn poll_lending(&mut self, sink: &mut dyn FnMut(TlEvent<'_>), lend: &LendSlot) -> usize {
        self.poll_offering(sink, Some(lend))
    }

    fn take_rung_frame(
        &mut self,
        rung: LinkId,
        take: &mut dyn FnMut(LinkId, &[u8]),
        lend: &LendSlot,
    ) -> bool {
        // Connections to report go first, and only the general poll reports them.
        if !self.deferred.is_empty() {
            return false;
        }
        // A link gone since its doorbell was handed out is the general poll's to tell: the
        // table's lookup (an index and a generation compare) is the whole cost of finding it.
        let Some(link) = self.links.get_mut(rung).map(|l| &mut **l) else { return false };
        // A link with more to do than a read (a loan, a placement, a queue, a failure or close
        // to report) is the general poll's.
        if link.lent
            || link.placing.is_placing()
            || !link.queue.is_empty()
            || link.broken.is_some()
            || link.peer_gone
            || link.local_close.is_some()
        {
            return false;
        }
        link.rx.awake();
        // Empty (a false ring, or taken by another call since), or a record that is not a frame
        // (padding, a placement's): the general poll the caller makes next reads it.
        let Some((bytes, room)) = link.rx.peek_frame() else { return false };
        let offered = lend.offer();
        take(rung, bytes);
        link.rx.consume_peeked(room);
        if offered && lend.settle() {
            // Taken past the call, as `poll_rx` lends: unreleased until the loan ends.
            link.lent = true;
            link.rx_streak = true;
            if let Some(index) = self.links.slot_of(rung) {
                self.attention.insert(index);
            }
        } else {
            link.rx.release();
        }
        true
    }

    fn end_lend(&mut self, link: LinkId) {
        match self.links.get_mut(link) {
            Some(l) => {
                if std::mem::replace(&mut l.lent, false) {
                    l.rx.release();
                }
            }
            None => self.lent_gone.retain(|(gone, _)| *gone != link),
        }
    }

    fn doorbells(&self, out: &mut Vec<Doorbell>) {
        let mut on_board = Vec::new();
        for (id, link) in self.links.iter() {
            let keep: Arc<dyn Send + Sync> = link.segment.clone();
            // SAFETY: our receive ring lies in the segment's mapping, which `keep` keeps mapped.
            let bell = unsafe {
                Doorbell::new(link.segment.ring_base(link.rx_ring), link.segment.capacity(), id, keep)
            };
            match self.index(id) {
                Some(index) if link.on_board => on_board.push((index, bell)),
                _ => out.push(bell),
            }
        }
        if let (Some(board), false) = (&self.board, on_board.is_empty()) {
            out.push(Doorbell::board(Arc::clone(board.map()), on_board));
        }
    }

    fn doorbell_generation(&self) -> u64 {
        self.doorbell_generation
    }

    fn peer_help_words(&self, link: LinkId) -> Option<(HelpWords, u32)> {
        let l = self.links.get(link)?;
        let pid = u32::try_from(l.peer_pid).ok().filter(|&pid| pid != 0)?;
        Some((HelpWords::new(Arc::clone(&l.segment), l.rx_ring), pid))
    }

    fn open_send_lane(&mut self, link: LinkId) -> Option<Arc<ShmSendLane>> {
        let l = self.links.get(link)?;
        if l.local_close.is_some() || l.broken.is_some() || l.peer_gone {
            return None;
        }
        l.lane.open_for_endpoint(&l.sock).then(|| Arc::clone(&l.lane))
    }
}

/// This process's network and pid namespaces, as `<net inode hex>.<pid inode hex>`: what a peer's
/// shm address must carry for us to reach it. `0` stands for a namespace that cannot be read.
pub fn namespace_tag() -> String {
    use std::os::unix::fs::MetadataExt as _;
    let inode = |path: &str| std::fs::metadata(path).map(|m| m.ino()).unwrap_or(0);
    format!("{:x}.{:x}", inode("/proc/self/ns/net"), inode("/proc/self/ns/pid"))
}

#[cfg(test)]
mod namespace_tests {
    use super::*;

    #[test]
    fn reaches_only_addresses_of_our_namespaces() {
        let ours = format!("zcx-shm-{}-1-00", namespace_tag()).into_bytes();
        assert!(ShmTransport::reaches(&TransportAddress::Shm { socket_name: ours }));
        for other in ["zcx-shm-0.0-1-00", "zcx-shm-", "other", ""] {
            let socket_name = other.as_bytes().to_vec();
            assert!(!ShmTransport::reaches(&TransportAddress::Shm { socket_name }), "{other}");
        }
        let tag = namespace_tag();
        let prefix_only = format!("zcx-shm-{}0-1-00", tag).into_bytes();
        assert!(!ShmTransport::reaches(&TransportAddress::Shm { socket_name: prefix_only }));
        assert!(!ShmTransport::reaches(&TransportAddress::Uring { addr: "127.0.0.1:1".parse().unwrap() }));
    }
}
