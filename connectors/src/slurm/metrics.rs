//! Slurm's connectors' own metrics: `jobcast slurm watch` and
//! `jobcast slurm apply` export these, not the service.

use metrics::{Unit, describe_counter, describe_gauge};

// `jobcast slurm watch`.
pub const EVENTS_PUBLISHED: &str = "jobcast_slurm_events_published_total";
pub const POLLS_FAILED: &str = "jobcast_slurm_polls_failed_total";
pub const JOBS_LOST: &str = "jobcast_slurm_jobs_lost_total";
pub const RECORDS_SKIPPED: &str = "jobcast_slurm_records_skipped_total";
pub const JOBS_FOLLOWED: &str = "jobcast_slurm_jobs_followed";
pub const LAST_POLL: &str = "jobcast_slurm_last_poll_timestamp_seconds";
pub const HISTORY_JOBS: &str = "jobcast_slurm_history_jobs_total";
// `jobcast slurm apply`.
pub const DECISIONS_READ: &str = "jobcast_slurm_decisions_read_total";
pub const ACTIONS: &str = "jobcast_slurm_actions_total";
pub const TICKS_FAILED: &str = "jobcast_slurm_apply_ticks_failed_total";
pub const JOBS_DECIDED: &str = "jobcast_slurm_jobs_decided";
pub const LAST_TICK: &str = "jobcast_slurm_apply_last_tick_timestamp_seconds";
/// Every metric `jobcast slurm apply` exports.
pub const APPLY_METRICS: [&str; 5] = [
    DECISIONS_READ,
    ACTIONS,
    TICKS_FAILED,
    JOBS_DECIDED,
    LAST_TICK,
];
/// Every metric `jobcast slurm watch` exports.
pub const WATCH_METRICS: [&str; 7] = [
    EVENTS_PUBLISHED,
    POLLS_FAILED,
    JOBS_LOST,
    RECORDS_SKIPPED,
    JOBS_FOLLOWED,
    LAST_POLL,
    HISTORY_JOBS,
];

/// Describe every metric of both commands to the installed recorder.
pub fn describe() {
    describe_counter!(
        EVENTS_PUBLISHED,
        Unit::Count,
        "Canonical events jobcast slurm watch published from squeue snapshots (acknowledged)"
    );
    describe_counter!(
        POLLS_FAILED,
        Unit::Count,
        "Polls of jobcast slurm watch that failed (squeue failed or printed no JSON, or the brokers did not acknowledge); the next poll goes on"
    );
    describe_counter!(
        JOBS_LOST,
        Unit::Count,
        "Slurm jobs that left squeue before they ended (a watcher down longer than MinJobAge, or Slurm forgot them): ended lost"
    );
    describe_counter!(
        RECORDS_SKIPPED,
        Unit::Count,
        "squeue records jobcast slurm watch could not read as a job or task, and skipped"
    );
    describe_gauge!(
        JOBS_FOLLOWED,
        Unit::Count,
        "Slurm jobs jobcast slurm watch follows (listed by squeue)"
    );
    describe_counter!(
        HISTORY_JOBS,
        Unit::Count,
        "Ended jobs of the site's accounting (sacct) that jobcast slurm watch --history-since published at its state's first look"
    );
    describe_gauge!(
        LAST_POLL,
        Unit::Seconds,
        "Unix time of jobcast slurm watch's last successful poll: past Slurm's MinJobAge without one, finished jobs' ends are lost"
    );
    describe_counter!(
        DECISIONS_READ,
        Unit::Count,
        "Messages jobcast slurm apply read from the decisions topic, by kind: newer (kept), stale (a redelivery or overtaken, dropped), too_old (older than --max-decision-age-secs, dropped), unreadable (not a decision, skipped)"
    );
    describe_counter!(
        ACTIONS,
        Unit::Count,
        "scontrol updates jobcast slurm apply made, by result: done, or failed after its retries (planned again next tick)"
    );
    describe_counter!(
        TICKS_FAILED,
        Unit::Count,
        "Ticks of jobcast slurm apply that did nothing: the decisions topic could not be read to its end, or squeue failed"
    );
    describe_gauge!(
        JOBS_DECIDED,
        Unit::Count,
        "Slurm jobs with a jobcast decision that jobcast slurm apply holds"
    );
    describe_gauge!(
        LAST_TICK,
        Unit::Seconds,
        "Unix time of jobcast slurm apply's last successful tick"
    );
}
