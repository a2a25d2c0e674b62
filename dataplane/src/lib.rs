//! zcx dataplane: the machinery below the public API that moves bytes.
//!
//! - The transport interface: the core [`Transport`] trait with its [`Caps`] and native one-sided
//!   operations ([`transport`], [`rma`]), the optional same-host shared-memory fast paths
//!   ([`SameHostFastPath`], [`same_host`]: lending ([`lend`]), rung frames, doorbells
//!   ([`doorbell`]), send lanes, put help), and a worker's transports driven as one
//!   ([`TransportSet`]).
//! - The transports: [`shm`] (rings in a memfd segment between processes of one host), [`uring`]
//!   (TCP sockets driven by io_uring, with its feature probe [`uring_probe`]) and, with the `dpdk`
//!   feature, `dpdk` (raw Ethernet on a DPDK port, made reliable by `proto::reliable`).
//! - The sans-IO protocol pieces ([`proto`]): frame headers, tag matching, RMA execution at the
//!   target, datagram reliability.
//! - Pieces every transport shares: generational link ids ([`link_table`]) and placed receives
//!   ([`placed_receive`]).
//! - What the api's memory and remote access use: the memory domains a region registers with
//!   ([`domain`]; the same-host one is `shm::domain`, DPDK's `dpdk::domain`), the remote-access
//!   table that checks every incoming access ([`access`]), the registration cache ([`rcache`]),
//!   message-sized copies ([`copy`]), and the worker's wakeup eventfd ([`wakeup`]).
//!
//! Nothing in this crate knows the public `zcx` types.

#![warn(missing_docs)]

pub mod access;
pub mod active_set;
pub mod byte_range;
pub mod copy;
pub mod domain;
pub mod doorbell;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod fast_map;
pub mod lend;
pub mod link_table;
pub mod log_limit;
mod os_error;
pub mod placed_receive;
pub mod proto;
pub mod rcache;
pub mod rma;
pub mod same_host;
pub mod shm;
pub mod transport;
pub mod transport_set;
pub mod uring;
pub mod uring_probe;
#[cfg(feature = "verbs")]
pub mod verbs;
pub mod wakeup;

pub use access::{AccessError, RegionEntry, RemoteAccess, RemoteAccessTable};
pub use domain::{Backing, DomainError, DomainId, DomainRegistration, Memfd, MemoryDomain, RegionToRegister};
pub use fast_map::{FastMap, FastSet};
pub use lend::LendSlot;
pub use link_table::LinkTable;
pub use log_limit::LogLimit;
pub use rcache::{RcacheStats, RegistrationCache};
pub use same_host::SameHostFastPath;
pub use shm::{ShmConfig, ShmTransport};
pub use transport::{
    AtomicOps, Caps, ConnectTarget, LargePayload, LinkId, ListenerId, LocalMem, Payload, PlaceTarget,
    Placement, RemoteMem, RmaCaps, RmaOp, RmaOutcome, SendOutcome, TlError, TlEvent, Transport, ZcopyPayload,
    MAX_HANDSHAKE_FRAME,
};
pub use transport_set::{SetMember, TransportSet};
pub use uring::{UringConfig, UringTransport};
pub use uring_probe::{probe_uring, UringSupport};
pub use wakeup::Wakeup;
