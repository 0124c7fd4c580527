//! SQL over the Parquet trace tables with DataFusion: the engine behind
//! `jobcast sql`.

use std::path::Path;

use arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use datafusion::sql::parser::DFParser;

use crate::tables::TABLES;

/// How query results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// An aligned text table.
    Table,
    /// CSV with a header row.
    Csv,
    /// A JSON array of row objects.
    Json,
}

impl std::str::FromStr for OutputFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "table" => Ok(OutputFormat::Table),
            "csv" => Ok(OutputFormat::Csv),
            "json" => Ok(OutputFormat::Json),
            other => Err(format!(
                "unknown output format `{other}` (expected table, csv or json)"
            )),
        }
    }
}

/// A DataFusion session with every trace table found in `dir` registered
/// under its name (`events`, `jobs`, `tasks`, `machines`). A table may be a
/// single `NAME.parquet` file or a `NAME/` directory of Parquet files.
pub async fn open_session(dir: &Path) -> Result<SessionContext, DataFusionError> {
    if !dir.is_dir() {
        return Err(DataFusionError::Plan(format!(
            "{} is not a directory of Parquet tables (make one with `jobcast convert`)",
            dir.display()
        )));
    }
    let ctx = SessionContext::new();
    let mut found = 0;
    for name in TABLES {
        let file = dir.join(format!("{name}.parquet"));
        let folder = dir.join(name);
        let path = if file.is_file() {
            file
        } else if folder.is_dir() {
            folder
        } else {
            continue;
        };
        let path = path.to_str().ok_or_else(|| {
            DataFusionError::Plan(format!("{} is not valid UTF-8", path.display()))
        })?;
        ctx.register_parquet(name, path, ParquetReadOptions::default())
            .await?;
        found += 1;
    }
    if found == 0 {
        return Err(DataFusionError::Plan(format!(
            "no trace tables ({}) in {}",
            TABLES.join(", "),
            dir.display()
        )));
    }
    Ok(ctx)
}

/// Run one SQL statement and collect its result.
pub async fn run_query(
    ctx: &SessionContext,
    sql: &str,
) -> Result<Vec<RecordBatch>, DataFusionError> {
    ctx.sql(sql).await?.collect().await
}

/// Run every statement of a script (statements separated by `;`, comments
/// allowed) in order; each statement's text and result. Stops at the first
/// error.
pub async fn run_script(
    ctx: &SessionContext,
    script: &str,
) -> Result<Vec<(String, Vec<RecordBatch>)>, DataFusionError> {
    let mut results = Vec::new();
    for statement in DFParser::parse_sql(script)? {
        let text = statement.to_string();
        let plan = ctx.state().statement_to_plan(statement).await?;
        let batches = ctx.execute_logical_plan(plan).await?.collect().await?;
        results.push((text, batches));
    }
    Ok(results)
}

/// Render record batches in the given format.
pub fn render(batches: &[RecordBatch], format: OutputFormat) -> Result<String, DataFusionError> {
    match format {
        OutputFormat::Table => Ok(arrow::util::pretty::pretty_format_batches(batches)?.to_string()),
        OutputFormat::Csv => {
            let mut out = Vec::new();
            {
                let mut writer = arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .build(&mut out);
                for batch in batches {
                    writer.write(batch)?;
                }
            }
            Ok(String::from_utf8_lossy(&out).into_owned())
        }
        OutputFormat::Json => {
            let mut out = Vec::new();
            {
                let mut writer = arrow::json::ArrayWriter::new(&mut out);
                for batch in batches {
                    writer.write(batch)?;
                }
                writer.finish()?;
            }
            if out.is_empty() {
                out.extend_from_slice(b"[]");
            }
            out.push(b'\n');
            Ok(String::from_utf8_lossy(&out).into_owned())
        }
    }
}
