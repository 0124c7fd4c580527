//! `jobcast bench federation`: one workload of Slurm jobs on two or more
//! real clusters, run three ways:
//!
//! - `random`: a cluster drawn with `--seed`;
//! - `time_limit`: the cluster where Slurm expects the job to start first,
//!   from the time limits of the jobs there: Slurm's multi-cluster
//!   submission, `sbatch -M` over every cluster, where the clusters keep
//!   their accounting in one slurmdbd (`scripts/slurm.sh`'s
//!   `JOBCAST_SLURM_DBD_PORT`); elsewhere the bench asks each cluster
//!   itself (`sbatch --test-only`) and submits to the earliest, the
//!   first cluster listed on a tie, as `-M` does;
//! - `jobcast`: `jobcast slurm submit`, which holds the job on the first
//!   cluster and moves it to the cluster jobcast expects to finish it
//!   first (`jobcast serve`, with one `slurm watch` per cluster on the
//!   embedded Kafka, having learnt the clusters' past), and one `slurm
//!   apply` per cluster, which starts each cluster's jobs in jobcast's
//!   queues; jobcast's ETAs count on that (`engine.eta.order =
//!   "queues"`). With `--choice-only` there is no applier: the clusters
//!   start their jobs in submission order, and the ETAs say so
//!   (`engine.eta.order = "submission"`).
//!
//! Each way runs the same jobs at the same arrivals, on idle clusters,
//! from the workload `bench slurm` draws: a trace's jobs (or the
//! generated default) as arrays of one-CPU `sleep`s, arrivals spread for
//! `--load` over all the clusters' CPUs. Users ask for more time than
//! their jobs need, as they do (the Parallel Workloads Archive's requests
//! are 2 to 7 times the runtime at the median): each job's time limit is
//! its longest task times a factor drawn log-uniformly in `[1,
//! --limit-factor]`, in Slurm's whole minutes, plus one, so that no job is
//! killed.
//!
//! A job's JCT is its last task's end less the moment the bench submitted
//! it, whichever way it went: the time `slurm submit` takes to hear from
//! jobcast counts against jobcast.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use jobcast_connectors::slurm::{check_cluster_files, parse_cluster};
use jobcast_predictor::decision::PolicyKind;
use jobcast_replay::workload::{SimJob, Workload};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::fifo::{self, FifoClusters};
use super::workload::{LiveJob, SlurmShape, past_jobs};
use super::{
    Drawn, LiveArgs, Placed, Run, SERVE_GROUP, TASK_MEM_MB, current_group, current_user,
    decisions_carried_out, default_partition, embedded_kafka, follow, median, sbatch_args,
    spawn_jobcast, stop_services, unix_now, wait_for_past, write_runtimes,
};

#[derive(clap::Args)]
pub struct FederationArgs {
    /// A cluster, as `NAME=SLURM_CONF` (its `slurm.conf`): two or more.
    /// `slurm submit` holds each job on the first.
    #[arg(long = "cluster", value_parser = parse_cluster, required = true)]
    clusters: Vec<(String, PathBuf)>,
    #[command(flatten)]
    live: LiveArgs,
    /// Time limits are the longest task times a factor up to this.
    #[arg(long, default_value_t = 8.0)]
    limit_factor: f64,
    /// The policy jobcast runs.
    #[arg(long, default_value_t = PolicyKind::ThreeSigma)]
    policy: PolicyKind,
    /// How often each `slurm watch` polls its cluster, seconds.
    #[arg(long, default_value_t = 0.5)]
    interval_secs: f64,
    /// How long `slurm submit` waits for jobcast's decision, seconds.
    #[arg(long, default_value_t = 30.0)]
    decision_timeout_secs: f64,
    /// jobcast only chooses each job's cluster: no `slurm apply`, so the
    /// clusters start their jobs in Slurm's own order, and jobcast's ETAs
    /// say so (`engine.eta.order = "submission"`). By default one `slurm
    /// apply` per cluster orders its jobs in jobcast's queues as well.
    #[arg(long)]
    choice_only: bool,
    /// Play the jobs in the model of the clusters only, submitting
    /// nothing: the model's averages in milliseconds, to find a workload
    /// with room for a better choice of cluster.
    #[arg(long)]
    pub(crate) model_only: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The ways a job's cluster is chosen, in the order they run.
const WAYS: [&str; 3] = ["random", "time_limit", "jobcast"];

/// One cluster of the run.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterRow {
    pub name: String,
    pub cpus: u32,
    pub partition: String,
}

/// One job, and where each way put it.
#[derive(Debug, Clone, Serialize)]
pub struct JobRow {
    pub tasks: usize,
    /// Its tasks' runtimes summed, s.
    pub work_s: f64,
    /// Seconds from the first job's arrival.
    pub arrival_s: f64,
    /// The time limit it asked for, minutes.
    pub limit_minutes: u64,
    /// By way: the cluster it ran on, and its JCT, s.
    pub cluster: BTreeMap<&'static str, String>,
    pub jct_s: BTreeMap<&'static str, f64>,
}

/// What one way measured.
#[derive(Debug, Clone, Serialize)]
pub struct WayRow {
    pub avg_jct_s: f64,
    pub p50_jct_s: f64,
    /// Jobs it sent to each cluster.
    pub placed: BTreeMap<String, usize>,
}

/// Average JCTs in the model of the clusters, s: the random way's
/// choices, the choice by time limits, and the choice a chooser that knew
/// every runtime would make.
#[derive(Debug, Clone, Serialize)]
pub struct ModelRow {
    pub random_avg_jct_s: f64,
    pub time_limit_avg_jct_s: f64,
    pub known_runtimes_avg_jct_s: f64,
    pub shortest_first_avg_jct_s: f64,
}

impl ModelRow {
    /// `live`'s jobs on clusters of `cpus`, the random way sending job `i`
    /// to `destinations[i]`, each job asking for `limits_minutes`.
    fn of(live: &[LiveJob], cpus: &[u32], destinations: &[usize], limits_minutes: &[u64]) -> Self {
        let jobs: Vec<fifo::Job> = live
            .iter()
            .zip(limits_minutes)
            .map(|(job, &minutes)| fifo::Job {
                arrival_s: job.arrival_s,
                runtimes_s: &job.runtimes_s,
                limit_s: minutes as f64 * 60.0,
            })
            .collect();
        let average = |choose: &dyn Fn(usize, &FifoClusters, &fifo::Job) -> usize| {
            fifo::average_jct_s(cpus, &jobs, choose)
        };
        ModelRow {
            random_avg_jct_s: average(&|i, _, _| destinations[i]),
            time_limit_avg_jct_s: average(&|_, m, j| fifo::least(m, |c| m.limit_start_s(c, j))),
            known_runtimes_avg_jct_s: average(&|_, m, j| fifo::least(m, |c| m.end_s(c, j))),
            shortest_first_avg_jct_s: fifo::shortest_first_avg_jct_s(cpus, &jobs),
        }
    }
}

impl std::fmt::Display for ModelRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "in a model of the clusters (every task its runtime, no latency): random {:.1} s, \
             time limits {:.1} s, every runtime known {:.1} s ({:.2}× the time limits'); \
             every runtime known and each cluster shortest job first {:.1} s ({:.2}×)",
            self.random_avg_jct_s,
            self.time_limit_avg_jct_s,
            self.known_runtimes_avg_jct_s,
            self.time_limit_avg_jct_s / self.known_runtimes_avg_jct_s,
            self.shortest_first_avg_jct_s,
            self.time_limit_avg_jct_s / self.shortest_first_avg_jct_s
        )
    }
}

/// `--model-only`'s report.
#[derive(Debug, Serialize)]
pub struct ModelReport {
    pub clusters: Vec<ClusterRow>,
    pub jobs: usize,
    pub tasks: usize,
    /// The last job's arrival, s from the first's: how long a live run
    /// of each way submits for.
    pub span_s: f64,
    pub limit_factor: f64,
    pub model: ModelRow,
}

impl std::fmt::Display for ModelReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} jobs ({} tasks) arriving over {:.0} s on {} clusters; time limits up to {}× the longest task",
            self.jobs,
            self.tasks,
            self.span_s,
            self.clusters.len(),
            self.limit_factor
        )?;
        writeln!(f, "{}", self.model)
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub clusters: Vec<ClusterRow>,
    pub jobs: usize,
    pub tasks: usize,
    pub policy: PolicyKind,
    pub limit_factor: f64,
    pub random_avg_jct_s: f64,
    pub random_p50_jct_s: f64,
    pub time_limit_avg_jct_s: f64,
    pub time_limit_p50_jct_s: f64,
    pub jobcast_avg_jct_s: f64,
    pub jobcast_p50_jct_s: f64,
    /// Whether jobcast ordered each cluster's jobs besides choosing their
    /// cluster (not with `--choice-only`).
    pub jobcast_orders: bool,
    /// Jobs whose place in their cluster's queue a `slurm apply` changed
    /// for one of jobcast's decisions (none with `--choice-only`).
    pub jobcast_ordered_jobs: usize,
    /// How the time-limit way chose: `sbatch -M`, or `sbatch --test-only`
    /// on each cluster where they share no slurmdbd.
    pub time_limit_by: &'static str,
    /// The time-limit way's average JCT over jobcast's (the goal:
    /// 1.3 or more).
    pub jobcast_speedup_vs_time_limit: f64,
    pub jobcast_speedup_vs_random: f64,
    /// Jobs `slurm submit` heard no decision for in time: left on the
    /// first cluster.
    pub jobcast_undecided: usize,
    /// The median time `slurm submit` took to place a job, s: its hold,
    /// jobcast's decision and the move, all in its JCT.
    pub jobcast_submit_p50_s: f64,
    pub ways: BTreeMap<&'static str, WayRow>,
    /// The same jobs in a model of the clusters ([`fifo`]), where every
    /// task takes its runtime and nothing takes time but the tasks.
    pub model: ModelRow,
    /// Every job, in arrival order.
    pub per_job: Vec<JobRow>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let clusters: Vec<String> = self
            .clusters
            .iter()
            .map(|c| format!("{} ({} CPUs)", c.name, c.cpus))
            .collect();
        writeln!(
            f,
            "{} jobs ({} tasks) on {}; time limits up to {}× the longest task, chosen by {}; jobcast runs {}{}",
            self.jobs,
            self.tasks,
            clusters.join(", "),
            self.limit_factor,
            self.time_limit_by,
            self.policy,
            if self.jobcast_orders {
                ", choosing each job's cluster and ordering each cluster's jobs"
            } else {
                ", choosing each job's cluster"
            }
        )?;
        writeln!(
            f,
            "{:<12} {:>12} {:>12}  placed",
            "way", "avg JCT s", "P50 JCT s"
        )?;
        for way in WAYS {
            let row = &self.ways[way];
            let placed: Vec<String> = row.placed.iter().map(|(c, n)| format!("{c} {n}")).collect();
            writeln!(
                f,
                "{way:<12} {:>12.1} {:>12.1}  {}",
                row.avg_jct_s,
                row.p50_jct_s,
                placed.join(", ")
            )?;
        }
        writeln!(f, "{}", self.model)?;
        writeln!(
            f,
            "jobcast: {:.2}× the time-limit choice's average JCT, {:.2}× the random one's; \
             a submission took {:.1} s at the median; {} jobs without a decision in time{}",
            self.jobcast_speedup_vs_time_limit,
            self.jobcast_speedup_vs_random,
            self.jobcast_submit_p50_s,
            self.jobcast_undecided,
            if self.jobcast_orders {
                format!(
                    "; {} jobs moved in their cluster's queue",
                    self.jobcast_ordered_jobs
                )
            } else {
                String::new()
            }
        )
    }
}

/// One cluster as the bench drives it.
struct Cluster {
    name: String,
    conf: PathBuf,
    cpus: u32,
    partition: String,
}

impl Cluster {
    /// As the report lists it.
    fn row(&self) -> ClusterRow {
        ClusterRow {
            name: self.name.clone(),
            cpus: self.cpus,
            partition: self.partition.clone(),
        }
    }

    /// Run a Slurm command on this cluster.
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.env("SLURM_CONF", &self.conf);
        command
    }

    /// Its `squeue --json`.
    fn squeue(&self) -> Vec<String> {
        vec![
            "env".into(),
            format!("SLURM_CONF={}", self.conf.display()),
            "squeue".into(),
            "--json".into(),
        ]
    }

    /// When Slurm expects a job of `args` to start here (`sbatch
    /// --test-only`), as it prints it: local time, so comparable across
    /// the clusters of one machine.
    fn expected_start(&self, args: &[String]) -> anyhow::Result<chrono::NaiveDateTime> {
        let out = self
            .command("sbatch")
            .arg("--test-only")
            .args(args)
            .output()
            .context("sbatch --test-only")?;
        // `sbatch: Job 12 to start at 2026-11-30T11:15:03 using 1
        // processors on nodes node1 in partition debug`, on stderr.
        let text = String::from_utf8_lossy(&out.stderr);
        let at = text
            .split_once("to start at ")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .with_context(|| {
                format!(
                    "{}: sbatch --test-only printed {:?}",
                    self.name,
                    text.trim()
                )
            })?;
        chrono::NaiveDateTime::parse_from_str(at, "%Y-%m-%dT%H:%M:%S")
            .with_context(|| format!("{}: {at:?} is not a start time", self.name))
    }

    /// Submit a job of `args` here; its Slurm job id.
    fn sbatch(&self, args: &[String]) -> anyhow::Result<u64> {
        self.submit(&[], args).map(|(id, _)| id)
    }

    /// Submit a job of `args` from here, `before` its arguments: its Slurm
    /// job id, and the cluster Slurm names when it chose one (`-M`).
    fn submit(&self, before: &[String], args: &[String]) -> anyhow::Result<(u64, Option<String>)> {
        let out = self
            .command("sbatch")
            .arg("--parsable")
            .args(before)
            .args(args)
            .output()
            .context("sbatch")?;
        if !out.status.success() {
            bail!(
                "{}: sbatch: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        // `12` or, under `-M`, `12;east`.
        let text = String::from_utf8_lossy(&out.stdout);
        let mut fields = text.trim().split(';');
        let id = fields
            .next()
            .and_then(|id| id.parse().ok())
            .with_context(|| format!("{}: sbatch --parsable printed {text:?}", self.name))?;
        Ok((id, fields.next().map(str::to_owned)))
    }

    /// The clusters this one's slurmdbd knows (`sacctmgr list cluster`);
    /// none without accounting.
    fn federated_with(&self) -> Vec<String> {
        self.command("sacctmgr")
            .args(["-n", "-P", "list", "cluster", "format=cluster"])
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| {
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .map(|l| l.trim().to_owned())
                    .filter(|l| !l.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// What every way of a run shares: the clusters, the workload drawn for
/// them, each job's time limit (minutes) and the random way's cluster.
struct Prepared {
    clusters: Vec<Cluster>,
    workload: Workload,
    live: Vec<LiveJob>,
    limits: Vec<u64>,
    destinations: Vec<usize>,
}

/// The run `args` asks for, checked, on the clusters as `sinfo` shows them.
fn prepare(args: &FederationArgs) -> anyhow::Result<Prepared> {
    if args.clusters.len() < 2 {
        bail!("--cluster: two or more clusters, each NAME=SLURM_CONF");
    }
    args.live.check()?;
    if !(args.decision_timeout_secs.is_finite() && args.decision_timeout_secs > 0.0) {
        bail!(
            "--decision-timeout-secs {}: must be positive",
            args.decision_timeout_secs
        );
    }
    if !(args.limit_factor.is_finite() && args.limit_factor >= 1.0) {
        bail!("--limit-factor {}: must be 1 or more", args.limit_factor);
    }
    check_cluster_files(&args.clusters).map_err(anyhow::Error::msg)?;
    let mut clusters = Vec::new();
    for (name, conf) in &args.clusters {
        let partition = default_partition(Some(conf)).with_context(|| format!("cluster {name}"))?;
        clusters.push(Cluster {
            name: name.clone(),
            conf: conf.clone(),
            cpus: partition.cpus,
            partition: partition.name,
        });
    }
    let cpus: u32 = clusters.iter().map(|c| c.cpus).sum();
    let Drawn { workload, live } = args.live.draw(cpus)?;
    let mut rng = ChaCha8Rng::seed_from_u64(args.live.seed);
    let limits: Vec<u64> = live
        .iter()
        .map(|job| {
            let longest = job.runtimes_s.iter().copied().fold(0.0, f64::max);
            let factor = (rng.random::<f64>() * args.limit_factor.ln()).exp();
            (longest * factor / 60.0).ceil() as u64 + 1
        })
        .collect();
    let destinations: Vec<usize> = live
        .iter()
        .map(|_| rng.random_range(0..clusters.len()))
        .collect();
    Ok(Prepared {
        clusters,
        workload,
        live,
        limits,
        destinations,
    })
}

/// `bench federation --model-only`: the run's jobs in the model of the
/// clusters alone, nothing submitted.
pub fn model(args: &FederationArgs) -> anyhow::Result<ModelReport> {
    let run = prepare(args)?;
    let cpus: Vec<u32> = run.clusters.iter().map(|c| c.cpus).collect();
    Ok(ModelReport {
        clusters: run.clusters.iter().map(Cluster::row).collect(),
        jobs: run.live.len(),
        tasks: run.live.iter().map(|j| j.runtimes_s.len()).sum(),
        span_s: run.live.last().map_or(0.0, |j| j.arrival_s),
        limit_factor: args.limit_factor,
        model: ModelRow::of(&run.live, &cpus, &run.destinations, &run.limits),
    })
}

pub fn federation(args: &FederationArgs) -> anyhow::Result<Report> {
    let Prepared {
        clusters,
        workload,
        live,
        limits,
        destinations,
    } = prepare(args)?;
    let sizes: Vec<u32> = clusters.iter().map(|c| c.cpus).collect();
    let cpus: u32 = sizes.iter().sum();
    // Every cluster's partition must be the first's, under one user: the
    // jobs' arguments are the same wherever they go.
    let shape = SlurmShape {
        user: current_user()?,
        group: current_group()?,
        partition: clusters[0].partition.clone(),
        mem_per_cpu_mb: TASK_MEM_MB,
        time_limit_minutes: limits.iter().copied().max().unwrap_or(1),
    };
    if let Some(other) = clusters.iter().find(|c| c.partition != shape.partition) {
        bail!(
            "cluster {} runs jobs in partition {}, cluster {} in {}: the bench needs one name",
            clusters[0].name,
            shape.partition,
            other.name,
            other.partition
        );
    }
    let tasks: usize = live.iter().map(|j| j.runtimes_s.len()).sum();
    eprintln!(
        "jobcast bench federation: {} jobs, {tasks} tasks, over {:.0} s on {} clusters of {cpus} CPUs in all",
        live.len(),
        live.last().map_or(0.0, |j| j.arrival_s),
        clusters.len()
    );
    let dir = tempfile::tempdir().context("creating the run's directory")?;
    write_runtimes(dir.path(), &live)?;
    // The same arguments whatever the way; each job's own time limit.
    let job_args: Vec<Vec<String>> = live
        .iter()
        .enumerate()
        .map(|(i, job)| {
            let shape = SlurmShape {
                time_limit_minutes: limits[i],
                ..shape.clone()
            };
            sbatch_args(dir.path(), i, job, &shape)
        })
        .collect();

    // Slurm chooses the cluster itself where every cluster keeps its
    // accounting in the first's slurmdbd.
    let known = clusters[0].federated_with();
    let multi_cluster = clusters.iter().all(|c| known.contains(&c.name));
    let names = clusters
        .iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let by_slurm = vec!["-M".to_owned(), names.clone()];
    let mut rows = BTreeMap::new();
    let (mut undecided, mut submit_p50_s, mut ordered_jobs) = (0, 0.0, 0);
    let mut per_job: Vec<JobRow> = live
        .iter()
        .zip(&limits)
        .map(|(job, &limit_minutes)| JobRow {
            tasks: job.runtimes_s.len(),
            work_s: job.runtimes_s.iter().sum(),
            arrival_s: job.arrival_s,
            limit_minutes,
            cluster: BTreeMap::new(),
            jct_s: BTreeMap::new(),
        })
        .collect();
    for way in WAYS {
        let run = match way {
            "random" => run(way, &live, &clusters, |i| {
                let to = destinations[i];
                Ok(Placed::now(to, clusters[to].sbatch(&job_args[i])?))
            })?,
            "time_limit" if multi_cluster => run(way, &live, &clusters, |i| {
                let (id, chosen) = clusters[0].submit(&by_slurm, &job_args[i])?;
                let to = chosen
                    .and_then(|name| clusters.iter().position(|c| c.name == name))
                    .with_context(|| format!("sbatch -M named no cluster of {names}"))?;
                Ok(Placed::now(to, id))
            })?,
            "time_limit" => run(way, &live, &clusters, |i| {
                let mut best: Option<(chrono::NaiveDateTime, usize)> = None;
                for (c, cluster) in clusters.iter().enumerate() {
                    let at = cluster.expected_start(&job_args[i])?;
                    if best.is_none_or(|(b, _)| at < b) {
                        best = Some((at, c));
                    }
                }
                let to = best.expect("two or more clusters").1;
                Ok(Placed::now(to, clusters[to].sbatch(&job_args[i])?))
            })?,
            _ => {
                let (run, ordered) = with_jobcast(
                    args,
                    &clusters,
                    &live,
                    &workload.training,
                    &shape,
                    &job_args,
                )?;
                ordered_jobs = ordered;
                run
            }
        };
        let jcts = run.observed.jcts_from_submission();
        for (&i, &c) in &run.placed {
            per_job[i].cluster.insert(way, clusters[c].name.clone());
        }
        for (&i, &jct) in &jcts {
            per_job[i].jct_s.insert(way, jct);
        }
        let values: Vec<f64> = jcts.values().copied().collect();
        if values.len() != live.len() {
            bail!("{way}: {} of {} jobs ended", values.len(), live.len());
        }
        let avg = values.iter().sum::<f64>() / values.len() as f64;
        let p50 = median(values).expect("jobs ended");
        let mut by_cluster: BTreeMap<String, usize> =
            clusters.iter().map(|c| (c.name.clone(), 0)).collect();
        for &c in run.placed.values() {
            *by_cluster.get_mut(&clusters[c].name).expect("listed") += 1;
        }
        if way == "jobcast" {
            undecided = run.undecided;
            submit_p50_s = run.submit_p50_s;
        }
        rows.insert(
            way,
            WayRow {
                avg_jct_s: avg,
                p50_jct_s: p50,
                placed: by_cluster,
            },
        );
    }
    let model = ModelRow::of(&live, &sizes, &destinations, &limits);
    let avg = |way: &str| rows[way].avg_jct_s;
    let p50 = |way: &str| rows[way].p50_jct_s;
    Ok(Report {
        clusters: clusters.iter().map(Cluster::row).collect(),
        jobs: live.len(),
        tasks,
        policy: args.policy,
        limit_factor: args.limit_factor,
        random_avg_jct_s: avg("random"),
        random_p50_jct_s: p50("random"),
        time_limit_avg_jct_s: avg("time_limit"),
        time_limit_p50_jct_s: p50("time_limit"),
        jobcast_avg_jct_s: avg("jobcast"),
        jobcast_p50_jct_s: p50("jobcast"),
        jobcast_orders: !args.choice_only,
        jobcast_ordered_jobs: ordered_jobs,
        time_limit_by: if multi_cluster {
            "sbatch -M"
        } else {
            "sbatch --test-only"
        },
        jobcast_speedup_vs_time_limit: avg("time_limit") / avg("jobcast"),
        jobcast_speedup_vs_random: avg("random") / avg("jobcast"),
        jobcast_undecided: undecided,
        jobcast_submit_p50_s: submit_p50_s,
        ways: rows,
        model,
        per_job,
    })
}

/// Run `live` on `clusters` from idle, each job placed by `place` (its
/// index) at its arrival.
fn run(
    way: &str,
    live: &[LiveJob],
    clusters: &[Cluster],
    place: impl Fn(usize) -> anyhow::Result<Placed>,
) -> anyhow::Result<Run> {
    follow(way, live, &queues(clusters), |i, done| {
        done.send((i, place(i)))
            .map_err(|_| anyhow::anyhow!("the run stopped"))
    })
}

/// Each cluster's name and `squeue --json`.
fn queues(clusters: &[Cluster]) -> Vec<(String, Vec<String>)> {
    clusters
        .iter()
        .map(|c| (c.name.clone(), c.squeue()))
        .collect()
}

/// The jobcast way: the clusters' past published for `jobcast serve` to
/// learn (each past job on a cluster in turn, so that every cluster is
/// known before the first live job), one `slurm watch` per cluster, and
/// each job submitted by `jobcast slurm submit` from a thread of its own;
/// unless `--choice-only`, one `slurm apply` per cluster as well. The run,
/// and the jobs the appliers moved.
fn with_jobcast(
    args: &FederationArgs,
    clusters: &[Cluster],
    live: &[LiveJob],
    history: &[SimJob],
    shape: &SlurmShape,
    job_args: &[Vec<String>],
) -> anyhow::Result<(Run, usize)> {
    let scale = args.live.scale();
    let span_us = past_jobs(history, &scale, shape, 0)
        .iter()
        .map(SimJob::end_us)
        .max()
        .unwrap_or(0);
    let now_us = (unix_now() * 1e6) as u64;
    let past: Vec<SimJob> = past_jobs(history, &scale, shape, now_us.saturating_sub(span_us))
        .into_iter()
        .enumerate()
        .map(|(i, job)| {
            let mut submitted = job.job().clone();
            submitted.cluster = clusters[i % clusters.len()].name.clone();
            SimJob::new(submitted, job.runtimes_us().to_vec(), job.end_us())
                .expect("the same job under another cluster")
        })
        .collect();
    // The embedded broker lives as long as `_mock`.
    let (_mock, _, settings) = embedded_kafka(&past)?;
    let dir = tempfile::tempdir().context("creating the services' directory")?;
    let services = start_services(args, &settings.brokers, dir.path(), clusters)?;
    let run = (|| {
        wait_for_past(&settings)?;
        let url = serve_url(dir.path())?;
        let jobcast = std::env::current_exe().context("finding the jobcast binary")?;
        let cluster_flags: Vec<String> = clusters
            .iter()
            .flat_map(|c| {
                [
                    "--cluster".to_owned(),
                    format!("{}={}", c.name, c.conf.display()),
                ]
            })
            .collect();
        let timeout = args.decision_timeout_secs.to_string();
        follow("jobcast", live, &queues(clusters), |i, done| {
            let mut command = Command::new(&jobcast);
            command
                .args([
                    "slurm",
                    "submit",
                    "--jobcast",
                    &url,
                    "--timeout-secs",
                    &timeout,
                    "--json",
                ])
                .args(&cluster_flags)
                .arg("--")
                .args(&job_args[i]);
            let done = done.clone();
            let names: Vec<String> = clusters.iter().map(|c| c.name.clone()).collect();
            std::thread::spawn(move || {
                let placed = submitted(command, &names);
                let _ = done.send((i, placed));
            });
            Ok(())
        })
    })();
    stop_services(dir.path(), services)?;
    Ok((run?, ordered_jobs(args, dir.path(), clusters)?))
}

/// The jobs for which a cluster's `slurm apply` (its actions, JSON lines
/// in `apply-NAME.jsonl` under `dir`) carried out one of jobcast's
/// decisions; none where jobcast only chose the clusters.
fn ordered_jobs(args: &FederationArgs, dir: &Path, clusters: &[Cluster]) -> anyhow::Result<usize> {
    if args.choice_only {
        return Ok(0);
    }
    let mut jobs = std::collections::BTreeSet::new();
    for cluster in clusters {
        let path = dir.join(format!("apply-{}.jsonl", cluster.name));
        for (job, _) in decisions_carried_out(&path)? {
            jobs.insert((cluster.name.as_str(), job));
        }
    }
    Ok(jobs.len())
}

/// Where `jobcast slurm submit` put a job, from its JSON.
fn submitted(mut command: Command, clusters: &[String]) -> anyhow::Result<Placed> {
    let started = Instant::now();
    let out = command.output().context("jobcast slurm submit")?;
    let took_s = started.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "jobcast slurm submit: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "slurm submit printed {:?}",
            String::from_utf8_lossy(&out.stdout)
        )
    })?;
    let name = v["cluster"]
        .as_str()
        .context("slurm submit named no cluster")?;
    Ok(Placed {
        cluster: clusters
            .iter()
            .position(|c| c == name)
            .with_context(|| format!("slurm submit chose {name}, not a cluster of the run"))?,
        job_id: v["job_id"]
            .as_u64()
            .context("slurm submit gave no job id")?,
        decided: v["completions"].as_array().is_some_and(|c| !c.is_empty()),
        took_s,
    })
}

/// The URL `jobcast serve` answers at, once its log names it.
fn serve_url(dir: &Path) -> anyhow::Result<String> {
    let started = Instant::now();
    loop {
        let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
        if let Some(url) = log.lines().find_map(|l| {
            l.split_once("jobcast serve: HTTP on ")
                .map(|(_, u)| u.trim().to_owned())
        }) {
            return Ok(url);
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!(
                "jobcast serve named no HTTP address in 60 s: {}",
                log.trim()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `jobcast serve` and one `slurm watch` per cluster on the embedded
/// Kafka, each with its state and its log (`NAME.log`) under `dir`; the
/// watchers follow only the jobs submitted from now on (the clusters
/// still list the other ways' jobs).
fn start_services(
    args: &FederationArgs,
    brokers: &str,
    dir: &Path,
    clusters: &[Cluster],
) -> anyhow::Result<Vec<(String, Child)>> {
    let since = jobcast_storage::state::unix_seconds().to_string();
    let interval = args.interval_secs.to_string();
    let slots = format!(
        "engine.eta.slots={}",
        clusters.iter().map(|c| c.cpus).max().unwrap_or(1)
    );
    let mut commands: Vec<(String, Option<&Path>, Vec<String>)> = vec![(
        "serve".into(),
        None,
        vec![
            "serve".into(),
            "--brokers".into(),
            brokers.into(),
            "--group".into(),
            SERVE_GROUP.into(),
            "--policy".into(),
            args.policy.name().into(),
            "--data-dir".into(),
            dir.join("serve").display().to_string(),
            "--http".into(),
            "127.0.0.1:0".into(),
            "--set".into(),
            slots,
            "--set".into(),
            format!(
                "engine.queues.q0_upper_us={}",
                args.live.scale().queues().q0_upper_us
            ),
            // With `--choice-only` the clusters start their jobs in Slurm's
            // own order: jobcast chooses their cluster, not their turn.
            "--set".into(),
            format!(
                "engine.eta.order={}",
                if args.choice_only {
                    "submission"
                } else {
                    "queues"
                }
            ),
        ],
    )];
    // Each cluster's watcher, following only this run's jobs, and (unless
    // `--choice-only`) its applier, each with its state under `dir`.
    for cluster in clusters {
        let mut steps = vec![(
            "watch",
            vec!["--fresh".to_owned(), "--since".into(), since.clone()],
        )];
        if !args.choice_only {
            steps.push(("apply", Vec::new()));
        }
        for (step, flags) in steps {
            let name = format!("{step}-{}", cluster.name);
            let mut command: Vec<String> = vec![
                "slurm".into(),
                step.into(),
                "--brokers".into(),
                brokers.into(),
                "--interval-secs".into(),
                interval.clone(),
                "--state".into(),
                dir.join(format!("{name}.json")).display().to_string(),
            ];
            command.extend(flags);
            commands.push((name, Some(&cluster.conf), command));
        }
    }
    let mut children = Vec::new();
    for (name, conf, command) in commands {
        // An applier's actions (JSON lines) say which jobs it moved.
        let stdout = if name.starts_with("apply-") {
            let path = dir.join(format!("{name}.jsonl"));
            Some(Stdio::from(
                std::fs::File::create(&path)
                    .with_context(|| format!("creating {}", path.display()))?,
            ))
        } else {
            None
        };
        let child = spawn_jobcast(dir, &name, &command, conf, stdout)?;
        children.push((name, child));
    }
    Ok(children)
}
