//! `jobcast simulate`: one prediction policy driving the trace-driven
//! cluster simulation; a summary table, or JSON with every job.

use jobcast_replay::evaluate::{PolicyKind, run_policy};
use serde_json::json;

use super::evaluate::{Common, print_out};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// The policy: slearn, 3sigma, 3sigma-tl, point, slearn-dag, 3sigma-dag,
    /// bayes, las, fifo or oracle.
    #[arg(long)]
    policy: PolicyKind,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let workload = args.common.workload()?;
    let config = args.common.config();
    let slots = config.slots_for(&workload)?;
    let report = run_policy(&workload, args.policy, &config, slots)?;
    if args.common.json {
        let out = json!({
            "policy": report.policy,
            "slots": report.slots,
            "summary": report.summary,
            "history_jobs": workload.training.len(),
            "excluded": workload.excluded,
            "jobs": report.jobs,
        });
        return print_out(&format!("{}\n", serde_json::to_string_pretty(&out)?));
    }
    let s = &report.summary;
    let opt = |v: Option<f64>| v.map_or_else(|| "-".into(), |x| format!("{x:.2}"));
    let rows = [
        ("policy", report.policy.name().to_owned()),
        ("slots", report.slots.to_string()),
        ("jobs", s.jobs.to_string()),
        ("avg JCT (s)", opt(s.avg_jct_s)),
        ("P50 JCT (s)", opt(s.p50_jct_s)),
        ("avg wait (s)", opt(s.avg_wait_s)),
        ("P50 error (%)", opt(s.p50_error_pct)),
        ("P90 error (%)", opt(s.p90_error_pct)),
        ("right queue (%)", opt(s.correct_queue_pct)),
        ("queue too high (%)", opt(s.too_high_queue_pct)),
        ("queue too low (%)", opt(s.too_low_queue_pct)),
        ("estimated jobs", s.estimated_jobs.to_string()),
        ("thin jobs", s.thin_jobs.to_string()),
        ("excluded jobs", workload.excluded.total().to_string()),
    ];
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let table: String = rows
        .iter()
        .map(|(k, v)| format!("{k:<width$}  {v}\n"))
        .collect();
    print_out(&table)
}
