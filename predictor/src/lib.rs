//! # jobcast-predictor
//!
//! Pure prediction logic: job-runtime predictors and preemption models.
//!
//! - [`history`]: 3Sigma learning in time (per-feature-value runtime
//!   history, most accurate feature), keyed by [`features`];
//! - [`policies`]: SLearn, 3Sigma and its variants, the DAG hybrids, the
//!   Bayesian hybrid, LAS, FIFO and Oracle, behind the [`policies::Policy`]
//!   trait, emitting [`decision::Decision`]s for the GS queues of
//!   [`queues`];
//! - [`calibration`]: the quantiles every estimate carries, calibrated
//!   on the policy's own errors;
//! - [`eta`]: when a job will finish, from the queue state;
//! - [`finished`]: a finished job's truth and the one step by which the
//!   history and every policy learn from it;
//! - [`preemption`]: lifetime models of transient VMs (the bathtub model);
//! - [`deadlines`]: the primary and backup maps of a bag of tasks with a
//!   deadline on hibernating spot VMs (Teylo et al.);
//! - [`engine`]: the live transform that drives them all: canonical events
//!   in, every policy run in shadow, the driving policy's decisions, risk
//!   scores, each policy's errors and the changed records out;
//! - [`stats`]: the one percentile and median every report uses;
//! - [`walltime`]: time limits from estimates, for `slurm apply` and the
//!   simulator;
//! - [`codec`]: the fixed binary layouts of the records the service
//!   rewrites with every batch.
//!
//! Nothing here does I/O or reads a clock. Every function is a deterministic
//! function of its arguments (plus an explicit RNG where it samples), so the
//! streaming service, the trace-driven simulator, the workload generator and
//! the tests all share exactly the same code.

pub mod calibration;
pub mod codec;
pub mod deadlines;
pub mod decision;
pub mod engine;
pub mod eta;
pub mod features;
pub mod finished;
pub mod history;
pub mod hpc;
pub mod policies;
pub mod preemption;
pub mod queues;
pub mod stats;
pub mod walltime;
