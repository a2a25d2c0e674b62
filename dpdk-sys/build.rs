//! Finds DPDK 22.11 with pkg-config, links it, and compiles the C shim. Never runs bindgen: `src/bindings.rs` is committed (see `regen.sh`).
//!
//! Without a usable DPDK the crate still builds, with the cfg `zcx_dpdk_missing` set and the reason
//! in the `ZCX_DPDK_MISSING` env var of the crate, so a workspace build needs no system package
//! and DPDK tests can say why they skipped. With `ZCX_REQUIRE_DPDK=1` in the environment a missing
//! DPDK is a build error instead.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(zcx_dpdk_missing)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=shim/shim.c");
    println!("cargo::rerun-if-changed=shim/shim.h");
    println!("cargo::rerun-if-env-changed=ZCX_REQUIRE_DPDK");
    println!("cargo::rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo::rerun-if-env-changed=PKG_CONFIG");

    match probe() {
        Ok(()) => {
            println!("cargo::rustc-env=ZCX_DPDK_MISSING=");
            println!("cargo::metadata=missing=");
        }
        Err(reason) => {
            if env::var("ZCX_REQUIRE_DPDK").is_ok_and(|v| v == "1") {
                panic!("ZCX_REQUIRE_DPDK=1 but DPDK is not usable: {reason}");
            }
            println!("cargo::warning=zcx-dpdk-sys built without DPDK: {reason}");
            println!("cargo::rustc-cfg=zcx_dpdk_missing");
            println!("cargo::rustc-env=ZCX_DPDK_MISSING={reason}");
            // Seen by the build scripts of dependents as DEP_RTE_EAL_MISSING, so a crate that calls
            // into DPDK can compile that code out as this one does.
            println!("cargo::metadata=missing={reason}");
        }
    }
}

/// Finds DPDK, emits its link flags and builds the shim, or says why it cannot.
fn probe() -> Result<(), String> {
    let lib = pkg_config::Config::new()
        .range_version("22.11".."22.12")
        .cargo_metadata(false)
        .probe("libdpdk")
        .map_err(|e| {
            format!(
                "pkg-config found no libdpdk 22.11 (apt-get install libdpdk-dev pkg-config): {}",
                e.to_string().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
            )
        })?;
    let cflags = pkg_config_output(&["--cflags", "libdpdk"])?;

    for path in &lib.link_paths {
        println!("cargo::rustc-link-search=native={}", path.display());
    }
    // Linked as needed: only the libraries whose symbols are used become DT_NEEDED. The drivers
    // (PMDs) export nothing zcx calls, so they are loaded at run time instead; see lib.rs.
    for name in &lib.libs {
        println!("cargo::rustc-link-lib=dylib={name}");
    }

    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let mut build = cc::Build::new();
    build.file(manifest.join("shim/shim.c")).include(manifest.join("shim")).warnings(true);
    // The raw cflags, not just include paths: DPDK needs `-include rte_config.h` and the ISA
    // baseline it was built for (`-march=...`) to compile its inline functions.
    for flag in cflags.split_whitespace() {
        build.flag(flag);
    }
    build.try_compile("zcx_dpdk_shim").map_err(|e| format!("compiling the DPDK shim failed: {e}"))?;
    Ok(())
}

/// Runs pkg-config (or `$PKG_CONFIG`) with `args` and returns its standard output.
fn pkg_config_output(args: &[&str]) -> Result<String, String> {
    let program = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_owned());
    let out = Command::new(&program).args(args).output().map_err(|e| format!("running {program}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{program} {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr)));
    }
    String::from_utf8(out.stdout).map_err(|_| format!("{program} printed non-UTF-8 flags"))
}
