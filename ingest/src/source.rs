//! What every trace adapter shares: opening (possibly gzipped or
//! zstd-compressed) files while counting the bytes read for progress bars,
//! and the [`Diagnostics`] that collect the rows an adapter had to skip, so a run can go on and end with
//! a summary of what was skipped and why.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::event::{DecodeError, Event};

/// An error that stops an adapter (as opposed to a bad row, which is
/// skipped and recorded in [`Diagnostics`]).
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl TraceError {
    pub fn io(path: &Path, source: io::Error) -> Self {
        TraceError::Io {
            path: path.to_owned(),
            source,
        }
    }

    pub fn invalid(path: &Path, message: impl Into<String>) -> Self {
        TraceError::Invalid {
            path: path.to_owned(),
            message: message.into(),
        }
    }
}

/// Where in the input a row came from: a file and a 1-based line (or, for
/// inputs without lines, a record name such as a VM's name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: PathBuf,
    pub line: u64,
    pub record: Option<String>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.record {
            Some(r) => write!(f, "{}: record `{r}`", self.file.display()),
            None => write!(f, "{}:{}", self.file.display(), self.line),
        }
    }
}

/// One skipped row: where it was and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub at: Location,
    pub reason: String,
}

/// How many examples of each skip reason are kept for the summary.
const EXAMPLES_PER_REASON: usize = 3;

#[derive(Debug, Default)]
struct DiagnosticsInner {
    rows_read: u64,
    skipped: BTreeMap<String, u64>,
    examples: Vec<Skipped>,
    notes: BTreeMap<String, u64>,
}

/// Shared, cheap-to-clone record of what an adapter read, skipped and
/// noticed. Adapters hold one clone; the caller keeps another and reads the
/// summary at the end (or while the run goes on, for progress bars).
#[derive(Debug, Clone, Default)]
pub struct Diagnostics {
    inner: Arc<Mutex<DiagnosticsInner>>,
    bytes_read: Arc<AtomicU64>,
}

impl Diagnostics {
    pub fn new() -> Self {
        Self::default()
    }

    /// Count rows read (good or bad).
    pub fn rows(&self, n: u64) {
        self.lock().rows_read += n;
    }

    /// Record a skipped row. `class` is a short, stable reason class (it
    /// keys the summary); `detail` says exactly what was wrong.
    pub fn skip(&self, at: Location, class: &str, detail: impl fmt::Display) {
        let mut inner = self.lock();
        let count = inner.skipped.entry(class.to_owned()).or_insert(0);
        *count += 1;
        if *count <= EXAMPLES_PER_REASON as u64 {
            inner.examples.push(Skipped {
                at,
                reason: format!("{class}: {detail}"),
            });
        }
    }

    /// Admit `event` if it is within the canonical limits
    /// ([`Event::check_limits`]); otherwise skip the row it came from, at
    /// `at`, like any other bad row (class `out_of_range`, detail naming
    /// the field). Every adapter calls this where a row becomes an event,
    /// so none emits an event the service would dead-letter. `at` is only
    /// called on refusal (so the common path builds no `Location`), with
    /// the error, for adapters whose event spans rows to pick the row.
    pub fn within_limits(&self, event: &Event, at: impl FnOnce(&DecodeError) -> Location) -> bool {
        match event.check_limits() {
            Ok(()) => true,
            Err(err) => {
                self.skip(at(&err), err.kind.as_str(), err);
                false
            }
        }
    }

    /// Record something noteworthy that did not cost a row (a repaired
    /// field, a synthesised event, a documented trace anomaly).
    pub fn note(&self, what: &str) {
        *self.lock().notes.entry(what.to_owned()).or_insert(0) += 1;
    }

    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    pub fn rows_read(&self) -> u64 {
        self.lock().rows_read
    }

    pub fn skipped_total(&self) -> u64 {
        self.lock().skipped.values().sum()
    }

    /// Skip counts by reason class.
    pub fn skipped(&self) -> BTreeMap<String, u64> {
        self.lock().skipped.clone()
    }

    /// The first few skipped rows of each reason.
    pub fn examples(&self) -> Vec<Skipped> {
        self.lock().examples.clone()
    }

    pub fn notes(&self) -> BTreeMap<String, u64> {
        self.lock().notes.clone()
    }

    /// A human-readable summary, one item per line.
    pub fn summary(&self) -> String {
        let inner = self.lock();
        let mut out = format!(
            "{} rows read, {} skipped\n",
            inner.rows_read,
            inner.skipped.values().sum::<u64>()
        );
        for (reason, n) in &inner.skipped {
            out += &format!("  skipped {n:>9}  {reason}\n");
        }
        for ex in &inner.examples {
            out += &format!("    e.g. {}: {}\n", ex.at, ex.reason);
        }
        for (note, n) in &inner.notes {
            out += &format!("  note    {n:>9}  {note}\n");
        }
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DiagnosticsInner> {
        // A panic elsewhere must not hide the diagnostics gathered so far.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn byte_counter(&self) -> Arc<AtomicU64> {
        self.bytes_read.clone()
    }
}

/// Counts bytes as they are read from the underlying (compressed) file.
struct CountingReader<R> {
    inner: R,
    counter: Arc<AtomicU64>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.counter.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Open a file for buffered reading, decompressing it if it is gzip or
/// zstd (told by its magic bytes, not its name). Bytes read from disk are added to
/// `diagnostics.bytes_read()`.
pub fn open_input(
    path: &Path,
    diagnostics: &Diagnostics,
) -> Result<Box<dyn BufRead + Send>, TraceError> {
    let file = File::open(path).map_err(|e| TraceError::io(path, e))?;
    let mut raw = BufReader::with_capacity(
        256 * 1024,
        CountingReader {
            inner: file,
            counter: diagnostics.byte_counter(),
        },
    );
    let head = raw.fill_buf().map_err(|e| TraceError::io(path, e))?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(BufReader::with_capacity(
            256 * 1024,
            flate2::bufread::MultiGzDecoder::new(raw),
        )))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let decoder =
            zstd::stream::read::Decoder::with_buffer(raw).map_err(|e| TraceError::io(path, e))?;
        Ok(Box::new(BufReader::with_capacity(256 * 1024, decoder)))
    } else {
        Ok(Box::new(raw))
    }
}

/// Total size on disk of `paths`, for progress bars over `bytes_read`.
pub fn total_size(paths: &[PathBuf]) -> u64 {
    paths
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

/// The files under `dir` (recursively) whose names start with `prefix`
/// (any extension), sorted by path; `dir` itself if it is a file.
pub fn list_files(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>, TraceError> {
    if dir.is_file() {
        return Ok(vec![dir.to_owned()]);
    }
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| TraceError::io(&d, e))? {
            let entry = entry.map_err(|e| TraceError::io(&d, e))?;
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
            {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A CSV reader's error at `path`: an I/O failure as such, anything else
/// as invalid input.
pub(crate) fn csv_error(path: &Path, e: csv::Error) -> TraceError {
    if e.is_io_error() {
        if let csv::ErrorKind::Io(io) = e.into_kind() {
            return TraceError::io(path, io);
        }
        return TraceError::invalid(path, "I/O error");
    }
    TraceError::invalid(path, e.to_string())
}

/// A stream of canonical events from a trace, in time order, together with
/// what the adapter skipped and noticed along the way.
pub struct Trace {
    events: Box<dyn Iterator<Item = Result<Event, TraceError>> + Send>,
    diagnostics: Diagnostics,
    input_bytes: u64,
}

impl Trace {
    pub fn new(
        events: impl Iterator<Item = Result<Event, TraceError>> + Send + 'static,
        diagnostics: Diagnostics,
        input_bytes: u64,
    ) -> Self {
        Trace {
            events: Box::new(events),
            diagnostics,
            input_bytes,
        }
    }

    pub fn diagnostics(&self) -> &Diagnostics {
        &self.diagnostics
    }

    /// Size of the input files on disk, to set against
    /// `diagnostics().bytes_read()` for progress.
    pub fn input_bytes(&self) -> u64 {
        self.input_bytes
    }
}

impl Iterator for Trace {
    type Item = Result<Event, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.events.next()
    }
}

/// A trace's events, read on the first call to `next` rather than when the
/// trace is opened, so that a progress display can watch `bytes_read`
/// meanwhile. `load` reads the input into the events; its error is the
/// stream's one item.
pub(crate) struct Deferred<L, I> {
    load: Option<L>,
    events: Option<I>,
}

impl<L, I> Deferred<L, I> {
    pub(crate) fn new(load: L) -> Self {
        Deferred {
            load: Some(load),
            events: None,
        }
    }
}

impl<L, I> Iterator for Deferred<L, I>
where
    L: FnOnce() -> Result<I, TraceError>,
    I: Iterator<Item = Result<Event, TraceError>>,
{
    type Item = Result<Event, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(load) = self.load.take() {
            match load() {
                Ok(events) => self.events = Some(events),
                Err(e) => return Some(Err(e)),
            }
        }
        self.events.as_mut()?.next()
    }
}
