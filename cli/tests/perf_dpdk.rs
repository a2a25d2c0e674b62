//! `zcx perf --tls dpdk` end to end: without `ZCX_DPDK_EAL_ARGS` the launcher connects its server
//! child and its client by a `net_memif` pair; a few short tests with `--validate` must run on
//! the dpdk transport, print positive numbers, exit 0 and leave no temporary directory behind.
//! No timing assertions.
//!
//! Skips with `skipped: <reason>` when DPDK is not in the build or EAL cannot start here;
//! `ZCX_REQUIRE_DPDK=1` turns a skip into a failure.
#![cfg(feature = "dpdk")]

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn require_dpdk() -> bool {
    std::env::var("ZCX_REQUIRE_DPDK").as_deref() == Ok("1")
}

fn skip(reason: &str) {
    assert!(!require_dpdk(), "ZCX_REQUIRE_DPDK=1 but zcx perf --tls dpdk cannot run: {reason}");
    println!("skipped: {reason}");
}

/// `zcx perf` with the user's DPDK settings removed (the launcher makes its own).
fn perf(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_zcx"));
    command
        .arg("perf")
        .args(args)
        .env_remove("ZCX_DPDK_EAL_ARGS")
        .env_remove("ZCX_DPDK_PORT")
        .env_remove("ZCX_TLS")
        .stdin(Stdio::null());
    command
}

#[test]
fn perf_over_dpdk_between_two_processes_validates_and_reports() {
    if let Some(why) = zcx_dataplane::dpdk::dpdk_missing() {
        skip(&format!("zcx was built without DPDK: {why}"));
        return;
    }
    let tests = ["tag_lat", "put_lat", "tag_bw", "get_bw"];
    let child = perf(&[
        "--tls",
        "dpdk",
        "-t",
        &tests.join(","),
        "-s",
        "64k",
        "-n",
        "200",
        "-w",
        "20",
        "-b",
        "50",
        "--validate",
        "--timeout",
        "60",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("run zcx perf");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait for zcx perf");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The worker's message when EAL or the port cannot start (not root, no memory, ...).
    if !out.status.success() && stderr.contains("DPDK transport unavailable") {
        skip(&format!("DPDK could not start here: {}", stderr.trim()));
        return;
    }
    assert!(out.status.success(), "zcx perf --tls dpdk failed ({}):\n{stdout}\n{stderr}", out.status);

    let header = stdout.lines().next().unwrap_or_default();
    assert!(header.starts_with("# zcx perf ") && header.contains(" tls=dpdk"), "{stdout}");
    assert!(header.contains("dpdk=memif-pair"), "{stdout}");
    assert!(stdout.lines().any(|l| l == "# endpoint transports=dpdk"), "{stdout}");
    for test in tests {
        let line = stdout
            .lines()
            .find(|l| l.split_ascii_whitespace().next() == Some(test))
            .unwrap_or_else(|| panic!("no {test} line:\n{stdout}"));
        let key = if test.ends_with("_lat") { "latency_us" } else { "bandwidth_MBps" };
        let value: f64 = line
            .split_ascii_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{test}: no {key} in {line:?}"))
            .parse()
            .unwrap_or_else(|_| panic!("{test}: {key} is not a number in {line:?}"));
        assert!(value > 0.0, "{test}: {key}={value}");
        assert!(line.contains(" size=65536 "), "{line}");
    }

    // The memif socket's directory and both sides' EAL runtime directories are gone.
    let tmp = std::env::temp_dir();
    let prefix = format!("zcx-perf-memif-{pid}-");
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    for role in ["server", "client"] {
        let runtime = PathBuf::from("/var/run/dpdk").join(format!("zcx-perf-{role}-{pid}"));
        assert!(!runtime.exists(), "left behind: {}", runtime.display());
    }
}

#[test]
fn perf_over_dpdk_needs_eal_arguments_when_one_side_runs_alone() {
    let out = perf(&["--tls", "dpdk", "--server", "-p", "1"]).output().expect("run zcx perf");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    if zcx_dataplane::dpdk::dpdk_missing().is_some() {
        assert!(stderr.contains("without DPDK"), "{stderr}");
    } else {
        assert!(stderr.contains("needs ZCX_DPDK_EAL_ARGS and ZCX_DPDK_PORT"), "{stderr}");
    }
}
