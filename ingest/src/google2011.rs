//! Google `clusterdata-2011-2` (schema v2.1): `job_events`, `task_events`
//! and `machine_events` part files merged into one time-ordered canonical
//! stream.
//!
//! The trace splits what the canonical `job_submitted` event carries: names
//! live in `job_events`, while the number of tasks, the requests and the
//! priority live in `task_events`. So the adapter reads in two passes:
//!
//! 1. a quick scan of `task_events` (and `job_events`) collects per job the
//!    distinct task indices, the first task's requests and priority, and the
//!    end of the task-event window;
//! 2. every part file becomes a row stream, and a k-way merge interleaves
//!    them by (time, machine < job submit < task < job end, part order).
//!
//! When task events are present, events after the last task event are
//! dropped: the window ends there, and jobs still running then are censored
//! rather than being given job-level ends whose task ends are missing.
//! Rows at time 0 happened before the trace window; they are kept (the
//! canonical model gives time 0 the same meaning).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::event::{
    Event, JobEnded, JobOutcome, JobSubmitted, MAX_TIME_US, MachineEvent, MachineKind, TaskEvent,
    TaskKind,
};
use crate::merge_by_key::MergeByKey;
use crate::source::{Diagnostics, Location, Trace, TraceError, list_files, open_input, total_size};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    Job,
    Task,
    Machine,
}

impl Table {
    fn dir(self) -> &'static str {
        match self {
            Table::Job => "job_events",
            Table::Task => "task_events",
            Table::Machine => "machine_events",
        }
    }

    /// Columns per row, from the trace's `schema.csv`.
    fn columns(self) -> usize {
        match self {
            Table::Job => 8,
            Table::Task => 13,
            Table::Machine => 6,
        }
    }
}

/// What pass 1 learns about a job from its task events.
#[derive(Debug, Clone, Default)]
struct JobInfo {
    num_tasks: u32,
    user: String,
    scheduling_class: u8,
    priority: u32,
    cpu_request: f64,
    mem_request: f64,
    /// The job's first row in `task_events` (file index, line): where the
    /// user of a synthesised `job_submitted` came from, so a refused one
    /// names a real row. (0, 0) only for jobs the scan never saw, whose
    /// synthesised submit has no user and no tasks and so breaks no limit.
    origin: (usize, u64),
}

impl JobInfo {
    /// The job's `job_submitted` as pass 1 knows it: its user, class,
    /// priority, requests and tasks, without names.
    fn into_submit(self, time_us: u64, job_id: u64) -> JobSubmitted {
        JobSubmitted {
            time_us,
            job_id,
            user: self.user,
            group: String::new(),
            job_name: String::new(),
            logical_name: String::new(),
            scheduling_class: self.scheduling_class,
            priority: self.priority,
            cpu_request: self.cpu_request,
            mem_request: self.mem_request,
            partition: String::new(),
            time_limit_us: None,
            deadline_us: None,
            num_tasks: self.num_tasks,
            stages: None,
            cluster: String::new(),
        }
    }
}

/// Open a `clusterdata-2011-2` directory (holding `job_events/`,
/// `task_events/` and optionally `machine_events/`).
pub fn open(input: &Path) -> Result<Trace, TraceError> {
    let files = |table: Table| -> Result<Vec<PathBuf>, TraceError> {
        let dir = input.join(table.dir());
        if dir.is_dir() {
            list_files(&dir, "part-")
        } else {
            Ok(Vec::new())
        }
    };
    let (job_files, task_files, machine_files) = (
        files(Table::Job)?,
        files(Table::Task)?,
        files(Table::Machine)?,
    );
    if job_files.is_empty() && task_files.is_empty() {
        return Err(TraceError::invalid(
            input,
            "no job_events/part-* or task_events/part-* files: not a clusterdata-2011-2 directory",
        ));
    }
    let diagnostics = Diagnostics::new();
    // Pass 1 reads with its own counters so that bytes and rows are counted
    // once, by the pass that emits events.
    let scan = scan(&job_files, &task_files)?;

    let mut sources: Vec<Box<dyn Iterator<Item = Result<Event, TraceError>> + Send>> = Vec::new();
    for (table, paths) in [
        (Table::Machine, &machine_files),
        (Table::Job, &job_files),
        (Table::Task, &task_files),
    ] {
        for path in paths {
            sources.push(Box::new(PartRows::open(
                path,
                table,
                diagnostics.clone(),
                scan.jobs.clone(),
            )?));
        }
    }
    let merged = MergeByKey::new(sources, |e: &Event| (e.time_us(), rank(e)));
    let all: Vec<PathBuf> = [job_files, task_files.clone(), machine_files].concat();
    let events = Canonicalise {
        inner: merged,
        task_files,
        window_end: scan.window_end,
        jobs: scan.jobs,
        jobs_with_submit: scan.jobs_with_submit,
        submitted: HashSet::new(),
        pending: VecDeque::new(),
        diagnostics: diagnostics.clone(),
    };
    Ok(Trace::new(events, diagnostics, total_size(&all)))
}

/// Order of event types at equal times: a machine exists before work lands
/// on it, a job is submitted before its tasks, and ends after them.
fn rank(e: &Event) -> u8 {
    match e {
        Event::Machine(_) => 0,
        Event::JobSubmitted(_) => 1,
        Event::Task(_) => 2,
        Event::JobEnded(_) => 3,
    }
}

struct Scan {
    jobs: std::sync::Arc<HashMap<u64, JobInfo>>,
    jobs_with_submit: HashSet<u64>,
    window_end: Option<u64>,
}

/// Pass 1: per-job facts from `task_events`, and which jobs have a SUBMIT
/// in `job_events`. Bad rows are ignored here and reported by pass 2.
fn scan(job_files: &[PathBuf], task_files: &[PathBuf]) -> Result<Scan, TraceError> {
    let quiet = Diagnostics::new();
    let mut jobs: HashMap<u64, JobInfo> = HashMap::new();
    let mut seen_tasks: HashSet<(u64, u32)> = HashSet::new();
    let mut window_end = None;
    for (file, path) in task_files.iter().enumerate() {
        let mut reader = csv_reader(open_input(path, &quiet)?);
        let mut rec = csv::ByteRecord::new();
        while read_record(&mut reader, &mut rec, path)? {
            if rec.len() != Table::Task.columns() || field_u64(&rec, 5).is_none_or(|t| t > 8) {
                continue;
            }
            let (Some(time), Some(job_id), Some(task_index)) = (
                field_u64(&rec, 0),
                field_u64(&rec, 2),
                field_u64(&rec, 3).and_then(|i| u32::try_from(i).ok()),
            ) else {
                continue;
            };
            if time > MAX_TIME_US {
                continue;
            }
            window_end = window_end.max(Some(time));
            let info = jobs.entry(job_id).or_insert_with(|| JobInfo {
                user: field_str(&rec, 6).unwrap_or_default(),
                scheduling_class: field_u64(&rec, 7).map_or(0, |c| c.min(u8::MAX.into()) as u8),
                priority: field_u64(&rec, 8).map_or(0, |p| p.min(u32::MAX.into()) as u32),
                origin: (file, rec.position().map_or(0, |p| p.line())),
                ..JobInfo::default()
            });
            if info.cpu_request == 0.0 {
                info.cpu_request = field_f64(&rec, 9).unwrap_or(0.0);
            }
            if info.mem_request == 0.0 {
                info.mem_request = field_f64(&rec, 10).unwrap_or(0.0);
            }
            if seen_tasks.insert((job_id, task_index)) {
                info.num_tasks = info.num_tasks.saturating_add(1);
            }
        }
    }
    let mut jobs_with_submit = HashSet::new();
    for path in job_files {
        let mut reader = csv_reader(open_input(path, &quiet)?);
        let mut rec = csv::ByteRecord::new();
        while read_record(&mut reader, &mut rec, path)? {
            if let (Some(job_id), Some(0)) = (field_u64(&rec, 2), field_u64(&rec, 3)) {
                jobs_with_submit.insert(job_id);
            }
        }
    }
    Ok(Scan {
        jobs: std::sync::Arc::new(jobs),
        jobs_with_submit,
        window_end,
    })
}

fn csv_reader(input: Box<dyn BufRead + Send>) -> csv::Reader<Box<dyn BufRead + Send>> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(input)
}

/// Read the next record; `Ok(false)` at the end. Only I/O failures (such
/// as a corrupt gzip stream) are errors; malformed CSV is a row problem.
fn read_record(
    reader: &mut csv::Reader<Box<dyn BufRead + Send>>,
    rec: &mut csv::ByteRecord,
    path: &Path,
) -> Result<bool, TraceError> {
    loop {
        match reader.read_byte_record(rec) {
            Ok(more) => return Ok(more),
            Err(e) => match e.into_kind() {
                csv::ErrorKind::Io(io) => return Err(TraceError::io(path, io)),
                // Unreachable with `flexible(true)` and byte records, but a
                // bad row must never end the run: skip it.
                _ => continue,
            },
        }
    }
}

fn field_str(rec: &csv::ByteRecord, i: usize) -> Option<String> {
    rec.get(i)
        .filter(|f| !f.is_empty())
        .map(|f| String::from_utf8_lossy(f).into_owned())
}

fn field_u64(rec: &csv::ByteRecord, i: usize) -> Option<u64> {
    std::str::from_utf8(rec.get(i)?).ok()?.parse().ok()
}

fn field_f64(rec: &csv::ByteRecord, i: usize) -> Option<f64> {
    let v: f64 = std::str::from_utf8(rec.get(i)?).ok()?.parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// Why a row could not be used: a stable class and the detail.
struct RowError(&'static str, String);

/// Parse a required unsigned integer column.
fn req_u64(rec: &csv::ByteRecord, i: usize, name: &str) -> Result<u64, RowError> {
    let raw = rec.get(i).unwrap_or_default();
    if raw.is_empty() {
        return Err(RowError(
            "missing_field",
            format!("`{name}` (column {}) is empty", i + 1),
        ));
    }
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid_column(i, name, raw, "an unsigned integer"))
}

/// Parse an optional non-negative number column (empty means absent).
fn opt_f64(rec: &csv::ByteRecord, i: usize, name: &str) -> Result<Option<f64>, RowError> {
    let raw = rec.get(i).unwrap_or_default();
    if raw.is_empty() {
        return Ok(None);
    }
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(Some)
        .ok_or_else(|| invalid_column(i, name, raw, "a non-negative number"))
}

/// Column `i` (`name`) holds `raw`, which is not `what` ("an unsigned
/// integer", …) the column should hold.
fn invalid_column(i: usize, name: &str, raw: &[u8], what: &str) -> RowError {
    RowError(
        "invalid_field",
        format!(
            "`{name}` (column {}) is not {what}: {:?}",
            i + 1,
            String::from_utf8_lossy(raw)
        ),
    )
}

/// An `event type` code outside the range `0..=max` the trace documents
/// for `table` events.
fn unknown_event_type(table: &str, code: u64, max: u64) -> RowError {
    RowError(
        "invalid_field",
        format!("{table} event type {code} is not 0–{max}"),
    )
}

fn opt_u64(rec: &csv::ByteRecord, i: usize, name: &str) -> Result<Option<u64>, RowError> {
    if rec.get(i).unwrap_or_default().is_empty() {
        Ok(None)
    } else {
        req_u64(rec, i, name).map(Some)
    }
}

/// One part file's rows as canonical events, in file order.
struct PartRows {
    path: PathBuf,
    table: Table,
    reader: csv::Reader<Box<dyn BufRead + Send>>,
    rec: csv::ByteRecord,
    diagnostics: Diagnostics,
    jobs: std::sync::Arc<HashMap<u64, JobInfo>>,
    done: bool,
}

impl PartRows {
    fn open(
        path: &Path,
        table: Table,
        diagnostics: Diagnostics,
        jobs: std::sync::Arc<HashMap<u64, JobInfo>>,
    ) -> Result<Self, TraceError> {
        Ok(PartRows {
            path: path.to_owned(),
            table,
            reader: csv_reader(open_input(path, &diagnostics)?),
            rec: csv::ByteRecord::new(),
            diagnostics,
            jobs,
            done: false,
        })
    }

    /// `Ok(None)`: a valid row that has no canonical counterpart.
    fn parse(&self) -> Result<Option<Event>, RowError> {
        let rec = &self.rec;
        if rec.len() != self.table.columns() {
            return Err(RowError(
                "wrong_column_count",
                format!("{} columns, expected {}", rec.len(), self.table.columns()),
            ));
        }
        let time_us = req_u64(rec, 0, "time")?;
        if time_us > MAX_TIME_US {
            return Err(RowError(
                "out_of_range",
                format!("time {time_us} is beyond the trace"),
            ));
        }
        match self.table {
            Table::Machine => {
                let machine_id = req_u64(rec, 1, "machine ID")?;
                let kind = match req_u64(rec, 2, "event type")? {
                    0 => MachineKind::Add,
                    1 => MachineKind::Remove,
                    2 => MachineKind::Update,
                    other => return Err(unknown_event_type("machine", other, 2)),
                };
                Ok(Some(Event::Machine(MachineEvent {
                    time_us,
                    machine_id,
                    kind,
                    platform: field_str(rec, 3),
                    cpus: opt_f64(rec, 4, "CPUs")?,
                    memory: opt_f64(rec, 5, "memory")?,
                    vm: None,
                    cluster: String::new(),
                })))
            }
            Table::Job => {
                let job_id = req_u64(rec, 2, "job ID")?;
                let outcome = match req_u64(rec, 3, "event type")? {
                    0 => {
                        let info = self.jobs.get(&job_id).cloned().unwrap_or_default();
                        let scheduling_class = opt_u64(rec, 5, "scheduling class")?
                            .map_or(info.scheduling_class, |c| c.min(u8::MAX.into()) as u8);
                        let known = info.into_submit(time_us, job_id);
                        return Ok(Some(Event::JobSubmitted(JobSubmitted {
                            user: field_str(rec, 4).unwrap_or(known.user),
                            job_name: field_str(rec, 6).unwrap_or_default(),
                            logical_name: field_str(rec, 7).unwrap_or_default(),
                            scheduling_class,
                            ..known
                        })));
                    }
                    // SCHEDULE, EVICT and UPDATE_* of a job have no
                    // canonical counterpart: tasks carry that information.
                    1 | 2 | 7 | 8 => return Ok(None),
                    3 => JobOutcome::Fail,
                    4 => JobOutcome::Finish,
                    5 => JobOutcome::Kill,
                    6 => JobOutcome::Lost,
                    other => return Err(unknown_event_type("job", other, 8)),
                };
                Ok(Some(Event::JobEnded(JobEnded {
                    time_us,
                    job_id,
                    outcome,
                })))
            }
            Table::Task => {
                let job_id = req_u64(rec, 2, "job ID")?;
                let task_index = u32::try_from(req_u64(rec, 3, "task index")?)
                    .map_err(|_| RowError("out_of_range", "task index exceeds 2^32".to_owned()))?;
                let kind = match req_u64(rec, 5, "event type")? {
                    0 => TaskKind::Submit,
                    1 => TaskKind::Schedule,
                    2 => TaskKind::Evict,
                    3 => TaskKind::Fail,
                    4 => TaskKind::Finish,
                    5 => TaskKind::Kill,
                    6 => TaskKind::Lost,
                    7 | 8 => TaskKind::Update,
                    other => return Err(unknown_event_type("task", other, 8)),
                };
                Ok(Some(Event::Task(TaskEvent {
                    time_us,
                    job_id,
                    task_index,
                    kind,
                    machine_id: opt_u64(rec, 4, "machine ID")?,
                    stage: None,
                })))
            }
        }
    }
}

impl Iterator for PartRows {
    type Item = Result<Event, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            match read_record(&mut self.reader, &mut self.rec, &self.path) {
                Ok(false) => self.done = true,
                Ok(true) => {
                    self.diagnostics.rows(1);
                    let missing_info = if self.table == Table::Machine {
                        None
                    } else {
                        self.rec.get(1)
                    };
                    let at = || Location {
                        file: self.path.clone(),
                        line: self.rec.position().map_or(0, |p| p.line()),
                        record: None,
                    };
                    match self.parse() {
                        Ok(Some(event)) if !self.diagnostics.within_limits(&event, |_| at()) => {}
                        Ok(Some(event)) => {
                            if missing_info.is_some_and(|m| !m.is_empty()) {
                                self.diagnostics.note(&format!(
                                    "{} rows with a `missing info` flag (kept)",
                                    self.table.dir()
                                ));
                            }
                            return Some(Ok(event));
                        }
                        Ok(None) => {}
                        Err(RowError(class, detail)) => self.diagnostics.skip(at(), class, detail),
                    }
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

/// Post-merge fix-ups that need the whole stream's view: cut at the end of
/// the task window, drop repeated SUBMITs of a job (a documented trace
/// anomaly), and synthesise a `job_submitted` for tasks whose job has no
/// SUBMIT in `job_events`.
struct Canonicalise<I> {
    inner: I,
    /// The `task_events` parts, indexed as in [`JobInfo::origin`].
    task_files: Vec<PathBuf>,
    window_end: Option<u64>,
    jobs: std::sync::Arc<HashMap<u64, JobInfo>>,
    jobs_with_submit: HashSet<u64>,
    submitted: HashSet<u64>,
    pending: VecDeque<Event>,
    diagnostics: Diagnostics,
}

impl<I: Iterator<Item = Result<Event, TraceError>>> Iterator for Canonicalise<I> {
    type Item = Result<Event, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.pending.pop_front() {
            return Some(Ok(e));
        }
        loop {
            let event = match self.inner.next()? {
                Ok(e) => e,
                Err(e) => return Some(Err(e)),
            };
            if self.window_end.is_some_and(|end| event.time_us() > end) {
                self.diagnostics
                    .note("events after the end of the task-events window (dropped)");
                continue;
            }
            if event.time_us() == 0 {
                self.diagnostics
                    .note("events at time 0, before the trace window (kept)");
            }
            match &event {
                Event::JobSubmitted(j) if !self.submitted.insert(j.job_id) => {
                    self.diagnostics.note("repeated SUBMIT of a job (dropped)");
                    continue;
                }
                Event::Task(t)
                    if !self.jobs_with_submit.contains(&t.job_id)
                        && self.submitted.insert(t.job_id) =>
                {
                    self.diagnostics.note(
                        "jobs with task events but no SUBMIT in job_events (job_submitted synthesised)",
                    );
                    let info = self.jobs.get(&t.job_id).cloned().unwrap_or_default();
                    let (file, line) = info.origin;
                    let submit = Event::JobSubmitted(info.into_submit(t.time_us, t.job_id));
                    // A refused submit is skipped like a bad SUBMIT row:
                    // the job's task events still follow.
                    let at = || Location {
                        file: self.task_files.get(file).cloned().unwrap_or_default(),
                        line,
                        record: None,
                    };
                    if !self.diagnostics.within_limits(&submit, |_| at()) {
                        return Some(Ok(event));
                    }
                    self.pending.push_back(event);
                    return Some(Ok(submit));
                }
                _ => {}
            }
            return Some(Ok(event));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write_gz(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let f = std::fs::File::create(path).unwrap();
        let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
        gz.write_all(text.as_bytes()).unwrap();
        gz.finish().unwrap();
    }

    fn fixture() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write_gz(
            &root.join("job_events/part-00000-of-00500.csv.gz"),
            "0,,1,0,u1,2,name1,logical1\n\
             0,,1,1,u1,2,name1,logical1\n\
             700,,2,0,u2,1,name2,logical2\n\
             700,,2,0,u2,1,name2,logical2\n\
             bad,,3,0,u,1,n,l\n\
             860,,1,4,u1,2,name1,logical1\n",
        );
        write_gz(
            &root.join("job_events/part-00001-of-00500.csv.gz"),
            "5000,,2,5,u2,1,name2,logical2\n",
        );
        write_gz(
            &root.join("task_events/part-00000-of-00500.csv.gz"),
            "0,,1,0,,0,u1,2,9,0.5,0.25,0.01,0\n\
             0,,1,1,,0,u1,2,9,0.5,0.25,0.01,0\n\
             100,,1,0,77,1,u1,2,9,0.5,0.25,0.01,0\n\
             100,,1,1,78,1,u1,2,9,0.5,0.25,0.01,0\n\
             700,,2,0,,0,u2,1,3,0.1,0.1,0,0\n\
             800,,1,0,77,4,u1,2,9,0.5,0.25,0.01,0\n\
             850,,9,0,,0,u9,0,1,,,,\n\
             860,1,1,1,78,4,u1,2,9,0.5,0.25,0.01,0\n\
             870,,1,1,78,99,u1,2,9,0.5,0.25,0.01,0\n\
             880,,1,1\n",
        );
        write_gz(
            &root.join("machine_events/part-00000-of-00001.csv.gz"),
            "0,77,0,plat,0.5,0.5\n0,78,0,plat,,\n1000,77,1,plat,0.5,0.5\n",
        );
        dir
    }

    #[test]
    fn merges_tables_in_time_order_with_derived_job_facts() {
        let dir = fixture();
        let trace = open(dir.path()).unwrap();
        let diags = trace.diagnostics().clone();
        let events: Vec<Event> = trace.map(Result::unwrap).collect();
        let times: Vec<u64> = events.iter().map(Event::time_us).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        // The window ends at the last valid task event (860): bad rows do
        // not extend it.
        assert!(times.iter().all(|&t| t <= 860));
        let Event::Machine(m) = &events[0] else {
            panic!("{:?}", events[0])
        };
        assert_eq!((m.machine_id, m.kind), (77, MachineKind::Add));
        let Event::JobSubmitted(j1) = &events[2] else {
            panic!("{:?}", events[2])
        };
        assert_eq!(
            (
                j1.job_id,
                j1.num_tasks,
                j1.priority,
                j1.cpu_request,
                j1.job_name.as_str()
            ),
            (1, 2, 9, 0.5, "name1")
        );
        let submits: Vec<u64> = events
            .iter()
            .filter_map(|e| match e {
                Event::JobSubmitted(j) => Some(j.job_id),
                _ => None,
            })
            .collect();
        // Job 2's second SUBMIT is dropped; job 9 has no SUBMIT row and gets
        // a synthesised one just before its first task event.
        assert_eq!(submits, vec![1, 2, 9]);
        let pos9 = events.iter().position(|e| e.job_id() == Some(9)).unwrap();
        assert!(matches!(events[pos9], Event::JobSubmitted(_)));
        assert!(matches!(events[pos9 + 1], Event::Task(_)));
        assert!(events.iter().any(
            |e| matches!(e, Event::JobEnded(j) if j.job_id == 1 && j.outcome == JobOutcome::Finish)
        ));
        // Job 2's KILL at 5000 is after the window and is dropped.
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, Event::JobEnded(j) if j.job_id == 2))
        );

        let skipped = diags.skipped();
        assert_eq!(
            skipped.get("invalid_field"),
            Some(&2),
            "{}",
            diags.summary()
        );
        assert_eq!(
            skipped.get("wrong_column_count"),
            Some(&1),
            "{}",
            diags.summary()
        );
        let summary = diags.summary();
        assert!(
            summary.contains("task_events/part-00000-of-00500.csv.gz:9"),
            "{summary}"
        );
        assert!(
            summary.contains("job_events/part-00000-of-00500.csv.gz:5"),
            "{summary}"
        );
        let notes = diags.notes();
        assert_eq!(notes.get("repeated SUBMIT of a job (dropped)"), Some(&1));
        assert_eq!(
            notes.get("task_events rows with a `missing info` flag (kept)"),
            Some(&1)
        );
    }

    #[test]
    fn missing_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("not a clusterdata-2011-2 directory"), "{err}");
    }
}
