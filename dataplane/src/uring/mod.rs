//! The io_uring TCP transport (`uring`): length-prefixed frames over TCP sockets, every socket
//! operation submitted through one io_uring per transport instance.
//!
//! - [`framing`]: the wire format and its sans-IO reassembly.
//! - `buf_ring`: the provided-buffer ring multishot receives pick from.
//! - `send_queue`: a link's outgoing queue, batched into one `sendmsg` per round.
//! - `link`, `socket`: connection bookkeeping and the socket calls made outside the ring.
//! - `sq_full`: what happens to a request that finds the submission queue full.
//! - [`UringTransport`]: the [`crate::Transport`] implementation.

mod buf_ring;
pub mod framing;
mod link;
mod send_queue;
mod socket;
mod sq_full;
mod transport;

pub use transport::{UringConfig, UringTransport, MAX_FRAME, MAX_QUEUED_BYTES};
