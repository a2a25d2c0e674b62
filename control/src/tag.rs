//! The registry of field tags used inside zcx frames.
//!
//! Tags live in one table so two messages never give one number two meanings: a field that
//! appears in several frame kinds (the region description shared by rkeys and exported handles)
//! keeps its tag everywhere.
//!
//! The high bit splits the space in two. Tags `0x80..=0xFF` are *critical*: a decoder that meets
//! one it does not know must reject the frame, because ignoring it could change what the message
//! means (a new restriction on access, say). Tags `0x00..=0x7F` are *non-critical*: unknown ones
//! are skipped, so a newer peer can add optional information without breaking older ones. Every
//! field defined so far is critical; the non-critical half is reserved for future additions.

/// The bit that marks a tag as critical.
pub const CRITICAL: u8 = 0x80;

/// Whether an unknown field with this tag must make the frame be rejected.
pub const fn is_critical(tag: u8) -> bool {
    tag & CRITICAL != 0
}

/// Random identity of the exporting context (16 bytes).
pub const CONTEXT_ID: u8 = 0x81;
/// The exporting context's id of the memory handle (`u64`).
pub const REGION_ID: u8 = 0x82;
/// Address of the region's first byte in the exporting process (`u64`).
pub const BASE: u8 = 0x83;
/// Length of the region in bytes (`u64`).
pub const LENGTH: u8 = 0x84;
/// `UCP_MEM_MAP_PROT_*` bits (`u32`).
pub const PROT: u8 = 0x85;
/// `ucs_memory_type_t` (`u8`).
pub const MEM_TYPE: u8 = 0x86;
/// Capability the target checks on every remote access (16 bytes).
pub const ACCESS_KEY: u8 = 0x87;
/// Where a same-host peer finds the memfd behind the region (a fixed-size `ShmLocator`).
pub const SHM_LOCATOR: u8 = 0x88;
/// The `SYMMETRIC_RKEY` hint (`u8`, 0 or 1).
pub const SYMMETRIC: u8 = 0x89;
/// Per-memory-domain keys (a counted list).
pub const DOMAIN_KEYS: u8 = 0x8A;
/// Random identity of a worker (16 bytes).
pub const WORKER_UID: u8 = 0x8B;
/// A worker's name (UTF-8, at most [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes).
pub const WORKER_NAME: u8 = 0x8C;
/// The boot id of the host a worker runs on (16 bytes), for telling same-host peers apart.
pub const BOOT_ID: u8 = 0x8D;
/// How to reach a worker over each transport it offers (a counted list).
pub const TRANSPORT_ADDRESSES: u8 = 0x8E;
/// Which step of the connection handshake a frame is (`u8`).
pub const HANDSHAKE_STEP: u8 = 0x8F;
/// The client's id for the connection request (`u64`, `ucp_conn_request_attr_t::client_id`).
pub const CLIENT_ID: u8 = 0x90;
/// The endpoint's name (UTF-8, at most [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes).
pub const EP_NAME: u8 = 0x91;
/// Whether the client endpoint uses `UCP_ERR_HANDLING_MODE_PEER` (`u8`, 0 or 1).
pub const ERR_MODE_PEER: u8 = 0x92;
/// The sending worker's address: a whole nested [`FrameKind::WorkerAddress`](crate::FrameKind)
/// frame.
pub const WORKER_ADDRESS: u8 = 0x93;
/// The client endpoint's id (`u64`), echoed in the server's answer.
pub const CLIENT_EP_ID: u8 = 0x94;
/// The server endpoint's id (`u64`).
pub const SERVER_EP_ID: u8 = 0x95;
/// The `ucs_status_t` a listener rejected a connection with (`i8`).
pub const REJECT_STATUS: u8 = 0x96;
/// The token of a connection request that a pairing of two workers' connections concerns
/// (`u64`, never 0): the request a client's new endpoint proposes to share, or the request of the
/// server endpoint that answers for both.
pub const PAIR_TOKEN: u8 = 0x97;
