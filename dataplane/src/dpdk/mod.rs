//! The DPDK transport (cargo feature `dpdk`): raw Ethernet frames on one DPDK port, made
//! reliable and ordered by the sans-IO reliability protocol ([`crate::proto::reliable`]).
//!
//! - [`port`]: the ethdev port with its mbuf pool and rx/tx burst wrappers that own the mbufs,
//! - [`frame`]: the Ethernet framing (EtherType 0x88B5, MACs, then one reliability datagram),
//! - [`message`]: the transport's one-byte message header (HELLO, fragment, last fragment, BYE,
//!   first fragment of a placed frame), the fragmentation of frames into MTU-sized messages and
//!   the receive-side placement of payloads,
//! - [`transport`]: [`DpdkTransport`], the [`Transport`](crate::Transport) implementation,
//! - [`extmem`]: zcx memory registered with DPDK as external memory, for zero-copy sends.
//!
//! # Design
//!
//! **Links are sessions.** Each link is one reliability [`Session`](crate::proto::reliable::Session)
//! to one peer (its MAC and its session id); one [`Demux`](crate::proto::reliable::Demux) routes
//! every received datagram. Frames of another EtherType or for another MAC, frames whose source
//! MAC is not the link's peer, and datagrams for unknown sessions are dropped and counted
//! ([`DpdkStats`], [`DpdkTransport::demux_drops`]), never delivered.
//!
//! **Connection setup is in-band.** DPDK has no handshake, so [`DpdkTransport::connect_peer`]
//! names the peer's MAC and the session id the peer's end will have ([`DpdkPeer`]; ids below
//! [`INITIATOR_BIT`], picked by the caller's control plane), picks its own id (initiator bit
//! set), and queues a HELLO as the session's first message. A port that receives a HELLO (DATA,
//! sequence 0) for a free session id creates that session, and reports `Accepted` when the HELLO
//! is delivered (listener id 0, peer address unspecified: there is no socket address). The
//! initiator reports `Connected` when the HELLO is acknowledged. Frames may be sent at once; a
//! lost HELLO is retransmitted like any message, and a peer that never answers fails the link
//! with `Timeout`. `address()` is `TransportAddress::Dpdk { mac, udp_port }` with the EtherType
//! in the `udp_port` slot (the wire format is unchanged); the session id is agreed by the
//! caller's control plane per link, and `connect(ConnectTarget::Session { address, session })`
//! is `connect_peer` (a bare `ConnectTarget::Address` is `Unsupported`).
//!
//! **Fragmentation.** A frame up to [`DpdkConfig::max_frame`] is cut into messages of at most the
//! session's `max_payload` (MTU − 40) bytes, each with a one-byte MORE/END header; in-order
//! delivery makes reassembly an append, and a single-message frame is lent straight from the
//! mbuf. What the session's send ring cannot take yet waits in the link's backlog (bounded by
//! [`DpdkConfig::max_backlog`]; `NoResource` beyond it).
//!
//! **Caps.** Reliable and ordered (the protocol's doing), RMA and atomics emulated (`rma` and
//! `amo` false), placement of payloads up to `max_frame` less 262 bytes (`max_placed`; below),
//! and zero-copy from
//! [`DpdkConfig::zcopy_threshold`] on (`Caps::zcopy_threshold`; `usize::MAX` on a port whose
//! driver cannot transmit chained mbufs, `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`).
//!
//! **Zero-copy transmit.** Memory the api maps is registered with DPDK as external memory
//! ([`extmem`]: `rte_extmem_register`, and `rte_dev_dma_map` for the port's device on first
//! use). A [`Payload::Zcopy`](crate::Payload) at least the threshold long that lies in such a
//! region is not copied: each fragment is one message whose inline part (the fragment kind and
//! any frame-header bytes) sits in the session's ring and whose payload part the session only
//! describes ([`External`](crate::proto::reliable::External): address, length, CRC, the frame's
//! slot); every (re)transmission builds a header mbuf (Ethernet and reliability headers, inline
//! bytes) chained to an external-buffer mbuf pointing at the caller's bytes
//! (`rte_pktmbuf_attach_extbuf`). The frame's slot holds the external buffers' shared info,
//! whose count is one (the slot's own) plus one per mbuf the driver has not freed yet, and a
//! reference to the region. `send` answers `InFlight`; `SendDone` follows once the peer
//! acknowledged the frame's last fragment (go-back-N may need the bytes until then) and the count
//! is back to one (no mbuf points at them), or, on a failed or force-closed link, once the count
//! is back to one (a failed link's lingering session forgets its messages, so nothing is resent).
//! Only then is the region released: unmapping a handle while a send from it is in flight
//! defers DPDK's unregistration until the send completed. Anything else (below the threshold,
//! memory not registered, a device that could not map it) is copied as before, counted in
//! [`DpdkStats::zcopy_fallbacks`].
//!
//! **Placement (one copy on receive).** Received payloads land in the pool's mbufs. An ordinary
//! frame of several fragments is reassembled in the link's buffer before it is reported (a frame
//! of one fragment is lent straight from the mbuf): two copies for a large payload. A frame sent
//! with `send_placed` starts with a PLACED message carrying the header and payload lengths and
//! the whole header ([`message`]); the receiver reports `Placed` at once, and every payload byte
//! is then copied straight from its mbuf into the destination the receiver named (or dropped),
//! `PlaceDone` following the last. The session delivers messages once and in order, so
//! go-back-N retransmissions never write twice and offsets are the running count. A peer whose
//! fragments do not add up to the length it announced, or that announces more than
//! `max_placed`, fails the link (`ConnectionReset`, counted in
//! [`DpdkStats::placed_violations`]) before anything is written outside the destination; a link
//! that fails or is closed here mid-placement ends it with `PlaceDone` and the error
//! (`Canceled` for a local close) and never touches the destination again. Zero-copy transmit
//! applies to placed payloads as to any other. [`DpdkStats::placed_frames`] and
//! [`placed_counters`] (process-wide) count the payloads received this way.
//!
//! **Failure.** A session declared dead (no progress for `dead_after_rtos` retransmission
//! timeouts, [`DpdkConfig::dead_peer_timeout_ns`]) fails its link with `TlError::Timeout`
//! (`UCS_ERR_ENDPOINT_TIMEOUT`); a BYE from the peer (its graceful close) with
//! `ConnectionReset`. Liveness is only judged while data is outstanding, as in the protocol.
//!
//! **Loss injection** (tests only). [`DpdkConfig::drop_per_million`] (`ZCX_DPDK_DROP_PPM` for
//! the api's workers) drops that share of received frames, chosen by a seeded generator, before
//! anything parses them; [`injected_drops`] counts them for the whole process.
//!
//! **Time** is `Instant`-based nanoseconds since the transport was made. The port must be
//! dropped before EAL; see [`DpdkTransport::new`].

pub mod domain;
pub mod eal;
pub mod extmem;
pub mod frame;
pub mod message;
pub mod port;
pub mod transport;

pub use eal::{dpdk_missing, open_with_process_eal, ports_with_process_eal, PortInfo};
pub use zcx_dpdk_sys::{allowed_cpus, vdev_eal_args, vdev_eal_args_on};

pub use transport::{
    injected_drops, placed_counters, DpdkConfig, DpdkError, DpdkPeer, DpdkStats, DpdkTransport,
    PlacedCounters, DEFAULT_ZCOPY_THRESHOLD, INITIATOR_BIT,
};
