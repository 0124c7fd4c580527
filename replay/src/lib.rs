//! # jobcast-replay
//!
//! Owns what goes *out* as traffic: the synthetic workload generator now;
//! trace replay into Kafka and the cluster simulator later.
//!
//! [`generate`] turns a [`WorkloadConfig`] into a lazy, seeded, time-ordered
//! stream of canonical [`Event`](jobcast_ingest::Event)s.

pub mod generate;

pub use generate::{ConfigError, DurationDist, Generator, WorkloadConfig, generate};
/// The VM lifetime model in [`WorkloadConfig::vm_lifetime`].
pub use jobcast_predictor::preemption::{Bathtub, BathtubError, BathtubParam};
pub mod evaluate;
pub mod sim;
pub mod workload;
