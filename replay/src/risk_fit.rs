//! Lifetime models fitted to measured preemptible-VM lifetimes, as
//! `jobcast risk fit` reports them: the lifetimes read from the GCE
//! dataset, the fits as a table and as JSON, and plots of the fitted CDFs
//! over the Kaplan–Meier curve and of the bathtub density. The fitting
//! itself (censoring, the deadline, bounds, shrinkage, day/night) is
//! `jobcast_predictor::preemption::fit`; this module only reads and
//! presents, so that its output is a deterministic function of the input.

use std::path::{Path, PathBuf};

use jobcast_ingest::Format;
use jobcast_ingest::event::Event;
use jobcast_ingest::source::{Diagnostics, TraceError};
use jobcast_predictor::preemption::Bathtub;
use jobcast_predictor::preemption::fit::{
    Dimension, FitConfig, FitError, FitSet, GroupFit, GroupKey, Grouping, LifetimeRecord,
    fit_groups,
};
use jobcast_predictor::preemption::kaplan_meier::KaplanMeier;
use jobcast_predictor::preemption::models::{LifetimeModel, ModelKind};
use plotters::prelude::*;
use serde_json::json;

use crate::report::{PALETTE, align, axes, canvas, finish, frame, legend_line};

#[derive(Debug, thiserror::Error)]
pub enum RiskFitError {
    #[error(transparent)]
    Read(#[from] TraceError),
    #[error(transparent)]
    Fit(#[from] FitError),
    #[error("the bathtub was not fitted")]
    NotFitted,
    #[error("risk settings: {0}")]
    Settings(#[from] jobcast_ingest::config::ConfigError),
    #[error("plotting {path}: {message}")]
    Plot { path: PathBuf, message: String },
}

/// The measured lifetimes of one trace: the GCE lifetimes file
/// (`gce-lifetimes`), SkyPilot's spot traces (`spot-traces`), or any trace
/// whose machine events carry VM lifetimes.
pub struct Lifetimes {
    pub records: Vec<LifetimeRecord>,
    /// What the reader skipped, and why.
    pub diagnostics: Diagnostics,
}

impl Lifetimes {
    /// Read them from the machine events of the trace at `path`.
    pub fn read(path: &Path, format: Format) -> Result<Self, RiskFitError> {
        let trace = jobcast_ingest::open(format, path)?;
        let diagnostics = trace.diagnostics().clone();
        let mut records = Vec::new();
        for event in trace {
            if let Event::Machine(m) = event? {
                records.extend(LifetimeRecord::from_machine_event(&m));
            }
        }
        Ok(Self {
            records,
            diagnostics,
        })
    }

    /// How many lifetimes ended in a preemption.
    pub fn preempted(&self) -> usize {
        self.records.iter().filter(|r| r.preempted).count()
    }
}

/// The bathtub for VMs of `vm_type` in `zone`, fitted to the lifetimes in
/// `path` (censoring, shrinkage and deadline as `risk fit` has them): the
/// most specific fitted group among type+zone, type, zone and pooled
/// ([`FitSet::bathtub_for`]). Only the bathtub is fitted, on those groups.
/// The bathtub fitted to the lifetimes at `path` for VMs of `vm_type` in
/// `zone`, and the group whose fit it is (`type=… zone=…`, or the pooled
/// one when neither the type nor the zone has a fit of its own).
pub fn fitted_bathtub(
    path: &Path,
    vm_type: &str,
    zone: &str,
    max_lifetime_h: f64,
) -> Result<(Bathtub, GroupKey), RiskFitError> {
    let lifetimes = Lifetimes::read(path, Format::GceLifetimes)?;
    let config = FitConfig {
        max_lifetime_h,
        models: vec![ModelKind::Bathtub],
        groupings: [
            &[Dimension::Type, Dimension::Zone][..],
            &[Dimension::Type],
            &[Dimension::Zone],
        ]
        .into_iter()
        .map(Grouping::new)
        .collect(),
        ..FitConfig::default()
    };
    let fits = fit_groups(&lifetimes.records, &config)?;
    let group = fits
        .lookup_group(ModelKind::Bathtub, vm_type, zone, None)
        .ok_or(RiskFitError::NotFitted)?;
    match group.fit(ModelKind::Bathtub).map(|f| f.model) {
        Some(LifetimeModel::Bathtub(b)) => Ok((b, group.key.clone())),
        _ => Err(RiskFitError::NotFitted),
    }
}

/// A model's free parameters by name.
pub fn params_json(model: &LifetimeModel) -> serde_json::Value {
    model
        .named_params()
        .into_iter()
        .map(|(name, value)| (name.to_owned(), json!(value)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// The Kaplan–Meier share of VMs preempted before the deadline, `F̂(L⁻)`
/// (the rest reach it).
fn km_before_deadline(g: &GroupFit, max_lifetime_h: f64) -> f64 {
    g.km.steps()
        .iter()
        .take_while(|s| s.time_h < max_lifetime_h)
        .last()
        .map_or(0.0, |s| 1.0 - s.survival)
}

/// One object per (group, model), pooled group first.
pub fn fits_json(fits: &FitSet) -> serde_json::Value {
    let l = fits.max_lifetime_h();
    fits.groups()
        .iter()
        .flat_map(|g| {
            g.fits.iter().map(move |f| {
                json!({
                    "group": g.key.to_string(),
                    "vms": g.km.observations(),
                    "preemptions": g.km.events(),
                    "km_cdf_before_deadline": km_before_deadline(g, l),
                    "model": f.model.kind().name(),
                    "params": params_json(&f.model),
                    "max_lifetime_h": f.model.max_lifetime_h(),
                    "mean_lifetime_h": f.model.mean(),
                    "weight": f.weight,
                    "raw_params": params_json(&f.raw),
                    "r2": f.r2,
                    "ks": f.ks,
                    "at_bounds": f.at_bounds(),
                    "chosen": g.chosen().is_some_and(|c| std::ptr::eq(c, f)),
                })
            })
        })
        .collect()
}

/// A number in at most 4 significant decimals, or in exponent form when
/// tiny or huge.
fn num(v: f64) -> String {
    if v == 0.0 || (1e-3..1e4).contains(&v.abs()) {
        format!("{v:.4}")
    } else {
        format!("{v:.3e}")
    }
}

/// The fits as a plain-text table, pooled group first, with the groups
/// left unfitted.
pub fn table(fits: &FitSet, config: &FitConfig) -> String {
    let deadline = if fits.max_lifetime_h().is_finite() {
        format!(
            "L = {} h (lifetimes at or past L count as preempted at L)",
            fits.max_lifetime_h()
        )
    } else {
        "no deadline (the bathtub and the uniform model need one)".to_owned()
    };
    let mut out = format!(
        "{deadline}; groups keep d/(d + {}) of their own fit; * marks the model each group's risks use\n",
        config.shrinkage_events
    );
    let mut rows = vec![vec![
        "group".to_owned(),
        "VMs".to_owned(),
        "preempted".to_owned(),
        "KM F(L−)".to_owned(),
        "model".to_owned(),
        "weight".to_owned(),
        "R²".to_owned(),
        "KS".to_owned(),
        "mean h".to_owned(),
        "parameters".to_owned(),
    ]];
    for g in fits.groups() {
        for (i, f) in g.fits.iter().enumerate() {
            let first = i == 0;
            let params: Vec<String> = f
                .model
                .named_params()
                .iter()
                .map(|(n, v)| format!("{n}={}", num(*v)))
                .collect();
            rows.push(vec![
                if first {
                    g.key.to_string()
                } else {
                    String::new()
                },
                if first {
                    g.km.observations().to_string()
                } else {
                    String::new()
                },
                if first {
                    g.km.events().to_string()
                } else {
                    String::new()
                },
                if first {
                    format!("{:.4}", km_before_deadline(g, fits.max_lifetime_h()))
                } else {
                    String::new()
                },
                format!(
                    "{}{}",
                    f.model.kind().name(),
                    if g.chosen().is_some_and(|c| std::ptr::eq(c, f)) {
                        "*"
                    } else {
                        ""
                    }
                ),
                format!("{:.2}", f.weight),
                // Undefined on a flat Kaplan–Meier curve (no variance).
                if f.r2.is_finite() {
                    format!("{:.4}", f.r2)
                } else {
                    "–".to_owned()
                },
                format!("{:.4}", f.ks),
                format!("{:.2}", f.model.mean()),
                params.join(" "),
            ]);
        }
    }
    // Group, model and parameters left, numbers right.
    out += &align(&rows, |c, cols| c == 0 || c == 4 || c + 1 == cols);
    for g in fits.groups() {
        for f in &g.fits {
            let edge = f.at_bounds();
            if !edge.is_empty() {
                out += &format!(
                    "warning: {} {}: {} at the edge of the search (the data do not pin {} down)\n",
                    g.key,
                    f.model.kind().name(),
                    edge.join(", "),
                    if edge.len() == 1 { "it" } else { "them" }
                );
            }
        }
    }
    if !fits.skipped().is_empty() {
        let skipped: Vec<String> = fits
            .skipped()
            .iter()
            .map(|(key, n, d)| format!("{key} ({n} VMs, {d} preempted)"))
            .collect();
        out += &format!(
            "not fitted (fewer than {} preemptions): {}\n",
            config.min_events,
            skipped.join(", ")
        );
    }
    out
}

/// Line colour of each model, in [`ModelKind::ALL`] order: red, blue,
/// green, purple, orange from the shared palette.
const MODEL_COLORS: [usize; 5] = [3, 0, 2, 4, 1];

fn model_color(kind: ModelKind) -> RGBColor {
    let i = ModelKind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
    PALETTE[MODEL_COLORS[i]]
}

/// Points per fitted curve.
const CURVE_POINTS: u32 = 400;

/// Write the CDF plot of every group (`lifetime_cdf.svg` pooled,
/// `lifetime_cdf_<group>.svg` per group) and the fitted bathtub density
/// (`bathtub_density.svg`) into `dir`; the files written.
pub fn write_plots(fits: &FitSet, dir: &Path) -> Result<Vec<PathBuf>, RiskFitError> {
    std::fs::create_dir_all(dir).map_err(|e| plot_err(dir)(&e))?;
    let mut written = Vec::new();
    for g in fits.groups() {
        let name = if g.key.is_pooled() {
            "lifetime_cdf.svg".to_owned()
        } else {
            // `type=n1-highcpu-2,zone=us-east1-b` → `type-n1-highcpu-2_zone-us-east1-b`.
            format!(
                "lifetime_cdf_{}.svg",
                g.key.to_string().replace('=', "-").replace(',', "_")
            )
        };
        let path = dir.join(name);
        // Without a deadline, as far as the group's lifetimes were seen.
        let horizon = if fits.max_lifetime_h().is_finite() {
            fits.max_lifetime_h()
        } else {
            g.km.last_time_h()
        };
        cdf_plot(&path, g, horizon)?;
        written.push(path);
    }
    if let Some(LifetimeModel::Bathtub(fitted)) =
        fits.pooled().fit(ModelKind::Bathtub).map(|f| f.model)
    {
        let path = dir.join("bathtub_density.svg");
        density_plot(&path, &fitted, fits.pooled().km.observations())?;
        written.push(path);
    }
    Ok(written)
}

/// The Kaplan–Meier CDF as a staircase up to its last observation (and at
/// most the deadline).
fn km_points(km: &KaplanMeier, max_lifetime_h: f64) -> Vec<(f64, f64)> {
    let mut points = vec![(0.0, 0.0)];
    let mut level = 0.0;
    for s in km.steps() {
        points.push((s.time_h, level));
        level = 1.0 - s.survival;
        points.push((s.time_h, level));
    }
    points.push((km.last_time_h().min(max_lifetime_h), level));
    points
}

/// A model's CDF on `[0, horizon)`, then, when the horizon is its
/// deadline `L`, its jump to 1 there.
fn model_points(model: &LifetimeModel, horizon_h: f64) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = (0..CURVE_POINTS)
        .map(|i| {
            let t = f64::from(i) * horizon_h / f64::from(CURVE_POINTS);
            (t, model.cdf(t))
        })
        .collect();
    let left = model.cdf(horizon_h * (1.0 - 1e-9));
    points.push((horizon_h, left));
    if model.max_lifetime_h() == horizon_h {
        points.push((horizon_h, 1.0));
    }
    points
}

/// Turns a plotting error into one that names the file.
fn plot_err(path: &Path) -> impl Fn(&dyn std::fmt::Display) -> RiskFitError + '_ {
    move |e| RiskFitError::Plot {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

fn cdf_plot(path: &Path, group: &GroupFit, max_lifetime_h: f64) -> Result<(), RiskFitError> {
    let plot_err = plot_err(path);
    let root = canvas(path, (900, 560)).map_err(|e| plot_err(&e))?;
    let title = format!(
        "VM lifetimes, {}: {} VMs, {} preempted",
        group.key,
        group.km.observations(),
        group.km.events()
    );
    let mut chart = frame(&root, &title, 56)
        .build_cartesian_2d(0f64..max_lifetime_h * 1.02, 0f64..1f64)
        .map_err(|e| plot_err(&e))?;
    axes(
        &mut chart.configure_mesh(),
        "lifetime (hours)",
        "P(preempted by then)",
    )
    .draw()
    .map_err(|e| plot_err(&e))?;
    chart
        .draw_series(LineSeries::new(
            km_points(&group.km, max_lifetime_h),
            BLACK.stroke_width(3),
        ))
        .map_err(|e| plot_err(&e))?
        .label("Kaplan–Meier")
        .legend(legend_line(BLACK.stroke_width(3)));
    let n = group.fits.len();
    for (i, f) in group.fits.iter().enumerate() {
        let color = model_color(f.model.kind());
        // Earlier curves are drawn wider, so one that a later fit covers
        // (Gompertz–Makeham degenerating to the exponential) stays visible.
        let width = 2 + 2 * (n - 1 - i) / n.saturating_sub(1).max(1);
        chart
            .draw_series(LineSeries::new(
                model_points(&f.model, max_lifetime_h),
                color.stroke_width(width as u32),
            ))
            .map_err(|e| plot_err(&e))?
            .label(format!(
                "{} (R² {:.3}, KS {:.3})",
                f.model.kind().name(),
                f.r2,
                f.ks
            ))
            .legend(legend_line(color.stroke_width(2)));
    }
    finish(&mut chart, &root, SeriesLabelPosition::LowerRight).map_err(|e| plot_err(&e))
}

/// The fitted bathtub's density (log scale) beside the paper's typical fit.
fn density_plot(path: &Path, fitted: &Bathtub, vms: usize) -> Result<(), RiskFitError> {
    let plot_err = plot_err(path);
    let paper = Bathtub::default();
    let end = fitted.max_lifetime_h();
    let curve = |m: &Bathtub| -> Vec<(f64, f64)> {
        (0..CURVE_POINTS)
            .map(|i| f64::from(i) * m.continuous_end_h() / f64::from(CURVE_POINTS))
            .map(|t| (t, m.density(t)))
            .filter(|&(_, g)| g > 0.0)
            .collect()
    };
    let (fitted_curve, paper_curve) = (curve(fitted), curve(&paper));
    let all = fitted_curve.iter().chain(&paper_curve).map(|p| p.1);
    let (lo, hi) = all.fold((f64::INFINITY, 0f64), |(lo, hi), g| (lo.min(g), hi.max(g)));
    let (lo, hi) = (
        10f64.powf(lo.log10().floor()),
        10f64.powf(hi.log10().ceil()),
    );
    let root = canvas(path, (900, 560)).map_err(|e| plot_err(&e))?;
    let title = format!("Bathtub density of preemption ({vms} VMs)");
    let mut chart = frame(&root, &title, 64)
        .build_cartesian_2d(0f64..end.max(paper.max_lifetime_h()), (lo..hi).log_scale())
        .map_err(|e| plot_err(&e))?;
    axes(
        &mut chart.configure_mesh(),
        "VM age (hours)",
        "density (1/hour)",
    )
    .y_label_formatter(&|y| format!("{y:.0e}"))
    .draw()
    .map_err(|e| plot_err(&e))?;
    let label = |m: &Bathtub, what: &str| {
        format!(
            "{what}: A {:.3}, τ1 {:.2} h, τ2 {:.2} h, b {:.1} h; P(T = L) {:.2}",
            m.a(),
            m.tau1(),
            m.tau2(),
            m.b(),
            m.deadline_mass()
        )
    };
    for (points, color, name) in [
        (
            fitted_curve,
            PALETTE[MODEL_COLORS[0]],
            label(fitted, "fitted"),
        ),
        (paper_curve, RGBColor(127, 127, 127), label(&paper, "paper")),
    ] {
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| plot_err(&e))?
            .label(name)
            .legend(legend_line(color.stroke_width(2)));
    }
    finish(&mut chart, &root, SeriesLabelPosition::UpperMiddle).map_err(|e| plot_err(&e))
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// Lifetimes drawn from the paper's bathtub, a fifth of them stopped
    /// by their users at half their drawn lifetime, in two zones.
    fn lifetimes(n: usize) -> Vec<LifetimeRecord> {
        let truth = Bathtub::default();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        (0..n)
            .map(|i| {
                let t = truth.sample(&mut rng);
                LifetimeRecord {
                    lifetime_h: if i % 5 == 0 { t / 2.0 } else { t },
                    preempted: i % 5 != 0,
                    vm_type: "n1-highcpu-2".to_owned(),
                    zone: ["us-central1-c", "us-east1-b"][i % 2].to_owned(),
                    launch_time_us: 1_553_541_756_000_000,
                }
            })
            .collect()
    }

    fn fitted() -> (FitSet, FitConfig) {
        let config = FitConfig {
            groupings: vec![Grouping::new(&[Dimension::Zone])],
            ..FitConfig::default()
        };
        (fit_groups(&lifetimes(600), &config).unwrap(), config)
    }

    #[test]
    fn table_and_json_show_every_group_and_model() {
        let (fits, config) = fitted();
        let json = fits_json(&fits);
        let rows = json.as_array().unwrap();
        assert_eq!(rows.len(), 3 * config.models.len());
        assert_eq!(rows[0]["group"], "all");
        assert_eq!(rows[0]["vms"], 600);
        assert_eq!(rows[0]["preemptions"], 480);
        let text = table(&fits, &config);
        for zone in ["zone=us-central1-c", "zone=us-east1-b"] {
            assert!(text.contains(zone), "{text}");
        }
        let rows: String = text
            .lines()
            .filter(|l| !l.starts_with("warning:"))
            .collect();
        for model in &config.models {
            assert_eq!(rows.matches(model.name()).count(), 3, "{text}");
        }
    }

    #[test]
    fn plots_are_written_per_group_and_name_a_path_they_cannot_write() {
        let (fits, _) = fitted();
        let dir = tempfile::tempdir().unwrap();
        let written = write_plots(&fits, dir.path()).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "lifetime_cdf.svg",
                "lifetime_cdf_zone-us-central1-c.svg",
                "lifetime_cdf_zone-us-east1-b.svg",
                "bathtub_density.svg"
            ]
        );
        for (path, caption) in written.iter().zip([
            "VM lifetimes, all: 600 VMs, 480 preempted",
            "VM lifetimes, zone=us-central1-c",
            "VM lifetimes, zone=us-east1-b",
            "Bathtub density of preemption (600 VMs)",
        ]) {
            let svg = std::fs::read_to_string(path).unwrap();
            assert!(svg.contains("<svg") && svg.contains(caption), "{path:?}");
        }
        let file = dir.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        let err = write_plots(&fits, &file).unwrap_err();
        assert!(err.to_string().contains("a-file"), "{err}");
    }
}
