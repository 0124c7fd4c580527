//! Slurm as the scheduler that acts on decisions: `squeue --json` says what
//! it holds, `scontrol update … Priority=` moves pending work, and
//! `scontrol update … TimeLimit=` (minutes) sets a walltime.
//!
//! A standing is a priority above every one Slurm's own factors give
//! (`base`, configurable): `Spare` is `base`, `Rank(n)` is
//! `base + levels − n` and `Next` is `base + levels + 1`, so Slurm starts
//! the next tasks, then ranked work by rank, then spare
//! work, then jobs jobcast has no decision for; equal priorities go by job
//! id, the earlier first. A pending array task whose priority differs from
//! its array's is split off into a record of its own by Slurm; that is how
//! pilot tasks stand apart from the rest of their array. Setting a
//! priority needs a Slurm operator (or root, or `SlurmUser`). Held jobs
//! (priority 0) are left held.

use std::collections::BTreeSet;
use std::process::Command;

use super::{SlurmTracker, SqueueJob, array_indices, run_squeue};
use crate::Scheduler;
use crate::apply::plan::{Action, Change, Group, JobView, Standing, Target, View};

pub struct Slurm {
    /// `squeue --json`, as words.
    pub squeue: Vec<String>,
    /// `scontrol`, as words (before `update …`).
    pub scontrol: Vec<String>,
    /// The priority of spare work; ranked work sits just above it.
    pub base: u32,
    /// The service's number of queues.
    pub levels: u8,
    /// The jobs it acts on.
    pub scope: Scope,
}

/// Which of the cluster's jobs an applier acts on: those of these
/// partitions and these accounts (an empty list: any).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    pub partitions: BTreeSet<String>,
    pub accounts: BTreeSet<String>,
}

impl Scope {
    fn covers(&self, record: &SqueueJob) -> bool {
        (self.partitions.is_empty() || self.partitions.contains(&record.partition))
            && (self.accounts.is_empty() || self.accounts.contains(&record.account))
    }
}

impl Slurm {
    /// The priority jobcast gives `standing`; none for Slurm's own.
    fn priority(&self, standing: Standing) -> Option<u32> {
        let levels = u32::from(self.levels);
        match standing {
            Standing::Spare => Some(self.base),
            Standing::Rank(n) => Some(self.base + levels.saturating_sub(u32::from(n))),
            Standing::Next => Some(self.base + levels + 1),
            Standing::Own => None,
        }
    }

    fn standing(&self, priority: u32) -> Option<Standing> {
        let levels = u32::from(self.levels);
        match priority.checked_sub(self.base)? {
            0 => Some(Standing::Spare),
            above if above <= levels => Some(Standing::Rank((levels - above) as u8)),
            above if above == levels + 1 => Some(Standing::Next),
            _ => None,
        }
    }

    /// The `scontrol` commands (their arguments, in order) that carry out
    /// `action`.
    fn commands(
        &self,
        tracker: &SlurmTracker,
        action: &Action,
    ) -> Result<Vec<Vec<String>>, String> {
        let job = match &action.target {
            Target::Job => action.job_id.to_string(),
            Target::Tasks(tasks) => {
                let indices: Result<BTreeSet<u32>, String> = tasks
                    .iter()
                    .map(|&t| {
                        tracker.array_index(action.job_id, t).ok_or_else(|| {
                            format!("job {}: no array task {t} is known", action.job_id)
                        })
                    })
                    .collect();
                format!("{}_[{}]", action.job_id, index_list(&indices?))
            }
        };
        let change = match action.change {
            Change::Standing(standing) => match self.priority(standing) {
                Some(priority) => format!("Priority={priority}"),
                // A priority set by hand leaves priority/multifactor; a
                // hold and a release give the job back to it (scontrol(1),
                // `Priority`).
                None => {
                    return Ok(vec![
                        vec!["hold".into(), job.clone()],
                        vec!["release".into(), job],
                    ]);
                }
            },
            Change::TimeLimitS(Some(secs)) => format!("TimeLimit={}", secs.div_ceil(60)),
            Change::TimeLimitS(None) => "TimeLimit=UNLIMITED".into(),
        };
        Ok(vec![vec!["update".into(), format!("JobId={job}"), change]])
    }

    /// Run `scontrol ARGUMENTS`: an error unless it succeeded, or every
    /// record it reports is one that changes nothing.
    fn scontrol(&self, arguments: &[String]) -> Result<(), String> {
        let (program, first) = self.scontrol.split_first().ok_or("no scontrol command")?;
        let output = Command::new(program)
            .args(first)
            .args(arguments)
            .output()
            .map_err(|e| format!("{program}: {e}"))?;
        // An array's update reports each record: tasks that finished since
        // the snapshot fail it, harmlessly.
        let stderr = String::from_utf8_lossy(&output.stderr);
        let mut said = stderr.lines().filter(|l| !l.trim().is_empty()).peekable();
        let benign = said.peek().is_some()
            && said.all(|line| {
                line.split_once(": ").is_some_and(|(_, said)| {
                    matches!(said.trim(), "No error" | "Job has already finished")
                })
            });
        if output.status.success() || benign {
            Ok(())
        } else {
            Err(format!(
                "{program} {}: {}: {}",
                arguments.join(" "),
                output.status,
                stderr.trim()
            ))
        }
    }
}

impl Scheduler for Slurm {
    /// Each array's task numbering (`jobcast_ingest::slurm`), the same the
    /// watcher publishes.
    type Memory = SlurmTracker;

    fn observe(&mut self, tracker: &mut SlurmTracker) -> Result<View, String> {
        // A record that cannot be read is left out (the watcher, reading
        // the same cluster, reports it), and its job's decision is kept.
        let snapshot = run_squeue(&self.squeue)?;
        // Only the numbering is wanted here: the watcher publishes events.
        tracker.observe(&snapshot);
        let mut view = View {
            unreadable: snapshot.unreadable,
            ..View::default()
        };
        // A job beyond the scope is not in the view: nothing is done to it,
        // and its decisions are dropped like a finished job's.
        for record in snapshot.jobs.iter().filter(|r| self.scope.covers(r)) {
            let job_id = record.job();
            let job: &mut JobView = view.jobs.entry(job_id).or_default();
            // The limit of the pending records, the only ones that take a
            // new one: a running task keeps the limit it started with, a
            // finished one its own for as long as Slurm lists it
            // (`MinJobAge`).
            if record.job_state == "PENDING"
                && let Some(minutes) = record.time_limit
            {
                let secs = u64::from(minutes) * 60;
                job.time_limit_s = Some(job.time_limit_s.map_or(secs, |held| held.max(secs)));
            }
            match record.job_state.as_str() {
                "RUNNING" | "COMPLETING" => job.running += 1,
                "PENDING" if record.priority != Some(0) => {
                    let tasks: Vec<u32> = if record.is_array_remainder() {
                        array_indices(&record.array_task_string)
                            .unwrap_or_default()
                            .into_iter()
                            .filter_map(|i| tracker.task_index(job_id, Some(i)))
                            .collect()
                    } else {
                        tracker
                            .task_index(job_id, record.array_task_id)
                            .into_iter()
                            .collect()
                    };
                    if !tasks.is_empty() {
                        job.pending.push(Group {
                            tasks,
                            standing: record.priority.and_then(|p| self.standing(p)),
                        });
                    }
                }
                _ => {}
            }
        }
        Ok(view)
    }

    fn describe(&self, tracker: &SlurmTracker, action: &Action) -> Result<String, String> {
        let commands: Vec<String> = self
            .commands(tracker, action)?
            .into_iter()
            .map(|arguments| [&self.scontrol[..], &arguments].concat().join(" "))
            .collect();
        Ok(commands.join("; "))
    }

    fn act(&mut self, tracker: &SlurmTracker, action: &Action) -> Result<(), String> {
        for arguments in self.commands(tracker, action)? {
            self.scontrol(&arguments)?;
        }
        Ok(())
    }
}

/// Array indices as Slurm writes a list: `1-3,5,7-8`.
fn index_list(indices: &BTreeSet<u32>) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &i in indices {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == i => *last = i,
            _ => runs.push((i, i)),
        }
    }
    let parts: Vec<String> = runs
        .into_iter()
        .map(|(first, last)| {
            if first == last {
                first.to_string()
            } else {
                format!("{first}-{last}")
            }
        })
        .collect();
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slurm() -> Slurm {
        Slurm {
            squeue: vec!["squeue".into(), "--json".into()],
            scontrol: vec!["scontrol".into()],
            base: 1000,
            levels: 10,
            scope: Scope::default(),
        }
    }

    #[test]
    fn standings_and_priorities_map_both_ways_and_others_are_not_ours() {
        let slurm = slurm();
        let standings = [
            Standing::Spare,
            Standing::Rank(0),
            Standing::Rank(9),
            Standing::Next,
        ];
        for standing in standings {
            assert_eq!(
                slurm.standing(slurm.priority(standing).unwrap()),
                Some(standing)
            );
        }
        assert!(slurm.priority(Standing::Next) > slurm.priority(Standing::Rank(0)));
        assert!(slurm.priority(Standing::Rank(0)) > slurm.priority(Standing::Rank(1)));
        assert!(slurm.priority(Standing::Rank(9)) > slurm.priority(Standing::Spare));
        for foreign in [1, 999, 1012, u32::MAX] {
            assert_eq!(slurm.standing(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn a_time_limit_is_set_in_whole_minutes() {
        let slurm = slurm();
        let action = Action {
            job_id: 42,
            version: 3,
            target: Target::Job,
            change: Change::TimeLimitS(Some(300)),
        };
        let tracker = SlurmTracker::default();
        assert_eq!(
            slurm.describe(&tracker, &action).unwrap(),
            "scontrol update JobId=42 TimeLimit=5"
        );
        let action = Action {
            change: Change::TimeLimitS(Some(61)),
            ..action
        };
        assert_eq!(
            slurm.describe(&tracker, &action).unwrap(),
            "scontrol update JobId=42 TimeLimit=2"
        );
        let action = Action {
            change: Change::TimeLimitS(None),
            ..action
        };
        assert_eq!(
            slurm.describe(&tracker, &action).unwrap(),
            "scontrol update JobId=42 TimeLimit=UNLIMITED"
        );
    }

    /// Handed back, a job is held and released, which gives it back to
    /// priority/multifactor; `hand_back` plans that for every job with a
    /// task where jobcast put it, and for no other.
    #[test]
    fn a_job_handed_back_is_held_and_released() {
        let slurm = slurm();
        let tracker = SlurmTracker::default();
        let action = Action {
            job_id: 42,
            version: 0,
            target: Target::Job,
            change: Change::Standing(Standing::Own),
        };
        assert_eq!(
            slurm.describe(&tracker, &action).unwrap(),
            "scontrol hold 42; scontrol release 42"
        );
        let group = |standing| Group {
            tasks: vec![0],
            standing,
        };
        let view = View {
            jobs: [
                (
                    1,
                    JobView {
                        pending: vec![group(Some(Standing::Spare))],
                        ..JobView::default()
                    },
                ),
                (
                    2,
                    JobView {
                        pending: vec![group(None)],
                        ..JobView::default()
                    },
                ),
                (
                    3,
                    JobView {
                        pending: vec![group(None), group(Some(Standing::Rank(2)))],
                        ..JobView::default()
                    },
                ),
                (
                    4,
                    JobView {
                        running: 1,
                        ..JobView::default()
                    },
                ),
            ]
            .into(),
            ..View::default()
        };
        let back: Vec<u64> = crate::apply::plan::hand_back(&view)
            .into_iter()
            .map(|a| {
                assert_eq!(
                    (a.target, a.change),
                    (Target::Job, Change::Standing(Standing::Own))
                );
                a.job_id
            })
            .collect();
        assert_eq!(back, [1, 3]);
    }

    /// `scontrol` as a script that writes `stderr` and exits `code`.
    fn answering(stderr: &str, code: u8) -> Slurm {
        Slurm {
            scontrol: vec![
                "sh".into(),
                "-c".into(),
                format!("printf '{stderr}' >&2; exit {code}"),
                "scontrol".into(),
            ],
            ..slurm()
        }
    }

    /// An array's update that finds some tasks already finished is done;
    /// any other refusal, or no `scontrol` at all, is an error naming it.
    #[test]
    fn tasks_finished_since_the_snapshot_fail_an_update_harmlessly() {
        let tracker = SlurmTracker::default();
        let action = Action {
            job_id: 42,
            version: 3,
            target: Target::Job,
            change: Change::Standing(Standing::Rank(0)),
        };
        let benign = "42_1: Job has already finished\n42_2: No error\n";
        assert_eq!(answering(benign, 1).act(&tracker, &action), Ok(()));
        assert_eq!(answering("", 0).act(&tracker, &action), Ok(()));
        let refused = answering("42_1: Access/permission denied\n42_2: No error\n", 1)
            .act(&tracker, &action)
            .unwrap_err();
        assert!(
            refused.contains("JobId=42 Priority=1010") && refused.contains("permission denied"),
            "{refused}"
        );
        assert!(answering("", 1).act(&tracker, &action).is_err());
        let mut gone = slurm();
        gone.scontrol = vec!["/nonexistent/scontrol".into()];
        let missing = gone.act(&tracker, &action).unwrap_err();
        assert!(missing.starts_with("/nonexistent/scontrol: "), "{missing}");
    }

    /// A failing `squeue` fails the tick; a record it cannot read is left
    /// out of the view and the others are in it.
    #[test]
    fn what_squeue_cannot_say_is_an_error_or_left_out() {
        let mut tracker = SlurmTracker::default();
        let mut failing = slurm();
        failing.squeue = vec!["false".into()];
        assert!(
            failing
                .observe(&mut tracker)
                .unwrap_err()
                .starts_with("`false`: ")
        );
        let mut one_bad = slurm();
        one_bad.squeue = vec![
            "echo".into(),
            r#"{"jobs": [{"job_id": "x"}, {"job_id": 5, "job_state": "PENDING", "submit_time": 1, "priority": 1010}]}"#
                .into(),
        ];
        let view = one_bad.observe(&mut tracker).unwrap();
        assert_eq!(view.jobs.keys().copied().collect::<Vec<_>>(), [5]);
        assert_eq!(view.jobs[&5].pending[0].standing, Some(Standing::Rank(0)));
        assert!(
            view.unreadable.is_empty(),
            "a job_id that is no id names no job"
        );
        let mut other_bad = slurm();
        other_bad.squeue = vec![
            "echo".into(),
            r#"{"jobs": [{"job_id": 6, "job_state": 7}]}"#.into(),
        ];
        let view = other_bad.observe(&mut tracker).unwrap();
        assert!(view.jobs.is_empty());
        assert_eq!(view.unreadable.iter().copied().collect::<Vec<_>>(), [6]);
    }

    #[test]
    fn index_lists_are_written_as_slurm_reads_them() {
        let list = |v: &[u32]| index_list(&v.iter().copied().collect());
        assert_eq!(list(&[1, 2, 3, 5, 7, 8]), "1-3,5,7-8");
        assert_eq!(list(&[4]), "4");
        assert_eq!(array_indices(&list(&[0, 2, 3, 9])).unwrap().len(), 4);
    }
}
