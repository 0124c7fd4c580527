//! `jobcast slurm`: a real Slurm cluster in the loop. `watch` follows the
//! cluster's jobs into the input topic; `apply` carries jobcast's
//! decisions out on it (both `jobcast_connectors::slurm`); `submit` sends
//! a job to the cluster jobcast expects to finish it first. These modules add the flags, the
//! signals, the metrics and the log lines (docs/schedulers.md).

pub(crate) mod apply;
mod submit;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use jobcast_scheduler_feed::http::serve_metrics;
use jobcast_scheduler_feed::telemetry;
use tracing::warn;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Publish the cluster's jobs, arrays and tasks as canonical events,
    /// from `squeue --json` every interval, until SIGTERM or Ctrl-C.
    Watch(watch::WatchArgs),
    /// Carry out jobcast's decisions on the cluster: each decided job's
    /// pending tasks get the priority that makes Slurm serve them as GS
    /// would, every interval, until SIGTERM or Ctrl-C.
    Apply(apply::ApplyArgs),
    /// sbatch to the cluster jobcast expects to finish the job first:
    /// submitted held to the first --cluster, moved or released once
    /// jobcast has decided.
    Submit(submit::SubmitArgs),
}

/// A command line, as words.
fn words(command: &str) -> Vec<String> {
    command.split_whitespace().map(str::to_owned).collect()
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Command::Watch(args) => watch::run(args),
        Command::Apply(args) => apply::run(args),
        Command::Submit(args) => submit::run(args),
    }
}

/// The signals, and the metrics (if asked for), on a thread of their own.
/// The returned flag is set on SIGTERM or Ctrl-C: the poll in hand
/// finishes (its events acknowledged and its state written) and the
/// command stops.
fn in_background(
    command: &str,
    metrics: Option<SocketAddr>,
    failures: &[&'static str],
) -> anyhow::Result<Arc<AtomicBool>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let listener = match metrics {
        Some(address) => {
            let listener = runtime
                .block_on(tokio::net::TcpListener::bind(address))
                .with_context(|| format!("--metrics {address}"))?;
            telemetry::handle();
            jobcast_connectors::slurm::metrics::describe();
            // Counters of failures exist from the start, at 0, so that
            // `increase()` over them sees the first.
            for &name in failures {
                metrics::counter!(name).increment(0);
            }
            eprintln!(
                "jobcast slurm {command}: metrics on http://{}/metrics",
                listener.local_addr()?
            );
            Some(listener)
        }
        None => None,
    };
    let flag = Arc::new(AtomicBool::new(false));
    let set = flag.clone();
    std::thread::Builder::new()
        .name("slurm-background".into())
        .spawn(move || {
            runtime.block_on(async move {
                let serving = async move {
                    match listener {
                        Some(listener) => {
                            if let Err(e) = serve_metrics(listener).await {
                                warn!("serving metrics: {e}");
                            }
                        }
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = crate::serve::shutdown_signal() => {}
                    () = serving => {}
                }
            });
            set.store(true, Ordering::Relaxed);
        })
        .context("starting the signal handler thread")?;
    Ok(flag)
}
