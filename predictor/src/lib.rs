//! # jobcast-predictor
//!
//! Pure prediction logic: job-runtime predictors and preemption models.
//!
//! Nothing here does I/O or reads a clock. Every function is a deterministic
//! function of its arguments (plus an explicit RNG where it samples), so the
//! streaming service, the trace-driven simulator, the workload generator and
//! the tests all share exactly the same code.

pub mod preemption;
pub mod decision;
pub mod features;
pub mod history;
pub mod policy;
pub mod queues;
pub mod policies;
