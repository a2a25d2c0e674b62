//! Sets the cfg `zcx_dpdk_missing` when the `dpdk` feature is on but zcx-dpdk-sys was built
//! without DPDK (its build script says so in `DEP_RTE_EAL_MISSING`), so the code that calls into
//! DPDK is compiled out and the build still links.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(zcx_dpdk_missing)");
    println!("cargo::rerun-if-env-changed=DEP_RTE_EAL_MISSING");
    if std::env::var("DEP_RTE_EAL_MISSING").is_ok_and(|why| !why.is_empty()) {
        println!("cargo::rustc-cfg=zcx_dpdk_missing");
    }
}
