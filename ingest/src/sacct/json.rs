//! `sacct --json`: `{"meta", "errors", "jobs": [...]}`, one record a job
//! or an array's element, each with its steps. Read as Slurm 22.05 writes
//! it (`openapi/dbv0.0.38`, the layout the tests check against a real
//! cluster): plain numbers, `state.current` a string, an element's own id
//! in `job_id` and its array's in `array.job_id` (0 for a plain job),
//! the memory asked for in `tres.requested` (MB; `required.memory` is per
//! CPU for a `--mem-per-cpu` job, without saying so). Later
//! versions' forms are read too: a number as `{"set", "infinite",
//! "number"}`, `state.current` as a list, `required.memory_per_cpu` and
//! `memory_per_node`. Times are Unix seconds, so no time zone applies.
//!
//! Records are read one at a time, each as a JSON tree (its steps too)
//! and then into what the adapter keeps, so a period's accounting is never
//! held as one tree. A record that is not a job as `sacct` writes one is
//! skipped with its place in `jobs` and why; errors `sacct` reported with
//! no jobs refuse the file, naming them.

use std::fmt;
use std::io::BufRead;
use std::path::Path;

use serde::Deserialize;
use serde::de::{SeqAccess, Visitor};

use super::{Jobs, Row, Skip, US};
use crate::slurm::task_end;
use crate::source::{Diagnostics, Location, TraceError};

/// Slurm's unlimited time (`INFINITE`, and `NO_VAL` just below it), as
/// 22.05 writes a plain limit.
const INFINITE_MINUTES: u64 = 0xFFFF_FFFE;

/// Slurm's flag on a memory request that is per CPU (`MEM_PER_CPU`), in
/// the versions that keep it in `required.memory`.
const MEM_PER_CPU: u64 = 1 << 63;

/// Every job's rows in `input` (`path`'s), by job.
pub(super) fn rows(
    path: &Path,
    input: Box<dyn BufRead + Send>,
    diagnostics: &Diagnostics,
) -> Result<Jobs, TraceError> {
    let output: Output = serde_json::from_reader(input).map_err(|e| {
        TraceError::invalid(
            path,
            format!("not sacct's JSON output (`sacct --json`): {e}"),
        )
    })?;
    if output.jobs.0.is_empty() && !output.errors.is_empty() {
        let errors: Vec<String> = output.errors.iter().map(error_text).collect();
        return Err(TraceError::invalid(
            path,
            format!("sacct reported: {}", errors.join("; ")),
        ));
    }
    let mut jobs = Jobs::default();
    for (i, record) in output.jobs.0.into_iter().enumerate() {
        diagnostics.rows(1);
        let place = Location {
            file: path.to_owned(),
            line: 0,
            record: Some(format!("jobs[{i}]")),
        };
        let job = match record {
            Ok(job) => job,
            Err(why) => {
                diagnostics.skip(place, "bad_row", format!("not a job record: {why}"));
                continue;
            }
        };
        match job.row(place.clone()) {
            Ok((job_id, row)) => jobs.add(job_id, row),
            Err(Skip::Pending(job_id)) => jobs.pending_range(job_id, diagnostics),
            Err(Skip::Note(what)) => diagnostics.note(what),
            Err(Skip::Bad(class, detail)) => diagnostics.skip(place, class, detail),
        }
    }
    Ok(jobs)
}

/// An error `sacct` put in `errors`: its text where it has one.
fn error_text(error: &serde_json::Value) -> String {
    ["error", "description"]
        .iter()
        .find_map(|k| {
            error
                .get(k)
                .and_then(|v| v.as_str())
                .filter(|s| !s.is_empty())
        })
        .map_or_else(|| error.to_string(), str::to_owned)
}

#[derive(Deserialize)]
struct Output {
    #[serde(default)]
    errors: Vec<serde_json::Value>,
    jobs: Records,
}

/// The `jobs` array, each record read on its own: why for one that is not
/// a job.
struct Records(Vec<Result<Job, String>>);

impl<'de> Deserialize<'de> for Records {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Each;
        impl<'de> Visitor<'de> for Each {
            type Value = Records;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array of job records")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Records, A::Error> {
                let mut out = Vec::new();
                // One record at a time as a tree (its steps too), then
                // what is kept of it.
                while let Some(record) = seq.next_element::<serde_json::Value>()? {
                    out.push(serde_json::from_value::<Job>(record).map_err(|e| e.to_string()));
                }
                Ok(Records(out))
            }
        }
        d.deserialize_seq(Each)
    }
}

#[derive(Deserialize)]
struct Job {
    job_id: u64,
    #[serde(default)]
    array: Option<Array>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    partition: Option<String>,
    #[serde(default)]
    cluster: Option<String>,
    state: State,
    time: Times,
    #[serde(default)]
    required: Option<Required>,
    #[serde(default)]
    tres: Option<Tres>,
}

/// What the job asked for, by resource (`cpu`, `mem` in MB, ...).
#[derive(Deserialize)]
struct Tres {
    #[serde(default)]
    requested: Vec<Resource>,
}

#[derive(Deserialize)]
struct Resource {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    count: Option<Number>,
}

impl Tres {
    fn requested(&self, kind: &str) -> Option<u64> {
        self.requested
            .iter()
            .find(|r| r.kind == kind)
            .and_then(|r| r.count.as_ref())
            .and_then(Number::value)
    }
}

#[derive(Deserialize)]
struct Array {
    #[serde(default)]
    job_id: Option<Number>,
    #[serde(default)]
    task_id: Option<Number>,
    /// A pending range's indices (`5-9`), when not split into elements.
    #[serde(default)]
    task: Option<String>,
}

#[derive(Deserialize)]
struct State {
    current: Current,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Current {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct Times {
    submission: Number,
    #[serde(default)]
    start: Option<Number>,
    #[serde(default)]
    end: Option<Number>,
    #[serde(default)]
    limit: Option<Number>,
}

#[derive(Deserialize)]
struct Required {
    #[serde(default, rename = "CPUs")]
    cpus: Option<Number>,
    #[serde(default)]
    memory: Option<Number>,
    #[serde(default)]
    memory_per_cpu: Option<Number>,
    #[serde(default)]
    memory_per_node: Option<Number>,
}

/// A number as Slurm writes it: plain, or (from 23.02) with whether it is
/// set and whether it is infinite.
#[derive(Deserialize)]
#[serde(untagged)]
enum Number {
    Plain(u64),
    Flagged {
        #[serde(default = "yes")]
        set: bool,
        #[serde(default)]
        infinite: bool,
        #[serde(default)]
        number: u64,
    },
}

fn yes() -> bool {
    true
}

impl Number {
    /// Its value, if set and finite.
    fn value(&self) -> Option<u64> {
        match *self {
            Number::Plain(n) => Some(n),
            Number::Flagged {
                set: true,
                infinite: false,
                number,
            } => Some(number),
            Number::Flagged { .. } => None,
        }
    }
}

/// A time in Unix seconds as µs; 0 (or unset) is not yet.
fn time_us(n: Option<&Number>) -> Option<u64> {
    n.and_then(Number::value)
        .filter(|&s| s > 0)
        .and_then(|s| s.checked_mul(US))
}

impl Job {
    /// The job (an array's, for an element) and its row; a pending
    /// array's range is [`Skip::Pending`].
    fn row(self, place: Location) -> Result<(u64, Row), Skip> {
        let array_id = self
            .array
            .as_ref()
            .and_then(|a| a.job_id.as_ref())
            .and_then(Number::value)
            .filter(|&id| id != 0);
        let task_id = self
            .array
            .as_ref()
            .and_then(|a| a.task_id.as_ref())
            .and_then(Number::value);
        let (job_id, index) = match (array_id, task_id) {
            (Some(array), Some(index)) => {
                let index = u32::try_from(index).map_err(|_| {
                    Skip::Bad(
                        "bad_field",
                        format!("job {}: array index {index} out of range", self.job_id),
                    )
                })?;
                (array, Some(index))
            }
            (Some(array), None) => {
                if self.array.as_ref().is_some_and(|a| a.task.is_some()) {
                    return Err(Skip::Pending(array));
                }
                (self.job_id, None)
            }
            (None, _) => (self.job_id, None),
        };
        let submit_us = time_us(Some(&self.time.submission)).ok_or_else(|| {
            Skip::Bad(
                "bad_field",
                format!("job {} has no submission time", self.job_id),
            )
        })?;
        let state = match &self.state.current {
            Current::One(s) => s.as_str(),
            Current::Many(states) => states.first().map_or("", String::as_str),
        };
        let end = task_end(state);
        let tres = |kind: &str| self.tres.as_ref().and_then(|t| t.requested(kind));
        let cpus = self
            .required
            .as_ref()
            .and_then(|r| r.cpus.as_ref())
            .and_then(Number::value)
            .or_else(|| tres("cpu"))
            .filter(|&c| c > 0)
            .map_or(1.0, |c| c as f64);
        let mem_mb = match tres("mem") {
            Some(mb) => mb as f64,
            None => self.required.as_ref().map_or(0.0, |r| r.memory_mb(cpus)),
        };
        Ok((
            job_id,
            Row {
                place,
                index,
                submit_us,
                start_us: time_us(self.time.start.as_ref()),
                end_us: if end.is_some() {
                    time_us(self.time.end.as_ref())
                } else {
                    None
                },
                end,
                user: self.user.unwrap_or_default(),
                group: self.group.unwrap_or_default(),
                name: self.name.unwrap_or_default(),
                partition: self.partition.unwrap_or_default(),
                cluster: self.cluster.unwrap_or_default(),
                cpus,
                mem_mb,
                limit_us: self
                    .time
                    .limit
                    .as_ref()
                    .and_then(Number::value)
                    .filter(|&m| m < INFINITE_MINUTES)
                    .and_then(|m| m.checked_mul(60 * US)),
            },
        ))
    }
}

impl Required {
    /// The memory the job asked for, MB, where `tres` does not say: per
    /// node (one node a task here), or per CPU times its CPUs.
    fn memory_mb(&self, cpus: f64) -> f64 {
        let value = |n: &Option<Number>| n.as_ref().and_then(Number::value);
        if let Some(m) = value(&self.memory) {
            return if m & MEM_PER_CPU != 0 {
                (m & !MEM_PER_CPU) as f64 * cpus
            } else {
                m as f64
            };
        }
        match (value(&self.memory_per_node), value(&self.memory_per_cpu)) {
            (Some(node), _) if node > 0 => node as f64,
            (_, Some(cpu)) => cpu as f64 * cpus,
            _ => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::super::read;
    use crate::event::{Event, TaskKind};
    use crate::source::{Diagnostics, Trace, TraceError};

    fn trace(text: &str) -> Result<Trace, TraceError> {
        let input = Box::new(Cursor::new(text.as_bytes().to_vec()));
        read("sacct.json".as_ref(), input, Diagnostics::new(), 0)
    }

    /// A record that is not a job, or has a field no job has, is skipped
    /// with its place in `jobs`; the others are read. Later versions'
    /// numbers (`{"set", "infinite", "number"}`) and state lists are read.
    #[test]
    fn a_bad_record_is_skipped_by_its_place_and_later_layouts_are_read() {
        let text = r#"{"jobs": [
            {"job_id": 7, "name": "a", "user": "u", "state": {"current": "COMPLETED"},
             "time": {"submission": 100, "start": 110, "end": 150, "limit": 5},
             "required": {"CPUs": 2, "memory": 1000}},
            {"job_id": "eight", "state": {"current": "COMPLETED"}, "time": {"submission": 1}},
            {"job_id": 9, "state": {"current": "RUNNING"}, "time": {"submission": 0}},
            {"job_id": 11, "array": {"job_id": {"set": true, "infinite": false, "number": 10},
                                     "task_id": {"set": true, "infinite": false, "number": 4}},
             "state": {"current": ["FAILED"]},
             "time": {"submission": {"set": true, "infinite": false, "number": 200},
                      "start": {"set": true, "infinite": false, "number": 210},
                      "end": {"set": true, "infinite": false, "number": 220},
                      "limit": {"set": false, "infinite": true, "number": 0}},
             "required": {"CPUs": {"set": true, "infinite": false, "number": 4},
                          "memory_per_cpu": {"set": true, "infinite": false, "number": 100}}}
        ]}"#;
        let trace = trace(text).unwrap();
        let diagnostics = trace.diagnostics().clone();
        let events: Vec<Event> = trace.map(Result::unwrap).collect();
        let examples = diagnostics.examples();
        assert_eq!(diagnostics.skipped_total(), 2, "{}", diagnostics.summary());
        assert_eq!(examples[0].at.to_string(), "sacct.json: record `jobs[1]`");
        assert!(
            examples[1].reason.contains("job 9 has no submission time"),
            "{examples:?}"
        );
        let jobs: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                Event::JobSubmitted(j) => Some(j),
                _ => None,
            })
            .collect();
        assert_eq!(jobs.len(), 2);
        assert_eq!(
            (jobs[0].job_id, jobs[0].time_limit_us),
            (7, Some(300_000_000))
        );
        // Element 4 of array 10, its memory per CPU times its CPUs, no
        // limit (infinite).
        assert_eq!((jobs[1].job_id, jobs[1].num_tasks), (10, 1));
        assert_eq!((jobs[1].cpu_request, jobs[1].mem_request), (4.0, 400.0));
        assert_eq!(jobs[1].time_limit_us, None);
        assert!(events.iter().any(
            |e| matches!(e, Event::Task(t) if t.job_id == 10 && t.kind == TaskKind::Fail && t.time_us == 220_000_000)
        ));
    }

    /// An array whose other elements are still pending (a range record)
    /// stays open though its elements so far have ended; a limit Slurm
    /// writes as INFINITE is none.
    #[test]
    fn a_partly_run_array_stays_open_and_an_infinite_limit_is_none() {
        let text = r#"{"jobs": [
            {"job_id": 31, "array": {"job_id": 30, "task_id": 1}, "state": {"current": "COMPLETED"},
             "time": {"submission": 100, "start": 110, "end": 150, "limit": 4294967295}},
            {"job_id": 30, "array": {"job_id": 30, "task_id": null, "task": "2-9"},
             "state": {"current": "PENDING"}, "time": {"submission": 100, "start": 0, "end": 0}}
        ]}"#;
        let trace = trace(text).unwrap();
        let diagnostics = trace.diagnostics().clone();
        let events: Vec<Event> = trace.map(Result::unwrap).collect();
        assert_eq!(diagnostics.skipped_total(), 0, "{}", diagnostics.summary());
        assert_eq!(diagnostics.notes().values().sum::<u64>(), 1);
        let Event::JobSubmitted(job) = &events[0] else {
            panic!("{events:?}")
        };
        assert_eq!((job.job_id, job.time_limit_us), (30, None));
        assert!(
            events
                .iter()
                .any(|e| matches!(e, Event::Task(t) if t.kind == TaskKind::Finish))
        );
        assert!(
            !events.iter().any(|e| matches!(e, Event::JobEnded(_))),
            "{events:?}"
        );
    }

    /// Errors `sacct` reported with no jobs refuse the output, naming
    /// them; output that is not `sacct`'s JSON is refused as such.
    #[test]
    fn sacct_errors_and_other_json_are_refused_by_what_they_say() {
        let refused = |text: &str| trace(text).err().expect("refused").to_string();
        let err = refused(
            r#"{"meta": {}, "errors": [{"error": "Slurm accounting storage is disabled", "error_number": 2}], "jobs": []}"#,
        );
        assert!(
            err.contains("sacct reported: Slurm accounting storage is disabled"),
            "{err}"
        );
        let err = refused(r#"{"nodes": []}"#);
        assert!(err.contains("not sacct's JSON output"), "{err}");
        assert!(err.contains("sacct.json"), "{err}");
    }
}
