//! Ground-truth views derived from a canonical event stream: what each job,
//! task and machine actually did. They are the yardstick for predictions
//! and the rows of the `jobs`, `tasks` and `machines` Parquet tables.
//!
//! Definitions:
//! - a task's runtime is the span of its *last* SCHEDULE → FINISH (earlier
//!   attempts were evicted, failed or killed); it is unknown when that
//!   SCHEDULE happened before the trace window (time 0);
//! - a job's runtime is its FINISH minus its first task SCHEDULE, its JCT is
//!   its end minus its submission, its total task-time the sum of its
//!   tasks' runtimes;
//! - a job that has not ended in the data is *censored*: never counted as
//!   finished, whatever its tasks did.
//!
//! Memory stays bounded by the live jobs: a job and its tasks are released
//! as soon as the job ends ([`TruthBuilder::take_completed`]).

use std::collections::{HashMap, HashSet};

use crate::event::{EndReason, Event, JobOutcome, MachineKind, Stage, TaskKind};

#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobTruth {
    pub job_id: u64,
    pub submit_time_us: Option<u64>,
    pub user: String,
    pub job_name: String,
    pub logical_name: String,
    pub scheduling_class: u8,
    pub priority: u32,
    pub cpu_request: f64,
    pub mem_request: f64,
    /// Tasks declared at submission.
    pub num_tasks: u32,
    /// Tasks seen in the data; `max(num_tasks, distinct task indices)`.
    pub width: u32,
    pub stages: Option<Vec<Stage>>,
    pub first_schedule_us: Option<u64>,
    pub end_time_us: Option<u64>,
    pub outcome: Option<JobOutcome>,
    pub tasks_finished: u32,
    /// Sum of the known runtimes of the job's finished tasks.
    pub total_task_time_us: u64,
}

impl JobTruth {
    /// Not ended in the data.
    pub fn censored(&self) -> bool {
        self.outcome.is_none()
    }

    pub fn finished(&self) -> bool {
        self.outcome == Some(JobOutcome::Finish)
    }

    /// FINISH minus first task SCHEDULE, for finished jobs whose first
    /// schedule is inside the trace window.
    pub fn runtime_us(&self) -> Option<u64> {
        let start = self.first_schedule_us.filter(|&t| t > 0)?;
        self.finished()
            .then_some(self.end_time_us?)
            .map(|end| end.saturating_sub(start))
    }

    /// End minus submission, for ended jobs submitted inside the window.
    pub fn jct_us(&self) -> Option<u64> {
        let submit = self.submit_time_us.filter(|&t| t > 0)?;
        Some(self.end_time_us?.saturating_sub(submit))
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskTruth {
    pub job_id: u64,
    pub task_index: u32,
    pub stage: Option<u32>,
    pub submit_time_us: Option<u64>,
    pub last_schedule_us: Option<u64>,
    pub end_time_us: Option<u64>,
    /// The event that ended the task's last attempt.
    pub last_end: Option<TaskKind>,
    /// SCHEDULE events seen (attempts).
    pub attempts: u32,
    pub evictions: u32,
    pub failures: u32,
    pub machine_id: Option<u64>,
}

impl TaskTruth {
    pub fn finished(&self) -> bool {
        self.last_end == Some(TaskKind::Finish)
    }

    /// Last SCHEDULE → FINISH; `None` if unfinished or scheduled before the
    /// trace window.
    pub fn runtime_us(&self) -> Option<u64> {
        let start = self.last_schedule_us.filter(|&t| t > 0)?;
        self.finished()
            .then_some(self.end_time_us?)
            .map(|end| end.saturating_sub(start))
    }
}

/// One machine's presence from an `add` to its `remove` (or the end of the
/// data). A machine removed and re-added has several.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MachineTruth {
    pub machine_id: u64,
    pub name: Option<String>,
    pub added_us: u64,
    pub removed_us: Option<u64>,
    pub platform: Option<String>,
    pub cpus: Option<f64>,
    pub memory: Option<f64>,
    pub vm_type: Option<String>,
    pub zone: Option<String>,
    pub preemptible: Option<bool>,
    pub launch_time_us: Option<u64>,
    pub end_reason: Option<EndReason>,
}

impl MachineTruth {
    /// Launch (or add) to removal.
    pub fn lifetime_us(&self) -> Option<u64> {
        let start = self.launch_time_us.unwrap_or(self.added_us);
        Some(self.removed_us?.saturating_sub(start))
    }

    /// The lifetime did not end in an observed preemption.
    pub fn censored(&self) -> bool {
        self.end_reason != Some(EndReason::Preempted)
    }
}

/// A job that ended, with its tasks, ready to be written out.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletedJob {
    pub job: JobTruth,
    pub tasks: Vec<TaskTruth>,
}

/// Counters of events that did not fit the views (kept for the summary).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TruthAnomalies {
    /// Task events for a job never submitted (the job is created from them).
    pub tasks_of_unknown_jobs: u64,
    /// Task events after their job ended (ignored).
    pub tasks_after_job_end: u64,
    /// Removes of machines that were not present (ignored).
    pub removes_of_absent_machines: u64,
}

/// Folds events into ground-truth views.
#[derive(Debug, Default)]
pub struct TruthBuilder {
    jobs: HashMap<u64, (JobTruth, HashMap<u32, TaskTruth>)>,
    ended: HashSet<u64>,
    completed: Vec<CompletedJob>,
    machines_up: HashMap<u64, MachineTruth>,
    machines_done: Vec<MachineTruth>,
    anomalies: TruthAnomalies,
}

impl TruthBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn anomalies(&self) -> &TruthAnomalies {
        &self.anomalies
    }

    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::JobSubmitted(s) => {
                let (job, _) = self.jobs.entry(s.job_id).or_default();
                job.job_id = s.job_id;
                job.submit_time_us = Some(s.time_us);
                job.user.clone_from(&s.user);
                job.job_name.clone_from(&s.job_name);
                job.logical_name.clone_from(&s.logical_name);
                job.scheduling_class = s.scheduling_class;
                job.priority = s.priority;
                job.cpu_request = s.cpu_request;
                job.mem_request = s.mem_request;
                job.num_tasks = s.num_tasks;
                job.width = job.width.max(s.num_tasks);
                job.stages.clone_from(&s.stages);
            }
            Event::Task(t) => {
                if self.ended.contains(&t.job_id) {
                    self.anomalies.tasks_after_job_end += 1;
                    return;
                }
                let (job, tasks) = self.jobs.entry(t.job_id).or_insert_with(|| {
                    self.anomalies.tasks_of_unknown_jobs += 1;
                    (
                        JobTruth {
                            job_id: t.job_id,
                            ..JobTruth::default()
                        },
                        HashMap::new(),
                    )
                });
                let task = tasks.entry(t.task_index).or_insert_with(|| TaskTruth {
                    job_id: t.job_id,
                    task_index: t.task_index,
                    ..TaskTruth::default()
                });
                task.stage = t.stage.or(task.stage);
                task.machine_id = t.machine_id.or(task.machine_id);
                match t.kind {
                    TaskKind::Submit => {
                        task.submit_time_us.get_or_insert(t.time_us);
                    }
                    TaskKind::Schedule => {
                        task.last_schedule_us = Some(t.time_us);
                        task.attempts += 1;
                        task.last_end = None;
                        task.end_time_us = None;
                        job.first_schedule_us = Some(
                            job.first_schedule_us
                                .map_or(t.time_us, |f| f.min(t.time_us)),
                        );
                    }
                    TaskKind::Update => {}
                    kind => {
                        if kind == TaskKind::Evict {
                            task.evictions += 1;
                        }
                        if kind == TaskKind::Fail {
                            task.failures += 1;
                        }
                        task.last_end = Some(kind);
                        task.end_time_us = Some(t.time_us);
                    }
                }
                job.width = job
                    .width
                    .max(u32::try_from(tasks.len()).unwrap_or(u32::MAX));
            }
            Event::JobEnded(e) => {
                let Some((mut job, tasks)) = self.jobs.remove(&e.job_id) else {
                    self.completed.push(CompletedJob {
                        job: JobTruth {
                            job_id: e.job_id,
                            end_time_us: Some(e.time_us),
                            outcome: Some(e.outcome),
                            ..JobTruth::default()
                        },
                        tasks: Vec::new(),
                    });
                    self.ended.insert(e.job_id);
                    return;
                };
                job.end_time_us = Some(e.time_us);
                job.outcome = Some(e.outcome);
                self.ended.insert(e.job_id);
                self.completed.push(close_job(job, tasks));
            }
            Event::Machine(m) => match m.kind {
                MachineKind::Add => {
                    let record = MachineTruth {
                        machine_id: m.machine_id,
                        name: m.vm.as_ref().and_then(|v| v.name.clone()),
                        added_us: m.time_us,
                        removed_us: None,
                        platform: m.platform.clone(),
                        cpus: m.cpus,
                        memory: m.memory,
                        vm_type: m.vm.as_ref().map(|v| v.vm_type.clone()),
                        zone: m.vm.as_ref().map(|v| v.zone.clone()),
                        preemptible: m.vm.as_ref().map(|v| v.preemptible),
                        launch_time_us: m.vm.as_ref().map(|v| v.launch_time_us),
                        end_reason: None,
                    };
                    // An add of a machine already up closes the previous
                    // presence at this time (it was re-added).
                    if let Some(mut prev) = self.machines_up.insert(m.machine_id, record) {
                        prev.removed_us = Some(m.time_us);
                        self.machines_done.push(prev);
                    }
                }
                MachineKind::Update => {
                    if let Some(up) = self.machines_up.get_mut(&m.machine_id) {
                        up.platform = m.platform.clone().or(up.platform.take());
                        up.cpus = m.cpus.or(up.cpus);
                        up.memory = m.memory.or(up.memory);
                    }
                }
                MachineKind::Remove => match self.machines_up.remove(&m.machine_id) {
                    Some(mut up) => {
                        up.removed_us = Some(m.time_us);
                        up.end_reason = m.vm.as_ref().and_then(|v| v.end_reason);
                        self.machines_done.push(up);
                    }
                    None => self.anomalies.removes_of_absent_machines += 1,
                },
                // A hibernated VM is still the same presence.
                MachineKind::Hibernate | MachineKind::Resume => {}
            },
        }
    }

    /// Jobs that ended since the last call, with their tasks.
    pub fn take_completed(&mut self) -> Vec<CompletedJob> {
        std::mem::take(&mut self.completed)
    }

    /// Machine presences that ended since the last call.
    pub fn take_machines(&mut self) -> Vec<MachineTruth> {
        std::mem::take(&mut self.machines_done)
    }

    /// End of the data: every job still open is censored, every machine
    /// still up is returned without a removal time. Sorted by id.
    pub fn finish(mut self) -> (Vec<CompletedJob>, Vec<MachineTruth>) {
        let mut jobs = self.take_completed();
        let mut open: Vec<_> = self.jobs.into_values().collect();
        open.sort_by_key(|(job, _)| job.job_id);
        jobs.extend(open.into_iter().map(|(job, tasks)| close_job(job, tasks)));
        let mut machines = std::mem::take(&mut self.machines_done);
        let mut up: Vec<_> = self.machines_up.into_values().collect();
        up.sort_by_key(|m| (m.machine_id, m.added_us));
        machines.extend(up);
        (jobs, machines)
    }
}

fn close_job(mut job: JobTruth, tasks: HashMap<u32, TaskTruth>) -> CompletedJob {
    let mut tasks: Vec<TaskTruth> = tasks.into_values().collect();
    tasks.sort_by_key(|t| t.task_index);
    for t in &tasks {
        if let Some(rt) = t.runtime_us() {
            job.tasks_finished += 1;
            job.total_task_time_us += rt;
        }
    }
    CompletedJob { job, tasks }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{JobEnded, JobSubmitted, MachineEvent, TaskEvent, VmInfo};

    fn task(time_us: u64, job_id: u64, task_index: u32, kind: TaskKind) -> Event {
        Event::Task(TaskEvent {
            time_us,
            job_id,
            task_index,
            kind,
            machine_id: Some(1),
            stage: None,
        })
    }

    fn submit(time_us: u64, job_id: u64, num_tasks: u32) -> Event {
        Event::JobSubmitted(JobSubmitted {
            user: "u".into(),
            job_name: "n".into(),
            logical_name: "l".into(),
            ..JobSubmitted::new(job_id, time_us, num_tasks)
        })
    }

    #[test]
    fn runtime_is_last_schedule_to_finish_and_open_jobs_are_censored() {
        use TaskKind::*;
        let events = vec![
            submit(10, 1, 2),
            task(10, 1, 0, Submit),
            task(10, 1, 1, Submit),
            task(20, 1, 0, Schedule),
            task(25, 1, 1, Schedule),
            task(30, 1, 0, Evict),
            task(40, 1, 0, Schedule),
            task(100, 1, 0, Finish),
            task(125, 1, 1, Finish),
            Event::JobEnded(JobEnded {
                time_us: 130,
                job_id: 1,
                outcome: JobOutcome::Finish,
            }),
            task(131, 1, 0, Kill),
            submit(50, 2, 1),
            task(0, 2, 0, Schedule),
            task(60, 2, 0, Finish),
        ];
        let mut b = TruthBuilder::new();
        for e in &events {
            b.apply(e);
        }
        let done = b.take_completed();
        assert_eq!(done.len(), 1);
        let CompletedJob { job, tasks } = &done[0];
        assert_eq!(tasks[0].runtime_us(), Some(60));
        assert_eq!((tasks[0].attempts, tasks[0].evictions), (2, 1));
        assert_eq!(tasks[1].runtime_us(), Some(100));
        assert_eq!(job.runtime_us(), Some(110));
        assert_eq!(job.jct_us(), Some(120));
        assert_eq!(
            (job.total_task_time_us, job.tasks_finished, job.width),
            (160, 2, 2)
        );
        assert!(job.finished() && !job.censored());
        assert_eq!(b.anomalies().tasks_after_job_end, 1);

        let (rest, _) = b.finish();
        let job2 = &rest[0];
        assert!(job2.job.censored() && !job2.job.finished());
        assert_eq!(job2.job.runtime_us(), None);
        // Scheduled before the window: the runtime is unknown.
        assert!(job2.tasks[0].finished());
        assert_eq!(job2.tasks[0].runtime_us(), None);
    }

    #[test]
    fn machine_presences_and_vm_lifetimes() {
        let vm = |end_reason| VmInfo {
            name: Some("vm".into()),
            vm_type: "t".into(),
            zone: "z".into(),
            preemptible: true,
            launch_time_us: 5,
            end_reason,
        };
        let m = |time_us, machine_id, kind, vm| {
            Event::Machine(MachineEvent {
                time_us,
                machine_id,
                kind,
                platform: None,
                cpus: Some(1.0),
                memory: None,
                vm,
                cluster: String::new(),
            })
        };
        let mut b = TruthBuilder::new();
        for e in [
            m(5, 1, MachineKind::Add, Some(vm(None))),
            m(7, 2, MachineKind::Add, None),
            m(9, 3, MachineKind::Remove, None),
            m(
                50,
                1,
                MachineKind::Remove,
                Some(vm(Some(EndReason::Preempted))),
            ),
        ] {
            b.apply(&e);
        }
        assert_eq!(b.anomalies().removes_of_absent_machines, 1);
        let (_, machines) = b.finish();
        assert_eq!(machines.len(), 2);
        assert_eq!(machines[0].lifetime_us(), Some(45));
        assert!(!machines[0].censored());
        assert_eq!((machines[1].machine_id, machines[1].removed_us), (2, None));
        assert!(machines[1].censored());
    }
}
