//! `jobcast risk calibrate`: the preemption risks jobcast publishes, scored
//! against VMs its lifetime fit never saw, and the VM reuse policy measured
//! on them ([`jobcast_replay::risk_calibrate`]).

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use jobcast_ingest::Format;
use jobcast_replay::risk_calibrate::{CalibrateConfig, calibrate, write_plot};
use serde_json::json;

use crate::output::print_json;

#[derive(clap::Args)]
pub struct CalibrateArgs {
    /// Measured preemptible-VM lifetimes: the GCE dataset's `data.json` or
    /// `data.json.gz`, or (`--format spot-traces`) SkyPilot's spot traces.
    #[arg(long)]
    lifetimes: PathBuf,
    /// Their format: `gce-lifetimes`, `spot-traces`, or any trace whose
    /// machine events carry VM lifetimes.
    #[arg(long, default_value = "gce-lifetimes")]
    format: Format,
    /// Seed of the split into fitted and held-out VMs, of the task
    /// runtimes and of the reuse simulation.
    #[arg(long, default_value_t = CalibrateConfig::default().seed)]
    seed: u64,
    /// Task runtimes on the held-out VMs are log-uniform between these
    /// hours, `MIN,MAX`.
    #[arg(long, default_value = "0.1,12", value_parser = parse_range)]
    task_hours: (f64, f64),
    /// The provider's maximum VM lifetime `L`, hours, as the engine's
    /// `risk.prior.max_lifetime_h`.
    #[arg(long, default_value_t = CalibrateConfig::default().risk.prior.max_lifetime_h)]
    max_lifetime_hours: f64,
    /// Simulated jobs per length in the reuse simulation.
    #[arg(long, default_value_t = CalibrateConfig::default().reuse_samples)]
    reuse_samples: usize,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Write the reliability diagram (`reliability.svg`) here.
    #[arg(long)]
    plots: Option<PathBuf>,
}

/// `MIN,MAX` hours with `0 < MIN < MAX`.
fn parse_range(text: &str) -> Result<(f64, f64), String> {
    let values: Vec<f64> = text
        .split(',')
        .map(|v| v.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("`{text}`: {e}"))?;
    match values[..] {
        [low, high] if low > 0.0 && low < high && high.is_finite() => Ok((low, high)),
        _ => Err(format!(
            "`{text}`: expected MIN,MAX hours with 0 < MIN < MAX"
        )),
    }
}

pub fn run(args: CalibrateArgs) -> anyhow::Result<()> {
    let mut config = CalibrateConfig {
        seed: args.seed,
        task_hours: args.task_hours,
        reuse_samples: args.reuse_samples,
        ..CalibrateConfig::default()
    };
    config.risk.prior.max_lifetime_h = args.max_lifetime_hours;
    let started = Instant::now();
    let result = calibrate(&args.lifetimes, args.format, &config)
        .with_context(|| format!("calibrating on {}", args.lifetimes.display()))?;
    eprintln!(
        "jobcast risk calibrate: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if let Some(dir) = &args.plots {
        let path = write_plot(&result, dir)?;
        eprintln!("wrote {}", path.display());
    }
    let r = &result.reliability;
    if args.json {
        return print_json(&json!({
            "seed": config.seed,
            "task_hours": [config.task_hours.0, config.task_hours.1],
            "fitted": result.fitted,
            "held_out": result.held_out,
            "lifetime_model": result.lifetime_model,
            "deadline": result.deadline,
            "refits": result.refits,
            "forecasts": r.forecasts,
            "censored": r.censored,
            "failed": r.failed,
            "brier": r.brier,
            "brier_reference": r.brier_reference,
            "brier_skill": r.brier_skill,
            "max_decile_gap_pts": r.max_gap_pts,
            "deciles": r.bins,
            "model_brier": result.model_reliability.brier,
            "model_max_decile_gap_pts": result.model_reliability.max_gap_pts,
            "model_deciles": result.model_reliability.bins,
            "recalibration_outcomes": result.recalibration_outcomes,
            "reuse_failure_ratio": result.reuse.failure_ratio,
            "reuse_failure_ratio_min_p": result.reuse.failure_ratio_min_p,
            "reuse": result.reuse,
        }));
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "fitted on {} VMs ({} preempted), scored on {} held out ({} preempted), seed {}; \
         risks by the {} model{}",
        result.fitted.vms,
        result.fitted.preempted,
        result.held_out.vms,
        result.held_out.preempted,
        config.seed,
        result.lifetime_model,
        match result.deadline {
            Some(d) if !d.present => " (no deadline cluster in the lifetimes)",
            _ => "",
        }
    )?;
    let published = if result.recalibration_outcomes >= config.risk.recalibration_min_outcomes {
        format!(
            "recalibrated on {:.0} outcomes",
            result.recalibration_outcomes
        )
    } else {
        format!(
            "the model's own: {:.0} outcomes, recalibration waits for {:.0}",
            result.recalibration_outcomes, config.risk.recalibration_min_outcomes
        )
    };
    writeln!(
        out,
        "{} forecasts, {} with a censored outcome; published ({published}): Brier {:.4} (always the base rate: {:.4}; skill {:.3}), largest decile gap {:.1} points; the model's own: Brier {:.4}, largest gap {:.1} points",
        r.forecasts,
        r.censored,
        r.brier,
        r.brier_reference,
        r.brier_skill,
        r.max_gap_pts,
        result.model_reliability.brier,
        result.model_reliability.max_gap_pts
    )?;
    writeln!(
        out,
        "{:>8} {:>8} {:>8} {:>9} {:>9} {:>7}",
        "decile", "P from", "P to", "forecast", "observed", "gap"
    )?;
    for (i, b) in r.bins.iter().enumerate() {
        writeln!(
            out,
            "{:>8} {:>8.3} {:>8.3} {:>9.3} {:>9.3} {:>7.1}",
            i + 1,
            b.p_min,
            b.p_max,
            b.mean_p,
            b.observed,
            b.gap_pts
        )?;
    }
    writeln!(
        out,
        "reuse on held-out lifetimes: memoryless failures / policy failures {:.2} (paper's rule), {:.2} (minimum P rule)",
        result.reuse.failure_ratio, result.reuse.failure_ratio_min_p
    )?;
    Ok(())
}
