//! `zcx perf` end to end with tiny iteration counts: every test runs, both processes exit, and
//! the output lines parse with positive values. No timing assertions (the machine is shared).

use std::collections::HashMap;
use std::process::Command;

const TESTS: [&str; 6] = ["tag_lat", "tag_bw", "put_lat", "put_bw", "am_lat", "am_bw"];

/// `name key=value ...` → (name, map).
fn parse(line: &str) -> (String, HashMap<String, f64>) {
    let mut words = line.split_ascii_whitespace();
    let name = words.next().expect("a test name").to_owned();
    let fields = words
        .map(|w| {
            let (k, v) = w.split_once('=').unwrap_or_else(|| panic!("not key=value: {w:?} in {line:?}"));
            (k.to_owned(), v.parse::<f64>().unwrap_or_else(|_| panic!("not a number: {w:?} in {line:?}")))
        })
        .collect();
    (name, fields)
}

fn run_perf(extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_zcx"))
        .args(["perf", "-n", "200", "-w", "20", "-b", "50", "--timeout", "60"])
        .args(extra)
        .output()
        .expect("run zcx perf");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "zcx perf failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn every_test_reports_positive_parseable_numbers() {
    // 64 KiB keeps the bandwidth tests quick while still exercising the windowed paths.
    let stdout = run_perf(&["-s", "64k"]);
    let mut lines = stdout.lines();
    assert!(lines.next().is_some_and(|l| l.starts_with("# zcx perf ")), "no header:\n{stdout}");
    let results: Vec<_> = lines.filter(|l| !l.starts_with('#')).map(parse).collect();
    let names: Vec<_> = results.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, TESTS, "\n{stdout}");
    for (name, fields) in &results {
        assert_eq!(fields["size"], 65536.0, "{name}");
        assert_eq!(fields["iters"], 200.0, "{name}");
        let keys: &[&str] = if name.ends_with("_lat") {
            &["latency_us", "avg_us", "min_us", "max_us", "batches"]
        } else {
            &["bandwidth_MBps", "bandwidth_GBps", "msg_rate", "elapsed_s", "window"]
        };
        for key in keys {
            let value = fields.get(*key).unwrap_or_else(|| panic!("{name}: no {key}\n{stdout}"));
            assert!(*value > 0.0, "{name}: {key}={value}\n{stdout}");
        }
        if name.ends_with("_lat") {
            assert_eq!(fields["batches"], 4.0, "{name}: 200 iterations in batches of 50");
        } else {
            let mbps = fields["bandwidth_MBps"];
            assert!(
                (fields["bandwidth_GBps"] * 1000.0 - mbps).abs() <= mbps * 0.01 + 1.0,
                "{name}: MB vs GB"
            );
        }
    }
}

#[test]
fn latency_tests_default_to_eight_bytes() {
    let stdout = run_perf(&["-t", "tag_lat,put_lat,am_lat"]);
    let results: Vec<_> = stdout.lines().filter(|l| !l.starts_with('#')).map(parse).collect();
    assert_eq!(results.len(), 3, "\n{stdout}");
    for (name, fields) in results {
        assert_eq!(fields["size"], 8.0, "{name}");
        assert!(fields["latency_us"] > 0.0, "{name}");
    }
}

#[test]
fn a_missing_server_fails_without_hanging() {
    // Nothing listens on port 1: the client must fail, not wait forever.
    let out = Command::new(env!("CARGO_BIN_EXE_zcx"))
        .args(["perf", "--client", "127.0.0.1", "-p", "1", "-t", "tag_lat", "-n", "10", "--timeout", "10"])
        .output()
        .expect("run zcx perf");
    assert!(!out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
}
