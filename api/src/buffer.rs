//! Buffers an operation owns while it is in flight.
//!
//! UCP takes raw pointers and trusts the caller not to touch a buffer until the request completes.
//! zcx moves the buffer into the operation instead and hands it back on completion, so safe code
//! cannot free, reuse or move a buffer the transport is still reading or writing (the model of
//! owned-buffer io_uring APIs). The two traits below promise a *stable* address: the bytes do not
//! move when the owning value is moved, which is what lets a transport keep a pointer to them.

use std::sync::Arc;

use crate::mem::MemHandle;
use crate::status::{fail_with, Result, Status};

/// A buffer an operation may read from until it completes.
///
/// # Safety
/// `as_bytes` must return the same pointer and length every time, for as long as the value lives,
/// even after the value is moved, and the bytes must not change while the value is not borrowed
/// mutably (heap buffers like `Vec<u8>` and `Box<[u8]>` qualify; an inline array does not).
pub unsafe trait SendBuf: Send + 'static {
    /// The bytes to send.
    fn as_bytes(&self) -> &[u8];
}

/// A buffer an operation may write into until it completes.
///
/// # Safety
/// As for [`SendBuf`]: `as_mut_bytes` returns the same pointer and length for the value's whole
/// life, wherever it is moved.
pub unsafe trait RecvBuf: Send + 'static {
    /// The bytes to fill; the operation writes at most `len()` of them.
    fn as_mut_bytes(&mut self) -> &mut [u8];
}

// SAFETY: a Vec's heap block does not move when the Vec does, and `as_bytes` never reallocates.
unsafe impl SendBuf for Vec<u8> {
    fn as_bytes(&self) -> &[u8] {
        self
    }
}

// SAFETY: as for `SendBuf`; `as_mut_bytes` hands out the initialised length without resizing.
unsafe impl RecvBuf for Vec<u8> {
    fn as_mut_bytes(&mut self) -> &mut [u8] {
        self
    }
}

// SAFETY: a boxed slice's heap block is fixed for its whole life.
unsafe impl SendBuf for Box<[u8]> {
    fn as_bytes(&self) -> &[u8] {
        self
    }
}

// SAFETY: as above.
unsafe impl RecvBuf for Box<[u8]> {
    fn as_mut_bytes(&mut self) -> &mut [u8] {
        self
    }
}

// SAFETY: static bytes live forever and are immutable.
unsafe impl SendBuf for &'static [u8] {
    fn as_bytes(&self) -> &[u8] {
        self
    }
}

// SAFETY: the shared slice is immutable and its allocation lives while any clone does.
unsafe impl SendBuf for Arc<[u8]> {
    fn as_bytes(&self) -> &[u8] {
        self
    }
}

// SAFETY: the Vec inside an Arc cannot be resized or moved through a shared reference.
unsafe impl SendBuf for Arc<Vec<u8>> {
    fn as_bytes(&self) -> &[u8] {
        self.as_slice()
    }
}

/// A range of `mem_map`'d memory used as an operation's buffer: zero-copy for transports that
/// registered the region. It keeps the mapping alive (a clone of the handle's registration), so the
/// memory cannot be unmapped under an operation even if the [`MemHandle`] is dropped.
///
/// The bytes themselves are shared memory: a peer with the region's rkey and the owner (through
/// [`MemHandle::address`]) can access them too. That is the nature of registered memory, as in UCP.
pub struct MemSlice {
    ptr: *mut u8,
    len: usize,
    _keep: Arc<dyn Send + Sync>,
}

// SAFETY: the pointer is into a mapping kept alive by `_keep`; access to the bytes is shared
// memory by design (see the type's documentation) and `MemSlice` adds no thread affinity.
unsafe impl Send for MemSlice {}
// SAFETY: as above; `&MemSlice` only reads.
unsafe impl Sync for MemSlice {}

impl MemSlice {
    /// The slice's first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the slice's bytes out (the memory is shared, so this is a snapshot).
    pub fn to_vec(&self) -> Vec<u8> {
        self.as_slice_shared().to_vec()
    }

    fn as_slice_shared(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr..ptr+len` lies inside a mapping that `_keep` keeps alive.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::fmt::Debug for MemSlice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemSlice").field("ptr", &self.ptr).field("len", &self.len).finish()
    }
}

// SAFETY: the mapping behind `ptr` is kept alive by `_keep` and never moves.
unsafe impl SendBuf for MemSlice {
    fn as_bytes(&self) -> &[u8] {
        self.as_slice_shared()
    }
}

// SAFETY: as above; the range is writable (mem_map'd memory is mapped read-write).
unsafe impl RecvBuf for MemSlice {
    fn as_mut_bytes(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: the range lies inside a live read-write mapping.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl MemHandle {
    /// `[offset, offset + len)` of this handle's memory as an owned operation buffer.
    ///
    /// Fails with INVALID_PARAM when the range is outside the handle, and with UNSUPPORTED for a
    /// handle over caller memory (registered with [`crate::MemMapParams::address`]), whose lifetime
    /// zcx cannot extend.
    pub fn slice(&self, offset: usize, len: usize) -> Result<MemSlice> {
        let end = offset.checked_add(len).ok_or(Status::InvalidParam)?;
        if end > self.length {
            return Err(fail_with(
                Status::InvalidParam,
                format!("slice {offset}+{len} exceeds the handle's {} bytes", self.length),
            ));
        }
        let keep = self.keep_alive().ok_or_else(|| {
            fail_with(Status::Unsupported, "caller memory cannot back an owned MemSlice".into())
        })?;
        Ok(MemSlice { ptr: self.address.wrapping_add(offset) as *mut u8, len, _keep: keep })
    }
}
