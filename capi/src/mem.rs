//! `ucp_mem_*` and `ucp_rkey_*`: a `ucp_mem_h` is a boxed [`CMem`], a `ucp_rkey_h`
//! a boxed [`CRkey`], and packed buffers are `malloc` copies freed by their release calls.

use std::ffi::c_void;

use crate::bindings::*;
use crate::context::ctx_ref;
use crate::endpoint::ep_ref;
use crate::status;

/// The Rust side of a `ucp_mem_h`.
pub struct CMem {
    /// The handle.
    pub memh: zcx::MemHandle,
}

/// The Rust side of a `ucp_rkey_h`.
pub struct CRkey {
    /// The key, bound to the endpoint that unpacked it.
    pub rkey: zcx::EpRkey,
}

/// The key behind a handle.
///
/// # Safety
/// `rkey` is a live handle (not null).
pub unsafe fn rkey_ref<'a>(rkey: ucp_rkey_h) -> &'a CRkey {
    // SAFETY: the caller's contract.
    unsafe { &*rkey.cast::<CRkey>() }
}

/// `ucp_mem_map`: allocates (`UCP_MEM_MAP_ALLOCATE`, at the given address as a hint or, with
/// `FIXED`, exactly) or registers the caller's memory.
///
/// # Safety
/// `context` is live; `params` valid; `memh_p` valid for a write; registered memory stays
/// mapped until unmapped here.
#[no_mangle]
pub unsafe extern "C" fn ucp_mem_map(
    context: ucp_context_h,
    params: *const ucp_mem_map_params_t,
    memh_p: *mut ucp_mem_h,
) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    let (Some(p), false, false) = (unsafe { params.as_ref() }, context.is_null(), memh_p.is_null()) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    // SAFETY: the caller's contract.
    let c = unsafe { ctx_ref(context) };
    let has = |bit: u32| p.field_mask & u64::from(bit) != 0;
    if !has(ucp_mem_map_params_field::UCP_MEM_MAP_PARAM_FIELD_LENGTH) {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    let mut mp = zcx::MemMapParams::new().length(p.length);
    if has(ucp_mem_map_params_field::UCP_MEM_MAP_PARAM_FIELD_FLAGS) {
        mp = mp.flags(zcx::MemMapFlags::from_bits_truncate(p.flags));
    }
    if has(ucp_mem_map_params_field::UCP_MEM_MAP_PARAM_FIELD_PROT) {
        mp = mp.prot(zcx::Prot::from_bits_truncate(p.prot));
    }
    if has(ucp_mem_map_params_field::UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE) {
        match zcx::MemoryType::from_raw(p.memory_type as u8) {
            Ok(memory_type) => mp = mp.memory_type(memory_type),
            Err(status) => return status::ucs(status),
        }
    }
    if has(ucp_mem_map_params_field::UCP_MEM_MAP_PARAM_FIELD_ADDRESS) && !p.address.is_null() {
        // SAFETY: the caller's memory (or hint), as UCP's contract describes it.
        mp = unsafe { mp.address(p.address.cast()) };
    }
    match c.ctx.mem_map(&mp) {
        Ok(memh) => {
            // SAFETY: the caller's contract.
            unsafe { memh_p.write(Box::into_raw(Box::new(CMem { memh })).cast()) };
            ucs_status_t::UCS_OK
        }
        Err(status) => status::ucs(status),
    }
}

/// `ucp_mem_unmap`.
///
/// # Safety
/// `memh` is live, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ucp_mem_unmap(_context: ucp_context_h, memh: ucp_mem_h) -> ucs_status_t::Type {
    if memh.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: made by `ucp_mem_map`, unmapped once.
    let mem = unsafe { Box::from_raw(memh.cast::<CMem>()) };
    status::of(mem.memh.unmap())
}

/// `ucp_mem_query`.
///
/// # Safety
/// `memh` is live; `attr` valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_mem_query(memh: ucp_mem_h, attr: *mut ucp_mem_attr_t) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    let (Some(attr), false) = (unsafe { attr.as_mut() }, memh.is_null()) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    // SAFETY: the caller's contract.
    let info = unsafe { &*memh.cast::<CMem>() }.memh.query();
    let has = |bit: u32| attr.field_mask & u64::from(bit) != 0;
    if has(ucp_mem_attr_field::UCP_MEM_ATTR_FIELD_ADDRESS) {
        attr.address = info.address.cast();
    }
    if has(ucp_mem_attr_field::UCP_MEM_ATTR_FIELD_LENGTH) {
        attr.length = info.length;
    }
    if has(ucp_mem_attr_field::UCP_MEM_ATTR_FIELD_MEM_TYPE) {
        attr.mem_type = info.mem_type as ucs_memory_type_t;
    }
    ucs_status_t::UCS_OK
}

/// `ucp_mem_advise`.
///
/// # Safety
/// `memh` is live; `params` valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_mem_advise(
    _context: ucp_context_h,
    memh: ucp_mem_h,
    params: *mut ucp_mem_advise_params_t,
) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    let (Some(p), false) = (unsafe { params.as_ref() }, memh.is_null()) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    let all = ucp_mem_advise_params_field::UCP_MEM_ADVISE_PARAM_FIELD_ADDRESS
        | ucp_mem_advise_params_field::UCP_MEM_ADVISE_PARAM_FIELD_LENGTH
        | ucp_mem_advise_params_field::UCP_MEM_ADVISE_PARAM_FIELD_ADVICE;
    if p.field_mask & u64::from(all) != u64::from(all) {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    let advice = match p.advice {
        ucp_mem_advice::UCP_MADV_NORMAL => zcx::MemAdvice::Normal,
        ucp_mem_advice::UCP_MADV_WILLNEED => zcx::MemAdvice::WillNeed,
        _ => return ucs_status_t::UCS_ERR_INVALID_PARAM,
    };
    // SAFETY: the caller's contract.
    let mem = unsafe { &*memh.cast::<CMem>() };
    status::of(mem.memh.advise(&zcx::MemAdviseParams {
        address: p.address as usize,
        length: p.length,
        advice,
    }))
}

/// Copies `bytes` into `malloc` memory and writes it and its length out.
///
/// # Safety
/// The out-pointers are valid for writes.
unsafe fn hand_out(bytes: &[u8], buffer_p: *mut *mut c_void, size_p: *mut usize) -> ucs_status_t::Type {
    // SAFETY: allocating at least one byte.
    let ptr = unsafe { libc::malloc(bytes.len().max(1)) };
    if ptr.is_null() {
        return ucs_status_t::UCS_ERR_NO_MEMORY;
    }
    // SAFETY: a fresh allocation of at least `bytes.len()` bytes; the caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.cast(), bytes.len());
        buffer_p.write(ptr);
        size_p.write(bytes.len());
    }
    ucs_status_t::UCS_OK
}

/// `ucp_rkey_pack`: the remote key of `memh`, to send to peers; freed by
/// `ucp_rkey_buffer_release`.
///
/// # Safety
/// `memh` is live; the out-pointers valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_pack(
    _context: ucp_context_h,
    memh: ucp_mem_h,
    rkey_buffer_p: *mut *mut c_void,
    size_p: *mut usize,
) -> ucs_status_t::Type {
    if memh.is_null() || rkey_buffer_p.is_null() || size_p.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    let mem = unsafe { &*memh.cast::<CMem>() };
    match mem.memh.rkey_pack() {
        // SAFETY: the caller's contract.
        Ok(packed) => unsafe { hand_out(&packed, rkey_buffer_p, size_p) },
        Err(status) => status::ucs(status),
    }
}

/// `ucp_rkey_buffer_release`.
///
/// # Safety
/// `rkey_buffer` came from `ucp_rkey_pack`, released once.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_buffer_release(rkey_buffer: *mut c_void) {
    // SAFETY: from `malloc` in `hand_out`.
    unsafe { libc::free(rkey_buffer) };
}

/// `ucp_ep_rkey_unpack`: a key for RMA on `ep`, from a peer's `ucp_rkey_pack` buffer. The
/// buffer's length is in its own header; a malformed or forged key → `UCS_ERR_INVALID_PARAM`.
///
/// # Safety
/// `ep` is live; `rkey_buffer` valid for the length its header states; `rkey_p` valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_rkey_unpack(
    ep: ucp_ep_h,
    rkey_buffer: *const c_void,
    rkey_p: *mut ucp_rkey_h,
) -> ucs_status_t::Type {
    if ep.is_null() || rkey_buffer.is_null() || rkey_p.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    let cep = unsafe { ep_ref(ep) };
    // SAFETY: the caller's contract: the buffer holds a whole packed key.
    let Some(packed) = (unsafe { packed_key(rkey_buffer) }) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    match cep.ep.rkey_unpack(packed) {
        Ok(rkey) => {
            // SAFETY: the caller's contract.
            unsafe { rkey_p.write(Box::into_raw(Box::new(CRkey { rkey })).cast()) };
            ucs_status_t::UCS_OK
        }
        Err(status) => status::ucs(status),
    }
}

/// The packed key at `buffer`, its length read from its own encoding.
///
/// # Safety
/// `buffer` holds a key packed by `ucp_rkey_pack` (or at least as many bytes as its length
/// field states).
unsafe fn packed_key<'a>(buffer: *const c_void) -> Option<&'a [u8]> {
    // SAFETY: the caller's contract: the header is there.
    let header = unsafe { std::slice::from_raw_parts(buffer.cast::<u8>(), zcx::PACKED_HEADER_LEN) };
    let len = zcx::packed_len(header)?;
    // SAFETY: the caller's contract: the whole key is there.
    Some(unsafe { std::slice::from_raw_parts(buffer.cast::<u8>(), len) })
}

/// `ucp_rkey_ptr`: a local pointer to `raddr` when the key's memory is mapped here.
///
/// # Safety
/// `rkey` is live; `addr_p` valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_ptr(
    rkey: ucp_rkey_h,
    raddr: u64,
    addr_p: *mut *mut c_void,
) -> ucs_status_t::Type {
    if rkey.is_null() || addr_p.is_null() {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    }
    // SAFETY: the caller's contract.
    match unsafe { rkey_ref(rkey) }.rkey.remote_key().ptr(raddr) {
        Ok(ptr) => {
            // SAFETY: the caller's contract.
            unsafe { addr_p.write(ptr.cast()) };
            ucs_status_t::UCS_OK
        }
        Err(status) => status::ucs(status),
    }
}

/// `ucp_rkey_destroy`.
///
/// # Safety
/// `rkey` is live, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_destroy(rkey: ucp_rkey_h) {
    if !rkey.is_null() {
        // SAFETY: made by `ucp_ep_rkey_unpack`, destroyed once.
        drop(unsafe { Box::from_raw(rkey.cast::<CRkey>()) });
    }
}

/// `ucp_mem_print_info`: maps `mem_size` bytes (a size such as `4k` or `1m`) and prints what
/// backs them.
///
/// # Safety
/// `mem_size` is NUL-terminated; `context` live; `stream` a valid `FILE *`.
#[no_mangle]
pub unsafe extern "C" fn ucp_mem_print_info(
    mem_size: *const std::ffi::c_char,
    context: ucp_context_h,
    stream: *mut libc::FILE,
) {
    if mem_size.is_null() || context.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let spec = unsafe { std::ffi::CStr::from_ptr(mem_size) }.to_string_lossy();
    // SAFETY: the caller's contract.
    let text = match unsafe { ctx_ref(context) }.ctx.mem_print_info(&spec) {
        Ok(text) => text,
        Err(status) => format!("# ucp_mem_print_info({spec}): {status:?}\n"),
    };
    // SAFETY: the caller's contract.
    unsafe { crate::context::write_stream(stream.cast(), &text) };
}
