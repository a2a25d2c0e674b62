//! `zcx perf --endpoints N` end to end with a few endpoints and iterations, over shared memory and
//! over TCP: the test runs, names its endpoint count, reports positive latencies and what each
//! endpoint costs both sides, within the descriptor budget the tool checks the limit against; and
//! the option is refused for tests it does not apply to. No timing assertions (the machine is
//! shared).

use std::collections::HashMap;
use std::process::{Command, Output};

/// Descriptors the tool budgets per endpoint (`FDS_PER_ENDPOINT` in `cli/src/perf/many.rs`).
const FDS_PER_ENDPOINT: f64 = 4.0;

fn zcx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zcx")).args(args).output().expect("run zcx")
}

/// `key=value` words of `line` (other words ignored).
fn fields(line: &str) -> HashMap<String, f64> {
    line.split_ascii_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter_map(|(k, v)| Some((k.to_owned(), v.parse::<f64>().ok()?)))
        .collect()
}

fn run_endpoints(tls: &str, endpoints: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "perf",
        "-t",
        "tag_lat",
        "--endpoints",
        endpoints,
        "-n",
        "400",
        "-w",
        "40",
        "-b",
        "50",
        "--timeout",
        "60",
    ];
    args.extend_from_slice(&["--tls", tls]);
    args.extend_from_slice(extra);
    let out = zcx(&args);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "zcx {args:?} failed ({}):\n{stdout}\n{stderr}", out.status);
    stdout.into_owned()
}

/// The tag_lat record and the per-endpoint line of a run over `endpoints` endpoints.
fn check_run(stdout: &str, transport: &str, endpoints: f64) -> HashMap<String, f64> {
    assert!(stdout.contains(&format!("# endpoint transports={transport}")), "not on {transport}:\n{stdout}");
    let record =
        stdout.lines().find(|l| l.starts_with("tag_lat ")).unwrap_or_else(|| panic!("no record:\n{stdout}"));
    let lat = fields(record);
    assert_eq!(lat["endpoints"], endpoints, "{record}");
    assert_eq!(lat["iters"], 400.0, "{record}");
    for key in ["latency_us", "avg_us", "min_us", "p50_us", "max_us"] {
        assert!(lat[key] > 0.0, "{key} in {record}");
    }
    assert!(lat["min_us"] <= lat["p50_us"] && lat["p50_us"] <= lat["max_us"], "{record}");
    let cost_line = stdout
        .lines()
        .find(|l| l.starts_with("# per endpoint:"))
        .unwrap_or_else(|| panic!("no per-endpoint line:\n{stdout}"));
    let cost = fields(cost_line);
    assert_eq!(cost["endpoints"], endpoints, "{cost_line}");
    assert_eq!(
        cost["measured_over"],
        endpoints - 1.0,
        "the session's own endpoint was there before: {cost_line}"
    );
    for side in ["client", "server"] {
        let fds = cost[&format!("{side}_fds")];
        assert!(fds > 0.0 && fds <= FDS_PER_ENDPOINT, "{side} descriptors per endpoint: {cost_line}");
        assert!(cost[&format!("{side}_rss_kib")] >= 0.0, "{cost_line}");
    }
    cost
}

#[test]
fn endpoints_over_shared_memory_run_validated_and_report_their_cost() {
    // Past eight links each side watches the later rings through its board (shm/board.rs), so
    // validated messages cross rings watched both ways between two processes.
    let stdout = run_endpoints("shm", "16", &["--validate"]);
    let cost = check_run(&stdout, "shm", 16.0);
    // Each endpoint maps a segment of its own on both sides.
    assert!(cost["client_vsz_kib"] > 0.0 && cost["server_vsz_kib"] > 0.0, "{stdout}");
}

#[test]
fn endpoints_over_tcp_run_and_report_their_cost() {
    let stdout = run_endpoints("uring", "4", &[]);
    check_run(&stdout, "uring", 4.0);
}

#[test]
fn endpoints_are_refused_for_other_tests() {
    let out = zcx(&["perf", "-t", "tag_bw", "--endpoints", "4", "-n", "10"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--endpoints runs tag_lat and tag_sync_lat only"), "{stderr}");
    let out = zcx(&["perf", "-t", "tag_lat", "--endpoints", "0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
