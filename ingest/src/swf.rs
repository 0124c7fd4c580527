//! The Parallel Workloads Archive's Standard Workload Format (SWF 2.2):
//! one line per job of 18 whitespace-separated fields, after header
//! comments (`; Key: value`) that describe the machine.
//!
//! An HPC job is one parallel job, not an array: it becomes one task that
//! asks for all its processors (`cpu_request` = the allocated processors,
//! else the requested ones), as `jobcast slurm watch` reports a Slurm job
//! of N CPUs. The fields map to the canonical model so that the predictor
//! sees what an HPC site knows at submission:
//!
//! | SWF field | canonical |
//! |---|---|
//! | 1 job number | `job_id` |
//! | 2 submit time (s from the log's start) | `time_us`, from the `UnixStartTime` header |
//! | 3 wait, 4 run time | the task's `schedule` and end |
//! | 5 allocated (8 requested) processors | `cpu_request` |
//! | 9 requested time | `time_limit_us` |
//! | 10 requested memory (KB per processor) | `mem_request`, MB for the job |
//! | 11 status | the end's kind (below) |
//! | 12 user, 13 group | `user` (`u12`), `group` (`g3`) |
//! | 14 executable (application) | `logical_name` (`app7`), the name 3Sigma learns by |
//! | 15 queue | `partition`: the header's name for it, else its number |
//!
//! Status: 1 ends in `finish`; 0 in `fail`, or `timeout` when the job ran
//! to its requested time (the scheduler's kill); 5 (cancelled) in `kill`,
//! at its start if it never ran; -1 (unknown) in `lost`. A job with a run
//! time but no wait time (-1) starts at its submission, and the summary
//! notes it. A job checkpointed
//! or swapped out is a summary line followed by one line per partial
//! execution (status 2, continued; 3, last and completed; 4, last and
//! failed) of the same job number: its task is scheduled and evicted once
//! per part, and ends as the last part did. The average CPU time, used
//! memory, partition, preceding job and think time have no canonical field.
//!
//! The header's `MaxProcs` (else `MaxNodes`) becomes one machine `add`
//! event with that many CPUs at the first job's submission: the machine's
//! size, which a backfilling scheduler needs.
//!
//! Lines are sorted by submit time (the format requires it), so the
//! adapter streams: a job's events wait in an ordered map until no later line can
//! come before them. A line that cannot be used is skipped with its line
//! number and reason; the others go on.

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::event::{
    Event, JobEnded, JobOutcome, JobSubmitted, MachineEvent, MachineKind, TaskEvent, TaskKind,
};
use crate::source::{Diagnostics, Location, Trace, TraceError, open_input, total_size};

const US: f64 = 1e6;

/// Open one SWF log (plain or gzip).
pub fn open(path: &Path) -> Result<Trace, TraceError> {
    let diagnostics = Diagnostics::new();
    let reader = open_input(path, &diagnostics)?;
    let events = SwfLines {
        path: path.to_owned(),
        reader,
        line: 0,
        text: Vec::new(),
        diagnostics: diagnostics.clone(),
        header: Header::default(),
        job: None,
        pending: BTreeMap::new(),
        seq: 0,
        horizon_us: 0,
        last_submit_s: f64::NEG_INFINITY,
        machine_added: false,
        eof: false,
    };
    Ok(Trace::new(
        events.map(Ok),
        diagnostics,
        total_size(&[path.to_owned()]),
    ))
}

/// What the header comments say about the machine.
#[derive(Debug, Default)]
struct Header {
    /// `UnixStartTime`: the epoch second of the log's time 0.
    start_s: Option<f64>,
    max_procs: Option<f64>,
    max_nodes: Option<f64>,
    /// `Queue: N name ...`: the queues' names by number.
    queues: HashMap<i64, String>,
}

impl Header {
    /// Read one comment line (without its `;`).
    fn read(&mut self, comment: &str) {
        let Some((key, value)) = comment.split_once(':') else {
            return;
        };
        let value = value.trim();
        let number = || value.split_whitespace().next()?.parse::<f64>().ok();
        match key.trim() {
            "UnixStartTime" => self.start_s = number(),
            "MaxProcs" => self.max_procs = number(),
            "MaxNodes" => self.max_nodes = number(),
            "Queue" => {
                let mut words = value.split_whitespace();
                if let (Some(n), Some(name)) = (words.next(), words.next())
                    && let Ok(n) = n.parse::<i64>()
                {
                    self.queues.insert(n, name.to_owned());
                }
            }
            _ => {}
        }
    }
}

/// One line's 18 fields.
#[derive(Debug, Clone, Copy)]
struct Line {
    at: u64,
    job: i64,
    submit_s: f64,
    wait_s: f64,
    run_s: f64,
    procs: f64,
    requested_procs: f64,
    requested_s: f64,
    requested_kb: f64,
    status: i64,
    user: i64,
    group: i64,
    executable: i64,
    queue: i64,
}

impl Line {
    fn parse(text: &str, at: u64) -> Result<Line, (&'static str, String)> {
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() != 18 {
            return Err((
                "bad_row",
                format!("{} fields, where SWF has 18", fields.len()),
            ));
        }
        let mut values = [0f64; 18];
        for (i, field) in fields.iter().enumerate() {
            values[i] = field
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite())
                .ok_or_else(|| {
                    (
                        "bad_field",
                        format!("field {} is `{field}`, not a number", i + 1),
                    )
                })?;
        }
        let int = |i: usize| values[i] as i64;
        Ok(Line {
            at,
            job: int(0),
            submit_s: values[1],
            wait_s: values[2],
            run_s: values[3],
            procs: values[4],
            requested_procs: values[7],
            requested_s: values[8],
            requested_kb: values[9],
            status: int(10),
            user: int(11),
            group: int(12),
            executable: int(13),
            queue: int(14),
        })
    }

    fn is_part(&self) -> bool {
        matches!(self.status, 2..=4)
    }
}

/// A job's lines: its summary (or first part) and its partial executions.
struct JobLines {
    first: Line,
    parts: Vec<Line>,
}

const CLASS_SUBMIT: u8 = 0;
const CLASS_TASK: u8 = 1;
const CLASS_END: u8 = 2;

struct SwfLines {
    path: PathBuf,
    reader: Box<dyn BufRead + Send>,
    line: u64,
    text: Vec<u8>,
    diagnostics: Diagnostics,
    header: Header,
    /// The job whose lines are being read (its parts follow it).
    job: Option<JobLines>,
    /// Events waiting for their turn: by time, then submissions before
    /// task events before ends, then in the order made.
    pending: BTreeMap<(u64, u8, u64), Event>,
    seq: u64,
    /// No event still to come is earlier than this.
    horizon_us: u64,
    last_submit_s: f64,
    machine_added: bool,
    eof: bool,
}

impl SwfLines {
    fn at(&self, line: u64) -> Location {
        Location {
            file: self.path.clone(),
            line,
            record: None,
        }
    }

    fn time_us(&self, s: f64) -> u64 {
        ((self.header.start_s.unwrap_or(0.0) + s.max(0.0)) * US).round() as u64
    }

    fn push(&mut self, time_us: u64, class: u8, event: Event) {
        self.seq += 1;
        self.pending.insert((time_us, class, self.seq), event);
    }

    /// Read one line; false at the end of the file.
    fn read_line(&mut self) -> bool {
        self.text.clear();
        match self.reader.read_until(b'\n', &mut self.text) {
            Ok(0) => return false,
            Ok(_) => {}
            Err(e) => {
                // The rest cannot be read: say where it stopped.
                self.diagnostics
                    .skip(self.at(self.line + 1), "io", format!("read failed: {e}"));
                return false;
            }
        }
        self.line += 1;
        self.diagnostics.rows(1);
        let Ok(text) = std::str::from_utf8(&self.text) else {
            self.diagnostics
                .skip(self.at(self.line), "bad_row", "not UTF-8 text");
            return true;
        };
        let text = text.trim();
        if text.is_empty() {
            return true;
        }
        if let Some(comment) = text.strip_prefix(';') {
            self.header.read(comment);
            return true;
        }
        let line = match Line::parse(text, self.line) {
            Ok(line) => line,
            Err((class, detail)) => {
                self.diagnostics.skip(self.at(self.line), class, detail);
                return true;
            }
        };
        self.take(line);
        true
    }

    /// A parsed line: a part of the job being read, or a new job.
    fn take(&mut self, line: Line) {
        if let Some(job) = &mut self.job
            && job.first.job == line.job
            && line.is_part()
        {
            job.parts.push(line);
            return;
        }
        if line.submit_s < self.last_submit_s {
            self.diagnostics.skip(
                self.at(line.at),
                "out_of_order",
                format!(
                    "submitted at {} s, before the line above ({} s): SWF lines are sorted by submit time",
                    line.submit_s, self.last_submit_s
                ),
            );
            return;
        }
        self.last_submit_s = line.submit_s;
        if let Some(done) = self.job.take() {
            self.lay_out(done);
        }
        if !self.machine_added {
            self.machine_added = true;
            self.add_machine(line.submit_s);
        }
        self.horizon_us = self.time_us(line.submit_s);
        self.job = Some(JobLines {
            first: line,
            parts: Vec::new(),
        });
    }

    fn add_machine(&mut self, submit_s: f64) {
        let Some(cpus) = self.header.max_procs.or(self.header.max_nodes) else {
            self.diagnostics
                .note("no MaxProcs or MaxNodes header: the machine's size is unsaid");
            return;
        };
        let time_us = self.time_us(submit_s);
        let machine = Event::Machine(MachineEvent {
            time_us,
            machine_id: 0,
            kind: MachineKind::Add,
            platform: None,
            cpus: Some(cpus),
            memory: None,
            vm: None,
            cluster: String::new(),
        });
        let (path, line) = (&self.path, self.line);
        if self.diagnostics.within_limits(&machine, |_| Location {
            file: path.clone(),
            line,
            record: None,
        }) {
            self.push(time_us, CLASS_SUBMIT, machine);
        }
    }

    /// The events of one job, into the events waiting for their turn.
    fn lay_out(&mut self, job: JobLines) {
        let first = job.first;
        if first.job < 0 {
            self.diagnostics.skip(
                self.at(first.at),
                "bad_field",
                format!("job number {}", first.job),
            );
            return;
        }
        // The runs: the parts if there are any (the first line among them
        // when the log has no summary line), else the summary's.
        let runs: Vec<Line> = if first.is_part() {
            std::iter::once(first).chain(job.parts).collect()
        } else if job.parts.is_empty() {
            vec![first]
        } else {
            job.parts
        };
        // How the job ended: its summary's status, else its last part's.
        let status = if first.is_part() {
            runs.last().map_or(first.status, |r| r.status)
        } else {
            first.status
        };
        let cancelled_unrun = first.status == 5 && runs.iter().all(|r| r.run_s <= 0.0);
        if !cancelled_unrun && let Some(bad) = runs.iter().find(|r| r.run_s < 0.0) {
            self.diagnostics.skip(
                self.at(bad.at),
                "missing_runtime",
                format!(
                    "job {} has no run time (field 4 is {}), which status {} needs",
                    first.job, bad.run_s, first.status
                ),
            );
            return;
        }
        if !cancelled_unrun && runs.iter().any(|r| r.wait_s < 0.0) {
            self.diagnostics
                .note("wait time missing (-1): the job is taken to start at its submission");
        }
        let job_id = first.job as u64;
        let submit_us = self.time_us(first.submit_s);
        let procs = if first.procs > 0.0 {
            first.procs
        } else {
            first.requested_procs.max(1.0)
        };
        let mut submitted = JobSubmitted::new(job_id, submit_us, 1);
        submitted.user = if first.user >= 0 {
            format!("u{}", first.user)
        } else {
            String::new()
        };
        submitted.group = if first.group >= 0 {
            format!("g{}", first.group)
        } else {
            String::new()
        };
        submitted.logical_name = if first.executable >= 0 {
            format!("app{}", first.executable)
        } else {
            String::new()
        };
        submitted.partition = match first.queue {
            q if q < 0 => String::new(),
            q => self
                .header
                .queues
                .get(&q)
                .cloned()
                .unwrap_or_else(|| q.to_string()),
        };
        submitted.cpu_request = procs;
        submitted.mem_request = if first.requested_kb > 0.0 {
            first.requested_kb * procs / 1024.0
        } else {
            0.0
        };
        submitted.time_limit_us =
            (first.requested_s > 0.0).then_some((first.requested_s * US) as u64);
        let task = |time_us: u64, kind: TaskKind| {
            Event::Task(TaskEvent {
                time_us,
                job_id,
                task_index: 0,
                kind,
                machine_id: None,
                stage: None,
            })
        };
        let mut events = vec![
            (CLASS_SUBMIT, Event::JobSubmitted(submitted)),
            (CLASS_TASK, task(submit_us, TaskKind::Submit)),
        ];
        let outcome = match status {
            1 | 3 => JobOutcome::Finish,
            0 | 4 => JobOutcome::Fail,
            5 => JobOutcome::Kill,
            _ => JobOutcome::Lost,
        };
        let mut end_us = submit_us;
        if cancelled_unrun {
            end_us = self.time_us(first.submit_s + first.wait_s.max(0.0));
        } else {
            let last = runs.len() - 1;
            for (i, run) in runs.iter().enumerate() {
                let start = first.submit_s + run.wait_s.max(0.0);
                let start_us = self.time_us(start);
                end_us = self
                    .time_us(start + run.run_s)
                    .max(start_us.saturating_add(1));
                let kind = if i < last {
                    TaskKind::Evict
                } else {
                    match outcome {
                        JobOutcome::Finish => TaskKind::Finish,
                        JobOutcome::Fail
                            if first.requested_s > 0.0 && run.run_s >= first.requested_s =>
                        {
                            TaskKind::Timeout
                        }
                        JobOutcome::Fail => TaskKind::Fail,
                        JobOutcome::Kill => TaskKind::Kill,
                        JobOutcome::Lost => TaskKind::Lost,
                    }
                };
                events.push((CLASS_TASK, task(start_us, TaskKind::Schedule)));
                events.push((CLASS_TASK, task(end_us, kind)));
            }
        }
        events.push((
            CLASS_END,
            Event::JobEnded(JobEnded {
                time_us: end_us,
                job_id,
                outcome,
            }),
        ));
        // All of the job's events or none: a job without its end is no
        // runtime.
        let (path, line) = (&self.path, first.at);
        let admitted = events.iter().all(|(_, event)| {
            self.diagnostics.within_limits(event, |_| Location {
                file: path.clone(),
                line,
                record: None,
            })
        });
        if admitted {
            for (class, event) in events {
                self.push(event.time_us(), class, event);
            }
        }
    }
}

impl Iterator for SwfLines {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        loop {
            if let Some((&(time_us, _, _), _)) = self.pending.first_key_value()
                && (self.eof || time_us < self.horizon_us)
            {
                return self.pending.pop_first().map(|(_, event)| event);
            }
            if self.eof {
                return None;
            }
            if !self.read_line() {
                self.eof = true;
                if let Some(job) = self.job.take() {
                    self.lay_out(job);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn read(text: &str) -> (Vec<Event>, Diagnostics) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.swf");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let trace = open(&path).unwrap();
        let diagnostics = trace.diagnostics().clone();
        let events: Vec<Event> = trace.map(Result::unwrap).collect();
        (events, diagnostics)
    }

    /// Job `job`'s task events: seconds from the log's start, and kind.
    fn tasks_of(events: &[Event], job: u64) -> Vec<(u64, TaskKind)> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Task(t) if t.job_id == job => Some((t.time_us / 1_000_000 - 1000, t.kind)),
                _ => None,
            })
            .collect()
    }

    /// Job 1 run in two parts, 10 to 110 s and 500 to 700 s.
    const TWO_PARTS: [(u64, TaskKind); 5] = [
        (0, TaskKind::Submit),
        (10, TaskKind::Schedule),
        (110, TaskKind::Evict),
        (500, TaskKind::Schedule),
        (700, TaskKind::Finish),
    ];

    const HEADER: &str = "; Version: 2.2\n; UnixStartTime: 1000\n; MaxNodes: 100\n; MaxProcs: 128\n; Queue: 1 batch\n";

    #[test]
    fn a_completed_job_is_one_task_of_its_processors() {
        let (events, diagnostics) = read(&format!(
            "{HEADER}1 10 5 100 16 -1 -1 16 3600 2048 1 3 2 7 1 -1 -1 -1\n"
        ));
        assert_eq!(diagnostics.skipped_total(), 0);
        let Event::Machine(m) = &events[0] else {
            panic!("{events:?}")
        };
        assert_eq!((m.cpus, m.time_us), (Some(128.0), 1_010_000_000));
        let Event::JobSubmitted(j) = &events[1] else {
            panic!("{events:?}")
        };
        assert_eq!(j.job_id, 1);
        assert_eq!(j.time_us, 1_010_000_000);
        assert_eq!((j.num_tasks, j.cpu_request), (1, 16.0));
        assert_eq!(j.time_limit_us, Some(3_600_000_000));
        assert_eq!(j.mem_request, 32.0);
        assert_eq!(
            (
                j.user.as_str(),
                j.group.as_str(),
                j.job_name.as_str(),
                j.logical_name.as_str()
            ),
            ("u3", "g2", "", "app7")
        );
        assert_eq!(j.partition, "batch");
        assert_eq!(
            tasks_of(&events, 1),
            [
                (10, TaskKind::Submit),
                (15, TaskKind::Schedule),
                (115, TaskKind::Finish)
            ]
        );
        let Event::JobEnded(end) = events.last().unwrap() else {
            panic!()
        };
        assert_eq!(
            (end.time_us, end.outcome),
            (1_115_000_000, JobOutcome::Finish)
        );
    }

    #[test]
    fn statuses_end_jobs_as_they_ended() {
        let (events, _) = read(&format!(
            "{HEADER}\
             1 0 0 3600 1 -1 -1 1 3600 -1 0 1 1 -1 -1 -1 -1 -1\n\
             2 0 0 10 1 -1 -1 1 3600 -1 0 1 1 -1 -1 -1 -1 -1\n\
             3 0 30 -1 1 -1 -1 1 3600 -1 5 1 1 -1 -1 -1 -1 -1\n\
             4 0 0 10 1 -1 -1 1 3600 -1 -1 1 1 -1 -1 -1 -1 -1\n"
        ));
        let ends: HashMap<u64, (u64, JobOutcome)> = events
            .iter()
            .filter_map(|e| match e {
                Event::JobEnded(e) => Some((e.job_id, (e.time_us, e.outcome))),
                _ => None,
            })
            .collect();
        assert_eq!(ends[&1].1, JobOutcome::Fail);
        assert_eq!(ends[&2].1, JobOutcome::Fail);
        assert_eq!(ends[&3], (1_030_000_000, JobOutcome::Kill));
        assert_eq!(ends[&4].1, JobOutcome::Lost);
        let task_end = |job: u64| {
            events.iter().rev().find_map(|e| match e {
                Event::Task(t) if t.job_id == job && t.kind != TaskKind::Submit => Some(t.kind),
                _ => None,
            })
        };
        assert_eq!(task_end(1), Some(TaskKind::Timeout));
        assert_eq!(task_end(2), Some(TaskKind::Fail));
        // Cancelled before it ran: submitted, never scheduled.
        assert_eq!(task_end(3), None);
    }

    #[test]
    fn partial_executions_are_evictions_then_the_last_parts_end() {
        let (events, diagnostics) = read(&format!(
            "{HEADER}\
             1 0 10 300 4 -1 -1 4 3600 -1 1 1 1 -1 -1 -1 -1 -1\n\
             1 0 10 100 4 -1 -1 4 3600 -1 2 1 1 -1 -1 -1 -1 -1\n\
             1 0 500 200 4 -1 -1 4 3600 -1 3 1 1 -1 -1 -1 -1 -1\n\
             2 5 0 10 1 -1 -1 1 60 -1 1 1 1 -1 -1 -1 -1 -1\n"
        ));
        assert_eq!(diagnostics.skipped_total(), 0);
        assert_eq!(tasks_of(&events, 1), TWO_PARTS);
        let times: Vec<u64> = events.iter().map(Event::time_us).collect();
        assert!(times.is_sorted(), "{times:?}");
    }

    /// A log without summary lines: the first part counts, and the job
    /// ends as its last part did.
    #[test]
    fn a_job_of_parts_alone_runs_each_and_ends_as_the_last() {
        let (events, diagnostics) = read(&format!(
            "{HEADER}\
             1 0 10 100 4 -1 -1 4 3600 -1 2 1 1 -1 -1 -1 -1 -1\n\
             1 0 500 200 4 -1 -1 4 3600 -1 3 1 1 -1 -1 -1 -1 -1\n\
             2 5 0 10 1 -1 -1 1 60 nan 1 1 1 -1 -1 -1 -1 -1\n"
        ));
        assert_eq!(tasks_of(&events, 1), TWO_PARTS);
        assert!(events.iter().any(|e| matches!(e,
            Event::JobEnded(e) if e.job_id == 1 && e.outcome == JobOutcome::Finish)));
        // A field that is not a finite number skips its line.
        assert_eq!(diagnostics.skipped_total(), 1, "{}", diagnostics.summary());
    }

    #[test]
    fn bad_lines_are_skipped_by_line_and_reason() {
        let (events, diagnostics) = read(&format!(
            "{HEADER}\
             1 3 0 10 1 -1 -1 1 60 -1 1 1 1 -1 -1 -1 -1 -1\n\
             2 5 0 10 1 -1\n\
             3 6 0 x 1 -1 -1 1 60 -1 1 1 1 -1 -1 -1 -1 -1\n\
             4 1 0 10 1 -1 -1 1 60 -1 1 1 1 -1 -1 -1 -1 -1\n\
             5 7 0 -1 1 -1 -1 1 60 -1 1 1 1 -1 -1 -1 -1 -1\n\
             6 8 0 10 1 -1 -1 1 60 -1 1 1 1 -1 -1 -1 -1 -1\n"
        ));
        let jobs: Vec<u64> = events
            .iter()
            .filter_map(|e| match e {
                Event::JobSubmitted(j) => Some(j.job_id),
                _ => None,
            })
            .collect();
        assert_eq!(jobs, [1, 6]);
        let text = diagnostics.summary();
        for expected in [
            "log.swf:7: bad_row: 6 fields",
            "log.swf:8: bad_field: field 4 is `x`",
            "log.swf:9: out_of_order",
            "log.swf:10: missing_runtime",
        ] {
            assert!(text.contains(expected), "{expected} in {text}");
        }
    }
}
