//! zcx control plane wire formats.
//!
//! Everything zcx processes tell each other outside the data path — packed remote keys, exported
//! memory handles, worker addresses and connection handshakes — travels in one framing, decoded
//! here. Those bytes come from other processes, which may be buggy or hostile, so every
//! decoder is *checked*: it reads through a bounds-checked [`Reader`], returns a [`WireError`]
//! instead of panicking, caps every length and count before allocating, and validates every
//! value before handing back a typed struct.
//!
//! # Framing
//!
//! A frame is `magic "ZCX\0" | version u8 | kind u8 | body_len u16 | body | crc32 u32`, all
//! little-endian, at most [`MAX_FRAME_LEN`] bytes; the body is a sequence of `tag u8 | len u16 |
//! value` fields (see [`frame`] for the exact layout and the order of checks).
//!
//! - **Versioning.** The version byte covers the envelope itself; a decoder rejects any version
//!   it does not speak ([`WireError::UnsupportedVersion`]) rather than guess at its layout.
//!   Changes that old decoders can safely ignore do not bump it: they add fields.
//! - **Kind.** Each message type has its own [`FrameKind`], and decoding one kind as another is
//!   [`WireError::WrongKind`], so an exported handle can never be mistaken for an rkey.
//! - **Critical bit.** Field tags with bit `0x80` set are critical: a decoder that does not know
//!   one rejects the frame ([`WireError::UnknownCriticalField`]), because the field might change
//!   what the message means. Unknown tags below `0x80` are skipped, which is how optional
//!   information is added without breaking older peers. Every field defined so far is critical;
//!   see [`tag`].
//! - **Checksum.** A CRC-32 over the whole frame is checked before any field is interpreted. A
//!   remote key grants access to memory: a corrupted key must be rejected outright, not trusted
//!   in the parts that happen to still parse. The CRC catches accidental damage (every
//!   single-byte change and every burst up to 32 bits); it is not authentication — the
//!   unguessable `access_key` checked by the target is what stops forgery.
//! - **Canonical form.** Encoders write each field once, in ascending tag order, and leave out
//!   optional fields with nothing to say; decoders accept any field order.
//!
//! # Messages
//!
//! - [`RkeyWire`]: a packed remote key.
//! - [`ExportedMemhWire`]: an exported memory handle, imported by a same-host peer.
//! - [`ShmLocator`]: inside both, tells a same-host peer how to map the memfd behind a region.
//! - [`WorkerAddressWire`]: a worker address (`ucp_address_t`), one [`TransportAddress`] per
//!   transport the worker offers.
//! - [`HandshakeWire`]: the connection request sent over a sockaddr connection, and the
//!   listener's acceptance or rejection.

#![warn(missing_docs)]

mod cursor;
mod domain_key;
mod error;
mod exported_memh;
mod fields;
pub mod frame;
mod handshake;
mod name;
mod region;
mod rkey;
#[cfg(test)]
mod samples;
mod shm_locator;
pub mod tag;
mod tag_set;
mod transport_address;
mod worker_address;

pub use cursor::{Reader, Writer};
pub use domain_key::{DomainKey, MAX_DOMAIN_KEYS, MAX_DOMAIN_KEY_LEN};
pub use error::WireError;
pub use exported_memh::ExportedMemhWire;
pub use fields::Fields;
pub use frame::{decode_frame, encode_frame, frame_len, FrameKind, FrameWriter, HEADER_LEN, MAX_FRAME_LEN};
pub use handshake::{HandshakeWire, REJECT_STATUS_MAX, REJECT_STATUS_MIN};
pub use name::MAX_NAME_LEN;
pub use region::{
    MEM_TYPE_MAX, PROT_ALL, PROT_LOCAL_READ, PROT_LOCAL_WRITE, PROT_REMOTE_READ, PROT_REMOTE_WRITE,
};
pub use rkey::RkeyWire;
pub use shm_locator::{
    local_boot_id, process_start_time, ShmLocator, PAGE_SIZE_1G, PAGE_SIZE_2M, PAGE_SIZE_4K,
};
pub use transport_address::{
    TransportAddress, MAX_SHM_SOCKET_NAME_LEN, MAX_TRANSPORT_ADDRESSES, MAX_TRANSPORT_ADDRESS_LEN,
    TRANSPORT_DPDK, TRANSPORT_SHM, TRANSPORT_URING, TRANSPORT_VERBS, VERBS_MTUS, VERBS_QPN_LIMIT,
};
pub use worker_address::WorkerAddressWire;
