//! Raw FFI bindings to Debian's libibverbs (rdma-core 44) for zcx's verbs transport, plus a small
//! C shim for the calls the header only ships as `static inline` functions or macros.
//!
//! # What is here
//!
//! - [`bindings`] (re-exported at the crate root): generated once by bindgen from
//!   `<infiniband/verbs.h>` and committed (`src/bindings.rs`); `regen.sh` regenerates it. Only what
//!   zcx uses is allow-listed: devices, ports, GIDs and device attributes; protection domains and
//!   memory regions; completion queues and their channels; shared receive queues; queue pairs;
//!   address handles; the fork status and the status strings. The build never runs bindgen.
//! - The shim (`shim/shim.c`, declared in `shim/shim.h` and bound in the same generated file): one
//!   `zcx_ibv_*` function per inline call or macro: posting sends and receives
//!   ([`zcx_ibv_post_send`], [`zcx_ibv_post_recv`], [`zcx_ibv_post_srq_recv`]), polling and arming
//!   a completion queue ([`zcx_ibv_poll_cq`], [`zcx_ibv_req_notify_cq`]), [`zcx_ibv_reg_mr`],
//!   [`zcx_ibv_query_port`] and [`zcx_ibv_query_gid_ex`]; and [`zcx_ibv_layout`], the C compiler's
//!   sizes and offsets of the bound structs, which `tests/layout.rs` compares with the bindings.
//! - [`VERBS_MISSING`]: why the crate was built without libibverbs, if it was.
//!
//! The posting and polling calls go through the device's ops table in the C header; the shim
//! adds one call to each. That is the price of not copying the header's inline code into Rust.
//!
//! # System packages
//!
//! Debian 12: `apt-get install libibverbs-dev ibverbs-providers rdma-core pkg-config`
//! (`scripts/test.sh` does it as root). Regenerating the bindings also needs `libclang-dev`.
//!
//! Without libibverbs found by pkg-config the crate still builds, with the cfg
//! `zcx_verbs_missing` set and [`VERBS_MISSING`] saying why: nothing may then call into
//! libibverbs (it would not link), and the tests print `skipped: <reason>`. `ZCX_REQUIRE_VERBS=1`
//! turns a missing libibverbs into a build error.
//!
//! # Devices
//!
//! This machine's kernel has no RDMA device; Soft-RoCE (`rdma_rxe`) runs in the QEMU guest of
//! `scripts/vm/run.sh`. With no device, [`ibv_get_device_list`] returns an empty list (or NULL with
//! `errno` set when the kernel has no verbs support at all).
//!
//! # Licence
//!
//! The generated bindings derive from rdma-core's header, which is available under the OpenIB.org
//! BSD licence or the GNU GPL version 2; its notice is in `LICENSE-rdma-core`.

/// Bindgen's output for the libibverbs header and the zcx shim; see the crate documentation.
// Generated code is not edited by hand (regen.sh would overwrite it), so its unsafe blocks (bindgen's
// bitfield accessors) cannot carry SAFETY comments; `clippy::all` does not cover this restriction lint.
#[allow(
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc,
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    clippy::all,
    clippy::pedantic,
    rustdoc::all
)]
pub mod bindings;

pub use bindings::*;

/// Why the crate was built without libibverbs (no pkg-config `libibverbs` of rdma-core 44 was
/// found, or the shim did not compile), or `None` when libibverbs is linked and may be called.
pub const VERBS_MISSING: Option<&str> =
    if cfg!(zcx_verbs_missing) { Some(env!("ZCX_VERBS_MISSING")) } else { None };
