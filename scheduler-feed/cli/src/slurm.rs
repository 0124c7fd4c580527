//! `jobcast slurm`: a real Slurm cluster in the loop. `watch` follows the
//! cluster's jobs into the input topic (`jobcast_ingest::slurm`); this
//! module adds the flags, the signals and a log line per poll that found
//! something (docs/schedulers.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use jobcast_ingest::kafka::Topics;
use jobcast_ingest::slurm::watch::{WatchOptions, watch};
use jobcast_scheduler_feed::http::serve_metrics;
use jobcast_scheduler_feed::telemetry::{
    self, SLURM_EVENTS_PUBLISHED, SLURM_JOBS_FOLLOWED, SLURM_JOBS_LOST, SLURM_LAST_POLL,
    SLURM_POLLS_FAILED, SLURM_RECORDS_SKIPPED,
};
use tracing::{info, warn};

use super::kafka_args::KafkaArgs;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Publish the cluster's jobs, arrays and tasks as canonical events,
    /// from `squeue --json` every interval, until SIGTERM or Ctrl-C.
    Watch(WatchArgs),
}

#[derive(clap::Args)]
struct WatchArgs {
    /// Topic to publish into.
    #[arg(long, env = "JOBCAST_EVENTS_TOPIC", default_value_t = Topics::default().events)]
    topic: String,
    /// What has been published, kept across restarts so that nothing is
    /// published twice or lost.
    #[arg(long, default_value = "jobcast-slurm-watch.json")]
    state: PathBuf,
    /// Seconds between snapshots of `squeue`; keep it well under Slurm's
    /// `MinJobAge` (300 s by default), for which finished jobs stay listed.
    #[arg(long, default_value_t = 2.0, value_parser = parse_interval)]
    interval_secs: f64,
    /// The command that prints the cluster's jobs as JSON.
    #[arg(long, default_value = "squeue --json")]
    squeue: String,
    /// Serve Prometheus metrics at http://ADDR/metrics (port 0 picks one).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    #[command(flatten)]
    kafka: KafkaArgs,
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(secs) if secs.is_finite() && (0.01..=3600.0).contains(&secs) => Ok(secs),
        _ => Err(format!("expected seconds from 0.01 to 3600, got `{s}`")),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Command::Watch(args) => run_watch(args),
    }
}

fn run_watch(args: WatchArgs) -> anyhow::Result<()> {
    let settings = args.kafka.settings()?;
    let stop = in_background(args.metrics)?;
    let options = WatchOptions {
        topic: args.topic,
        state: args.state,
        squeue: args.squeue.split_whitespace().map(str::to_owned).collect(),
        interval: Duration::from_secs_f64(args.interval_secs),
    };
    let (mut published, mut failed_polls) = (0, 0);
    watch(&settings, options, &stop, |polled| match polled {
        Ok(polled) => {
            published += polled.published;
            metrics::counter!(SLURM_EVENTS_PUBLISHED).increment(polled.published as u64);
            metrics::counter!(SLURM_JOBS_LOST).increment(polled.lost_jobs);
            metrics::counter!(SLURM_RECORDS_SKIPPED).increment(polled.skipped.len() as u64);
            metrics::gauge!(SLURM_JOBS_FOLLOWED).set(polled.jobs as f64);
            let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH);
            metrics::gauge!(SLURM_LAST_POLL).set(now.map_or(0.0, |d| d.as_secs_f64()));
            for why in &polled.skipped {
                warn!("Slurm record skipped: {why}");
            }
            if polled.published > 0 || polled.lost_jobs > 0 {
                info!(
                    published = polled.published,
                    lost_jobs = polled.lost_jobs,
                    jobs = polled.jobs,
                    "Slurm events published"
                );
            }
        }
        Err(e) => {
            failed_polls += 1;
            metrics::counter!(SLURM_POLLS_FAILED).increment(1);
            warn!("polling Slurm: {e}; trying again next interval");
        }
    })
    .context("watching Slurm")?;
    eprintln!(
        "jobcast slurm watch: stopped; {published} events published, {failed_polls} polls failed"
    );
    Ok(())
}

/// The signals, and the metrics (if asked for), on a thread of their own.
/// The returned flag is set on SIGTERM or Ctrl-C: the poll in hand
/// finishes (its events acknowledged and its state written) and the
/// watcher stops.
fn in_background(metrics: Option<SocketAddr>) -> anyhow::Result<Arc<AtomicBool>> {
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
            // Counters of failures exist from the start, at 0, so that
            // `increase()` over them sees the first.
            for name in [SLURM_POLLS_FAILED, SLURM_JOBS_LOST, SLURM_RECORDS_SKIPPED] {
                metrics::counter!(name).increment(0);
            }
            eprintln!(
                "jobcast slurm watch: metrics on http://{}/metrics",
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
                    () = super::serve::shutdown_signal() => {}
                    () = serving => {}
                }
            });
            set.store(true, Ordering::Relaxed);
        })
        .context("starting the signal handler thread")?;
    Ok(flag)
}
