//! `zcx perf` end to end with tiny iteration counts: every test runs, both processes exit, the
//! output parses in each format with positive values, bad options fail with exit code 2 and a
//! message saying what is wrong, and `--validate` catches a corrupted byte. No timing
//! assertions (the machine is shared).

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader};
use std::process::{Command, Output, Stdio};

const TESTS: [&str; 14] = [
    "tag_lat",
    "tag_sync_lat",
    "tag_bw",
    "put_lat",
    "put_bw",
    "get_lat",
    "get_bw",
    "atomic_add_lat",
    "fadd_lat",
    "cswap_lat",
    "am_lat",
    "am_bw",
    "stream_lat",
    "stream_bw",
];
const LATENCY_KEYS: [&str; 9] =
    ["latency_us", "avg_us", "min_us", "p50_us", "p99_us", "p999_us", "max_us", "batches", "iters"];
const BANDWIDTH_KEYS: [&str; 5] = ["bandwidth_MBps", "bandwidth_GBps", "msg_rate", "elapsed_s", "window"];

fn is_latency(name: &str) -> bool {
    name.ends_with("_lat")
}

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

fn zcx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zcx")).args(args).output().expect("run zcx")
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn run_perf(extra: &[&str]) -> String {
    let mut args = vec!["perf", "-b", "50", "--timeout", "60"];
    if !extra.contains(&"-n") {
        args.extend_from_slice(&["-n", "200"]);
    }
    if !extra.contains(&"-w") {
        args.extend_from_slice(&["-w", "20"]);
    }
    args.extend_from_slice(extra);
    let out = zcx(&args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "zcx perf {extra:?} failed ({}):\n{stdout}\n{stderr}", out.status);
    stdout
}

fn results(stdout: &str) -> Vec<(String, HashMap<String, f64>)> {
    stdout.lines().filter(|l| !l.starts_with('#')).map(parse).collect()
}

fn assert_positive(name: &str, fields: &HashMap<String, f64>, keys: &[&str], context: &str) {
    for key in keys {
        let value = fields.get(*key).unwrap_or_else(|| panic!("{name}: no {key}\n{context}"));
        assert!(*value > 0.0, "{name}: {key}={value}\n{context}");
    }
}

#[test]
fn every_test_reports_positive_parseable_numbers() {
    // 64 KiB keeps the bandwidth tests quick while still exercising the windowed paths.
    let stdout = run_perf(&["-s", "64k"]);
    assert!(stdout.lines().next().is_some_and(|l| l.starts_with("# zcx perf ")), "no header:\n{stdout}");
    let results = results(&stdout);
    let names: Vec<_> = results.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, TESTS, "\n{stdout}");
    for (name, fields) in &results {
        // Atomic tests move one operand: a size for every test runs them at 8 bytes.
        let size = if name.contains("add") || name.contains("cswap") { 8.0 } else { 65536.0 };
        assert_eq!(fields["size"], size, "{name}");
        assert_eq!(fields["iters"], 200.0, "{name}");
        if is_latency(name) {
            assert_positive(name, fields, &LATENCY_KEYS, &stdout);
            assert_eq!(fields["batches"], 4.0, "{name}: 200 iterations in batches of 50");
            assert!(fields["min_us"] <= fields["p50_us"] && fields["p50_us"] <= fields["p99_us"], "{name}");
            assert!(fields["p99_us"] <= fields["p999_us"] && fields["p999_us"] <= fields["max_us"], "{name}");
        } else {
            assert_positive(name, fields, &BANDWIDTH_KEYS, &stdout);
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
    let latency: Vec<&str> = TESTS.iter().copied().filter(|t| is_latency(t)).collect();
    let stdout = run_perf(&["-t", &latency.join(",")]);
    let results = results(&stdout);
    assert_eq!(results.len(), latency.len(), "\n{stdout}");
    for (name, fields) in results {
        assert_eq!(fields["size"], 8.0, "{name}");
        assert!(fields["latency_us"] > 0.0, "{name}");
    }
}

#[test]
fn a_missing_server_fails_without_hanging() {
    // Nothing listens on port 1: the client must fail, not wait forever.
    let out =
        zcx(&["perf", "--client", "127.0.0.1", "-p", "1", "-t", "tag_lat", "-n", "10", "--timeout", "10"]);
    assert!(!out.status.success());
    assert!(!out.stderr.is_empty());
}

#[test]
fn bad_options_exit_with_code_2_and_say_what_is_wrong() {
    let cases: [(&[&str], &str); 9] = [
        (&["-t", "tag_bw", "-s", "0"], "message size 0 is too small"),
        (&["-s", "0"], "tag_bw: message size 0 is too small"),
        (&["-t", "no_such_test"], "invalid value 'no_such_test'"),
        (&["-W", "0"], "the window must be 1 to 1024"),
        (&["-t", "tag_lat", "-s", "1g"], "above the latency tests' cap"),
        (&["-t", "fadd_lat", "-s", "16,1k"], "operand size, 4 or 8 bytes"),
        (&["--sweep", "64:8"], "MIN is larger than MAX"),
        (&["--size", "8", "--sweep", "8:64"], "cannot be used with"),
        (&["--plot", "out.png"], "ending in .svg"),
    ];
    for (args, expected) in cases {
        let mut all = vec!["perf", "-n", "10"];
        all.extend_from_slice(args);
        let out = zcx(&all);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}\n{stdout}\n{stderr}", out.status);
        assert!(stderr.contains(expected), "{args:?}: expected {expected:?} in:\n{stderr}");
        assert!(stdout.is_empty(), "{args:?}: nothing runs:\n{stdout}");
    }
}

#[test]
fn validation_passes_on_every_test_that_moves_data() {
    // 100 KiB: above the rendezvous threshold, so placed and pulled payloads are checked too.
    for size in ["100k", "40"] {
        let stdout = run_perf(&["--validate", "-n", "30", "-w", "5", "-W", "4", "-s", size]);
        assert_eq!(results(&stdout).len(), TESTS.len(), "size {size}:\n{stdout}");
    }
    let stdout = run_perf(&["--validate", "-n", "20", "-w", "2", "-W", "4", "-s", "4k", "--mem-prereg=no"]);
    assert_eq!(results(&stdout).len(), TESTS.len(), "heap buffers:\n{stdout}");
}

#[test]
fn validation_catches_a_corrupted_byte_and_names_the_iteration() {
    for test in [
        "tag_lat",
        "tag_bw",
        "put_lat",
        "put_bw",
        "am_lat",
        "am_bw",
        "stream_lat",
        "stream_bw",
        "tag_sync_lat",
    ] {
        for size in ["64", "100k"] {
            let out = zcx(&[
                "perf",
                "-t",
                test,
                "-s",
                size,
                "-n",
                "12",
                "-w",
                "0",
                "-W",
                "4",
                "--validate",
                "--corrupt-iter",
                "9",
                "--timeout",
                "30",
            ]);
            let (stdout, stderr) = text(&out);
            assert_eq!(out.status.code(), Some(1), "{test} {size}: {}\n{stdout}\n{stderr}", out.status);
            assert!(
                stderr.contains(&format!("validation failed: {test} iteration 9 ")),
                "{test} {size}: no iteration named:\n{stderr}"
            );
        }
    }
    // Without --validate the same corruption goes unnoticed: the check is what catches it.
    run_perf(&["-t", "tag_lat", "-s", "64", "--corrupt-iter", "9"]);
}

#[test]
fn csv_has_a_header_and_a_record_per_test_and_size() {
    let stdout = run_perf(&["--csv", "-t", "tag_lat,get_bw,fadd_lat", "-s", "8,1k"]);
    let mut lines = stdout.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    for field in ["test", "size", "iters", "mem", "tls", "latency_us", "p99_us", "p999_us", "bandwidth_MBps"]
    {
        assert!(header.contains(&field), "{field} missing from the header {header:?}");
    }
    let rows: Vec<HashMap<&str, &str>> =
        lines.map(|l| header.iter().copied().zip(l.split(',')).collect::<HashMap<_, _>>()).collect();
    let seen: Vec<(&str, &str)> = rows.iter().map(|r| (r["test"], r["size"])).collect();
    // fadd_lat takes only the sizes of the list an atomic can have: 8.
    assert_eq!(
        seen,
        [("tag_lat", "8"), ("tag_lat", "1024"), ("get_bw", "8"), ("get_bw", "1024"), ("fadd_lat", "8")]
    );
    for row in &rows {
        let keys: &[&str] = if is_latency(row["test"]) {
            &["latency_us", "avg_us", "min_us", "p50_us", "p99_us", "p999_us", "max_us"]
        } else {
            &["bandwidth_MBps", "msg_rate", "elapsed_s"]
        };
        for key in keys {
            let value: f64 = row[key].parse().unwrap_or_else(|_| panic!("{key} of {row:?}"));
            assert!(value > 0.0, "{key} of {row:?}");
        }
        assert_eq!(row.len(), header.len(), "{row:?}");
    }
}

#[test]
fn json_has_one_object_per_test_with_positive_numbers() {
    let stdout =
        run_perf(&["--json", "-t", "stream_lat,stream_bw,cswap_lat", "-s", "4k,8", "--tls", "uring"]);
    let records: Vec<serde_json::Value> =
        stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    let seen: Vec<(&str, u64)> =
        records.iter().map(|r| (r["test"].as_str().unwrap(), r["size"].as_u64().unwrap())).collect();
    assert_eq!(
        seen,
        [("stream_lat", 4096), ("stream_lat", 8), ("stream_bw", 4096), ("stream_bw", 8), ("cswap_lat", 8)]
    );
    for r in &records {
        assert_eq!(r["tls"], "uring", "{r}");
        let keys: &[&str] = if is_latency(r["test"].as_str().unwrap()) {
            &["latency_us", "avg_us", "min_us", "p50_us", "p99_us", "p999_us", "max_us"]
        } else {
            &["bandwidth_MBps", "bandwidth_GBps", "msg_rate", "elapsed_s"]
        };
        for key in keys {
            // GB/s is rounded to 3 digits like every output format: a small message in a debug
            // build on a loaded machine may stream below 1 MB/s and print 0.000 there.
            let floor_ok = |v: f64| if *key == "bandwidth_GBps" { v >= 0.0 } else { v > 0.0 };
            assert!(r[key].as_f64().is_some_and(floor_ok), "{key} of {r}");
        }
    }
}

#[test]
fn a_sweep_runs_every_size_and_plots_them() {
    let dir = std::env::temp_dir().join(format!("zcx-perf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("sweep.svg");
    let stdout =
        run_perf(&["-t", "tag_lat,tag_bw", "--sweep", "8:1k", "-n", "20", "--plot", svg.to_str().unwrap()]);
    let sizes: Vec<(String, f64)> = results(&stdout).into_iter().map(|(n, f)| (n, f["size"])).collect();
    let ladder = [8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0];
    let expected: Vec<(String, f64)> =
        ["tag_lat", "tag_bw"].iter().flat_map(|t| ladder.iter().map(move |s| (t.to_string(), *s))).collect();
    assert_eq!(sizes, expected);
    let drawn = std::fs::read_to_string(&svg).expect("the plot");
    assert!(drawn.starts_with("<svg") && drawn.contains("tag_lat (zcx)") && drawn.contains("tag_bw (zcx)"));

    // `zcx plot` draws a CSV with a source column (what the comparison script writes): one size
    // per test, so a bar per source and test, labelled with its value.
    let csv = dir.join("compare.csv");
    std::fs::write(&csv, "source,test,size,latency_us,bandwidth_MBps\nucx,tag_lat,8,3.5,\nzcx,tag_lat,8,4.0,\nucx,tag_bw,1048576,,4000\n")
        .unwrap();
    let out_svg = dir.join("compare.svg");
    let out = zcx(&["plot", "--input", csv.to_str().unwrap(), "--out", out_svg.to_str().unwrap()]);
    assert!(out.status.success(), "{:?}", text(&out));
    let drawn = std::fs::read_to_string(&out_svg).expect("the plot");
    let texts: Vec<&str> = drawn
        .split("<text")
        .skip(1)
        .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim()))
        .collect();
    for text in ["tag_lat", "tag_bw", "ucx", "zcx", "3.50", "4.00", "4000"] {
        assert!(texts.contains(&text), "{text} missing from the plot's texts {texts:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The server child of a test, killed and reaped if the test fails first.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn separate_server_and_client_run_the_new_tests() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_zcx"))
        .args(["perf", "--server", "-p", "0", "--no-pin", "--timeout", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the server");
    let stdout = child.stdout.take().unwrap();
    let mut server = Server(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("the server's first line");
    let port = line.trim().strip_prefix("zcx-perf-server listening port=").expect("the port line").to_owned();
    let tests = "tag_sync_lat,get_lat,get_bw,atomic_add_lat,fadd_lat,cswap_lat,stream_lat,stream_bw";
    let out = zcx(&[
        "perf",
        "--client",
        "127.0.0.1",
        "-p",
        &port,
        "--no-pin",
        "-t",
        tests,
        "-n",
        "50",
        "-w",
        "5",
        "-b",
        "10",
        "--validate",
        "--timeout",
        "60",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "client failed:\n{stdout}\n{stderr}");
    let names: Vec<String> = results(&stdout).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, tests.split(',').collect::<Vec<_>>());
    let status = server.0.wait().expect("the server exits after its client");
    assert!(status.success(), "server: {status}");
}

#[cfg(not(feature = "dpdk"))]
#[test]
fn tls_dpdk_without_the_dpdk_feature_says_how_to_get_it() {
    let out = zcx(&["perf", "--tls", "dpdk", "-t", "tag_lat", "-n", "10"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("built without DPDK support") && stderr.contains("zcx-cli/dpdk"), "{stderr}");
}
