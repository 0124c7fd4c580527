//! `jobcast risk fit`: fit every lifetime model (bathtub, exponential,
//! Weibull, Gompertz–Makeham, uniform) to measured preemptible-VM lifetimes,
//! pooled and per group, and report the parameters, R² and the
//! Kolmogorov–Smirnov distance against the Kaplan–Meier curve; optionally
//! plot the fitted CDFs over that curve and the bathtub density
//! ([`jobcast_replay::risk_fit`]).
//!
//! Everything printed on stdout is a deterministic function of the input
//! and the flags (seeded starts, ordered groups), so the same input gives
//! the same bytes; timings go to stderr.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use jobcast_ingest::Format;
use jobcast_predictor::preemption::fit::{
    DEADLINE_WINDOW_H, DeadlineCheck, FitConfig, Grouping, LifetimeRecord, fit_groups,
};
use jobcast_predictor::preemption::models::ModelKind;
use jobcast_replay::risk_fit::{Lifetimes, fits_json, table, write_plots};

use crate::output::{print_json, print_out};

#[derive(clap::Args)]
pub struct FitArgs {
    /// Measured preemptible-VM lifetimes: the GCE dataset's `data.json` or
    /// `data.json.gz`, or (`--format spot-traces`) SkyPilot's spot traces.
    #[arg(long)]
    lifetimes: PathBuf,
    /// Their format: `gce-lifetimes`, `spot-traces`, or any trace whose
    /// machine events carry VM lifetimes.
    #[arg(long, default_value = "gce-lifetimes")]
    format: Format,
    /// Groupings besides the pooled data, comma-separated: `type`, `zone`,
    /// `period` (day/night by VM-local launch time), or combinations such
    /// as `type+zone`.
    #[arg(long, value_delimiter = ',', default_value = "type,zone,period")]
    by: Vec<Grouping>,
    /// The provider's maximum lifetime `L`, hours; measured lifetimes at or
    /// past it count as preempted at `L` [default: 24 when the lifetimes
    /// show a deadline cluster; else none, and only the models that need no
    /// deadline are fitted].
    #[arg(long)]
    max_lifetime_hours: Option<f64>,
    /// Shrinkage `k`: a group with `d` preemptions keeps `d/(d + k)` of its
    /// own fit and takes the rest from the pooled one.
    #[arg(long, default_value_t = FitConfig::default().shrinkage_events)]
    shrinkage_events: f64,
    /// Groups with fewer preemptions are not fitted.
    #[arg(long, default_value_t = FitConfig::default().min_events)]
    min_events: usize,
    /// Drop the user-stopped (censored) VMs and fit the preempted ones only.
    /// This biases the fit toward early preemptions; it is here to compare
    /// with fits made that way.
    #[arg(long)]
    preempted_only: bool,
    /// Print JSON (a list of fits) instead of a table.
    #[arg(long)]
    json: bool,
    /// Write SVG plots here: the fitted CDFs over the Kaplan–Meier curve
    /// (`lifetime_cdf.svg` pooled, `lifetime_cdf_<group>.svg` per group)
    /// and the fitted bathtub density (`bathtub_density.svg`).
    #[arg(long)]
    plots: Option<PathBuf>,
}

pub fn run(args: FitArgs) -> anyhow::Result<()> {
    let mut records = read_lifetimes(&args.lifetimes, args.format)?;
    if args.preempted_only {
        records.retain(|r| r.preempted);
    }
    let deadline = DeadlineCheck::of(&records);
    eprintln!(
        "{} of {} preemptions within {DEADLINE_WINDOW_H} h below the longest preempted lifetime ({:.2} h): {}",
        deadline.near_longest,
        deadline.preemptions,
        deadline.longest_h,
        if deadline.present {
            "a deadline"
        } else {
            "no deadline"
        }
    );
    let (max_lifetime_h, models) = match (args.max_lifetime_hours, deadline.present) {
        (Some(l), _) => (l, ModelKind::ALL.to_vec()),
        (None, true) => (FitConfig::default().max_lifetime_h, ModelKind::ALL.to_vec()),
        (None, false) => {
            let models: Vec<ModelKind> = ModelKind::ALL
                .into_iter()
                .filter(|m| !m.needs_deadline())
                .collect();
            eprintln!(
                "fitting without a deadline: {} (the bathtub and the uniform model need one)",
                models
                    .iter()
                    .map(|m| m.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            (f64::INFINITY, models)
        }
    };
    let config = FitConfig {
        max_lifetime_h,
        models,
        groupings: args.by.clone(),
        shrinkage_events: args.shrinkage_events,
        min_events: args.min_events,
        ..FitConfig::default()
    };
    let started = Instant::now();
    let fits = fit_groups(&records, &config)?;
    eprintln!(
        "fitted {} models to {} groups in {:.1} s",
        config.models.len(),
        fits.groups().len(),
        started.elapsed().as_secs_f64()
    );
    if let Some(chosen) = fits.pooled().chosen() {
        eprintln!(
            "chosen for all VMs: {} (KS {:.4})",
            chosen.model.kind().name(),
            chosen.ks
        );
    }
    if let Some(dir) = &args.plots {
        let written = write_plots(&fits, dir)?;
        eprintln!("wrote {} plots to {}", written.len(), dir.display());
    }
    if args.json {
        print_json(&fits_json(&fits))
    } else {
        print_out(&table(&fits, &config))
    }
}

/// The lifetimes in a trace; skipped records and the counts are reported
/// on stderr.
fn read_lifetimes(path: &Path, format: Format) -> anyhow::Result<Vec<LifetimeRecord>> {
    let lifetimes = Lifetimes::read(path, format)
        .with_context(|| format!("reading lifetimes {}", path.display()))?;
    if lifetimes.diagnostics.skipped_total() > 0 {
        eprint!("{}", lifetimes.diagnostics.summary());
    }
    let preempted = lifetimes.preempted();
    eprintln!(
        "read {}: {} lifetimes, {} preempted, {} stopped (censored)",
        path.display(),
        lifetimes.records.len(),
        preempted,
        lifetimes.records.len() - preempted
    );
    Ok(lifetimes.records)
}
