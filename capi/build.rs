//! The shared library answers to UCX's SONAME, so a program linked against UCX's libucp loads it
//! when its directory comes first on `LD_LIBRARY_PATH`.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libucp.so.0");
}
