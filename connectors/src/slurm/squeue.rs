//! `squeue --json` as Slurm 22.05 prints it (OpenAPI v0.0.38): the job
//! records jobcast reads, the array index lists they hold, and the command
//! that prints them.

use std::collections::BTreeSet;

use serde::Deserialize;

use jobcast_ingest::event::MAX_TASKS_PER_JOB;

/// One job record of `squeue --json`: the fields jobcast reads (the rest
/// are ignored).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SqueueJob {
    pub job_id: u64,
    /// The array's id for a job array's records, 0 for a plain job.
    #[serde(default)]
    pub array_job_id: u64,
    /// The array index of a task record; none on a pending array's record.
    #[serde(default)]
    pub array_task_id: Option<u32>,
    /// On a pending array's record: the indices still pending (`0-5%2`,
    /// `1,3,5-7`, `0-15:4`).
    #[serde(default)]
    pub array_task_string: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub user_name: String,
    #[serde(default)]
    pub group_name: String,
    #[serde(default)]
    pub partition: String,
    /// The cluster (`ClusterName` of `slurm.conf`).
    #[serde(default)]
    pub cluster: String,
    #[serde(default)]
    pub account: String,
    pub job_state: String,
    pub submit_time: u64,
    #[serde(default)]
    pub start_time: u64,
    #[serde(default)]
    pub end_time: u64,
    /// CPUs per task; absent on a job cancelled before it ran.
    #[serde(default)]
    pub cpus: Option<u32>,
    /// MB a CPU (`--mem-per-cpu`), or a node (`--mem`): one of the two.
    #[serde(default)]
    pub memory_per_cpu: Option<u64>,
    #[serde(default)]
    pub memory_per_node: Option<u64>,
    /// Times the job was requeued; a requeue also makes `submit_time` the
    /// time of the requeue.
    #[serde(default)]
    pub restart_cnt: u32,
    /// The job's scheduling priority (0: held).
    #[serde(default)]
    pub priority: Option<u32>,
    /// The job's time limit, minutes; none when unlimited.
    #[serde(default)]
    pub time_limit: Option<u32>,
    /// The latest the job may end (`sbatch --deadline`), Unix seconds; 0
    /// when it has none.
    #[serde(default)]
    pub deadline: u64,
}

impl SqueueJob {
    /// The job the record belongs to: an array's id for each of its
    /// records, else the job's own.
    pub fn job(&self) -> u64 {
        if self.array_job_id != 0 {
            self.array_job_id
        } else {
            self.job_id
        }
    }

    /// A pending array's record, which holds every task not yet split off.
    pub fn is_array_remainder(&self) -> bool {
        self.array_job_id != 0 && self.array_task_id.is_none()
    }
}

#[derive(Deserialize)]
struct Squeue {
    #[serde(default)]
    errors: Vec<serde_json::Value>,
    /// Read one by one, so that a record that cannot be read costs only
    /// itself.
    jobs: Vec<serde_json::Value>,
}

/// One `squeue --json` output: the records read, and each one that could
/// not be, with where and why.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub jobs: Vec<SqueueJob>,
    pub skipped: Vec<String>,
    /// The jobs (an array's id, else the job's) that skipped records
    /// belong to, where they say: Slurm still lists them, so they are not
    /// gone, though this snapshot cannot say how they stand.
    pub unreadable: BTreeSet<u64>,
}

impl From<Vec<SqueueJob>> for Snapshot {
    fn from(jobs: Vec<SqueueJob>) -> Self {
        Snapshot {
            jobs,
            ..Snapshot::default()
        }
    }
}

/// Why a snapshot could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SqueueError {
    #[error("squeue --json output, line {line} column {column}: {reason}")]
    Json {
        line: usize,
        column: usize,
        reason: String,
    },
    #[error("squeue --json reported errors: {0}")]
    Reported(String),
}

/// The job records of one `squeue --json` output. Output that is not
/// JSON, or errors `squeue` reports, fail the whole snapshot; a record
/// that is not a job as jobcast reads it is skipped, named by its place
/// (and its `job_id` where it has one), and the rest are read.
pub fn parse_squeue(json: &[u8]) -> Result<Snapshot, SqueueError> {
    let squeue: Squeue = serde_json::from_slice(json).map_err(|e| SqueueError::Json {
        line: e.line(),
        column: e.column(),
        reason: e.to_string(),
    })?;
    if !squeue.errors.is_empty() {
        let errors: Vec<String> = squeue.errors.iter().map(|e| e.to_string()).collect();
        return Err(SqueueError::Reported(errors.join("; ")));
    }
    let mut snapshot = Snapshot::default();
    for (at, record) in squeue.jobs.into_iter().enumerate() {
        let place = match record.get("job_id") {
            Some(id) => format!("squeue --json record {at} (job_id {id})"),
            None => format!("squeue --json record {at}"),
        };
        let id = |key: &str| {
            record
                .get(key)
                .and_then(|v| v.as_u64())
                .filter(|&id| id != 0)
        };
        let job = id("array_job_id").or_else(|| id("job_id"));
        match serde_json::from_value::<SqueueJob>(record) {
            Ok(job) => snapshot.jobs.push(job),
            Err(e) => {
                snapshot.skipped.push(format!("{place}: {e}"));
                snapshot.unreadable.extend(job);
            }
        }
    }
    Ok(snapshot)
}

/// Run `command` (`squeue --json`, split into words) and read its output;
/// the error names the command and why.
pub fn run_squeue(command: &[String]) -> Result<Snapshot, String> {
    let stdout = super::output(command, |_| {})?;
    parse_squeue(&stdout).map_err(|e| format!("`{}`: {e}", command.join(" ")))
}

/// The array indices an `array_task_string` names: `0-5%2`, `1,3,5-7`,
/// `0-15:4`; `None` if it is not such a list or names too many.
pub fn array_indices(spec: &str) -> Option<BTreeSet<u32>> {
    // `%N` limits how many run at once; it names no index.
    let spec = spec.split_once('%').map_or(spec, |(list, _)| list);
    let mut indices = BTreeSet::new();
    for part in spec.split(',').filter(|p| !p.is_empty()) {
        let (range, step) = match part.split_once(':') {
            Some((range, step)) => (range, step.parse::<u32>().ok().filter(|s| *s > 0)?),
            None => (part, 1),
        };
        let (first, last) = match range.split_once('-') {
            Some((first, last)) => (first.parse::<u32>().ok()?, last.parse::<u32>().ok()?),
            None => {
                let index = range.parse::<u32>().ok()?;
                (index, index)
            }
        };
        if last < first
            || indices.len() as u64 + u64::from((last - first) / step)
                >= u64::from(MAX_TASKS_PER_JOB)
        {
            return None;
        }
        indices.extend((first..=last).step_by(step as usize));
    }
    Some(indices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_index_lists_read_as_slurm_writes_them() {
        let set = |spec: &str| array_indices(spec).map(|s| s.into_iter().collect::<Vec<_>>());
        assert_eq!(set("0-5%2"), Some(vec![0, 1, 2, 3, 4, 5]));
        assert_eq!(set("1,3,5-7"), Some(vec![1, 3, 5, 6, 7]));
        assert_eq!(set("0-15:4"), Some(vec![0, 4, 8, 12]));
        assert_eq!(set(""), Some(vec![]));
        for bad in ["a-b", "5-1", "0-9:0", "0-4294967295", "1,,x"] {
            assert_eq!(set(bad), None, "{bad}");
        }
    }
}
