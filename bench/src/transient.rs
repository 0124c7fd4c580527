//! `jobcast bench transient`: CloudCoaster's transient short partition
//! against Eagle on the static cluster of the same budget, on a trace, with
//! jobcast's job classes and the oracle's, and transient servers preempted
//! with lifetimes drawn from measured ones
//! ([`jobcast_replay::transient`]).

use std::fmt;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use jobcast_ingest::{Diagnostics, Format, Trace};
use jobcast_predictor::history::HistoryConfig;
use jobcast_predictor::preemption::fit::{DeadlineCheck, FitConfig, fit_groups};
use jobcast_predictor::preemption::kaplan_meier::{KaplanMeier, Observation};
use jobcast_predictor::preemption::models::{LifetimeModel, ModelKind};
use jobcast_replay::WorkloadConfig;
use jobcast_replay::risk_fit::Lifetimes as Measured;
use jobcast_replay::transient::{
    Comparison, Lifetimes, Run, TransientConfig, compare, default_cutoff_us, write_plot,
};
use jobcast_replay::workload::{DEFAULT_MAX_WIDTH, Workload};

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["trace", "generate_jobs"])))]
pub struct TransientArgs {
    /// The trace: its second half is simulated, its first half is the
    /// history jobcast classes jobs by.
    #[arg(long, requires = "format")]
    trace: Option<PathBuf>,
    /// Its format.
    #[arg(long, requires = "trace")]
    format: Option<Format>,
    /// Instead of a trace, this many jobs of `jobcast generate`'s workload
    /// (bags of tasks, no DAGs) at --load on the servers, arriving in
    /// bursts; the first half is the history.
    #[arg(long, conflicts_with = "trace")]
    generate_jobs: Option<u64>,
    /// Generated arrivals this many times faster in bursts than between
    /// them, the average load unchanged.
    #[arg(long, default_value_t = 4.0, requires = "generate_jobs")]
    burst_factor: f64,
    /// The share of time generated arrivals spend in bursts.
    #[arg(long, default_value_t = WorkloadConfig::default().burst_share, requires = "generate_jobs")]
    burst_share: f64,
    /// The mean length of a burst of generated arrivals, minutes.
    #[arg(long, default_value_t = WorkloadConfig::default().burst_minutes, requires = "generate_jobs")]
    burst_minutes: f64,
    /// Drop jobs with more tasks than this.
    #[arg(long, default_value_t = DEFAULT_MAX_WIDTH)]
    max_width: u32,
    /// Measured preemptible-VM lifetimes (the GCE dataset's `data.json.gz`,
    /// or SkyPilot's spot traces with `--lifetimes-format spot-traces`):
    /// transient servers are preempted with lifetimes drawn from them.
    /// Without it they live until released, as in the paper.
    #[arg(long)]
    lifetimes: Option<PathBuf>,
    /// Their format.
    #[arg(long, default_value = "gce-lifetimes", requires = "lifetimes")]
    lifetimes_format: Format,
    /// On-demand servers of the static cluster (the paper's 4,000).
    #[arg(long, default_value_t = TransientConfig::default().servers)]
    servers: u32,
    /// `N`, the static short-only partition [default: 2 % of the servers,
    /// the paper's 80 of 4,000].
    #[arg(long)]
    short_servers: Option<u32>,
    /// The average offered load on the servers. A trace's simulated jobs
    /// have their arrivals moved, in their order and proportions, to reach
    /// it (SLearn's extraction, `evaluate --sample-jobs`, at another load),
    /// so that a trace recorded on a cluster of another size runs on this
    /// one with its bursts; a generated workload is drawn at it.
    #[arg(long, default_value_t = 1.0, value_parser = parse_load)]
    load: f64,
    /// `p`: the share of `N` CloudCoaster replaces by transient servers.
    #[arg(long, default_value_t = TransientConfig::default().replaced_fraction)]
    replaced_fraction: f64,
    /// `r`: on-demand price over transient price.
    #[arg(long, default_value_t = TransientConfig::default().cost_ratio)]
    cost_ratio: f64,
    /// The long-load ratio's threshold.
    #[arg(long, default_value_t = TransientConfig::default().threshold)]
    threshold: f64,
    /// From a transient server's request until it takes tasks, seconds.
    #[arg(long, default_value_t = TransientConfig::default().provisioning_us / 1_000_000)]
    provisioning_s: u64,
    /// Probes per short task.
    #[arg(long, default_value_t = TransientConfig::default().probe_ratio)]
    probe_ratio: u32,
    /// Probes per short job, at least.
    #[arg(long, default_value_t = TransientConfig::default().min_probes)]
    min_probes: u32,
    /// Jobs with a longer mean task runtime are long, seconds [default:
    /// the 90th percentile of the history jobs'].
    #[arg(long)]
    cutoff_s: Option<f64>,
    /// Seed of the probes and the lifetimes drawn.
    #[arg(long, default_value_t = TransientConfig::default().seed)]
    seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Draw the short tasks' queueing delays of the four runs as CDFs
    /// (`short_delay_cdf.svg`) in this directory.
    #[arg(long)]
    plots: Option<PathBuf>,
}

#[derive(serde::Serialize)]
pub struct TransientReport {
    workload: String,
    jobs: usize,
    servers: u32,
    short_servers: u32,
    load: f64,
    cost_ratio: f64,
    lifetimes: Option<PathBuf>,
    #[serde(flatten)]
    comparison: Comparison,
}

pub fn transient(args: &TransientArgs) -> anyhow::Result<TransientReport> {
    let started = Instant::now();
    let servers = args.servers;
    let short_servers = args.short_servers.unwrap_or_else(|| (servers / 50).max(1));
    // Bad flags are refused before any workload is read; the default
    // cutoff comes from the workload's history.
    let mut config = TransientConfig {
        servers,
        short_servers,
        replaced_fraction: args.replaced_fraction,
        cost_ratio: args.cost_ratio,
        threshold: args.threshold,
        provisioning_us: args.provisioning_s * 1_000_000,
        probe_ratio: args.probe_ratio,
        min_probes: args.min_probes,
        cutoff_us: args
            .cutoff_s
            .map_or(TransientConfig::default().cutoff_us, |s| s * 1e6),
        seed: args.seed,
    };
    config.validate()?;
    let (workload, source) = match (&args.trace, args.format, args.generate_jobs) {
        (Some(path), Some(format), _) => {
            let trace = jobcast_ingest::open(format, path)
                .with_context(|| format!("opening {} trace", format.name()))?;
            let mut workload = Workload::from_trace(trace, args.max_width)
                .with_context(|| format!("reading {}", path.display()))?;
            let load_slots = (f64::from(servers) * args.load).round().max(1.0) as u32;
            workload.sample(workload.jobs.len(), args.seed, load_slots)?;
            (workload, path.display().to_string())
        }
        (_, _, Some(jobs)) => {
            let config = WorkloadConfig {
                seed: args.seed,
                jobs: Some(jobs),
                slots: servers,
                load: args.load,
                dag_fraction: 0.0,
                max_width: args.max_width.max(3),
                burst_factor: args.burst_factor,
                burst_share: args.burst_share,
                burst_minutes: args.burst_minutes,
                ..WorkloadConfig::default()
            };
            let events = jobcast_replay::generate(&config)?.map(Ok);
            let trace = Trace::new(events, Diagnostics::default(), 0);
            let workload = Workload::from_trace(trace, args.max_width)?;
            let source = format!(
                "{jobs} generated jobs (seed {}, bursts {}× for {} of the time)",
                args.seed, args.burst_factor, args.burst_share
            );
            (workload, source)
        }
        _ => unreachable!("clap requires a trace with its format, or --generate-jobs"),
    };
    if args.cutoff_s.is_none() {
        config.cutoff_us =
            default_cutoff_us(&workload.training).context("the history half has no jobs")?;
    }
    let cutoff_us = config.cutoff_us;
    let measured = args
        .lifetimes
        .as_ref()
        .map(|path| measured_lifetimes(path, args.lifetimes_format))
        .transpose()?;
    let lifetimes = Lifetimes {
        measured: measured.as_ref().map(|(km, _)| km),
        model: measured.as_ref().map(|(_, model)| model),
    };
    let history = workload.train(HistoryConfig::default());
    eprintln!(
        "read {source}: {} jobs simulated on {servers} servers ({short_servers} short-only), \
         cutoff {:.0} s, in {:.1} s",
        workload.jobs.len(),
        cutoff_us / 1e6,
        started.elapsed().as_secs_f64()
    );
    let comparison = compare(&workload.jobs, &history, &config, lifetimes)?;
    if let Some(dir) = &args.plots {
        let path = write_plot(&comparison, dir).map_err(anyhow::Error::msg)?;
        eprintln!("wrote {}", path.display());
    }
    eprintln!(
        "jobcast bench transient: 4 runs in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(TransientReport {
        workload: source,
        jobs: workload.jobs.len(),
        servers,
        short_servers,
        load: args.load,
        cost_ratio: args.cost_ratio,
        lifetimes: args.lifetimes.clone(),
        comparison,
    })
}

/// The measured lifetimes at `path`: their Kaplan–Meier curve, which
/// transient servers' lifetimes are drawn from, and the model the
/// service's fitter would score them by (the bathtub, or without a
/// deadline the closest other model), which the controller releases
/// servers by.
fn measured_lifetimes(
    path: &std::path::Path,
    format: Format,
) -> anyhow::Result<(KaplanMeier, LifetimeModel)> {
    let measured = Measured::read(path, format)
        .with_context(|| format!("reading lifetimes {}", path.display()))?;
    let observations: Vec<Observation> = measured
        .records
        .iter()
        .map(|r| Observation {
            time_h: r.lifetime_h,
            event: r.preempted,
        })
        .collect();
    let km = KaplanMeier::new(&observations)?;
    let mut config = FitConfig {
        models: vec![ModelKind::Bathtub],
        groupings: Vec::new(),
        ..FitConfig::default()
    };
    if !DeadlineCheck::of(&measured.records).present {
        config = config.without_deadline();
    }
    let fits = fit_groups(&measured.records, &config)?;
    match fits.pooled().chosen() {
        Some(chosen) => Ok((km, chosen.model)),
        None => anyhow::bail!("no lifetime model was fitted to {}", path.display()),
    }
}

fn parse_load(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("expected a positive load such as 0.9, got `{s}`")),
    }
}

impl fmt::Display for TransientReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.comparison;
        writeln!(
            f,
            "{}: {} jobs on {} servers ({} short-only) at load {}, r = {}, cutoff {:.0} s; lifetimes: {}",
            self.workload,
            self.jobs,
            self.servers,
            self.short_servers,
            self.load,
            self.cost_ratio,
            c.cutoff_s,
            self.lifetimes
                .as_ref()
                .map_or("none (never preempted)".into(), |p| p.display().to_string())
        )?;
        writeln!(
            f,
            "{:<13} {:<8} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>8} {:>8} {:>6} {:>9}",
            "scheduler",
            "classes",
            "mean s",
            "p50 s",
            "p99 s",
            "max s",
            "short JCT",
            "long JCT",
            "avg VMs",
            "max VMs",
            "lost",
            "misclass",
        )?;
        for r in &c.runs {
            write_run(f, r)?;
        }
        writeln!(
            f,
            "short-task queueing delay {:.2} s against {:.2} s: {:.2}× (oracle's classes {:.2}×; \
             jobcast's delay is {:.2}× the oracle's); short partition cost saved {:.1} %; \
             {} preemptions",
            c.short_queueing_delay_s,
            c.baseline_short_queueing_delay_s,
            c.queueing_delay_speedup,
            c.oracle_queueing_delay_speedup,
            1.0 / c.jobcast_vs_oracle,
            c.cost_saved_pct,
            c.preemptions
        )
    }
}

fn write_run(f: &mut fmt::Formatter<'_>, r: &Run) -> fmt::Result {
    let opt = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
    writeln!(
        f,
        "{:<13} {:<8} {:>9.2} {:>9.2} {:>9.2} {:>9.1} {:>10} {:>10} {:>8.1} {:>8} {:>6} {:>9}",
        r.scheduler,
        r.classes,
        r.short_delay.mean_s,
        r.short_delay.p50_s,
        r.short_delay.p99_s,
        r.short_delay.max_s,
        opt(r.short_avg_jct_s),
        opt(r.long_avg_jct_s),
        r.avg_transient_servers,
        r.max_transient_servers,
        r.tasks_lost,
        r.short_as_long + r.long_as_short,
    )
}
