//! Finds libibverbs (rdma-core 44) with pkg-config, links it, and compiles the C shim. Never runs
//! bindgen: `src/bindings.rs` is committed (see `regen.sh`).
//!
//! Without a usable libibverbs the crate still builds, with the cfg `zcx_verbs_missing` set and the
//! reason in the crate's `ZCX_VERBS_MISSING` env var, so a workspace build needs no system package
//! and verbs tests can say why they skipped. With `ZCX_REQUIRE_VERBS=1` in the environment a
//! missing libibverbs is a build error instead.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(zcx_verbs_missing)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=shim/shim.c");
    println!("cargo::rerun-if-changed=shim/shim.h");
    println!("cargo::rerun-if-env-changed=ZCX_REQUIRE_VERBS");
    println!("cargo::rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo::rerun-if-env-changed=PKG_CONFIG");

    match probe() {
        Ok(()) => {
            println!("cargo::rustc-env=ZCX_VERBS_MISSING=");
            println!("cargo::metadata=missing=");
        }
        Err(reason) => {
            if env::var("ZCX_REQUIRE_VERBS").is_ok_and(|v| v == "1") {
                panic!("ZCX_REQUIRE_VERBS=1 but libibverbs is not usable: {reason}");
            }
            println!("cargo::warning=zcx-verbs-sys built without libibverbs: {reason}");
            println!("cargo::rustc-cfg=zcx_verbs_missing");
            println!("cargo::rustc-env=ZCX_VERBS_MISSING={reason}");
            // Seen by the build scripts of dependents as DEP_IBVERBS_MISSING, so a crate that calls
            // into libibverbs can compile that code out as this one does.
            println!("cargo::metadata=missing={reason}");
        }
    }
}

/// Finds libibverbs, emits its link flags and builds the shim, or says why it cannot.
fn probe() -> Result<(), String> {
    let lib = pkg_config::Config::new()
        .range_version("1.14.44".."1.14.45")
        .cargo_metadata(false)
        .probe("libibverbs")
        .map_err(|e| {
            format!(
                "pkg-config found no libibverbs of rdma-core 44 (apt-get install libibverbs-dev pkg-config): {}",
                e.to_string().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
            )
        })?;
    for path in &lib.link_paths {
        println!("cargo::rustc-link-search=native={}", path.display());
    }
    for name in &lib.libs {
        println!("cargo::rustc-link-lib=dylib={name}");
    }
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let mut build = cc::Build::new();
    build.file(manifest.join("shim/shim.c")).include(manifest.join("shim")).warnings(true);
    for path in &lib.include_paths {
        build.include(path);
    }
    build.try_compile("zcx_verbs_shim").map_err(|e| format!("compiling the verbs shim failed: {e}"))?;
    Ok(())
}
