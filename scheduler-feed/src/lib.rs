//! # jobcast-scheduler-feed
//!
//! Owns what goes *out* to schedulers, and the service that produces it:
//!
//! - [`engine`]: the transform — canonical events in, every policy run in
//!   shadow, the driving policy's decisions and each policy's errors out;
//! - [`merge`]: the event-time merge of the input topic's partitions, so
//!   that the global predictor state sees one deterministic order;
//! - [`records`]: the stored (binary) form of the job and task records;
//! - [`service`]: the pipeline of `jobcast serve` — Kafka source, engine,
//!   Kafka sinks, each batch committed to RocksDB with its offsets;
//! - `source`: the pipeline's input consumer and merge, on a thread of its
//!   own;
//! - [`http`]: the HTTP API (`/jobs/{id}`, `/machines/{id}`, health,
//!   readiness, `/metrics`);
//! - [`telemetry`]: the Prometheus metrics;
//! - [`config`]: the service's configuration (file, environment, flags).
//!
//! The `jobcast` binary (`src/main.rs`, `src/cli/`) wires these and the
//! other crates into subcommands.

pub mod config;
pub mod engine;
pub mod http;
pub mod merge;
pub mod records;
pub mod service;
mod source;
pub mod telemetry;
