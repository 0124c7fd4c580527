//! `jobcast`: the command-line entry point that wires the crates together.
//! Each subcommand lives in its own module under `cli/`.

mod cli;

use clap::{Parser, Subcommand};

/// The pipeline's source thread allocates every consumed message and the
/// pipeline thread frees it; glibc's malloc takes the allocating thread's
/// arena lock for each such free, and made the pipeline's own work a third
/// slower once the two ran side by side (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "jobcast",
    version,
    about = "Streaming job-runtime and preemption-risk predictions for cluster schedulers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Convert a trace into Parquet tables (jobs, tasks, events, machines).
    Convert(cli::convert::Args),
    /// Run SQL over converted Parquet tables (interactive without a query).
    Sql(cli::sql::Args),
    /// Write a seeded synthetic workload as canonical JSON lines.
    Generate(cli::generate::Args),
    /// Simulate a cluster scheduled by one prediction policy over a trace.
    Simulate(cli::simulate::Args),
    /// Compare every prediction policy on the same simulated cluster.
    Evaluate(cli::evaluate::Args),
    /// Replay a trace into Kafka in event-time order, keyed by job.
    Replay(cli::replay::Args),
    /// Run the streaming service: Kafka events in, decisions out.
    Serve(cli::serve::Args),
    /// Run the service on an embedded Kafka and replay a trace into it.
    Demo(cli::demo::Args),
    /// Preemption risk of transient VMs: scores, checkpoints, VM reuse.
    Risk(cli::risk::Args),
    /// Measure throughput: `bench pipeline` is events/s end to end.
    Bench(cli::bench::Args),
}

fn main() -> std::process::ExitCode {
    use std::io::IsTerminal;

    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("JOBCAST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colours for a terminal only, not for journald or a log collector.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Convert(args) => cli::convert::run(args),
        Command::Sql(args) => cli::sql::run(args),
        Command::Generate(args) => cli::generate::run(args),
        Command::Simulate(args) => cli::simulate::run(args),
        Command::Evaluate(args) => cli::evaluate::run(args),
        Command::Replay(args) => cli::replay::run(args),
        Command::Serve(args) => cli::serve::run(args),
        Command::Demo(args) => cli::demo::run(args),
        Command::Risk(args) => cli::risk::run(args),
        Command::Bench(args) => cli::bench::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
