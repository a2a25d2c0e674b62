//! Two "hosts" on one machine: two network namespaces joined by a veth pair, each with its own
//! IPv4 address, and test processes run inside them.
//!
//! [`TwoHosts::new`] creates `zcx-a-<pid>-<n>` and `zcx-b-<pid>-<n>`, a veth pair with one end in
//! each, `10.213.<k>.1/24` on host A and `10.213.<k>.2/24` on host B, and brings `lo` and the veth
//! up. Dropping it deletes both namespaces (which deletes the veth pair with them), also when the
//! test panics. Namespaces left behind by a test process that was killed are removed by the next
//! run once their owner's pid is gone.
//!
//! [`TwoHosts::spawn`] re-runs one test of the current test binary inside a namespace with a role in
//! [`ROLE_VAR`]; the child prints its answers as `@key=value` lines ([`answer`]), which the parent
//! reads with [`Proc::expect`]. A [`Proc`] that is dropped while still running is killed by its pid.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Environment variable that tells a re-executed test binary which side it plays.
pub const ROLE_VAR: &str = "TWO_HOSTS_ROLE";

/// Prefix of the namespaces this harness creates.
const NS_PREFIX: &str = "zcx-";

/// The role of this process when a [`TwoHosts::spawn`] started it; `None` in the parent.
pub fn child_role() -> Option<String> {
    std::env::var(ROLE_VAR).ok()
}

/// Prints one answer line `@key=value` for the parent (the child side).
pub fn answer(key: &str, value: impl std::fmt::Display) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "@{key}={value}");
    let _ = out.flush();
}

/// One side of the pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    /// The first namespace, `.1`.
    A,
    /// The second namespace, `.2`.
    B,
}

/// Two network namespaces joined by a veth pair; deleted on drop.
#[derive(Debug)]
pub struct TwoHosts {
    ns: [String; 2],
    veth: [String; 2],
    ip: [Ipv4Addr; 2],
}

fn ip_cmd(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `ip {}`: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("`ip {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// True while `pid` runs (a zombie no longer owns anything).
fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may itself contain ") ".
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Deletes `zcx-a-<pid>-<n>` / `zcx-b-<pid>-<n>` namespaces whose creating process is gone.
fn remove_stale_namespaces() {
    let Ok(list) = ip_cmd(&["netns", "list"]) else { return };
    for line in list.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(NS_PREFIX) else { continue };
        let mut parts = rest.split('-');
        let (Some(side), Some(pid), Some(n), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if (side == "a" || side == "b") && n.parse::<u32>().is_ok() && !pid_alive(pid) {
            let _ = ip_cmd(&["netns", "del", name]);
        }
    }
}

/// The first capability `ip netns` and veth set-up need that this process lacks.
fn missing_capability() -> Option<&'static str> {
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_SYS_ADMIN: u32 = 21;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    [(CAP_NET_ADMIN, "CAP_NET_ADMIN"), (CAP_SYS_ADMIN, "CAP_SYS_ADMIN")]
        .into_iter()
        .find(|&(bit, _)| effective & (1 << bit) == 0)
        .map(|(_, name)| name)
}

impl TwoHosts {
    /// Creates the two namespaces, the veth pair and the addresses. `Err` carries the reason the
    /// machine cannot do it (not root, no CAP_NET_ADMIN, no `ip`): the caller prints it as a skip.
    pub fn new() -> Result<TwoHosts, String> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        if let Some(missing) = missing_capability() {
            return Err(format!("network namespaces need root ({missing} is missing)"));
        }
        match Command::new("ip").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status() {
            Ok(s) if s.success() => {}
            _ => return Err("iproute2's `ip` is not installed".into()),
        }
        remove_stale_namespaces();
        let pid = std::process::id();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let k = (pid.wrapping_mul(31).wrapping_add(n) % 250) + 1;
        let hosts = TwoHosts {
            ns: [format!("{NS_PREFIX}a-{pid}-{n}"), format!("{NS_PREFIX}b-{pid}-{n}")],
            // Interface names are at most 15 bytes; each end lives in its own namespace.
            veth: [format!("zva{}", pid % 1_000_000), format!("zvb{}", pid % 1_000_000)],
            ip: [Ipv4Addr::new(10, 213, k as u8, 1), Ipv4Addr::new(10, 213, k as u8, 2)],
        };
        // From here on, Drop removes whatever was created.
        ip_cmd(&["netns", "add", &hosts.ns[0]])
            .map_err(|e| format!("cannot create a network namespace: {e}"))?;
        ip_cmd(&["netns", "add", &hosts.ns[1]])
            .map_err(|e| format!("cannot create a network namespace: {e}"))?;
        hosts.setup().map_err(|e| format!("cannot set up the veth pair: {e}"))?;
        Ok(hosts)
    }

    fn setup(&self) -> Result<(), String> {
        let [ns_a, ns_b] = &self.ns;
        let [veth_a, veth_b] = &self.veth;
        ip_cmd(&[
            "link", "add", veth_a, "netns", ns_a, "type", "veth", "peer", "name", veth_b, "netns", ns_b,
        ])?;
        for host in [Host::A, Host::B] {
            let (ns, veth) = (self.ns(host), self.veth(host));
            ip_cmd(&["-n", ns, "link", "set", "lo", "up"])?;
            ip_cmd(&["-n", ns, "addr", "add", &format!("{}/24", self.ip(host)), "dev", veth])?;
            ip_cmd(&["-n", ns, "link", "set", veth, "up"])?;
        }
        // The veth carrier comes up asynchronously: wait until A reaches B.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let up = [Host::A, Host::B].iter().all(|&h| {
                ip_cmd(&["-n", self.ns(h), "link", "show", self.veth(h)])
                    .map(|s| s.contains("LOWER_UP") && !s.contains("NO-CARRIER"))
                    .unwrap_or(false)
            });
            if up {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err("the veth pair did not come up".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn index(host: Host) -> usize {
        match host {
            Host::A => 0,
            Host::B => 1,
        }
    }

    /// The namespace's name.
    pub fn ns(&self, host: Host) -> &str {
        &self.ns[Self::index(host)]
    }

    /// The name of the host's veth end (inside its namespace).
    pub fn veth(&self, host: Host) -> &str {
        &self.veth[Self::index(host)]
    }

    /// The host's address on the veth.
    pub fn ip(&self, host: Host) -> Ipv4Addr {
        self.ip[Self::index(host)]
    }

    /// Brings the host's veth end down (`ip link set <veth> down`).
    pub fn link_down(&self, host: Host) -> Result<(), String> {
        ip_cmd(&["-n", self.ns(host), "link", "set", self.veth(host), "down"]).map(drop)
    }

    /// Deletes the host's veth end, which deletes the pair.
    pub fn delete_veth(&self, host: Host) -> Result<(), String> {
        ip_cmd(&["-n", self.ns(host), "link", "del", self.veth(host)]).map(drop)
    }

    /// Runs test `test` of this test binary inside `host`'s namespace, with `role` in
    /// [`ROLE_VAR`] and the extra environment `env`.
    pub fn spawn(&self, host: Host, test: &str, role: &str, env: &[(&str, String)]) -> Proc {
        let exe = std::env::current_exe().expect("test binary path");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.ns(host)])
            .arg(&exe)
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(ROLE_VAR, role)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        // SAFETY: prctl is async-signal-safe. The death signal fires when the spawning thread
        // ends, which is after this test reaped its children; if the test process is killed, the
        // children die with it instead of running on in the namespaces.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Proc::start(cmd, format!("{role}@{}", self.ns(host)))
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            // Deleting a namespace deletes the veth end in it, and with it the pair.
            let _ = ip_cmd(&["netns", "del", ns]);
        }
    }
}

/// A child test process; killed by its pid if still running when dropped.
pub struct Proc {
    name: String,
    child: Child,
    lines: Receiver<String>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    answers: HashMap<String, String>,
    status: Option<ExitStatus>,
}

impl Proc {
    fn start(mut cmd: Command, name: String) -> Proc {
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let (tx, lines) = std::sync::mpsc::channel();
        let stdout = Arc::new(Mutex::new(String::new()));
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        let log = Arc::clone(&stdout);
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                log.lock().unwrap().push_str(&line);
                log.lock().unwrap().push('\n');
                // The harness prints "test name ... " before the first answer, on the same line.
                if let Some((_, answer)) = line.split_once('@') {
                    if tx.send(answer.to_owned()).is_err() {
                        break;
                    }
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().expect("stderr");
        let log = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                log.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Proc { name, child, lines, stdout, stderr, answers: HashMap::new(), status: None }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn output(&self) -> String {
        format!(
            "--- stdout of {}\n{}--- stderr\n{}",
            self.name,
            self.stdout.lock().unwrap(),
            self.stderr.lock().unwrap()
        )
    }

    fn take_line(&mut self, timeout: Duration) -> Result<Option<String>, RecvTimeoutError> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => {
                if let Some((k, v)) = line.split_once('=') {
                    self.answers.insert(k.to_owned(), v.to_owned());
                }
                Ok(Some(line))
            }
            Err(e) => Err(e),
        }
    }

    /// Waits up to `timeout` for the answer `@key=value` and returns the value. Panics (with the
    /// child's output) if the child ends or the time runs out first.
    pub fn expect(&mut self, key: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = self.answers.get(key) {
                return v.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.take_line(left) {
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    self.kill();
                    panic!("{}: no @{key} within {timeout:?}\n{}", self.name, self.output());
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.wait_exit(Duration::from_secs(5));
                    panic!("{}: ended ({status:?}) without @{key}\n{}", self.name, self.output());
                }
            }
        }
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.status {
                return Some(status);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                self.status = Some(status);
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits up to `timeout` for the child to exit successfully and returns all its answers.
    /// Panics with its output if it fails or runs too long (then it is killed).
    pub fn finish(mut self, timeout: Duration) -> HashMap<String, String> {
        match self.wait_exit(timeout) {
            Some(status) if status.success() => {}
            Some(status) => panic!("{} failed: {status}\n{}", self.name, self.output()),
            None => {
                self.kill();
                panic!("{} still running after {timeout:?}; killed\n{}", self.name, self.output());
            }
        }
        // Exited: the stdout thread sees EOF soon and closes the channel.
        while let Ok(Some(_)) = self.take_line(Duration::from_secs(5)) {}
        std::mem::take(&mut self.answers)
    }

    /// Kills the child by its pid (if it still runs) and reaps it.
    pub fn kill(&mut self) {
        if self.status.is_none() {
            // SAFETY: kill(2) on the pid of our own unreaped child, so it cannot have been reused.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGKILL) };
            self.status = self.child.wait().ok();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.status.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.status = Some(status);
            }
        }
        self.kill();
    }
}
