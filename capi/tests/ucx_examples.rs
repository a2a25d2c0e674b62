//! UCX's own UCP example programs, `ucp_hello_world` and `ucp_client_server` (shipped as sources by
//! `libucx-dev`), compiled here against the installed `ucp.h` and run as server and client on the
//! `libucp.so.0` under test. Each process is checked to have mapped that library, and each case
//! asserts what the program prints when the data really arrived (the received test string, its
//! length, the peer's address), or, in the failure-emulation modes, how the survivor noticed its
//! peer's death.
//!
//! Prints `skipped:` without a C compiler or without the examples; with `ZCX_REQUIRE_CAPI=1` that
//! is a failure instead.

mod common;

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where Debian's `libucx-dev` puts the example sources (some installs gzip them).
const EXAMPLES: &str = "/usr/share/doc/libucx-dev/examples";
const HEADER: &str = "/usr/include/ucp/api/ucp.h";

/// How long any one process may run; a hang fails the test instead of hanging the suite. Peer
/// failure is found by keepalive in the worst case, hence the margin.
const RUN: Duration = Duration::from_secs(90);
/// How long a server may take to start listening.
const LISTEN: Duration = Duration::from_secs(30);

/// Large enough that any sane rendezvous threshold is below it; small enough for the stack buffer
/// `ucp_client_server` prints it from.
const MIB: usize = 1 << 20;

/// Linked into each example. The `ucp_client_server` server never exits, so its output is read
/// while it runs, and stdout to a pipe is otherwise held in stdio's buffer. Stopping before `main`
/// (after the loader mapped every library) lets the test check which `libucp` the process mapped
/// while it certainly still runs, however quickly it would finish.
const START_SHIM: &str = r#"#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void zcx_example_start(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (getenv("ZCX_EXAMPLE_STOP_AT_START") != NULL) {
        raise(SIGSTOP);
    }
}
"#;

/// The compiled examples.
struct Examples {
    hello_world: PathBuf,
    client_server: PathBuf,
}

/// The examples, compiled once per test process; `Err` says why they cannot be.
fn examples() -> &'static Result<Examples, String> {
    static BUILT: OnceLock<Result<Examples, String>> = OnceLock::new();
    BUILT.get_or_init(build)
}

/// The examples, or `None` after reporting why the test cannot run.
fn examples_or_skip(test: &str) -> Option<&'static Examples> {
    match examples() {
        Ok(built) => Some(built),
        Err(why) if std::env::var_os("ZCX_REQUIRE_CAPI").is_some_and(|v| v == "1") => {
            panic!("{test}: {why} (ZCX_REQUIRE_CAPI=1)")
        }
        Err(why) => {
            println!("skipped: {test}: {why}");
            None
        }
    }
}

/// Writes `name` from the examples directory, plain or gzipped, into `dir`.
fn fetch_source(name: &str, dir: &Path) -> Result<(), String> {
    let plain = Path::new(EXAMPLES).join(name);
    let target = dir.join(name);
    if plain.exists() {
        std::fs::copy(&plain, &target).map_err(|e| format!("copy {}: {e}", plain.display()))?;
        return Ok(());
    }
    let gz = Path::new(EXAMPLES).join(format!("{name}.gz"));
    if !gz.exists() {
        return Err(format!("{} is not installed (apt-get install libucx-dev)", plain.display()));
    }
    let out = std::process::Command::new("gzip")
        .arg("-dc")
        .arg(&gz)
        .output()
        .map_err(|e| format!("gzip is needed for {}: {e}", gz.display()))?;
    assert!(out.status.success(), "gzip -dc {}: {}", gz.display(), String::from_utf8_lossy(&out.stderr));
    std::fs::write(&target, out.stdout).map_err(|e| format!("write {}: {e}", target.display()))
}

fn build() -> Result<Examples, String> {
    if !Path::new(HEADER).exists() {
        return Err(format!("no {HEADER} (apt-get install libucx-dev)"));
    }
    // Cargo's scratch directory for integration tests; a staging directory per process so that
    // concurrent runs do not compile into each other's files.
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ucx-examples");
    let stage = root.join(format!("build-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(&stage).expect("create the build directory");
    let result = compile_in(&stage, &root);
    let _ = std::fs::remove_dir_all(&stage);
    result
}

fn compile_in(stage: &Path, root: &Path) -> Result<Examples, String> {
    for name in ["ucp_hello_world.c", "ucp_client_server.c", "hello_world_util.h", "ucp_util.h"] {
        fetch_source(name, stage)?;
    }
    let shim = stage.join("start_shim.c");
    std::fs::write(&shim, START_SHIM).expect("write the start shim");
    let mut binaries = Vec::new();
    for program in ["ucp_hello_world", "ucp_client_server"] {
        let staged = stage.join(program);
        // The examples call only ucp_* and ucs_status_string: libucp and libucs are all they need.
        let out = std::process::Command::new("cc")
            .arg("-o")
            .arg(&staged)
            .arg(stage.join(format!("{program}.c")))
            .arg(&shim)
            .args(["-lucp", "-lucs"])
            .output()
            .map_err(|e| format!("no C compiler (cc: {e})"))?;
        assert!(out.status.success(), "cc {program}.c failed:\n{}", String::from_utf8_lossy(&out.stderr));
        // Renamed into place: a concurrent run may be executing the previous file.
        let installed = root.join(program);
        std::fs::rename(&staged, &installed).expect("install the compiled example");
        binaries.push(installed);
    }
    let client_server = binaries.pop().expect("two programs");
    let hello_world = binaries.pop().expect("two programs");
    Ok(Examples { hello_world, client_server })
}

/// A port nobody is listening on, for `ucp_hello_world`'s out-of-band socket (its server cannot be
/// told to pick one itself). It binds with `SO_REUSEADDR`, so a port just freed is fine.
fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("0.0.0.0:0").expect("bind a probe socket");
    probe.local_addr().expect("the probe's address").port()
}

/// What a process wrote to one stream so far, and whether it closed it.
#[derive(Default)]
struct Capture {
    state: Mutex<(Vec<u8>, bool)>,
    changed: Condvar,
}

impl Capture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.state.lock().unwrap().0).into_owned()
    }

    /// Waits until `ready` holds for the text; false when the stream closed or time ran out first.
    fn wait_until(&self, deadline: Instant, ready: impl Fn(&str) -> bool) -> bool {
        let mut state = self.state.lock().unwrap();
        loop {
            if ready(&String::from_utf8_lossy(&state.0)) {
                return true;
            }
            let now = Instant::now();
            if state.1 || now >= deadline {
                return false;
            }
            state = self.changed.wait_timeout(state, deadline - now).unwrap().0;
        }
    }
}

/// Copies `from` into `into` until end of file.
fn pump(mut from: impl Read + Send + 'static, into: Arc<Capture>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut chunk = [0u8; 65536];
        loop {
            let n = from.read(&mut chunk).unwrap_or(0);
            let mut state = into.state.lock().unwrap();
            if n == 0 {
                state.1 = true;
            } else {
                state.0.extend_from_slice(&chunk[..n]);
            }
            into.changed.notify_all();
            if n == 0 {
                return;
            }
        }
    })
}

/// The tail of `text`, short enough for a panic message.
fn clip(text: &str) -> &str {
    const KEEP: usize = 6000;
    if text.len() <= KEEP {
        return text;
    }
    let mut start = text.len() - KEEP;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// How a process ended and what it printed.
struct Outcome {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn describe(&self, role: &str) -> String {
        format!(
            "{role} ended with {}\n--- {role} stdout:\n{}\n--- {role} stderr:\n{}",
            self.status,
            clip(&self.stdout),
            clip(&self.stderr)
        )
    }
}

#[derive(Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

/// One example process, killed on drop if it is still running.
struct Proc {
    role: &'static str,
    child: Child,
    stdout: Arc<Capture>,
    stderr: Arc<Capture>,
    pumps: Vec<JoinHandle<()>>,
}

impl Proc {
    /// Starts `program` on the library under test and checks, while the process is held before
    /// `main`, that the `libucp` it mapped is that library's.
    fn start(program: &Path, role: &'static str, args: &[String]) -> Proc {
        let mut child = common::command_on_lib(program)
            .args(args)
            .env("ZCX_EXAMPLE_STOP_AT_START", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        let (stdout, stderr) = (Arc::new(Capture::default()), Arc::new(Capture::default()));
        let pumps = vec![
            pump(child.stdout.take().expect("piped stdout"), stdout.clone()),
            pump(child.stderr.take().expect("piped stderr"), stderr.clone()),
        ];
        let mut proc = Proc { role, child, stdout, stderr, pumps };
        proc.wait_stopped_at_start();
        let pid = proc.child.id();
        common::assert_loads_libdir(pid);
        // SAFETY: kill(2) touches no memory of ours; `pid` is our child, not yet waited for, so
        // it cannot have been reused by another process.
        let sent = unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
        assert_eq!(sent, 0, "resume {role} (pid {pid}): {}", std::io::Error::last_os_error());
        proc
    }

    fn wait_stopped_at_start(&mut self) {
        let deadline = Instant::now() + LISTEN;
        let stat = format!("/proc/{}/stat", self.child.id());
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let role = self.role;
                panic!("{role} exited before main: {}", self.collect(status).describe(role));
            }
            // The state is the first field after the command name, which is in parentheses.
            let text = std::fs::read_to_string(&stat).unwrap_or_default();
            if text.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('T')) {
                return;
            }
            assert!(Instant::now() < deadline, "{} never reached main", self.role);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn capture(&self, stream: Stream) -> &Capture {
        match stream {
            Stream::Stdout => &self.stdout,
            Stream::Stderr => &self.stderr,
        }
    }

    /// Waits until `text` has appeared `times` times on `stream`.
    fn wait_for(&self, stream: Stream, text: &str, times: usize, within: Duration) {
        let seen =
            self.capture(stream).wait_until(Instant::now() + within, |s| s.matches(text).count() >= times);
        assert!(
            seen,
            "{} did not print {text:?} ({times} times) before it closed its output or {within:?} \
             passed\n--- stdout:\n{}\n--- stderr:\n{}",
            self.role,
            clip(&self.stdout.text()),
            clip(&self.stderr.text())
        );
    }

    /// Waits for the process to end by itself.
    fn finish(&mut self, within: Duration) -> Outcome {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the example") {
                return self.collect(status);
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let status = self.child.wait().expect("reap the example");
                let role = self.role;
                panic!("{role} still ran after {within:?}: killed\n{}", self.collect(status).describe(role));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills a process that serves until killed, after checking it had not ended on its own.
    fn kill(&mut self) -> Outcome {
        if let Some(status) = self.child.try_wait().expect("check the example") {
            let role = self.role;
            panic!("{role} ended by itself; it serves until killed\n{}", self.collect(status).describe(role));
        }
        self.child.kill().expect("kill the example");
        let status = self.child.wait().expect("reap the example");
        self.collect(status)
    }

    /// What the process printed, once it has ended (its pipes close with it).
    fn collect(&mut self, status: ExitStatus) -> Outcome {
        for pump in self.pumps.drain(..) {
            pump.join().expect("output reader");
        }
        Outcome { status, stdout: self.stdout.text(), stderr: self.stderr.text() }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The string both examples send: `len - 1` letters cycling through the alphabet (then a NUL).
fn test_string(len: usize) -> String {
    (0..len.saturating_sub(1)).map(|i| char::from(b'A' + (i % 26) as u8)).collect()
}

/// The text after `marker` on the first line that has it.
fn after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    text.lines().find_map(|line| line.split_once(marker).map(|(_, rest)| rest))
}

/// The number after `marker` on the first line that has it (up to the first non-digit).
fn number_after(text: &str, marker: &str) -> Option<i64> {
    let rest = after(text, marker)?;
    let end = rest
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
        .map_or(rest.len(), |(i, _)| i);
    rest[..end].parse().ok()
}

// ---------------------------------------------------------------------------------------------
// ucp_hello_world: the two sides swap worker addresses over a TCP socket; the client tag-sends its
// address to the server, which connects back and tag-sends the test string; the client probes for
// it and receives it with ucp_tag_msg_recv_nb.

/// Runs a `ucp_hello_world` server and client with `args` on a fresh port.
fn hello_world(test: &str, args: &[&str]) -> Option<(Outcome, Outcome)> {
    let built = examples_or_skip(test)?;
    let port = free_port().to_string();
    let mut server_args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    server_args.extend(["-p".to_owned(), port.clone()]);
    let mut client_args = server_args.clone();
    client_args.extend(["-n".to_owned(), "localhost".to_owned()]);

    let mut server = Proc::start(&built.hello_world, "server", &server_args);
    server.wait_for(Stream::Stdout, "Waiting for connection...", 1, LISTEN);
    let mut client = Proc::start(&built.hello_world, "client", &client_args);
    let client_end = client.finish(RUN);
    let server_end = server.finish(RUN);
    Some((server_end, client_end))
}

/// A worker address's length as a side printed it.
fn address_length(out: &Outcome, role: &str) -> i64 {
    number_after(&out.stdout, "local address length: ")
        .unwrap_or_else(|| panic!("no address length\n{}", out.describe(role)))
}

/// The length the receive callback reported along with status 0 (success).
fn received_length(out: &Outcome, role: &str) -> i64 {
    number_after(&out.stdout, "receive handler called with status 0 (Success), length ")
        .unwrap_or_else(|| panic!("no successful receive callback\n{}", out.describe(role)))
}

/// Both sides of a normal `ucp_hello_world` run with a `size`-byte test string succeeded, and the
/// string and both messages' lengths are right.
fn assert_hello_world_delivered(server: &Outcome, client: &Outcome, size: usize) {
    let both = format!("{}\n{}", server.describe("server"), client.describe("client"));
    assert_eq!(client.status.code(), Some(0), "client failed\n{both}");
    assert_eq!(server.status.code(), Some(0), "server failed\n{both}");
    for out in [server, client] {
        assert!(
            !out.stderr.contains("Failed to") && !out.stderr.contains("unable to"),
            "an error was reported\n{both}"
        );
    }

    // The server received the client's address: an 8-byte length, then the address itself.
    let client_address = address_length(client, "client");
    assert!(client_address > 0, "empty worker address\n{both}");
    assert_eq!(received_length(server, "server"), 8 + client_address, "the address message's length\n{both}");
    assert!(client.stdout.contains("finish to send UCX address message"), "{both}");
    assert!(server.stdout.contains("finish to receive UCX address message"), "{both}");

    // The server sent the test string on the endpoint it created from that address, and flushed.
    assert!(address_length(server, "server") > 0, "empty worker address\n{both}");
    assert!(server.stdout.contains("finish to send UCX data message"), "{both}");
    assert!(server.stdout.contains("flush_ep completed with status 0 (Success)"), "{both}");

    // The client probed, received, and printed exactly the test string.
    assert_eq!(received_length(client, "client"), 8 + size as i64, "the data message's length\n{both}");
    assert!(client.stdout.contains("finish to receive UCX data message"), "{both}");
    let marker = "----- UCP TEST SUCCESS ----\n\n";
    let data = client.stdout.split_once(marker).map(|(_, rest)| rest.lines().next().unwrap_or(""));
    assert!(data == Some(test_string(size).as_str()), "the client did not print the test string\n{both}");
}

#[test]
fn hello_world_busy_polling() {
    let Some((server, client)) = hello_world("hello_world_busy_polling", &[]) else { return };
    assert_hello_world_delivered(&server, &client, 16);
}

/// `-w`: the client sleeps in `ucp_worker_wait` whenever progress finds nothing.
#[test]
fn hello_world_worker_wait() {
    let Some((server, client)) = hello_world("hello_world_worker_wait", &["-w"]) else { return };
    assert_hello_world_delivered(&server, &client, 16);
}

/// `-f`: the client arms the worker and sleeps in `epoll_wait` on `ucp_worker_get_efd`'s descriptor.
#[test]
fn hello_world_event_fd() {
    let Some((server, client)) = hello_world("hello_world_event_fd", &["-f"]) else { return };
    assert_hello_world_delivered(&server, &client, 16);
}

/// `-s`: a message far above any eager limit, probed and then received by its message handle.
#[test]
fn hello_world_one_mebibyte() {
    let size = MIB.to_string();
    let Some((server, client)) = hello_world("hello_world_one_mebibyte", &["-s", &size]) else { return };
    assert_hello_world_delivered(&server, &client, MIB);
}

/// The status a side's endpoint error callback reported, which must be an error.
fn failure_status(out: &Outcome, role: &str) -> i64 {
    let status = number_after(&out.stdout, "failure handler called with status ").unwrap_or_else(|| {
        panic!("the {role}'s endpoint error callback was not called\n{}", out.describe(role))
    });
    assert!(status < 0, "the error callback reported status {status}\n{}", out.describe(role));
    status
}

fn killed(out: &Outcome) -> bool {
    out.status.signal() == Some(libc::SIGKILL)
}

/// `-e send`: the server kills itself after receiving the client's address; the client, waiting
/// for data, must learn from its endpoint's error callback that the server is gone, and then fails
/// (exit status 255) instead of waiting forever.
#[test]
fn hello_world_server_dies_before_sending() {
    let test = "hello_world_server_dies_before_sending";
    let Some((server, client)) = hello_world(test, &["-e", "send"]) else { return };
    let both = format!("{}\n{}", server.describe("server"), client.describe("client"));
    assert!(killed(&server), "the server should have killed itself\n{both}");
    assert!(server.stderr.contains("Emulating unexpected failure on server side"), "{both}");
    assert!(server.stdout.contains("finish to receive UCX address message"), "{both}");
    failure_status(&client, "client");
    assert!(client.stderr.contains("Failed to receive data: EP disconnected"), "{both}");
    assert_eq!(client.status.code(), Some(255), "the client reports the lost server\n{both}");
    assert!(!client.stdout.contains("UCP TEST SUCCESS"), "{both}");
}

/// `-e recv`: the client kills itself after sending its address; the server, five seconds later,
/// connects back and sends. It must learn that the client is gone at one of the points where the
/// program looks: creating the endpoint (which the program then counts as success, exit 0),
/// sending (exit 255: the program counts a failed send in this mode as a failure), or flushing
/// (exit 0, and flush's error printed).
#[test]
fn hello_world_client_dies_before_receiving() {
    let test = "hello_world_client_dies_before_receiving";
    let Some((server, client)) = hello_world(test, &["-e", "recv"]) else { return };
    let both = format!("{}\n{}", server.describe("server"), client.describe("client"));
    assert!(killed(&client), "the client should have killed itself\n{both}");
    assert!(client.stderr.contains("Emulating failure before receive operation on client side"), "{both}");
    assert!(client.stdout.contains("finish to send UCX address message"), "{both}");
    assert!(server.stdout.contains("finish to receive UCX address message"), "{both}");
    if server.stderr.contains("Failed to ucp_ep_create") {
        assert_eq!(server.status.code(), Some(0), "{both}");
    } else if server.stderr.contains("unable to send UCX data message") {
        assert_eq!(server.status.code(), Some(255), "{both}");
    } else {
        let flushed = number_after(&server.stdout, "flush_ep completed with status ");
        assert!(
            server.stdout.contains("finish to send UCX data message") && flushed.is_some_and(|s| s < 0),
            "the server never noticed that the client was gone\n{both}"
        );
        assert_eq!(server.status.code(), Some(0), "{both}");
    }
}

/// `-e keepalive`: the client kills itself once the data has arrived, without receiving it; the
/// server, after its send completed, waits until its endpoint's error callback reports the loss,
/// then flushes (whatever the status) and succeeds.
#[test]
fn hello_world_client_dies_after_receiving() {
    let test = "hello_world_client_dies_after_receiving";
    let Some((server, client)) = hello_world(test, &["-e", "keepalive"]) else { return };
    let both = format!("{}\n{}", server.describe("server"), client.describe("client"));
    assert!(killed(&client), "the client should have killed itself\n{both}");
    assert!(client.stderr.contains("Emulating unexpected failure after receive completion"), "{both}");
    assert!(server.stdout.contains("finish to send UCX data message"), "{both}");
    assert!(server.stderr.contains("Waiting for client is terminated"), "{both}");
    failure_status(&server, "server");
    assert!(server.stdout.contains("flush_ep completed with status"), "{both}");
    assert_eq!(server.status.code(), Some(0), "{both}");
}

// ---------------------------------------------------------------------------------------------
// ucp_client_server: the server listens on a socket address (a listener on one worker, the
// endpoint on a second worker) and receives what the client sends with the API `-c` names, into
// `-v` buffers of `-s` bytes each. The server serves client after client until killed.

/// Runs a `ucp_client_server` server and one client with `args`, and kills the server once it has
/// finished with that client and waits for the next.
fn client_server(test: &str, args: &[&str]) -> Option<(Outcome, Outcome)> {
    let built = examples_or_skip(test)?;
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    // Port 0: the server lets the system pick and prints the port it queried from its listener.
    let mut server_args = args.clone();
    server_args.extend(["-p".to_owned(), "0".to_owned()]);
    let mut server = Proc::start(&built.client_server, "server", &server_args);
    server.wait_for(Stream::Stdout, "Waiting for connection...", 1, LISTEN);
    server.wait_for(Stream::Stderr, "server is listening on IP ", 1, LISTEN);
    let port = number_after(&server.stderr.text(), " port ").filter(|&p| p > 0 && p <= 65535);
    let port = port.unwrap_or_else(|| panic!("no port in the server's output\n{}", server.stderr.text()));

    let mut client_args = args;
    client_args.extend(["-a".to_owned(), "127.0.0.1".to_owned(), "-p".to_owned(), port.to_string()]);
    let mut client = Proc::start(&built.client_server, "client", &client_args);
    let client_end = client.finish(RUN);
    // The second prompt comes after the server received everything and closed the endpoint.
    let served = server
        .stdout
        .wait_until(Instant::now() + RUN, |s| s.matches("Waiting for connection...").count() >= 2);
    let server_end = server.kill();
    assert!(
        served,
        "the server did not finish with the client\n{}\n{}",
        server_end.describe("server"),
        client_end.describe("client")
    );
    Some((server_end, client_end))
}

/// The data lines of the block that follows the line `header`: the first lines that are neither
/// empty nor a rule of dashes, up to the next rule.
fn block_after<'a>(text: &'a str, header: &str) -> Vec<&'a str> {
    let rule = |l: &str| !l.is_empty() && l.bytes().all(|b| b == b'-');
    let mut lines = text.lines().skip_while(|l| *l != header).skip(1);
    let mut data = Vec::new();
    for line in lines.by_ref() {
        if !line.is_empty() && !rule(line) {
            data.push(line);
            break;
        }
    }
    for line in lines {
        if rule(line) {
            break;
        }
        if !line.is_empty() {
            data.push(line);
        }
    }
    data
}

/// Both sides of a `ucp_client_server` run printed `buffers` copies of the `size`-byte test string:
/// the client what it sent, the server what it received.
fn assert_client_server_delivered(server: &Outcome, client: &Outcome, buffers: usize, size: usize) {
    let both = format!("{}\n{}", server.describe("server"), client.describe("client"));
    assert_eq!(client.status.code(), Some(0), "client failed\n{both}");
    for out in [server, client] {
        assert!(!out.stderr.contains("unable to") && !out.stderr.contains("failed on iteration"), "{both}");
    }
    let expected = format!("{}.", test_string(size));
    let expected = vec![expected.as_str(); buffers];

    assert!(after(&server.stderr, "server is listening on IP 0.0.0.0 port ").is_some(), "{both}");
    let peer = after(&server.stdout, "Server received a connection request from client at address ");
    let peer_port = peer.and_then(|p| p.strip_prefix("127.0.0.1:")).and_then(|p| p.parse::<u16>().ok());
    assert!(peer_port.is_some_and(|p| p > 0), "the server did not see the client's address\n{both}");
    assert!(server.stdout.contains("Server: iteration #1\nUCX data message was received\n"), "{both}");
    assert!(
        block_after(&server.stdout, "----- UCP TEST SUCCESS -------") == expected,
        "the server's data\n{both}"
    );

    assert!(block_after(&client.stdout, "Client: iteration #1") == expected, "the client's data\n{both}");
}

#[test]
fn client_server_tag() {
    let Some((server, client)) = client_server("client_server_tag", &["-c", "tag"]) else { return };
    assert_client_server_delivered(&server, &client, 1, 16);
}

#[test]
fn client_server_stream() {
    let Some((server, client)) = client_server("client_server_stream", &["-c", "stream"]) else { return };
    assert_client_server_delivered(&server, &client, 1, 16);
}

#[test]
fn client_server_am() {
    let Some((server, client)) = client_server("client_server_am", &["-c", "am"]) else { return };
    assert_client_server_delivered(&server, &client, 1, 16);
}

#[test]
fn client_server_tag_iov() {
    let Some((server, client)) = client_server("client_server_tag_iov", &["-c", "tag", "-v", "4"]) else {
        return;
    };
    assert_client_server_delivered(&server, &client, 4, 16);
}

#[test]
fn client_server_stream_iov() {
    let test = "client_server_stream_iov";
    let Some((server, client)) = client_server(test, &["-c", "stream", "-v", "4"]) else { return };
    assert_client_server_delivered(&server, &client, 4, 16);
}

#[test]
fn client_server_am_iov() {
    let Some((server, client)) = client_server("client_server_am_iov", &["-c", "am", "-v", "4"]) else {
        return;
    };
    assert_client_server_delivered(&server, &client, 4, 16);
}

/// An active message far above the rendezvous threshold: the server's handler may get a
/// rendezvous descriptor and fetch the data with `ucp_am_recv_data_nbx`.
#[test]
fn client_server_am_one_mebibyte() {
    let size = MIB.to_string();
    let test = "client_server_am_one_mebibyte";
    let Some((server, client)) = client_server(test, &["-c", "am", "-s", &size]) else { return };
    assert_client_server_delivered(&server, &client, 1, MIB);
}

#[test]
fn client_server_tag_one_mebibyte() {
    let size = MIB.to_string();
    let test = "client_server_tag_one_mebibyte";
    let Some((server, client)) = client_server(test, &["-c", "tag", "-s", &size]) else { return };
    assert_client_server_delivered(&server, &client, 1, MIB);
}

#[test]
fn client_server_stream_one_mebibyte() {
    let size = MIB.to_string();
    let test = "client_server_stream_one_mebibyte";
    let Some((server, client)) = client_server(test, &["-c", "stream", "-s", &size]) else { return };
    assert_client_server_delivered(&server, &client, 1, MIB);
}
