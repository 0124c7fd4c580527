//! What the service's threads share: the state store, the flags that
//! start and stop work and tell readiness, running counters and recent
//! outcomes for live summaries. The pipeline thread writes it; the source
//! thread, the HTTP server and whoever started the service read it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobcast_predictor::engine::ClusterRecord;
use jobcast_predictor::stats::percentile;
use jobcast_storage::state::StateStore;

use crate::telemetry;

/// State shared between the pipeline thread, the HTTP server and whoever
/// started the service.
pub struct Shared {
    pub store: Arc<StateStore>,
    /// Set to stop: the batch in hand is finished and committed first.
    pub shutdown: AtomicBool,
    /// The log has been applied again and the service consumes.
    pub recovered: AtomicBool,
    /// The consumer group has given this instance its partitions (possibly
    /// none).
    pub assigned: AtomicBool,
    /// The brokers answered recently.
    pub broker_up: AtomicBool,
    /// The latest client-wide error librdkafka reported (a broker it
    /// cannot connect to, credentials refused): why they may not answer.
    kafka_error: Mutex<Option<String>>,
    /// A start waits for room on the store's filesystem
    /// (`storage.min_free_bytes`).
    pub waiting_for_room: AtomicBool,
    /// The input partitions this instance owns.
    pub owned: Mutex<Vec<i32>>,
    /// Who owns each input partition, as the group's committed offsets tell
    /// it: the URL its owner advertises (`http.advertised_url`), `None`
    /// where the last commit advertised none. Refreshed every few seconds
    /// while this instance advertises a URL itself; empty otherwise.
    pub owners: Mutex<BTreeMap<i32, Option<String>>>,
    pub counters: Counters,
    pub recent: Mutex<Recent>,
    /// Whether the pipeline is stuck (`/healthz`).
    pub liveness: Liveness,
    /// The clusters the `jobcast_cluster_*` gauges were last set for: one
    /// that holds nothing any more is set to 0 once.
    cluster_labels: Mutex<BTreeSet<String>>,
}

/// Whether the pipeline thread still comes round its loop, which it does
/// at least every 50 ms unless a batch cannot be finished (its outputs
/// never acknowledged, say): `/healthz` fails once it has not for the
/// timeout (`http.stall_timeout_secs`), so that a liveness probe restarts
/// an instance that would otherwise hold its partitions and do nothing.
/// The clock starts at the loop's first beat: a restore is not a stall.
#[derive(Debug)]
pub struct Liveness {
    started: Instant,
    /// ms after `started` of the latest beat; `u64::MAX` before the first.
    beat_ms: AtomicU64,
    timeout_ms: AtomicU64,
}

/// Whole milliseconds, saturating: a timeout set past `u64::MAX` ms is no
/// timeout, not a wrapped one.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Liveness {
    fn new(timeout: Duration) -> Self {
        Liveness {
            started: Instant::now(),
            beat_ms: AtomicU64::new(u64::MAX),
            timeout_ms: AtomicU64::new(millis(timeout)),
        }
    }

    fn now_ms(&self) -> u64 {
        millis(self.started.elapsed())
    }

    /// The pipeline came round its loop.
    pub(crate) fn beat(&self) {
        self.beat_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    pub(crate) fn set_timeout(&self, timeout: Duration) {
        self.timeout_ms.store(millis(timeout), Ordering::Relaxed);
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.load(Ordering::Relaxed))
    }

    /// How long since the pipeline last came round its loop; `None` until
    /// it first has.
    pub fn stalled_for(&self) -> Option<Duration> {
        let beat = self.beat_ms.load(Ordering::Relaxed);
        (beat != u64::MAX).then(|| Duration::from_millis(self.now_ms().saturating_sub(beat)))
    }

    /// Not stalled for the timeout or longer.
    pub fn alive(&self) -> bool {
        self.stalled_for()
            .is_none_or(|stalled| stalled < self.timeout())
    }
}

/// Recent outcomes, for live summaries: decisions by queue, and each
/// policy's absolute percentage errors and quantile coverage on the last
/// jobs it was scored on.
#[derive(Debug, Default)]
pub struct Recent {
    pub decisions_by_queue: BTreeMap<u8, u64>,
    pub errors_pct: BTreeMap<&'static str, VecDeque<f64>>,
    /// Per scored job with quantiles: truth at or below its P50, P90,
    /// P95, P99.
    pub covered: BTreeMap<&'static str, VecDeque<[bool; 4]>>,
    /// Per finished job given an ETA: its first ETA's error (%) and
    /// whether it finished within the ETA's interval.
    pub etas: VecDeque<(f64, bool)>,
}

impl Recent {
    /// Errors kept per policy.
    pub const WINDOW: usize = 10_000;

    pub(crate) fn record_error(&mut self, policy: &'static str, abs_pct: f64) {
        let errors = self.errors_pct.entry(policy).or_default();
        if errors.len() == Self::WINDOW {
            errors.pop_front();
        }
        errors.push_back(abs_pct);
    }

    pub(crate) fn record_coverage(&mut self, policy: &'static str, covered: [bool; 4]) {
        let window = self.covered.entry(policy).or_default();
        if window.len() == Self::WINDOW {
            window.pop_front();
        }
        window.push_back(covered);
    }

    pub(crate) fn record_eta(&mut self, error_pct: f64, within_interval: bool) {
        if self.etas.len() == Self::WINDOW {
            self.etas.pop_front();
        }
        self.etas.push_back((error_pct, within_interval));
    }

    /// The P50 and P90 of the recent ETA errors (%), the share (%) of
    /// those jobs that finished within their interval, and their number.
    pub fn eta_accuracy(&self) -> Option<(f64, f64, f64, usize)> {
        let n = self.etas.len();
        let mut errors: Vec<f64> = self.etas.iter().map(|&(e, _)| e).collect();
        errors.sort_by(f64::total_cmp);
        let within = self.etas.iter().filter(|&&(_, w)| w).count() as f64 * 100.0 / n as f64;
        Some((
            percentile(&errors, 50.0)?,
            percentile(&errors, 90.0)?,
            within,
            n,
        ))
    }

    /// The share (%) of a policy's recent scored jobs at or below each of
    /// their quantiles, with the number of jobs.
    pub fn coverage_pct(&self, policy: &str) -> Option<([f64; 4], usize)> {
        let window = self.covered.get(policy).filter(|w| !w.is_empty())?;
        let share =
            |i: usize| window.iter().filter(|c| c[i]).count() as f64 * 100.0 / window.len() as f64;
        Some(([share(0), share(1), share(2), share(3)], window.len()))
    }

    /// The `q`-quantile (0–1) of a policy's recent errors (see
    /// [`percentile`]).
    pub fn error_quantile(&self, policy: &str, q: f64) -> Option<f64> {
        let mut errors: Vec<f64> = self.errors_pct.get(policy)?.iter().copied().collect();
        errors.sort_by(f64::total_cmp);
        percentile(&errors, q * 100.0)
    }
}

/// Running totals since start, for live summaries.
#[derive(Debug, Default)]
pub struct Counters {
    /// Input messages committed (applied or dead-lettered).
    pub committed: AtomicU64,
    pub applied: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub decisions: AtomicU64,
    pub scored: AtomicU64,
    /// Logged messages applied again by the latest restore.
    pub recovered_events: AtomicU64,
    /// Ended jobs whose records were deleted for retention.
    pub expired_jobs: AtomicU64,
    /// Running jobs given up on, and machines forgotten, for their silence
    /// (`engine.expiry`).
    pub expired_live_jobs: AtomicU64,
    pub expired_machines: AtomicU64,
    pub live_jobs: AtomicU64,
    /// Events held far ahead of the engine's event clock, waiting for
    /// their partition or most partitions to vouch for them (counted among
    /// `applied`).
    pub held_events: AtomicU64,
    /// Input partitions paused to bound the event-time merge's memory.
    pub input_pauses: AtomicU64,
    /// Batches committed, and the time the pipeline thread's steps took:
    /// applying (decoded messages to the engine, outputs and log built),
    /// publishing (until every output is acknowledged), committing (the
    /// changed records serialised into the batch, handed to the writer
    /// thread).
    pub batches: AtomicU64,
    pub apply: StepTime,
    pub publish: StepTime,
    pub commit: StepTime,
    /// From each message's poll to the start of its batch (the event-time
    /// merge, and the wait for the pipeline to finish the batch before):
    /// the total over every message, and per batch its oldest message's.
    pub queued: StepTime,
    /// The writer thread's RocksDB writes, beside the pipeline thread
    /// (overlapping the steps above).
    pub write: StepTime,
}

/// A batch step at or above this is slow: it alone spends a good part of
/// an event's latency budget (docs/performance.md, 25 ms at the p99).
pub const SLOW_STEP: Duration = Duration::from_millis(10);

/// What one step of the batches took: its total, its longest, and how
/// many batches it took [`SLOW_STEP`] or more, so that a latency report
/// can tell a step that stalls now and then from one that is slow always.
#[derive(Debug, Default)]
pub struct StepTime {
    pub total_ns: AtomicU64,
    pub max_ns: AtomicU64,
    pub slow_batches: AtomicU64,
}

impl StepTime {
    /// A batch's step took `total` in all, `longest` at its longest (the
    /// same for a step of the whole batch).
    pub fn record(&self, total: Duration, longest: Duration) {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.total_ns.fetch_add(ns(total), Ordering::Relaxed);
        self.max_ns.fetch_max(ns(longest), Ordering::Relaxed);
        if longest >= SLOW_STEP {
            self.slow_batches.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Shared {
    pub fn new(store: Arc<StateStore>) -> Arc<Self> {
        Arc::new(Shared {
            store,
            shutdown: AtomicBool::new(false),
            recovered: AtomicBool::new(false),
            assigned: AtomicBool::new(false),
            broker_up: AtomicBool::new(false),
            kafka_error: Mutex::new(None),
            waiting_for_room: AtomicBool::new(false),
            owned: Mutex::new(Vec::new()),
            owners: Mutex::new(BTreeMap::new()),
            counters: Counters::default(),
            recent: Mutex::new(Recent::default()),
            cluster_labels: Mutex::new(BTreeSet::new()),
            liveness: Liveness::new(crate::config::HttpConfig::default().stall_timeout()),
        })
    }

    /// librdkafka reported `reason` for a client-wide error.
    pub(crate) fn kafka_error(&self, reason: String) {
        *self.kafka_error.lock().expect("not poisoned") = Some(reason);
    }

    /// The latest client-wide Kafka error, if any was reported.
    pub fn last_kafka_error(&self) -> Option<String> {
        self.kafka_error.lock().expect("not poisoned").clone()
    }

    /// Set the `jobcast_cluster_*` gauges to `clusters`, and to 0 those of
    /// clusters that hold nothing any more.
    pub fn set_cluster_gauges(&self, clusters: &[ClusterRecord]) {
        let mut labels = self.cluster_labels.lock().expect("not poisoned");
        let now: BTreeSet<String> = clusters.iter().map(|c| c.cluster.clone()).collect();
        for gone in labels.difference(&now) {
            for name in [
                telemetry::CLUSTER_MACHINES_UP,
                telemetry::CLUSTER_CPUS,
                telemetry::CLUSTER_LIVE_JOBS,
            ] {
                metrics::gauge!(name, "cluster" => gone.clone()).set(0.0);
            }
        }
        for c in clusters {
            let cluster = c.cluster.clone();
            metrics::gauge!(telemetry::CLUSTER_MACHINES_UP, "cluster" => cluster.clone())
                .set(f64::from(c.machines_up));
            metrics::gauge!(telemetry::CLUSTER_CPUS, "cluster" => cluster.clone()).set(c.cpus);
            metrics::gauge!(telemetry::CLUSTER_LIVE_JOBS, "cluster" => cluster)
                .set(c.live_jobs as f64);
        }
        *labels = now;
    }

    /// Ready to serve: recovered, in the group, brokers reachable.
    pub fn ready(&self) -> bool {
        self.recovered.load(Ordering::Relaxed)
            && self.assigned.load(Ordering::Relaxed)
            && self.broker_up.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pipeline_is_alive_until_it_misses_beats_for_the_timeout() {
        let liveness = Liveness::new(Duration::from_millis(50));
        // Before the loop's first beat (a restore): alive, not stalled.
        assert_eq!(liveness.stalled_for(), None);
        assert!(liveness.alive());
        liveness.beat();
        assert!(liveness.alive());
        std::thread::sleep(Duration::from_millis(80));
        assert!(liveness.stalled_for() >= Some(Duration::from_millis(80)));
        assert!(!liveness.alive());
        liveness.beat();
        assert!(liveness.alive());
        liveness.set_timeout(Duration::ZERO);
        assert!(!liveness.alive(), "a zero timeout never holds");
        // A timeout too long for milliseconds in 64 bits saturates.
        liveness.set_timeout(Duration::from_secs(1 << 61));
        assert_eq!(liveness.timeout(), Duration::from_millis(u64::MAX));
        assert!(liveness.alive());
    }
}
