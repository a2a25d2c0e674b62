//! The RDMA verbs transport's building blocks, over libibverbs (`zcx-verbs-sys`): for now the
//! devices, their ports and GIDs, as `zcx info` lists them and the transport will choose them.
//!
//! Feature `verbs`. Built without libibverbs, [`verbs_missing`] says why and nothing here calls
//! into it. On this machine no device exists; Soft-RoCE runs in the QEMU guest
//! (`scripts/vm/verbs-test.sh`).

pub mod device;

pub use device::{devices, DeviceInfo, GidInfo, GidKind, PortInfo};

/// Why libibverbs is not linked (the crate was built without it), or `None` when it is.
pub fn verbs_missing() -> Option<&'static str> {
    zcx_verbs_sys::VERBS_MISSING
}
