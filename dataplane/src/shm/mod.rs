//! The shared-memory transport (`shm`): links between processes of one host over two
//! single-producer/single-consumer rings in a sealed memfd segment.
//!
//! - [`ring`]: the SPSC byte ring of variable-length records, hostile-peer safe.
//! - [`segment`]: the memfd segment holding the header and both rings.
//! - [`board`]: the page on which peers mark the receive rings they wrote to, read by a worker
//!   with many links instead of every ring.
//! - [`put_help`]: the target's worker copying part of a large put.
//! - [`conn`]: the abstract Unix socket that passes the segment (`SCM_RIGHTS`) and reports the
//!   peer's death.
//! - `peer_region`: a same-host peer's registered memfd region mapped here, and the native
//!   one-sided operations on it ([`crate::Transport::rma`]).
//! - [`ShmTransport`]: the [`crate::Transport`] implementation, with single-copy placed payloads
//!   read straight from the sender's memory (`process_vm_readv`), and the same-host fast paths
//!   ([`crate::SameHostFastPath`]).

pub mod board;
pub mod conn;
pub mod domain;
mod lane;
mod peer_region;
pub mod put_help;
pub mod ring;
pub mod segment;
mod transport;

pub use lane::ShmSendLane;
pub use transport::{namespace_tag, ShmConfig, ShmTransport};
