//! The `zcx` command: `zcx info` (the `ucx_info` of zcx) and `zcx perf` (its `ucx_perftest`).

mod info;
mod perf;

use clap::{Parser, Subcommand};

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
    /// End-to-end benchmarks over endpoints: latency and bandwidth of tag, put and AM (like
    /// ucx_perftest). With no options: every test, server and client on this host.
    Perf(perf::PerfArgs),
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
        Command::Perf(args) => perf::run(&args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("zcx: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}
