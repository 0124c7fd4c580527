//! jobcast's own format: canonical events as JSON lines (see `event`).
//! Bad lines are skipped and recorded with their line number and reason.

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
                        Ok(event) => return Some(Ok(event)),
                        Err(err) => self.diagnostics.skip(
                            Location {
                                file: self.path.clone(),
                                line: self.line,
                                record: None,
                            },
                            err.kind.as_str(),
                            err,
                        ),
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
}
