//! Helpers shared by the integration tests: re-running this test binary as a second process, a
//! deterministic byte pattern, and readings from /proc.
#![allow(dead_code)]

pub mod net;
pub mod raw;

use std::io::{Read, Write};
use std::process::{Command, Stdio};

/// Environment variable that marks a re-executed test binary as the child of a two-process test.
pub const ROLE_VAR: &str = "ZCX_TEST_CHILD_ROLE";

/// The role this process plays, when it was started by [`run_child`].
pub fn child_role() -> Option<String> {
    std::env::var(ROLE_VAR).ok()
}

/// Runs `test_name` of this same test binary in a new process with `role`, feeding it `input` on
/// stdin; returns its stdout. Panics with its stderr if it fails.
pub fn run_child(test_name: &str, role: &str, input: &str) -> String {
    run_child_with(test_name, role, input, |_| {})
}

/// As [`run_child`], letting the caller adjust the command (e.g. drop privileges).
pub fn run_child_with(test_name: &str, role: &str, input: &str, adjust: impl FnOnce(&mut Command)) -> String {
    let exe = PortableExe::new();
    let mut cmd = Command::new(&exe.0);
    cmd.args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env(ROLE_VAR, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    adjust(&mut cmd);
    let mut child = cmd.spawn().expect("spawn child test process");
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write child stdin");
    let mut stdout = String::new();
    child.stdout.take().expect("stdout").read_to_string(&mut stdout).expect("read child stdout");
    let output = child.wait_with_output().expect("wait for child");
    assert!(
        output.status.success(),
        "child {role} failed: {:?}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    // The test harness prints its own text ("test name ... " precedes the first answer on the same
    // line); the child's answers are what follows an "@".
    stdout.lines().filter_map(|l| l.split_once('@').map(|(_, answer)| answer)).collect::<Vec<_>>().join("\n")
}

/// Reads all of stdin (the child side).
pub fn read_stdin() -> String {
    let mut s = String::new();
    std::io::stdin().read_to_string(&mut s).expect("read stdin");
    s
}

/// Prints one answer line for the parent (the child side).
pub fn answer(line: &str) {
    println!("@{line}");
}

pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn from_hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

/// The byte at `index` of pattern `seed`: cheap, and different for neighbouring seeds and indices.
pub fn pattern_byte(seed: u64, index: usize) -> u8 {
    let x = (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    (x >> 29) as u8 ^ (x >> 7) as u8
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Number of open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd").count()
}

/// Number of memfd mappings in this process.
pub fn memfd_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("/proc/self/maps")
        .lines()
        .filter(|l| l.contains("/memfd:"))
        .count()
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A free address aligned to `align` with `len` bytes of unmapped space after it: reserve a range,
/// then give it back. Another thread may map into it afterwards, so tests that rely on it for long
/// run alone in their binary.
pub fn free_address(len: usize, align: usize) -> usize {
    let span = len + align;
    // SAFETY: a fresh PROT_NONE reservation, unmapped again right away.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    // SAFETY: unmaps the reservation made above.
    unsafe { libc::munmap(p, span) };
    (p as usize + align - 1) & !(align - 1)
}

/// A copy of this test binary that any user may execute, for children run as another user: the
/// checkout may sit under a directory only root can enter (e.g. /root). Removed on drop.
pub struct PortableExe(pub std::path::PathBuf);

impl PortableExe {
    pub fn new() -> PortableExe {
        use std::os::unix::fs::PermissionsExt;
        let exe = std::env::current_exe().expect("test binary path");
        let name = exe.file_name().expect("binary name").to_string_lossy().into_owned();
        let copy = std::env::temp_dir().join(format!("zcx-{}-{name}", std::process::id()));
        std::fs::copy(&exe, &copy).expect("copy the test binary");
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        PortableExe(copy)
    }
}

impl Drop for PortableExe {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
