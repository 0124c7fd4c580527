//! `jobcast bench latency`: the latency from a job's submission to its
//! first decision, at fixed offered loads and at saturation, for the
//! service and for the relay.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use indicatif::ProgressBar;
use jobcast_ingest::TraceError;
use jobcast_ingest::event::Event;
use jobcast_ingest::kafka::KafkaSettings;
use jobcast_predictor::stats::percentile;
use jobcast_replay::kafka::{ReplaySummary, max_or_positive};
use jobcast_scheduler_feed::config::ServeConfig;
use jobcast_scheduler_feed::service::Service;
use jobcast_scheduler_feed::shared::{SLOW_STEP, Shared, StepTime};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::relay::Relay;
use super::{
    InputArgs, RawContext, STALL, ServiceArgs, await_count, broker_name, fresh_config, on_cluster,
    open_input, produce, progress, report_skipped, start_service, wait_for_commits,
};

/// The decisions listener's fetch wait unless `-X fetch.wait.max.ms` sets
/// one: an upper bound on what it adds to the measured latency when the
/// broker holds a fetch open.
const LISTENER_FETCH_WAIT_MS: &str = "10";

#[derive(clap::Args)]
pub(super) struct LatencyArgs {
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
    pub(crate) json: bool,
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
        match max_or_positive(s) {
            Some(None) => Ok(Rate::Max),
            Some(Some(r)) => Ok(Rate::PerSec(r)),
            None => Err(format!(
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

/// The figures of one offered load of `bench latency`.
#[derive(serde::Serialize)]
pub(super) struct LoadReport {
    /// Events/s offered; `null` for as fast as the producer goes.
    pub(super) offered_per_sec: Option<f64>,
    pub(super) service: LatencyFigures,
    /// The same load answered by the relay: the broker's own latency.
    pub(super) relay: Option<LatencyFigures>,
}

/// What one responder's run at one load measured.
#[derive(serde::Serialize)]
pub(super) struct LatencyFigures {
    /// Events delivered to the input topic per second of producing.
    pub(super) achieved_per_sec: f64,
    /// Decisions published.
    pub(super) decisions: u64,
    /// Jobs whose submission and first decision were both seen: the
    /// latency samples.
    pub(super) samples: u64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) p999_ms: f64,
    pub(super) max_ms: f64,
    /// The service's batches (none for the relay), which its latency
    /// waits on.
    pub(super) batches: Option<BatchMeans>,
}

/// A service run's batches: the mean milliseconds of each batch step, and
/// how long a message waited, on average, from its poll to the start of
/// its batch; and per step (a batch's oldest message for `queued`) the
/// longest and the batches at or above [`SLOW_STEP`], which tell which
/// step makes a latency's tail.
#[derive(serde::Serialize)]
pub(super) struct BatchMeans {
    pub(super) batches: u64,
    pub(super) events_per_batch: f64,
    pub(super) queued_ms: f64,
    pub(super) apply_ms: f64,
    pub(super) publish_ms: f64,
    pub(super) commit_ms: f64,
    /// queued, apply, publish, commit.
    pub(super) longest_ms: [f64; 4],
    pub(super) slow_batches: [u64; 4],
}

impl BatchMeans {
    fn of(shared: &Shared) -> Self {
        let c = &shared.counters;
        let batches = c.batches.load(Ordering::Relaxed);
        let per_batch = |step: &StepTime| {
            step.total_ns.load(Ordering::Relaxed) as f64 / batches.max(1) as f64 / 1e6
        };
        let steps = [&c.queued, &c.apply, &c.publish, &c.commit];
        BatchMeans {
            batches,
            events_per_batch: c.committed.load(Ordering::Relaxed) as f64 / batches.max(1) as f64,
            queued_ms: c.queued.total_ns.load(Ordering::Relaxed) as f64
                / c.committed.load(Ordering::Relaxed).max(1) as f64
                / 1e6,
            apply_ms: per_batch(&c.apply),
            publish_ms: per_batch(&c.publish),
            commit_ms: per_batch(&c.commit),
            longest_ms: steps.map(|s| s.max_ns.load(Ordering::Relaxed) as f64 / 1e6),
            slow_batches: steps.map(|s| s.slow_batches.load(Ordering::Relaxed)),
        }
    }
}

/// The figures of a `bench latency` run.
#[derive(serde::Serialize)]
pub struct LatencyReport {
    pub(super) events: u64,
    pub(super) partitions: i32,
    pub(super) output_partitions: i32,
    pub(super) broker: String,
    pub(super) loads: Vec<LoadReport>,
}

pub(super) fn latency(args: &LatencyArgs) -> anyhow::Result<LatencyReport> {
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
            on_cluster(&args.service, config, &[], |config| {
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
    Ok(report)
}
impl std::fmt::Display for LatencyReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let report = self;
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
        let slow = format!("batches ≥ {} ms q/a/p/c", SLOW_STEP.as_millis());
        out.push_str(&format!(
            "\n  service batches: {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {:<27}  {slow}\n",
            "offered/s",
            "batches",
            "events",
            "queued ms",
            "apply ms",
            "publish ms",
            "commit ms",
            "longest q/a/p/c ms",
        ));
        for load in &report.loads {
            let Some(b) = &load.service.batches else {
                continue;
            };
            let offered = load
                .offered_per_sec
                .map_or_else(|| "max".to_owned(), |r| format!("{r:.0}"));
            let [lq, la, lp, lc] = b.longest_ms;
            let [sq, sa, sp, sc] = b.slow_batches;
            let longest = format!("{lq:.1}/{la:.1}/{lp:.1}/{lc:.1}");
            out.push_str(&format!(
                "                   {offered:>10} {:>9} {:>9.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2}  {:<27}  {sq}/{sa}/{sp}/{sc}\n",
                b.batches,
                b.events_per_batch,
                b.queued_ms,
                b.apply_ms,
                b.publish_ms,
                b.commit_ms,
                longest,
            ));
        }
        f.write_str(&out)
    }
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
            Responder::Service => Running::Service(start_service(config)?),
            Responder::Relay => Running::Relay(Relay::start(&config, partitions)?),
        })
    }

    /// Wait until all `total` events are handled: committed by the service,
    /// read by the relay.
    fn wait_for(&self, total: u64, bar: &ProgressBar) -> anyhow::Result<()> {
        match self {
            Running::Service(service) => wait_for_commits(service, total, bar),
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
                let shared = service.shared().clone();
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
    config.validate()?;
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

    let mut samples_ms: Vec<f64> = submissions
        .iter()
        .filter_map(|(job, &index)| {
            let at = received.get(job)?;
            Some(
                at.saturating_duration_since(*sent.get(index)?)
                    .as_secs_f64()
                    * 1e3,
            )
        })
        .collect();
    samples_ms.sort_by(f64::total_cmp);
    let ms = |q: f64| {
        percentile(&samples_ms, q * 100.0).with_context(|| {
            format!(
                "no job's first decision arrived on {decisions} ({published} decisions published)"
            )
        })
    };
    Ok(LatencyFigures {
        achieved_per_sec: written.events_per_sec,
        decisions: published,
        samples: samples_ms.len() as u64,
        p50_ms: ms(0.5)?,
        p99_ms: ms(0.99)?,
        p999_ms: ms(0.999)?,
        max_ms: ms(1.0)?,
        batches,
    })
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
