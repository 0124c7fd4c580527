//! `sacct`'s parsable output (`sacct -P` or `--parsable2`): `|` between
//! fields, a header naming them, whatever `--format` chose, as long as it
//! has `JobID`, `State` and `Submit`. Times are read as UTC: `sacct` prints
//! the cluster's local time without its zone (set `TZ=UTC` where it runs,
//! or `SLURM_TIME_FORMAT`, for a history to line up with live events).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use chrono::NaiveDateTime;

use super::{Jobs, Row, Skip, US};
use crate::slurm::task_end;
use crate::source::{Diagnostics, Location, TraceError};

/// The columns a header names, by position.
struct Columns {
    at: BTreeMap<String, usize>,
}

impl Columns {
    fn get<'a>(&self, record: &'a csv::StringRecord, names: &[&str]) -> Option<&'a str> {
        names
            .iter()
            .find_map(|n| self.at.get(*n))
            .and_then(|&i| record.get(i))
            .map(str::trim)
            .filter(|v| !v.is_empty())
    }

    fn has(&self, names: &[&str]) -> bool {
        names.iter().any(|n| self.at.contains_key(*n))
    }
}

/// Every job's rows in `input` (`path`'s), by job; a row that cannot be
/// used is skipped in `diagnostics` with its line and reason.
pub(super) fn rows(
    path: &Path,
    input: Box<dyn BufRead + Send>,
    diagnostics: &Diagnostics,
) -> Result<Jobs, TraceError> {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(b'|')
        .quoting(false)
        .flexible(true)
        .has_headers(true)
        .from_reader(input);
    let header = reader
        .headers()
        .map_err(|e| TraceError::invalid(path, format!("unreadable header: {e}")))?
        .clone();
    if header.len() < 2 {
        return Err(TraceError::invalid(
            path,
            "not sacct's parsable output: its header has no `|` (run sacct with -P or --parsable2)",
        ));
    }
    let columns = Columns {
        at: header
            .iter()
            .enumerate()
            .map(|(i, name)| (name.trim().to_owned(), i))
            .collect(),
    };
    for needed in [&["JobID", "JobIDRaw"][..], &["State"], &["Submit"]] {
        if !columns.has(needed) {
            return Err(TraceError::invalid(
                path,
                format!(
                    "the header names no `{}` column: sacct's --format must include JobID, State and Submit",
                    needed[0]
                ),
            ));
        }
    }
    let at = |line: u64| Location {
        file: path.to_owned(),
        line,
        record: None,
    };
    let mut jobs = Jobs::default();
    for record in reader.records() {
        diagnostics.rows(1);
        let record = match record {
            Ok(r) => r,
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line());
                diagnostics.skip(at(line), "bad_row", e);
                continue;
            }
        };
        let line = record.position().map_or(0, |p| p.line());
        match row(&columns, &record, at(line)) {
            Ok(Some((job_id, row))) => jobs.add(job_id, row),
            Err(Skip::Pending(job_id)) => jobs.pending_range(job_id, diagnostics),
            Ok(None) => {}
            Err(Skip::Note(what)) => diagnostics.note(what),
            Err(Skip::Bad(class, detail)) => diagnostics.skip(at(line), class, detail),
        }
    }
    Ok(jobs)
}

/// A row's job and what it says, or `None` for a row to pass over
/// silently.
fn row(c: &Columns, r: &csv::StringRecord, place: Location) -> Result<Option<(u64, Row)>, Skip> {
    let id = c
        .get(r, &["JobID", "JobIDRaw"])
        .ok_or_else(|| Skip::Bad("missing_field", "no JobID".into()))?;
    if id.contains('.') {
        return Err(Skip::Note("job steps left out: their job's row carries it"));
    }
    let (base, index) = match id.split_once('_') {
        Some((base, rest)) if rest.starts_with('[') => {
            return Err(base.parse::<u64>().map_or_else(
                |_| Skip::Bad("bad_field", format!("JobID `{id}`: not JOB or JOB_INDEX")),
                Skip::Pending,
            ));
        }
        Some((base, index)) => (
            base,
            Some(index.parse::<u32>().map_err(|_| {
                Skip::Bad("bad_field", format!("JobID `{id}`: not JOB or JOB_INDEX"))
            })?),
        ),
        None => (id, None),
    };
    let job_id = base
        .parse::<u64>()
        .map_err(|_| Skip::Bad("bad_field", format!("JobID `{id}`: not JOB or JOB_INDEX")))?;
    let time = |names: &[&str]| -> Result<Option<u64>, Skip> {
        match c.get(r, names) {
            None | Some("Unknown" | "None") => Ok(None),
            Some(text) => parse_time(text).map(Some).ok_or_else(|| {
                Skip::Bad(
                    "bad_time",
                    format!("{} `{text}`: not YYYY-MM-DDTHH:MM:SS", names[0]),
                )
            }),
        }
    };
    let submit_us = time(&["Submit"])?
        .ok_or_else(|| Skip::Bad("missing_field", format!("job {id} has no Submit time")))?;
    let start_us = time(&["Start"])?;
    let state = c.get(r, &["State"]).unwrap_or("");
    let end = task_end(state);
    let end_us = if end.is_some() { time(&["End"])? } else { None };
    let cpus = c
        .get(r, &["NCPUS", "AllocCPUS", "ReqCPUS"])
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|&v| v > 0.0)
        .unwrap_or(1.0);
    let limit_us = match c.get(r, &["TimelimitRaw"]) {
        Some(minutes) => minutes
            .parse::<u64>()
            .ok()
            .and_then(|m| m.checked_mul(60 * US)),
        None => c
            .get(r, &["Timelimit"])
            .and_then(parse_duration_s)
            .and_then(|s| s.checked_mul(US)),
    };
    let name = c.get(r, &["JobName"]).unwrap_or("").to_owned();
    Ok(Some((
        job_id,
        Row {
            place,
            index,
            submit_us,
            start_us,
            end_us,
            end,
            user: c.get(r, &["User"]).unwrap_or("").to_owned(),
            group: c.get(r, &["Group"]).unwrap_or("").to_owned(),
            name,
            partition: c.get(r, &["Partition"]).unwrap_or("").to_owned(),
            cluster: c.get(r, &["Cluster"]).unwrap_or("").to_owned(),
            cpus,
            mem_mb: c
                .get(r, &["ReqMem"])
                .and_then(|m| parse_mem_mb(m, cpus))
                .unwrap_or(0.0),
            limit_us,
        },
    )))
}

/// `2026-01-15T19:33:36` as µs since the epoch, read as UTC.
fn parse_time(text: &str) -> Option<u64> {
    let t = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S").ok()?;
    u64::try_from(t.and_utc().timestamp()).ok()?.checked_mul(US)
}

/// `[D-]HH:MM:SS`, `MM:SS` or `M` (minutes) as seconds; `None` for
/// `UNLIMITED`, `Partition_Limit` and the like.
fn parse_duration_s(text: &str) -> Option<u64> {
    let (days, rest) = match text.split_once('-') {
        Some((d, rest)) => (d.parse::<u64>().ok()?, rest),
        None => (0, text),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(|p| p.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    let secs = match parts[..] {
        [h, m, s] => h * 3600 + m * 60 + s,
        [m, s] if days == 0 => m * 60 + s,
        [h, m] => h * 3600 + m * 60,
        [m] if days == 0 => m * 60,
        [h] => h * 3600,
        _ => return None,
    };
    Some(days * 86_400 + secs)
}

/// `ReqMem` as MB for the job's task: `4000M`, `16G`, `1T`, `512K`; a
/// trailing `c` means per CPU and `n` per node (one node a task here).
fn parse_mem_mb(text: &str, cpus: f64) -> Option<f64> {
    let (text, per_cpu) = match text.strip_suffix('c') {
        Some(t) => (t, true),
        None => (text.strip_suffix('n').unwrap_or(text), false),
    };
    let unit = text.chars().last()?;
    let (number, scale) = match unit {
        'K' => (&text[..text.len() - 1], 1.0 / 1024.0),
        'M' => (&text[..text.len() - 1], 1.0),
        'G' => (&text[..text.len() - 1], 1024.0),
        'T' => (&text[..text.len() - 1], 1024.0 * 1024.0),
        _ => (text, 1.0),
    };
    let mb = number.parse::<f64>().ok()? * scale;
    Some(if per_cpu { mb * cpus } else { mb })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job cancelled before it ran (Slurm's start at its end) ends
    /// with no schedule, as the live watcher says it; an array with a
    /// range still pending stays open.
    #[test]
    fn an_unrun_cancel_has_no_schedule_and_a_pending_range_keeps_its_array_open() {
        let text = "JobID|State|Submit|Start|End\n\
            5|CANCELLED by 0|2026-01-01T00:00:00|2026-01-01T00:00:09|2026-01-01T00:00:09\n\
            6_0|COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:01|2026-01-01T00:00:02\n\
            6_[1-3]|PENDING|2026-01-01T00:00:00|Unknown|Unknown\n";
        let input = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
        let trace = super::super::read("sacct.txt".as_ref(), input, Diagnostics::new(), 0).unwrap();
        let events: Vec<crate::event::Event> = trace.map(Result::unwrap).collect();
        let kinds = |job: u64| -> Vec<String> {
            events
                .iter()
                .filter(|e| e.job_id() == Some(job))
                .map(|e| match e {
                    crate::event::Event::Task(t) => format!("{:?}", t.kind),
                    other => other.type_name().to_owned(),
                })
                .collect()
        };
        assert_eq!(kinds(5), ["job_submitted", "Submit", "Kill", "job_ended"]);
        assert_eq!(kinds(6), ["job_submitted", "Submit", "Schedule", "Finish"]);
    }

    #[test]
    fn durations_and_memory_read_as_slurm_prints_them() {
        assert_eq!(parse_duration_s("1-02:03:04"), Some(93_784));
        assert_eq!(parse_duration_s("02:03:04"), Some(7_384));
        assert_eq!(parse_duration_s("03:04"), Some(184));
        assert_eq!(parse_duration_s("30"), Some(1_800));
        assert_eq!(parse_duration_s("UNLIMITED"), None);
        assert_eq!(parse_mem_mb("1000M", 4.0), Some(1000.0));
        assert_eq!(parse_mem_mb("2Gc", 4.0), Some(8192.0));
        assert_eq!(parse_mem_mb("16Gn", 4.0), Some(16_384.0));
        assert_eq!(parse_time("1970-01-01T00:01:00"), Some(60 * US));
        assert_eq!(parse_time("Unknown"), None);
    }
}
