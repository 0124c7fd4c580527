//! `jobcast bench slurm`: a trace's jobs run on the local Slurm cluster
//! (`scripts/slurm.sh up`) twice from the same idle start, Slurm alone and
//! Slurm driven by jobcast (`serve`, `slurm watch` and `slurm apply` on an
//! embedded Kafka), and once through jobcast's simulator on as many slots
//! as the cluster's default partition has CPUs, each freed slot held for
//! the dispatch gap Slurm alone showed: how much sooner jobs finish, and
//! whether the simulator predicts it. The simulator then replays each run
//! on the task runtimes Slurm measured in it, which are what the service
//! learnt: the part of any difference the workload's runtimes do not
//! explain is the scheduling model's.
//!
//! jobcast starts as a service that has run on the cluster for a while:
//! before the run it learns the trace's history half, published as the
//! finished jobs of the cluster's past in the shape `slurm watch` gives
//! them (`--cold-start`: from nothing). The simulator starts from the same
//! history.
//!
//! Time in the run is trace time scaled by `--time-scale`, and so are the
//! GS queues' thresholds, in `serve` and in the simulator: the queues are
//! sized for the trace's jobs, and unscaled nearly every scaled job would
//! fall in the top queue, where GS is FIFO and no policy can reorder
//! anything.
//!
//! Each task is a `sleep` of its scaled trace runtime on one CPU; a job of
//! several tasks is an array. Slurm's own times (whole seconds) measure
//! each job: JCT is its last task's end less its submission. Slurm alone
//! is simulated as FIFO: with every priority equal Slurm starts jobs in
//! submission order, and one-CPU tasks leave backfill nothing to reorder.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use jobcast_connectors::slurm::{SqueueJob, run_squeue};
use jobcast_ingest::Format;
use jobcast_ingest::event::Event;
use jobcast_ingest::kafka::KafkaSettings;
use jobcast_ingest::kafka::{Topics, partitions, read_to_end};
use jobcast_predictor::decision::{Completion, Decision, Newest, Phase, PolicyKind, Quantiles};
use jobcast_predictor::stats::percentile;
use jobcast_predictor::walltime::Walltime;
use jobcast_replay::WorkloadConfig;
use jobcast_replay::kafka::Ungated;
use jobcast_replay::sim::{JobResult, SimReport};
use jobcast_replay::workload::SimJob;
use jobcast_replay::workload::{DEFAULT_MAX_WIDTH, Workload};
use jobcast_storage::state::unix_seconds;
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

use workload::{
    LiveJob, SlurmShape, TaskScale, finished_job_events, live_workload, past_jobs, simulate_live,
};

pub mod federation;
mod fifo;
pub mod starts;
mod workload;

/// The jobs a live bench runs on Slurm, and how.
#[derive(clap::Args)]
pub struct LiveArgs {
    /// The trace: a directory (google2011, google2019, alibaba2018) or a
    /// file (jsonl, e.g. from `jobcast generate`). Without one, the jobs
    /// are generated: `jobcast generate`'s default workload (seed `--seed`,
    /// no DAG jobs) of 20 times `--jobs` jobs, half of them the past.
    #[arg(long, requires = "format")]
    trace: Option<PathBuf>,
    /// Its format: google2011, google2019, alibaba2018 or jsonl.
    #[arg(long, requires = "trace")]
    format: Option<Format>,
    /// Jobs to run, drawn uniformly from the trace's evaluated half (DAG
    /// jobs left out), as SLearn §4.3 extracts its execution traces.
    #[arg(long, default_value_t = 200)]
    jobs: usize,
    /// Seed of the draw.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Live seconds per trace second of task runtime.
    #[arg(long, default_value_t = 0.01)]
    time_scale: f64,
    /// No task runs shorter than this (Slurm's times are whole seconds).
    #[arg(long, default_value_t = 1.0)]
    min_task_secs: f64,
    /// Nor longer than this.
    #[arg(long, default_value_t = 600.0)]
    max_task_secs: f64,
    /// Drop jobs with more tasks than this.
    #[arg(long, default_value_t = DEFAULT_MAX_WIDTH)]
    max_width: u32,
    /// The offered load: the work over the run's span and the CPUs.
    #[arg(long, default_value_t = 1.0)]
    load: f64,
}

/// The jobs a live bench drew: the workload (its history half the
/// cluster's past) and the jobs to run.
struct Drawn {
    workload: Workload,
    live: Vec<LiveJob>,
}

impl LiveArgs {
    /// How the trace's task runtimes become live seconds.
    fn scale(&self) -> TaskScale {
        TaskScale {
            per_us: self.time_scale * 1e-6,
            min_s: self.min_task_secs,
            max_s: self.max_task_secs,
        }
    }

    /// Refuse a load or a time scale that is not positive.
    fn check(&self) -> anyhow::Result<()> {
        if !(self.load.is_finite() && self.load > 0.0) {
            bail!("--load {}: must be positive", self.load);
        }
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            bail!("--time-scale {}: must be positive", self.time_scale);
        }
        Ok(())
    }

    /// The jobs to run on `cpus` CPUs, DAG jobs left out (an array has
    /// no stages).
    fn draw(&self, cpus: u32) -> anyhow::Result<Drawn> {
        let (trace, source) = match (&self.trace, self.format) {
            (Some(path), Some(format)) => (
                jobcast_ingest::open(format, path)
                    .with_context(|| format!("opening {} trace", format.name()))?,
                path.display().to_string(),
            ),
            _ => generated(self.seed, self.jobs, cpus)?,
        };
        let mut workload = Workload::from_trace(trace, self.max_width)
            .with_context(|| format!("reading {source}"))?;
        workload.jobs.retain(|j| j.job().stages.is_none());
        workload
            .sample(self.jobs, self.seed, cpus)
            .with_context(|| format!("drawing jobs from {source}"))?;
        let live = live_workload(&workload.jobs, self.jobs, &self.scale(), cpus, self.load);
        if live.is_empty() {
            bail!("{source}: no job to run");
        }
        Ok(Drawn { workload, live })
    }
}

#[derive(clap::Args)]
pub struct SlurmArgs {
    #[command(flatten)]
    live: LiveArgs,
    /// The policy jobcast runs.
    #[arg(long, default_value_t = PolicyKind::SLearn)]
    policy: PolicyKind,
    /// Start jobcast from an empty history, as a newly installed service,
    /// instead of one that has learnt the trace's history half as the
    /// cluster's past.
    #[arg(long)]
    cold_start: bool,
    /// Let `slurm apply` set time limits from this quantile (p50, p90,
    /// p95, p99; `slurm apply --walltime-quantile`), with a margin of
    /// `--walltime-margin` and a floor of a minute; the report counts the
    /// tasks killed at their limit, and leaves their jobs out of both
    /// runs' JCTs. Slurm's limits are whole minutes, so set `--time-scale`
    /// for tasks of minutes to see any.
    #[arg(long, value_name = "QUANTILE", value_parser = Quantiles::index_of)]
    walltime_quantile: Option<usize>,
    #[arg(long, default_value_t = Walltime::DEFAULT_MARGIN, requires = "walltime_quantile")]
    walltime_margin: f64,
    /// Seconds between the watcher's polls and the applier's ticks.
    #[arg(long, default_value_t = 0.5, value_parser = jobcast_connectors::parse_interval)]
    interval_secs: f64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// What one run on the cluster measured.
#[derive(Debug)]
struct LiveRun {
    /// Each job's JCT, s, by its index in the workload.
    jcts: BTreeMap<usize, f64>,
    /// The jobs of which Slurm ended a task at its time limit: their JCT
    /// is a kill's, not a completion's.
    killed: BTreeSet<usize>,
    /// Tasks Slurm ended at their time limit.
    killed_at_limit: usize,
}

impl LiveRun {
    fn of(observed: &Observed) -> LiveRun {
        let timed_out = || {
            observed
                .tasks
                .iter()
                .filter(|(_, t)| t.job_state == "TIMEOUT")
        };
        LiveRun {
            jcts: observed.jcts(),
            killed: timed_out()
                .filter_map(|((job, _), _)| observed.jobs.get(job).copied())
                .collect(),
            killed_at_limit: timed_out().count(),
        }
    }

    /// Average and P50 JCT, s, over the jobs `killed` leaves out; none if
    /// it leaves out every job.
    fn jct_s(&self, killed: &BTreeSet<usize>) -> Option<(f64, f64)> {
        let jcts: Vec<f64> = self
            .jcts
            .iter()
            .filter(|(job, _)| !killed.contains(job))
            .map(|(_, &jct)| jct)
            .collect();
        let avg = jcts.iter().sum::<f64>() / jcts.len() as f64;
        Some((avg, median(jcts)?))
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    jobs: usize,
    cpus: u32,
    policy: PolicyKind,
    /// Past jobs jobcast learnt before the run (0 with `--cold-start`).
    history_jobs: usize,
    /// Jobs a time limit killed in either run, left out of both runs' JCTs.
    killed_jobs: usize,
    baseline_avg_jct_s: f64,
    baseline_p50_jct_s: f64,
    jobcast_avg_jct_s: f64,
    jobcast_p50_jct_s: f64,
    /// Slurm alone's average JCT over jobcast's.
    speedup: f64,
    /// CPU-seconds Slurm alone left idle while tasks were pending, per
    /// task that waited: how long it takes to hand a freed CPU on. The
    /// simulations hold each freed slot this long.
    dispatch_gap_s: f64,
    /// The same, with jobcast driving Slurm: each `scontrol update` also
    /// runs Slurm's scheduler, which matters on a cluster whose job ends
    /// do not (no epilog; `scripts/slurm.sh` sets one).
    jobcast_dispatch_gap_s: f64,
    simulated_baseline_avg_jct_s: f64,
    simulated_baseline_p50_jct_s: f64,
    simulated_jobcast_avg_jct_s: f64,
    simulated_jobcast_p50_jct_s: f64,
    simulated_speedup: f64,
    /// The simulated FIFO over GS driven by the Oracle (every job's true
    /// runtime): what the draw leaves any estimate to gain.
    simulated_oracle_speedup: f64,
    /// Slurm's measure of a task (its end less its start: whole seconds,
    /// launch and completion included) less the `sleep` it ran, mean over
    /// the tasks: alone, and with jobcast. The service learns the former.
    baseline_task_excess_s: f64,
    jobcast_task_excess_s: f64,
    /// The simulator replaying each run: each task as long as Slurm
    /// measured it there, each job under its Slurm id (so a policy draws
    /// the service's pilots), Slurm alone as FIFO, the run with jobcast
    /// under the policy, both with Slurm alone's dispatch gap. What is
    /// left between `speedup` and this is the scheduling model's.
    replayed_baseline_avg_jct_s: f64,
    replayed_jobcast_avg_jct_s: f64,
    replayed_speedup: f64,
    /// Median error of the estimates that placed jobs (SLearn: only the
    /// wide ones), against the mean task runtime Slurm measured.
    p50_error_pct: Option<f64>,
    estimated_jobs: usize,
    /// Median seconds from a job's submission (Slurm's whole seconds) to
    /// its first decision on the decisions topic (the broker's time);
    /// `slurm apply` carries it out at its next tick.
    p50_decision_delay_s: Option<f64>,
    /// Median seconds from a job's submission to the first `scontrol
    /// update` `slurm apply` carried out for one of its decisions (when a
    /// decision took effect), over the jobs whose decisions needed one.
    p50_apply_delay_s: Option<f64>,
    applied_jobs: usize,
    /// Tasks Slurm ended at their time limit, in both runs, and in each.
    killed_at_limit: usize,
    baseline_killed_at_limit: usize,
    jobcast_killed_at_limit: usize,
    /// The error (%) of each job's first ETA against the time it then took
    /// to finish on Slurm: median and P90; the share (%) that finished
    /// within the ETA's interval; the jobs given one.
    p50_eta_error_pct: Option<f64>,
    p90_eta_error_pct: Option<f64>,
    eta_within_interval_pct: Option<f64>,
    eta_jobs: usize,
    /// Each job, in order of submission (JSON only).
    #[serde(rename = "per_job")]
    rows: Vec<JobRow>,
}

/// One job in the three runs: where each placed it and what it took, to
/// find the jobs behind a difference between the real and simulated
/// speedups.
#[derive(Debug, Serialize)]
struct JobRow {
    trace_job_id: u64,
    name: String,
    tasks: usize,
    arrival_s: f64,
    baseline_jct_s: Option<f64>,
    jobcast_jct_s: Option<f64>,
    /// The queue and estimated mean task runtime (s) of jobcast's first
    /// decision for the job, which placed it on submission, ...
    first_queue: Option<u8>,
    first_estimate_s: Option<f64>,
    /// ... and of its last.
    last_queue: Option<u8>,
    last_estimate_s: Option<f64>,
    simulated_jct_s: Option<f64>,
    /// The simulated policy's last queue and estimate for the job.
    simulated_queue: Option<u8>,
    simulated_estimate_s: Option<f64>,
    /// The same in the replay of the run with jobcast.
    replayed_jct_s: Option<f64>,
    replayed_queue: Option<u8>,
    replayed_estimate_s: Option<f64>,
}

pub fn slurm(args: &SlurmArgs) -> anyhow::Result<Report> {
    args.live.check()?;
    // Checked now, not when `slurm apply` starts after the first run.
    if let Some(quantile) = args.walltime_quantile {
        jobcast_connectors::slurm::walltime(quantile, args.walltime_margin, 1)
            .map_err(anyhow::Error::msg)?;
    }
    let partition = default_partition(None)?;
    let cpus = partition.cpus;
    // A day, or the partition's longest if shorter: enough for every task.
    let time_limit_minutes = partition.max_minutes.map_or(JOB_TIME_LIMIT_MINUTES, |max| {
        max.min(JOB_TIME_LIMIT_MINUTES)
    });
    if args.live.max_task_secs > (time_limit_minutes * 60) as f64 {
        bail!(
            "--max-task-secs {}: longer than the {time_limit_minutes}-minute time limit \
             the jobs ask for in partition {}",
            args.live.max_task_secs,
            partition.name
        );
    }
    let Drawn { workload, live } = args.live.draw(cpus)?;
    let scale = args.live.scale();
    let shape = SlurmShape {
        user: current_user()?,
        group: current_group()?,
        partition: partition.name,
        mem_per_cpu_mb: TASK_MEM_MB,
        time_limit_minutes,
    };
    let history: &[SimJob] = if args.cold_start {
        &[]
    } else {
        &workload.training
    };
    let span = live.last().map_or(0.0, |j| j.arrival_s);
    eprintln!(
        "jobcast bench slurm: {} jobs, {} tasks, over {span:.0} s on {cpus} CPUs",
        live.len(),
        live.iter().map(|j| j.runtimes_s.len()).sum::<usize>()
    );

    // The cluster's past ends now, for the simulator and the service
    // alike: the hour of submission is one of the history's features.
    let span_us = past_jobs(history, &scale, &shape, 0)
        .iter()
        .map(SimJob::end_us)
        .max()
        .unwrap_or(0);
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .context("the clock is before 1970")?
        .as_micros() as u64;
    let past = past_jobs(history, &scale, &shape, now_us.saturating_sub(span_us));
    let dir = tempfile::tempdir().context("creating the run's directory")?;
    write_runtimes(dir.path(), &live)?;
    let (baseline, alone) =
        run_live(args, &live, &shape, dir.path(), cpus, None).context("Slurm alone")?;
    // Slurm alone is simulated as FIFO (module doc), both runs with the
    // dispatch gap Slurm alone showed.
    let dispatch_gap_s = alone.dispatch_gap_s(cpus);
    let queues = scale.queues();
    let gap_us = (dispatch_gap_s * 1e6).round() as u64;
    let simulated = |policy| simulate_live(&live, &past, &shape, cpus, gap_us, policy, &queues);
    let (fifo_run, simulated_run, oracle_run) = (
        simulated(PolicyKind::Fifo)?,
        simulated(args.policy)?,
        simulated(PolicyKind::Oracle)?,
    );
    let (mock, topics, settings) = embedded_kafka(&past)?;
    let (jobcast, observed) = run_live(args, &live, &shape, dir.path(), cpus, Some(&settings))
        .context("Slurm driven by jobcast")?;
    let decisions = read_decisions(&mock.bootstrap_servers(), &topics)?;
    let apply_delays = apply_delays_s(&observed, dir.path())?;
    let errors = prediction_errors(&decisions, &observed);
    let mut eta_errors: Vec<f64> = errors.etas.iter().map(|&(e, _)| e).collect();
    eta_errors.sort_by(f64::total_cmp);
    let eta_within = errors.etas.iter().filter(|&&(_, within)| within).count();

    // Both runs' averages leave out every job a limit killed in either:
    // a killed job did not finish, and would be run again.
    let killed: BTreeSet<usize> = baseline.killed.union(&jobcast.killed).copied().collect();
    let no_jct = || {
        format!(
            "no job finished in both runs ({} killed at a time limit): nothing to compare",
            killed.len()
        )
    };
    let (baseline_avg_jct_s, baseline_p50_jct_s) = baseline.jct_s(&killed).with_context(no_jct)?;
    let (jobcast_avg_jct_s, jobcast_p50_jct_s) = jobcast.jct_s(&killed).with_context(no_jct)?;
    // The simulator replaying each run, on the task runtimes Slurm
    // measured in it, with the ids its jobs had.
    let (alone_measured, driven_measured) = (alone.measured(&live), observed.measured(&live));
    let replayed_fifo = simulate_live(
        &alone_measured,
        &past,
        &shape,
        cpus,
        gap_us,
        PolicyKind::Fifo,
        &queues,
    )?;
    let replayed_run = simulate_live(
        &driven_measured,
        &past,
        &shape,
        cpus,
        gap_us,
        args.policy,
        &queues,
    )?;
    // Average and P50, as of the runs on Slurm: over the jobs of `jobs`
    // (their ids in the simulation) that no limit killed.
    let simulated_jct_s = |report: &SimReport, jobs: &[LiveJob]| {
        let killed_ids: BTreeSet<u64> = killed.iter().map(|&i| jobs[i].id).collect();
        let jcts: Vec<f64> = report
            .jobs
            .iter()
            .filter(|j| !killed_ids.contains(&j.job_id))
            .map(|j| j.jct_us as f64 / 1e6)
            .collect();
        let avg = jcts.iter().sum::<f64>() / jcts.len() as f64;
        median(jcts)
            .map(|p50| (avg, p50))
            .context("the simulation finished no job")
    };
    let (
        (simulated_baseline, simulated_baseline_p50_jct_s),
        (simulated_jobcast, simulated_jobcast_p50_jct_s),
        (simulated_oracle, _),
        (replayed_baseline, _),
        (replayed_jobcast, _),
    ) = (
        simulated_jct_s(&fifo_run, &live)?,
        simulated_jct_s(&simulated_run, &live)?,
        simulated_jct_s(&oracle_run, &live)?,
        simulated_jct_s(&replayed_fifo, &alone_measured)?,
        simulated_jct_s(&replayed_run, &driven_measured)?,
    );
    let report = Report {
        jobs: live.len(),
        cpus,
        policy: args.policy,
        history_jobs: history.len(),
        killed_jobs: killed.len(),
        baseline_avg_jct_s,
        baseline_p50_jct_s,
        jobcast_avg_jct_s,
        jobcast_p50_jct_s,
        speedup: baseline_avg_jct_s / jobcast_avg_jct_s,
        dispatch_gap_s,
        jobcast_dispatch_gap_s: observed.dispatch_gap_s(cpus),
        simulated_baseline_avg_jct_s: simulated_baseline,
        simulated_baseline_p50_jct_s,
        simulated_jobcast_avg_jct_s: simulated_jobcast,
        simulated_jobcast_p50_jct_s,
        simulated_speedup: simulated_baseline / simulated_jobcast,
        simulated_oracle_speedup: simulated_baseline / simulated_oracle,
        baseline_task_excess_s: task_excess_s(&live, &alone_measured),
        jobcast_task_excess_s: task_excess_s(&live, &driven_measured),
        replayed_baseline_avg_jct_s: replayed_baseline,
        replayed_jobcast_avg_jct_s: replayed_jobcast,
        replayed_speedup: replayed_baseline / replayed_jobcast,
        estimated_jobs: errors.estimates.len(),
        p50_error_pct: median(errors.estimates),
        p50_decision_delay_s: median(decision_delays_s(&observed, &decisions)),
        applied_jobs: apply_delays.len(),
        p50_apply_delay_s: median(apply_delays),
        killed_at_limit: baseline.killed_at_limit + jobcast.killed_at_limit,
        baseline_killed_at_limit: baseline.killed_at_limit,
        jobcast_killed_at_limit: jobcast.killed_at_limit,
        p50_eta_error_pct: percentile(&eta_errors, 50.0),
        p90_eta_error_pct: percentile(&eta_errors, 90.0),
        eta_within_interval_pct: (!eta_errors.is_empty())
            .then(|| eta_within as f64 * 100.0 / eta_errors.len() as f64),
        eta_jobs: eta_errors.len(),
        rows: job_rows(
            &live,
            &alone,
            &observed,
            &decisions,
            &simulated_run,
            (&driven_measured, &replayed_run),
        ),
    };
    Ok(report)
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let report = self;
        let opt = |v: Option<f64>| v.map_or_else(|| "-".into(), |x| format!("{x:.2}"));
        f.write_str(&format!(
            "jobs                     {}\nCPUs                     {}\n\
             history jobs             {}\n\
             avg JCT, Slurm alone     {:.1} s (P50 {:.1} s)\n\
             avg JCT, with jobcast    {:.1} s (P50 {:.1} s)\n\
             speedup                  {:.2}×\n\
             dispatch gap             {:.2} s a task ({:.2} s with jobcast)\n\
             simulated speedup        {:.2}× ({:.1} s / {:.1} s, P50 {:.1} s / {:.1} s; the Oracle {:.2}×)\n\
             replayed speedup         {:.2}× ({:.1} s / {:.1} s; tasks measured {:+.2} s / {:+.2} s from their sleeps)\n\
             P50 prediction error     {} % over {} estimated jobs\n\
             P50 decision delay       {} s on the topic, {} s applied ({} jobs)\n\
             killed at a time limit   {} tasks ({} alone, {} with jobcast) of {} jobs (their JCTs left out of both runs')\n\
             ETA error P50 / P90      {} % / {} % over {} jobs, {} % within the 80 % interval\n",
            report.jobs,
            report.cpus,
            report.history_jobs,
            report.baseline_avg_jct_s,
            report.baseline_p50_jct_s,
            report.jobcast_avg_jct_s,
            report.jobcast_p50_jct_s,
            report.speedup,
            report.dispatch_gap_s,
            report.jobcast_dispatch_gap_s,
            report.simulated_speedup,
            report.simulated_baseline_avg_jct_s,
            report.simulated_jobcast_avg_jct_s,
            report.simulated_baseline_p50_jct_s,
            report.simulated_jobcast_p50_jct_s,
            report.simulated_oracle_speedup,
            report.replayed_speedup,
            report.replayed_baseline_avg_jct_s,
            report.replayed_jobcast_avg_jct_s,
            report.baseline_task_excess_s,
            report.jobcast_task_excess_s,
            opt(report.p50_error_pct),
            report.estimated_jobs,
            opt(report.p50_decision_delay_s),
            opt(report.p50_apply_delay_s),
            report.applied_jobs,
            report.killed_at_limit,
            report.baseline_killed_at_limit,
            report.jobcast_killed_at_limit,
            report.killed_jobs,
            opt(report.p50_eta_error_pct),
            opt(report.p90_eta_error_pct),
            report.eta_jobs,
            opt(report.eta_within_interval_pct),
        ))
    }
}

/// Jobs generated per job run: the past half, and a draw from the other.
const GENERATED_PER_JOB: u64 = 20;

/// The workload `jobcast generate` writes by default, seeded by `seed`,
/// `GENERATED_PER_JOB` times `jobs` jobs for `cpus` slots, without DAG jobs (an array has no stages), and its
/// name for messages.
fn generated(seed: u64, jobs: usize, cpus: u32) -> anyhow::Result<(jobcast_ingest::Trace, String)> {
    let config = WorkloadConfig {
        seed,
        jobs: Some(GENERATED_PER_JOB * jobs as u64),
        slots: cpus,
        dag_fraction: 0.0,
        ..WorkloadConfig::default()
    };
    let events = jobcast_replay::generate(&config)?.map(Ok);
    let trace = jobcast_ingest::Trace::new(events, Default::default(), 0);
    Ok((trace, format!("the generated workload (seed {seed})")))
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    percentile(&values, 50.0)
}

/// The memory each task asks for, MB: a `sleep` needs next to none.
const TASK_MEM_MB: u64 = 100;

/// The time limit each job asks for, minutes, at most: a day, one value
/// the history shares with every past job.
const JOB_TIME_LIMIT_MINUTES: u64 = 1440;

/// The partition the bench runs in.
struct Partition {
    name: String,
    /// Its CPUs (`sinfo`'s total).
    cpus: u32,
    /// Its longest time limit (`MaxTime`), minutes; none when infinite.
    max_minutes: Option<u64>,
}

/// A time limit as `sinfo` prints it (`infinite`, `M:SS`, `H:MM:SS`,
/// `D-HH:MM:SS`), in whole minutes: `Ok(None)` when infinite.
fn limit_minutes(text: &str) -> Result<Option<u64>, String> {
    if text.eq_ignore_ascii_case("infinite") || text.eq_ignore_ascii_case("unlimited") {
        return Ok(None);
    }
    let bad = || format!("{text:?} is not a Slurm time limit");
    let (days, clock) = match text.split_once('-') {
        Some((days, clock)) => (days.parse::<u64>().map_err(|_| bad())?, clock),
        None => (0, text),
    };
    let parts = clock
        .split(':')
        .map(|p| p.parse::<u64>().map_err(|_| bad()))
        .collect::<Result<Vec<u64>, String>>()?;
    let secs = match parts[..] {
        [m, s] => m * 60 + s,
        [h, m, s] => (h * 60 + m) * 60 + s,
        _ => return Err(bad()),
    };
    Ok(Some((days * 86_400 + secs) / 60))
}

/// The default partition of the cluster `conf` names (else the one
/// `SLURM_CONF` names): the bench runs there.
fn default_partition(conf: Option<&Path>) -> anyhow::Result<Partition> {
    let mut sinfo = Command::new("sinfo");
    if let Some(conf) = conf {
        sinfo.env("SLURM_CONF", conf);
    }
    let out = sinfo
        .args(["-h", "-o", "%P %C %l"])
        .output()
        .context("sinfo (is Slurm installed and SLURM_CONF set? scripts/slurm.sh up)")?;
    if !out.status.success() {
        bail!(
            "sinfo: {} (start a cluster with `eval \"$(scripts/slurm.sh up)\"`)",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    // One line per partition, `NAME A/I/O/T LIMIT`; the default's name
    // ends in `*`.
    let printed = || format!("sinfo -o '%P %C %l' printed {text:?}");
    let (name, rest) = text
        .lines()
        .find_map(|line| line.split_once("* "))
        .with_context(|| format!("{}: no default partition", printed()))?;
    let (cpus, limit) = rest
        .trim()
        .split_once(' ')
        .with_context(|| format!("{}: not NAME CPUS LIMIT", printed()))?;
    let cpus = cpus
        .rsplit('/')
        .next()
        .and_then(|total| total.parse().ok())
        .filter(|&cpus: &u32| cpus > 0)
        .with_context(|| format!("{}, not A/I/O/T CPUs", printed()))?;
    let max_minutes =
        limit_minutes(limit.trim()).map_err(|e| anyhow::anyhow!("{}: {e}", printed()))?;
    Ok(Partition {
        name: name.to_owned(),
        cpus,
        max_minutes,
    })
}

/// The user this process submits jobs as, as Slurm names it.
fn current_user() -> anyhow::Result<String> {
    id("-un")
}

/// The group jobs are submitted under: the user's, as `squeue` reports it.
fn current_group() -> anyhow::Result<String> {
    id("-gn")
}

/// `id`'s answer to `flag`.
fn id(flag: &str) -> anyhow::Result<String> {
    let out = Command::new("id")
        .arg(flag)
        .output()
        .with_context(|| format!("id {flag}"))?;
    if !out.status.success() {
        bail!("id {flag}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The embedded Kafka the bench's services run on (the events topic in
/// two partitions, each output in one), with the clusters' `past` on it.
fn embedded_kafka(
    past: &[SimJob],
) -> anyhow::Result<(
    MockCluster<'static, DefaultProducerContext>,
    Topics,
    KafkaSettings,
)> {
    let mock =
        MockCluster::<DefaultProducerContext>::new(1).context("starting the embedded Kafka")?;
    let topics = Topics::default();
    mock.create_topic(&topics.events, 2, 1)?;
    for topic in topics.outputs() {
        mock.create_topic(topic, 1, 1)?;
    }
    let settings = KafkaSettings::new(mock.bootstrap_servers());
    publish_past(&settings, &topics, past)?;
    Ok((mock, topics, settings))
}

/// Publish the cluster's `past` on the input topic, each job's events in
/// time order.
fn publish_past(settings: &KafkaSettings, topics: &Topics, past: &[SimJob]) -> anyhow::Result<()> {
    if past.is_empty() {
        return Ok(());
    }
    let mut events: Vec<_> = past.iter().flat_map(finished_job_events).collect();
    // In time order, each job's own order kept.
    events.sort_by_key(Event::time_us);
    eprintln!(
        "jobcast bench: publishing {} past jobs ({} events) for jobcast to learn",
        past.len(),
        events.len()
    );
    super::produce(
        settings,
        &topics.events,
        events.into_iter().map(Ok::<_, Infallible>),
        None,
        &Ungated,
    )?;
    Ok(())
}

/// Wait until the service has committed every event on its input topic:
/// it has learnt the past before the first job is submitted.
fn wait_for_past(settings: &KafkaSettings) -> anyhow::Result<()> {
    let topic = &Topics::default().events;
    let consumer: BaseConsumer = settings
        .client_config()
        .set("group.id", SERVE_GROUP)
        .set("enable.auto.commit", "false")
        .create()?;
    let mut ends = TopicPartitionList::new();
    for partition in partitions(&consumer, topic, Duration::from_secs(10))? {
        let (_, high) = consumer.fetch_watermarks(topic, partition, Duration::from_secs(10))?;
        ends.add_partition_offset(topic, partition, Offset::Offset(high))?;
    }
    let started = Instant::now();
    loop {
        let committed = consumer.committed_offsets(ends.clone(), Duration::from_secs(10))?;
        let behind: i64 = ends
            .elements()
            .iter()
            .map(|end| {
                let done = match committed
                    .find_partition(topic, end.partition())
                    .map(|e| e.offset())
                {
                    Some(Offset::Offset(o)) => o,
                    _ => 0,
                };
                match end.offset() {
                    Offset::Offset(high) => (high - done).max(0),
                    _ => 0,
                }
            })
            .sum();
        if behind == 0 {
            return Ok(());
        }
        if started.elapsed() > PAST_TIMEOUT {
            bail!(
                "jobcast serve had {behind} past events left to learn after {} s",
                PAST_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Each job's task runtimes, one per line, where its tasks read them.
fn write_runtimes(dir: &Path, live: &[LiveJob]) -> anyhow::Result<()> {
    for (i, job) in live.iter().enumerate() {
        let lines: String = job.runtimes_s.iter().map(|r| format!("{r}\n")).collect();
        std::fs::write(dir.join(format!("job-{i}.txt")), lines)?;
    }
    Ok(())
}

/// What the bench saw of one run's jobs, by Slurm job id.
#[derive(Default)]
struct Observed {
    /// Live job index, by Slurm job id.
    jobs: BTreeMap<u64, usize>,
    /// When the bench submitted each job, Unix s, by its index, where it
    /// keeps its own time (a job `slurm submit` moved was submitted twice).
    submitted_at: BTreeMap<usize, f64>,
    /// Each task's last record, by (job, array index or 0).
    tasks: BTreeMap<(u64, u32), SqueueJob>,
}

/// The consumer group of the bench's `jobcast serve`.
const SERVE_GROUP: &str = "jobcast-bench-serve";

/// How long the service may take to learn the cluster's past.
const PAST_TIMEOUT: Duration = Duration::from_secs(600);

impl Observed {
    fn record(&mut self, snapshot: Vec<SqueueJob>) {
        for record in snapshot {
            let job = record.job();
            if !self.jobs.contains_key(&job) {
                continue;
            }
            if let Some(index) = record
                .array_task_id
                .or((record.array_job_id == 0).then_some(0))
            {
                self.tasks.insert((job, index), record);
            }
        }
    }

    /// Tasks ended, of `total`.
    fn ended(&self) -> usize {
        self.tasks
            .values()
            .filter(|t| {
                !matches!(
                    t.job_state.as_str(),
                    "PENDING" | "RUNNING" | "COMPLETING" | "CONFIGURING"
                )
            })
            .count()
    }

    /// Each job's JCT, s, by its index in the workload.
    fn jcts(&self) -> BTreeMap<usize, f64> {
        self.jobs
            .iter()
            .filter_map(|(&job, &index)| Some((index, self.jct_s(job)?)))
            .collect()
    }

    /// Job `index` was submitted at `unix_s`.
    fn submitted_at(&mut self, index: usize, unix_s: f64) {
        self.submitted_at.insert(index, unix_s);
    }

    /// Each job's JCT, s, from when the bench submitted it
    /// ([`Observed::submitted_at`]), by its index.
    fn jcts_from_submission(&self) -> BTreeMap<usize, f64> {
        self.jobs
            .iter()
            .filter_map(|(&job, &index)| {
                let end = self.end_s(job)? as f64;
                Some((index, end - self.submitted_at.get(&index)?))
            })
            .collect()
    }

    /// A job's JCT, s: its last task's end less its submission, once
    /// every task has ended.
    fn jct_s(&self, job: u64) -> Option<f64> {
        Some(self.end_s(job)?.saturating_sub(self.submitted_s(job)?) as f64)
    }

    /// When a job was submitted, Unix s.
    fn submitted_s(&self, job: u64) -> Option<u64> {
        self.tasks
            .range((job, 0)..=(job, u32::MAX))
            .map(|(_, t)| t.submit_time)
            .min()
    }

    /// When a job's last task ended, Unix s, once every task has.
    fn end_s(&self, job: u64) -> Option<u64> {
        let mut tasks = self.tasks.range((job, 0)..=(job, u32::MAX)).peekable();
        tasks.peek()?;
        tasks.try_fold(0, |end, (_, t)| {
            (t.end_time > 0).then(|| end.max(t.end_time))
        })
    }

    /// The CPU-seconds the cluster's `cpus` were left idle while tasks
    /// were pending, per task that waited (0 if none did): Slurm's times
    /// are whole seconds, so each second is counted whole.
    fn dispatch_gap_s(&self, cpus: u32) -> f64 {
        let tasks: Vec<(u64, u64, u64)> = self
            .tasks
            .values()
            .filter(|t| t.start_time > 0 && t.end_time >= t.start_time)
            .map(|t| (t.submit_time, t.start_time, t.end_time))
            .collect();
        let waited = tasks.iter().filter(|(s, start, _)| start > s).count();
        if waited == 0 {
            return 0.0;
        }
        // Running and pending counts change only at these seconds: one
        // sweep over them, whatever the run's length.
        let mut changes: BTreeMap<u64, (i64, i64)> = BTreeMap::new();
        for &(submitted, start, end) in &tasks {
            if start > submitted {
                changes.entry(submitted).or_default().1 += 1;
                changes.entry(start).or_default().1 -= 1;
            }
            changes.entry(start).or_default().0 += 1;
            changes.entry(end).or_default().0 -= 1;
        }
        let (mut running, mut pending, mut idle) = (0i64, 0i64, 0u64);
        let mut seconds = changes.into_iter().peekable();
        while let Some((second, (run, pend))) = seconds.next() {
            running += run;
            pending += pend;
            if let Some(&(next, _)) = seconds.peek() {
                let free = (i64::from(cpus) - running).max(0).min(pending).max(0);
                idle += free as u64 * (next - second);
            }
        }
        idle as f64 / waited as f64
    }

    /// `live` as this run measured it, for a replay in the simulator: each
    /// job under the Slurm id it ran as (pilots are drawn by job id), each
    /// task's runtime as Slurm measured it (its end less its start, whole
    /// seconds, launch and completion included), its `sleep` where Slurm
    /// measured none. The service learns these runtimes, not the sleeps.
    fn measured(&self, live: &[LiveJob]) -> Vec<LiveJob> {
        let ids: BTreeMap<usize, u64> = self.jobs.iter().map(|(&id, &i)| (i, id)).collect();
        live.iter()
            .enumerate()
            .map(|(i, job)| {
                let Some(&id) = ids.get(&i) else {
                    return job.clone();
                };
                // A plain job's one task is index 0 (`record`).
                let runtimes_s = (0..)
                    .zip(&job.runtimes_s)
                    .map(|(task, &sleep)| {
                        self.tasks
                            .get(&(id, task))
                            .filter(|t| t.start_time > 0 && t.end_time >= t.start_time)
                            .map_or(sleep, |t| (t.end_time - t.start_time) as f64)
                    })
                    .collect();
                LiveJob {
                    id,
                    runtimes_s,
                    ..job.clone()
                }
            })
            .collect()
    }

    /// A job's mean task runtime as Slurm measured it, s.
    fn mean_runtime_s(&self, job: u64) -> Option<f64> {
        let runs: Vec<f64> = self
            .tasks
            .range((job, 0)..=(job, u32::MAX))
            .map(|(_, t)| t.end_time.saturating_sub(t.start_time) as f64)
            .collect();
        (!runs.is_empty()).then(|| runs.iter().sum::<f64>() / runs.len() as f64)
    }
}

/// Run `live` on the cluster of `cpus`, driven by jobcast if `kafka` is given;
/// what it measured, and what it saw.
fn run_live(
    args: &SlurmArgs,
    live: &[LiveJob],
    shape: &SlurmShape,
    dir: &Path,
    cpus: u32,
    kafka: Option<&KafkaSettings>,
) -> anyhow::Result<(LiveRun, Observed)> {
    let services = match kafka {
        Some(kafka) => start_services(args, &kafka.brokers, dir, cpus, unix_seconds())?,
        None => Vec::new(),
    };
    let label = if kafka.is_some() {
        "with jobcast"
    } else {
        "Slurm alone"
    };
    let queues = [(
        String::new(),
        vec!["squeue".to_owned(), "--json".to_owned()],
    )];
    let result = kafka.map_or(Ok(()), wait_for_past).and_then(|()| {
        follow(label, live, &queues, |i, done| {
            let placed = sbatch(dir, i, &live[i], shape).map(|id| Placed::now(0, id));
            done.send((i, placed))
                .map_err(|_| anyhow::anyhow!("the run stopped"))
        })
    });
    // A service that stopped early would make this a run without jobcast.
    let stopped = stop_services(dir, services);
    let observed = result?.observed;
    stopped?;
    Ok((LiveRun::of(&observed), observed))
}

/// Start `jobcast COMMAND` with its log (`NAME.log`) under `dir`, its
/// standard output to `stdout` (else nowhere), on the cluster `conf`
/// names (else the one `SLURM_CONF` names).
fn spawn_jobcast(
    dir: &Path,
    name: &str,
    command: &[String],
    conf: Option<&Path>,
    stdout: Option<Stdio>,
) -> anyhow::Result<Child> {
    let jobcast = std::env::current_exe().context("finding the jobcast binary")?;
    let log = std::fs::File::create(dir.join(format!("{name}.log")))?;
    let mut c = Command::new(jobcast);
    c.args(command)
        // The embedded (mock) broker holds an empty fetch for its whole
        // wait, where a real one answers when data arrives: with the
        // default 500 ms every hop of a decision would wait that long.
        .args(["-X", "fetch.wait.max.ms=10"])
        .env("JOBCAST_LOG", "info")
        .stdout(stdout.unwrap_or_else(Stdio::null))
        .stderr(log);
    if let Some(conf) = conf {
        c.env("SLURM_CONF", conf);
    }
    c.spawn()
        .with_context(|| format!("starting jobcast {name}"))
}

/// Stop the bench's `services` (SIGTERM, by PID) and wait for them; an
/// error names each that had already stopped, with its log's last lines
/// (under `dir`): the run went on without it.
fn stop_services(dir: &Path, services: Vec<(String, Child)>) -> anyhow::Result<()> {
    let mut stopped = Vec::new();
    for (name, mut child) in services {
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
            let mut tail: Vec<&str> = log.lines().rev().take(5).collect();
            tail.reverse();
            stopped.push(format!(
                "jobcast {name} stopped during the run ({status}): {}",
                tail.join(" | ")
            ));
            continue;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let _ = child.wait();
    }
    if !stopped.is_empty() {
        bail!("{}", stopped.join("; "));
    }
    Ok(())
}

/// Where a job went, and since when it counts.
struct Placed {
    cluster: usize,
    job_id: u64,
    /// jobcast heard of it in time (always, where jobcast was not asked).
    decided: bool,
    /// How long its submission took, s: for `slurm submit`, the hold,
    /// jobcast's decision and the move.
    took_s: f64,
}

impl Placed {
    fn now(cluster: usize, job_id: u64) -> Placed {
        Placed {
            cluster,
            job_id,
            decided: true,
            took_s: 0.0,
        }
    }
}

/// What one run showed.
struct Run {
    observed: Observed,
    /// Each job's cluster, by its index.
    placed: BTreeMap<usize, usize>,
    /// Jobs jobcast heard of too late.
    undecided: usize,
    /// The median time a submission took, s.
    submit_p50_s: f64,
}

/// Where a run's jobs get their placement: `(index, placement)`.
type Done = mpsc::Sender<(usize, anyhow::Result<Placed>)>;

/// Run `live` on clusters that must be idle, each named with its `squeue
/// --json` in `queues` (the name empty for the one cluster `SLURM_CONF`
/// names): at each job's arrival `submit(index, done)` is called, and the
/// job counts once `done` has its placement (at once, or later from a
/// thread); then follow every cluster's queue until every task has ended.
fn follow(
    label: &str,
    live: &[LiveJob],
    queues: &[(String, Vec<String>)],
    submit: impl Fn(usize, &Done) -> anyhow::Result<()>,
) -> anyhow::Result<Run> {
    let cluster = |name: &str| match name {
        "" => "the cluster".to_owned(),
        name => format!("cluster {name}"),
    };
    for (name, squeue) in queues {
        let busy = run_squeue(squeue)
            .map_err(anyhow::Error::msg)?
            .jobs
            .iter()
            .filter(|r| matches!(r.job_state.as_str(), "PENDING" | "RUNNING"))
            .count();
        if busy > 0 {
            bail!(
                "{} has {busy} pending or running jobs: the bench needs it idle",
                cluster(name)
            );
        }
    }
    let tasks: usize = live.iter().map(|j| j.runtimes_s.len()).sum();
    let bar = ProgressBar::with_draw_target(Some(tasks as u64), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{msg:<10} [{bar:30}] {pos}/{len} tasks ended, {elapsed}")
            .expect("a valid template"),
    );
    bar.set_message(label.to_owned());
    let (done, placements) = mpsc::channel();
    let mut observed = Observed::default();
    let mut placed = BTreeMap::new();
    let mut undecided = 0;
    let mut took_s = Vec::new();
    let started = Instant::now();
    let span = live.last().map_or(0.0, |j| j.arrival_s);
    let work: f64 = live.iter().flat_map(|j| &j.runtimes_s).sum();
    let deadline = started + Duration::from_secs_f64(span + work + 300.0);
    let mut next = 0;
    let mut last_poll = Instant::now() - Duration::from_secs(10);
    let result = loop {
        while next < live.len() && started.elapsed().as_secs_f64() >= live[next].arrival_s {
            observed.submitted_at(next, unix_now());
            submit(next, &done)?;
            next += 1;
        }
        while let Ok((i, result)) = placements.try_recv() {
            let p = result.with_context(|| format!("{label}: job {i}"))?;
            observed.jobs.insert(p.job_id, i);
            placed.insert(i, p.cluster);
            undecided += usize::from(!p.decided);
            took_s.push(p.took_s);
        }
        if last_poll.elapsed() >= Duration::from_secs(1) {
            last_poll = Instant::now();
            for (name, squeue) in queues {
                match run_squeue(squeue) {
                    Ok(snapshot) => observed.record(snapshot.jobs),
                    Err(e) => eprintln!("jobcast bench: {}: {e}; polling again", cluster(name)),
                }
            }
            bar.set_position(observed.ended() as u64);
            if placed.len() == live.len() && observed.ended() == tasks {
                break Ok(());
            }
        }
        if Instant::now() > deadline {
            break Err(anyhow::anyhow!(
                "{label}: {} of {tasks} tasks ended in {:.0} s",
                observed.ended(),
                started.elapsed().as_secs_f64()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    bar.finish_and_clear();
    result.map(|()| Run {
        observed,
        placed,
        undecided,
        submit_p50_s: median(took_s).unwrap_or(0.0),
    })
}

/// Now, Unix s.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The `sbatch` arguments of job `index` in `shape`: an array of one-CPU
/// `sleep`s, each reading its runtime from the job's file in `dir`.
fn sbatch_args(dir: &Path, index: usize, job: &LiveJob, shape: &SlurmShape) -> Vec<String> {
    let file = dir.join(format!("job-{index}.txt"));
    let script = format!(
        "sleep $(sed -n \"$((${{SLURM_ARRAY_TASK_ID:-0}} + 1))p\" {})",
        file.display()
    );
    let mut args = vec!["-o".to_owned(), "/dev/null".to_owned()];
    args.extend(shape.sbatch_args());
    args.extend([
        "-J".to_owned(),
        SlurmShape::name(&job.job),
        "--chdir".to_owned(),
        dir.display().to_string(),
    ]);
    if job.runtimes_s.len() > 1 {
        args.push(format!("--array=0-{}", job.runtimes_s.len() - 1));
    }
    args.extend(["--wrap".to_owned(), script]);
    args
}

/// Submit job `index` in `shape` (`sbatch_args`); its Slurm job id.
fn sbatch(dir: &Path, index: usize, job: &LiveJob, shape: &SlurmShape) -> anyhow::Result<u64> {
    sbatch_parsable(sbatch_args(dir, index, job, shape))
}

/// `sbatch --parsable ARGS`: the id of the job it submitted.
fn sbatch_parsable(args: impl IntoIterator<Item = String>) -> anyhow::Result<u64> {
    let out = Command::new("sbatch")
        .arg("--parsable")
        .args(args)
        .output()
        .context("sbatch")?;
    if !out.status.success() {
        bail!("sbatch: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .split(';')
        .next()
        .and_then(|id| id.parse().ok())
        .with_context(|| format!("sbatch --parsable printed {text:?}"))
}

/// `jobcast serve`, `slurm watch` and `slurm apply` on the embedded Kafka,
/// each with its state and its log (`NAME.log`) under `dir`. The watcher
/// follows only the jobs submitted from `since` (Unix s) on: Slurm still
/// lists the finished jobs of the run without jobcast, the same jobs, and
/// learning their runtimes would hand jobcast the answers.
fn start_services(
    args: &SlurmArgs,
    brokers: &str,
    dir: &Path,
    cpus: u32,
    since: u64,
) -> anyhow::Result<Vec<(String, Child)>> {
    let interval = args.interval_secs.to_string();
    let policy = args.policy.name().to_owned();
    // Every array task asks one CPU: the ETAs' slots are the node's CPUs.
    let slots = format!("engine.eta.slots={cpus}");
    let q0 = format!(
        "engine.queues.q0_upper_us={}",
        args.live.scale().queues().q0_upper_us
    );
    let margin = args.walltime_margin.to_string();
    let since = since.to_string();
    let data = dir.join("serve");
    let (watch, apply) = (dir.join("watch.json"), dir.join("apply.json"));
    let commands: [Vec<&std::ffi::OsStr>; 3] = [
        vec![
            "serve".as_ref(),
            "--brokers".as_ref(),
            brokers.as_ref(),
            "--group".as_ref(),
            SERVE_GROUP.as_ref(),
            "--policy".as_ref(),
            policy.as_ref(),
            "--data-dir".as_ref(),
            data.as_os_str(),
            "--http".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--set".as_ref(),
            slots.as_ref(),
            "--set".as_ref(),
            q0.as_ref(),
        ],
        vec![
            "slurm".as_ref(),
            "watch".as_ref(),
            "--brokers".as_ref(),
            brokers.as_ref(),
            "--interval-secs".as_ref(),
            interval.as_ref(),
            "--state".as_ref(),
            watch.as_os_str(),
            // Each run's directory is new: its watcher starts from no state.
            "--fresh".as_ref(),
            "--since".as_ref(),
            since.as_ref(),
        ],
        [
            vec![
                "slurm".as_ref(),
                "apply".as_ref(),
                "--brokers".as_ref(),
                brokers.as_ref(),
                "--interval-secs".as_ref(),
                interval.as_ref(),
                "--state".as_ref(),
                apply.as_os_str(),
            ],
            match args.walltime_quantile {
                Some(quantile) => vec![
                    "--walltime-quantile".as_ref(),
                    Quantiles::NAMES[quantile].as_ref(),
                    "--walltime-margin".as_ref(),
                    margin.as_ref(),
                    "--walltime-min-minutes".as_ref(),
                    "1".as_ref(),
                ],
                None => Vec::new(),
            },
        ]
        .concat(),
    ];
    let mut children = Vec::new();
    for (name, command) in ["serve", "watch", "apply"].into_iter().zip(commands) {
        // The applier's actions (JSON lines) say when each took effect.
        let stdout = match name {
            "apply" => Some(Stdio::from(std::fs::File::create(dir.join(ACTIONS))?)),
            _ => None,
        };
        let command: Vec<String> = command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let child = spawn_jobcast(dir, name, &command, None, stdout)?;
        children.push((name.to_owned(), child));
    }
    Ok(children)
}

/// How far jobcast's predictions on the live workload were from what
/// Slurm measured.
struct LiveErrors {
    /// Per wide job placed by an estimate: its error (%) against the mean
    /// task runtime Slurm measured.
    estimates: Vec<f64>,
    /// Per job given an ETA: its first ETA's error (%) against the time it
    /// then took to finish, and whether it finished within the interval.
    etas: Vec<(f64, bool)>,
}

/// jobcast's decisions on the run, by job: the oldest (the one that
/// placed it) with when the broker got it (Unix ms), the oldest with an
/// ETA, and the newest.
#[derive(Default)]
struct Decisions {
    first: BTreeMap<u64, Decision>,
    first_at_ms: BTreeMap<u64, i64>,
    first_eta: BTreeMap<u64, (u32, Completion)>,
    newest: Newest,
}

/// Read the decisions topic to its end.
fn read_decisions(brokers: &str, topics: &Topics) -> anyhow::Result<Decisions> {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "jobcast-bench-slurm")
        .set("enable.auto.commit", "false")
        .create()?;
    let mut decisions = Decisions::default();
    read_to_end(
        &consumer,
        &topics.decisions,
        &mut BTreeMap::new(),
        (Duration::from_secs(30), Duration::from_secs(30)),
        |message| {
            if let Ok(decision) =
                serde_json::from_slice::<Decision>(message.payload().unwrap_or_default())
            {
                if let Some(eta) = decision.eta {
                    let first = decisions
                        .first_eta
                        .entry(decision.job_id)
                        .or_insert((decision.version, eta));
                    if decision.version < first.0 {
                        *first = (decision.version, eta);
                    }
                }
                let first = decisions.first.get(&decision.job_id);
                if first.is_none_or(|first| decision.version < first.version) {
                    decisions.first.insert(decision.job_id, decision.clone());
                    match message.timestamp().to_millis() {
                        Some(at) => decisions.first_at_ms.insert(decision.job_id, at),
                        None => decisions.first_at_ms.remove(&decision.job_id),
                    };
                }
                decisions.newest.offer(decision);
            }
        },
    )?;
    Ok(decisions)
}

/// Each job's time from its submission to its first decision, s.
fn decision_delays_s(observed: &Observed, decisions: &Decisions) -> Vec<f64> {
    observed
        .jobs
        .keys()
        .filter_map(|&job| {
            let at_ms = decisions.first_at_ms.get(&job)?;
            Some(*at_ms as f64 / 1e3 - observed.submitted_s(job)? as f64)
        })
        .collect()
}

/// The file, in the run's directory, of `slurm apply`'s actions.
const ACTIONS: &str = "apply.jsonl";

/// Each job's time from its submission to the first action `slurm apply`
/// carried out for one of its decisions (version 1 on; version 0 places
/// new work before any decision), s: when a decision first took effect in
/// Slurm. A job whose decisions needed no change (new work stands with Q0
/// already), or that started before the applier's next tick, has none.
fn apply_delays_s(observed: &Observed, dir: &Path) -> anyhow::Result<Vec<f64>> {
    let mut first_ms: BTreeMap<u64, u64> = BTreeMap::new();
    for (job, at_ms) in decisions_carried_out(&dir.join(ACTIONS))? {
        let first = first_ms.entry(job).or_insert(at_ms);
        *first = (*first).min(at_ms);
    }
    Ok(observed
        .jobs
        .keys()
        .filter_map(|&job| {
            Some(*first_ms.get(&job)? as f64 / 1e3 - observed.submitted_s(job)? as f64)
        })
        .collect())
}

/// The actions in `path` (`slurm apply`'s JSON lines) that carried out a
/// decision of version 1 on (version 0 places new work before any
/// decision): each one's job and when it took effect (Unix ms).
fn decisions_carried_out(path: &Path) -> anyhow::Result<Vec<(u64, u64)>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut carried_out = Vec::new();
    for (line, action) in text.lines().enumerate() {
        let action: serde_json::Value = serde_json::from_str(action)
            .with_context(|| format!("{}, line {}", path.display(), line + 1))?;
        if let (Some(true), Some(job), Some(1..), Some(at_ms)) = (
            action["done"].as_bool(),
            action["job_id"].as_u64(),
            action["version"].as_u64(),
            action["at_ms"].as_u64(),
        ) {
            carried_out.push((job, at_ms));
        }
    }
    Ok(carried_out)
}

/// The mean, over every task, of its runtime in `measured` less its
/// runtime in `live`, s.
fn task_excess_s(live: &[LiveJob], measured: &[LiveJob]) -> f64 {
    let excess: Vec<f64> = live
        .iter()
        .zip(measured)
        .flat_map(|(l, m)| l.runtimes_s.iter().zip(&m.runtimes_s).map(|(l, m)| m - l))
        .collect();
    excess.iter().sum::<f64>() / excess.len().max(1) as f64
}

/// Score jobcast's estimates and ETAs against what Slurm measured.
fn prediction_errors(decisions: &Decisions, observed: &Observed) -> LiveErrors {
    let mut estimates = Vec::new();
    for decision in decisions.newest.iter() {
        let (Phase::Estimated, Some(estimate)) = (decision.phase, decision.estimate) else {
            continue;
        };
        if let Some(truth) = observed
            .mean_runtime_s(decision.job_id)
            .filter(|t| *t > 0.0)
        {
            let estimated = estimate.mean_task_runtime_us / 1e6;
            estimates.push((estimated - truth).abs() / truth * 100.0);
        }
    }
    let etas = decisions
        .first_eta
        .iter()
        .filter(|(job, _)| observed.jobs.contains_key(job))
        .filter_map(|(&job, &(_, eta))| {
            let end_us = observed.end_s(job)? * 1_000_000;
            // Slurm's times are whole seconds: a job is at least one long.
            let actual = (end_us.saturating_sub(eta.at_us) as f64).max(1e6);
            let predicted = eta.p50_us.saturating_sub(eta.at_us) as f64;
            let within = (eta.p10_us..=eta.p90_us).contains(&end_us);
            Some(((predicted - actual).abs() / actual * 100.0, within))
        })
        .collect();
    LiveErrors { estimates, etas }
}

/// Each live job as the two runs on Slurm and the simulation saw it.
fn job_rows(
    live: &[LiveJob],
    alone: &Observed,
    driven: &Observed,
    decisions: &Decisions,
    simulated: &SimReport,
    (replayed_jobs, replayed): (&[LiveJob], &SimReport),
) -> Vec<JobRow> {
    let slurm_ids = |observed: &Observed| -> BTreeMap<usize, u64> {
        observed.jobs.iter().map(|(&id, &i)| (i, id)).collect()
    };
    let (alone_ids, driven_ids) = (slurm_ids(alone), slurm_ids(driven));
    fn by_id(report: &SimReport) -> BTreeMap<u64, &JobResult> {
        report.jobs.iter().map(|j| (j.job_id, j)).collect()
    }
    let (simulated, replayed) = (by_id(simulated), by_id(replayed));
    let placed = |d: Option<&Decision>| {
        (
            d.map(|d| d.queue),
            d.and_then(|d| d.estimate)
                .map(|e| e.mean_task_runtime_us / 1e6),
        )
    };
    live.iter()
        .enumerate()
        .map(|(i, job)| {
            let id = driven_ids.get(&i).copied();
            let (first_queue, first_estimate_s) =
                placed(id.and_then(|id| decisions.first.get(&id)));
            let (last_queue, last_estimate_s) = placed(id.and_then(|id| decisions.newest.get(id)));
            let sim = simulated.get(&job.id);
            let replay = replayed.get(&replayed_jobs[i].id);
            JobRow {
                trace_job_id: job.job.job_id(),
                name: SlurmShape::name(&job.job),
                tasks: job.runtimes_s.len(),
                arrival_s: job.arrival_s,
                baseline_jct_s: alone_ids.get(&i).and_then(|&id| alone.jct_s(id)),
                jobcast_jct_s: id.and_then(|id| driven.jct_s(id)),
                first_queue,
                first_estimate_s,
                last_queue,
                last_estimate_s,
                simulated_jct_s: sim.map(|j| j.jct_us as f64 / 1e6),
                simulated_queue: sim.map(|j| j.queue),
                simulated_estimate_s: sim
                    .and_then(|j| j.estimated_mean_task_runtime_us)
                    .map(|us| us / 1e6),
                replayed_jct_s: replay.map(|j| j.jct_us as f64 / 1e6),
                replayed_queue: replay.map(|j| j.queue),
                replayed_estimate_s: replay
                    .and_then(|j| j.estimated_mean_task_runtime_us)
                    .map(|us| us / 1e6),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::{LiveRun, Observed, SqueueJob, limit_minutes};

    /// A job with one task per (state, submit, end).
    fn observe(observed: &mut Observed, job: u64, tasks: &[(&str, u64, u64)]) {
        observed.jobs.insert(job, job as usize);
        for (index, &(state, submit, end)) in (0..).zip(tasks) {
            let record: SqueueJob = serde_json::from_value(serde_json::json!({
                "job_id": job,
                "job_state": state,
                "submit_time": submit,
                "start_time": submit,
                "end_time": end,
            }))
            .unwrap();
            observed.tasks.insert((job, index), record);
        }
    }

    #[test]
    fn a_job_killed_at_its_limit_in_either_run_is_left_out_of_both_runs_jcts() {
        let (mut alone, mut driven) = (Observed::default(), Observed::default());
        for observed in [&mut alone, &mut driven] {
            observe(observed, 0, &[("COMPLETED", 0, 10)]);
            observe(observed, 2, &[("COMPLETED", 0, 20)]);
        }
        observe(
            &mut alone,
            1,
            &[("COMPLETED", 0, 100), ("COMPLETED", 0, 90)],
        );
        // Its limit ended one task of job 1 at 60 s.
        observe(&mut driven, 1, &[("COMPLETED", 0, 30), ("TIMEOUT", 0, 60)]);
        let (alone, driven) = (LiveRun::of(&alone), LiveRun::of(&driven));
        assert_eq!((alone.killed_at_limit, driven.killed_at_limit), (0, 1));
        assert_eq!(driven.killed, BTreeSet::from([1]));
        assert_eq!(driven.jcts[&1], 60.0);
        let killed: BTreeSet<usize> = alone.killed.union(&driven.killed).copied().collect();
        assert_eq!(alone.jct_s(&killed), Some((15.0, 15.0)));
        assert_eq!(driven.jct_s(&killed), Some((15.0, 15.0)));
        // Counted, job 1 would make the driven run look faster.
        assert_eq!(alone.jct_s(&BTreeSet::new()).unwrap().0, 130.0 / 3.0);
        assert_eq!(driven.jct_s(&BTreeSet::new()).unwrap().0, 90.0 / 3.0);
        // Every job killed: no JCT to compare.
        assert_eq!(driven.jct_s(&BTreeSet::from([0, 1, 2])), None);
    }

    /// Tasks (submit, start, end: s after 100) on 2 CPUs: a CPU is freed
    /// at 2 s while two tasks wait and taken at 3 s; the second waiting
    /// task takes the next CPU freed (4 s) at once. One idle CPU-second,
    /// two tasks that waited: a gap of half a second.
    #[test]
    fn the_dispatch_gap_is_idle_cpu_time_while_tasks_wait_per_waiting_task() {
        let mut observed = Observed::default();
        let tasks = [(0, 0, 4), (0, 0, 2), (1, 3, 5), (1, 4, 6)];
        for (job, (submit, start, end)) in (1..).zip(tasks) {
            let record: SqueueJob = serde_json::from_value(serde_json::json!({
                "job_id": job,
                "job_state": "COMPLETED",
                "submit_time": 100 + submit,
                "start_time": 100 + start,
                "end_time": 100 + end,
            }))
            .unwrap();
            observed.tasks.insert((job, 0), record);
        }
        assert_eq!(observed.dispatch_gap_s(2), 0.5);
        // On 8 CPUs the same waits left CPUs idle 5 CPU-seconds (two at 1
        // and 2 s, one at 3 s).
        assert_eq!(observed.dispatch_gap_s(8), 2.5);
        assert_eq!(Observed::default().dispatch_gap_s(2), 0.0);
    }

    /// A replay runs each job under its Slurm id, each task as long as
    /// Slurm measured it; a task Slurm has no measure of keeps its sleep.
    #[test]
    fn a_run_is_replayed_on_the_runtimes_slurm_measured_under_its_ids() {
        use super::workload::{TaskScale, live_workload};
        use jobcast_replay::workload::SimJob;

        let trace = |id: u64, tasks: u32| {
            let submitted = jobcast_ingest::event::JobSubmitted {
                time_us: id,
                job_id: id,
                user: "u".into(),
                group: String::new(),
                job_name: "n".into(),
                logical_name: String::new(),
                scheduling_class: 0,
                priority: 0,
                cpu_request: 1.0,
                mem_request: 0.0,
                num_tasks: tasks,
                partition: String::new(),
                time_limit_us: None,
                deadline_us: None,
                stages: None,
                cluster: String::new(),
            };
            SimJob::new(submitted, vec![1_000_000; tasks as usize], 0).unwrap()
        };
        let scale = TaskScale {
            per_us: 1e-6,
            min_s: 1.0,
            max_s: 60.0,
        };
        let live = live_workload(&[trace(7, 1), trace(8, 3)], 2, &scale, 8, 1.0);
        let mut observed = Observed::default();
        observed.jobs.extend([(41, 0), (42, 1)]);
        let record = |job: u64, task: Option<u32>, start: u64, end: u64| {
            serde_json::from_value::<SqueueJob>(serde_json::json!({
                "job_id": job + task.unwrap_or(0) as u64,
                "array_job_id": task.map_or(0, |_| job),
                "array_task_id": task,
                "job_state": "COMPLETED",
                "submit_time": 100,
                "start_time": start,
                "end_time": end,
            }))
            .unwrap()
        };
        // Task 2 of the array was never seen.
        observed.record(vec![
            record(41, None, 100, 102),
            record(42, Some(0), 100, 101),
            record(42, Some(1), 101, 103),
        ]);
        let measured = observed.measured(&live);
        let ids: Vec<u64> = measured.iter().map(|j| j.id).collect();
        assert_eq!(ids, [41, 42]);
        assert_eq!(measured[0].runtimes_s, [2.0]);
        assert_eq!(measured[1].runtimes_s, [1.0, 2.0, 1.0]);
        assert_eq!(measured[1].arrival_s, live[1].arrival_s);
        // Two seconds more over four tasks.
        assert_eq!(super::task_excess_s(&live, &measured), 0.5);
    }

    #[test]
    fn sinfo_time_limits_read_as_minutes() {
        assert_eq!(limit_minutes("infinite"), Ok(None));
        assert_eq!(limit_minutes("30:00"), Ok(Some(30)));
        assert_eq!(limit_minutes("2:00:00"), Ok(Some(120)));
        assert_eq!(limit_minutes("1-00:00:00"), Ok(Some(1440)));
        assert_eq!(limit_minutes("0:59"), Ok(Some(0)));
        for bad in ["", "1h", "1-", "1:2:3:4", "x-1:00"] {
            assert!(limit_minutes(bad).is_err(), "{bad:?}");
        }
    }
}
