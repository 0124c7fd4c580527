//! What has been said of each Slurm job, so that each snapshot of `squeue`
//! yields only what is new (the mapping is in the module above).

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::squeue::{Snapshot, SqueueJob, array_indices};
use crate::Observed;
use jobcast_ingest::event::{
    Event, JobEnded, JobOutcome, JobSubmitted, MAX_TASKS_PER_JOB, TaskEvent, TaskKind,
};
use jobcast_ingest::slurm::{job_outcome, task_end};

/// What has been said of one task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct TaskSaid {
    scheduled: bool,
    ended: Option<TaskKind>,
    /// Requeues seen (`restart_cnt`): each starts a new attempt.
    #[serde(default)]
    restarts: u32,
}

/// What has been said of one job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct JobSaid {
    /// An array's indices in task order; empty for a plain job.
    array: Vec<u32>,
    tasks: Vec<TaskSaid>,
    /// The latest of its tasks' ends said, µs.
    last_end_us: u64,
    ended: bool,
}

impl JobSaid {
    fn task_index(&self, array_task_id: Option<u32>) -> Option<usize> {
        match array_task_id {
            None if self.array.is_empty() => Some(0),
            Some(id) => self.array.binary_search(&id).ok(),
            None => None,
        }
    }
}

/// What has been said of each Slurm job still in `squeue`, so that the next
/// snapshot says only what is new. Serialisable: the watcher keeps it
/// across restarts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlurmTracker {
    jobs: BTreeMap<u64, JobSaid>,
    /// The latest Slurm time seen, µs.
    latest_us: u64,
    /// Whether the site's history was read (or none was asked for) at the
    /// first look; a state saved before histories were read has no
    /// history to read.
    #[serde(default = "read_already")]
    history_read: bool,
    /// Jobs said from the history that `squeue` still lists: it says
    /// nothing more of them.
    #[serde(default)]
    from_history: BTreeSet<u64>,
}

fn read_already() -> bool {
    true
}

const US: u64 = 1_000_000;

impl SlurmTracker {
    /// Jobs being followed (seen and not yet gone from `squeue`).
    pub fn jobs(&self) -> usize {
        self.jobs.len()
    }

    /// The task number of array index `array_task_id` of `job_id` (`None`
    /// for a plain job's only task), if the job is followed and has it.
    pub fn task_index(&self, job_id: u64, array_task_id: Option<u32>) -> Option<u32> {
        let index = self.jobs.get(&job_id)?.task_index(array_task_id)?;
        Some(index as u32)
    }

    /// The array index of task `task` of `job_id`; `None` for a plain job
    /// or a task it does not have.
    pub fn array_index(&self, job_id: u64, task: u32) -> Option<u32> {
        self.jobs.get(&job_id)?.array.get(task as usize).copied()
    }

    /// Whether the first look is still to come, when the site's history
    /// is read.
    pub fn wants_history(&self) -> bool {
        !self.history_read
    }

    /// The site's history was read at the first look: `jobs`, each said
    /// from it whole (ended), are not said again when `squeue` lists them.
    pub fn history_read(&mut self, jobs: impl IntoIterator<Item = u64>) {
        self.history_read = true;
        self.from_history.extend(jobs);
    }

    /// The events `snapshot` (every record `squeue --json` listed) adds to
    /// what was said before.
    pub fn observe(&mut self, snapshot: &Snapshot) -> Observed {
        let mut observed = Observed::default();
        let mut by_job: BTreeMap<u64, Vec<&SqueueJob>> = BTreeMap::new();
        // The history's jobs are said; once gone from `squeue`, they are
        // not listed again.
        let listed: BTreeSet<u64> = snapshot
            .jobs
            .iter()
            .map(SqueueJob::job)
            .chain(snapshot.unreadable.iter().copied())
            .collect();
        self.from_history.retain(|id| listed.contains(id));
        for record in &snapshot.jobs {
            if self.from_history.contains(&record.job()) {
                continue;
            }
            by_job.entry(record.job()).or_default().push(record);
            for t in [record.submit_time, record.start_time, record.end_time] {
                self.latest_us = self.latest_us.max(t.saturating_mul(US));
            }
        }
        // Ordered (time, rank) so that a job's submission precedes its
        // tasks' events, which precede its end, within one second.
        let mut events: Vec<(u64, u8, Event)> = Vec::new();
        for (&job_id, records) in &by_job {
            let said = match self.jobs.entry(job_id) {
                Entry::Occupied(said) => said.into_mut(),
                Entry::Vacant(entry) => match first_sight(job_id, records) {
                    Ok((said, submitted)) => {
                        events.push((submitted.time_us, 0, Event::JobSubmitted(submitted)));
                        entry.insert(said)
                    }
                    Err(why) => {
                        observed.skipped.push(why);
                        continue;
                    }
                },
            };
            for record in records {
                tasks_of(job_id, record, said, &mut events, &mut observed.skipped);
            }
            end_if_done(job_id, said, &mut events);
        }
        // Gone from squeue: ended jobs are forgotten; others are lost. A
        // job whose records could not be read is still listed.
        let gone: Vec<u64> = self
            .jobs
            .keys()
            .copied()
            .filter(|id| !by_job.contains_key(id) && !snapshot.unreadable.contains(id))
            .collect();
        for job_id in gone {
            let said = self.jobs.remove(&job_id).expect("listed");
            if said.ended {
                continue;
            }
            observed.lost_jobs += 1;
            let time_us = self.latest_us;
            for (index, task) in said.tasks.iter().enumerate() {
                if task.ended.is_none() {
                    events.push((
                        time_us,
                        2,
                        task_event(time_us, job_id, index, TaskKind::Lost),
                    ));
                }
            }
            let ended = JobEnded {
                time_us,
                job_id,
                outcome: JobOutcome::Lost,
            };
            events.push((time_us, 3, Event::JobEnded(ended)));
        }
        events.sort_by_key(|(time, rank, _)| (*time, *rank));
        observed.events = events.into_iter().map(|(_, _, e)| e).collect();
        observed.followed = self.jobs.len();
        observed
    }
}

/// A job seen for the first time: what will be said of it, and its
/// submission.
fn first_sight(job_id: u64, records: &[&SqueueJob]) -> Result<(JobSaid, JobSubmitted), String> {
    let first = records[0];
    let array: Vec<u32> = if first.array_job_id == 0 {
        Vec::new()
    } else {
        let mut indices = BTreeSet::new();
        for record in records {
            match record.array_task_id {
                Some(id) => {
                    indices.insert(id);
                }
                None => {
                    indices.extend(array_indices(&record.array_task_string).ok_or_else(|| {
                        format!(
                            "job {job_id}: array_task_string {:?} is not a list of array indices",
                            record.array_task_string
                        )
                    })?)
                }
            }
        }
        indices.into_iter().collect()
    };
    let num_tasks = array.len().max(1);
    if num_tasks > MAX_TASKS_PER_JOB as usize {
        return Err(format!(
            "job {job_id}: {num_tasks} tasks, more than {MAX_TASKS_PER_JOB}"
        ));
    }
    let cpus = records.iter().find_map(|r| r.cpus).unwrap_or(1);
    // `--mem-per-cpu`, or else `--mem` (a node's: a task runs on one).
    let mem_mb = records
        .iter()
        .find_map(|r| r.memory_per_cpu)
        .map(|per_cpu| per_cpu * u64::from(cpus))
        .or_else(|| records.iter().find_map(|r| r.memory_per_node))
        .unwrap_or(0);
    let submitted = JobSubmitted {
        time_us: records
            .iter()
            .map(|r| r.submit_time)
            .min()
            .unwrap_or(0)
            .saturating_mul(US),
        job_id,
        user: first.user_name.clone(),
        group: first.group_name.clone(),
        job_name: first.name.clone(),
        logical_name: first.name.clone(),
        scheduling_class: 0,
        priority: 0,
        cpu_request: f64::from(cpus),
        mem_request: mem_mb as f64,
        partition: first.partition.clone(),
        time_limit_us: first.time_limit.map(|minutes| u64::from(minutes) * 60 * US),
        deadline_us: records
            .iter()
            .map(|r| r.deadline)
            .find(|&d| d > 0)
            .map(|s| s.saturating_mul(US)),
        num_tasks: num_tasks as u32,
        stages: None,
        cluster: first.cluster.clone(),
    };
    let said = JobSaid {
        array,
        tasks: vec![TaskSaid::default(); num_tasks],
        last_end_us: 0,
        ended: false,
    };
    Ok((said, submitted))
}

fn task_event(time_us: u64, job_id: u64, index: usize, kind: TaskKind) -> Event {
    Event::Task(TaskEvent {
        time_us,
        job_id,
        task_index: index as u32,
        kind,
        machine_id: None,
        stage: None,
    })
}

/// The events `record` adds for its task (or, for a pending array's record
/// that ended, for each task it still held).
fn tasks_of(
    job_id: u64,
    record: &SqueueJob,
    said: &mut JobSaid,
    events: &mut Vec<(u64, u8, Event)>,
    skipped: &mut Vec<String>,
) {
    let end = task_end(&record.job_state);
    let indices: Vec<usize> = if record.is_array_remainder() {
        // A pending array's record: its tasks have not run; they end with
        // it only if it was cancelled (or failed) as a whole.
        if end.is_none() {
            return;
        }
        let ids = array_indices(&record.array_task_string).unwrap_or_default();
        ids.iter()
            .filter_map(|&id| said.task_index(Some(id)))
            .collect()
    } else {
        match said.task_index(record.array_task_id) {
            Some(index) => vec![index],
            None => {
                skipped.push(format!(
                    "job {job_id}: array index {:?} was not in the array when it was first seen",
                    record.array_task_id
                ));
                return;
            }
        }
    };
    // A pending job's start is the backfill scheduler's forecast; a task
    // cancelled before it ran gets a start equal to its end.
    let ran = record.start_time > 0
        && match end {
            None => matches!(
                record.job_state.as_str(),
                "RUNNING" | "COMPLETING" | "SUSPENDED"
            ),
            Some(_) => record.job_state != "CANCELLED" || record.start_time < record.end_time,
        };
    for index in indices {
        let task = &mut said.tasks[index];
        // Requeued (by an operator, a node failure or preemption): the
        // attempt running then was evicted at the requeue, and a new one
        // waits, unless the job was already said to have ended.
        if record.restart_cnt > task.restarts && !said.ended {
            task.restarts = record.restart_cnt;
            if task.scheduled && task.ended.is_none() {
                let time_us = record.submit_time.saturating_mul(US);
                events.push((
                    time_us,
                    2,
                    task_event(time_us, job_id, index, TaskKind::Evict),
                ));
            }
            task.scheduled = false;
            task.ended = None;
        }
        if ran && !task.scheduled && task.ended.is_none() {
            task.scheduled = true;
            let time_us = record.start_time.saturating_mul(US);
            events.push((
                time_us,
                1,
                task_event(time_us, job_id, index, TaskKind::Schedule),
            ));
        }
        if let Some(kind) = end
            && task.ended.is_none()
        {
            task.ended = Some(kind);
            let time_us = record.end_time.max(record.start_time).saturating_mul(US);
            said.last_end_us = said.last_end_us.max(time_us);
            events.push((time_us, 2, task_event(time_us, job_id, index, kind)));
        }
    }
}

/// `job_ended` once every task of the job has ended.
fn end_if_done(job_id: u64, said: &mut JobSaid, events: &mut Vec<(u64, u8, Event)>) {
    if said.ended || said.tasks.iter().any(|t| t.ended.is_none()) {
        return;
    }
    said.ended = true;
    let kinds: Vec<TaskKind> = said.tasks.iter().filter_map(|t| t.ended).collect();
    let outcome = job_outcome(&kinds);
    let time_us = said.last_end_us;
    events.push((
        time_us,
        3,
        Event::JobEnded(JobEnded {
            time_us,
            job_id,
            outcome,
        }),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::squeue::{SqueueError, parse_squeue};

    /// Four snapshots of `squeue --json` taken from a real Slurm 22.05.8
    /// single-node cluster, 1, 3, 6 and 22 s after submitting: an array
    /// `--array=0-5%2`, a sparse array `--array=1,3,5-7`, a plain 2-CPU
    /// job, one that exits 3, and one cancelled while held.
    fn snapshots() -> Vec<Vec<SqueueJob>> {
        include_str!("../../tests/data/slurm/squeue-22.05.jsonl")
            .lines()
            .map(|line| parse_squeue(line.as_bytes()).unwrap().jobs)
            .collect()
    }

    fn observe_all(tracker: &mut SlurmTracker, snapshots: &[Vec<SqueueJob>]) -> Vec<Event> {
        snapshots
            .iter()
            .flat_map(|snapshot| tracker.observe(&snapshot.clone().into()).events)
            .collect()
    }

    fn task_events(events: &[Event], job: u64) -> Vec<(u32, TaskKind, u64)> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Task(t) if t.job_id == job => Some((t.task_index, t.kind, t.time_us / US)),
                _ => None,
            })
            .collect()
    }

    const T0: u64 = 1_795_713_323;

    #[test]
    fn a_real_clusters_arrays_and_jobs_become_jobs_with_tasks_at_slurms_times() {
        let events = observe_all(&mut SlurmTracker::default(), &snapshots());
        let submitted: BTreeMap<u64, (u32, f64, String)> = events
            .iter()
            .filter_map(|e| match e {
                Event::JobSubmitted(j) => {
                    assert_eq!(j.time_us, T0 * US);
                    // The partition and the requested limit travel with it
                    // (`--time=1` or `--time=2` minutes).
                    assert_eq!(j.partition, "debug");
                    assert!(
                        matches!(j.time_limit_us, Some(60_000_000 | 120_000_000)),
                        "{j:?}"
                    );
                    Some((j.job_id, (j.num_tasks, j.cpu_request, j.job_name.clone())))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            submitted,
            BTreeMap::from([
                (1, (6, 1.0, "arr".into())),
                (2, (5, 1.0, "sparse".into())),
                (3, (1, 2.0, "plain".into())),
                (4, (1, 1.0, "failing".into())),
                (5, (1, 1.0, "cancelled".into())),
            ])
        );
        // The sparse array's indices 1, 3, 5, 6, 7 are its tasks 0 to 4.
        let sparse = task_events(&events, 2);
        assert_eq!(sparse.len(), 10);
        for index in 0..5 {
            assert!(sparse.contains(&(index, TaskKind::Schedule, T0 + 1)));
            assert!(sparse.contains(&(index, TaskKind::Finish, T0 + 3)));
        }
        // Two at a time (`%2`): the last pair starts 8 and 9 s in.
        let arr = task_events(&events, 1);
        assert!(arr.contains(&(4, TaskKind::Schedule, T0 + 8)));
        assert!(arr.contains(&(5, TaskKind::Finish, T0 + 12)));
        assert_eq!(arr.len(), 12);
        assert_eq!(
            task_events(&events, 4),
            [(0, TaskKind::Schedule, T0 + 4), (0, TaskKind::Fail, T0 + 5)]
        );
        // Cancelled while held: it never ran.
        assert_eq!(task_events(&events, 5), [(0, TaskKind::Kill, T0 + 2)]);
        let ended: BTreeMap<u64, (JobOutcome, u64)> = events
            .iter()
            .filter_map(|e| match e {
                Event::JobEnded(j) => Some((j.job_id, (j.outcome, j.time_us / US))),
                _ => None,
            })
            .collect();
        assert_eq!(
            ended,
            BTreeMap::from([
                (1, (JobOutcome::Finish, T0 + 12)),
                (2, (JobOutcome::Finish, T0 + 3)),
                (3, (JobOutcome::Finish, T0 + 6)),
                (4, (JobOutcome::Fail, T0 + 5)),
                (5, (JobOutcome::Kill, T0 + 2)),
            ])
        );
        // Each job's events in order: submitted, then its tasks', then ended.
        for job in 1..=5 {
            let kinds: Vec<&str> = events
                .iter()
                .filter(|e| e.job_id() == Some(job))
                .map(Event::type_name)
                .collect();
            assert_eq!(kinds.first(), Some(&"job_submitted"), "job {job}");
            assert_eq!(kinds.last(), Some(&"job_ended"), "job {job}");
        }
    }

    #[test]
    fn a_snapshot_seen_again_or_a_restart_from_the_kept_state_says_nothing_twice() {
        let snapshots = snapshots();
        let whole = observe_all(&mut SlurmTracker::default(), &snapshots);
        let mut tracker = SlurmTracker::default();
        let mut events = observe_all(&mut tracker, &snapshots[..2]);
        assert!(
            tracker
                .observe(&snapshots[1].clone().into())
                .events
                .is_empty()
        );
        let kept = serde_json::to_vec(&tracker).unwrap();
        let mut restarted: SlurmTracker = serde_json::from_slice(&kept).unwrap();
        events.extend(observe_all(&mut restarted, &snapshots[2..]));
        assert_eq!(events, whole);
        // Every job ended and is still listed: none is lost, all followed.
        assert_eq!(restarted.jobs(), 5);
        assert!(
            restarted
                .observe(&snapshots[3].clone().into())
                .events
                .is_empty()
        );
    }

    #[test]
    fn polls_far_apart_say_the_same_as_close_ones_since_times_are_slurms() {
        let snapshots = snapshots();
        let mut close = observe_all(&mut SlurmTracker::default(), &snapshots);
        let mut far = observe_all(
            &mut SlurmTracker::default(),
            &[snapshots[0].clone(), snapshots[3].clone()],
        );
        let key = |e: &Event| format!("{e:?}");
        close.sort_by_key(key);
        far.sort_by_key(key);
        assert_eq!(far, close);
    }

    #[test]
    fn a_job_gone_from_squeue_before_it_ended_is_lost_and_an_ended_one_forgotten() {
        let snapshots = snapshots();
        let mut tracker = SlurmTracker::default();
        observe_all(&mut tracker, &snapshots[..2]);
        // None had ended by the second snapshot (3 s in).
        let observed = tracker.observe(&Snapshot::default());
        assert_eq!(observed.lost_jobs, 5);
        assert_eq!(tracker.jobs(), 0);
        let lost: Vec<u64> = observed
            .events
            .iter()
            .filter_map(|e| match e {
                Event::JobEnded(j) if j.outcome == JobOutcome::Lost => Some(j.job_id),
                _ => None,
            })
            .collect();
        assert_eq!(lost, [1, 2, 3, 4, 5]);
    }

    /// A followed job whose record cannot be read once is still listed:
    /// nothing is said of it until a snapshot can say how it stands.
    #[test]
    fn a_followed_job_whose_record_is_unreadable_is_not_lost() {
        let snapshots = snapshots();
        let mut tracker = SlurmTracker::default();
        observe_all(&mut tracker, &snapshots[..2]);
        // The third snapshot with job 2's records (the sparse array)
        // broken: `array_task_id` a string, as a Slurm bug might print it.
        let mut json: serde_json::Value = serde_json::from_str(
            include_str!("../../tests/data/slurm/squeue-22.05.jsonl")
                .lines()
                .nth(2)
                .unwrap(),
        )
        .unwrap();
        for record in json["jobs"].as_array_mut().unwrap() {
            if record["array_job_id"] == 2 {
                record["array_task_id"] = "five".into();
            }
        }
        let broken = parse_squeue(json.to_string().as_bytes()).unwrap();
        assert_eq!(broken.unreadable.iter().copied().collect::<Vec<_>>(), [2]);
        let observed = tracker.observe(&broken);
        assert_eq!(observed.lost_jobs, 0);
        assert!(task_events(&observed.events, 2).is_empty());
        assert_eq!(tracker.jobs(), 5);
        // Read again, job 2 says what it missed, once: the same events
        // as a tracker that never met the broken snapshot.
        let mut events = observed.events;
        events.extend(observe_all(&mut tracker, &snapshots[2..]));
        let mut clean = SlurmTracker::default();
        observe_all(&mut clean, &snapshots[..2]);
        let expected = observe_all(&mut clean, &snapshots[2..]);
        assert!(!task_events(&expected, 2).is_empty());
        assert_eq!(task_events(&events, 2), task_events(&expected, 2));
    }

    #[test]
    fn a_requeued_job_is_evicted_at_the_requeue_and_runs_again() {
        // As Slurm 22.05 shows `scontrol requeue` of a running job: pending
        // again, `restart_cnt` 1, submitted anew at the requeue.
        let job = |state: &str, submit: u64, start: u64, end: u64, restarts: u32| SqueueJob {
            job_id: 7,
            array_job_id: 0,
            array_task_id: None,
            array_task_string: String::new(),
            name: "rq".into(),
            user_name: "root".into(),
            group_name: "root".into(),
            partition: "debug".into(),
            cluster: String::new(),
            account: String::new(),
            job_state: state.into(),
            submit_time: submit,
            start_time: start,
            end_time: end,
            cpus: Some(1),
            memory_per_cpu: Some(1000),
            memory_per_node: None,
            restart_cnt: restarts,
            priority: None,
            time_limit: None,
            deadline: 0,
        };
        let mut tracker = SlurmTracker::default();
        let events = observe_all(
            &mut tracker,
            &[
                vec![job("RUNNING", 100, 101, 221, 0)],
                // The pending job's start and end are forecasts.
                vec![job("PENDING", 104, 224, 344, 1)],
                vec![job("PENDING", 104, 224, 344, 1)],
                vec![job("RUNNING", 104, 224, 344, 1)],
                vec![job("COMPLETED", 104, 224, 254, 1)],
            ],
        );
        assert_eq!(
            task_events(&events, 7),
            [
                (0, TaskKind::Schedule, 101),
                (0, TaskKind::Evict, 104),
                (0, TaskKind::Schedule, 224),
                (0, TaskKind::Finish, 254),
            ]
        );
        assert!(matches!(
            events.last(),
            Some(Event::JobEnded(JobEnded {
                outcome: JobOutcome::Finish,
                ..
            }))
        ));
    }

    /// A task past its time limit times out (its job ends killed), a
    /// preempted one is evicted; a job given `--mem` (a node's memory) asks
    /// for it all.
    #[test]
    fn a_timeout_is_its_own_end_a_preemption_an_eviction_and_a_nodes_memory_the_jobs() {
        let job = |id: u64, state: &str| SqueueJob {
            job_id: id,
            array_job_id: 0,
            array_task_id: None,
            array_task_string: String::new(),
            name: "t".into(),
            user_name: "root".into(),
            group_name: "root".into(),
            partition: "debug".into(),
            cluster: String::new(),
            account: String::new(),
            job_state: state.into(),
            submit_time: 100,
            start_time: 101,
            end_time: 161,
            cpus: Some(2),
            memory_per_cpu: None,
            memory_per_node: Some(3000),
            restart_cnt: 0,
            priority: None,
            time_limit: Some(1),
            deadline: 0,
        };
        let events = observe_all(
            &mut SlurmTracker::default(),
            &[
                vec![job(1, "RUNNING"), job(2, "RUNNING")],
                vec![job(1, "TIMEOUT"), job(2, "PREEMPTED")],
            ],
        );
        assert_eq!(
            task_events(&events, 1),
            [(0, TaskKind::Schedule, 101), (0, TaskKind::Timeout, 161)]
        );
        let ended = |job: u64| {
            events.iter().find_map(|e| match e {
                Event::JobEnded(j) if j.job_id == job => Some(j.outcome),
                _ => None,
            })
        };
        assert_eq!(ended(1), Some(JobOutcome::Kill));
        assert_eq!(
            task_events(&events, 2),
            [(0, TaskKind::Schedule, 101), (0, TaskKind::Evict, 161)]
        );
        let memory: Vec<f64> = events
            .iter()
            .filter_map(|e| match e {
                Event::JobSubmitted(j) => Some(j.mem_request),
                _ => None,
            })
            .collect();
        assert_eq!(memory, [3000.0, 3000.0]);
    }

    #[test]
    fn output_that_is_not_json_or_an_error_squeue_reports_says_where_and_why() {
        let bad = parse_squeue(b"{\"jobs\": [\n{\"job_id\": 1,]}").unwrap_err();
        assert!(matches!(bad, SqueueError::Json { line: 2, .. }), "{bad}");
        // A record that is not a job costs only itself.
        let good = include_str!("../../tests/data/slurm/squeue-22.05.jsonl")
            .lines()
            .next()
            .unwrap();
        let mut json: serde_json::Value = serde_json::from_str(good).unwrap();
        let records = json["jobs"].as_array().unwrap().len();
        json["jobs"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"job_id": "x"}));
        let read = parse_squeue(json.to_string().as_bytes()).unwrap();
        assert_eq!(read.jobs.len(), records);
        assert_eq!(read.skipped.len(), 1);
        assert!(
            read.skipped[0].starts_with(&format!(
                "squeue --json record {records} (job_id \"x\"): invalid type"
            )),
            "{}",
            read.skipped[0]
        );
        let reported = parse_squeue(
            br#"{"errors": [{"error": "Unable to contact slurm controller"}], "jobs": []}"#,
        )
        .unwrap_err();
        assert!(
            reported.to_string().contains("Unable to contact"),
            "{reported}"
        );
        let mut tracker = SlurmTracker::default();
        let weird = SqueueJob {
            array_job_id: 9,
            job_id: 9,
            array_task_string: "x".into(),
            ..snapshots()[0][0].clone()
        };
        let observed = tracker.observe(&vec![weird].into());
        assert!(observed.events.is_empty());
        assert!(
            observed.skipped[0].contains("job 9"),
            "{:?}",
            observed.skipped
        );
    }

    /// Jobs said from the site's history are not said again while
    /// `squeue` lists them, nor counted lost once it no longer does; the
    /// others are followed as ever. A state saved before histories were
    /// read has none to read.
    #[test]
    fn jobs_said_from_the_history_are_not_said_again() {
        let snapshots = snapshots();
        let mut alone = SlurmTracker::default();
        let all = observe_all(&mut alone, &snapshots);
        let jobs: BTreeSet<u64> = snapshots[0].iter().map(SqueueJob::job).collect();
        let ids: Vec<u64> = jobs.into_iter().collect();
        let (&kept, told) = ids.split_first().unwrap();
        let mut tracker = SlurmTracker::default();
        assert!(tracker.wants_history());
        tracker.history_read(told.iter().copied());
        assert!(!tracker.wants_history());
        let mut events = observe_all(&mut tracker, &snapshots);
        // Gone from squeue: nothing of them, not even `lost`.
        events.extend(tracker.observe(&Vec::new().into()).events);
        let of = |events: &[Event], job: u64| -> Vec<Event> {
            events
                .iter()
                .filter(|e| e.job_id() == Some(job))
                .cloned()
                .collect()
        };
        assert!(!of(&all, kept).is_empty());
        assert_eq!(of(&events, kept), of(&all, kept));
        for &job in told {
            assert!(of(&events, job).is_empty(), "job {job}: {events:?}");
        }
        assert!(tracker.from_history.is_empty());
        let old: SlurmTracker = serde_json::from_str(r#"{"jobs": {}, "latest_us": 5}"#).unwrap();
        assert!(!old.wants_history());
    }
}
