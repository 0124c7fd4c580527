//! How often a job's decision goes out again.
//!
//! A policy may decide again at every event of a job: SLearn replaces each
//! pilot that fails, the Bayesian hybrid refines its estimate as each pilot
//! ends. Published as they come, a wide job whose thousand pilots fail one
//! after the other republishes its whole decision (a thousand pilots, 8 kB)
//! a thousand times. So a decision that changes the job's phase or queue
//! goes out at once, and one that only refines the last published (same
//! phase, same queue) goes out at most once per `engine.min_republish_ms`
//! of event time: the newest waits, and the first event of the job's input
//! partition at or past its due time publishes it. A refinement goes out at
//! once all the same when the scheduler has none of the published pilots
//! left to run (each one has ended): waiting would stall the job.
//!
//! A pending job's start estimate (`starts.rs`) changes while the job
//! waits with no event of its own: jobs ahead of it end early or late. So
//! a published decision that carries a start is looked at again at each
//! multiple of `engine.starts.refresh_ms` of event time, by the first
//! event of the job's partition at or past it (all the partition's starts
//! due then share one projection), and goes out again when its start has
//! moved (`starts::moved`): the same decision, under the same version, with
//! the newer start and its `at_us`. Versions stay the policy's, which the
//! job's own events decide; the start depends on every job of the
//! cluster, so on how partitions interleave, and a consumer tells a
//! refreshed start by its later `at_us`.
//!
//! Event time, not the wall clock, decides, and a job's waiting decision is
//! published only by its own partition's events, so the same input gives
//! the same decisions, published by the owner of the job's partition.
//! Versions of the decisions that waited and were overtaken are never
//! published: a consumer sees a job's versions increase, with gaps.

use std::collections::BTreeSet;

use foldhash::HashMap;
use serde::{Deserialize, Serialize};

use crate::decision::{Decision, Phase, Start};

use super::effects::Effects;
use super::live_task::LiveTask;

/// A job's last published decision, and the newest one waiting.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Pacing {
    last: Option<Published>,
    /// In its binary layout ([`Decision::to_bytes`]): the snapshot's
    /// postcard cannot read a decision's JSON form.
    waiting: Option<Waiting>,
    /// The last published decision while it carries a start estimate.
    start: Option<Watched>,
}

/// What is remembered of a published decision: enough to tell a refinement
/// from a change, and whether the scheduler has pilots left to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Published {
    at_us: u64,
    phase: Phase,
    queue: u8,
    pilots: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Waiting {
    due_us: u64,
    #[serde(with = "serde_bytes")]
    decision: Vec<u8>,
}

/// A published decision's start estimate, and when it is looked at again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Watched {
    due_us: u64,
    start: Start,
    /// The decision, as [`Waiting::decision`]; its binary layout leaves
    /// the start out.
    #[serde(with = "serde_bytes")]
    decision: Vec<u8>,
}

impl Pacing {
    /// When the waiting decision is due, if one waits.
    fn due_us(&self) -> Option<u64> {
        self.waiting.as_ref().map(|w| w.due_us)
    }

    /// Whether a decision waits while the scheduler has none of the
    /// published pilots left to run ([`starved`]): it must go out now.
    pub(super) fn stalled(&self, job_id: u64, tasks: &Tasks) -> bool {
        self.waiting.is_some()
            && self
                .last
                .as_ref()
                .is_some_and(|last| starved(tasks, job_id, &last.pilots))
    }
}

/// The engine's live tasks, by (job, task index).
type Tasks = HashMap<(u64, u32), LiveTask>;

/// Whether the scheduler has none of `pilots` (those published) left to
/// run: each has ended an attempt and has not been started again. A
/// decision without pilots leaves nothing to run out of.
fn starved(tasks: &Tasks, job_id: u64, pilots: &[u32]) -> bool {
    !pilots.is_empty()
        && pilots
            .iter()
            .all(|&task| tasks.get(&(job_id, task)).is_some_and(LiveTask::ended))
}

/// The waiting decisions of every partition, by due time.
#[derive(Debug, Default)]
struct DueQueue(BTreeSet<(i32, u64, u64)>);

impl DueQueue {
    fn insert(&mut self, partition: i32, due_us: u64, job_id: u64) {
        self.0.insert((partition, due_us, job_id));
    }

    fn remove(&mut self, partition: i32, due_us: u64, job_id: u64) {
        self.0.remove(&(partition, due_us, job_id));
    }

    /// The jobs of `partition` whose waiting decision is due at `now_us`.
    fn due(&self, partition: i32, now_us: u64) -> Vec<u64> {
        self.0
            .range((partition, 0, 0)..=(partition, now_us, u64::MAX))
            .map(|&(_, _, job_id)| job_id)
            .collect()
    }
}

/// Which decisions wait and until when: `engine.min_republish_ms`, and
/// the waiting decisions of every partition by due time; and when the
/// published start estimates are looked at again:
/// `engine.starts.refresh_ms`, and the decisions that carry one by due
/// time. A job's own
/// [`Pacing`] (its last published decision, the one waiting) is in the
/// job; the methods here take it.
#[derive(Debug, Default)]
pub(super) struct Pacer {
    min_republish_us: u64,
    due: DueQueue,
    /// 0: a start is never looked at again.
    refresh_us: u64,
    starts_due: DueQueue,
}

impl Pacer {
    pub(super) fn new(min_republish_ms: u64, refresh_ms: u64) -> Self {
        Pacer {
            min_republish_us: min_republish_ms.saturating_mul(1000),
            due: DueQueue::default(),
            refresh_us: refresh_ms.saturating_mul(1000),
            starts_due: DueQueue::default(),
        }
    }

    /// Decisions waiting.
    pub(super) fn waiting(&self) -> usize {
        self.due.0.len()
    }

    /// The driving policy decided `decision` at `now_us` for job `job_id`
    /// of `partition`, paced by `pacing`: the decision if it goes out now
    /// (noted as the last published), `None` if it waits (overtaking any
    /// decision waiting before it).
    pub(super) fn offer(
        &mut self,
        pacing: &mut Pacing,
        partition: i32,
        decision: Decision,
        now_us: u64,
        tasks: &Tasks,
        effects: &mut Effects,
    ) -> Option<Decision> {
        let job_id = decision.job_id;
        let refines = pacing.last.as_ref().filter(|last| {
            last.phase == decision.phase
                && last.queue == decision.queue
                && now_us < last.at_us.saturating_add(self.min_republish_us)
        });
        let wait_until = match refines {
            Some(last) if !starved(tasks, job_id, &last.pilots) => {
                Some(last.at_us + self.min_republish_us)
            }
            _ => None,
        };
        self.forget(job_id, pacing, partition, effects);
        match wait_until {
            Some(due_us) => {
                pacing.waiting = Some(Waiting {
                    due_us,
                    decision: decision.to_bytes(),
                });
                self.due.insert(partition, due_us, job_id);
                None
            }
            None => Some(Self::published(pacing, decision, now_us)),
        }
    }

    /// The jobs of `partition` whose waiting decision is due at `now_us`.
    pub(super) fn due(&self, partition: i32, now_us: u64) -> Vec<u64> {
        self.due.due(partition, now_us)
    }

    /// Job `job_id`'s waiting decision, to publish at `now_us` (noted as
    /// the last published), if one waits.
    pub(super) fn take(
        &mut self,
        job_id: u64,
        pacing: &mut Pacing,
        partition: i32,
        now_us: u64,
    ) -> Option<Decision> {
        let waiting = pacing.waiting.take()?;
        self.due.remove(partition, waiting.due_us, job_id);
        let decision =
            Decision::from_bytes(&waiting.decision).expect("written by Decision::to_bytes");
        Some(Self::published(pacing, decision, now_us))
    }

    /// Job `job_id` ended, or has a newer decision: the one waiting, if
    /// any, is never published.
    pub(super) fn forget(
        &mut self,
        job_id: u64,
        pacing: &mut Pacing,
        partition: i32,
        effects: &mut Effects,
    ) {
        if let Some(waiting) = pacing.waiting.take() {
            self.due.remove(partition, waiting.due_us, job_id);
            effects.overtaken += 1;
        }
    }

    /// Job `job_id`'s `decision` goes out at `now_us`, start estimate
    /// included: if it carries one, it is looked at again in
    /// `engine.starts.refresh_ms`; the one looked at before is not.
    pub(super) fn sent(
        &mut self,
        job_id: u64,
        pacing: &mut Pacing,
        partition: i32,
        decision: &Decision,
        now_us: u64,
    ) {
        self.unwatch(job_id, pacing, partition);
        if let Some(start) = decision.start
            && let Some(due_us) = self.next_look(now_us)
        {
            pacing.start = Some(Watched {
                due_us,
                start,
                decision: decision.to_bytes(),
            });
            self.starts_due.insert(partition, due_us, job_id);
        }
    }

    /// The jobs of `partition` whose start is due to be looked at again at
    /// `now_us`.
    pub(super) fn starts_due(&self, partition: i32, now_us: u64) -> Vec<u64> {
        self.starts_due.due(partition, now_us)
    }

    /// The next multiple of the refresh interval after `now_us`, when the
    /// starts published now are looked at again; none if they never are.
    fn next_look(&self, now_us: u64) -> Option<u64> {
        (self.refresh_us > 0)
            .then(|| (now_us / self.refresh_us + 1).saturating_mul(self.refresh_us))
    }

    /// Job `job_id`, still waiting, has `start` when looked at again at
    /// `now_us` (none: it no longer fits, or its cluster's size is not
    /// known). Its last published decision, to go out again with this
    /// start, if the start `moved` from the published one; else `None`,
    /// and it is looked at again later.
    pub(super) fn refresh_start(
        &mut self,
        job_id: u64,
        pacing: &mut Pacing,
        partition: i32,
        now_us: u64,
        start: Option<Start>,
        moved: impl FnOnce(&Start, Option<&Start>) -> bool,
    ) -> Option<Decision> {
        let watched = pacing.start.take()?;
        self.starts_due.remove(partition, watched.due_us, job_id);
        if !moved(&watched.start, start.as_ref()) {
            if let Some(due_us) = self.next_look(now_us) {
                pacing.start = Some(Watched { due_us, ..watched });
                self.starts_due.insert(partition, due_us, job_id);
            }
            return None;
        }
        let mut decision =
            Decision::from_bytes(&watched.decision).expect("written by Decision::to_bytes");
        decision.start = start;
        // The ETA is the engine's to give again, as of now.
        decision.eta = None;
        Some(decision)
    }

    /// Job `job_id`'s published start is not looked at again: the job
    /// ended or runs, or a newer decision replaces the one watched.
    pub(super) fn unwatch(&mut self, job_id: u64, pacing: &mut Pacing, partition: i32) {
        if let Some(watched) = pacing.start.take() {
            self.starts_due.remove(partition, watched.due_us, job_id);
        }
    }

    fn published(pacing: &mut Pacing, decision: Decision, now_us: u64) -> Decision {
        pacing.last = Some(Published {
            at_us: now_us,
            phase: decision.phase,
            queue: decision.queue,
            pilots: decision.pilots.clone(),
        });
        decision
    }

    /// The due queues, from the live jobs' pacing (a restored snapshot):
    /// (job id, its partition, its pacing).
    pub(super) fn rebuild<'a>(&mut self, jobs: impl Iterator<Item = (u64, i32, &'a Pacing)>) {
        self.due = DueQueue::default();
        self.starts_due = DueQueue::default();
        for (job_id, partition, pacing) in jobs {
            if let Some(due_us) = pacing.due_us() {
                self.due.insert(partition, due_us, job_id);
            }
            if let Some(watched) = &pacing.start
                && self.refresh_us > 0
            {
                self.starts_due.insert(partition, watched.due_us, job_id);
            }
        }
    }
}
