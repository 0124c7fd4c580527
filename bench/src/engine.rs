//! `jobcast bench engine`: the service's own work on each message, from
//! memory, with no broker: the ceiling every deployment lives under.
//!
//! The workload is first turned into the input topic's messages (key and
//! JSON payload, as every producer writes them) and held in memory. Then
//! batches of them go through the same code the pipeline runs
//! (`jobcast_scheduler_feed::service::Applier`), each step timed on its
//! own:
//!
//! 1. **decode**: each payload into a canonical event;
//! 2. **apply and encode**: each event to the engine, and what it gave rise
//!    to as the messages the sink would produce (decisions, risk scores,
//!    dead letters);
//! 3. **stage**: the records the batch changed, what the predictor learnt,
//!    the log of every message and the offsets, into one RocksDB
//!    `WriteBatch`;
//! 4. **write**: that batch written to RocksDB on disk (not synced, as
//!    `storage.sync = false`).
//!
//! Here they run one after the other on one thread. The service spreads
//! them over three: its source thread decodes (step 1), its pipeline
//! thread applies, encodes and stages (steps 2–3), and its writer thread
//! writes (step 4), each beside the others. So its ceiling is the lower
//! of two bounds: the pipeline thread's share alone, and all four steps
//! shared by the machine's two cores. What the service adds on top (the
//! broker's round trips, the event-time merge across partitions, group
//! membership, snapshots) is left out.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use jobcast_ingest::event::Event;
use jobcast_ingest::kafka::event_key;
use jobcast_predictor::engine::Effects;
use jobcast_scheduler_feed::Consumed;
use jobcast_scheduler_feed::config::ServeConfig;
use jobcast_scheduler_feed::service::{Applier, EndedTasks};
use jobcast_storage::state::StateStore;

use super::{InputArgs, open_input, progress, report_skipped};

#[derive(clap::Args)]
pub struct EngineArgs {
    #[command(flatten)]
    input: InputArgs,
    /// Messages per batch, as the pipeline takes them (at most
    /// `consumer.batch_max_events`).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    batch: u32,
    /// Input partitions the messages come from, each by its key's hash
    /// (all owned, applied in the workload's time order, as the
    /// event-time merge releases them): the engine's clock works across
    /// them as the service's does.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    partitions: u32,
    /// Spread the workload over this many clusters, each job and machine
    /// on cluster `c{id mod N}` (1: the workload's own, unnamed): what a
    /// federation's per-cluster ETAs cost one instance.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    clusters: u32,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Seconds spent in each step, over every batch.
#[derive(serde::Serialize, Default)]
pub struct Steps {
    decode_secs: f64,
    apply_encode_secs: f64,
    stage_secs: f64,
    write_secs: f64,
}

#[derive(serde::Serialize)]
pub struct EngineReport {
    events: u64,
    partitions: u32,
    clusters: u32,
    batches: u64,
    /// Messages the sink would have produced.
    messages: u64,
    dead_lettered: u64,
    /// Jobs live when the workload ended.
    live_jobs: usize,
    steps: Steps,
    /// Events a second through all four steps on one thread.
    one_thread_events_per_sec: f64,
    /// Events a second through steps 2–3 alone: the pipeline thread's
    /// share.
    pipeline_thread_events_per_sec: f64,
    /// The service's ceiling on two cores: the lower of the pipeline
    /// thread's rate and twice the one-thread rate.
    two_core_ceiling_events_per_sec: f64,
}

pub(super) fn engine(args: &EngineArgs) -> anyhow::Result<EngineReport> {
    let (events, diagnostics) = open_input(&args.input)?;
    let reading = progress(None, "{spinner} reading the workload: {pos} events");
    let mut messages: Vec<(i32, Vec<u8>, Vec<u8>)> = Vec::new();
    for event in events {
        let mut event = event?;
        if args.clusters > 1 {
            spread(&mut event, args.clusters);
        }
        let key = event_key(&event);
        let partition = partition_of(&key, args.partitions);
        messages.push((partition, key.into_bytes(), event.to_json().into_bytes()));
        reading.inc(1);
    }
    reading.finish_and_clear();
    report_skipped(diagnostics.as_ref());

    let dir = tempfile::tempdir().context("a directory for the store")?;
    let mut config = ServeConfig::default();
    config.storage.path = dir.path().join("state");
    config.validate()?;
    let store = StateStore::open(&config.storage.path, false)?;
    let mut applier = Applier::new(&config)?;
    let owned: BTreeSet<i32> = (0..args.partitions as i32).collect();
    // Each partition's next offset.
    let mut next = vec![0i64; args.partitions as usize];
    let events_topic = config.topics.events.clone();

    let bar = progress(
        Some(messages.len() as u64),
        "{bar:40} {pos}/{len} events through the engine",
    );
    let mut steps = Steps::default();
    let (mut produced, mut dead, mut batches) = (0u64, 0u64, 0u64);
    let mut seq = 0u64;
    for chunk in messages.chunks(args.batch as usize) {
        let offsets: Vec<(i32, i64)> = chunk
            .iter()
            .map(|&(partition, _, _)| {
                let offset = next[partition as usize];
                next[partition as usize] += 1;
                (partition, offset)
            })
            .collect();
        let started = Instant::now();
        let consumed: Vec<Consumed> = chunk
            .iter()
            .map(|(_, key, payload)| Consumed::new(Some(key.clone()), Some(payload.clone())))
            .collect();
        let decoded = Instant::now();
        let mut effects = Effects::default();
        for (message, &(partition, offset)) in consumed.iter().zip(&offsets) {
            let outcome = applier.apply_and_encode(partition, offset, message, &mut effects, None);
            produced += outcome.messages() as u64;
            dead += outcome.dead_letters() as u64;
        }
        let applied = Instant::now();
        let mut write = store.batch();
        for (message, &(partition, offset)) in consumed.iter().zip(&offsets) {
            write.append_log(
                seq,
                partition,
                offset,
                message.key.as_deref(),
                message.payload.as_deref(),
            );
            seq += 1;
        }
        effects.settle();
        applier.stage_records(&effects, &owned, EndedTasks::Changed, &mut write);
        applier.write_learnt(&effects, &mut write);
        applier.release_ended(&effects);
        for (partition, &offset) in next.iter().enumerate() {
            write.set_offset(&events_topic, partition as i32, offset);
        }
        let staged = Instant::now();
        store.commit(write)?;
        let written = Instant::now();
        steps.decode_secs += secs(decoded - started);
        steps.apply_encode_secs += secs(applied - decoded);
        steps.stage_secs += secs(staged - applied);
        steps.write_secs += secs(written - staged);
        batches += 1;
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    let events = messages.len() as u64;
    let pipeline_thread = rate(events, steps.apply_encode_secs + steps.stage_secs);
    let one_thread = rate(
        events,
        steps.decode_secs + steps.apply_encode_secs + steps.stage_secs + steps.write_secs,
    );
    Ok(EngineReport {
        events,
        partitions: args.partitions,
        clusters: args.clusters,
        batches,
        messages: produced,
        dead_lettered: dead,
        live_jobs: applier.engine().live_jobs(),
        one_thread_events_per_sec: one_thread,
        pipeline_thread_events_per_sec: pipeline_thread,
        two_core_ceiling_events_per_sec: pipeline_thread.min(2.0 * one_thread),
        steps,
    })
}

/// Name the cluster of a job's or machine's event `c{id mod clusters}`.
fn spread(event: &mut Event, clusters: u32) {
    let name = |id: u64| format!("c{}", id % u64::from(clusters));
    match event {
        Event::JobSubmitted(job) => job.cluster = name(job.job_id),
        Event::Machine(machine) => machine.cluster = name(machine.machine_id),
        Event::Task(_) | Event::JobEnded(_) => {}
    }
}

/// The partition a key lands on among `partitions`: any stable spread
/// does, since every partition is owned and applied in time order.
fn partition_of(key: &str, partitions: u32) -> i32 {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (hash % u64::from(partitions)) as i32
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn rate(events: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        events as f64 / secs
    } else {
        0.0
    }
}

impl std::fmt::Display for EngineReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per_event = |secs: f64| secs * 1e9 / self.events.max(1) as f64;
        writeln!(
            f,
            "jobcast bench engine: {} events from {} partitions on {} clusters in {} batches, {} messages to publish, {} dead-lettered, {} jobs live at the end\n",
            self.events,
            self.partitions,
            self.clusters,
            self.batches,
            self.messages,
            self.dead_lettered,
            self.live_jobs
        )?;
        writeln!(f, "  {:<32} {:>9} {:>12}", "step", "seconds", "ns/event")?;
        let s = &self.steps;
        for (step, secs) in [
            ("1. decode", s.decode_secs),
            ("2. apply and encode", s.apply_encode_secs),
            ("3. stage the WriteBatch", s.stage_secs),
            ("4. write it (RocksDB, unsynced)", s.write_secs),
        ] {
            writeln!(f, "  {step:<32} {secs:>9.3} {:>12.0}", per_event(secs))?;
        }
        writeln!(
            f,
            "\n  events/s, steps 1-4 on one thread           {:>12.0}\n  events/s, steps 2-3 (the pipeline thread)   {:>12.0}\n  ceiling of the service on two cores, ev/s   {:>12.0}",
            self.one_thread_events_per_sec,
            self.pipeline_thread_events_per_sec,
            self.two_core_ceiling_events_per_sec
        )
    }
}
