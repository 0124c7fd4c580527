//! # jobcast-replay
//!
//! Owns what goes *out* as traffic and what plays the downstream scheduler:
//!
//! - [`generate`]: seeded synthetic workloads, a lazy, time-ordered stream
//!   of canonical [`Event`](jobcast_ingest::Event)s;
//! - [`workload`]: a trace turned into jobs with known task runtimes, split
//!   into history (training) and evaluated jobs as the SLearn paper does;
//! - [`recurring_dags`]: DAG jobs composed from a trace's recurring jobs
//!   (SLearn §6's DAG trace; GTrace11-DAG from Google 2011);
//! - [`sim`]: the deterministic trace-driven cluster simulator running the
//!   GS multi-level queues on the decisions of one prediction policy;
//! - [`transient`]: CloudCoaster's transient short partition on an Eagle
//!   hybrid cluster, with jobcast's job classes and measured preemptions;
//! - [`deadlines`]: Teylo et al.'s primary and backup maps of a bag of
//!   tasks with a deadline, carried out against the truth on spot VMs that
//!   hibernate (at set times, or as measured spot capacity says);
//! - [`megha`]: Megha's federated clusters (Global Masters with stale
//!   views, Local Masters that check them) against a centralised master
//!   and a Sparrow-like sampler, with and without jobcast's order and
//!   cluster choice;
//! - [`evaluate`]: every policy on the same workload, with tables, JSON and
//!   plots;
//! - [`breakdown`]: where SLearn's JCT gain over 3Sigma comes from, by
//!   job width and size and by waiting time (SLearn Table 8, Fig. 7);
//! - [`risk_fit`]: lifetime models fitted to measured preemptible-VM
//!   lifetimes, with tables, JSON and plots;
//! - [`risk_calibrate`]: the published preemption risks scored against
//!   held-out measured VMs, and the VM reuse policy measured on them;
//! - [`kafka`]: any event stream replayed into a Kafka topic in event-time
//!   order, paced and resumable, with every delivery accounted for;
//! - [`closed_loop`]: the simulator as the downstream scheduler of a
//!   running `jobcast serve`, exchanging events and decisions through
//!   Kafka in virtual time.

pub mod breakdown;
pub mod closed_loop;
pub mod deadlines;
pub mod evaluate;
pub mod generate;
pub mod hpc;
pub mod kafka;
pub mod megha;
pub mod recurring_dags;
pub mod report;
pub mod risk_calibrate;
pub mod risk_fit;
pub mod sim;
pub mod transient;
pub mod workload;

pub use generate::{ConfigError, DurationDist, Generator, WorkloadConfig, generate};
/// The VM lifetime model in [`WorkloadConfig::vm_lifetime`].
pub use jobcast_predictor::preemption::{Bathtub, BathtubError, BathtubParam};
