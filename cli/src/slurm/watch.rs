//! `jobcast slurm watch`: the flags, and a log line per poll that found
//! something.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use jobcast_connectors::slurm::metrics::{
    EVENTS_PUBLISHED, HISTORY_JOBS, JOBS_FOLLOWED, JOBS_LOST, LAST_POLL, POLLS_FAILED,
    RECORDS_SKIPPED,
};
use jobcast_connectors::slurm::{History, SlurmSource};
use jobcast_connectors::watch::{WatchOptions, watch};
use jobcast_ingest::kafka::Topics;
use tracing::{info, warn};

use jobcast_connectors::parse_interval;

use super::{in_background, words};
use jobcast_ingest::kafka_args::KafkaArgs;

#[derive(clap::Args)]
pub struct WatchArgs {
    /// Topic to publish into.
    #[arg(long, env = "JOBCAST_EVENTS_TOPIC", default_value_t = Topics::default().events)]
    topic: String,
    /// What has been published, kept across restarts so that nothing is
    /// published twice or lost. It must exist, unless --fresh.
    #[arg(long, default_value = "jobcast-slurm-watch.json")]
    state: PathBuf,
    /// Start from no state (the first start): the state file must not
    /// exist yet; every job the cluster lists (since --since) is published.
    #[arg(long)]
    fresh: bool,
    /// Seconds between snapshots of `squeue`; keep it well under Slurm's
    /// `MinJobAge` (300 s by default), for which finished jobs stay listed.
    #[arg(long, default_value_t = 2.0, value_parser = parse_interval)]
    interval_secs: f64,
    /// The command that prints the cluster's jobs as JSON.
    #[arg(long, default_value = "squeue --json")]
    squeue: String,
    /// Follow only jobs submitted at or after this Unix time (s), e.g.
    /// `$(date +%s)`: the finished jobs Slurm still lists from before are
    /// not published. By default every job listed is followed.
    #[arg(long, value_name = "UNIX_SECONDS")]
    since: Option<u64>,
    /// First publish the site's accounting history, every job `sacct`
    /// accounted as ended that was submitted at or after this Unix time
    /// (s), so that the service starts warm. Read at the state's first look
    /// that succeeds (a --fresh start's), never again: a later start given
    /// it changes nothing. Needs Slurm's accounting (slurmdbd). None is
    /// published twice.
    #[arg(long, value_name = "UNIX_SECONDS")]
    history_since: Option<u64>,
    /// The command that prints the site's accounting, for
    /// --history-since (the flags it needs are added).
    #[arg(long, default_value = "sacct")]
    sacct: String,
    /// Serve Prometheus metrics at http://ADDR/metrics (port 0 picks one).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    #[command(flatten)]
    kafka: KafkaArgs,
}

pub fn run(args: WatchArgs) -> anyhow::Result<()> {
    let settings = args.kafka.settings()?;
    let stop = in_background(
        "watch",
        args.metrics,
        &[POLLS_FAILED, JOBS_LOST, RECORDS_SKIPPED, HISTORY_JOBS],
    )?;
    let options = WatchOptions {
        topic: args.topic,
        state: args.state,
        interval: Duration::from_secs_f64(args.interval_secs),
        fresh: args.fresh,
    };
    let source = SlurmSource {
        squeue: words(&args.squeue),
        since: args.since,
        history: args.history_since.map(|since| History {
            sacct: words(&args.sacct),
            since,
        }),
    };
    let (mut published, mut failed_polls) = (0, 0);
    watch(&settings, options, source, &stop, |polled| match polled {
        Ok(polled) => {
            published += polled.published;
            metrics::counter!(EVENTS_PUBLISHED).increment(polled.published as u64);
            metrics::counter!(JOBS_LOST).increment(polled.lost_jobs);
            metrics::counter!(HISTORY_JOBS).increment(polled.history_jobs);
            if polled.history_jobs > 0 {
                info!(
                    jobs = polled.history_jobs,
                    "the site's accounting history is being published"
                );
            }
            metrics::counter!(RECORDS_SKIPPED).increment(polled.skipped.len() as u64);
            metrics::gauge!(JOBS_FOLLOWED).set(polled.jobs as f64);
            let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH);
            metrics::gauge!(LAST_POLL).set(now.map_or(0.0, |d| d.as_secs_f64()));
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
            metrics::counter!(POLLS_FAILED).increment(1);
            warn!("polling Slurm: {e}; trying again next interval");
        }
    })
    .context("watching Slurm")?;
    eprintln!(
        "jobcast slurm watch: stopped; {published} events published, {failed_polls} polls failed"
    );
    Ok(())
}
