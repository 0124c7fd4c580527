//! What the scheduler should do now, from the newest decisions and what it
//! holds (pure: no I/O, no clock).
//!
//! A scheduler such as Slurm starts pending work in the order of one number
//! per job or task. GS (SLearn §5.1.1) is richer: FIFO queues served by
//! weighted sharing, and work conservation for the tasks a sampling job
//! holds back. Its next choice is still a single order, recomputed here at
//! every tick:
//!
//! - **Queues by weighted share.** A free slot goes to the queue with the
//!   fewest running tasks for its weight, the higher queue on ties. So the
//!   queues with pending work are ranked by (running / weight, queue), and
//!   a job's pending tasks stand at its queue's rank: Q0 goes first
//!   until a lower queue holds no slot at all, then that queue's head
//!   job does. Long jobs never starve.
//! - **FIFO within a queue** is left to the scheduler's own tie-break
//!   (Slurm: the lower job id, the earlier submission, first).
//! - **Pilots first.** While a job samples, only its pilot tasks stand in
//!   its queue; the others stand *spare*, behind every queued task, so
//!   they run only on slots nothing else wants (work conservation, in job
//!   order), and join the queue when the decision places the job.
//!
//! - **Walltime** (opt-in, [`Walltime`]). A job placed by an estimate gets
//!   a time limit for its tasks: a high quantile of its mean task runtime
//!   times a margin, never below a floor, rounded up to the scheduler's
//!   step. A limit is only ever lowered, so it never exceeds the user's
//!   own. The quantiles bound the job's *mean* task runtime, not each
//!   task's: the margin covers the spread of tasks around their mean, and
//!   a task beyond it is killed (the bench counts those).
//!
//! - **New work first.** A job without a decision yet (just submitted:
//!   its decision is a second or two away) stands with Q0, where GS puts
//!   new work, behind the Q0 jobs before it. Left at the scheduler's own
//!   priority, below all of jobcast's, it would wait while the spare and
//!   lower-queue tasks took every CPU freed meanwhile, long tasks that
//!   then hold them. Its decision moves it, like any other.
//!
//! The order is recomputed from what the scheduler reports, so an action
//! that failed or was lost is simply planned again at the next tick.

use std::collections::BTreeMap;

use jobcast_predictor::decision::{Estimate, Newest, Phase, Quantiles};
use jobcast_predictor::queues::QueueConfig;
use serde::Serialize;

/// Where a pending task stands in the scheduler's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// With the queue ranked `n`-th by weighted share (0 goes first).
    Rank(u8),
    /// Behind every ranked task: only on slots nothing else wants.
    Spare,
}

/// What the scheduler holds now, by jobcast job id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    pub jobs: BTreeMap<u64, JobView>,
}

/// One job as the scheduler holds it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobView {
    /// Tasks running now.
    pub running: u32,
    /// Pending tasks, in the groups the scheduler keeps them in (Slurm: one
    /// job record each), each group with where it stands now (`None`: not
    /// where jobcast puts anything).
    pub pending: Vec<Group>,
    /// The time limit of its tasks, s (none: unlimited).
    pub time_limit_s: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Task indices, as jobcast numbers them.
    pub tasks: Vec<u32>,
    pub standing: Option<Standing>,
}

/// Which of a job's pending tasks an action moves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// All of them.
    Job,
    /// These (task indices).
    Tasks(Vec<u32>),
}

/// One change to make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Action {
    pub job_id: u64,
    /// The decision it carries out (0: none yet, new work).
    pub version: u32,
    pub target: Target,
    #[serde(flatten)]
    pub change: Change,
}

/// What an action changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Where the pending tasks stand.
    Standing(Standing),
    /// The time limit of each of the job's tasks, s.
    TimeLimitS(u64),
}

/// Time limits from the estimates (module doc).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Walltime {
    /// Which quantile of the mean task runtime: an index into
    /// [`Quantiles::LEVELS`].
    pub quantile: usize,
    /// The limit is the quantile times this (at least 1).
    pub margin: f64,
    /// Never below this, s.
    pub min_s: u64,
    /// The scheduler's granularity, s (Slurm's limits are whole minutes).
    pub step_s: u64,
}

impl Walltime {
    /// The limit for a job placed by `estimate`, if it has quantiles.
    pub fn limit_s(&self, estimate: &Estimate) -> Option<u64> {
        let q = estimate.quantiles?.mean_task_runtime_us.to_array()[self.quantile];
        let secs = (q * self.margin / 1e6).max(self.min_s as f64);
        if !secs.is_finite() {
            return None;
        }
        let step = self.step_s.max(1) as f64;
        Some(((secs / step).ceil() * step).min(u64::MAX as f64) as u64)
    }

    /// The quantile's name (`p99`).
    pub fn quantile_name(&self) -> &'static str {
        Quantiles::NAMES[self.quantile]
    }
}

/// The actions that bring `view` to where `newest` puts each job, with
/// time limits if `walltime` is set.
pub fn plan(
    newest: &Newest,
    view: &View,
    queues: &QueueConfig,
    walltime: Option<&Walltime>,
) -> Vec<Action> {
    let levels = usize::from(queues.levels.max(1));
    let queue_of = |q: u8| usize::from(q).min(levels - 1);
    let mut running = vec![0u32; levels];
    let mut waiting = vec![false; levels];
    for decision in newest.iter() {
        if let Some(job) = view.jobs.get(&decision.job_id) {
            running[queue_of(decision.queue)] += job.running;
            waiting[queue_of(decision.queue)] |= !job.pending.is_empty();
        }
    }
    let undecided: Vec<(u64, &JobView)> = view
        .jobs
        .iter()
        .filter(|(id, job)| newest.get(**id).is_none() && !job.pending.is_empty())
        .map(|(&id, job)| (id, job))
        .collect();
    waiting[0] |= !undecided.is_empty();
    let mut ranked: Vec<usize> = (0..levels).filter(|&q| waiting[q]).collect();
    ranked.sort_by(|&a, &b| {
        let share = |q: usize| f64::from(running[q]) / queues.weight(q as u8);
        share(a).total_cmp(&share(b)).then(a.cmp(&b))
    });
    let mut rank = vec![0u8; levels];
    for (n, &q) in ranked.iter().enumerate() {
        rank[q] = n as u8;
    }

    let mut actions = Vec::new();
    let new_work = Standing::Rank(rank[0]);
    for (job_id, job) in undecided {
        if job.pending.iter().any(|g| g.standing != Some(new_work)) {
            actions.push(Action {
                job_id,
                version: 0,
                target: Target::Job,
                change: Change::Standing(new_work),
            });
        }
    }
    for decision in newest.iter() {
        let Some(job) = view.jobs.get(&decision.job_id) else {
            continue;
        };
        let queued = Standing::Rank(rank[queue_of(decision.queue)]);
        let sampling = decision.phase == Phase::Sampling;
        let wanted = |task: u32| {
            if sampling && !decision.pilots.contains(&task) {
                Standing::Spare
            } else {
                queued
            }
        };
        let action = |target, standing| Action {
            job_id: decision.job_id,
            version: decision.version,
            target,
            change: Change::Standing(standing),
        };
        if let Some(walltime) = walltime
            && decision.phase == Phase::Estimated
            && let Some(limit) = decision.estimate.and_then(|e| walltime.limit_s(&e))
            && job.time_limit_s.is_none_or(|held| limit < held)
        {
            actions.push(Action {
                job_id: decision.job_id,
                version: decision.version,
                target: Target::Job,
                change: Change::TimeLimitS(limit),
            });
        }
        // The standing most pending tasks want is set job-wide; the others
        // (pilots, while sampling) task by task after it.
        let pending = job.pending.iter().flat_map(|g| g.tasks.iter().copied());
        let spare = pending.clone().filter(|&t| wanted(t) == Standing::Spare);
        let major = if spare.count() * 2 > pending.clone().count() {
            Standing::Spare
        } else {
            queued
        };
        let astray = |g: &&Group| g.tasks.iter().any(|&t| Some(wanted(t)) != g.standing);
        let minor: Vec<u32> = pending.filter(|&t| wanted(t) != major).collect();
        let minor_standing = if major == Standing::Spare {
            queued
        } else {
            Standing::Spare
        };
        let major_astray = job
            .pending
            .iter()
            .filter(astray)
            .any(|g| g.tasks.iter().any(|&t| wanted(t) == major));
        if major_astray {
            actions.push(action(Target::Job, major));
            if !minor.is_empty() {
                actions.push(action(Target::Tasks(minor), minor_standing));
            }
        } else {
            let astray_minor: Vec<u32> = job
                .pending
                .iter()
                .filter(astray)
                .flat_map(|g| g.tasks.iter().copied())
                .filter(|&t| wanted(t) != major)
                .collect();
            if !astray_minor.is_empty() {
                actions.push(action(Target::Tasks(astray_minor), minor_standing));
            }
        }
    }
    actions
}

#[cfg(test)]
mod tests {
    use jobcast_predictor::decision::{Decision, PolicyKind};

    use super::*;

    fn decision(job_id: u64, version: u32, queue: u8, pilots: &[u32]) -> Decision {
        Decision {
            job_id,
            version,
            queue,
            phase: if pilots.is_empty() {
                Phase::Estimated
            } else {
                Phase::Sampling
            },
            estimate: None,
            policy: PolicyKind::SLearn,
            pilots: pilots.to_vec(),
            eta: None,
        }
    }

    fn job(running: u32, pending: &[(&[u32], Option<Standing>)]) -> JobView {
        JobView {
            running,
            time_limit_s: None,
            pending: pending
                .iter()
                .map(|(tasks, standing)| Group {
                    tasks: tasks.to_vec(),
                    standing: *standing,
                })
                .collect(),
        }
    }

    fn newest(decisions: &[Decision]) -> Newest {
        let mut newest = Newest::default();
        for d in decisions {
            newest.offer(d.clone());
        }
        newest
    }

    /// `view` with `actions` carried out, as a scheduler would report it.
    fn after(view: &View, actions: &[Action]) -> View {
        let mut view = view.clone();
        for action in actions {
            let job = view.jobs.get_mut(&action.job_id).unwrap();
            let standing = match action.change {
                Change::Standing(standing) => standing,
                Change::TimeLimitS(limit) => {
                    job.time_limit_s = Some(limit);
                    continue;
                }
            };
            let mut groups = Vec::new();
            for group in job.pending.drain(..) {
                match &action.target {
                    Target::Job => groups.push(Group {
                        standing: Some(standing),
                        ..group
                    }),
                    Target::Tasks(tasks) => {
                        let (moved, kept): (Vec<u32>, Vec<u32>) =
                            group.tasks.iter().partition(|t| tasks.contains(t));
                        groups.extend(moved.into_iter().map(|t| Group {
                            tasks: vec![t],
                            standing: Some(standing),
                        }));
                        if !kept.is_empty() {
                            groups.push(Group {
                                tasks: kept,
                                standing: group.standing,
                            });
                        }
                    }
                }
            }
            job.pending = groups;
        }
        view
    }

    #[test]
    fn a_sampling_job_runs_its_pilots_in_its_queue_and_the_rest_spare() {
        let queues = QueueConfig::default();
        let decisions = newest(&[decision(7, 1, 1, &[2, 5])]);
        let view = View {
            jobs: [(7, job(0, &[(&[0, 1, 2, 3, 4, 5], None)]))].into(),
        };
        let actions = plan(&decisions, &view, &queues, None);
        assert_eq!(
            actions,
            [
                Action {
                    job_id: 7,
                    version: 1,
                    target: Target::Job,
                    change: Change::Standing(Standing::Spare)
                },
                Action {
                    job_id: 7,
                    version: 1,
                    target: Target::Tasks(vec![2, 5]),
                    change: Change::Standing(Standing::Rank(0))
                },
            ]
        );
        // Carried out, nothing is left to do.
        assert_eq!(plan(&decisions, &after(&view, &actions), &queues, None), []);
        // Placed once its pilots ran: every pending task joins the queue at
        // once.
        let mut running = after(&view, &actions);
        let job7 = running.jobs.get_mut(&7).unwrap();
        job7.pending.retain(|g| g.standing == Some(Standing::Spare));
        let placed = newest(&[decision(7, 2, 4, &[])]);
        assert_eq!(
            plan(&placed, &running, &queues, None),
            [Action {
                job_id: 7,
                version: 2,
                target: Target::Job,
                change: Change::Standing(Standing::Rank(0))
            }]
        );
    }

    #[test]
    fn queues_are_ranked_by_weighted_share_so_a_lower_queue_is_not_starved() {
        let queues = QueueConfig::default();
        let decisions = newest(&[decision(1, 1, 0, &[]), decision(2, 1, 3, &[])]);
        let standing = |view: &View| {
            let actions = plan(&decisions, view, &queues, None);
            let of = |job: u64| actions.iter().find(|a| a.job_id == job).map(|a| a.change);
            (of(1), of(2))
        };
        // Nothing running: Q0 first.
        let idle = View {
            jobs: [
                (1, job(0, &[(&[0, 1], None)])),
                (2, job(0, &[(&[0], None)])),
            ]
            .into(),
        };
        assert_eq!(
            standing(&idle),
            (
                Some(Change::Standing(Standing::Rank(0))),
                Some(Change::Standing(Standing::Rank(1)))
            )
        );
        // Q0 runs tasks and Q3 none: Q3's share is the smaller, so its job
        // goes first.
        let busy = View {
            jobs: [
                (1, job(3, &[(&[3, 4], None)])),
                (2, job(0, &[(&[0], None)])),
            ]
            .into(),
        };
        assert_eq!(
            standing(&busy),
            (
                Some(Change::Standing(Standing::Rank(1))),
                Some(Change::Standing(Standing::Rank(0)))
            )
        );
        // Q3 holds a slot: 1 × 10³ outweighs Q0's 3 × 1.
        let both = View {
            jobs: [
                (1, job(3, &[(&[3, 4], None)])),
                (2, job(1, &[(&[1], None)])),
            ]
            .into(),
        };
        assert_eq!(
            standing(&both),
            (
                Some(Change::Standing(Standing::Rank(0))),
                Some(Change::Standing(Standing::Rank(1)))
            )
        );
    }

    #[test]
    fn new_work_stands_with_q0_and_work_in_place_is_left_alone() {
        let queues = QueueConfig::default();
        let decisions = newest(&[decision(1, 3, 2, &[])]);
        let alone = View {
            jobs: [(1, job(0, &[(&[0, 1], Some(Standing::Rank(0)))]))].into(),
        };
        assert_eq!(plan(&decisions, &alone, &queues, None), []);
        // A decision for a job the scheduler no longer holds does nothing.
        let gone = newest(&[decision(5, 1, 0, &[])]);
        assert_eq!(plan(&gone, &alone, &queues, None), []);
        // Job 9 was just submitted, its decision not yet made: it stands
        // with Q0, so job 1 of Q2 moves behind it.
        let mut view = alone.clone();
        view.jobs.insert(9, job(0, &[(&[0], None)]));
        let actions = plan(&decisions, &view, &queues, None);
        let standing = |job_id, version, rank| Action {
            job_id,
            version,
            target: Target::Job,
            change: Change::Standing(Standing::Rank(rank)),
        };
        assert_eq!(actions, [standing(9, 0, 0), standing(1, 3, 1)]);
        assert_eq!(plan(&decisions, &after(&view, &actions), &queues, None), []);
        // Running, with nothing pending, it needs no standing.
        view.jobs.insert(9, job(1, &[]));
        assert_eq!(plan(&decisions, &view, &queues, None), []);
    }

    #[test]
    fn a_pilot_split_off_and_moved_back_by_hand_is_put_back_alone() {
        let queues = QueueConfig::default();
        let decisions = newest(&[decision(7, 1, 1, &[2])]);
        let view = View {
            jobs: [(
                7,
                job(
                    0,
                    &[
                        (&[0, 1, 3], Some(Standing::Spare)),
                        (&[2], Some(Standing::Spare)),
                    ],
                ),
            )]
            .into(),
        };
        assert_eq!(
            plan(&decisions, &view, &queues, None),
            [Action {
                job_id: 7,
                version: 1,
                target: Target::Tasks(vec![2]),
                change: Change::Standing(Standing::Rank(0))
            }]
        );
    }

    #[test]
    fn a_placed_job_gets_a_time_limit_from_its_quantile_only_ever_lowered() {
        use jobcast_predictor::decision::EstimateSource;
        let queues = QueueConfig::default();
        let walltime = Walltime {
            quantile: 3,
            margin: 2.0,
            min_s: 60,
            step_s: 60,
        };
        // A mean task runtime of 100 s, its P99 150 s.
        let mut estimate = Estimate::new(100e6, 400e6, 0.0, EstimateSource::Pilots { pilots: 2 });
        estimate.set_quantiles(Quantiles::from_array([1.0, 1.2, 1.3, 1.5]));
        let placed = Decision {
            estimate: Some(estimate),
            ..decision(7, 2, 1, &[])
        };
        let view = View {
            jobs: [(7, job(1, &[(&[1, 2, 3], Some(Standing::Rank(0)))]))].into(),
        };
        let limits = |decisions: &Newest, view: &View| -> Vec<Change> {
            plan(decisions, view, &queues, Some(&walltime))
                .into_iter()
                .map(|a| a.change)
                .filter(|c| matches!(c, Change::TimeLimitS(_)))
                .collect()
        };
        // 2 × 150 s = 300 s, five minutes: set where unlimited.
        let decisions = newest(std::slice::from_ref(&placed));
        assert_eq!(limits(&decisions, &view), [Change::TimeLimitS(300)]);
        let actions = plan(&decisions, &view, &queues, Some(&walltime));
        assert_eq!(actions[0].target, Target::Job);
        // Carried out, nothing is left to do; a user's shorter limit stays.
        assert_eq!(limits(&decisions, &after(&view, &actions)), []);
        let mut short = view.clone();
        short.jobs.get_mut(&7).unwrap().time_limit_s = Some(240);
        assert_eq!(limits(&decisions, &short), []);
        // A longer one is lowered; rounded up to the step, never below the
        // floor.
        short.jobs.get_mut(&7).unwrap().time_limit_s = Some(3600);
        assert_eq!(limits(&decisions, &short), [Change::TimeLimitS(300)]);
        let mut tiny = estimate;
        tiny.set_quantiles(Quantiles::from_array([0.001; 4]));
        let decisions = newest(&[Decision {
            estimate: Some(tiny),
            ..placed.clone()
        }]);
        assert_eq!(limits(&decisions, &view), [Change::TimeLimitS(60)]);
        let odd = Walltime {
            margin: 1.01,
            ..walltime
        };
        assert_eq!(odd.limit_s(&estimate), Some(180), "151.5 s → 3 minutes");
        // Not while sampling, nor without a walltime setting.
        let sampling = newest(&[decision(7, 1, 1, &[2])]);
        assert_eq!(limits(&sampling, &view), []);
        let decisions = newest(&[placed]);
        assert!(
            plan(&decisions, &view, &queues, None)
                .iter()
                .all(|a| matches!(a.change, Change::Standing(_)))
        );
    }
}
