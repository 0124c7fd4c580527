//! What a batch did, counted: the running counters of [`Shared`] (live
//! summaries, the bench) and the Prometheus metrics. Counted per batch and
//! added once: a labelled metric costs a registry lookup per call.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use jobcast_predictor::decision::Quantiles;
use jobcast_predictor::engine::{Effects, Output};
use tracing::info;

use crate::shared::{Shared, StepTime};
use crate::telemetry;

/// How long the pipeline thread spent on a batch's steps.
pub(super) struct StageTimes {
    /// Decoded messages to the engine, outputs and log built.
    pub(super) apply: Duration,
    /// Until every output was acknowledged.
    pub(super) publish: Duration,
    /// The changed records serialised and handed to the writer thread.
    pub(super) commit: Duration,
}

/// Count the running jobs the engine gave up on and the machines it forgot
/// for their silence (never silently: a rising count means ends or
/// machine events are lost upstream).
pub(super) fn count_expired(shared: &Shared, effects: &Effects) {
    let jobs = effects.expired_jobs.len() as u64;
    let machines = effects.expired_machines.len() as u64;
    if jobs + machines == 0 {
        return;
    }
    metrics::counter!(telemetry::LIVE_JOBS_EXPIRED).increment(jobs);
    metrics::counter!(telemetry::MACHINES_EXPIRED).increment(machines);
    let c = &shared.counters;
    c.expired_live_jobs.fetch_add(jobs, Ordering::Relaxed);
    c.expired_machines.fetch_add(machines, Ordering::Relaxed);
    info!(
        jobs,
        machines, "running jobs and machines silent past engine.expiry given up on"
    );
}

/// The counts of one batch, gathered while it is applied.
pub(super) struct BatchTally {
    /// Input messages in the batch (applied or dead-lettered).
    pub(super) messages: usize,
    pub(super) applied: u64,
    /// Dead letters of owned partitions.
    pub(super) dead: u64,
    /// Summed over the batch's messages, and the longest: the time from
    /// each one's poll to the start of the batch.
    pub(super) queued: Duration,
    pub(super) queued_longest: Duration,
    /// Events applied in owned partitions, by type.
    consumed_by_type: BTreeMap<&'static str, u64>,
}

impl BatchTally {
    pub(super) fn new(messages: usize) -> Self {
        BatchTally {
            messages,
            applied: 0,
            dead: 0,
            queued: Duration::ZERO,
            queued_longest: Duration::ZERO,
            consumed_by_type: BTreeMap::new(),
        }
    }

    /// A message of the batch waited `queued` from its poll to the start
    /// of the batch.
    pub(super) fn waited(&mut self, queued: Duration) {
        self.queued += queued;
        self.queued_longest = self.queued_longest.max(queued);
    }

    /// An event of `kind` was applied in an owned partition.
    pub(super) fn consumed(&mut self, kind: &'static str) {
        *self.consumed_by_type.entry(kind).or_default() += 1;
    }

    /// What to count once the writer thread has committed the batch (which
    /// took `took`): only then are its messages and offsets committed.
    pub(super) fn on_written(
        &self,
        shared: Arc<Shared>,
        offsets: BTreeMap<i32, i64>,
    ) -> impl FnOnce(Duration) + Send + 'static {
        let (messages, applied, dead) = (self.messages as u64, self.applied, self.dead);
        move |took: Duration| {
            for (&partition, &next) in &offsets {
                metrics::gauge!(telemetry::COMMITTED_OFFSET, "partition" => partition.to_string())
                    .set(next as f64);
            }
            let c = &shared.counters;
            c.committed.fetch_add(messages, Ordering::Relaxed);
            c.applied.fetch_add(applied, Ordering::Relaxed);
            c.dead_lettered.fetch_add(dead, Ordering::Relaxed);
            c.batches.fetch_add(1, Ordering::Relaxed);
            record_stage("write", &c.write, took);
        }
    }

    /// Count the batch once it is published and handed to the writer:
    /// the outputs of owned partitions, the pipeline thread's `stages`, and
    /// the live jobs left. Returns the decisions.
    pub(super) fn finish<'a>(
        self,
        shared: &Shared,
        outputs: impl Iterator<Item = &'a Output>,
        stages: StageTimes,
        live_jobs: usize,
    ) -> u64 {
        for (kind, count) in self.consumed_by_type {
            metrics::counter!(telemetry::EVENTS_CONSUMED, "type" => kind).increment(count);
        }
        let mut decisions = 0u64;
        let mut scored = 0u64;
        let mut decisions_by_queue: BTreeMap<u8, u64> = BTreeMap::new();
        // Each policy's two error histograms, looked up once per batch.
        let mut error_histograms = HashMap::new();
        let mut recent = shared.recent.lock().expect("not poisoned");
        for output in outputs {
            match output {
                Output::Decision(d) => {
                    decisions += 1;
                    *decisions_by_queue.entry(d.queue).or_default() += 1;
                }
                Output::Risk(r) => {
                    metrics::histogram!(telemetry::RISK_PREEMPTION_PROBABILITY)
                        .record(r.preemption_probability);
                }
                Output::Deadline { decision, .. } => {
                    metrics::counter!(telemetry::DEADLINE_DECISIONS, "action" => decision.action.as_str())
                        .increment(1);
                }
                Output::Capacity(c) => {
                    metrics::counter!(telemetry::CAPACITY_DECISIONS, "action" => c.action.as_str())
                        .increment(1);
                    metrics::gauge!(telemetry::CAPACITY_LONG_LOAD_RATIO).set(c.long_load_ratio);
                }
                Output::Scored {
                    policy,
                    error,
                    covered,
                    ..
                } => {
                    scored += 1;
                    recent.record_error(policy.name(), error.abs_pct);
                    if let Some(covered) = covered {
                        recent.record_coverage(policy.name(), *covered);
                        for (level, hit) in Quantiles::NAMES.iter().zip(covered) {
                            if *hit {
                                metrics::counter!(telemetry::PREDICTION_COVERED, "policy" => policy.name(), "quantile" => *level)
                                    .increment(1);
                            }
                        }
                    }
                    let (log_ratio, abs_ratio) = error_histograms
                        .entry(policy.name())
                        .or_insert_with(|| {
                            (
                                metrics::histogram!(telemetry::PREDICTION_LOG_RATIO, "policy" => policy.name()),
                                metrics::histogram!(telemetry::PREDICTION_ERROR, "policy" => policy.name()),
                            )
                        });
                    log_ratio.record(error.log_ratio);
                    // Prometheus takes ratios, not percentages.
                    abs_ratio.record(error.abs_pct / 100.0);
                }
                Output::EtaScored {
                    error_pct,
                    within_interval,
                    ..
                } => {
                    recent.record_eta(*error_pct, *within_interval);
                    metrics::histogram!(telemetry::ETA_ERROR).record(*error_pct / 100.0);
                    if *within_interval {
                        metrics::counter!(telemetry::ETA_WITHIN_INTERVAL).increment(1);
                    }
                }
            }
        }
        for (queue, count) in decisions_by_queue {
            *recent.decisions_by_queue.entry(queue).or_default() += count;
            metrics::counter!(telemetry::DECISIONS, "queue" => queue.to_string()).increment(count);
        }
        drop(recent);
        metrics::histogram!(telemetry::BATCH_EVENTS).record(self.messages as f64);
        metrics::gauge!(telemetry::LIVE_JOBS).set(live_jobs as f64);
        let c = &shared.counters;
        c.decisions.fetch_add(decisions, Ordering::Relaxed);
        c.scored.fetch_add(scored, Ordering::Relaxed);
        c.live_jobs.store(live_jobs as u64, Ordering::Relaxed);
        record_stage("apply", &c.apply, stages.apply);
        record_stage("publish", &c.publish, stages.publish);
        record_stage("commit", &c.commit, stages.commit);
        c.queued.record(self.queued, self.queued_longest);
        decisions
    }
}

/// Add a batch step's time to its counters and histogram.
fn record_stage(stage: &'static str, step: &StepTime, took: Duration) {
    step.record(took, took);
    metrics::histogram!(telemetry::BATCH_STAGE_SECONDS, "stage" => stage)
        .record(took.as_secs_f64());
}
