//! Photon's buffer registry (`photon_register_buffer` & co) on top of `mem_map`.
//!
//! Photon programs register raw buffers by address and size, look up their private keys, and
//! learn a peer's buffer through a rendezvous. [`Registry`] is that table for one [`Context`];
//! the free functions use a process-wide registry set up by [`init`], like `photon_init`.
//! The rendezvous interface (post a buffer to a peer, wait for the peer's, `get_buffer_remote`,
//! FIN) is [`post_recv_buffer`] and its siblings below.

mod rendezvous;

pub use rendezvous::{
    get_buffer_remote, post_recv_buffer, post_send_buffer, send_fin, wait_fin, wait_recv_buffer,
    wait_send_buffer, PhotonRequest, RemoteBuffer,
};

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use crate::context::Context;
use crate::mem::{MemHandle, MemMapParams};
use crate::status::{fail_with, Result, Status};

/// `photon_buffer_priv_t`: the private key material of a registered buffer, two 64-bit keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufferPriv {
    /// `key0`
    pub key0: u64,
    /// `key1`
    pub key1: u64,
}

struct Entry {
    handle: MemHandle,
    refcount: usize,
}

/// A Photon buffer table bound to a context.
pub struct Registry {
    ctx: Context,
    buffers: Mutex<HashMap<(usize, usize), Entry>>,
}

impl Registry {
    /// A registry whose buffers are registered with `ctx`.
    pub fn new(ctx: &Context) -> Registry {
        Registry { ctx: ctx.clone(), buffers: Mutex::new(HashMap::new()) }
    }

    /// `photon_register_buffer`: registers `[addr, addr + size)`; registering exactly the same buffer
    /// again only counts a reference.
    ///
    /// # Safety
    /// The buffer must stay mapped, readable and writable until its last `unregister_buffer`
    /// (the contract of [`MemMapParams::address`]).
    pub unsafe fn register_buffer(&self, addr: *mut u8, size: usize) -> Result<()> {
        if addr.is_null() || size == 0 {
            return Err(fail_with(Status::InvalidParam, "photon: null or empty buffer".into()));
        }
        let mut buffers = self.lock();
        if let Some(entry) = buffers.get_mut(&(addr as usize, size)) {
            entry.refcount += 1;
            return Ok(());
        }
        // SAFETY: forwarded from this function's contract.
        let params = unsafe { MemMapParams::new().address(addr) }.length(size);
        let handle = self.ctx.mem_map(&params)?;
        buffers.insert((addr as usize, size), Entry { handle, refcount: 1 });
        Ok(())
    }

    /// `photon_unregister_buffer`: drops one reference to exactly this buffer and deregisters it when
    /// none is left. An unknown buffer → `NO_ELEM`.
    pub fn unregister_buffer(&self, addr: *mut u8, size: usize) -> Result<()> {
        let mut buffers = self.lock();
        let key = (addr as usize, size);
        let entry = buffers.get_mut(&key).ok_or(Status::NoElem)?;
        entry.refcount -= 1;
        if entry.refcount == 0 {
            buffers.remove(&key);
        }
        Ok(())
    }

    /// `photon_get_buffer_private`: the keys of the registered buffer that contains
    /// `[addr, addr + size)`. None does → `NO_ELEM`.
    pub fn get_buffer_private(&self, addr: *const u8, size: usize) -> Result<BufferPriv> {
        let start = addr as usize;
        let end = start.checked_add(size).ok_or(Status::InvalidParam)?;
        let buffers = self.lock();
        let entry = buffers
            .iter()
            .filter(|((a, s), _)| *a <= start && end <= a + s)
            .min_by_key(|((_, s), _)| *s)
            .map(|(_, e)| e)
            .ok_or(Status::NoElem)?;
        let key = entry.handle.access_key;
        let half = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8-byte half of a 16-byte key"));
        Ok(BufferPriv { key0: half(&key[..8]), key1: half(&key[8..]) })
    }

    /// The memory handle behind a registered buffer (to pack its key for a peer).
    pub fn with_handle<T>(&self, addr: *const u8, size: usize, f: impl FnOnce(&MemHandle) -> T) -> Result<T> {
        let buffers = self.lock();
        let entry = buffers.get(&(addr as usize, size)).ok_or(Status::NoElem)?;
        Ok(f(&entry.handle))
    }

    /// Number of distinct registered buffers.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no buffer is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(usize, usize), Entry>> {
        // Each mutation is a single map operation; a poisoned table is still consistent.
        self.buffers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

static GLOBAL: OnceLock<Registry> = OnceLock::new();

/// `photon_init` for the registry: binds the process-wide registry to `ctx`. A second call →
/// `ALREADY_EXISTS`.
pub fn init(ctx: &Context) -> Result<()> {
    GLOBAL.set(Registry::new(ctx)).map_err(|_| Status::AlreadyExists)
}

fn global() -> Result<&'static Registry> {
    GLOBAL.get().ok_or_else(|| fail_with(Status::NoElem, "photon::init has not been called".into()))
}

/// `photon_register_buffer` on the process-wide registry.
///
/// # Safety
/// As [`Registry::register_buffer`].
pub unsafe fn register_buffer(addr: *mut u8, size: usize) -> Result<()> {
    // SAFETY: forwarded from this function's contract.
    unsafe { global()?.register_buffer(addr, size) }
}

/// `photon_unregister_buffer` on the process-wide registry.
pub fn unregister_buffer(addr: *mut u8, size: usize) -> Result<()> {
    global()?.unregister_buffer(addr, size)
}

/// `photon_get_buffer_private` on the process-wide registry.
pub fn get_buffer_private(addr: *const u8, size: usize) -> Result<BufferPriv> {
    global()?.get_buffer_private(addr, size)
}
