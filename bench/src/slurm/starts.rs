//! `jobcast bench slurm-starts`: "when will my job start?" on the local
//! Slurm cluster, answered by Slurm (`squeue --start`, its backfill
//! scheduler's plan on the time limits) and by jobcast (the start estimate
//! of its first decision: the same backfilling played forward on its
//! predicted runtimes, `engine.starts`), both scored against the start
//! Slurm then gave each job that had to wait.
//!
//! The jobs are an HPC log's (`--format swf`): a window of `--jobs` of
//! them, after `--history` jobs the service learns first as the site's
//! past (their finished events, in the shape `slurm watch` gives). Each
//! job runs as one `sleep` of its logged runtime, asking for its logged
//! request, both times `--time-scale` (the request in whole minutes, as
//! Slurm takes it), on its processors scaled from the log's machine to the
//! node's CPUs; its name is the log's user and application, which the
//! service's `hpc` policy keys on with the request and processors.
//! Arrivals keep the log's order and spacing, compressed so that the
//! offered load on the node is `--load`: queues form, and most jobs wait.
//!
//! jobcast runs `serve --policy hpc` with
//! `engine.starts.backfill=conservative` (Slurm's backfill plugin plans a
//! start for every pending job it tests) and `engine.starts.cpus` the
//! node's, beside one `slurm watch`; Slurm schedules alone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use jobcast_ingest::Format;
use jobcast_ingest::event::JobSubmitted;
use jobcast_predictor::decision::Start;
use jobcast_predictor::stats::percentile;
use jobcast_replay::hpc::backfill::{HpcJob, Workload};
use jobcast_replay::workload::SimJob;
use serde::Serialize;

use super::workload::LiveJob;
use super::{
    Placed, current_group, current_user, default_partition, embedded_kafka, follow, read_decisions,
    sbatch_parsable, spawn_jobcast, stop_services, unix_now, wait_for_past,
};

#[derive(clap::Args)]
pub struct StartsArgs {
    /// An HPC log of the Parallel Workloads Archive (SWF).
    #[arg(long)]
    trace: PathBuf,
    /// Jobs to run on the cluster.
    #[arg(long, default_value_t = 30)]
    jobs: usize,
    /// Jobs before them whose completed ones the service learns first, as
    /// the site's past (a job the log records as failed, killed or lost
    /// teaches no runtime).
    #[arg(long, default_value_t = 2000)]
    history: usize,
    /// Log jobs to pass over before the history.
    #[arg(long, default_value_t = 0)]
    skip: usize,
    /// Live seconds per log second, of runtimes and requests.
    #[arg(long, default_value_t = 0.01)]
    time_scale: f64,
    /// The offered load on the node's CPUs: the live jobs' work over their
    /// arrivals' span and the CPUs.
    #[arg(long, default_value_t = 1.5)]
    load: f64,
    /// Leave out of the live jobs those that would run longer than this,
    /// live seconds (the next of the log's jobs take their place): a
    /// bound on the run's length.
    #[arg(long)]
    max_runtime_secs: Option<f64>,
    /// Seconds between the watcher's polls.
    #[arg(long, default_value_t = 0.5, value_parser = jobcast_connectors::parse_interval)]
    interval_secs: f64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Serialize)]
pub struct Report {
    trace: String,
    jobs: usize,
    cpus: u32,
    /// Past jobs the service learnt before the run.
    history_jobs: usize,
    /// Jobs still pending when `squeue --start` first answered for them
    /// with a time, and given a start by jobcast's first decision: the
    /// jobs scored.
    waited: usize,
    /// Over them: the median |answer − actual start|, s, and the share
    /// within a minute, for jobcast and for `squeue --start`.
    jobcast_p50_error_s: Option<f64>,
    jobcast_within_60s_pct: Option<f64>,
    squeue_p50_error_s: Option<f64>,
    squeue_within_60s_pct: Option<f64>,
    /// `squeue_p50_error_s` over `jobcast_p50_error_s`.
    ratio: Option<f64>,
    /// The share that started by jobcast's late end (its P90 projection).
    jobcast_by_p90_pct: Option<f64>,
    /// Each live job (JSON only).
    #[serde(rename = "per_job")]
    rows: Vec<StartRow>,
}

/// One live job: when it was submitted and started, and both answers.
#[derive(Debug, Serialize)]
struct StartRow {
    log_job_id: u64,
    name: String,
    cpus: u32,
    limit_minutes: u64,
    runtime_s: f64,
    slurm_job_id: Option<u64>,
    submitted_unix_s: Option<u64>,
    started_unix_s: Option<u64>,
    /// `squeue --start`'s first time for it while pending, Unix s.
    squeue_start_unix_s: Option<u64>,
    /// jobcast's first decision's start, Unix s: on the medians and P90s.
    jobcast_start_unix_s: Option<f64>,
    jobcast_start_p90_unix_s: Option<f64>,
}

/// The past jobs' ids start here, clear of the ids Slurm gives the live
/// ones: a decision is found by its job's id.
const PAST_IDS: u64 = 1 << 40;

/// A log job as it runs on the node.
struct Shaped {
    log: HpcJob,
    name: String,
    cpus: u32,
    limit_minutes: u64,
    runtime_s: f64,
}

impl StartsArgs {
    fn check(&self) -> anyhow::Result<()> {
        let max = self.max_runtime_secs.unwrap_or(1.0);
        for (flag, value) in [
            ("--time-scale", self.time_scale),
            ("--load", self.load),
            ("--max-runtime-secs", max),
        ] {
            if !(value.is_finite() && value > 0.0) {
                bail!("{flag} {value}: must be positive");
            }
        }
        if self.jobs == 0 {
            bail!("--jobs 0: nothing to run");
        }
        Ok(())
    }

    /// `job` of a log whose machine has `procs` processors, on `cpus`.
    fn shape(&self, job: &HpcJob, procs: u32, cpus: u32) -> Shaped {
        let scaled = (f64::from(job.procs) * f64::from(cpus) / f64::from(procs)).ceil();
        let request_s = job.job.time_limit_us.map_or(86_400.0, |us| us as f64 / 1e6);
        let limit_minutes = ((request_s * self.time_scale) / 60.0).ceil().max(1.0) as u64;
        let runtime_s = (job.runtime_us as f64 / 1e6 * self.time_scale)
            .round()
            .clamp(1.0, (limit_minutes * 60) as f64);
        Shaped {
            name: match job.job.logical_name.as_str() {
                "" => job.job.user.clone(),
                app => format!("{}.{app}", job.job.user),
            },
            cpus: (scaled as u32).clamp(1, cpus),
            limit_minutes,
            runtime_s,
            log: job.clone(),
        }
    }
}

/// The job `s` as `slurm watch` would report it, submitted at `time_us`
/// by `user` of `group` in `partition`.
fn submitted(
    s: &Shaped,
    job_id: u64,
    time_us: u64,
    (user, group): (&str, &str),
    partition: &str,
) -> JobSubmitted {
    JobSubmitted {
        user: user.to_owned(),
        group: group.to_owned(),
        job_name: s.name.clone(),
        logical_name: s.name.clone(),
        cpu_request: f64::from(s.cpus),
        partition: partition.to_owned(),
        time_limit_us: Some(s.limit_minutes * 60_000_000),
        ..JobSubmitted::new(job_id, time_us, 1)
    }
}

pub fn starts(args: &StartsArgs) -> anyhow::Result<Report> {
    args.check()?;
    let partition = default_partition(None)?;
    let cpus = partition.cpus;
    let trace = jobcast_ingest::open(Format::Swf, &args.trace)
        .with_context(|| format!("opening {}", args.trace.display()))?;
    let mut failed = None;
    let workload =
        Workload::from_events(trace.map_while(|item| item.map_err(|e| failed = Some(e)).ok()));
    if let Some(e) = failed {
        return Err(e).with_context(|| format!("reading {}", args.trace.display()));
    }
    let workload = workload
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("reading {}", args.trace.display()))?;
    let mut shaped = workload
        .jobs
        .iter()
        .skip(args.skip)
        .map(|j| args.shape(j, workload.procs, cpus));
    let past: Vec<Shaped> = shaped.by_ref().take(args.history).collect();
    let live: Vec<Shaped> = shaped
        .filter(|s| args.max_runtime_secs.is_none_or(|max| s.runtime_s <= max))
        .take(args.jobs)
        .collect();
    if past.len() < args.history || live.len() < args.jobs {
        bail!(
            "{}: {} jobs ran, too few for --skip {}, --history {} and --jobs {}{}",
            args.trace.display(),
            workload.jobs.len(),
            args.skip,
            args.history,
            args.jobs,
            args.max_runtime_secs
                .map_or(String::new(), |max| format!(" of at most {max} s"))
        );
    }
    let (user, group) = (current_user()?, current_group()?);

    // The past: the completed jobs, one after another in the log's order
    // and spacing (scaled), ending now.
    let first_us = past.first().map_or(0, |s| s.log.job.time_us);
    let scaled_us = |s: &Shaped| {
        ((s.log.job.time_us - first_us) as f64 * args.time_scale).round() as u64
            + (s.runtime_s * 1e6) as u64
    };
    let span_us = past.iter().map(scaled_us).max().unwrap_or(0);
    let origin_us = (unix_now() * 1e6) as u64 - span_us - 1_000_000;
    let past_jobs: Vec<SimJob> = past
        .iter()
        .filter(|s| s.log.completed)
        .enumerate()
        .map(|(i, s)| {
            let at = origin_us
                + ((s.log.job.time_us - first_us) as f64 * args.time_scale).round() as u64;
            let runtime_us = (s.runtime_s * 1e6) as u64;
            let job = submitted(s, PAST_IDS + i as u64, at, (&user, &group), &partition.name);
            SimJob::new(job, vec![runtime_us], at + runtime_us)
                .map_err(|e| anyhow::anyhow!("past job {}: {e}", s.log.job.job_id))
        })
        .collect::<anyhow::Result<_>>()?;

    // The live jobs' arrivals: the log's spacing, compressed to `--load`.
    let work: f64 = live.iter().map(|s| s.runtime_s * f64::from(s.cpus)).sum();
    let live_first = live[0].log.job.time_us;
    let log_span_s = (live.last().expect("jobs > 0").log.job.time_us - live_first) as f64 / 1e6;
    let per_log_s = if log_span_s > 0.0 {
        work / (args.load * f64::from(cpus)) / log_span_s
    } else {
        0.0
    };
    let runs: Vec<LiveJob> = live
        .iter()
        .map(|s| {
            let at = (s.log.job.time_us - live_first) as f64 / 1e6 * per_log_s;
            let job = submitted(s, s.log.job.job_id, 0, (&user, &group), &partition.name);
            Ok(LiveJob {
                job: SimJob::new(job, vec![(s.runtime_s * 1e6) as u64], 0)
                    .map_err(|e| anyhow::anyhow!("job {}: {e}", s.log.job.job_id))?,
                id: s.log.job.job_id,
                arrival_s: at,
                runtimes_s: vec![s.runtime_s],
            })
        })
        .collect::<anyhow::Result<_>>()?;
    eprintln!(
        "jobcast bench slurm-starts: {} jobs of {} over {:.0} s on {cpus} CPUs, after {} past jobs",
        runs.len(),
        args.trace.display(),
        runs.last().map_or(0.0, |j| j.arrival_s),
        past_jobs.len()
    );

    let (mock, topics, settings) = embedded_kafka(&past_jobs)?;
    let dir = tempfile::tempdir().context("creating the run's directory")?;
    let services = start_services(args, &settings.brokers, dir.path(), cpus)?;
    // `squeue --start`'s answers, each polled from its job's own thread
    // (a poll takes up to `SQUEUE_START_WAIT`; submissions go on).
    let pollers: Mutex<Vec<Poller>> = Mutex::default();
    let result = wait_for_past(&settings).and_then(|()| {
        let queues = [(
            String::new(),
            vec!["squeue".to_owned(), "--json".to_owned()],
        )];
        follow("jobs", &runs, &queues, |i, done| {
            let id = sbatch(&live[i], &partition.name)?;
            done.send((i, Ok(Placed::now(0, id))))
                .map_err(|_| anyhow::anyhow!("the run stopped"))?;
            let poller = std::thread::spawn(move || Some((id, squeue_start(id)?)));
            pollers.lock().expect("not poisoned").push(poller);
            Ok(())
        })
    });
    let stopped = stop_services(dir.path(), services);
    let observed = result?.observed;
    stopped?;
    let answers: BTreeMap<u64, u64> = pollers
        .into_inner()
        .expect("not poisoned")
        .into_iter()
        .filter_map(|p| p.join().expect("a poller does not panic"))
        .collect();
    let decisions = read_decisions(&mock.bootstrap_servers(), &topics)?;

    let ids: BTreeMap<usize, u64> = observed.jobs.iter().map(|(&id, &i)| (i, id)).collect();
    let mut rows = Vec::new();
    let (mut jobcast_errors, mut squeue_errors, mut by_p90) = (Vec::new(), Vec::new(), 0);
    for (i, s) in live.iter().enumerate() {
        let slurm_job_id = ids.get(&i).copied();
        let task = slurm_job_id.and_then(|id| observed.tasks.get(&(id, 0)));
        let started = task.map(|t| t.start_time).filter(|&t| t > 0);
        let squeue = slurm_job_id.and_then(|id| answers.get(&id).copied());
        let start: Option<Start> = slurm_job_id
            .and_then(|id| decisions.first.get(&id))
            .and_then(|d| d.start);
        if let (Some(actual), Some(squeue), Some(start)) = (started, squeue, start) {
            let actual = actual as f64;
            jobcast_errors.push((start.p50_us as f64 / 1e6 - actual).abs());
            squeue_errors.push((squeue as f64 - actual).abs());
            by_p90 += usize::from(actual <= (start.p90_us as f64 / 1e6).ceil());
        }
        rows.push(StartRow {
            log_job_id: s.log.job.job_id,
            name: s.name.clone(),
            cpus: s.cpus,
            limit_minutes: s.limit_minutes,
            runtime_s: s.runtime_s,
            slurm_job_id,
            submitted_unix_s: task.map(|t| t.submit_time),
            started_unix_s: started,
            squeue_start_unix_s: squeue,
            jobcast_start_unix_s: start.map(|s| s.p50_us as f64 / 1e6),
            jobcast_start_p90_unix_s: start.map(|s| s.p90_us as f64 / 1e6),
        });
    }
    let waited = jobcast_errors.len();
    let p50 = |mut e: Vec<f64>| {
        e.sort_by(f64::total_cmp);
        percentile(&e, 50.0)
    };
    let within = |e: &[f64]| {
        (!e.is_empty())
            .then(|| e.iter().filter(|&&x| x <= 60.0).count() as f64 * 100.0 / e.len() as f64)
    };
    let (jobcast_within_60s_pct, squeue_within_60s_pct) =
        (within(&jobcast_errors), within(&squeue_errors));
    let (jobcast_p50_error_s, squeue_p50_error_s) = (p50(jobcast_errors), p50(squeue_errors));
    Ok(Report {
        trace: args.trace.display().to_string(),
        jobs: live.len(),
        cpus,
        history_jobs: past_jobs.len(),
        waited,
        jobcast_p50_error_s,
        jobcast_within_60s_pct,
        squeue_p50_error_s,
        squeue_within_60s_pct,
        ratio: squeue_p50_error_s
            .zip(jobcast_p50_error_s)
            .map(|(s, j)| s / j.max(1.0)),
        jobcast_by_p90_pct: (waited > 0).then(|| by_p90 as f64 * 100.0 / waited as f64),
        rows,
    })
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let opt = |v: Option<f64>| v.map_or_else(|| "-".into(), |x| format!("{x:.1}"));
        write!(
            f,
            "trace                    {}\njobs                     {} on {} CPUs, after {} past jobs\n\
             waited (scored)          {}\n\
             jobcast start error      P50 {} s, {} % within a minute, {} % started by its P90\n\
             squeue --start error     P50 {} s, {} % within a minute\n\
             squeue over jobcast      {}×\n",
            self.trace,
            self.jobs,
            self.cpus,
            self.history_jobs,
            self.waited,
            opt(self.jobcast_p50_error_s),
            opt(self.jobcast_within_60s_pct),
            opt(self.jobcast_by_p90_pct),
            opt(self.squeue_p50_error_s),
            opt(self.squeue_within_60s_pct),
            opt(self.ratio),
        )
    }
}

/// Submit `s` to `partition`: one `sleep` of its runtime on its CPUs,
/// asking for its time limit; its Slurm job id.
fn sbatch(s: &Shaped, partition: &str) -> anyhow::Result<u64> {
    sbatch_parsable([
        "-o".to_owned(),
        "/dev/null".to_owned(),
        "-p".to_owned(),
        partition.to_owned(),
        "-n".to_owned(),
        "1".to_owned(),
        format!("--cpus-per-task={}", s.cpus),
        format!("--mem-per-cpu={}", super::TASK_MEM_MB),
        format!("--time={}", s.limit_minutes),
        "-J".to_owned(),
        s.name.clone(),
        "--chdir".to_owned(),
        "/tmp".to_owned(),
        "--wrap".to_owned(),
        format!("sleep {}", s.runtime_s),
    ])
}

/// The thread polling `squeue --start` for one job: its (Slurm id, first
/// time), if it gave one.
type Poller = std::thread::JoinHandle<Option<(u64, u64)>>;

/// How long a submission waits for `squeue --start` to give it a time.
const SQUEUE_START_WAIT: Duration = Duration::from_secs(15);

/// `squeue --start`'s first time (Unix s) for job `id` while it is
/// pending: none if it starts, or `squeue` gives none, within
/// [`SQUEUE_START_WAIT`]. Slurm's backfill scheduler sets it on its next
/// pass (`bf_interval`).
fn squeue_start(id: u64) -> Option<u64> {
    let started = Instant::now();
    while started.elapsed() < SQUEUE_START_WAIT {
        let out = Command::new("squeue")
            .args(["--start", "-h", "-j", &id.to_string(), "-o", "%T %S"])
            .env("SLURM_TIME_FORMAT", "%s")
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut fields = text.split_whitespace();
        match (fields.next(), fields.next()) {
            (Some("PENDING"), Some(at)) => {
                if let Ok(at) = at.parse::<u64>()
                    && at > 0
                {
                    return Some(at);
                }
            }
            // `--start` lists pending jobs only: gone from it, it started.
            (None, _) if out.status.success() => return None,
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

/// `jobcast serve --policy hpc` giving conservative start estimates on
/// the node's `cpus`, and `slurm watch`, on the embedded Kafka.
fn start_services(
    args: &StartsArgs,
    brokers: &str,
    dir: &Path,
    cpus: u32,
) -> anyhow::Result<Vec<(String, std::process::Child)>> {
    let since = jobcast_storage::state::unix_seconds().to_string();
    let serve: Vec<String> = [
        "serve",
        "--brokers",
        brokers,
        "--group",
        super::SERVE_GROUP,
        "--policy",
        "hpc",
        "--data-dir",
        &dir.join("serve").display().to_string(),
        "--http",
        "127.0.0.1:0",
        "--set",
        "engine.starts.backfill=conservative",
        "--set",
        &format!("engine.starts.cpus={cpus}"),
    ]
    .map(String::from)
    .to_vec();
    let watch: Vec<String> = [
        "slurm",
        "watch",
        "--brokers",
        brokers,
        "--interval-secs",
        &args.interval_secs.to_string(),
        "--state",
        &dir.join("watch.json").display().to_string(),
        "--fresh",
        "--since",
        &since,
    ]
    .map(String::from)
    .to_vec();
    let serve = spawn_jobcast(dir, "serve", &serve, None, None)?;
    let mut services = vec![("serve".to_owned(), serve)];
    match spawn_jobcast(dir, "watch", &watch, None, None) {
        Ok(watch) => services.push(("watch".to_owned(), watch)),
        Err(e) => {
            stop_services(dir, services)?;
            return Err(e);
        }
    }
    Ok(services)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> StartsArgs {
        StartsArgs {
            trace: PathBuf::from("log.swf"),
            jobs: 10,
            history: 100,
            skip: 0,
            time_scale: 0.01,
            load: 1.5,
            max_runtime_secs: None,
            interval_secs: 0.5,
            json: false,
        }
    }

    #[test]
    fn bad_flags_are_refused_by_name() {
        type Case = (fn(&mut StartsArgs), &'static str);
        let cases: [Case; 4] = [
            (|a| a.time_scale = 0.0, "--time-scale 0: must be positive"),
            (|a| a.load = f64::NAN, "--load NaN: must be positive"),
            (
                |a| a.max_runtime_secs = Some(-1.0),
                "--max-runtime-secs -1: must be positive",
            ),
            (|a| a.jobs = 0, "--jobs 0: nothing to run"),
        ];
        for (bad, said) in cases {
            let mut a = args();
            bad(&mut a);
            assert_eq!(a.check().unwrap_err().to_string(), said);
        }
        assert!(args().check().is_ok());
    }

    /// A log job on a node of 8 CPUs from a machine of 100: 30
    /// processors take 3 CPUs (rounded up); a 4-hour request at 0.01 is
    /// 144 s, asked as 3 minutes; 90 minutes run 54 s; the name is the
    /// user and application, or the user alone without one.
    #[test]
    fn a_log_job_is_shaped_to_the_node() {
        let mut job = JobSubmitted::new(7, 0, 1);
        job.user = "u3".into();
        job.logical_name = "app9".into();
        job.time_limit_us = Some(4 * 3_600_000_000);
        let log = HpcJob {
            job,
            procs: 30,
            runtime_us: 5_400_000_000,
            completed: true,
        };
        let s = args().shape(&log, 100, 8);
        assert_eq!(
            (s.name.as_str(), s.cpus, s.limit_minutes, s.runtime_s),
            ("u3.app9", 3, 3, 54.0)
        );
        let mut alone = log.clone();
        alone.job.logical_name.clear();
        alone.procs = 1000;
        let s = args().shape(&alone, 100, 8);
        assert_eq!((s.name.as_str(), s.cpus), ("u3", 8));
    }
}
