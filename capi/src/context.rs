//! `ucp_init_version`, `ucp_cleanup`, `ucp_context_query`, `ucp_context_print_info` and
//! `ucp_lib_query`: a `ucp_context_h` is a boxed [`CContext`].

use std::ffi::{c_char, c_void, CStr};

use crate::bindings::*;
use crate::request::{RequestPool, HEADER_SIZE};
use crate::{config, status};

/// The Rust side of a `ucp_context_h`.
pub struct CContext {
    /// The zcx context.
    pub ctx: zcx::Context,
    /// Requests of `ucp_params_t::request_size` application bytes.
    pub requests: Box<RequestPool>,
    /// `UCP_PARAM_FIELD_MT_WORKERS_SHARED`.
    pub mt_workers_shared: bool,
    /// The name, NUL-terminated, for `ucp_context_query`.
    pub name: std::ffi::CString,
}

/// The context behind a handle.
///
/// # Safety
/// `context` is a live handle from `ucp_init_version` (not null).
pub unsafe fn ctx_ref<'a>(context: ucp_context_h) -> &'a CContext {
    // SAFETY: the caller's contract.
    unsafe { &*context.cast::<CContext>() }
}

/// zcx features of UCP feature bits.
pub fn features_of(bits: u64) -> zcx::Features {
    let mut features = zcx::Features::empty();
    let pairs = [
        (ucp_feature::UCP_FEATURE_TAG, zcx::Features::TAG),
        (ucp_feature::UCP_FEATURE_RMA, zcx::Features::RMA),
        (ucp_feature::UCP_FEATURE_AMO32, zcx::Features::AMO32),
        (ucp_feature::UCP_FEATURE_AMO64, zcx::Features::AMO64),
        (ucp_feature::UCP_FEATURE_WAKEUP, zcx::Features::WAKEUP),
        (ucp_feature::UCP_FEATURE_STREAM, zcx::Features::STREAM),
        (ucp_feature::UCP_FEATURE_AM, zcx::Features::AM),
    ];
    for (bit, feature) in pairs {
        if bits & u64::from(bit) != 0 {
            features |= feature;
        }
    }
    features
}

/// `ucp_init_version`: a context with `params`, configured by `config` (or the environment).
/// `UCP_FEATURE_EXPORTED_MEMH` and other bits zcx does not know are ignored.
///
/// # Safety
/// `params` is valid; `config` null or live; `context_p` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn ucp_init_version(
    api_major_version: std::ffi::c_uint,
    _api_minor_version: std::ffi::c_uint,
    params: *const ucp_params_t,
    config: *const ucp_config_t,
    context_p: *mut ucp_context_h,
) -> ucs_status_t::Type {
    crate::logging::init();
    if api_major_version != UCP_API_MAJOR {
        tracing::error!(api_major_version, "a program built for another UCP API major version");
        return ucs_status_t::UCS_ERR_UNSUPPORTED;
    }
    // SAFETY: the caller's contract.
    let (Some(p), false) = (unsafe { params.as_ref() }, context_p.is_null()) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    let mask = p.field_mask;
    let has = |bit: u32| mask & u64::from(bit) != 0;
    let features = if has(ucp_params_field::UCP_PARAM_FIELD_FEATURES) {
        features_of(p.features)
    } else {
        zcx::Features::empty()
    };
    let name = if has(ucp_params_field::UCP_PARAM_FIELD_NAME) && !p.name.is_null() {
        // SAFETY: a NUL-terminated string when set (UCP's contract).
        Some(unsafe { CStr::from_ptr(p.name) }.to_string_lossy().into_owned())
    } else {
        None
    };
    // SAFETY: the caller's contract.
    let config = match unsafe { config::config_ref(config) } {
        Some(config) => config.0.clone(),
        None => match config::read_env(std::ptr::null()) {
            Ok(config) => config,
            Err(status) => return status::ucs(status),
        },
    };
    let ctx = match zcx::Context::new(&zcx::ContextParams { features, name }, &config) {
        Ok(ctx) => ctx,
        Err(status) => return status::ucs(status),
    };
    let request_size = if has(ucp_params_field::UCP_PARAM_FIELD_REQUEST_SIZE) { p.request_size } else { 0 };
    let init = if has(ucp_params_field::UCP_PARAM_FIELD_REQUEST_INIT) { p.request_init } else { None };
    let cleanup =
        if has(ucp_params_field::UCP_PARAM_FIELD_REQUEST_CLEANUP) { p.request_cleanup } else { None };
    let name = std::ffi::CString::new(ctx.name().replace('\0', "")).unwrap_or_default();
    let context = CContext {
        ctx,
        requests: Box::new(RequestPool::new(request_size, init, cleanup)),
        mt_workers_shared: has(ucp_params_field::UCP_PARAM_FIELD_MT_WORKERS_SHARED)
            && p.mt_workers_shared != 0,
        name,
    };
    // SAFETY: the caller's contract.
    unsafe { context_p.write(Box::into_raw(Box::new(context)).cast()) };
    ucs_status_t::UCS_OK
}

/// `ucp_cleanup`: releases the context. Requests still out keep their pool alive.
///
/// # Safety
/// `context` is a live handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ucp_cleanup(context: ucp_context_h) {
    if context.is_null() {
        return;
    }
    // SAFETY: made by `Box::into_raw` in `ucp_init_version`, freed once.
    let context = unsafe { Box::from_raw(context.cast::<CContext>()) };
    let CContext { ctx, requests, .. } = *context;
    drop(ctx);
    RequestPool::destroy(requests);
}

/// `ucp_context_query`: the request header size, thread mode (MULTI: zcx contexts are
/// thread-safe), host memory and the name.
///
/// # Safety
/// `context` is live; `attr` valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_context_query(
    context: ucp_context_h,
    attr: *mut ucp_context_attr_t,
) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    let (Some(attr), false) = (unsafe { attr.as_mut() }, context.is_null()) else {
        return ucs_status_t::UCS_ERR_INVALID_PARAM;
    };
    // SAFETY: the caller's contract.
    let c = unsafe { ctx_ref(context) };
    let mask = attr.field_mask;
    if mask & u64::from(ucp_context_attr_field::UCP_ATTR_FIELD_REQUEST_SIZE) != 0 {
        attr.request_size = HEADER_SIZE;
    }
    if mask & u64::from(ucp_context_attr_field::UCP_ATTR_FIELD_THREAD_MODE) != 0 {
        attr.thread_mode = ucs_thread_mode_t::UCS_THREAD_MODE_MULTI;
    }
    if mask & u64::from(ucp_context_attr_field::UCP_ATTR_FIELD_MEMORY_TYPES) != 0 {
        attr.memory_types = 1 << ucs_memory_type::UCS_MEMORY_TYPE_HOST;
    }
    if mask & u64::from(ucp_context_attr_field::UCP_ATTR_FIELD_NAME) != 0 {
        copy_name(&mut attr.name, c.name.to_bytes());
    }
    ucs_status_t::UCS_OK
}

/// Copies `name` into a fixed C array, truncated and NUL-terminated.
pub fn copy_name(dst: &mut [c_char], name: &[u8]) {
    let n = name.len().min(dst.len().saturating_sub(1));
    for (d, s) in dst.iter_mut().zip(&name[..n]) {
        *d = *s as c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}

/// `ucp_lib_query`: the highest thread level (MULTI).
///
/// # Safety
/// `attr` is valid.
#[no_mangle]
pub unsafe extern "C" fn ucp_lib_query(attr: *mut ucp_lib_attr_t) -> ucs_status_t::Type {
    // SAFETY: the caller's contract.
    let Some(attr) = (unsafe { attr.as_mut() }) else { return ucs_status_t::UCS_ERR_INVALID_PARAM };
    if attr.field_mask & u64::from(ucp_lib_attr_field::UCP_LIB_ATTR_FIELD_MAX_THREAD_LEVEL) != 0 {
        attr.max_thread_level = ucs_thread_mode_t::UCS_THREAD_MODE_MULTI;
    }
    ucs_status_t::UCS_OK
}

/// Writes `text` to the C stream `stream` (nothing for a null one).
///
/// # Safety
/// `stream` is null or a valid `FILE *`.
pub unsafe fn write_stream(stream: *mut c_void, text: &str) {
    if stream.is_null() {
        return;
    }
    // SAFETY: the caller's contract; the bytes are valid for their length.
    unsafe { libc::fwrite(text.as_ptr().cast(), 1, text.len(), stream.cast()) };
}

/// `ucp_context_print_info`: the context's name, features and transports.
///
/// # Safety
/// `context` is live; `stream` a valid `FILE *`.
#[no_mangle]
pub unsafe extern "C" fn ucp_context_print_info(context: ucp_context_h, stream: *mut libc::FILE) {
    if context.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let c = unsafe { ctx_ref(context) };
    let text = format!(
        "#\n# UCP context (zcx)\n#\n#            name: {}\n#        features: {:?}\n#      transports: {}\n#\n",
        c.ctx.name(),
        c.ctx.features(),
        c.ctx.config().transports().join(","),
    );
    // SAFETY: the caller's contract.
    unsafe { write_stream(stream.cast(), &text) };
}
