//! A job whose tasks' runtimes are known, laid out in time as a cluster
//! would report it: submitted, each stage's tasks scheduled once the
//! stage's parents have ended (a root at once) and finished a runtime
//! later, then ended. The events a DAG framework sends for one job; trace
//! builders that know runtimes but no timeline (`tpch-dags`, DAGs composed
//! of recurring jobs) use it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::event::{Event, JobEnded, JobOutcome, JobSubmitted, TaskEvent, TaskKind};

/// The events of `job` (submitted at its `time_us`) whose task `i` runs
/// `runtimes_us[i]` (at least 1 µs): a stage's tasks run in index order on
/// `executors` slots of their own, each on the one free first (`None`: all
/// at once), as Spark's waves do. A job without stages is one stage. Its
/// stages must list every parent before its children, and its runtimes
/// must number its tasks.
pub fn job_events(job: &JobSubmitted, runtimes_us: &[u64], executors: Option<u32>) -> Vec<Event> {
    let arrival = job.time_us;
    let whole = [(None, Vec::new(), runtimes_us.len() as u32)];
    let stages: Vec<(Option<u32>, Vec<u32>, u32)> = match &job.stages {
        Some(stages) => stages
            .iter()
            .map(|s| (Some(s.id), s.parents.clone(), s.num_tasks))
            .collect(),
        None => whole.to_vec(),
    };
    let mut events = vec![Event::JobSubmitted(job.clone())];
    let mut stage_end: HashMap<u32, u64> = HashMap::with_capacity(stages.len());
    let mut task_index = 0u32;
    let mut end = arrival;
    for (id, parents, num_tasks) in stages {
        let start = parents
            .iter()
            .map(|p| {
                *stage_end
                    .get(p)
                    .expect("parents listed before their children")
            })
            .max()
            .unwrap_or(arrival);
        let slots = executors.unwrap_or(num_tasks).clamp(1, num_tasks.max(1));
        let mut free: BinaryHeap<Reverse<u64>> = (0..slots).map(|_| Reverse(start)).collect();
        let mut stage_finish = start;
        for _ in 0..num_tasks {
            let runtime = runtimes_us[task_index as usize].max(1);
            let Reverse(at) = free.pop().expect("at least one slot");
            let finish = at + runtime;
            for (time_us, kind) in [(at, TaskKind::Schedule), (finish, TaskKind::Finish)] {
                events.push(Event::Task(TaskEvent {
                    time_us,
                    job_id: job.job_id,
                    task_index,
                    kind,
                    machine_id: None,
                    stage: id,
                }));
            }
            free.push(Reverse(finish));
            stage_finish = stage_finish.max(finish);
            task_index += 1;
        }
        if let Some(id) = id {
            stage_end.insert(id, stage_finish);
        }
        end = end.max(stage_finish);
    }
    events.push(Event::JobEnded(JobEnded {
        time_us: end,
        job_id: job.job_id,
        outcome: JobOutcome::Finish,
    }));
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Stage;

    fn finishes(events: &[Event]) -> Vec<(u32, u64, Option<u32>)> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Task(t) if t.kind == TaskKind::Finish => {
                    Some((t.task_index, t.time_us, t.stage))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn stages_wait_for_their_parents_and_tasks_for_an_executor() {
        let stage = |id, parents: &[u32], num_tasks| Stage {
            id,
            parents: parents.to_vec(),
            num_tasks,
            name: None,
        };
        let job = JobSubmitted {
            stages: Some(vec![
                stage(7, &[], 3),
                stage(8, &[], 1),
                stage(9, &[7, 8], 1),
            ]),
            ..JobSubmitted::new(1, 100, 5)
        };
        let runtimes = [10, 20, 5, 50, 0];
        // Two executors: stage 7's third task waits for the first's.
        let mut got = finishes(&job_events(&job, &runtimes, Some(2)));
        got.sort_unstable();
        assert_eq!(
            got,
            [
                (0, 110, Some(7)),
                (1, 120, Some(7)),
                (2, 115, Some(7)),
                (3, 150, Some(8)),
                (4, 151, Some(9)), // after both parents; 0 µs runs 1 µs
            ]
        );
        // Unlimited: every task of a stage at once.
        let all = job_events(&job, &runtimes, None);
        assert!(finishes(&all).contains(&(2, 105, Some(7))));
        match all.last() {
            Some(Event::JobEnded(e)) => {
                assert_eq!((e.time_us, e.outcome), (151, JobOutcome::Finish))
            }
            other => panic!("{other:?}"),
        }
        // A job without stages is one stage.
        let flat = JobSubmitted::new(2, 0, 2);
        assert_eq!(
            finishes(&job_events(&flat, &[3, 4], Some(1))),
            [(0, 3, None), (1, 7, None)]
        );
    }
}
