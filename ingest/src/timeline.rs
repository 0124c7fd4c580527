//! A job whose tasks' runtimes are known, laid out in time as a cluster
//! would report it: submitted, each stage's tasks scheduled once the
//! stage's parents have ended (a root at once) and finished a runtime
//! later, then ended. The events a DAG framework sends for one job; trace
//! builders that know runtimes but no timeline (`tpch-dags`, DAGs composed
//! of recurring jobs) use it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::dag;
use crate::event::{Event, JobEnded, JobOutcome, JobSubmitted, Stage, TaskEvent, TaskKind};

/// The events of `job` (submitted at its `time_us`) whose task `i` runs
/// `runtimes_us[i]` (at least 1 µs): a stage's tasks run in index order on
/// `executors` slots of their own, each on the one free first (`None`: all
/// at once), as Spark's waves do. A job without stages is one stage; a
/// stage may be listed before its parents. Its runtimes must number its
/// tasks and its stages form a DAG: a stage on a cycle starts at arrival.
pub fn job_events(job: &JobSubmitted, runtimes_us: &[u64], executors: Option<u32>) -> Vec<Event> {
    let arrival = job.time_us;
    let whole = [Stage {
        id: 0,
        parents: Vec::new(),
        num_tasks: runtimes_us.len() as u32,
        name: None,
    }];
    let stages: &[Stage] = job.stages.as_deref().unwrap_or(&whole);
    // Tasks are numbered stage by stage as listed; stages run parents first.
    let mut first_task = HashMap::with_capacity(stages.len());
    let mut next = 0u32;
    for s in stages {
        first_task.insert(s.id, next);
        next += s.num_tasks;
    }
    let mut order = dag::topological_order(stages);
    let on_a_cycle: Vec<u32> = stages
        .iter()
        .map(|s| s.id)
        .filter(|id| !order.contains(id))
        .collect();
    order.extend(on_a_cycle);
    let by_id: HashMap<u32, &Stage> = stages.iter().map(|s| (s.id, s)).collect();
    let mut events = vec![Event::JobSubmitted(job.clone())];
    let mut stage_end: HashMap<u32, u64> = HashMap::with_capacity(stages.len());
    let mut end = arrival;
    for id in order {
        let stage = by_id[&id];
        let start = stage
            .parents
            .iter()
            .filter_map(|p| stage_end.get(p).copied())
            .max()
            .unwrap_or(arrival);
        let slots = executors
            .unwrap_or(stage.num_tasks)
            .clamp(1, stage.num_tasks.max(1));
        let mut free: BinaryHeap<Reverse<u64>> = (0..slots).map(|_| Reverse(start)).collect();
        let mut stage_finish = start;
        let first = first_task[&id];
        for task_index in first..first + stage.num_tasks {
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
                    stage: job.stages.as_ref().map(|_| id),
                }));
            }
            free.push(Reverse(finish));
            stage_finish = stage_finish.max(finish);
        }
        stage_end.insert(id, stage_finish);
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
        // A parent listed after its child: numbering follows the list,
        // running follows the dependencies.
        let forward = JobSubmitted {
            stages: Some(vec![stage(1, &[2], 1), stage(2, &[], 1)]),
            ..JobSubmitted::new(3, 0, 2)
        };
        let mut got = finishes(&job_events(&forward, &[5, 10], None));
        got.sort_unstable();
        assert_eq!(got, [(0, 15, Some(1)), (1, 10, Some(2))]);
        // A job without stages is one stage.
        let flat = JobSubmitted::new(2, 0, 2);
        assert_eq!(
            finishes(&job_events(&flat, &[3, 4], Some(1))),
            [(0, 3, None), (1, 7, None)]
        );
    }
}
