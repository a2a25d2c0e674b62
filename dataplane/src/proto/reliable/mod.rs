//! Reliability for datagram links (DPDK): exactly-once, in-order delivery of messages per
//! session over a link that may lose, duplicate, reorder or corrupt datagrams.
//!
//! Sessions are set up by the control plane, which tells each end its own and its peer's session
//! id; there is no handshake here. The pieces, each sans-IO:
//!
//! - [`wire`]: the datagram header (ids, sequence number, cumulative ack, credit, checksum) as a
//!   checked view and an emitter,
//! - [`Session`]: one peer pair's sender and receiver, eRPC-style (credits, cumulative acks,
//!   go-back-N on timeout, no reorder buffer), with its [`Config`] and [`Stats`],
//! - [`Demux`]: the table that routes datagrams to sessions and drops what none may take.

mod config;
mod demux;
mod rtt;
mod send_ring;
mod session;
mod stats;
pub mod wire;

pub use config::{Config, ConfigError};
pub use demux::Demux;
pub use session::{Delivery, External, PeerDead, SendError, Session};
pub use stats::{DropReason, DropStats, Stats};
