//! The Parquet trace tables written by `jobcast convert` and read by
//! `jobcast sql`: `events` (one row per canonical event), `jobs`, `tasks`
//! and `machines` (the ground-truth views of `jobcast_ingest::truth`).
//!
//! Columns are snake_case; times are `Int64` microseconds (`*_us`), ids are
//! unsigned integers. Rows are buffered and written in row groups of
//! [`BATCH_ROWS`], zstd-compressed.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::datatypes::{FieldRef, Schema};
use jobcast_ingest::event::{Event, TaskKind};
use jobcast_ingest::truth::{CompletedJob, MachineTruth};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};
use serde_arrow::schema::{SchemaLike, TracingOptions};

/// Rows per Arrow batch (and Parquet row group).
pub const BATCH_ROWS: usize = 64 * 1024;

/// The table names, in the order they are written.
pub const TABLES: [&str; 4] = ["events", "jobs", "tasks", "machines"];

#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parquet {
        path: PathBuf,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("building the `{table}` table: {source}")]
    Arrow {
        table: &'static str,
        #[source]
        source: serde_arrow::Error,
    },
}

#[derive(Serialize, Deserialize)]
struct EventRow {
    time_us: i64,
    #[serde(rename = "type")]
    ty: String,
    job_id: Option<u64>,
    task_index: Option<u32>,
    stage: Option<u32>,
    kind: Option<String>,
    machine_id: Option<u64>,
    outcome: Option<String>,
    user: Option<String>,
    group: Option<String>,
    job_name: Option<String>,
    logical_name: Option<String>,
    scheduling_class: Option<u8>,
    priority: Option<u32>,
    cpu_request: Option<f64>,
    mem_request: Option<f64>,
    num_tasks: Option<u32>,
    /// The DAG, as the canonical JSON array of stages.
    stages: Option<String>,
    partition: Option<String>,
    time_limit_us: Option<i64>,
    deadline_us: Option<i64>,
    /// The cluster a job or machine event names.
    cluster: Option<String>,
    platform: Option<String>,
    cpus: Option<f64>,
    memory: Option<f64>,
    vm_name: Option<String>,
    vm_type: Option<String>,
    zone: Option<String>,
    preemptible: Option<bool>,
    launch_time_us: Option<i64>,
    end_reason: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct JobRow {
    job_id: u64,
    submit_time_us: Option<i64>,
    user: String,
    job_name: String,
    logical_name: String,
    scheduling_class: u8,
    priority: u32,
    cpu_request: f64,
    mem_request: f64,
    num_tasks: u32,
    width: u32,
    num_stages: Option<u32>,
    first_schedule_us: Option<i64>,
    end_time_us: Option<i64>,
    outcome: Option<String>,
    finished: bool,
    censored: bool,
    runtime_us: Option<i64>,
    jct_us: Option<i64>,
    tasks_finished: u32,
    total_task_time_us: i64,
}

#[derive(Serialize, Deserialize)]
struct TaskRow {
    job_id: u64,
    task_index: u32,
    stage: Option<u32>,
    submit_time_us: Option<i64>,
    last_schedule_us: Option<i64>,
    end_time_us: Option<i64>,
    last_end: Option<String>,
    runtime_us: Option<i64>,
    finished: bool,
    attempts: u32,
    evictions: u32,
    failures: u32,
    machine_id: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct MachineRow {
    machine_id: u64,
    name: Option<String>,
    added_us: i64,
    removed_us: Option<i64>,
    lifetime_us: Option<i64>,
    end_reason: Option<String>,
    censored: bool,
    platform: Option<String>,
    cpus: Option<f64>,
    memory: Option<f64>,
    vm_type: Option<String>,
    zone: Option<String>,
    preemptible: Option<bool>,
    launch_time_us: Option<i64>,
}

/// Times are checked against `MAX_TIME_US` on decode, so they fit `i64`.
fn t(us: u64) -> i64 {
    i64::try_from(us).unwrap_or(i64::MAX)
}

/// One Parquet file being written: rows are buffered as Arrow batches.
/// It is written under a temporary name beside its place, which it takes
/// only once every table is complete ([`TraceTablesWriter::finish`]): a
/// conversion that fails leaves the tables it would have replaced as they
/// were, and no part of its own (the temporary file goes with it).
struct TableFile<R> {
    name: &'static str,
    path: PathBuf,
    fields: Vec<FieldRef>,
    writer: ArrowWriter<File>,
    temp: tempfile::TempPath,
    buffer: Vec<R>,
    rows: u64,
}

/// A table written whole under its temporary name.
struct ClosedTable {
    summary: TableSummary,
    temp: tempfile::TempPath,
}

impl<R: Serialize> TableFile<R> {
    fn create(dir: &Path, name: &'static str, fields: Vec<FieldRef>) -> Result<Self, TableError> {
        let path = dir.join(format!("{name}.parquet"));
        let (file, temp) = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".parquet.partial")
            .tempfile_in(dir)
            .map_err(|source| TableError::Io {
                path: path.clone(),
                source,
            })?
            .into_parts();
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_max_row_group_row_count(Some(BATCH_ROWS))
            .build();
        let schema = Arc::new(Schema::new(fields.clone()));
        let writer = ArrowWriter::try_new(file, schema, Some(props)).map_err(|source| {
            TableError::Parquet {
                path: path.clone(),
                source,
            }
        })?;
        Ok(TableFile {
            name,
            path,
            fields,
            writer,
            temp,
            buffer: Vec::with_capacity(BATCH_ROWS),
            rows: 0,
        })
    }

    fn push(&mut self, row: R) -> Result<(), TableError> {
        self.buffer.push(row);
        if self.buffer.len() >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), TableError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let batch = serde_arrow::to_record_batch(&self.fields, &self.buffer).map_err(|source| {
            TableError::Arrow {
                table: self.name,
                source,
            }
        })?;
        self.rows += self.buffer.len() as u64;
        self.buffer.clear();
        self.writer
            .write(&batch)
            .map_err(|source| TableError::Parquet {
                path: self.path.clone(),
                source,
            })
    }

    /// Write the footer and sync the file, still under its temporary name.
    fn close(mut self) -> Result<ClosedTable, TableError> {
        self.flush()?;
        let file = self
            .writer
            .into_inner()
            .map_err(|source| TableError::Parquet {
                path: self.path.clone(),
                source,
            })?;
        let io = |source| TableError::Io {
            path: self.path.clone(),
            source,
        };
        file.sync_all().map_err(io)?;
        let bytes = file.metadata().map_err(io)?.len();
        Ok(ClosedTable {
            summary: TableSummary {
                name: self.name,
                path: self.path,
                rows: self.rows,
                bytes,
            },
            temp: self.temp,
        })
    }
}

impl ClosedTable {
    /// Take the table's place.
    fn persist(self) -> Result<TableSummary, TableError> {
        self.temp
            .persist(&self.summary.path)
            .map_err(|e| TableError::Io {
                path: self.summary.path.clone(),
                source: e.error,
            })?;
        Ok(self.summary)
    }
}

/// What was written to one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSummary {
    pub name: &'static str,
    pub path: PathBuf,
    pub rows: u64,
    pub bytes: u64,
}

fn fields_of<T: Deserialize<'static>>(name: &'static str) -> Result<Vec<FieldRef>, TableError> {
    let options = TracingOptions::default().strings_as_large_utf8(false);
    Vec::<FieldRef>::from_type::<T>(options).map_err(|source| TableError::Arrow {
        table: name,
        source,
    })
}

impl EventRow {
    fn from_event(e: &Event) -> Self {
        let mut row = EventRow {
            time_us: t(e.time_us()),
            ty: e.type_name().to_owned(),
            job_id: e.job_id(),
            task_index: None,
            stage: None,
            kind: None,
            machine_id: None,
            outcome: None,
            user: None,
            group: None,
            job_name: None,
            logical_name: None,
            scheduling_class: None,
            priority: None,
            cpu_request: None,
            mem_request: None,
            num_tasks: None,
            stages: None,
            partition: None,
            time_limit_us: None,
            deadline_us: None,
            cluster: None,
            platform: None,
            cpus: None,
            memory: None,
            vm_name: None,
            vm_type: None,
            zone: None,
            preemptible: None,
            launch_time_us: None,
            end_reason: None,
        };
        match e {
            Event::JobSubmitted(j) => {
                row.user = Some(j.user.clone());
                row.group = (!j.group.is_empty()).then(|| j.group.clone());
                row.job_name = Some(j.job_name.clone());
                row.logical_name = Some(j.logical_name.clone());
                row.scheduling_class = Some(j.scheduling_class);
                row.priority = Some(j.priority);
                row.cpu_request = Some(j.cpu_request);
                row.mem_request = Some(j.mem_request);
                row.num_tasks = Some(j.num_tasks);
                row.stages = j
                    .stages
                    .as_ref()
                    .map(|s| serde_json::to_string(s).expect("stages always serialise"));
                row.partition = (!j.partition.is_empty()).then(|| j.partition.clone());
                row.time_limit_us = j.time_limit_us.map(t);
                row.deadline_us = j.deadline_us.map(t);
                row.cluster = (!j.cluster.is_empty()).then(|| j.cluster.clone());
            }
            Event::Task(k) => {
                row.task_index = Some(k.task_index);
                row.stage = k.stage;
                row.kind = Some(k.kind.as_str().to_owned());
                row.machine_id = k.machine_id;
            }
            Event::JobEnded(j) => row.outcome = Some(j.outcome.as_str().to_owned()),
            Event::Machine(m) => {
                row.machine_id = Some(m.machine_id);
                row.kind = Some(m.kind.as_str().to_owned());
                row.platform = m.platform.clone();
                row.cpus = m.cpus;
                row.memory = m.memory;
                row.cluster = (!m.cluster.is_empty()).then(|| m.cluster.clone());
                if let Some(vm) = &m.vm {
                    row.vm_name = vm.name.clone();
                    row.vm_type = Some(vm.vm_type.clone());
                    row.zone = Some(vm.zone.clone());
                    row.preemptible = Some(vm.preemptible);
                    row.launch_time_us = Some(t(vm.launch_time_us));
                    row.end_reason = vm.end_reason.map(|r| r.as_str().to_owned());
                }
            }
        }
        row
    }
}

fn job_row(c: &CompletedJob) -> JobRow {
    let j = &c.job;
    JobRow {
        job_id: j.job_id,
        submit_time_us: j.submit_time_us.map(t),
        user: j.user.clone(),
        job_name: j.job_name.clone(),
        logical_name: j.logical_name.clone(),
        scheduling_class: j.scheduling_class,
        priority: j.priority,
        cpu_request: j.cpu_request,
        mem_request: j.mem_request,
        num_tasks: j.num_tasks,
        width: j.width,
        num_stages: j
            .stages
            .as_ref()
            .map(|s| u32::try_from(s.len()).unwrap_or(u32::MAX)),
        first_schedule_us: j.first_schedule_us.map(t),
        end_time_us: j.end_time_us.map(t),
        outcome: j.outcome.map(|o| o.as_str().to_owned()),
        finished: j.finished(),
        censored: j.censored(),
        runtime_us: j.runtime_us().map(t),
        jct_us: j.jct_us().map(t),
        tasks_finished: j.tasks_finished,
        total_task_time_us: t(j.total_task_time_us),
    }
}

fn machine_row(m: &MachineTruth) -> MachineRow {
    MachineRow {
        machine_id: m.machine_id,
        name: m.name.clone(),
        added_us: t(m.added_us),
        removed_us: m.removed_us.map(t),
        lifetime_us: m.lifetime_us().map(t),
        end_reason: m.end_reason.map(|r| r.as_str().to_owned()),
        censored: m.censored(),
        platform: m.platform.clone(),
        cpus: m.cpus,
        memory: m.memory,
        vm_type: m.vm_type.clone(),
        zone: m.zone.clone(),
        preemptible: m.preemptible,
        launch_time_us: m.launch_time_us.map(t),
    }
}

/// Writes the four trace tables into a directory.
pub struct TraceTablesWriter {
    events: TableFile<EventRow>,
    jobs: TableFile<JobRow>,
    tasks: TableFile<TaskRow>,
    machines: TableFile<MachineRow>,
}

impl TraceTablesWriter {
    /// Create `dir` (if needed) and the four table files in it, replacing
    /// any previous ones.
    pub fn create(dir: &Path) -> Result<Self, TableError> {
        std::fs::create_dir_all(dir).map_err(|source| TableError::Io {
            path: dir.to_owned(),
            source,
        })?;
        Ok(TraceTablesWriter {
            events: TableFile::create(dir, "events", fields_of::<EventRow>("events")?)?,
            jobs: TableFile::create(dir, "jobs", fields_of::<JobRow>("jobs")?)?,
            tasks: TableFile::create(dir, "tasks", fields_of::<TaskRow>("tasks")?)?,
            machines: TableFile::create(dir, "machines", fields_of::<MachineRow>("machines")?)?,
        })
    }

    pub fn write_event(&mut self, event: &Event) -> Result<(), TableError> {
        self.events.push(EventRow::from_event(event))
    }

    /// Write a job and its tasks.
    pub fn write_job(&mut self, job: &CompletedJob) -> Result<(), TableError> {
        self.jobs.push(job_row(job))?;
        for task in &job.tasks {
            self.tasks.push(TaskRow {
                job_id: task.job_id,
                task_index: task.task_index,
                stage: task.stage,
                submit_time_us: task.submit_time_us.map(t),
                last_schedule_us: task.last_schedule_us.map(t),
                end_time_us: task.end_time_us.map(t),
                last_end: task.last_end.map(|k: TaskKind| k.as_str().to_owned()),
                runtime_us: task.runtime_us().map(t),
                finished: task.finished(),
                attempts: task.attempts,
                evictions: task.evictions,
                failures: task.failures,
                machine_id: task.machine_id,
            })?;
        }
        Ok(())
    }

    pub fn write_machine(&mut self, machine: &MachineTruth) -> Result<(), TableError> {
        self.machines.push(machine_row(machine))
    }

    /// Flush and close every table, then put each in its place (the
    /// previous tables stay until all four are whole); what was written,
    /// in [`TABLES`] order.
    pub fn finish(self) -> Result<Vec<TableSummary>, TableError> {
        let closed = [
            self.events.close()?,
            self.jobs.close()?,
            self.tasks.close()?,
            self.machines.close()?,
        ];
        closed.into_iter().map(ClosedTable::persist).collect()
    }
}
