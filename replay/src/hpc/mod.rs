//! HPC workloads (the Parallel Workloads Archive's logs, a site's Slurm
//! accounting): single parallel jobs, each with its requested time.
//!
//! - [`predictions`]: every job's runtime predicted at its submission from
//!   the jobs that ended before, by jobcast, Last-2 and the user's own
//!   request, scored as the field scores them.
//! - [`predictor`]: those three predictors behind one type.
//! - [`backfill`]: the site's scheduler, FCFS with EASY backfilling, run
//!   on the log's jobs with each predictor.

pub mod backfill;
pub mod predictions;
pub mod predictor;

use std::collections::HashMap;

use jobcast_ingest::event::{TaskEvent, TaskKind};

/// How long a job ran, from its task events: per task, the sum of its runs
/// from each schedule to the end that stopped it, so that a checkpointed
/// job's parts count without the time between them; the job's runtime is
/// its longest task's.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunTime {
    tasks: HashMap<u32, (Option<u64>, u64)>,
    scheduled: bool,
}

impl RunTime {
    /// Take one of the job's task events into account.
    pub(crate) fn see(&mut self, t: &TaskEvent) {
        let (since, total) = self.tasks.entry(t.task_index).or_default();
        match t.kind {
            TaskKind::Schedule => {
                self.scheduled = true;
                since.get_or_insert(t.time_us);
            }
            TaskKind::Submit | TaskKind::Update => {}
            _ => {
                if let Some(start) = since.take() {
                    *total += t.time_us.saturating_sub(start);
                }
            }
        }
    }

    /// It started at least once.
    pub(crate) fn ran(&self) -> bool {
        self.scheduled
    }

    pub(crate) fn runtime_us(&self) -> u64 {
        self.tasks
            .values()
            .map(|&(_, total)| total)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpointed_jobs_parts_add_up_without_the_gaps() {
        let task = |time_us, kind| TaskEvent {
            time_us,
            job_id: 1,
            task_index: 0,
            kind,
            machine_id: None,
            stage: None,
        };
        let mut r = RunTime::default();
        assert!(!r.ran());
        for (t, kind) in [
            (0, TaskKind::Submit),
            (10, TaskKind::Schedule),
            (110, TaskKind::Evict),
            (500, TaskKind::Schedule),
            (700, TaskKind::Finish),
        ] {
            r.see(&task(t, kind));
        }
        assert!(r.ran());
        assert_eq!(r.runtime_us(), 300);
    }
}
