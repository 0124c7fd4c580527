//! Decisions carried out by a real scheduler (`jobcast slurm apply`).
//!
//! One tick, in module order:
//!
//! 1. [`run`] reads the decisions topic to its end and keeps the newest
//!    decision of each job (`jobcast_predictor::decision::Newest`);
//! 2. the [`Scheduler`](crate::Scheduler) reports what it holds (a [`plan::View`]);
//! 3. [`plan`] (pure) says what should change: the actions that put each
//!    decided job's pending tasks where GS would serve them;
//! 4. the scheduler carries them out (`crate::slurm`: `scontrol update`),
//!    each retried, and a failure reported and counted, never fatal;
//! 5. the offsets read, the decisions of live jobs and the scheduler's own
//!    memory are saved, whole or not at all.
//!
//! The plan is recomputed from what the scheduler reports at every tick
//! (level-triggered), so a failed or lost action is planned again, and a
//! restarted applier reads every decision up to the topic's end before it
//! acts: it never carries out a decision older than one it already has.
//!
//! Another scheduler (a Kubernetes QueueSort or Score plugin, YARN,
//! HTCondor) implements [`Scheduler`](crate::Scheduler); the engine, the plan and the loop
//! stay as they are (`docs/schedulers.md`).

pub mod plan;
mod run;

pub use run::{Applier, ApplyError, ApplyOptions, Outcome, Ticked, apply, hand_back};
