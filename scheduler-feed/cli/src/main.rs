//! `jobcast`: the command line over the library crates. Each subcommand
//! is a module of its own with its clap `Args` and its `run`: it parses,
//! calls a library, and prints.

mod admin;
mod bench;
mod convert;
mod demo;
mod evaluate;
mod generate;
mod kafka_args;
mod output;
mod replay;
mod risk;
mod serve;
mod simulate;
mod slurm;
mod sql;

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
    Convert(convert::Args),
    /// Run SQL over converted Parquet tables (interactive without a query).
    Sql(sql::Args),
    /// Write a seeded synthetic workload as canonical JSON lines.
    Generate(generate::Args),
    /// Simulate a cluster scheduled by one prediction policy over a trace.
    Simulate(simulate::Args),
    /// Compare every prediction policy on the same simulated cluster.
    Evaluate(evaluate::Args),
    /// Replay a trace into Kafka in event-time order, keyed by job.
    Replay(replay::Args),
    /// Run the streaming service: Kafka events in, decisions out.
    Serve(serve::Args),
    /// Run the service on an embedded Kafka and replay a trace into it.
    Demo(demo::Args),
    /// Preemption risk of transient VMs: scores, checkpoints, VM reuse.
    Risk(risk::Args),
    /// Measure throughput: `bench pipeline` is events/s end to end.
    Bench(bench::Args),
    /// Operate on a store: info, backup, restore, skip, rebuild.
    Admin(admin::Args),
    /// A real Slurm cluster in the loop: `slurm watch` publishes its jobs.
    Slurm(slurm::Args),
}

fn main() -> std::process::ExitCode {
    use std::io::IsTerminal;

    let cli = Cli::parse();
    // The demo's live display is the reader's; its logs are warnings unless
    // asked for. A service logs what it does.
    let default_level = match cli.command {
        Command::Demo(_) => "warn",
        _ => "info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("JOBCAST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        // Colours for a terminal only, not for journald or a log collector.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let result = match cli.command {
        Command::Convert(args) => convert::run(args),
        Command::Sql(args) => sql::run(args),
        Command::Generate(args) => generate::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Evaluate(args) => evaluate::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Risk(args) => risk::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Admin(args) => admin::run(args),
        Command::Slurm(args) => slurm::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
