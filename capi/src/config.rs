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

/// `ucp_config_read`: the configuration from the environment (see [`read_env`]). `filename` is
/// accepted and unused: zcx reads no configuration file.
///
/// # Safety
/// `env_prefix` is null or NUL-terminated; `config_p` is valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn ucp_config_read(
    env_prefix: *const c_char,
    _filename: *const c_char,
    config_p: *mut *mut ucp_config_t,
) -> ucs_status_t::Type {
    crate::logging::init();
    if config_p.is_null() {
        return status::ucs(zcx::Status::InvalidParam);
    }
    // SAFETY: the caller's contract.
    match unsafe { read_env(env_prefix) } {
        Ok(config) => {
            let raw = Box::into_raw(Box::new(Config(config)));
            // SAFETY: non-null, valid for a write by the caller's contract.
            unsafe { config_p.write(raw.cast()) };
            ucs_status_t::UCS_OK
        }
        Err(status) => status::ucs(status),
    }
}

/// The configuration a UCX program gets from its environment: UCX's variables where they have a
/// zcx meaning (`UCX_TLS`, `UCX_NET_DEVICES`, `UCX_RNDV_THRESH`, `UCX_ZCOPY_THRESH`,
/// `UCX_HANDLE_ERRORS`), then the same under `<env_prefix>_UCX_`, which UCX lets override them,
/// then zcx's own `ZCX_*`, which override both. Other `UCX_` variables are ignored with a
/// warning, as UCX warns about variables it did not use.
///
/// # Safety
/// `env_prefix` is null or NUL-terminated.
pub unsafe fn read_env(env_prefix: *const c_char) -> zcx::Result<zcx::Config> {
    let prefix = if env_prefix.is_null() {
        None
    } else {
        // SAFETY: the caller's contract.
        Some(format!("{}_UCX_", unsafe { CStr::from_ptr(env_prefix) }.to_string_lossy()))
    };
    let vars: Vec<(String, String)> = std::env::vars().collect();
    let mut config = zcx::Config::from_vars(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    let mut ucx: Vec<(String, &str)> = Vec::new();
    for (key, value) in &vars {
        if let Some(name) = key.strip_prefix("UCX_") {
            ucx.push((name.to_owned(), value));
        }
    }
    if let Some(prefix) = &prefix {
        for (key, value) in &vars {
            if let Some(name) = key.strip_prefix(prefix.as_str()) {
                ucx.push((name.to_owned(), value));
            }
        }
    }
    for (name, value) in ucx {
        let Some((zcx_name, zcx_value)) = translate(&name, value) else { continue };
        if std::env::var_os(format!("ZCX_{zcx_name}")).is_some() {
            continue;
        }
        if let Err(status) = config.modify(zcx_name, &zcx_value) {
            tracing::warn!(variable = %format!("UCX_{name}"), value, ?status, "UCX setting not taken");
        }
    }
    Ok(config)
}

/// The zcx variable and value of UCX variable `name` (without `UCX_`), or `None` when it has no
/// zcx meaning here.
fn translate(name: &str, value: &str) -> Option<(&'static str, String)> {
    match name {
        "TLS" => {
            let mut names: Vec<String> = Vec::new();
            for token in value.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                let (neg, tl) = token.strip_prefix('^').map_or(("", token), |t| ("^", t));
                let mapped = match tl {
                    "all" => "all",
                    "sm" | "shm" | "posix" | "sysv" | "mm" | "cma" | "knem" | "xpmem" => "shm",
                    "tcp" => "tcp",
                    "ib" | "rc" | "rc_v" | "rc_verbs" | "rc_x" | "rc_mlx5" | "ud" | "ud_v" | "ud_verbs"
                    | "ud_x" | "ud_mlx5" | "dc" | "dc_x" | "dc_mlx5" | "rdmacm" => "verbs",
                    // Loopback within a process, accelerators and the sockaddr helper need no zcx
                    // transport of their own.
                    _ => continue,
                };
                let entry = format!("{neg}{mapped}");
                if !names.contains(&entry) {
                    names.push(entry);
                }
            }
            (!names.is_empty()).then(|| ("TLS", names.join(",")))
        }
        "NET_DEVICES" => value
            .split(',')
            .map(str::trim)
            .find(|d| d.contains(':'))
            .map(|device| ("VERBS_DEVICE", device.to_owned())),
        "RNDV_THRESH" => {
            (!matches!(value.trim(), "auto" | "inf")).then(|| ("RNDV_THRESH", value.trim().to_owned()))
        }
        "ZCOPY_THRESH" => {
            (!matches!(value.trim(), "auto" | "inf")).then(|| ("DPDK_ZCOPY_THRESH", value.trim().to_owned()))
        }
        // UCS's signal handling; zcx installs no signal handlers, so every value means the same.
        "HANDLE_ERRORS" => None,
        // Settings the real libucs and libuct loaded beside this library read themselves.
        n if n.starts_with("LOG_") || n.starts_with("MEM") || n.starts_with("VFS") || n == "MODULES" => None,
        _ => {
            tracing::warn!(variable = %format!("UCX_{name}"), "UCX setting unused by zcx");
            None
        }
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
