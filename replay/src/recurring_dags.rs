//! DAG jobs composed from a trace's recurring jobs: the GTrace19-DAG
//! construction of SLearn §6 ("DAG Traces"), applied to any trace whose
//! jobs carry a user and a logical name (Google 2011 gives GTrace11-DAG).
//!
//! The paper: "the number of stages in DAGs … was randomly chosen to be
//! between 2-5 and each stage is a complete job from the Google 2019 trace.
//! The jobs that are part of the same DAG have the same jobname and the same
//! username." Here:
//!
//! - **Candidates** are the replayable jobs (finished, every runtime known,
//!   at most `max_width` tasks each), grouped by (user, logical name): the
//!   name a recurring program keeps across submissions (Google 2011's
//!   `job_name` is unique per job, its `logical_job_name` is not).
//! - **Each group, in submission order** (then job id), is cut into runs of
//!   consecutive jobs, each run's length drawn uniformly from 2–5 (cut
//!   short by the group's end). A run of one job, the group's remainder, is
//!   left out, counted as `not_in_dag`.
//! - **A run is one DAG job**: its id, submission, user, names, class,
//!   priority and requests are its first job's; stage `i` is the run's
//!   `i`-th job, with that job's tasks and their true runtimes, and the
//!   stage name `job <id>` of the job it came from. Stage 0 is the root;
//!   every later stage depends on one earlier stage drawn uniformly (a
//!   random tree, as in Branch Scheduling's generated DAGs, the paper's
//!   reference [34]; the paper does not state its shape), so SLearn-DAG
//!   samples stage 0 and adjusts the rest.
//! - **Its end** in the trace, which decides whether it is history or
//!   evaluated, is the latest end of its jobs: a DAG is history only if
//!   every one of its jobs ended before the split.
//!
//! Every random choice comes from one ChaCha8 stream seeded by `seed` and
//! taken in the order of the groups' first submissions, so a seed gives the
//! same DAGs on every machine.

use std::collections::HashMap;

use jobcast_ingest::event::{JobSubmitted, Stage};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use jobcast_ingest::Trace;

use crate::workload::{self, Reason, SimJob, Workload, WorkloadError};

/// Fewest and most stages of a DAG (the paper's 2–5).
pub const STAGES: std::ops::RangeInclusive<usize> = 2..=5;

/// What the construction made, for the record beside any result on it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DagStats {
    /// Replayable jobs offered to the construction.
    pub candidate_jobs: usize,
    /// (user, logical name) groups among them.
    pub groups: usize,
    /// DAG jobs made, and the jobs that became their stages.
    pub dags: usize,
    pub stages: usize,
    /// Jobs alone in their group or left over at its end.
    pub not_in_dag: usize,
    /// DAGs with 2, 3, 4 and 5 stages.
    pub stages_per_dag: [usize; 4],
    /// Tasks per stage: mean, median, 90th percentile and largest.
    pub tasks_per_stage_mean: f64,
    pub tasks_per_stage_p50: u32,
    pub tasks_per_stage_p90: u32,
    pub tasks_per_stage_max: u32,
}

impl DagStats {
    /// One paragraph for stderr.
    pub fn describe(&self) -> String {
        let [two, three, four, five] = self.stages_per_dag;
        format!(
            "recurring DAGs: {} DAGs of {} stages from {} jobs in {} (user, logical name) groups \
             ({} jobs in no DAG); stages per DAG 2: {two}, 3: {three}, 4: {four}, 5: {five}; \
             tasks per stage mean {:.1}, P50 {}, P90 {}, max {}",
            self.dags,
            self.stages,
            self.candidate_jobs,
            self.groups,
            self.not_in_dag,
            self.tasks_per_stage_mean,
            self.tasks_per_stage_p50,
            self.tasks_per_stage_p90,
            self.tasks_per_stage_max,
        )
    }
}

/// A trace's replayable jobs (at most `max_width` tasks each) composed
/// into DAG jobs, then split into history and evaluated DAGs as
/// [`Workload::from_trace`] splits jobs; the jobs in no DAG are excluded as
/// [`Reason::NotInDag`].
pub fn workload(
    trace: Trace,
    max_width: u32,
    seed: u64,
) -> Result<(Workload, DagStats), WorkloadError> {
    let (usable, split, mut excluded) = workload::replayable(trace, max_width)?;
    let (dags, left_out, stats) = compose(usable, seed);
    for id in left_out {
        excluded.add(id, Reason::NotInDag);
    }
    Ok((Workload::split(dags, split, excluded)?, stats))
}

/// The DAG jobs made from `jobs`, and the ids of the jobs left out of any.
pub fn compose(mut jobs: Vec<SimJob>, seed: u64) -> (Vec<SimJob>, Vec<u64>, DagStats) {
    jobs.sort_by_key(|j| (j.arrival_us(), j.job_id()));
    let mut stats = DagStats {
        candidate_jobs: jobs.len(),
        ..DagStats::default()
    };
    // Groups in the order of their first submission.
    let mut index: HashMap<(&str, &str), usize> = HashMap::new();
    let mut groups: Vec<Vec<&SimJob>> = Vec::new();
    for job in &jobs {
        let s = job.job();
        let g = *index
            .entry((s.user.as_str(), s.logical_name.as_str()))
            .or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
        groups[g].push(job);
    }
    stats.groups = groups.len();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut dags, mut left_out, mut widths) = (Vec::new(), Vec::new(), Vec::new());
    for group in &groups {
        let mut rest = group.as_slice();
        while rest.len() >= *STAGES.start() {
            let n = rng.random_range(STAGES).min(rest.len());
            let (run, after) = rest.split_at(n);
            dags.push(dag_of(run, &mut rng));
            stats.stages_per_dag[n - STAGES.start()] += 1;
            widths.extend(run.iter().map(|j| j.width()));
            rest = after;
        }
        left_out.extend(rest.iter().map(|j| j.job_id()));
    }
    stats.dags = dags.len();
    stats.stages = widths.len();
    stats.not_in_dag = left_out.len();
    if !widths.is_empty() {
        stats.tasks_per_stage_mean =
            widths.iter().map(|&w| f64::from(w)).sum::<f64>() / widths.len() as f64;
        widths.sort_unstable();
        let rank = |q: f64| widths[((q * widths.len() as f64).ceil() as usize).max(1) - 1];
        stats.tasks_per_stage_p50 = rank(0.5);
        stats.tasks_per_stage_p90 = rank(0.9);
        stats.tasks_per_stage_max = widths[widths.len() - 1];
    }
    (dags, left_out, stats)
}

/// One DAG job whose stage `i` is `run[i]`.
fn dag_of(run: &[&SimJob], rng: &mut ChaCha8Rng) -> SimJob {
    let first = run[0].job();
    let stages: Vec<Stage> = run
        .iter()
        .enumerate()
        .map(|(i, j)| Stage {
            id: i as u32,
            parents: if i == 0 {
                Vec::new()
            } else {
                vec![rng.random_range(0..i as u32)]
            },
            num_tasks: j.width(),
            name: Some(format!("job {}", j.job_id())),
        })
        .collect();
    let runtimes: Vec<u64> = run
        .iter()
        .flat_map(|j| j.runtimes_us().iter().copied())
        .collect();
    let job = JobSubmitted {
        num_tasks: runtimes.len() as u32,
        stages: Some(stages),
        ..first.clone()
    };
    let end_us = run
        .iter()
        .map(|j| j.end_us())
        .max()
        .unwrap_or(first.time_us);
    SimJob::new(job, runtimes, end_us)
        .expect("stages of at most 5 checked jobs, each after its parent")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, user: &str, logical: &str, at: u64, runtimes: &[u64]) -> SimJob {
        let submitted = JobSubmitted {
            user: user.into(),
            logical_name: logical.into(),
            ..JobSubmitted::new(id, at, runtimes.len() as u32)
        };
        SimJob::new(submitted, runtimes.to_vec(), at + 100).unwrap()
    }

    #[test]
    fn recurring_jobs_become_the_stages_of_one_dag_in_submission_order() {
        // Seven jobs of one program, one of another, one alone.
        let mut jobs: Vec<SimJob> = (0..7)
            .map(|i| job(10 + i, "u", "p", 1_000 * (7 - i), &[i + 1, i + 2]))
            .collect();
        jobs.push(job(1, "u", "other", 50, &[9]));
        jobs.push(job(2, "v", "p", 60, &[9]));
        let (dags, left, stats) = compose(jobs, 7);
        assert_eq!(stats.candidate_jobs, 9);
        assert_eq!(stats.groups, 3);
        // The two singletons are left out, and whatever the 7-job group's
        // last run leaves (7 = 2+5, 3+4, 5+2, …, or a run and one job).
        assert!(left.contains(&1) && left.contains(&2), "{left:?}");
        assert_eq!(stats.stages + stats.not_in_dag, 9);
        assert_eq!(stats.dags, dags.len());
        let mut next_job = 16; // the earliest-submitted of the group is id 16
        for dag in &dags {
            let stages = dag.job().stages.as_ref().unwrap();
            assert!(STAGES.contains(&stages.len()));
            assert_eq!(dag.job_id(), next_job, "a DAG is its first job's");
            assert_eq!(dag.job().num_tasks as usize, 2 * stages.len());
            for (i, s) in stages.iter().enumerate() {
                let original = next_job - i as u64;
                assert_eq!(s.name.as_deref(), Some(format!("job {original}").as_str()));
                assert_eq!(s.num_tasks, 2);
                let k = original - 10;
                let tasks = &dag.runtimes_us()[2 * i..2 * i + 2];
                assert_eq!(tasks, &[k + 1, k + 2], "stage {i} keeps its job's runtimes");
                match i {
                    0 => assert!(s.parents.is_empty()),
                    _ => assert!(s.parents.len() == 1 && s.parents[0] < i as u32),
                }
            }
            // Submitted with its first job, ended with its last.
            assert_eq!(dag.arrival_us(), 1_000 * (7 - (next_job - 10)));
            let last = next_job - stages.len() as u64 + 1;
            assert_eq!(dag.end_us(), 1_000 * (7 - (last - 10)) + 100);
            next_job -= stages.len() as u64;
        }
    }

    #[test]
    fn a_seed_gives_the_same_dags_and_another_seed_others() {
        let jobs: Vec<SimJob> = (0..200)
            .map(|i| job(i, "u", &format!("p{}", i % 7), i * 10, &[i + 1]))
            .collect();
        let shapes = |seed| {
            let (dags, left, stats) = compose(jobs.clone(), seed);
            let parents: Vec<Vec<Stage>> = dags
                .iter()
                .map(|d| d.job().stages.clone().unwrap())
                .collect();
            (parents, left, stats.stages_per_dag)
        };
        assert_eq!(shapes(1), shapes(1));
        assert_ne!(shapes(1), shapes(2));
        let (_, _, stats) = compose(jobs, 1);
        assert!(stats.stages_per_dag.iter().all(|&n| n > 0), "{stats:?}");
        assert_eq!(stats.tasks_per_stage_max, 1);
    }
}
