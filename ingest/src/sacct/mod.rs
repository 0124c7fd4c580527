//! A Slurm site's own history, as `sacct` prints it: the parsable layout
//! (`sacct -P`, [`parsable`]) or JSON (`sacct --json`, [`json`]), told
//! apart by the first character.
//!
//! A job maps as `jobcast slurm watch` maps it live
//! (`docs/schedulers.md`): a plain job is one task of its CPUs; the
//! elements of an array (`123_4`) are the tasks of job 123, in the order
//! of their indices. Read where present:
//!
//! | parsable column | JSON field | canonical |
//! |---|---|---|
//! | `JobID` (else `JobIDRaw`) | `job_id`, `array.job_id`, `array.task_id` | `job_id`, task |
//! | `Submit`, `Start`, `End` | `time.submission`, `time.start`, `time.end` | the task's `submit`, `schedule` and end (`Unknown`, `None`, 0: not yet) |
//! | `State` | `state.current` | the end's kind, as the live watcher reads it ([`crate::slurm::task_end`]) |
//! | `User`, `Group`, `JobName`, `Partition`, `Cluster` | `user`, `group`, `name`, `partition`, `cluster` | `user`, `group`, `job_name` and `logical_name`, `partition`, `cluster` |
//! | `NCPUS`, else `AllocCPUS`, else `ReqCPUS` | `required.CPUs` | `cpu_request` |
//! | `ReqMem` (`4000M`, `16G`; `c`/`n` suffixes of old versions: per CPU, per node) | `required.memory` (MB; per CPU where Slurm flags it), else `required.memory_per_node`, `required.memory_per_cpu` | `mem_request`, MB |
//! | `TimelimitRaw` (minutes), else `Timelimit` (`[D-]HH:MM:SS`) | `time.limit` (minutes) | `time_limit_us` |
//!
//! Job steps (`123.batch`, `123.0`) are left out: their job's row carries
//! it. A pending array's range (`123_[5-9]`) is left out, noted: those
//! tasks have not been submitted as elements yet, and the array stays
//! open. A row that cannot be
//! used is skipped with its place and reason; the others go on. A job
//! still pending or running stays open.
//!
//! The whole output is read into memory (a site's accounting over a period
//! runs to megabytes) and its events sorted by time.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::Path;

use crate::event::{Event, JobEnded, JobSubmitted, TaskEvent, TaskKind};
use crate::slurm::job_outcome;
use crate::source::{Diagnostics, Location, Trace, TraceError, open_input, total_size};

mod json;
mod parsable;

const US: u64 = 1_000_000;

/// What a layout read: each job's rows, and the arrays with elements
/// still pending (a range such as `123_[5-9]`), which stay open.
#[derive(Default)]
struct Jobs {
    rows: BTreeMap<u64, Vec<Row>>,
    pending: BTreeSet<u64>,
}

impl Jobs {
    fn add(&mut self, job_id: u64, row: Row) {
        self.rows.entry(job_id).or_default().push(row);
    }

    /// Array `job_id` has elements not yet submitted as such: noted, and
    /// the job stays open.
    fn pending_range(&mut self, job_id: u64, diagnostics: &Diagnostics) {
        diagnostics.note("pending array ranges left out: their elements are not submitted yet");
        self.pending.insert(job_id);
    }
}

/// One row of a job (or an array's element).
#[derive(Debug, Clone)]
struct Row {
    /// Where it came from: its line (parsable) or its place in `jobs`
    /// (JSON).
    place: Location,
    /// The array index, for an element.
    index: Option<u32>,
    submit_us: u64,
    start_us: Option<u64>,
    end_us: Option<u64>,
    end: Option<TaskKind>,
    user: String,
    group: String,
    name: String,
    partition: String,
    cluster: String,
    cpus: f64,
    mem_mb: f64,
    limit_us: Option<u64>,
}

/// Open one `sacct` output (plain or compressed), parsable or JSON.
pub fn open(path: &Path) -> Result<Trace, TraceError> {
    let diagnostics = Diagnostics::new();
    let input = open_input(path, &diagnostics)?;
    let size = total_size(&[path.to_owned()]);
    read(path, input, diagnostics, size)
}

/// Read one `sacct` output from `input`, named `path` in what it reports,
/// of `size` bytes: JSON (`sacct --json`) if it begins with `{`, else the
/// parsable layout.
pub fn read(
    path: &Path,
    mut input: Box<dyn BufRead + Send>,
    diagnostics: Diagnostics,
    size: u64,
) -> Result<Trace, TraceError> {
    let head = input.fill_buf().map_err(|e| TraceError::io(path, e))?;
    let is_json = head.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    let jobs = if is_json {
        json::rows(path, input, &diagnostics)?
    } else {
        parsable::rows(path, input, &diagnostics)?
    };
    let mut events = Vec::new();
    for (job_id, rows) in jobs.rows {
        let place = rows[0].place.clone();
        let laid = lay_out(job_id, rows, jobs.pending.contains(&job_id));
        if laid
            .iter()
            .all(|(_, e)| diagnostics.within_limits(e, |_| place.clone()))
        {
            events.extend(laid);
        }
    }
    // Stable: at one time, submissions before task events before ends.
    events.sort_by_key(|(class, e)| (e.time_us(), *class));
    Ok(Trace::new(
        events.into_iter().map(|(_, e)| Ok(e)),
        diagnostics,
        size,
    ))
}

/// Why a row gives no job.
enum Skip {
    /// Not a job's own row, as expected (a step, a pending range).
    Note(&'static str),
    /// An array's range of elements still pending.
    Pending(u64),
    Bad(&'static str, String),
}

/// A job's events, each with its class (0 submit, 1 task, 2 end): its
/// rows, one a task, in the order of their array indices.
fn lay_out(job_id: u64, mut rows: Vec<Row>, open: bool) -> Vec<(u8, Event)> {
    rows.sort_by_key(|r| r.index);
    let first = &rows[0];
    let mut job = JobSubmitted::new(
        job_id,
        rows.iter().map(|r| r.submit_us).min().unwrap_or(0),
        rows.len() as u32,
    );
    job.user = first.user.clone();
    job.group = first.group.clone();
    job.job_name = first.name.clone();
    job.logical_name = first.name.clone();
    job.partition = first.partition.clone();
    job.cluster = first.cluster.clone();
    job.cpu_request = first.cpus;
    job.mem_request = first.mem_mb;
    job.time_limit_us = first.limit_us;
    let mut events = vec![(0, Event::JobSubmitted(job))];
    let task = |time_us: u64, index: u32, kind: TaskKind| {
        Event::Task(TaskEvent {
            time_us,
            job_id,
            task_index: index,
            kind,
            machine_id: None,
            stage: None,
        })
    };
    let mut ends = Vec::new();
    let mut last_end = 0;
    for (i, r) in rows.iter().enumerate() {
        let i = i as u32;
        events.push((1, task(r.submit_us, i, TaskKind::Submit)));
        // Slurm gives a task cancelled before it ran a start at its end:
        // it ran only if it started before it ended, as the live watcher
        // reads it.
        let cancelled_unrun =
            r.end == Some(TaskKind::Kill) && r.start_us.zip(r.end_us).is_some_and(|(s, e)| s >= e);
        if let Some(start) = r.start_us.filter(|_| !cancelled_unrun) {
            events.push((1, task(start.max(r.submit_us), i, TaskKind::Schedule)));
        }
        if let (Some(kind), Some(end)) = (r.end, r.end_us) {
            let end = end.max(r.start_us.unwrap_or(r.submit_us));
            events.push((1, task(end, i, kind)));
            ends.push(kind);
            last_end = last_end.max(end);
        }
    }
    if !open && ends.len() == rows.len() {
        events.push((
            2,
            Event::JobEnded(JobEnded {
                time_us: last_end,
                job_id,
                outcome: job_outcome(&ends),
            }),
        ));
    }
    events
}
