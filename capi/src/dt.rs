//! UCP datatypes (`ucp_datatype_t`): contiguous, IOV and generic, and the buffers C memory
//! becomes for zcx's operations.
//!
//! Contiguous memory is handed to zcx as it is ([`RawBuf`]). An IOV or generic send is gathered
//! (packed) into one owned buffer; an IOV or generic receive lands in a staging buffer whose bytes
//! the request's finishing step scatters (unpacks) into the application's memory.

use std::ffi::c_void;

use crate::bindings::*;
use crate::request::{Finish, Outcome};

/// `ucp_dt_make_contig(1)`, what an operation without `UCP_OP_ATTR_FIELD_DATATYPE` uses.
pub const BYTES: ucp_datatype_t = 1 << ucp_dt_type::UCP_DATATYPE_SHIFT;

/// Memory the application owns and UCP's contract keeps valid until the operation completes.
pub struct RawBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the memory is the application's, which must not touch it while the operation runs
// (UCP's contract); which thread the transport writes it from does not matter.
unsafe impl Send for RawBuf {}

impl RawBuf {
    /// The `len` bytes at `ptr`.
    ///
    /// # Safety
    /// Null only with `len` 0; otherwise valid (for writes, for a receive) until the operation
    /// using it completes.
    pub unsafe fn new(ptr: *const c_void, len: usize) -> RawBuf {
        RawBuf { ptr: ptr as *mut u8, len }
    }
}

// SAFETY: the bytes stay in place while the buffer moves (it is only a pointer).
unsafe impl zcx::SendBuf for RawBuf {
    fn as_bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: valid for `len` bytes by `RawBuf::new`'s contract.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

// SAFETY: the bytes stay in place while the buffer moves (it is only a pointer).
unsafe impl zcx::RecvBuf for RawBuf {
    fn as_mut_bytes(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: valid for writes of `len` bytes by `RawBuf::new`'s contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// A send's bytes: the application's memory, or a packed copy of it.
pub enum SendData {
    /// Contiguous memory.
    Raw(RawBuf),
    /// IOV or generic data, gathered.
    Packed(Vec<u8>),
}

// SAFETY: each variant keeps its bytes in place while it moves.
unsafe impl zcx::SendBuf for SendData {
    fn as_bytes(&self) -> &[u8] {
        match self {
            SendData::Raw(raw) => zcx::SendBuf::as_bytes(raw),
            SendData::Packed(bytes) => bytes,
        }
    }
}

/// A generic datatype (`ucp_dt_create_generic`): its operations and their context.
#[repr(C, align(8))]
pub struct Generic {
    ops: ucp_generic_dt_ops_t,
    context: *mut c_void,
}

/// A datatype, decoded.
#[derive(Clone, Copy)]
pub enum Dt {
    /// Contiguous elements of this many bytes.
    Contig(usize),
    /// `count` `ucp_dt_iov_t` entries.
    Iov,
    /// Packed and unpacked by the application's operations.
    Generic(*const Generic),
}

/// The datatype `param` names (bytes when it names none).
///
/// # Safety
/// `param` is null or valid.
pub unsafe fn of_param(param: *const ucp_request_param_t) -> ucp_datatype_t {
    // SAFETY: the caller's contract.
    match unsafe { param.as_ref() } {
        Some(p) if p.op_attr_mask & ucp_op_attr_t::UCP_OP_ATTR_FIELD_DATATYPE != 0 => p.datatype,
        _ => BYTES,
    }
}

/// Decodes `datatype`; strided and unknown classes → `UNSUPPORTED`.
pub fn decode(datatype: ucp_datatype_t) -> Result<Dt, zcx::Status> {
    match (datatype & u64::from(ucp_dt_type::UCP_DATATYPE_CLASS_MASK)) as u32 {
        ucp_dt_type::UCP_DATATYPE_CONTIG => {
            Ok(Dt::Contig((datatype >> ucp_dt_type::UCP_DATATYPE_SHIFT) as usize))
        }
        ucp_dt_type::UCP_DATATYPE_IOV => Ok(Dt::Iov),
        ucp_dt_type::UCP_DATATYPE_GENERIC => {
            let ptr = (datatype & !u64::from(ucp_dt_type::UCP_DATATYPE_CLASS_MASK)) as *const Generic;
            if ptr.is_null() {
                return Err(zcx::Status::InvalidParam);
            }
            Ok(Dt::Generic(ptr))
        }
        _ => Err(zcx::Status::Unsupported),
    }
}

/// The `count` IOV entries at `buffer`.
///
/// # Safety
/// `buffer` points at `count` valid `ucp_dt_iov_t` (or `count` is 0).
unsafe fn iov<'a>(buffer: *const c_void, count: usize) -> &'a [ucp_dt_iov_t] {
    if count == 0 || buffer.is_null() {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(buffer.cast(), count) }
}

/// The bytes a send of `count` items of `datatype` at `buffer` sends.
///
/// # Safety
/// The memory `buffer`, `count` and `datatype` describe is valid for reads until the send
/// completes (contiguous) or for this call (IOV, generic).
pub unsafe fn gather(
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
) -> Result<SendData, zcx::Status> {
    match decode(datatype)? {
        Dt::Contig(elem) => {
            let len = count.checked_mul(elem).ok_or(zcx::Status::InvalidParam)?;
            // SAFETY: the caller's contract.
            Ok(SendData::Raw(unsafe { RawBuf::new(buffer, len) }))
        }
        Dt::Iov => {
            // SAFETY: the caller's contract.
            let entries = unsafe { iov(buffer, count) };
            let total = entries.iter().map(|e| e.length).sum();
            let mut bytes = Vec::with_capacity(total);
            let parts = entries.iter().filter(|e| e.length > 0).map(|e| {
                // SAFETY: each entry is valid for reads of its length (the caller's contract).
                unsafe { std::slice::from_raw_parts(e.buffer.cast::<u8>(), e.length) }
            });
            zcx::iov::gather(&mut bytes, parts);
            Ok(SendData::Packed(bytes))
        }
        Dt::Generic(generic) => {
            // SAFETY: made by `ucp_dt_create_generic` and not destroyed (the caller's contract).
            let g = unsafe { &*generic };
            let (Some(start), Some(size), Some(pack), Some(finish)) =
                (g.ops.start_pack, g.ops.packed_size, g.ops.pack, g.ops.finish)
            else {
                return Err(zcx::Status::InvalidParam);
            };
            // SAFETY: the application's operations, called as UCP calls them.
            unsafe {
                let state = start(g.context, buffer, count);
                let len = size(state);
                let mut bytes = vec![0u8; len];
                let packed = pack(state, 0, bytes.as_mut_ptr().cast(), len);
                finish(state);
                bytes.truncate(packed.min(len));
                Ok(SendData::Packed(bytes))
            }
        }
    }
}

/// Where a receive lands: the application's memory, or a staging buffer and how to copy it out.
pub struct RecvTarget {
    /// The buffer zcx writes.
    pub buf: RawBuf,
    /// Scatters (unpacks) the staged bytes at completion; `None` for contiguous memory.
    pub finish: Option<Finish>,
}

/// The receive target for `count` items of `datatype` at `buffer`.
///
/// # Safety
/// The memory `buffer`, `count` and `datatype` describe is valid for writes until the receive
/// completes; a generic datatype lives until then too.
pub unsafe fn scatter(
    buffer: *mut c_void,
    count: usize,
    datatype: ucp_datatype_t,
) -> Result<RecvTarget, zcx::Status> {
    match decode(datatype)? {
        Dt::Contig(elem) => {
            let len = count.checked_mul(elem).ok_or(zcx::Status::InvalidParam)?;
            // SAFETY: the caller's contract.
            Ok(RecvTarget { buf: unsafe { RawBuf::new(buffer, len) }, finish: None })
        }
        Dt::Iov => {
            // SAFETY: the caller's contract.
            let entries: Vec<(usize, usize)> =
                unsafe { iov(buffer, count) }.iter().map(|e| (e.buffer as usize, e.length)).collect();
            let total = entries.iter().map(|e| e.1).sum();
            let mut staging = vec![0u8; total].into_boxed_slice();
            // SAFETY: the staging buffer moves into the finishing step, which the request keeps
            // until completion; its heap bytes do not move.
            let buf = unsafe { RawBuf::new(staging.as_mut_ptr().cast(), total) };
            let finish: Finish = Box::new(move |status, outcome: &Outcome| {
                let staged = &staging[..outcome.length.min(staging.len())];
                let parts = entries.iter().filter(|e| e.1 > 0).map(|&(ptr, len)| {
                    // SAFETY: each entry is valid for writes of its length (the caller's
                    // contract), and none overlaps the staging buffer.
                    unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) }
                });
                zcx::iov::scatter(staged, parts);
                status
            });
            Ok(RecvTarget { buf, finish: Some(finish) })
        }
        Dt::Generic(generic) => {
            // SAFETY: made by `ucp_dt_create_generic` and not destroyed (the caller's contract).
            let g = unsafe { &*generic };
            let (Some(start), Some(size), Some(unpack), Some(done)) =
                (g.ops.start_unpack, g.ops.packed_size, g.ops.unpack, g.ops.finish)
            else {
                return Err(zcx::Status::InvalidParam);
            };
            // SAFETY: the application's operations, called as UCP calls them.
            let state = unsafe { start(g.context, buffer, count) };
            // SAFETY: as above.
            let total = unsafe { size(state) };
            let mut staging = vec![0u8; total].into_boxed_slice();
            // SAFETY: as for IOV.
            let buf = unsafe { RawBuf::new(staging.as_mut_ptr().cast(), total) };
            let state = state as usize;
            let finish: Finish = Box::new(move |status, outcome: &Outcome| {
                let state = state as *mut c_void;
                let len = outcome.length.min(staging.len());
                // SAFETY: the state `start_unpack` returned, unpacked into once and finished.
                let unpacked = unsafe {
                    let unpacked = if status == ucs_status_t::UCS_OK && len > 0 {
                        unpack(state, 0, staging.as_ptr().cast(), len)
                    } else {
                        ucs_status_t::UCS_OK
                    };
                    done(state);
                    unpacked
                };
                if status == ucs_status_t::UCS_OK {
                    unpacked
                } else {
                    status
                }
            });
            Ok(RecvTarget { buf, finish: Some(finish) })
        }
    }
}

/// `ucp_dt_create_generic`: a datatype packed and unpacked by `ops` with `context`.
///
/// # Safety
/// `ops` is valid for a read; `datatype_p` for a write.
#[no_mangle]
pub unsafe extern "C" fn ucp_dt_create_generic(
    ops: *const ucp_generic_dt_ops_t,
    context: *mut c_void,
    datatype_p: *mut ucp_datatype_t,
) -> ucs_status_t::Type {
    if ops.is_null() || datatype_p.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    let generic = Box::new(Generic { ops: unsafe { *ops }, context });
    let ptr = Box::into_raw(generic) as u64;
    // SAFETY: the caller's contract.
    unsafe { datatype_p.write(ptr | u64::from(ucp_dt_type::UCP_DATATYPE_GENERIC)) };
    ucs_status_t::UCS_OK
}

/// `ucp_dt_destroy`: frees a generic datatype (others need no freeing).
///
/// # Safety
/// `datatype` is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ucp_dt_destroy(datatype: ucp_datatype_t) {
    if let Ok(Dt::Generic(ptr)) = decode(datatype) {
        // SAFETY: made by `Box::into_raw` in `ucp_dt_create_generic`, freed once.
        drop(unsafe { Box::from_raw(ptr as *mut Generic) });
    }
}
