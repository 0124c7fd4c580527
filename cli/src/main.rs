//! `jobcast`: the command line over the library crates. Each subcommand
//! is a module of its own with its clap `Args` and its `run`: it parses,
//! calls a library, and prints.

mod admin;
mod bench;
mod convert;
mod demo;
mod evaluate;
mod generate;
mod hpc;
mod output;
mod provenance;
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
    about = "Streaming job-runtime and preemption-risk predictions for cluster schedulers",
    before_help = "Start here:\n  \
        jobcast demo                                      the service on an embedded Kafka, a trace replayed into it\n  \
        jobcast convert --format google2011 --input DIR --output tables && jobcast sql --data tables\n  \
        jobcast serve --brokers HOST:9092 --data-dir state    the service on a real Kafka"
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
    /// Measure the service: throughput end to end, latency, restarts, the
    /// engine alone, and job completion times on a real Slurm cluster.
    Bench(bench::Args),
    /// Operate on a store: info, backup, restore, skip, rebuild, parked.
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
        // The reader went away (`jobcast … | head`): a quiet end, as
        // ripgrep's.
        Err(err) if broken_pipe(&err) => std::process::ExitCode::SUCCESS,
        Err(err) if err.is::<output::Reported>() => std::process::ExitCode::FAILURE,
        Err(err) => {
            eprintln!("error: {}", chain(&err));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error and its causes, `: `-separated, each once: a cause whose text
/// its effect already shows (`#[error("{path}: {source}")]`) is not
/// repeated.
fn chain(err: &anyhow::Error) -> String {
    let mut shown = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !shown.contains(&text) {
            shown.push_str(": ");
            shown.push_str(&text);
        }
    }
    shown
}

fn broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that shows its cause, as `#[error("…: {source}")]` does.
    #[derive(Debug)]
    struct Reading {
        path: &'static str,
        source: std::io::Error,
    }

    impl std::fmt::Display for Reading {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "reading {}: {}", self.path, self.source)
        }
    }

    impl std::error::Error for Reading {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn each_cause_is_shown_once() {
        let io = std::io::Error::from_raw_os_error(2);
        let err = anyhow::Error::new(Reading {
            path: "a.csv",
            source: io,
        })
        .context("converting");
        let shown = chain(&err);
        assert_eq!(shown.matches("os error 2").count(), 1, "{shown}");
        assert!(shown.starts_with("converting: reading a.csv: "), "{shown}");
        let piped = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("writing the table");
        assert!(broken_pipe(&piped));
        assert!(!broken_pipe(&err));
    }
}
