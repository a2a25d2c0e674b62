//! User memory as the engine holds it: a raw pointer and a length, lent by the API for the life
//! of one operation.
//!
//! The API owns every buffer (inside its request objects) and hands the engine only the address
//! and the length, through an `unsafe` constructor whose contract is the whole story: the bytes
//! stay valid, and nobody but the engine (and the transport it hands them to) touches them,
//! until the operation they belong to completes. The engine copies eager payloads into receive
//! buffers itself and lends send buffers to transmits and RMA requests by pointer.

use std::sync::Arc;

use crate::ids::Cookie;

/// The bytes of a send operation (tag, AM or stream send, put, atomic operand).
#[derive(Clone, Debug)]
pub struct SendBuffer {
    ptr: *const u8,
    len: usize,
    key: Option<Arc<[u8]>>,
    cookie: Option<Cookie>,
}

impl SendBuffer {
    /// A send buffer of `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be readable memory that stays valid and unmodified until the
    /// operation the buffer is given to completes (its completion has been drained from the
    /// engine) or the engine refused it. `ptr` may dangle when `len` is 0.
    pub unsafe fn new(ptr: *const u8, len: usize) -> SendBuffer {
        SendBuffer { ptr, len, key: None, cookie: None }
    }

    /// The same buffer with the packed remote key of memory registered around it, which lets a
    /// receiver-pull link's peer read it with an RMA get instead of having it pushed.
    pub fn with_key(mut self, packed_key: Arc<[u8]>) -> SendBuffer {
        self.key = Some(packed_key);
        self
    }

    /// The same buffer with the API's name for the operation it is given to, which that
    /// operation's completion carries back.
    #[inline]
    pub fn with_cookie(mut self, cookie: Cookie) -> SendBuffer {
        self.cookie = Some(cookie);
        self
    }

    /// The API's name for the operation, if it gave one.
    #[inline]
    pub(crate) fn cookie(&self) -> Option<Cookie> {
        self.cookie
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn key(&self) -> Option<&Arc<[u8]>> {
        self.key.as_ref()
    }

    pub(crate) fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Pointer to byte `offset`; `offset <= len`.
    pub(crate) fn at(&self, offset: usize) -> *const u8 {
        debug_assert!(offset <= self.len);
        self.ptr.wrapping_add(offset)
    }

    /// The bytes.
    ///
    /// # Safety
    /// Only while the operation owning the buffer has not completed (the constructor's contract).
    pub(crate) unsafe fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the constructor's contract: readable and unmodified while the op lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// The bytes of a receive operation (tag, AM data or stream receive, get, fetched value).
#[derive(Clone, Copy, Debug)]
pub struct RecvBuffer {
    ptr: *mut u8,
    len: usize,
    cookie: Option<Cookie>,
}

impl RecvBuffer {
    /// A receive buffer of `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be writable memory that stays valid, and is neither read nor
    /// written by anyone but the engine and the transport, until the operation the buffer is
    /// given to completes (its completion has been drained) or the engine refused it. `ptr` may
    /// dangle when `len` is 0.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> RecvBuffer {
        RecvBuffer { ptr, len, cookie: None }
    }

    /// The same buffer with the API's name for the operation it is given to, which that
    /// operation's completion carries back.
    #[inline]
    pub fn with_cookie(mut self, cookie: Cookie) -> RecvBuffer {
        self.cookie = Some(cookie);
        self
    }

    /// The API's name for the operation, if it gave one.
    #[inline]
    pub(crate) fn cookie(&self) -> Option<Cookie> {
        self.cookie
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Copies `data` to byte `offset`; the caller checked `offset + data.len() <= len`.
    pub(crate) fn write(&self, offset: usize, data: &[u8]) {
        assert!(offset.checked_add(data.len()).is_some_and(|end| end <= self.len), "write outside buffer");
        if data.is_empty() {
            return;
        }
        // SAFETY: in bounds (asserted); the constructor's contract makes the range ours to write
        // while the operation lives, and `data` is engine-owned or a peer frame, never this buffer.
        unsafe { zcx_dataplane::copy::copy_bytes(data.as_ptr(), self.ptr.add(offset), data.len()) }
    }
}

// SAFETY: the pointers name memory the API lent for an operation (see the constructors); they
// carry no thread affinity, and the engine is used by one thread at a time (behind the worker's
// lock), like the buffers' owners.
unsafe impl Send for SendBuffer {}
// SAFETY: as above.
unsafe impl Send for RecvBuffer {}
