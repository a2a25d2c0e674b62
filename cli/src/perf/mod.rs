//! `zcx perf`: end-to-end benchmarks over zcx endpoints, like `ucx_perftest`.
//!
//! - `zcx perf` runs both sides on this host: a server child pinned to CPU 1, the client pinned to
//!   CPU 0 (see [`launcher`]).
//! - `zcx perf --server [-p port]` and `zcx perf --client <host> [-p port]` run one side each.
//!
//! Tests (like `ucx_perftest`'s): tag_lat, tag_sync_lat, tag_bw, put_lat, put_bw, get_lat, get_bw,
//! atomic_add_lat, fadd_lat, cswap_lat, am_lat, am_bw, stream_lat, stream_bw (see [`args`]), over
//! one size, a list (`-s 8,64,1k`) or a doubling sweep (`--sweep 8:4m`).
//!
//! `--endpoints N` runs tag_lat (or tag_sync_lat) over N endpoints to the one server, round-robin,
//! and reports what each endpoint costs both sides in memory and descriptors (see [`many`] and
//! `docs/scale.md`).
//!
//! Both sides busy-poll their worker from the calling thread. The client tells the server which
//! test to run before each one (the server needs no test options), and prints one `key=value` line
//! per test, or CSV or JSON records (see [`report`]); latencies carry percentiles from a
//! per-iteration histogram ([`hist`]). `--validate` checks every byte received ([`pattern`]).

mod am;
mod args;
mod buf;
mod client;
mod hist;
mod launcher;
mod many;
#[cfg(feature = "dpdk")]
mod memif;
mod pattern;
mod plot;
mod report;
mod scale_plot;
mod server;
mod session;
mod tsc;

use std::net::{SocketAddr, ToSocketAddrs as _};
use std::time::Duration;

pub use args::PerfArgs;
use args::DEFAULT_PORT;
pub use plot::{plot_csv, PlotArgs};
use report::Format;

/// Why `zcx perf` failed.
#[derive(Debug)]
pub enum PerfError {
    /// The options ask for something impossible (exit code 2, like a parse error).
    Usage(String),
    /// A test failed or could not run.
    Failed(String),
}

impl From<String> for PerfError {
    fn from(message: String) -> Self {
        PerfError::Failed(message)
    }
}

/// Runs `zcx perf`.
pub fn run(args: &PerfArgs) -> Result<(), PerfError> {
    if let Some(tls) = &args.tls {
        if tls.trim().is_empty() {
            return Err(PerfError::Usage("--tls needs a transport list, e.g. --tls uring".into()));
        }
        if names_dpdk(tls) {
            dpdk_usable(args)?;
        }
        // Read by both sides' contexts: this process's, and the server child's, which inherits it.
        std::env::set_var("ZCX_TLS", tls);
    }
    if args.server {
        if let Some(parent) = args.parent_pid {
            die_with_parent(parent)?;
        }
        pin("server", args.server_cpu, args.no_pin);
        // Started by the default mode: loopback only. Stand-alone: every interface, like ucx_perftest.
        let ip = if args.parent_pid.is_some() { [127, 0, 0, 1] } else { [0, 0, 0, 0] };
        let bind = SocketAddr::from((ip, args.port.unwrap_or(DEFAULT_PORT)));
        return Ok(server::run(bind, Duration::from_secs(args.timeout), args.parent_pid)?);
    }
    let specs = args::plan(args).map_err(PerfError::Usage)?;
    if args.plot.as_ref().is_some_and(|p| p.extension().is_none_or(|e| e != "svg")) {
        return Err(PerfError::Usage("--plot writes SVG: give a file name ending in .svg".into()));
    }
    if let Some(n) = args.corrupt_iter {
        pattern::set_corrupt_target(n);
    }
    let out = client::Output::new(args);
    pin("client", args.client_cpu, args.no_pin);
    let reports = match &args.client {
        Some(host) => {
            let port = args.port.unwrap_or(DEFAULT_PORT);
            let addr = (host.as_str(), port)
                .to_socket_addrs()
                .map_err(|e| format!("cannot resolve {host}: {e}"))?
                .find(SocketAddr::is_ipv4)
                .ok_or_else(|| format!("{host} has no IPv4 address"))?;
            print_header(
                &out,
                &format!(
                    "server={addr} client_cpu={} window={} batch={} tls={}",
                    if args.no_pin { "any".to_string() } else { args.client_cpu.to_string() },
                    args.window,
                    args.batch_label(),
                    out.tls
                ),
            );
            client::run(args, addr, &specs, &out)?
        }
        None => launcher::run(args, &specs, &out)?,
    };
    if let Some(path) = &args.plot {
        plot::draw(&plot::Series::from_reports(&reports, "zcx"), path)?;
        if out.format == Format::Text {
            println!("# plot written to {}", path.display());
        }
    }
    Ok(())
}

/// Whether the transport list `tls` names DPDK.
fn names_dpdk(tls: &str) -> bool {
    tls.split(',').any(|t| t.trim() == "dpdk")
}

/// Whether `--tls dpdk` can run: the `dpdk` feature with DPDK linked, and EAL arguments from the
/// user unless the default mode sets up its own `net_memif` pair (see `memif.rs`).
fn dpdk_usable(args: &PerfArgs) -> Result<(), PerfError> {
    #[cfg(not(feature = "dpdk"))]
    {
        let _ = args;
        Err(PerfError::Usage(
            "--tls dpdk: this zcx was built without DPDK support; build it with \
             `cargo build --release --bin zcx --features zcx-cli/dpdk` (needs Debian's libdpdk-dev 22.11)"
                .into(),
        ))
    }
    #[cfg(feature = "dpdk")]
    {
        if let Some(why) = zcx_dataplane::dpdk::dpdk_missing() {
            return Err(PerfError::Usage(format!(
                "--tls dpdk: this zcx was built with the dpdk feature but without DPDK ({why})"
            )));
        }
        let own_side = args.server || args.client.is_some();
        if own_side && std::env::var_os("ZCX_DPDK_EAL_ARGS").is_none() {
            return Err(PerfError::Usage(
                "--tls dpdk with --server or --client needs ZCX_DPDK_EAL_ARGS and ZCX_DPDK_PORT on each \
                 side (without --server/--client, zcx perf connects its two sides by a net_memif pair itself)"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// The header: `# zcx perf <version> <what>` and the legend for `key=value` output, the CSV
/// header line for CSV, nothing for JSON.
fn print_header(out: &client::Output, what: &str) {
    match out.format {
        Format::Text => {
            println!("# zcx perf {} {what}", env!("CARGO_PKG_VERSION"));
            println!(
                "# latency_us: ping-pongs one-way (RTT/2), get/atomics the whole operation; median of per-batch averages; \
                 avg_us: whole run; min/p50/p99/p999/max_us: per iteration; bandwidth: MB=1e6 B, GB=1e9 B"
            );
        }
        Format::Csv => println!("{}", report::FIELDS.join(",")),
        Format::Json => {}
    }
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
