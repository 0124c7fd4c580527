//! HPC logs (`--format swf`, and a site's `--format sacct` for
//! `evaluate`) in `evaluate` and `simulate`: runtime
//! predictions scored at submission, and the site's EASY backfilling run
//! with each predictor (`jobcast_replay::hpc`).

use std::time::Instant;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use jobcast_ingest::{Event, Format, Trace};
pub use jobcast_replay::hpc::backfill::Scheduler;
use jobcast_replay::hpc::backfill::{self, StartAnswer, Workload};
use jobcast_replay::hpc::predictions;
use jobcast_replay::hpc::predictor::Predictor;
use serde_json::json;

use super::evaluate::Common;
use super::output::{print_json, print_out};

/// Open the log, and read its events through `read`, failing on an
/// unreadable input; what was skipped goes to stderr.
fn read<T>(
    common: &Common,
    read: impl FnOnce(&mut dyn Iterator<Item = Event>) -> T,
) -> anyhow::Result<T> {
    let trace: Trace = jobcast_ingest::open(common.format, &common.trace)
        .with_context(|| format!("opening {} trace", common.format.name()))?;
    let diagnostics = trace.diagnostics().clone();
    let mut failed = None;
    let mut events = trace.map_while(|item| item.map_err(|e| failed = Some(e)).ok());
    let out = read(&mut events);
    if let Some(e) = failed {
        return Err(e).with_context(|| format!("reading {}", common.trace.display()));
    }
    if diagnostics.skipped_total() > 0 || !diagnostics.notes().is_empty() {
        eprint!("{}", diagnostics.summary());
    }
    Ok(out)
}

/// `evaluate --format swf|sacct`: every job's runtime predicted at its
/// submission by jobcast, Last-2 and the user's request, and scored.
pub fn predictions(common: &Common) -> anyhow::Result<()> {
    let started = Instant::now();
    let report = read(common, |events| predictions::evaluate(events))?;
    eprintln!(
        "predicted {} jobs of {}, scored {}, in {:.1} s",
        report.submitted,
        common.trace.display(),
        report.jobs,
        started.elapsed().as_secs_f64()
    );
    if common.json {
        print_json(&report)
    } else {
        print_out(&report.table())
    }
}

/// `simulate --scheduler easy|conservative --format swf`: the log's jobs
/// on its machine under FCFS with that backfilling, once per predictor.
pub fn backfilling(
    common: &Common,
    scheduler: Scheduler,
    answer: StartAnswer,
) -> anyhow::Result<()> {
    let name = match scheduler {
        Scheduler::Easy => "easy",
        Scheduler::Conservative => "conservative",
    };
    anyhow::ensure!(
        common.format == Format::Swf,
        "--scheduler {name} plays an HPC log's machine: it takes --format swf, whose header \
         gives the machine's size (got --format {})",
        common.format.name()
    );
    let workload = read(common, |events| Workload::from_events(events))?
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("reading {}", common.trace.display()))?;
    eprintln!(
        "{} jobs on {} processors ({} never started, {} wider than the machine, left out)",
        workload.jobs.len(),
        workload.procs,
        workload.never_ran,
        workload.too_wide
    );
    let predictors = Predictor::all();
    // Jobs through the schedule, over every predictor's.
    let bar = ProgressBar::with_draw_target(
        Some((predictors.len() * workload.jobs.len()) as u64),
        ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = ProgressStyle::with_template(&format!(
        "{{bar:40}} {{human_pos}}/{{human_len}} arrivals over {} schedules (eta {{eta}})",
        predictors.len()
    )) {
        bar.set_style(style);
    }
    // The predictors' schedules are independent: one thread each.
    let runs: Vec<backfill::Outcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = predictors
            .into_iter()
            .map(|predictor| {
                let (workload, bar) = (&workload, &bar);
                scope.spawn(move || {
                    backfill::simulate(workload, scheduler, predictor, answer, &|n| bar.inc(n))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a schedule's thread does not panic"))
            .collect()
    });
    bar.finish_and_clear();
    if common.json {
        let by_name: serde_json::Map<String, serde_json::Value> = runs
            .iter()
            .map(|r| Ok((r.predictor.to_owned(), serde_json::to_value(r)?)))
            .collect::<Result<_, serde_json::Error>>()?;
        return print_json(&json!({
            "scheduler": name,
            "procs": workload.procs,
            "jobs": workload.jobs.len(),
            "never_ran": workload.never_ran,
            "too_wide": workload.too_wide,
            "predictors": by_name,
        }));
    }
    let mut table = format!(
        "{} backfilling, {} jobs on {} processors; start projected at arrival for those that \
         wait, P50 error on the predictions and on the requested times, and the share started \
         by the answer's P90\n\
         {:<14} {:>12} {:>11} {:>11} {:>11} {:>9} {:>11} {:>11} {:>10}\n",
        match scheduler {
            Scheduler::Easy => "EASY",
            Scheduler::Conservative => "Conservative",
        },
        workload.jobs.len(),
        workload.procs,
        "predictor",
        "bounded sld",
        "avg wait",
        "utilisation",
        "backfilled",
        "waited",
        "start err",
        "limits err",
        "P90 cover"
    );
    for r in &runs {
        table.push_str(&format!(
            "{:<14} {:>12.2} {:>10.0}s {:>11.3} {:>11} {:>9} {:>10.0}s {:>10.0}s {:>10}\n",
            r.predictor,
            r.avg_bounded_slowdown,
            r.avg_wait_s,
            r.utilisation,
            r.backfilled,
            r.start_estimated,
            r.start_p50_error_s,
            r.start_limits_p50_error_s,
            r.start_p90_coverage_pct
                .map_or_else(|| "-".to_owned(), |c| format!("{c:.1}%"))
        ));
    }
    print_out(&table)
}
