//! # jobcast-storage
//!
//! Owns where data lives:
//! - `tables`: the Parquet trace tables (`events`, `jobs`, `tasks`,
//!   `machines`) and `convert`, which fills them from any trace;
//! - `sql`: DataFusion SQL over those tables;
//! - [`disk`]: the room left on the filesystem a store lives on;
//! - [`state`]: the streaming service's durable state in RocksDB, written
//!   atomically with the Kafka offsets it came from, and [`writer`], which
//!   commits its batches on a thread of its own.
//!
//! The first three are behind the `sql` feature: the streaming service
//! needs only the state store, and builds without DataFusion.

#[cfg(feature = "sql")]
pub mod convert;
pub mod disk;
#[cfg(feature = "sql")]
pub mod sql;
pub mod state;
#[cfg(feature = "sql")]
pub mod tables;
pub mod writer;
