//! `zcx perf`: end-to-end benchmarks over zcx endpoints, like `ucx_perftest`.
//!
//! - `zcx perf` runs both sides on this host: a server child pinned to CPU 1, the client pinned to
//!   CPU 0 (see [`launcher`]).
//! - `zcx perf --server [-p port]` and `zcx perf --client <host> [-p port]` run one side each.
//!
//! Both sides busy-poll their worker from the calling thread. The client tells the server which
//! test to run before each one (the server needs no test options), and prints one `key=value` line
//! per test (see [`report`]).

mod am;
mod args;
mod client;
mod launcher;
mod report;
mod server;
mod session;

use std::net::{SocketAddr, ToSocketAddrs as _};
use std::time::Duration;

pub use args::PerfArgs;
use args::{TestKind, TestSpec, DEFAULT_PORT};

/// Runs `zcx perf`.
pub fn run(args: &PerfArgs) -> Result<(), String> {
    if args.server {
        if let Some(parent) = args.parent_pid {
            die_with_parent(parent)?;
        }
        pin("server", args.server_cpu, args.no_pin);
        // Started by the default mode: loopback only. Stand-alone: every interface, like ucx_perftest.
        let ip = if args.parent_pid.is_some() { [127, 0, 0, 1] } else { [0, 0, 0, 0] };
        let bind = SocketAddr::from((ip, args.port.unwrap_or(DEFAULT_PORT)));
        return server::run(bind, Duration::from_secs(args.timeout), args.parent_pid);
    }
    let kinds = if args.tests.is_empty() { TestKind::ALL.to_vec() } else { args.tests.clone() };
    let specs: Vec<TestSpec> = kinds.into_iter().map(|kind| TestSpec::new(kind, args)).collect();
    pin("client", args.client_cpu, args.no_pin);
    match &args.client {
        Some(host) => {
            let port = args.port.unwrap_or(DEFAULT_PORT);
            let addr = (host.as_str(), port)
                .to_socket_addrs()
                .map_err(|e| format!("cannot resolve {host}: {e}"))?
                .find(SocketAddr::is_ipv4)
                .ok_or_else(|| format!("{host} has no IPv4 address"))?;
            println!(
                "# zcx perf {} server={addr} client_cpu={} window={} batch={}",
                env!("CARGO_PKG_VERSION"),
                if args.no_pin { "any".to_string() } else { args.client_cpu.to_string() },
                args.window,
                args.batch
            );
            print_legend();
            client::run(args, addr, &specs).map(drop)
        }
        None => launcher::run(args, &specs).map(drop),
    }
}

/// The second header line: what the numbers mean.
fn print_legend() {
    println!(
        "# latency_us: one-way (RTT/2), median of per-batch averages; avg_us: whole run; bandwidth: MB=1e6 B, GB=1e9 B"
    );
}

/// Pins the calling thread (and the threads it starts) to `cpu`; a failure is a warning, not an
/// error, so the benchmark still runs on a machine with fewer CPUs.
fn pin(side: &str, cpu: usize, no_pin: bool) {
    if no_pin {
        return;
    }
    let result = zcx::CpuSet::single(cpu)
        .map_err(|e| e.to_string())
        .and_then(|set| zcx_hugepages::pin_current_thread(&set).map_err(|e| e.to_string()));
    if let Err(e) = result {
        eprintln!("zcx perf: cannot pin the {side} to CPU {cpu} ({e}); running unpinned");
    }
}

/// Makes the kernel kill this process when the process that started it dies, and exits at once
/// if it already has.
fn die_with_parent(parent: u32) -> Result<(), String> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number; no memory is passed.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        return Err(format!("prctl(PR_SET_PDEATHSIG) failed: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } as u32 != parent {
        return Err("the process that started the server is already gone".into());
    }
    Ok(())
}
