//! # jobcast-storage
//!
//! Owns where data lives:
//! - [`tables`]: the Parquet trace tables (`events`, `jobs`, `tasks`,
//!   `machines`) and [`convert`], which fills them from any trace;
//! - [`sql`]: DataFusion SQL over those tables;
//! - [`state`]: the streaming service's durable state in RocksDB, written
//!   atomically with the Kafka offsets it came from, and [`writer`], which
//!   commits its batches on a thread of its own.

pub mod convert;
pub mod sql;
pub mod state;
pub mod tables;
pub mod writer;
