//! The zcx protocol engine.

pub mod status;

pub use status::Status;
