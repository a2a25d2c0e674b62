//! Sans-IO protocol state machines: pure data structures driven by the worker's progress loop.
//!
//! Nothing here touches a transport, a buffer or a clock; the caller feeds in events (a receive was
//! posted, a message arrived) and acts on the outcome, so every rule can be tested without I/O.

pub mod tag_match;

pub use tag_match::{tag_matches, Arrival, Message, MessageInfo, Posted, RecvId, TagMatcher, FULL_MASK};
