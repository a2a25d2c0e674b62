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
