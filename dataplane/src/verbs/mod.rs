//! The RDMA verbs transport's building blocks, over libibverbs (`zcx-verbs-sys`): the devices,
//! their ports and GIDs, as `zcx info` lists them and the transport will choose them; a device's
//! protection domain; the memory domain that registers `mem_map` regions in it; completion
//! queues and the channel their events wake a sleeping worker through; shared receive queues;
//! and reliable-connected queue pairs with their work requests.
//!
//! Feature `verbs`. Built without libibverbs, [`verbs_missing`] says why and nothing here calls
//! into it. On this machine no device exists; Soft-RoCE runs in the QEMU guest
//! (`scripts/vm/verbs-test.sh`).

pub mod channel;
pub mod cq;
pub mod credits;
pub mod device;
pub mod domain;
pub mod mr;
pub mod pd;
pub mod qp;
pub mod region_index;
pub mod slots;
pub mod srq;
pub mod transport;

pub use channel::CompletionChannel;
pub use cq::{CompletionQueue, WorkCompletion};
pub use device::{
    choose, choose_gid, devices, fork_safety, DeviceInfo, ForkSafety, GidInfo, GidKind, PortInfo,
};
pub use domain::{VerbsDomain, VerbsRegistration};
pub use mr::MemoryRegion;
pub use pd::ProtectionDomain;
pub use qp::{Local, QpAddress, QpCaps, RcQueuePair, Remote, RetryPolicy, SendOp};
pub use srq::SharedReceiveQueue;
pub use transport::{VerbsConfig, VerbsCounters, VerbsTransport};

/// Why libibverbs is not linked (the crate was built without it), or `None` when it is.
pub fn verbs_missing() -> Option<&'static str> {
    zcx_verbs_sys::VERBS_MISSING
}
