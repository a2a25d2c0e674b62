//! Photon's buffer registry over mem_map.

use zcx::photon::{self, Registry};
use zcx::{Context, Features, Status};

#[test]
fn register_refcounts_exact_buffers_and_unregister_releases() {
    let ctx = Context::with_features(Features::RMA).unwrap();
    let reg = Registry::new(&ctx);
    let mut buf = vec![7u8; 64 << 10];
    let (p, n) = (buf.as_mut_ptr(), buf.len());
    // SAFETY: `buf` outlives every registration (all are removed below).
    unsafe {
        reg.register_buffer(p, n).unwrap();
        reg.register_buffer(p, n).unwrap();
    }
    assert_eq!(reg.len(), 1);
    let keys = reg.get_buffer_private(p, n).unwrap();
    reg.unregister_buffer(p, n).unwrap();
    assert_eq!(reg.get_buffer_private(p, n).unwrap(), keys, "still registered after one of two unregisters");
    reg.unregister_buffer(p, n).unwrap();
    assert!(reg.is_empty());
    assert_eq!(reg.unregister_buffer(p, n), Err(Status::NoElem));
    assert_eq!(reg.get_buffer_private(p, n), Err(Status::NoElem));
}

#[test]
fn private_lookup_finds_the_containing_buffer() {
    let ctx = Context::with_features(Features::RMA).unwrap();
    let reg = Registry::new(&ctx);
    let mut a = vec![0u8; 8192];
    let mut b = vec![0u8; 8192];
    // SAFETY: both buffers outlive the registry.
    unsafe {
        reg.register_buffer(a.as_mut_ptr(), a.len()).unwrap();
        reg.register_buffer(b.as_mut_ptr(), b.len()).unwrap();
    }
    // SAFETY: offsets inside `a`.
    let inner = unsafe { a.as_ptr().add(100) };
    let ka = reg.get_buffer_private(a.as_ptr(), a.len()).unwrap();
    assert_eq!(reg.get_buffer_private(inner, 50).unwrap(), ka);
    assert_ne!(reg.get_buffer_private(b.as_ptr(), 1).unwrap(), ka);
    // Sticking out of the buffer is not contained.
    assert_eq!(reg.get_buffer_private(inner, 8192), Err(Status::NoElem));
    // An unknown exact buffer cannot be unregistered, even inside a registered one.
    assert_eq!(reg.unregister_buffer(inner as *mut u8, 50), Err(Status::NoElem));
    drop(reg);
}

#[test]
fn bad_buffers_are_rejected() {
    let ctx = Context::with_features(Features::RMA).unwrap();
    let reg = Registry::new(&ctx);
    let mut buf = [0u8; 16];
    // SAFETY: both calls fail before registering anything.
    unsafe {
        assert_eq!(reg.register_buffer(std::ptr::null_mut(), 16), Err(Status::InvalidParam));
        assert_eq!(reg.register_buffer(buf.as_mut_ptr(), 0), Err(Status::InvalidParam));
    }
}

#[test]
fn process_wide_registry_after_init() {
    let mut buf = vec![0u8; 4096];
    assert_eq!(photon::get_buffer_private(buf.as_ptr(), 1), Err(Status::NoElem));
    let ctx = Context::with_features(Features::RMA).unwrap();
    photon::init(&ctx).unwrap();
    assert_eq!(photon::init(&ctx), Err(Status::AlreadyExists));
    // SAFETY: `buf` outlives the registration (removed below).
    unsafe { photon::register_buffer(buf.as_mut_ptr(), buf.len()).unwrap() };
    assert!(photon::get_buffer_private(buf.as_ptr(), 16).is_ok());
    photon::unregister_buffer(buf.as_mut_ptr(), buf.len()).unwrap();
    assert_eq!(photon::unregister_buffer(buf.as_mut_ptr(), buf.len()), Err(Status::NoElem));
}
