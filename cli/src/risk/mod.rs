//! `jobcast risk`: preemption risk of transient VMs (issue #4), from the
//! models in `jobcast_predictor::preemption`.
//!
//! - `score`: the risk score of one task on one VM;
//! - `checkpoints`: the DP checkpoint schedule beside Young–Daly;
//! - `reuse`: running-time figures and the VM reuse policy for one job;
//! - `reuse-mc`: the Monte Carlo check of the reuse policy against the
//!   memoryless one;
//! - `fit`: the lifetime models fitted to measured lifetimes (in `fit.rs`);
//! - `calibrate`: the published risks scored against held-out measured
//!   VMs (in `calibrate.rs`).
//!
//! Each subcommand is a separate function; the model comes from `--params`
//! (the bathtub `A,τ1,τ2,b`, default the paper's typical GCE fit), or for
//! `score` alternatively from `--lifetimes` (the bathtub fitted to measured
//! lifetimes for the VM's type and zone, as `fit` fits it).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use jobcast_predictor::preemption::Bathtub;
use jobcast_predictor::preemption::checkpoint::{
    CheckpointSpec, CheckpointTable, SegmentPolicy, young_daly_interval,
};
use jobcast_predictor::preemption::models::{LifetimeModel, Uniform};
use jobcast_predictor::preemption::risk::{RiskConfig, RuntimeEstimate, score};
use jobcast_predictor::preemption::running_time::{
    ReuseCriterion, crossover_job_length_h, expected_completion_h, expected_running_time_eq8,
    expected_running_time_h, expected_wasted_work_h, fresh_vm_age_h, preemption_probability,
    reuse_decision, reuse_monte_carlo,
};
use jobcast_replay::risk_fit;
use serde_json::json;

use crate::output::print_json;

mod calibrate;
mod fit;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: RiskCommand,
}

#[derive(clap::Subcommand)]
enum RiskCommand {
    /// Risk score of one task on one VM: preemption probability, expected
    /// lost work and completion time, and keep / fresh VM / on-demand.
    Score(ScoreArgs),
    /// Checkpoint schedule by dynamic programming, beside Young–Daly.
    Checkpoints(CheckpointArgs),
    /// Running-time figures and the reuse decision for one job.
    Reuse(ReuseArgs),
    /// Monte Carlo: job failures of the reuse policy vs the memoryless one.
    ReuseMc(ReuseMcArgs),
    /// Fit the lifetime models to measured VM lifetimes, per group: R², KS.
    Fit(fit::FitArgs),
    /// Score the published preemption risks against held-out measured
    /// VMs (Brier, reliability by decile) and measure the reuse policy
    /// on them.
    Calibrate(calibrate::CalibrateArgs),
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        RiskCommand::Score(args) => run_score(args),
        RiskCommand::Checkpoints(args) => run_checkpoints(args),
        RiskCommand::Reuse(args) => run_reuse(args),
        RiskCommand::ReuseMc(args) => run_reuse_mc(args),
        RiskCommand::Fit(args) => fit::run(args),
        RiskCommand::Calibrate(args) => calibrate::run(args),
    }
}

/// The lifetime model's flags.
#[derive(clap::Args)]
struct ModelArgs {
    /// Bathtub parameters `A,tau1,tau2,b` (hours) [default: the paper's
    /// typical GCE fit].
    #[arg(long, default_value = "0.45,1,0.8,24")]
    params: String,
    /// The provider's maximum VM lifetime `L`, hours (24 for GCE).
    #[arg(long, default_value_t = 24.0)]
    max_lifetime_hours: f64,
}

impl ModelArgs {
    fn model(&self) -> anyhow::Result<Bathtub> {
        let values: Vec<f64> = self
            .params
            .split(',')
            .map(|v| v.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .with_context(|| format!("--params `{}`: expected four numbers", self.params))?;
        let [a, tau1, tau2, b] = values[..] else {
            anyhow::bail!("--params `{}`: expected A,tau1,tau2,b", self.params);
        };
        Ok(Bathtub::new(a, tau1, tau2, b, self.max_lifetime_hours)?)
    }
}

/// A bathtub's parameters as `risk fit` reports them, with the deadline
/// `L` its free parameters are relative to.
fn params_json(m: &Bathtub) -> serde_json::Value {
    let mut params = risk_fit::params_json(&LifetimeModel::Bathtub(*m));
    params["max_lifetime_h"] = json!(m.max_lifetime_h());
    params
}

fn minutes(hours: f64) -> f64 {
    hours * 60.0
}

/// `score` builds its checkpoint table on a grid of at most one minute or
/// 1/240 of the runtime, whichever is coarser, so it takes well under a
/// second (the table's cost grows with the cube of the steps).
const SCORE_MAX_WORK_STEPS: f64 = 240.0;

#[derive(clap::Args)]
struct ScoreArgs {
    /// Machine type of the VM (e.g. n1-highcpu-16).
    #[arg(long)]
    vm_type: String,
    /// Zone of the VM (e.g. us-east1-b).
    #[arg(long)]
    zone: String,
    /// The VM's age now, hours.
    #[arg(long)]
    age_hours: f64,
    /// Predicted runtime of the task (mean), hours.
    #[arg(long)]
    runtime_hours: f64,
    /// Coefficient of variation of the runtime prediction (0: exact).
    #[arg(long, default_value_t = 0.0)]
    runtime_cv: f64,
    /// Use on-demand when even the better transient option fails with a
    /// higher probability.
    #[arg(long, default_value_t = RiskConfig::default().failure_threshold)]
    failure_threshold: f64,
    /// On-demand price / transient price.
    #[arg(long, default_value_t = RiskConfig::default().price_ratio)]
    price_ratio: f64,
    /// Checkpoint cost in minutes: score with the DP checkpoint schedule
    /// (grid step: the larger of 1 min and runtime/240, dividing the cost).
    #[arg(long)]
    checkpoint_delta_minutes: Option<f64>,
    /// Measured lifetimes (as for `risk fit`): score with the bathtub fitted
    /// to them for this VM type and zone (the most specific fitted group of
    /// type+zone, type, zone, all) instead of `--params`.
    #[arg(long, conflicts_with = "params")]
    lifetimes: Option<PathBuf>,
    #[command(flatten)]
    model: ModelArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn run_score(args: ScoreArgs) -> anyhow::Result<()> {
    // With measured lifetimes, the group whose fit scores this VM.
    let (model, fit_group) = match &args.lifetimes {
        Some(path) => {
            let (model, group) = risk_fit::fitted_bathtub(
                path,
                &args.vm_type,
                &args.zone,
                args.model.max_lifetime_hours,
            )?;
            (model, Some(group))
        }
        None => (args.model.model()?, None),
    };
    // A VM at or past its deadline is gone: nothing to score.
    let deadline = model.max_lifetime_h();
    if !(args.age_hours >= 0.0 && args.age_hours < deadline) {
        anyhow::bail!(
            "--age-hours {}: must be in [0, {deadline}) h; a preemptible VM is gone at its \
             deadline of {deadline} h (--max-lifetime-hours)",
            args.age_hours
        );
    }
    let config = RiskConfig {
        failure_threshold: args.failure_threshold,
        price_ratio: args.price_ratio,
    };
    let runtime = RuntimeEstimate {
        mean_h: args.runtime_hours,
        cv: args.runtime_cv,
    };
    let table = args
        .checkpoint_delta_minutes
        .map(|delta| {
            CheckpointTable::build(
                &model,
                CheckpointSpec {
                    delta_h: delta / 60.0,
                    max_step_h: (1.0_f64 / 60.0).max(args.runtime_hours / SCORE_MAX_WORK_STEPS),
                    max_job_h: args.runtime_hours,
                    max_start_age_h: args.age_hours,
                },
                SegmentPolicy::Optimal,
            )
        })
        .transpose()?;
    let s = score(&model, args.age_hours, runtime, &config, table.as_ref())?;
    if args.json {
        let mut value = serde_json::to_value(&s)?;
        value["vm_type"] = json!(args.vm_type);
        value["zone"] = json!(args.zone);
        value["params"] = params_json(&model);
        if let Some(group) = &fit_group {
            value["fit_group"] = json!(group.to_string());
        }
        return print_json(&value);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{} in {}, age {} h; task {} h (cv {})",
        args.vm_type, args.zone, args.age_hours, args.runtime_hours, args.runtime_cv
    )?;
    if let Some(group) = &fit_group {
        if group.is_pooled() {
            writeln!(
                out,
                "fit: all VMs (neither {} nor {} has a fit of its own)",
                args.vm_type, args.zone
            )?;
        } else {
            writeln!(out, "fit: {group}")?;
        }
    }
    writeln!(
        out,
        "{:<10} {:>8} {:>14} {:>16}",
        "", "P(fail)", "lost work (h)", "completion (h)"
    )?;
    for (name, o) in [("this VM", s.this_vm), ("fresh VM", s.fresh_vm)] {
        writeln!(
            out,
            "{name:<10} {:>8.4} {:>14.4} {:>16.4}",
            o.preemption_probability, o.expected_lost_work_h, o.expected_completion_h
        )?;
    }
    writeln!(
        out,
        "cost: transient {:.4}, on-demand {:.4} (transient VM-hours)",
        s.transient_cost, s.on_demand_cost
    )?;
    if let Some(c) = &s.checkpoints {
        let intervals: Vec<String> = c
            .intervals_h
            .iter()
            .map(|&h| format!("{:.0}", minutes(h)))
            .collect();
        writeln!(
            out,
            "checkpoints every {} min; expected makespan {:.4} h",
            intervals.join(", "),
            c.expected_makespan_h
        )?;
    }
    writeln!(
        out,
        "recommendation: {} ({})",
        serde_json::to_value(s.recommendation)?
            .as_str()
            .unwrap_or_default(),
        serde_json::to_value(s.reason)?.as_str().unwrap_or_default()
    )?;
    Ok(())
}

#[derive(clap::Args)]
struct CheckpointArgs {
    /// Job length (uninterrupted), hours.
    #[arg(long)]
    job_hours: f64,
    /// Cost of one checkpoint, minutes.
    #[arg(long)]
    delta_minutes: f64,
    /// VM age at job start, hours.
    #[arg(long, default_value_t = 0.0)]
    age_hours: f64,
    /// Largest grid step, minutes (the step used divides the checkpoint cost).
    #[arg(long, default_value_t = 1.0)]
    step_minutes: f64,
    /// MTTF for Young–Daly, hours [default: the model's expected lifetime].
    #[arg(long)]
    young_daly_mttf_hours: Option<f64>,
    #[command(flatten)]
    model: ModelArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn run_checkpoints(args: CheckpointArgs) -> anyhow::Result<()> {
    let model = args.model.model()?;
    let spec = CheckpointSpec {
        delta_h: args.delta_minutes / 60.0,
        max_step_h: args.step_minutes / 60.0,
        max_job_h: args.job_hours,
        max_start_age_h: args.age_hours,
    };
    let optimal = CheckpointTable::build(&model, spec, SegmentPolicy::Optimal)?
        .schedule(args.job_hours, args.age_hours)?;
    let mttf = args.young_daly_mttf_hours.unwrap_or_else(|| model.mean());
    let tau = young_daly_interval(spec.delta_h, mttf);
    let young_daly =
        CheckpointTable::build(&model, spec, SegmentPolicy::Fixed { interval_h: tau })?
            .schedule(args.job_hours, args.age_hours)?;
    let job = args.job_hours;
    let overhead = |makespan_h: f64| 100.0 * (makespan_h - job) / job;
    let no_checkpoints = expected_completion_h(&model, args.age_hours, job);
    let to_minutes = |v: &[f64]| v.iter().map(|&h| minutes(h)).collect::<Vec<_>>();
    if args.json {
        return print_json(&json!({
            "job_hours": job,
            "age_hours": args.age_hours,
            "delta_minutes": args.delta_minutes,
            "step_minutes": minutes(spec.step_h()),
            "params": params_json(&model),
            "intervals_minutes": to_minutes(&optimal.intervals_h),
            "expected_makespan_minutes": minutes(optimal.expected_makespan_h),
            "overhead_percent": overhead(optimal.expected_makespan_h),
            "young_daly_mttf_hours": mttf,
            "young_daly_interval_minutes": minutes(tau),
            "young_daly_intervals_minutes": to_minutes(&young_daly.intervals_h),
            "young_daly_expected_makespan_minutes": minutes(young_daly.expected_makespan_h),
            "young_daly_overhead_percent": overhead(young_daly.expected_makespan_h),
            "no_checkpoint_expected_makespan_minutes": minutes(no_checkpoints),
        }));
    }
    let mut out = std::io::stdout().lock();
    let list = |v: &[f64]| {
        v.iter()
            .map(|&h| format!("{:.0}", minutes(h)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    writeln!(
        out,
        "{job} h job at VM age {} h, checkpoint cost {} min (grid {:.3} min)",
        args.age_hours,
        args.delta_minutes,
        minutes(spec.step_h())
    )?;
    writeln!(
        out,
        "DP:          intervals {} min; expected makespan {:.1} min ({:+.1}%)",
        list(&optimal.intervals_h),
        minutes(optimal.expected_makespan_h),
        overhead(optimal.expected_makespan_h)
    )?;
    writeln!(
        out,
        "Young–Daly:  MTTF {mttf:.2} h, every {:.1} min; expected makespan {:.1} min ({:+.1}%)",
        minutes(tau),
        minutes(young_daly.expected_makespan_h),
        overhead(young_daly.expected_makespan_h)
    )?;
    writeln!(
        out,
        "none:        expected makespan {:.1} min ({:+.1}%)",
        minutes(no_checkpoints),
        overhead(no_checkpoints)
    )?;
    Ok(())
}

#[derive(clap::Args)]
struct ReuseArgs {
    /// Job length, hours.
    #[arg(long)]
    job_hours: f64,
    /// VM age at job start, hours.
    #[arg(long, default_value_t = 0.0)]
    age_hours: f64,
    #[command(flatten)]
    model: ModelArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn run_reuse(args: ReuseArgs) -> anyhow::Result<()> {
    let model = args.model.model()?;
    let uniform = Uniform::new(args.model.max_lifetime_hours)?;
    let (s, t) = (args.age_hours, args.job_hours);
    let limit = model.max_lifetime_h();
    let decision = reuse_decision(&model, s, t);
    let value = json!({
        "job_hours": t,
        "age_hours": s,
        "params": params_json(&model),
        "preemption_probability": preemption_probability(&model, s, t),
        "fresh_preemption_probability": preemption_probability(&model, 0.0, t),
        "expected_wasted_work_hours": expected_wasted_work_h(&model, s, t),
        "expected_running_time_hours": expected_running_time_h(&model, s, t),
        "expected_increase_hours": expected_running_time_h(&model, s, t) - t,
        "eq8_expected_running_time_hours": expected_running_time_eq8(&model, s, t),
        "fresh_expected_running_time_hours": decision.fresh_running_time_h,
        "expected_completion_with_restarts_hours": expected_completion_h(&model, s, t),
        "keep": decision.keep,
        "fresh_vm_from_age_hours": fresh_vm_age_h(&model, ReuseCriterion::ExpectedRunningTime, t, limit),
        "fresh_vm_from_age_hours_min_failures": fresh_vm_age_h(&model, ReuseCriterion::FailureProbability, t, limit),
        "crossover_job_hours": crossover_job_length_h(&model, s, limit),
        "uniform_expected_increase_hours": expected_running_time_h(&uniform, s, t) - t,
    });
    if args.json {
        return print_json(&value);
    }
    let mut out = std::io::stdout().lock();
    let num = |key: &str| {
        value[key]
            .as_f64()
            .map_or("none".to_string(), |v| format!("{v:.4}"))
    };
    writeln!(out, "{t} h job at VM age {s} h")?;
    for (label, key) in [
        ("P(preempted)", "preemption_probability"),
        ("P(preempted), fresh VM", "fresh_preemption_probability"),
        ("E[W1] (h)", "expected_wasted_work_hours"),
        ("E[T_s] (h)", "expected_running_time_hours"),
        ("E[T_s] − T (h)", "expected_increase_hours"),
        ("Eq. 8 as printed (h)", "eq8_expected_running_time_hours"),
        ("E[T_0] (h)", "fresh_expected_running_time_hours"),
        (
            "with restarts (h)",
            "expected_completion_with_restarts_hours",
        ),
        ("fresh VM from age (h)", "fresh_vm_from_age_hours"),
        (
            "  minimising failures (h)",
            "fresh_vm_from_age_hours_min_failures",
        ),
        ("T*(s) (h)", "crossover_job_hours"),
        ("uniform: E[T_s] − T (h)", "uniform_expected_increase_hours"),
    ] {
        writeln!(out, "{label:<26} {}", num(key))?;
    }
    writeln!(
        out,
        "decision                   {}",
        if decision.keep { "keep" } else { "fresh VM" }
    )?;
    Ok(())
}

#[derive(clap::Args)]
struct ReuseMcArgs {
    /// Job lengths, hours, comma-separated [default: 1 to 23 h].
    #[arg(long)]
    job_hours: Option<String>,
    /// Simulated jobs per length.
    #[arg(long, default_value_t = 20_000)]
    samples: usize,
    /// Seed of the simulation.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    model: ModelArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn run_reuse_mc(args: ReuseMcArgs) -> anyhow::Result<()> {
    let model = args.model.model()?;
    let lengths: Vec<f64> = match &args.job_hours {
        Some(list) => list
            .split(',')
            .map(|v| v.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .with_context(|| format!("--job-hours `{list}`"))?,
        None => (1..=23).map(f64::from).collect(),
    };
    let limit = model.max_lifetime_h();
    let by_time = reuse_monte_carlo(
        &model,
        &model,
        ReuseCriterion::ExpectedRunningTime,
        &lengths,
        limit,
        args.samples,
        args.seed,
    );
    let by_failure = reuse_monte_carlo(
        &model,
        &model,
        ReuseCriterion::FailureProbability,
        &lengths,
        limit,
        args.samples,
        args.seed,
    );
    if args.json {
        return print_json(&json!({
            "params": params_json(&model),
            "samples": args.samples,
            "seed": args.seed,
            "expected_running_time": by_time,
            "failure_probability": by_failure,
        }));
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "job failure probability, start ages uniform in [0, {limit}) h, {} jobs per length (seed {})",
        args.samples, args.seed
    )?;
    writeln!(
        out,
        "{:>6} {:>11} {:>17} {:>9} {:>17} {:>9}",
        "job h", "memoryless", "E[T_s] policy", "ratio", "min-P policy", "ratio"
    )?;
    for (t, f) in by_time.iter().zip(&by_failure) {
        writeln!(
            out,
            "{:>6} {:>11.4} {:>17.4} {:>9.2} {:>17.4} {:>9.2}",
            t.job_h,
            t.memoryless_failure,
            t.policy_failure,
            t.reduction,
            f.policy_failure,
            f.reduction
        )?;
    }
    Ok(())
}
