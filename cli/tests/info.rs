//! `zcx info` as a user runs it.

use std::process::Command;

fn zcx(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zcx"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run zcx");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn info_prints_every_section() {
    let (ok, out, err) = zcx(&["info"], &[]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("# zcx version {}", env!("CARGO_PKG_VERSION"))));
    assert!(out.contains("hugepages     2 MiB:"), "{out}");
    assert!(out.contains("RLIMIT_MEMLOCK:"));
    assert!(out.contains("shm    compiled  usable"), "{out}");
    assert!(out.contains("uring  compiled"));
    // Built with the `dpdk` feature the line says more (the DPDK test covers it).
    let dpdk = if cfg!(feature = "dpdk") { "dpdk   compiled" } else { "dpdk   not compiled" };
    assert!(out.contains(dpdk), "{out}");
    assert!(out.contains("ZCX_HUGEPAGES=try"));
}

#[test]
fn info_sections_can_be_chosen() {
    let (ok, out, _) = zcx(&["info", "-c"], &[("ZCX_RCACHE_ENABLE", "n")]);
    assert!(ok);
    assert!(out.contains("ZCX_RCACHE_ENABLE=n"));
    assert!(!out.contains("RLIMIT_MEMLOCK"));
}

#[test]
fn unknown_variables_are_warned_about() {
    let (ok, _, err) = zcx(&["info", "-v"], &[("ZCX_NO_SUCH_KNOB", "1")]);
    assert!(ok);
    assert!(err.contains("ZCX_NO_SUCH_KNOB"), "no warning: {err}");
}

/// The binary's own logger takes `tracing` directives from `ZCX_LOG_LEVEL`, so the library's
/// configuration check must take them too, or asking for one crate's debug output would stop
/// every command.
#[test]
fn a_log_filter_with_directives_is_taken_and_a_bad_one_refused() {
    let (ok, out, err) = zcx(&["info", "-c"], &[("ZCX_LOG_LEVEL", "warn,zcx_dataplane=debug")]);
    assert!(ok, "{err}");
    assert!(out.contains("ZCX_LOG_LEVEL=warn,zcx_dataplane=debug"), "{out}");
    let (ok, _, err) = zcx(&["info", "-c"], &[("ZCX_LOG_LEVEL", "zcx_dataplane=loud")]);
    assert!(!ok && err.contains("bad ZCX_* configuration"), "{err}");
}

#[test]
fn bad_configuration_is_an_error_with_a_message() {
    let (ok, _, err) = zcx(&["info"], &[("ZCX_HUGEPAGES", "sometimes")]);
    assert!(!ok);
    assert!(err.contains("bad ZCX_* configuration"), "{err}");
}

#[test]
fn mem_print_info_maps_and_describes() {
    let (ok, out, err) = zcx(&["info", "--mem", "1m"], &[("ZCX_HUGEPAGES", "no")]);
    assert!(ok, "{err}");
    assert!(out.contains("allocated 1048576 bytes"), "{out}");
    assert!(out.contains("page size 4 KiB"), "{out}");
    let (ok, _, err) = zcx(&["info", "--mem", "1m,cuda"], &[]);
    assert!(!ok);
    assert!(err.contains("Unsupported operation"), "{err}");
}
