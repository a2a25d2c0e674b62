//! zcx control plane wire formats.
//!
//! Bytes decoded here come from other processes, which may be buggy or hostile, so every decoder
//! reads through a bounds-checked [`Reader`] and returns a [`WireError`] instead of panicking.
//! All messages share one framing: a versioned, kind-tagged, CRC-protected envelope around TLV
//! fields whose tags carry a critical bit (see [`frame`] and [`tag`]).

#![warn(missing_docs)]

mod cursor;
mod error;
mod fields;
pub mod frame;
pub mod tag;
mod tag_set;

pub use cursor::{Reader, Writer};
pub use error::WireError;
pub use fields::Fields;
pub use frame::{decode_frame, encode_frame, FrameKind, FrameWriter, MAX_FRAME_LEN};
