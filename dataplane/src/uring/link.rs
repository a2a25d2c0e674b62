//! One TCP connection of the io_uring transport and the bookkeeping of its requests.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::framing::{FrameReader, RxBuf};
use super::send_queue::SendQueue;
use super::socket::RawAddr;
use crate::placed_receive::PlaceTracker;
use crate::transport::TlError;

/// Where a link is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// The connect request is out.
    Connecting,
    /// Connected: frames flow.
    Open,
    /// Shut down; waiting for the kernel to finish every request before the fd is closed.
    Dead,
}

/// A link's socket, its queues and the requests it has in the ring.
pub struct Link {
    /// The socket.
    pub fd: OwnedFd,
    /// Life stage.
    pub state: LinkState,
    /// `Some(force)` once the user closed it: no `LinkFailed` follows.
    pub local_close: Option<bool>,
    /// The first error seen, reported as `LinkFailed` when the link is reaped.
    pub error: Option<TlError>,
    /// Zero-copy sends are still worth it (the kernel did not report copying).
    pub zc_enabled: bool,
    /// A connect request is out.
    pub connect_inflight: bool,
    /// A receive request (multishot or single) is out.
    pub recv_armed: bool,
    /// A cancel request is out.
    pub cancel_inflight: bool,
    /// Listed in the transport's to-flush list.
    pub dirty: bool,
    /// Frame reassembly.
    pub reader: FrameReader,
    /// The payload of a placed frame being received.
    pub placing: PlaceTracker,
    /// The receive out is a single-shot one straight into the placement's destination.
    pub recv_direct: bool,
    /// Placed payloads are flowing: receives into `rx` read only a little more than the frame in
    /// progress needs, so that the payload of a placed frame behind it is not pulled through
    /// `rx` too, and the link stays in bulk mode across short gaps between placements.
    pub placed_mode: bool,
    /// Consecutive short bulk-mode receives that ended at a frame boundary.
    pub quiet_reads: u32,
    /// Outgoing queue.
    pub tx: Box<SendQueue>,
    /// The connect target, kept at a stable address while the request is out.
    pub remote: Box<RawAddr>,
    /// The link's own receive buffer, for single-shot receives: when provided buffers are
    /// unavailable, and in bulk mode.
    pub rx: RxBuf,
    /// Bulk mode: large frames are flowing, so receive single-shot straight into `rx` instead of
    /// into provided buffers that would have to be reassembled by copying.
    pub bulk: bool,
    /// The poll round (`UringTransport::polls`) of the last small frame sent directly.
    pub direct_round: u64,
    /// Switch to bulk mode once the multishot receive has ended (a cancel is out for it).
    pub want_bulk: bool,
    /// Spin mode: no receive request is in the ring; each poll receives with a non-blocking
    /// `recv(2)` into `rx` (see `UringTransport::spin_recv`).
    pub spin: bool,
    /// Switch to spin mode once the multishot receive has ended (a cancel is out for it).
    pub want_spin: bool,
    /// Consecutive spin-mode receives that found nothing.
    pub spin_idle: u32,
    /// Cached addresses.
    pub local_addr: Option<SocketAddr>,
    /// Cached peer address.
    pub peer_addr: Option<SocketAddr>,
}

impl Link {
    /// A link around `fd`.
    pub fn new(fd: OwnedFd, state: LinkState, max_frame: usize, remote: RawAddr) -> Link {
        Link {
            fd,
            state,
            local_close: None,
            error: None,
            zc_enabled: true,
            connect_inflight: false,
            recv_armed: false,
            spin: false,
            want_spin: false,
            spin_idle: 0,
            cancel_inflight: false,
            dirty: false,
            reader: FrameReader::new(max_frame),
            placing: PlaceTracker::default(),
            recv_direct: false,
            placed_mode: false,
            quiet_reads: 0,
            tx: SendQueue::new(),
            remote: Box::new(remote),
            rx: RxBuf::default(),
            bulk: false,
            want_bulk: false,
            direct_round: u64::MAX,
            local_addr: None,
            peer_addr: None,
        }
    }

    /// The raw socket.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// True when no request of this link is left in the ring.
    pub fn quiescent(&self) -> bool {
        !self.connect_inflight
            && !self.recv_armed
            && !self.cancel_inflight
            && !self.tx.submitted
            && self.tx.zc_notifs == 0
    }

    /// True when the user may still send on it.
    pub fn accepts_sends(&self) -> bool {
        self.state != LinkState::Dead && self.local_close.is_none()
    }
}
