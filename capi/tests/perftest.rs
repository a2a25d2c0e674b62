//! UCX 1.13's own `ucx_perftest` (package `ucx-utils`), unmodified, on the libucp under test: for
//! each case of a matrix of tests, sizes and options, a server (`-p PORT`) and a client
//! (`localhost -p PORT ...`), or one process for loopback (`-l`). Each process must map the
//! library under test (its `/proc/<pid>/maps`, checked while it runs), both must exit 0 within
//! [`TIMEOUT`], and the client must print its `Final:` result line with the iterations it was
//! asked for. Every group runs twice: with UCX's default transports (`UCX_TLS` unset: two
//! processes on one host use shared memory, a loopback process `self`) and with `UCX_TLS=tcp`,
//! except the one-sided tests with an idle target (`-o`), which run over shared memory only:
//! over TCP the target executes each put and atomic, so they hang on UCX 1.13's own library.
//!
//! Each case is printed (`case: ...`) before it runs, and a group that fails lists the cases that
//! failed, each as the command lines to run by hand. After a case that hangs, the rest of its
//! group is not run: each would wait out the timeout too. Prints `skipped:` without
//! `ucx_perftest` (a failure with `ZCX_REQUIRE_CAPI=1`).
//!
//! Left out because they hang on UCX 1.13's own library too: `ucp_put_lat` with an iov on either
//! side, `ucp_put_bw` with an iov receive side (`-D iov,iov`), `-E sleep` on the one-sided tests
//! (put, get, atomics), which the target side sleeps through: its memory is written without an
//! event to wake it (always over shared memory, often over TCP), and the one-sided tests with
//! `-T 2 -M multi` over TCP (one run in four or five: a connection to the server refused, or a
//! flush that times out).
//!
//! Each group has its own range of ports, each case its own port, so the groups run in parallel.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Child, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const PERFTEST: &str = "/usr/bin/ucx_perftest";
/// How long one process of a case may run. A case takes well under a second on UCX's library;
/// this leaves room for a debug build and a busy machine.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Below Linux's ephemeral range (32768 and up), so no TCP connection of a running test, UCX's
/// own included, holds a port a later case listens on.
const PORT_BASE: u16 = 27300;
/// Ports per group and transport: more than the largest group has cases.
const PORTS_PER_GROUP: u16 = 50;

const MIB: &str = "1048576";
/// 1 MiB as two entries of an iov.
const MIB_IN_TWO: &str = "524288,524288";
/// Eight bytes as two entries of an iov.
const EIGHT_IN_TWO: &str = "3,5";

/// Every test `ucx_perftest` 1.13 runs over UCP.
const ALL_TESTS: &[&str] = &[
    "tag_lat",
    "tag_bw",
    "tag_sync_lat",
    "ucp_put_lat",
    "ucp_put_bw",
    "ucp_get",
    "ucp_add",
    "ucp_fadd",
    "ucp_swap",
    "ucp_cswap",
    "ucp_am_lat",
    "ucp_am_bw",
    "stream_lat",
    "stream_bw",
];
/// The tests that move a whole message, run at 1 MiB besides 8 bytes.
const BULK_TESTS: &[&str] = &["tag_bw", "ucp_put_bw", "ucp_get", "ucp_am_bw", "stream_bw"];
/// The tests in which the receiver takes part (tag, active message, stream).
const TWO_SIDED: &[&str] =
    &["tag_lat", "tag_bw", "tag_sync_lat", "ucp_am_lat", "ucp_am_bw", "stream_lat", "stream_bw"];

#[derive(Clone, Copy, PartialEq)]
enum Tls {
    /// `UCX_TLS` unset.
    Default,
    /// `UCX_TLS=tcp`.
    Tcp,
}

/// One run of `ucx_perftest`: the client's options (test, size, iterations, the rest).
struct Case {
    args: Vec<String>,
    iterations: u64,
    loopback: bool,
}

/// `test` at `sizes` (`-s`, a list for an iov) with `extra` options. Bulk sizes run fewer
/// iterations: enough to move several messages past the warm-up, few enough for a debug build.
fn case(test: &str, sizes: &str, extra: &[&str]) -> Case {
    let total: u64 = sizes.split(',').map(|s| s.parse::<u64>().expect("a size")).sum();
    let (iterations, warmup) = if total >= 65536 { (20, 2) } else { (1000, 100) };
    let mut args: Vec<String> = ["-t", test, "-s", sizes].iter().map(|s| s.to_string()).collect();
    args.extend(["-n".to_owned(), iterations.to_string(), "-w".to_owned(), warmup.to_string()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let loopback = extra.contains(&"-l");
    Case { args, iterations, loopback }
}

/// Tag, active-message and stream tests at 8 bytes and 1 MiB, the stream ones with both receive
/// calls.
fn two_sided() -> Vec<Case> {
    let mut cases = Vec::new();
    for test in ["tag_lat", "tag_bw", "tag_sync_lat", "ucp_am_lat", "ucp_am_bw"] {
        for size in ["8", MIB] {
            cases.push(case(test, size, &[]));
        }
    }
    for test in ["stream_lat", "stream_bw"] {
        for mode in ["recv", "recv_data"] {
            for size in ["8", MIB] {
                cases.push(case(test, size, &["-r", mode]));
            }
        }
    }
    cases
}

/// Put and get at 8 bytes and 1 MiB.
fn one_sided() -> Vec<Case> {
    ["ucp_put_lat", "ucp_put_bw", "ucp_get"]
        .iter()
        .flat_map(|test| ["8", MIB].map(|size| case(test, size, &[])))
        .collect()
}

/// The four atomics on 32- and 64-bit operands.
fn atomics() -> Vec<Case> {
    ["ucp_add", "ucp_fadd", "ucp_swap", "ucp_cswap"]
        .iter()
        .flat_map(|test| ["4", "8"].map(|size| case(test, size, &[])))
        .collect()
}

/// `-o`: put, get and the atomics with the target's worker not progressed while they run (only
/// in `ucx_perftest`'s barriers and flushes).
fn idle_target() -> Vec<Case> {
    let mut cases: Vec<Case> = ["ucp_put_lat", "ucp_put_bw", "ucp_get"]
        .iter()
        .flat_map(|test| ["8", MIB].map(|size| case(test, size, &["-o"])))
        .collect();
    cases.extend(
        ["ucp_add", "ucp_fadd", "ucp_swap", "ucp_cswap"]
            .iter()
            .flat_map(|test| ["4", "8"].map(|size| case(test, size, &["-o"]))),
    );
    cases
}

/// Scatter-gather lists (`-D iov,iov`) of two entries, small and 1 MiB, and of one.
fn iov() -> Vec<Case> {
    let mut cases = vec![case("tag_lat", "8", &["-D", "iov,iov"])];
    for test in TWO_SIDED.iter().chain(&["ucp_get"]) {
        for size in [EIGHT_IN_TWO, MIB_IN_TWO] {
            cases.push(case(test, size, &["-D", "iov,iov"]));
        }
    }
    cases
}

/// A put from an iov into contiguous memory (see the module's note).
fn iov_put() -> Vec<Case> {
    [EIGHT_IN_TWO, MIB_IN_TWO].iter().map(|size| case("ucp_put_bw", size, &["-D", "iov,contig"])).collect()
}

/// Every test at 8 bytes and the bulk ones at 1 MiB, each with `extra`.
fn every_test_with(extra: &[&str]) -> Vec<Case> {
    let mut cases: Vec<Case> = ALL_TESTS.iter().map(|test| case(test, "8", extra)).collect();
    cases.extend(BULK_TESTS.iter().map(|test| case(test, MIB, extra)));
    cases
}

/// `-z`: the buffers' memory handles, from `ucp_mem_map`, passed with each operation.
fn prereg() -> Vec<Case> {
    every_test_with(&["-z"])
}

/// `-I`: a context created with the wakeup feature (in 1.13 `-z` is [`prereg`], not wakeup).
fn wakeup_feature() -> Vec<Case> {
    ALL_TESTS.iter().map(|test| case(test, "8", &["-I"])).collect()
}

/// `-E sleep`: waiting for completions in `ucp_worker_wait` instead of polling, on the tests in
/// which the receiver is told of each message.
fn sleep_wait() -> Vec<Case> {
    TWO_SIDED.iter().flat_map(|test| ["8", MIB].map(|size| case(test, size, &["-E", "sleep"]))).collect()
}

/// `-l`: one process connected to itself.
fn loopback() -> Vec<Case> {
    every_test_with(&["-l"])
}

/// `-T 2 -M multi`: two threads on a worker created for multi-threaded use. Over TCP only the
/// two-sided tests (see the module's note).
fn threads(tls: Tls) -> Vec<Case> {
    let extra = ["-T", "2", "-M", "multi"];
    match tls {
        Tls::Default => every_test_with(&extra),
        Tls::Tcp => {
            TWO_SIDED.iter().flat_map(|test| ["8", MIB].map(|size| case(test, size, &extra))).collect()
        }
    }
}

/// Why a case failed; a hang ends its group.
enum Failure {
    Failed(String),
    Hang(String),
}

/// A running `ucx_perftest`, killed (by its PID) if dropped while it runs.
struct Proc {
    role: &'static str,
    child: Child,
    status: Option<ExitStatus>,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

impl Proc {
    fn spawn(role: &'static str, tls: Tls, args: &[String]) -> Result<Proc, Failure> {
        let mut command = common::command_on_lib(PERFTEST);
        match tls {
            Tls::Default => command.env_remove("UCX_TLS"),
            Tls::Tcp => command.env("UCX_TLS", "tcp"),
        };
        command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|e| Failure::Failed(format!("{role}: spawn: {e}")))?;
        // Read both pipes all along: a process blocked on a full pipe would look like a hang.
        let drain = |mut pipe: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        };
        let stdout = Some(drain(Box::new(child.stdout.take().expect("piped stdout"))));
        let stderr = Some(drain(Box::new(child.stderr.take().expect("piped stderr"))));
        Ok(Proc { role, child, status: None, stdout, stderr })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the process has exited.
    fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status
    }

    /// Waits until the process exits or `deadline`; a process still running then is a hang.
    fn wait(&mut self, deadline: Instant) -> Result<ExitStatus, Failure> {
        loop {
            if let Some(status) = self.poll() {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                self.stop();
                let role = self.role;
                return Err(Failure::Hang(format!(
                    "{role} did not exit within {TIMEOUT:?}; output:\n{}",
                    self.output()
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills the process if it still runs, and reaps it.
    fn stop(&mut self) {
        if self.poll().is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }

    /// Everything the process printed, stdout then stderr; only once it has exited.
    fn output(&mut self) -> String {
        let join = |handle: &mut Option<JoinHandle<String>>| {
            handle.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default()
        };
        let (out, err) = (join(&mut self.stdout), join(&mut self.stderr));
        format!("{out}{err}")
    }

    /// Checks, while the process runs, that it mapped the library under test: waits for a
    /// `libucp` to appear in its maps (the loader maps it before `main`), then requires it to be
    /// the one in [`common::libdir`].
    fn check_maps(&mut self, deadline: Instant) -> Result<(), Failure> {
        loop {
            let mapped = common::mapped_libucp(self.pid());
            if !mapped.is_empty() {
                // Judged on this one read: a quick run may have exited (and unmapped) by a second.
                let pid = self.pid();
                return std::panic::catch_unwind(|| common::assert_maps_libdir(pid, &mapped)).map_err(
                    |panic| {
                        let why = panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        Failure::Failed(format!("{}: {why}", self.role))
                    },
                );
            }
            if let Some(status) = self.poll() {
                let role = self.role;
                return Err(Failure::Failed(format!(
                    "{role} exited ({status}) before its maps could be checked; output:\n{}",
                    self.output()
                )));
            }
            if Instant::now() >= deadline {
                return Err(Failure::Hang(format!("{} never mapped a libucp", self.role)));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The inodes of the sockets listening on TCP `port` (IPv4 or IPv6).
fn listening_inodes(port: u16) -> Vec<String> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address is ADDR:PORT in hex; state 0A is LISTEN.
            let local_port = fields.get(1).and_then(|a| a.rsplit_once(':')).map(|(_, p)| p);
            if local_port.and_then(|p| u16::from_str_radix(p, 16).ok()) == Some(port)
                && fields.get(3) == Some(&"0A")
            {
                if let Some(inode) = fields.get(9) {
                    inodes.push(inode.to_string());
                }
            }
        }
    }
    inodes
}

/// Whether process `pid` holds a socket listening on `port`: another process's listener on the
/// same port does not count.
fn listens(pid: u32, port: u16) -> bool {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| {
            let target = target.to_string_lossy();
            inodes.iter().any(|inode| target == format!("socket:[{inode}]"))
        })
    })
}

/// Checks the client's final result line: `Final:` followed by the iterations it was asked for
/// and the figures (seven of them, or three overall ones with several threads), none negative,
/// and a message rate above zero (the bandwidth of a slow 8-byte run can print as 0.00).
fn check_result(output: &str, iterations: u64) -> Result<(), String> {
    let line = output
        .lines()
        .rfind(|line| line.starts_with("Final:"))
        .ok_or_else(|| "no `Final:` result line".to_owned())?;
    // `-I` appends the operation's flags after the figures.
    let numbers: Vec<f64> =
        line["Final:".len()..].split_whitespace().map_while(|field| field.parse::<f64>().ok()).collect();
    if numbers.len() != 4 && numbers.len() != 8 {
        return Err(format!("{} fields in `{line}`", numbers.len()));
    }
    if numbers[0] != iterations as f64 {
        return Err(format!("{} iterations, not {iterations}, in `{line}`", numbers[0]));
    }
    // With seven figures, the averages (the 3rd, 5th and 7th field) are over the last report's
    // interval, which is empty (0/0, printed as inf) when that report fell on the last iteration:
    // only those may be non-finite. No figure may be negative.
    let interval_average = |i: usize| numbers.len() == 8 && matches!(i, 2 | 4 | 6);
    if numbers.iter().enumerate().any(|(i, n)| *n < 0.0 || (!n.is_finite() && !interval_average(i))) {
        return Err(format!("a negative or non-finite figure in `{line}`"));
    }
    if numbers[numbers.len() - 1] <= 0.0 {
        return Err(format!("no message rate in `{line}`"));
    }
    Ok(())
}

/// The command lines of a case, as a person would type them.
fn describe(tls: Tls, port: u16, case: &Case) -> String {
    let env = match tls {
        Tls::Default => "",
        Tls::Tcp => "UCX_TLS=tcp ",
    };
    let args = case.args.join(" ");
    if case.loopback {
        format!("{env}ucx_perftest {args}")
    } else {
        format!("{env}ucx_perftest localhost -p {port} {args}  (server: {env}ucx_perftest -p {port})")
    }
}

fn run_case(tls: Tls, port: u16, case: &Case) -> Result<(), Failure> {
    let deadline = Instant::now() + TIMEOUT;
    let mut server = None;
    if !case.loopback {
        let mut s = Proc::spawn("server", tls, &["-p".to_owned(), port.to_string()])?;
        s.check_maps(deadline)?;
        while !listens(s.pid(), port) {
            if let Some(status) = s.poll() {
                return Err(Failure::Failed(format!(
                    "server exited ({status}) before listening on port {port}; output:\n{}",
                    s.output()
                )));
            }
            if Instant::now() >= deadline {
                return Err(Failure::Hang(format!("server never listened on port {port}")));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        server = Some(s);
    }
    let mut args = Vec::new();
    if !case.loopback {
        args.extend(["localhost".to_owned(), "-p".to_owned(), port.to_string()]);
    }
    args.extend(case.args.iter().cloned());
    let role = if case.loopback { "loopback process" } else { "client" };
    let mut client = Proc::spawn(role, tls, &args)?;
    client.check_maps(deadline)?;
    let status = client.wait(deadline)?;
    let output = client.output();
    if !status.success() {
        return Err(Failure::Failed(format!("{role} exited with {status}; output:\n{output}")));
    }
    check_result(&output, case.iterations)
        .map_err(|why| Failure::Failed(format!("{role}: {why}; output:\n{output}")))?;
    if let Some(mut server) = server {
        // The server ends its run when the client does.
        let status = server.wait(deadline)?;
        if !status.success() {
            return Err(Failure::Failed(format!(
                "server exited with {status}; output:\n{}",
                server.output()
            )));
        }
    }
    Ok(())
}

/// Whether `ucx_perftest` is here to run; without it, a skip, or a failure when
/// `ZCX_REQUIRE_CAPI=1`.
fn available(test: &str) -> bool {
    if Path::new(PERFTEST).exists() {
        return true;
    }
    if std::env::var_os("ZCX_REQUIRE_CAPI").is_some_and(|v| v == "1") {
        panic!("{PERFTEST} is missing (apt-get install ucx-utils) and ZCX_REQUIRE_CAPI=1");
    }
    common::have(PERFTEST, test)
}

/// Runs the cases of group number `group` over `tls`, each on its own port; fails listing every
/// case that failed.
fn run_group(name: &str, group: u16, tls: Tls, cases: Vec<Case>) {
    if !available(name) {
        return;
    }
    assert!(cases.len() <= usize::from(PORTS_PER_GROUP), "{name}: more cases than ports");
    let first_port =
        PORT_BASE + group * 2 * PORTS_PER_GROUP + if tls == Tls::Tcp { PORTS_PER_GROUP } else { 0 };
    let mut failures = Vec::new();
    let mut run = 0;
    for (port, case) in (first_port..).zip(&cases) {
        let label = describe(tls, port, case);
        println!("case: {label}");
        run += 1;
        match run_case(tls, port, case) {
            Ok(()) => {}
            Err(Failure::Failed(why)) => failures.push(format!("{label}\n    {why}")),
            Err(Failure::Hang(why)) => {
                failures.push(format!("{label}\n    hang: {why}"));
                break;
            }
        }
    }
    let not_run = cases.len() - run;
    assert!(
        failures.is_empty(),
        "{name}: {} of {} cases failed{}:\n{}",
        failures.len(),
        cases.len(),
        if not_run > 0 { format!(" ({not_run} not run after a hang)") } else { String::new() },
        failures.join("\n")
    );
}

#[test]
fn default_tls_two_sided() {
    run_group("default_tls_two_sided", 0, Tls::Default, two_sided());
}

#[test]
fn tcp_two_sided() {
    run_group("tcp_two_sided", 0, Tls::Tcp, two_sided());
}

#[test]
fn default_tls_one_sided() {
    run_group("default_tls_one_sided", 1, Tls::Default, one_sided());
}

#[test]
fn tcp_one_sided() {
    run_group("tcp_one_sided", 1, Tls::Tcp, one_sided());
}

#[test]
fn default_tls_atomics() {
    run_group("default_tls_atomics", 2, Tls::Default, atomics());
}

#[test]
fn tcp_atomics() {
    run_group("tcp_atomics", 2, Tls::Tcp, atomics());
}

#[test]
fn default_tls_idle_target() {
    run_group("default_tls_idle_target", 10, Tls::Default, idle_target());
}

#[test]
fn default_tls_iov() {
    run_group("default_tls_iov", 3, Tls::Default, iov());
}

#[test]
fn tcp_iov() {
    run_group("tcp_iov", 3, Tls::Tcp, iov());
}

#[test]
fn default_tls_iov_put() {
    run_group("default_tls_iov_put", 9, Tls::Default, iov_put());
}

#[test]
fn tcp_iov_put() {
    run_group("tcp_iov_put", 9, Tls::Tcp, iov_put());
}

#[test]
fn default_tls_prereg() {
    run_group("default_tls_prereg", 4, Tls::Default, prereg());
}

#[test]
fn tcp_prereg() {
    run_group("tcp_prereg", 4, Tls::Tcp, prereg());
}

#[test]
fn default_tls_wakeup_feature() {
    run_group("default_tls_wakeup_feature", 5, Tls::Default, wakeup_feature());
}

#[test]
fn tcp_wakeup_feature() {
    run_group("tcp_wakeup_feature", 5, Tls::Tcp, wakeup_feature());
}

#[test]
fn default_tls_sleep_wait() {
    run_group("default_tls_sleep_wait", 6, Tls::Default, sleep_wait());
}

#[test]
fn tcp_sleep_wait() {
    run_group("tcp_sleep_wait", 6, Tls::Tcp, sleep_wait());
}

#[test]
fn default_tls_loopback() {
    run_group("default_tls_loopback", 7, Tls::Default, loopback());
}

#[test]
fn tcp_loopback() {
    run_group("tcp_loopback", 7, Tls::Tcp, loopback());
}

#[test]
fn default_tls_threads() {
    run_group("default_tls_threads", 8, Tls::Default, threads(Tls::Default));
}

#[test]
fn tcp_threads() {
    run_group("tcp_threads", 8, Tls::Tcp, threads(Tls::Tcp));
}

#[test]
fn result_lines_are_read_as_ucx_perftest_prints_them() {
    let one = "+---+\nFinal:                  1000      0.387     0.658     0.658       11.60      11.60     1520777     1520777\n";
    assert!(check_result(one, 1000).is_ok());
    let threads = "Final:                  1000                       416.924                   0.04                    4799\n";
    assert!(check_result(threads, 1000).is_ok());
    let slow = "Final: 100 5632.373 6250.069 5499.080 0.00 0.00 160 182";
    assert!(check_result(slow, 100).is_ok());
    let info = "Final: 1000 3.678 4.084 4.084 1.87 1.87 244851 244851  flags:0x1 <no debug info>";
    assert!(check_result(info, 1000).is_ok());
    assert!(check_result(one, 20).is_err(), "other iterations");
    assert!(check_result("Waiting for connection...\n", 1000).is_err(), "no result");
    assert!(check_result("Final: 1000 0.3 0.6 0.6 11.6 11.6 0 0", 1000).is_err(), "no message rate");
    assert!(check_result("Final: 1000 0.3 0.6 nan 11.6 11.6 5 5", 1000).is_err(), "not finite");
    let empty_interval = "Final: 1000 13.482 inf 1018.389 0.00 0.00 0 982";
    assert!(check_result(empty_interval, 1000).is_ok(), "an empty last interval");
    assert!(check_result("Final: 1000 0.3 0.6", 1000).is_err(), "too few fields");
    assert!(check_result("Final: 1000 0.3 0.6 x 11.6 11.6 5 5", 1000).is_err(), "not a number");
}
