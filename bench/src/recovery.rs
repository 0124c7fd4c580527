//! `jobcast bench recovery`: what a restart costs, and what the recovery
//! machinery (snapshots that truncate the log, the expiry index) costs the
//! pipeline.
//!
//! The workload is written once. A service without snapshots consumes it
//! all (the baseline throughput); another, on a fresh store and group,
//! consumes it with snapshots every `--snapshot-every` messages (the
//! throughput with the machinery), is stopped, and is started again on its
//! store: the restart is timed from `Service::start` (which opens RocksDB)
//! until the pipeline is ready for new input, with the consumer group's
//! join (from the start until the group assigns the partitions) reported
//! apart and left out of the restore time.
//!
//! With `--pace N`, each run gets its own copy of the input, written while
//! it consumes, never more than N events ahead of it: the embedded mock
//! cluster keeps only about 5 MB per partition, and a restore after
//! millions of events needs them all to pass through.
//!
//! With `--takeover`, two more instances share one consumer group over the
//! same input; once both have applied all of it and the group has given
//! each some of the partitions, one stops (leaving the group), and the
//! time until the survivor owns (stores and publishes) every partition is
//! reported, with the logged messages it applied again
//! to get there (none: a takeover replays nothing).

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use jobcast_ingest::kafka::KafkaSettings;
use jobcast_predictor::stats::percentile;
use jobcast_scheduler_feed::config::ServeConfig;
use jobcast_scheduler_feed::service::Service;
use jobcast_storage::state::StateStore;

use super::{
    InputArgs, STALL, ServiceArgs, broker_name, fresh_config, on_cluster, open_input, produce,
    progress, report_skipped, start_service, wait_for_commits,
};

#[derive(clap::Args)]
pub(super) struct RecoveryArgs {
    #[command(flatten)]
    input: InputArgs,
    #[command(flatten)]
    service: ServiceArgs,
    /// Messages between snapshots in the measured run (`storage.
    /// snapshot_every_events`).
    #[arg(long, default_value_t = ServeConfig::default().storage.snapshot_every_events)]
    snapshot_every: u64,
    /// Rounds of the two throughput runs (with and without the
    /// machinery), each run on a fresh store and group; the order of the
    /// two alternates between rounds, so that a machine that slows down or
    /// speeds up over the rounds favours neither. The medians are reported.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Restarts of the measured run, each on the store the one before
    /// left: the median restore is reported, and each one beside it.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    restarts: u32,
    /// Also measure a takeover between two instances of one group.
    #[arg(long)]
    takeover: bool,
    /// Write the input while the service consumes it, at most this many
    /// events ahead of it, each run its own copy: for inputs larger than
    /// the embedded mock cluster keeps (about 5 MB per partition). The
    /// throughputs then include writing the input beside the service.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pace: Option<u64>,
    /// Print the figures as JSON on stdout instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// What a takeover cost.
#[derive(serde::Serialize)]
pub(super) struct TakeoverReport {
    /// From asking one instance to stop until the survivor owns every
    /// partition, seconds.
    takeover_s: f64,
    /// Of which the stopping instance's own stop (its batch in hand, its
    /// leaving the group), seconds.
    stop_s: f64,
    /// Partitions the survivor took over.
    partitions_moved: usize,
    /// Logged messages the survivor applied again since it started.
    replayed_events: u64,
}

/// The figures of one run.
#[derive(serde::Serialize)]
pub struct RecoveryReport {
    events: u64,
    partitions: i32,
    broker: String,
    snapshot_every_events: u64,
    /// With `--pace`: how far the input was written ahead of the service
    /// (the throughputs then include writing it).
    paced_window: Option<u64>,
    /// Opening the store, restoring the snapshot and applying the log after
    /// it, seconds: the median of the restarts.
    restore_s: f64,
    /// Each restart's, in order.
    restores_s: Vec<f64>,
    /// From the start until the group assigned the partitions, seconds:
    /// the median of the restarts.
    group_join_s: f64,
    /// Logged messages applied on the first restart (the later ones apply
    /// what the one before left, which is nothing after a clean stop).
    replayed_events: u64,
    /// Bytes of the store's directory (SST files, WAL, manifest) after the
    /// run, and the SST bytes per column family.
    store_bytes: u64,
    /// The directory's bytes once every family is compacted: what the
    /// store holds, without what RocksDB's compaction has yet to remove.
    compacted_store_bytes: u64,
    family_bytes: std::collections::BTreeMap<&'static str, u64>,
    snapshot_bytes: Option<u64>,
    /// Events/s with snapshots, and without (`snapshot_every_events` past
    /// the workload's size): the medians over the rounds.
    throughput_eps: f64,
    baseline_throughput_eps: f64,
    /// Each round's throughput with the machinery over its throughput
    /// without.
    round_ratios: Vec<f64>,
    /// With `--takeover`.
    takeover: Option<TakeoverReport>,
}

pub(super) fn recovery(args: &RecoveryArgs) -> anyhow::Result<RecoveryReport> {
    let (config, _state) = fresh_config("recovery", &args.service)?;
    let mut more_inputs = Vec::new();
    if args.pace.is_some() {
        more_inputs.push(TAKEOVER_INPUT.to_owned());
        for round in 0..args.rounds {
            more_inputs.extend([input_suffix(false, round), input_suffix(true, round)]);
        }
        // The first round's measured run reads the topic itself.
        more_inputs.retain(|suffix| !suffix.is_empty());
    }
    let more_inputs: Vec<&str> = more_inputs.iter().map(String::as_str).collect();
    let report = on_cluster(&args.service, config, &more_inputs, |config| {
        measure(args, config)
    })?;
    Ok(report)
}

impl std::fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let report = self;
        let takeover = report.takeover.as_ref().map_or(String::new(), |t| {
            format!(
                "\x20 takeover of {} partitions                {:>9.3} s (of which the stop {:.3} s), {} logged messages applied again\n",
                t.partitions_moved, t.takeover_s, t.stop_s, t.replayed_events
            )
        });
        let paced = report.paced_window.map_or(String::new(), |window| {
            format!(
                ", input written at most {window} events ahead (throughputs include writing it)"
            )
        });
        f.write_str(&format!(
            "jobcast bench recovery: {} events, {} partitions, {}, a snapshot every {} messages{paced}\n\n\
             \x20 restore (open, snapshot, log after it)  {:>9.3} s, the median of {}\n\
             \x20 consumer group join (not included)      {:>9.3} s\n\
             \x20 logged messages applied on restart      {:>9} (the first)\n\
             \x20 latest snapshot                         {:>9} bytes\n\
             \x20 store on disk                           {:>9} bytes\n\
             \x20 store on disk, compacted                {:>9} bytes\n\
             \x20 throughput with snapshots               {:>9.0} events/s\n\
             \x20 throughput without                      {:>9.0} events/s\n\
             \x20 with / without, each round              {}\n{takeover}",
            report.events,
            report.partitions,
            report.broker,
            report.snapshot_every_events,
            report.restore_s,
            report
                .restores_s
                .iter()
                .map(|s| format!("{s:.3}"))
                .collect::<Vec<_>>()
                .join(" "),
            report.group_join_s,
            report.replayed_events,
            report.snapshot_bytes.unwrap_or(0),
            report.store_bytes,
            report.compacted_store_bytes,
            report.throughput_eps,
            report.baseline_throughput_eps,
            report
                .round_ratios
                .iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
                .join(" "),
        ))
    }
}

/// The input topics of the paced runs without snapshots and of the
/// takeover, beside the measured run's.
const BASELINE_INPUT: &str = ".baseline";
const TAKEOVER_INPUT: &str = ".takeover";

/// The suffix of a paced run's input topic: the first round's measured run
/// reads the topic itself.
fn input_suffix(baseline: bool, round: u32) -> String {
    let run = if baseline { BASELINE_INPUT } else { "" };
    match round {
        0 => run.to_owned(),
        _ => format!("{run}.round{round}"),
    }
}

/// The workload, as each run reads it.
struct Feed<'a> {
    args: &'a RecoveryArgs,
    writer: KafkaSettings,
    /// Unpaced: the events written once, before any run, to the measured
    /// run's topic, which every run reads.
    written: Option<u64>,
}

impl<'a> Feed<'a> {
    /// Unpaced, write the whole input to `topic` now, so that every run
    /// measures the service alone.
    fn new(args: &'a RecoveryArgs, kafka: &KafkaSettings, topic: &str) -> anyhow::Result<Self> {
        let mut feed = Feed {
            args,
            writer: args.service.writer(kafka),
            written: None,
        };
        if args.pace.is_none() {
            feed.written = Some(feed.write(topic, &[])?);
        }
        Ok(feed)
    }

    /// The input topic of the run whose own topic is `topic`: its own when
    /// paced, else the one written up front.
    fn topic(&self, measured: &str, suffix: &str) -> String {
        match self.args.pace {
            Some(_) => format!("{measured}{suffix}"),
            None => measured.to_owned(),
        }
    }

    /// The events `services` are to consume: paced, written to `topic` now,
    /// never more than the window ahead of the slowest of them.
    fn for_run(&self, topic: &str, services: &[&Service]) -> anyhow::Result<u64> {
        match self.written {
            Some(events) => Ok(events),
            None => self.write(topic, services),
        }
    }

    fn write(&self, topic: &str, services: &[&Service]) -> anyhow::Result<u64> {
        let (events, diagnostics) = open_input(&self.args.input)?;
        let window = self.args.pace.unwrap_or(u64::MAX);
        let gate = |produced: u64| {
            loop {
                let slowest = services
                    .iter()
                    .map(|s| s.shared().counters.committed.load(Ordering::Relaxed))
                    .min()
                    .unwrap_or(u64::MAX);
                if produced <= slowest.saturating_add(window)
                    || services.iter().any(|s| s.is_finished())
                {
                    return ControlFlow::Continue(());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        let written = produce(&self.writer, topic, events, None, &gate)?;
        report_skipped(diagnostics.as_ref());
        if written.delivered == 0 {
            bail!("the input holds no events: nothing to measure");
        }
        Ok(written.delivered)
    }
}

fn measure(args: &RecoveryArgs, config: ServeConfig) -> anyhow::Result<RecoveryReport> {
    config.validate()?;
    let feed = Feed::new(args, &config.kafka, &config.topics.events)?;

    let (mut with, mut without, mut round_ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut events = None;
    // The last run with the machinery: the one restarted.
    let mut measured = None;
    for round in 0..args.rounds {
        let mut eps = [0.0; 2];
        for baseline in [round % 2 == 0, round % 2 == 1] {
            let label = format!("{}-{round}", if baseline { "baseline" } else { "measured" });
            let (mut run, state) = fresh_config(&label, &args.service)?;
            run.topics = config.topics.clone();
            run.topics.events = feed.topic(&config.topics.events, &input_suffix(baseline, round));
            run.kafka = config.kafka.clone();
            // Without the machinery: no snapshot within the run.
            run.storage.snapshot_every_events = if baseline {
                u64::MAX
            } else {
                args.snapshot_every
            };
            let (secs, n) = consume_all(run.clone(), &feed, &label)?;
            if *events.get_or_insert(n) != n {
                bail!("the runs read different inputs: {n} and {events:?} events");
            }
            eps[usize::from(baseline)] = n as f64 / secs;
            if !baseline {
                measured = Some((run, state));
            }
        }
        with.push(eps[0]);
        without.push(eps[1]);
        round_ratios.push(eps[0] / eps[1]);
    }
    let (Some(events), Some((measured, _measured_state))) = (events, measured) else {
        bail!("no round ran");
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        percentile(&v, 50.0).expect("one round at least")
    };

    let mut restarts = Vec::new();
    for _ in 0..args.restarts {
        restarts.push(restart(&measured)?);
    }
    let restores_s: Vec<f64> = restarts.iter().map(|r| r.restore_s).collect();
    let group_join_s = median(restarts.iter().map(|r| r.group_join_s).collect());
    let store_bytes = directory_bytes(&measured.storage.path)?;
    let store = StateStore::open(&measured.storage.path, false)?;
    let summary = store.summary()?;
    store.compact();
    drop(store);
    let compacted_store_bytes = directory_bytes(&measured.storage.path)?;
    let takeover = if args.takeover {
        // Its input topic is named after the first round's.
        let mut base = measured.clone();
        base.topics.events = config.topics.events.clone();
        Some(takeover(args, &base, &feed)?)
    } else {
        None
    };
    Ok(RecoveryReport {
        events,
        partitions: args.service.partitions,
        broker: broker_name(&args.service.kafka),
        snapshot_every_events: args.snapshot_every,
        paced_window: args.pace,
        restore_s: median(restores_s.clone()),
        restores_s,
        group_join_s,
        replayed_events: restarts[0].replayed_events,
        store_bytes,
        compacted_store_bytes,
        family_bytes: summary
            .families
            .iter()
            .map(|(name, size)| (*name, size.bytes))
            .collect(),
        snapshot_bytes: summary.snapshot_bytes,
        throughput_eps: median(with),
        baseline_throughput_eps: median(without),
        round_ratios,
        takeover,
    })
}

/// What one restart cost.
struct Restart {
    restore_s: f64,
    group_join_s: f64,
    replayed_events: u64,
}

/// Start the service on the store of `measured`, wait until it is ready
/// for new input, and stop it.
fn restart(measured: &ServeConfig) -> anyhow::Result<Restart> {
    let started = Instant::now();
    let service = Service::start(measured.clone())?;
    let shared = service.shared().clone();
    let opened = started.elapsed();
    let deadline = started + STALL;
    let mut assigned_at = None;
    while !shared.ready() {
        if service.is_finished() {
            let outcome = service.join();
            bail!("the restarted service ended before it was ready: {outcome:?}");
        }
        if assigned_at.is_none() && shared.assigned.load(Ordering::Relaxed) {
            assigned_at = Some(started.elapsed());
        }
        if Instant::now() > deadline {
            let _ = service.stop();
            bail!(
                "the restarted service was not ready within {} s",
                STALL.as_secs()
            );
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let ready = started.elapsed();
    let assigned = assigned_at.unwrap_or(ready);
    let replayed_events = shared.counters.recovered_events.load(Ordering::Relaxed);
    drop(shared);
    service.stop()?;
    Ok(Restart {
        restore_s: (opened + ready.saturating_sub(assigned)).as_secs_f64(),
        group_join_s: assigned.saturating_sub(opened).as_secs_f64(),
        replayed_events,
    })
}

/// Two instances of one group over the input of `measured`, each with a
/// store of its own: both apply all `events`, one stops, the other takes
/// its partitions over.
fn takeover(
    args: &RecoveryArgs,
    measured: &ServeConfig,
    feed: &Feed,
) -> anyhow::Result<TakeoverReport> {
    let group = format!("{}.takeover", measured.consumer.group);
    let (mut first, _first_state) = fresh_config("takeover-a", &args.service)?;
    let (mut second, _second_state) = fresh_config("takeover-b", &args.service)?;
    let topic = feed.topic(&measured.topics.events, TAKEOVER_INPUT);
    for config in [&mut first, &mut second] {
        config.topics = measured.topics.clone();
        config.topics.events = topic.clone();
        config.kafka = measured.kafka.clone();
        config.consumer.group = group.clone();
        config.storage.snapshot_every_events = measured.storage.snapshot_every_events;
    }
    let leaving = start_service(first)?;
    let staying = start_service(second)?;
    let events = feed.for_run(&topic, &[&leaving, &staying])?;
    for (service, label) in [(&leaving, "leaving"), (&staying, "staying")] {
        let bar = progress(
            Some(events),
            &format!(
                "{{spinner}} {label:<9}[{{elapsed_precise}}] {{bar:40}} {{human_pos}}/{{human_len}} events"
            ),
        );
        let outcome = wait_for_commits(service, events, &bar);
        bar.finish_and_clear();
        outcome?;
    }
    let owned = |service: &Service| service.shared().owned.lock().expect("not poisoned").clone();
    let partitions = usize::try_from(args.service.partitions).expect("positive");
    // A takeover from a settled group: both own partitions, each partition
    // exactly one of them. (A stop in the middle of a rebalance waits for
    // it first: the member's last commit queues behind its pending join.)
    let settled = || {
        let (a, b) = (owned(&leaving), owned(&staying));
        let all: std::collections::BTreeSet<i32> = a.iter().chain(&b).copied().collect();
        !a.is_empty() && !b.is_empty() && a.len() + b.len() == partitions && all.len() == partitions
    };
    let settling = Instant::now();
    while !settled() {
        if leaving.is_finished() || staying.is_finished() {
            bail!("an instance ended before the group settled");
        }
        if settling.elapsed() > STALL {
            bail!(
                "the group did not settle in {} s: the instances own {:?} and {:?}",
                STALL.as_secs(),
                owned(&leaving),
                owned(&staying)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = owned(&staying).len();
    let started = Instant::now();
    leaving.stop()?;
    let stopped = started.elapsed();
    while owned(&staying).len() < partitions {
        if staying.is_finished() {
            let outcome = staying.join();
            bail!("the staying instance ended during the takeover: {outcome:?}");
        }
        if started.elapsed() > STALL {
            let had = owned(&staying).len();
            let _ = staying.stop();
            bail!(
                "the staying instance owned {had} of {partitions} partitions {} s after the other stopped",
                STALL.as_secs()
            );
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let took = started.elapsed();
    let replayed = staying
        .shared()
        .counters
        .recovered_events
        .load(Ordering::Relaxed);
    staying.stop()?;
    Ok(TakeoverReport {
        takeover_s: took.as_secs_f64(),
        stop_s: stopped.as_secs_f64(),
        partitions_moved: partitions - before,
        replayed_events: replayed,
    })
}

/// Run a service on `config` until it has committed every event of
/// `feed`; the seconds from its partition assignment to its last commit,
/// and the events.
fn consume_all(config: ServeConfig, feed: &Feed, label: &str) -> anyhow::Result<(f64, u64)> {
    let topic = config.topics.events.clone();
    let service = start_service(config)?;
    let started = Instant::now();
    let total = match feed.for_run(&topic, &[&service]) {
        Ok(total) => total,
        Err(e) => {
            service.stop()?;
            return Err(e);
        }
    };
    let bar = progress(
        Some(total),
        &format!(
            "{{spinner}} {label:<9}[{{elapsed_precise}}] {{bar:40}} {{human_pos}}/{{human_len}} events"
        ),
    );
    let outcome = wait_for_commits(&service, total, &bar);
    let secs = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    service.stop()?;
    outcome?;
    Ok((secs, total))
}

/// Bytes of every file under `dir`.
fn directory_bytes(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            directory_bytes(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}
