//! `jobcast convert`: any supported trace → Parquet tables.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use jobcast_ingest::Format;

#[derive(clap::Args)]
pub struct Args {
    /// Trace format: google2011, google2019, alibaba2018, gce-lifetimes, spot-traces,
    /// spot-hibernation, jsonl, tpch-dags, swf or sacct.
    #[arg(long)]
    format: Format,
    /// The trace: a directory (google2011, google2019, alibaba2018,
    /// tpch-dags) or a file.
    #[arg(long)]
    input: PathBuf,
    /// Directory to write events.parquet, jobs.parquet, tasks.parquet and
    /// machines.parquet into (created if needed; existing tables replaced).
    #[arg(long)]
    output: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let trace = jobcast_ingest::open(args.format, &args.input)
        .with_context(|| format!("opening {} trace", args.format.name()))?;
    let diagnostics = trace.diagnostics().clone();
    let bar = ProgressBar::new(trace.input_bytes()).with_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {msg}",
        )
        .expect("static template is valid"),
    );
    let summary = jobcast_storage::convert::convert(trace, &args.output, |p| {
        bar.set_position(p.bytes_read.min(p.input_bytes));
        bar.set_message(format!("{} events", p.events));
    })
    .with_context(|| {
        format!(
            "converting {} into {}",
            args.input.display(),
            args.output.display()
        )
    })?;
    bar.finish_and_clear();
    if summary.events == 0 {
        eprintln!(
            "warning: {} held no {} events: the tables written are empty",
            args.input.display(),
            args.format.name()
        );
    }

    let secs = started.elapsed().as_secs_f64().max(1e-9);
    println!(
        "converted {} events in {:.1} s ({:.0} events/s) into {}",
        summary.events,
        secs,
        summary.events as f64 / secs,
        args.output.display()
    );
    for t in &summary.tables {
        println!(
            "  {:<9} {:>10} rows {:>12} bytes  {}",
            t.name,
            t.rows,
            t.bytes,
            t.path.display()
        );
    }
    let total_rows: u64 = summary.tables.iter().map(|t| t.rows).sum();
    println!("  {:.0} rows/s written", total_rows as f64 / secs);
    print!("input: {}", diagnostics.summary());
    let a = &summary.anomalies;
    if a.tasks_of_unknown_jobs + a.tasks_after_job_end + a.removes_of_absent_machines > 0 {
        println!(
            "ground truth: {} task events of jobs never submitted, {} after their job ended (ignored), {} removes of absent machines (ignored)",
            a.tasks_of_unknown_jobs, a.tasks_after_job_end, a.removes_of_absent_machines
        );
    }
    Ok(())
}
