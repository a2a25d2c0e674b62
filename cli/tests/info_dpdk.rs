//! `zcx info` with DPDK: it starts EAL with `ZCX_DPDK_EAL_ARGS` and lists the ports it finds,
//! with their drivers (the `dpdk` feature; Debian's DPDK 22.11).
#![cfg(feature = "dpdk")]

use std::process::Command;

#[test]
fn info_lists_the_dpdk_ports_eal_finds() {
    if let Some(why) = zcx_dataplane::dpdk::dpdk_missing() {
        assert!(std::env::var("ZCX_REQUIRE_DPDK").as_deref() != Ok("1"), "DPDK is required here: {why}");
        println!("skipped: zcx was built without DPDK: {why}");
        return;
    }
    // The file prefix is `zcx-info-<this test's pid>`.
    let eal = zcx_dataplane::dpdk::vdev_eal_args("info", &["--vdev=net_ring0".to_owned()]).join(" ");
    let out = Command::new(env!("CARGO_BIN_EXE_zcx"))
        .arg("info")
        .env("ZCX_DPDK_EAL_ARGS", &eal)
        .env("ZCX_DPDK_PORT", "net_ring0")
        .output()
        .expect("run zcx info");
    // EAL is never cleaned up in a zcx process, so its (empty) runtime directory stays: remove it.
    let _ = std::fs::remove_dir(format!("/var/run/dpdk/zcx-info-{}", std::process::id()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "zcx info failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("dpdk   compiled  1 port(s), ZCX_DPDK_PORT=net_ring0"), "{stdout}");
    assert!(stdout.contains("port 0 net_ring0 driver net_ring mac "), "{stdout}");
    // Without EAL arguments it only says how to get the list.
    let out =
        Command::new(env!("CARGO_BIN_EXE_zcx")).arg("info").env_remove("ZCX_DPDK_EAL_ARGS").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("set ZCX_DPDK_EAL_ARGS to start EAL and list its ports"), "{stdout}");
}
