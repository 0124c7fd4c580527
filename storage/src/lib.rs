//! # jobcast-storage
//!
//! Owns where data lives:
//! - [`tables`]: the Parquet trace tables (`events`, `jobs`, `tasks`,
//!   `machines`) and [`convert`], which fills them from any trace;
//! - [`sql`]: DataFusion SQL over those tables.

pub mod convert;
pub mod sql;
pub mod tables;
