//! A job that finished with every task's runtime known: the truth that
//! predictors learn from and that estimates are scored against.
//!
//! The live engine builds one when a job ends in the stream; the simulator
//! holds one for every job it replays. Both teach the shared history and the
//! policies through [`FinishedJob::learn`], so the service and the simulator
//! learn identically by construction.

use std::ops::Range;

use jobcast_ingest::event::JobSubmitted;

use crate::features::JobFeatures;
use crate::history::History;
use crate::policies::{Context, JobDone, Policy};
use crate::queues::QueueConfig;

/// A job that cannot be taken as finished as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job {job_id}: {message}")]
pub struct JobError {
    pub job_id: u64,
    pub message: String,
}

/// One DAG stage: a contiguous range of task indices and the positions (in
/// the job's stage list) of its parents. A job without stages has one, with
/// id 0, holding every task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    pub id: u32,
    pub tasks: Range<u32>,
    pub parents: Vec<usize>,
}

/// A finished job: its submission (whose `time_us` is the arrival) and the
/// true runtime of each task.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedJob {
    job: JobSubmitted,
    runtimes_us: Vec<u64>,
    stages: Vec<Stage>,
    /// Positions of `stages`, every stage after its parents.
    order: Vec<usize>,
}

impl FinishedJob {
    /// Check that `runtimes_us` has one entry per task and that the DAG
    /// stages (if any) cover the tasks, in the order listed, and form a DAG
    /// (parents may be listed after their children).
    /// Runtimes of 0 µs become 1 µs so that every ratio to a runtime stays
    /// defined.
    pub fn new(job: JobSubmitted, mut runtimes_us: Vec<u64>) -> Result<Self, JobError> {
        let fail = |message: String| JobError {
            job_id: job.job_id,
            message,
        };
        if runtimes_us.is_empty() {
            return Err(fail("has no tasks".into()));
        }
        if u64::from(job.num_tasks) != runtimes_us.len() as u64 {
            return Err(fail(format!(
                "declares {} tasks but {} runtimes were given",
                job.num_tasks,
                runtimes_us.len()
            )));
        }
        for r in &mut runtimes_us {
            *r = (*r).max(1);
        }
        let stages = match &job.stages {
            None => vec![Stage {
                id: 0,
                tasks: 0..job.num_tasks,
                parents: Vec::new(),
            }],
            Some(stages) => {
                let mut position = std::collections::HashMap::with_capacity(stages.len());
                for (i, stage) in stages.iter().enumerate() {
                    if position.insert(stage.id, i).is_some() {
                        return Err(fail(format!("stage {} appears twice", stage.id)));
                    }
                }
                let mut plans: Vec<Stage> = Vec::with_capacity(stages.len());
                let mut next = 0u32;
                for stage in stages {
                    let mut parents = Vec::with_capacity(stage.parents.len());
                    for parent in &stage.parents {
                        match position.get(parent) {
                            Some(&pos) if !parents.contains(&pos) => parents.push(pos),
                            Some(_) => {}
                            None => {
                                return Err(fail(format!(
                                    "stage {} depends on stage {parent}, which the job does not list",
                                    stage.id
                                )));
                            }
                        }
                    }
                    let end = next
                        .checked_add(stage.num_tasks)
                        .ok_or_else(|| fail("too many tasks".into()))?;
                    plans.push(Stage {
                        id: stage.id,
                        tasks: next..end,
                        parents,
                    });
                    next = end;
                }
                if next != job.num_tasks {
                    return Err(fail(format!(
                        "stages hold {next} tasks but the job declares {}",
                        job.num_tasks
                    )));
                }
                plans
            }
        };
        let order: Vec<usize> = match &job.stages {
            None => vec![0],
            Some(listed) => {
                let ids = jobcast_ingest::dag::topological_order(listed);
                if ids.len() != listed.len() {
                    return Err(fail(
                        "its stages' dependencies form a cycle, so it is no DAG".into(),
                    ));
                }
                ids.iter()
                    .map(|id| {
                        stages
                            .iter()
                            .position(|s| s.id == *id)
                            .expect("a listed id")
                    })
                    .collect()
            }
        };
        Ok(FinishedJob {
            job,
            runtimes_us,
            stages,
            order,
        })
    }

    pub fn job(&self) -> &JobSubmitted {
        &self.job
    }

    pub fn job_id(&self) -> u64 {
        self.job.job_id
    }

    pub fn arrival_us(&self) -> u64 {
        self.job.time_us
    }

    pub fn width(&self) -> u32 {
        self.job.num_tasks
    }

    /// True runtime of each task, by task index.
    pub fn runtimes_us(&self) -> &[u64] {
        &self.runtimes_us
    }

    /// The DAG stages, in the order the job lists them (a parent may come
    /// after its child).
    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    /// Sum of the task runtimes: the job's true size.
    pub fn total_task_time_us(&self) -> u64 {
        self.runtimes_us.iter().sum()
    }

    pub fn mean_task_runtime_us(&self) -> f64 {
        self.total_task_time_us() as f64 / self.runtimes_us.len() as f64
    }

    /// Mean task runtime of each DAG stage, with the stage id (one entry
    /// with id 0 for a job without stages).
    pub fn stage_means_us(&self) -> Vec<(u32, f64)> {
        self.stages
            .iter()
            .map(|s| {
                let tasks = &self.runtimes_us[s.tasks.start as usize..s.tasks.end as usize];
                let mean = if tasks.is_empty() {
                    0.0
                } else {
                    tasks.iter().sum::<u64>() as f64 / tasks.len() as f64
                };
                (s.id, mean)
            })
            .collect()
    }

    /// Runtime on an idle cluster: the longest task, or for a DAG the
    /// longest chain of stage maxima (the critical path).
    pub fn idle_runtime_us(&self) -> u64 {
        let mut finish = vec![0u64; self.stages.len()];
        for &i in &self.order {
            let s = &self.stages[i];
            let longest = self.runtimes_us[s.tasks.start as usize..s.tasks.end as usize]
                .iter()
                .copied()
                .max()
                .unwrap_or(0);
            let ready = s.parents.iter().map(|&p| finish[p]).max().unwrap_or(0);
            finish[i] = ready.saturating_add(longest);
        }
        finish.into_iter().max().unwrap_or(0).max(1)
    }

    /// Its JCT divided by its runtime on an idle cluster, had it ended at
    /// `end_us`. At least 1: a stream can report an end earlier than its
    /// tasks' runtimes allow (clock skew between machines), and SLearn's
    /// adaptive ratio must not learn that sampling made a job faster than
    /// possible.
    pub fn normalized_jct(&self, end_us: u64) -> f64 {
        let jct_us = end_us.saturating_sub(self.arrival_us());
        (jct_us as f64 / self.idle_runtime_us() as f64).max(1.0)
    }

    /// Teach `history` what this job did, as it ended at `end_us`: the job
    /// as a whole, and each DAG stage under its own features.
    pub fn observe_into(&self, history: &mut History, end_us: u64) {
        history.observe(
            &JobFeatures::of(&self.job),
            end_us,
            self.mean_task_runtime_us(),
        );
        if self.job.stages.is_some() {
            for (id, mean) in self.stage_means_us() {
                history.observe(&JobFeatures::of_stage(&self.job, id), end_us, mean);
            }
        }
    }

    /// The one learning step, as the job ends at `end_us`: the shared
    /// history observes it first, then every policy forgets the job and
    /// learns from it with that history in view.
    pub fn learn<'a, 'p: 'a>(
        &self,
        end_us: u64,
        history: &mut History,
        queues: &QueueConfig,
        policies: impl IntoIterator<Item = &'a mut (dyn Policy + 'p)>,
    ) {
        self.observe_into(history, end_us);
        let done = JobDone {
            job_id: self.job_id(),
            submit_us: self.arrival_us(),
            end_us,
            width: self.width(),
            mean_task_runtime_us: self.mean_task_runtime_us(),
            normalized_jct: self.normalized_jct(end_us),
        };
        let ctx = Context {
            now_us: end_us,
            history,
            queues,
        };
        for policy in policies {
            policy.on_job_done(&done, &ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use jobcast_ingest::event::Stage as StageSpec;

    use super::*;

    fn job(num_tasks: u32, stages: Option<Vec<StageSpec>>) -> JobSubmitted {
        JobSubmitted {
            user: "u".into(),
            job_name: "j".into(),
            logical_name: "l".into(),
            cpu_request: 0.1,
            mem_request: 0.1,
            stages,
            ..JobSubmitted::new(7, 1_000, num_tasks)
        }
    }

    fn stage(id: u32, num_tasks: u32, parents: &[u32]) -> StageSpec {
        StageSpec {
            id,
            num_tasks,
            parents: parents.to_vec(),
            name: None,
        }
    }

    #[test]
    fn a_dag_runs_its_critical_path_on_an_idle_cluster() {
        let dag = Some(vec![stage(1, 2, &[]), stage(2, 1, &[1]), stage(3, 1, &[])]);
        let done = FinishedJob::new(job(4, dag), vec![10, 30, 5, 40]).unwrap();
        // Stage 1 (max 30) then stage 2 (5) is 35; stage 3 alone is 40.
        assert_eq!(done.idle_runtime_us(), 40);
        assert_eq!(done.stage_means_us(), vec![(1, 20.0), (2, 5.0), (3, 40.0)]);
        assert_eq!(done.stages()[1].parents, vec![0]);
        // A parent listed after its child (as Alibaba's ids allow).
        let forward = Some(vec![stage(1, 1, &[2]), stage(2, 2, &[])]);
        let done = FinishedJob::new(job(3, forward), vec![5, 10, 30]).unwrap();
        assert_eq!(done.stages()[0].parents, vec![1]);
        assert_eq!(done.idle_runtime_us(), 35, "stage 2 (30) then stage 1 (5)");
    }

    #[test]
    fn malformed_jobs_are_refused_with_the_reason() {
        let err = FinishedJob::new(job(3, None), vec![1, 2]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "job 7: declares 3 tasks but 2 runtimes were given"
        );
        let unknown = Some(vec![stage(1, 1, &[3]), stage(2, 1, &[])]);
        let err = FinishedJob::new(job(2, unknown), vec![1, 1]).unwrap_err();
        assert!(err.message.contains("does not list"), "{err}");
        let cycle = Some(vec![stage(1, 1, &[2]), stage(2, 1, &[1])]);
        let err = FinishedJob::new(job(2, cycle), vec![1, 1]).unwrap_err();
        assert!(err.message.contains("cycle"), "{err}");
        let own = Some(vec![stage(1, 1, &[1])]);
        assert!(
            FinishedJob::new(job(1, own), vec![1]).is_err(),
            "a stage its own parent"
        );
        let short = Some(vec![stage(1, 1, &[])]);
        assert!(FinishedJob::new(job(2, short), vec![1, 1]).is_err());
        assert!(FinishedJob::new(job(0, None), vec![]).is_err());
    }

    #[test]
    fn the_normalised_jct_is_never_below_one() {
        let done = FinishedJob::new(job(2, None), vec![100, 0]).unwrap();
        assert_eq!(done.runtimes_us(), &[100, 1]);
        assert_eq!(done.normalized_jct(1_000 + 250), 2.5);
        // An end reported before the tasks could have run, or before the
        // arrival itself.
        assert_eq!(done.normalized_jct(1_000 + 50), 1.0);
        assert_eq!(done.normalized_jct(0), 1.0);
    }
}
