//! Slurm's words for how a job ended, read the same way from its queue
//! (`squeue --json`, the live watcher in `jobcast-connectors`) and from its
//! accounting (`sacct`, [`crate::sacct`]).

use crate::event::{JobOutcome, TaskKind};

/// How a task's run ended, by its Slurm state (`CANCELLED by 1000` reads
/// as `CANCELLED`); `None` while it has not.
pub fn task_end(state: &str) -> Option<TaskKind> {
    Some(match state.split_whitespace().next().unwrap_or("") {
        "COMPLETED" => TaskKind::Finish,
        "FAILED" | "OUT_OF_MEMORY" | "NODE_FAIL" | "BOOT_FAIL" | "DEADLINE" => TaskKind::Fail,
        "CANCELLED" => TaskKind::Kill,
        "TIMEOUT" => TaskKind::Timeout,
        "PREEMPTED" => TaskKind::Evict,
        _ => return None,
    })
}

/// A job's outcome from how its tasks ended: finished if all finished,
/// failed if any failed, else killed.
pub fn job_outcome(ends: &[TaskKind]) -> JobOutcome {
    if ends.iter().all(|k| *k == TaskKind::Finish) {
        JobOutcome::Finish
    } else if ends.contains(&TaskKind::Fail) {
        JobOutcome::Fail
    } else {
        JobOutcome::Kill
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_read_as_ends() {
        assert_eq!(task_end("COMPLETED"), Some(TaskKind::Finish));
        assert_eq!(task_end("CANCELLED by 1000"), Some(TaskKind::Kill));
        assert_eq!(task_end("OUT_OF_MEMORY"), Some(TaskKind::Fail));
        assert_eq!(task_end("TIMEOUT"), Some(TaskKind::Timeout));
        assert_eq!(task_end("RUNNING"), None);
        assert_eq!(task_end(""), None);
        assert_eq!(
            job_outcome(&[TaskKind::Finish, TaskKind::Fail]),
            JobOutcome::Fail
        );
        assert_eq!(
            job_outcome(&[TaskKind::Finish, TaskKind::Timeout]),
            JobOutcome::Kill
        );
    }
}
