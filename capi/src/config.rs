//! `ucp_config_read`, `ucp_config_modify`, `ucp_config_print` and `ucp_config_release`: a
//! `ucp_config_t` is a boxed `zcx::Config` read from the environment (`ZCX_*`), handed to C as an
//! opaque pointer and freed by `ucp_config_release`.

use std::ffi::{c_char, c_int, CStr};

use crate::bindings::{ucp_config_t, ucs_status_t};
use crate::status;

/// The Rust side of a `ucp_config_t`.
pub struct Config(pub zcx::Config);

/// The config behind a handle this library made, or `None` for a null one.
///
/// # Safety
/// `config` is null or a pointer `ucp_config_read` returned and `ucp_config_release` has not freed.
pub(crate) unsafe fn config_ref<'a>(config: *const ucp_config_t) -> Option<&'a Config> {
    // SAFETY: the caller's contract: a live `Box<Config>` made by `ucp_config_read`.
    unsafe { config.cast::<Config>().as_ref() }
}

/// `ucp_config_read`: the configuration from the environment. `env_prefix` and `filename` are
/// accepted and unused: zcx reads its own `ZCX_*` variables and no file.
///
/// # Safety
/// `config_p` is valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn ucp_config_read(
    _env_prefix: *const c_char,
    _filename: *const c_char,
    config_p: *mut *mut ucp_config_t,
) -> ucs_status_t::Type {
    if config_p.is_null() {
        return status::ucs(zcx::Status::InvalidParam);
    }
    match zcx::Config::from_env() {
        Ok(config) => {
            let raw = Box::into_raw(Box::new(Config(config)));
            // SAFETY: non-null, valid for a write by the caller's contract.
            unsafe { config_p.write(raw.cast()) };
            ucs_status_t::UCS_OK
        }
        Err(status) => status::ucs(status),
    }
}

/// `ucp_config_release`: frees a configuration (a null one is ignored).
///
/// # Safety
/// `config` is null or a live handle from `ucp_config_read`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ucp_config_release(config: *mut ucp_config_t) {
    if !config.is_null() {
        // SAFETY: made by `Box::into_raw` in `ucp_config_read`, freed once (the caller's contract).
        drop(unsafe { Box::from_raw(config.cast::<Config>()) });
    }
}

/// `ucp_config_modify`: sets variable `name` (with or without the `ZCX_` prefix) to `value`.
/// An unknown name → `UCS_ERR_NO_ELEM`; a value it cannot take → `UCS_ERR_INVALID_PARAM`.
///
/// # Safety
/// `config` is a live handle; `name` and `value` are null or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn ucp_config_modify(
    config: *mut ucp_config_t,
    name: *const c_char,
    value: *const c_char,
) -> ucs_status_t::Type {
    if config.is_null() || name.is_null() || value.is_null() {
        return status::ucs(zcx::Status::InvalidParam);
    }
    // SAFETY: NUL-terminated strings by the caller's contract.
    let (name, value) = unsafe { (CStr::from_ptr(name), CStr::from_ptr(value)) };
    let (Ok(name), Ok(value)) = (name.to_str(), value.to_str()) else {
        return status::ucs(zcx::Status::InvalidParam);
    };
    // SAFETY: a live handle by the caller's contract, not shared while it is modified.
    let config = unsafe { &mut *config.cast::<Config>() };
    status::of(config.0.modify(name, value))
}

/// `ucp_config_print`: writes the variables and their values to `stream`, after `title` as a
/// comment line when it is not null. The print flags are accepted; zcx prints one form.
///
/// # Safety
/// `config` is a live handle; `stream` a valid open `FILE *`; `title` null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn ucp_config_print(
    config: *const ucp_config_t,
    stream: *mut libc::FILE,
    title: *const c_char,
    _print_flags: c_int,
) {
    // SAFETY: the caller's contract.
    let Some(config) = (unsafe { config_ref(config) }) else { return };
    if stream.is_null() {
        return;
    }
    let mut text = String::new();
    if !title.is_null() {
        // SAFETY: NUL-terminated by the caller's contract.
        text += &format!("# {}\n", unsafe { CStr::from_ptr(title) }.to_string_lossy());
    }
    text += &config.0.print();
    let Ok(text) = std::ffi::CString::new(text) else { return };
    // SAFETY: a valid stream and a NUL-terminated string.
    unsafe { libc::fputs(text.as_ptr(), stream) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::{null, null_mut};

    #[test]
    fn a_config_is_read_modified_checked_printed_and_released() {
        let mut config = null_mut();
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { ucp_config_read(null(), null(), &mut config) }, ucs_status_t::UCS_OK);
        assert!(!config.is_null());
        // SAFETY: a live handle and NUL-terminated strings, throughout.
        unsafe {
            assert_eq!(ucp_config_modify(config, c"TLS".as_ptr(), c"^dpdk".as_ptr()), ucs_status_t::UCS_OK);
            assert_eq!(ucp_config_modify(config, c"ZCX_TLS".as_ptr(), c"tcp".as_ptr()), ucs_status_t::UCS_OK);
            assert_eq!(
                ucp_config_modify(config, c"NO_SUCH_THING".as_ptr(), c"1".as_ptr()),
                ucs_status_t::UCS_ERR_NO_ELEM
            );
            assert_eq!(ucp_config_modify(config, null(), c"1".as_ptr()), ucs_status_t::UCS_ERR_INVALID_PARAM);
            assert_eq!(config_ref(config).unwrap().0.get("TLS"), Some("tcp"));
            // Printed into a memory stream.
            let (mut buf, mut size) = (null_mut(), 0);
            let stream = libc::open_memstream(&mut buf, &mut size);
            ucp_config_print(config, stream, c"zcx".as_ptr(), 0);
            libc::fclose(stream);
            let text = CStr::from_ptr(buf).to_string_lossy().into_owned();
            libc::free(buf.cast());
            assert!(text.starts_with("# zcx\n"), "{text}");
            assert!(text.contains("ZCX_TLS=tcp"), "{text}");
            ucp_config_release(config);
            ucp_config_release(null_mut());
            assert_eq!(ucp_config_read(null(), null(), null_mut()), ucs_status_t::UCS_ERR_INVALID_PARAM);
        }
    }
}
