//! Alibaba `cluster-trace-v2018` batch workloads (`batch_task` and
//! `batch_instance`, CSV without a header, times in seconds since the start
//! of the trace; see `alibaba/clusterdata` `cluster-trace-v2018/schema.txt`).
//!
//! The input is a directory holding files whose names start with
//! `batch_task` and `batch_instance` (plain or gzip, any number of parts), or
//! one such file, or one file of either table under another name whose
//! first line is that table's header (as extracts of the trace are
//! published). A first line that names the table's columns is a header and
//! is skipped (noted); whole numbers printed as floats (`1.0`, as pandas
//! writes a column that has blanks) are read as the whole numbers they are
//! (noted), other fractions are refused. The mapping:
//!
//! - an Alibaba job is a canonical job: `j_123` gets id 123, any other name
//!   an FNV-1a hash of the name (noted);
//! - an Alibaba task is a DAG stage, built from the task names by
//!   [`crate::dag::build_job`] (problems such as cycles are noted, naming the
//!   job, and the job is still emitted);
//! - an instance is a canonical task. Task indices run over the job's stages
//!   in id order, and within a stage over its instances ordered by (first
//!   start, instance name). Rows repeating an instance name are further
//!   attempts of that instance.
//!
//! Each instance attempt gives `submit` (first attempt only) and `schedule`
//! at its start, then `finish` (status `Terminated`) or `fail` (`Failed`) at
//! its end. Other statuses, or a terminal status without an end time, are
//! right-censored: nothing follows the `schedule`. A job is submitted at its
//! earliest instance start and ends at its last instance end once every
//! instance has ended (`fail` if any instance's last attempt failed); jobs
//! with censored instances never end. Without `batch_instance` files each
//! `batch_task` row stands for `instance_num` instances that all start and
//! end with the task.
//!
//! Requests come from `batch_task`: `cpu_request` is the largest `plan_cpu`
//! of the job's tasks in cores (`plan_cpu` 100 = 1 core), `mem_request` the
//! largest `plan_mem` (normalised 0–100).
//!
//! Memory: the files are not sorted by time, so everything is read into
//! memory and sorted before the first event is returned. That costs roughly
//! 300 bytes per `batch_instance` row (the row, then its three pending
//! events), or per `batch_task` row without instance files (the instances of
//! a task row are expanded only while streaming). The full trace's 1.35 billion instance rows do not fit; split
//! it by job first (all rows of a job must be in the same input).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::dag::build_job;
use crate::event::{
    DecodeError, Event, JobEnded, JobOutcome, JobSubmitted, MAX_TIME_US, TaskEvent, TaskKind,
};
use crate::ids::stable_id;
use crate::source::{
    Deferred, Diagnostics, Location, Trace, TraceError, csv_error, list_files, open_input,
    total_size,
};

const TASK_COLUMNS: usize = 9;
const INSTANCE_COLUMNS: usize = 14;
/// The first column of each table, which a header line names.
const TASK_HEADER: &str = "task_name";
const INSTANCE_HEADER: &str = "instance_name";

/// Open an Alibaba v2018 batch trace. The files are read on the first call
/// to `next`, so a progress display can watch `bytes_read` meanwhile.
pub fn open(input: &Path) -> Result<Trace, TraceError> {
    let files = find_files(input)?;
    let diagnostics = Diagnostics::new();
    let all = files.all();
    let loading = diagnostics.clone();
    let events = Deferred::new(move || load(&files, &loading).map(|events| events.map(Ok)));
    Ok(Trace::new(events, diagnostics, total_size(&all)))
}

struct Files {
    tasks: Vec<PathBuf>,
    instances: Vec<PathBuf>,
}

impl Files {
    /// Every file, the task files first: the order a row's file index
    /// counts in.
    fn all(&self) -> Vec<PathBuf> {
        self.tasks.iter().chain(&self.instances).cloned().collect()
    }
}

fn find_files(input: &Path) -> Result<Files, TraceError> {
    let files = if input.is_file() {
        let name = input
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with("batch_task") {
            Files {
                tasks: vec![input.to_owned()],
                instances: Vec::new(),
            }
        } else if name.starts_with("batch_instance") {
            Files {
                tasks: Vec::new(),
                instances: vec![input.to_owned()],
            }
        } else {
            match first_column(input)?.as_deref() {
                Some(TASK_HEADER) => Files {
                    tasks: vec![input.to_owned()],
                    instances: Vec::new(),
                },
                Some(INSTANCE_HEADER) => Files {
                    tasks: Vec::new(),
                    instances: vec![input.to_owned()],
                },
                _ => {
                    return Err(TraceError::invalid(
                        input,
                        "expected a batch_task or batch_instance file (by name, or by a header \
                         line naming the table's columns), or a directory holding them",
                    ));
                }
            }
        }
    } else {
        Files {
            tasks: list_files(input, "batch_task")?,
            instances: list_files(input, "batch_instance")?,
        }
    };
    // The trace is published as tarballs; gunzipping one yields tar headers,
    // not rows.
    if let Some(tar) = files.tasks.iter().chain(&files.instances).find(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".tar") || n.ends_with(".tar.gz") || n.ends_with(".tgz"))
    }) {
        return Err(TraceError::invalid(tar, "a tar archive: extract it first"));
    }
    if files.tasks.is_empty() && files.instances.is_empty() {
        return Err(TraceError::invalid(
            input,
            "no batch_task or batch_instance files",
        ));
    }
    Ok(files)
}

/// How a run (a task row, or an instance attempt) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Terminated,
    Failed,
    /// Not ended within the trace (or not known to have): censored.
    Open,
}

fn parse_status(s: &str) -> Option<Status> {
    match s {
        "Terminated" => Some(Status::Terminated),
        "Failed" => Some(Status::Failed),
        "Running" | "Waiting" | "Ready" | "Interrupted" | "Cancelled" => Some(Status::Open),
        _ => None,
    }
}

/// One timed run, in µs; `end` is set only for runs that ended.
#[derive(Debug, Clone, Copy)]
struct Run {
    start: u64,
    end: Option<(u64, TaskKind)>,
}

struct Attempt {
    instance: String,
    run: Run,
    machine: Option<u64>,
}

/// Where a row is: the index of its file (task files, then instance
/// files) and its line.
type RowAt = (usize, u64);

/// Everything read about one Alibaba task of a job.
#[derive(Default)]
struct TaskRows {
    name: String,
    /// The task's first row, named if its stage name is refused.
    first_at: RowAt,
    /// Whether a `batch_task` row was read (a second one is a duplicate).
    has_task_row: bool,
    plan_cpu: Option<f64>,
    plan_mem: Option<f64>,
    /// Without instance files: the task row's instance count and run.
    instance_num: u32,
    run: Option<Run>,
    /// With instance files: every instance attempt.
    attempts: Vec<Attempt>,
}

struct JobRows {
    /// The job's first row, named if its `job_submitted` is refused.
    first_at: RowAt,
    tasks: Vec<TaskRows>,
    by_name: HashMap<String, usize>,
}

impl JobRows {
    fn new(first_at: RowAt) -> Self {
        JobRows {
            first_at,
            tasks: Vec::new(),
            by_name: HashMap::new(),
        }
    }

    fn task(&mut self, name: &str, at: RowAt) -> &mut TaskRows {
        let i = *self.by_name.entry(name.to_owned()).or_insert_with(|| {
            self.tasks.push(TaskRows {
                name: name.to_owned(),
                first_at: at,
                ..TaskRows::default()
            });
            self.tasks.len() - 1
        });
        &mut self.tasks[i]
    }
}

/// A skipped row: a stable reason class and the details.
type Bad = (&'static str, String);

fn load(files: &Files, diagnostics: &Diagnostics) -> Result<Events, TraceError> {
    let with_instances = !files.instances.is_empty();
    let paths = files.all();
    let mut jobs: HashMap<String, JobRows> = HashMap::new();
    for (file, path) in files.tasks.iter().enumerate() {
        read_csv(path, TASK_HEADER, diagnostics, |fields, line| {
            let row = parse_task_row(fields, !with_instances, diagnostics)?;
            let at = (file, line);
            let task = jobs
                .entry(row.job.to_owned())
                .or_insert_with(|| JobRows::new(at))
                .task(row.task, at);
            if task.has_task_row {
                return Err((
                    "duplicate_task",
                    format!("task `{}` of job `{}` again", row.task, row.job),
                ));
            }
            task.has_task_row = true;
            task.plan_cpu = row.plan_cpu;
            task.plan_mem = row.plan_mem;
            task.instance_num = row.instance_num;
            task.run = row.run;
            Ok(())
        })?;
    }
    for (file, path) in files.instances.iter().enumerate() {
        let file = files.tasks.len() + file;
        read_csv(path, INSTANCE_HEADER, diagnostics, |fields, line| {
            let row = parse_instance_row(fields, diagnostics)?;
            let at = (file, line);
            jobs.entry(row.job.to_owned())
                .or_insert_with(|| JobRows::new(at))
                .task(row.task, at)
                .attempts
                .push(Attempt {
                    instance: row.instance.to_owned(),
                    run: row.run,
                    machine: row.machine,
                });
            Ok(())
        })?;
    }

    let mut jobs: Vec<(u64, String, JobRows)> = jobs
        .into_iter()
        .map(|(name, rows)| {
            let id = numbered_id(&name, "j_").unwrap_or_else(|| {
                diagnostics.note("job names not of the form j_<n>: ids are FNV-1a hashes");
                stable_id(name.as_bytes())
            });
            (id, name, rows)
        })
        .collect();
    jobs.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));

    let mut items = Vec::new();
    let mut last_id = None;
    for (job_id, name, rows) in jobs {
        if last_id == Some(job_id) {
            diagnostics.note(&format!(
                "job {name}: id {job_id} collides with another job's; dropped"
            ));
            continue;
        }
        last_id = Some(job_id);
        let job = JobInput {
            job_id,
            name,
            rows,
            with_instances,
        };
        emit_job(job, &paths, diagnostics, &mut items);
    }
    items.sort_unstable_by_key(|item| (item.time_us, item.class, item.job_id, item.seq));
    Ok(Events {
        items: items.into_iter(),
        range: None,
    })
}

/// The first field of a file's first line (gzip or plain), to recognise a
/// table by its header.
fn first_column(path: &Path) -> Result<Option<String>, TraceError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(open_input(path, &Diagnostics::new())?);
    let mut record = csv::StringRecord::new();
    match reader.read_record(&mut record) {
        Ok(true) => Ok(record.get(0).map(|f| f.trim().to_owned())),
        Ok(false) | Err(_) => Ok(None),
    }
}

/// Read one CSV file, handing each row's fields and line to `row`; a row
/// it rejects is recorded as skipped at its line. A first line whose first
/// field is `header` (the table's first column) is a header: skipped, noted.
fn read_csv(
    path: &Path,
    header: &str,
    diagnostics: &Diagnostics,
    mut row: impl FnMut(&[&str], u64) -> Result<(), Bad>,
) -> Result<(), TraceError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(open_input(path, diagnostics)?);
    let mut record = csv::ByteRecord::new();
    loop {
        match reader.read_byte_record(&mut record) {
            Ok(false) => return Ok(()),
            Ok(true) => {}
            Err(e) => return Err(csv_error(path, e)),
        }
        let line = record.position().map_or(0, |p| p.line());
        if line == 1 && record.get(0).map(<[u8]>::trim_ascii) == Some(header.as_bytes()) {
            diagnostics.note("header lines skipped");
            continue;
        }
        diagnostics.rows(1);
        let mut fields: Vec<&str> = Vec::with_capacity(INSTANCE_COLUMNS);
        let mut utf8 = true;
        for field in &record {
            match std::str::from_utf8(field) {
                Ok(s) => fields.push(s),
                Err(_) => utf8 = false,
            }
        }
        let result = if utf8 {
            row(&fields, line)
        } else {
            Err(("encoding", "a field is not UTF-8".to_owned()))
        };
        if let Err((class, detail)) = result {
            let at = Location {
                file: path.to_owned(),
                line,
                record: None,
            };
            diagnostics.skip(at, class, detail);
        }
    }
}

struct TaskRow<'a> {
    task: &'a str,
    job: &'a str,
    instance_num: u32,
    plan_cpu: Option<f64>,
    plan_mem: Option<f64>,
    run: Option<Run>,
}

/// `task_name, instance_num, job_name, task_type, status, start_time,
/// end_time, plan_cpu, plan_mem`. Status and times matter only when the
/// task rows stand in for instances (`timed`).
fn parse_task_row<'a>(
    f: &[&'a str],
    timed: bool,
    diagnostics: &Diagnostics,
) -> Result<TaskRow<'a>, Bad> {
    columns(f, TASK_COLUMNS)?;
    let task = required(f[0], "task_name")?;
    let job = required(f[2], "job_name")?;
    let instance_num = whole(required(f[1], "instance_num")?, diagnostics)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| ("bad_number", format!("instance_num `{}`", f[1])))?;
    let run = if timed {
        Some(parse_run(f[4], f[5], f[6], diagnostics)?)
    } else {
        None
    };
    Ok(TaskRow {
        task,
        job,
        instance_num,
        plan_cpu: plan(f[7], "plan_cpu", diagnostics)?.map(|c| c / 100.0),
        plan_mem: plan(f[8], "plan_mem", diagnostics)?,
        run,
    })
}

struct InstanceRow<'a> {
    instance: &'a str,
    task: &'a str,
    job: &'a str,
    run: Run,
    machine: Option<u64>,
}

/// `instance_name, task_name, job_name, task_type, status, start_time,
/// end_time, machine_id, seq_no, total_seq_no, cpu_avg, cpu_max, mem_avg,
/// mem_max`; the usage columns are not used.
fn parse_instance_row<'a>(
    f: &[&'a str],
    diagnostics: &Diagnostics,
) -> Result<InstanceRow<'a>, Bad> {
    columns(f, INSTANCE_COLUMNS)?;
    let instance = required(f[0], "instance_name")?;
    let task = required(f[1], "task_name")?;
    let job = required(f[2], "job_name")?;
    let run = parse_run(f[4], f[5], f[6], diagnostics)?;
    let machine = match f[7].trim() {
        "" => None,
        name => Some(numbered_id(name, "m_").unwrap_or_else(|| {
            diagnostics.note("machine names not of the form m_<n>: ids are FNV-1a hashes");
            stable_id(name.as_bytes())
        })),
    };
    Ok(InstanceRow {
        instance,
        task,
        job,
        run,
        machine,
    })
}

fn columns(f: &[&str], want: usize) -> Result<(), Bad> {
    if f.len() == want {
        Ok(())
    } else {
        Err(("columns", format!("{} columns, expected {want}", f.len())))
    }
}

fn required<'a>(field: &'a str, name: &str) -> Result<&'a str, Bad> {
    match field.trim() {
        "" => Err(("missing_field", format!("empty {name}"))),
        s => Ok(s),
    }
}

fn parse_run(status: &str, start: &str, end: &str, diagnostics: &Diagnostics) -> Result<Run, Bad> {
    let status =
        parse_status(status.trim()).ok_or_else(|| ("bad_status", format!("status `{status}`")))?;
    let start = parse_time(start, "start_time", diagnostics)?
        .ok_or_else(|| ("missing_time", "empty start_time".to_owned()))?;
    let kind = match status {
        Status::Terminated => TaskKind::Finish,
        Status::Failed => TaskKind::Fail,
        Status::Open => return Ok(Run { start, end: None }),
    };
    match parse_time(end, "end_time", diagnostics)? {
        None => {
            diagnostics.note("ended runs without end_time: censored");
            Ok(Run { start, end: None })
        }
        Some(e) if e < start => Err((
            "end_before_start",
            format!(
                "end_time {}s before start_time {}s",
                e / 1_000_000,
                start / 1_000_000
            ),
        )),
        Some(e) => Ok(Run {
            start,
            end: Some((e, kind)),
        }),
    }
}

/// A whole number, also when printed as a float (`12.0`, noted); `None`
/// for anything else, fractions included.
fn whole(field: &str, diagnostics: &Diagnostics) -> Option<u64> {
    if let Ok(n) = field.parse::<u64>() {
        return Some(n);
    }
    let (int, frac) = field.split_once('.')?;
    if int.is_empty() || frac.is_empty() || !frac.bytes().all(|b| b == b'0') {
        return None;
    }
    let n = int.parse::<u64>().ok()?;
    diagnostics.note("whole numbers printed as floats (`1.0`) read as whole numbers");
    Some(n)
}

/// Seconds to µs. Empty is `None`; 0 means "outside the trace window" in
/// v2018 (before or after, undecidable), so the row is unusable.
fn parse_time(field: &str, name: &str, diagnostics: &Diagnostics) -> Result<Option<u64>, Bad> {
    let field = field.trim();
    if field.is_empty() {
        return Ok(None);
    }
    let secs =
        whole(field, diagnostics).ok_or_else(|| ("bad_number", format!("{name} `{field}`")))?;
    if secs == 0 {
        return Err(("zero_time", format!("{name} is 0")));
    }
    match secs.checked_mul(1_000_000) {
        Some(us) if us <= MAX_TIME_US => Ok(Some(us)),
        _ => Err(("time_out_of_range", format!("{name} {secs}s"))),
    }
}

/// A plan value: empty is unknown; garbage skips the row; the trace's
/// negative "invalid value" markers are dropped (noted), keeping the row.
fn plan(field: &str, name: &str, diagnostics: &Diagnostics) -> Result<Option<f64>, Bad> {
    let field = field.trim();
    if field.is_empty() {
        return Ok(None);
    }
    match field.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
        Ok(v) if v.is_finite() => {
            diagnostics.note("negative plan values ignored");
            Ok(None)
        }
        _ => Err(("bad_number", format!("{name} `{field}`"))),
    }
}

/// `<prefix><n>` in canonical decimal (no sign, no leading zero) gives `n`,
/// so that distinct names never share an id.
fn numbered_id(name: &str, prefix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?;
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    canonical.then(|| digits.parse().ok()).flatten()
}

/// One job's rows, as `load` hands them to [`emit_job`].
struct JobInput {
    job_id: u64,
    name: String,
    rows: JobRows,
    with_instances: bool,
}

/// Turn one job's rows into sort items. A job whose `job_submitted` breaks
/// a canonical limit (a name too long, too many tasks) is dropped whole and
/// skipped at the offending task's first row (for a stage name) or the
/// job's first row: its task events mean nothing without the submit.
fn emit_job(job: JobInput, paths: &[PathBuf], diagnostics: &Diagnostics, items: &mut Vec<Item>) {
    let JobInput {
        job_id,
        name,
        rows,
        with_instances,
    } = job;
    let mut tasks = rows.tasks;
    tasks.sort_by(|a, b| a.name.cmp(&b.name));

    // Each task's instances: attempts grouped by instance name, ordered by
    // (first start, name); a group's attempts by (start, end).
    let mut instances: Vec<Vec<Vec<Attempt>>> = Vec::with_capacity(tasks.len());
    for task in &mut tasks {
        let mut attempts = std::mem::take(&mut task.attempts);
        attempts.sort_by(|a, b| {
            (&a.instance, a.run.start, a.run.end.map(|e| e.0)).cmp(&(
                &b.instance,
                b.run.start,
                b.run.end.map(|e| e.0),
            ))
        });
        let mut groups: Vec<Vec<Attempt>> = Vec::new();
        for attempt in attempts {
            match groups.last_mut() {
                Some(group) if group[0].instance == attempt.instance => group.push(attempt),
                _ => groups.push(vec![attempt]),
            }
        }
        groups.sort_by(|a, b| {
            (a[0].run.start, &a[0].instance).cmp(&(b[0].run.start, &b[0].instance))
        });
        if with_instances && !task.has_task_row {
            diagnostics.note("tasks without a batch_task row: requests unknown");
        }
        instances.push(groups);
    }
    let counts: Vec<u32> = if with_instances {
        instances
            .iter()
            .map(|g| u32::try_from(g.len()).unwrap_or(u32::MAX))
            .collect()
    } else {
        tasks.iter().map(|t| t.instance_num).collect()
    };
    let Some(num_tasks) = counts.iter().try_fold(0u32, |sum, &n| sum.checked_add(n)) else {
        diagnostics.note(&format!("job {name}: more than 2^32 instances; dropped"));
        return;
    };
    let submit_time = if with_instances {
        instances
            .iter()
            .flatten()
            .flatten()
            .map(|a| a.run.start)
            .min()
    } else {
        tasks.iter().filter_map(|t| t.run.map(|r| r.start)).min()
    };
    let Some(submit_time) = submit_time else {
        diagnostics.note("jobs without instances dropped");
        return;
    };

    let dag = build_job(
        tasks
            .iter()
            .zip(&counts)
            .map(|(t, &n)| (t.name.as_str(), n)),
    );
    for problem in &dag.problems {
        diagnostics.note(&format!("job {name}: {problem}"));
    }
    let max_plan =
        |plan: fn(&TaskRows) -> Option<f64>| tasks.iter().filter_map(plan).fold(0.0, f64::max);
    let submit = Event::JobSubmitted(JobSubmitted {
        time_us: submit_time,
        job_id,
        user: String::new(),
        group: String::new(),
        job_name: name.clone(),
        logical_name: name.clone(),
        scheduling_class: 0,
        priority: 0,
        cpu_request: max_plan(|t| t.plan_cpu),
        mem_request: max_plan(|t| t.plan_mem),
        partition: String::new(),
        time_limit_us: None,
        deadline_us: None,
        num_tasks,
        stages: Some(dag.stages),
        cluster: String::new(),
    });
    let at = |err: &DecodeError| {
        // `stages[i]` is the stage with the i-th smallest id; find its task.
        let mut ids = dag.task_stage.clone();
        ids.sort_unstable();
        let stage_task = err
            .field
            .as_deref()
            .and_then(|f| f.strip_prefix("stages["))
            .and_then(|rest| rest.split(']').next())
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| ids.get(i))
            .and_then(|id| dag.task_stage.iter().position(|t| t == id));
        let (file, line) = stage_task.map_or(rows.first_at, |t| tasks[t].first_at);
        Location {
            file: paths[file].clone(),
            line,
            record: None,
        }
    };
    if !diagnostics.within_limits(&submit, at) {
        return;
    }
    let mut seq = items.len() as u64;
    let mut push = |time_us: u64, class: u8, what: Pending| {
        items.push(Item {
            time_us,
            class,
            job_id,
            seq,
            what,
        });
        seq += 1;
    };
    push(submit_time, CLASS_SUBMIT, Pending::Submit(Box::new(submit)));

    // Stages in id order; `dag.task_stage[i]` is the stage of `tasks[i]`.
    let mut by_stage: Vec<(u32, usize)> = dag
        .task_stage
        .iter()
        .enumerate()
        .map(|(i, &s)| (s, i))
        .collect();
    by_stage.sort_unstable();
    let mut next_index = 0u32;
    let mut last_end = submit_time;
    let mut all_ended = true;
    let mut any_failed = false;
    for (stage, i) in by_stage {
        let range = |first: u32, kind: TaskKind, machine: Option<u64>| {
            Pending::Tasks(TaskRange {
                first,
                count: 1,
                kind,
                machine,
                stage,
            })
        };
        if with_instances {
            if instances[i].is_empty() {
                diagnostics.note(&format!(
                    "job {name}: task {} has no instances; job end unknown",
                    tasks[i].name
                ));
                all_ended = false;
            }
            for attempts in &instances[i] {
                let index = next_index;
                next_index += 1;
                push(
                    attempts[0].run.start,
                    CLASS_TASK,
                    range(index, TaskKind::Submit, None),
                );
                for a in attempts {
                    push(
                        a.run.start,
                        CLASS_TASK,
                        range(index, TaskKind::Schedule, a.machine),
                    );
                    if let Some((end, kind)) = a.run.end {
                        push(end, CLASS_TASK, range(index, kind, a.machine));
                        last_end = last_end.max(end);
                    }
                }
                match attempts.last().and_then(|a| a.run.end) {
                    Some((_, kind)) => any_failed |= kind == TaskKind::Fail,
                    None => all_ended = false,
                }
            }
        } else {
            let count = counts[i];
            let Some(run) = tasks[i].run else { continue };
            let first = next_index;
            next_index += count;
            let mut push_range = |time: u64, kind: TaskKind| {
                if count > 0 {
                    push(
                        time,
                        CLASS_TASK,
                        Pending::Tasks(TaskRange {
                            first,
                            count,
                            kind,
                            machine: None,
                            stage,
                        }),
                    );
                }
            };
            push_range(run.start, TaskKind::Submit);
            push_range(run.start, TaskKind::Schedule);
            match run.end {
                Some((end, kind)) => {
                    push_range(end, kind);
                    last_end = last_end.max(end);
                    any_failed |= kind == TaskKind::Fail;
                }
                None => all_ended = false,
            }
        }
    }
    if all_ended {
        let outcome = if any_failed {
            JobOutcome::Fail
        } else {
            JobOutcome::Finish
        };
        push(last_end, CLASS_END, Pending::End(outcome));
    }
}

/// Order of events at equal times: a job's submit before task events
/// before job ends.
const CLASS_SUBMIT: u8 = 0;
const CLASS_TASK: u8 = 1;
const CLASS_END: u8 = 2;

/// One or more canonical events waiting to be sorted. `seq` keeps the
/// order of generation among equal keys (e.g. a task's submit, schedule and
/// finish at one time).
struct Item {
    time_us: u64,
    class: u8,
    job_id: u64,
    seq: u64,
    what: Pending,
}

enum Pending {
    Submit(Box<Event>),
    Tasks(TaskRange),
    End(JobOutcome),
}

/// Tasks `first..first + count` of a stage, all with the same event: one
/// item for a whole task row, expanded only while streaming.
#[derive(Clone, Copy)]
struct TaskRange {
    first: u32,
    count: u32,
    kind: TaskKind,
    machine: Option<u64>,
    stage: u32,
}

struct Events {
    items: std::vec::IntoIter<Item>,
    /// The range being expanded: its time, job, the range and how many of
    /// its events were returned.
    range: Option<(u64, u64, TaskRange, u32)>,
}

impl Iterator for Events {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        loop {
            if let Some((time_us, job_id, range, done)) = &mut self.range {
                if *done < range.count {
                    let event = Event::Task(TaskEvent {
                        time_us: *time_us,
                        job_id: *job_id,
                        task_index: range.first + *done,
                        kind: range.kind,
                        machine_id: range.machine,
                        stage: Some(range.stage),
                    });
                    *done += 1;
                    return Some(event);
                }
                self.range = None;
            }
            let item = self.items.next()?;
            match item.what {
                Pending::Submit(submit) => return Some(*submit),
                Pending::End(outcome) => {
                    return Some(Event::JobEnded(JobEnded {
                        time_us: item.time_us,
                        job_id: item.job_id,
                        outcome,
                    }));
                }
                Pending::Tasks(range) => self.range = Some((item.time_us, item.job_id, range, 0)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_from_names() {
        assert_eq!(numbered_id("j_123", "j_"), Some(123));
        assert_eq!(numbered_id("j_0", "j_"), Some(0));
        for name in [
            "j_",
            "j_01",
            "j_+1",
            "j_1a",
            "j_99999999999999999999",
            "x_1",
            "m_1",
        ] {
            assert_eq!(numbered_id(name, "j_"), None, "{name}");
        }
    }

    #[test]
    fn times_are_checked() {
        let d = Diagnostics::new();
        assert_eq!(parse_time("5", "t", &d), Ok(Some(5_000_000)));
        assert_eq!(parse_time(" ", "t", &d), Ok(None));
        assert_eq!(parse_time("0", "t", &d).unwrap_err().0, "zero_time");
        assert_eq!(parse_time("-3", "t", &d).unwrap_err().0, "bad_number");
        assert_eq!(parse_time("1.5", "t", &d).unwrap_err().0, "bad_number");
        assert_eq!(
            parse_time("18446744073709", "t", &d).unwrap_err().0,
            "time_out_of_range"
        );
        assert!(d.notes().is_empty(), "{:?}", d.notes());
        // A whole number printed as a float is that number, and noted.
        assert_eq!(parse_time("87076.0", "t", &d), Ok(Some(87_076_000_000)));
        assert_eq!(parse_time("7.00", "t", &d), Ok(Some(7_000_000)));
        assert_eq!(d.notes().len(), 1, "{:?}", d.notes());
        for bad in ["7.", ".0", "7.01", "1e3", "7.0.0"] {
            assert_eq!(
                parse_time(bad, "t", &d).unwrap_err().0,
                "bad_number",
                "{bad}"
            );
        }
    }
}
