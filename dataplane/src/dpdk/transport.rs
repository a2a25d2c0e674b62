//! [`DpdkTransport`]: the [`Transport`] over one DPDK port, running the reliability protocol
//! ([`crate::proto::reliable`]) per link. See the [module documentation](super) for the design.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Instant;

use zcx_control::TransportAddress;

use super::extmem::{self, ExtRegion};
use super::frame::{is_unicast, peek_dst_session, write_header, EthFrame, Mac, ETHERTYPE, ETH_HEADER_LEN};
use super::message::{
    first_or_fragment_kind, mark_placed, placed_prefix, write_fragment, Message, BYE_MSG, HELLO_MSG,
    PLACED_PREFIX_LEN,
};
use super::port::{ExtSegment, Port, PortConfig, PortError};
use crate::fast_map::FastMap;
use crate::link_table::LinkTable;
use crate::placed_receive::{PlaceDone, PlaceTracker, PlacedReceive};
use crate::proto::reliable::wire::{Kind, Packet, HEADER_LEN};
use crate::proto::reliable::{self, Delivery, Demux, External, SendError, Session};
use crate::transport::{
    Caps, ConnectTarget, LargePayload, LinkId, ListenerId, Payload, Placement, RmaCaps, SendOutcome, TlError,
    TlEvent, Transport,
};

/// Session ids this end picks for the links it initiates have this bit set; the ids a connecting
/// peer names for its acceptor ([`DpdkPeer::session`]) have it clear, so the two never collide.
pub const INITIATOR_BIT: u32 = 1 << 31;

/// Frames the loss injection dropped in this process, over every transport.
static INJECTED_DROPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Frames the loss injection ([`DpdkConfig::drop_per_million`], `ZCX_DPDK_DROP_PPM`) dropped in
/// this process so far, over every DPDK transport: how a test above the transport sees that
/// its traffic really crossed a lossy link.
pub fn injected_drops() -> u64 {
    INJECTED_DROPS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Placed frames whose payload went straight into its destination, in this process.
static PLACED_FRAMES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Payload bytes of those frames.
static PLACED_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// What every DPDK transport of this process received through placement so far; see
/// [`placed_counters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlacedCounters {
    /// Placed frames whose whole payload was written straight from the received mbufs into the
    /// destination the receiver named.
    pub frames: u64,
    /// Payload bytes of those frames.
    pub bytes: u64,
}

/// Placed frames (and their payload bytes) received into their destination by any DPDK
/// transport of this process: how a test above the transport sees that large payloads were
/// copied once, not reassembled first.
pub fn placed_counters() -> PlacedCounters {
    PlacedCounters {
        frames: PLACED_FRAMES.load(std::sync::atomic::Ordering::Relaxed),
        bytes: PLACED_BYTES.load(std::sync::atomic::Ordering::Relaxed),
    }
}

/// Longest protocol header [`Transport::send_placed`] takes (the api's are at most 60 bytes).
const MAX_PLACED_HEADER: usize = 256;

/// [`Caps::max_placed`] of a transport with this config: a placed frame sent whole (its header
/// too long for one message) still fits a frame.
fn max_placed(config: &DpdkConfig) -> usize {
    config.max_frame.saturating_sub(PLACED_PREFIX_LEN + MAX_PLACED_HEADER)
}

/// How a [`DpdkTransport`] is set up. EAL itself (its arguments, the `--vdev` that creates the
/// port) is the caller's: see [`zcx_dpdk_sys::Eal`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DpdkConfig {
    /// The ethdev to use, by name (`net_memif0`).
    pub port_name: String,
    /// The Ethernet payload size (the MTU): the reliability header and one message fit in it.
    /// At most 9216 − 14 (`port::MAX_FRAME_LEN`): above 1500 a jumbo frame, which the port must
    /// take (a memif port does, with a buffer size that holds one).
    pub mtu: usize,
    /// Mbufs in the port's pool.
    pub pool_mbufs: u32,
    /// Descriptors of the rx and tx rings.
    pub ring_desc: u16,
    /// Settings of every link's session; `max_payload` is derived from `mtu` and overwritten.
    /// Both ends must use the same.
    pub reliable: reliable::Config,
    /// Largest frame (header plus payload) one `send` takes; larger than an MTU is fragmented.
    pub max_frame: usize,
    /// Bytes a link may hold queued beyond what its session holds before `send` answers
    /// `NoResource`; a frame is always taken when nothing is queued.
    pub max_backlog: usize,
    /// Accept links that peers open to this port (a HELLO naming a free session id).
    pub accept: bool,
    /// Loss injection for tests: this many received frames in a million are dropped before
    /// anything looks at them. 0 in production.
    pub drop_per_million: u32,
    /// Seed of the loss injection's pseudo-random generator.
    pub drop_seed: u64,
    /// Zero-copy payloads ([`Payload::Zcopy`]) at least this long that lie in memory registered
    /// with DPDK ([`extmem`]) leave from that memory, as external-buffer mbufs
    /// chained after a header mbuf; shorter ones, and any when the port cannot send chained
    /// mbufs, are copied. `usize::MAX` turns zero-copy off. This is also [`Caps::zcopy_threshold`].
    pub zcopy_threshold: usize,
}

/// The default [`DpdkConfig::zcopy_threshold`], 256 KiB. Measured with the `dpdk_zcopy` bench
/// over `net_memif` (which copies every frame into its shared ring itself, in software): puts of
/// 64 KiB were a few percent slower zero-copy (the extra mbuf per datagram, and completion
/// waiting for the peer's acknowledgement), from 256 KiB on the two were within the run-to-run
/// noise. On a device that DMAs from the memory, every copy avoided is CPU time saved.
pub const DEFAULT_ZCOPY_THRESHOLD: usize = 256 << 10;

impl Default for DpdkConfig {
    /// `net_memif0`, a 1500-byte MTU, 2047 mbufs, 1024 descriptors, frames up to 4 MiB, the
    /// reliability defaults.
    fn default() -> DpdkConfig {
        DpdkConfig {
            port_name: "net_memif0".to_owned(),
            mtu: 1500,
            pool_mbufs: 2047,
            ring_desc: 1024,
            reliable: reliable::Config::default(),
            max_frame: 4 << 20,
            max_backlog: 16 << 20,
            accept: true,
            drop_per_million: 0,
            drop_seed: 0x5eed,
            zcopy_threshold: DEFAULT_ZCOPY_THRESHOLD,
        }
    }
}

impl DpdkConfig {
    /// The session settings actually used: `reliable` with `max_payload` from the MTU.
    pub fn session_config(&self) -> reliable::Config {
        reliable::Config { max_payload: self.mtu.saturating_sub(HEADER_LEN), ..self.reliable.clone() }
    }

    /// Longest a peer that stopped answering can go unnoticed while data is outstanding: the sum
    /// of the retransmission timeouts (doubling, capped) until the session declares it dead,
    /// with the timeout at its floor; measured round trips above the floor lengthen it, up to
    /// `dead_after_rtos × max_rto_ns`.
    pub fn dead_peer_timeout_ns(&self) -> u64 {
        let r = &self.reliable;
        (0..r.dead_after_rtos)
            .map(|i| r.rto_ns.saturating_mul(1u64 << i.min(63)).min(r.max_rto_ns))
            .fold(0u64, u64::saturating_add)
    }
}

/// The peer of a link to open with [`DpdkTransport::connect_peer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DpdkPeer {
    /// The peer port's MAC address.
    pub mac: Mac,
    /// The session id the peer's end of the link will have: below [`INITIATOR_BIT`], and not in
    /// use at the peer (the caller's control plane picks it, as it would agree session ids).
    pub session: u32,
}

/// Why a [`DpdkTransport`] could not be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DpdkError {
    /// The port could not be opened (or DPDK is not in this build).
    Port(PortError),
    /// A bad [`DpdkConfig`]; says what.
    Config(String),
}

impl std::fmt::Display for DpdkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DpdkError::Port(e) => e.fmt(f),
            DpdkError::Config(what) => write!(f, "bad DPDK transport config: {what}"),
        }
    }
}

impl std::error::Error for DpdkError {}

/// Counters of what the transport dropped before any session saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DpdkStats {
    /// Frames dropped by the loss injection.
    pub injected_drops: u64,
    /// Frames too short or of another EtherType.
    pub foreign_frames: u64,
    /// zcx frames addressed to another MAC.
    pub not_for_us: u64,
    /// Frames from a MAC other than the link's peer.
    pub wrong_mac: u64,
    /// HELLOs not accepted (accepting off, id in use or reserved for initiators).
    pub refused_hellos: u64,
    /// Messages a session delivered that this code could not parse (the link then fails).
    pub bad_messages: u64,
    /// Frames sent zero-copy: their payload left from the caller's registered memory.
    pub zcopy_frames: u64,
    /// Datagrams sent with an external-buffer segment (retransmissions included).
    pub zcopy_segments: u64,
    /// Zero-copy payloads above the threshold that were copied (not in registered memory, or
    /// the device could not map it).
    pub zcopy_fallbacks: u64,
    /// Frames sent placed ([`Transport::send_placed`] with a header that fits one message).
    pub placed_sent: u64,
    /// Placed frames received whose whole payload was written straight from the mbufs into the
    /// destination the receiver named (one copy).
    pub placed_frames: u64,
    /// Payload bytes of those frames.
    pub placed_bytes: u64,
    /// Placed frames whose peer broke the lengths it announced (the link then fails; also
    /// counted in `bad_messages`).
    pub placed_violations: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Initiated here; `Connected` not reported yet (the peer has not acknowledged the HELLO).
    Connecting,
    /// Up.
    Up,
    /// Closed here gracefully: sending what is queued, then BYE, then the link goes.
    Closing { bye_queued: bool },
    /// Failed and reported; waits for `close`. The session is gone (or lingering).
    Failed(TlError),
}

#[derive(Debug)]
struct Link {
    session: u32,
    peer: Mac,
    state: State,
    /// Frame bytes not yet in the session's send ring, oldest first.
    backlog: VecDeque<u8>,
    /// The frames waiting to enter the session, oldest first: what is left of a copied frame in
    /// `backlog`, or a zero-copy frame (its [`ZcTable`] slot).
    backlog_frames: VecDeque<Pending>,
    /// The frame being reassembled from its fragments.
    reassembly: Vec<u8>,
    /// The placed frame whose payload is being received.
    placing: PlaceTracker,
}

/// A frame waiting in a link's backlog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    /// This many bytes of it are left in the link's byte backlog.
    Bytes(usize),
    /// A placed frame none of which is in the session yet: this many bytes (placed prefix,
    /// header and payload) in the link's byte backlog; its first fragment is PLACED.
    Placed(usize),
    /// A zero-copy frame: its slot in the [`ZcTable`].
    Zc(u32),
}

/// The longest frame header (the part before the payload) a zero-copy frame carries inline.
const ZC_HEADER_MAX: usize = 128;

/// One frame sent zero-copy. Its payload stays in the caller's memory; every datagram carrying a
/// piece of it chains an external-buffer mbuf pointing there, attached with `shinfo`, whose
/// reference count is one (this record's) plus one per such mbuf not yet freed by the driver.
/// The frame completes ([`TlEvent::SendDone`]) once the peer acknowledged its last fragment (or
/// the link failed) *and* the count is back to one: no mbuf refers to the memory any more, and
/// go-back-N will not need it again.
struct ZcFrame {
    /// Shared info of the external buffers; at a stable address (the frame is boxed).
    shinfo: zcx_dpdk_sys::rte_mbuf_ext_shared_info,
    /// Keeps the memory registered with DPDK (and its DMA mappings) while mbufs may point at it.
    region: Option<Arc<ExtRegion>>,
    link: LinkId,
    token: u64,
    header: [u8; ZC_HEADER_MAX],
    header_len: usize,
    /// A placed frame: `header` starts with the placed prefix, the first fragment is PLACED.
    placed: bool,
    ptr: usize,
    len: usize,
    /// Bytes of header plus payload handed to the session so far.
    fed: usize,
    /// Sequence number of the frame's last fragment, once it was handed to the session.
    last_seq: Option<u64>,
    /// Set when the frame is settled: `Ok` acknowledged, or the link's error.
    result: Option<Result<(), TlError>>,
}

// SAFETY: the raw pointers in the shared info (callback opaque, unused) and the payload address
// are only dereferenced by DPDK and by the transport that owns the record, on whichever thread
// progresses it; the caller's ZcopyPayload contract keeps the payload live until SendDone.
unsafe impl Send for ZcFrame {}

impl std::fmt::Debug for ZcFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZcFrame")
            .field("link", &self.link)
            .field("token", &self.token)
            .field("len", &self.len)
            .finish()
    }
}

/// DPDK's free callback of zero-copy buffers: never called, since the frame's own reference keeps
/// the count above zero (DPDK requires one).
unsafe extern "C" fn zc_never_freed(_addr: *mut std::ffi::c_void, _opaque: *mut std::ffi::c_void) {}

impl ZcFrame {
    /// Mbufs the driver still holds that point into the payload.
    fn attached(&self) -> u16 {
        // SAFETY: the count is only changed atomically (by DPDK and `Port::transmit_split`);
        // an atomic load of a live, aligned u16 is sound.
        let count = unsafe {
            std::sync::atomic::AtomicU16::from_ptr(&self.shinfo.refcnt as *const u16 as *mut u16)
                .load(std::sync::atomic::Ordering::Acquire)
        };
        count.saturating_sub(1)
    }
}

/// The zero-copy frames of a transport: boxed slots reused through a free list, so the shared
/// infos DPDK points at never move and steady-state sends do not allocate.
#[derive(Debug, Default)]
struct ZcTable {
    // Boxed on purpose: DPDK holds pointers to the shared infos inside, which must not move when
    // the vector grows.
    #[allow(clippy::vec_box)]
    slots: Vec<Box<ZcFrame>>,
    free: Vec<u32>,
    /// Slots in use, in no particular order.
    active: Vec<u32>,
}

impl ZcTable {
    #[allow(clippy::too_many_arguments)]
    fn take(
        &mut self,
        region: Arc<ExtRegion>,
        link: LinkId,
        token: u64,
        header: &[u8],
        placed: bool,
        ptr: usize,
        len: usize,
    ) -> Option<u32> {
        if header.len() > ZC_HEADER_MAX {
            return None;
        }
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                let index = u32::try_from(self.slots.len()).ok()?;
                self.slots.push(Box::new(ZcFrame {
                    shinfo: zcx_dpdk_sys::rte_mbuf_ext_shared_info {
                        free_cb: Some(zc_never_freed),
                        fcb_opaque: std::ptr::null_mut(),
                        refcnt: 1,
                    },
                    region: None,
                    link,
                    token,
                    header: [0; ZC_HEADER_MAX],
                    header_len: 0,
                    placed: false,
                    ptr: 0,
                    len: 0,
                    fed: 0,
                    last_seq: None,
                    result: None,
                }));
                index
            }
        };
        let frame = &mut self.slots[index as usize];
        frame.shinfo.refcnt = 1;
        frame.region = Some(region);
        frame.link = link;
        frame.token = token;
        frame.header[..header.len()].copy_from_slice(header);
        frame.header_len = header.len();
        frame.placed = placed;
        frame.ptr = ptr;
        frame.len = len;
        frame.fed = 0;
        frame.last_seq = None;
        frame.result = None;
        self.active.push(index);
        Some(index)
    }

    fn get(&self, cookie: u32) -> Option<&ZcFrame> {
        self.slots.get(cookie as usize).map(|b| &**b)
    }

    /// Settles every unsettled frame of `link` with `result`.
    fn settle_link(&mut self, link: LinkId, result: Result<(), TlError>) {
        for &index in &self.active {
            let frame = &mut self.slots[index as usize];
            if frame.link == link && frame.result.is_none() {
                frame.result = Some(result);
            }
        }
    }
}

impl Drop for ZcTable {
    /// The port was stopped first (`DpdkTransport`'s Drop), which freed every mbuf; a frame the
    /// driver still points at would be leaked rather than freed under it.
    fn drop(&mut self) {
        for slot in self.slots.drain(..) {
            if slot.attached() > 0 {
                tracing::warn!(token = slot.token, "zero-copy frame still attached at close; leaked");
                Box::leak(slot);
            }
        }
    }
}

/// xorshift64*: small and good enough to pick which frames the loss injection drops.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next_below_million(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32 % 1_000_000
    }
}

/// Everything but the port, so a burst can lend frames from the port while this is updated.
#[derive(Debug)]
struct Inner {
    config: DpdkConfig,
    session_config: reliable::Config,
    mac: Mac,
    epoch: Instant,
    demux: Demux,
    /// By generational id: a link id the api still holds after its link went names no other
    /// link. The session id on the wire is the link's own ([`Link::session`]), agreed with the
    /// peer and independent of the link id.
    links: LinkTable<Link>,
    by_session: FastMap<u32, LinkId>,
    /// Sessions kept after their link went, to acknowledge the peer's last retransmissions: id,
    /// peer MAC, and when they go.
    lingering: Vec<(u32, Mac, u64)>,
    next_initiator_id: u32,
    rng: Rng,
    /// One message being built.
    scratch: Vec<u8>,
    stats: DpdkStats,
    /// Frames sent zero-copy that have not completed.
    zc: ZcTable,
    /// [`DpdkConfig::zcopy_threshold`], or `usize::MAX` when the port cannot chain mbufs.
    zcopy_threshold: usize,
    /// The port's id and device, for DMA mappings of registered memory.
    port_id: u16,
    device: usize,
    /// Placements ended by a local close, to report as `PlaceDone { Canceled }` on the next poll.
    place_ends: Vec<(LinkId, PlaceDone)>,
    /// The session of the datagram just received: when the rest of the burst is long to read,
    /// the poll sends that session's ack before the next frame if the datagram made it due
    /// ([`Session::ack_due_now`]).
    last_session: Option<u32>,
}

/// The DPDK transport; see the [module documentation](super).
#[derive(Debug)]
pub struct DpdkTransport {
    caps: Caps,
    inner: Inner,
    /// Dropped after everything that refers to its frames.
    port: Port,
    /// The port's claim when opened by [`super::open_with_process_eal`]; released after the
    /// port is closed.
    pub(crate) claim: Option<super::eal::PortClaim>,
}

impl DpdkTransport {
    /// Opens the port named in `config` (creating its pool, starting it) and makes an empty
    /// transport on it.
    ///
    /// # Safety
    /// DPDK's EAL is initialised in this process (`eal` proves it) and must stay so until the
    /// transport is dropped: drop the transport before the [`zcx_dpdk_sys::Eal`] (DPDK's
    /// shutdown order; the guard cannot be borrowed for the transport's life because the
    /// transport is `Send` and the guard is not).
    pub unsafe fn new(_eal: &zcx_dpdk_sys::Eal, config: DpdkConfig) -> Result<DpdkTransport, DpdkError> {
        let session_config = config.session_config();
        session_config.validate().map_err(|e| DpdkError::Config(e.to_string()))?;
        if session_config.max_payload < 2 {
            return Err(DpdkError::Config(format!("mtu {} leaves no room for a message", config.mtu)));
        }
        if config.drop_per_million > 1_000_000 {
            return Err(DpdkError::Config("drop_per_million is above a million".to_owned()));
        }
        let port_config = PortConfig {
            name: config.port_name.clone(),
            pool_mbufs: config.pool_mbufs,
            ring_desc: config.ring_desc,
            max_frame_len: ETH_HEADER_LEN + config.mtu,
        };
        // SAFETY: EAL is initialised and outlives the transport, which owns the port (contract
        // of this function).
        let port = unsafe { Port::open(&port_config) }.map_err(DpdkError::Port)?;
        let zcopy_threshold = if port.multi_seg_tx() { config.zcopy_threshold.max(1) } else { usize::MAX };
        if !port.multi_seg_tx() {
            tracing::debug!(port = %config.port_name, "the port cannot send chained mbufs: no zero-copy");
        }
        let caps = dpdk_caps(&config, zcopy_threshold);
        let inner = Inner {
            mac: port.mac(),
            epoch: Instant::now(),
            demux: Demux::new(),
            links: LinkTable::new(),
            by_session: FastMap::default(),
            lingering: Vec::new(),
            next_initiator_id: 0,
            rng: Rng(config.drop_seed | 1),
            scratch: vec![0; session_config.max_payload],
            stats: DpdkStats::default(),
            zc: ZcTable::default(),
            zcopy_threshold,
            port_id: port.id(),
            device: port.device() as usize,
            place_ends: Vec::new(),
            last_session: None,
            session_config,
            config,
        };
        Ok(DpdkTransport { caps, inner, port, claim: None })
    }

    /// The port's MAC address, which peers connect to.
    pub fn mac(&self) -> Mac {
        self.inner.mac
    }

    /// Whether the port's link is up.
    pub fn link_up(&self) -> bool {
        self.port.link_up()
    }

    /// What the transport dropped before the sessions.
    pub fn stats(&self) -> DpdkStats {
        self.inner.stats
    }

    /// Datagrams the demux dropped: malformed, corrupted or for an unknown session.
    pub fn demux_drops(&self) -> &reliable::DropStats {
        self.inner.demux.drops()
    }

    /// The session of a link, for its statistics.
    pub fn session(&self, link: LinkId) -> Option<&Session> {
        let link = self.inner.link(link)?;
        self.inner.demux.get(link.session)
    }

    /// The peer of a link: its MAC and the session id at its end.
    pub fn link_peer(&self, link: LinkId) -> Option<DpdkPeer> {
        let link = self.inner.link(link)?;
        let session = self.inner.demux.get(link.session)?;
        Some(DpdkPeer { mac: link.peer, session: session.peer_id() })
    }

    /// Opens a link to `peer`: its first message (a HELLO) makes the peer create its end;
    /// `Connected` follows once the peer acknowledged it, `LinkFailed { Timeout }` if it never
    /// does. Frames may be sent at once.
    pub fn connect_peer(&mut self, peer: DpdkPeer) -> Result<LinkId, TlError> {
        self.inner.connect(peer)
    }
}

impl Drop for DpdkTransport {
    /// Stops the port first: the driver frees every mbuf it holds, so no zero-copy frame is
    /// still pointed at when the frames (and the registrations they pin) go.
    fn drop(&mut self) {
        self.port.stop();
    }
}

impl Inner {
    /// [`Transport::send`], or with `placed` the frame of [`Transport::send_placed`]: `header`
    /// then starts with the placed prefix, and the frame's first fragment is PLACED.
    fn send_frame(
        &mut self,
        link: LinkId,
        header: &[u8],
        payload: Payload<'_>,
        placed: bool,
    ) -> Result<SendOutcome, TlError> {
        let inner = self;
        let Some(l) = inner.links.get_mut(link) else {
            return Err(TlError::InvalidParam);
        };
        match l.state {
            State::Failed(error) => return Err(error),
            State::Closing { .. } => return Err(TlError::InvalidParam),
            State::Connecting | State::Up => {}
        }
        if let Payload::Zcopy(z) = &payload {
            if z.len() >= inner.zcopy_threshold {
                let total = header.len() + z.len();
                if total > inner.config.max_frame {
                    return Err(TlError::InvalidParam);
                }
                let region = extmem::lookup(z.ptr() as usize, z.len()).filter(|region| {
                    // SAFETY: `device` is the device of this transport's open port, which zcx
                    // never removes from the process.
                    unsafe { region.ensure_device(inner.port_id, inner.device as *mut _) }
                });
                match region.and_then(|r| {
                    inner.zc.take(r, link, z.token(), header, placed, z.ptr() as usize, z.len())
                }) {
                    Some(cookie) => {
                        inner.stats.zcopy_frames += 1;
                        extmem::count_zcopy_frame(z.len());
                        l.backlog_frames.push_back(Pending::Zc(cookie));
                        if l.backlog_frames.len() == 1 {
                            if let Some(session) = inner.demux.get_mut(l.session) {
                                l.feed(session, &mut inner.scratch, &mut inner.zc);
                            }
                        }
                        return Ok(SendOutcome::InFlight);
                    }
                    None => inner.stats.zcopy_fallbacks += 1,
                }
            }
        }
        let payload: &[u8] = match &payload {
            Payload::None => &[],
            Payload::Copy(bytes) => bytes,
            // SAFETY: `ZcopyPayload::new`'s contract keeps the bytes live and unchanged until
            // `SendDone`; they are copied before this returns `Done`, so none follows.
            Payload::Zcopy(z) => unsafe { z.as_slice() },
        };
        let total = header.len() + payload.len();
        if total > inner.config.max_frame {
            return Err(TlError::InvalidParam);
        }
        let mut offset = 0;
        if l.backlog_frames.is_empty() {
            let Some(session) = inner.demux.get_mut(l.session) else { return Err(TlError::ConnectionReset) };
            loop {
                // Each fragment is written straight into the session's send ring.
                let mut n = 0;
                let queued = session.send_with(|slot| {
                    let (len, taken) = write_fragment(slot, header, payload, offset, total - offset);
                    if placed && offset == 0 {
                        mark_placed(slot);
                    }
                    n = taken;
                    len
                });
                match queued {
                    Ok(()) => {}
                    Err(SendError::Backpressure) => break,
                    Err(SendError::Dead) => return Err(TlError::Timeout),
                    Err(SendError::TooLarge { .. }) => return Err(TlError::InvalidParam),
                }
                offset += n;
                if offset == total {
                    return Ok(SendOutcome::Done);
                }
            }
        } else if l.backlog.len() + total > inner.config.max_backlog {
            return Err(TlError::NoResource);
        }
        let rest = total - offset;
        if offset < header.len() {
            l.backlog.extend(&header[offset..]);
            l.backlog.extend(payload);
        } else {
            l.backlog.extend(&payload[offset - header.len()..]);
        }
        l.backlog_frames.push_back(if placed && offset == 0 {
            Pending::Placed(rest)
        } else {
            Pending::Bytes(rest)
        });
        Ok(SendOutcome::Done)
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn link(&self, link: LinkId) -> Option<&Link> {
        self.links.get(link)
    }

    fn add_link(&mut self, link: Link) -> Result<LinkId, TlError> {
        let session = link.session;
        let id = self.links.insert(link)?;
        self.by_session.insert(session, id);
        Ok(id)
    }

    fn connect(&mut self, peer: DpdkPeer) -> Result<LinkId, TlError> {
        if !is_unicast(&peer.mac) || peer.session & INITIATOR_BIT != 0 {
            return Err(TlError::InvalidParam);
        }
        // A free id with the initiator bit: the counter wraps after 2^31 links.
        let mut local = None;
        for _ in 0..16 {
            let id = INITIATOR_BIT | (self.next_initiator_id & !INITIATOR_BIT);
            self.next_initiator_id = self.next_initiator_id.wrapping_add(1);
            if self.demux.get(id).is_none() {
                local = Some(id);
                break;
            }
        }
        let local = local.ok_or(TlError::NoResource)?;
        let mut session = Session::new(self.session_config.clone(), local, peer.session)
            .map_err(|_| TlError::InvalidParam)?;
        session.send(&HELLO_MSG).map_err(|_| TlError::NoResource)?;
        self.demux.insert(session).map_err(|_| TlError::NoResource)?;
        let link = Link::new(local, peer.mac, State::Connecting);
        self.add_link(link).inspect_err(|_| {
            self.demux.remove(local);
        })
    }

    /// Takes in one received frame.
    fn on_frame(&mut self, now: u64, bytes: &[u8], sink: &mut dyn FnMut(TlEvent<'_>), events: &mut usize) {
        if self.config.drop_per_million > 0 && self.rng.next_below_million() < self.config.drop_per_million {
            self.stats.injected_drops += 1;
            INJECTED_DROPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        let Ok(frame) = EthFrame::parse(bytes) else {
            self.stats.foreign_frames += 1;
            return;
        };
        if frame.dst != self.mac {
            self.stats.not_for_us += 1;
            return;
        }
        let Some(dst) = peek_dst_session(frame.datagram) else {
            // Let the demux count it as malformed.
            let _ = self.demux.on_datagram(now, frame.datagram);
            return;
        };
        let known = self.by_session.get(&dst).map(|&link| self.links.get(link));
        match known {
            Some(link) => {
                if link.is_some_and(|l| l.peer != frame.src) {
                    self.stats.wrong_mac += 1;
                    return;
                }
            }
            // A lingering session: it acknowledges, nothing is delivered.
            None if self.demux.get(dst).is_some() => {}
            None => {
                if !self.try_accept(frame.src, frame.datagram) {
                    // Counted by the demux as an unknown session (or malformed).
                    let _ = self.demux.on_datagram(now, frame.datagram);
                    return;
                }
            }
        }
        let (id, delivery) = match self.demux.on_datagram(now, frame.datagram) {
            Ok(ok) => ok,
            Err(_) => return, // counted by the demux or the session
        };
        self.last_session = Some(id);
        let Some(&link_id) = self.by_session.get(&id) else { return };
        let Some(link) = self.links.get_mut(link_id) else { return };
        if link.state == State::Connecting && self.demux.get(id).is_some_and(|s| s.acked() >= 1) {
            link.state = State::Up;
            sink(TlEvent::Connected { link: link_id });
            *events += 1;
        }
        let Delivery::Message(message) = delivery else { return };
        match Message::parse(message) {
            Ok(Message::Hello) => {
                // Only an acceptor's session starts with the peer's HELLO; report it now, so
                // `Accepted` comes before the link's first frame.
                if id & INITIATOR_BIT == 0 {
                    let peer = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
                    sink(TlEvent::Accepted { listener: ListenerId(0), link: link_id, peer });
                    *events += 1;
                } else {
                    self.fail(link_id, TlError::ConnectionReset, sink, events);
                }
            }
            Ok(Message::Fragment { last, data }) => {
                if !matches!(link.state, State::Up | State::Connecting) {
                    return; // closed here: nothing more is reported
                }
                if let Some(placing) = link.placing.current_mut() {
                    match placing.absorb_fragment(data, last) {
                        Ok(false) => {}
                        Ok(true) => {
                            if let Some(placed) = link.placing.take_complete() {
                                self.place_done(link_id, placed, sink, events);
                            }
                        }
                        Err(violation) => self.place_violation(link_id, id, &violation, sink, events),
                    }
                    return;
                }
                if link.reassembly.len() + data.len() > self.config.max_frame {
                    tracing::debug!(session = id, "peer sent a frame above max_frame");
                    self.stats.bad_messages += 1;
                    self.fail(link_id, TlError::ConnectionReset, sink, events);
                    return;
                }
                if last && link.reassembly.is_empty() {
                    sink(TlEvent::Frame { link: link_id, bytes: data });
                } else if last {
                    link.reassembly.extend_from_slice(data);
                    sink(TlEvent::Frame { link: link_id, bytes: &link.reassembly });
                    link.reassembly.clear();
                } else {
                    link.reassembly.extend_from_slice(data);
                    return;
                }
                *events += 1;
            }
            Ok(Message::Placed { header, len, data }) => {
                if !matches!(link.state, State::Up | State::Connecting) {
                    return; // closed here: nothing more is reported
                }
                let nested = link.placing.is_placing() || !link.reassembly.is_empty();
                if nested || len > max_placed(&self.config) {
                    let reason = if nested {
                        "a placed frame inside another frame"
                    } else {
                        "a placed payload above max_placed"
                    };
                    self.place_violation(link_id, id, &reason, sink, events);
                    return;
                }
                let mut dest = Placement::default();
                sink(TlEvent::Placed { link: link_id, header, len, dest: &mut dest });
                *events += 1;
                // SAFETY: a target the sink set is writable for `len` bytes until `PlaceDone`
                // (PlaceTarget::new's contract), which this link reports when the placement
                // ends: complete, failed (`fail`) or closed here (`close`).
                let started = unsafe { link.placing.start(dest.take(), len) };
                // The parser checked `data.len() <= len`: this fragment is the last when full.
                let absorbed = started.and_then(|placing| placing.absorb_fragment(data, data.len() == len));
                match absorbed {
                    Ok(false) => {}
                    Ok(true) => {
                        if let Some(placed) = link.placing.take_complete() {
                            self.place_done(link_id, placed, sink, events);
                        }
                    }
                    Err(violation) => self.place_violation(link_id, id, &violation, sink, events),
                }
            }
            Ok(Message::Bye) => {
                tracing::debug!(session = id, "peer closed the link");
                self.fail(link_id, TlError::ConnectionReset, sink, events);
            }
            Err(err) => {
                tracing::debug!(session = id, %err, "bad message from peer");
                self.stats.bad_messages += 1;
                self.fail(link_id, TlError::ConnectionReset, sink, events);
            }
        }
    }

    /// [`Transport::close`].
    fn close(&mut self, link: LinkId, force: bool) {
        self.end_placement_on_close(link);
        let Some(l) = self.links.get_mut(link) else { return };
        match l.state {
            State::Failed(_) => self.free(link),
            _ if force => self.free(link),
            State::Closing { .. } => {}
            State::Connecting | State::Up => l.state = State::Closing { bye_queued: false },
        }
    }

    /// Nothing more is received on a link closed here: its placement, if any, ends unfinished,
    /// reported by the next poll ([`Inner::report_place_ends`]).
    fn end_placement_on_close(&mut self, link: LinkId) {
        let Some(l) = self.links.get_mut(link) else { return };
        if let Some(done) = l.placing.abort(TlError::Canceled) {
            self.place_ends.push((link, done));
        }
    }

    /// Reports the placements ended by local closes as `PlaceDone { Canceled }`.
    fn report_place_ends(&mut self, sink: &mut dyn FnMut(TlEvent<'_>), events: &mut usize) {
        for (link, done) in self.place_ends.drain(..) {
            sink(done.event(link));
            *events += 1;
        }
    }

    /// A placement is complete: counts it and reports `PlaceDone` when it had a destination.
    fn place_done(
        &mut self,
        link: LinkId,
        placed: PlacedReceive,
        sink: &mut dyn FnMut(TlEvent<'_>),
        events: &mut usize,
    ) {
        let len = placed.len();
        let Some(done) = placed.complete() else { return };
        self.stats.placed_frames += 1;
        self.stats.placed_bytes += len as u64;
        PLACED_FRAMES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        PLACED_BYTES.fetch_add(len as u64, std::sync::atomic::Ordering::Relaxed);
        sink(done.event(link));
        *events += 1;
    }

    /// The peer sent a placed frame other than it announced, or where none may start: the link
    /// fails (its placement with it, nothing more written).
    fn place_violation(
        &mut self,
        link: LinkId,
        session: u32,
        reason: &dyn std::fmt::Display,
        sink: &mut dyn FnMut(TlEvent<'_>),
        events: &mut usize,
    ) {
        tracing::debug!(session, %reason, "bad placed frame from peer; failing the link");
        self.stats.placed_violations += 1;
        self.stats.bad_messages += 1;
        self.fail(link, TlError::ConnectionReset, sink, events);
    }

    /// Creates the acceptor's end of a link for a HELLO (DATA, seq 0) to a session id that is
    /// free and not an initiator's; false when `datagram` is not such a HELLO.
    fn try_accept(&mut self, src: Mac, datagram: &[u8]) -> bool {
        let Ok(packet) = Packet::new_checked(datagram) else { return false };
        let is_hello = packet.kind() == Kind::Data
            && packet.seq() == 0
            && Message::parse(packet.payload()) == Ok(Message::Hello);
        if !is_hello {
            return false;
        }
        let local = packet.dst_session();
        if !self.config.accept || local & INITIATOR_BIT != 0 || !is_unicast(&src) {
            self.stats.refused_hellos += 1;
            return false;
        }
        let Ok(session) = Session::new(self.session_config.clone(), local, packet.src_session()) else {
            return false;
        };
        if self.demux.insert(session).is_err() {
            return false;
        }
        tracing::debug!(session = local, peer_session = packet.src_session(), "accepting a link");
        if self.add_link(Link::new(local, src, State::Up)).is_err() {
            self.demux.remove(local);
            self.stats.refused_hellos += 1;
            return false;
        }
        true
    }

    /// Reports `link` failed (unless it was closed here, then it just goes) and lets its session
    /// linger long enough to acknowledge the peer's retransmissions.
    fn fail(
        &mut self,
        link_id: LinkId,
        error: TlError,
        sink: &mut dyn FnMut(TlEvent<'_>),
        events: &mut usize,
    ) {
        let Some(link) = self.links.get_mut(link_id) else { return };
        let closing = matches!(link.state, State::Closing { .. });
        if matches!(link.state, State::Failed(_)) {
            return;
        }
        link.state = State::Failed(error);
        link.backlog = VecDeque::new();
        link.backlog_frames = VecDeque::new();
        link.reassembly = Vec::new();
        let placing = link.placing.abort(error);
        let (session, peer) = (link.session, link.peer);
        self.by_session.remove(&session);
        self.zc.settle_link(link_id, Err(error));
        if let Some(s) = self.demux.get_mut(session) {
            // Nothing of this link is sent again: its zero-copy memory is released.
            s.abandon_sends();
        }
        if self.demux.get(session).is_some_and(|s| !s.is_dead()) {
            let until = self.now().saturating_add(self.session_config.max_rto_ns);
            self.lingering.push((session, peer, until));
        } else {
            self.demux.remove(session);
        }
        if let Some(done) = placing {
            // Some payload bytes never came; the destination is not touched again.
            sink(done.event(link_id));
            *events += 1;
        }
        if closing {
            self.free(link_id);
        } else {
            sink(TlEvent::LinkFailed { link: link_id, error });
            *events += 1;
        }
    }

    fn free(&mut self, link_id: LinkId) {
        self.zc.settle_link(link_id, Err(TlError::Canceled));
        if let Some(link) = self.links.remove(link_id) {
            if self.by_session.get(&link.session) == Some(&link_id) {
                self.by_session.remove(&link.session);
                self.demux.remove(link.session);
            }
        }
    }

    /// Runs the sessions' timers; a dead peer fails its link with `Timeout`.
    fn timeouts(&mut self, now: u64, sink: &mut dyn FnMut(TlEvent<'_>), events: &mut usize) {
        for index in 0..self.links.slot_count() {
            let Some(link) = self.links.at(index) else { continue };
            if matches!(link.state, State::Failed(_)) {
                continue;
            }
            let Some(session) = self.demux.get_mut(link.session) else { continue };
            if session.poll_timeout().is_some_and(|due| due <= now) && session.handle_timeout(now).is_err() {
                self.fail(self.links.id_at(index), TlError::Timeout, sink, events);
            }
        }
        let demux = &mut self.demux;
        self.lingering.retain(|&(session, _, until)| {
            let keep = until > now && demux.get(session).is_some_and(|s| !s.is_dead());
            if keep {
                if let Some(s) = demux.get_mut(session) {
                    if s.poll_timeout().is_some_and(|due| due <= now) {
                        let _ = s.handle_timeout(now);
                    }
                }
            } else {
                demux.remove(session);
            }
            keep
        });
    }

    /// Moves queued frame bytes of every link into its session, finishes graceful closes, and
    /// transmits whatever the sessions have to send.
    fn transmit(&mut self, now: u64, port: &mut Port) {
        for index in 0..self.links.slot_count() {
            let Some(link) = self.links.at_mut(index) else { continue };
            if matches!(link.state, State::Failed(_)) {
                continue; // its session, if any, lingers
            }
            let Some(session) = self.demux.get_mut(link.session) else { continue };
            link.feed(session, &mut self.scratch, &mut self.zc);
            if let State::Closing { bye_queued } = link.state {
                if !bye_queued && link.backlog_frames.is_empty() && session.send(&BYE_MSG).is_ok() {
                    link.state = State::Closing { bye_queued: true };
                } else if bye_queued && session.unacked() == 0 {
                    // The peer has everything, BYE included; linger to answer its retransmissions.
                    let session = link.session;
                    let until = now.saturating_add(self.session_config.max_rto_ns);
                    self.lingering.push((session, link.peer, until));
                    self.by_session.remove(&session);
                    let id = self.links.id_at(index);
                    self.links.remove_at(index);
                    // Acknowledged to the last byte.
                    self.zc.settle_link(id, Ok(()));
                    continue;
                }
            }
            if !drain(session, now, port, &self.mac, &link.peer, &self.zc, &mut self.stats) {
                break;
            }
        }
        for (session_id, peer, _) in &self.lingering {
            let Some(session) = self.demux.get_mut(*session_id) else { continue };
            if !drain(session, now, port, &self.mac, peer, &self.zc, &mut self.stats) {
                break;
            }
        }
        port.flush();
    }

    /// When `session`'s ack is due ([`Session::ack_due_now`]), sends what the session has to
    /// send now (the ack, alone or on its data) and hands it to the driver: called between two
    /// received frames, so that a peer whose window the burst being read has spent learns of its
    /// progress before the rest of the burst is read. A lingering session's ack waits for the
    /// end of the poll.
    fn ack_at_once(&mut self, session: u32, now: u64, port: &mut Port) {
        let Some(live) = self.demux.get_mut(session).filter(|s| s.ack_due_now()) else { return };
        let Some(peer) = self.by_session.get(&session).and_then(|&link| self.links.get(link)).map(|l| l.peer)
        else {
            return;
        };
        drain(live, now, port, &self.mac, &peer, &self.zc, &mut self.stats);
        port.flush();
    }

    /// Reports every zero-copy frame that is settled and no longer attached to any mbuf as
    /// `SendDone`, and frees its slot (which releases its pin on the registered memory).
    fn complete_zc(&mut self, sink: &mut dyn FnMut(TlEvent<'_>), events: &mut usize) {
        let mut i = 0;
        while i < self.zc.active.len() {
            let index = self.zc.active[i];
            let frame = &mut self.zc.slots[index as usize];
            if frame.result.is_none() {
                let acked = frame.last_seq.is_some_and(|last| {
                    self.links
                        .get(frame.link)
                        .and_then(|l| self.demux.get(l.session))
                        .is_some_and(|s| s.acked() > last)
                });
                if acked {
                    frame.result = Some(Ok(()));
                }
            }
            match frame.result {
                Some(result) if frame.attached() == 0 => {
                    frame.region = None;
                    let (link, token) = (frame.link, frame.token);
                    self.zc.active.swap_remove(i);
                    self.zc.free.push(index);
                    sink(TlEvent::SendDone { link, token, result });
                    *events += 1;
                }
                _ => i += 1,
            }
        }
    }
}

/// Transmits `session`'s datagrams to `peer` until it has none or the port takes no more;
/// false when the port is full.
/// A message's external part, chained from the caller's memory, as the port wants it.
fn segment(zc: &ZcTable, external: External) -> Option<ExtSegment> {
    let frame = zc.get(external.cookie)?;
    let region = frame.region.as_ref()?;
    Some(ExtSegment {
        addr: external.addr as *mut u8,
        iova: region.iova(external.addr),
        // Lossless: a message fits the 16-bit datagram length.
        len: external.len as u16,
        shinfo: &frame.shinfo as *const _ as *mut _,
    })
}

fn drain(
    session: &mut Session,
    now: u64,
    port: &mut Port,
    mac: &Mac,
    peer: &Mac,
    zc: &ZcTable,
    stats: &mut DpdkStats,
) -> bool {
    loop {
        let mut chained = false;
        let fill = |buf: &mut [u8]| {
            let (head, datagram) = buf.split_at_mut(ETH_HEADER_LEN);
            let (len, external) = session.poll_transmit_split(now, datagram)?;
            write_header(head, peer, mac);
            let Some(external) = external else { return Some((ETH_HEADER_LEN + len, None)) };
            // A message's cookie names a frame that is live until the message is acknowledged
            // or abandoned; were it not, the datagram would go short and the peer drop it as
            // corrupt (checksum), which go-back-N recovers from.
            let segment = segment(zc, external);
            chained = segment.is_some();
            Some((ETH_HEADER_LEN + len, segment))
        };
        // SAFETY: a segment points into a frame's payload, which the caller of `send` keeps
        // readable and unchanged until SendDone; SendDone waits until the segment's reference
        // on the frame's shared info (which lives in the boxed frame until then) is dropped.
        let queued = unsafe { port.transmit_split(fill) };
        if chained {
            stats.zcopy_segments += 1;
        }
        if queued.is_none() {
            return port.queued() < super::port::BURST;
        }
    }
}

/// Hands the fragments of a zero-copy frame to the session: each is a message of the fragment
/// kind and the header bytes it covers (inline) and the payload bytes it covers, described, not
/// copied (their CRC is computed here, once). True when the whole frame is in the session.
fn feed_zc(frame: &mut ZcFrame, cookie: u32, session: &mut Session, scratch: &mut [u8]) -> bool {
    let total = frame.header_len + frame.len;
    let room = session.config().max_payload.saturating_sub(1).min(scratch.len().saturating_sub(1));
    while frame.fed < total {
        if session.send_queue_full() {
            // Checked first: preparing the message (its CRC above all) would be wasted.
            return false;
        }
        let left = total - frame.fed;
        let n = left.min(room);
        let last = n == left;
        let (h_from, h_to) = (frame.fed.min(frame.header_len), (frame.fed + n).min(frame.header_len));
        scratch[0] = first_or_fragment_kind(frame.placed && frame.fed == 0, last);
        scratch[1..1 + h_to - h_from].copy_from_slice(&frame.header[h_from..h_to]);
        let inline = &scratch[..1 + h_to - h_from];
        let ext_len = n - (h_to - h_from);
        let seq = session.next_seq();
        let sent = if ext_len == 0 {
            session.send(inline)
        } else {
            let addr = frame.ptr + (frame.fed + (h_to - h_from) - frame.header_len);
            // SAFETY: `addr..addr + ext_len` lies inside the frame's payload, which the caller
            // of `send` keeps readable and unchanged until SendDone (ZcopyPayload's contract).
            let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, ext_len) };
            // The CRC of the whole message, computed once here for every (re)transmission.
            let mut crc = crc32fast::Hasher::new();
            crc.update(inline);
            crc.update(bytes);
            // Lossless: at most a message long.
            let external = External { addr, len: ext_len as u32, crc: crc.finalize(), cookie };
            session.send_split(inline, external)
        };
        if sent.is_err() {
            return false;
        }
        frame.fed += n;
        if last {
            frame.last_seq = Some(seq);
        }
    }
    true
}

impl Link {
    fn new(session: u32, peer: Mac, state: State) -> Link {
        Link {
            session,
            peer,
            state,
            backlog: VecDeque::new(),
            backlog_frames: VecDeque::new(),
            reassembly: Vec::new(),
            placing: PlaceTracker::default(),
        }
    }

    /// Moves fragments of the queued frames into the session until it pushes back.
    fn feed(&mut self, session: &mut Session, scratch: &mut [u8], zc: &mut ZcTable) {
        while let Some(&pending) = self.backlog_frames.front() {
            match pending {
                Pending::Bytes(left) | Pending::Placed(left) => {
                    let (a, b) = self.backlog.as_slices();
                    let mut n = 0;
                    let queued = session.send_with(|slot| {
                        let (len, taken) = write_fragment(slot, a, b, 0, left);
                        if matches!(pending, Pending::Placed(_)) {
                            // `send_placed` checked that the prefix and header fit this message.
                            mark_placed(slot);
                        }
                        n = taken;
                        len
                    });
                    if queued.is_err() {
                        return;
                    }
                    self.backlog.drain(..n);
                    if n == left {
                        self.backlog_frames.pop_front();
                    } else if let Some(front) = self.backlog_frames.front_mut() {
                        *front = Pending::Bytes(left - n);
                    }
                }
                Pending::Zc(cookie) => {
                    let Some(frame) = zc.slots.get_mut(cookie as usize) else {
                        self.backlog_frames.pop_front();
                        continue;
                    };
                    if !feed_zc(frame, cookie, session, scratch) {
                        return;
                    }
                    self.backlog_frames.pop_front();
                }
            }
        }
    }
}

impl Transport for DpdkTransport {
    fn caps(&self) -> &Caps {
        &self.caps
    }

    /// `TransportAddress::Dpdk { mac, udp_port }` with the port's MAC and, in the `udp_port`
    /// slot, the EtherType this transport demultiplexes on ([`ETHERTYPE`]): raw Ethernet has no
    /// UDP port, and the slot keeps the worker address's wire format unchanged (it must not be
    /// 0). Session ids are not in the address: the caller's control plane agrees them per link
    /// ([`ConnectTarget::Session`]).
    fn address(&self) -> Option<TransportAddress> {
        Some(TransportAddress::Dpdk { mac: self.inner.mac, udp_port: ETHERTYPE })
    }

    fn listen(&mut self, _addr: SocketAddr) -> Result<(ListenerId, SocketAddr), TlError> {
        Err(TlError::Unsupported)
    }

    fn close_listener(&mut self, _listener: ListenerId) {}

    /// [`ConnectTarget::Session`] with a DPDK address is [`DpdkTransport::connect_peer`] to that
    /// MAC and session id; anything else is `Unsupported` (a bare address names no session).
    fn connect(&mut self, target: ConnectTarget<'_>) -> Result<LinkId, TlError> {
        match target {
            ConnectTarget::Session { address: TransportAddress::Dpdk { mac, udp_port }, session } => {
                if *udp_port != ETHERTYPE {
                    return Err(TlError::Unreachable);
                }
                self.connect_peer(DpdkPeer { mac: *mac, session })
            }
            _ => Err(TlError::Unsupported),
        }
    }

    fn link_addrs(&self, _link: LinkId) -> (Option<SocketAddr>, Option<SocketAddr>) {
        (None, None)
    }

    /// Copies the frame into the link's session (fragmenting it into MTU-sized messages) or,
    /// what the session has no room for, into the link's backlog, and answers `Done`; except a
    /// zero-copy payload of at least [`DpdkConfig::zcopy_threshold`] bytes in memory registered
    /// with DPDK, which is sent from where it is and answers `InFlight` (`SendDone` follows once
    /// the peer acknowledged all of it and the driver freed every mbuf pointing at it).
    fn send(&mut self, link: LinkId, header: &[u8], payload: Payload<'_>) -> Result<SendOutcome, TlError> {
        self.inner.send_frame(link, header, payload, false)
    }

    /// Sends `header` and `payload` as a placed frame: its first message (PLACED) carries the
    /// lengths and the whole header, so the receiver learns where the payload goes before any of
    /// it arrives ([`TlEvent::Placed`]) and writes every fragment straight from the received mbuf
    /// there. A payload that qualifies for zero-copy leaves zero-copy, as with `send`. A header
    /// too long for one message goes as an ordinary frame; one above 256 bytes, or a payload
    /// above [`Caps::max_placed`], is `InvalidParam`.
    fn send_placed(
        &mut self,
        link: LinkId,
        header: &[u8],
        payload: Payload<'_>,
    ) -> Result<SendOutcome, TlError> {
        if header.len() > MAX_PLACED_HEADER || payload.len() > self.caps.max_placed {
            return Err(TlError::InvalidParam);
        }
        // The kind byte, the lengths and the whole header must fit the first message.
        if 1 + PLACED_PREFIX_LEN + header.len() > self.inner.scratch.len() {
            return self.inner.send_frame(link, header, payload, false);
        }
        let prefix = placed_prefix(header.len(), payload.len()).ok_or(TlError::InvalidParam)?;
        let mut head = [0u8; PLACED_PREFIX_LEN + MAX_PLACED_HEADER];
        head[..PLACED_PREFIX_LEN].copy_from_slice(&prefix);
        head[PLACED_PREFIX_LEN..PLACED_PREFIX_LEN + header.len()].copy_from_slice(header);
        let outcome =
            self.inner.send_frame(link, &head[..PLACED_PREFIX_LEN + header.len()], payload, true)?;
        self.inner.stats.placed_sent += 1;
        Ok(outcome)
    }

    /// Graceful: queued frames go first, then a BYE (the peer reports `ConnectionReset`), and
    /// the link goes once the peer acknowledged everything (or stopped answering). Forced: at
    /// once, the peer is not told.
    fn close(&mut self, link: LinkId, force: bool) {
        self.inner.close(link, force);
    }

    fn has_pending_sends(&self, link: LinkId) -> bool {
        let Some(l) = self.inner.link(link) else { return false };
        !l.backlog_frames.is_empty() || self.inner.demux.get(l.session).is_some_and(|s| s.unacked() > 0)
    }

    fn poll(&mut self, sink: &mut dyn FnMut(TlEvent<'_>)) -> usize {
        let DpdkTransport { inner, port, .. } = self;
        let now = inner.now();
        let mut events = 0;
        if !inner.place_ends.is_empty() {
            inner.report_place_ends(sink, &mut events);
        }
        for _ in 0..4 {
            let received = port.rx_burst(|port, bytes, left| {
                inner.on_frame(now, bytes, sink, &mut events);
                let session = inner.last_session.take();
                // Only when the rest of the burst is long to read (jumbo frames): for small ones
                // the ack at the end of the poll comes soon enough, and neither a transmit per
                // few frames nor a look at the session per frame would pay for itself.
                if let Some(session) = session.filter(|_| left * bytes.len() >= super::port::TX_FLUSH_BYTES) {
                    inner.ack_at_once(session, now, port);
                }
            });
            if received < super::port::BURST {
                break;
            }
        }
        inner.timeouts(now, sink, &mut events);
        inner.transmit(now, port);
        if !inner.zc.active.is_empty() {
            inner.complete_zc(sink, &mut events);
        }
        events
    }

    /// `None`: DPDK ports are polled, there is nothing to sleep on.
    fn event_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    /// Always true while a link exists: whether frames wait in the port is only known by
    /// polling it, so a worker must not sleep on this transport.
    fn has_events(&self) -> bool {
        !self.inner.place_ends.is_empty() || !self.inner.links.is_empty()
    }
}

/// What a DPDK transport of `config` can do: frames over Ethernet, made reliable and ordered by
/// its sessions; no native one-sided operation (the NIC is not driven for RDMA), so large payloads
/// are pushed by the sender.
fn dpdk_caps(config: &DpdkConfig, zcopy_threshold: usize) -> Caps {
    Caps {
        name: "dpdk",
        reliable: true,
        ordered: true,
        rma: RmaCaps::NONE,
        large_payload: LargePayload::SenderPush,
        max_frame: config.max_frame,
        zcopy_threshold,
        max_placed: max_placed(config),
        latency_ns: 5_000,
        bandwidth: 1_250_000_000,
    }
}

#[cfg(test)]
mod tests {
    //! The receive path of placed frames, sans-IO: an [`Inner`] without a port takes Ethernet
    //! frames built by a peer [`Session`], as `poll` would hand them over.

    use super::super::message::{fragment_kind, PLACED_PREFIX_LEN};
    use super::*;
    use crate::transport::PlaceTarget;

    /// No native put, get or atomic, and sender push: the protocol layer emulates RMA here.
    #[test]
    fn caps_claim_no_one_sided_operation_and_sender_push() {
        let caps = dpdk_caps(&DpdkConfig::default(), 1 << 16);
        assert_eq!(caps.name, "dpdk");
        assert_eq!(caps.rma, RmaCaps::NONE);
        assert!(!caps.rma.put && !caps.rma.get && caps.rma.max_rma == 0);
        assert!(caps.rma.atomics(4).is_empty() && caps.rma.atomics(8).is_empty());
        assert_eq!(caps.large_payload, LargePayload::SenderPush);
    }

    const US: Mac = [2, 0, 0, 0, 0, 1];
    const PEER: Mac = [2, 0, 0, 0, 0, 2];
    /// The session id the peer names for our end (an acceptor's), and its own.
    const OURS: u32 = 7;
    const THEIRS: u32 = INITIATOR_BIT | 3;

    /// What the tests saw, owned.
    #[derive(Debug, PartialEq, Eq)]
    enum Seen {
        Accepted(LinkId),
        Frame(Vec<u8>),
        Placed(Vec<u8>, usize),
        PlaceDone(u64, Result<(), TlError>),
        Failed(TlError),
    }

    fn inner() -> Inner {
        let config = DpdkConfig { max_frame: 64 << 10, ..DpdkConfig::default() };
        let session_config = config.session_config();
        Inner {
            mac: US,
            epoch: Instant::now(),
            demux: Demux::new(),
            links: LinkTable::new(),
            by_session: FastMap::default(),
            lingering: Vec::new(),
            next_initiator_id: 0,
            rng: Rng(1),
            scratch: vec![0; session_config.max_payload],
            stats: DpdkStats::default(),
            zc: ZcTable::default(),
            zcopy_threshold: usize::MAX,
            port_id: 0,
            device: 0,
            place_ends: Vec::new(),
            last_session: None,
            session_config,
            config,
        }
    }

    /// The peer: a session towards `OURS`, which sends messages and takes our acks.
    struct Peer {
        session: Session,
    }

    impl Peer {
        fn new(inner: &Inner) -> Peer {
            let mut session = Session::new(inner.session_config.clone(), THEIRS, OURS).unwrap();
            session.send(&HELLO_MSG).unwrap();
            Peer { session }
        }

        /// Moves everything the peer has to send into `inner` (and our acks back) until both
        /// are quiet; for every `Placed`, `dest` says where the payload goes.
        fn pump(
            &mut self,
            inner: &mut Inner,
            dest: &mut dyn FnMut(usize) -> Option<PlaceTarget>,
        ) -> Vec<Seen> {
            let mut seen = Vec::new();
            let now = inner.now();
            let mut buf = vec![0u8; ETH_HEADER_LEN + inner.config.mtu];
            for _ in 0..10_000 {
                let mut moved = false;
                while let Some(len) = self.session.poll_transmit(now, &mut buf[ETH_HEADER_LEN..]) {
                    write_header(&mut buf, &US, &PEER);
                    let mut events = 0;
                    inner.on_frame(
                        now,
                        &buf[..ETH_HEADER_LEN + len],
                        &mut |event| match event {
                            TlEvent::Accepted { link, .. } => seen.push(Seen::Accepted(link)),
                            TlEvent::Frame { bytes, .. } => seen.push(Seen::Frame(bytes.to_vec())),
                            TlEvent::Placed { header, len, dest: slot, .. } => {
                                seen.push(Seen::Placed(header.to_vec(), len));
                                if let Some(target) = dest(len) {
                                    slot.set(target);
                                }
                            }
                            TlEvent::PlaceDone { token, result, .. } => {
                                seen.push(Seen::PlaceDone(token, result))
                            }
                            TlEvent::LinkFailed { error, .. } => seen.push(Seen::Failed(error)),
                            other => panic!("unexpected {other:?}"),
                        },
                        &mut events,
                    );
                    moved = true;
                }
                if let Some(ours) = inner.demux.get_mut(OURS) {
                    while let Some(len) = ours.poll_transmit(now, &mut buf) {
                        let _ = self.session.on_datagram(now, &buf[..len]);
                        moved = true;
                    }
                }
                if !moved {
                    return seen;
                }
            }
            panic!("the exchange never settled");
        }

        /// Queues the messages of a placed frame as a truthful sender cuts it.
        fn send_placed(&mut self, header: &[u8], payload: &[u8]) {
            let mut head = placed_prefix(header.len(), payload.len()).unwrap().to_vec();
            head.extend_from_slice(header);
            self.send_cut(&head, payload, true);
        }

        fn send_cut(&mut self, head: &[u8], payload: &[u8], placed: bool) {
            let mut out = vec![0u8; self.session.config().max_payload];
            let (mut offset, total) = (0, head.len() + payload.len());
            loop {
                let (len, n) = write_fragment(&mut out, head, payload, offset, total - offset);
                if placed && offset == 0 {
                    mark_placed(&mut out);
                }
                self.session.send(&out[..len]).unwrap();
                offset += n;
                if offset == total {
                    return;
                }
            }
        }
    }

    /// The kind byte of a placed frame's first message.
    fn placed_kind() -> u8 {
        first_or_fragment_kind(true, false)
    }

    fn payload(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 + 7) as u8).collect()
    }

    /// `len` bytes of `buf` from `GUARD` on, for a `PlaceTarget`.
    const GUARD: usize = 64;

    fn target(buf: &mut [u8], token: u64) -> PlaceTarget {
        // SAFETY: the tests keep `buf` alive and untouched until the placement ends, and give it
        // `GUARD` bytes of room on either side of any announced length.
        unsafe { PlaceTarget::new(buf.as_mut_ptr().add(GUARD), token) }
    }

    #[test]
    fn a_stale_link_id_neither_closes_nor_sends_on_the_link_that_reused_its_slot() {
        let mut inner = inner();
        let old = inner.connect(DpdkPeer { mac: PEER, session: 1 }).unwrap();
        inner.close(old, true);
        let new = inner.connect(DpdkPeer { mac: PEER, session: 2 }).unwrap();
        // What an api still holding the old id may do: close it again, send on it.
        inner.close(old, true);
        assert!(inner.link(new).is_some(), "a stale id closed the link that reused its slot");
        assert_eq!(inner.send_frame(old, b"stale", Payload::None, false), Err(TlError::InvalidParam));
        assert_ne!(new, old, "a new link has the id of one closed before it");
        assert_eq!(inner.send_frame(new, b"fresh", Payload::None, false), Ok(SendOutcome::Done));
        assert_eq!(inner.link(new).map(|l| l.session), Some(INITIATOR_BIT | 1), "the wire session");
    }

    #[test]
    fn placed_payloads_land_once_in_their_destination() {
        let mut inner = inner();
        let mut peer = Peer::new(&inner);
        assert_eq!(peer.pump(&mut inner, &mut |_| None), vec![Seen::Accepted(LinkId(0))]);

        let data = payload(10_000);
        let mut buf = vec![0xEEu8; GUARD + data.len() + GUARD];
        peer.send_placed(b"hdr", &data);
        peer.send_cut(&[], b"an ordinary frame after it", false);
        let raw = buf.as_mut_ptr();
        let seen = peer.pump(&mut inner, &mut |len| {
            assert_eq!(len, 10_000);
            // SAFETY: as `target`.
            Some(unsafe { PlaceTarget::new(raw.add(GUARD), 42) })
        });
        assert_eq!(
            seen,
            vec![
                Seen::Placed(b"hdr".to_vec(), 10_000),
                Seen::PlaceDone(42, Ok(())),
                Seen::Frame(b"an ordinary frame after it".to_vec()),
            ]
        );
        assert!(buf[GUARD..GUARD + data.len()] == data[..]);
        assert!(buf[..GUARD].iter().chain(&buf[GUARD + data.len()..]).all(|&b| b == 0xEE));
        let stats = inner.stats;
        assert_eq!((stats.placed_frames, stats.placed_bytes, stats.placed_violations), (1, 10_000, 0));
        assert!(inner.links.at(0).unwrap().reassembly.capacity() == 0, "the payload was reassembled");

        // Left without a destination the payload is dropped: no PlaceDone, nothing counted.
        peer.send_placed(b"h2", &payload(3000));
        peer.send_placed(b"small", &[1, 2, 3]);
        let seen = peer.pump(&mut inner, &mut |_| None);
        assert_eq!(seen, vec![Seen::Placed(b"h2".to_vec(), 3000), Seen::Placed(b"small".to_vec(), 3)]);
        assert_eq!(inner.stats.placed_frames, 1);
    }

    #[test]
    fn a_peer_lying_about_lengths_fails_the_link_and_writes_nothing_outside() {
        let mut inner = inner();
        let mut peer = Peer::new(&inner);
        peer.pump(&mut inner, &mut |_| None);
        // Announces 100 bytes, then sends 2000 of them.
        let mut head = placed_prefix(1, 100).unwrap().to_vec();
        head.push(b'h');
        let mut first = vec![placed_kind()];
        first.extend_from_slice(&head);
        first.extend_from_slice(&[9; 50]);
        peer.session.send(&first).unwrap();
        let mut more = vec![fragment_kind(false)];
        more.extend_from_slice(&[8; 1400]);
        peer.session.send(&more).unwrap();
        let mut buf = vec![0xEEu8; GUARD + 100 + GUARD];
        let raw = buf.as_mut_ptr();
        // SAFETY: as `target`.
        let seen = peer.pump(&mut inner, &mut |_| Some(unsafe { PlaceTarget::new(raw.add(GUARD), 5) }));
        assert_eq!(
            seen,
            vec![
                Seen::Placed(b"h".to_vec(), 100),
                Seen::PlaceDone(5, Err(TlError::ConnectionReset)),
                Seen::Failed(TlError::ConnectionReset),
            ]
        );
        assert!(buf[GUARD..GUARD + 50].iter().all(|&b| b == 9), "the truthful part landed");
        assert!(buf[GUARD + 50..].iter().all(|&b| b == 0xEE), "written past what was accepted");
        assert!(buf[..GUARD].iter().all(|&b| b == 0xEE));
        assert_eq!((inner.stats.placed_violations, inner.stats.bad_messages), (1, 1));
        assert_eq!(inner.stats.placed_frames, 0);
    }

    #[test]
    fn a_placement_announcing_too_much_or_nested_fails_the_link() {
        for case in 0..2 {
            let mut inner = inner();
            let mut peer = Peer::new(&inner);
            peer.pump(&mut inner, &mut |_| None);
            if case == 0 {
                let mut first = vec![placed_kind()];
                first.extend_from_slice(&placed_prefix(0, max_placed(&inner.config) + 1).unwrap());
                peer.session.send(&first).unwrap();
            } else {
                // A PLACED message in the middle of an ordinary frame.
                peer.session.send(&[fragment_kind(false), 1, 2, 3]).unwrap();
                let mut first = vec![placed_kind()];
                first.extend_from_slice(&placed_prefix(0, 10).unwrap());
                peer.session.send(&first).unwrap();
            }
            let seen = peer.pump(&mut inner, &mut |_| panic!("no Placed may be reported"));
            assert_eq!(seen, vec![Seen::Failed(TlError::ConnectionReset)], "case {case}");
            assert_eq!(inner.stats.placed_violations, 1);
        }
    }

    #[test]
    fn a_link_failing_mid_placement_ends_it_with_the_error() {
        let mut inner = inner();
        let mut peer = Peer::new(&inner);
        peer.pump(&mut inner, &mut |_| None);
        let mut head = placed_prefix(2, 5000).unwrap().to_vec();
        head.extend_from_slice(b"hh");
        peer.send_cut(&head, &payload(2000), true); // ends early: its END comes at 2000 bytes
        let mut buf = vec![0xEEu8; GUARD + 5000 + GUARD];
        let raw = buf.as_mut_ptr();
        // SAFETY: as `target`.
        let seen = peer.pump(&mut inner, &mut |_| Some(unsafe { PlaceTarget::new(raw.add(GUARD), 8) }));
        assert_eq!(seen[0], Seen::Placed(b"hh".to_vec(), 5000));
        assert_eq!(
            seen[1..],
            [Seen::PlaceDone(8, Err(TlError::ConnectionReset)), Seen::Failed(TlError::ConnectionReset)]
        );

        // The peer closes (BYE) while a truthful placement is half done.
        let mut inner2 = self::inner();
        let mut peer = Peer::new(&inner2);
        peer.pump(&mut inner2, &mut |_| None);
        let mut head = placed_prefix(0, 5000).unwrap().to_vec();
        head.truncate(PLACED_PREFIX_LEN);
        let mut first = vec![placed_kind()];
        first.extend_from_slice(&head);
        first.extend_from_slice(&[4; 1000]);
        peer.session.send(&first).unwrap();
        peer.session.send(&BYE_MSG).unwrap();
        let mut buf2 = vec![0xEEu8; GUARD + 5000 + GUARD];
        let seen = peer.pump(&mut inner2, &mut |_| Some(target(&mut buf2, 9)));
        assert_eq!(
            seen,
            vec![
                Seen::Placed(vec![], 5000),
                Seen::PlaceDone(9, Err(TlError::ConnectionReset)),
                Seen::Failed(TlError::ConnectionReset),
            ]
        );
        assert!(buf2[GUARD..GUARD + 1000].iter().all(|&b| b == 4));
        assert!(buf2[GUARD + 1000..].iter().all(|&b| b == 0xEE));
        drop(buf);
    }

    #[test]
    fn a_link_closed_here_mid_placement_ends_it_canceled_and_writes_no_more() {
        let mut inner = inner();
        let mut peer = Peer::new(&inner);
        peer.pump(&mut inner, &mut |_| None);
        let data = payload(6000);
        let mut head = placed_prefix(1, data.len()).unwrap().to_vec();
        head.push(b'c');
        let mut buf = vec![0xEEu8; GUARD + data.len() + GUARD];
        let raw = buf.as_mut_ptr();
        // Only the PLACED message and one fragment arrive before the close.
        let mut out = vec![0u8; inner.session_config.max_payload];
        let (mut offset, total) = (0, head.len() + data.len());
        let mut cut = Vec::new();
        while offset < total {
            let (len, n) = write_fragment(&mut out, &head, &data, offset, total - offset);
            if offset == 0 {
                mark_placed(&mut out);
            }
            cut.push(out[..len].to_vec());
            offset += n;
        }
        for message in &cut[..2] {
            peer.session.send(message).unwrap();
        }
        // SAFETY: as `target`.
        let seen = peer.pump(&mut inner, &mut |_| Some(unsafe { PlaceTarget::new(raw.add(GUARD), 11) }));
        assert_eq!(seen, vec![Seen::Placed(b"c".to_vec(), 6000)]);
        let landed = GUARD + (cut[0].len() - 1 - PLACED_PREFIX_LEN - 1) + (cut[1].len() - 1);

        // What `close` does to the placement; the link is then Closing (graceful close).
        inner.end_placement_on_close(LinkId(0));
        inner.links.at_mut(0).unwrap().state = State::Closing { bye_queued: false };
        let mut reported = Vec::new();
        let mut events = 0;
        inner.report_place_ends(&mut |event| reported.push(format!("{event:?}")), &mut events);
        assert_eq!(
            reported,
            vec![format!(
                "{:?}",
                TlEvent::PlaceDone { link: LinkId(0), token: 11, result: Err(TlError::Canceled) }
            )]
        );
        for message in &cut[2..] {
            peer.session.send(message).unwrap();
        }
        assert_eq!(peer.pump(&mut inner, &mut |_| panic!("no Placed after the close")), vec![]);
        assert!(buf[GUARD..landed] == data[..landed - GUARD]);
        assert!(buf[landed..].iter().all(|&b| b == 0xEE), "written after the close");
        assert!(inner.place_ends.is_empty());
    }
}
