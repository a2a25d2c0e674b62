//! An opened verbs device with one protection domain: what memory regions are registered in and
//! queue pairs are created on. One per device per context, as UCX keeps one memory domain per
//! device.

use std::ffi::CStr;

use zcx_verbs_sys as sys;

/// An opened device (`ibv_context`) and its protection domain (`ibv_pd`), closed on drop after
/// everything registered in it (each registration holds the `Arc` it was made from).
pub struct ProtectionDomain {
    ctx: *mut sys::ibv_context,
    pd: *mut sys::ibv_pd,
    name: String,
    port: u8,
}

// SAFETY: libibverbs objects may be used from any thread; the pointers are only handed to
// libibverbs calls, which do their own locking.
unsafe impl Send for ProtectionDomain {}
// SAFETY: as above: shared use only passes the pointers to thread-safe libibverbs calls.
unsafe impl Sync for ProtectionDomain {}

impl ProtectionDomain {
    /// Opens device `name` and allocates a protection domain on it, for port `port`.
    pub fn open(name: &str, port: u8) -> Result<ProtectionDomain, String> {
        if let Some(why) = super::verbs_missing() {
            return Err(format!("built without libibverbs: {why}"));
        }
        let mut count = 0;
        // SAFETY: `count` is a valid out-pointer; the list is freed below.
        let list = unsafe { sys::ibv_get_device_list(&mut count) };
        if list.is_null() {
            return Err(format!("no verbs device: {}", std::io::Error::last_os_error()));
        }
        let mut ctx = std::ptr::null_mut();
        for i in 0..usize::try_from(count).unwrap_or(0) {
            // SAFETY: the list holds `count` devices and is alive.
            let device = unsafe { *list.add(i) };
            // SAFETY: a device of the live list.
            let device_name = unsafe { CStr::from_ptr(sys::ibv_get_device_name(device)) };
            if device_name.to_bytes() == name.as_bytes() {
                // SAFETY: as above; a context stays valid after the list is freed.
                ctx = unsafe { sys::ibv_open_device(device) };
                break;
            }
        }
        let open_error = std::io::Error::last_os_error();
        // SAFETY: from ibv_get_device_list, freed once; opened contexts outlive it.
        unsafe { sys::ibv_free_device_list(list) };
        if ctx.is_null() {
            return Err(format!("verbs device {name}: not found or not opened ({open_error})"));
        }
        // SAFETY: an open context.
        let pd = unsafe { sys::ibv_alloc_pd(ctx) };
        if pd.is_null() {
            let err = std::io::Error::last_os_error();
            // SAFETY: opened above, nothing made on it.
            unsafe { sys::ibv_close_device(ctx) };
            return Err(format!("ibv_alloc_pd({name}): {err}"));
        }
        Ok(ProtectionDomain { ctx, pd, name: name.to_owned(), port })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The port the context uses (from 1).
    pub fn port(&self) -> u8 {
        self.port
    }

    /// The raw protection domain, for registering and creating queue pairs in it.
    pub fn raw_pd(&self) -> *mut sys::ibv_pd {
        self.pd
    }

    /// The raw device context.
    pub fn raw_context(&self) -> *mut sys::ibv_context {
        self.ctx
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // SAFETY: allocated and opened in `open`; every registration and queue pair made in them
        // holds an `Arc` of this value, so none is left when it drops.
        unsafe {
            sys::ibv_dealloc_pd(self.pd);
            sys::ibv_close_device(self.ctx);
        }
    }
}

impl std::fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProtectionDomain({}:{})", self.name, self.port)
    }
}
