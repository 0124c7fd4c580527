//! The running attempts a machine-minded component follows
//! ([`RunningTasks`]): by task, the machine it runs on, and by machine,
//! its tasks. CloudCoaster's controller (`capacity.rs`) follows long tasks
//! to count the machines they hold; the deadline maps (`deadlines.rs`)
//! follow a deadline job's tasks to know what a hibernated VM held.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// A task: (job id, task index).
type Task = (u64, u32);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct RunningTasks {
    machine_of: BTreeMap<Task, u64>,
    /// Machines with a task followed (none with an empty set).
    on_machine: BTreeMap<u64, BTreeSet<Task>>,
}

impl RunningTasks {
    /// `task`'s attempt started on `machine_id`; one running before it
    /// ends.
    pub(super) fn start(&mut self, task: Task, machine_id: u64) {
        self.end(task);
        self.machine_of.insert(task, machine_id);
        self.on_machine.entry(machine_id).or_default().insert(task);
    }

    /// `task`'s running attempt ended; the machine it ran on.
    pub(super) fn end(&mut self, task: Task) -> Option<u64> {
        let machine_id = self.machine_of.remove(&task)?;
        if let Some(tasks) = self.on_machine.get_mut(&machine_id) {
            tasks.remove(&task);
            if tasks.is_empty() {
                self.on_machine.remove(&machine_id);
            }
        }
        Some(machine_id)
    }

    /// Every running attempt of `job_id` ended.
    pub(super) fn end_job(&mut self, job_id: u64) {
        let tasks: Vec<Task> = self
            .machine_of
            .range((job_id, 0)..=(job_id, u32::MAX))
            .map(|(&task, _)| task)
            .collect();
        for task in tasks {
            self.end(task);
        }
    }

    /// `machine_id` is gone, and what ran on it with it.
    pub(super) fn machine_gone(&mut self, machine_id: u64) {
        for task in self.on_machine.remove(&machine_id).unwrap_or_default() {
            self.machine_of.remove(&task);
        }
    }

    /// The machine `task` runs on.
    pub(super) fn machine_of(&self, task: Task) -> Option<u64> {
        self.machine_of.get(&task).copied()
    }

    /// The tasks running on `machine_id`.
    pub(super) fn on(&self, machine_id: u64) -> impl Iterator<Item = Task> + '_ {
        self.on_machine
            .get(&machine_id)
            .into_iter()
            .flat_map(|tasks| tasks.iter().copied())
    }

    /// How many machines run at least one task followed.
    pub(super) fn machines(&self) -> usize {
        self.on_machine.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_are_followed_by_task_and_by_machine() {
        let mut running = RunningTasks::default();
        running.start((1, 0), 7);
        running.start((1, 1), 7);
        running.start((2, 0), 8);
        assert_eq!(running.machines(), 2);
        assert_eq!(running.on(7).collect::<Vec<_>>(), [(1, 0), (1, 1)]);
        // A new attempt elsewhere replaces the running one.
        running.start((1, 1), 8);
        assert_eq!(running.on(7).collect::<Vec<_>>(), [(1, 0)]);
        assert_eq!(running.machine_of((1, 1)), Some(8));
        assert_eq!(running.end((1, 0)), Some(7));
        assert_eq!(running.end((1, 0)), None);
        assert_eq!(running.machines(), 1, "a machine with nothing is gone");
        running.end_job(1);
        assert_eq!(running.on(8).collect::<Vec<_>>(), [(2, 0)]);
        running.machine_gone(8);
        assert_eq!((running.machines(), running.machine_of((2, 0))), (0, None));
        assert_eq!(running, RunningTasks::default());
    }
}
