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
//! Event time, not the wall clock, decides, and a job's waiting decision is
//! published only by its own partition's events, so the same input gives
//! the same decisions, published by the owner of the job's partition.
//! Versions of the decisions that waited and were overtaken are never
//! published: a consumer sees a job's versions increase, with gaps.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::decision::{Decision, Phase};

use super::Engine;
use super::effects::Effects;
use super::records::TaskRecord;

/// A job's last published decision, and the newest one waiting.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Pacing {
    last: Option<Published>,
    /// In its binary layout ([`Decision::to_bytes`]): the snapshot's
    /// postcard cannot read a decision's JSON form.
    waiting: Option<Waiting>,
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

impl Pacing {
    /// When the waiting decision is due, if one waits.
    pub(super) fn due_us(&self) -> Option<u64> {
        self.waiting.as_ref().map(|w| w.due_us)
    }
}

/// The waiting decisions of every partition, by due time.
#[derive(Debug, Default)]
pub(super) struct DueQueue(BTreeSet<(i32, u64, u64)>);

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

    /// Decisions waiting.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

impl Engine {
    /// The driving policy decided `decision` at `now_us`: publish it now,
    /// or let it wait (overtaking any decision waiting before it).
    pub(super) fn offer(&mut self, decision: Decision, now_us: u64, effects: &mut Effects) {
        let job_id = decision.job_id;
        let Some(job) = self.jobs.get(&job_id) else {
            return self.publish(decision, now_us, effects);
        };
        let refines = job.pacing.last.as_ref().filter(|last| {
            last.phase == decision.phase
                && last.queue == decision.queue
                && now_us < last.at_us.saturating_add(self.min_republish_us)
        });
        let wait_until = match refines {
            Some(last) if !self.starved(job_id, &last.pilots) => {
                Some(last.at_us + self.min_republish_us)
            }
            _ => None,
        };
        self.forget_waiting(job_id, effects);
        match wait_until {
            Some(due_us) => {
                let job = self.jobs.get_mut(&job_id).expect("looked up above");
                job.pacing.waiting = Some(Waiting {
                    due_us,
                    decision: decision.to_bytes(),
                });
                self.due.insert(job.partition, due_us, job_id);
            }
            None => self.publish_paced(decision, now_us, effects),
        }
    }

    /// Publish the waiting decisions of `partition` that are due at
    /// `now_us`, and that of `job_id` (whose event this was) if the
    /// scheduler has none of its published pilots left to run.
    pub(super) fn publish_due(
        &mut self,
        partition: i32,
        now_us: u64,
        job_id: Option<u64>,
        effects: &mut Effects,
    ) {
        let mut ready = self.due.due(partition, now_us);
        if let Some(job_id) = job_id
            && let Some(job) = self.jobs.get(&job_id)
            && job.pacing.waiting.is_some()
            && job
                .pacing
                .last
                .as_ref()
                .is_some_and(|last| self.starved(job_id, &last.pilots))
        {
            ready.push(job_id);
        }
        for job_id in ready {
            let Some(waiting) = self.take_waiting(job_id) else {
                continue;
            };
            let decision =
                Decision::from_bytes(&waiting.decision).expect("written by Decision::to_bytes");
            self.publish_paced(decision, now_us, effects);
        }
    }

    /// A job ended: its waiting decision, if any, is never published.
    pub(super) fn forget_pacing(&mut self, job_id: u64, effects: &mut Effects) {
        self.forget_waiting(job_id, effects);
    }

    fn forget_waiting(&mut self, job_id: u64, effects: &mut Effects) {
        if self.take_waiting(job_id).is_some() {
            effects.overtaken += 1;
        }
    }

    fn take_waiting(&mut self, job_id: u64) -> Option<Waiting> {
        let job = self.jobs.get_mut(&job_id)?;
        let waiting = job.pacing.waiting.take()?;
        self.due.remove(job.partition, waiting.due_us, job_id);
        Some(waiting)
    }

    fn publish_paced(&mut self, decision: Decision, now_us: u64, effects: &mut Effects) {
        if let Some(job) = self.jobs.get_mut(&decision.job_id) {
            job.pacing.last = Some(Published {
                at_us: now_us,
                phase: decision.phase,
                queue: decision.queue,
                pilots: decision.pilots.clone(),
            });
        }
        self.publish(decision, now_us, effects);
    }

    /// Whether the scheduler has none of `pilots` (those published) left to
    /// run: each has ended an attempt and has not been started again. A
    /// decision without pilots leaves nothing to run out of.
    fn starved(&self, job_id: u64, pilots: &[u32]) -> bool {
        !pilots.is_empty()
            && pilots.iter().all(|&task| {
                self.tasks
                    .get(&(job_id, task))
                    .is_some_and(TaskRecord::ended)
            })
    }

    /// The due queue, from the live jobs' pacing (a restored snapshot).
    pub(super) fn rebuild_due(&mut self) {
        self.due = DueQueue::default();
        for (&job_id, job) in &self.jobs {
            if let Some(due_us) = job.pacing.due_us() {
                self.due.insert(job.partition, due_us, job_id);
            }
        }
    }
}
