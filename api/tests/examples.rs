//! The examples in `api/examples/`, run as their readers run them: a server process and a client
//! process on loopback (the server picks a free port and prints it), each run bounded by a
//! timeout. Each test checks both exit statuses and the lines the examples print: the examples
//! check what they receive themselves, and the lines show the exchange really took place.
//!
//! Cargo builds an example's binary only for `cargo build --examples` and the like:
//! `cargo test --tests` builds none, and `cargo test --all-targets` builds each example as a test
//! harness instead. So the first test builds them with `cargo build --examples`, in the target
//! directory and profile of this test binary. It builds without the features this binary may
//! have: the examples need none, and `cargo test -p zcx --tests` (which the suite also runs)
//! builds the library that way, so the build reuses it rather than making another.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a server and its client may take together.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// How long building the examples may take (from scratch on a small machine).
const BUILD_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The directory with the examples' binaries, built on first use.
fn examples_dir() -> &'static Path {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match DIR.get_or_init(build_examples) {
        Ok(dir) => dir,
        Err(why) => panic!("building the examples failed: {why}"),
    }
}

fn build_examples() -> Result<PathBuf, String> {
    // This binary is <target dir>/[<triple>/]<profile dir>/deps/examples-<hash>.
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let profile_dir = exe.parent().and_then(Path::parent).ok_or("no profile directory")?;
    let above = profile_dir.parent().ok_or("no target directory")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--locked", "--package", "zcx", "--examples", "--manifest-path"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"));
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(profile) => {
            cmd.args(["--profile", profile]);
        }
        None => return Err(format!("no profile in {}", exe.display())),
    }
    let above_name = above.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let target_dir =
        if above_name.starts_with(std::env::consts::ARCH) && above_name.contains(std::env::consts::OS) {
            cmd.args(["--target", above_name]);
            above.parent().ok_or("no target directory")?
        } else {
            above
        };
    cmd.arg("--target-dir").arg(target_dir);
    let mut child =
        cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().map_err(|e| format!("{cmd:?}: {e}"))?;
    let stderr = collect(child.stderr.take().expect("piped stderr"));
    let status = wait_until(&mut child, Instant::now() + BUILD_TIMEOUT);
    let output = stderr.join().unwrap_or_default();
    match status {
        Some(status) if status.success() => Ok(profile_dir.join("examples")),
        Some(status) => Err(format!("{cmd:?}: {status}\n{output}")),
        None => Err(format!("{cmd:?} did not finish in {BUILD_TIMEOUT:?}\n{output}")),
    }
}

/// Waits for `child` until `deadline`; kills it when it is still running then.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        if let Some(status) = child.try_wait().expect("wait for a child") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads all of `pipe` on a thread.
fn collect(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    })
}

/// One example run at a time: they busy-poll, and this machine may have few cores.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running example process, killed if dropped while it runs (a failed test leaves none behind).
struct Running {
    what: String,
    child: Child,
    lines: Receiver<String>,
    stdout: Vec<String>,
    stderr: Option<JoinHandle<String>>,
}

/// How an example process ended.
struct Finished {
    what: String,
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
}

impl Running {
    fn start(example: &str, args: &[&str]) -> Running {
        let what = format!("{example} {}", args.join(" "));
        let mut child = Command::new(examples_dir().join(example))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
        let (tx, lines) = mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Some(collect(child.stderr.take().expect("piped stderr")));
        Running { what, child, lines, stdout: Vec::new(), stderr }
    }

    /// The first socket address the process prints (where a server listens).
    fn printed_address(&mut self, deadline: Instant) -> SocketAddr {
        loop {
            let timeout = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(timeout) {
                Ok(line) => {
                    let addr = line.split_whitespace().find_map(|word| word.parse::<SocketAddr>().ok());
                    self.stdout.push(line);
                    if let Some(addr) = addr {
                        return addr;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no address printed in time\n{}", self.finish(Instant::now()))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("ended without printing an address\n{}", self.finish(Instant::now()))
                }
            }
        }
    }

    /// Waits for the process to end by `deadline` (killing it then), and takes its output.
    fn finish(&mut self, deadline: Instant) -> Finished {
        let status = wait_until(&mut self.child, deadline);
        // The process is gone, so its pipes close and the readers end.
        let mut stdout = std::mem::take(&mut self.stdout);
        stdout.extend(self.lines.iter());
        let stderr = self.stderr.take().map(|t| t.join().unwrap_or_default()).unwrap_or_default();
        Finished { what: self.what.clone(), status, stdout: stdout.join("\n"), stderr }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl std::fmt::Display for Finished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = self.status.map_or("killed: still running at its deadline".into(), |s| s.to_string());
        write!(f, "--- {} ({status})\nstdout:\n{}\nstderr:\n{}", self.what, self.stdout, self.stderr)
    }
}

impl Finished {
    fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    fn assert_line(&self, line: &str) {
        assert!(self.stdout.lines().any(|l| l == line), "no line {line:?} from {self}");
    }
}

/// Runs `example` as a server on a free loopback port and a client connecting to it, and returns
/// how each ended once both exited successfully.
fn run_pair(example: &str, server_args: &[&str], client_args: &[&str]) -> (Finished, Finished) {
    let _alone = one_at_a_time();
    let deadline = Instant::now() + RUN_TIMEOUT;
    let mut server = Running::start(example, &[&["server", "127.0.0.1:0"], server_args].concat());
    let addr = server.printed_address(deadline).to_string();
    let mut client = Running::start(example, &[&["client", addr.as_str()], client_args].concat());
    let client = client.finish(deadline);
    // A server whose client failed may wait for it forever.
    let server_deadline = if client.succeeded() { deadline } else { Instant::now() + Duration::from_secs(2) };
    let server = server.finish(server_deadline);
    assert!(client.succeeded() && server.succeeded(), "{server}\n{client}");
    (server, client)
}

#[test]
fn hello_world_busy_polling() {
    let message = format!("hello from test process {}", std::process::id());
    let (server, client) = run_pair("hello_world", &["--message", &message], &[]);
    server.assert_line(&format!("server: sent {} bytes", message.len()));
    client.assert_line(&format!("client: received the message: {message}"));
}

#[test]
fn hello_world_sleeping_in_worker_wait() {
    let message = "woken up by the message";
    let (server, client) = run_pair("hello_world", &["--wait", "--message", message], &["--wait"]);
    server.assert_line(&format!("server: sent {} bytes", message.len()));
    client.assert_line(&format!("client: received the message: {message}"));
}

fn client_server(mode: &str) {
    let (server, client) = run_pair("client_server", &["--mode", mode], &["--mode", mode]);
    server.assert_line(&format!("server: received \"{mode} message from the client\""));
    client.assert_line(&format!("client: received \"{mode} message from the server\""));
}

#[test]
fn client_server_tag() {
    client_server("tag");
}

#[test]
fn client_server_stream() {
    client_server("stream");
}

#[test]
fn client_server_am() {
    client_server("am");
}

#[test]
fn rma_put_get_fetch_add_and_flush() {
    let (server, client) = run_pair("rma", &[], &[]);
    for line in [
        "client: get read \"hello from the server's memory\"",
        "client: put \"written by the client with put\"",
        "client: fetch-add of 1 found 41",
        "client: flushed",
        "client: get read back \"written by the client with put\"",
    ] {
        client.assert_line(line);
    }
    server.assert_line("server: the put left \"written by the client with put\"");
    server.assert_line("server: the counter is 42");
}

/// A wrong command line is reported, with the usage, and the example fails.
#[test]
fn examples_refuse_a_wrong_command_line() {
    for (example, args) in
        [("hello_world", &["listen"][..]), ("client_server", &["server", "--mode", "udp"]), ("rma", &[])]
    {
        let _alone = one_at_a_time();
        let ended = Running::start(example, args).finish(Instant::now() + RUN_TIMEOUT);
        assert!(ended.status.is_some() && !ended.succeeded(), "{ended}");
        assert!(ended.stderr.contains("usage:"), "{ended}");
    }
}
