//! A job's life in the engine: submitted (every policy decides), its
//! tasks' events (policies may decide again, e.g. SLearn once its pilots
//! end), and its end (each policy's estimate scored against the truth, and
//! the history and policies taught through [`FinishedJob::learn`]).

use std::collections::BTreeMap;

use jobcast_ingest::event::{JobEnded, JobOutcome, JobSubmitted, TaskEvent, TaskKind};

use crate::decision::{Decision, PolicyKind};
use crate::finished::FinishedJob;
use crate::policies::{Context, Policy, TaskEnd};

use super::effects::{Effects, Output, Rejection, reject};
use super::progress::Progress;
use super::records::{JobRecord, JobState, PredictionError, TaskRecord};
use super::{Engine, LiveJob};

impl Engine {
    pub(super) fn submit(
        &mut self,
        partition: i32,
        job: &JobSubmitted,
        effects: &mut Effects,
    ) -> Result<(), Rejection> {
        if self.jobs.contains_key(&job.job_id) {
            return Err(reject(
                "duplicate_job",
                format!("job {} was already submitted", job.job_id),
            ));
        }
        if self.jobs.len() as u64 >= self.max_live_jobs {
            return Err(reject(
                "over_budget",
                format!(
                    "job {}: {} jobs are live, engine.max_live_jobs",
                    job.job_id,
                    self.jobs.len()
                ),
            ));
        }
        let mut record = JobRecord {
            job_id: job.job_id,
            submit_us: job.time_us,
            user: job.user.clone(),
            job_name: job.job_name.clone(),
            logical_name: job.logical_name.clone(),
            width: job.num_tasks,
            state: JobState::Running,
            end_us: None,
            tasks_finished: 0,
            estimates: BTreeMap::new(),
            actual_mean_task_runtime_us: None,
            errors: BTreeMap::new(),
            eta: None,
        };
        let ctx = Context {
            now_us: job.time_us,
            history: &self.history,
            queues: &self.queues,
        };
        let mut published = Vec::new();
        for policy in &mut self.policies {
            let decision = policy.on_submit(job, &ctx);
            published.extend(record_decision(&mut record, decision, self.driver));
        }
        let progress = Progress::submitted(self.size_hint_us(job));
        self.jobs.insert(
            job.job_id,
            LiveJob {
                submitted: job.clone(),
                record,
                runtimes: BTreeMap::new(),
                last_event_us: job.time_us,
                progress,
                partition,
                pacing: Default::default(),
            },
        );
        for decision in published {
            self.offer(decision, job.time_us, effects);
        }
        self.reindex_eta(job.job_id);
        effects.jobs.mark(job.job_id);
        Ok(())
    }

    fn live_job(&self, job_id: u64, time_us: u64) -> Result<&LiveJob, Rejection> {
        let job = self.jobs.get(&job_id).ok_or_else(|| {
            reject(
                "unknown_job",
                format!("job {job_id} is not running (never submitted, or already ended)"),
            )
        })?;
        if time_us < job.last_event_us {
            return Err(reject(
                "time_backwards",
                format!(
                    "job {job_id}: event at {time_us} µs is earlier than its previous event at {} µs",
                    job.last_event_us
                ),
            ));
        }
        Ok(job)
    }

    /// Apply a task event; its job's ETA row follows what it changed
    /// (tasks running and finished, the driving policy's estimate).
    pub(super) fn task_event(
        &mut self,
        event: &TaskEvent,
        effects: &mut Effects,
    ) -> Result<(), Rejection> {
        self.apply_task_event(event, effects)?;
        self.reindex_eta(event.job_id);
        Ok(())
    }

    fn apply_task_event(
        &mut self,
        event: &TaskEvent,
        effects: &mut Effects,
    ) -> Result<(), Rejection> {
        let job = self.live_job(event.job_id, event.time_us)?;
        if event.task_index >= job.submitted.num_tasks {
            return Err(reject(
                "unknown_task",
                format!(
                    "job {} has {} tasks; there is no task {}",
                    event.job_id, job.submitted.num_tasks, event.task_index
                ),
            ));
        }
        let key = (event.job_id, event.task_index);
        let previous = self.tasks.get(&key);
        if previous.is_none() && self.tasks.len() as u64 >= self.max_live_tasks {
            return Err(reject(
                "over_budget",
                format!(
                    "job {} task {}: {} tasks have records, engine.max_live_tasks",
                    event.job_id,
                    event.task_index,
                    self.tasks.len()
                ),
            ));
        }
        let started = previous.and_then(|t| t.running_since_us);
        let runtime_us = match event.kind {
            TaskKind::Finish => Some(
                event.time_us
                    - started.ok_or_else(|| {
                        reject(
                            "no_running_attempt",
                            format!(
                                "job {} task {}: finished without a running attempt",
                                event.job_id, event.task_index
                            ),
                        )
                    })?,
            ),
            _ => None,
        };

        let mut task = previous.cloned().unwrap_or(TaskRecord {
            job_id: event.job_id,
            task_index: event.task_index,
            last: event.kind,
            attempts: 0,
            last_schedule_us: None,
            running_since_us: None,
            runtime_us: None,
            machine_id: None,
        });
        task.last = event.kind;
        if event.machine_id.is_some() {
            task.machine_id = event.machine_id;
        }
        if event.kind == TaskKind::Schedule {
            task.attempts += 1;
            task.last_schedule_us = Some(event.time_us);
            task.running_since_us = Some(event.time_us);
        } else if event.kind.ends_attempt() {
            task.running_since_us = None;
        }
        if runtime_us.is_some() {
            task.runtime_us = runtime_us;
        }
        self.tasks.insert(key, task);
        effects.tasks.mark(key);
        if let Some(machine_id) = event.machine_id {
            self.machines.seen(machine_id, event.time_us);
        }
        if event.kind == TaskKind::Schedule {
            self.place_on_vm(event, effects);
        }

        let job = self.jobs.get_mut(&event.job_id).expect("checked above");
        job.last_event_us = event.time_us;
        if event.kind == TaskKind::Schedule {
            if let Some(since) = started {
                // A schedule over a running attempt replaces it.
                job.progress.attempt_ended(since, None);
            }
            job.progress.attempt_started(event.time_us);
        }
        // Only ends of running attempts tell the policies anything: a
        // pilot that fails or is evicted must be replaced.
        let ended_running_attempt = event.kind.ends_attempt() && started.is_some();
        if !ended_running_attempt {
            return Ok(());
        }
        let mut first_finish = None;
        if let Some(runtime) = runtime_us
            && job.runtimes.insert(event.task_index, runtime).is_none()
        {
            job.record.tasks_finished += 1;
            first_finish = Some(runtime);
        }
        if let Some(since) = started {
            job.progress.attempt_ended(since, first_finish);
        }
        let end = TaskEnd {
            job_id: event.job_id,
            task_index: event.task_index,
            time_us: event.time_us,
            runtime_us,
        };
        let ctx = Context {
            now_us: event.time_us,
            history: &self.history,
            queues: &self.queues,
        };
        let mut published = Vec::new();
        for policy in &mut self.policies {
            if let Some(decision) = policy.on_task_end(&end, &ctx) {
                published.extend(record_decision(&mut job.record, decision, self.driver));
            }
        }
        for decision in published {
            self.offer(decision, event.time_us, effects);
        }
        effects.jobs.mark(event.job_id);
        Ok(())
    }

    pub(super) fn end(&mut self, end: &JobEnded, effects: &mut Effects) -> Result<(), Rejection> {
        self.live_job(end.job_id, end.time_us)?;
        self.forget_pacing(end.job_id, effects);
        let mut job = self.jobs.remove(&end.job_id).expect("checked above");
        self.etas.forget(end.job_id);
        job.record.end_us = Some(end.time_us);
        job.record.state = match end.outcome {
            JobOutcome::Finish => JobState::Finished,
            JobOutcome::Fail => JobState::Failed,
            JobOutcome::Kill => JobState::Killed,
            JobOutcome::Lost => JobState::Lost,
        };
        if end.outcome == JobOutcome::Finish {
            self.etas.learn(&job, end.time_us, effects);
        }
        let every_task = job.runtimes.len() as u64 == u64::from(job.submitted.num_tasks);
        let runtimes = every_task.then(|| job.runtimes.values().copied().collect::<Vec<u64>>());
        // Only a finished job whose every task runtime is known has a true
        // size to learn from and to score estimates against.
        let truth = match (end.outcome, runtimes) {
            (JobOutcome::Finish, Some(runtimes)) => {
                FinishedJob::new(job.submitted.clone(), runtimes).ok()
            }
            _ => None,
        };
        match truth {
            Some(truth) => {
                let actual = truth.mean_task_runtime_us();
                job.record.actual_mean_task_runtime_us = Some(actual);
                for policy in &self.policies {
                    let kind = policy.kind();
                    if let Some(estimate) = job.record.estimates.get(&kind) {
                        let error = PredictionError::of(estimate.mean_task_runtime_us, actual);
                        job.record.errors.insert(kind, error);
                        self.policy_errors
                            .entry(kind.name())
                            .or_default()
                            .record(&error);
                        effects.policies.mark(kind.name());
                        effects.outputs.push(Output::Scored {
                            policy: kind,
                            job_id: end.job_id,
                            error,
                            covered: estimate
                                .quantiles
                                .map(|q| q.mean_task_runtime_us.to_array().map(|v| actual <= v)),
                        });
                    }
                }
                // The history's window moves with what it learns: never
                // further than the skew ahead of the partitions' clock.
                truth.learn(
                    self.clock.cap_us(end.time_us),
                    &mut self.history,
                    &self.queues,
                    self.policies
                        .iter_mut()
                        .map(|p| p.as_mut() as &mut dyn Policy),
                );
            }
            None => {
                for policy in &mut self.policies {
                    policy.on_job_abandoned(end.job_id);
                }
            }
        }
        effects.jobs.mark(end.job_id);
        self.ended.insert(end.job_id, job.record);
        Ok(())
    }
}

/// Keep a policy's estimate on the job's record; the driving policy's
/// decision is returned, to publish.
fn record_decision(
    record: &mut JobRecord,
    decision: Decision,
    driver: PolicyKind,
) -> Option<Decision> {
    if let Some(estimate) = decision.estimate {
        record.estimates.insert(decision.policy, estimate);
    }
    (decision.policy == driver).then_some(decision)
}
