//! The default mode: the server as a child process of this one, the client here.
//!
//! The child is started as `zcx perf --server -p 0 --parent-pid <us>`; it asks the kernel to kill
//! it when we die (`PR_SET_PDEATHSIG`), and we kill it ourselves when the client fails, so no
//! server outlives a run.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::perf::args::{PerfArgs, TestSpec};
use crate::perf::client;
use crate::perf::report::Report;

/// What the server prints once it listens.
pub const READY_PREFIX: &str = "zcx-perf-server listening port=";

/// The server child; killed and reaped when dropped before it exited by itself.
struct ServerChild {
    child: Child,
    exited: bool,
}

impl ServerChild {
    /// Waits up to `limit` for the child to exit by itself.
    fn wait_exit(&mut self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.exited = true;
                    return if status.success() {
                        Ok(())
                    } else {
                        Err(format!("the server failed ({status})"))
                    };
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                Ok(None) => return Err(format!("the server did not exit within {} s", limit.as_secs())),
                Err(e) => return Err(format!("cannot wait for the server: {e}")),
            }
        }
    }
}

impl Drop for ServerChild {
    fn drop(&mut self) {
        if !self.exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts the server child, runs the client against it, and reaps the child.
pub fn run(args: &PerfArgs, specs: &[TestSpec], out: &client::Output) -> Result<Vec<Report>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the zcx executable: {e}"))?;
    let mut command = Command::new(exe);
    command
        .args(["perf", "--server", "-p"])
        .arg(args.port.unwrap_or(0).to_string())
        .arg("--server-cpu")
        .arg(args.server_cpu.to_string())
        .arg("--timeout")
        .arg(args.timeout.to_string())
        .arg("--parent-pid")
        .arg(std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if args.no_pin {
        command.arg("--no-pin");
    }
    #[cfg(feature = "dpdk")]
    let memif = memif_pair(args, &mut command)?;
    #[cfg(not(feature = "dpdk"))]
    let memif: Option<()> = None;
    let mut child = command.spawn().map_err(|e| format!("cannot start the server process: {e}"))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut server = ServerChild { child, exited: false };
    // Read the child's stdout on a thread: its first line is the port; the rest is drained.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let port = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .map_err(|_| "the server process did not start listening".to_owned())?;
        if let Some(port) = line.strip_prefix(READY_PREFIX) {
            break port.trim().parse::<u16>().map_err(|_| format!("bad line from the server: {line:?}"))?;
        }
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    super::print_header(
        out,
        &format!(
            "server=127.0.0.1:{port} pid={} server_cpu={} client_cpu={} window={} batch={} tls={}{}",
            server.child.id(),
            cpu_label(args, args.server_cpu),
            cpu_label(args, args.client_cpu),
            args.window,
            args.batch_label(),
            out.tls,
            if memif.is_some() { " dpdk=memif-pair" } else { "" }
        ),
    );
    let reports = match client::run(args, addr, specs, out) {
        Ok(reports) => reports,
        Err(e) => {
            // The server may have failed first (a validation error, say) and be printing why:
            // let it finish and exit before it is killed, so its reason is not lost.
            let _ = server.wait_exit(Duration::from_secs(3));
            return Err(e);
        }
    };
    server.wait_exit(Duration::from_secs(10))?;
    Ok(reports)
}

/// With `--tls` naming dpdk and no `ZCX_DPDK_EAL_ARGS`: a `net_memif` pair between the server
/// child (its variables set on `command`) and this process (set in its environment, read when the
/// client's context is made); `None` when the user drives EAL or DPDK is not asked for.
#[cfg(feature = "dpdk")]
fn memif_pair(args: &PerfArgs, command: &mut Command) -> Result<Option<super::memif::MemifPair>, String> {
    let Some(tls) = args.tls.as_deref().filter(|tls| super::names_dpdk(tls)) else { return Ok(None) };
    if std::env::var_os("ZCX_DPDK_EAL_ARGS").is_some() {
        return Ok(None);
    }
    let cpu = |cpu: usize| (!args.no_pin).then_some(cpu);
    let pair = super::memif::MemifPair::new(tls, cpu(args.server_cpu), cpu(args.client_cpu))?;
    for (key, value) in pair.server_env() {
        command.env(key, value);
    }
    // Read by this process's context, made by the client after the server listens.
    for (key, value) in pair.client_env() {
        std::env::set_var(key, value);
    }
    Ok(Some(pair))
}

fn cpu_label(args: &PerfArgs, cpu: usize) -> String {
    if args.no_pin {
        "any".into()
    } else {
        cpu.to_string()
    }
}
