//! `jobcast slurm apply`: the flags, a JSON line on stdout per action, and
//! the metrics.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use jobcast_connectors::apply::plan::Walltime;
use jobcast_connectors::apply::{ApplyOptions, apply, hand_back};
use jobcast_connectors::slurm::metrics::{
    ACTIONS, DECISIONS_READ, JOBS_DECIDED, LAST_TICK, TICKS_FAILED,
};
use jobcast_connectors::slurm::{Scope, Slurm, walltime};
use jobcast_ingest::kafka::Topics;
use jobcast_predictor::decision::Quantiles;
use jobcast_predictor::queues::QueueConfig;
use tracing::{info, warn};

use jobcast_connectors::parse_interval;

use super::{in_background, words};
use jobcast_ingest::kafka_args::KafkaArgs;

#[derive(clap::Args)]
pub struct ApplyArgs {
    /// The decisions topic.
    #[arg(long, env = "JOBCAST_DECISIONS_TOPIC", default_value_t = Topics::default().decisions)]
    topic: String,
    /// What has been read and applied, kept across restarts.
    #[arg(long, default_value = "jobcast-slurm-apply.json")]
    state: PathBuf,
    /// Seconds between ticks (read decisions, observe Slurm, apply).
    #[arg(long, default_value_t = 1.0, value_parser = parse_interval)]
    interval_secs: f64,
    /// Print each action as it would be carried out, and carry out none
    /// (the state file is read, never written).
    #[arg(long)]
    dry_run: bool,
    /// The priority of spare work (non-pilot tasks while their job samples);
    /// ranked work gets the `levels + 1` priorities just above it. Keep it above
    /// every priority Slurm's own factors give, so that decided jobs go
    /// first.
    #[arg(long, default_value_t = 1_000_000)]
    priority_base: u32,
    /// The service's number of queues (`engine.queues.levels`).
    #[arg(long, default_value_t = QueueConfig::default().levels)]
    levels: u8,
    /// The service's queue weight ratio (`engine.queues.weight_ratio`).
    #[arg(long, default_value_t = QueueConfig::default().weight_ratio)]
    weight_ratio: f64,
    /// Attempts at each `scontrol` before it is reported failed (it is
    /// planned again at the next tick).
    #[arg(long, default_value_t = 3)]
    attempts: u32,
    /// The command that prints the cluster's jobs as JSON.
    #[arg(long, default_value = "squeue --json")]
    squeue: String,
    /// The command that updates a job (`update JobId=… Priority=…` follows).
    #[arg(long, default_value = "scontrol")]
    scontrol: String,
    /// Set each placed job's time limit from this quantile of its mean task
    /// runtime (p50, p90, p95 or p99), times `--walltime-margin`, never
    /// below `--walltime-min-minutes`, only ever lowered (so never above
    /// the user's own). Off unless given.
    #[arg(long, value_name = "QUANTILE", value_parser = Quantiles::index_of)]
    walltime_quantile: Option<usize>,
    /// The limit is the quantile times this: room for tasks slower than
    /// the job's mean.
    #[arg(long, default_value_t = Walltime::DEFAULT_MARGIN, requires = "walltime_quantile")]
    walltime_margin: f64,
    /// No limit is set below this.
    #[arg(long, default_value_t = Walltime::DEFAULT_MIN_MINUTES, requires = "walltime_quantile")]
    walltime_min_minutes: u64,
    /// Hand every job jobcast set a priority on back to Slurm's own order
    /// (`scontrol hold`, then `release`: how Slurm gives a job back to its
    /// priority plugin), print each action, and exit. The priorities an
    /// applier set outlive it: run this when it stops for good. Reads no
    /// decisions; keeps the jobs it is handing back in `--state`, so that
    /// one cut short is finished by the next; `--dry-run` prints what it
    /// would do.
    #[arg(long)]
    hand_back: bool,
    /// Act only on the jobs of these Slurm partitions (comma-separated);
    /// by default on every job.
    #[arg(long, value_delimiter = ',', value_name = "PARTITION")]
    partitions: Vec<String>,
    /// Act only on the jobs of these Slurm accounts (comma-separated); by
    /// default on every job.
    #[arg(long, value_delimiter = ',', value_name = "ACCOUNT")]
    accounts: Vec<String>,
    /// Act on no decision published longer ago than this (its Kafka
    /// timestamp): the service stalled, or the topic replayed. 0: any age.
    #[arg(long, default_value_t = 0)]
    max_decision_age_secs: u64,
    /// Serve Prometheus metrics at http://ADDR/metrics (port 0 picks one).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    #[command(flatten)]
    kafka: KafkaArgs,
}

pub fn run(args: ApplyArgs) -> anyhow::Result<()> {
    let queues = QueueConfig {
        levels: args.levels,
        weight_ratio: args.weight_ratio,
        ..QueueConfig::default()
    };
    queues
        .validate()
        .map_err(|e| anyhow::anyhow!("--levels / --weight-ratio: {e}"))?;
    if args.priority_base == 0
        || args
            .priority_base
            .checked_add(u32::from(args.levels) + 1)
            .is_none()
    {
        anyhow::bail!(
            "--priority-base {}: must be at least 1 (0 is Slurm's hold) and leave room for {} priorities above it",
            args.priority_base,
            u32::from(args.levels) + 1
        );
    }
    let walltime = args
        .walltime_quantile
        .map(|quantile| walltime(quantile, args.walltime_margin, args.walltime_min_minutes))
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let mut slurm = Slurm {
        squeue: words(&args.squeue),
        scontrol: words(&args.scontrol),
        base: args.priority_base,
        levels: args.levels,
        scope: Scope {
            partitions: args.partitions.into_iter().collect(),
            accounts: args.accounts.into_iter().collect(),
        },
    };
    if args.hand_back {
        let outcomes = hand_back(&mut slurm, &args.state, args.attempts, args.dry_run)
            .map_err(anyhow::Error::msg)
            .context("handing the jobs back")?;
        for outcome in &outcomes {
            println!(
                "{}",
                serde_json::to_string(outcome).expect("outcomes serialise")
            );
        }
        let failed = outcomes.iter().filter(|o| o.error.is_some()).count();
        eprintln!(
            "jobcast slurm apply --hand-back: {} jobs, {failed} failed",
            outcomes.len()
        );
        if failed > 0 {
            anyhow::bail!("{failed} jobs were not handed back (their errors are above)");
        }
        return Ok(());
    }
    let settings = args.kafka.settings()?;
    let stop = in_background("apply", args.metrics, &[TICKS_FAILED])?;
    for result in ["done", "failed"] {
        metrics::counter!(ACTIONS, "result" => result).increment(0);
    }
    metrics::counter!(DECISIONS_READ, "kind" => "unreadable").increment(0);
    let options = ApplyOptions {
        topic: args.topic,
        state: args.state,
        interval: Duration::from_secs_f64(args.interval_secs),
        queues,
        dry_run: args.dry_run,
        attempts: args.attempts,
        walltime,
        read_timeout: ApplyOptions::DEFAULT_READ_TIMEOUT,
        max_decision_age: (args.max_decision_age_secs > 0)
            .then(|| Duration::from_secs(args.max_decision_age_secs)),
    };
    let (mut done, mut failed, mut failed_ticks) = (0u64, 0u64, 0u64);
    apply(&settings, options, slurm, &stop, |ticked| match ticked {
        Ok(ticked) => {
            let read = |kind: &'static str, n: u64| {
                metrics::counter!(DECISIONS_READ, "kind" => kind).increment(n);
            };
            read("newer", ticked.newer);
            read("stale", ticked.stale);
            read("too_old", ticked.too_old);
            read("unreadable", ticked.unreadable.len() as u64);
            for why in &ticked.unreadable {
                warn!("decision skipped: {why}");
            }
            for outcome in &ticked.outcomes {
                println!(
                    "{}",
                    serde_json::to_string(outcome).expect("outcomes serialise")
                );
                if let Some(error) = &outcome.error {
                    failed += 1;
                    metrics::counter!(ACTIONS, "result" => "failed").increment(1);
                    warn!(
                        job_id = outcome.action.job_id,
                        attempts = outcome.attempts,
                        "{error}; planned again next tick"
                    );
                } else if outcome.done {
                    done += 1;
                    metrics::counter!(ACTIONS, "result" => "done").increment(1);
                }
            }
            metrics::gauge!(JOBS_DECIDED).set(ticked.jobs as f64);
            let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH);
            metrics::gauge!(LAST_TICK).set(now.map_or(0.0, |d| d.as_secs_f64()));
            if ticked.newer > 0 {
                info!(
                    newer = ticked.newer,
                    stale = ticked.stale,
                    actions = ticked.outcomes.len(),
                    jobs = ticked.jobs,
                    "decisions read"
                );
            }
        }
        Err(e) => {
            failed_ticks += 1;
            metrics::counter!(TICKS_FAILED).increment(1);
            warn!("tick: {e}; nothing done, trying again next interval");
        }
    })
    .context("applying decisions to Slurm")?;
    eprintln!(
        "jobcast slurm apply: stopped; {done} actions done, {failed} failed, {failed_ticks} ticks failed"
    );
    Ok(())
}
