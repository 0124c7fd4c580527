//! `jobcast evaluate`: every prediction policy on the same trace-driven
//! cluster simulation (SLearn §5.2), with a results table or JSON and,
//! optionally, the paper's error and speedup CDFs as SVG. The simulator and
//! the workload split are documented in `jobcast_replay::sim` and
//! `jobcast_replay::workload`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use jobcast_ingest::Format;
use jobcast_predictor::policies::BayesConfig;
use jobcast_predictor::queues::QueueConfig;
use jobcast_replay::evaluate::{EvalConfig, PolicyConfig, Sampling, evaluate};
use jobcast_replay::recurring_dags;
use jobcast_replay::workload::{DEFAULT_MAX_WIDTH, Workload};

use super::hpc;
use super::output::{print_json, print_out};

/// Jobs per block of SLearn's adaptive sampling ratio (the paper's T).
const ADAPTIVE_BLOCK: u32 = 100;

/// The flags `simulate` and `evaluate` share.
#[derive(clap::Args)]
pub struct Common {
    /// The trace: a directory (google2011, google2019, alibaba2018,
    /// tpch-dags) or a file.
    #[arg(long)]
    pub trace: PathBuf,
    /// Trace format: google2011, google2019, alibaba2018, jsonl,
    /// tpch-dags, swf or sacct.
    #[arg(long)]
    pub format: Format,
    /// Task slots of the simulated cluster [default: the average offered
    /// load over the evaluated half is 1, as in the paper].
    #[arg(long)]
    pub slots: Option<u32>,
    /// Seed of the policies' random choices (SLearn's pilot tasks) and of
    /// `--sample-jobs`.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Evaluate N jobs drawn uniformly from the second half, their arrivals
    /// rescaled to an average load of 1 on the cluster (SLearn §4.3's
    /// execution traces) [default: every job of the second half].
    #[arg(long, value_name = "N")]
    pub sample_jobs: Option<usize>,
    /// Write every job left out of the evaluation, with its reason, to this
    /// CSV file (`job_id,reason`).
    #[arg(long, value_name = "PATH")]
    pub excluded: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Jobs with fewer tasks than this skip sampling (SLearn's thinLimit).
    #[arg(long, default_value_t = 3)]
    pub thin_limit: u32,
    /// SLearn's pilot fraction of a job's tasks, in (0, 1], or `adaptive`
    /// (the paper's Fig. 4 algorithm over 1–5%).
    #[arg(long, default_value = "adaptive", value_parser = parse_sampling)]
    pub sampling_ratio: Sampling,
    /// The GS queue pilot tasks run in until their job is estimated: 1, the
    /// paper's second-highest; 0 runs them before every other queue.
    #[arg(long, default_value_t = QueueConfig::default().sampling_queue)]
    pub sampling_queue: u8,
    /// Bayes and Bayes-DAG place a thin job by its history prior only
    /// when the prior's sd (of ln runtime) is at most this, else in the
    /// top queue [default: whenever the history knows similar jobs].
    #[arg(long, value_name = "SD", value_parser = parse_positive)]
    pub thin_prior_max_sd: Option<f64>,
    /// Drop jobs with more tasks than this (the paper drops those over 150).
    #[arg(long, default_value_t = DEFAULT_MAX_WIDTH)]
    pub max_width: u32,
    /// Start from an empty history instead of one trained on the first
    /// half of the trace, as a freshly started `jobcast serve` does.
    #[arg(long)]
    pub cold_start: bool,
    /// Also write the workload (history and evaluated jobs, DAGs composed by
    /// --dags included) as canonical JSON lines, each job laid out as on an
    /// idle cluster: a trace for `replay`, `convert` or `demo --format jsonl`.
    #[arg(long, value_name = "PATH")]
    pub write_trace: Option<PathBuf>,
    /// Compose the trace's jobs into DAG jobs: `recurring` makes each DAG
    /// of 2–5 consecutive jobs of one user and logical name (SLearn §6's
    /// construction; GTrace11-DAG from Google 2011), seeded by --seed.
    #[arg(long, value_enum)]
    pub dags: Option<Dags>,
}

/// How `--dags` makes DAG jobs of a trace's jobs.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Dags {
    /// 2–5 recurring jobs of one (user, logical name) each
    /// (`jobcast_replay::recurring_dags`).
    Recurring,
}

fn parse_positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("expected a positive number such as 1.0, got `{s}`")),
    }
}

fn parse_sampling(s: &str) -> Result<Sampling, String> {
    if s == "adaptive" {
        return Ok(Sampling::Adaptive {
            block: ADAPTIVE_BLOCK,
        });
    }
    match s.parse::<f64>() {
        Ok(ratio) if ratio > 0.0 && ratio <= 1.0 => Ok(Sampling::Fixed { ratio }),
        _ => Err(format!(
            "expected `adaptive` or a fraction in (0, 1] such as 0.03, got `{s}`"
        )),
    }
}

impl Common {
    /// The evaluation settings these flags describe (all policies).
    pub fn config(&self) -> EvalConfig {
        EvalConfig {
            slots: self.slots,
            policy: PolicyConfig {
                thin_limit: self.thin_limit,
                sampling: self.sampling_ratio,
                seed: self.seed,
                bayes: BayesConfig {
                    thin_prior_max_log_sd: self.thin_prior_max_sd,
                    ..BayesConfig::default()
                },
                ..PolicyConfig::default()
            },
            cold_start: self.cold_start,
            queues: QueueConfig {
                sampling_queue: self.sampling_queue,
                ..QueueConfig::default()
            },
            ..EvalConfig::default()
        }
    }

    /// Read the trace into a workload, telling stderr what was kept.
    pub fn workload(&self) -> anyhow::Result<Workload> {
        let started = Instant::now();
        let trace = jobcast_ingest::open(self.format, &self.trace)
            .with_context(|| format!("opening {} trace", self.format.name()))?;
        let diagnostics = trace.diagnostics().clone();
        let workload = match self.dags {
            None => Workload::from_trace(trace, self.max_width),
            Some(Dags::Recurring) => recurring_dags::workload(trace, self.max_width, self.seed)
                .map(|(w, stats)| {
                    eprintln!("{}", stats.describe());
                    w
                }),
        }
        .with_context(|| format!("reading {}", self.trace.display()));
        // What was skipped, also when nothing usable was left.
        if diagnostics.skipped_total() > 0 {
            eprint!("{}", diagnostics.summary());
        }
        let mut workload = workload?;
        eprintln!(
            "read {}: {} evaluated jobs, {} history jobs, {} excluded, in {:.1} s; {}",
            self.trace.display(),
            workload.jobs.len(),
            workload.training.len(),
            workload.excluded.counts.total(),
            started.elapsed().as_secs_f64(),
            workload.split.describe()
        );
        let too_wide = workload.excluded.counts.too_wide;
        if too_wide > (workload.jobs.len() + workload.training.len()) as u64 {
            eprintln!(
                "note: {too_wide} jobs wider than --max-width {} were left out, more than were \
                 kept; raise --max-width to keep them (the paper's 150 suits Google 2011)",
                self.max_width
            );
        }
        if let Some(path) = &self.excluded {
            write_excluded(path, &workload)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        if let Some(path) = &self.write_trace {
            let events = write_trace(path, &workload)
                .with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {events} events to {}", path.display());
        }
        if let Some(n) = self.sample_jobs {
            // The cluster the whole second half loads to 1, unless given.
            let slots = self.slots.unwrap_or_else(|| workload.unit_load_slots());
            workload.sample(n, self.seed, slots)?;
            let load = workload.load_profile(slots);
            eprintln!(
                "sampled {n} jobs (seed {}) at load 1 on {slots} slots: per 1000-s window \
                 average {:.2}, P50 {:.2}, P90 {:.2}",
                self.seed, load.average, load.p50, load.p90
            );
        }
        Ok(workload)
    }
}

/// The workload's events as JSON lines; how many.
fn write_trace(path: &std::path::Path, workload: &Workload) -> std::io::Result<usize> {
    use std::io::Write as _;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let events = workload.events();
    let mut line = Vec::new();
    for event in &events {
        line.clear();
        jobcast_ingest::encode(event, &mut line);
        line.push(b'\n');
        out.write_all(&line)?;
    }
    out.flush()?;
    Ok(events.len())
}

fn write_excluded(path: &std::path::Path, workload: &Workload) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(out, "job_id,reason")?;
    for (id, reason) in &workload.excluded.jobs {
        writeln!(out, "{id},{}", reason.name())?;
    }
    out.flush()
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// Write error_cdf.svg, speedup_cdf.svg and waiting_cdf.svg (the
    /// paper's Figs. 3, 6 and 7) and coverage.svg (the reliability diagram
    /// of the quantiles) here.
    #[arg(long)]
    plots: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if matches!(args.common.format, Format::Swf | Format::Sacct) {
        return hpc::predictions(&args.common);
    }
    let workload = args.common.workload()?;
    let started = Instant::now();
    let evaluation = evaluate(&workload, &args.common.config())?;
    eprintln!(
        "simulated {} policies on {} slots in {:.1} s",
        evaluation.reports.len(),
        evaluation.slots,
        started.elapsed().as_secs_f64()
    );
    if let Some(dir) = &args.plots {
        let written = evaluation.write_plots(dir)?;
        let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
        eprintln!("wrote {}", names.join(", "));
    }
    if args.common.json {
        print_json(&evaluation.to_json())
    } else {
        print_out(&evaluation.table())
    }
}
