//! # jobcast-ingest
//!
//! Owns what comes *in*: the canonical event model ([`event`]) and the
//! adapters that turn real trace formats into a time-ordered stream of
//! canonical events ([`Trace`]), plus the ground-truth views derived from
//! such a stream ([`truth`]).
//!
//! Adapters never panic on bad data: a malformed row is recorded in the
//! trace's [`Diagnostics`] with its file, line and reason, and skipped.
//!
//! With the `kafka` feature it also owns the Kafka contract every other
//! crate speaks: topic names, keys, header names and client settings
//! (`kafka`), and the one producer context that tallies deliveries
//! (`deliveries`); with the `cli` feature, the command-line flags that
//! name them (`kafka_args`). At the bottom of the workspace, it also holds the error
//! every crate reports a bad setting with, by its key ([`config`]).

pub mod alibaba2018;
pub mod config;
pub mod dag;
#[cfg(feature = "kafka")]
pub mod deliveries;
pub mod event;
pub mod gce;
pub mod google2011;
pub mod google2019;
pub mod ids;
pub mod jsonl;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "cli")]
pub mod kafka_args;
pub mod merge_by_key;
pub mod sacct;
pub mod slurm;
pub mod source;
pub mod spot;
pub mod spot_prices;
pub mod swf;
pub mod timeline;
pub mod tpch_dags;
pub mod truth;

use std::path::Path;

pub use event::{Event, decode, encode};
pub use source::{Diagnostics, Location, Trace, TraceError};

/// The trace formats jobcast reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Google `clusterdata-2011-2`: a directory with `job_events/`,
    /// `task_events/` and optionally `machine_events/`.
    Google2011,
    /// Google `clusterdata-2019` `collection_events` + `instance_events`,
    /// exported as JSON lines or CSV with a header.
    Google2019,
    /// Alibaba `cluster-trace-v2018` `batch_task` + `batch_instance`.
    Alibaba2018,
    /// Measured lifetimes of GCE preemptible VMs (one JSON object per VM).
    GceLifetimes,
    /// Measured spot-instance preemptions: SkyPilot's single-instance spot
    /// traces ([`spot`]), with no lifetime cap.
    SpotTraces,
    /// The same spot traces, each file one spot VM that hibernates while
    /// its market has no capacity and resumes when it has
    /// ([`spot::Reading::Hibernation`]).
    SpotHibernation,
    /// jobcast's canonical JSON lines.
    Jsonl,
    /// The Parallel Workloads Archive's Standard Workload Format: HPC
    /// logs, one parallel job a line ([`swf`]).
    Swf,
    /// A Slurm site's accounting: `sacct -P` output with its header
    /// ([`sacct`]).
    Sacct,
    /// Decima's Spark TPC-H runs (`stages.jsonl.gz`): real DAG jobs with
    /// every task's runtime, laid out as a timeline ([`tpch_dags`]).
    TpchDags,
}

impl Format {
    pub const NAMES: &'static [&'static str] = &[
        "google2011",
        "google2019",
        "alibaba2018",
        "gce-lifetimes",
        "spot-traces",
        "spot-hibernation",
        "jsonl",
        "tpch-dags",
        "swf",
        "sacct",
    ];

    pub fn name(self) -> &'static str {
        match self {
            Format::Google2011 => "google2011",
            Format::Google2019 => "google2019",
            Format::Alibaba2018 => "alibaba2018",
            Format::GceLifetimes => "gce-lifetimes",
            Format::SpotTraces => "spot-traces",
            Format::SpotHibernation => "spot-hibernation",
            Format::Jsonl => "jsonl",
            Format::TpchDags => "tpch-dags",
            Format::Swf => "swf",
            Format::Sacct => "sacct",
        }
    }
}

impl std::str::FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "google2011" => Ok(Format::Google2011),
            "google2019" => Ok(Format::Google2019),
            "alibaba2018" => Ok(Format::Alibaba2018),
            "gce-lifetimes" => Ok(Format::GceLifetimes),
            "spot-traces" => Ok(Format::SpotTraces),
            "spot-hibernation" => Ok(Format::SpotHibernation),
            "jsonl" => Ok(Format::Jsonl),
            "tpch-dags" => Ok(Format::TpchDags),
            "swf" => Ok(Format::Swf),
            "sacct" => Ok(Format::Sacct),
            other => Err(format!(
                "unknown format `{other}` (expected one of: {})",
                Format::NAMES.join(", ")
            )),
        }
    }
}

/// Open a trace of the given format as a stream of canonical events.
pub fn open(format: Format, input: &Path) -> Result<Trace, TraceError> {
    match format {
        Format::Google2011 => google2011::open(input),
        Format::Google2019 => google2019::open(input),
        Format::Alibaba2018 => alibaba2018::open(input),
        Format::GceLifetimes => gce::open(input),
        Format::SpotTraces => spot::open(input, spot::Reading::Lifetimes),
        Format::SpotHibernation => spot::open(input, spot::Reading::Hibernation),
        Format::Jsonl => jsonl::open(input),
        Format::TpchDags => tpch_dags::open(input),
        Format::Swf => swf::open(input),
        Format::Sacct => sacct::open(input),
    }
}
