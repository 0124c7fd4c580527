//! A task as the engine holds it while its job lives: what its
//! [`TaskRecord`] says, without the (job, index) key it is filed under and
//! with its four optional times packed, 40 B instead of the record's 88.
//! The engine holds one per task with a record (1M in
//! `scripts/bench-memory.sh`), so this size is most of what a live task
//! costs in memory (docs/performance.md); the record is made when it is
//! stored or served.

use jobcast_ingest::event::TaskKind;
use serde::{Deserialize, Serialize};

use super::records::TaskRecord;

/// The slots of [`LiveTask::values`].
const LAST_SCHEDULE: usize = 0;
const RUNNING_SINCE: usize = 1;
const RUNTIME: usize = 2;
const MACHINE: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct LiveTask {
    /// The last schedule's time, the running attempt's start, the
    /// finished attempt's runtime and the machine: each meaningful only
    /// where its bit of `present` is set.
    values: [u64; 4],
    attempts: u32,
    present: u8,
    last: TaskKind,
}

impl LiveTask {
    /// A task first seen in an event of `kind`: no attempt yet.
    pub(super) fn new(kind: TaskKind) -> Self {
        LiveTask {
            values: [0; 4],
            attempts: 0,
            present: 0,
            last: kind,
        }
    }

    fn get(&self, slot: usize) -> Option<u64> {
        (self.present & (1 << slot) != 0).then_some(self.values[slot])
    }

    fn set(&mut self, slot: usize, value: Option<u64>) {
        match value {
            Some(v) => {
                self.values[slot] = v;
                self.present |= 1 << slot;
            }
            None => self.present &= !(1 << slot),
        }
    }

    /// The machine of its latest attempt, if an event named one.
    pub(super) fn machine_id(&self) -> Option<u64> {
        self.get(MACHINE)
    }

    /// Start of the attempt running now, if one is.
    pub(super) fn running_since_us(&self) -> Option<u64> {
        self.get(RUNNING_SINCE)
    }

    /// Whether its last attempt ended and none runs now
    /// ([`TaskRecord::ended`]).
    pub(super) fn ended(&self) -> bool {
        self.running_since_us().is_none() && self.last.ends_attempt()
    }

    /// An event of `kind` at `time_us` happened to it, on `machine_id` if
    /// the event names one; `runtime_us` is the finished attempt's.
    pub(super) fn apply(
        &mut self,
        kind: TaskKind,
        time_us: u64,
        machine_id: Option<u64>,
        runtime_us: Option<u64>,
    ) {
        self.last = kind;
        if machine_id.is_some() {
            self.set(MACHINE, machine_id);
        }
        if kind == TaskKind::Schedule {
            self.attempts += 1;
            self.set(LAST_SCHEDULE, Some(time_us));
            self.set(RUNNING_SINCE, Some(time_us));
        } else if kind.ends_attempt() {
            self.set(RUNNING_SINCE, None);
        }
        if runtime_us.is_some() {
            self.set(RUNTIME, runtime_us);
        }
    }

    /// The record of task `task_index` of job `job_id`.
    pub(super) fn record(&self, (job_id, task_index): (u64, u32)) -> TaskRecord {
        TaskRecord {
            job_id,
            task_index,
            last: self.last,
            attempts: self.attempts,
            last_schedule_us: self.get(LAST_SCHEDULE),
            running_since_us: self.get(RUNNING_SINCE),
            runtime_us: self.get(RUNTIME),
            machine_id: self.get(MACHINE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_task_is_small_and_says_what_its_record_says() {
        assert_eq!(std::mem::size_of::<LiveTask>(), 40);
        let mut t = LiveTask::new(TaskKind::Submit);
        assert_eq!(
            t.record((1, 2)),
            TaskRecord {
                job_id: 1,
                task_index: 2,
                last: TaskKind::Submit,
                attempts: 0,
                last_schedule_us: None,
                running_since_us: None,
                runtime_us: None,
                machine_id: None,
            }
        );
        // Scheduled on machine u64::MAX (a value, not a sentinel), evicted,
        // scheduled again and finished.
        t.apply(TaskKind::Schedule, 10, Some(u64::MAX), None);
        assert_eq!((t.running_since_us(), t.ended()), (Some(10), false));
        t.apply(TaskKind::Evict, 20, None, None);
        assert_eq!((t.running_since_us(), t.ended()), (None, true));
        t.apply(TaskKind::Schedule, 30, Some(0), None);
        t.apply(TaskKind::Finish, 45, None, Some(15));
        let r = t.record((1, 2));
        assert_eq!(
            (
                r.attempts,
                r.last_schedule_us,
                r.running_since_us,
                r.runtime_us,
                r.machine_id
            ),
            (2, Some(30), None, Some(15), Some(0))
        );
        assert!(r.ended() && t.ended());
        assert_eq!(r.last, TaskKind::Finish);
    }
}
