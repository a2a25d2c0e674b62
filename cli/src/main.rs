//! The `zcx` command: `zcx info` (the `ucx_info` of zcx), `zcx perf` (its `ucx_perftest`),
//! `zcx plot` (draws the CSV `zcx perf --csv` or `scripts/compare-ucx.sh` write) and `zcx probe`
//! (the host's cross-core round trip, which says what state a measurement ran in).

mod info;
mod perf;
mod probe;

use clap::{CommandFactory as _, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "zcx", version, about = "zcx kernel-bypass transport: information and benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Version, hugepage pools, memlock limit, transports and configuration (like ucx_info).
    Info(info::InfoArgs),
    /// End-to-end benchmarks over endpoints: latency and bandwidth of tag, put, get, atomics, AM
    /// and stream (like ucx_perftest). With no options: every test, server and client on this host.
    // Boxed: its options outweigh the other commands' many times over.
    Perf(Box<perf::PerfArgs>),
    /// Draw latency and bandwidth against message size from a CSV into an SVG file.
    Plot(perf::PlotArgs),
    /// The host's cross-core round trip: two pinned threads passing a cache line back and forth.
    Probe(probe::ProbeArgs),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ZCX_LOG_LEVEL")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info(args) => info::run(&args),
        Command::Perf(args) => match perf::run(&args) {
            Ok(()) => Ok(()),
            Err(perf::PerfError::Failed(err)) => Err(err),
            // Like a parse error: clap's format and exit code 2.
            Err(perf::PerfError::Usage(err)) => {
                let mut cmd = Cli::command();
                let perf = cmd.find_subcommand_mut("perf").expect("the perf subcommand").clone();
                perf.bin_name("zcx perf").error(clap::error::ErrorKind::ValueValidation, err).exit()
            }
        },
        Command::Plot(args) => perf::plot_csv(&args),
        Command::Probe(args) => probe::run(&args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("zcx: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}
