//! Sans-IO protocol state machines: pure data structures driven by the worker's progress loop.
//!
//! Nothing here touches a transport or a clock; the caller feeds in events (a receive was
//! posted, a message arrived) and acts on the outcome, so every rule can be tested without I/O.
//! [`wire`] encodes and decodes the frame headers workers exchange; [`rma_exec`] is the one
//! module that touches memory: it executes a peer's emulated put/get/atomic on registered regions
//! after the remote-access table accepted it. [`reliable`] makes datagram links (DPDK) deliver
//! exactly once and in order. [`peer_bytes`] is how the decoders read bytes the peer may still be
//! writing.

pub mod peer_bytes;
pub mod reliable;
pub mod rma_exec;
pub mod tag_match;
pub mod wire;

pub use tag_match::{tag_matches, Arrival, Message, MessageInfo, Posted, RecvId, TagMatcher, FULL_MASK};
pub use wire::{AtomicOp, Op, ProtoError, MAX_HEADER_LEN};
