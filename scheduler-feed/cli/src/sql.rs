//! `jobcast sql`: DataFusion SQL over converted Parquet tables, one query
//! or an interactive prompt.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use jobcast_storage::sql::{
    OutputFormat, QueryOptions, open_session, render, run_query, run_script,
};

#[derive(clap::Args)]
pub struct Args {
    /// Directory of Parquet tables written by `jobcast convert`.
    #[arg(long)]
    data: PathBuf,
    /// Output format: table, csv or json.
    #[arg(long, default_value = "table")]
    format: OutputFormat,
    /// Run every statement of this SQL file in order, printing each
    /// statement before its result.
    #[arg(long, conflicts_with = "query")]
    file: Option<PathBuf>,
    /// Plan a CTE used more than once at each of its uses (DataFusion's
    /// own plan) instead of computing it once and holding its result in
    /// memory while the query runs.
    #[arg(long)]
    inline_ctes: bool,
    /// After each statement, print on stderr how long it took to plan, run
    /// and collect (printing the result is not counted), as `Time: 12.345
    /// ms`.
    #[arg(long)]
    timing: bool,
    /// The query; without one (and without --file), an interactive prompt
    /// opens (statements end with `;`).
    #[arg(allow_hyphen_values = true)]
    query: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the query runtime")?;
    let options = QueryOptions {
        inline_ctes: args.inline_ctes,
    };
    runtime.block_on(async {
        let ctx = open_session(&args.data).await?;
        // Bad SQL is reported as DataFusion words it.
        if let Some(path) = &args.file {
            let script = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let results = run_script(&ctx, &script, options)
                .await
                .with_context(|| format!("running {}", path.display()))?;
            for run in results {
                println!("{};", run.statement);
                print!("{}", render(&run.batches, args.format)?);
                println!();
                if args.timing {
                    report_time(run.elapsed);
                }
            }
            return Ok(());
        }
        match &args.query {
            Some(sql) => {
                let start = Instant::now();
                let batches = run_query(&ctx, sql, options).await?;
                let elapsed = start.elapsed();
                print!("{}", render(&batches, args.format)?);
                if args.timing {
                    report_time(elapsed);
                }
                Ok(())
            }
            None => interactive(&ctx, args.format, options, args.timing).await,
        }
    })
}

/// On stderr, so that the results on stdout stay machine-readable.
fn report_time(elapsed: Duration) {
    eprintln!("Time: {:.3} ms", elapsed.as_secs_f64() * 1e3);
}

async fn interactive(
    ctx: &datafusion::prelude::SessionContext,
    format: OutputFormat,
    options: QueryOptions,
    timing: bool,
) -> anyhow::Result<()> {
    let mut editor = rustyline::DefaultEditor::new().context("opening the prompt")?;
    eprintln!(
        "jobcast sql: tables {}; end statements with `;`, quit with Ctrl-D",
        jobcast_storage::tables::TABLES.join(", ")
    );
    let mut statement = String::new();
    loop {
        let prompt = if statement.is_empty() {
            "jobcast> "
        } else {
            "     ..> "
        };
        match editor.readline(prompt) {
            Ok(line) => {
                statement.push_str(&line);
                statement.push('\n');
                if !line.trim_end().ends_with(';') {
                    continue;
                }
                let sql = std::mem::take(&mut statement);
                let _ = editor.add_history_entry(sql.trim());
                // Errors are shown and the prompt goes on.
                let start = Instant::now();
                match run_query(ctx, &sql, options).await {
                    Ok(batches) => {
                        let elapsed = start.elapsed();
                        match render(&batches, format) {
                            Ok(text) => print!("{text}"),
                            Err(e) => eprintln!("error: {e}"),
                        }
                        if timing {
                            report_time(elapsed);
                        }
                    }
                    Err(e) => eprintln!("error: {e}"),
                }
            }
            Err(rustyline::error::ReadlineError::Interrupted) => statement.clear(),
            Err(rustyline::error::ReadlineError::Eof) => return Ok(()),
            Err(e) => return Err(e).context("reading the prompt"),
        }
    }
}
