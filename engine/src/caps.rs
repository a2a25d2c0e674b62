//! What the engine needs to know about a link to pick its protocols.
//!
//! The API fills one [`LinkCaps`] per link from the transport's capabilities; the engine reads
//! nothing else about transports.

/// How a payload above the rendezvous threshold crosses the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BulkMode {
    /// The sender announces it (RTS), the receiver answers when it has a buffer (RTR), and the
    /// sender pushes it in fragments (TCP, DPDK, shared memory).
    SenderPush,
    /// The sender announces it with its address and packed key, the receiver reads it with a
    /// native RMA get and says when it is done (verbs' RDMA READ). Needs `native_get`, and a
    /// send buffer with a key; otherwise the engine falls back to [`BulkMode::SenderPush`].
    ReceiverPull,
}

/// The protocol-relevant capabilities of one link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkCaps {
    /// Largest frame (header and payload) the link carries.
    pub max_frame: usize,
    /// Messages of this many bytes or more go by rendezvous.
    pub rndv_threshold: usize,
    /// The transport executes puts itself (an [`crate::RmaRequest`] instead of `Put` frames).
    pub native_put: bool,
    /// The transport executes gets itself.
    pub native_get: bool,
    /// The transport executes 4- and 8-byte atomics itself.
    pub native_atomics: bool,
    /// How large payloads cross.
    pub bulk: BulkMode,
    /// The transport can place a data fragment's payload straight into the receiver's buffer
    /// ([`crate::Transmit::placed`]); the receiver's side then calls
    /// [`crate::Engine::handle_placed`].
    pub placed: bool,
    /// Largest payload of a placed fragment, when the transport places larger payloads than
    /// it frames (0: `max_payload`).
    pub max_placed: usize,
    /// Stream fragments are placed too (`placed` must hold): straight into the stream receive
    /// they belong to when it is waiting, or else into a buffer of the receiver's. Worth it where
    /// an unplaced frame is copied out of the transport's receive buffers (a socket). Not where a
    /// placement is the receiver reading the sender's memory (same host): a sender ahead of its
    /// receiver's receives then has every fragment read into fresh receiver buffers, unbounded
    /// by the ring an unplaced frame waits in, at a fraction of the ring's speed.
    pub place_streams: bool,
    /// The transport itself reports a peer that stopped answering (a verbs queue pair fails
    /// once its retries of an unacknowledged request run out). The endpoint still sends
    /// keepalives when idle, so a dead peer is found, but never times out on silence alone:
    /// the peer may be busy serving this side's RDMA, which carries no frame.
    pub peer_watched: bool,
}

impl LinkCaps {
    /// Largest payload of one frame.
    pub fn max_payload(&self) -> usize {
        self.max_frame.saturating_sub(zcx_dataplane::proto::MAX_HEADER_LEN).max(1)
    }

    /// Largest payload of one data fragment, placed (`placed`) or not.
    pub fn fragment_payload(&self, placed: bool) -> usize {
        if placed && self.max_placed > 0 {
            self.max_placed
        } else {
            self.max_payload()
        }
    }
}
