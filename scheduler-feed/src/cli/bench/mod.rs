//! `jobcast bench`: throughput and latency measurements of the service as
//! shipped.
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

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::error::Error as StdError;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use jobcast_ingest::event::Event;
use jobcast_ingest::kafka::{KafkaSettings, Topics};
use jobcast_ingest::{Diagnostics, Format, TraceError};
use jobcast_replay::WorkloadConfig;
use jobcast_replay::kafka::{Gate, Outcome, ReplayOptions, ReplaySummary, Speed, Ungated, replay};
use jobcast_scheduler_feed::config::ServeConfig;
use jobcast_scheduler_feed::service::{
    self, FETCH_QUEUE_BACKOFF_MS, RunSummary, ServiceError, Shared,
};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use rdkafka::{Offset, TopicPartitionList};
use tempfile::TempDir;

use super::evaluate::print_out;
use super::kafka_args::KafkaArgs;
use relay::Relay;

mod relay;

/// A step that makes no progress for this long has failed.
const STALL: Duration = Duration::from_secs(60);
/// Consumed messages between progress-bar updates.
const PROGRESS_EVERY: u64 = 1 << 12;
/// The decisions listener's fetch wait unless `-X fetch.wait.max.ms` sets
/// one: an upper bound on what it adds to the measured latency when the
/// broker holds a fetch open.
const LISTENER_FETCH_WAIT_MS: &str = "10";

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
}

/// The workload a benchmark writes to the input topic.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["trace", "generate_jobs"])))]
struct InputArgs {
    /// The trace to write to the input topic.
    #[arg(long, requires = "format")]
    trace: Option<PathBuf>,
    /// Its format: google2011, google2019, alibaba2018, gce-lifetimes or jsonl.
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
    #[arg(long, value_name = "KEY=VALUE", value_parser = super::kafka_args::parse_property)]
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

#[derive(clap::Args)]
struct PipelineArgs {
    #[command(flatten)]
    input: InputArgs,
    #[command(flatten)]
    service: ServiceArgs,
    /// Print the figures as JSON on stdout instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct LatencyArgs {
    #[command(flatten)]
    input: InputArgs,
    /// Offered loads in events/s, comma-separated; `max` produces as fast
    /// as the producer goes, which measures the latency at saturation.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,20000,max")]
    rates: Vec<Rate>,
    #[command(flatten)]
    service: ServiceArgs,
    /// Leave out the relay: by default each load is also offered to a bare
    /// consumer that republishes each submission at once, the broker's own
    /// latency on the same path, measured the same way.
    #[arg(long)]
    no_relay: bool,
    /// Print the figures as JSON on stdout instead of a table.
    #[arg(long)]
    json: bool,
}

/// An offered load.
#[derive(Clone, Copy, Debug)]
enum Rate {
    PerSec(f64),
    Max,
}

impl FromStr for Rate {
    type Err = String;

    /// `max`, or a positive number of events per second.
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "max" {
            return Ok(Rate::Max);
        }
        match s.parse::<f64>() {
            Ok(r) if r.is_finite() && r > 0.0 => Ok(Rate::PerSec(r)),
            _ => Err(format!(
                "expected `max` or a positive number of events per second, got `{s}`"
            )),
        }
    }
}

impl Rate {
    fn per_sec(self) -> Option<f64> {
        match self {
            Rate::PerSec(r) => Some(r),
            Rate::Max => None,
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Pipeline(args) => pipeline(&args),
        BenchCommand::Latency(args) => latency(&args),
    }
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
        dead_letter: format!("jobcast-bench-{run_id}.dead-letter"),
    };
    let state = tempfile::tempdir().context("creating the RocksDB directory")?;
    let mut config = match &service.config {
        Some(path) => ServeConfig::from_file(path).map_err(anyhow::Error::msg)?,
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
/// brokers), run `measure` with `config` pointing there, then delete the
/// topics from the brokers.
fn on_cluster<T>(
    service: &ServiceArgs,
    mut config: ServeConfig,
    measure: impl FnOnce(ServeConfig) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let t = &config.topics;
    let topics = [
        (t.events.clone(), service.partitions),
        (t.decisions.clone(), service.output_partitions()),
        (t.risk.clone(), service.output_partitions()),
        (t.dead_letter.clone(), 1),
    ];
    let kafka = &service.kafka;
    if kafka.brokers.is_none() {
        let mock = MockCluster::new(1).context("starting the embedded Kafka (mock cluster)")?;
        config.kafka = kafka.apply(KafkaSettings::new(mock.bootstrap_servers()));
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

/// The figures of one `bench pipeline` run; the JSON output is the
/// serialised fields, the table adds the seconds.
#[derive(serde::Serialize)]
struct Report {
    events: u64,
    partitions: i32,
    output_partitions: i32,
    broker: String,
    raw_consume_events_per_sec: f64,
    pipeline_events_per_sec: f64,
    /// `pipeline_events_per_sec / raw_consume_events_per_sec`.
    ratio: f64,
    write_events_per_sec: f64,
    decisions: u64,
    /// Where the pipeline's time went.
    stages: Stages,
    #[serde(skip)]
    write_secs: f64,
    #[serde(skip)]
    raw_secs: f64,
    #[serde(skip)]
    pipeline_secs: f64,
    #[serde(skip)]
    dead_lettered: u64,
}

/// The pipeline's seconds by batch step, and the rest: waiting for input
/// (polling, the event-time merge) between batches.
#[derive(serde::Serialize)]
struct Stages {
    batches: u64,
    apply_secs: f64,
    publish_secs: f64,
    commit_secs: f64,
    other_secs: f64,
    /// The writer thread's RocksDB writes, beside the steps above.
    write_secs: f64,
    /// Input partitions paused to bound the event-time merge (each costs a
    /// refetch: `consumer.max_buffered_events`).
    input_pauses: u64,
}

fn pipeline(args: &PipelineArgs) -> anyhow::Result<()> {
    let (config, _state) = fresh_config("pipeline", &args.service)?;
    let report = on_cluster(&args.service, config, |config| measure(args, config))?;
    output(&report, args.json)
}

/// Write, consume raw, run the service: the three timed steps.
fn measure(args: &PipelineArgs, config: ServeConfig) -> anyhow::Result<Report> {
    config.validate().map_err(anyhow::Error::msg)?;
    let topic = &config.topics.events;
    let (events, diagnostics) = open_input(&args.input)?;
    let written = write(&args.service.writer(&config.kafka), topic, events)?;
    report_skipped(diagnostics.as_ref());
    let events = written.delivered;
    if events == 0 {
        bail!("the input holds no events: nothing to measure");
    }

    let partitions = args.service.partitions;
    let raw_group = format!("{}.raw", config.consumer.group);
    let raw_secs = raw_consume(&config.kafka, topic, partitions, events, &raw_group)?;
    let (pipeline_secs, summary, shared) = run_service(config, events)?;
    let counters = &shared.counters;
    let secs = |ns: &std::sync::atomic::AtomicU64| ns.load(Ordering::Relaxed) as f64 / 1e9;
    let (apply_secs, publish_secs, commit_secs) = (
        secs(&counters.apply_ns),
        secs(&counters.publish_ns),
        secs(&counters.commit_ns),
    );
    let stages = Stages {
        batches: counters.batches.load(Ordering::Relaxed),
        apply_secs,
        publish_secs,
        commit_secs,
        other_secs: (pipeline_secs - apply_secs - publish_secs - commit_secs).max(0.0),
        write_secs: secs(&counters.write_ns),
        input_pauses: counters.input_pauses.load(Ordering::Relaxed),
    };

    let raw_rate = events as f64 / raw_secs;
    let pipeline_rate = events as f64 / pipeline_secs;
    Ok(Report {
        events,
        partitions,
        output_partitions: args.service.output_partitions(),
        broker: broker_name(&args.service.kafka),
        raw_consume_events_per_sec: raw_rate,
        pipeline_events_per_sec: pipeline_rate,
        ratio: pipeline_rate / raw_rate,
        write_events_per_sec: written.events_per_sec,
        decisions: summary.decisions,
        stages,
        write_secs: written.elapsed_secs,
        raw_secs,
        pipeline_secs,
        dead_lettered: summary.dead_lettered,
    })
}

/// A spinner or bar on stderr; indicatif draws nothing when stderr is not a
/// terminal.
fn progress(len: Option<u64>, template: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr());
    bar.set_style(ProgressStyle::with_template(template).expect("static template is valid"));
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// Step 1: every event into the input topic, as fast as the producer goes.
fn write<I, E>(settings: &KafkaSettings, topic: &str, events: I) -> anyhow::Result<ReplaySummary>
where
    I: IntoIterator<Item = Result<Event, E>>,
    E: StdError + Send + Sync + 'static,
{
    produce(settings, topic, events, None, &Ungated)
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

/// Step 2: a bare consumer assigned every partition from the beginning
/// reads each message (summing payload lengths, so nothing is skipped)
/// until every partition reports its end, which proves no message is
/// missing or extra. Returns the seconds until the last message, the same
/// end point as the service's (its last commit): a partition's end is
/// reported up to a fetch wait later, which would count against the raw
/// rate only.
fn raw_consume(
    settings: &KafkaSettings,
    topic: &str,
    partitions: i32,
    total: u64,
    group: &str,
) -> anyhow::Result<f64> {
    let consumer = bare_consumer(settings, group, true).context("creating the raw consumer")?;

    // The mock cluster drops the oldest messages of a partition past ~5 MB;
    // a measurement over a truncated topic would compare different inputs.
    for partition in 0..partitions {
        let (low, _) = consumer
            .fetch_watermarks(topic, partition, Duration::from_secs(10))
            .with_context(|| format!("reading the watermarks of {topic} [{partition}]"))?;
        if low != 0 {
            bail!(
                "{topic} [{partition}] starts at offset {low}, not 0: the broker dropped \
                 written events (the embedded mock cluster keeps about 5 MB per partition); \
                 pass more --partitions or fewer events"
            );
        }
    }

    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        assignment.add_partition_offset(topic, partition, Offset::Beginning)?;
    }
    let bar = progress(
        Some(total),
        "{spinner} raw      [{elapsed_precise}] {bar:40} {human_pos}/{human_len} events",
    );
    let started = Instant::now();
    consumer
        .assign(&assignment)
        .with_context(|| format!("assigning {topic} to the raw consumer"))?;
    let mut ended = BTreeSet::new();
    let (mut count, mut bytes) = (0u64, 0u64);
    let mut idle_since: Option<Instant> = None;
    let mut last_message = None;
    while ended.len() < usize::try_from(partitions).unwrap_or(usize::MAX) {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                count += 1;
                bytes += message.payload().map_or(0, <[u8]>::len) as u64;
                idle_since = None;
                if count == total {
                    last_message = Some(started.elapsed());
                }
                if count.is_multiple_of(PROGRESS_EVERY) {
                    bar.set_position(count);
                }
            }
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                ended.insert(partition);
            }
            Some(Err(err)) => {
                bar.finish_and_clear();
                return Err(err).with_context(|| format!("raw consume of {topic}"));
            }
            None => {
                if idle_since.get_or_insert_with(Instant::now).elapsed() > STALL {
                    bar.finish_and_clear();
                    bail!(
                        "raw consume of {topic}: nothing for {} s after {count} of {total} \
                         messages",
                        STALL.as_secs()
                    );
                }
            }
        }
    }
    bar.finish_and_clear();
    let secs = match last_message {
        Some(elapsed) if count == total && bytes > 0 => elapsed.as_secs_f64(),
        _ => {
            bail!("raw consume of {topic} read {count} messages ({bytes} payload bytes) of {total}")
        }
    };
    Ok(secs)
}
/// Step 3: the service in-process with a fresh RocksDB, timed from its
/// partition assignment until it has committed every event. Returns the
/// seconds and the service's totals.
fn run_service(config: ServeConfig, total: u64) -> anyhow::Result<(f64, RunSummary, Arc<Shared>)> {
    let service = Service::start(config)?;
    let bar = progress(
        Some(total),
        "{spinner} pipeline [{elapsed_precise}] {bar:40} {human_pos}/{human_len} events",
    );
    let started = Instant::now();
    let outcome = service.wait_for_commits(total, &bar);
    let secs = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let shared = service.shared.clone();
    let summary = service.stop()?;
    outcome?;
    Ok((secs, summary, shared))
}

/// The service running in-process on its own thread.
struct Service {
    shared: Arc<Shared>,
    thread: JoinHandle<Result<RunSummary, ServiceError>>,
}

impl Service {
    /// Start the service with a fresh RocksDB and wait for its partition
    /// assignment, so that the consumer group's join delay, a fixed cost a
    /// long-running service pays once, is left out of every measurement.
    fn start(config: ServeConfig) -> anyhow::Result<Service> {
        let store = service::open_store(&config)?;
        let shared = Shared::new(store);
        let service_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("pipeline".into())
            .spawn(move || service::run(&config, service_shared))
            .context("starting the pipeline thread")?;
        let service = Service { shared, thread };
        let waiting = Instant::now();
        while !service.shared.assigned.load(Ordering::Relaxed) {
            if service.thread.is_finished() {
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

    /// Wait until the service has committed `total` events; an error if it
    /// stops or stalls first.
    fn wait_for_commits(&self, total: u64, bar: &ProgressBar) -> anyhow::Result<()> {
        await_count(
            total,
            bar,
            || self.shared.counters.committed.load(Ordering::Relaxed),
            || self.thread.is_finished(),
            "the service stopped after committing",
        )
    }

    /// Shut the service down and return its totals.
    fn stop(self) -> anyhow::Result<RunSummary> {
        self.shared.shutdown.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the pipeline thread panicked"))?
            .context("running the service")
    }
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

/// The figures of one offered load of `bench latency`.
#[derive(serde::Serialize)]
struct LoadReport {
    /// Events/s offered; `null` for as fast as the producer goes.
    offered_per_sec: Option<f64>,
    service: LatencyFigures,
    /// The same load answered by the relay: the broker's own latency.
    relay: Option<LatencyFigures>,
}

/// What one responder's run at one load measured.
#[derive(serde::Serialize)]
struct LatencyFigures {
    /// Events delivered to the input topic per second of producing.
    achieved_per_sec: f64,
    /// Decisions published.
    decisions: u64,
    /// Jobs whose submission and first decision were both seen: the
    /// latency samples.
    samples: u64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    max_ms: f64,
    /// The service's batches (none for the relay), which its latency
    /// waits on.
    batches: Option<BatchMeans>,
}

/// A service run's batches and the mean milliseconds of each batch step,
/// and how long a message waited, on average, from its poll to the start
/// of its batch.
#[derive(serde::Serialize)]
struct BatchMeans {
    batches: u64,
    events_per_batch: f64,
    queued_ms: f64,
    apply_ms: f64,
    publish_ms: f64,
    commit_ms: f64,
}

impl BatchMeans {
    fn of(shared: &Shared) -> Self {
        let c = &shared.counters;
        let batches = c.batches.load(Ordering::Relaxed);
        let per_batch = |n: u64| n as f64 / batches.max(1) as f64;
        BatchMeans {
            batches,
            events_per_batch: per_batch(c.committed.load(Ordering::Relaxed)),
            queued_ms: c.queued_ns.load(Ordering::Relaxed) as f64
                / c.committed.load(Ordering::Relaxed).max(1) as f64
                / 1e6,
            apply_ms: per_batch(c.apply_ns.load(Ordering::Relaxed)) / 1e6,
            publish_ms: per_batch(c.publish_ns.load(Ordering::Relaxed)) / 1e6,
            commit_ms: per_batch(c.commit_ns.load(Ordering::Relaxed)) / 1e6,
        }
    }
}

/// The figures of a `bench latency` run.
#[derive(serde::Serialize)]
struct LatencyReport {
    events: u64,
    partitions: i32,
    output_partitions: i32,
    broker: String,
    loads: Vec<LoadReport>,
}

fn latency(args: &LatencyArgs) -> anyhow::Result<()> {
    let (events, diagnostics) = open_input(&args.input)?;
    let events: Vec<Event> = events
        .collect::<Result<_, _>>()
        .context("reading the workload")?;
    report_skipped(diagnostics.as_ref());
    if events.is_empty() {
        bail!("the input holds no events: nothing to measure");
    }
    // A job's first submission is what its version-1 decision answers; a
    // repeated submission is rejected and publishes nothing.
    let mut submissions = HashMap::new();
    for (index, event) in events.iter().enumerate() {
        if let Event::JobSubmitted(job) = event {
            submissions.entry(job.job_id).or_insert(index);
        }
    }
    let mut loads = Vec::with_capacity(args.rates.len());
    for (n, &rate) in args.rates.iter().enumerate() {
        let offered = match rate {
            Rate::PerSec(r) => format!("{r} events/s"),
            Rate::Max => "saturation".to_owned(),
        };
        let run = |responder: Responder| {
            let (config, _state) =
                fresh_config(&format!("{}{n}", responder.name()), &args.service)?;
            on_cluster(&args.service, config, |config| {
                measure_load(
                    config,
                    &args.service,
                    &events,
                    &submissions,
                    rate,
                    responder,
                )
            })
            .with_context(|| format!("measuring the {} latency at {offered}", responder.name()))
        };
        let relay = if args.no_relay {
            None
        } else {
            Some(run(Responder::Relay)?)
        };
        let service = run(Responder::Service)?;
        loads.push(LoadReport {
            offered_per_sec: rate.per_sec(),
            service,
            relay,
        });
    }
    let report = LatencyReport {
        events: events.len() as u64,
        partitions: args.service.partitions,
        output_partitions: args.service.output_partitions(),
        broker: broker_name(&args.service.kafka),
        loads,
    };
    output_latency(&report, args.json)
}

/// What answers the submissions of a latency run.
#[derive(Clone, Copy)]
enum Responder {
    Service,
    Relay,
}

impl Responder {
    fn name(self) -> &'static str {
        match self {
            Responder::Service => "service",
            Responder::Relay => "relay",
        }
    }
}

/// A responder, started.
enum Running {
    Service(Service),
    Relay(Relay),
}

impl Running {
    fn start(responder: Responder, config: ServeConfig, partitions: i32) -> anyhow::Result<Self> {
        Ok(match responder {
            Responder::Service => Running::Service(Service::start(config)?),
            Responder::Relay => Running::Relay(Relay::start(&config, partitions)?),
        })
    }

    /// Wait until all `total` events are handled: committed by the service,
    /// read by the relay.
    fn wait_for(&self, total: u64, bar: &ProgressBar) -> anyhow::Result<()> {
        match self {
            Running::Service(service) => service.wait_for_commits(total, bar),
            Running::Relay(relay) => await_count(
                total,
                bar,
                || relay.consumed(),
                || relay.is_finished(),
                "the relay stopped after reading",
            ),
        }
    }

    /// Stop; the decisions published, and the service's batches.
    fn stop(self) -> anyhow::Result<(u64, Option<BatchMeans>)> {
        match self {
            Running::Service(service) => {
                let shared = service.shared.clone();
                let decisions = service.stop()?.decisions;
                Ok((decisions, Some(BatchMeans::of(&shared))))
            }
            Running::Relay(relay) => Ok((relay.stop()?, None)),
        }
    }
}

/// One load: the responder started on the fresh topics, a listener on the
/// decisions topic, then the events produced at `rate` while both run.
fn measure_load(
    config: ServeConfig,
    run: &ServiceArgs,
    events: &[Event],
    submissions: &HashMap<u64, usize>,
    rate: Rate,
    responder: Responder,
) -> anyhow::Result<LatencyFigures> {
    config.validate().map_err(anyhow::Error::msg)?;
    let settings = config.kafka.clone();
    let (input, decisions) = (
        config.topics.events.clone(),
        config.topics.decisions.clone(),
    );
    let listener_group = format!("{}.listener", config.consumer.group);
    let total = events.len() as u64;
    let running = Running::start(responder, config, run.partitions)?;
    let ready = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let (produced, stopped, received) = std::thread::scope(|scope| {
        let listener = scope.spawn(|| {
            listen(
                &settings,
                &decisions,
                run.output_partitions(),
                &listener_group,
                &ready,
                &done,
            )
        });
        let produced = (|| {
            while !ready.load(Ordering::Relaxed) {
                if listener.is_finished() {
                    bail!("the decisions listener stopped before it was ready");
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let sent = send_times(&run.writer(&settings), &input, events, rate.per_sec())?;
            let bar = progress(
                Some(total),
                "{spinner} drain    [{elapsed_precise}] {bar:40} {human_pos}/{human_len} events",
            );
            let handled = running.wait_for(total, &bar);
            bar.finish_and_clear();
            handled.map(|()| sent)
        })();
        // Everything the responder published is in the topic once it has
        // stopped: the listener reads up to there and ends.
        let stopped = running.stop();
        done.store(true, Ordering::Relaxed);
        let received = listener
            .join()
            .map_err(|_| anyhow::anyhow!("the decisions listener panicked"))
            .and_then(|r| r);
        (produced, stopped, received)
    });
    // A listener that failed is the cause of whatever failed after it.
    let (published, batches) = stopped?;
    let received = received?;
    let (written, sent) = produced?;

    let mut samples: Vec<Duration> = submissions
        .iter()
        .filter_map(|(job, &index)| {
            let at = received.get(job)?;
            Some(at.saturating_duration_since(*sent.get(index)?))
        })
        .collect();
    if samples.is_empty() {
        bail!("no job's first decision arrived on {decisions} ({published} decisions published)");
    }
    samples.sort_unstable();
    let ms = |q: f64| percentile(&samples, q).as_secs_f64() * 1e3;
    Ok(LatencyFigures {
        achieved_per_sec: written.events_per_sec,
        decisions: published,
        samples: samples.len() as u64,
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        p999_ms: ms(0.999),
        max_ms: ms(1.0),
        batches,
    })
}

/// The nearest-rank `q`-quantile of sorted, non-empty `samples`.
fn percentile(samples: &[Duration], q: f64) -> Duration {
    let rank = (q * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// Produce `events` at most `rate` per second and return the replay's
/// summary with the moment each event was handed to the producer, by
/// position. The replay consults its gate with the count produced so far
/// right before each send (repeatedly while it paces), so the gate's last
/// call for a count is that event's send time.
fn send_times(
    settings: &KafkaSettings,
    topic: &str,
    events: &[Event],
    rate: Option<f64>,
) -> anyhow::Result<(ReplaySummary, Vec<Instant>)> {
    let sent = RefCell::new(Vec::with_capacity(events.len()));
    let gate = |produced: u64| {
        let now = Instant::now();
        let mut sent = sent.borrow_mut();
        match sent.get_mut(produced as usize) {
            Some(at) => *at = now,
            None => sent.push(now),
        }
        ControlFlow::Continue(())
    };
    let summary = produce(
        settings,
        topic,
        events.iter().cloned().map(Ok::<Event, TraceError>),
        rate,
        &gate,
    )?;
    Ok((summary, sent.into_inner()))
}

/// The fields of a decision that identify it.
#[derive(serde::Deserialize)]
struct DecisionId {
    job_id: u64,
    version: u32,
}

/// Read `topic` from the beginning, noting when each job's version-1
/// decision arrives, until `done` is set and every partition is read to its
/// end at that moment. `ready` is set once the consumer is connected and
/// assigned, before which the caller produces nothing, so that connecting
/// is not counted as latency.
fn listen(
    settings: &KafkaSettings,
    topic: &str,
    partitions: i32,
    group: &str,
    ready: &AtomicBool,
    done: &AtomicBool,
) -> anyhow::Result<HashMap<u64, Instant>> {
    let mut config = settings.client_config();
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false");
    if !settings.client.contains_key("fetch.wait.max.ms") {
        config.set("fetch.wait.max.ms", LISTENER_FETCH_WAIT_MS);
    }
    let consumer: BaseConsumer<RawContext> = config
        .create_with_context(RawContext)
        .map_err(|e| settings.redact(e))
        .context("creating the decisions listener")?;
    let watermarks = || {
        (0..partitions)
            .map(|partition| {
                consumer
                    .fetch_watermarks(topic, partition, Duration::from_secs(10))
                    .map(|(_, high)| high)
                    .with_context(|| format!("reading the watermarks of {topic} [{partition}]"))
            })
            .collect::<anyhow::Result<Vec<i64>>>()
    };
    watermarks()?;
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        assignment.add_partition_offset(topic, partition, Offset::Beginning)?;
    }
    consumer
        .assign(&assignment)
        .with_context(|| format!("assigning {topic} to the decisions listener"))?;
    ready.store(true, Ordering::Relaxed);

    let mut first = HashMap::new();
    let mut next = vec![0i64; usize::try_from(partitions).unwrap_or_default()];
    let mut ends: Option<Vec<i64>> = None;
    let mut idle_since: Option<Instant> = None;
    loop {
        if ends.is_none() && done.load(Ordering::Relaxed) {
            ends = Some(watermarks()?);
        }
        if let Some(ends) = &ends
            && next.iter().zip(ends).all(|(next, end)| next >= end)
        {
            return Ok(first);
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                let at = Instant::now();
                idle_since = None;
                let (partition, offset) = (message.partition(), message.offset());
                let decision: DecisionId = serde_json::from_slice(
                    message.payload().unwrap_or_default(),
                )
                .with_context(|| {
                    format!("decoding the decision at {topic} [{partition}] offset {offset}")
                })?;
                if decision.version == 1 {
                    first.entry(decision.job_id).or_insert(at);
                }
                if let Some(next) = usize::try_from(partition)
                    .ok()
                    .and_then(|p| next.get_mut(p))
                {
                    *next = offset + 1;
                }
            }
            Some(Err(err)) => return Err(err).with_context(|| format!("listening on {topic}")),
            // Decisions may be sparse while the service runs; once it has
            // stopped, everything left to read is in the topic.
            None if ends.is_some()
                && idle_since.get_or_insert_with(Instant::now).elapsed() > STALL =>
            {
                bail!(
                    "the decisions listener got nothing on {topic} for {} s after the \
                     service stopped, short of the topic's end",
                    STALL.as_secs()
                );
            }
            None => {}
        }
    }
}

fn output_latency(report: &LatencyReport, json: bool) -> anyhow::Result<()> {
    if json {
        return print_out(&format!("{}\n", serde_json::to_string_pretty(report)?));
    }
    let mut out = format!(
        "jobcast bench latency: {} events, {} partitions, {} output partitions, {}\n\
         latency: job submission handed to the producer -> its first decision received\n\
         relay: a bare consumer republishing each submission at once (the broker's own latency)\n\n  \
         {:>10} {:>8} {:>11} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        report.events,
        report.partitions,
        report.output_partitions,
        report.broker,
        "offered/s",
        "by",
        "achieved/s",
        "decisions",
        "samples",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms"
    );
    for load in &report.loads {
        let offered = load
            .offered_per_sec
            .map_or_else(|| "max".to_owned(), |r| format!("{r:.0}"));
        let rows = [
            ("service", Some(&load.service)),
            ("relay", load.relay.as_ref()),
        ];
        for (by, figures) in rows {
            let Some(f) = figures else { continue };
            out.push_str(&format!(
                "  {offered:>10} {by:>8} {:>11.0} {:>10} {:>9} {:>9.2} {:>9.2} {:>9.2} {:>9.2}\n",
                f.achieved_per_sec, f.decisions, f.samples, f.p50_ms, f.p99_ms, f.p999_ms, f.max_ms
            ));
        }
    }
    out.push_str(&format!(
        "\n  service batches: {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        "offered/s", "batches", "events", "queued ms", "apply ms", "publish ms", "commit ms"
    ));
    for load in &report.loads {
        let Some(b) = &load.service.batches else {
            continue;
        };
        let offered = load
            .offered_per_sec
            .map_or_else(|| "max".to_owned(), |r| format!("{r:.0}"));
        out.push_str(&format!(
            "                   {offered:>10} {:>9} {:>9.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2}\n",
            b.batches, b.events_per_batch, b.queued_ms, b.apply_ms, b.publish_ms, b.commit_ms
        ));
    }
    print_out(&out)
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

fn output(report: &Report, json: bool) -> anyhow::Result<()> {
    if json {
        return print_out(&format!("{}\n", serde_json::to_string_pretty(report)?));
    }
    let row = |step: &str, rate: f64, secs: f64| format!("  {step:<28} {rate:>12.0} {secs:>9.2}\n");
    let mut out = format!(
        "jobcast bench pipeline: {} events, {} partitions, {} output partitions, {}\n\n  {:<28} {:>12} {:>9}\n",
        report.events,
        report.partitions,
        report.output_partitions,
        report.broker,
        "step",
        "events/s",
        "seconds"
    );
    out.push_str(&row(
        "write (producer, acks=all)",
        report.write_events_per_sec,
        report.write_secs,
    ));
    out.push_str(&row(
        "raw consume (librdkafka)",
        report.raw_consume_events_per_sec,
        report.raw_secs,
    ));
    out.push_str(&row(
        "pipeline (service, RocksDB)",
        report.pipeline_events_per_sec,
        report.pipeline_secs,
    ));
    out.push_str(&format!(
        "\n  ratio pipeline / raw         {:>12.3}\n  decisions published          {:>12}\n  dead-lettered                {:>12}\n",
        report.ratio, report.decisions, report.dead_lettered
    ));
    let st = &report.stages;
    out.push_str(&format!(
        "\n  pipeline seconds by step ({} batches)\n    apply (engine, log)        {:>12.2}\n    publish (until acked)      {:>12.2}\n    commit (records, handover) {:>12.2}\n    waiting for input, merge   {:>12.2}\n  RocksDB writes (writer thread) {:>10.2}\n  input partitions paused      {:>12}\n",
        st.batches,
        st.apply_secs,
        st.publish_secs,
        st.commit_secs,
        st.other_secs,
        st.write_secs,
        st.input_pauses
    ));
    print_out(&out)
}
