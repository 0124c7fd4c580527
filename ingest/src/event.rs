//! The canonical event model: the one stream every trace adapter produces and
//! every later stage (storage, predictor, simulator, Kafka topics) consumes.
//!
//! On the wire an event is one flat JSON object with a schema version `v`
//! and a `type` tag (see `docs/event-schema.json` and `docs/events.md`):
//!
//! ```json
//! {"v":1,"type":"task","time_us":600000000,"job_id":42,"task_index":0,"kind":"schedule","machine_id":7}
//! ```
//!
//! Decoding goes through [`decode`], which is strict: an unknown version, an
//! unknown field, a missing id or a value of the wrong type is an error that
//! names the field. Encoding goes through [`encode`] / [`Event::to_json`].

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// The schema version this build reads and writes.
pub const SCHEMA_VERSION: u32 = 1;

/// Times are microseconds; they must fit an `i64` so that arithmetic on them
/// (durations, Parquet `Int64` columns) never overflows.
pub const MAX_TIME_US: u64 = i64::MAX as u64;

/// The longest string field (`user`, `job_name`, `zone`, a stage's `name`,
/// …) a decoded event may carry, in bytes of UTF-8. Real traces' strings
/// are far shorter (hashes and names under 100 bytes); the bound keeps one
/// hostile message from being copied into every record, decision and log
/// entry derived from it.
pub const MAX_STRING_BYTES: usize = 4096;

/// The most tasks one job may declare. The service keeps a slot per task of
/// every live job, so an unbounded `num_tasks` would let one message claim
/// gigabytes; the largest jobs in the public traces have under 100,000.
pub const MAX_TASKS_PER_JOB: u32 = 1 << 20;

/// Error messages quote the offending input (serde includes whole strings);
/// they are cut to this many characters so that a dead letter's error
/// header stays small whatever the message held.
const MAX_ERROR_CHARS: usize = 256;

/// One canonical event.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    JobSubmitted(JobSubmitted),
    Task(TaskEvent),
    JobEnded(JobEnded),
    Machine(MachineEvent),
}

/// A job entered the system.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSubmitted {
    pub time_us: u64,
    pub job_id: u64,
    pub user: String,
    /// The user's group (Unix group, or the HPC log's group); empty where
    /// the source has none. A feature of the history predictors.
    pub group: String,
    pub job_name: String,
    pub logical_name: String,
    pub scheduling_class: u8,
    pub priority: u32,
    /// Requested CPU per task (trace units: normalised for Google, cores for Alibaba).
    pub cpu_request: f64,
    /// Requested memory per task (trace units).
    pub mem_request: f64,
    pub num_tasks: u32,
    /// The scheduler partition (queue) the job was submitted to; empty
    /// where the source has none.
    pub partition: String,
    /// The cluster the job runs on, in a federation of clusters served by
    /// one jobcast; empty for the one cluster of a source that names none.
    pub cluster: String,
    /// The wall-clock limit the user asked for, µs; none where the source
    /// has none or the job is unlimited. In HPC runtime models the
    /// requested time is the strongest single predictor.
    pub time_limit_us: Option<u64>,
    /// When the whole job must have ended, µs on the events' clock; none
    /// where the source has none. A bag of tasks with a deadline is
    /// scheduled on spot VMs by Teylo et al.'s maps
    /// (`jobcast_predictor::deadlines`).
    pub deadline_us: Option<u64>,
    /// Present for DAG jobs: the stages and their dependencies. Tasks are
    /// numbered stage by stage in this order: the first stage's tasks are
    /// `0..n₀`, the next stage's `n₀..n₀+n₁`, …
    pub stages: Option<Vec<Stage>>,
}

impl JobSubmitted {
    /// A job of `num_tasks` tasks submitted at `time_us`, every other
    /// field empty or zero (no user, group, names, requests, partition, time
    /// limit or stages): a base for `JobSubmitted { field: …, ..JobSubmitted::new(…) }`.
    pub fn new(job_id: u64, time_us: u64, num_tasks: u32) -> Self {
        Self {
            time_us,
            job_id,
            user: String::new(),
            group: String::new(),
            job_name: String::new(),
            logical_name: String::new(),
            scheduling_class: 0,
            priority: 0,
            cpu_request: 0.0,
            mem_request: 0.0,
            num_tasks,
            partition: String::new(),
            cluster: String::new(),
            time_limit_us: None,
            deadline_us: None,
            stages: None,
        }
    }
}

/// One stage of a DAG job. A stage's tasks may start only after every task
/// of every parent stage has finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stage {
    pub id: u32,
    #[serde(default)]
    pub parents: Vec<u32>,
    pub num_tasks: u32,
    /// The trace's own name for the stage (e.g. Alibaba's `M5_3_4`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Something happened to one task of a job.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskEvent {
    pub time_us: u64,
    pub job_id: u64,
    pub task_index: u32,
    pub kind: TaskKind,
    pub machine_id: Option<u64>,
    /// The DAG stage the task belongs to, for DAG jobs.
    pub stage: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    Submit,
    Schedule,
    Finish,
    Fail,
    Kill,
    Evict,
    Lost,
    Update,
    /// Killed by the scheduler at the wall-clock limit the job was given
    /// (Slurm's TIMEOUT): a run that was cut short, not one that failed.
    Timeout,
}

impl TaskKind {
    /// Every kind, in the order their stored indices follow: a new kind
    /// goes at the end.
    pub const ALL: [TaskKind; 9] = [
        TaskKind::Submit,
        TaskKind::Schedule,
        TaskKind::Finish,
        TaskKind::Fail,
        TaskKind::Kill,
        TaskKind::Evict,
        TaskKind::Lost,
        TaskKind::Update,
        TaskKind::Timeout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::Submit => "submit",
            TaskKind::Schedule => "schedule",
            TaskKind::Finish => "finish",
            TaskKind::Fail => "fail",
            TaskKind::Kill => "kill",
            TaskKind::Evict => "evict",
            TaskKind::Lost => "lost",
            TaskKind::Update => "update",
            TaskKind::Timeout => "timeout",
        }
    }

    /// Does this event end the task's current attempt?
    pub fn ends_attempt(self) -> bool {
        matches!(
            self,
            TaskKind::Finish
                | TaskKind::Fail
                | TaskKind::Kill
                | TaskKind::Evict
                | TaskKind::Lost
                | TaskKind::Timeout
        )
    }
}

/// A job left the system.
#[derive(Debug, Clone, PartialEq)]
pub struct JobEnded {
    pub time_us: u64,
    pub job_id: u64,
    pub outcome: JobOutcome,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobOutcome {
    Finish,
    Fail,
    Kill,
    Lost,
}

impl JobOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            JobOutcome::Finish => "finish",
            JobOutcome::Fail => "fail",
            JobOutcome::Kill => "kill",
            JobOutcome::Lost => "lost",
        }
    }
}

/// A machine (or cloud VM) was added, removed or changed.
#[derive(Debug, Clone, PartialEq)]
pub struct MachineEvent {
    pub time_us: u64,
    pub machine_id: u64,
    pub kind: MachineKind,
    pub platform: Option<String>,
    pub cpus: Option<f64>,
    pub memory: Option<f64>,
    /// Present for cloud VMs.
    pub vm: Option<VmInfo>,
    /// The cluster the machine belongs to; empty for the one cluster of a
    /// source that names none.
    pub cluster: String,
}

impl MachineEvent {
    /// An event of the cloud VM `vm`, its size unsaid (the lifetime
    /// sources report none).
    pub fn of_vm(time_us: u64, machine_id: u64, kind: MachineKind, vm: VmInfo) -> Self {
        MachineEvent {
            time_us,
            machine_id,
            kind,
            platform: None,
            cpus: None,
            memory: None,
            vm: Some(vm),
            cluster: String::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MachineKind {
    Add,
    Remove,
    Update,
    /// A spot VM paused by its provider, memory and disk kept: its tasks
    /// stop until it resumes. Not the end of its life.
    Hibernate,
    /// A hibernated VM running again.
    Resume,
}

impl MachineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MachineKind::Add => "add",
            MachineKind::Remove => "remove",
            MachineKind::Update => "update",
            MachineKind::Hibernate => "hibernate",
            MachineKind::Resume => "resume",
        }
    }
}

/// What a cloud provider tells about a VM.
#[derive(Debug, Clone, PartialEq)]
pub struct VmInfo {
    pub name: Option<String>,
    pub vm_type: String,
    pub zone: String,
    pub preemptible: bool,
    pub launch_time_us: u64,
    /// Why the VM went away; set on its `remove` event.
    pub end_reason: Option<EndReason>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The provider took the VM back: an observed preemption.
    Preempted,
    /// The user stopped the VM: its lifetime is right-censored.
    Stopped,
}

impl EndReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Preempted => "preempted",
            EndReason::Stopped => "stopped",
        }
    }
}

impl Event {
    pub fn time_us(&self) -> u64 {
        match self {
            Event::JobSubmitted(e) => e.time_us,
            Event::Task(e) => e.time_us,
            Event::JobEnded(e) => e.time_us,
            Event::Machine(e) => e.time_us,
        }
    }

    /// The job the event belongs to; `None` for machine events.
    pub fn job_id(&self) -> Option<u64> {
        match self {
            Event::JobSubmitted(e) => Some(e.job_id),
            Event::Task(e) => Some(e.job_id),
            Event::JobEnded(e) => Some(e.job_id),
            Event::Machine(_) => None,
        }
    }

    /// The wire name of the event's type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::JobSubmitted(_) => "job_submitted",
            Event::Task(_) => "task",
            Event::JobEnded(_) => "job_ended",
            Event::Machine(_) => "machine",
        }
    }

    /// Apply the decoder's value limits to an event however it was built:
    /// times at most [`MAX_TIME_US`], strings at most [`MAX_STRING_BYTES`],
    /// `num_tasks` at most [`MAX_TASKS_PER_JOB`] and equal to its stages'
    /// sum, requests and capacities finite and non-negative. [`decode`]
    /// ends with this check, and trace adapters run it on every event they
    /// build, so an adapter can never emit what the service would refuse.
    /// The error is `OutOfRange` and names the field.
    pub fn check_limits(&self) -> Result<(), DecodeError> {
        check_time("time_us", self.time_us())?;
        match self {
            Event::JobSubmitted(j) => {
                check_len("user", &j.user)?;
                check_len("group", &j.group)?;
                check_len("job_name", &j.job_name)?;
                check_len("logical_name", &j.logical_name)?;
                check_len("partition", &j.partition)?;
                check_len("cluster", &j.cluster)?;
                if let Some(limit) = j.time_limit_us {
                    check_time("time_limit_us", limit)?;
                }
                if let Some(deadline) = j.deadline_us {
                    check_time("deadline_us", deadline)?;
                }
                if j.num_tasks > MAX_TASKS_PER_JOB {
                    return Err(DecodeError::new(
                        DecodeErrorKind::OutOfRange,
                        Some("num_tasks"),
                        format!(
                            "{} exceeds the most tasks a job may have, {MAX_TASKS_PER_JOB}",
                            j.num_tasks
                        ),
                    ));
                }
                if let Some(stages) = &j.stages {
                    for (i, stage) in stages.iter().enumerate() {
                        if let Some(name) = &stage.name {
                            check_len(&format!("stages[{i}].name"), name)?;
                        }
                    }
                    let total: u64 = stages.iter().map(|s| u64::from(s.num_tasks)).sum();
                    if total != u64::from(j.num_tasks) {
                        return Err(DecodeError::new(
                            DecodeErrorKind::OutOfRange,
                            Some("stages"),
                            format!(
                                "stage task counts add up to {total}, but num_tasks is {}",
                                j.num_tasks
                            ),
                        ));
                    }
                }
                check_nonneg("cpu_request", Some(j.cpu_request))?;
                check_nonneg("mem_request", Some(j.mem_request))?;
            }
            Event::Task(_) | Event::JobEnded(_) => {}
            Event::Machine(m) => {
                if let Some(platform) = &m.platform {
                    check_len("platform", platform)?;
                }
                check_len("cluster", &m.cluster)?;
                check_nonneg("cpus", m.cpus)?;
                check_nonneg("memory", m.memory)?;
                if let Some(vm) = &m.vm {
                    if let Some(name) = &vm.name {
                        check_len("vm_name", name)?;
                    }
                    check_len("vm_type", &vm.vm_type)?;
                    check_len("zone", &vm.zone)?;
                    check_time("launch_time_us", vm.launch_time_us)?;
                }
            }
        }
        Ok(())
    }

    /// Serialise to one line of JSON (no trailing newline).
    pub fn to_json(&self) -> String {
        serde_json::to_string(&WireEvent::from(self)).expect("wire events always serialise")
    }
}

/// Serialise an event into `out` as JSON, without a trailing newline.
pub fn encode(event: &Event, out: &mut Vec<u8>) {
    serde_json::to_writer(out, &WireEvent::from(event)).expect("wire events always serialise")
}

/// Why an event could not be decoded. `field` names the offending field
/// (a JSON path such as `stages[2].num_tasks`) when there is one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{message}", field.as_deref().map(|f| format!("field `{f}`: ")).unwrap_or_default())]
pub struct DecodeError {
    pub kind: DecodeErrorKind,
    pub field: Option<String>,
    pub message: String,
}

/// A coarse class of decode error, stable for metrics labels and
/// dead-letter reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecodeErrorKind {
    /// Not JSON at all, or truncated, or not UTF-8.
    Syntax,
    /// `v` is not a version this build reads.
    UnsupportedVersion,
    /// `type` is not a known event type.
    UnknownType,
    /// A required field is absent.
    MissingField,
    /// A field has the wrong JSON type, an unknown enum value, or is unknown.
    InvalidField,
    /// A value is well-typed but out of range (e.g. a time beyond `i64::MAX`).
    OutOfRange,
}

impl DecodeErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DecodeErrorKind::Syntax => "syntax",
            DecodeErrorKind::UnsupportedVersion => "unsupported_version",
            DecodeErrorKind::UnknownType => "unknown_type",
            DecodeErrorKind::MissingField => "missing_field",
            DecodeErrorKind::InvalidField => "invalid_field",
            DecodeErrorKind::OutOfRange => "out_of_range",
        }
    }
}

/// `text` cut to [`MAX_ERROR_CHARS`] characters, marked with `…` if cut.
fn bounded(text: String) -> String {
    match text.char_indices().nth(MAX_ERROR_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}

impl DecodeError {
    fn new(kind: DecodeErrorKind, field: Option<&str>, message: impl Into<String>) -> Self {
        DecodeError {
            kind,
            field: field.map(|f| bounded(f.to_owned())),
            message: bounded(message.into()),
        }
    }

    fn missing(field: &str, ty: &str) -> Self {
        Self::new(
            DecodeErrorKind::MissingField,
            Some(field),
            format!("required for events of type `{ty}` but absent"),
        )
    }
}

/// Decode one event from JSON bytes, strictly.
pub fn decode(bytes: &[u8]) -> Result<Event, DecodeError> {
    // Tracking the path costs on every field of every event; only a
    // failure needs it, and decoding again fails the same way.
    match serde_json::from_slice::<WireEvent>(bytes) {
        Ok(wire) => Event::try_from(wire),
        Err(_) => Err(explain_failure(bytes)),
    }
}

/// Why `bytes` is not a wire event: decoded again, tracking the path of
/// the field where it fails.
#[cold]
fn explain_failure(bytes: &[u8]) -> DecodeError {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let error = serde_path_to_error::deserialize::<_, WireEvent>(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let mut field = (path != "." && !path.is_empty()).then_some(path);
        let message = inner.to_string();
        let kind = match inner.classify() {
            serde_json::error::Category::Data => {
                if let Some(name) = message
                    .strip_prefix("missing field `")
                    .and_then(|rest| rest.split('`').next())
                {
                    // serde reports a missing field at its parent's path.
                    field = Some(match field {
                        Some(parent) => format!("{parent}.{name}"),
                        None => name.to_owned(),
                    });
                    DecodeErrorKind::MissingField
                } else {
                    DecodeErrorKind::InvalidField
                }
            }
            // serde_json reports some wrong types (a number where an enum
            // such as `outcome` is expected) as a syntax error at the
            // field; if the document itself is well-formed JSON, the
            // field's value is what is wrong. (Skipping a string does not
            // check its UTF-8, hence the separate check.)
            _ if field.is_some()
                && std::str::from_utf8(bytes).is_ok()
                && serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok() =>
            {
                DecodeErrorKind::InvalidField
            }
            _ => DecodeErrorKind::Syntax,
        };
        DecodeError {
            kind,
            field: field.map(bounded),
            message: bounded(message),
        }
    });
    if let Err(error) = error {
        return error;
    }
    match de.end() {
        Err(e) => DecodeError::new(DecodeErrorKind::Syntax, None, format!("trailing data: {e}")),
        // Unreachable while both decoders agree; say so rather than panic.
        Ok(()) => DecodeError::new(
            DecodeErrorKind::Syntax,
            None,
            "rejected by the JSON decoder, accepted when decoded again",
        ),
    }
}

/// The flat wire form. Every field but `v` and `type` is optional here;
/// which ones are required depends on `type` and is checked in `TryFrom`.
/// `type` and `kind` borrow from the message (unless escaped): they are
/// only matched, never kept.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireEvent<'a> {
    v: u32,
    #[serde(rename = "type", borrow)]
    ty: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    time_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    job_id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    job_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    logical_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduling_class: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_request: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mem_request: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    num_tasks: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stages: Option<Vec<Stage>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    time_limit_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deadline_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task_index: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stage: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    machine_id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<JobOutcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    platform: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpus: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    vm_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    vm_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    zone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    preemptible: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    launch_time_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    end_reason: Option<EndReason>,
}

fn check_time(field: &str, t: u64) -> Result<(), DecodeError> {
    if t > MAX_TIME_US {
        return Err(DecodeError::new(
            DecodeErrorKind::OutOfRange,
            Some(field),
            format!("{t} exceeds the largest time, {MAX_TIME_US} µs"),
        ));
    }
    Ok(())
}

fn check_len(field: &str, s: &str) -> Result<(), DecodeError> {
    if s.len() > MAX_STRING_BYTES {
        return Err(DecodeError::new(
            DecodeErrorKind::OutOfRange,
            Some(field),
            format!(
                "{} bytes long; strings are limited to {MAX_STRING_BYTES} bytes",
                s.len()
            ),
        ));
    }
    Ok(())
}

fn check_nonneg(field: &str, x: Option<f64>) -> Result<(), DecodeError> {
    match x {
        Some(v) if !(v.is_finite() && v >= 0.0) => Err(DecodeError::new(
            DecodeErrorKind::OutOfRange,
            Some(field),
            format!("{v} is not a finite, non-negative number"),
        )),
        _ => Ok(()),
    }
}

/// The optional wire fields each event type may carry (`v`, `type` and
/// `time_us` are common to all).
const JOB_SUBMITTED_FIELDS: &[&str] = &[
    "job_id",
    "user",
    "group",
    "job_name",
    "logical_name",
    "scheduling_class",
    "priority",
    "cpu_request",
    "mem_request",
    "num_tasks",
    "stages",
    "partition",
    "cluster",
    "time_limit_us",
    "deadline_us",
];
const TASK_FIELDS: &[&str] = &["job_id", "task_index", "stage", "kind", "machine_id"];
const JOB_ENDED_FIELDS: &[&str] = &["job_id", "outcome"];
const MACHINE_FIELDS: &[&str] = &[
    "machine_id",
    "kind",
    "platform",
    "cpus",
    "memory",
    "vm_name",
    "vm_type",
    "zone",
    "preemptible",
    "launch_time_us",
    "end_reason",
    "cluster",
];

impl WireEvent<'_> {
    /// Every optional field and whether it is set.
    fn presence(&self) -> [(&'static str, bool); 29] {
        [
            ("job_id", self.job_id.is_some()),
            ("user", self.user.is_some()),
            ("group", self.group.is_some()),
            ("job_name", self.job_name.is_some()),
            ("logical_name", self.logical_name.is_some()),
            ("scheduling_class", self.scheduling_class.is_some()),
            ("priority", self.priority.is_some()),
            ("cpu_request", self.cpu_request.is_some()),
            ("mem_request", self.mem_request.is_some()),
            ("num_tasks", self.num_tasks.is_some()),
            ("stages", self.stages.is_some()),
            ("partition", self.partition.is_some()),
            ("cluster", self.cluster.is_some()),
            ("time_limit_us", self.time_limit_us.is_some()),
            ("deadline_us", self.deadline_us.is_some()),
            ("task_index", self.task_index.is_some()),
            ("stage", self.stage.is_some()),
            ("kind", self.kind.is_some()),
            ("machine_id", self.machine_id.is_some()),
            ("outcome", self.outcome.is_some()),
            ("platform", self.platform.is_some()),
            ("cpus", self.cpus.is_some()),
            ("memory", self.memory.is_some()),
            ("vm_name", self.vm_name.is_some()),
            ("vm_type", self.vm_type.is_some()),
            ("zone", self.zone.is_some()),
            ("preemptible", self.preemptible.is_some()),
            ("launch_time_us", self.launch_time_us.is_some()),
            ("end_reason", self.end_reason.is_some()),
        ]
    }

    /// Reject an over-long `type` or `kind` before they are matched: these
    /// two strings do not survive into the [`Event`], so
    /// [`Event::check_limits`] cannot see them.
    fn check_tags(&self) -> Result<(), DecodeError> {
        check_len("type", &self.ty)?;
        if let Some(kind) = &self.kind {
            check_len("kind", kind)?;
        }
        Ok(())
    }

    /// Reject fields that do not belong to the event's type, so that a
    /// typo'd producer is caught rather than silently half-read.
    fn reject_foreign(&self, ty: &str, allowed: &[&str]) -> Result<(), DecodeError> {
        let foreign = self
            .presence()
            .into_iter()
            .find(|(name, set)| *set && !allowed.contains(name));
        match foreign {
            Some((name, _)) => Err(DecodeError::new(
                DecodeErrorKind::InvalidField,
                Some(name),
                format!("not a field of events of type `{ty}`"),
            )),
            None => Ok(()),
        }
    }
}

fn parse_kind<'a, T: Deserialize<'a>>(field: &str, s: &'a str) -> Result<T, DecodeError> {
    use serde::de::IntoDeserializer;
    let name: serde::de::value::StrDeserializer<'a, serde::de::value::Error> =
        s.into_deserializer();
    T::deserialize(name).map_err(|_| {
        DecodeError::new(
            DecodeErrorKind::InvalidField,
            Some(field),
            format!("unknown value `{s}`"),
        )
    })
}

impl TryFrom<WireEvent<'_>> for Event {
    type Error = DecodeError;

    fn try_from(w: WireEvent<'_>) -> Result<Self, DecodeError> {
        if w.v != SCHEMA_VERSION {
            return Err(DecodeError::new(
                DecodeErrorKind::UnsupportedVersion,
                Some("v"),
                format!(
                    "schema version {} is not supported (this build reads version {SCHEMA_VERSION})",
                    w.v
                ),
            ));
        }
        w.check_tags()?;
        let ty: &str = &w.ty;
        let req = |name: &'static str, present: bool| {
            if present {
                Ok(())
            } else {
                Err(DecodeError::missing(name, ty))
            }
        };
        let time_us = w
            .time_us
            .ok_or_else(|| DecodeError::missing("time_us", ty))?;
        let event = match ty {
            "job_submitted" => {
                w.reject_foreign(ty, JOB_SUBMITTED_FIELDS)?;
                let job_id = w.job_id.ok_or_else(|| DecodeError::missing("job_id", ty))?;
                let num_tasks = w
                    .num_tasks
                    .ok_or_else(|| DecodeError::missing("num_tasks", ty))?;
                Event::JobSubmitted(JobSubmitted {
                    time_us,
                    job_id,
                    user: w.user.unwrap_or_default(),
                    group: w.group.unwrap_or_default(),
                    job_name: w.job_name.unwrap_or_default(),
                    logical_name: w.logical_name.unwrap_or_default(),
                    scheduling_class: w.scheduling_class.unwrap_or(0),
                    priority: w.priority.unwrap_or(0),
                    cpu_request: w.cpu_request.unwrap_or(0.0),
                    mem_request: w.mem_request.unwrap_or(0.0),
                    num_tasks,
                    partition: w.partition.unwrap_or_default(),
                    cluster: w.cluster.unwrap_or_default(),
                    time_limit_us: w.time_limit_us,
                    deadline_us: w.deadline_us,
                    stages: w.stages,
                })
            }
            "task" => {
                w.reject_foreign(ty, TASK_FIELDS)?;
                let job_id = w.job_id.ok_or_else(|| DecodeError::missing("job_id", ty))?;
                let task_index = w
                    .task_index
                    .ok_or_else(|| DecodeError::missing("task_index", ty))?;
                req("kind", w.kind.is_some())?;
                let kind = parse_kind("kind", w.kind.as_deref().unwrap_or_default())?;
                Event::Task(TaskEvent {
                    time_us,
                    job_id,
                    task_index,
                    kind,
                    machine_id: w.machine_id,
                    stage: w.stage,
                })
            }
            "job_ended" => {
                w.reject_foreign(ty, JOB_ENDED_FIELDS)?;
                let job_id = w.job_id.ok_or_else(|| DecodeError::missing("job_id", ty))?;
                let outcome = w
                    .outcome
                    .ok_or_else(|| DecodeError::missing("outcome", ty))?;
                Event::JobEnded(JobEnded {
                    time_us,
                    job_id,
                    outcome,
                })
            }
            "machine" => {
                w.reject_foreign(ty, MACHINE_FIELDS)?;
                let machine_id = w
                    .machine_id
                    .ok_or_else(|| DecodeError::missing("machine_id", ty))?;
                req("kind", w.kind.is_some())?;
                let kind = parse_kind("kind", w.kind.as_deref().unwrap_or_default())?;
                let is_vm = w.vm_type.is_some()
                    || w.zone.is_some()
                    || w.preemptible.is_some()
                    || w.launch_time_us.is_some()
                    || w.end_reason.is_some()
                    || w.vm_name.is_some();
                let vm = if is_vm {
                    Some(VmInfo {
                        name: w.vm_name,
                        vm_type: w
                            .vm_type
                            .ok_or_else(|| DecodeError::missing("vm_type", ty))?,
                        zone: w.zone.ok_or_else(|| DecodeError::missing("zone", ty))?,
                        preemptible: w
                            .preemptible
                            .ok_or_else(|| DecodeError::missing("preemptible", ty))?,
                        launch_time_us: w
                            .launch_time_us
                            .ok_or_else(|| DecodeError::missing("launch_time_us", ty))?,
                        end_reason: w.end_reason,
                    })
                } else {
                    None
                };
                Event::Machine(MachineEvent {
                    time_us,
                    machine_id,
                    kind,
                    platform: w.platform,
                    cpus: w.cpus,
                    memory: w.memory,
                    vm,
                    cluster: w.cluster.unwrap_or_default(),
                })
            }
            other => {
                return Err(DecodeError::new(
                    DecodeErrorKind::UnknownType,
                    Some("type"),
                    format!(
                        "unknown event type `{other}` (expected job_submitted, task, job_ended or machine)"
                    ),
                ));
            }
        };
        event.check_limits()?;
        Ok(event)
    }
}

impl<'a> From<&'a Event> for WireEvent<'a> {
    fn from(e: &'a Event) -> Self {
        let mut w = WireEvent {
            v: SCHEMA_VERSION,
            ty: Cow::Borrowed(e.type_name()),
            time_us: Some(e.time_us()),
            job_id: e.job_id(),
            ..WireEvent::default()
        };
        match e {
            Event::JobSubmitted(j) => {
                w.user = Some(j.user.clone());
                w.group = (!j.group.is_empty()).then(|| j.group.clone());
                w.job_name = Some(j.job_name.clone());
                w.logical_name = Some(j.logical_name.clone());
                w.scheduling_class = Some(j.scheduling_class);
                w.priority = Some(j.priority);
                w.cpu_request = Some(j.cpu_request);
                w.mem_request = Some(j.mem_request);
                w.num_tasks = Some(j.num_tasks);
                w.stages = j.stages.clone();
                w.partition = (!j.partition.is_empty()).then(|| j.partition.clone());
                w.cluster = (!j.cluster.is_empty()).then(|| j.cluster.clone());
                w.time_limit_us = j.time_limit_us;
                w.deadline_us = j.deadline_us;
            }
            Event::Task(t) => {
                w.task_index = Some(t.task_index);
                w.kind = Some(Cow::Borrowed(t.kind.as_str()));
                w.machine_id = t.machine_id;
                w.stage = t.stage;
            }
            Event::JobEnded(j) => w.outcome = Some(j.outcome),
            Event::Machine(m) => {
                w.machine_id = Some(m.machine_id);
                w.kind = Some(Cow::Borrowed(m.kind.as_str()));
                w.platform = m.platform.clone();
                w.cpus = m.cpus;
                w.memory = m.memory;
                w.cluster = (!m.cluster.is_empty()).then(|| m.cluster.clone());
                if let Some(vm) = &m.vm {
                    w.vm_name = vm.name.clone();
                    w.vm_type = Some(vm.vm_type.clone());
                    w.zone = Some(vm.zone.clone());
                    w.preemptible = Some(vm.preemptible);
                    w.launch_time_us = Some(vm.launch_time_us);
                    w.end_reason = vm.end_reason;
                }
            }
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Event {
        Event::JobSubmitted(JobSubmitted {
            user: "alice".into(),
            job_name: "wordcount".into(),
            logical_name: "wc".into(),
            scheduling_class: 2,
            priority: 9,
            cpu_request: 0.125,
            mem_request: 0.0625,
            cluster: "west".into(),
            stages: Some(vec![
                Stage {
                    id: 1,
                    parents: vec![],
                    num_tasks: 2,
                    name: Some("M1".into()),
                },
                Stage {
                    id: 2,
                    parents: vec![1],
                    num_tasks: 1,
                    name: Some("R2_1".into()),
                },
            ]),
            ..JobSubmitted::new(42, 600_000_000, 3)
        })
    }

    #[test]
    fn every_event_type_round_trips() {
        let events = vec![
            job(),
            Event::Task(TaskEvent {
                time_us: 1,
                job_id: 42,
                task_index: 0,
                kind: TaskKind::Schedule,
                machine_id: Some(7),
                stage: Some(1),
            }),
            Event::JobEnded(JobEnded {
                time_us: 5,
                job_id: 42,
                outcome: JobOutcome::Kill,
            }),
            Event::Machine(MachineEvent {
                time_us: 0,
                machine_id: 9,
                kind: MachineKind::Remove,
                platform: Some("p".into()),
                cpus: Some(0.5),
                memory: Some(0.25),
                vm: Some(VmInfo {
                    name: Some("vm-1".into()),
                    vm_type: "n1-highcpu-16".into(),
                    zone: "us-east1-b".into(),
                    preemptible: true,
                    launch_time_us: 0,
                    end_reason: Some(EndReason::Preempted),
                }),
                cluster: "east".into(),
            }),
        ];
        for e in events {
            let json = e.to_json();
            assert_eq!(decode(json.as_bytes()).unwrap(), e, "{json}");
        }
    }

    #[test]
    fn errors_name_the_field() {
        let cases: &[(&str, DecodeErrorKind, Option<&str>)] = &[
            ("{", DecodeErrorKind::Syntax, None),
            ("not json", DecodeErrorKind::Syntax, None),
            // A whole event with more after it.
            (
                r#"{"v":1,"type":"task","time_us":1,"job_id":1,"task_index":0,"kind":"finish"} {}"#,
                DecodeErrorKind::Syntax,
                None,
            ),
            (
                r#"{"v":2,"type":"task"}"#,
                DecodeErrorKind::UnsupportedVersion,
                Some("v"),
            ),
            (
                r#"{"type":"task"}"#,
                DecodeErrorKind::MissingField,
                Some("v"),
            ),
            (
                r#"{"v":1,"type":"party","time_us":1}"#,
                DecodeErrorKind::UnknownType,
                Some("type"),
            ),
            (
                r#"{"v":1,"type":"task","time_us":1,"task_index":0,"kind":"finish"}"#,
                DecodeErrorKind::MissingField,
                Some("job_id"),
            ),
            (
                r#"{"v":1,"type":"task","time_us":1,"job_id":"x","task_index":0,"kind":"finish"}"#,
                DecodeErrorKind::InvalidField,
                Some("job_id"),
            ),
            (
                r#"{"v":1,"type":"task","time_us":-5,"job_id":1,"task_index":0,"kind":"finish"}"#,
                DecodeErrorKind::InvalidField,
                Some("time_us"),
            ),
            (
                r#"{"v":1,"type":"task","time_us":9223372036854775808,"job_id":1,"task_index":0,"kind":"finish"}"#,
                DecodeErrorKind::OutOfRange,
                Some("time_us"),
            ),
            (
                r#"{"v":1,"type":"job_ended","time_us":1,"job_id":1,"outcome":0}"#,
                DecodeErrorKind::InvalidField,
                Some("outcome"),
            ),
            (
                r#"{"v":1,"type":"machine","time_us":1,"machine_id":1,"kind":"add","vm_type":"t","zone":"z","preemptible":true,"launch_time_us":0,"end_reason":[]}"#,
                DecodeErrorKind::InvalidField,
                Some("end_reason"),
            ),
            (
                r#"{"v":1,"type":"task","time_us":1,"job_id":1,"task_index":0,"kind":"explode"}"#,
                DecodeErrorKind::InvalidField,
                Some("kind"),
            ),
            (
                r#"{"v":1,"type":"task","time_us":1,"job_id":1,"task_index":0,"kind":"finish","colour":1}"#,
                DecodeErrorKind::InvalidField,
                None,
            ),
            (
                r#"{"v":1,"type":"job_ended","time_us":1,"job_id":1,"outcome":"finish","zone":"z"}"#,
                DecodeErrorKind::InvalidField,
                Some("zone"),
            ),
            (
                r#"{"v":1,"type":"job_submitted","time_us":1,"job_id":1,"num_tasks":3,"stages":[{"id":1,"num_tasks":"2"}]}"#,
                DecodeErrorKind::InvalidField,
                Some("stages[0].num_tasks"),
            ),
            (
                r#"{"v":1,"type":"job_submitted","time_us":1,"job_id":1,"num_tasks":3,"stages":[{"id":1,"num_tasks":2}]}"#,
                DecodeErrorKind::OutOfRange,
                Some("stages"),
            ),
            (
                r#"{"v":1,"type":"machine","time_us":1,"machine_id":1,"kind":"add","zone":"z"}"#,
                DecodeErrorKind::MissingField,
                Some("vm_type"),
            ),
            (
                r#"{"v":1,"type":"job_submitted","time_us":1,"job_id":1,"num_tasks":1,"cpu_request":-1}"#,
                DecodeErrorKind::OutOfRange,
                Some("cpu_request"),
            ),
            (
                "{\"v\":1,\"type\":\"task\",\"time_us\":1,\"job_id\":1,\"task_index\":0,\"kind\":\"finish\"} x",
                DecodeErrorKind::Syntax,
                None,
            ),
        ];
        for (input, kind, field) in cases {
            let err = decode(input.as_bytes()).expect_err(input);
            assert_eq!(err.kind, *kind, "{input}: {err}");
            if let Some(f) = field {
                assert_eq!(err.field.as_deref(), Some(*f), "{input}: {err}");
                assert!(err.to_string().contains(f), "{err}");
            }
        }
    }

    fn job_with_user(user: &str) -> Vec<u8> {
        format!(
            r#"{{"v":1,"type":"job_submitted","time_us":1,"job_id":1,"num_tasks":1,"user":"{user}"}}"#
        )
        .into_bytes()
    }

    #[test]
    fn strings_longer_than_the_limit_are_out_of_range() {
        let at_limit = "u".repeat(MAX_STRING_BYTES);
        assert!(decode(&job_with_user(&at_limit)).is_ok());
        // Three megabytes, multi-byte characters: the limit is in bytes.
        let huge = "é".repeat(3 << 19);
        for bytes in [job_with_user(&format!("{at_limit}x")), job_with_user(&huge)] {
            let err = decode(&bytes).unwrap_err();
            assert_eq!(err.kind, DecodeErrorKind::OutOfRange, "{err}");
            assert_eq!(err.field.as_deref(), Some("user"));
            assert!(err.to_string().contains("limited to 4096 bytes"), "{err}");
        }
        let cases = [
            (format!(r#"{{"v":1,"type":"{huge}","time_us":1}}"#), "type"),
            (
                format!(
                    r#"{{"v":1,"type":"job_submitted","time_us":1,"job_id":1,"num_tasks":1,"stages":[{{"id":1,"num_tasks":1,"name":"{huge}"}}]}}"#
                ),
                "stages[0].name",
            ),
            (
                format!(
                    r#"{{"v":1,"type":"machine","time_us":1,"machine_id":1,"kind":"add","vm_type":"t","zone":"{huge}","preemptible":true,"launch_time_us":0}}"#
                ),
                "zone",
            ),
        ];
        for (json, field) in cases {
            let err = decode(json.as_bytes()).unwrap_err();
            assert_eq!(err.kind, DecodeErrorKind::OutOfRange, "{field}: {err}");
            assert_eq!(err.field.as_deref(), Some(field));
        }
    }

    #[test]
    fn error_messages_stay_short_whatever_the_input_quotes() {
        let huge = "x".repeat(1 << 20);
        let inputs = [
            // serde quotes the whole string in a type error…
            format!(
                r#"{{"v":1,"type":"job_ended","time_us":1,"job_id":"{huge}","outcome":"kill"}}"#
            ),
            // …and the whole name of an unknown field.
            format!(r#"{{"v":1,"type":"job_ended","time_us":1,"{huge}":1}}"#),
            format!(r#"{{"v":1,"type":"job_ended","time_us":1,"job_id":1,"outcome":"{huge}"}}"#),
        ];
        for input in inputs {
            let err = decode(input.as_bytes()).unwrap_err();
            assert_eq!(err.kind, DecodeErrorKind::InvalidField, "{err}");
            assert!(err.message.chars().count() <= MAX_ERROR_CHARS + 1, "{err}");
            assert!(err.message.ends_with('…'), "{err}");
            assert!(
                err.field
                    .as_ref()
                    .is_none_or(|f| f.chars().count() <= MAX_ERROR_CHARS + 1),
                "{err}"
            );
        }
    }

    #[test]
    fn a_job_may_not_claim_more_tasks_than_the_limit() {
        let job = |n: u32| {
            format!(r#"{{"v":1,"type":"job_submitted","time_us":1,"job_id":1,"num_tasks":{n}}}"#)
        };
        assert!(decode(job(MAX_TASKS_PER_JOB).as_bytes()).is_ok());
        let err = decode(job(u32::MAX).as_bytes()).unwrap_err();
        assert_eq!(err.kind, DecodeErrorKind::OutOfRange);
        assert_eq!(err.field.as_deref(), Some("num_tasks"));
    }

    #[test]
    fn check_limits_applies_the_decoders_limits_to_built_events() {
        assert_eq!(job().check_limits(), Ok(()));
        let long = "é".repeat(MAX_STRING_BYTES / 2) + "x";
        type Mutation = fn(&mut JobSubmitted, &str);
        let mutations: [(&str, Mutation); 6] = [
            ("user", |j, s| j.user = s.to_owned()),
            ("logical_name", |j, s| j.logical_name = s.to_owned()),
            ("stages[1].name", |j, s| {
                j.stages.as_mut().unwrap()[1].name = Some(s.to_owned())
            }),
            ("num_tasks", |j, _| j.num_tasks = MAX_TASKS_PER_JOB + 1),
            ("stages", |j, _| j.num_tasks = 4),
            ("cpu_request", |j, _| j.cpu_request = -1.0),
        ];
        for (field, mutate) in mutations {
            let Event::JobSubmitted(mut j) = job() else {
                unreachable!()
            };
            mutate(&mut j, &long);
            let event = Event::JobSubmitted(j);
            let err = event.check_limits().unwrap_err();
            assert_eq!(err.kind, DecodeErrorKind::OutOfRange, "{field}: {err}");
            assert_eq!(err.field.as_deref(), Some(field), "{err}");
            // The decoder refuses the same event for the same reason.
            assert_eq!(decode(event.to_json().as_bytes()), Err(err));
        }
        let machine = |zone: String, launch_time_us: u64| {
            Event::Machine(MachineEvent {
                time_us: 0,
                machine_id: 1,
                kind: MachineKind::Add,
                platform: None,
                cpus: None,
                memory: None,
                vm: Some(VmInfo {
                    name: None,
                    vm_type: "t".into(),
                    zone,
                    preemptible: true,
                    launch_time_us,
                    end_reason: None,
                }),
                cluster: String::new(),
            })
        };
        assert_eq!(
            machine("z".repeat(MAX_STRING_BYTES), 0).check_limits(),
            Ok(())
        );
        for (event, field) in [
            (machine(long.clone(), 0), "zone"),
            (machine("z".into(), MAX_TIME_US + 1), "launch_time_us"),
        ] {
            let err = event.check_limits().unwrap_err();
            assert_eq!(err.field.as_deref(), Some(field), "{err}");
        }
    }

    #[test]
    fn invalid_utf8_is_a_syntax_error() {
        let mut bytes =
            br#"{"v":1,"type":"job_submitted","time_us":1,"job_id":1,"num_tasks":1,"user":""#
                .to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe]);
        bytes.extend_from_slice(br#""}"#);
        assert_eq!(decode(&bytes).unwrap_err().kind, DecodeErrorKind::Syntax);
    }
}
