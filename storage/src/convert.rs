//! Trace → Parquet tables: stream a trace's canonical events into the
//! `events` table while folding them into the ground-truth views that fill
//! `jobs`, `tasks` and `machines`.

use std::path::Path;

use jobcast_ingest::truth::{TruthAnomalies, TruthBuilder};
use jobcast_ingest::{Trace, TraceError};

use crate::tables::{TableError, TableSummary, TraceTablesWriter};

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Table(#[from] TableError),
}

/// What a conversion did.
#[derive(Debug, Clone)]
pub struct ConvertSummary {
    pub events: u64,
    pub tables: Vec<TableSummary>,
    pub anomalies: TruthAnomalies,
}

/// How far a conversion has got, for progress bars.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub events: u64,
    pub bytes_read: u64,
    pub input_bytes: u64,
}

/// Events between two progress callbacks.
const PROGRESS_EVERY: u64 = 16 * 1024;

/// Convert `trace` into Parquet tables in `dir`. `progress` is called every
/// few thousand events. Rows the adapter skipped are in
/// `trace.diagnostics()`, which the caller keeps a clone of.
pub fn convert(
    trace: Trace,
    dir: &Path,
    mut progress: impl FnMut(Progress),
) -> Result<ConvertSummary, ConvertError> {
    let diagnostics = trace.diagnostics().clone();
    let input_bytes = trace.input_bytes();
    let mut writer = TraceTablesWriter::create(dir)?;
    let mut truth = TruthBuilder::new();
    let mut events = 0u64;
    for event in trace {
        let event = event?;
        writer.write_event(&event)?;
        truth.apply(&event);
        for job in truth.take_completed() {
            writer.write_job(&job)?;
        }
        for machine in truth.take_machines() {
            writer.write_machine(&machine)?;
        }
        events += 1;
        if events.is_multiple_of(PROGRESS_EVERY) {
            progress(Progress {
                events,
                bytes_read: diagnostics.bytes_read(),
                input_bytes,
            });
        }
    }
    let anomalies = truth.anomalies().clone();
    let (jobs, machines) = truth.finish();
    for job in &jobs {
        writer.write_job(job)?;
    }
    for machine in &machines {
        writer.write_machine(machine)?;
    }
    progress(Progress {
        events,
        bytes_read: diagnostics.bytes_read(),
        input_bytes,
    });
    Ok(ConvertSummary {
        events,
        tables: writer.finish()?,
        anomalies,
    })
}
