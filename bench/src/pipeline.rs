//! `jobcast bench pipeline`: the throughput of the service beside the raw
//! consume rate of the same messages from the same broker.

use std::collections::BTreeSet;
use std::error::Error as StdError;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use jobcast_ingest::event::Event;
use jobcast_ingest::kafka::KafkaSettings;
use jobcast_replay::kafka::{ReplaySummary, Ungated};
use jobcast_scheduler_feed::config::ServeConfig;
use jobcast_scheduler_feed::service::RunSummary;
use jobcast_scheduler_feed::shared::{Shared, StepTime};
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::{
    InputArgs, STALL, ServiceArgs, bare_consumer, broker_name, fresh_config, on_cluster,
    open_input, produce, progress, report_skipped, start_service, wait_for_commits,
};

/// Consumed messages between progress-bar updates.
const PROGRESS_EVERY: u64 = 1 << 12;

#[derive(clap::Args)]
pub(super) struct PipelineArgs {
    #[command(flatten)]
    input: InputArgs,
    #[command(flatten)]
    service: ServiceArgs,
    /// Print the figures as JSON on stdout instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The figures of one `bench pipeline` run; the JSON output is the
/// serialised fields, the table adds the seconds.
#[derive(serde::Serialize)]
pub struct Report {
    pub(super) events: u64,
    pub(super) partitions: i32,
    pub(super) output_partitions: i32,
    pub(super) broker: String,
    pub(super) raw_consume_events_per_sec: f64,
    pub(super) pipeline_events_per_sec: f64,
    /// `pipeline_events_per_sec / raw_consume_events_per_sec`.
    pub(super) ratio: f64,
    pub(super) write_events_per_sec: f64,
    pub(super) decisions: u64,
    /// Where the pipeline's time went.
    pub(super) stages: Stages,
    #[serde(skip)]
    pub(super) write_secs: f64,
    #[serde(skip)]
    pub(super) raw_secs: f64,
    #[serde(skip)]
    pub(super) pipeline_secs: f64,
    #[serde(skip)]
    pub(super) dead_lettered: u64,
}

/// The pipeline's seconds by batch step, and the rest: waiting for input
/// (polling, the event-time merge) between batches.
#[derive(serde::Serialize)]
pub(super) struct Stages {
    pub(super) batches: u64,
    pub(super) apply_secs: f64,
    pub(super) publish_secs: f64,
    pub(super) commit_secs: f64,
    pub(super) other_secs: f64,
    /// The writer thread's RocksDB writes, beside the steps above.
    pub(super) write_secs: f64,
    /// Input partitions paused to bound the event-time merge (each costs a
    /// refetch: `consumer.max_buffered_events`).
    pub(super) input_pauses: u64,
}

pub(super) fn pipeline(args: &PipelineArgs) -> anyhow::Result<Report> {
    let (config, _state) = fresh_config("pipeline", &args.service)?;
    on_cluster(&args.service, config, &[], |config| measure(args, config))
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let report = self;
        let row =
            |step: &str, rate: f64, secs: f64| format!("  {step:<28} {rate:>12.0} {secs:>9.2}\n");
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
        f.write_str(&out)
    }
}

/// Write, consume raw, run the service: the three timed steps.
fn measure(args: &PipelineArgs, config: ServeConfig) -> anyhow::Result<Report> {
    config.validate()?;
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
    let secs = |step: &StepTime| step.total_ns.load(Ordering::Relaxed) as f64 / 1e9;
    let (apply_secs, publish_secs, commit_secs) = (
        secs(&counters.apply),
        secs(&counters.publish),
        secs(&counters.commit),
    );
    let stages = Stages {
        batches: counters.batches.load(Ordering::Relaxed),
        apply_secs,
        publish_secs,
        commit_secs,
        other_secs: (pipeline_secs - apply_secs - publish_secs - commit_secs).max(0.0),
        write_secs: secs(&counters.write),
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

/// Step 1: every event into the input topic, as fast as the producer goes.
fn write<I, E>(settings: &KafkaSettings, topic: &str, events: I) -> anyhow::Result<ReplaySummary>
where
    I: IntoIterator<Item = Result<Event, E>>,
    E: StdError + Send + Sync + 'static,
{
    produce(settings, topic, events, None, &Ungated)
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
    let service = start_service(config)?;
    let bar = progress(
        Some(total),
        "{spinner} pipeline [{elapsed_precise}] {bar:40} {human_pos}/{human_len} events",
    );
    let started = Instant::now();
    let outcome = wait_for_commits(&service, total, &bar);
    let secs = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let shared = service.shared().clone();
    let summary = service.stop()?;
    outcome?;
    Ok((secs, summary, shared))
}
