//! The parent side of the two-process DPDK tests: runs this test binary again as a server and a
//! client (each with its own EAL), waits for both, shows their output, cleans up after them, and
//! checks that both ran and succeeded. The test then checks what their logs say.
//!
//! Protocol with the children: the server writes `server.port` into the shared directory once it
//! listens; a child that cannot run prints a line `skipped: <reason>` and exits successfully.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Prints why the test cannot run here, or fails when `ZCX_REQUIRE_DPDK=1` says DPDK must work.
pub fn skip(reason: &str) {
    if std::env::var("ZCX_REQUIRE_DPDK").is_ok_and(|v| v == "1") {
        panic!("ZCX_REQUIRE_DPDK=1 but the DPDK test cannot run: {reason}");
    }
    eprintln!("skipped: {reason}");
}

/// The logs of a server and client that both ran and succeeded.
pub struct PairLogs {
    pub server: String,
    pub client: String,
}

/// A fresh directory for one run's memif socket, port file and logs.
pub fn run_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "zcx-dpdk-{label}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `test` of this binary as `server`, then (once it listens) as `client`, each configured by
/// `configure(role, command)`, for at most `patience` each. `eal_prefix(role)` is the EAL file
/// prefix of a child, whose (empty) runtime directory is removed afterwards: EAL is never cleaned
/// up in a worker's process. Returns `None` (after [`skip`]) when a child could not run DPDK;
/// panics when a child failed or timed out.
pub fn run_pair(
    dir: &Path,
    test: &str,
    label: &str,
    patience: Duration,
    eal_prefix: impl Fn(&str) -> String,
    configure: impl Fn(&str, &mut Command),
) -> Option<PairLogs> {
    let exe = std::env::current_exe().unwrap();
    let spawn = |role: &str| -> Child {
        let out = std::fs::File::create(dir.join(format!("{role}.log"))).unwrap();
        let mut command = Command::new(&exe);
        command
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        configure(role, &mut command);
        command.spawn().unwrap()
    };
    let log = |role: &str| std::fs::read_to_string(dir.join(format!("{role}.log"))).unwrap_or_default();
    let deadline = Instant::now() + patience * 2;
    let mut server = spawn("server");
    let port_file = dir.join("server.port");
    while !port_file.exists() && Instant::now() < deadline && server.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut client = port_file.exists().then(|| spawn("client"));
    let client_status = client.as_mut().map(|c| wait_until(c, deadline));
    let server_status = wait_until(&mut server, deadline);
    let (server_log, client_log) = (log("server"), log("client"));
    for (role, text) in [("server", &server_log), ("client", &client_log)] {
        for line in text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("skipped: ")) {
            eprintln!("[{label} {role}] {line}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
    for role in ["server", "client"] {
        let prefix = eal_prefix(role);
        let runtime = std::env::var("XDG_RUNTIME_DIR").map(PathBuf::from).unwrap_or_else(|_| "/tmp".into());
        for base in [PathBuf::from("/var/run/dpdk"), runtime.join("dpdk")] {
            let _ = std::fs::remove_dir(base.join(&prefix));
        }
    }
    for text in [&server_log, &client_log] {
        if let Some(line) = text.lines().find(|l| l.starts_with("skipped: ")) {
            skip(&format!("a DPDK process could not run: {}", &line["skipped: ".len()..]));
            return None;
        }
    }
    assert!(client.is_some(), "the server never wrote its listening port");
    assert!(client_status.flatten().is_some_and(|s| s.success()), "client failed: {client_status:?}");
    assert!(server_status.is_some_and(|s| s.success()), "server failed or timed out: {server_status:?}");
    Some(PairLogs { server: server_log, client: client_log })
}

/// Waits for `child` to exit until `deadline`, then kills it (our own child, through its handle).
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The bytes both sides send and check: position- and seed-dependent, with a slow component so
/// a misplaced 2 KiB block differs too.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(131) as u8).wrapping_add(seed).wrapping_add((i >> 11) as u8))
        .collect()
}
