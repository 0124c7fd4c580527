//! Every policy on the same workload and the same cluster (SLearn §5.2):
//! prediction accuracy, JCTs, SLearn's speedups, and the paper's Fig. 3
//! (error CDF) and Fig. 6 (per-job JCT speedup CDF) as SVG.
//!
//! Each policy runs independently on its own copy of the history trained
//! on the first half of the trace (or of an empty one, for a cold start),
//! so the runs can go in parallel and still give exactly the results of
//! running them one by one.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::report::{PALETTE, align, axes, canvas, cdf_plot, finish, frame, legend_line};
use jobcast_ingest::config::ConfigError;
pub use jobcast_predictor::decision::PolicyKind;
use jobcast_predictor::decision::Quantiles;
use jobcast_predictor::history::{History, HistoryConfig};
use jobcast_predictor::policies::{self, JobTruth, OracleTruth};
/// The policy settings, re-exported for the CLI.
pub use jobcast_predictor::policies::{PolicyConfig, Sampling};
use jobcast_predictor::queues::QueueConfig;
use plotters::prelude::*;
use serde_json::{Map, Value, json};

use crate::breakdown::Breakdown;
use crate::sim::{SimConfig, SimError, SimReport, simulate, speedup};
use crate::workload::{Excluded, LoadProfile, SimJob, Split, Workload};

/// How to evaluate.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalConfig {
    /// Task slots; `None` sizes the cluster for an average load of 1 over
    /// the evaluated half ([`Workload::unit_load_slots`]).
    pub slots: Option<u32>,
    pub queues: QueueConfig,
    pub history: HistoryConfig,
    pub policy: PolicyConfig,
    /// The policies to run, in report order.
    pub policies: Vec<PolicyKind>,
    /// Start from an empty history instead of one trained on the first
    /// half, as a freshly started `jobcast serve` does.
    pub cold_start: bool,
    /// [`SimConfig::dispatch_gap_us`].
    pub dispatch_gap_us: u64,
    /// Start the policy as a service that was fed the history half as the
    /// cluster's past starts (`jobcast bench slurm`): every past job run
    /// through it, each task starting at its submission, as the past's
    /// events report. Otherwise the policy starts fresh but for its
    /// quantiles' calibration, as the paper evaluates.
    pub warm_policy: bool,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            slots: None,
            queues: QueueConfig::default(),
            history: HistoryConfig::default(),
            policy: PolicyConfig::default(),
            // `hpc` is for HPC logs, which `evaluate --format swf`
            // measures against the field's baselines (`hpc/`).
            policies: PolicyKind::ALL
                .into_iter()
                .filter(|&k| k != PolicyKind::Hpc)
                .collect(),
            cold_start: false,
            dispatch_gap_us: 0,
            warm_policy: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{policy}: {error}")]
    Policy {
        policy: PolicyKind,
        error: ConfigError,
    },
    #[error("history: {0}")]
    History(ConfigError),
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("plotting {path}: {message}")]
    Plot { path: PathBuf, message: String },
}

/// The true mean task runtime of every evaluated job (and of each DAG
/// stage), for the Oracle.
pub fn oracle_truth(jobs: &[SimJob]) -> OracleTruth {
    jobs.iter()
        .map(|j| {
            let mut truth = JobTruth::new(j.mean_task_runtime_us());
            if j.job().stages.is_some() {
                for (id, mean) in j.stage_means_us() {
                    truth = truth.with_stage(id, mean);
                }
            }
            (j.job_id(), truth)
        })
        .collect()
}

impl EvalConfig {
    /// The history the runs start from: trained on the first half, or
    /// empty for a cold start.
    pub fn history_for(&self, workload: &Workload) -> Result<History, EvalError> {
        self.history.validate().map_err(EvalError::History)?;
        Ok(if self.cold_start {
            History::new(self.history.clone())
        } else {
            workload.train(self.history.clone())
        })
    }

    /// The simulated cluster on `slots` slots.
    pub fn sim_config(&self, slots: u32) -> SimConfig {
        SimConfig {
            slots,
            queues: self.queues.clone(),
            accuracy_min_width: self.policy.thin_limit,
            dispatch_gap_us: self.dispatch_gap_us,
        }
    }

    /// Jobs the starting history learned from.
    pub fn history_jobs(&self, workload: &Workload) -> usize {
        if self.cold_start {
            0
        } else {
            workload.training.len()
        }
    }

    /// The slot count to simulate: the configured one or the unit-load one.
    pub fn slots_for(&self, workload: &Workload) -> Result<u32, SimError> {
        match self.slots {
            Some(0) => Err(SimError::NoSlots),
            Some(n) => Ok(n),
            None => Ok(workload.unit_load_slots()),
        }
    }
}

/// Run one policy over the workload's evaluated jobs on `slots` slots.
pub fn run_policy(
    workload: &Workload,
    kind: PolicyKind,
    config: &EvalConfig,
    slots: u32,
) -> Result<SimReport, EvalError> {
    let history = config.history_for(workload)?;
    run_trained(workload, kind, config, slots, history)
}

/// Run `kind` over the evaluated jobs from `history`. Unless the start is
/// cold, the calibration of its quantiles is first learnt by running it
/// over the history half (from an empty history that learns as it goes),
/// so that they are calibrated from the first evaluated job, as a running
/// service's are; the policy is otherwise fresh (unless
/// [`EvalConfig::warm_policy`]) and the history is the one trained on the
/// whole first half, as the paper's.
fn run_trained(
    workload: &Workload,
    kind: PolicyKind,
    config: &EvalConfig,
    slots: u32,
    history: History,
) -> Result<SimReport, EvalError> {
    let oracle = (kind == PolicyKind::Oracle).then(|| {
        let mut every = workload.jobs.clone();
        every.extend(workload.training.iter().cloned());
        oracle_truth(&every)
    });
    let build = || {
        policies::build(kind, &config.policy, oracle.clone()).map_err(|error| EvalError::Policy {
            policy: kind,
            error,
        })
    };
    let mut policy = build()?;
    let sim = config.sim_config(slots);
    if !config.cold_start && !workload.training.is_empty() {
        let mut warm = build()?;
        let fresh = History::new(config.history.clone());
        if config.warm_policy {
            // A slot for every past task: each starts at its submission.
            let tasks = workload.training.iter().map(|j| j.width()).sum::<u32>();
            let past = SimConfig {
                slots: tasks.max(1),
                ..sim.clone()
            };
            simulate(&workload.training, fresh, warm.as_mut(), &past)?;
            policy = warm;
        } else {
            simulate(&workload.training, fresh, warm.as_mut(), &sim)?;
            policy = policies::with_calibration_of(policy.as_ref(), warm.as_ref());
        }
    }
    Ok(simulate(&workload.jobs, history, policy.as_mut(), &sim)?)
}

/// The results of every policy on one workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub slots: u32,
    /// Evaluated jobs.
    pub jobs: usize,
    /// Evaluated jobs with DAG stages, and their stages.
    pub dags: usize,
    pub stages: usize,
    /// Jobs the history was trained on.
    pub history_jobs: usize,
    pub excluded: Excluded,
    /// Where the trace was cut into history and evaluated jobs.
    pub split: Split,
    /// The evaluated jobs' offered load on `slots` (SLearn Table 5).
    pub load: LoadProfile,
    /// Accuracy (errors, queues, the error plot) is over jobs at least this
    /// wide: the thin limit.
    pub accuracy_min_width: u32,
    /// In the order of [`EvalConfig::policies`].
    pub reports: Vec<SimReport>,
}

/// Run every configured policy; the runs share nothing, so they go on
/// as many threads as the machine has cores.
pub fn evaluate(workload: &Workload, config: &EvalConfig) -> Result<Evaluation, EvalError> {
    let slots = config.slots_for(workload)?;
    let history = config.history_for(workload)?;
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let kinds = &config.policies;
    let mut results: Vec<Option<Result<SimReport, EvalError>>> =
        (0..kinds.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        for (chunk, out) in kinds
            .chunks(kinds.len().div_ceil(threads).max(1))
            .zip(results.chunks_mut(kinds.len().div_ceil(threads).max(1)))
        {
            let history = &history;
            scope.spawn(move || {
                for (kind, slot) in chunk.iter().zip(out) {
                    *slot = Some(run_trained(workload, *kind, config, slots, history.clone()));
                }
            });
        }
    });
    let reports = results
        .into_iter()
        .flatten()
        .collect::<Result<Vec<_>, _>>()?;
    let dag_stages = workload
        .jobs
        .iter()
        .filter_map(|j| j.job().stages.as_ref().map(Vec::len));
    Ok(Evaluation {
        slots,
        jobs: workload.jobs.len(),
        dags: dag_stages.clone().count(),
        stages: dag_stages.sum(),
        history_jobs: config.history_jobs(workload),
        excluded: workload.excluded.counts,
        split: workload.split,
        load: workload.load_profile(slots),
        accuracy_min_width: config.policy.thin_limit,
        reports,
    })
}

/// `a/b` rounded, or `-`.
fn fmt_pair(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{a:.0}/{b:.0}"),
        _ => "-".into(),
    }
}

fn fmt_opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.decimals$}"))
}

impl Evaluation {
    pub fn report(&self, kind: PolicyKind) -> Option<&SimReport> {
        self.reports.iter().find(|r| r.policy == kind)
    }

    /// SLearn's gain over 3Sigma broken down by job width and size and by
    /// waiting time (SLearn Table 8, Fig. 7), when both ran.
    pub fn breakdown(&self) -> Option<Breakdown> {
        let slearn = self.report(PolicyKind::SLearn)?;
        let baseline = self.report(PolicyKind::ThreeSigma)?;
        Some(Breakdown::of(
            &slearn.jobs,
            &baseline.jobs,
            self.accuracy_min_width,
        ))
    }

    /// Average-JCT speedup of `kind` over every other policy run.
    pub fn speedups_of(&self, kind: PolicyKind) -> Vec<(PolicyKind, Option<f64>)> {
        let Some(of) = self.report(kind) else {
            return Vec::new();
        };
        self.reports
            .iter()
            .filter(|r| r.policy != kind)
            .map(|r| (r.policy, speedup(&of.summary, &r.summary)))
            .collect()
    }

    /// `{"policies": {name: {...}}, "speedup_of_slearn": {name: x},
    /// "breakdown": {"baseline": "3sigma", "bins": [...], "waiting": [...]},
    /// "slots", "jobs", "dags", "stages", "history_jobs", "accuracy_min_width", "excluded":
    /// {...}, "split": {...}, "load": {...}}`; `null` where
    /// a figure is undefined (no estimates, no jobs, SLearn or 3Sigma not
    /// run).
    pub fn to_json(&self) -> Value {
        let mut policies = Map::new();
        for r in &self.reports {
            let s = &r.summary;
            policies.insert(
                r.policy.name().into(),
                json!({
                    "jobs": s.jobs,
                    "p50_error_pct": s.p50_error_pct,
                    "p90_error_pct": s.p90_error_pct,
                    "correct_queue_pct": s.correct_queue_pct,
                    "too_high_queue_pct": s.too_high_queue_pct,
                    "too_low_queue_pct": s.too_low_queue_pct,
                    "avg_jct_s": s.avg_jct_s,
                    "p50_jct_s": s.p50_jct_s,
                    "avg_wait_s": s.avg_wait_s,
                    "estimated_jobs": s.estimated_jobs,
                    "thin_jobs": s.thin_jobs,
                    "coverage_p50_pct": s.coverage_pct.map(|c| c.p50),
                    "coverage_p90_pct": s.coverage_pct.map(|c| c.p90),
                    "coverage_p95_pct": s.coverage_pct.map(|c| c.p95),
                    "coverage_p99_pct": s.coverage_pct.map(|c| c.p99),
                    "quantile_jobs": s.quantile_jobs,
                    "walltime": s.walltime,
                    "eta_p50_error_pct": s.eta_p50_error_pct,
                    "eta_p90_error_pct": s.eta_p90_error_pct,
                    "eta_interval_pct": s.eta_interval_pct,
                    "eta_jobs": s.eta_jobs,
                    "eta_half_p50_error_pct": s.eta_half_p50_error_pct,
                    "eta_half_p90_error_pct": s.eta_half_p90_error_pct,
                    "eta_half_interval_pct": s.eta_half_interval_pct,
                    "eta_half_jobs": s.eta_half_jobs,
                    "eta_size_p50_error_pct": s.eta_size_p50_error_pct,
                    "eta_at_once_pct": s.eta_at_once_pct,
                    "eta_at_once_p50_error_pct": s.eta_at_once_p50_error_pct,
                }),
            );
        }
        let speedups: Map<String, Value> = self
            .speedups_of(PolicyKind::SLearn)
            .into_iter()
            .map(|(k, x)| (k.name().to_owned(), json!(x)))
            .collect();
        let breakdown = self.breakdown().map(|b| {
            json!({
                "baseline": PolicyKind::ThreeSigma.name(),
                "bins": b.bins,
                "waiting": b.waiting,
            })
        });
        json!({
            "policies": policies,
            "speedup_of_slearn": speedups,
            "breakdown": breakdown,
            "slots": self.slots,
            "jobs": self.jobs,
            "dags": self.dags,
            "stages": self.stages,
            "history_jobs": self.history_jobs,
            "accuracy_min_width": self.accuracy_min_width,
            "excluded": self.excluded,
            "split": self.split,
            "load": self.load,
        })
    }

    /// One aligned row per policy; each group of statistics is preceded by
    /// the number of jobs it is over (`JCT N`, `err N`, `cover N`, `ETA N`,
    /// `half-way N`).
    pub fn table(&self) -> String {
        let speedups = self.speedups_of(PolicyKind::SLearn);
        let header = [
            "policy",
            "JCT N",
            "avg JCT s",
            "P50 JCT s",
            "err N",
            "P50 err %",
            "P90 err %",
            "right queue %",
            "too high %",
            "too low %",
            "thin",
            "cover N",
            "P50/90/95/99 cover %",
            "ETA N",
            "ETA P50/P90 err %",
            "half-way N",
            "half-way",
            "SLearn speedup",
        ];
        let mut rows = vec![header.map(String::from).to_vec()];
        for r in &self.reports {
            let s = &r.summary;
            let speedup = speedups
                .iter()
                .find(|(k, _)| *k == r.policy)
                .and_then(|(_, x)| *x);
            rows.push(vec![
                r.policy.name().to_owned(),
                s.jobs.to_string(),
                fmt_opt(s.avg_jct_s, 1),
                fmt_opt(s.p50_jct_s, 1),
                s.estimated_jobs.to_string(),
                fmt_opt(s.p50_error_pct, 1),
                fmt_opt(s.p90_error_pct, 1),
                fmt_opt(s.correct_queue_pct, 1),
                fmt_opt(s.too_high_queue_pct, 1),
                fmt_opt(s.too_low_queue_pct, 1),
                s.thin_jobs.to_string(),
                s.quantile_jobs.to_string(),
                s.coverage_pct.map_or_else(
                    || "-".into(),
                    |c| {
                        let [a, b, c, d] = c.to_array();
                        format!("{a:.0}/{b:.0}/{c:.0}/{d:.0}")
                    },
                ),
                s.eta_jobs.to_string(),
                fmt_pair(s.eta_p50_error_pct, s.eta_p90_error_pct),
                s.eta_half_jobs.to_string(),
                fmt_pair(s.eta_half_p50_error_pct, s.eta_half_p90_error_pct),
                speedup.map_or_else(|| "-".into(), |x| format!("{x:.2}x")),
            ]);
        }
        let mut out = align(&rows, |c, _| c == 0);
        if let Some(b) = self.breakdown() {
            out.push_str(&breakdown_table(&b, self.accuracy_min_width));
        }
        let e = &self.excluded;
        let _ = writeln!(
            out,
            "{} slots, {} evaluated jobs ({} DAGs of {} stages), {} history jobs; excluded {}: censored {}, \
             killed {}, failed {}, lost {}, unknown arrival {}, outside the task events {}, unknown runtime {}, \
             too wide {}, invalid {}, spanning the split {}, in no DAG {}",
            self.slots,
            self.jobs,
            self.dags,
            self.stages,
            self.history_jobs,
            e.total(),
            e.censored,
            e.killed,
            e.failed,
            e.lost,
            e.unknown_arrival,
            e.outside_task_events,
            e.unknown_runtime,
            e.too_wide,
            e.invalid,
            e.spans_split,
            e.not_in_dag
        );
        let l = &self.load;
        let _ = writeln!(
            out,
            "{}; offered load per 1000-s window: average {:.2}, P50 {:.2}, P90 {:.2} ({} windows)",
            self.split.describe(),
            l.average,
            l.p50,
            l.p90,
            l.windows
        );
        let _ = writeln!(
            out,
            "each N is the number of jobs the figures after it are over: JCTs and speedups are \
             over every evaluated job; errors and queue placements over the jobs of at least {} \
             tasks placed by an estimate (too high: a higher-priority queue than the true size's, \
             i.e. underestimated); coverage is the share of every job placed by an estimate whose \
             true mean task runtime is at or below its P50, P90, P95, P99; ETA errors are \
             |ETA − actual| / actual at submission, over the jobs given an ETA then, and half-way \
             to the completion predicted then (against the time still to go), over the jobs still \
             running then",
            self.accuracy_min_width
        );
        out
    }

    /// Write `error_cdf.svg` (Fig. 3: CDF of each estimating policy's
    /// error), `coverage.svg` (the reliability diagram of the estimating
    /// policies' quantiles) and, when SLearn ran, `speedup_cdf.svg` (Fig. 6:
    /// CDF of the per-job JCT speedup of SLearn over each other policy) and,
    /// when 3Sigma ran too, `waiting_cdf.svg` (Fig. 7: CDF of wide jobs'
    /// normalized waiting time under each) into `dir`. In the CDFs, policies with the same values share one
    /// line, and every line's name gives its number of jobs.
    pub fn write_plots(&self, dir: &Path) -> Result<Vec<PathBuf>, EvalError> {
        std::fs::create_dir_all(dir).map_err(|e| EvalError::Plot {
            path: dir.to_owned(),
            message: e.to_string(),
        })?;
        let mut written = Vec::new();
        let errors: Vec<(String, Vec<f64>)> = self
            .reports
            .iter()
            .map(|r| {
                (
                    r.policy.name().to_owned(),
                    r.jobs
                        .iter()
                        .filter(|j| j.width >= self.accuracy_min_width)
                        .filter_map(|j| j.error_pct)
                        .collect::<Vec<_>>(),
                )
            })
            .filter(|(_, v)| !v.is_empty())
            .collect();
        let path = dir.join("error_cdf.svg");
        cdf_plot(
            &path,
            "Job runtime prediction error",
            "error (%)",
            "CDF of jobs",
            &errors,
            0.1,
        )
        .map_err(plot_error(&path))?;
        written.push(path);
        let coverage: Vec<(String, Quantiles)> = self
            .reports
            .iter()
            .filter_map(|r| Some((r.policy.name().to_owned(), r.summary.coverage_pct?)))
            .collect();
        let path = dir.join("coverage.svg");
        reliability_plot(&path, &coverage)?;
        written.push(path);
        if let Some(slearn) = self.report(PolicyKind::SLearn) {
            let speedups: Vec<(String, Vec<f64>)> = self
                .reports
                .iter()
                .filter(|r| r.policy != PolicyKind::SLearn)
                .map(|r| {
                    let per_job = r
                        .jobs
                        .iter()
                        .zip(&slearn.jobs)
                        .filter(|(b, s)| b.job_id == s.job_id && s.jct_us > 0)
                        .map(|(b, s)| b.jct_us as f64 / s.jct_us as f64)
                        .collect();
                    (format!("over {}", r.policy.name()), per_job)
                })
                .filter(|(_, v): &(String, Vec<f64>)| !v.is_empty())
                .collect();
            let path = dir.join("speedup_cdf.svg");
            cdf_plot(
                &path,
                "Per-job JCT speedup of SLearn",
                "speedup (baseline JCT / SLearn JCT)",
                "CDF of jobs",
                &speedups,
                1e-3,
            )
            .map_err(plot_error(&path))?;
            written.push(path);
        }
        if let Some(b) = self.breakdown() {
            let [slearn, baseline] = b.wide_waits;
            let series = [
                (PolicyKind::SLearn.name().to_owned(), slearn),
                (PolicyKind::ThreeSigma.name().to_owned(), baseline),
            ];
            let path = dir.join("waiting_cdf.svg");
            cdf_plot(
                &path,
                "Normalized waiting time of wide jobs",
                "mean task wait / mean task runtime",
                "CDF of jobs",
                &series,
                1e-3,
            )
            .map_err(plot_error(&path))?;
            written.push(path);
        }
        Ok(written)
    }
}

/// SLearn's gain over 3Sigma by bin and wide jobs' waiting, as lines after
/// the policies' table.
fn breakdown_table(b: &Breakdown, thin_limit: u32) -> String {
    let mut rows = vec![
        [
            "bin",
            "jobs",
            "jobs %",
            "task time %",
            "SLearn speedup",
            "faster %",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for bin in &b.bins {
        rows.push(vec![
            bin.bin.to_owned(),
            bin.jobs.to_string(),
            format!("{:.1}", bin.jobs_pct),
            format!("{:.2}", bin.size_pct),
            bin.speedup
                .map_or_else(|| "-".into(), |x| format!("{x:.2}x")),
            fmt_opt(bin.faster_pct, 1),
        ]);
    }
    let mut out = format!(
        "\nSLearn against 3sigma by bin (SLearn Table 8; thin: under {thin_limit} tasks, large: \
         at least 1000 s of task time):\n"
    );
    out.push_str(&align(&rows, |c, _| c == 0));
    out.push_str(
        "wide jobs' normalized waiting time (SLearn Fig. 7; % of wide jobs under slearn / \
         3sigma / both, and of both the share that waited less under slearn):",
    );
    for s in &b.waiting {
        let _ = write!(
            out,
            " {} {:.1}/{:.1}/{:.1}% ({});",
            s.range,
            s.slearn_pct,
            s.baseline_pct,
            s.both_pct,
            s.less_under_slearn_pct
                .map_or_else(|| "-".into(), |x| format!("{x:.0}%")),
        );
    }
    out.pop();
    out.push('\n');
    out
}

/// The reliability diagram of quantiles: for each policy, the share of jobs
/// at or below each quantile against the quantile's level; a calibrated
/// policy lies on the diagonal.
fn reliability_plot(path: &Path, series: &[(String, Quantiles)]) -> Result<(), EvalError> {
    let err = |e: &dyn std::fmt::Display| EvalError::Plot {
        path: path.to_owned(),
        message: e.to_string(),
    };
    let root = canvas(path, (700, 560)).map_err(|e| err(&e))?;
    let mut chart = frame(&root, "Quantile coverage", 56)
        .build_cartesian_2d(45f64..100f64, 0f64..100f64)
        .map_err(|e| err(&e))?;
    axes(
        &mut chart.configure_mesh(),
        "quantile level q (%)",
        "jobs at or below their Pq (%)",
    )
    .draw()
    .map_err(|e| err(&e))?;
    chart
        .draw_series(LineSeries::new(
            [(45.0, 45.0), (100.0, 100.0)],
            BLACK.mix(0.4).stroke_width(1),
        ))
        .map_err(|e| err(&e))?
        .label("calibrated")
        .legend(legend_line(BLACK.mix(0.4).into()));
    let levels = Quantiles::LEVELS.map(|q| q * 100.0);
    for (i, (name, coverage)) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()].to_rgba();
        let points: Vec<(f64, f64)> = levels.into_iter().zip(coverage.to_array()).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name.as_str())
            .legend(legend_line(color.stroke_width(2)));
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, color.filled())),
            )
            .map_err(|e| err(&e))?;
    }
    finish(&mut chart, &root, SeriesLabelPosition::UpperLeft).map_err(|e| err(&e))
}

/// A plotting failure at `path` as an [`EvalError`].
fn plot_error(path: &Path) -> impl Fn(String) -> EvalError + '_ {
    move |message| EvalError::Plot {
        path: path.to_owned(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{JobResult, Phase, Summary};
    use jobcast_predictor::decision::RuntimeQuantiles;
    use jobcast_predictor::eta::Eta;

    #[test]
    fn columns_are_aligned() {
        let rows = vec![
            vec!["policy".to_owned(), "avg".to_owned()],
            vec!["slearn".to_owned(), "12.5".to_owned()],
            vec!["3sigma-dag".to_owned(), "1.0".to_owned()],
        ];
        assert_eq!(
            align(&rows, |c, _| c == 0),
            "policy       avg\nslearn      12.5\n3sigma-dag   1.0\n"
        );
    }

    /// Job `id`, `width` tasks wide: placed by an estimate `error_pct` off
    /// (with quantiles), or else thin; with an ETA at submission, and
    /// another half-way if `half_way`.
    fn job(id: u64, width: u32, error_pct: Option<f64>, half_way: bool) -> JobResult {
        let eta = Eta {
            p10_us: 1e6,
            p50_us: 2e6,
            p90_us: 3e6,
        };
        JobResult {
            job_id: id,
            width,
            arrival_us: id * 1_000_000,
            jct_us: 2_000_000,
            wait_us: 0,
            mean_task_wait_us: 0.0,
            normalized_jct: 1.0,
            estimated_mean_task_runtime_us: error_pct.map(|e| 1e6 * (1.0 + e / 100.0)),
            true_mean_task_runtime_us: 1e6,
            error_pct,
            queue: 0,
            true_queue: 0,
            correct_queue: error_pct.map(|_| true),
            phase: if error_pct.is_some() {
                Phase::Estimated
            } else {
                Phase::ThinBypass
            },
            quantiles: error_pct.map(|_| RuntimeQuantiles {
                mean_task_runtime_us: Quantiles::from_array([1e6, 2e6, 3e6, 4e6]),
                size_us: Quantiles::from_array([1e6, 2e6, 3e6, 4e6]),
                capped: 0,
            }),
            eta_at_submission: Some(eta),
            eta_kind: None,
            eta_size_error_pct: None,
            eta_half_way: half_way.then_some((1_000_000, eta)),
        }
    }

    /// What `slurm apply --walltime-quantile` would do: a limit from
    /// each level not capped (3× it, at least 5 minutes), none from a
    /// capped one; a job whose truth is past its limit is counted.
    #[test]
    fn the_walltime_figures_count_limits_capped_levels_and_truths_past_them() {
        let mut jobs = vec![job(1, 5, Some(0.0), false), job(2, 5, Some(0.0), false)];
        // Job 2: a P99 at the horizon; a true mean of an hour, past its
        // P90 and P95 limits (300 s, the floor) and within none.
        let q = jobs[1].quantiles.as_mut().unwrap();
        q.capped = 1;
        jobs[1].true_mean_task_runtime_us = 3600e6;
        let summary = Summary::of(&jobs, 3);
        let [p90, p95, p99] = &summary.walltime[..] else {
            panic!("{:?}", summary.walltime);
        };
        assert_eq!(
            (p90.quantile, p95.quantile, p99.quantile),
            ("p90", "p95", "p99")
        );
        assert_eq!((p90.limited_jobs, p90.capped_jobs), (2, 0));
        assert_eq!((p99.limited_jobs, p99.capped_jobs), (1, 1));
        assert_eq!(p90.below_truth_pct, Some(50.0));
        assert_eq!(p99.below_truth_pct, Some(0.0));
        // Job 1: a 300-s limit for a 1-s truth.
        assert_eq!(p99.p50_limit_over_truth, Some(300.0));
        let json = evaluation().to_json();
        assert!(
            json["policies"]["slearn"]["walltime"][2]["capped_jobs"].is_u64(),
            "{json}"
        );
    }

    fn report(policy: PolicyKind, jobs: Vec<JobResult>) -> SimReport {
        SimReport {
            policy,
            slots: 4,
            summary: Summary::of(&jobs, 3),
            jobs,
        }
    }

    /// Three jobs, one of them thin: slearn and slearn-dag alike, 3sigma
    /// estimating the thin job too, FIFO estimating none.
    fn evaluation() -> Evaluation {
        let slearn = vec![
            job(1, 1, None, false),
            job(2, 5, Some(10.0), true),
            job(3, 5, Some(30.0), false),
        ];
        let three_sigma = vec![
            job(1, 1, Some(50.0), false),
            job(2, 5, Some(20.0), true),
            job(3, 5, Some(30.0), false),
        ];
        let fifo = (1..=3)
            .map(|id| JobResult {
                phase: Phase::Arrival,
                ..job(id, 5, None, false)
            })
            .collect();
        Evaluation {
            slots: 4,
            jobs: 3,
            dags: 0,
            stages: 0,
            history_jobs: 3,
            excluded: Excluded::default(),
            split: Split::default(),
            load: LoadProfile {
                average: 1.0,
                p50: 1.0,
                p90: 1.0,
                windows: 1,
            },
            accuracy_min_width: 3,
            reports: vec![
                report(PolicyKind::SLearn, slearn.clone()),
                report(PolicyKind::SLearnDag, slearn),
                report(PolicyKind::ThreeSigma, three_sigma),
                report(PolicyKind::Fifo, fifo),
            ],
        }
    }

    #[test]
    fn every_statistic_of_the_table_shows_its_n() {
        let table = evaluation().table();
        let mut lines = table.lines();
        // Header cells hold single spaces; cells are at least two apart.
        let header: Vec<&str> = lines
            .next()
            .unwrap()
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert!(!header.contains(&"jobs"), "{table}");
        let rows: Vec<Vec<&str>> = lines
            .take(4)
            .map(|l| l.split_whitespace().collect())
            .collect();
        let cell = |policy: &str, column: &str| {
            let row = rows.iter().find(|r| r[0] == policy).unwrap();
            assert_eq!(row.len(), header.len(), "{table}");
            let c = header.iter().position(|h| *h == column).unwrap();
            row[c].to_owned()
        };
        let n = ["JCT N", "err N", "cover N", "ETA N", "half-way N"];
        let of = |policy: &str| n.map(|column| cell(policy, column));
        assert_eq!(of("slearn"), ["3", "2", "2", "3", "1"], "{table}");
        assert_eq!(of("3sigma"), ["3", "2", "3", "3", "1"], "{table}");
        assert_eq!(of("fifo"), ["3", "0", "0", "3", "0"], "{table}");
        assert_eq!(cell("fifo", "P50 err %"), "-");
        assert_eq!(cell("slearn", "P90 err %"), "28.0", "{table}");
        assert!(
            table.contains("each N is the number of jobs the figures after it are over"),
            "{table}"
        );
    }

    #[test]
    fn the_error_plot_merges_identical_policies_and_names_their_n() {
        let dir = tempfile::tempdir().unwrap();
        let written = evaluation().write_plots(dir.path()).unwrap();
        let names: Vec<&str> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "error_cdf.svg",
                "coverage.svg",
                "speedup_cdf.svg",
                "waiting_cdf.svg"
            ]
        );
        let svg = std::fs::read_to_string(dir.path().join("error_cdf.svg")).unwrap();
        // Errors over the wide jobs only: 3sigma's thin job is not counted.
        assert!(svg.contains("slearn = slearn-dag (N=2)"), "{svg}");
        assert!(svg.contains("3sigma (N=2)"), "{svg}");
        assert_eq!(svg.matches("slearn-dag").count(), 1, "{svg}");
        assert!(!svg.contains("fifo"), "{svg}");
    }
}
