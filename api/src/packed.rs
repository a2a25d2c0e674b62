//! The length of a packed key, handle or worker address from its first bytes, for C callers:
//! `ucp_ep_rkey_unpack` and `ucp_ep_create` get a pointer without a length, and each of these is
//! a control frame whose header states its length.

/// Bytes [`packed_len`] reads.
pub const PACKED_HEADER_LEN: usize = zcx_control::HEADER_LEN;

/// The whole length of the packed key, handle or worker address that starts with `header`
/// ([`PACKED_HEADER_LEN`] bytes or more), or `None` when `header` cannot start one. What the
/// bytes hold is checked when they are unpacked.
pub fn packed_len(header: &[u8]) -> Option<usize> {
    zcx_control::frame_len(header)
}

/// `ucp_worker_address_query`'s `worker_uid`: the unique id of the worker whose address
/// `address` is (the first 8 bytes of its 16-byte random identity, little-endian). A malformed
/// address → `INVALID_PARAM`.
pub fn worker_address_uid(address: &[u8]) -> crate::Result<u64> {
    let wire = zcx_control::WorkerAddressWire::decode(address)
        .map_err(|e| crate::status::fail_with(crate::Status::InvalidParam, format!("worker address: {e}")))?;
    let mut uid = [0u8; 8];
    uid.copy_from_slice(&wire.worker_uid[..8]);
    Ok(u64::from_le_bytes(uid))
}
