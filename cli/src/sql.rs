//! `jobcast sql`: DataFusion SQL over converted Parquet tables, as the
//! DuckDB shell runs SQL: statements (on the command line, in a file, or
//! piped in) run in order, each result printed as it comes; a statement
//! that fails is named by its line and its error printed once, the rest
//! still run, and the exit is non-zero. `.tables` and `SHOW TABLES` list
//! the tables. On a terminal without a query, a prompt opens.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use datafusion::prelude::SessionContext;
use jobcast_storage::sql::{
    OutputFormat, QueryOptions, ScriptStatement, open_session, render, run_query, split_script,
};

use crate::output::{Reported, print_out};

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
    /// The statements (`;`-separated); without them and without --file,
    /// those piped in, or on a terminal an interactive prompt (statements
    /// end with `;`).
    #[arg(allow_hyphen_values = true)]
    query: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the query runtime")?;
    let shell = Shell {
        format: args.format,
        options: QueryOptions {
            inline_ctes: args.inline_ctes,
        },
        timing: args.timing,
    };
    runtime.block_on(async {
        let ctx = open_session(&args.data).await?;
        let (script, origin, echo) = match (&args.file, &args.query) {
            (Some(path), _) => (
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?,
                path.display().to_string(),
                true,
            ),
            (None, Some(sql)) => (sql.clone(), "query".to_owned(), false),
            (None, None) if std::io::stdin().is_terminal() => {
                return shell.interactive(&ctx).await;
            }
            (None, None) => (
                std::io::read_to_string(std::io::stdin()).context("reading stdin")?,
                "stdin".to_owned(),
                false,
            ),
        };
        shell.script(&ctx, &script, &origin, echo).await
    })
}

/// How statements are run and shown.
struct Shell {
    format: OutputFormat,
    options: QueryOptions,
    timing: bool,
}

impl Shell {
    /// Run every statement of `script` (from `origin`: a file, `query`,
    /// `stdin`) in order, each result printed as it comes (after the
    /// statement itself with `echo`); each failure is printed with its
    /// line, the rest still run, and the end is an error if one failed.
    async fn script(
        &self,
        ctx: &SessionContext,
        script: &str,
        origin: &str,
        echo: bool,
    ) -> anyhow::Result<()> {
        let statements = split_script(script);
        let mut failed = 0;
        for statement in &statements {
            if echo {
                print_out(&format!("{};\n", statement.text))?;
            }
            match self.statement(ctx, statement).await {
                Ok(text) => print_out(&format!("{text}{}", if echo { "\n" } else { "" }))?,
                Err(e) => {
                    eprintln!("error: {origin}:{}: {e}", statement.line);
                    failed += 1;
                }
            }
        }
        match failed {
            0 => Ok(()),
            _ => Err(Reported.into()),
        }
    }

    /// Run one statement (or shell command): its result as text.
    async fn statement(
        &self,
        ctx: &SessionContext,
        statement: &ScriptStatement,
    ) -> anyhow::Result<String> {
        if let Some(command) = statement.text.strip_prefix('.') {
            return match command.trim() {
                "tables" => Ok(jobcast_storage::tables::TABLES
                    .iter()
                    .filter(|t| ctx.table_exist(**t).unwrap_or(false))
                    .map(|t| format!("{t}\n"))
                    .collect()),
                other => anyhow::bail!(
                    "unknown command .{other} (the shell knows .tables; SQL statements end with `;`)"
                ),
            };
        }
        let start = Instant::now();
        let batches = run_query(ctx, &statement.text, self.options).await?;
        let elapsed = start.elapsed();
        let text = render(&batches, self.format)?;
        if self.timing {
            report_time(elapsed);
        }
        Ok(text)
    }

    async fn interactive(&self, ctx: &SessionContext) -> anyhow::Result<()> {
        let mut editor = rustyline::DefaultEditor::new().context("opening the prompt")?;
        eprintln!(
            "jobcast sql: tables {}; end statements with `;`, `.tables` lists them, quit with Ctrl-D",
            jobcast_storage::tables::TABLES.join(", ")
        );
        let mut pending = String::new();
        loop {
            let prompt = if pending.is_empty() {
                "jobcast> "
            } else {
                "     ..> "
            };
            match editor.readline(prompt) {
                Ok(line) => {
                    pending.push_str(&line);
                    pending.push('\n');
                    let command = pending.trim_start().starts_with('.');
                    if !command && !line.trim_end().ends_with(';') {
                        continue;
                    }
                    let text = std::mem::take(&mut pending);
                    let _ = editor.add_history_entry(text.trim());
                    // Errors are shown once and the prompt goes on.
                    for statement in split_script(&text) {
                        match self.statement(ctx, &statement).await {
                            Ok(out) => print_out(&out)?,
                            Err(e) => eprintln!("error: {e}"),
                        }
                    }
                }
                Err(rustyline::error::ReadlineError::Interrupted) => pending.clear(),
                Err(rustyline::error::ReadlineError::Eof) => return Ok(()),
                Err(e) => return Err(e).context("reading the prompt"),
            }
        }
    }
}

/// On stderr, so that the results on stdout stay machine-readable.
fn report_time(elapsed: Duration) {
    eprintln!("Time: {:.3} ms", elapsed.as_secs_f64() * 1e3);
}
