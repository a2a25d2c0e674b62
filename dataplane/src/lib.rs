//! zcx dataplane: the machinery below the public API that moves bytes.
//!
//! Today it holds the registration cache shared by every transport, the io_uring feature probe,
//! the worker's wakeup eventfd and the first sans-IO protocol engine (tag matching, [`proto`]);
//! the transports (shm, io_uring sockets, DPDK, verbs) and the sans-IO protocol state machines
//! (active messages, tag matching, stream, rendezvous, RMA emulation, datagram reliability) plug in
//! here behind one transport trait. Nothing in this crate knows the public `zcx` types.

#![warn(missing_docs)]

pub mod access;
pub mod copy;
pub mod doorbell;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod fast_map;
pub mod lend;
pub mod log_limit;
mod os_error;
pub mod proto;
pub mod rcache;
pub mod rma;
pub mod same_host;
pub mod shm;
pub mod transport;
pub mod transport_set;
pub mod uring;
pub mod uring_probe;
pub mod wakeup;

pub use access::{AccessError, RegionEntry, RemoteAccess, RemoteAccessTable};
pub use fast_map::{FastMap, FastSet};
pub use lend::LendSlot;
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
