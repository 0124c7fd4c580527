//! Google `clusterdata-2019` (trace format v3, see
//! `clusterdata_trace_format_v3.proto`): the `collection_events` and
//! `instance_events` tables, exported as JSON lines (BigQuery: one object per
//! line, `resource_request` nested as `{"cpus":..,"memory":..}`, int64
//! values possibly as strings) or as CSV with a header row (nested columns
//! as `resource_request.cpus` / `resource_request.memory`, or `cpus` /
//! `memory`).
//!
//! The input is a directory holding files whose names start with
//! `collection_events` and `instance_events` (any number of parts, JSON or
//! CSV, told apart by content; plain or gzip), or one such file. Each part
//! must be sorted by time, as the exports are; parts are merged. A row
//! earlier than its predecessor in the same part is skipped
//! (`out_of_order`), so the output is always in time order.
//!
//! Mapping. Only collections of type job (0) become canonical jobs; alloc
//! sets and their instances are dropped (noted). Collection `SUBMIT` gives
//! `job_submitted`, `FINISH`/`FAIL`/`KILL`/`LOST` give `job_ended`; other
//! collection events are dropped (noted by type). Instance events give task
//! events (`SUBMIT`, `SCHEDULE`, `EVICT`, `FAIL`, `FINISH`, `KILL`, `LOST`,
//! `UPDATE_*` as `update`); `QUEUE` and `ENABLE` are dropped (noted). An
//! instance event of a job not yet submitted synthesises the job's
//! `job_submitted` at that time (noted); a later real `SUBMIT` of that job
//! is then a repeat and dropped (noted). At equal times job submits come
//! before task events, and these before job ends.
//!
//! Times are µs since the trace start; 0 means before it. `i64::MAX` or more
//! means after its end: those rows are dropped (noted).
//!
//! `num_tasks` (distinct instance indices of the collection) and the
//! requests (the collection's earliest instance `resource_request`) need a
//! first pass over every file, which also learns each collection's type and
//! names (for synthesised submits). Every file is therefore read twice, and
//! `input_bytes` counts it twice so progress ends at 100%. Memory grows with
//! the number of distinct (collection, instance) pairs; every part is open at
//! once during the merge (about 0.5 MiB of buffers each).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

use crate::event::{Event, JobEnded, JobOutcome, JobSubmitted, MAX_TIME_US, TaskEvent, TaskKind};
use crate::merge_by_key::MergeByKey;
use crate::source::{
    Deferred, Diagnostics, Location, Trace, TraceError, csv_error, list_files, open_input,
    total_size,
};

const SUBMIT: u8 = 0;
// QUEUE = 1 and ENABLE = 2 map to nothing.
const SCHEDULE: u8 = 3;
const EVICT: u8 = 4;
const FAIL: u8 = 5;
const FINISH: u8 = 6;
const KILL: u8 = 7;
const LOST: u8 = 8;
const UPDATE_PENDING: u8 = 9;
const UPDATE_RUNNING: u8 = 10;

/// Event type names, indexed by code.
const EVENT_NAMES: [&str; 11] = [
    "SUBMIT",
    "QUEUE",
    "ENABLE",
    "SCHEDULE",
    "EVICT",
    "FAIL",
    "FINISH",
    "KILL",
    "LOST",
    "UPDATE_PENDING",
    "UPDATE_RUNNING",
];

/// `collection_type` of alloc sets (jobs are 0).
const ALLOC_SET: u8 = 1;

/// Open a Google 2019 trace. The files are read on the first call to
/// `next`, so a progress display can watch `bytes_read` meanwhile.
pub fn open(input: &Path) -> Result<Trace, TraceError> {
    let parts = find_parts(input)?;
    let diagnostics = Diagnostics::new();
    let paths: Vec<PathBuf> = parts.iter().map(|p| p.path.clone()).collect();
    let mapping = diagnostics.clone();
    let events = Deferred::new(move || Mapper::new(&parts, &mapping));
    Ok(Trace::new(events, diagnostics, 2 * total_size(&paths)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    Collections,
    Instances,
}

struct Part {
    path: PathBuf,
    table: Table,
    /// `None` for JSON lines, the header's columns for CSV.
    csv: Option<Columns>,
}

fn find_parts(input: &Path) -> Result<Vec<Part>, TraceError> {
    let mut found = Vec::new();
    if input.is_file() {
        let name = input
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with("collection_events") {
            found.push((input.to_owned(), Table::Collections));
        } else if name.starts_with("instance_events") {
            found.push((input.to_owned(), Table::Instances));
        } else {
            return Err(TraceError::invalid(
                input,
                "expected a collection_events or instance_events file, or a directory holding them",
            ));
        }
    } else {
        for path in list_files(input, "collection_events")? {
            found.push((path, Table::Collections));
        }
        for path in list_files(input, "instance_events")? {
            found.push((path, Table::Instances));
        }
    }
    if found.is_empty() {
        return Err(TraceError::invalid(
            input,
            "no collection_events or instance_events files",
        ));
    }
    found
        .into_iter()
        .map(|(path, table)| {
            let csv = sniff(&path, table)?;
            Ok(Part { path, table, csv })
        })
        .collect()
}

/// JSON lines start with `{`; anything else must be CSV with a usable
/// header. A header lacking a required column makes the file unusable,
/// which is an error rather than millions of skipped rows.
fn sniff(path: &Path, table: Table) -> Result<Option<Columns>, TraceError> {
    // A scratch `Diagnostics`: peeking is not reading progress.
    let mut input = open_input(path, &Diagnostics::new())?;
    loop {
        let buf = input.fill_buf().map_err(|e| TraceError::io(path, e))?;
        if buf.is_empty() {
            return Ok(None);
        }
        match buf.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(i) if buf[i] == b'{' => return Ok(None),
            Some(_) => break,
            None => {
                let n = buf.len();
                input.consume(n);
            }
        }
    }
    let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(input);
    let header = reader.byte_headers().map_err(|e| csv_error(path, e))?;
    Columns::from_header(header, table)
        .map(Some)
        .map_err(|m| TraceError::invalid(path, m))
}

/// Where each field is in a CSV part.
#[derive(Debug, Clone)]
struct Columns {
    width: usize,
    time: usize,
    event_type: usize,
    collection_id: usize,
    instance_index: Option<usize>,
    priority: Option<usize>,
    scheduling_class: Option<usize>,
    collection_type: Option<usize>,
    missing_type: Option<usize>,
    user: Option<usize>,
    collection_name: Option<usize>,
    collection_logical_name: Option<usize>,
    start_after_collection_ids: Option<usize>,
    machine_id: Option<usize>,
    cpus: Option<usize>,
    memory: Option<usize>,
}

impl Columns {
    fn from_header(header: &csv::ByteRecord, table: Table) -> Result<Columns, String> {
        let names: Vec<String> = header
            .iter()
            .map(|h| String::from_utf8_lossy(h).trim().to_owned())
            .collect();
        let find = |alternatives: &[&str]| {
            alternatives
                .iter()
                .find_map(|want| names.iter().position(|n| n == want))
        };
        let require = |name: &str| {
            find(&[name]).ok_or_else(|| format!("the CSV header has no `{name}` column"))
        };
        Ok(Columns {
            width: names.len(),
            time: require("time")?,
            event_type: require("type")?,
            collection_id: require("collection_id")?,
            instance_index: match table {
                Table::Instances => Some(require("instance_index")?),
                Table::Collections => None,
            },
            priority: find(&["priority"]),
            scheduling_class: find(&["scheduling_class"]),
            collection_type: find(&["collection_type"]),
            missing_type: find(&["missing_type"]),
            user: find(&["user"]),
            collection_name: find(&["collection_name"]),
            collection_logical_name: find(&["collection_logical_name"]),
            start_after_collection_ids: find(&["start_after_collection_ids"]),
            machine_id: find(&["machine_id"]),
            cpus: find(&["resource_request.cpus", "cpus"]),
            memory: find(&["resource_request.memory", "memory"]),
        })
    }

    fn raw(&self, record: &csv::StringRecord) -> Raw {
        let get = |i: Option<usize>| {
            i.and_then(|i| record.get(i))
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let cpus = get(self.cpus);
        let memory = get(self.memory);
        Raw {
            time: get(Some(self.time)),
            event_type: get(Some(self.event_type)),
            collection_id: get(Some(self.collection_id)),
            instance_index: get(self.instance_index),
            priority: get(self.priority),
            scheduling_class: get(self.scheduling_class),
            collection_type: get(self.collection_type),
            missing_type: get(self.missing_type),
            user: get(self.user),
            collection_name: get(self.collection_name),
            collection_logical_name: get(self.collection_logical_name),
            start_after_collection_ids: get(self.start_after_collection_ids)
                .map(serde_json::Value::String),
            machine_id: get(self.machine_id),
            resource_request: (cpus.is_some() || memory.is_some())
                .then_some(Request { cpus, memory }),
        }
    }
}

/// One row as text, whichever the file format. Unknown JSON fields (the
/// trace has more than are used here) are ignored.
#[derive(Debug, Deserialize)]
struct Raw {
    #[serde(default, deserialize_with = "text")]
    time: Option<String>,
    #[serde(rename = "type", default, deserialize_with = "text")]
    event_type: Option<String>,
    #[serde(default, deserialize_with = "text")]
    collection_id: Option<String>,
    #[serde(default, deserialize_with = "text")]
    instance_index: Option<String>,
    #[serde(default, deserialize_with = "text")]
    priority: Option<String>,
    #[serde(default, deserialize_with = "text")]
    scheduling_class: Option<String>,
    #[serde(default, deserialize_with = "text")]
    collection_type: Option<String>,
    #[serde(default, deserialize_with = "text")]
    missing_type: Option<String>,
    #[serde(default, deserialize_with = "text")]
    user: Option<String>,
    #[serde(default, deserialize_with = "text")]
    collection_name: Option<String>,
    #[serde(default, deserialize_with = "text")]
    collection_logical_name: Option<String>,
    #[serde(default)]
    start_after_collection_ids: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "text")]
    machine_id: Option<String>,
    #[serde(default)]
    resource_request: Option<Request>,
}

#[derive(Debug, Default, Deserialize)]
struct Request {
    #[serde(default, deserialize_with = "text")]
    cpus: Option<String>,
    #[serde(default, deserialize_with = "text")]
    memory: Option<String>,
}

/// A JSON string or number as text (BigQuery writes int64 as strings);
/// `null` is absent.
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(s) => Ok(Some(s.trim().to_owned()).filter(|s| !s.is_empty())),
        serde_json::Value::Number(n) => Ok(Some(n.to_string())),
        other => Err(serde::de::Error::custom(format!(
            "expected a number or a string, found {other}"
        ))),
    }
}

/// A skipped row: a stable reason class and the details.
type Bad = (&'static str, String);

/// A row as read: its text, or why it could not be read.
type RawRow = Result<Raw, Bad>;

/// Where a row is: the index of its part and its line.
type RowAt = (usize, u64);

/// A validated row.
#[derive(Debug)]
struct Row {
    at: RowAt,
    /// µs; `u64::MAX` stands for anything beyond `u64`.
    time: u64,
    event_type: u8,
    collection_id: u64,
    priority: u32,
    scheduling_class: u8,
    collection_type: Option<u8>,
    missing_type: bool,
    detail: Detail,
}

#[derive(Debug)]
enum Detail {
    Collection {
        user: String,
        name: String,
        logical_name: String,
        start_after: bool,
    },
    Instance {
        index: u32,
        machine: Option<u64>,
        cpus: Option<f64>,
        memory: Option<f64>,
    },
}

fn parse_row(raw: Raw, table: Table, at: RowAt) -> Result<Row, Bad> {
    let time = parse_time(required(&raw.time, "time")?)?;
    let event_type =
        parse_code(required(&raw.event_type, "type")?, &EVENT_NAMES).ok_or_else(|| {
            (
                "bad_event_type",
                format!("type `{}`", raw.event_type.as_deref().unwrap_or_default()),
            )
        })?;
    let collection_id: u64 = parse_int(
        required(&raw.collection_id, "collection_id")?,
        "collection_id",
    )?;
    let priority = optional_int(&raw.priority, "priority")?.unwrap_or(0);
    let scheduling_class = optional_int(&raw.scheduling_class, "scheduling_class")?.unwrap_or(0);
    let collection_type = match raw.collection_type.as_deref() {
        None => None,
        Some(s) => Some(
            parse_code(s, &["JOB", "ALLOC_SET"])
                .ok_or_else(|| ("out_of_range", format!("collection_type `{s}`")))?,
        ),
    };
    let missing_type = raw
        .missing_type
        .as_deref()
        .is_some_and(|m| m != "0" && m != "MISSING_TYPE_NONE");
    let detail = match table {
        Table::Collections => Detail::Collection {
            start_after: raw
                .start_after_collection_ids
                .as_ref()
                .is_some_and(|v| match v {
                    serde_json::Value::Null => false,
                    serde_json::Value::Array(a) => !a.is_empty(),
                    serde_json::Value::String(s) => !matches!(s.trim(), "" | "[]"),
                    _ => true,
                }),
            user: raw.user.unwrap_or_default(),
            name: raw.collection_name.unwrap_or_default(),
            logical_name: raw.collection_logical_name.unwrap_or_default(),
        },
        Table::Instances => {
            let machine: Option<i64> = optional_int(&raw.machine_id, "machine_id")?;
            let request = raw.resource_request.unwrap_or_default();
            Detail::Instance {
                index: parse_int(
                    required(&raw.instance_index, "instance_index")?,
                    "instance_index",
                )?,
                // 0 is NO_MACHINE, -1 DEDICATED_MACHINE: no machine id.
                machine: machine
                    .and_then(|m| u64::try_from(m).ok())
                    .filter(|&m| m > 0),
                cpus: resource(&request.cpus, "resource_request.cpus")?,
                memory: resource(&request.memory, "resource_request.memory")?,
            }
        }
    };
    Ok(Row {
        at,
        time,
        event_type,
        collection_id,
        priority,
        scheduling_class,
        collection_type,
        missing_type,
        detail,
    })
}

fn required<'a>(field: &'a Option<String>, name: &str) -> Result<&'a str, Bad> {
    field
        .as_deref()
        .ok_or_else(|| ("missing_field", format!("no {name}")))
}

/// A time in µs. Integers too large for `u64` are still "after the end";
/// JSON hands those over as floats (`1.8446744073709552e19`).
fn parse_time(s: &str) -> Result<u64, Bad> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(s.parse().unwrap_or(u64::MAX));
    }
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f >= MAX_TIME_US as f64 => Ok(u64::MAX),
        _ => Err(("bad_number", format!("time `{s}`"))),
    }
}

/// An enum value given as its code or its name.
fn parse_code(s: &str, names: &[&str]) -> Option<u8> {
    match s.parse::<u8>() {
        Ok(code) => (usize::from(code) < names.len()).then_some(code),
        Err(_) => names
            .iter()
            .position(|n| *n == s)
            .and_then(|i| u8::try_from(i).ok()),
    }
}

/// An integer that must fit `T`: unparsable is `bad_number`, a well-formed
/// integer that does not fit (e.g. negative) is `out_of_range`.
fn parse_int<T: TryFrom<i128>>(s: &str, name: &str) -> Result<T, Bad> {
    let wide: i128 = s
        .parse()
        .map_err(|_| ("bad_number", format!("{name} `{s}`")))?;
    T::try_from(wide).map_err(|_| ("out_of_range", format!("{name} {s}")))
}

fn optional_int<T: TryFrom<i128>>(field: &Option<String>, name: &str) -> Result<Option<T>, Bad> {
    field.as_deref().map(|s| parse_int(s, name)).transpose()
}

fn resource(field: &Option<String>, name: &str) -> Result<Option<f64>, Bad> {
    let Some(s) = field.as_deref() else {
        return Ok(None);
    };
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
        Ok(_) => Err(("out_of_range", format!("{name} {s}"))),
        Err(_) => Err(("bad_number", format!("{name} `{s}`"))),
    }
}

/// Reads one part's rows, JSON or CSV.
enum RowReader {
    Json {
        input: Box<dyn BufRead + Send>,
        buf: Vec<u8>,
        line: u64,
    },
    Csv {
        // Boxed: a CSV reader is far larger than the JSON variant.
        input: Box<csv::Reader<Box<dyn BufRead + Send>>>,
        columns: Columns,
        record: csv::ByteRecord,
    },
}

impl RowReader {
    fn open(part: &Part, diagnostics: &Diagnostics) -> Result<Self, TraceError> {
        let input = open_input(&part.path, diagnostics)?;
        Ok(match &part.csv {
            None => RowReader::Json {
                input,
                buf: Vec::new(),
                line: 0,
            },
            Some(columns) => RowReader::Csv {
                input: Box::new(csv::ReaderBuilder::new().flexible(true).from_reader(input)),
                columns: columns.clone(),
                record: csv::ByteRecord::new(),
            },
        })
    }

    /// The next row and its line, or `None` at the end of the file.
    fn next(&mut self, path: &Path) -> Result<Option<(u64, RawRow)>, TraceError> {
        match self {
            RowReader::Json { input, buf, line } => loop {
                buf.clear();
                if input
                    .read_until(b'\n', buf)
                    .map_err(|e| TraceError::io(path, e))?
                    == 0
                {
                    return Ok(None);
                }
                *line += 1;
                let text = buf.trim_ascii();
                if text.is_empty() {
                    continue;
                }
                let raw = serde_json::from_slice(text).map_err(|e| {
                    let class = match e.classify() {
                        serde_json::error::Category::Data => "bad_field",
                        _ => "bad_json",
                    };
                    (class, e.to_string())
                });
                return Ok(Some((*line, raw)));
            },
            RowReader::Csv {
                input,
                columns,
                record,
            } => {
                if !input
                    .read_byte_record(record)
                    .map_err(|e| csv_error(path, e))?
                {
                    return Ok(None);
                }
                let line = record.position().map_or(0, |p| p.line());
                let raw = if record.len() != columns.width {
                    Err((
                        "columns",
                        format!("{} columns, the header has {}", record.len(), columns.width),
                    ))
                } else {
                    csv::StringRecord::from_byte_record(record.clone())
                        .map(|r| columns.raw(&r))
                        .map_err(|_| ("encoding", "a field is not UTF-8".to_owned()))
                };
                Ok(Some((line, raw)))
            }
        }
    }
}

/// What the first pass learns about a collection.
#[derive(Default)]
struct Collection {
    alloc_set: bool,
    /// From the collection's earliest event, for synthesised submits.
    first_time: Option<u64>,
    /// Where that event is, to name if a synthesised submit is refused.
    first_at: RowAt,
    user: String,
    name: String,
    logical_name: String,
    priority: u32,
    scheduling_class: u8,
    /// Distinct instance indices.
    instances: HashSet<u32>,
    /// The earliest instance request: (time, cpus, memory).
    request: Option<(u64, f64, f64)>,
}

/// First pass: collection types and names, instance counts and requests,
/// from the same rows the second pass emits. Bad rows are left for the
/// second pass to report.
fn survey(
    parts: &[Part],
    diagnostics: &Diagnostics,
) -> Result<HashMap<u64, Collection>, TraceError> {
    let mut collections: HashMap<u64, Collection> = HashMap::new();
    for (index, part) in parts.iter().enumerate() {
        for row in PartRows::open(part, index, diagnostics, false)? {
            let row = row?;
            let c = collections.entry(row.collection_id).or_default();
            if row.collection_type == Some(ALLOC_SET) {
                c.alloc_set = true;
            }
            match row.detail {
                Detail::Collection {
                    user,
                    name,
                    logical_name,
                    ..
                } => {
                    if c.first_time.is_none_or(|t| row.time < t) {
                        c.first_time = Some(row.time);
                        c.first_at = row.at;
                        c.user = user;
                        c.name = name;
                        c.logical_name = logical_name;
                        c.priority = row.priority;
                        c.scheduling_class = row.scheduling_class;
                    }
                }
                Detail::Instance {
                    index,
                    cpus,
                    memory,
                    ..
                } => {
                    c.instances.insert(index);
                    if (cpus.is_some() || memory.is_some())
                        && c.request.is_none_or(|(t, _, _)| row.time < t)
                    {
                        c.request = Some((row.time, cpus.unwrap_or(0.0), memory.unwrap_or(0.0)));
                    }
                }
            }
        }
    }
    Ok(collections)
}

/// One part's validated rows in time order. With `report`, rows read,
/// skipped rows and notes go to the diagnostics (the second pass); without,
/// they are silently left out (the first pass).
struct PartRows {
    reader: RowReader,
    path: PathBuf,
    /// The part's index in the trace's parts.
    index: usize,
    table: Table,
    diagnostics: Diagnostics,
    report: bool,
    last_time: u64,
    done: bool,
}

impl PartRows {
    fn open(
        part: &Part,
        index: usize,
        diagnostics: &Diagnostics,
        report: bool,
    ) -> Result<PartRows, TraceError> {
        Ok(PartRows {
            reader: RowReader::open(part, diagnostics)?,
            path: part.path.clone(),
            index,
            table: part.table,
            diagnostics: diagnostics.clone(),
            report,
            last_time: 0,
            done: false,
        })
    }

    fn note(&self, what: &str) {
        if self.report {
            self.diagnostics.note(what);
        }
    }
}

impl Iterator for PartRows {
    type Item = Result<Row, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let (line, raw) = match self.reader.next(&self.path) {
                Ok(Some(row)) => row,
                Ok(None) => {
                    self.done = true;
                    return None;
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            if self.report {
                self.diagnostics.rows(1);
            }
            let row = match raw.and_then(|r| parse_row(r, self.table, (self.index, line))) {
                Ok(row) if row.time >= MAX_TIME_US => {
                    self.note("rows after the end of the trace dropped");
                    continue;
                }
                Ok(row) if row.time < self.last_time => Err((
                    "out_of_order",
                    format!(
                        "time {} after {} in the same file",
                        row.time, self.last_time
                    ),
                )),
                other => other,
            };
            match row {
                Ok(row) => {
                    self.last_time = row.time;
                    if row.missing_type {
                        self.note("rows with missing_type set (kept)");
                    }
                    if matches!(
                        row.detail,
                        Detail::Collection {
                            start_after: true,
                            ..
                        }
                    ) {
                        self.note("start_after_collection_ids ignored");
                    }
                    return Some(Ok(row));
                }
                Err((class, detail)) if self.report => self.diagnostics.skip(
                    Location {
                        file: self.path.clone(),
                        line,
                        record: None,
                    },
                    class,
                    detail,
                ),
                Err(_) => {}
            }
        }
        None
    }
}

/// Ties at one time: job submits, then task events, then job ends.
fn merge_key(row: &Row) -> (u64, u8) {
    let class = match (&row.detail, row.event_type) {
        (Detail::Collection { .. }, SUBMIT) => 0,
        (Detail::Collection { .. }, FAIL | FINISH | KILL | LOST) => 2,
        _ => 1,
    };
    (row.time, class)
}

type Merged = MergeByKey<Row, (u64, u8), fn(&Row) -> (u64, u8)>;

/// One part's rows, as the merge takes them.
type RowSource = Box<dyn Iterator<Item = Result<Row, TraceError>> + Send>;

/// Turns merged rows into canonical events.
struct Mapper {
    rows: Merged,
    /// The parts' paths, indexed by [`RowAt`].
    paths: Vec<PathBuf>,
    collections: HashMap<u64, Collection>,
    submitted: HashSet<u64>,
    ended: HashSet<u64>,
    out: VecDeque<Event>,
    diagnostics: Diagnostics,
}

impl Mapper {
    fn new(parts: &[Part], diagnostics: &Diagnostics) -> Result<Mapper, TraceError> {
        let collections = survey(parts, diagnostics)?;
        let mut sources: Vec<RowSource> = Vec::new();
        for (index, part) in parts.iter().enumerate() {
            sources.push(Box::new(PartRows::open(part, index, diagnostics, true)?));
        }
        Ok(Mapper {
            rows: MergeByKey::new(sources, merge_key as fn(&Row) -> (u64, u8)),
            paths: parts.iter().map(|p| p.path.clone()).collect(),
            collections,
            submitted: HashSet::new(),
            ended: HashSet::new(),
            out: VecDeque::new(),
            diagnostics: diagnostics.clone(),
        })
    }

    fn map_row(&mut self, row: Row) {
        let id = row.collection_id;
        let known = self.collections.get(&id);
        let alloc_set =
            row.collection_type == Some(ALLOC_SET) || known.is_some_and(|c| c.alloc_set);
        let type_name = EVENT_NAMES[usize::from(row.event_type)];
        match row.detail {
            Detail::Collection { .. } if alloc_set => {
                self.diagnostics.note("alloc set collection events dropped")
            }
            Detail::Instance { .. } if alloc_set => {
                self.diagnostics.note("alloc set instance events dropped")
            }
            Detail::Collection {
                user,
                name,
                logical_name,
                ..
            } => match row.event_type {
                SUBMIT if self.submitted.contains(&id) => {
                    self.diagnostics.note("repeated job submits dropped")
                }
                SUBMIT => {
                    let meta = JobMeta {
                        user,
                        name,
                        logical_name,
                        priority: row.priority,
                        scheduling_class: row.scheduling_class,
                    };
                    self.submit(row.time, id, meta, row.at);
                }
                FAIL | FINISH | KILL | LOST => {
                    let outcome = match row.event_type {
                        FAIL => JobOutcome::Fail,
                        FINISH => JobOutcome::Finish,
                        KILL => JobOutcome::Kill,
                        _ => JobOutcome::Lost,
                    };
                    if !self.submitted.contains(&id) {
                        self.diagnostics.note("job ends without a submit dropped");
                    } else if !self.ended.insert(id) {
                        self.diagnostics.note("repeated job ends dropped");
                    } else {
                        let end = Event::JobEnded(JobEnded {
                            time_us: row.time,
                            job_id: id,
                            outcome,
                        });
                        self.emit(end, row.at);
                    }
                }
                _ => self
                    .diagnostics
                    .note(&format!("collection {type_name} events dropped")),
            },
            Detail::Instance { index, machine, .. } => {
                if !self.submitted.contains(&id) {
                    // A refused synthesised submit names the collection
                    // row its names came from, if any, else this row.
                    let (meta, at) = match known {
                        Some(c) if c.first_time.is_some() => (
                            JobMeta {
                                user: c.user.clone(),
                                name: c.name.clone(),
                                logical_name: c.logical_name.clone(),
                                priority: c.priority,
                                scheduling_class: c.scheduling_class,
                            },
                            c.first_at,
                        ),
                        _ => (
                            JobMeta {
                                user: String::new(),
                                name: String::new(),
                                logical_name: String::new(),
                                priority: row.priority,
                                scheduling_class: row.scheduling_class,
                            },
                            row.at,
                        ),
                    };
                    self.submit(row.time, id, meta, at);
                    self.diagnostics
                        .note("job submits synthesised at a first instance event");
                }
                let kind = match row.event_type {
                    SUBMIT => TaskKind::Submit,
                    SCHEDULE => TaskKind::Schedule,
                    EVICT => TaskKind::Evict,
                    FAIL => TaskKind::Fail,
                    FINISH => TaskKind::Finish,
                    KILL => TaskKind::Kill,
                    LOST => TaskKind::Lost,
                    UPDATE_PENDING | UPDATE_RUNNING => TaskKind::Update,
                    // QUEUE, ENABLE: no canonical counterpart.
                    _ => {
                        self.diagnostics
                            .note(&format!("instance {type_name} events dropped"));
                        return;
                    }
                };
                let task = Event::Task(TaskEvent {
                    time_us: row.time,
                    job_id: id,
                    task_index: index,
                    kind,
                    machine_id: machine,
                    stage: None,
                });
                self.emit(task, row.at);
            }
        }
    }

    /// Queue `event` if it is within the canonical limits; otherwise skip
    /// the row at `at`.
    fn emit(&mut self, event: Event, (part, line): RowAt) {
        let at = || Location {
            file: self.paths[part].clone(),
            line,
            record: None,
        };
        if self.diagnostics.within_limits(&event, |_| at()) {
            self.out.push_back(event);
        }
    }

    /// Queue a `job_submitted`, with the first pass's task count and request.
    /// A refused one still marks the job submitted, so it is reported once
    /// rather than resynthesised at each of the job's instance rows; the
    /// job's other events follow, as in Google 2011.
    fn submit(&mut self, time_us: u64, job_id: u64, meta: JobMeta, at: RowAt) {
        self.submitted.insert(job_id);
        let known = self.collections.get(&job_id);
        let (_, cpu_request, mem_request) = known.and_then(|c| c.request).unwrap_or_default();
        let submit = Event::JobSubmitted(JobSubmitted {
            time_us,
            job_id,
            user: meta.user,
            group: String::new(),
            job_name: meta.name,
            logical_name: meta.logical_name,
            scheduling_class: meta.scheduling_class,
            priority: meta.priority,
            cpu_request,
            mem_request,
            partition: String::new(),
            time_limit_us: None,
            deadline_us: None,
            num_tasks: known.map_or(0, |c| u32::try_from(c.instances.len()).unwrap_or(u32::MAX)),
            stages: None,
            cluster: String::new(),
        });
        self.emit(submit, at);
    }
}

impl Iterator for Mapper {
    type Item = Result<Event, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(event) = self.out.pop_front() {
                return Some(Ok(event));
            }
            match self.rows.next()? {
                Ok(row) => self.map_row(row),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// What a `job_submitted` takes from the collection's own rows.
struct JobMeta {
    user: String,
    name: String,
    logical_name: String,
    priority: u32,
    scheduling_class: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_numbers() {
        assert_eq!(parse_code("3", &EVENT_NAMES), Some(SCHEDULE));
        assert_eq!(
            parse_code("UPDATE_RUNNING", &EVENT_NAMES),
            Some(UPDATE_RUNNING)
        );
        assert_eq!(parse_code("11", &EVENT_NAMES), None);
        assert_eq!(parse_code("-1", &EVENT_NAMES), None);
        assert_eq!(parse_code("ALLOC_SET", &["JOB", "ALLOC_SET"]), Some(1));
        assert_eq!(parse_time("0"), Ok(0));
        assert_eq!(parse_time("99999999999999999999999"), Ok(u64::MAX));
        assert_eq!(parse_time("-1").unwrap_err().0, "bad_number");
        assert_eq!(parse_time("1.5").unwrap_err().0, "bad_number");
        assert_eq!(parse_time("1.8446744073709552e19"), Ok(u64::MAX));
        assert_eq!(parse_time("inf").unwrap_err().0, "bad_number");
        assert_eq!(parse_int::<u32>("-1", "x").unwrap_err().0, "out_of_range");
        assert_eq!(parse_int::<u32>("x", "x").unwrap_err().0, "bad_number");
        assert_eq!(
            parse_int::<u64>("9223372036854775807", "x"),
            Ok(i64::MAX as u64)
        );
        assert_eq!(
            resource(&Some("-0.5".into()), "c").unwrap_err().0,
            "out_of_range"
        );
        assert_eq!(
            resource(&Some("NaN".into()), "c").unwrap_err().0,
            "out_of_range"
        );
    }
}
