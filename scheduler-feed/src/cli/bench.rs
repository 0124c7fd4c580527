//! `jobcast bench`: throughput measurements of the service as shipped.
//!
//! `jobcast bench pipeline` writes a workload to a fresh input topic, then
//! reads it twice from the same broker in the same run: once with a bare
//! librdkafka consumer that only touches each payload, and once with the
//! whole service (decode, engine, RocksDB commit on disk, decisions
//! acknowledged by the broker). The ratio of the two rates says how much of
//! the broker's delivery rate the pipeline keeps, a figure that stays
//! comparable across machines and brokers where the absolute rates do not.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::error::Error as StdError;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use jobcast_ingest::Format;
use jobcast_ingest::event::Event;
use jobcast_ingest::kafka::{KafkaSettings, Topics};
use jobcast_replay::WorkloadConfig;
use jobcast_replay::kafka::{Outcome, ReplayOptions, ReplaySummary, Speed, replay};
use jobcast_scheduler_feed::config::ServeConfig;
use jobcast_scheduler_feed::service::{self, RunSummary, ServiceError, Shared};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use rdkafka::{Offset, TopicPartitionList};

use super::evaluate::print_out;
use super::kafka_args::KafkaArgs;

/// A step that makes no progress for this long has failed.
const STALL: Duration = Duration::from_secs(60);
/// Consumed messages between progress-bar updates.
const PROGRESS_EVERY: u64 = 1 << 12;

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
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["trace", "generate_jobs"])))]
struct PipelineArgs {
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
    /// Partitions of the input topic. The embedded mock cluster keeps about
    /// 5 MB per partition: more events need more partitions.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(i32).range(1..))]
    partitions: i32,
    /// Sync every RocksDB commit to disk (as `storage.sync` in production).
    #[arg(long)]
    sync: bool,
    /// Print the figures as JSON on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Without --brokers (or JOBCAST_BROKERS), librdkafka's in-process mock
    /// cluster. With them, topics with unique names are created for the run
    /// and deleted after it.
    #[command(flatten)]
    kafka: KafkaArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Pipeline(args) => pipeline(&args),
    }
}

/// The figures of one `bench pipeline` run; the JSON output is the
/// serialised fields, the table adds the seconds.
#[derive(serde::Serialize)]
struct Report {
    events: u64,
    partitions: i32,
    broker: String,
    raw_consume_events_per_sec: f64,
    pipeline_events_per_sec: f64,
    /// `pipeline_events_per_sec / raw_consume_events_per_sec`.
    ratio: f64,
    write_events_per_sec: f64,
    decisions: u64,
    #[serde(skip)]
    write_secs: f64,
    #[serde(skip)]
    raw_secs: f64,
    #[serde(skip)]
    pipeline_secs: f64,
    #[serde(skip)]
    dead_lettered: u64,
}

fn pipeline(args: &PipelineArgs) -> anyhow::Result<()> {
    let run_id = format!(
        "{}-{}",
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
    let mut config = ServeConfig {
        topics,
        ..ServeConfig::default()
    };
    config.consumer.group = format!("jobcast-bench-{run_id}");
    config.storage.path = state.path().join("state");
    config.storage.sync = args.sync;
    let topic_list = |config: &ServeConfig| {
        let t = &config.topics;
        [
            (t.events.clone(), args.partitions),
            (t.decisions.clone(), args.partitions),
            (t.risk.clone(), args.partitions),
            (t.dead_letter.clone(), 1),
        ]
    };

    let report = match &args.kafka.brokers {
        None => {
            let mock = MockCluster::new(1).context("starting the embedded Kafka (mock cluster)")?;
            config.kafka = args
                .kafka
                .apply(KafkaSettings::new(mock.bootstrap_servers()));
            for (topic, partitions) in topic_list(&config) {
                mock.create_topic(&topic, partitions, 1)
                    .with_context(|| format!("creating topic {topic} on the mock cluster"))?;
            }
            measure(args, config, "embedded mock cluster".into())?
        }
        Some(brokers) => {
            config.kafka = args.kafka.settings()?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            let list = topic_list(&config);
            let refs: Vec<(&str, i32)> = list.iter().map(|(t, p)| (t.as_str(), *p)).collect();
            runtime
                .block_on(config.kafka.ensure_topics(&refs))
                .map_err(anyhow::Error::msg)?;
            let settings = config.kafka.clone();
            let result = measure(args, config, brokers.clone());
            let names: Vec<&str> = refs.iter().map(|(t, _)| *t).collect();
            let deleted = runtime.block_on(delete_topics(&settings, &names));
            // The measurement's error matters more than the clean-up's.
            let report = result?;
            deleted?;
            report
        }
    };
    output(&report, args.json)
}

/// Write, consume raw, run the service: the three timed steps.
fn measure(args: &PipelineArgs, config: ServeConfig, broker: String) -> anyhow::Result<Report> {
    config.validate().map_err(anyhow::Error::msg)?;
    let limit = args
        .max_events
        .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let topic = &config.topics.events;
    let written = match (&args.trace, args.format, args.generate_jobs) {
        (Some(path), Some(format), _) => {
            let trace = jobcast_ingest::open(format, path)
                .with_context(|| format!("opening {} trace {}", format.name(), path.display()))?;
            let diagnostics = trace.diagnostics().clone();
            let written = write(&config.kafka, topic, trace.take(limit))?;
            if diagnostics.skipped_total() > 0 {
                eprint!("{}", diagnostics.summary());
            }
            written
        }
        (_, _, Some(jobs)) => {
            let workload = WorkloadConfig {
                seed: args.seed,
                jobs: Some(jobs),
                ..WorkloadConfig::default()
            };
            let events = jobcast_replay::generate(&workload)?;
            write(
                &config.kafka,
                topic,
                events.map(Ok::<Event, Infallible>).take(limit),
            )?
        }
        _ => bail!("pass --trace with --format, or --generate-jobs"),
    };
    let events = written.delivered;
    if events == 0 {
        bail!("the input holds no events: nothing to measure");
    }

    let raw_group = format!("{}.raw", config.consumer.group);
    let raw_secs = raw_consume(&config.kafka, topic, args.partitions, events, &raw_group)?;
    let (pipeline_secs, summary) = run_service(config, events)?;

    let raw_rate = events as f64 / raw_secs;
    let pipeline_rate = events as f64 / pipeline_secs;
    Ok(Report {
        events,
        partitions: args.partitions,
        broker,
        raw_consume_events_per_sec: raw_rate,
        pipeline_events_per_sec: pipeline_rate,
        ratio: pipeline_rate / raw_rate,
        write_events_per_sec: written.events_per_sec,
        decisions: summary.decisions,
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
    let bar = progress(None, "{spinner} write    [{elapsed_precise}] {msg}");
    let options = ReplayOptions {
        speed: Speed::Max,
        ..ReplayOptions::new(topic)
    };
    let result = replay(
        settings,
        &options,
        events,
        &|_| ControlFlow::Continue(()),
        |p| bar.set_message(format!("{} events produced", p.produced)),
    );
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
    let consumer: BaseConsumer<RawContext> = settings
        .client_config()
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create_with_context(RawContext)
        .map_err(|e| settings.redact(e))
        .context("creating the raw consumer")?;

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
/// partition assignment (so the consumer group's join delay, a fixed cost
/// that a long-running service pays once, is left out) until it has
/// committed every event. Returns the seconds and the service's totals.
fn run_service(config: ServeConfig, total: u64) -> anyhow::Result<(f64, RunSummary)> {
    let store = service::open_store(&config)?;
    let shared = Shared::new(store);
    let pipeline_shared = shared.clone();
    let pipeline = std::thread::Builder::new()
        .name("pipeline".into())
        .spawn(move || service::run(&config, pipeline_shared))
        .context("starting the pipeline thread")?;
    let bar = progress(
        Some(total),
        "{spinner} pipeline [{elapsed_precise}] {bar:40} {human_pos}/{human_len} events",
    );
    let outcome = wait_for_commits(&shared, &pipeline, total, &bar);
    bar.finish_and_clear();
    shared.shutdown.store(true, Ordering::Relaxed);
    let summary = join(pipeline)?;
    let secs = outcome?;
    if summary.committed < total {
        bail!(
            "the service stopped after committing {} of {total} events",
            summary.committed
        );
    }
    Ok((secs, summary))
}

/// Seconds from the service's partition assignment until it has committed
/// `total` events; an error if it stops or stalls first.
fn wait_for_commits(
    shared: &Shared,
    pipeline: &JoinHandle<Result<RunSummary, ServiceError>>,
    total: u64,
    bar: &ProgressBar,
) -> anyhow::Result<f64> {
    let tick = Duration::from_millis(1);
    let waiting = Instant::now();
    while !shared.assigned.load(Ordering::Relaxed) {
        if pipeline.is_finished() {
            return Ok(0.0);
        }
        if waiting.elapsed() > STALL {
            bail!("the service got no partitions in {} s", STALL.as_secs());
        }
        std::thread::sleep(tick);
    }
    let started = Instant::now();
    let mut last = (Instant::now(), 0u64);
    loop {
        let committed = shared.counters.committed.load(Ordering::Relaxed);
        if committed >= total || pipeline.is_finished() {
            return Ok(started.elapsed().as_secs_f64());
        }
        if committed != last.1 {
            bar.set_position(committed);
            last = (Instant::now(), committed);
        } else if last.0.elapsed() > STALL {
            bail!(
                "the service committed nothing for {} s after {committed} of {total} events",
                STALL.as_secs()
            );
        }
        std::thread::sleep(tick);
    }
}

fn join(pipeline: JoinHandle<Result<RunSummary, ServiceError>>) -> anyhow::Result<RunSummary> {
    pipeline
        .join()
        .map_err(|_| anyhow::anyhow!("the pipeline thread panicked"))?
        .context("running the service")
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
        "jobcast bench pipeline: {} events, {} partitions, {}\n\n  {:<28} {:>12} {:>9}\n",
        report.events, report.partitions, report.broker, "step", "events/s", "seconds"
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
    print_out(&out)
}
