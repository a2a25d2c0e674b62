//! zcx control plane wire formats.
//!
//! Bytes decoded here come from other processes, which may be buggy or hostile, so every decoder
//! reads through a bounds-checked [`Reader`] and returns a [`WireError`] instead of panicking.

#![warn(missing_docs)]

mod cursor;
mod error;

pub use cursor::{Reader, Writer};
pub use error::WireError;
