//! Prometheus metrics of the service: names, help texts, histogram buckets,
//! and the recorder that `/metrics` renders. Every metric jobcast exports is
//! declared here, so the operations guide (`docs/operations.md`) and the
//! Grafana dashboard have one place to follow. librdkafka's own log lines
//! go to `tracing` here too.

use std::sync::OnceLock;

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use tracing::{debug, error, warn};

pub const BUILD_INFO: &str = "jobcast_build_info";
pub const EVENTS_CONSUMED: &str = "jobcast_events_consumed_total";
pub const EVENTS_DEAD_LETTERED: &str = "jobcast_events_dead_lettered_total";
pub const EVENTS_HELD: &str = "jobcast_events_held_total";
pub const HTTP_PEERS_REFUSED: &str = "jobcast_http_peers_refused_total";
pub const EVENTS_HELD_NOW: &str = "jobcast_events_held";
pub const EVENT_CLOCK: &str = "jobcast_event_clock_seconds";
pub const CONSUMER_LAG: &str = "jobcast_consumer_lag_events";
pub const COMMITTED_OFFSET: &str = "jobcast_input_committed_offset";
pub const DECISION_LATENCY: &str = "jobcast_event_to_decision_seconds";
pub const PREDICTION_LOG_RATIO: &str = "jobcast_prediction_log_ratio";
pub const PREDICTION_ERROR: &str = "jobcast_prediction_error_ratio";
pub const PREDICTION_COVERED: &str = "jobcast_prediction_quantile_covered_total";
pub const ETA_ERROR: &str = "jobcast_eta_error_ratio";
pub const ETA_WITHIN_INTERVAL: &str = "jobcast_eta_within_interval_total";
pub const DECISIONS: &str = "jobcast_decisions_total";
pub const DECISIONS_OVERTAKEN: &str = "jobcast_decisions_overtaken_total";
pub const STARTS_REFRESHED: &str = "jobcast_decisions_start_refreshed_total";
pub const STARTS_OVERFULL: &str = "jobcast_starts_overfull_total";
pub const DECISIONS_WAITING: &str = "jobcast_decisions_waiting";
pub const LIVE_JOBS: &str = "jobcast_live_jobs";
pub const STATE_RECORDS: &str = "jobcast_state_records";
pub const STORE_BYTES: &str = "jobcast_store_bytes";
pub const FILESYSTEM_FREE: &str = "jobcast_store_filesystem_free_bytes";
pub const FILESYSTEM_SIZE: &str = "jobcast_store_filesystem_size_bytes";
pub const WAITING_FOR_ROOM: &str = "jobcast_store_waiting_for_room";
pub const BATCH_EVENTS: &str = "jobcast_batch_events";
pub const BATCH_STAGE_SECONDS: &str = "jobcast_batch_stage_seconds";
pub const PRODUCE_RETRIES: &str = "jobcast_produce_retries_total";
pub const OUTPUTS_PARKED: &str = "jobcast_outputs_parked_total";
pub const PRODUCERS_RECREATED: &str = "jobcast_producers_recreated_total";
pub const RECOVERED_EVENTS: &str = "jobcast_recovered_events_total";
pub const RISK_PREEMPTION_PROBABILITY: &str = "jobcast_risk_preemption_probability";
pub const CAPACITY_DECISIONS: &str = "jobcast_capacity_decisions_total";
pub const CAPACITY_LONG_LOAD_RATIO: &str = "jobcast_capacity_long_load_ratio";
pub const DEADLINE_DECISIONS: &str = "jobcast_deadline_decisions_total";
pub const CLUSTER_MACHINES_UP: &str = "jobcast_cluster_machines_up";
pub const CLUSTER_CPUS: &str = "jobcast_cluster_cpus";
pub const CLUSTER_LIVE_JOBS: &str = "jobcast_cluster_live_jobs";
pub const INPUT_OFFSETS_SKIPPED: &str = "jobcast_input_offsets_skipped_total";
pub const INPUT_BUFFERED: &str = "jobcast_input_buffered_events";
pub const INPUT_BUFFERED_BYTES: &str = "jobcast_input_buffered_bytes";
pub const INPUT_PAUSES: &str = "jobcast_input_pauses_total";
pub const OWNED_PARTITIONS: &str = "jobcast_owned_partitions";
pub const ROCKSDB_WRITE_STOPPED: &str = "jobcast_rocksdb_write_stopped";
pub const PIPELINE_STALLED: &str = "jobcast_pipeline_stalled_seconds";
pub const HTTP_UNAUTHORIZED: &str = "jobcast_http_unauthorized_total";
pub const HTTP_TIMED_OUT: &str = "jobcast_http_timed_out_total";
pub const HTTP_ELSEWHERE: &str = "jobcast_http_elsewhere_total";
pub const KAFKA_ERRORS: &str = "jobcast_kafka_errors_total";
pub const INPUT_PARTITION_IDLE: &str = "jobcast_input_partition_idle_total";
pub const INPUT_PARTITIONS_IDLE: &str = "jobcast_input_partitions_idle";
pub const ROCKSDB_DELAYED_WRITE_RATE: &str = "jobcast_rocksdb_delayed_write_rate_bytes_per_second";
pub const SNAPSHOTS: &str = "jobcast_snapshots_total";
pub const JOBS_EXPIRED: &str = "jobcast_jobs_expired_total";
pub const LIVE_JOBS_EXPIRED: &str = "jobcast_live_jobs_expired_total";
pub const MACHINES_EXPIRED: &str = "jobcast_machines_expired_total";
pub const BACKUPS: &str = "jobcast_backups_total";
pub const BACKUP_SECONDS: &str = "jobcast_backup_seconds";
pub const SNAPSHOT_BYTES: &str = "jobcast_snapshot_bytes";
pub const SNAPSHOT_SECONDS: &str = "jobcast_snapshot_seconds";
pub const RESTORE_SECONDS: &str = "jobcast_restore_seconds";
pub const TAKEOVER_BUFFER_BYTES: &str = "jobcast_takeover_buffer_bytes";
pub const TAKEOVER_BUFFER_FULL: &str = "jobcast_takeover_buffer_full";
pub const TAKEOVER_BUFFER_WAITS: &str = "jobcast_takeover_buffer_waits_total";
/// ln(estimate / actual): ±0.1 is ±10 %, ±2.3 is 10×.
const LOG_RATIO_BUCKETS: [f64; 15] = [
    -4.6, -2.3, -1.6, -0.69, -0.41, -0.22, -0.1, 0.0, 0.1, 0.22, 0.41, 0.69, 1.6, 2.3, 4.6,
];
/// |estimate - actual| / actual: 0.1 is 10 %, 1.0 is 100 %.
const ERROR_RATIO_BUCKETS: [f64; 11] =
    [0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 100.0];
const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];
const PROBABILITY_BUCKETS: [f64; 10] = [0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 0.95];
const BATCH_BUCKETS: [f64; 9] = [1.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0];

/// The process-wide recorder (metrics has one global recorder), installed
/// on first use.
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let buckets = [
                (PREDICTION_LOG_RATIO, &LOG_RATIO_BUCKETS[..]),
                (PREDICTION_ERROR, &ERROR_RATIO_BUCKETS[..]),
                (ETA_ERROR, &ERROR_RATIO_BUCKETS[..]),
                (DECISION_LATENCY, &LATENCY_BUCKETS[..]),
                (BATCH_STAGE_SECONDS, &LATENCY_BUCKETS[..]),
                (BATCH_EVENTS, &BATCH_BUCKETS[..]),
                (RISK_PREEMPTION_PROBABILITY, &PROBABILITY_BUCKETS[..]),
            ];
            let mut builder = PrometheusBuilder::new();
            for (name, values) in buckets {
                builder = builder
                    .set_buckets_for_metric(Matcher::Full(name.into()), values)
                    .expect("bucket lists are not empty");
            }
            let handle = builder
                .install_recorder()
                .expect("no other metrics recorder is installed");
            describe();
            // Counters of rare events exist from the start, at 0, so that
            // `increase()` over them sees their first event.
            for name in [
                JOBS_EXPIRED,
                LIVE_JOBS_EXPIRED,
                MACHINES_EXPIRED,
                PRODUCERS_RECREATED,
                ETA_WITHIN_INTERVAL,
                DECISIONS_OVERTAKEN,
                STARTS_REFRESHED,
                STARTS_OVERFULL,
                TAKEOVER_BUFFER_WAITS,
            ] {
                metrics::counter!(name).increment(0);
            }
            // States that alerts watch: 0 until they hold.
            for name in [TAKEOVER_BUFFER_FULL, WAITING_FOR_ROOM] {
                metrics::gauge!(name).set(0.0);
            }
            metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
            process_collector().describe();
            handle
        })
        .clone()
}

/// The process's own figures (`process_cpu_seconds_total`,
/// `process_resident_memory_bytes`, `process_open_fds`, …, as every
/// Prometheus client library exports them), read from `/proc`.
fn process_collector() -> &'static metrics_process::Collector {
    static COLLECTOR: OnceLock<metrics_process::Collector> = OnceLock::new();
    COLLECTOR.get_or_init(metrics_process::Collector::default)
}

/// Read the process's figures now (at each scrape).
pub fn collect_process() {
    process_collector().collect();
}

fn describe() {
    describe_gauge!(
        BUILD_INFO,
        "1, labelled with the version of jobcast this process runs"
    );
    describe_gauge!(
        STORE_BYTES,
        Unit::Bytes,
        "Bytes on disk of the RocksDB state (SST files), by column family"
    );
    describe_counter!(
        LIVE_JOBS_EXPIRED,
        Unit::Count,
        "Running jobs given up on (ended as expired) after engine.expiry.live_job_idle_hours of event time without an event"
    );
    describe_counter!(
        MACHINES_EXPIRED,
        Unit::Count,
        "Machines forgotten after engine.expiry.machine_silent_hours of event time without an event"
    );
    describe_counter!(
        BACKUPS,
        Unit::Count,
        "Online backups asked for (POST /admin/backup), by outcome (written, refused, failed)"
    );
    describe_gauge!(
        BACKUP_SECONDS,
        Unit::Seconds,
        "How long the latest online backup took to write"
    );
    describe_counter!(
        JOBS_EXPIRED,
        Unit::Count,
        "Ended jobs whose records (job, decisions, tasks) were deleted, storage.retention_hours of event time after their end"
    );
    describe_counter!(
        SNAPSHOTS,
        Unit::Count,
        "Snapshots of the predictor's state written (each truncates the log behind it)"
    );
    describe_gauge!(
        SNAPSHOT_BYTES,
        Unit::Bytes,
        "Size of the latest snapshot of the predictor's state"
    );
    describe_gauge!(
        SNAPSHOT_SECONDS,
        Unit::Seconds,
        "Time the pipeline spent taking the latest snapshot"
    );
    describe_gauge!(
        RESTORE_SECONDS,
        Unit::Seconds,
        "Time the last start took to restore the snapshot and apply the log after it"
    );
    describe_gauge!(
        TAKEOVER_BUFFER_BYTES,
        Unit::Bytes,
        "Outputs of other instances' partitions held for a takeover (consumer.takeover_buffer_bytes bounds it)"
    );
    describe_gauge!(
        TAKEOVER_BUFFER_FULL,
        "1 while the takeover buffer is past consumer.takeover_buffer_bytes: no input is read until the other partitions' owners have published what it holds"
    );
    describe_counter!(
        TAKEOVER_BUFFER_WAITS,
        Unit::Count,
        "Times the takeover buffer filled and input reading paused until the other partitions' owners published"
    );
    describe_counter!(
        EVENTS_CONSUMED,
        Unit::Count,
        "Input events applied in the partitions this instance owns, by event type"
    );
    describe_histogram!(
        BATCH_STAGE_SECONDS,
        Unit::Seconds,
        "Time of each step of a batch: apply (engine, outputs and log built), publish (until every output is acknowledged), commit (records serialised, batch handed to the writer thread), write (the RocksDB write, on the writer thread)"
    );
    describe_gauge!(
        INPUT_BUFFERED,
        Unit::Count,
        "Input messages the event-time merge holds, waiting for other partitions"
    );
    describe_gauge!(
        INPUT_BUFFERED_BYTES,
        Unit::Bytes,
        "Bytes (keys and payloads) of the input messages the event-time merge holds"
    );
    describe_counter!(
        INPUT_PAUSES,
        Unit::Count,
        "Times an input partition was paused because the merge held consumer.max_buffered_events"
    );
    describe_gauge!(
        OWNED_PARTITIONS,
        Unit::Count,
        "Input partitions this instance owns (publishes the outputs and stores the records of)"
    );
    describe_counter!(
        HTTP_UNAUTHORIZED,
        Unit::Count,
        "HTTP requests refused for want of the configured bearer token (http.token)"
    );
    describe_counter!(
        KAFKA_ERRORS,
        Unit::Count,
        "Client-wide errors librdkafka reported (brokers unreachable, authentication refused, ...), by client (input, member) and error code"
    );
    describe_counter!(
        INPUT_PARTITION_IDLE,
        Unit::Count,
        "Times the event-time merge gave up waiting for an input partition that neither delivered nor reported its end for consumer.idle_partition_timeout_ms"
    );
    describe_gauge!(
        INPUT_PARTITIONS_IDLE,
        Unit::Count,
        "Input partitions the event-time merge has given up waiting for and that have delivered nothing since; their events are applied late when they return"
    );
    describe_counter!(
        HTTP_ELSEWHERE,
        Unit::Count,
        "Requests for a job this instance does not hold, by answer: redirected (307) to the instance that holds it, absent (404: every partition's owner was asked) or unsure (503: some partition had no owner that answered)"
    );
    describe_counter!(
        HTTP_TIMED_OUT,
        Unit::Count,
        "HTTP requests answered 503 past http.request_timeout_secs, by stage: waiting for a read slot (http.max_concurrent_reads) or reading"
    );
    describe_gauge!(
        PIPELINE_STALLED,
        Unit::Seconds,
        "Seconds since the pipeline last came round its loop (every 50 ms unless stuck on a batch); /healthz fails past http.stall_timeout_secs"
    );
    describe_gauge!(
        ROCKSDB_WRITE_STOPPED,
        Unit::Count,
        "1 while RocksDB stops writes (write stall), else 0"
    );
    describe_gauge!(
        ROCKSDB_DELAYED_WRITE_RATE,
        "Rate in bytes per second RocksDB slows writes to while it throttles them, else 0"
    );
    describe_counter!(
        INPUT_OFFSETS_SKIPPED,
        Unit::Count,
        "Input offsets the broker never delivered, by partition (non-zero only on compacted or transactional topics, or a faulty broker)"
    );
    describe_counter!(
        EVENTS_DEAD_LETTERED,
        Unit::Count,
        "Input messages of the partitions this instance owns sent to the dead-letter topic, by reason"
    );
    describe_gauge!(
        FILESYSTEM_FREE,
        Unit::Bytes,
        "Bytes still free (to an unprivileged writer) on the filesystem holding the store: the write-ahead log and backups included"
    );
    describe_gauge!(
        FILESYSTEM_SIZE,
        Unit::Bytes,
        "Size of the filesystem holding the store"
    );
    describe_gauge!(
        WAITING_FOR_ROOM,
        "1 while a start waits, not ready, for the store's filesystem to have storage.min_free_bytes free"
    );
    describe_counter!(
        HTTP_PEERS_REFUSED,
        Unit::Count,
        "Owner URLs in the group's commits not signed with this deployment's http.token, not believed"
    );
    describe_counter!(
        EVENTS_HELD,
        Unit::Count,
        "Input events held for being more than engine.max_future_skew_secs ahead of the latest event time applied from any partition, until their partition confirms the jump (applied) or refutes it (dead-lettered, future_time)"
    );
    describe_gauge!(
        EVENTS_HELD_NOW,
        Unit::Count,
        "Input events held far ahead of every partition's latest event time now"
    );
    describe_counter!(
        DECISIONS_OVERTAKEN,
        Unit::Count,
        "Decisions that waited for engine.min_republish_ms and were overtaken by a newer one of their job (or its end): never published"
    );
    describe_counter!(
        STARTS_REFRESHED,
        Unit::Count,
        "Decisions published again because their pending job's start estimate moved (engine.starts.refresh_ms)"
    );
    describe_counter!(
        STARTS_OVERFULL,
        Unit::Count,
        "Pending jobs that started while their cluster's running jobs held more processors than it has (engine.starts.cpus, else its machines' CPUs): their starts are not learnt from"
    );
    describe_gauge!(
        DECISIONS_WAITING,
        Unit::Count,
        "Decisions waiting for engine.min_republish_ms to pass since their job's last published one"
    );
    describe_gauge!(
        EVENT_CLOCK,
        Unit::Seconds,
        "The engine's event clock (Unix seconds): the latest event time the active input partitions agree on; expiry and retention follow it"
    );
    describe_gauge!(
        CONSUMER_LAG,
        Unit::Count,
        "Messages in the input partition not yet consumed, by partition"
    );
    describe_gauge!(
        COMMITTED_OFFSET,
        "Next input offset to consume, as stored in RocksDB with the state, by partition"
    );
    describe_histogram!(
        DECISION_LATENCY,
        Unit::Seconds,
        "From consuming an event to the broker acknowledging the decision it caused"
    );
    describe_histogram!(
        PREDICTION_LOG_RATIO,
        "ln(estimated / actual mean task runtime) of finished jobs, by policy"
    );
    describe_histogram!(
        PREDICTION_ERROR,
        "Absolute relative error (|estimate - actual| / actual) of the mean task runtime estimate \
         of finished jobs as a ratio (0.5 = 50 %), by policy"
    );
    describe_counter!(
        PREDICTION_COVERED,
        Unit::Count,
        "Finished jobs whose true mean task runtime was at or below the estimate's quantile, by \
         policy and quantile (p50, p90, p95, p99); over jobcast_prediction_error_ratio_count, \
         the quantile's coverage"
    );
    describe_histogram!(
        ETA_ERROR,
        "Absolute relative error of a finished job's first ETA (its median) against the time it \
         then took to finish, as a ratio (0.5 = 50 %)"
    );
    describe_counter!(
        ETA_WITHIN_INTERVAL,
        Unit::Count,
        "Finished jobs that finished within their first ETA's 80 % interval; over \
         jobcast_eta_error_ratio_count, the interval's coverage"
    );
    describe_counter!(
        DECISIONS,
        Unit::Count,
        "Decisions published, by queue and phase"
    );
    describe_gauge!(LIVE_JOBS, Unit::Count, "Jobs submitted and not yet ended");
    describe_gauge!(
        STATE_RECORDS,
        Unit::Count,
        "Records in the RocksDB state, by column family (RocksDB's estimate)"
    );
    describe_histogram!(
        BATCH_EVENTS,
        Unit::Count,
        "Input messages per committed batch"
    );
    describe_counter!(
        PRODUCE_RETRIES,
        Unit::Count,
        "Output messages produced again after a failed delivery"
    );
    describe_counter!(
        OUTPUTS_PARKED,
        Unit::Count,
        "Output messages the broker refused for good (too large, unknown topic, not authorized), parked in the store instead of retried, by topic and reason"
    );
    describe_counter!(
        PRODUCERS_RECREATED,
        Unit::Count,
        "Output producers replaced after a fatal error (an idempotent producer's broken sequence)"
    );
    describe_histogram!(
        RISK_PREEMPTION_PROBABILITY,
        "Probability that a task placed on a transient VM is preempted before it completes, per published risk score"
    );
    describe_counter!(
        CAPACITY_DECISIONS,
        Unit::Count,
        "Capacity decisions of CloudCoaster's controller published, by action (grow, shrink, hold)"
    );
    describe_gauge!(
        CLUSTER_MACHINES_UP,
        "Machines up per cluster (events name their cluster; empty: the one cluster of a source that names none)"
    );
    describe_gauge!(CLUSTER_CPUS, "CPUs of the machines up per cluster");
    describe_gauge!(CLUSTER_LIVE_JOBS, "Live jobs per cluster");
    describe_counter!(
        DEADLINE_DECISIONS,
        Unit::Count,
        "Decisions about deadline jobs on spot VMs published, by action (plan, unplanned, wait, migrate, resume)"
    );
    describe_gauge!(
        CAPACITY_LONG_LOAD_RATIO,
        "Share of the machines up running a long task (l_r), as of the latest capacity decision published"
    );
    describe_counter!(
        RECOVERED_EVENTS,
        Unit::Count,
        "Logged input messages applied again on start, after the latest snapshot (at most storage.snapshot_every_events plus a batch)"
    );
}

/// A client-wide error librdkafka reported to `client` (a broker
/// unreachable, credentials refused), counted by its code.
pub(crate) fn kafka_error(client: &'static str, error: &KafkaError) {
    let code = error
        .rdkafka_error_code()
        .map_or_else(|| "Other".to_owned(), |code| format!("{code:?}"));
    metrics::counter!(KAFKA_ERRORS, "client" => client, "code" => code).increment(1);
}

/// A librdkafka log line, at the matching `tracing` level (target
/// `librdkafka`).
pub(crate) fn log_librdkafka(level: RDKafkaLogLevel, fac: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => error!(target: "librdkafka", "{fac}: {message}"),
        RDKafkaLogLevel::Warning => warn!(target: "librdkafka", "{fac}: {message}"),
        _ => debug!(target: "librdkafka", "{fac}: {message}"),
    }
}
