//! zcx's status strings are UCX's: compared with `ucs_status_string` of the real libucs when present.

use std::ffi::{c_char, CStr};

use zcx::{status_string, Status};

#[test]
fn every_code_reads_the_same_as_libucs() {
    // SAFETY: dlopen with a valid NUL-terminated name; the handle is never closed (harmless in a test).
    let lib = unsafe { libc::dlopen(c"libucs.so.0".as_ptr(), libc::RTLD_NOW) };
    if lib.is_null() {
        eprintln!("skipped: libucs.so.0 not installed (scripts/test.sh installs libucx-dev)");
        return;
    }
    // SAFETY: `lib` is a valid handle and the symbol name is NUL-terminated.
    let sym = unsafe { libc::dlsym(lib, c"ucs_status_string".as_ptr()) };
    assert!(!sym.is_null(), "libucs without ucs_status_string");
    // SAFETY: ucs_status_string has this signature in every UCX release.
    let ucs_status_string: extern "C" fn(i8) -> *const c_char = unsafe { std::mem::transmute(sym) };
    for code in -100..=1i32 {
        // SAFETY: ucs_status_string returns a NUL-terminated string (static or thread-local buffer).
        let theirs = unsafe { CStr::from_ptr(ucs_status_string(code as i8)) }.to_string_lossy().into_owned();
        assert_eq!(status_string(code), theirs, "code {code}");
        if let Some(s) = Status::from_code(code) {
            assert_eq!(s.to_string(), theirs);
        }
    }
}
