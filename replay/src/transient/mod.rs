//! CloudCoaster (Ogden and Guo, `../shared/papers/cloudcoaster-transient-scheduling.txt`)
//! as a downstream scheduler of the simulator: a hybrid cluster whose
//! short-job partition grows with cheap transient servers while long tasks
//! crowd it, with jobcast deciding which jobs are short, and the transient
//! servers preempted with lifetimes drawn from measured ones.
//!
//! # The cluster (Eagle's hybrid design, which CloudCoaster builds on)
//! `servers` on-demand servers run one task at a time, each with a queue;
//! `short_servers` of them form the short-only partition, the rest the
//! general partition. As in Eagle's simulator (`YH.tr` settings, SRPT and
//! sticky batch probing on), a free server runs the long task at the head
//! of its queue if there is one, and otherwise the entry of least remaining
//! estimated work (Shortest Remaining Processing Time: a short job's
//! estimated task runtime times its unstarted tasks; a long job's times
//! its unfinished tasks), the earlier on a tie.
//! - **Long jobs** go to the central scheduler, which binds each task to
//!   the general server with the least estimated work queued (the tasks'
//!   estimated runtimes, as Eagle's central scheduler counts them).
//! - **Short jobs** are placed by distributed schedulers: `probe_ratio`
//!   probes per task, and at least `min_probes` a job (Eagle's 2 and 20),
//!   to random servers, with late binding (a probe chosen to run takes the
//!   job's next unstarted task, or is dropped when there is none), Eagle's
//!   Succinct State Sharing (probes go to the short partition and to
//!   general servers holding no long task) and its sticky batch probing
//!   (the probe of a short task that ends goes back to its queue's head and
//!   competes again for the same job's next task).
//!
//! # CloudCoaster (§3)
//! `p` of the static short partition's `N` servers are replaced by a
//! dynamic partition of transient servers, at most `K = ⌊r⌋·N·p` of them
//! (the same money at price ratio `r`). After every long arrival and every
//! long task's end, the long-load ratio `l_r` (general servers holding a
//! long task over all servers) is held against the threshold by
//! [`coaster_hint`](jobcast_predictor::preemption::hints::coaster_hint):
//! above it transient servers are requested (up after the provisioning
//! delay), under it one is released, after draining its queue. At least one
//! probe of each short task goes to an on-demand server (§3.3), so a
//! preemption never strands a job.
//!
//! # Preemptions
//! The paper's servers live until released. Here each transient server's
//! lifetime, from the moment it is up, is drawn from the Kaplan–Meier
//! curve of measured preemptible VMs (`--lifetimes`); a preemption loses
//! the running task's work (it goes back to its job), drops the probes
//! queued there, and a job left with fewer probes than unstarted tasks
//! probes again. The one released is the one the fitted lifetime model
//! (the bathtub, or for spot VMs without a deadline the closest other
//! model) gives the highest chance of a preemption within the hour.
//!
//! # What is measured (§4)
//! The queueing delay of every short task (its last start less its job's
//! arrival), judged by the true class so that every run is judged on the
//! same tasks; the average JCT of short and long jobs (CloudCoaster
//! claims long jobs do not suffer); the transient servers' time-average
//! count and the short partition's cost saved against the `p·N` on-demand
//! servers they replace, as the paper's Table 1 computes it
//! (`(p·N − avg/r) / (p·N)`).

mod classes;
mod cluster;
mod partitions;

pub use classes::{Classifier, JobClass, Jobcast, Oracle, default_cutoff_us};

use jobcast_predictor::preemption::hints::CoasterConfig;
use jobcast_predictor::preemption::kaplan_meier::KaplanMeier;
use jobcast_predictor::preemption::models::LifetimeModel;
use jobcast_predictor::stats::percentile;
use serde::Serialize;

use crate::workload::SimJob;

/// The cluster and CloudCoaster's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TransientConfig {
    /// On-demand servers of the static cluster, short partition included.
    pub servers: u32,
    /// `N`: the static short-only partition.
    pub short_servers: u32,
    /// `p`: the share of `N` replaced by transient servers.
    pub replaced_fraction: f64,
    /// `r`: on-demand price over transient price.
    pub cost_ratio: f64,
    /// `l_r`'s threshold.
    pub threshold: f64,
    /// From a transient server's request to its first task, µs.
    pub provisioning_us: u64,
    /// Probes per short task.
    pub probe_ratio: u32,
    /// Probes per short job, at least.
    pub min_probes: u32,
    /// Jobs whose mean task runtime is above this are long (the truth the
    /// report judges by and the oracle classes by), µs.
    pub cutoff_us: f64,
    pub seed: u64,
}

impl Default for TransientConfig {
    /// The paper's simulation (§4): 4,000 servers, 80 of them short-only,
    /// half replaced, `r = 3`, threshold 0.95, 120 s to provision; two
    /// probes per task and at least 20 a job (Eagle's simulator on the
    /// Yahoo trace); a 90 s cutoff.
    fn default() -> Self {
        TransientConfig {
            servers: 4000,
            short_servers: 80,
            replaced_fraction: 0.5,
            cost_ratio: 3.0,
            threshold: 0.95,
            provisioning_us: 120_000_000,
            probe_ratio: 2,
            min_probes: 20,
            cutoff_us: 90e6,
            seed: 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TransientError {
    #[error("--short-servers: {short} of {servers} servers leaves no general partition")]
    NoGeneral { servers: u32, short: u32 },
    #[error("--short-servers: the short partition needs at least 1 server")]
    NoShort,
    #[error("{0} must be in (0, 1]")]
    Fraction(&'static str),
    #[error("--cost-ratio must be at least 1, got {0}")]
    CostRatio(f64),
    #[error("--probe-ratio must be at least 1 probe per task")]
    NoProbes,
    #[error("--cutoff-s must be a positive number of seconds, got {0}")]
    Cutoff(f64),
}

impl TransientConfig {
    pub fn validate(&self) -> Result<(), TransientError> {
        if self.short_servers == 0 {
            return Err(TransientError::NoShort);
        }
        if self.short_servers >= self.servers {
            return Err(TransientError::NoGeneral {
                servers: self.servers,
                short: self.short_servers,
            });
        }
        if !(self.replaced_fraction > 0.0 && self.replaced_fraction <= 1.0) {
            return Err(TransientError::Fraction("--replaced-fraction"));
        }
        if !(self.threshold > 0.0 && self.threshold <= 1.0) {
            return Err(TransientError::Fraction("--threshold"));
        }
        if !(self.cost_ratio.is_finite() && self.cost_ratio >= 1.0) {
            return Err(TransientError::CostRatio(self.cost_ratio));
        }
        if self.probe_ratio == 0 {
            return Err(TransientError::NoProbes);
        }
        if !(self.cutoff_us.is_finite() && self.cutoff_us > 0.0) {
            return Err(TransientError::Cutoff(self.cutoff_us / 1e6));
        }
        Ok(())
    }

    fn coaster(&self) -> CoasterConfig {
        CoasterConfig {
            threshold: self.threshold,
            cost_ratio: self.cost_ratio,
            static_short_servers: self.short_servers,
            replaced_fraction: self.replaced_fraction,
        }
    }
}

/// Queueing delays, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Delays {
    pub tasks: usize,
    pub mean_s: f64,
    pub p50_s: f64,
    pub p99_s: f64,
    pub max_s: f64,
}

impl Delays {
    fn of(delays: &mut [f64]) -> Delays {
        delays.sort_by(f64::total_cmp);
        let at = |p: f64| percentile(delays, p).unwrap_or(0.0);
        Delays {
            tasks: delays.len(),
            mean_s: delays.iter().sum::<f64>() / delays.len().max(1) as f64,
            p50_s: at(50.0),
            p99_s: at(99.0),
            max_s: delays.last().copied().unwrap_or(0.0),
        }
    }
}

/// One simulated run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Run {
    /// `eagle` (static partitions) or `cloudcoaster`.
    pub scheduler: &'static str,
    /// Who classed the jobs: `jobcast` or `oracle`.
    pub classes: &'static str,
    pub short_delay: Delays,
    /// Every short task's queueing delay, ascending, seconds (for plots).
    #[serde(skip)]
    pub short_delays_s: Vec<f64>,
    pub short_jobs: usize,
    pub long_jobs: usize,
    pub short_avg_jct_s: Option<f64>,
    pub long_avg_jct_s: Option<f64>,
    /// Jobs truly short that were classed long, and the other way round.
    pub short_as_long: u64,
    pub long_as_short: u64,
    pub probes: u64,
    /// The highest long-load ratio `l_r` the controller saw.
    pub max_long_load_ratio: f64,
    /// Transient servers requested and released by the controller.
    pub grown: u32,
    pub released: u32,
    pub max_transient_servers: u32,
    /// Time-average transient servers (requested until gone).
    pub avg_transient_servers: f64,
    pub transient_server_hours: f64,
    /// `(p·N − avg/r) / (p·N)`, percent; `None` for the static cluster.
    pub cost_saved_pct: Option<f64>,
    pub preemptions: u64,
    pub tasks_lost: u64,
    pub work_lost_s: f64,
    /// Probes sent again after a preemption.
    pub reprobes: u64,
    /// Jobs never finished (a scheduler bug if not 0).
    pub unfinished: usize,
}

/// Where transient servers' lifetimes come from, and what the controller
/// knows of them.
#[derive(Clone, Copy, Default)]
pub struct Lifetimes<'a> {
    /// Lifetimes are drawn from this measured curve; `None`: never
    /// preempted (the paper's setting).
    pub measured: Option<&'a KaplanMeier>,
    /// The fitted model the controller releases by.
    pub model: Option<&'a LifetimeModel>,
}

/// Simulate `jobs` (in any order) on the cluster: CloudCoaster if
/// `coaster`, else Eagle on the static cluster.
pub fn simulate(
    jobs: &[SimJob],
    config: &TransientConfig,
    coaster: bool,
    lifetimes: Lifetimes<'_>,
    classifier: &mut dyn Classifier,
) -> Result<Run, TransientError> {
    config.validate()?;
    let mut order: Vec<&SimJob> = jobs.iter().collect();
    order.sort_by_key(|j| (j.arrival_us(), j.job_id()));
    let coaster_config = coaster.then(|| config.coaster());
    let run = Run {
        scheduler: if coaster { "cloudcoaster" } else { "eagle" },
        classes: classifier.name(),
        ..Run::default()
    };
    let mut run = cluster::Cluster::new(&order, config, coaster_config, lifetimes, classifier, run)
        .simulate();
    if coaster {
        let replaced = f64::from(config.short_servers) * config.replaced_fraction;
        run.cost_saved_pct =
            Some(100.0 * (replaced - run.avg_transient_servers / config.cost_ratio) / replaced);
    }
    Ok(run)
}

/// CloudCoaster against Eagle on the static cluster, each with jobcast's
/// classes and with the oracle's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub cutoff_s: f64,
    /// Eagle and CloudCoaster with jobcast's classes, then with the
    /// oracle's.
    pub runs: [Run; 4],
    /// CloudCoaster's mean short-task queueing delay, jobcast's classes.
    pub short_queueing_delay_s: f64,
    /// Eagle's on the static cluster, jobcast's classes.
    pub baseline_short_queueing_delay_s: f64,
    /// The second over the first: the paper's 4.8× at `r = 3`.
    pub queueing_delay_speedup: f64,
    /// The same two runs with the oracle's classes.
    pub oracle_queueing_delay_speedup: f64,
    /// CloudCoaster's delay with the oracle's classes over jobcast's: 1
    /// when jobcast's mistakes cost nothing.
    pub jobcast_vs_oracle: f64,
    /// The short partition's cost saved (the paper's 29.5 %), jobcast's
    /// classes.
    pub cost_saved_pct: f64,
    pub preemptions: u64,
}

/// Run the four simulations of `jobs`: jobcast's classes come from
/// `history` (trained on the workload's first half), learning as jobs
/// end; the oracle's from the truth, with `config.cutoff_us`.
pub fn compare(
    jobs: &[SimJob],
    history: &jobcast_predictor::history::History,
    config: &TransientConfig,
    lifetimes: Lifetimes<'_>,
) -> Result<Comparison, TransientError> {
    let mut runs = Vec::with_capacity(4);
    for oracle in [false, true] {
        for coaster in [false, true] {
            let mut jobcast = Jobcast {
                history: history.clone(),
                cutoff_us: config.cutoff_us,
            };
            let mut truth = Oracle {
                cutoff_us: config.cutoff_us,
            };
            let classifier: &mut dyn Classifier = if oracle { &mut truth } else { &mut jobcast };
            runs.push(simulate(jobs, config, coaster, lifetimes, classifier)?);
        }
    }
    let runs: [Run; 4] = runs.try_into().expect("four runs");
    let delay = |r: &Run| r.short_delay.mean_s;
    Ok(Comparison {
        cutoff_s: config.cutoff_us / 1e6,
        short_queueing_delay_s: delay(&runs[1]),
        baseline_short_queueing_delay_s: delay(&runs[0]),
        queueing_delay_speedup: delay(&runs[0]) / delay(&runs[1]),
        oracle_queueing_delay_speedup: delay(&runs[2]) / delay(&runs[3]),
        jobcast_vs_oracle: delay(&runs[3]) / delay(&runs[1]),
        cost_saved_pct: runs[1].cost_saved_pct.unwrap_or(0.0),
        preemptions: runs[1].preemptions,
        runs,
    })
}

/// Draw the short tasks' queueing delays of the four runs as CDFs
/// (`short_delay_cdf.svg` in `dir`).
pub fn write_plot(
    comparison: &Comparison,
    dir: &std::path::Path,
) -> Result<std::path::PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("short_delay_cdf.svg");
    let series: Vec<(String, Vec<f64>)> = comparison
        .runs
        .iter()
        .map(|r| {
            (
                format!("{}, {}'s classes", r.scheduler, r.classes),
                r.short_delays_s.clone(),
            )
        })
        .collect();
    crate::report::cdf_plot(
        &path,
        "Queueing delay of short tasks",
        "delay (s; under 0.1 s drawn at 0.1)",
        "CDF of short tasks",
        &series,
        0.1,
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use jobcast_ingest::event::JobSubmitted;
    use jobcast_predictor::preemption::kaplan_meier::Observation;

    use super::*;

    const S: u64 = 1_000_000;

    fn job(id: u64, at_s: u64, runtimes_s: &[u64]) -> SimJob {
        let runtimes: Vec<u64> = runtimes_s.iter().map(|r| r * S).collect();
        let submitted = JobSubmitted::new(id, at_s * S, runtimes.len() as u32);
        SimJob::new(submitted, runtimes, at_s * S).unwrap()
    }

    /// 20 servers, 2 short-only; CloudCoaster keeps 1 of them and may add
    /// ⌊3⌋·2·0.5 = 3 transient servers; long above 100 s.
    fn small() -> TransientConfig {
        TransientConfig {
            servers: 20,
            short_servers: 2,
            threshold: 0.8,
            provisioning_us: 60 * S,
            cutoff_us: 100e6,
            ..TransientConfig::default()
        }
    }

    /// A burst of long jobs filling every general server for an hour, then
    /// a burst of short jobs.
    fn burst() -> Vec<SimJob> {
        let mut jobs: Vec<SimJob> = (0..6).map(|i| job(i, 0, &[3600; 3])).collect();
        jobs.extend((0..40).map(|i| job(100 + i, 300 + i, &[10, 20, 30, 5])));
        jobs
    }

    fn oracle() -> Oracle {
        Oracle { cutoff_us: 100e6 }
    }

    #[test]
    fn transient_servers_come_while_long_tasks_crowd_the_cluster_and_go_after() {
        let config = small();
        let jobs = burst();
        let eagle = simulate(&jobs, &config, false, Lifetimes::default(), &mut oracle()).unwrap();
        let coaster = simulate(&jobs, &config, true, Lifetimes::default(), &mut oracle()).unwrap();
        for run in [&eagle, &coaster] {
            assert_eq!(run.unfinished, 0, "{run:?}");
            assert_eq!((run.short_jobs, run.long_jobs), (40, 6));
            assert_eq!(run.short_delay.tasks, 160);
        }
        assert_eq!(eagle.grown, 0);
        assert_eq!(eagle.cost_saved_pct, None);
        // l_r = 18 / 19 > 0.8 wants 18 / 0.8 − 19 = 3.5 more servers:
        // grown to the budget of 3 at once, released after.
        assert!(coaster.max_long_load_ratio > 0.9, "{coaster:?}");
        assert_eq!(coaster.grown, 3, "{coaster:?}");
        assert_eq!(coaster.max_transient_servers, 3, "{coaster:?}");
        assert!(coaster.released >= 3, "{coaster:?}");
        // 1 + 3 short servers beat 2 once the transient ones are up.
        assert!(
            coaster.short_delay.mean_s < eagle.short_delay.mean_s,
            "{} vs {}",
            coaster.short_delay.mean_s,
            eagle.short_delay.mean_s
        );
        // Long jobs are not slowed: the general partition is the same.
        assert_eq!(coaster.long_avg_jct_s, eagle.long_avg_jct_s);
        // The budget was spent while the long jobs ran, nearly all along.
        let saved = coaster.cost_saved_pct.unwrap();
        assert!((0.0..10.0).contains(&saved), "{saved}");
        // Seeded: the same run again.
        assert_eq!(
            simulate(&jobs, &config, true, Lifetimes::default(), &mut oracle()).unwrap(),
            coaster
        );
    }

    #[test]
    fn preemptions_lose_work_but_no_task_and_no_job() {
        // Transient servers that live 1 to 6 min.
        let km = KaplanMeier::new(
            &(1..=6)
                .map(|i| Observation {
                    time_h: f64::from(i) * 60.0 / 3600.0,
                    event: true,
                })
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let lifetimes = Lifetimes {
            measured: Some(&km),
            model: None,
        };
        let jobs = burst();
        // Two probes a task, as Sparrow sends: with Eagle's 20 a job this
        // small cluster loses one task, at its start, to 37 preemptions,
        // and the test wants work lost.
        let config = TransientConfig {
            min_probes: 1,
            ..small()
        };
        let run = simulate(&jobs, &config, true, lifetimes, &mut oracle()).unwrap();
        assert_eq!(run.unfinished, 0, "{run:?}");
        assert!(run.preemptions > 3 && run.tasks_lost > 0, "{run:?}");
        assert!(run.work_lost_s > 0.0, "{run:?}");
        // Every short task still ran once to its end: its delay is counted
        // once, from its last start.
        assert_eq!(run.short_delay.tasks, 160);
        // Preempted servers are replaced while the long load lasts.
        assert!(run.grown > 3, "{run:?}");
    }

    #[test]
    fn jobcast_classes_by_history_and_its_mistakes_are_counted() {
        use jobcast_predictor::history::{History, HistoryConfig};
        let config = small();
        // History: long jobs were named "etl", short ones "web".
        let named = |id: u64, at_s: u64, name: &str, runtimes_s: &[u64]| {
            let runtimes: Vec<u64> = runtimes_s.iter().map(|r| r * S).collect();
            let submitted = JobSubmitted {
                logical_name: name.into(),
                ..JobSubmitted::new(id, at_s * S, runtimes.len() as u32)
            };
            SimJob::new(submitted, runtimes, at_s * S).unwrap()
        };
        let mut history = History::new(HistoryConfig::default());
        for i in 0..20 {
            named(1000 + i, 0, "etl", &[3000, 3600]).observe_into(&mut history, 4000 * S);
            named(2000 + i, 0, "web", &[10, 12]).observe_into(&mut history, 4000 * S);
        }
        let mut jobs: Vec<SimJob> = (0..6).map(|i| named(i, 5000, "etl", &[3600; 3])).collect();
        // A "web" job that runs long: jobcast cannot know.
        jobs.push(named(50, 5000, "web", &[400, 400]));
        jobs.extend((0..10).map(|i| named(100 + i, 5100, "web", &[10, 20])));
        let mut jobcast = Jobcast {
            history,
            cutoff_us: config.cutoff_us,
        };
        let run = simulate(&jobs, &config, true, Lifetimes::default(), &mut jobcast).unwrap();
        assert_eq!(run.classes, "jobcast");
        assert_eq!((run.long_as_short, run.short_as_long), (1, 0), "{run:?}");
        assert_eq!(run.unfinished, 0);
    }
}
