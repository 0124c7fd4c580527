//! The risk scores held against real preemptions, as `jobcast risk
//! calibrate` reports them.
//!
//! The measured VMs are split in two at random (seeded): the service's
//! lifetime fitter ([`OnlineFitter`], with the configuration the engine
//! uses, from its risk settings) learns from the machine events of one half, as it
//! would from the stream; the other half is held out. On each held-out VM
//! tasks run back to back from its launch, and every failure probability
//! the engine would publish for them (at placement and at each refresh
//! age; `jobcast_predictor::preemption::scoring`) is scored against what
//! happened to that VM: Brier score and reliability by equal-count bins,
//! censored outcomes weighted out. The engine publishes the model's
//! probability recalibrated on the outcomes of the scores before it
//! (`preemption::recalibration`); here the recalibration learns from the
//! same tasks run on the fitted half, and the model's own scores are
//! reported beside the published ones. The bathtub paper's VM reuse policy is
//! measured the same way: it decides by the fitted pooled bathtub, and the
//! lifetimes it meets are drawn from the Kaplan–Meier curve of the
//! held-out VMs, against the memoryless policy on the same draws.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use jobcast_ingest::Format;
use jobcast_ingest::event::{Event, MachineEvent};
use jobcast_predictor::engine::RiskSettings;
use jobcast_predictor::preemption::fit::{DeadlineCheck, LifetimeRecord};
use jobcast_predictor::preemption::kaplan_meier::{KaplanMeier, Observation};
use jobcast_predictor::preemption::online::OnlineFitter;
use jobcast_predictor::preemption::recalibration::Recalibration;
use jobcast_predictor::preemption::running_time::{
    ReuseCriterion, ReuseFailureRow, reuse_monte_carlo,
};
use jobcast_predictor::preemption::scoring::{
    Forecast, Outcome, Reliability, censoring_curve, forecasts_on, reliability, weight,
};
use plotters::prelude::*;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::report::{PALETTE, axes, canvas, finish, frame, legend_line};
use crate::risk_fit::RiskFitError;

/// How to calibrate.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrateConfig {
    /// Seeds the split, the task runtimes and the reuse simulation.
    pub seed: u64,
    /// Task runtimes are log-uniform between these, hours.
    pub task_hours: (f64, f64),
    /// The engine's risk settings: how it fits lifetimes, and the VM ages
    /// at which it scores a running task again.
    pub risk: RiskSettings,
    /// Equal-count bins of the reliability diagram.
    pub bins: usize,
    /// Job lengths of the reuse simulation, hours.
    pub reuse_job_hours: Vec<f64>,
    /// Simulated jobs per length.
    pub reuse_samples: usize,
}

impl Default for CalibrateConfig {
    /// Tasks of 6 minutes to 12 hours, the engine's default risk settings,
    /// deciles, and the reuse simulation of `risk reuse-mc` (1–23 h jobs, 20,000
    /// each).
    fn default() -> Self {
        CalibrateConfig {
            seed: 1,
            task_hours: (0.1, 12.0),
            risk: RiskSettings::default(),
            bins: 10,
            reuse_job_hours: (1..=23).map(f64::from).collect(),
            reuse_samples: 20_000,
        }
    }
}

/// The VMs on each side of the split.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Half {
    pub vms: usize,
    pub preempted: usize,
}

/// The reuse policy against the memoryless one on held-out lifetimes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reuse {
    /// Memoryless failures over the policy's, summed over the job lengths:
    /// the paper's rule (keep the VM iff its expected running time is no
    /// longer than a fresh VM's).
    pub failure_ratio: f64,
    /// The same for the rule that minimises the failure probability.
    pub failure_ratio_min_p: f64,
    pub expected_running_time: Vec<ReuseFailureRow>,
    pub failure_probability: Vec<ReuseFailureRow>,
}

/// What `jobcast risk calibrate` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibration {
    pub fitted: Half,
    pub held_out: Half,
    /// The model the risks were scored with (all VMs): `bathtub`, or where
    /// the lifetimes show no deadline the one closest to them.
    pub lifetime_model: &'static str,
    /// What the fitter found of a deadline.
    pub deadline: Option<DeadlineCheck>,
    /// Successful refits of the fitter on the fitted half.
    pub refits: u64,
    /// The published scores: the model's, recalibrated on the outcomes of
    /// the fitted half's.
    pub reliability: Reliability,
    /// The model's own scores.
    pub model_reliability: Reliability,
    /// Outcomes (censoring-weighted) the recalibration learnt from.
    pub recalibration_outcomes: f64,
    pub reuse: Reuse,
}

/// Calibrate the risk scores on the measured lifetimes at `path` (a
/// trace of `format` whose machine events carry VM lifetimes).
pub fn calibrate(
    path: &Path,
    format: Format,
    config: &CalibrateConfig,
) -> Result<Calibration, RiskFitError> {
    let events = machine_events(path, format)?;
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let mut ids: Vec<u64> = events
        .iter()
        .map(|e| e.machine_id)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    ids.shuffle(&mut rng);
    let held: BTreeSet<u64> = ids[..ids.len() / 2].iter().copied().collect();

    let mut fitter = OnlineFitter::new(config.risk.online()?);
    let (mut fitted, mut held_out) = (Vec::new(), Vec::new());
    for event in &events {
        let record = LifetimeRecord::from_machine_event(event);
        if held.contains(&event.machine_id) {
            held_out.extend(record);
        } else {
            fitter.observe(event);
            fitted.extend(record);
        }
    }
    fitter.refit()?;

    let (low, high) = config.task_hours;
    let mut runtimes = std::iter::repeat_with(|| low * (high / low).powf(rng.random::<f64>()));
    let mut forecasts_of = |vms: &'_ [LifetimeRecord]| -> Vec<(Forecast, usize)> {
        vms.iter()
            .enumerate()
            .flat_map(|(i, vm)| {
                let model = fitter.risk_model_for(&vm.vm_type, &vm.zone, vm.launch_time_us);
                forecasts_on(vm, &model, &mut runtimes, &config.risk.refresh_ages_h)
                    .into_iter()
                    .map(move |f| (f, i))
            })
            .collect()
    };
    // The engine learns its recalibration from the outcomes of the scores
    // it published before: here, those of tasks on the fitted half's VMs,
    // weighted by the fitter's curve of the stops.
    let learnt = forecasts_of(&fitted);
    let model = forecasts_of(&held_out);
    let mut recalibration = Recalibration::new(
        config.risk.recalibration_bins,
        config.risk.recalibration_min_outcomes,
    );
    if let Some(stops) = fitter.censoring() {
        for (f, i) in &learnt {
            if let Some(w) = weight(stops, &fitted[*i], f) {
                let failed = Outcome::of(&fitted[*i], f.end_h) == Outcome::Failed;
                recalibration.observe(f.p, failed, w);
            }
        }
    }
    recalibration.refit();
    let model: Vec<(Forecast, &LifetimeRecord)> =
        model.into_iter().map(|(f, i)| (f, &held_out[i])).collect();
    let published: Vec<(Forecast, &LifetimeRecord)> = model
        .iter()
        .map(|&(f, vm)| {
            let p = recalibration.map(f.p);
            (Forecast { p, ..f }, vm)
        })
        .collect();
    let held_out_stops = censoring_curve(&held_out);
    let reliability = reliability(&published, &held_out_stops, config.bins);
    let model_reliability =
        jobcast_predictor::preemption::scoring::reliability(&model, &held_out_stops, config.bins);

    let pooled = fitter
        .fits()
        .and_then(|f| f.pooled().chosen())
        .map(|f| f.model)
        .ok_or(RiskFitError::NotFitted)?;
    let truth = KaplanMeier::new(
        &held_out
            .iter()
            .map(|vm| Observation {
                time_h: vm.lifetime_h,
                event: vm.preempted,
            })
            .collect::<Vec<_>>(),
    )
    .expect("measured lifetimes are finite and non-negative");
    // Ages up to the deadline, or without one as far as VMs were seen.
    let max_age_h = pooled.max_lifetime_h().min(truth.last_time_h());
    let simulate = |criterion| {
        reuse_monte_carlo(
            &pooled,
            &truth,
            criterion,
            &config.reuse_job_hours,
            max_age_h,
            config.reuse_samples,
            config.seed,
        )
    };
    let by_time = simulate(ReuseCriterion::ExpectedRunningTime);
    let by_failure = simulate(ReuseCriterion::FailureProbability);
    let ratio = |rows: &[ReuseFailureRow]| {
        rows.iter().map(|r| r.memoryless_failure).sum::<f64>()
            / rows.iter().map(|r| r.policy_failure).sum::<f64>()
    };
    let half = |records: &[LifetimeRecord]| Half {
        vms: records.len(),
        preempted: records.iter().filter(|r| r.preempted).count(),
    };
    Ok(Calibration {
        fitted: half(&fitted),
        held_out: half(&held_out),
        lifetime_model: pooled.kind().name(),
        deadline: fitter.deadline().copied(),
        refits: fitter.refits(),
        reliability,
        model_reliability,
        recalibration_outcomes: recalibration.outcomes(),
        reuse: Reuse {
            failure_ratio: ratio(&by_time),
            failure_ratio_min_p: ratio(&by_failure),
            expected_running_time: by_time,
            failure_probability: by_failure,
        },
    })
}

/// The machine events of the trace at `path`, in trace order.
fn machine_events(path: &Path, format: Format) -> Result<Vec<MachineEvent>, RiskFitError> {
    let mut events = Vec::new();
    for event in jobcast_ingest::open(format, path)? {
        if let Event::Machine(m) = event? {
            events.push(m);
        }
    }
    Ok(events)
}

/// Write the reliability diagram (`reliability.svg`) into `dir`.
pub fn write_plot(calibration: &Calibration, dir: &Path) -> Result<PathBuf, RiskFitError> {
    let path = dir.join("reliability.svg");
    let plot_err = |e: &dyn std::fmt::Display| RiskFitError::Plot {
        path: path.clone(),
        message: e.to_string(),
    };
    std::fs::create_dir_all(dir).map_err(|e| plot_err(&e))?;
    let r = &calibration.reliability;
    let root = canvas(&path, (760, 640)).map_err(|e| plot_err(&e))?;
    let title = format!(
        "Published P(fail) on {} held-out VMs: Brier {:.3}",
        calibration.held_out.vms, r.brier
    );
    let mut chart = frame(&root, &title, 64)
        .build_cartesian_2d(0f64..1f64, 0f64..1f64)
        .map_err(|e| plot_err(&e))?;
    axes(
        &mut chart.configure_mesh(),
        "forecast probability of failure (bin mean)",
        "observed failure rate (censoring-weighted)",
    )
    .draw()
    .map_err(|e| plot_err(&e))?;
    let grey = RGBColor(127, 127, 127);
    chart
        .draw_series(LineSeries::new(
            [(0.0, 0.0), (1.0, 1.0)],
            grey.stroke_width(1),
        ))
        .map_err(|e| plot_err(&e))?
        .label("perfect calibration")
        .legend(legend_line(grey.stroke_width(1)));
    for (reliability, what, color) in [
        (
            &calibration.model_reliability,
            "the model's own",
            PALETTE[1],
        ),
        (r, "published", PALETTE[0]),
    ] {
        let points: Vec<(f64, f64)> = reliability
            .bins
            .iter()
            .map(|b| (b.mean_p, b.observed))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| plot_err(&e))?
            .label(format!(
                "{what}: {} bins of {} forecasts; largest gap {:.1} points",
                reliability.bins.len(),
                reliability.forecasts - reliability.censored,
                reliability.max_gap_pts
            ))
            .legend(legend_line(color.stroke_width(2)));
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 4, color.filled())),
            )
            .map_err(|e| plot_err(&e))?;
    }
    finish(&mut chart, &root, SeriesLabelPosition::UpperLeft).map_err(|e| plot_err(&e))?;
    drop(chart);
    drop(root);
    Ok(path)
}
