//! jobcast's own format: canonical events as JSON lines (see `event`).
//! Bad lines are skipped and recorded with their line number and reason.
//!
//! Lines are read in file order, which must keep each job's events in time
//! order (docs/events.md, "Ordering"): a line earlier than its job's
//! previous event is skipped as `time_backwards`, the reason the service
//! would give it, so that `convert`, the offline tools and a replay into
//! the service all keep the same events and say which line they dropped.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use crate::event::{Event, decode};
use crate::source::{Diagnostics, Location, Trace, TraceError, open_input, total_size};

/// Read canonical events from one JSON-lines file (gzip or plain), in file
/// order.
pub fn open(path: &Path) -> Result<Trace, TraceError> {
    let diagnostics = Diagnostics::new();
    let reader = open_input(path, &diagnostics)?;
    let events = JsonLines {
        path: path.to_owned(),
        reader,
        line: 0,
        buf: Vec::new(),
        diagnostics: diagnostics.clone(),
        done: false,
        last_us: HashMap::new(),
    };
    Ok(Trace::new(
        events,
        diagnostics,
        total_size(&[path.to_owned()]),
    ))
}

struct JsonLines {
    path: PathBuf,
    reader: Box<dyn BufRead + Send>,
    line: u64,
    buf: Vec<u8>,
    diagnostics: Diagnostics,
    done: bool,
    /// Each job's latest event time, until its `job_ended`.
    last_us: HashMap<u64, u64>,
}

impl JsonLines {
    /// Whether `event` keeps its job's events in time order; records the
    /// job's latest time, forgetting it once the job ended.
    fn in_order(&mut self, event: &Event) -> Result<(), String> {
        let Some(job_id) = event.job_id() else {
            return Ok(());
        };
        let time_us = event.time_us();
        if let Some(&last) = self.last_us.get(&job_id)
            && time_us < last
        {
            return Err(format!(
                "job {job_id}: event at {time_us} µs is earlier than its previous event at {last} µs"
            ));
        }
        if matches!(event, Event::JobEnded(_)) {
            self.last_us.remove(&job_id);
        } else {
            self.last_us.insert(job_id, time_us);
        }
        Ok(())
    }

    fn here(&self) -> Location {
        Location {
            file: self.path.clone(),
            line: self.line,
            record: None,
        }
    }
}

impl Iterator for JsonLines {
    type Item = Result<Event, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.buf.clear();
            match self.reader.read_until(b'\n', &mut self.buf) {
                Ok(0) => self.done = true,
                Ok(_) => {
                    self.line += 1;
                    let text = self.buf.trim_ascii();
                    if text.is_empty() {
                        continue;
                    }
                    self.diagnostics.rows(1);
                    match decode(text) {
                        Ok(event) => match self.in_order(&event) {
                            Ok(()) => return Some(Ok(event)),
                            Err(why) => self.diagnostics.skip(self.here(), "time_backwards", why),
                        },
                        Err(err) => self.diagnostics.skip(self.here(), err.kind.as_str(), err),
                    }
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(TraceError::io(&self.path, e)));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn bad_lines_are_skipped_with_their_line_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut f = std::fs::File::create(&path).unwrap();
        writeln!(
            f,
            r#"{{"v":1,"type":"job_ended","time_us":5,"job_id":1,"outcome":"finish"}}"#
        )
        .unwrap();
        writeln!(f, "{{oops").unwrap();
        writeln!(f).unwrap();
        writeln!(
            f,
            r#"{{"v":7,"type":"job_ended","time_us":5,"job_id":1,"outcome":"finish"}}"#
        )
        .unwrap();
        writeln!(
            f,
            r#"{{"v":1,"type":"job_ended","time_us":6,"job_id":2,"outcome":"kill"}}"#
        )
        .unwrap();
        drop(f);
        let trace = open(&path).unwrap();
        let diags = trace.diagnostics().clone();
        let events: Vec<Event> = trace.map(Result::unwrap).collect();
        assert_eq!(events.len(), 2);
        assert_eq!(diags.rows_read(), 4);
        assert_eq!(diags.skipped_total(), 2);
        let examples = diags.examples();
        assert_eq!(examples[0].at.line, 2, "{examples:?}");
        assert!(examples[0].reason.starts_with("syntax"));
        assert_eq!(examples[1].at.line, 4);
        assert!(examples[1].reason.starts_with("unsupported_version"));
        assert!(
            diags.summary().contains("events.jsonl:2"),
            "{}",
            diags.summary()
        );
    }

    #[test]
    fn a_line_earlier_than_its_jobs_previous_event_is_skipped_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let lines = [
            r#"{"v":1,"type":"job_submitted","time_us":100,"job_id":1,"user":"u","job_name":"j","logical_name":"l","scheduling_class":0,"priority":0,"cpu_request":1,"mem_request":1,"num_tasks":1}"#,
            r#"{"v":1,"type":"task","time_us":300,"job_id":1,"task_index":0,"kind":"schedule"}"#,
            // Another job's event may be earlier: only a job's own order counts.
            r#"{"v":1,"type":"machine","time_us":50,"machine_id":3,"kind":"add"}"#,
            r#"{"v":1,"type":"task","time_us":200,"job_id":1,"task_index":0,"kind":"finish"}"#,
            r#"{"v":1,"type":"job_ended","time_us":300,"job_id":1,"outcome":"finish"}"#,
            // A job id used again after its end starts afresh.
            r#"{"v":1,"type":"job_ended","time_us":10,"job_id":1,"outcome":"kill"}"#,
        ];
        std::fs::write(&path, lines.join("\n")).unwrap();
        let trace = open(&path).unwrap();
        let diags = trace.diagnostics().clone();
        let times: Vec<u64> = trace.map(|e| e.unwrap().time_us()).collect();
        assert_eq!(times, [100, 300, 50, 300, 10]);
        assert_eq!(diags.skipped().get("time_backwards"), Some(&1));
        let example = &diags.examples()[0];
        assert_eq!(example.at.line, 4);
        assert!(
            example
                .reason
                .contains("earlier than its previous event at 300"),
            "{}",
            example.reason
        );
    }
}
