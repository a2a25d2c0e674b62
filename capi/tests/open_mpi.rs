//! Debian's Open MPI, its UCX pml forced on, runs the project's MPI program
//! (`tests/mpi/zcx_mpi_test.c`) on 2 ranks over the libucp under test: point-to-point in eager
//! and rendezvous sizes, synchronous sends, wildcards, probes, cancellation, sends to self, a
//! strided datatype, collectives and `MPI_THREAD_MULTIPLE`, all checked byte for byte by the
//! program itself. The test asserts that the job passed, that the UCX pml was selected and
//! connected the ranks (from its own verbose output), and that every rank mapped exactly the
//! libucp under test. Once as configured, once with `UCX_TLS=tcp`.
//!
//! Prints `skipped:` without `mpicc`/`mpirun` (`libopenmpi-dev`, `openmpi-bin`); with
//! `ZCX_REQUIRE_CAPI=1` that is a failure instead.

mod common;

use std::fs::File;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mpi/zcx_mpi_test.c");
/// Open MPI's own limit on the job; the test's, a little longer, catches a hung `mpirun`.
const JOB_SECONDS: u64 = 180;
const TEST_SECONDS: u64 = 240;
const COMPILE_SECONDS: u64 = 120;
/// The program's last line, printed by rank 0 after `MPI_Finalize`.
const ALL_PASSED: &str = "zcx-mpi-test: all checks passed";

/// One job at a time: the 2 ranks (and their 2 threads each) already fill the machine.
static ONE_JOB: Mutex<()> = Mutex::new(());

/// Whether `program` is installed; under `ZCX_REQUIRE_CAPI=1` a missing one fails the test.
fn tool(program: &str, test: &str) -> bool {
    if common::have(program, test) {
        return true;
    }
    assert!(std::env::var_os("ZCX_REQUIRE_CAPI").is_none_or(|v| v != "1"), "{program} is required");
    false
}

/// A directory of the test's own, removed when the test ends however it ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("zcx-open-mpi-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test's directory");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Builds the program with `mpicc` (the wrapper adds Open MPI's headers and libraries).
fn compile(dir: &Path) -> PathBuf {
    let exe = dir.join("zcx_mpi_test");
    let log_path = dir.join("mpicc.log");
    let log = File::create(&log_path).expect("create the compiler log");
    let child = Command::new("mpicc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-o"])
        .arg(&exe)
        .arg(SOURCE)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("share the compiler log"))
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("run mpicc");
    let status = wait(child, COMPILE_SECONDS, &Vec::new);
    let log = read(&log_path);
    let status = status.unwrap_or_else(|| panic!("mpicc did not finish in {COMPILE_SECONDS} s:\n{log}"));
    assert!(status.success(), "mpicc failed ({status}):\n{log}");
    exe
}

/// The pid in a `zcx-mpi-test: rank R pid P libucp PATH` line.
fn pid_in(line: &str) -> Option<i32> {
    line.split_whitespace().skip_while(|w| *w != "pid").nth(1)?.parse().ok()
}

/// The pid of an Open MPI verbose line, `[host:pid] ...` (the pid may be zero-padded).
fn verbose_pid(line: &str) -> Option<i32> {
    let (_, pid) = line.strip_prefix('[')?.split_once(']')?.0.rsplit_once(':')?;
    pid.parse().ok()
}

/// The pids of the ranks, from the program's own lines, so a timeout can end them too.
fn rank_pids(stdout: &str) -> Vec<i32> {
    stdout.lines().filter(|l| l.starts_with("zcx-mpi-test: rank ")).filter_map(pid_in).collect()
}

fn read(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut text);
    }
    text
}

/// Sends `sig` to `pid` (a process group when negative).
fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe { libc::kill(pid, sig) };
}

/// Waits up to `seconds` for `child`, which leads its own process group; past that, ends the
/// group and the `others` (processes it started outside the group), and returns `None`.
fn wait(mut child: Child, seconds: u64, others: &dyn Fn() -> Vec<i32>) -> Option<ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let group = child.id() as i32;
    let others = others();
    // SIGTERM first: mpirun then tears the job down itself, ranks included.
    signal(-group, libc::SIGTERM);
    std::thread::sleep(Duration::from_secs(3));
    signal(-group, libc::SIGKILL);
    for pid in others {
        signal(pid, libc::SIGKILL);
    }
    let _ = child.wait();
    None
}

/// `extra` is given to `mpirun` before the program (e.g. `-x UCX_TLS=tcp`).
fn run_job(test: &str, extra: &[&str], expect_tls: &str) {
    if !tool("mpicc", test) || !tool("mpirun", test) {
        return;
    }
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new(test);
    let exe = compile(&dir.0);
    let libdir = common::libdir();
    let expected = std::fs::canonicalize(libdir.join("libucp.so.0")).expect("libucp.so.0 in the libdir");
    let mut library_path = libdir.into_os_string();
    if let Some(rest) = std::env::var_os("LD_LIBRARY_PATH").filter(|r| !r.is_empty()) {
        library_path.push(":");
        library_path.push(rest);
    }
    let mut export = std::ffi::OsString::from("LD_LIBRARY_PATH=");
    export.push(&library_path);

    let stdout_path = dir.0.join("stdout");
    let stderr_path = dir.0.join("stderr");
    let mut mpirun = Command::new("mpirun");
    mpirun
        .args(["-np", "2", "--timeout", &JOB_SECONDS.to_string()])
        // Tests run as root here; 2 ranks of 2 threads each may exceed the cores there are.
        .args(["--allow-run-as-root", "--oversubscribe", "--bind-to", "none"])
        // Debian's openmpi-mca-params.conf says `pml = ^ucx`; the command line overrides it.
        .args(["--mca", "pml", "ucx"])
        // By default Open MPI takes UCX only where it finds Mellanox devices (`mlx*`) and their transports.
        .args(["--mca", "opal_common_ucx_tls", "any", "--mca", "opal_common_ucx_devices", "any"])
        // Verbose selection and pml lines: the proof below that the UCX pml carried the job.
        .args(["--mca", "pml_ucx_verbose", "10", "--mca", "pml_base_verbose", "10"])
        .arg("-x")
        .arg(&export)
        .args(extra)
        .arg(&exe)
        .arg(&dir.0)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        // Local ranks inherit mpirun's environment: only `extra` chooses the transports.
        .env_remove("UCX_TLS")
        .stdin(Stdio::null())
        .stdout(File::create(&stdout_path).expect("create stdout file"))
        .stderr(File::create(&stderr_path).expect("create stderr file"))
        // Its own process group, so a hung job can be ended without touching anything else.
        .process_group(0);
    let child = mpirun.spawn().expect("start mpirun");
    let status = wait(child, TEST_SECONDS, &|| rank_pids(&read(&stdout_path)));
    let stdout = read(&stdout_path);
    let stderr = read(&stderr_path);
    let context = format!("--- stdout:\n{stdout}\n--- stderr:\n{stderr}");

    let status =
        status.unwrap_or_else(|| panic!("{test}: mpirun did not finish in {TEST_SECONDS} s\n{context}"));
    assert!(status.success(), "{test}: mpirun failed ({status})\n{context}");
    assert!(stdout.lines().any(|l| l.trim_end() == ALL_PASSED), "{test}: no `{ALL_PASSED}` line\n{context}");

    for rank in 0..2 {
        let peer = 1 - rank;
        let prefix = format!("zcx-mpi-test: rank {rank} ");
        let own: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix(&prefix)).collect();

        // Exactly one libucp mapped, and it is the one under test.
        let mapped: Vec<PathBuf> = own
            .iter()
            .filter_map(|l| l.split_once(" libucp ").map(|(_, path)| path.trim_end()))
            .map(|path| std::fs::canonicalize(path).unwrap_or_else(|_| PathBuf::from(path)))
            .collect();
        assert_eq!(
            mapped,
            vec![expected.clone()],
            "{test}: rank {rank} must map exactly the libucp under test\n{context}"
        );

        let tls = format!("UCX_TLS={expect_tls}");
        assert!(
            own.iter().any(|l| l.trim_end() == tls),
            "{test}: rank {rank} must run with {tls}\n{context}"
        );

        // The rank's own verbose lines: the UCX pml was selected, made the
        // endpoint to the peer, and was torn down at MPI_Finalize.
        let pid = own
            .iter()
            .find_map(|l| pid_in(l))
            .unwrap_or_else(|| panic!("{test}: rank {rank} printed no pid\n{context}"));
        let verbose: Vec<&str> = stderr.lines().filter(|l| verbose_pid(l) == Some(pid)).collect();
        for needle in [
            "select: component ucx selected".to_owned(),
            format!("connecting to proc. {peer}"),
            "mca_pml_ucx_cleanup".to_owned(),
        ] {
            assert!(
                verbose.iter().any(|l| l.contains(&needle)),
                "{test}: rank {rank} (pid {pid}) has no `{needle}` line: was the UCX pml used?\n{context}"
            );
        }
    }
    println!(
        "{test}: {} checks passed over {}",
        stdout.matches("zcx-mpi-test: ok ").count(),
        expected.display()
    );
}

#[test]
fn open_mpi_ucx_pml_runs_the_mpi_checks() {
    run_job("open_mpi_ucx_pml_runs_the_mpi_checks", &[], "(unset)");
}

#[test]
fn open_mpi_ucx_pml_runs_the_mpi_checks_over_tcp() {
    run_job("open_mpi_ucx_pml_runs_the_mpi_checks_over_tcp", &["-x", "UCX_TLS=tcp"], "tcp");
}
