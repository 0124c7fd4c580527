//! # jobcast-scheduler-feed
//!
//! Owns what goes *out* to schedulers, and the service that produces it.
//! One event's path, in module order:
//!
//! - [`source`](crate::source) (private): the input consumer on a thread of
//!   its own: every partition of the input topic, decoded and merged by
//!   event time, handed over in batches;
//! - [`service`]: the pipeline of `jobcast serve`: each batch applied to
//!   the engine (`jobcast_predictor::engine`), its outputs published and
//!   acknowledged, and committed to RocksDB with the offsets it consumed;
//!   consumer-group membership and recovery; [`service::Service`] runs it;
//! - [`http`]: the HTTP API (`/jobs/{id}`, `/machines/{id}`, health,
//!   readiness, `/metrics`) over the store;
//! - [`shared`]: what the threads share (store, flags, counters);
//! - [`error`]: why the service stops, and why a message is dead-lettered;
//! - [`telemetry`]: the Prometheus metrics;
//! - [`config`]: the service's configuration (file, environment, flags).
//!
//! The engine these drive lives in `jobcast_predictor::engine`; the
//! connectors that carry decisions out on a live scheduler are the
//! `jobcast-connectors` crate (`connectors/`); the `jobcast` binary is the
//! `jobcast-cli` package (`cli/`).

pub mod config;
pub mod error;
pub mod http;
pub mod server;
pub mod service;
pub mod shared;
mod source;
pub mod telemetry;

pub use source::{Consumed, FETCH_QUEUE_BACKOFF_MS};
