//! # jobcast-bench
//!
//! The experiments of `jobcast bench`: throughput and latency of the service
//! as shipped, its restarts, and job completion times on a real Slurm
//! cluster. Each experiment is a module that runs and returns its report;
//! a report prints itself as a table (`Display`) or as JSON (`Serialize`),
//! and the CLI chooses which.
//!
//! `jobcast bench pipeline` writes a workload to a fresh input topic, then
//! reads it twice from the same broker in the same run: once with a bare
//! librdkafka consumer that only touches each payload, and once with the
//! whole service (decode, engine, RocksDB commit on disk, decisions
//! acknowledged by the broker). The ratio of the two rates says how much of
//! the broker's delivery rate the pipeline keeps, a figure that stays
//! comparable across machines and brokers where the absolute rates do not.
//!
//! `jobcast bench latency` offers the workload to a running service at
//! fixed rates, and as fast as the producer goes (saturation), each load on
//! fresh topics, state and consumer group. It times every job's first
//! decision from outside the service: from the moment the job's submission
//! is handed to the producer until a consumer of the decisions topic
//! receives the job's version-1 decision (every submission publishes one,
//! so that decision is the submission's). That is end to end: producer
//! linger, both broker hops, the service's merge, the wait for the batch
//! before it (its RocksDB commit and the wait for its decisions'
//! acknowledgements) and the batch's own work. The
//! service's own `jobcast_event_to_decision_seconds` (poll to
//! acknowledgement) leaves the broker hops out, has 12 buckets and is
//! process-wide, so it would mix the loads; it is not used here. Each load
//! is also offered to a relay ([`relay`]) that republishes each submission
//! at once: the broker's own latency on the same path, and so what bounds
//! the service's.
//!
//! `jobcast bench recovery` ([`recovery`]) times a restart and sizes the
//! store. `jobcast bench slurm` ([`slurm`]) measures job completion times
//! on a real Slurm cluster, with and without jobcast. `jobcast bench
//! transient` ([`transient`]) runs CloudCoaster in the simulator, and
//! `jobcast bench deadlines` ([`deadlines`]) Teylo et al.'s spot-deadline
//! maps.

use std::error::Error as StdError;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use jobcast_ingest::event::Event;
use jobcast_ingest::kafka::{KafkaSettings, Topics};
use jobcast_ingest::{Diagnostics, Format, TraceError};
use jobcast_replay::WorkloadConfig;
use jobcast_replay::kafka::{Gate, Outcome, ReplayOptions, ReplaySummary, Speed, replay};
use jobcast_scheduler_feed::FETCH_QUEUE_BACKOFF_MS;
use jobcast_scheduler_feed::config::ServeConfig;
use jobcast_scheduler_feed::service::Service;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::mocking::MockCluster;
use tempfile::TempDir;

use jobcast_ingest::kafka_args::KafkaArgs;
use latency::{LatencyArgs, latency};
use pipeline::{PipelineArgs, pipeline};
use recovery::{RecoveryArgs, recovery};

mod deadlines;
mod engine;
mod latency;
mod pipeline;
mod recovery;
mod relay;
mod slurm;
mod transient;

/// A step that makes no progress for this long has failed.
const STALL: Duration = Duration::from_secs(60);

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(clap::Subcommand)]
enum BenchCommand {
    /// End-to-end events/s from the input topic to published decisions
    /// (RocksDB on disk), beside the raw librdkafka consume rate of the same
    /// messages from the same broker, and their ratio.
    Pipeline(PipelineArgs),
    /// p50/p99/p99.9 of the latency from a job's submission being produced
    /// to its first decision being received, at fixed offered loads and at
    /// saturation.
    Latency(LatencyArgs),
    /// The restore time of a restart, the logged messages it applies, the
    /// store's size, and the throughput with and without snapshots.
    Recovery(RecoveryArgs),
    /// Job completion times on the local Slurm cluster (`scripts/slurm.sh
    /// up`), Slurm alone and driven by jobcast, beside the simulator's
    /// prediction on as many slots.
    Slurm(slurm::SlurmArgs),
    /// Events/s of the service's own work on each message (decode, apply,
    /// encode, stage the RocksDB batch, write it), from memory, with no
    /// broker: the ceiling of every deployment.
    Engine(engine::EngineArgs),
    /// CloudCoaster's transient short partition against Eagle on the
    /// static cluster of the same budget, in the simulator: short tasks'
    /// queueing delay and the partition's cost, with jobcast's job classes
    /// and the oracle's, transient servers preempted by measured lifetimes.
    Transient(transient::TransientArgs),
    /// Teylo et al.'s primary and backup maps of bags of tasks with
    /// deadlines on hibernating spot VMs, drawn from jobcast's estimates
    /// at a quantile and run against the truth: cost, makespan and
    /// deadline misses per strategy (§IV), and misses against cost across
    /// the quantiles.
    Deadlines(deadlines::DeadlinesArgs),
    /// Job completion times on two or more local Slurm clusters, each
    /// job's cluster drawn at random, chosen by the earliest start Slurm
    /// expects from the time limits, and chosen by jobcast (`slurm
    /// submit`).
    Federation(slurm::federation::FederationArgs),
    /// When pending jobs of an HPC log start on the local Slurm cluster,
    /// against what `squeue --start` and jobcast's start estimates said at
    /// their submission.
    SlurmStarts(slurm::starts::StartsArgs),
}

/// The workload a benchmark writes to the input topic.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["trace", "generate_jobs"])))]
struct InputArgs {
    /// The trace to write to the input topic.
    #[arg(long, requires = "format")]
    trace: Option<PathBuf>,
    /// Its format: google2011, google2019, alibaba2018, gce-lifetimes, spot-traces, jsonl, tpch-dags, swf or sacct.
    #[arg(long, requires = "trace")]
    format: Option<Format>,
    /// Instead of a trace, a synthetic workload of this many jobs (the
    /// generator of `jobcast generate`, default parameters).
    #[arg(long, conflicts_with = "trace")]
    generate_jobs: Option<u64>,
    /// Seed of the synthetic workload.
    #[arg(long, default_value_t = WorkloadConfig::default().seed, requires = "generate_jobs")]
    seed: u64,
    /// Write at most this many events.
    #[arg(long)]
    max_events: Option<u64>,
}

/// Where the benchmarked service runs.
#[derive(clap::Args)]
struct ServiceArgs {
    /// Partitions of the input topic. The embedded mock cluster keeps about
    /// 5 MB per partition: more events need more partitions.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(i32).range(1..))]
    partitions: i32,
    /// Partitions of the decisions and risk topics [default: as many as
    /// the input's]. Every partition a batch's outputs reach is a produce
    /// request of its own, and an idempotent producer keeps at most 5 in
    /// flight, so fewer output partitions mean fewer round trips before a
    /// batch is acknowledged.
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
    output_partitions: Option<i32>,
    /// Sync every RocksDB commit to disk (as `storage.sync` in production).
    #[arg(long)]
    sync: bool,
    /// Without --brokers (or JOBCAST_BROKERS), librdkafka's in-process mock
    /// cluster. With them, topics with unique names are created for the run
    /// and deleted after it.
    #[command(flatten)]
    kafka: KafkaArgs,
    /// A librdkafka property for the producer that writes the workload
    /// only, over `-X`; e.g. `--write-property batch.num.messages=1` for a
    /// broker that mishandles fetches starting inside a record batch
    /// (tansu 0.6.0, see docs/kafka.md). Repeatable.
    #[arg(long, value_name = "KEY=VALUE", value_parser = jobcast_ingest::kafka_args::parse_property)]
    write_property: Vec<(String, String)>,
    /// Run the service with the consumer and engine settings of this
    /// `jobcast serve` configuration file (TOML) instead of the defaults.
    /// Its topics, consumer group, RocksDB directory and brokers are the
    /// run's own; `--sync` says whether commits are synced.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

impl ServiceArgs {
    fn output_partitions(&self) -> i32 {
        self.output_partitions.unwrap_or(self.partitions)
    }

    /// The settings of the producer that writes the workload.
    fn writer(&self, settings: &KafkaSettings) -> KafkaSettings {
        let mut settings = settings.clone();
        for (key, value) in &self.write_property {
            settings.client.insert(key.clone(), value.clone());
        }
        settings
    }
}

/// What one experiment measured.
#[derive(serde::Serialize)]
#[serde(untagged)]
pub enum Report {
    Pipeline(pipeline::Report),
    Latency(latency::LatencyReport),
    Recovery(recovery::RecoveryReport),
    Slurm(slurm::Report),
    Engine(engine::EngineReport),
    Transient(Box<transient::TransientReport>),
    Deadlines(Box<deadlines::DeadlinesReport>),
    Federation(Box<slurm::federation::Report>),
    FederationModel(Box<slurm::federation::ModelReport>),
    SlurmStarts(Box<slurm::starts::Report>),
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Report::Pipeline(report) => report.fmt(f),
            Report::Latency(report) => report.fmt(f),
            Report::Recovery(report) => report.fmt(f),
            Report::Slurm(report) => report.fmt(f),
            Report::Engine(report) => report.fmt(f),
            Report::Transient(report) => report.fmt(f),
            Report::Deadlines(report) => report.fmt(f),
            Report::Federation(report) => report.fmt(f),
            Report::FederationModel(report) => report.fmt(f),
            Report::SlurmStarts(report) => report.fmt(f),
        }
    }
}

/// A report, and whether it was asked for as JSON (`--json`).
pub struct Measured {
    pub report: Report,
    pub json: bool,
}

/// Run the experiment `args` names.
pub fn run(args: &Args) -> anyhow::Result<Measured> {
    Ok(match &args.command {
        BenchCommand::Pipeline(args) => Measured {
            report: Report::Pipeline(pipeline(args)?),
            json: args.json,
        },
        BenchCommand::Latency(args) => Measured {
            report: Report::Latency(latency(args)?),
            json: args.json,
        },
        BenchCommand::Recovery(args) => Measured {
            report: Report::Recovery(recovery(args)?),
            json: args.json,
        },
        BenchCommand::Slurm(args) => Measured {
            report: Report::Slurm(slurm::slurm(args)?),
            json: args.json,
        },
        BenchCommand::Engine(args) => Measured {
            report: Report::Engine(engine::engine(args)?),
            json: args.json,
        },
        BenchCommand::Transient(args) => Measured {
            report: Report::Transient(Box::new(transient::transient(args)?)),
            json: args.json,
        },
        BenchCommand::Deadlines(args) => Measured {
            report: Report::Deadlines(Box::new(deadlines::deadlines(args)?)),
            json: args.json,
        },
        BenchCommand::Federation(args) if args.model_only => Measured {
            report: Report::FederationModel(Box::new(slurm::federation::model(args)?)),
            json: args.json,
        },
        BenchCommand::Federation(args) => Measured {
            report: Report::Federation(Box::new(slurm::federation::federation(args)?)),
            json: args.json,
        },
        BenchCommand::SlurmStarts(args) => Measured {
            report: Report::SlurmStarts(Box::new(slurm::starts::starts(args)?)),
            json: args.json,
        },
    })
}

/// A configuration whose topics, consumer group and RocksDB directory
/// (returned, deleted when dropped) belong to this run alone, so that runs
/// never see each other's messages or state. `label` tells the runs of one
/// process apart.
fn fresh_config(label: &str, service: &ServiceArgs) -> anyhow::Result<(ServeConfig, TempDir)> {
    let run_id = format!(
        "{}-{}-{label}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
    );
    let topics = Topics {
        events: format!("jobcast-bench-{run_id}.events"),
        decisions: format!("jobcast-bench-{run_id}.decisions"),
        risk: format!("jobcast-bench-{run_id}.risk"),
        capacity: format!("jobcast-bench-{run_id}.capacity"),
        dead_letter: format!("jobcast-bench-{run_id}.dead-letter"),
    };
    let state = tempfile::tempdir().context("creating the RocksDB directory")?;
    let mut config = match &service.config {
        Some(path) => ServeConfig::from_file(path)?,
        None => ServeConfig::default(),
    };
    config.topics = topics;
    config.consumer.group = format!("jobcast-bench-{run_id}");
    config.storage.path = state.path().join("state");
    config.storage.sync = service.sync;
    Ok((config, state))
}

/// The broker a report names.
fn broker_name(kafka: &KafkaArgs) -> String {
    kafka
        .brokers
        .clone()
        .unwrap_or_else(|| "embedded mock cluster".into())
}

/// Create the run's topics (on a new embedded mock cluster, or on the
/// brokers), and an input topic more for each of `more_inputs` (named
/// `{events}{suffix}`), run `measure` with `config` pointing there, then
/// delete the topics from the brokers.
fn on_cluster<T>(
    service: &ServiceArgs,
    mut config: ServeConfig,
    more_inputs: &[&str],
    measure: impl FnOnce(ServeConfig) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let t = &config.topics;
    let mut topics = vec![
        (t.events.clone(), service.partitions),
        (t.decisions.clone(), service.output_partitions()),
        (t.risk.clone(), service.output_partitions()),
        (t.capacity.clone(), 1),
        (t.dead_letter.clone(), 1),
    ];
    for suffix in more_inputs {
        topics.push((format!("{}{suffix}", t.events), service.partitions));
    }
    let kafka = &service.kafka;
    if kafka.brokers.is_none() {
        let mock = MockCluster::new(1).context("starting the embedded Kafka (mock cluster)")?;
        let mut settings = KafkaSettings::new(mock.bootstrap_servers());
        // The mock's coordinator holds every rebalance after a group's first
        // for the session timeout less a second: at librdkafka's default
        // (45 s) a restart in `bench recovery` waited 43 s for the mock, not
        // for jobcast. 6 s is the shortest session a broker accepts by
        // default; `-X` still overrides both.
        for (key, value) in [
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "500"),
        ] {
            settings.client.insert(key.into(), value.into());
        }
        config.kafka = kafka.apply(settings);
        for (topic, partitions) in &topics {
            mock.create_topic(topic, *partitions, 1)
                .with_context(|| format!("creating topic {topic} on the mock cluster"))?;
        }
        return measure(config);
    }
    config.kafka = kafka.settings()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let refs: Vec<(&str, i32)> = topics.iter().map(|(t, p)| (t.as_str(), *p)).collect();
    runtime
        .block_on(config.kafka.ensure_topics(&refs))
        .map_err(anyhow::Error::msg)?;
    let settings = config.kafka.clone();
    let result = measure(config);
    let names: Vec<&str> = refs.iter().map(|(t, _)| *t).collect();
    let deleted = runtime.block_on(delete_topics(&settings, &names));
    // The measurement's error matters more than the clean-up's.
    let value = result?;
    deleted?;
    Ok(value)
}

/// The workload's events, at most `--max-events`.
type Events = Box<dyn Iterator<Item = Result<Event, TraceError>>>;

/// Open the workload; the trace's diagnostics (none for a synthetic
/// workload) are complete once the events are read.
fn open_input(input: &InputArgs) -> anyhow::Result<(Events, Option<Diagnostics>)> {
    let limit = input
        .max_events
        .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
    match (&input.trace, input.format, input.generate_jobs) {
        (Some(path), Some(format), _) => {
            let trace = jobcast_ingest::open(format, path)
                .with_context(|| format!("opening {} trace {}", format.name(), path.display()))?;
            let diagnostics = trace.diagnostics().clone();
            Ok((Box::new(trace.take(limit)), Some(diagnostics)))
        }
        (_, _, Some(jobs)) => {
            let workload = WorkloadConfig {
                seed: input.seed,
                jobs: Some(jobs),
                ..WorkloadConfig::default()
            };
            let events = jobcast_replay::generate(&workload)?;
            Ok((Box::new(events.map(Ok).take(limit)), None))
        }
        _ => bail!("pass --trace with --format, or --generate-jobs"),
    }
}

/// Print what the trace adapter skipped, if anything.
fn report_skipped(diagnostics: Option<&Diagnostics>) {
    if let Some(diagnostics) = diagnostics
        && diagnostics.skipped_total() > 0
    {
        eprint!("{}", diagnostics.summary());
    }
}

/// A spinner or bar on stderr; indicatif draws nothing when stderr is not a
/// terminal.
fn progress(len: Option<u64>, template: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr());
    bar.set_style(ProgressStyle::with_template(template).expect("static template is valid"));
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// Produce `events` into `topic`, at most `rate` per second, consulting
/// `gate` before each; an error unless every event was delivered.
fn produce<I, E>(
    settings: &KafkaSettings,
    topic: &str,
    events: I,
    rate: Option<f64>,
    gate: &dyn Gate,
) -> anyhow::Result<ReplaySummary>
where
    I: IntoIterator<Item = Result<Event, E>>,
    E: StdError + Send + Sync + 'static,
{
    let bar = progress(None, "{spinner} write    [{elapsed_precise}] {msg}");
    let options = ReplayOptions {
        speed: Speed::Max,
        rate,
        ..ReplayOptions::new(topic)
    };
    let result = replay(settings, &options, events, gate, |p| {
        bar.set_message(format!("{} events produced", p.produced))
    });
    bar.finish_and_clear();
    let summary = result.with_context(|| format!("writing the events to {topic}"))?;
    if summary.outcome != Outcome::Complete {
        bail!(
            "writing the events to {topic}: {} of {} were not delivered{}",
            summary.failed,
            summary.produced,
            summary
                .first_failure
                .as_ref()
                .map(|f| format!(" (first: event {}: {})", f.event, f.error))
                .unwrap_or_default()
        );
    }
    Ok(summary)
}

/// The raw consumer's context: partition ends come from `poll`, where they
/// are expected; librdkafka's default context would log each as an error.
struct RawContext;

impl ClientContext for RawContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::PartitionEOF) {
            tracing::warn!("raw consumer: {error}: {reason}");
        }
    }
}

impl ConsumerContext for RawContext {}

/// A consumer in `group` that commits nothing, reporting partition ends if
/// `eof`, with the configured client properties.
fn bare_consumer(
    settings: &KafkaSettings,
    group: &str,
    eof: bool,
) -> anyhow::Result<BaseConsumer<RawContext>> {
    let mut config = settings.client_config();
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", if eof { "true" } else { "false" })
        // As the service's input consumer, so that none waits out
        // librdkafka's default second once its prefetch queue is full.
        .set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
    for (key, value) in &settings.client {
        config.set(key, value);
    }
    Ok(config
        .create_with_context(RawContext)
        .map_err(|e| settings.redact(e))?)
}

/// Start the service in-process with a fresh RocksDB and wait for its
/// partition assignment, so that the consumer group's join delay, a fixed
/// cost a long-running service pays once, is left out of every measurement.
fn start_service(config: ServeConfig) -> anyhow::Result<Service> {
    let service = Service::start(config)?;
    let waiting = Instant::now();
    while !service.shared().assigned.load(Ordering::Relaxed) {
        if service.is_finished() {
            let summary = service.stop()?;
            bail!(
                "the service stopped before it got partitions, after committing {} events",
                summary.committed
            );
        }
        if waiting.elapsed() > STALL {
            service.stop()?;
            bail!("the service got no partitions in {} s", STALL.as_secs());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(service)
}

/// Wait until `service` has committed `total` events; an error if it stops
/// or stalls first.
fn wait_for_commits(service: &Service, total: u64, bar: &ProgressBar) -> anyhow::Result<()> {
    await_count(
        total,
        bar,
        || service.shared().counters.committed.load(Ordering::Relaxed),
        || service.is_finished(),
        "the service stopped after committing",
    )
}

/// Wait until `count` reaches `total`; an error if `finished` (`stopped`
/// names how) or if the count stalls first.
fn await_count(
    total: u64,
    bar: &ProgressBar,
    count: impl Fn() -> u64,
    finished: impl Fn() -> bool,
    stopped: &str,
) -> anyhow::Result<()> {
    let mut last = (Instant::now(), 0u64);
    loop {
        let done = count();
        if done >= total {
            return Ok(());
        }
        if finished() {
            bail!("{stopped} {done} of {total} events");
        }
        if done != last.1 {
            bar.set_position(done);
            last = (Instant::now(), done);
        } else if last.0.elapsed() > STALL {
            bail!(
                "nothing for {} s after {done} of {total} events",
                STALL.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

async fn delete_topics(settings: &KafkaSettings, topics: &[&str]) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = settings
        .client_config()
        .create()
        .map_err(|e| settings.redact(e))
        .context("creating a Kafka admin client to delete the benchmark topics")?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    for result in admin
        .delete_topics(topics, &options)
        .await
        .context("deleting the benchmark topics")?
    {
        if let Err((topic, code)) = result {
            bail!("deleting benchmark topic {topic}: {code}");
        }
    }
    Ok(())
}
