//! `jobcast risk fit`: fit every lifetime model (bathtub, exponential,
//! Weibull, Gompertz–Makeham, uniform) to measured preemptible-VM lifetimes,
//! pooled and per group, and report the parameters, R² and the
//! Kolmogorov–Smirnov distance against the Kaplan–Meier curve; optionally
//! plot the fitted CDFs over that curve and the bathtub density. The method
//! (censoring, the deadline, bounds, shrinkage, day/night) is documented in
//! `jobcast_predictor::preemption::fit`.
//!
//! Everything printed on stdout is a deterministic function of the input
//! and the flags (seeded starts, ordered groups), so the same input gives
//! the same bytes; timings go to stderr.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use jobcast_ingest::event::Event;
use jobcast_predictor::preemption::Bathtub;
use jobcast_predictor::preemption::fit::{
    Dimension, FitConfig, FitSet, GroupFit, Grouping, LifetimeRecord, fit_groups,
};
use jobcast_predictor::preemption::kaplan_meier::KaplanMeier;
use jobcast_predictor::preemption::models::{LifetimeModel, ModelKind};
use jobcast_replay::report::{PALETTE, align};
use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;
use serde_json::json;

use crate::output::{print_json, print_out};

#[derive(clap::Args)]
pub struct FitArgs {
    /// Measured preemptible-VM lifetimes: the GCE dataset's `data.json` or
    /// `data.json.gz`.
    #[arg(long)]
    lifetimes: PathBuf,
    /// Groupings besides the pooled data, comma-separated: `type`, `zone`,
    /// `period` (day/night by VM-local launch time), or combinations such
    /// as `type+zone`.
    #[arg(long, value_delimiter = ',', default_value = "type,zone,period")]
    by: Vec<Grouping>,
    /// The provider's maximum lifetime `L`, hours; measured lifetimes at or
    /// past it count as preempted at `L`.
    #[arg(long, default_value_t = FitConfig::default().max_lifetime_h)]
    max_lifetime_hours: f64,
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
    let mut records = read_lifetimes(&args.lifetimes)?;
    if args.preempted_only {
        records.retain(|r| r.preempted);
    }
    let config = FitConfig {
        max_lifetime_h: args.max_lifetime_hours,
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
    if let Some(dir) = &args.plots {
        let written = write_plots(&fits, dir)?;
        eprintln!("wrote {} plots to {}", written, dir.display());
    }
    if args.json {
        print_json(&fits_json(&fits))
    } else {
        print_out(&table(&fits, &config))
    }
}

/// The bathtub for VMs of `vm_type` in `zone`, fitted to the lifetimes in
/// `path` (censoring, shrinkage and deadline as in `run`): the most specific
/// fitted group among type+zone, type, zone and pooled
/// ([`FitSet::bathtub_for`]). Only the bathtub is fitted, on those groups.
pub(super) fn fitted_bathtub(
    path: &Path,
    vm_type: &str,
    zone: &str,
    max_lifetime_h: f64,
) -> anyhow::Result<Bathtub> {
    let records = read_lifetimes(path)?;
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
    let fits = fit_groups(&records, &config)?;
    fits.bathtub_for(vm_type, zone, None)
        .context("the bathtub was not fitted")
}

/// The lifetimes in a GCE lifetimes file, via the `gce-lifetimes` adapter's
/// machine events; skipped records are reported on stderr.
fn read_lifetimes(path: &Path) -> anyhow::Result<Vec<LifetimeRecord>> {
    let trace = jobcast_ingest::gce::open(path)
        .with_context(|| format!("opening lifetimes {}", path.display()))?;
    let diagnostics = trace.diagnostics().clone();
    let mut records = Vec::new();
    for event in trace {
        if let Event::Machine(m) = event.with_context(|| format!("reading {}", path.display()))? {
            records.extend(LifetimeRecord::from_machine_event(&m));
        }
    }
    if diagnostics.skipped_total() > 0 {
        eprint!("{}", diagnostics.summary());
    }
    let preempted = records.iter().filter(|r| r.preempted).count();
    eprintln!(
        "read {}: {} lifetimes, {} preempted, {} stopped (censored)",
        path.display(),
        records.len(),
        preempted,
        records.len() - preempted
    );
    Ok(records)
}

/// A model's free parameters by name.
pub(super) fn params_json(model: &LifetimeModel) -> serde_json::Value {
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
fn fits_json(fits: &FitSet) -> serde_json::Value {
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

fn table(fits: &FitSet, config: &FitConfig) -> String {
    let mut out = format!(
        "L = {} h (lifetimes at or past L count as preempted at L); groups keep d/(d + {}) of their own fit\n",
        fits.max_lifetime_h(),
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
                f.model.kind().name().to_owned(),
                format!("{:.2}", f.weight),
                format!("{:.4}", f.r2),
                format!("{:.4}", f.ks),
                format!("{:.2}", f.model.mean()),
                params.join(" "),
            ]);
        }
    }
    // Group, model and parameters left, numbers right.
    out += &align(&rows, |c, cols| c == 0 || c == 4 || c + 1 == cols);
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

/// Write the CDF plot of every group and the bathtub density; the number
/// of files written.
fn write_plots(fits: &FitSet, dir: &Path) -> anyhow::Result<usize> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = 0;
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
        cdf_plot(&path, g, fits.max_lifetime_h())
            .with_context(|| format!("plotting {}", path.display()))?;
        written += 1;
    }
    if let Some(LifetimeModel::Bathtub(fitted)) =
        fits.pooled().fit(ModelKind::Bathtub).map(|f| f.model)
    {
        let path = dir.join("bathtub_density.svg");
        density_plot(&path, &fitted, fits.pooled().km.observations())
            .with_context(|| format!("plotting {}", path.display()))?;
        written += 1;
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

/// A model's CDF on `[0, L)`, then its jump to 1 at `L`.
fn model_points(model: &LifetimeModel, max_lifetime_h: f64) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = (0..CURVE_POINTS)
        .map(|i| {
            let t = f64::from(i) * max_lifetime_h / f64::from(CURVE_POINTS);
            (t, model.cdf(t))
        })
        .collect();
    let left = model.cdf(max_lifetime_h * (1.0 - 1e-9));
    points.push((max_lifetime_h, left));
    points.push((max_lifetime_h, 1.0));
    points
}

fn plot_err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// The legend mark of a line series drawn in `style`.
fn legend_line(style: ShapeStyle) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style)
}

/// Draw the legend at `position` and write the plot's file.
fn finish<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    root: &DrawingArea<DB, Shift>,
    position: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

fn cdf_plot(path: &Path, group: &GroupFit, max_lifetime_h: f64) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let title = format!(
        "VM lifetimes, {}: {} VMs, {} preempted",
        group.key,
        group.km.observations(),
        group.km.events()
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..max_lifetime_h * 1.02, 0f64..1f64)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("lifetime (hours)")
        .y_desc("P(preempted by then)")
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .draw()
        .map_err(plot_err)?;
    chart
        .draw_series(LineSeries::new(
            km_points(&group.km, max_lifetime_h),
            BLACK.stroke_width(3),
        ))
        .map_err(plot_err)?
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
            .map_err(plot_err)?
            .label(format!(
                "{} (R² {:.3}, KS {:.3})",
                f.model.kind().name(),
                f.r2,
                f.ks
            ))
            .legend(legend_line(color.stroke_width(2)));
    }
    finish(&mut chart, &root, SeriesLabelPosition::LowerRight)
}

/// The fitted bathtub's density (log scale) beside the paper's typical fit.
fn density_plot(path: &Path, fitted: &Bathtub, vms: usize) -> anyhow::Result<()> {
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
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Bathtub density of preemption ({vms} VMs)"),
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..end.max(paper.max_lifetime_h()), (lo..hi).log_scale())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("VM age (hours)")
        .y_desc("density (1/hour)")
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .y_label_formatter(&|y| format!("{y:.0e}"))
        .draw()
        .map_err(plot_err)?;
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
            .map_err(plot_err)?
            .label(name)
            .legend(legend_line(color.stroke_width(2)));
    }
    finish(&mut chart, &root, SeriesLabelPosition::UpperMiddle)
}
