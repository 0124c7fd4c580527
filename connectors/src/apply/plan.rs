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
//! - **The next slots exactly.** Several slots may free before the next
//!   tick, and the scheduler gives them all to the queue ranked first,
//!   where GS re-ranks after each. So the first queue's share is filled up
//!   to the second's: the tasks GS would start there before the second
//!   queue's turn (the head of its FIFO) stand *next*, ahead of every
//!   queue, and the rest of it is ranked by its share after them. A
//!   starved lower queue thus gets the one slot GS gives it, not every
//!   slot freed within the tick.
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
//!   own, and only on pending tasks: a running task keeps the limit it
//!   started with. The quantiles bound the job's *mean* task runtime, not each
//!   task's: the margin covers the spread of tasks around their mean, and
//!   a task beyond it is killed (the bench counts those). A level capped
//!   at the quantile horizon (`engine.policies.quantile_horizon_secs`)
//!   gives no limit: the job keeps its own.
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

use std::collections::{BTreeMap, BTreeSet};

use jobcast_predictor::decision::{Decision, Newest, Phase};
use jobcast_predictor::queues::QueueConfig;
pub use jobcast_predictor::walltime::Walltime;
use serde::Serialize;

/// Where a pending task stands in the scheduler's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// Before every queue: the head of the queue ranked first, as many
    /// tasks as GS gives it before its share passes the next queue's.
    Next,
    /// With the queue ranked `n`-th by weighted share (0 goes first).
    Rank(u8),
    /// Behind every ranked task: only on slots nothing else wants.
    Spare,
    /// The scheduler's own order, behind all of jobcast's: where
    /// [`hand_back`] returns every job once jobcast stops for good. No
    /// plan puts a job there, and the scheduler reports no task there.
    Own,
}

/// What the scheduler holds now, by jobcast job id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    pub jobs: BTreeMap<u64, JobView>,
    /// Jobs the scheduler lists but could not say how they stand: nothing
    /// is done to them, and their decisions are kept.
    pub unreadable: BTreeSet<u64>,
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
    /// The time limit of its pending tasks, s (none: unlimited, or none
    /// pending).
    pub time_limit_s: Option<u64>,
}

impl JobView {
    /// Its pending tasks, as a target: the whole job while none runs
    /// (one update), else task by task (a running task keeps the limit it
    /// started with).
    pub fn pending_target(&self) -> Target {
        if self.running == 0 {
            Target::Job
        } else {
            Target::Tasks(
                self.pending
                    .iter()
                    .flat_map(|g| g.tasks.iter().copied())
                    .collect(),
            )
        }
    }
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
    /// The time limit of each of the targeted tasks, s (none: unlimited).
    TimeLimitS(Option<u64>),
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
    // Every job the scheduler holds, undecided ones (new work, Q0) first.
    let undecided = view
        .jobs
        .iter()
        .filter(|(id, _)| newest.get(**id).is_none())
        .map(|(&id, job)| Placed {
            job_id: id,
            job,
            decision: None,
            queue: 0,
        });
    let decided = newest.iter().filter_map(|decision| {
        Some(Placed {
            job_id: decision.job_id,
            job: view.jobs.get(&decision.job_id)?,
            decision: Some(decision),
            queue: usize::from(decision.queue).min(levels - 1),
        })
    });
    let jobs: Vec<Placed> = undecided.chain(decided).collect();

    let mut running = vec![0u32; levels];
    let mut queued = vec![0usize; levels];
    for job in &jobs {
        running[job.queue] += job.job.running;
        queued[job.queue] += job.pending().filter(|&t| job.queued(t)).count();
    }
    let share = |q: usize, extra: usize| {
        let share = (f64::from(running[q]) + extra as f64) / queues.weight(q as u8);
        (share, q)
    };
    let before = |a: (f64, usize), b: (f64, usize)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1));
    let mut ranked: Vec<usize> = (0..levels).filter(|&q| queued[q] > 0).collect();
    ranked.sort_by(|&a, &b| before(share(a, 0), share(b, 0)));

    // The queue ranked first keeps the next slots only while its share
    // stays below the second's: those tasks, the head of its FIFO, go
    // before everything (Next); the rest of it is ranked by its share
    // after them.
    let mut next = BTreeMap::<u64, Vec<u32>>::new();
    if let [first, second, ..] = ranked[..] {
        let quota = (0..queued[first])
            .take_while(|&k| before(share(first, k), share(second, 0)).is_lt())
            .count();
        if quota < queued[first] {
            // FIFO as the scheduler breaks ties: by job id, then task (so
            // each job's next tasks are sorted).
            let mut fifo: Vec<(u64, u32)> = jobs
                .iter()
                .filter(|j| j.queue == first)
                .flat_map(|j| j.pending().filter(|&t| j.queued(t)).map(|t| (j.job_id, t)))
                .collect();
            fifo.sort_unstable();
            for (job_id, task) in fifo.into_iter().take(quota) {
                next.entry(job_id).or_default().push(task);
            }
            ranked.sort_by(|&a, &b| {
                let after = |q: usize| share(q, if q == first { quota } else { 0 });
                before(after(a), after(b))
            });
        }
    }
    let mut rank = vec![0u8; levels];
    for (n, &q) in ranked.iter().enumerate() {
        rank[q] = n as u8;
    }

    let mut actions = Vec::new();
    for job in &jobs {
        let version = job.decision.map_or(0, |d| d.version);
        if let Some(walltime) = walltime
            && !job.job.pending.is_empty()
            && let Some(decision) = job.decision
            && decision.phase == Phase::Estimated
            && let Some(limit) = decision.estimate.and_then(|e| walltime.limit_s(&e))
            && job.job.time_limit_s.is_none_or(|held| limit < held)
        {
            actions.push(Action {
                job_id: job.job_id,
                version,
                target: job.job.pending_target(),
                change: Change::TimeLimitS(Some(limit)),
            });
        }
        let head = next.get(&job.job_id).map_or(&[][..], Vec::as_slice);
        let wanted = |task: u32| {
            if head.binary_search(&task).is_ok() {
                Standing::Next
            } else if job.queued(task) {
                Standing::Rank(rank[job.queue])
            } else {
                Standing::Spare
            }
        };
        for (target, standing) in moves(job.job, wanted) {
            actions.push(Action {
                job_id: job.job_id,
                version,
                target,
                change: Change::Standing(standing),
            });
        }
    }
    actions
}

/// Every job with pending tasks jobcast set a standing on, back to the
/// scheduler's own order (`slurm apply --hand-back`): the standings an
/// applier set outlive it, and would keep its jobs ahead of (or, spare,
/// behind) new work that has no decision to move it.
pub fn hand_back(view: &View) -> Vec<Action> {
    view.jobs
        .iter()
        .filter(|(_, job)| job.pending.iter().any(|g| g.standing.is_some()))
        .map(|(&job_id, _)| Action {
            job_id,
            version: 0,
            target: Target::Job,
            change: Change::Standing(Standing::Own),
        })
        .collect()
}

/// The time limits an applier lowered put back as they were (`original`,
/// by job: `slurm apply --hand-back`), on the jobs with pending tasks.
pub fn restore_limits(view: &View, original: &BTreeMap<u64, Option<u64>>) -> Vec<Action> {
    original
        .iter()
        .filter_map(|(&job_id, &limit)| {
            let job = view.jobs.get(&job_id).filter(|j| !j.pending.is_empty())?;
            Some(Action {
                job_id,
                version: 0,
                target: job.pending_target(),
                change: Change::TimeLimitS(limit),
            })
        })
        .collect()
}

/// A job the scheduler holds, with the queue it waits in.
struct Placed<'a> {
    job_id: u64,
    job: &'a JobView,
    /// None: not decided yet, new work.
    decision: Option<&'a Decision>,
    queue: usize,
}

impl Placed<'_> {
    fn pending(&self) -> impl Iterator<Item = u32> + '_ {
        self.job
            .pending
            .iter()
            .flat_map(|g| g.tasks.iter().copied())
    }

    /// Whether `task` waits in the job's queue: all of them, but while the
    /// job samples only its pilots (the others are spare).
    fn queued(&self, task: u32) -> bool {
        self.decision
            .is_none_or(|d| d.phase != Phase::Sampling || d.pilots.contains(&task))
    }
}

/// The changes that give each of `job`'s pending tasks its `wanted`
/// standing, in as few updates as the scheduler's groups allow: the
/// standing most tasks want, job-wide, then the others task by task.
fn moves(job: &JobView, wanted: impl Fn(u32) -> Standing) -> Vec<(Target, Standing)> {
    let mut counts = BTreeMap::<Standing, usize>::new();
    for group in &job.pending {
        for &task in &group.tasks {
            *counts.entry(wanted(task)).or_default() += 1;
        }
    }
    // On a tie, the standing that goes first.
    let Some(major) = counts
        .iter()
        .max_by_key(|&(standing, n)| (n, std::cmp::Reverse(standing)))
        .map(|(&standing, _)| standing)
    else {
        return Vec::new();
    };
    let astray = |g: &&Group| g.tasks.iter().any(|&t| Some(wanted(t)) != g.standing);
    let whole = job
        .pending
        .iter()
        .filter(astray)
        .any(|g| g.tasks.iter().any(|&t| wanted(t) == major));
    let mut moves = Vec::new();
    if whole {
        moves.push((Target::Job, major));
    }
    for &standing in counts.keys().filter(|&&s| s != major) {
        // After a job-wide move, every task that wants another standing
        // moves again; otherwise only those in a group astray.
        let tasks: Vec<u32> = job
            .pending
            .iter()
            .filter(|g| whole || astray(g))
            .flat_map(|g| g.tasks.iter().copied())
            .filter(|&t| wanted(t) == standing)
            .collect();
        if !tasks.is_empty() {
            moves.push((Target::Tasks(tasks), standing));
        }
    }
    moves
}

#[cfg(test)]
mod tests {
    use jobcast_predictor::decision::{Estimate, PolicyKind, Quantiles};

    use super::*;

    fn decision(job_id: u64, version: u32, queue: u8, pilots: &[u32]) -> Decision {
        let phase = if pilots.is_empty() {
            Phase::Estimated
        } else {
            Phase::Sampling
        };
        Decision {
            pilots: pilots.to_vec(),
            ..Decision::new(PolicyKind::SLearn, job_id, version, queue, phase)
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
                    job.time_limit_s = limit;
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
            ..View::default()
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
        // Nothing running: Q0's first task goes first (next); Q0's share is
        // then 1 and Q3's still 0, so Q3's job comes before the rest of Q0.
        let idle = View {
            jobs: [
                (1, job(0, &[(&[0, 1], None)])),
                (2, job(0, &[(&[0], None)])),
            ]
            .into(),
            ..View::default()
        };
        assert_eq!(
            standing(&idle),
            (
                Some(Change::Standing(Standing::Next)),
                Some(Change::Standing(Standing::Rank(0)))
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
            ..View::default()
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
            ..View::default()
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
    fn the_first_queue_stands_ahead_only_for_the_slots_gs_would_give_it() {
        let queues = QueueConfig::default();
        let decisions = newest(&[decision(1, 1, 0, &[]), decision(2, 1, 1, &[])]);
        // Q0 runs 7 tasks, Q1 none: GS gives Q1 one slot (its share then
        // 1 × 10 passes Q0's 7), not every slot freed before the next tick.
        let view = View {
            jobs: [
                (1, job(7, &[(&[0, 1, 2, 3, 4], None)])),
                (2, job(0, &[(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], None)])),
            ]
            .into(),
            ..View::default()
        };
        let actions = plan(&decisions, &view, &queues, None);
        let to = |job_id, target, standing| Action {
            job_id,
            version: 1,
            target,
            change: Change::Standing(standing),
        };
        assert_eq!(
            actions,
            [
                to(1, Target::Job, Standing::Rank(0)),
                to(2, Target::Job, Standing::Rank(1)),
                to(2, Target::Tasks(vec![0]), Standing::Next),
            ]
        );
        let view = after(&view, &actions);
        assert_eq!(plan(&decisions, &view, &queues, None), []);
        // Q1's task started: Q0 gets slots until its share, 7 + 4, passes
        // Q1's 10 (the tie at 10 goes to the higher queue), then Q1 again.
        let mut started = view.clone();
        let job2 = started.jobs.get_mut(&2).unwrap();
        job2.running = 1;
        job2.pending.retain(|g| g.tasks != [0]);
        let actions = plan(&decisions, &started, &queues, None);
        assert_eq!(
            actions,
            [
                to(1, Target::Job, Standing::Next),
                to(1, Target::Tasks(vec![4]), Standing::Rank(1)),
                to(2, Target::Job, Standing::Rank(0)),
            ]
        );
        // Two of them started: the other two stay next, nothing moves.
        let mut view = after(&started, &actions);
        let job1 = view.jobs.get_mut(&1).unwrap();
        job1.running = 9;
        for group in &mut job1.pending {
            group.tasks.retain(|&t| t > 1);
        }
        assert_eq!(plan(&decisions, &view, &queues, None), []);
        // One queue alone needs no head: all of it stands with its rank.
        let alone = newest(&[decision(1, 1, 0, &[])]);
        let mut view = view.clone();
        view.jobs.remove(&2);
        assert_eq!(
            plan(&alone, &view, &queues, None),
            [to(1, Target::Job, Standing::Rank(0))]
        );
    }

    #[test]
    fn a_queue_holding_only_spare_tasks_takes_no_rank() {
        let queues = QueueConfig::default();
        // Job 7's pilots have run and its decision is not yet placed: its
        // tasks are all spare, so Q1 (running nothing, the smaller share)
        // waits for nothing and Q0 ranks first.
        let decisions = newest(&[decision(1, 1, 0, &[]), decision(7, 1, 1, &[2])]);
        let view = View {
            jobs: [
                (1, job(1, &[(&[0], None)])),
                (7, job(0, &[(&[0, 1, 3], None)])),
            ]
            .into(),
            ..View::default()
        };
        let to = |job_id, standing| Action {
            job_id,
            version: 1,
            target: Target::Job,
            change: Change::Standing(standing),
        };
        assert_eq!(
            plan(&decisions, &view, &queues, None),
            [to(1, Standing::Rank(0)), to(7, Standing::Spare)]
        );
    }

    #[test]
    fn new_work_stands_with_q0_and_work_in_place_is_left_alone() {
        let queues = QueueConfig::default();
        let decisions = newest(&[decision(1, 3, 2, &[])]);
        let alone = View {
            jobs: [(1, job(0, &[(&[0, 1], Some(Standing::Rank(0)))]))].into(),
            ..View::default()
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
            ..View::default()
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
            ..View::default()
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
        assert_eq!(limits(&decisions, &view), [Change::TimeLimitS(Some(300))]);
        let actions = plan(&decisions, &view, &queues, Some(&walltime));
        assert_eq!(
            actions[0].target,
            Target::Tasks(vec![1, 2, 3]),
            "one task runs"
        );
        // Carried out, nothing is left to do; a user's shorter limit stays.
        assert_eq!(limits(&decisions, &after(&view, &actions)), []);
        let mut short = view.clone();
        short.jobs.get_mut(&7).unwrap().time_limit_s = Some(240);
        assert_eq!(limits(&decisions, &short), []);
        // A longer one is lowered; rounded up to the step, never below the
        // floor.
        short.jobs.get_mut(&7).unwrap().time_limit_s = Some(3600);
        assert_eq!(limits(&decisions, &short), [Change::TimeLimitS(Some(300))]);
        let mut tiny = estimate;
        tiny.set_quantiles(Quantiles::from_array([0.001; 4]));
        let decisions = newest(&[Decision {
            estimate: Some(tiny),
            ..placed.clone()
        }]);
        assert_eq!(limits(&decisions, &view), [Change::TimeLimitS(Some(60))]);
        let odd = Walltime {
            margin: 1.01,
            ..walltime
        };
        assert_eq!(odd.limit_s(&estimate), Some(180), "151.5 s → 3 minutes");
        // A level capped at the horizon gives no limit; one below it does.
        let mut capped = estimate;
        capped.cap_quantiles(estimate.quantiles.unwrap().mean_task_runtime_us.p95);
        assert_eq!(walltime.limit_s(&capped), None, "P99 at the horizon");
        let p90 = Walltime {
            quantile: 1,
            ..walltime
        };
        assert!(p90.limit_s(&capped).is_some());
        // Nor once it has finished (Slurm still lists it a while), nor
        // while every task runs: a running task keeps its limit.
        let mut done = view.clone();
        let job7 = done.jobs.get_mut(&7).unwrap();
        (job7.running, job7.pending, job7.time_limit_s) = (0, Vec::new(), None);
        assert_eq!(limits(&decisions, &done), []);
        done.jobs.get_mut(&7).unwrap().running = 3;
        assert_eq!(limits(&decisions, &done), []);
        // Some running, some pending: the pending ones only.
        let mixed = View {
            jobs: [(7, job(2, &[(&[3, 4], Some(Standing::Rank(0)))]))].into(),
            ..View::default()
        };
        let actions = plan(&decisions, &mixed, &queues, Some(&walltime));
        let limit = actions
            .iter()
            .find(|a| matches!(a.change, Change::TimeLimitS(_)))
            .unwrap();
        assert_eq!(limit.target, Target::Tasks(vec![3, 4]));
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
