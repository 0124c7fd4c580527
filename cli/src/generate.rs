//! `jobcast generate`: write a seeded synthetic workload as canonical JSON
//! lines. The model and every parameter are documented in
//! `jobcast_replay::generate`.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use jobcast_ingest::event::{Event, MachineKind, TaskKind};
use jobcast_replay::{Bathtub, BathtubParam, DurationDist, WorkloadConfig};

/// Jobs generated when neither `--jobs` nor `--duration-hours` is given.
const DEFAULT_JOBS: u64 = 10_000;
/// Events between progress-bar updates.
const PROGRESS_EVERY: u64 = 1 << 14;

#[derive(Clone, Copy, clap::ValueEnum)]
enum Dist {
    Normal,
    Lognormal,
    Pareto,
}

impl From<Dist> for DurationDist {
    fn from(d: Dist) -> Self {
        match d {
            Dist::Normal => DurationDist::Normal,
            Dist::Lognormal => DurationDist::LogNormal,
            Dist::Pareto => DurationDist::Pareto,
        }
    }
}

fn defaults() -> WorkloadConfig {
    WorkloadConfig::default()
}

#[derive(clap::Args)]
// Let `--job-cv -1` reach validation, which names the flag, rather than
// being parsed as an unknown option.
#[command(allow_negative_numbers = true)]
pub struct Args {
    /// Seed of every random draw: the same arguments and seed give byte-identical output.
    #[arg(long, default_value_t = defaults().seed)]
    seed: u64,
    /// Number of jobs [default: 10000, or unbounded when --duration-hours is given].
    #[arg(long)]
    jobs: Option<u64>,
    /// Stop job arrivals at this trace time (hours).
    #[arg(long)]
    duration_hours: Option<f64>,
    /// Write to this file instead of stdout (`-` is stdout).
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Task slots of the cluster the target load refers to.
    #[arg(long, default_value_t = defaults().slots)]
    slots: u32,
    /// Target offered load: busy task-seconds per slot-second.
    #[arg(long, default_value_t = defaults().load)]
    load: f64,
    /// Number of recurring job families.
    #[arg(long, default_value_t = defaults().families)]
    families: u32,
    /// Zipf exponent of family popularity (0 = uniform).
    #[arg(long, default_value_t = defaults().family_zipf)]
    family_zipf: f64,
    /// Median of the family mean task duration (seconds).
    #[arg(long, default_value_t = defaults().family_median_secs)]
    family_median_secs: f64,
    /// Log-space standard deviation of family mean task durations.
    #[arg(long, default_value_t = defaults().family_sigma)]
    family_sigma: f64,
    /// Job-wise variation: CV of a job's mean task duration around its family mean.
    #[arg(long, default_value_t = defaults().job_cv)]
    job_cv: f64,
    /// Task-wise variation: CV of task durations around their job's mean.
    #[arg(long, default_value_t = defaults().task_cv)]
    task_cv: f64,
    /// Distribution of job means and task durations.
    #[arg(long, value_enum, default_value_t = Dist::Lognormal)]
    dist: Dist,
    /// Relative change of family means per day: means scale by (1 + drift)^(t / 1 day).
    #[arg(long, default_value_t = defaults().drift)]
    drift: f64,
    /// Share of jobs with 1–2 tasks.
    #[arg(long, default_value_t = defaults().thin_fraction)]
    thin_fraction: f64,
    /// Share of jobs that are 2–5 stage DAGs.
    #[arg(long, default_value_t = defaults().dag_fraction)]
    dag_fraction: f64,
    /// Fewest tasks of a wide or DAG job (at least 3).
    #[arg(long, default_value_t = defaults().min_width)]
    min_width: u32,
    /// Most tasks of a job.
    #[arg(long, default_value_t = defaults().max_width)]
    max_width: u32,
    /// Pareto shape of family typical widths (smaller = heavier tail).
    #[arg(long, default_value_t = defaults().width_alpha)]
    width_alpha: f64,
    /// Number of preemptible VMs launched over the run.
    #[arg(long, default_value_t = defaults().vms)]
    vms: u32,
    /// Bathtub lifetime scale A.
    #[arg(long, default_value_t = Bathtub::default().a())]
    bathtub_a: f64,
    /// Bathtub early-phase time constant τ1 (hours).
    #[arg(long, default_value_t = Bathtub::default().tau1())]
    bathtub_tau1: f64,
    /// Bathtub late-phase time constant τ2 (hours).
    #[arg(long, default_value_t = Bathtub::default().tau2())]
    bathtub_tau2: f64,
    /// Bathtub late-phase activation time b (hours).
    #[arg(long, default_value_t = Bathtub::default().b())]
    bathtub_b: f64,
    /// The provider's maximum VM lifetime L (hours); survivors are preempted at it.
    #[arg(long, default_value_t = Bathtub::default().max_lifetime_h())]
    vm_max_lifetime_hours: f64,
    /// Mean of the exponential user-stop time that censors VM lifetimes (hours) [default: no stops].
    #[arg(long)]
    vm_stop_mean_hours: Option<f64>,
    /// Arrivals this many times faster in bursts than between them, the
    /// average load unchanged (1: no bursts).
    #[arg(long, default_value_t = defaults().burst_factor)]
    burst_factor: f64,
    /// The share of time spent in bursts.
    #[arg(long, default_value_t = defaults().burst_share)]
    burst_share: f64,
    /// The mean length of a burst, minutes.
    #[arg(long, default_value_t = defaults().burst_minutes)]
    burst_minutes: f64,
}

impl Args {
    fn config(&self) -> anyhow::Result<WorkloadConfig> {
        let vm_lifetime = Bathtub::new(
            self.bathtub_a,
            self.bathtub_tau1,
            self.bathtub_tau2,
            self.bathtub_b,
            self.vm_max_lifetime_hours,
        )
        .map_err(|err| {
            let flag = match err.param {
                BathtubParam::A => "--bathtub-a",
                BathtubParam::Tau1 => "--bathtub-tau1",
                BathtubParam::Tau2 => "--bathtub-tau2",
                BathtubParam::B => "--bathtub-b",
                BathtubParam::MaxLifetime => "--vm-max-lifetime-hours",
            };
            anyhow::anyhow!("{flag}: {err}")
        })?;
        let jobs = match (self.jobs, self.duration_hours) {
            (None, None) => Some(DEFAULT_JOBS),
            (jobs, _) => jobs,
        };
        Ok(WorkloadConfig {
            seed: self.seed,
            jobs,
            duration_hours: self.duration_hours,
            slots: self.slots,
            load: self.load,
            families: self.families,
            family_zipf: self.family_zipf,
            family_median_secs: self.family_median_secs,
            family_sigma: self.family_sigma,
            job_cv: self.job_cv,
            task_cv: self.task_cv,
            dist: self.dist.into(),
            drift: self.drift,
            thin_fraction: self.thin_fraction,
            dag_fraction: self.dag_fraction,
            min_width: self.min_width,
            max_width: self.max_width,
            width_alpha: self.width_alpha,
            vms: self.vms,
            vm_lifetime,
            vm_stop_mean_hours: self.vm_stop_mean_hours,
            burst_factor: self.burst_factor,
            burst_share: self.burst_share,
            burst_minutes: self.burst_minutes,
        })
    }
}

/// A progress bar on stderr, measured in jobs when the run is bounded by a
/// count and in trace hours otherwise; indicatif draws nothing when stderr
/// is not a terminal.
fn progress(config: &WorkloadConfig) -> (ProgressBar, bool) {
    let (len, by_jobs, template) = match (config.jobs, config.duration_hours) {
        (Some(jobs), _) => (
            jobs,
            true,
            "{bar:40} {human_pos}/{human_len} jobs (eta {eta})",
        ),
        (None, hours) => (
            hours.unwrap_or(0.0).ceil() as u64,
            false,
            "{bar:40} {pos}/{len} trace hours (eta {eta})",
        ),
    };
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    (bar, by_jobs)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = args.config()?;
    let generator = jobcast_replay::generate(&config)?;
    let rate = generator.arrival_rate_per_hour();
    let sink: Box<dyn Write> = match &args.output {
        Some(path) if path.as_os_str() != "-" => {
            Box::new(File::create(path).with_context(|| format!("creating {}", path.display()))?)
        }
        _ => Box::new(io::stdout().lock()),
    };
    let mut out = BufWriter::with_capacity(1 << 20, sink);
    let (bar, by_jobs) = progress(&config);
    let started = Instant::now();
    let (mut jobs, mut tasks, mut events, mut vms, mut bytes) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut line = Vec::with_capacity(512);
    for event in generator {
        match &event {
            Event::JobSubmitted(_) => jobs += 1,
            Event::Task(t) if t.kind == TaskKind::Submit => tasks += 1,
            Event::Machine(m) if m.kind == MachineKind::Add => vms += 1,
            _ => {}
        }
        line.clear();
        jobcast_ingest::encode(&event, &mut line);
        line.push(b'\n');
        if let Err(err) = out.write_all(&line) {
            // A closed pipe (e.g. `| head`) is the reader's choice, not a failure.
            if err.kind() == io::ErrorKind::BrokenPipe {
                bar.finish_and_clear();
                return Ok(());
            }
            return Err(err).context("writing events");
        }
        bytes += line.len() as u64;
        events += 1;
        if events.is_multiple_of(PROGRESS_EVERY) {
            // Finish events of the last jobs run past the arrival horizon.
            let done = if by_jobs {
                jobs
            } else {
                event.time_us() / 3_600_000_000
            };
            bar.set_position(done.min(bar.length().unwrap_or(0)));
        }
    }
    match out.flush() {
        Err(err) if err.kind() == io::ErrorKind::BrokenPipe => {
            bar.finish_and_clear();
            return Ok(());
        }
        flushed => flushed.context("writing events")?,
    }
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "generated {jobs} jobs, {tasks} tasks, {events} events, {vms} VMs, {bytes} bytes \
         ({rate:.1} jobs/h for load {} on {} slots) in {secs:.2}s ({:.0} events/s)",
        config.load,
        config.slots,
        events as f64 / secs.max(1e-9),
    );
    Ok(())
}
