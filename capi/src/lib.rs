//! `libucp.so.0`: UCX's UCP C API (1.13, `ucp.h`) over zcx, so an unmodified UCX program runs on
//! zcx when this library's directory comes first on `LD_LIBRARY_PATH`.
//!
//! The C types are generated once from the installed `ucp.h` (`regen.sh`, [`bindings`]); a test
//! compiles a C probe against the same header and compares every size and offset this library
//! reads. Functions are defined here, one module per UCP area, each with UCX's documented
//! semantics; what zcx cannot do returns `UCS_ERR_UNSUPPORTED`.

#[allow(non_camel_case_types, non_upper_case_globals, non_snake_case, dead_code, missing_docs)]
#[allow(clippy::all, clippy::pedantic, clippy::undocumented_unsafe_blocks)]
pub mod bindings;

pub mod am;
pub mod config;
pub mod context;
pub mod dt;
pub mod endpoint;
pub mod logging;
pub mod mem;
pub mod request;
pub mod request_api;
pub mod rma;
pub mod status;
pub mod stream;
pub mod tag;
pub mod version;
pub mod worker;
