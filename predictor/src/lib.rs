//! # jobcast-predictor
//!
//! Pure prediction logic: job-runtime predictors and preemption models.
//!
//! - [`history`]: 3Sigma learning in time (per-feature-value runtime
//!   history, most accurate feature), keyed by [`features`];
//! - [`policies`]: SLearn, 3Sigma and its variants, the DAG hybrids, the
//!   Bayesian hybrid, LAS, FIFO and Oracle, behind the [`policy::Policy`]
//!   trait, emitting [`decision::Decision`]s for the GS queues of
//!   [`queues`];
//! - [`preemption`]: lifetime models of transient VMs (the bathtub model);
//! - [`codec`]: the fixed binary layouts of the records the service
//!   rewrites with every batch.
//!
//! Nothing here does I/O or reads a clock. Every function is a deterministic
//! function of its arguments (plus an explicit RNG where it samples), so the
//! streaming service, the trace-driven simulator, the workload generator and
//! the tests all share exactly the same code.

pub mod codec;
pub mod decision;
pub mod features;
pub mod history;
pub mod policies;
pub mod policy;
pub mod preemption;
pub mod queues;
